//! What views over keyed tables need to take rows back: an accumulator for
//! MIN and MAX that can forget any value (DataFusion's sliding ones only
//! forget in arrival order), and the previous version of each key (of a
//! table keyed by row, none: its tombstones hold the rows they delete).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Accumulator;

/// MIN, MAX or COUNT(DISTINCT) over a multiset of values: taking back the
/// current extreme gives the next one, and a value counts while any copy
/// of it remains.
#[derive(Debug)]
pub struct RetractableMinMax {
    max: bool,
    /// COUNT(DISTINCT) rather than MIN or MAX.
    count_distinct: bool,
    data_type: DataType,
    converter: RowConverter,
    /// Values by their order-preserving bytes, with how often each occurs.
    values: BTreeMap<Vec<u8>, (ScalarValue, i64)>,
    /// NULL counts as a value too (for [`RetractableDistinct`]).
    keep_nulls: bool,
}

impl RetractableMinMax {
    pub fn new(max: bool, data_type: DataType) -> Result<RetractableMinMax> {
        Ok(RetractableMinMax {
            max,
            count_distinct: false,
            converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
            data_type,
            values: BTreeMap::new(),
            keep_nulls: false,
        })
    }

    /// COUNT(DISTINCT) of values of `data_type`.
    pub fn count_distinct(data_type: DataType) -> Result<RetractableMinMax> {
        Ok(RetractableMinMax {
            count_distinct: true,
            ..RetractableMinMax::new(false, data_type)?
        })
    }

    fn add(&mut self, array: &ArrayRef, counts: Option<&Int64Array>, sign: i64) -> Result<()> {
        let rows = self
            .converter
            .convert_columns(std::slice::from_ref(array))?;
        for i in 0..array.len() {
            if array.is_null(i) && !self.keep_nulls {
                continue;
            }
            let n = sign * counts.map_or(1, |c| c.value(i));
            let key = rows.row(i).as_ref().to_vec();
            match self.values.get_mut(&key) {
                Some(entry) => entry.1 += n,
                None => {
                    self.values
                        .insert(key.clone(), (ScalarValue::try_from_array(array, i)?, n));
                }
            }
            if self.values.get(&key).is_some_and(|e| e.1 <= 0) {
                self.values.remove(&key);
            }
        }
        Ok(())
    }
}

impl Accumulator for RetractableMinMax {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], None, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], None, -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.count_distinct {
            return Ok(ScalarValue::Int64(Some(self.values.len() as i64)));
        }
        let extreme = if self.max {
            self.values.values().next_back()
        } else {
            self.values.values().next()
        };
        match extreme {
            Some((v, _)) => Ok(v.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .values
                .iter()
                .map(|(k, (v, _))| k.len() + v.size())
                .sum::<usize>()
    }

    /// The distinct values and their counts, as two lists.
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self.values.values().map(|(v, _)| v.clone()).collect();
        let counts: Vec<ScalarValue> = self
            .values
            .values()
            .map(|(_, n)| ScalarValue::Int64(Some(*n)))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &self.data_type)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int64)),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (values, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            let v = values.value(i);
            let c = counts.value(i);
            self.add(&v, Some(c.as_primitive::<Int64Type>()), 1)?;
        }
        Ok(())
    }
}

/// Any other aggregate over DISTINCT values of one column (`SUM(DISTINCT
/// x)`, `AVG(DISTINCT x)`, `array_agg(DISTINCT x)`, `string_agg(DISTINCT
/// x, ',')` with a constant delimiter, ...) where rows are
/// taken back: the values' multiset (as for COUNT(DISTINCT)), and at each
/// evaluation the aggregate itself over the distinct values that remain,
/// so the answer is the batch query's to the bit.
pub struct RetractableDistinct {
    values: RetractableMinMax,
    aggregate: Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>,
}

impl std::fmt::Debug for RetractableDistinct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RetractableDistinct({})", self.aggregate.name())
    }
}

