//! `COPY ... FROM STDIN` in PostgreSQL's text, CSV and binary formats. Data
//! arrives in arbitrary chunks; whole records are parsed as they complete
//! and the rest is carried to the next chunk.

use std::borrow::Cow;

use arrow::record_batch::RecordBatch;
use sluice_catalog::TableDef;
use sluice_sql::{CopyFormat, CopyFrom};

use super::binary_copy::BinaryCopyReader;
use super::error::{IngestError, RowPlace};
use super::stager::{resolve_columns, RowStager};

pub struct CopyParser {
    opts: CopyFrom,
    stager: RowStager,
    carry: Vec<u8>,
    /// Lines consumed so far.
    line: u64,
    skip_header: bool,
    done: bool,
    /// For the binary format: the reader and the number of fields.
    binary: Option<(BinaryCopyReader, usize)>,
    /// A binary field's text when it is converted through text (numeric).
    scratch: String,
}

impl CopyParser {
    /// A parser for one COPY into `table`, staging at most `max_bytes`.
    pub fn new(
        table: &TableDef,
        opts: CopyFrom,
        max_bytes: u64,
    ) -> Result<CopyParser, IngestError> {
        if !opts.delimiter.is_ascii() || !opts.quote.is_ascii() || !opts.escape.is_ascii() {
            return Err(IngestError::BadFormat {
                place: RowPlace::Line(0),
                reason: "COPY delimiter, quote and escape must be single-byte characters".into(),
            });
        }
        let mut stager = RowStager::new(table, &opts.columns, true)?.with_limit(max_bytes);
        let binary = match opts.format {
            CopyFormat::Binary => {
                stager = stager.for_binary();
                Some((
                    BinaryCopyReader::default(),
                    resolve_columns(table, &opts.columns)?.len(),
                ))
            }
            _ => None,
        };
        Ok(CopyParser {
            binary,
            stager,
            scratch: String::new(),
            skip_header: opts.header,
            opts,
            carry: Vec::new(),
            line: 0,
            done: false,
        })
    }

    pub fn rows(&self) -> u64 {
        self.stager.rows()
    }

    /// The batches converted so far, handed over to be routed.
    pub fn take_batches(&mut self) -> Vec<RecordBatch> {
        self.stager.take_batches()
    }

    /// The batches handed over so far left memory: the statement's limit
    /// no longer counts them (see `RowStager::forget_staged`).
    pub fn forget_staged(&mut self) {
        self.stager.forget_staged()
    }

    /// Parses every complete record in `data` (plus what was carried).
    pub fn feed(&mut self, data: &[u8]) -> Result<(), IngestError> {
        if self.done {
            return Ok(());
        }
        self.carry.extend_from_slice(data);
        let consumed = match self.binary.is_some() {
            true => self.parse_binary()?,
            false => self.parse_records(false)?,
        };
        self.carry.drain(..consumed);
        Ok(())
    }

    /// Stages every complete binary tuple in the carry.
    fn parse_binary(&mut self) -> Result<usize, IngestError> {
        let Some((reader, fields)) = self.binary.as_mut() else {
            return Ok(0);
        };
        let first = self.stager.rows() + 1;
        let stager = &mut self.stager;
        let scratch = &mut self.scratch;
        let (_, used) = reader.read(&self.carry, *fields, first, |fields, tuple| {
            stager.push_binary_row(fields, tuple, scratch)
        })?;
        self.done = reader.done;
        Ok(used)
    }

    /// Parses the last record (which may lack a newline) and returns the
    /// statement's batches.
    pub fn finish(mut self) -> Result<Vec<RecordBatch>, IngestError> {
        if let Some((reader, _)) = &self.binary {
            // As in PostgreSQL, the trailer may be left out (ADBC's ingest
            // does): the data may end after a whole row, not inside one.
            let whole_rows = reader.header_done && self.carry.is_empty();
            if !(self.done || whole_rows) {
                let reason = match reader.header_done {
                    true => "binary COPY data ended inside a row",
                    false => "binary COPY data ended before its header",
                };
                return Err(IngestError::BadFormat {
                    place: RowPlace::Line(self.stager.rows() + 1),
                    reason: reason.into(),
                });
            }
            return self.stager.finish();
        }
        if !self.done && !self.carry.is_empty() {
            if !self.carry.ends_with(b"\n") {
                self.carry.push(b'\n');
            }
            let consumed = self.parse_records(true)?;
            if consumed < self.carry.len() {
                return Err(IngestError::BadFormat {
                    place: RowPlace::Line(self.line + 1),
                    reason: "unterminated CSV quoted field".into(),
                });
            }
        }
        self.stager.finish()
    }

