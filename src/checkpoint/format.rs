//! Parquet encoding of checkpoint data files. The Arrow schema is stored in
//! the file, so types (unsigned counters, timestamps, lists of distinct
//! values) come back exactly as written. Parquet has no type for an
//! interval of months, days and nanoseconds (a view's `ts - ts`): such a
//! column is written as 16 bytes a value, its field marked, and read back
//! as the interval.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeBinaryArray, IntervalMonthDayNanoArray, ListArray,
};
use arrow::datatypes::{DataType, Field, IntervalMonthDayNano, IntervalUnit, Schema};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;

pub fn encode_parquet(batches: &[RecordBatch]) -> Result<Bytes, ParquetError> {
    encode_with(batches, Compression::SNAPPY)
}

fn encode_with(batches: &[RecordBatch], compression: Compression) -> Result<Bytes, ParquetError> {
    let Some(first) = batches.first() else {
        return Ok(Bytes::new());
    };
    // The writer's name, not its version: the same rows make the same
    // bytes after an upgrade (a dataset written twice is one file).
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_created_by("sluice".into())
        .build();
    // Sized up front: growing a buffer of a hundred megabytes by doubling
    // copies it several times over and touches twice the pages.
    let mut out = Vec::with_capacity(encoded_size_hint(batches));
    let schema = stored_schema(&first.schema());
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(props))?;
    for b in batches {
        if schema == b.schema() {
            writer.write(b)?;
        } else {
            let columns = b.columns().iter().map(stored_column).collect();
            writer.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        }
    }
    writer.close()?;
    Ok(Bytes::from(out))
}

/// Parquet written batch by batch to `W` (a file), as [`encode_parquet`]
/// writes it whole: the same properties and stored schema, so the same
/// batches make the same bytes.
pub struct ParquetStreamWriter<W: std::io::Write + Send> {
    writer: ArrowWriter<W>,
    schema: Arc<Schema>,
}

impl<W: std::io::Write + Send> ParquetStreamWriter<W> {
    pub fn try_new(out: W, schema: &Arc<Schema>) -> Result<Self, ParquetError> {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by("sluice".into())
            .build();
        let schema = stored_schema(schema);
        Ok(ParquetStreamWriter {
            writer: ArrowWriter::try_new(out, schema.clone(), Some(props))?,
            schema,
        })
    }

    pub fn write(&mut self, b: &RecordBatch) -> Result<(), ParquetError> {
        if self.schema == b.schema() {
            self.writer.write(b)
        } else {
            let columns = b.columns().iter().map(stored_column).collect();
            self.writer
                .write(&RecordBatch::try_new(self.schema.clone(), columns)?)
        }
    }

    pub fn finish(self) -> Result<(), ParquetError> {
        self.writer.close().map(|_| ())
    }
}

/// About how many bytes the rows take in memory (slices counted by what
/// they reference, not by the buffers they share), capped so a wrong guess
/// only reserves address space.
fn encoded_size_hint(batches: &[RecordBatch]) -> usize {
    const CAP: usize = 1 << 30;
    let bytes: usize = batches
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    bytes.saturating_add(64 * 1024).min(CAP)
}

/// One part of an operator's state (a join side's rows, an aggregate's
/// groups). Not compressed (Parquet's dictionaries still shrink repeated
/// values): a join's state can hold every row of its inputs, the first
/// checkpoint after a backfill writes all of it before `FLUSH` returns,
/// and Snappy made that write take nearly twice as long for a third fewer
/// bytes. Columns whose names repeat (a side with both inputs' `k` of a
/// join below it) are written by position (`c0`, `c1`, ...); a join reads
/// its sides back by position.
pub fn encode_state_part(batches: &[RecordBatch]) -> Result<Bytes, ParquetError> {
    let Some(first) = batches.first() else {
        return Ok(Bytes::new());
    };
    let fields = first.schema().fields().clone();
    let names: std::collections::HashSet<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    if names.len() == fields.len() {
        return encode_with(batches, Compression::UNCOMPRESSED);
    }
    let schema = Arc::new(Schema::new(
        fields
            .iter()
            .enumerate()
            .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), f.is_nullable()))
            .collect::<Vec<_>>(),
    ));
    let batches = batches
        .iter()
        .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
        .collect::<Result<Vec<_>, _>>()?;
    encode_with(&batches, Compression::UNCOMPRESSED)
}