impl RetractableDistinct {
    pub fn new(
        aggregate: Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>,
        input: DataType,
    ) -> Result<RetractableDistinct> {
        Ok(RetractableDistinct {
            values: RetractableMinMax {
                keep_nulls: true,
                ..RetractableMinMax::count_distinct(input)?
            },
            aggregate,
        })
    }
}

impl Accumulator for RetractableDistinct {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values.update_batch(values)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let mut fresh = self.aggregate.create_accumulator()?;
        let n = self.values.values.len();
        if n > 0 {
            let distinct =
                ScalarValue::iter_to_array(self.values.values.values().map(|(v, _)| v.clone()))?;
            // The arguments, then the ORDER BY values: the DISTINCT column,
            // or a constant (string_agg's delimiter); PostgreSQL allows no
            // other ORDER BY with DISTINCT.
            let column = |e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>, first: bool| match e
                .downcast_ref::<datafusion::physical_expr::expressions::Literal>()
            {
                Some(literal) => literal.value().to_array_of_size(n),
                None if first => Ok(distinct.clone()),
                None => Err(datafusion::error::DataFusionError::NotImplemented(format!(
                    "{} over DISTINCT values with another argument that is not a constant",
                    self.aggregate.name()
                ))),
            };
            let mut arguments = vec![distinct.clone()];
            for e in self.aggregate.expressions().iter().skip(1) {
                arguments.push(column(e, false)?);
            }
            for o in self.aggregate.order_bys() {
                arguments.push(column(&o.expr, true)?);
            }
            fresh.update_batch(&arguments)?;
        }
        fresh.evaluate()
    }

    fn size(&self) -> usize {
        self.values.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.values.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.values.merge_batch(states)
    }
}

/// The version of each key of a keyed table that a view has applied, as
/// row bytes of the view's source rows, so that the next version or a
/// tombstone can take it back.
pub struct PreviousVersions {
    converter: RowConverter,
    rows: HashMap<Box<[u8]>, Box<[u8]>>,
}

impl PreviousVersions {
    pub fn new(schema: &arrow::datatypes::Schema) -> Result<PreviousVersions> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(PreviousVersions {
            converter: RowConverter::new(fields)?,
            rows: HashMap::new(),
        })
    }

    pub fn encode(&self, batch: &arrow::record_batch::RecordBatch) -> Result<Rows> {
        Ok(self.converter.convert_columns(batch.columns())?)
    }

    /// Records `row` as the key's version; returns the one it replaces.
    pub fn replace(&mut self, key: &[u8], row: Option<&[u8]>) -> Option<Box<[u8]>> {
        match row {
            Some(r) => self.rows.insert(Box::from(key), Box::from(r)),
            None => self.rows.remove(key),
        }
    }

    /// Rows (as written by [`PreviousVersions::encode`]) back as a batch.
    pub fn decode(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        rows: &[Box<[u8]>],
    ) -> Result<arrow::record_batch::RecordBatch> {
        let parser = self.converter.parser();
        let columns = self
            .converter
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        Ok(arrow::record_batch::RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }
}

/// A view's reading of a keyed table: which records add rows, and which
/// earlier versions they (or tombstones) take back.
pub struct KeyedVersions {
    def: sluice_catalog::TableDef,
    codec: crate::log::keyed::KeyCodec,
    versions: PreviousVersions,
    /// A table keyed by row, read without `_ingested_at`: a tombstone
    /// holds the deleted row's values, so the row it takes back is the
    /// tombstone itself at the row's position, and no version is held.
    positional: bool,
    /// The table's partitions, where a tombstone's row is looked up.
    partitions: Vec<Arc<crate::log::PartitionLog>>,
}

