//! The groups of an aggregate over rows that are never taken back, kept much as
//! DataFusion's hash aggregation keeps them: the keys interned in one hash
//! table ([`GroupKeyTable`], group indices over the key columns), and
//! each aggregate as one [`GroupsAccumulator`] whose state is a column
//! indexed by group. A delta costs one hash probe per row and one pass per
//! aggregate, with no allocation per group.
//!
//! State: the key table (which holds the key columns in group order; a
//! view's published rows share them), and the accumulators' columns. Reading the groups (a view's rows, a checkpoint)
//! takes each accumulator's state, which is how DataFusion hands it out,
//! merges it back into a fresh accumulator, and evaluates another copy; the
//! hash table is not touched. Checkpoints write the key columns and each
//! accumulator's `state()` columns, the same columns the per-group
//! accumulators of a retracting aggregate write, so either reads the
//! other's checkpoint.
//!
//! Watermark: nothing here; the aggregate decides which groups close and
//! [`VectorizedGroups::split`] drops them in one pass (the groups that stay
//! are interned again).

use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use arrow::compute;
use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::group_table::GroupKeyTable;
use crate::error::SluiceError;

/// Groups' keys and accumulator states, as columns in group order.
pub(super) struct GroupColumns {
    pub keys: Vec<ArrayRef>,
    /// Per aggregate, its state columns.
    pub states: Vec<Vec<ArrayRef>>,
}

impl GroupColumns {
    pub fn len(&self) -> usize {
        self.keys.first().map(|k| k.len()).unwrap_or(0)
    }

    /// The groups at `indices`, in that order.
    pub fn take(&self, indices: &UInt32Array) -> Result<GroupColumns, SluiceError> {
        let take = |c: &ArrayRef| compute::take(c.as_ref(), indices, None);
        Ok(GroupColumns {
            keys: self.keys.iter().map(take).collect::<Result<_, _>>()?,
            states: self
                .states
                .iter()
                .map(|s| s.iter().map(take).collect::<Result<_, _>>())
                .collect::<Result<_, _>>()?,
        })
    }
}

pub(super) struct VectorizedGroups {
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// Behind a lock only because DataFusion's accumulators are not `Sync`
    /// and operators are: every change has `&mut self` and takes it with
    /// `get_mut`, without locking.
    tables: Mutex<Tables>,
    /// Group index of each row of the last delta (kept to reuse its space).
    group_ids: Vec<usize>,
}