pub fn decode_parquet(bytes: Bytes) -> Result<Vec<RecordBatch>, ParquetError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?
        .with_batch_size(64 * 1024)
        .build()?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(ParquetError::from)?;
    batches.into_iter().map(restored_batch).collect()
}

/// Marks a field written as 16 bytes that holds an interval.
const INTERVAL_MARK: &str = "sluice.interval";

const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// A field whose type holds an interval (a column of them, or a list of
/// them: the values MIN and MAX over intervals keep when rows are taken
/// back), and the mark it is written with.
fn interval_mark(data_type: &DataType) -> Option<&'static str> {
    match data_type {
        &INTERVAL => Some("month_day_nano"),
        DataType::List(item) if item.data_type() == &INTERVAL => Some("list_of_month_day_nano"),
        _ => None,
    }
}

/// The schema as written: intervals as marked 16-byte values (also the
/// log's closed segments, which hold INTERVAL columns).
pub(crate) fn stored_schema(schema: &Arc<Schema>) -> Arc<Schema> {
    if !schema
        .fields()
        .iter()
        .any(|f| interval_mark(f.data_type()).is_some())
    {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let Some(mark) = interval_mark(f.data_type()) else {
                return f.as_ref().clone();
            };
            let mut metadata = f.metadata().clone();
            metadata.insert(INTERVAL_MARK.into(), mark.into());
            let stored = match f.data_type() {
                DataType::List(item) => DataType::List(Arc::new(Field::new(
                    item.name(),
                    DataType::FixedSizeBinary(16),
                    item.is_nullable(),
                ))),
                _ => DataType::FixedSizeBinary(16),
            };
            Field::new(f.name(), stored, f.is_nullable()).with_metadata(metadata)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

pub(crate) fn stored_column(c: &ArrayRef) -> ArrayRef {
    if let DataType::List(item) = c.data_type() {
        if item.data_type() != &INTERVAL {
            return c.clone();
        }
        let list = c.as_list::<i32>();
        let field = Arc::new(Field::new(
            item.name(),
            DataType::FixedSizeBinary(16),
            item.is_nullable(),
        ));
        return Arc::new(ListArray::new(
            field,
            list.offsets().clone(),
            stored_column(list.values()),
            list.nulls().cloned(),
        ));
    }
    if c.data_type() != &INTERVAL {
        return c.clone();
    }
    let values = c.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
    let bytes = values.iter().map(|v| {
        v.map(|v| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v.months.to_le_bytes());
            b[4..8].copy_from_slice(&v.days.to_le_bytes());
            b[8..].copy_from_slice(&v.nanoseconds.to_le_bytes());
            b
        })
    });
    // Sized 16 always: an all-null column still has its width.
    Arc::new(
        FixedSizeBinaryArray::try_from_sparse_iter_with_size(bytes, 16)
            .unwrap_or_else(|_| FixedSizeBinaryArray::new_null(16, c.len())),
    )
}

/// Intervals back from their stored 16 bytes.
fn intervals(bytes: &FixedSizeBinaryArray) -> IntervalMonthDayNanoArray {
    let word = |b: &[u8], at: usize| -> [u8; 4] { [b[at], b[at + 1], b[at + 2], b[at + 3]] };
    bytes
        .iter()
        .map(|v| {
            v.filter(|b| b.len() == 16).map(|b| {
                let mut nanos = [0u8; 8];
                nanos.copy_from_slice(&b[8..]);
                IntervalMonthDayNano::new(
                    i32::from_le_bytes(word(b, 0)),
                    i32::from_le_bytes(word(b, 4)),
                    i64::from_le_bytes(nanos),
                )
            })
        })
        .collect()
}

