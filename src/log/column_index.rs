//! A table's secondary index (`CREATE INDEX`): for each value of the
//! indexed columns, the places (partition, offset) of the records that
//! hold it, ordered by value, so that a read filtered by equality on the
//! leading columns or by a range of the first one reads only the frames
//! holding those records.
//!
//! State: in memory only (the catalog keeps the definition). Values are
//! kept in arrow's row format, whose byte order is the values' order, so
//! one ordered map answers equalities, prefixes and ranges. It is built
//! from the log by `CREATE INDEX` (after a restart, by the first read that
//! uses it) and catches up with the log at each read, from the offsets it
//! covers to the reader's snapshot. Frames are immutable once visible, so
//! a read never waits for the writer. A place whose record compaction,
//! retention or erasure removed leads nowhere: its frame is gone or the
//! row no longer matches, and the filter above the scan, which still runs,
//! drops it. NULLs are not indexed: no comparison matches them.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use sluice_catalog::TableDef;

use super::error::LogError;
use super::keyed::{deleted_flags, record_kind};
use super::TableLog;

/// Byte ranges of encoded index keys (arrow's row format of the indexed
/// columns, or of a leading part of them).
pub type KeyRanges = Vec<(Bound<Vec<u8>>, Bound<Vec<u8>>)>;

pub struct ColumnIndex {
    pub name: String,
    /// The indexed columns' positions among the table's columns.
    columns: Vec<usize>,
    types: Vec<DataType>,
    state: tokio::sync::Mutex<Option<IndexState>>,
    /// Reads that used the index.
    scans: AtomicU64,
}

struct IndexState {
    converter: RowConverter,
    /// Each partition's offset below which every record is indexed.
    covered: Vec<u64>,
    places: BTreeMap<Box<[u8]>, Vec<(u32, u64)>>,
    entries: u64,
}

/// What `sluice_catalog.indexes` shows of an index.
#[derive(Debug, Clone, Default)]
pub struct IndexStats {
    /// Whether it is built (it is after CREATE INDEX, and after a restart
    /// once a read used it).
    pub built: bool,
    pub entries: u64,
    pub scans: u64,
}

impl ColumnIndex {
    /// The index `name` of `def` on the named columns.
    pub fn new(name: &str, def: &TableDef, columns: &[String]) -> Result<ColumnIndex, LogError> {
        let mut positions = Vec::with_capacity(columns.len());
        for c in columns {
            let Some(i) = def.columns.iter().position(|d| &d.name == c) else {
                return Err(LogError::UndefinedColumn {
                    table: def.name.clone(),
                    column: c.clone(),
                });
            };
            positions.push(i);
        }
        let types = positions
            .iter()
            .map(|&i| def.columns[i].ty.to_arrow())
            .collect();
        Ok(ColumnIndex {
            name: name.to_string(),
            columns: positions,
            types,
            state: tokio::sync::Mutex::new(None),
            scans: AtomicU64::new(0),
        })
    }

    /// The indexed columns' positions among the table's columns.
    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    pub fn stats(&self) -> IndexStats {
        let (built, entries) = match self.state.try_lock() {
            Ok(s) => (s.is_some(), s.as_ref().map(|s| s.entries).unwrap_or(0)),
            // Being built or caught up just now.
            Err(_) => (true, 0),
        };
        IndexStats {
            built,
            entries,
            scans: self.scans.load(Ordering::Relaxed),
        }
    }

    /// Indexes every record of `table` below `ends`.
    pub async fn build(&self, table: &TableLog, ends: &[u64]) -> Result<(), LogError> {
        let mut state = self.state.lock().await;
        self.catch_up(&mut state, table, ends).await
    }

    /// The offsets, per partition and in order, of the records below
    /// `ends` whose indexed values fall in `ranges` (and perhaps of some
    /// that no longer do).
    pub async fn places(
        &self,
        table: &TableLog,
        ends: &[u64],
        ranges: &KeyRanges,
    ) -> Result<Vec<Vec<u64>>, LogError> {
        let mut state = self.state.lock().await;
        self.catch_up(&mut state, table, ends).await?;
        self.scans.fetch_add(1, Ordering::Relaxed);
        let mut out = vec![Vec::new(); ends.len()];
        let Some(state) = state.as_ref() else {
            return Ok(out);
        };
        for (lo, hi) in ranges {
            if empty_range(lo, hi) {
                continue;
            }
            let range = (borrowed(lo), borrowed(hi));
            for (_, places) in state.places.range::<[u8], _>(range) {
                for &(p, offset) in places {
                    if ends.get(p as usize).is_some_and(|&end| offset < end) {
                        out[p as usize].push(offset);
                    }
                }
            }
        }
        for offsets in &mut out {
            offsets.sort_unstable();
            offsets.dedup();
        }
        Ok(out)
    }

    /// Indexes the records from what the index covers up to `ends`.
    async fn catch_up(
        &self,
        state: &mut Option<IndexState>,
        table: &TableLog,
        ends: &[u64],
    ) -> Result<(), LogError> {
        if state.is_none() {
            *state = Some(IndexState {
                converter: RowConverter::new(
                    self.types.iter().cloned().map(SortField::new).collect(),
                )?,
                covered: vec![0; table.partitions().len()],
                places: BTreeMap::new(),
                entries: 0,
            });
        }
        let Some(s) = state.as_mut() else {
            return Ok(());
        };
        let def = table.def();
        for (p, part) in table.partitions().iter().enumerate() {
            let (from, to) = (s.covered[p], ends.get(p).copied().unwrap_or(0));
            if to <= from {
                continue;
            }
            for meta in part.frames_in_range(from, to) {
                let batch = part.read_frame(&meta).await?;
                let base = meta.header.base_offset;
                let keys: Vec<ArrayRef> = self
                    .columns
                    .iter()
                    .map(|&c| batch.column(c).clone())
                    .collect();
                let rows = s.converter.convert_columns(&keys)?;
                let deleted = deleted_flags(&def, &batch);
                let erased = part.erased_mask(base, batch.num_rows());
                for i in 0..batch.num_rows() {
                    let offset = base + i as u64;
                    if offset < from || offset >= to || erased.as_ref().is_some_and(|e| !e.value(i))
                    {
                        continue;
                    }
                    // Tombstones and holes hold no values; NULL matches nothing.
                    if record_kind(deleted, i) != Some(false) || keys.iter().any(|k| k.is_null(i)) {
                        continue;
                    }
                    s.places
                        .entry(Box::from(rows.row(i).as_ref()))
                        .or_default()
                        .push((p as u32, offset));
                    s.entries += 1;
                }
                // Frame by frame: a read that fails part way (an
                // unreadable segment) leaves no record noted twice.
                s.covered[p] = meta.end_offset().min(to);
            }
            s.covered[p] = to;
        }
        Ok(())
    }
}

/// A bound as the ordered maps' `range` takes it.
pub fn borrowed(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A range no key can fall in (BTreeMap::range panics on one whose start
/// is above its end).
pub fn empty_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}
