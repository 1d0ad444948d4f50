//! Turns Kafka records into rows of a Kafka-fed table, and records that do
//! not parse into dead letters.
//!
//! A record's value is converted by the same code as COPY and INSERT (the
//! [`RowStager`] and the CSV [`CopyParser`]), so a value is valid here
//! exactly when it would be valid in a statement, with the same messages.
//! The records of one poll are converted together; only when that fails
//! are they converted one by one, to tell the bad ones from the rest.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BinaryBuilder, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::record_batch::RecordBatch;
use sluice_catalog::{SourceFormat, SqlType, TableDef, KAFKA_COLUMNS};
use sluice_sql::{CopyFormat, CopyFrom};

use crate::ingest::{CopyParser, IngestError, RowStager};

/// One record read from a topic partition.
#[derive(Debug, Clone)]
pub struct KafkaRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    /// The record's timestamp, milliseconds since 1970.
    pub timestamp_ms: Option<i64>,
    pub payload: Option<Vec<u8>>,
}

/// The records of one partition's poll, decoded.
pub struct Decoded {
    /// The table's rows (its columns, then the Kafka columns), in offset
    /// order; `None` when no record parsed.
    pub rows: Option<RecordBatch>,
    /// The records that did not parse, with why.
    pub dead: Vec<(KafkaRecord, String)>,
}

pub struct RecordDecoder {
    format: SourceFormat,
    /// The table without its Kafka columns: what a record's value fills.
    value_def: TableDef,
    /// The full table, whose data schema the rows take.
    table: TableDef,
}

impl RecordDecoder {
    pub fn new(table: &TableDef, format: SourceFormat) -> RecordDecoder {
        let mut value_def = table.clone();
        value_def
            .columns
            .retain(|c| !KAFKA_COLUMNS.contains(&c.name.as_str()));
        RecordDecoder {
            format,
            value_def,
            table: table.clone(),
        }
    }

    /// Decodes records of one partition, in offset order.
    pub fn decode(&self, records: Vec<KafkaRecord>) -> Decoded {
        if records.is_empty() {
            return Decoded {
                rows: None,
                dead: Vec::new(),
            };
        }
        let all: Vec<&KafkaRecord> = records.iter().collect();
        if let Ok(values) = self.values(&all) {
            if values.num_rows() == records.len() {
                return Decoded {
                    rows: self.with_kafka_columns(&values, &all).ok(),
                    dead: Vec::new(),
                };
            }
        }
        // Something in the poll did not parse: one record at a time.
        let mut kept_values = Vec::new();
        let mut kept = Vec::new();
        let mut dead = Vec::new();
        for r in &records {
            match self.values(&[r]) {
                Ok(v) if v.num_rows() == 1 => {
                    kept_values.push(v);
                    kept.push(r);
                }
                Ok(v) => dead.push((
                    r.clone(),
                    format!("the record holds {} rows, not one", v.num_rows()),
                )),
                Err(e) => dead.push((r.clone(), e)),
            }
        }
        let rows = match kept_values.first() {
            None => None,
            Some(first) => arrow::compute::concat_batches(&first.schema(), &kept_values)
                .ok()
                .and_then(|v| self.with_kafka_columns(&v, &kept).ok()),
        };
        Decoded { rows, dead }
    }

