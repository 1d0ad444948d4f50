//! Keyed tables: compacted logs where each record upserts its primary key
//! and a tombstone (a key with `_deleted` set) deletes it. The latest
//! record of a key decides; every version of a key is in one partition.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute;
use arrow::row::{RowConverter, Rows, SortField};
use sluice_catalog::TableDef;

use super::error::LogError;
use super::partition::{FrameMeta, PartitionLog};

/// Turns the primary key columns of stored records into comparable bytes.
pub struct KeyCodec {
    indices: Vec<usize>,
    converter: RowConverter,
}

impl KeyCodec {
    pub fn new(def: &TableDef) -> Result<KeyCodec, LogError> {
        if def.options.keyed_by_row {
            // The position column, after the tombstone flag.
            return Ok(KeyCodec {
                indices: vec![def.columns.len() + 1],
                converter: RowConverter::new(vec![SortField::new(
                    arrow::datatypes::DataType::Int64,
                )])?,
            });
        }
        let indices = def.primary_key_indices();
        let fields = indices
            .iter()
            .map(|&i| SortField::new(def.columns[i].ty.to_arrow()))
            .collect();
        Ok(KeyCodec {
            indices,
            converter: RowConverter::new(fields)?,
        })
    }

    /// For a table keyed by row: whether the stored record at `i` is a row
    /// not yet written (no position yet), which no other record names.
    pub fn is_unwritten(&self, batch: &RecordBatch, i: usize) -> bool {
        self.indices.len() == 1
            && batch
                .schema()
                .field(self.indices[0])
                .name()
                .eq(sluice_catalog::ROW_COLUMN)
            && batch.column(self.indices[0]).is_null(i)
    }

    /// The key of one row given as its key columns' values, in the
    /// order of the primary key.
    pub fn encode(&self, columns: Vec<ArrayRef>) -> Result<Rows, LogError> {
        Ok(self.converter.convert_columns(&columns)?)
    }

    /// The keys of a batch whose first columns are the table's columns.
    pub fn keys(&self, batch: &RecordBatch) -> Result<Rows, LogError> {
        let columns: Vec<ArrayRef> = self
            .indices
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        Ok(self.converter.convert_columns(&columns)?)
    }
}

/// The tombstone flags of stored records (the column after the table's).
pub fn deleted_flags<'a>(def: &TableDef, batch: &'a RecordBatch) -> Option<&'a BooleanArray> {
    deleted_flags_at(batch, def.columns.len())
}

/// [`deleted_flags`] of a table of `columns` columns.
pub fn deleted_flags_at(batch: &RecordBatch, columns: usize) -> Option<&BooleanArray> {
    batch
        .columns()
        .get(columns)
        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
}

/// What the record at `i` is: `Some(true)` a tombstone, `Some(false)` an
/// upsert, `None` a hole that compaction left in place of a record.
pub fn record_kind(deleted: Option<&BooleanArray>, i: usize) -> Option<bool> {
    match deleted {
        Some(d) if d.is_null(i) => None,
        Some(d) => Some(d.value(i)),
        None => Some(false),
    }
}

/// A partition's records read for their latest versions: each frame with
/// its rows, and which row holds the latest record of each key.
pub struct LatestRecords {
    pub frames: Vec<(FrameMeta, RecordBatch)>,
    /// `(frame, row)` of the latest live record of each key, in offset
    /// order.
    pub live: Vec<(usize, usize)>,
    /// `(frame, row)` of the latest record of each key that is a
    /// tombstone.
    pub tombstones_at: Vec<(usize, usize)>,
    /// Rows that are holes compaction left.
    pub holes: u64,
}

/// A live key's bytes and the offset of its latest record.
pub type LiveKey = (Box<[u8]>, u64);

impl LatestRecords {
    /// Each live key (its bytes) with the offset of its latest record.
    pub fn live_keys(&self, codec: &KeyCodec) -> Result<Vec<LiveKey>, LogError> {
        let mut out = Vec::with_capacity(self.live.len());
        for group in self.live.chunk_by(|a, b| a.0 == b.0) {
            let (meta, batch) = &self.frames[group[0].0];
            let keys = codec.keys(batch)?;
            for &(_, i) in group {
                out.push((
                    Box::from(keys.row(i).as_ref()),
                    meta.header.base_offset + i as u64,
                ));
            }
        }
        Ok(out)
    }
}

