//! The group keys of an aggregate over rows that are never taken back, each
//! kept once: every group's key columns in group order (the same columns
//! the view publishes and the checkpoint writes), 32 bits of its hash, and
//! a hash table of group indices (4 bytes a bucket, plus hashbrown's one
//! control byte). A group is its index. Rows are hashed by column, as
//! DataFusion's hash aggregation hashes them, and a row is compared with a
//! group's key column by column; the stored 32 bits place a group again
//! when the table grows, without reading its key.
//!
//! This replaces DataFusion's `GroupValues` for the aggregate's groups:
//! its table for a text key keeps a 32-byte entry per bucket, about 70
//! bytes a group at 2M groups, where this one keeps about 14 beside the
//! key columns.
//!
//! The key columns grow in pieces: each batch that makes groups appends
//! one with their keys, and a piece as long as the one before it is joined
//! to it, up to 64 MiB a piece, so that there are few pieces, a key is
//! copied a few times at most as the table grows, and no column passes
//! what one Arrow array can hold. The view publishes and checkpoints its
//! groups piece by piece.
//!
//! State: the key columns, the hashes and the table; nothing of its own is
//! checkpointed (the aggregate writes the key columns). Watermark: nothing
//! here; a window's groups are dropped by [`GroupKeyTable::clear`] and the
//! groups that stay interned again.

use arrow::array::{make_comparator, new_empty_array, Array, ArrayRef, DynComparator, UInt32Array};
use arrow::compute::{self, SortOptions};
use arrow::datatypes::SchemaRef;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use hashbrown::HashTable;

use crate::error::SluiceError;

/// A piece grows by joining the ones after it up to this many bytes: an
/// Arrow text column holds at most 2 GiB, and a piece is one batch of the
/// view's published rows.
const PIECE_BYTES: usize = 64 << 20;

/// More small pieces than this after the full ones are joined whatever
/// their lengths: a row's comparison looks its group's piece up, and each
/// batch makes one comparator per piece and key column.
const MAX_SMALL_PIECES: usize = 16;

pub(crate) struct GroupKeyTable {
    schema: SchemaRef,
    /// Every group's key columns, in group order, in pieces; `starts[p]` is
    /// the first group of piece `p`.
    pieces: Vec<Vec<ArrayRef>>,
    starts: Vec<usize>,
    /// Bytes a piece grows to ([`PIECE_BYTES`]; smaller in tests).
    piece_bytes: usize,
    /// The low 32 bits of every group's hash, in group order.
    hashes: Vec<u32>,
    /// Group indices, placed by [`spread`] of their hash.
    table: HashTable<u32>,
    random_state: RandomState,
    /// The hashes of the last batch interned (kept to reuse their space),
    /// and the row where each group it made first appears.
    scratch_hashes: Vec<u64>,
    new_rows: Vec<u32>,
}

/// The table's 64-bit hash of a group's 32: hashbrown places a group by the
/// low bits and tags it with the top seven, which the multiply fills.
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// One comparator per key column, of `left`'s rows with `right`'s.
fn comparators(left: &[ArrayRef], right: &[ArrayRef]) -> Result<Vec<DynComparator>, SluiceError> {
    Ok(left
        .iter()
        .zip(right)
        .map(|(l, r)| make_comparator(l.as_ref(), r.as_ref(), SortOptions::default()))
        .collect::<Result<_, _>>()?)
}

/// Whether every column compares equal (NULL equals NULL, as GROUP BY has it).
fn equal(comparators: &[DynComparator], left: usize, right: usize) -> bool {
    comparators.iter().all(|c| c(left, right).is_eq())
}

