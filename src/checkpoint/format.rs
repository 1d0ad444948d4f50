//! Parquet encoding of checkpoint data files. The Arrow schema is stored in
//! the file, so types (unsigned counters, timestamps, lists of distinct
//! values) come back exactly as written.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
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
    let props = WriterProperties::builder()
        .set_compression(compression)
        .build();
    // Sized up front: growing a buffer of a hundred megabytes by doubling
    // copies it several times over and touches twice the pages.
    let mut out = Vec::with_capacity(encoded_size_hint(batches));
    let mut writer = ArrowWriter::try_new(&mut out, first.schema(), Some(props))?;
    for b in batches {
        writer.write(b)?;
    }
    writer.close()?;
    Ok(Bytes::from(out))
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
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(ParquetError::from)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, ListArray, StringArray, UInt64Array};
    use arrow::datatypes::Int64Type;

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