    fn parse_records(&mut self, _last: bool) -> Result<usize, IngestError> {
        let CopyParser {
            opts,
            stager,
            carry,
            line,
            skip_header,
            done,
            ..
        } = self;
        // UTF-8 is checked once for the whole chunk; a character split
        // across chunks waits in the carry for the rest of its bytes.
        let (buf, invalid) = match std::str::from_utf8(carry) {
            Ok(s) => (s, false),
            Err(e) => (
                std::str::from_utf8(&carry[..e.valid_up_to()]).unwrap_or_default(),
                e.error_len().is_some(),
            ),
        };
        let mut pos = 0;
        let mut fields: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(stager.num_fields());
        while pos < buf.len() && !*done {
            fields.clear();
            let start_line = *line + 1;
            let next = match opts.format {
                CopyFormat::Text => text_record(buf, pos, opts, &mut fields, start_line)?,
                CopyFormat::Csv => csv_record(buf, pos, opts, &mut fields, start_line)?,
                CopyFormat::Binary => None,
            };
            let Some((end, newlines)) = next else { break };
            let raw = &buf[pos..end];
            pos = end;
            *line += newlines;
            let trimmed = raw.strip_suffix('\n').unwrap_or(raw);
            let trimmed = trimmed.strip_suffix('\r').unwrap_or(trimmed);
            if trimmed == "\\." {
                *done = true;
                break;
            }
            if *skip_header {
                *skip_header = false;
                continue;
            }
            if trimmed.is_empty() && stager.num_fields() > 1 {
                return Err(IngestError::MissingColumns {
                    place: RowPlace::Line(start_line),
                    column: String::new(),
                });
            }
            stager.push_row(&fields, start_line)?;
        }
        if invalid && !*done {
            return Err(IngestError::BadFormat {
                place: RowPlace::Line(*line + 1),
                reason: "invalid byte sequence for encoding \"UTF8\"".into(),
            });
        }
        Ok(pos)
    }
}

/// One text-format record starting at `pos`: its end (after the newline) and
/// the number of lines it took, or `None` when it is not complete yet.
fn text_record<'a>(
    buf: &'a str,
    pos: usize,
    opts: &CopyFrom,
    fields: &mut Vec<Option<Cow<'a, str>>>,
    line: u64,
) -> Result<Option<(usize, u64)>, IngestError> {
    let Some(nl) = buf[pos..].find('\n') else {
        return Ok(None);
    };
    let end = pos + nl + 1;
    let mut record = &buf[pos..pos + nl];
    if let Some(r) = record.strip_suffix('\r') {
        record = r;
    }
    for raw in record.split(opts.delimiter) {
        if raw == opts.null {
            fields.push(None);
        } else if raw.contains('\\') {
            fields.push(Some(Cow::Owned(unescape_text(raw.as_bytes(), line)?)));
        } else {
            fields.push(Some(Cow::Borrowed(raw)));
        }
    }
    Ok(Some((end, 1)))
}

fn unescape_text(raw: &[u8], line: u64) -> Result<String, IngestError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 >= raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                    v = v * 8 + (raw[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                    v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| IngestError::BadFormat {
        place: RowPlace::Line(line),
        reason: "invalid byte sequence for encoding \"UTF8\"".into(),
    })
}

