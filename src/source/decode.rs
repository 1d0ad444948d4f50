//! Turns Kafka records into rows of a Kafka-fed table, and records that do
//! not parse into dead letters.
//!
//! A record's value is converted by the same code as COPY and INSERT (the
//! [`RowStager`] and the CSV [`CopyParser`]), so a value is valid here
//! exactly when it would be valid in a statement, with the same messages.
//! The records of one poll are converted together; only when that fails
//! are they converted one by one, to tell the bad ones from the rest.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BinaryBuilder, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::record_batch::RecordBatch;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
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
        let names: Vec<&str> = self
            .value_def
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let documents: Vec<FieldKind> = self
            .value_def
            .columns
            .iter()
            .map(|c| match c.ty {
                SqlType::Jsonb => FieldKind::Document,
                SqlType::Array(_) => FieldKind::Array,
                _ => FieldKind::Plain,
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            let payload = r.payload.as_deref().ok_or_else(|| no_value(i))?;
            let fields =
                json_fields(payload, &names, &documents).map_err(|reason| bad_record(i, reason))?;
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

/// The fields of a JSON object named as `columns`, as the text COPY would
/// read for each: `None` for a missing field or `null`, a string's value,
/// or any other value as compact JSON. A column marked in `documents`
/// (jsonb) takes any value as JSON, a string too (as PostgreSQL's
/// `json_populate_record` does). Fields of other names are skipped without
/// being built, and strings without escapes are borrowed from the record.
/// A JSON array for a column marked as an array becomes PostgreSQL's array
/// literal (`[1, null, "a b"]` reads as `{1,NULL,"a b"}`).
fn json_fields<'de>(
    payload: &'de [u8],
    columns: &[&str],
    documents: &[FieldKind],
) -> Result<Vec<Option<Cow<'de, str>>>, String> {
    let starts_an_object = payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    if !starts_an_object {
        // Not an object, or not JSON at all: say which.
        return Err(match serde_json::from_slice::<serde_json::Value>(payload) {
            Ok(_) => "the value is not a JSON object".into(),
            Err(e) => format!("invalid JSON: {e}"),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(payload);
    let fields = ObjectFields { columns, documents }
        .deserialize(&mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(fields)
}

/// Reads one JSON object into the fields of `columns`.
struct ObjectFields<'c> {
    columns: &'c [&'c str],
    documents: &'c [FieldKind],
}

/// How a JSON field is read into a column (see [`json_fields`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    Plain,
    /// jsonb: any value as JSON text.
    Document,
    /// An array column: a JSON array as an array literal.
    Array,
}

impl<'de> DeserializeSeed<'de> for ObjectFields<'_> {
    type Value = Vec<Option<Cow<'de, str>>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectFields<'_> {
    type Value = Vec<Option<Cow<'de, str>>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = vec![None; self.columns.len()];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match self.columns.iter().position(|c| *c == key) {
                // A repeated name: the last one counts.
                Some(k) => {
                    fields[k] = map.next_value_seed(FieldText {
                        kind: self.documents.get(k).copied().unwrap_or(FieldKind::Plain),
                    })?
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// One field's value as COPY text; for a `document` column, a string as
/// JSON too.
struct FieldText {
    kind: FieldKind,
}

impl<'de> DeserializeSeed<'de> for FieldText {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldText {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        match self.kind {
            FieldKind::Document => self.visit_str(v),
            _ => Ok(Some(Cow::Borrowed(v))),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.visit_string(v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        match self.kind {
            FieldKind::Document => Ok(Some(Cow::Owned(serde_json::Value::String(v).to_string()))),
            _ => Ok(Some(Cow::Owned(v))),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(if v { "true" } else { "false" })))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // As serde_json prints a number it parsed.
        Ok(Some(Cow::Owned(serde_json::Value::from(v).to_string())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        if self.kind != FieldKind::Array {
            return Ok(Some(Cow::Owned(v.to_string())));
        }
        let mut literal = String::from("{");
        for (k, item) in v.as_array().into_iter().flatten().enumerate() {
            if k > 0 {
                literal.push(',');
            }
            let text = match item {
                serde_json::Value::Null => {
                    literal.push_str("NULL");
                    continue;
                }
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            crate::types::text::push_quoted_element(&text, &mut literal);
        }
        literal.push('}');
        Ok(Some(Cow::Owned(literal)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(Cow::Owned(v.to_string())))
    }
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

    /// How fields were read before [`json_fields`]: a whole
    /// `serde_json::Value`, then the columns' fields out of it.
    fn fields_by_value(payload: &[u8], columns: &[&str]) -> Result<Vec<Option<String>>, String> {
        let value: serde_json::Value =
            serde_json::from_slice(payload).map_err(|e| format!("invalid JSON: {e}"))?;
        let serde_json::Value::Object(object) = value else {
            return Err("the value is not a JSON object".into());
        };
        Ok(columns
            .iter()
            .map(|c| match object.get(*c) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            })
            .collect())
    }

    #[test]
    fn json_fields_read_as_a_whole_value_would() {
        let columns = ["id", "name", "tags", "at"];
        for payload in [
            r#"{"id": 7, "name": "ann", "tags": ["a", {"b": 1.5}], "at": "2026-01-01 10:00:00"}"#,
            r#"  {"name": "tab\there \u00e9", "id": -12, "other": {"deep": [1, 2]}}  "#,
            r#"{"id": 1e300, "name": null, "tags": {"z": true, "a": null}}"#,
            r#"{"id": 0.1, "name": true, "at": false}"#,
            r#"{"id": 18446744073709551615, "id": 3}"#,
            r#"{"id": 12345678901234567890123}"#,
            r#"{}"#,
            r#"[1, 2, 3]"#,
            r#""a string""#,
            r#"not json"#,
            r#"{"id": 1} trailing"#,
            r#"{"id": 1"#,
            r#"{"id": "\ud800"}"#,
            "",
        ] {
            let old = fields_by_value(payload.as_bytes(), &columns);
            let new = json_fields(payload.as_bytes(), &columns, &[FieldKind::Plain; 4]).map(|f| {
                f.into_iter()
                    .map(|v| v.map(Cow::into_owned))
                    .collect::<Vec<_>>()
            });
            match (&old, &new) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{payload}"),
                (Err(a), Err(b)) => {
                    assert_eq!(a.split(':').next(), b.split(':').next(), "{payload}")
                }
                _ => panic!("{payload}: {old:?} against {new:?}"),
            }
        }
    }

    #[test]
    fn a_json_array_reads_as_an_array_literal() {
        let fields = json_fields(
            br#"{"xs": [1, null, "a \"b\"", true], "ys": [], "n": [1]}"#,
            &["xs", "ys", "n"],
            &[FieldKind::Array, FieldKind::Array, FieldKind::Plain],
        )
        .unwrap();
        let fields: Vec<Option<String>> =
            fields.into_iter().map(|f| f.map(Cow::into_owned)).collect();
        assert_eq!(
            fields,
            [
                Some(r#"{1,NULL,"a \"b\"",true}"#.to_string()),
                Some("{}".to_string()),
                Some("[1]".to_string()),
            ]
        );
    }

    #[test]
    fn a_jsonb_column_takes_any_json_value_as_it_is() {
        let fields = json_fields(
            br#"{"j": "s\"", "k": {"a": [1, null]}, "n": null, "t": "s"}"#,
            &["j", "k", "n", "t"],
            &[
                FieldKind::Document,
                FieldKind::Document,
                FieldKind::Document,
                FieldKind::Plain,
            ],
        )
        .unwrap();
        let fields: Vec<Option<String>> =
            fields.into_iter().map(|f| f.map(Cow::into_owned)).collect();
        assert_eq!(
            fields,
            [
                Some(r#""s\"""#.to_string()),
                Some(r#"{"a":[1,null]}"#.to_string()),
                None,
                Some("s".to_string()),
            ]
        );
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
