//! Runs every `tests/slt/*.slt` file over the wire against a fresh server.

mod common;

use async_trait::async_trait;
use common::Server;
use sqllogictest::{DBOutput, DefaultColumnType};

struct Wire {
    client: tokio_postgres::Client,
}

#[derive(Debug)]
struct WireError(String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

#[async_trait]
impl sqllogictest::AsyncDB for Wire {
    type Error = WireError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, WireError> {
        let messages = self.client.simple_query(sql).await.map_err(|e| {
            let code = e.code().map(|c| c.code().to_string()).unwrap_or_default();
            let msg = e
                .as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string());
            WireError(format!("{code}: {msg}"))
        })?;
        let mut rows = Vec::new();
        let mut width = None;
        let mut affected = 0;
        for m in messages {
            match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    width = Some(r.len());
                    rows.push(
                        (0..r.len())
                            .map(|i| r.get(i).unwrap_or("NULL").to_string())
                            .collect(),
                    );
                }
                tokio_postgres::SimpleQueryMessage::RowDescription(d) => width = Some(d.len()),
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => affected = n,
                _ => {}
            }
        }
        Ok(match width {
            Some(w) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; w],
                rows,
            },
            None => DBOutput::StatementComplete(affected),
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "sluice"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_files() {
    let mut files: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path());
        let conn = server.conn_string();
        let mut runner = sqllogictest::Runner::new(move || {
            let conn = conn.clone();
            async move {
                let (client, c) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| WireError(e.to_string()))?;
                tokio::spawn(async move {
                    let _ = c.await;
                });
                Ok(Wire { client })
            }
        });
        if let Err(e) = runner.run_file_async(&file).await {
            panic!(
                "{}: {}\nserver log:\n{}",
                file.display(),
                e,
                server.log_text()
            );
        }
        println!("{}: ok", file.display());
    }
}
