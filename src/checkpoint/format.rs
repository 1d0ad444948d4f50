//! Parquet encoding of checkpoint data files. The Arrow schema is stored in
//! the file, so types (unsigned counters, timestamps, lists of distinct
//! values) come back exactly as written.

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;

pub fn encode_parquet(batches: &[RecordBatch]) -> Result<Bytes, ParquetError> {
    let Some(first) = batches.first() else {
        return Ok(Bytes::new());
    };
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, first.schema(), Some(props))?;
    for b in batches {
        writer.write(b)?;
    }
    writer.close()?;
    Ok(Bytes::from(out))
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
}
