//! Rows grouped by PARTITION BY values and ordered within each group by
//! ORDER BY values: the state of the Top-N and over-window operators.
//!
//! Each group (the arrow-row bytes of its PARTITION BY values) holds its
//! rows ordered by the ORDER BY values' arrow-row bytes, then by the row's
//! own bytes (so that ties have one definite order), each with how many
//! copies it has. Checkpointed as every held row with its count.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::operator::Delta;
use crate::error::SluiceError;

/// Arrow-row bytes.
pub type Bytes = Box<[u8]>;

/// A group's rows in order: (order bytes, row bytes) to copies.
pub type Ranked = BTreeMap<(Bytes, Bytes), u64>;

/// Output rows as bytes, each with a number (0 where rows are not
/// numbered), one entry per copy.
pub type OutputRows = Vec<(Bytes, u64)>;

/// What a delta changed in an operator's output: rows gone, rows come.
#[derive(Default)]
pub struct Changed {
    pub gone: OutputRows,
    pub came: OutputRows,
    /// Input rows the delta held.
    pub rows_in: u64,
}

impl Changed {
    /// These changes as a delta, the rows built from their bytes by `rows`.
    pub fn delta(
        &self,
        rows: impl Fn(&[(Bytes, u64)]) -> Result<RecordBatch, SluiceError>,
    ) -> Result<Delta, SluiceError> {
        let mut out = Delta::default();
        if !self.gone.is_empty() {
            out.retract.push(rows(&self.gone)?);
        }
        if !self.came.is_empty() {
            out.insert.push(rows(&self.came)?);
        }
        Ok(out)
    }
}

/// A row's group, place in its group's order, and whole bytes.
pub struct Keyed {
    pub group: Bytes,
    pub order: Bytes,
    pub row: Bytes,
}

pub struct RankedGroups {
    input: SchemaRef,
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    group_rows: RowConverter,
    order_rows: RowConverter,
    whole_rows: RowConverter,
    groups: HashMap<Bytes, Ranked, ahash::RandomState>,
    held: u64,
}

