//! The group keys of an aggregate over rows that are never taken back, each
//! kept once: every group's key in Arrow's row format, one after another
//! in group order, 32 bits of its hash, and a hash table of group indices
//! (4 bytes a bucket, plus hashbrown's one control byte). A group is its
//! index. Rows are hashed by column, as DataFusion's hash aggregation
//! hashes them; the stored 32 bits place a group again when the table
//! grows, without reading its key.
//!
//! This replaces DataFusion's `GroupValues` for the aggregate's groups:
//! its table for a text key keeps a 32-byte entry per bucket, about 70
//! bytes a group at 2M groups, where this one keeps about 14.
//!
//! State: the keys, the hashes and the table; nothing of its own is checkpointed (the
//! aggregate writes the key columns). Watermark: nothing here; a window's
//! groups are dropped by [`GroupKeyTable::clear`] and the groups that stay
//! interned again.

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::hash_utils::{create_hashes, RandomState};
use hashbrown::HashTable;

use crate::error::SluiceError;

pub(super) struct GroupKeyTable {
    converter: RowConverter,
    /// Every group's key, in group order.
    keys: Rows,
    /// The low 32 bits of every group's hash, in group order.
    hashes: Vec<u32>,
    /// Group indices, placed by [`spread`] of their hash.
    table: HashTable<u32>,
    random_state: RandomState,
    /// The rows of the last batch interned and their hashes (kept to reuse
    /// their space).
    scratch: Rows,
    scratch_hashes: Vec<u64>,
}

/// The table's 64-bit hash of a group's 32: hashbrown places a group by the
/// low bits and tags it with the top seven, which the multiply fills.
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl GroupKeyTable {
    /// A table for keys of the columns of `key_schema`; an error when the
    /// row format has no encoding for some column's type.
    pub fn try_new(key_schema: &SchemaRef) -> Result<GroupKeyTable, SluiceError> {
        let converter = RowConverter::new(
            key_schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(GroupKeyTable {
            keys: converter.empty_rows(0, 0),
            scratch: converter.empty_rows(0, 0),
            converter,
            hashes: Vec::new(),
            table: HashTable::new(),
            // A seed of its own, so that keys chosen to collide on one
            // server do not collide on the next.
            random_state: RandomState::with_seed(std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                0u8,
            )),
            scratch_hashes: Vec::new(),
        })
    }

    pub fn len(&self) -> usize {
        self.keys.num_rows()
    }

    /// Bytes held: the keys' row bytes and offsets, their hashes, the
    /// table's buckets and control bytes, and the scratch rows.
    pub fn size(&self) -> usize {
        self.keys.size()
            + self.hashes.capacity() * std::mem::size_of::<u32>()
            + self.table.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.scratch.size()
            + self.scratch_hashes.capacity() * std::mem::size_of::<u64>()
    }

    /// The group of each row of `keys` into `group_ids`, making a group for
    /// each key not seen before (numbered on from the last).
    pub fn intern(
        &mut self,
        keys: &[ArrayRef],
        group_ids: &mut Vec<usize>,
    ) -> Result<(), SluiceError> {
        let GroupKeyTable {
            converter,
            keys: stored,
            hashes,
            table,
            random_state,
            scratch,
            scratch_hashes,
        } = self;
        scratch.clear();
        converter.append(scratch, keys)?;
        scratch_hashes.clear();
        scratch_hashes.resize(scratch.num_rows(), 0);
        create_hashes(keys, random_state, scratch_hashes)?;
        group_ids.clear();
        group_ids.reserve(scratch.num_rows());
        for (row, &full) in scratch.iter().zip(scratch_hashes.iter()) {
            let bytes = row.as_ref();
            let hash = full as u32;
            let found = table.find(spread(hash), |&g| {
                hashes[g as usize] == hash && stored.row(g as usize).as_ref() == bytes
            });
            let group = match found {
                Some(&g) => g,
                None => {
                    let g = u32::try_from(stored.num_rows()).map_err(|_| {
                        SluiceError::Internal("an aggregate holds 2^32 groups".into())
                    })?;
                    stored.push(row);
                    hashes.push(hash);
                    let hashes = &*hashes;
                    table.insert_unique(spread(hash), g, |&g| spread(hashes[g as usize]));
                    g
                }
            };
            group_ids.push(group as usize);
        }
        Ok(())
    }

    /// Forgets every group, giving back the table's memory.
    pub fn clear(&mut self) {
        self.keys = self.converter.empty_rows(0, 0);
        self.hashes = Vec::new();
        self.table = HashTable::new();
        self.scratch = self.converter.empty_rows(0, 0);
        self.scratch_hashes = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn equal_keys_share_a_group_across_batches_and_growth() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let mut table = GroupKeyTable::try_new(&schema).unwrap();
        let mut ids = Vec::new();
        // 10,000 distinct keys (with NULLs), twice each, in two batches:
        // the table grows many times between them.
        let text: Vec<Option<String>> = (0..10_000)
            .map(|i| (i % 7 != 0).then(|| format!("user_{i}")))
            .collect();
        // Where the text is NULL the number is not, so every key differs.
        let num: Vec<Option<i64>> = (0..10_000)
            .map(|i| (i % 7 == 0 || i % 11 != 0).then_some(i))
            .collect();
        let batch: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(text.clone())),
            Arc::new(Int64Array::from(num.clone())),
        ];
        table.intern(&batch, &mut ids).unwrap();
        assert_eq!(table.len(), 10_000);
        assert_eq!(ids, (0..10_000).collect::<Vec<_>>());
        let reversed: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(
                text.into_iter().rev().collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(num.into_iter().rev().collect::<Vec<_>>())),
        ];
        table.intern(&reversed, &mut ids).unwrap();
        assert_eq!(table.len(), 10_000);
        assert_eq!(ids, (0..10_000).rev().collect::<Vec<_>>());
        // A NULL key is one group, as GROUP BY has it.
        let nulls: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![None::<&str>, None])),
            Arc::new(Int64Array::from(vec![None, None])),
        ];
        table.intern(&nulls, &mut ids).unwrap();
        assert_eq!(ids[0], ids[1]);
        assert_eq!(table.len(), 10_001);
        table.clear();
        assert_eq!(table.len(), 0);
        table.intern(&nulls, &mut ids).unwrap();
        assert_eq!(ids, vec![0, 0]);
    }
}