struct Tables {
    values: GroupKeyTable,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

impl VectorizedGroups {
    /// Groups keyed by columns of `key_schema`, or None when some aggregate
    /// has no vectorized accumulator (DISTINCT, ordered, or a function
    /// DataFusion keeps per group).
    pub fn try_new(
        key_schema: SchemaRef,
        aggs: &[Arc<AggregateFunctionExpr>],
    ) -> Result<Option<VectorizedGroups>, SluiceError> {
        if key_schema.fields().is_empty() || !aggs.iter().all(|a| a.groups_accumulator_supported())
        {
            return Ok(None);
        }
        let Some(values) = GroupKeyTable::try_new(&key_schema) else {
            return Ok(None);
        };
        Ok(Some(VectorizedGroups {
            tables: Mutex::new(Tables {
                values,
                accumulators: new_accumulators(aggs)?,
            }),
            aggs: aggs.to_vec(),
            group_ids: Vec::new(),
        }))
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tables(&mut self) -> &mut Tables {
        self.tables.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.locked().values.len()
    }

    /// Bytes held by the hash table, the key columns and the accumulators.
    pub fn size(&self) -> usize {
        let tables = self.locked();
        tables.values.size()
            + tables.accumulators.iter().map(|a| a.size()).sum::<usize>()
            + self.group_ids.capacity() * std::mem::size_of::<usize>()
    }

    /// Interns the rows' keys into `group_ids`; returns how many groups
    /// there are now.
    fn intern(&mut self, keys: &[ArrayRef]) -> Result<usize, SluiceError> {
        let tables = self.tables.get_mut().unwrap_or_else(|p| p.into_inner());
        tables.values.intern(keys, &mut self.group_ids)?;
        Ok(tables.values.len())
    }

    /// Feeds one delta's rows: their key columns, and each aggregate's
    /// argument columns.
    pub fn update(&mut self, keys: &[ArrayRef], args: &[Vec<ArrayRef>]) -> Result<(), SluiceError> {
        let total = self.intern(keys)?;
        let tables = self.tables.get_mut().unwrap_or_else(|p| p.into_inner());
        for (acc, args) in tables.accumulators.iter_mut().zip(args) {
            acc.update_batch(args, &self.group_ids, None, total)?;
        }
        Ok(())
    }

    /// Merges groups' states (as [`GroupColumns`] holds them) into the
    /// groups of the same keys, making the groups that do not exist.
    pub fn load(&mut self, groups: &GroupColumns) -> Result<(), SluiceError> {
        if groups.len() == 0 {
            return Ok(());
        }
        let total = self.intern(&groups.keys)?;
        let tables = self.tables.get_mut().unwrap_or_else(|p| p.into_inner());
        for (acc, states) in tables.accumulators.iter_mut().zip(&groups.states) {
            acc.merge_batch(states, &self.group_ids, total)?;
        }
        Ok(())
    }

    /// The key columns of every group, in group order.
    fn key_columns(&mut self) -> Result<Vec<ArrayRef>, SluiceError> {
        self.tables().values.key_columns()
    }

    /// Every group's keys and states, and each aggregate's value for every
    /// group; the groups stay as they were.
    pub fn read(&mut self) -> Result<(GroupColumns, Vec<ArrayRef>), SluiceError> {
        let keys = self.key_columns()?;
        let n = self.len();
        let ids: Vec<usize> = (0..n).collect();
        let fresh = new_accumulators(&self.aggs)?;
        let mut evaluating = new_accumulators(&self.aggs)?;
        let tables = self.tables();
        let mut states = Vec::with_capacity(tables.accumulators.len());
        let mut values = Vec::with_capacity(tables.accumulators.len());
        for ((live, mut acc), reader) in tables
            .accumulators
            .iter_mut()
            .zip(fresh)
            .zip(evaluating.iter_mut())
        {
            let state = live.state(EmitTo::All)?;
            if n > 0 {
                acc.merge_batch(&state, &ids, n)?;
                reader.merge_batch(&state, &ids, n)?;
            }
            *live = acc;
            values.push(reader.evaluate(EmitTo::All)?);
            states.push(state);
        }
        Ok((GroupColumns { keys, states }, values))
    }

    /// Each aggregate's value for the given groups' states (in their order).
    pub fn evaluate(&self, groups: &GroupColumns) -> Result<Vec<ArrayRef>, SluiceError> {
        let n = groups.len();
        let ids: Vec<usize> = (0..n).collect();
        let mut values = Vec::with_capacity(self.aggs.len());
        for (a, states) in self.aggs.iter().zip(&groups.states) {
            let mut acc = a.create_groups_accumulator()?;
            if n > 0 {
                acc.merge_batch(states, &ids, n)?;
            }
            values.push(acc.evaluate(EmitTo::All)?);
        }
        Ok(values)
    }

    /// Removes the groups that `gone` (given the key columns) marks and
    /// returns them; the others stay.
    pub fn split(
        &mut self,
        gone: impl FnOnce(&[ArrayRef]) -> Result<BooleanArray, SluiceError>,
    ) -> Result<GroupColumns, SluiceError> {
        let keys = self.key_columns()?;
        let gone = gone(&keys)?;
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        for i in 0..keys.first().map(|k| k.len()).unwrap_or(0) {
            match gone.value(i) {
                true => taken.push(i as u32),
                false => kept.push(i as u32),
            }
        }
        let taken = UInt32Array::from(taken);
        if taken.is_empty() {
            return Ok(GroupColumns {
                keys: keys.iter().map(|k| k.slice(0, 0)).collect(),
                states: Vec::new(),
            });
        }
        let fresh = new_accumulators(&self.aggs)?;
        let tables = self.tables();
        let states = tables
            .accumulators
            .iter_mut()
            .map(|a| a.state(EmitTo::All))
            .collect::<Result<Vec<_>, _>>()?;
        tables.accumulators = fresh;
        // Emptied, and every group that stays made again.
        tables.values.clear();
        let all = GroupColumns { keys, states };
        self.load(&all.take(&UInt32Array::from(kept))?)?;
        all.take(&taken)
    }
}

fn new_accumulators(
    aggs: &[Arc<AggregateFunctionExpr>],
) -> Result<Vec<Box<dyn GroupsAccumulator>>, SluiceError> {
    Ok(aggs
        .iter()
        .map(|a| a.create_groups_accumulator())
        .collect::<Result<Vec<_>, _>>()?)
}