/// A batch as it was before `stored_schema`: marked columns are
/// intervals (or lists of them) again.
pub(crate) fn restored_batch(batch: RecordBatch) -> Result<RecordBatch, ParquetError> {
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| f.metadata().contains_key(INTERVAL_MARK))
    {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let mut metadata = f.metadata().clone();
        let restored: Option<(DataType, ArrayRef)> = match metadata.remove(INTERVAL_MARK) {
            None => None,
            Some(_) => match (c.as_fixed_size_binary_opt(), c.as_list_opt::<i32>()) {
                (Some(bytes), _) => Some((INTERVAL, Arc::new(intervals(bytes)))),
                (None, Some(list)) => match list.values().as_fixed_size_binary_opt() {
                    Some(bytes) => {
                        let item = Arc::new(Field::new_list_field(INTERVAL, true));
                        let values = ListArray::new(
                            item.clone(),
                            list.offsets().clone(),
                            Arc::new(intervals(bytes)),
                            list.nulls().cloned(),
                        );
                        Some((DataType::List(item), Arc::new(values)))
                    }
                    None => None,
                },
                _ => None,
            },
        };
        match restored {
            Some((data_type, column)) => {
                fields
                    .push(Field::new(f.name(), data_type, f.is_nullable()).with_metadata(metadata));
                columns.push(column);
            }
            None => {
                fields.push(f.as_ref().clone());
                columns.push(c.clone());
            }
        }
    }
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, ListArray, StringArray, UInt64Array};
    use arrow::datatypes::Int64Type;
    use datafusion::common::ScalarValue;

    use super::*;

    #[test]
    fn state_types_round_trip() {
        let distinct: ListArray = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
        ]);
        let batch = RecordBatch::try_from_iter(vec![
            (
                "__key_0",
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            ),
            (
                "__state_0_0",
                Arc::new(UInt64Array::from(vec![3, 4])) as ArrayRef,
            ),
            ("__state_1_0", Arc::new(distinct) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
            ),
        ])
        .unwrap();
        let bytes = encode_parquet(std::slice::from_ref(&batch)).unwrap();
        let back = decode_parquet(bytes).unwrap();
        assert_eq!(back, vec![batch]);
    }

    #[test]
    fn intervals_round_trip() {
        let spans = IntervalMonthDayNanoArray::from(vec![
            Some(IntervalMonthDayNano::new(1, -2, 3_000)),
            None,
            Some(IntervalMonthDayNano::new(0, 400, -7)),
        ]);
        let batch = RecordBatch::try_from_iter(vec![
            ("since", Arc::new(spans) as ArrayRef),
            ("n", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
        ])
        .unwrap();
        let back = decode_parquet(encode_parquet(std::slice::from_ref(&batch)).unwrap()).unwrap();
        assert_eq!(back, vec![batch]);
    }

    /// MIN and MAX over intervals keep their values as a list of them
    /// when rows are taken back; a state part holds such a list.
    #[test]
    fn lists_of_intervals_round_trip() {
        let values = ScalarValue::new_list_nullable(
            &[
                ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 1, 5))),
                ScalarValue::IntervalMonthDayNano(None),
            ],
            &INTERVAL,
        );
        let empty = ScalarValue::new_list_nullable(&[], &INTERVAL);
        let lists = arrow::compute::concat(&[values.as_ref(), empty.as_ref()]).unwrap();
        let batch = RecordBatch::try_from_iter(vec![("__state_0_0", lists)]).unwrap();
        let back =
            decode_parquet(encode_state_part(std::slice::from_ref(&batch)).unwrap()).unwrap();
        assert_eq!(back, vec![batch]);
    }

    /// A join side whose columns share a name is written by position.
    #[test]
    fn state_parts_with_repeated_names_round_trip_by_position() {
        let k = Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
        let batch = RecordBatch::try_from_iter(vec![("k", k.clone()), ("k", k)]).unwrap();
        let back =
            decode_parquet(encode_state_part(&[batch.clone(), batch.clone()]).unwrap()).unwrap();
        let back = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
        assert_eq!(back.num_rows(), 4);
        assert_eq!(back.schema().field(1).name(), "c1");
        assert_eq!(&back.column(0).slice(0, 2), batch.column(0));
    }
}