impl RankedGroups {
    pub fn new(
        input: SchemaRef,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    ) -> Result<RankedGroups, SluiceError> {
        let group_fields = partition_by
            .iter()
            .map(|e| e.data_type(&input).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        let order_fields = order_by
            .iter()
            .map(|(e, o)| {
                e.data_type(&input)
                    .map(|t| SortField::new_with_options(t, *o))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let whole_fields = input
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(RankedGroups {
            group_rows: RowConverter::new(group_fields)?,
            order_rows: RowConverter::new(order_fields)?,
            whole_rows: RowConverter::new(whole_fields)?,
            input,
            partition_by,
            order_by,
            groups: HashMap::default(),
            held: 0,
        })
    }

    /// The ORDER BY values' bytes for each row of `columns` (one column per
    /// ORDER BY expression), as the groups order rows by them.
    pub fn order_bytes(&self, columns: &[ArrayRef]) -> Result<Vec<Bytes>, SluiceError> {
        let rows = self.order_rows.convert_columns(columns)?;
        Ok(rows.iter().map(|r| Box::from(r.as_ref())).collect())
    }

    /// Rows held, copies counted.
    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn group(&self, group: &[u8]) -> Option<&Ranked> {
        self.groups.get(group)
    }

    /// Every group with its rows, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Ranked)> {
        self.groups.iter()
    }

    /// Each row of `batch` with its group, order and whole bytes.
    pub fn keyed(&self, batch: &RecordBatch) -> Result<Vec<Keyed>, SluiceError> {
        let n = batch.num_rows();
        let evaluate = |e: &Arc<dyn PhysicalExpr>| -> Result<ArrayRef, SluiceError> {
            Ok(e.evaluate(batch)?.into_array(n)?)
        };
        let group_columns = self
            .partition_by
            .iter()
            .map(evaluate)
            .collect::<Result<Vec<_>, _>>()?;
        let order_columns = self
            .order_by
            .iter()
            .map(|(e, _)| evaluate(e))
            .collect::<Result<Vec<_>, _>>()?;
        // No PARTITION BY (or no ORDER BY): one empty key for every row;
        // arrow-row has no rows to give for no columns.
        let key_bytes =
            |converter: &RowConverter, columns: &[ArrayRef]| -> Result<Vec<Bytes>, SluiceError> {
                if columns.is_empty() {
                    return Ok(vec![Box::from(&[][..]); n]);
                }
                let rows = converter.convert_columns(columns)?;
                Ok((0..n).map(|i| Box::from(rows.row(i).as_ref())).collect())
            };
        let groups = key_bytes(&self.group_rows, &group_columns)?;
        let orders = key_bytes(&self.order_rows, &order_columns)?;
        let wholes = key_bytes(&self.whole_rows, batch.columns())?;
        Ok(groups
            .into_iter()
            .zip(orders)
            .zip(wholes)
            .map(|((group, order), row)| Keyed { group, order, row })
            .collect())
    }

    pub fn add(&mut self, k: Keyed, copies: u64) {
        *self
            .groups
            .entry(k.group)
            .or_default()
            .entry((k.order, k.row))
            .or_default() += copies;
        self.held += copies;
    }

    /// Takes one copy of a row out; `what` names the operator in the error
    /// when the row is not held.
    pub fn take(&mut self, k: Keyed, what: &str) -> Result<(), SluiceError> {
        let missing =
            || SluiceError::Internal(format!("a {what}'s input took back a row it never gave"));
        let ranked = self.groups.get_mut(&k.group).ok_or_else(missing)?;
        let key = (k.order, k.row);
        let copies = ranked.get_mut(&key).ok_or_else(missing)?;
        *copies -= 1;
        if *copies == 0 {
            ranked.remove(&key);
        }
        if ranked.is_empty() {
            self.groups.remove(&k.group);
        }
        self.held -= 1;
        Ok(())
    }

    /// Applies a delta: `output` gives a group's output rows, and is asked
    /// for each group the delta touches before and after it; `after` then
    /// runs on each such group (a Top-N trims it). `what` names the
    /// operator in errors.
    pub fn apply_delta(
        &mut self,
        delta: &Delta,
        what: &str,
        output: impl Fn(&RankedGroups, &[u8]) -> Result<OutputRows, SluiceError>,
        mut after: impl FnMut(&mut RankedGroups, &[u8]),
    ) -> Result<Changed, SluiceError> {
        let mut changed = Changed::default();
        let (mut inserted, mut retracted) = (Vec::new(), Vec::new());
        for (batches, into) in [
            (&delta.insert, &mut inserted),
            (&delta.retract, &mut retracted),
        ] {
            for b in batches.iter().filter(|b| b.num_rows() > 0) {
                changed.rows_in += b.num_rows() as u64;
                into.extend(self.keyed(b)?);
            }
        }
        let mut before: HashMap<Bytes, OutputRows> = HashMap::new();
        for k in inserted.iter().chain(&retracted) {
            if !before.contains_key(&k.group) {
                before.insert(k.group.clone(), output(self, &k.group)?);
            }
        }
        // Inserts first: a delta may take back a row it also inserts (a
        // join's new row paired with a value that changes in the same
        // delta, the pair with the old value then taken back).
        for k in inserted {
            self.add(k, 1);
        }
        for k in retracted {
            self.take(k, what)?;
        }
        for (group, old) in before {
            let new = output(self, &group)?;
            after(self, &group);
            changed.gone.extend(minus(&old, &new));
            changed.came.extend(minus(&new, &old));
        }
        Ok(changed)
    }

    /// Keeps a group's first `kept` rows in its order (copies counted),
    /// and with `ties` the rows whose ORDER BY values equal the last one's.
    pub fn truncate(&mut self, group: &[u8], kept: u64, ties: bool) {
        let Some(ranked) = self.groups.get_mut(group) else {
            return;
        };
        let mut seen = 0u64;
        let mut cut = None;
        let mut last: Option<Bytes> = None;
        for (key, copies) in ranked.iter_mut() {
            let room = kept.saturating_sub(seen);
            if room == 0 && ties && last.as_ref() == Some(&key.0) {
                continue;
            }
            if room == 0 {
                cut = Some(key.clone());
                break;
            }
            last = Some(key.0.clone());
            // Copies of one row tie with each other.
            if !ties && *copies > room {
                self.held -= *copies - room;
                *copies = room;
            }
            seen += *copies;
        }
        if let Some(cut) = cut {
            let gone = ranked.split_off(&cut);
            self.held -= gone.values().sum::<u64>();
        }
    }

    /// Rows back out of their whole bytes, as columns of the input.
    pub fn columns<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a Bytes>,
    ) -> Result<Vec<ArrayRef>, SluiceError> {
        let parser = self.whole_rows.parser();
        Ok(self
            .whole_rows
            .convert_rows(rows.into_iter().map(|r| parser.parse(r)))?)
    }

    /// Every held row with its count (a `copies` column after the input's).
    pub fn snapshot(&self) -> Result<RecordBatch, SluiceError> {
        let mut rows = Vec::with_capacity(self.held as usize);
        let mut copies = Vec::with_capacity(self.held as usize);
        for ranked in self.groups.values() {
            for ((_, row), n) in ranked {
                rows.push(row);
                copies.push(*n);
            }
        }
        let mut columns = self.columns(rows)?;
        columns.push(Arc::new(UInt64Array::from(copies)));
        let mut fields = self.input.fields().to_vec();
        fields.push(Arc::new(Field::new("copies", DataType::UInt64, false)));
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?)
    }

