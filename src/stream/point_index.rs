//! An index of one published snapshot of a view, on some of its columns,
//! for point reads (`WHERE tenant = $1`) and, on the columns of a
//! `CREATE INDEX`, for reads of key ranges.
//!
//! State: for each distinct key (the key columns in arrow's row format,
//! whose byte order is the values' order), the places (batch, row) of the
//! rows holding it, ordered by key. It is built on the first
//! point read on those columns after a publish and lives as long as that
//! snapshot: the next publish starts without indexes, so a read never sees
//! rows of two snapshots. Nothing is checkpointed; a restart builds it
//! again from the restored snapshot when it is first read.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef};
use arrow::compute::cast;
use arrow::compute::interleave;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;

use crate::error::SluiceError;
use crate::log::column_index::{borrowed, empty_range, KeyRanges};

pub struct PointIndex {
    columns: Vec<usize>,
    types: Vec<DataType>,
    converter: RowConverter,
    places: BTreeMap<Box<[u8]>, Vec<(usize, usize)>>,
}

impl PointIndex {
    /// Indexes `batches` (rows of `schema`) on `columns`.
    pub fn build(
        schema: &SchemaRef,
        batches: &[RecordBatch],
        columns: &[usize],
    ) -> Result<PointIndex, SluiceError> {
        let types: Vec<DataType> = columns
            .iter()
            .map(|&c| schema.field(c).data_type().clone())
            .collect();
        let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())?;
        let mut places: BTreeMap<Box<[u8]>, Vec<(usize, usize)>> = BTreeMap::new();
        for (b, batch) in batches.iter().enumerate() {
            let keys: Vec<ArrayRef> = columns.iter().map(|&c| batch.column(c).clone()).collect();
            let rows = converter.convert_columns(&keys)?;
            for (r, row) in rows.iter().enumerate() {
                // SQL equality never matches NULL.
                if keys.iter().any(|k| k.is_null(r)) {
                    continue;
                }
                places
                    .entry(Box::from(row.as_ref()))
                    .or_default()
                    .push((b, r));
            }
        }
        Ok(PointIndex {
            columns: columns.to_vec(),
            types,
            converter,
            places,
        })
    }

    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// The rows whose keys fall in `ranges` (of encoded keys, or of their
    /// leading columns), as whole rows of the snapshot, in key order.
    pub fn rows_in(
        &self,
        batches: &[RecordBatch],
        ranges: &KeyRanges,
        schema: SchemaRef,
    ) -> Result<RecordBatch, SluiceError> {
        let mut places = Vec::new();
        for (lo, hi) in ranges {
            if empty_range(lo, hi) {
                continue;
            }
            let range = (borrowed(lo), borrowed(hi));
            for (_, found) in self.places.range::<[u8], _>(range) {
                places.extend_from_slice(found);
            }
        }
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        rows_at(batches, &places, &all, schema)
    }

    /// The rows whose key columns equal `key` (values of any type that
    /// casts to the column's), as one batch of `projection` of the
    /// snapshot's columns, in `schema`.
    pub fn lookup(
        &self,
        batches: &[RecordBatch],
        key: &[ScalarValue],
        projection: &[usize],
        schema: SchemaRef,
    ) -> Result<RecordBatch, SluiceError> {
        let mut places: &[(usize, usize)] = &[];
        if !key.iter().any(ScalarValue::is_null) {
            let arrays = key
                .iter()
                .zip(&self.types)
                .map(|(v, ty)| Ok(cast(&v.to_array_of_size(1)?, ty)?))
                .collect::<Result<Vec<ArrayRef>, SluiceError>>()?;
            // A value the cast could not keep (out of range) equals nothing.
            if arrays.iter().all(|a| a.is_valid(0)) {
                let rows = self.converter.convert_columns(&arrays)?;
                if let Some(found) = self.places.get(rows.row(0).as_ref()) {
                    places = found;
                }
            }
        }
        rows_at(batches, places, projection, schema)
    }
}

/// The rows at `places` (batch, row), as `projection` of the columns.
fn rows_at(
    batches: &[RecordBatch],
    places: &[(usize, usize)],
    projection: &[usize],
    schema: SchemaRef,
) -> Result<RecordBatch, SluiceError> {
    if places.is_empty() {
        return Ok(RecordBatch::new_empty(schema));
    }
    let columns = projection
        .iter()
        .map(|&c| {
            let sources: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            Ok(interleave(&sources, places)?)
        })
        .collect::<Result<Vec<ArrayRef>, SluiceError>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(places.len())),
    )?)
}
