//! Rows and changes as Kafka records. A record's value is a JSON object of
//! the source's columns (NULLs written as `null`); its key, when the sink
//! has one, a JSON object of the key columns. A change that deletes a row
//! is a tombstone: the row's key and no value, the convention of Kafka's
//! compacted topics. A record without a key keeps the partition of the
//! source it came from (table partition k goes to topic partition k modulo
//! the topic's partitions), so each partition's order carries over.

use std::collections::HashSet;

use arrow::array::{Array, Int32Array, StringArray};
use arrow::datatypes::SchemaRef;
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

/// Each row of `batch` as one JSON object.
fn json_lines(batch: &RecordBatch) -> Result<Vec<Vec<u8>>, SinkError> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    let text = writer.into_inner();
    // JSON escapes newlines inside strings: each line is one row.
    Ok(text
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

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
    fn unknown_key_columns_are_refused() {
        let batch = changes(&[]);
        let err = RecordEncoder::new(&batch.schema(), "totals", &[], &["nope".into()])
            .err()
            .unwrap();
        assert_eq!(err.sqlstate(), "42703");
    }
}
