//! Rows and changes as Kafka records. A record's value is a JSON object of
//! the source's columns (NULLs written as `null`); its key, when the sink
//! has one, a JSON object of the key columns. A change that deletes a row
//! is a tombstone: the row's key and no value, the convention of Kafka's
//! compacted topics. A record without a key keeps the partition of the
//! source it came from (table partition k goes to topic partition k modulo
//! the topic's partitions), so each partition's order carries over.

use std::collections::HashSet;

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array, StringArray};
use arrow::datatypes::{DataType, Field, Float64Type, Schema, SchemaRef};
use arrow::json::writer::{LineDelimited, WriterBuilder};
use arrow::record_batch::RecordBatch;

use super::SinkError;
use crate::stream::OP_COLUMN;

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    /// The source partition of a record without a key.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    pub value: Option<Vec<u8>>,
}

/// Turns the rows a sink reads (its source's columns, maybe `_op`, then
/// `_partition` and `_offset`) into records.
pub struct RecordEncoder {
    value_columns: Vec<usize>,
    key_columns: Vec<usize>,
    op_column: Option<usize>,
    partition_column: Option<usize>,
}

impl RecordEncoder {
    /// `columns`: the source's columns a record carries, by name; `key`:
    /// those that make the key.
    pub fn new(
        schema: &SchemaRef,
        relation: &str,
        columns: &[String],
        key: &[String],
    ) -> Result<RecordEncoder, SinkError> {
        let index = |name: &String| {
            schema
                .index_of(name)
                .map_err(|_| SinkError::UndefinedColumn {
                    column: name.clone(),
                    relation: relation.to_string(),
                })
        };
        Ok(RecordEncoder {
            value_columns: columns.iter().map(index).collect::<Result<_, _>>()?,
            key_columns: key.iter().map(index).collect::<Result<_, _>>()?,
            op_column: schema.index_of(OP_COLUMN).ok(),
            partition_column: schema.index_of("_partition").ok(),
        })
    }

    /// The records of `batches`, in order. Deletes become tombstones, except
    /// that a delete whose key a later insert of the same call sets again
    /// is left out (an updated row is its old row's delete, then the new
    /// row's insert: the upsert alone says it).
    pub fn encode(&self, batches: &[RecordBatch]) -> Result<Vec<SinkRecord>, SinkError> {
        let mut out = Vec::new();
        for batch in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let values = json_lines(&batch.project(&self.value_columns)?)?;
            let keys = if self.key_columns.is_empty() {
                None
            } else {
                Some(json_lines(&batch.project(&self.key_columns)?)?)
            };
            let ops = match self.op_column {
                Some(i) => batch.column(i).as_any().downcast_ref::<StringArray>(),
                None => None,
            };
            let partitions = match (&keys, self.partition_column) {
                (None, Some(i)) => batch.column(i).as_any().downcast_ref::<Int32Array>(),
                _ => None,
            };
            for (row, value) in values.into_iter().enumerate() {
                let deleted = ops.is_some_and(|o| o.is_valid(row) && o.value(row) == "delete");
                out.push(SinkRecord {
                    partition: partitions.map(|p| p.value(row)),
                    key: keys.as_ref().map(|k| k[row].clone()),
                    value: (!deleted).then_some(value),
                });
            }
        }
        // Walk back: a tombstone followed by an upsert of its key goes.
        let mut set_later: HashSet<Vec<u8>> = HashSet::new();
        let mut kept = Vec::with_capacity(out.len());
        for r in out.into_iter().rev() {
            match (&r.key, &r.value) {
                (Some(k), None) if set_later.contains(k) => continue,
                (Some(k), Some(_)) => {
                    set_later.insert(k.clone());
                }
                _ => {}
            }
            kept.push(r);
        }
        kept.reverse();
        Ok(kept)
    }
}

