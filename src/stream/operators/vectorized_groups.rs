//! The groups of an aggregate over rows that are never taken back, kept much as
//! DataFusion's hash aggregation keeps them: the keys interned in one hash
//! table ([`GroupKeyTable`], group indices over the key columns), and
//! each aggregate one column of state indexed by group. A delta costs one
//! hash probe per row and one pass per aggregate, with no allocation per
//! group.
//!
//! State: the key table (which holds the key columns in group order), and
//! per aggregate a [`SharedColumn`] (COUNT, SUM, MIN and MAX of integer,
//! date and time types, and SUM of doubles) or else DataFusion's
//! [`GroupsAccumulator`]. A view's published rows share the key columns
//! and the shared columns, which are copied only when a group changes
//! while a reader holds them. DataFusion's accumulators hand their state
//! out only by taking it: reading the groups (a view's rows, a checkpoint)
//! merges it back into a fresh accumulator and evaluates another copy. The
//! hash table is not touched. Checkpoints write the key columns and each
//! aggregate's state columns, the same columns the per-group accumulators
//! of a retracting aggregate write, so either reads the other's
//! checkpoint.
//!
//! Watermark: nothing here; the aggregate decides which groups close and
//! [`VectorizedGroups::split`] drops them in one pass (the groups that stay
//! are interned again).

use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute;
use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::group_table::GroupKeyTable;
use super::shared_column::{first_column, shared_column, SharedColumn};
use crate::error::SluiceError;

/// Groups' keys and accumulator states, as columns in group order.
pub(crate) struct GroupColumns {
    pub keys: Vec<ArrayRef>,
    /// Per aggregate, its state columns.
    pub states: Vec<Vec<ArrayRef>>,
}

impl GroupColumns {
    pub fn len(&self) -> usize {
        self.keys.first().map(|k| k.len()).unwrap_or(0)
    }
}

pub(crate) struct VectorizedGroups {
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
    accumulators: Vec<GroupAccumulator>,
}

/// One aggregate over the groups: a column shared with readers (COUNT,
/// SUM, MIN, MAX of the types [`shared_column`] takes), or DataFusion's.
enum GroupAccumulator {
    Shared(Box<dyn SharedColumn>),
    DataFusion(Box<dyn GroupsAccumulator>),
}