/// Reads the committed records of a partition below `end` and picks the
/// latest record of each key.
pub async fn latest_records(
    def: &TableDef,
    codec: &KeyCodec,
    part: &PartitionLog,
    end: u64,
) -> Result<LatestRecords, LogError> {
    if def.options.keyed_by_row {
        return latest_rows(def, part, end).await;
    }
    let mut frames = Vec::new();
    let mut latest: HashMap<Box<[u8]>, (usize, usize, bool)> = HashMap::new();
    let mut holes = 0u64;
    for meta in part.frames_in_range(0, end) {
        let batch = part.read_frame(&meta).await?;
        let n = (end.saturating_sub(meta.header.base_offset) as usize).min(batch.num_rows());
        let batch = batch.slice(0, n);
        let keys = codec.keys(&batch)?;
        let deleted = deleted_flags(def, &batch);
        let f = frames.len();
        for (i, key) in keys.iter().enumerate() {
            // A NULL flag marks a hole compaction left: no record.
            let Some(tomb) = record_kind(deleted, i) else {
                holes += 1;
                continue;
            };
            latest.insert(Box::from(key.as_ref()), (f, i, tomb));
        }
        frames.push((meta, batch));
    }
    let mut live = Vec::with_capacity(latest.len());
    let mut tombstones_at = Vec::new();
    for (f, i, tomb) in latest.into_values() {
        if tomb {
            tombstones_at.push((f, i));
        } else {
            live.push((f, i));
        }
    }
    live.sort_unstable();
    Ok(LatestRecords {
        frames,
        live,
        tombstones_at,
        holes,
    })
}

/// [`latest_records`] of a table keyed by row, without a map of every
/// key: a row has at most two records, itself and a later tombstone, so
/// only the tombstones are held while the rows are read.
async fn latest_rows(
    def: &TableDef,
    part: &PartitionLog,
    end: u64,
) -> Result<LatestRecords, LogError> {
    let at = def.columns.len() + 1;
    let mut frames = Vec::new();
    let mut tombstones: HashMap<i64, (usize, usize)> = HashMap::new();
    let mut holes = 0u64;
    for meta in part.frames_in_range(0, end) {
        let batch = part.read_frame(&meta).await?;
        let n = (end.saturating_sub(meta.header.base_offset) as usize).min(batch.num_rows());
        let batch = batch.slice(0, n);
        let deleted = deleted_flags(def, &batch);
        let positions = positions(&batch, at)?;
        let f = frames.len();
        for i in 0..n {
            match record_kind(deleted, i) {
                None => holes += 1,
                Some(true) => {
                    tombstones.insert(positions.value(i), (f, i));
                }
                Some(false) => {}
            }
        }
        frames.push((meta, batch));
    }
    let mut live = Vec::new();
    for (f, (_, batch)) in frames.iter().enumerate() {
        let deleted = deleted_flags(def, batch);
        let positions = positions(batch, at)?;
        for i in 0..batch.num_rows() {
            if record_kind(deleted, i) == Some(false)
                && !tombstones.contains_key(&positions.value(i))
            {
                live.push((f, i));
            }
        }
    }
    let mut tombstones_at: Vec<(usize, usize)> = tombstones.into_values().collect();
    tombstones_at.sort_unstable();
    Ok(LatestRecords {
        frames,
        live,
        tombstones_at,
        holes,
    })
}

/// The position column of a stored batch of a table keyed by row.
fn positions(batch: &RecordBatch, at: usize) -> Result<&arrow::array::Int64Array, LogError> {
    batch
        .columns()
        .get(at)
        .and_then(|c| c.as_any().downcast_ref::<arrow::array::Int64Array>())
        .ok_or_else(|| {
            LogError::Arrow(arrow::error::ArrowError::SchemaError(
                "a record of a table keyed by row has no position".into(),
            ))
        })
}

/// Keys in their comparable form.
pub type KeySet = std::collections::HashSet<Box<[u8]>>;