impl KeyedVersions {
    /// Starts at `consumed`: the latest version of each key below it is
    /// what the view has applied (after a restore from a checkpoint).
    pub async fn start(
        table: &crate::log::TableLog,
        schema: &arrow::datatypes::SchemaRef,
        projection: &[usize],
        consumed: &[u64],
    ) -> std::result::Result<KeyedVersions, crate::error::SluiceError> {
        use crate::log::keyed::{latest_records, KeyCodec};
        let def = table.def().clone();
        let codec = KeyCodec::new(&def)?;
        let mut versions = PreviousVersions::new(schema)?;
        let positional = def.options.keyed_by_row
            && schema
                .column_with_name(sluice_catalog::HIDDEN_COLUMNS[2])
                .is_none_or(|(i, _)| !projection.contains(&i));
        for (k, part) in table.partitions().iter().enumerate() {
            if positional {
                break;
            }
            let end = consumed.get(k).copied().unwrap_or(0);
            if end == 0 {
                continue;
            }
            let latest = latest_records(&def, &codec, part, end).await?;
            for group in latest.live.chunk_by(|a, b| a.0 == b.0) {
                let (meta, raw) = &latest.frames[group[0].0];
                let rows = crate::query::project_frame(
                    raw,
                    meta,
                    k as i32,
                    projection,
                    def.columns.len(),
                    schema,
                )?;
                let keys = codec.keys(raw)?;
                let encoded = versions.encode(&rows)?;
                for &(_, i) in group {
                    versions.replace(keys.row(i).as_ref(), Some(encoded.row(i).as_ref()));
                }
            }
        }
        Ok(KeyedVersions {
            def: sluice_catalog::TableDef::clone(&def),
            codec,
            versions,
            positional,
            partitions: table.partitions().to_vec(),
        })
    }

    /// [`KeyedVersions::split`] of a table keyed by row, positionally:
    /// each tombstone, with the position of the row it deletes, is the row
    /// taken back.
    ///
    /// A tombstone whose row compaction has removed takes nothing back:
    /// compaction removes a row only below what every view has read, so a
    /// view reading the tombstone now read a hole where the row was.
    async fn split_positional(
        &mut self,
        raw: &arrow::record_batch::RecordBatch,
        rows: &arrow::record_batch::RecordBatch,
        skip: usize,
        gone: &mut Vec<Box<[u8]>>,
    ) -> std::result::Result<arrow::record_batch::RecordBatch, crate::error::SluiceError> {
        use crate::log::keyed::{deleted_flags, record_kind};
        let deleted = deleted_flags(&self.def, raw);
        let position_of = raw
            .column(self.def.columns.len() + 1)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .ok_or_else(|| {
                crate::error::SluiceError::Internal("a row position is not a bigint".into())
            })?;
        let mut keep = Vec::new();
        let mut tombs = Vec::new();
        let mut frames: HashMap<(usize, u64), arrow::record_batch::RecordBatch> = HashMap::new();
        for i in skip..rows.num_rows() {
            match record_kind(deleted, i) {
                Some(false) => keep.push(i as u32),
                Some(true) => {
                    let position = position_of.value(i);
                    let p = sluice_catalog::row_partition(position);
                    let offset = (position & ((1 << 48) - 1)) as u64;
                    let Some(part) = self.partitions.get(p) else {
                        continue;
                    };
                    let Some(meta) = part.frames_in_range(offset, offset + 1).into_iter().next()
                    else {
                        continue;
                    };
                    let base = meta.header.base_offset;
                    let frame = match frames.get(&(p, base)) {
                        Some(f) => f.clone(),
                        None => {
                            let f = part.read_frame(&meta).await?;
                            frames.insert((p, base), f.clone());
                            f
                        }
                    };
                    let at = offset.saturating_sub(base) as usize;
                    let present = at < frame.num_rows()
                        && record_kind(deleted_flags(&self.def, &frame), at) == Some(false);
                    if present {
                        tombs.push(i as u32);
                    }
                }
                None => {}
            }
        }
        if !tombs.is_empty() {
            let tombs = arrow::array::UInt32Array::from(tombs);
            let taken = arrow::compute::take_record_batch(rows, &tombs)?;
            let positions = arrow::compute::take(
                raw.column(self.def.columns.len() + 1).as_ref(),
                &tombs,
                None,
            )?;
            let positions = positions
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .ok_or_else(|| {
                    crate::error::SluiceError::Internal("a row position is not a bigint".into())
                })?;
            let mut columns = taken.columns().to_vec();
            let schema = taken.schema();
            if let Ok(p) = schema.index_of(sluice_catalog::HIDDEN_COLUMNS[0]) {
                columns[p] = Arc::new(arrow::array::Int32Array::from_iter_values(
                    positions.values().iter().map(|&v| (v >> 48) as i32),
                ));
            }
            if let Ok(o) = schema.index_of(sluice_catalog::HIDDEN_COLUMNS[1]) {
                columns[o] = Arc::new(arrow::array::Int64Array::from_iter_values(
                    positions.values().iter().map(|&v| v & ((1 << 48) - 1)),
                ));
            }
            let taken = arrow::record_batch::RecordBatch::try_new(schema, columns)?;
            let encoded = self.versions.encode(&taken)?;
            gone.extend(encoded.iter().map(|r| Box::<[u8]>::from(r.as_ref())));
        }
        Ok(arrow::compute::take_record_batch(
            rows,
            &arrow::array::UInt32Array::from(keep),
        )?)
    }