impl GroupAccumulator {
    fn new(agg: &AggregateFunctionExpr) -> Result<GroupAccumulator, SluiceError> {
        Ok(match shared_column(agg) {
            Some(column) => GroupAccumulator::Shared(column),
            None => GroupAccumulator::DataFusion(agg.create_groups_accumulator()?),
        })
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError> {
        match self {
            GroupAccumulator::Shared(c) => c.update(args, group_ids, total),
            GroupAccumulator::DataFusion(a) => Ok(a.update_batch(args, group_ids, None, total)?),
        }
    }

    fn merge(
        &mut self,
        states: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError> {
        match self {
            GroupAccumulator::Shared(c) => c.merge(states, group_ids, total),
            GroupAccumulator::DataFusion(a) => Ok(a.merge_batch(states, group_ids, total)?),
        }
    }

    fn size(&self) -> usize {
        match self {
            GroupAccumulator::Shared(c) => c.size(),
            GroupAccumulator::DataFusion(a) => a.size(),
        }
    }

    /// Every group's state, for an accumulator about to be dropped
    /// (DataFusion's is left empty).
    fn take_state(&mut self) -> Result<Vec<ArrayRef>, SluiceError> {
        match self {
            GroupAccumulator::Shared(c) => Ok(vec![c.values()]),
            GroupAccumulator::DataFusion(a) => Ok(a.state(EmitTo::All)?),
        }
    }

    /// Every group's state and value, leaving the groups as they were
    /// (`n` of them). DataFusion hands its state out only by taking it, so
    /// its accumulator is built again from a copy and the value evaluated
    /// from another.
    fn read(
        &mut self,
        agg: &AggregateFunctionExpr,
        n: usize,
    ) -> Result<(Vec<ArrayRef>, ArrayRef), SluiceError> {
        let live = match self {
            GroupAccumulator::Shared(c) => {
                let values = c.values();
                return Ok((vec![values.clone()], values));
            }
            GroupAccumulator::DataFusion(a) => a,
        };
        let ids: Vec<usize> = (0..n).collect();
        let state = live.state(EmitTo::All)?;
        let mut rebuilt = agg.create_groups_accumulator()?;
        let mut reader = agg.create_groups_accumulator()?;
        if n > 0 {
            rebuilt.merge_batch(&state, &ids, n)?;
            reader.merge_batch(&state, &ids, n)?;
        }
        *live = rebuilt;
        Ok((state, reader.evaluate(EmitTo::All)?))
    }
}

impl VectorizedGroups {
    /// Groups keyed by columns of `key_schema`, or None when some aggregate
    /// has no vectorized accumulator (DISTINCT, ordered, or a function
    /// DataFusion keeps per group).
    pub fn try_new(
        key_schema: SchemaRef,
        aggs: &[Arc<AggregateFunctionExpr>],
    ) -> Result<Option<VectorizedGroups>, SluiceError> {
        // first_value's and last_value's group state fails to read with no
        // groups (DataFusion builds it from an empty iterator); their
        // accumulators per group have no such gap.
        let vectorizable = |a: &Arc<AggregateFunctionExpr>| {
            a.groups_accumulator_supported()
                && !matches!(a.fun().name(), "first_value" | "last_value")
        };
        if key_schema.fields().is_empty() || !aggs.iter().all(vectorizable) {
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

    /// Time spent copying columns that readers held, since the last call:
    /// a change after a publish pays for what the publish shared.
    pub fn take_copy_time(&mut self) -> std::time::Duration {
        self.tables()
            .accumulators
            .iter_mut()
            .map(|a| match a {
                GroupAccumulator::Shared(c) => c.take_copy_time(),
                GroupAccumulator::DataFusion(_) => std::time::Duration::ZERO,
            })
            .sum()
    }

    /// The key table's pieces grow to `bytes`.
    #[cfg(test)]
    pub fn set_piece_bytes(&mut self, bytes: usize) {
        self.tables().values.set_piece_bytes(bytes);
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
            acc.update(args, &self.group_ids, total)?;
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
            acc.merge(states, &self.group_ids, total)?;
        }
        Ok(())
    }

    /// Every group's keys and states, and each aggregate's value, piece by
    /// piece as the key table holds the keys (the states and values are
    /// slices of whole columns); the groups stay as they were.
    pub fn read(&mut self) -> Result<Vec<(GroupColumns, Vec<ArrayRef>)>, SluiceError> {
        let n = self.len();
        let VectorizedGroups { tables, aggs, .. } = self;
        let tables = tables.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut states = Vec::with_capacity(aggs.len());
        let mut values = Vec::with_capacity(aggs.len());
        for (acc, agg) in tables.accumulators.iter_mut().zip(aggs.iter()) {
            let (state, value) = acc.read(agg, n)?;
            states.push(state);
            values.push(value);
        }
        Ok(tables
            .values
            .key_pieces()
            .into_iter()
            .map(|(start, keys)| {
                let len = keys.first().map_or(0, |k| k.len());
                let slice = |c: &ArrayRef| c.slice(start, len);
                let states = states
                    .iter()
                    .map(|s| s.iter().map(slice).collect())
                    .collect();
                (
                    GroupColumns { keys, states },
                    values.iter().map(slice).collect(),
                )
            })
            .collect())
    }

    /// Each aggregate's value for the given groups' states (in their order).
    pub fn evaluate(&self, groups: &GroupColumns) -> Result<Vec<ArrayRef>, SluiceError> {
        let n = groups.len();
        let ids: Vec<usize> = (0..n).collect();
        // Which aggregates keep a shared column, whose state is its value.
        let shared: Vec<bool> = self
            .locked()
            .accumulators
            .iter()
            .map(|a| matches!(a, GroupAccumulator::Shared(_)))
            .collect();
        let mut values = Vec::with_capacity(self.aggs.len());
        for ((a, states), shared) in self.aggs.iter().zip(&groups.states).zip(shared) {
            if shared {
                values.push(first_column(states)?.clone());
                continue;
            }
            let mut acc = a.create_groups_accumulator()?;
            if n > 0 {
                acc.merge_batch(states, &ids, n)?;
            }
            values.push(acc.evaluate(EmitTo::All)?);
        }
        Ok(values)
    }

    /// Removes the groups that `gone` (given the key columns of a piece of
    /// the groups) marks and returns them; the others stay.
    pub fn split(
        &mut self,
        mut gone: impl FnMut(&[ArrayRef]) -> Result<BooleanArray, SluiceError>,
    ) -> Result<GroupColumns, SluiceError> {
        let pieces = self.tables().values.key_pieces();
        let marks = pieces
            .iter()
            .map(|(_, keys)| gone(keys))
            .collect::<Result<Vec<_>, _>>()?;
        if marks.iter().all(|m| m.true_count() == 0) {
            return Ok(GroupColumns {
                keys: self.tables().values.empty_keys(),
                states: Vec::new(),
            });
        }
        let fresh = new_accumulators(&self.aggs)?;
        let tables = self.tables();
        let states = tables
            .accumulators
            .iter_mut()
            .map(GroupAccumulator::take_state)
            .collect::<Result<Vec<_>, _>>()?;
        tables.accumulators = fresh;
        // Emptied, and every group that stays made again, piece by piece
        // (one column of them all might pass what an Arrow array holds).
        tables.values.clear();
        let take = |c: &ArrayRef, rows: &UInt32Array| compute::take(c.as_ref(), rows, None);
        let (mut taken_places, mut taken) = (Vec::new(), Vec::new());
        for (p, ((start, keys), mark)) in pieces.iter().zip(&marks).enumerate() {
            let (mut kept_here, mut kept) = (Vec::new(), Vec::new());
            for i in 0..mark.len() {
                match mark.value(i) {
                    true => {
                        taken_places.push((p, i));
                        taken.push((start + i) as u32);
                    }
                    false => {
                        kept_here.push(i as u32);
                        kept.push((start + i) as u32);
                    }
                }
            }
            let (kept_here, kept) = (UInt32Array::from(kept_here), UInt32Array::from(kept));
            self.load(&GroupColumns {
                keys: keys
                    .iter()
                    .map(|k| take(k, &kept_here))
                    .collect::<Result<_, _>>()?,
                states: states
                    .iter()
                    .map(|s| s.iter().map(|c| take(c, &kept)).collect())
                    .collect::<Result<_, _>>()?,
            })?;
        }
        let taken = UInt32Array::from(taken);
        let key_columns = pieces.first().map_or(0, |(_, keys)| keys.len());
        Ok(GroupColumns {
            keys: (0..key_columns)
                .map(|c| {
                    let columns: Vec<&dyn Array> =
                        pieces.iter().map(|(_, k)| k[c].as_ref()).collect();
                    compute::interleave(&columns, &taken_places)
                })
                .collect::<Result<_, _>>()?,
            states: states
                .iter()
                .map(|s| s.iter().map(|c| take(c, &taken)).collect())
                .collect::<Result<_, _>>()?,
        })
    }
}

fn new_accumulators(
    aggs: &[Arc<AggregateFunctionExpr>],
) -> Result<Vec<GroupAccumulator>, SluiceError> {
    aggs.iter().map(|a| GroupAccumulator::new(a)).collect()
}