/// A transaction's staged records of a keyed table, as its own reads see
/// them: the keys it wrote (whose committed versions it hides), and the
/// latest of its records per key that is not a tombstone, in write order.
pub fn staged_latest(
    def: &TableDef,
    codec: &KeyCodec,
    staged: &[RecordBatch],
) -> Result<(KeySet, Option<RecordBatch>), LogError> {
    let mut latest: HashMap<Box<[u8]>, (usize, usize, bool)> = HashMap::new();
    // Rows of a table keyed by row that are not written yet: each its
    // own key, live.
    let mut unwritten = Vec::new();
    for (b, batch) in staged.iter().enumerate() {
        let keys = codec.keys(batch)?;
        let deleted = deleted_flags(def, batch);
        for (i, key) in keys.iter().enumerate() {
            if codec.is_unwritten(batch, i) {
                unwritten.push((b, i));
            } else if let Some(tomb) = record_kind(deleted, i) {
                latest.insert(Box::from(key.as_ref()), (b, i, tomb));
            }
        }
    }
    let mut live: Vec<(usize, usize)> = latest
        .values()
        .filter(|(_, _, tomb)| !tomb)
        .map(|&(b, i, _)| (b, i))
        .chain(unwritten)
        .collect();
    live.sort_unstable();
    let rows = match live.is_empty() {
        true => None,
        false => {
            let refs: Vec<&RecordBatch> = staged.iter().collect();
            Some(compute::interleave_record_batch(&refs, &live)?)
        }
    };
    Ok((latest.into_keys().collect(), rows))
}

/// Which keys of a keyed table are live, kept up to date by every append
/// once built (for `INSERT ... ON CONFLICT DO NOTHING`).
#[derive(Default)]
pub struct KeyIndex {
    live: HashMap<Box<[u8]>, bool>,
}

impl KeyIndex {
    pub async fn build(
        def: &TableDef,
        codec: &KeyCodec,
        parts: &[Arc<PartitionLog>],
    ) -> Result<KeyIndex, LogError> {
        let mut index = KeyIndex::default();
        for part in parts {
            let end = part.end_offset();
            let latest = latest_records(def, codec, part, end).await?;
            for (key, _) in latest.live_keys(codec)? {
                index.live.insert(key, true);
            }
        }
        Ok(index)
    }

    /// Whether the key is live, when the index has seen it at all.
    pub fn get(&self, key: &[u8]) -> Option<bool> {
        self.live.get(key).copied()
    }

    pub fn is_live(&self, key: &[u8]) -> bool {
        self.live.get(key).copied().unwrap_or(false)
    }

    /// Takes in appended records, in log order.
    pub fn note(
        &mut self,
        def: &TableDef,
        codec: &KeyCodec,
        batch: &RecordBatch,
    ) -> Result<(), LogError> {
        let keys = codec.keys(batch)?;
        let deleted = deleted_flags(def, batch);
        for (i, key) in keys.iter().enumerate() {
            if let Some(tomb) = record_kind(deleted, i) {
                self.live.insert(Box::from(key.as_ref()), !tomb);
            }
        }
        Ok(())
    }
}

/// Where the latest live record of each key of a keyed table is
/// (partition, offset), for reads of one row by its key. Built from the
/// log by the first such read, then kept by the table's writer: it notes
/// each commit's frames as they become visible, before the commit's ends
/// are published, so a read finds every acknowledged write.
pub struct LatestLocations {
    codec: KeyCodec,
    /// The table's column count: the tombstone flag follows them.
    columns: usize,
    by_key: parking_lot::RwLock<Option<KeyLocations>>,
    frames: parking_lot::Mutex<FrameCache>,
}

/// Each live key's latest record: (partition, offset).
pub type KeyLocations = HashMap<Box<[u8]>, (u32, u64)>;

impl LatestLocations {
    pub fn new(def: &TableDef) -> Result<LatestLocations, LogError> {
        Ok(LatestLocations {
            codec: KeyCodec::new(def)?,
            columns: def.columns.len(),
            by_key: parking_lot::RwLock::new(None),
            frames: parking_lot::Mutex::new(FrameCache::default()),
        })
    }

    /// The decoded frame of partition `partition` at `base`, if a read by
    /// key read it lately.
    pub fn cached_frame(&self, partition: u32, base: u64) -> Option<RecordBatch> {
        self.frames.lock().get((partition, base))
    }

    pub fn cache_frame(&self, partition: u32, base: u64, frame: RecordBatch) {
        self.frames.lock().put((partition, base), frame)
    }

    pub fn forget_frame(&self, partition: u32, base: u64) {
        self.frames.lock().remove((partition, base))
    }

    pub fn codec(&self) -> &KeyCodec {
        &self.codec
    }

    pub fn is_built(&self) -> bool {
        self.by_key.read().is_some()
    }

    /// Puts in the locations read from the log (no write may run
    /// meanwhile: the caller holds the table's key lock).
    pub fn install(&self, by_key: KeyLocations) {
        *self.by_key.write() = Some(by_key);
    }