impl GroupKeyTable {
    /// A table for keys of the columns of `key_schema`, or None when some
    /// column's type cannot be compared.
    pub fn try_new(key_schema: &SchemaRef) -> Option<GroupKeyTable> {
        let empty: Vec<ArrayRef> = key_schema
            .fields()
            .iter()
            .map(|f| new_empty_array(f.data_type()))
            .collect();
        comparators(&empty, &empty).ok()?;
        Some(GroupKeyTable {
            schema: key_schema.clone(),
            pieces: Vec::new(),
            starts: Vec::new(),
            piece_bytes: PIECE_BYTES,
            hashes: Vec::new(),
            table: HashTable::new(),
            // A seed of its own, so that keys chosen to collide on one
            // server do not collide on the next.
            random_state: RandomState::with_seed(std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                0u8,
            )),
            scratch_hashes: Vec::new(),
            new_rows: Vec::new(),
        })
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Bytes held: the key columns, their hashes, the table's buckets and
    /// control bytes, and the scratch space.
    pub fn size(&self) -> usize {
        self.pieces
            .iter()
            .flatten()
            .map(|k| k.get_array_memory_size())
            .sum::<usize>()
            + self.hashes.capacity() * std::mem::size_of::<u32>()
            + self.table.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.scratch_hashes.capacity() * std::mem::size_of::<u64>()
            + self.new_rows.capacity() * std::mem::size_of::<u32>()
    }

    /// The group of each row of `keys` into `group_ids`, making a group for
    /// each key not seen before (numbered on from the last).
    pub fn intern(
        &mut self,
        keys: &[ArrayRef],
        group_ids: &mut Vec<usize>,
    ) -> Result<(), SluiceError> {
        let n = keys.first().map(|k| k.len()).unwrap_or(0);
        let GroupKeyTable {
            pieces,
            starts,
            hashes,
            table,
            random_state,
            scratch_hashes,
            new_rows,
            ..
        } = self;
        scratch_hashes.clear();
        scratch_hashes.resize(n, 0);
        create_hashes(keys, random_state, scratch_hashes)?;
        let against: Vec<Vec<DynComparator>> = pieces
            .iter()
            .map(|piece| comparators(keys, piece))
            .collect::<Result<_, _>>()?;
        // The batch's own rows, for groups it makes.
        let own = comparators(keys, keys)?;
        let before = hashes.len();
        new_rows.clear();
        group_ids.clear();
        group_ids.reserve(n);
        for (row, &full) in scratch_hashes.iter().enumerate() {
            let hash = full as u32;
            let found = table.find(spread(hash), |&g| {
                let g = g as usize;
                if hashes[g] != hash {
                    return false;
                }
                if g >= before {
                    return equal(&own, row, new_rows[g - before] as usize);
                }
                let p = starts.partition_point(|&s| s <= g) - 1;
                equal(&against[p], row, g - starts[p])
            });
            let group = match found {
                Some(&g) => g,
                None => {
                    let g = u32::try_from(hashes.len()).map_err(|_| {
                        SluiceError::Internal("an aggregate holds 2^32 groups".into())
                    })?;
                    hashes.push(hash);
                    new_rows.push(row as u32);
                    let hashes = &*hashes;
                    table.insert_unique(spread(hash), g, |&g| spread(hashes[g as usize]));
                    g
                }
            };
            group_ids.push(group as usize);
        }
        if !new_rows.is_empty() {
            let rows = UInt32Array::from(std::mem::take(new_rows));
            self.pieces.push(
                keys.iter()
                    .map(|k| compute::take(k.as_ref(), &rows, None))
                    .collect::<Result<_, _>>()?,
            );
            self.starts.push(before);
            self.join_pieces()?;
        }
        Ok(())
    }