    /// The table's own columns of `records`, one row each when they parse.
    fn values(&self, records: &[&KafkaRecord]) -> Result<RecordBatch, String> {
        let batches = match self.format {
            SourceFormat::Json => self.json_values(records),
            SourceFormat::Csv => self.csv_values(records),
            SourceFormat::Raw => self.raw_values(records),
        }
        .map_err(|e| match e {
            // The reason alone: a record is one row, so no place is needed.
            IngestError::BadFormat { reason, .. } => reason,
            other => other.to_string(),
        })?;
        let schema = self.value_def.data_schema();
        arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string())
    }

    fn json_values(&self, records: &[&KafkaRecord]) -> Result<Vec<RecordBatch>, IngestError> {
        let mut stager = RowStager::new(&self.value_def, &[], false)?;
        let mut fields: Vec<Option<String>> = Vec::with_capacity(self.value_def.columns.len());
        for (i, r) in records.iter().enumerate() {
            let payload = r.payload.as_deref().ok_or_else(|| no_value(i))?;
            let value: serde_json::Value = serde_json::from_slice(payload)
                .map_err(|e| bad_record(i, format!("invalid JSON: {e}")))?;
            let serde_json::Value::Object(object) = value else {
                return Err(bad_record(i, "the value is not a JSON object".into()));
            };
            fields.clear();
            for c in &self.value_def.columns {
                fields.push(match object.get(&c.name) {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                });
            }
            stager.push_row(&fields, i as u64 + 1)?;
        }
        stager.finish()
    }

    fn csv_values(&self, records: &[&KafkaRecord]) -> Result<Vec<RecordBatch>, IngestError> {
        let copy = CopyFrom {
            table: self.value_def.name.clone(),
            columns: Vec::new(),
            format: CopyFormat::Csv,
            header: false,
            delimiter: ',',
            null: String::new(),
            quote: '"',
            escape: '"',
        };
        let mut parser = CopyParser::new(&self.value_def, copy, u64::MAX)?;
        for (i, r) in records.iter().enumerate() {
            let payload = r.payload.as_deref().ok_or_else(|| no_value(i))?;
            parser.feed(payload)?;
            if !payload.ends_with(b"\n") {
                parser.feed(b"\n")?;
            }
        }
        parser.finish()
    }

    fn raw_values(&self, records: &[&KafkaRecord]) -> Result<Vec<RecordBatch>, IngestError> {
        let column = &self.value_def.columns[0];
        if column.ty == SqlType::Bytea {
            let mut b = BinaryBuilder::new();
            for r in records {
                match &r.payload {
                    Some(p) => b.append_value(p),
                    None if column.nullable => b.append_null(),
                    None => return Err(no_value(0)),
                }
            }
            let columns: Vec<ArrayRef> = vec![Arc::new(b.finish())];
            return Ok(vec![RecordBatch::try_new(
                self.value_def.data_schema(),
                columns,
            )?]);
        }
        let mut stager = RowStager::new(&self.value_def, &[], false)?;
        for (i, r) in records.iter().enumerate() {
            let text = match &r.payload {
                Some(p) => Some(
                    std::str::from_utf8(p)
                        .map_err(|_| bad_record(i, "the value is not valid UTF-8".into()))?,
                ),
                None => None,
            };
            stager.push_row(&[text], i as u64 + 1)?;
        }
        stager.finish()
    }

    /// `values` with the Kafka columns of `records` after them, in the
    /// table's data schema.
    fn with_kafka_columns(
        &self,
        values: &RecordBatch,
        records: &[&KafkaRecord],
    ) -> Result<RecordBatch, arrow::error::ArrowError> {
        let mut columns: Vec<ArrayRef> = values.columns().to_vec();
        columns.push(Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.offset),
        )));
        columns.push(Arc::new(BinaryArray::from_iter(
            records.iter().map(|r| r.key.as_deref()),
        )));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from_iter(
                records.iter().map(|r| r.timestamp_ms.map(|t| t * 1000)),
            )
            .with_timezone("+00:00"),
        ));
        RecordBatch::try_new(self.table.data_schema(), columns)
    }
}