impl From<arrow::error::ArrowError> for SinkError {
    fn from(e: arrow::error::ArrowError) -> SinkError {
        SinkError::Encode(e.to_string())
    }
}

/// Each row of `batch` as one JSON object, its fields in column order.
fn json_lines(batch: &RecordBatch) -> Result<Vec<Vec<u8>>, SinkError> {
    let schema = batch.schema();
    let columns = (0..batch.num_columns())
        .map(|i| column_json(batch, i))
        .collect::<Result<Vec<_>, _>>()?;
    let names: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| serde_json::Value::from(f.name().as_str()).to_string())
        .collect();
    Ok((0..batch.num_rows())
        .map(|row| {
            let mut line = Vec::with_capacity(64);
            line.push(b'{');
            for (k, (name, values)) in names.iter().zip(&columns).enumerate() {
                if k > 0 {
                    line.push(b',');
                }
                line.extend_from_slice(name.as_bytes());
                line.push(b':');
                line.extend_from_slice(values[row].as_bytes());
            }
            line.push(b'}');
            line
        })
        .collect())
}

/// Each row's value of column `i` as JSON text: as arrow-json writes it,
/// except a `jsonb` column's document, which is nested as it is, a float
/// that is not finite, which is the string PostgreSQL prints (`"NaN"`,
/// `"Infinity"`, `"-Infinity"`) where arrow-json would write null, and
/// bytes, written as PostgreSQL writes them (`"\\x00ff"`).
fn column_json(batch: &RecordBatch, i: usize) -> Result<Vec<String>, SinkError> {
    let field = batch.schema().field(i).clone();
    let array = batch.column(i);
    let is_jsonb = field
        .metadata()
        .get(sluice_catalog::SQL_TYPE_METADATA_KEY)
        .is_some_and(|t| t == "jsonb");
    if let (true, Some(docs)) = (is_jsonb, array.as_any().downcast_ref::<StringArray>()) {
        return Ok(docs
            .iter()
            .map(|d| d.unwrap_or("null").to_string())
            .collect());
    }
    // One column at a time under a fixed name: each line is `{"v":...}`.
    let single = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "v",
            field.data_type().clone(),
            true,
        )])),
        vec![array.clone()],
    )?;
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(Vec::new());
    writer.write(&single)?;
    writer.finish()?;
    let text =
        String::from_utf8(writer.into_inner()).map_err(|e| SinkError::Encode(e.to_string()))?;
    // JSON escapes newlines inside strings: each line is one row.
    let mut values: Vec<String> = text
        .lines()
        .map(|l| {
            l.strip_prefix(r#"{"v":"#)
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or("null")
                .to_string()
        })
        .collect();
    if matches!(
        field.data_type(),
        DataType::Float16 | DataType::Float32 | DataType::Float64
    ) {
        let floats = arrow::compute::cast(array, &DataType::Float64)?;
        let floats = floats.as_primitive::<Float64Type>();
        for (row, v) in floats.iter().enumerate() {
            match v {
                Some(v) if v.is_nan() => values[row] = r#""NaN""#.into(),
                Some(v) if v == f64::INFINITY => values[row] = r#""Infinity""#.into(),
                Some(v) if v == f64::NEG_INFINITY => values[row] = r#""-Infinity""#.into(),
                _ => {}
            }
        }
    }
    if matches!(
        field.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    ) {
        // arrow-json writes bare hex; PostgreSQL's `\x` form reads back
        // as the same bytes (in a source, COPY or INSERT).
        for v in values.iter_mut().filter(|v| v.starts_with('"')) {
            v.insert_str(1, r"\\x");
        }
    }
    if values.len() != batch.num_rows() {
        return Err(SinkError::Encode(format!(
            "column {} gave {} values for {} rows",
            field.name(),
            values.len(),
            batch.num_rows()
        )));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, BinaryArray, Float32Array, Float64Array, Int64Array};

    use super::*;

    fn changes(rows: &[(&str, Option<i64>, &str)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("tenant", DataType::Utf8, false),
            Field::new("total", DataType::Int64, true),
            Field::new(OP_COLUMN, DataType::Utf8, false),
            Field::new("_offset", DataType::Int64, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(0..rows.len() as i64)),
        ];
        RecordBatch::try_new(schema, columns).unwrap()
    }

    fn text(b: &Option<Vec<u8>>) -> Option<String> {
        b.as_ref().map(|b| String::from_utf8(b.clone()).unwrap())
    }

    #[test]
    fn an_update_is_one_upsert_and_a_delete_a_tombstone() {
        let batch = changes(&[
            ("acme", Some(5), "delete"),
            ("initech", Some(2), "delete"),
            ("acme", Some(7), "insert"),
            ("globex", None, "insert"),
        ]);
        let enc = RecordEncoder::new(
            &batch.schema(),
            "totals",
            &["tenant".into(), "total".into()],
            &["tenant".into()],
        )
        .unwrap();
        let out: Vec<_> = enc
            .encode(&[batch])
            .unwrap()
            .iter()
            .map(|r| (text(&r.key), text(&r.value)))
            .collect();
        assert_eq!(
            out,
            [
                (Some(r#"{"tenant":"initech"}"#.into()), None),
                (
                    Some(r#"{"tenant":"acme"}"#.into()),
                    Some(r#"{"tenant":"acme","total":7}"#.into())
                ),
                (
                    Some(r#"{"tenant":"globex"}"#.into()),
                    Some(r#"{"tenant":"globex","total":null}"#.into())
                ),
            ]
        );
    }

    #[test]
    fn jsonb_is_nested_and_floats_that_are_not_finite_are_strings() {
        let doc = Field::new("doc", DataType::Utf8, true).with_metadata(
            [(
                sluice_catalog::SQL_TYPE_METADATA_KEY.to_string(),
                "jsonb".to_string(),
            )]
            .into_iter()
            .collect(),
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Float32, true),
            doc,
            Field::new("note", DataType::Utf8, true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(vec![Some(f64::NAN), Some(2.5), None])),
            Arc::new(Float32Array::from(vec![
                Some(f32::NEG_INFINITY),
                Some(1.1),
                Some(f32::INFINITY),
            ])),
            Arc::new(StringArray::from(vec![
                Some(r#"{"k": [1, {"z": null}]}"#),
                None,
                Some("3"),
            ])),
            Arc::new(StringArray::from(vec![Some("a \"b\"\nc"), None, Some("")])),
        ];
        let batch = RecordBatch::try_new(schema, columns).unwrap();
        let lines: Vec<String> = json_lines(&batch)
            .unwrap()
            .into_iter()
            .map(|l| String::from_utf8(l).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                r#"{"x":"NaN","y":"-Infinity","doc":{"k": [1, {"z": null}]},"note":"a \"b\"\nc"}"#,
                r#"{"x":2.5,"y":1.1,"doc":null,"note":null}"#,
                r#"{"x":null,"y":"Infinity","doc":3,"note":""}"#,
            ]
        );
        for l in &lines {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        let bytes = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("y", DataType::Binary, true)])),
            vec![Arc::new(BinaryArray::from(vec![
                Some(&[0u8, 255][..]),
                None,
            ]))],
        )
        .unwrap();
        let lines = json_lines(&bytes).unwrap();
        let y: serde_json::Value = serde_json::from_slice(&lines[0]).unwrap();
        assert_eq!(y["y"], "\\x00ff");
        assert_eq!(lines[1], br#"{"y":null}"#);
    }

    #[test]
    fn unknown_key_columns_are_refused() {
        let batch = changes(&[]);
        let err = RecordEncoder::new(&batch.schema(), "totals", &[], &["nope".into()])
            .err()
            .unwrap();
        assert_eq!(err.sqlstate(), "42703");
    }
}