/// One CSV record starting at `pos` (quoted fields may span lines). All
/// split points are ASCII bytes, so every slice is on a character boundary.
fn csv_record<'a>(
    text: &'a str,
    pos: usize,
    opts: &CopyFrom,
    fields: &mut Vec<Option<Cow<'a, str>>>,
    line: u64,
) -> Result<Option<(usize, u64)>, IngestError> {
    let buf = text.as_bytes();
    let delim = opts.delimiter as u8;
    let quote = opts.quote as u8;
    let escape = opts.escape as u8;
    let mut i = pos;
    let mut newlines = 0u64;
    loop {
        // One field starting at i.
        if i >= buf.len() {
            return Ok(None);
        }
        if buf[i] == quote {
            let mut value = String::new();
            let mut seg = i + 1;
            let mut j = i + 1;
            loop {
                if j >= buf.len() {
                    return Ok(None);
                }
                let b = buf[j];
                if b == escape
                    && escape != quote
                    && j + 1 < buf.len()
                    && (buf[j + 1] == quote || buf[j + 1] == escape)
                {
                    value.push_str(&text[seg..j]);
                    seg = j + 1;
                    j += 2;
                } else if b == quote {
                    if escape == quote && j + 1 < buf.len() && buf[j + 1] == quote {
                        value.push_str(&text[seg..=j]);
                        j += 2;
                        seg = j;
                    } else if j + 1 >= buf.len() {
                        return Ok(None);
                    } else {
                        value.push_str(&text[seg..j]);
                        j += 1;
                        break;
                    }
                } else {
                    if b == b'\n' {
                        newlines += 1;
                    }
                    j += 1;
                }
            }
            fields.push(Some(Cow::Owned(value)));
            i = j;
            // After a closing quote: a delimiter, or the end of the record.
            if buf[i] == b'\r' {
                if i + 1 >= buf.len() {
                    return Ok(None);
                }
                if buf[i + 1] == b'\n' {
                    i += 1;
                }
            }
            if buf[i] == delim {
                i += 1;
                continue;
            }
            if buf[i] == b'\n' {
                return Ok(Some((i + 1, newlines + 1)));
            }
            return Err(IngestError::BadFormat {
                place: RowPlace::Line(line),
                reason: "unexpected character after closing quote".into(),
            });
        }
        let Some(rel) = buf[i..].iter().position(|&b| b == delim || b == b'\n') else {
            return Ok(None);
        };
        let end = i + rel;
        let mut raw = &text[i..end];
        let at_newline = buf[end] == b'\n';
        if at_newline {
            if let Some(r) = raw.strip_suffix('\r') {
                raw = r;
            }
        }
        if raw == opts.null {
            fields.push(None);
        } else {
            fields.push(Some(Cow::Borrowed(raw)));
        }
        i = end + 1;
        if at_newline {
            return Ok(Some((i, newlines + 1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};
    use sluice_catalog::{ColumnDef, SqlType, TableOptions};

    fn table() -> TableDef {
        TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![
                ColumnDef {
                    name: "a".into(),
                    ty: SqlType::BigInt,
                    nullable: true,
                },
                ColumnDef {
                    name: "b".into(),
                    ty: SqlType::Text,
                    nullable: true,
                },
            ],
            options: TableOptions::default(),
        }
    }

    fn opts(sql: &str) -> CopyFrom {
        match sluice_sql::parse_sql(sql).unwrap() {
            sluice_sql::Statement::CopyFrom(c) => c,
            _ => panic!(),
        }
    }

    fn parser(sql: &str) -> CopyParser {
        CopyParser::new(&table(), opts(sql), u64::MAX).unwrap()
    }

    /// Feeds `data` in chunks of `chunk` bytes and returns the first batch.
    fn parse_in_chunks(sql: &str, data: &[u8], chunk: usize) -> RecordBatch {
        let mut p = parser(sql);
        for piece in data.chunks(chunk) {
            p.feed(piece).unwrap();
        }
        p.finish().unwrap().remove(0)
    }

    fn texts(batch: &RecordBatch) -> &StringArray {
        batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
    }

    /// PostgreSQL's binary COPY header, then one row per `(a, b)`.
    fn binary_rows(rows: &[(i64, &str)]) -> Vec<u8> {
        let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
        out.extend_from_slice(&[0; 8]);
        for (a, b) in rows {
            out.extend_from_slice(&2i16.to_be_bytes());
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&a.to_be_bytes());
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
            out.extend_from_slice(b.as_bytes());
        }
        out
    }

    #[test]
    fn binary_trailer_is_optional_but_rows_are_whole() {
        let sql = "COPY t FROM STDIN WITH (FORMAT binary)";
        let mut with_trailer = binary_rows(&[(1, "x"), (2, "yz")]);
        with_trailer.extend_from_slice(&(-1i16).to_be_bytes());
        let b = parse_in_chunks(sql, &with_trailer, 5);
        assert_eq!(texts(&b).value(1), "yz");
        // Without the trailer, as ADBC's ingest sends it.
        let b = parse_in_chunks(sql, &binary_rows(&[(1, "x"), (2, "yz")]), 3);
        assert_eq!(b.num_rows(), 2);
        // Cut inside a row, or before the header ends: refused.
        let whole = binary_rows(&[(1, "x")]);
        for cut in [whole.len() - 1, 5] {
            let mut p = parser(sql);
            p.feed(&whole[..cut]).unwrap();
            let e = p.finish().unwrap_err();
            assert!(e.to_string().contains("binary COPY data ended"), "{e}");
        }
    }

    /// Every fixed-width type goes straight into its Arrow type, NULLs
    /// included; a field of the wrong width names its tuple.
    #[test]
    fn binary_fields_decode_into_their_column_types() {
        use arrow::array::AsArray;
        use arrow::datatypes::{
            Date32Type, Float32Type, Int16Type, Int32Type, TimestampMicrosecondType,
        };
        let col = |name: &str, ty: SqlType| ColumnDef {
            name: name.into(),
            ty,
            nullable: true,
        };
        let def = TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![
                col("s", SqlType::SmallInt),
                col("i", SqlType::Int),
                col("r", SqlType::Real),
                col("ok", SqlType::Boolean),
                col("d", SqlType::Date),
                col("ts", SqlType::TimestampTz),
            ],
            options: TableOptions::default(),
        };
        let sql = "COPY t FROM STDIN WITH (FORMAT binary)";
        let field = |out: &mut Vec<u8>, v: Option<&[u8]>| match v {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        };
        let mut data = b"PGCOPY\n\xff\r\n\0".to_vec();
        data.extend_from_slice(&[0; 8]);
        data.extend_from_slice(&6i16.to_be_bytes());
        field(&mut data, Some(&(-3i16).to_be_bytes()));
        field(&mut data, Some(&70000i32.to_be_bytes()));
        field(&mut data, Some(&1.5f32.to_be_bytes()));
        field(&mut data, Some(&[1]));
        // 2000-01-02 and 2000-01-01 00:00:01 in PostgreSQL's epoch.
        field(&mut data, Some(&1i32.to_be_bytes()));
        field(&mut data, Some(&1_000_000i64.to_be_bytes()));
        data.extend_from_slice(&6i16.to_be_bytes());
        for _ in 0..6 {
            field(&mut data, None);
        }
        let mut p = CopyParser::new(&def, opts(sql), u64::MAX).unwrap();
        p.feed(&data).unwrap();
        let b = p.finish().unwrap().remove(0);
        assert_eq!(b.schema().as_ref(), def.data_schema().as_ref());
        assert_eq!(b.column(0).as_primitive::<Int16Type>().value(0), -3);
        assert_eq!(b.column(1).as_primitive::<Int32Type>().value(0), 70000);
        assert_eq!(b.column(2).as_primitive::<Float32Type>().value(0), 1.5);
        assert!(b.column(3).as_boolean().value(0));
        assert_eq!(b.column(4).as_primitive::<Date32Type>().value(0), 10_958);
        let ts = b.column(5).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 946_684_801_000_000);
        assert!((0..6).all(|c| b.column(c).is_null(1)));

        // A 4-byte field where a smallint's 2 bytes belong.
        let mut bad = b"PGCOPY\n\xff\r\n\0".to_vec();
        bad.extend_from_slice(&[0; 8]);
        bad.extend_from_slice(&data[19..19 + 2 + 6 * 4 + 2 + 4 + 1 + 4 + 4 + 8]);
        bad.extend_from_slice(&6i16.to_be_bytes());
        field(&mut bad, Some(&5i32.to_be_bytes()));
        for _ in 0..5 {
            field(&mut bad, None);
        }
        let mut p = CopyParser::new(&def, opts(sql), u64::MAX).unwrap();
        let e = p
            .feed(&bad)
            .and_then(|_| p.finish().map(|_| ()))
            .unwrap_err();
        assert_eq!(e.sqlstate(), "22P04", "{e}");
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(e.to_string().contains("smallint field has 4 bytes"), "{e}");
    }

    #[test]
    fn text_format_in_chunks() {
        let b = parse_in_chunks("COPY t FROM STDIN", b"1\thello\\tworld\n2\t\\N\n3\tlast", 3);
        let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let s = texts(&b);
        assert_eq!(a.values(), &[1, 2, 3]);
        assert_eq!(s.value(0), "hello\tworld");
        assert!(s.is_null(1));
        assert_eq!(s.value(2), "last");
    }

    #[test]
    fn csv_with_header_quotes_and_newlines() {
        let b = parse_in_chunks(
            "COPY t FROM STDIN WITH (FORMAT csv, HEADER true)",
            b"a,b\r\n1,\"x,\"\"y\"\"\nz\"\r\n2,\n3,\"\"\n",
            2,
        );
        let s = texts(&b);
        assert_eq!(s.value(0), "x,\"y\"\nz");
        assert!(s.is_null(1));
        assert_eq!(s.value(2), "");
    }

    #[test]
    fn utf8_split_across_chunks_and_invalid_bytes() {
        let b = parse_in_chunks("COPY t FROM STDIN csv", "1,é\n2,ü\n".as_bytes(), 1);
        let s = texts(&b);
        assert_eq!((s.value(0), s.value(1)), ("é", "ü"));
        parser("COPY t FROM STDIN csv")
            .feed(b"1,a\n2,\xff\n")
            .unwrap_err();
    }

    #[test]
    fn errors_name_the_line() {
        let mut p = parser("COPY t FROM STDIN csv");
        p.feed(b"1,a\n2,b\nxx,c\n").unwrap();
        let e = p.finish().unwrap_err();
        assert!(e.to_string().contains("line 3, column a"), "{e}");
        let mut p = parser("COPY t FROM STDIN csv");
        assert!(matches!(
            p.feed(b"1,a,b\n"),
            Err(IngestError::ExtraColumns {
                place: RowPlace::Line(1)
            })
        ));
    }
}