    /// Joins the last piece to the one before while it is as long (or
    /// while there are too many small pieces), unless together they would
    /// pass the bytes a piece grows to.
    fn join_pieces(&mut self) -> Result<(), SluiceError> {
        let rows = |p: &[ArrayRef]| p.first().map(|k| k.len()).unwrap_or(0);
        let bytes = |p: &[ArrayRef]| p.iter().map(|k| k.get_array_memory_size()).sum::<usize>();
        while self.pieces.len() >= 2 {
            let (prev, last) = (
                &self.pieces[self.pieces.len() - 2],
                &self.pieces[self.pieces.len() - 1],
            );
            if bytes(prev) + bytes(last) > self.piece_bytes {
                break;
            }
            let full = self
                .pieces
                .iter()
                .take_while(|p| bytes(p) > self.piece_bytes / 2)
                .count();
            if rows(last) < rows(prev) && self.pieces.len() - full <= MAX_SMALL_PIECES {
                break;
            }
            let joined = (0..self.schema.fields().len())
                .map(|c| compute::concat(&[prev[c].as_ref(), last[c].as_ref()]))
                .collect::<Result<Vec<_>, _>>()?;
            self.pieces.pop();
            self.starts.pop();
            if let Some(prev) = self.pieces.last_mut() {
                *prev = joined;
            }
        }
        Ok(())
    }

    /// Pieces grow to `bytes` instead of [`PIECE_BYTES`].
    #[cfg(test)]
    pub fn set_piece_bytes(&mut self, bytes: usize) {
        self.piece_bytes = bytes;
    }

    /// Key columns of no group.
    pub fn empty_keys(&self) -> Vec<ArrayRef> {
        self.schema
            .fields()
            .iter()
            .map(|f| new_empty_array(f.data_type()))
            .collect()
    }

    /// Every group's key columns, in group order, in pieces: the first
    /// group of each, and its columns.
    pub fn key_pieces(&self) -> Vec<(usize, Vec<ArrayRef>)> {
        self.starts
            .iter()
            .copied()
            .zip(self.pieces.iter().cloned())
            .collect()
    }

    /// Forgets every group, giving back the table's memory.
    pub fn clear(&mut self) {
        self.pieces = Vec::new();
        self.starts = Vec::new();
        self.hashes = Vec::new();
        self.table = HashTable::new();
        self.scratch_hashes = Vec::new();
        self.new_rows = Vec::new();
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

    #[test]
    fn keys_kept_in_pieces_read_back_in_group_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
        let mut table = GroupKeyTable::try_new(&schema).unwrap();
        // Pieces of at most 32 KiB, so that some fill up.
        table.piece_bytes = 32 << 10;
        let mut ids = Vec::new();
        // Batches of 1 to 40 rows, each with new keys and keys of every
        // earlier batch, so that rows are compared with many pieces.
        let mut made = 0usize;
        for batch in 0..600usize {
            let fresh = 1 + batch % 40;
            let rows: Vec<usize> = (made..made + fresh)
                .chain((0..made).step_by(1 + made / 7))
                .collect();
            let keys: Vec<String> = rows.iter().map(|i| format!("key {i}")).collect();
            let column: ArrayRef = Arc::new(StringArray::from(keys));
            table.intern(&[column], &mut ids).unwrap();
            assert_eq!(ids, rows, "batch {batch}");
            made += fresh;
            let sizes: Vec<usize> = table
                .pieces
                .iter()
                .map(|p| p[0].get_array_memory_size())
                .collect();
            let full = sizes.iter().take_while(|&&b| b > (16 << 10)).count();
            assert!(sizes.len() - full <= MAX_SMALL_PIECES + 1, "{sizes:?}");
            assert!(sizes.iter().all(|&b| b <= 32 << 10), "{sizes:?}");
        }
        let pieces = table.key_pieces();
        assert!(pieces.len() > 3, "{} pieces", pieces.len());
        let mut next = 0;
        for (start, columns) in pieces {
            assert_eq!(start, next);
            let keys = columns[0].as_any().downcast_ref::<StringArray>().unwrap();
            assert!((0..keys.len()).all(|i| keys.value(i) == format!("key {}", start + i)));
            next += keys.len();
        }
        assert_eq!(next, made);
    }
}