    /// The operator's checkpoint when these groups are all its state: one
    /// part.
    pub fn state_parts(&self) -> Result<Vec<super::operator::StatePart>, SluiceError> {
        Ok(vec![vec![self.snapshot()?]])
    }

    /// Restores part `part` of [`RankedGroups::state_parts`]; `what` names
    /// the operator in errors.
    pub fn restore_part(
        &mut self,
        part: usize,
        rows: &[RecordBatch],
        what: &str,
    ) -> Result<(), SluiceError> {
        if part != 0 {
            return Err(SluiceError::Internal(format!(
                "a {what} has no part {part}"
            )));
        }
        self.restore(rows, what)
    }

    /// Adds back the rows of batches [`RankedGroups::snapshot`] wrote.
    pub fn restore(&mut self, rows: &[RecordBatch], what: &str) -> Result<(), SluiceError> {
        let width = self.input.fields().len();
        for batch in rows {
            let copies = batch
                .columns()
                .get(width)
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                .filter(|_| batch.num_columns() == width + 1)
                .ok_or_else(|| {
                    SluiceError::Internal(format!(
                        "the checkpoint's {what} state has unexpected columns"
                    ))
                })?
                .clone();
            let rows = batch.project(&(0..width).collect::<Vec<_>>())?;
            for (i, k) in self.keyed(&rows)?.into_iter().enumerate() {
                self.add(k, copies.value(i));
            }
        }
        Ok(())
    }

    /// Bytes the keys and rows take.
    pub fn state_bytes(&self) -> u64 {
        self.groups
            .iter()
            .map(|(g, r)| {
                g.len() as u64
                    + r.keys()
                        .map(|(o, w)| (o.len() + w.len() + 24) as u64)
                        .sum::<u64>()
            })
            .sum()
    }
}

/// What is in `a` and not in `b`, copies counted.
pub fn minus(a: &[(Bytes, u64)], b: &[(Bytes, u64)]) -> OutputRows {
    let mut left: HashMap<&(Bytes, u64), usize, ahash::RandomState> =
        HashMap::with_capacity_and_hasher(b.len(), ahash::RandomState::default());
    for r in b {
        *left.entry(r).or_default() += 1;
    }
    a.iter()
        .filter(|r| match left.get_mut(r) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}