    /// `Some(None)`: the key has no live record; `None`: not built.
    pub fn get(&self, key: &[u8]) -> Option<Option<(u32, u64)>> {
        self.by_key.read().as_ref().map(|m| m.get(key).copied())
    }

    /// Of `found` (partition, offset, key), the records that are their
    /// key's latest, as offsets per partition (of `partitions`); None when
    /// the locations are not built or `consistent` (asked under the lock
    /// the writer publishes commits under) says they describe another
    /// commit than the reader's.
    pub fn latest_of(
        &self,
        consistent: impl FnOnce() -> bool,
        found: &[(u32, u64, Box<[u8]>)],
        partitions: usize,
    ) -> Option<Vec<Vec<u64>>> {
        let guard = self.by_key.read();
        let map = guard.as_ref()?;
        if !consistent() {
            return None;
        }
        let mut out = vec![Vec::new(); partitions];
        for (p, offset, key) in found {
            if map.get(key) == Some(&(*p, *offset)) {
                out[*p as usize].push(*offset);
            }
        }
        Some(out)
    }

    /// Notes frames that are becoming visible (partition, base offset,
    /// records), then runs `publish` (which publishes the commit's ends)
    /// under the same lock, so that no read sees the one without the
    /// other. A frame whose keys cannot be read drops the locations
    /// (the next read builds them again) rather than leave them wrong.
    /// Drops the locations (the next point read builds them again from
    /// the log), then calls `publish`, under the lock readers take.
    pub fn forget_then<T>(&self, publish: impl FnOnce() -> T) -> T {
        let mut guard = self.by_key.write();
        *guard = None;
        publish()
    }

    pub fn note_then<T>(
        &self,
        frames: &[(usize, u64, &RecordBatch)],
        publish: impl FnOnce() -> T,
    ) -> T {
        let mut guard = self.by_key.write();
        if let Some(map) = guard.as_mut() {
            let noted: Result<(), LogError> = frames.iter().try_for_each(|(p, base, batch)| {
                let keys = self.codec.keys(batch)?;
                let deleted = deleted_flags_at(batch, self.columns);
                for (i, key) in keys.iter().enumerate() {
                    match record_kind(deleted, i) {
                        Some(false) => {
                            map.insert(Box::from(key.as_ref()), (*p as u32, base + i as u64));
                        }
                        Some(true) => {
                            map.remove(key.as_ref());
                        }
                        None => {}
                    }
                }
                Ok(())
            });
            if noted.is_err() {
                *guard = None;
            }
        }
        publish()
    }
}

/// For a table keyed by row: which rows its tombstones delete, per
/// partition (the row's offset, and the tombstone's), so a scan streams
/// the table's frames and leaves those rows out rather than holding
/// every record to find each key's latest. Built from the log by the
/// first scan (under the key lock, so no write commits meanwhile), then
/// kept by the writer, which notes a commit's tombstones before it
/// publishes the commit's ends.
#[derive(Default)]
pub struct RowTombstones {
    by_partition: parking_lot::RwLock<Option<Vec<HashMap<u64, u64>>>>,
}

impl RowTombstones {
    pub fn is_built(&self) -> bool {
        self.by_partition.read().is_some()
    }

    pub fn install(&self, by_partition: Vec<HashMap<u64, u64>>) {
        *self.by_partition.write() = Some(by_partition);
    }

    /// The offsets of partition `partition`'s rows deleted by tombstones
    /// below `end`; None when not built.
    pub fn deleted_below(&self, partition: usize, end: u64) -> Option<HashSet<u64>> {
        let guard = self.by_partition.read();
        let map = guard.as_ref()?.get(partition)?;
        Some(
            map.iter()
                .filter(|(_, &tombstone)| tombstone < end)
                .map(|(&row, _)| row)
                .collect(),
        )
    }