/// Dead letters as rows of a dead-letter table
/// ([`sluice_catalog::dead_letter_column_defs`]).
pub fn dead_letter_rows(
    def: &TableDef,
    dead: &[(KafkaRecord, String)],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(
            dead.iter().map(|(r, _)| r.partition),
        )),
        Arc::new(Int64Array::from_iter_values(
            dead.iter().map(|(r, _)| r.offset),
        )),
        Arc::new(BinaryArray::from_iter(
            dead.iter().map(|(r, _)| r.key.as_deref()),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter(
                dead.iter().map(|(r, _)| r.timestamp_ms.map(|t| t * 1000)),
            )
            .with_timezone("+00:00"),
        ),
        Arc::new(BinaryArray::from_iter(
            dead.iter().map(|(r, _)| r.payload.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(
            dead.iter().map(|(_, e)| e.as_str()),
        )),
    ];
    RecordBatch::try_new(def.data_schema(), columns)
}

fn no_value(i: usize) -> IngestError {
    bad_record(i, "the record has no value".into())
}

fn bad_record(i: usize, reason: String) -> IngestError {
    IngestError::BadFormat {
        place: crate::ingest::RowPlace::Row(i as u64 + 1),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;
    use sluice_catalog::{kafka_column_defs, ColumnDef};

    fn table(format_columns: Vec<ColumnDef>) -> TableDef {
        let mut columns = format_columns;
        columns.extend(kafka_column_defs());
        TableDef {
            id: 1,
            name: "ev".into(),
            columns,
            options: Default::default(),
        }
    }

    fn col(name: &str, ty: SqlType, nullable: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            nullable,
        }
    }

    fn record(offset: i64, payload: &str) -> KafkaRecord {
        KafkaRecord {
            partition: 2,
            offset,
            key: Some(b"k".to_vec()),
            timestamp_ms: Some(1_000),
            payload: Some(payload.as_bytes().to_vec()),
        }
    }

    #[test]
    fn json_records_become_rows_and_bad_ones_dead_letters() {
        let def = table(vec![
            col("id", SqlType::BigInt, false),
            col("name", SqlType::Text, true),
            col("at", SqlType::Timestamp, true),
        ]);
        let decoder = RecordDecoder::new(&def, SourceFormat::Json);
        let good = decoder.decode(vec![
            record(
                5,
                r#"{"id": 1, "name": "a", "at": "2026-01-01 00:00:00", "extra": 1}"#,
            ),
            record(6, r#"{"id": 2}"#),
        ]);
        assert!(good.dead.is_empty());
        let rows = good.rows.unwrap();
        assert_eq!(rows.num_rows(), 2);
        assert_eq!(rows.schema(), def.data_schema());
        let offsets = rows
            .column(3)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(offsets.values(), &[5, 6]);
        assert!(rows.column(1).is_null(1));

        let mixed = decoder.decode(vec![
            record(7, r#"{"id": 3}"#),
            record(8, "not json"),
            record(9, r#"{"id": "three"}"#),
            record(10, r#"{"name": "no id"}"#),
            record(11, r#"[1, 2]"#),
            record(12, r#"{"id": 4}"#),
        ]);
        let rows = mixed.rows.unwrap();
        let offsets = rows
            .column(3)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(offsets.values(), &[7, 12]);
        let dead: Vec<i64> = mixed.dead.iter().map(|(r, _)| r.offset).collect();
        assert_eq!(dead, [8, 9, 10, 11]);
        assert!(
            mixed.dead[1]
                .1
                .contains("invalid input syntax for type bigint"),
            "{}",
            mixed.dead[1].1
        );
        assert!(mixed.dead[2].1.contains("not-null"), "{}", mixed.dead[2].1);

        let letters = dead_letter_rows(
            &TableDef {
                id: 2,
                name: "ev_dead_letters".into(),
                columns: sluice_catalog::dead_letter_column_defs(),
                options: Default::default(),
            },
            &mixed.dead,
        )
        .unwrap();
        assert_eq!(letters.num_rows(), 4);
    }

    #[test]
    fn csv_and_raw_records() {
        let def = table(vec![
            col("id", SqlType::BigInt, false),
            col("name", SqlType::Text, true),
        ]);
        let decoder = RecordDecoder::new(&def, SourceFormat::Csv);
        let d = decoder.decode(vec![
            record(0, "1,\"a, b\""),
            record(1, "2,\n"),
            record(2, "x,y"),
            record(3, "3,c\n4,d"),
        ]);
        assert_eq!(d.rows.unwrap().num_rows(), 2);
        let dead: Vec<i64> = d.dead.iter().map(|(r, _)| r.offset).collect();
        assert_eq!(dead, [2, 3]);

        let raw = table(vec![col("line", SqlType::Text, true)]);
        let decoder = RecordDecoder::new(&raw, SourceFormat::Raw);
        let mut bad = record(1, "");
        bad.payload = Some(vec![0xff, 0xfe]);
        let d = decoder.decode(vec![record(0, "hello"), bad]);
        assert_eq!(d.rows.unwrap().num_rows(), 1);
        assert_eq!(d.dead.len(), 1);
    }
}
