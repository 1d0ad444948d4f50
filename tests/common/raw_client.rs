//! A minimal PostgreSQL client speaking the simple query protocol by
//! hand, so that a test sees exactly what the server sent: each column's
//! name, type oid and typmod from RowDescription, each value's text, the
//! command tag, and an error's SQLSTATE. The same client talks to Sluice
//! and to PostgreSQL, so their answers compare field by field.

use std::collections::BTreeMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One column of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
}

/// What one statement answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Rows {
        columns: Vec<Column>,
        rows: Vec<Vec<Option<String>>>,
        tag: String,
    },
    Command {
        tag: String,
    },
    Error {
        sqlstate: String,
        message: String,
    },
}

pub struct RawClient {
    stream: TcpStream,
    /// Bytes read but not yet taken as a message.
    buffer: Vec<u8>,
}

impl RawClient {
    /// Connects without TLS and logs in as `user` (trust authentication).
    pub async fn connect(port: u16, user: &str, database: &str) -> std::io::Result<RawClient> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let mut client = RawClient {
            stream,
            buffer: Vec::new(),
        };
        let mut body = Vec::new();
        body.extend_from_slice(&196608u32.to_be_bytes());
        for (k, v) in [
            ("user", user),
            ("database", database),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("TimeZone", "UTC"),
            ("extra_float_digits", "1"),
        ] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        message.extend_from_slice(&body);
        client.stream.write_all(&message).await?;
        loop {
            let (tag, body) = client.message().await?;
            match tag {
                b'R' => {
                    let code = u32::from_be_bytes(body[0..4].try_into().unwrap_or([0; 4]));
                    if code != 0 {
                        return Err(std::io::Error::other(format!(
                            "authentication {code} asked: the raw client logs in with trust only"
                        )));
                    }
                }
                b'E' => {
                    let fields = error_fields(&body);
                    return Err(std::io::Error::other(format!("login refused: {fields:?}")));
                }
                b'Z' => return Ok(client),
                _ => {}
            }
        }
    }

    async fn message(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        loop {
            if self.buffer.len() >= 5 {
                let len =
                    u32::from_be_bytes(self.buffer[1..5].try_into().unwrap_or([0; 4])) as usize;
                if self.buffer.len() > len {
                    let tag = self.buffer[0];
                    let body = self.buffer[5..1 + len].to_vec();
                    self.buffer.drain(..1 + len);
                    return Ok((tag, body));
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `sql` as one simple Query message; one answer per statement
    /// it holds (an error ends the list, as the server stops there).
    pub async fn query(&mut self, sql: &str) -> std::io::Result<Vec<Answer>> {
        let mut message = vec![b'Q'];
        message.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
        message.extend_from_slice(sql.as_bytes());
        message.push(0);
        self.stream.write_all(&message).await?;
        let mut answers = Vec::new();
        let mut columns: Option<Vec<Column>> = None;
        let mut rows = Vec::new();
        loop {
            let (tag, body) = self.message().await?;
            match tag {
                b'T' => {
                    columns = Some(row_description(&body));
                    rows.clear();
                }
                b'D' => rows.push(data_row(&body)),
                b'C' => {
                    let tag = cstring(&body, &mut 0);
                    match columns.take() {
                        Some(columns) => answers.push(Answer::Rows {
                            columns,
                            rows: std::mem::take(&mut rows),
                            tag,
                        }),
                        None => answers.push(Answer::Command { tag }),
                    }
                }
                b'I' => answers.push(Answer::Command { tag: String::new() }),
                b'E' => {
                    let fields = error_fields(&body);
                    columns = None;
                    answers.push(Answer::Error {
                        sqlstate: fields.get(&b'C').cloned().unwrap_or_default(),
                        message: fields.get(&b'M').cloned().unwrap_or_default(),
                    });
                }
                b'Z' => return Ok(answers),
                // Notices, parameter status, COPY (not used here).
                _ => {}
            }
        }
    }

    /// The one answer of a one-statement query.
    pub async fn one(&mut self, sql: &str) -> std::io::Result<Answer> {
        let mut answers = self.query(sql).await?;
        Ok(answers
            .pop()
            .unwrap_or(Answer::Command { tag: String::new() }))
    }
}

fn cstring(body: &[u8], at: &mut usize) -> String {
    let end = body[*at..]
        .iter()
        .position(|&b| b == 0)
        .map(|p| *at + p)
        .unwrap_or(body.len());
    let s = String::from_utf8_lossy(&body[*at..end]).into_owned();
    *at = (end + 1).min(body.len());
    s
}

fn u32_at(body: &[u8], at: &mut usize) -> u32 {
    let v = u32::from_be_bytes(body[*at..*at + 4].try_into().unwrap_or([0; 4]));
    *at += 4;
    v
}

fn row_description(body: &[u8]) -> Vec<Column> {
    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    (0..n)
        .map(|_| {
            let name = cstring(body, &mut at);
            let _table = u32_at(body, &mut at);
            at += 2; // attribute number
            let type_oid = u32_at(body, &mut at);
            at += 2; // type length
            let typmod = u32_at(body, &mut at) as i32;
            at += 2; // format
            Column {
                name,
                type_oid,
                typmod,
            }
        })
        .collect()
}

fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    (0..n)
        .map(|_| {
            let len = u32_at(body, &mut at) as i32;
            if len < 0 {
                return None;
            }
            let v = String::from_utf8_lossy(&body[at..at + len as usize]).into_owned();
            at += len as usize;
            Some(v)
        })
        .collect()
}

fn error_fields(body: &[u8]) -> BTreeMap<u8, String> {
    let mut fields = BTreeMap::new();
    let mut at = 0;
    while at < body.len() && body[at] != 0 {
        let code = body[at];
        at += 1;
        fields.insert(code, cstring(body, &mut at));
    }
    fields
}