    /// Whether `records` (stored, not yet written; `columns`: the table's
    /// column count) delete a row already deleted, or one row twice: then
    /// another statement changed the row after this one read it. Built.
    pub fn deletes_a_deleted_row(&self, columns: usize, records: &[RecordBatch]) -> bool {
        let guard = self.by_partition.read();
        let Some(map) = guard.as_ref() else {
            return false;
        };
        let mut seen = HashSet::new();
        for batch in records {
            let deleted = deleted_flags_at(batch, columns);
            let Ok(positions) = positions(batch, columns + 1) else {
                continue;
            };
            for i in 0..batch.num_rows() {
                if record_kind(deleted, i) != Some(true) || !positions.is_valid(i) {
                    continue;
                }
                let position = positions.value(i);
                let partition = sluice_catalog::row_partition(position);
                let row = (position & ((1 << 48) - 1)) as u64;
                if map.get(partition).is_some_and(|m| m.contains_key(&row))
                    || !seen.insert(position)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Notes the tombstones among frames becoming visible (partition,
    /// base offset, stored records; `columns`: the table's column count).
    pub fn note(&self, columns: usize, frames: &[(usize, u64, &RecordBatch)]) {
        let mut guard = self.by_partition.write();
        let Some(map) = guard.as_mut() else {
            return;
        };
        for (p, base, batch) in frames {
            note_tombstones(map, columns, *p, *base, batch);
        }
    }
}

/// Adds the tombstones of one stored frame of a table keyed by row to
/// `map` (row offset -> tombstone offset, per partition).
pub fn note_tombstones(
    map: &mut [HashMap<u64, u64>],
    columns: usize,
    partition: usize,
    base: u64,
    batch: &RecordBatch,
) {
    let deleted = deleted_flags_at(batch, columns);
    let Ok(positions) = positions(batch, columns + 1) else {
        return;
    };
    for i in 0..batch.num_rows() {
        if record_kind(deleted, i) == Some(true) && positions.is_valid(i) {
            let position = positions.value(i);
            let row_partition = sluice_catalog::row_partition(position);
            let row = (position & ((1 << 48) - 1)) as u64;
            // A tombstone is written to its row's partition.
            if row_partition == partition {
                if let Some(m) = map.get_mut(partition) {
                    m.insert(row, base + i as u64);
                }
            }
        }
    }
}

/// Decoded frames that reads by key found their records in, the most
/// recently used kept up to a byte budget: a read of a key whose frame is
/// here costs a look-up, not a frame read, checked and decoded (a frame
/// of a bulk load holds thousands of records).
#[derive(Default)]
struct FrameCache {
    frames: HashMap<(u32, u64), (RecordBatch, u64)>,
    /// Least recently used first: use tick -> frame.
    order: std::collections::BTreeMap<u64, (u32, u64)>,
    bytes: usize,
    tick: u64,
}

/// The frame cache's budget per keyed table.
const FRAME_CACHE_BYTES: usize = 64 << 20;

impl FrameCache {
    fn get(&mut self, at: (u32, u64)) -> Option<RecordBatch> {
        self.tick += 1;
        let (frame, used) = self.frames.get_mut(&at)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, at);
        Some(frame.clone())
    }

    fn put(&mut self, at: (u32, u64), frame: RecordBatch) {
        let size = frame.get_array_memory_size();
        if size > FRAME_CACHE_BYTES / 4 {
            return;
        }
        self.remove(at);
        self.tick += 1;
        self.bytes += size;
        self.frames.insert(at, (frame, self.tick));
        self.order.insert(self.tick, at);
        while self.bytes > FRAME_CACHE_BYTES {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((f, _)) = self.frames.remove(&oldest) {
                self.bytes -= f.get_array_memory_size();
            }
        }
    }

    fn remove(&mut self, at: (u32, u64)) {
        if let Some((f, used)) = self.frames.remove(&at) {
            self.order.remove(&used);
            self.bytes -= f.get_array_memory_size();
        }
    }
}

/// Adds the `_deleted` column (false: upserts) to batches of the table's
/// columns; stored batches pass through.
pub fn as_stored(def: &TableDef, batch: &RecordBatch) -> Result<RecordBatch, LogError> {
    if !def.is_keyed() || batch.num_columns() > def.columns.len() {
        return Ok(batch.clone());
    }
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(BooleanArray::from(vec![false; batch.num_rows()])));
    if def.options.keyed_by_row {
        // New rows: their positions are filled in as they are written.
        columns.push(arrow::array::new_null_array(
            &arrow::datatypes::DataType::Int64,
            batch.num_rows(),
        ));
    }
    Ok(RecordBatch::try_new(def.stored_schema(), columns)?)
}

/// For a table keyed by row: tombstones of the rows in `rows` (the table's
/// columns, then the rows' `_partition` and `_offset`), each keeping the
/// deleted row's values, so a change stream says what was deleted.
pub fn row_tombstones(def: &TableDef, rows: &RecordBatch) -> Result<RecordBatch, LogError> {
    let n = rows.num_rows();
    let schema = def.stored_schema();
    let missing = |name: &str| {
        LogError::Arrow(arrow::error::ArrowError::SchemaError(format!(
            "the rows to delete have no column {name}"
        )))
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(def.columns.len() + 2);
    for (c, field) in def.columns.iter().zip(schema.fields()) {
        let a = rows
            .column_by_name(&c.name)
            .ok_or_else(|| missing(&c.name))?;
        columns.push(compute::cast(a, field.data_type())?);
    }
    let partition = rows
        .column_by_name(sluice_catalog::HIDDEN_COLUMNS[0])
        .and_then(|a| a.as_any().downcast_ref::<arrow::array::Int32Array>())
        .ok_or_else(|| missing(sluice_catalog::HIDDEN_COLUMNS[0]))?;
    let offset = rows
        .column_by_name(sluice_catalog::HIDDEN_COLUMNS[1])
        .and_then(|a| a.as_any().downcast_ref::<arrow::array::Int64Array>())
        .ok_or_else(|| missing(sluice_catalog::HIDDEN_COLUMNS[1]))?;
    if partition.null_count() > 0 || offset.null_count() > 0 {
        return Err(LogError::UncommittedRowChange {
            table: def.name.clone(),
        });
    }
    let positions: arrow::array::Int64Array = partition
        .values()
        .iter()
        .zip(offset.values())
        .map(|(&p, &o)| Some(sluice_catalog::row_position(p as u32, o as u64)))
        .collect();
    columns.push(Arc::new(BooleanArray::from(vec![true; n])));
    columns.push(Arc::new(positions));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// For a table keyed by row: the stored batch written at `base` of
/// `partition`, with each new row's position filled in (a tombstone keeps
/// the position of the row it deletes).
/// `at`: the position column, for a table keyed by row.
pub fn with_row_positions(
    at: Option<usize>,
    partition: usize,
    base: u64,
    batch: &RecordBatch,
) -> Result<RecordBatch, LogError> {
    let Some(at) = at.filter(|&at| at < batch.num_columns() && batch.column(at).null_count() > 0)
    else {
        return Ok(batch.clone());
    };
    let given = batch
        .column(at)
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .ok_or_else(|| {
            LogError::Arrow(arrow::error::ArrowError::SchemaError(
                "a row position is not a bigint".into(),
            ))
        })?;
    let filled: arrow::array::Int64Array = (0..batch.num_rows())
        .map(|i| match given.is_null(i) {
            true => Some(sluice_catalog::row_position(
                partition as u32,
                base + i as u64,
            )),
            false => Some(given.value(i)),
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[at] = Arc::new(filled);
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Tombstones for the keys in `keys` (a batch of the table's columns, or
/// of its key columns by name): the key, NULL elsewhere, `_deleted` true.
pub fn tombstones(def: &TableDef, keys: &RecordBatch) -> Result<RecordBatch, LogError> {
    let n = keys.num_rows();
    let schema = def.stored_schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(def.columns.len() + 1);
    for c in &def.columns {
        let ty = c.ty.to_arrow();
        columns.push(match keys.column_by_name(&c.name) {
            Some(a) if def.options.primary_key.contains(&c.name) => compute::cast(a, &ty)?,
            _ => arrow::array::new_null_array(&ty, n),
        });
    }
    columns.push(Arc::new(BooleanArray::from(vec![true; n])));
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod frame_cache_tests {
    use super::*;
    use arrow::array::Int64Array;

    /// A frame of about 10 MB.
    fn frame(v: i64) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from(vec![v; 1_250_000])) as ArrayRef,
        )])
        .unwrap()
    }

    #[test]
    fn keeps_the_most_recently_used_frames_within_its_budget() {
        let mut cache = FrameCache::default();
        for base in 0..6 {
            cache.put((0, base), frame(base as i64));
        }
        // Frame 0 used again: frame 1 is now the least recently used.
        assert!(cache.get((0, 0)).is_some());
        cache.put((0, 6), frame(6));
        cache.put((0, 7), frame(7));
        assert!(cache.bytes <= FRAME_CACHE_BYTES);
        assert!(cache.get((0, 0)).is_some(), "used lately, kept");
        assert!(cache.get((0, 1)).is_none(), "least recently used, dropped");
        assert!(cache.get((0, 7)).is_some());
        cache.remove((0, 7));
        assert!(cache.get((0, 7)).is_none());
        assert_eq!(cache.frames.len(), cache.order.len());
        let held: usize = cache
            .frames
            .values()
            .map(|(f, _)| f.get_array_memory_size())
            .sum();
        assert_eq!(held, cache.bytes);
    }
}