    /// For the records of a frame from row `skip` on: the rows they add
    /// (upserts), and the earlier versions they take back (of upserted and
    /// deleted keys). Holes compaction left are skipped.
    pub async fn split(
        &mut self,
        raw: &arrow::record_batch::RecordBatch,
        rows: &arrow::record_batch::RecordBatch,
        skip: usize,
        gone: &mut Vec<Box<[u8]>>,
    ) -> std::result::Result<arrow::record_batch::RecordBatch, crate::error::SluiceError> {
        use crate::log::keyed::{deleted_flags, record_kind};
        if self.positional {
            return self.split_positional(raw, rows, skip, gone).await;
        }
        // Only the rows from `skip` on are encoded; indices below are shifted.
        let tail = rows.slice(
            skip.min(rows.num_rows()),
            rows.num_rows().saturating_sub(skip),
        );
        let keys = self.codec.keys(raw)?;
        let encoded = self.versions.encode(&tail)?;
        let deleted = deleted_flags(&self.def, raw);
        let mut keep = Vec::new();
        for i in skip..rows.num_rows() {
            let Some(tomb) = record_kind(deleted, i) else {
                continue;
            };
            let row = (!tomb).then(|| encoded.row(i - skip));
            if let Some(old) = self
                .versions
                .replace(keys.row(i).as_ref(), row.as_ref().map(|r| r.as_ref()))
            {
                gone.push(old);
            }
            if !tomb {
                keep.push(i as u32);
            }
        }
        Ok(arrow::compute::take_record_batch(
            rows,
            &arrow::array::UInt32Array::from(keep),
        )?)
    }

    /// Earlier versions collected by [`KeyedVersions::split`] as rows.
    pub fn rows(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        gone: &[Box<[u8]>],
    ) -> Result<arrow::record_batch::RecordBatch> {
        self.versions.decode(schema, gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn min_and_max_survive_deleting_the_extreme() {
        let mut max = RetractableMinMax::new(true, DataType::Int64).unwrap();
        let v: ArrayRef = Arc::new(Int64Array::from(vec![5, 9, 7, 9]));
        max.update_batch(&[v]).unwrap();
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(9)));
        max.retract_batch(&[Arc::new(Int64Array::from(vec![9])) as ArrayRef])
            .unwrap();
        assert_eq!(
            max.evaluate().unwrap(),
            ScalarValue::Int64(Some(9)),
            "9 was there twice"
        );
        max.retract_batch(&[Arc::new(Int64Array::from(vec![9])) as ArrayRef])
            .unwrap();
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(7)));
        // The state round-trips through merge.
        let state: Vec<ArrayRef> = max
            .state()
            .unwrap()
            .into_iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut copy = RetractableMinMax::new(true, DataType::Int64).unwrap();
        copy.merge_batch(&state).unwrap();
        copy.retract_batch(&[Arc::new(Int64Array::from(vec![7])) as ArrayRef])
            .unwrap();
        assert_eq!(copy.evaluate().unwrap(), ScalarValue::Int64(Some(5)));
        copy.retract_batch(&[Arc::new(Int64Array::from(vec![5])) as ArrayRef])
            .unwrap();
        assert_eq!(copy.evaluate().unwrap(), ScalarValue::Int64(None));
    }
}
