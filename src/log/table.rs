//! A table's log: its partitions, the routing of rows to partitions, and
//! the requests to its writer thread (`table_writer.rs`), which makes
//! appends durable with group commit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::array::{Array, ArrayRef, StringArray, UInt32Array};
use arrow::compute;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use sluice_catalog::TableDef;
use tokio::sync::oneshot;
use tracing::{error, warn};

use super::commit::CommitLog;
use super::error::LogError;
use super::keyed::{as_stored, latest_records, KeyCodec, KeyIndex, LatestLocations, RowTombstones};
use super::partition::PartitionLog;
use super::table_writer::{
    restore_carried_frames, AppendRequest, PrepareRequest, StreamRequest, TableWriter, Upkeep,
    WriterRequest, STREAM_PIECE_BYTES,
};
use super::watermark::{TableWatermark, WatermarkTracker};
use super::LogConfig;

/// A statement's rows, split by partition, waiting to be appended.
#[derive(Debug, Default)]
pub struct RoutedRows {
    parts: Vec<(usize, RecordBatch)>,
    rows: u64,
}

impl RoutedRows {
    /// The rows, no longer split by partition (a transaction stages them
    /// and routes them again at COMMIT).
    pub fn into_batches(self) -> Vec<RecordBatch> {
        self.parts.into_iter().map(|(_, b)| b).collect()
    }

    fn add(&mut self, parts: Vec<(usize, RecordBatch)>) {
        for (p, b) in parts {
            self.rows += b.num_rows() as u64;
            self.parts.push((p, b));
        }
    }

    /// Rows split by partition, as routed.
    pub fn from_parts(parts: Vec<(usize, RecordBatch)>) -> RoutedRows {
        let mut routed = RoutedRows::default();
        routed.add(parts);
        routed
    }

    /// The first partition's rows, if any.
    pub fn first_part(&self) -> Option<&(usize, RecordBatch)> {
        self.parts.first()
    }

    /// The rows, by partition.
    pub fn into_parts(self) -> Vec<(usize, RecordBatch)> {
        self.parts
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The Arrow bytes the rows take in memory.
    pub fn bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|(_, b)| b.get_array_memory_size() as u64)
            .sum()
    }
}

/// Offsets `[start, end)` of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetRange {
    pub start: u64,
    pub end: u64,
}

/// A table's part of a transaction, prepared: see
/// [`super::transaction`]. Dropped without [`PreparedAppend::publish`],
/// its frames are taken back.
/// What a table's writer reports of a prepared transaction: its ends, and
/// the frames (partition, bytes) it left for the transaction log to carry.
pub(super) type Prepared = (Vec<u64>, CarriedFrames);

/// Frames (partition, bytes) written and not fsynced.
pub(super) type CarriedFrames = Vec<(usize, Vec<u8>)>;

pub struct PreparedAppend {
    table: Arc<TableLog>,
    ends: Vec<u64>,
    /// Frames written and not fsynced: the transaction record must carry
    /// them.
    carried: CarriedFrames,
    publish: mpsc::Sender<()>,
    published: oneshot::Receiver<()>,
    /// For a keyed table: its live-key index, held until the records are
    /// noted in it, and the records.
    keys: Option<(
        tokio::sync::OwnedMutexGuard<Option<KeyIndex>>,
        Vec<RecordBatch>,
    )>,
}

impl PreparedAppend {
    pub fn table_id(&self) -> u64 {
        self.table.def().id
    }

    pub fn table(&self) -> &Arc<TableLog> {
        &self.table
    }

    pub fn ends(&self) -> &[u64] {
        &self.ends
    }

    /// The frames the transaction record must carry (partition, bytes);
    /// empty when the table made them durable itself.
    pub fn take_carried(&mut self) -> CarriedFrames {
        std::mem::take(&mut self.carried)
    }

    /// Makes the frames visible (the transaction is durable already).
    pub async fn publish(self) {
        if self.publish.send(()).is_err() || self.published.await.is_err() {
            error!(table = %self.table.def().name, "log writer stopped while publishing a transaction");
            return;
        }
        if let (Some((mut index, records)), Some(keyed)) = (self.keys, &self.table.keyed) {
            if let Some(index) = index.as_mut() {
                for b in &records {
                    if let Err(e) = index.note(&self.table.def(), keyed.codec(), b) {
                        error!(error = %e, "could not note a transaction's keys");
                    }
                }
            }
        }
    }
}

/// A keyed table's record read by its key.
pub struct KeyedRow {
    pub partition: u32,
    pub offset: u64,
    pub ingested_at_us: i64,
    /// One stored record: the table's columns, then the tombstone flag.
    pub record: RecordBatch,
}

pub struct TableLog {
    /// Its definition; swapped whole by a rename (see [`TableLog::def`]).
    definition: parking_lot::RwLock<Arc<TableDef>>,
    pub dir: PathBuf,
    partitions: Vec<Arc<PartitionLog>>,
    sender: mpsc::Sender<WriterRequest>,
    round_robin: AtomicU64,
    poisoned: Arc<AtomicBool>,
    counters: Arc<WriteCounters>,
    max_statement_bytes: u64,
    watermark: Option<WatermarkTracker>,
    /// End offsets of every partition after the newest group commit, all
    /// published together: a consistent cut for readers that follow the log.
    committed: tokio::sync::watch::Receiver<Vec<u64>>,
    /// For a keyed table: its key codec, and the lock every write holds so
    /// that checks of live keys and the log agree.
    keyed: Option<KeyedWrites>,
    /// Held by a compaction pass.
    compaction: tokio::sync::Mutex<()>,
    /// Held while closed segments move to the object store.
    tiering: tokio::sync::Mutex<()>,
    /// A source's positions in the newest commit record at open.
    recovered_positions: Vec<i64>,
    /// Its secondary indexes (`CREATE INDEX`).
    indexes: parking_lot::RwLock<Vec<Arc<super::column_index::ColumnIndex>>>,
    /// A table keyed by row: the rows its tombstones delete, once a scan
    /// needed them (kept by the writer).
    row_tombstones: Option<Arc<RowTombstones>>,
    /// Erasures in force: rows they match are dropped as they are written.
    pub suppressions: super::suppress::Suppressions,
}

struct KeyedWrites {
    /// The live keys, once a statement needed them.
    index: Arc<tokio::sync::Mutex<Option<KeyIndex>>>,
    /// Where each key's latest record is, once a read by key needed it
    /// (kept by the writer).
    locations: Arc<LatestLocations>,
}

impl KeyedWrites {
    /// The primary key's codec (the key locations hold it).
    fn codec(&self) -> &KeyCodec {
        self.locations.codec()
    }
}

/// How appends were grouped: with group commit, `commits` stays well below
/// `statements` under concurrent writers.
#[derive(Debug, Default)]
pub struct WriteCounters {
    pub statements: AtomicU64,
    pub commits: AtomicU64,
    /// Bytes of the committed frames (encoded records) since start-up.
    pub bytes: AtomicU64,
}

impl TableLog {
    /// The table's definition as of now: a rename gives it a new name
    /// while the log, its writer and its readers carry on.
    pub fn def(&self) -> Arc<TableDef> {
        self.definition.read().clone()
    }

    /// The table's name as of now.
    pub fn name(&self) -> String {
        self.definition.read().name.clone()
    }

    /// Its secondary indexes.
    pub fn indexes(&self) -> Vec<Arc<super::column_index::ColumnIndex>> {
        self.indexes.read().clone()
    }

    pub fn add_index(&self, index: Arc<super::column_index::ColumnIndex>) {
        self.indexes.write().push(index);
    }

    pub fn remove_index(&self, name: &str) {
        self.indexes.write().retain(|i| i.name != name);
    }

    /// Gives the table a new name (the catalog has recorded it).
    pub(super) fn rename(&self, to: &str) {
        let mut def = self.definition.write();
        let mut renamed = TableDef::clone(&def);
        renamed.name = to.to_string();
        *def = Arc::new(renamed);
    }

    /// Opens (recovering) or creates the log of `def` under `dir`.
    /// `transaction_ends`: the end offsets a committed transaction gave the
    /// table, which its own commit log may not have recorded yet;
    /// `transaction_frames`: the table's frames the transaction log
    /// carries.
    pub fn open(
        def: TableDef,
        dir: &Path,
        config: LogConfig,
        transaction_ends: Option<&[u64]>,
        transaction_frames: Vec<super::commit::JournalFrame>,
    ) -> Result<TableLog, LogError> {
        std::fs::create_dir_all(dir).map_err(LogError::io(dir))?;
        super::spilled_rows::clear_staging(dir);
        let n = def.options.partitions as usize;
        let (mut commit_log, own_ends, mut journal) = CommitLog::open(dir, n)?;
        // The transaction log is emptied once every table is open, so the
        // frames it carries must be durable in the partitions by then.
        let sync_all = !transaction_frames.is_empty();
        journal.extend(transaction_frames);
        let mut committed = own_ends.clone();
        if let Some(ends) = transaction_ends.filter(|e| e.len() == n) {
            for (c, e) in committed.iter_mut().zip(ends) {
                *c = (*c).max(*e);
            }
        }
        let mut partitions = Vec::with_capacity(n);
        let mut writers = Vec::with_capacity(n);
        for (k, end) in committed.iter().enumerate() {
            let (log, writer) = PartitionLog::recover(
                &dir.join(format!("p{k}")),
                k as u32,
                *end,
                config.segment_max_bytes,
                config.segment_max_age,
            )?;
            partitions.push(Arc::new(log));
            writers.push(writer);
        }
        restore_carried_frames(&def.name, &partitions, &mut writers, &committed, journal)?;
        let recovered: Vec<u64> = writers.iter().map(|w| w.next_offset()).collect();
        if recovered != committed {
            // The disk lost committed frames: record what is really there, so
            // frames written after restart are not taken for committed ones.
            warn!(table = %def.name, ?committed, ?recovered, "log shorter than its commit record");
        }
        if sync_all {
            for w in &mut writers {
                w.sync()?;
            }
        }
        if recovered != own_ends {
            // Also where a transaction committed frames the table's own
            // log does not name yet.
            commit_log.commit(&recovered)?;
        }
        let recovered_positions = commit_log.positions().to_vec();
        let (sender, receiver) = mpsc::channel();
        let (committed_tx, committed) = tokio::sync::watch::channel(recovered.clone());
        let locations = match def.is_keyed() {
            true => Some(Arc::new(LatestLocations::new(&def)?)),
            false => None,
        };
        let row_tombstones = def
            .options
            .keyed_by_row
            .then(|| Arc::new(RowTombstones::default()));
        let poisoned = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(WriteCounters::default());
        let writer = TableWriter {
            row_tombstones: row_tombstones.clone(),
            columns: def.columns.len(),
            committed: committed_tx,
            counters: counters.clone(),
            name: def.name.clone(),
            partitions: partitions.clone(),
            writers,
            commit_log,
            receiver,
            poisoned: poisoned.clone(),
            event_time_index: def.event_time_index(),
            row_positions: def.options.keyed_by_row.then_some(def.columns.len() + 1),
            locations: locations.clone(),
        };
        std::thread::Builder::new()
            .name(format!("log-writer-{}", def.id))
            .spawn(move || writer.run())
            .map_err(LogError::io(dir))?;
        let def_keyed = def.is_keyed();
        let watermark = def.options.watermark.as_ref().map(|w| {
            WatermarkTracker::new(
                w.delay_us,
                std::time::Duration::from_millis(def.options.watermark_idle_timeout_ms),
            )
        });
        Ok(TableLog {
            definition: parking_lot::RwLock::new(Arc::new(def)),
            dir: dir.to_path_buf(),
            partitions,
            sender,
            round_robin: AtomicU64::new(0),
            poisoned,
            counters,
            max_statement_bytes: config.max_statement_bytes,
            watermark,
            committed,
            keyed: match (def_keyed, locations) {
                (true, Some(locations)) => Some(KeyedWrites {
                    index: Arc::new(tokio::sync::Mutex::new(None)),
                    locations,
                }),
                _ => None,
            },
            compaction: tokio::sync::Mutex::new(()),
            tiering: tokio::sync::Mutex::new(()),
            recovered_positions,
            indexes: parking_lot::RwLock::new(Vec::new()),
            row_tombstones,
            suppressions: Default::default(),
        })
    }

    /// One move of segments to the object store at a time per table (the
    /// background task and VACUUM).
    pub fn tiering_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.tiering
    }

    /// One compaction pass at a time per table.
    pub fn compaction_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.compaction
    }

    /// Follows the table's commits: each value is every partition's end
    /// offset after one group commit.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<Vec<u64>> {
        self.committed.clone()
    }

    /// The table's watermark now; `None` when the table has no WATERMARK.
    pub fn watermark(&self) -> Option<TableWatermark> {
        let tracker = self.watermark.as_ref()?;
        let progress: Vec<_> = self
            .partitions
            .iter()
            .map(|p| p.event_time_progress())
            .collect();
        Some(tracker.compute(&progress))
    }

    /// The most Arrow memory one statement may stage before appending.
    pub fn max_statement_bytes(&self) -> u64 {
        self.max_statement_bytes
    }

    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    pub fn counters(&self) -> &WriteCounters {
        &self.counters
    }

    pub fn partitions(&self) -> &[Arc<PartitionLog>] {
        &self.partitions
    }

    /// Appends a statement's rows atomically and durably: returns once every
    /// row is fsynced and committed, or an error with nothing appended.
    pub async fn append(&self, batches: Vec<RecordBatch>) -> Result<u64, LogError> {
        self.append_keyed(batches, false).await
    }

    /// Appends a statement's records; for a keyed table with
    /// `on_conflict_do_nothing`, records whose key is live (or repeats an
    /// earlier record of the statement) are left out, as `INSERT ... ON
    /// CONFLICT DO NOTHING` asks. Returns the records appended.
    pub async fn append_keyed(
        &self,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
    ) -> Result<u64, LogError> {
        let Some(keyed) = &self.keyed else {
            return self.commit_records(None, &batches).await;
        };
        let mut index = keyed.index.lock().await;
        let records = self
            .statement_records(&mut index, batches, on_conflict_do_nothing, &[])
            .await?;
        self.check_rows_not_deleted(&mut index, &records).await?;
        self.commit_records(Some(&mut index), &records).await
    }

    /// For a table keyed by row: fails when `records` delete a row that
    /// another statement deleted (or updated) since this one read it, so
    /// that two concurrent UPDATEs of a row do not leave two new rows.
    /// The caller holds the key lock, as every write to the table does
    /// (`_writes` is its guard's contents, asked for to say so).
    async fn check_rows_not_deleted(
        &self,
        _writes: &mut Option<KeyIndex>,
        records: &[RecordBatch],
    ) -> Result<(), LogError> {
        let def = self.def();
        let Some(tombstones) = &self.row_tombstones else {
            return Ok(());
        };
        let deletes = records
            .iter()
            .any(|b| super::keyed::deleted_flags(&def, b).is_some_and(|d| d.true_count() > 0));
        if !deletes {
            return Ok(());
        }
        self.build_row_tombstones(tombstones).await?;
        if tombstones.deletes_a_deleted_row(def.columns.len(), records) {
            return Err(LogError::RowChangedConcurrently {
                table: def.name.clone(),
            });
        }
        Ok(())
    }

    /// Routes records, commits them as one statement, and notes them in
    /// the live-key index when one is built (its lock held by the caller).
    async fn commit_records(
        &self,
        index: Option<&mut Option<KeyIndex>>,
        records: &[RecordBatch],
    ) -> Result<u64, LogError> {
        let mut parts = RoutedRows::default();
        for batch in records {
            parts.add(self.route(batch)?);
        }
        let n = self.commit_routed(parts).await?;
        if let (Some(Some(index)), Some(keyed)) = (index, &self.keyed) {
            for b in records {
                index.note(&self.def(), keyed.codec(), b)?;
            }
        }
        Ok(n)
    }

    /// The records a statement inside a transaction writes, to be staged
    /// and committed later with [`TableLog::prepare`] or
    /// [`TableLog::append_staged`]. `staged` holds the transaction's
    /// earlier records for this table: ON CONFLICT DO NOTHING sees their
    /// keys as live (or not) as it would once they are committed.
    pub async fn stage(
        &self,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
        staged: &[RecordBatch],
    ) -> Result<Vec<RecordBatch>, LogError> {
        self.check_statement_writes()?;
        let Some(keyed) = &self.keyed else {
            return batches.iter().map(|b| as_stored(&self.def(), b)).collect();
        };
        let mut index = keyed.index.lock().await;
        self.statement_records(&mut index, batches, on_conflict_do_nothing, staged)
            .await
    }

    /// A keyed table's records of one statement, in stored form: for
    /// ON CONFLICT DO NOTHING, without those whose key is live in the log
    /// (as `staged` leaves it) or repeats an earlier record.
    async fn statement_records(
        &self,
        index: &mut Option<KeyIndex>,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
        staged: &[RecordBatch],
    ) -> Result<Vec<RecordBatch>, LogError> {
        let batches: Vec<RecordBatch> = batches
            .iter()
            .map(|b| as_stored(&self.def(), b))
            .collect::<Result<_, _>>()?;
        let Some(keyed) = self.keyed.as_ref().filter(|_| on_conflict_do_nothing) else {
            return Ok(batches);
        };
        if index.is_none() {
            *index = Some(KeyIndex::build(&self.def(), keyed.codec(), &self.partitions).await?);
        }
        let mut pending = KeyIndex::default();
        for b in staged {
            pending.note(&self.def(), keyed.codec(), b)?;
        }
        let live = index.as_ref();
        let mut seen = std::collections::HashSet::new();
        let mut kept = Vec::with_capacity(batches.len());
        for b in &batches {
            let keys = keyed.codec().keys(b)?;
            let keep: arrow::array::BooleanArray = keys
                .iter()
                .map(|k| {
                    let is_live = match pending.get(k.as_ref()) {
                        Some(live) => live,
                        None => live.is_some_and(|l| l.is_live(k.as_ref())),
                    };
                    let k: Box<[u8]> = Box::from(k.as_ref());
                    Some(!is_live && seen.insert(k))
                })
                .collect();
            kept.push(compute::filter_record_batch(b, &keep)?);
        }
        Ok(kept)
    }

    /// Appends a transaction's staged records (from [`TableLog::stage`])
    /// in one atomic commit: a transaction that wrote to this table only.
    /// `since`: see [`TableLog::check_unchanged_since`].
    pub async fn append_staged(
        &self,
        records: Vec<RecordBatch>,
        since: Option<&[u64]>,
    ) -> Result<u64, LogError> {
        let Some(keyed) = &self.keyed else {
            return self.commit_records(None, &records).await;
        };
        let mut index = keyed.index.lock().await;
        self.check_unchanged_since(since, &records).await?;
        self.check_rows_not_deleted(&mut index, &records).await?;
        self.commit_records(Some(&mut index), &records).await
    }

    /// For a REPEATABLE READ transaction that read this keyed table at
    /// `since` (its snapshot's ends): fails with a serialization failure
    /// when a record of a key among `records` was committed at or after
    /// them. The caller holds the key index lock, which every write to
    /// the table takes, so nothing commits between this check and the
    /// transaction's own commit.
    async fn check_unchanged_since(
        &self,
        since: Option<&[u64]>,
        records: &[RecordBatch],
    ) -> Result<(), LogError> {
        let (Some(since), Some(keyed)) = (since, &self.keyed) else {
            return Ok(());
        };
        let (written, _) = super::keyed::staged_latest(&self.def(), keyed.codec(), records)?;
        let ends = self.committed.borrow().clone();
        for (k, part) in self.partitions.iter().enumerate() {
            let from = since.get(k).copied().unwrap_or(0);
            let end = ends.get(k).copied().unwrap_or(0);
            for meta in part.frames_in_range(from, end) {
                let batch = part.read_frame(&meta).await?;
                let skip = from.saturating_sub(meta.header.base_offset) as usize;
                let keys = keyed.codec().keys(&batch)?;
                if (skip..batch.num_rows()).any(|i| written.contains(keys.row(i).as_ref())) {
                    return Err(LogError::SerializationFailure {
                        table: self.def().name.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes a transaction's staged records and holds them, unpublished,
    /// until the returned handle publishes them or is dropped. `since`:
    /// see [`TableLog::check_unchanged_since`]. With `carry`, small
    /// frames of an append-only table are left for the transaction record
    /// to carry rather than fsynced ([`PreparedAppend::take_carried`]).
    pub async fn prepare(
        self: &Arc<Self>,
        records: Vec<RecordBatch>,
        since: Option<&[u64]>,
        carry: bool,
    ) -> Result<PreparedAppend, LogError> {
        self.check_statement_writes()?;
        if self.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned(self.def().name.clone()));
        }
        let keys = match &self.keyed {
            Some(keyed) => {
                let mut index = keyed.index.clone().lock_owned().await;
                self.check_unchanged_since(since, &records).await?;
                self.check_rows_not_deleted(&mut index, &records).await?;
                Some((index, records.clone()))
            }
            None => None,
        };
        let mut routed = RoutedRows::default();
        for batch in &records {
            routed.add(self.route(batch)?);
        }
        let parts = coalesce(routed.parts, self.partitions.len())?;
        let (prepared_tx, prepared_rx) = oneshot::channel();
        let (publish, decision) = mpsc::channel();
        let (published_tx, published) = oneshot::channel();
        let stopped = || LogError::WriterStopped(self.def().name.clone());
        self.sender
            .send(WriterRequest::Prepare(PrepareRequest {
                parts,
                carry: carry && self.keyed.is_none(),
                prepared: prepared_tx,
                decision,
                published: published_tx,
            }))
            .map_err(|_| stopped())?;
        let (ends, carried) = prepared_rx.await.map_err(|_| stopped())??;
        Ok(PreparedAppend {
            table: self.clone(),
            ends,
            carried,
            publish,
            published,
            keys,
        })
    }

    /// Builds the key locations of a keyed table from the log, unless
    /// built.
    async fn build_locations(&self, keyed: &KeyedWrites) -> Result<(), LogError> {
        let locations = &keyed.locations;
        if !locations.is_built() {
            // No keyed write runs while the key lock is held, so the
            // locations read from the log stay right until installed.
            let _writes = keyed.index.lock().await;
            if !locations.is_built() {
                let mut by_key = HashMap::new();
                for (p, part) in self.partitions.iter().enumerate() {
                    let latest =
                        latest_records(&self.def(), keyed.codec(), part, part.end_offset()).await?;
                    for (key, offset) in latest.live_keys(keyed.codec())? {
                        by_key.insert(key, (p as u32, offset));
                    }
                }
                locations.install(by_key);
            }
        }
        Ok(())
    }

    /// For a table keyed by row: per partition, the offsets of the rows
    /// that tombstones committed below `ends` delete (built from the log
    /// by the first call, then kept by the writer). None for other tables.
    pub async fn deleted_rows(
        &self,
        ends: &[u64],
    ) -> Result<Option<Vec<std::collections::HashSet<u64>>>, LogError> {
        let (Some(tombstones), Some(keyed)) = (&self.row_tombstones, &self.keyed) else {
            return Ok(None);
        };
        if !tombstones.is_built() {
            let _writes = keyed.index.lock().await;
            self.build_row_tombstones(tombstones).await?;
        }
        Ok(Some(
            (0..self.partitions.len())
                .map(|p| {
                    tombstones
                        .deleted_below(p, ends.get(p).copied().unwrap_or(0))
                        .unwrap_or_default()
                })
                .collect(),
        ))
    }

    /// Reads which rows the tombstones delete from the log, unless built.
    /// The caller holds the key lock: no write commits meanwhile, so what
    /// is read stays right until installed.
    async fn build_row_tombstones(&self, tombstones: &RowTombstones) -> Result<(), LogError> {
        if tombstones.is_built() {
            return Ok(());
        }
        let columns = self.def().columns.len();
        let mut map = vec![HashMap::new(); self.partitions.len()];
        for (p, part) in self.partitions.iter().enumerate() {
            for meta in part.frames_in_range(0, part.end_offset()) {
                let batch = part.read_frame(&meta).await?;
                super::keyed::note_tombstones(
                    &mut map,
                    columns,
                    p,
                    meta.header.base_offset,
                    &batch,
                );
            }
        }
        tombstones.install(map);
        Ok(())
    }

    /// Of the records at `candidates` (offsets per partition, in order),
    /// those that are the latest live record of their key as of `ends`.
    /// None when that cannot be told from the key locations (they
    /// describe a newer commit than `ends`): the caller reads every record.
    /// An append-only table's records are all live.
    pub async fn latest_live(
        &self,
        ends: &[u64],
        candidates: &[Vec<u64>],
    ) -> Result<Option<Vec<Vec<u64>>>, LogError> {
        let Some(keyed) = &self.keyed else {
            return Ok(Some(candidates.to_vec()));
        };
        self.build_locations(keyed).await?;
        let def = self.def();
        let mut found = Vec::new();
        for (p, offsets) in candidates.iter().enumerate() {
            let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
                continue;
            };
            let part = &self.partitions[p];
            for meta in part.frames_in_range(first, last + 1) {
                let base = meta.header.base_offset;
                let lo = offsets.partition_point(|&o| o < base);
                let hi = offsets.partition_point(|&o| o < meta.end_offset());
                if lo == hi {
                    continue;
                }
                let batch = part.read_frame(&meta).await?;
                let keys = keyed.codec().keys(&batch)?;
                let deleted = super::keyed::deleted_flags(&def, &batch);
                for &o in &offsets[lo..hi] {
                    let i = (o - base) as usize;
                    if i < batch.num_rows() && super::keyed::record_kind(deleted, i) == Some(false)
                    {
                        found.push((p as u32, o, Box::<[u8]>::from(keys.row(i).as_ref())));
                    }
                }
            }
        }
        Ok(keyed.locations.latest_of(
            || self.committed.borrow().as_slice() == ends,
            &found,
            candidates.len(),
        ))
    }

    /// The latest live record of one key of a keyed table (`key`: the
    /// key columns' values, one row each, in primary key order), as of
    /// the newest commit: found through the key locations (built from
    /// the log by the first call), then read from its frame. None when
    /// the key has no live record.
    pub async fn read_by_key(&self, key: Vec<ArrayRef>) -> Result<Option<KeyedRow>, LogError> {
        let Some(keyed) = &self.keyed else {
            return Ok(None);
        };
        let locations = &keyed.locations;
        self.build_locations(keyed).await?;
        let key = locations.codec().encode(key)?;
        let key = key.row(0);
        // A newer version may move the key (and compaction empty the old
        // record) between the look-up and the read: look again.
        for _ in 0..8 {
            let Some(found) = locations.get(key.as_ref()) else {
                return Err(LogError::KeyLookup {
                    table: self.def().name.clone(),
                    reason: "the key locations were dropped; try again",
                });
            };
            let Some((p, offset)) = found else {
                return Ok(None);
            };
            let part = &self.partitions[p as usize];
            let Some(meta) = part.frames_in_range(offset, offset + 1).into_iter().next() else {
                continue;
            };
            let base = meta.header.base_offset;
            let (batch, cached) = match locations.cached_frame(p, base) {
                Some(frame) => (frame, true),
                None => (part.read_frame(&meta).await?, false),
            };
            let row = offset.saturating_sub(base) as usize;
            if row >= batch.num_rows() {
                locations.forget_frame(p, base);
                continue;
            }
            let record = batch.slice(row, 1);
            let live =
                super::keyed::record_kind(super::keyed::deleted_flags(&self.def(), &record), 0)
                    == Some(false);
            if !(live && keyed.codec().keys(&record)?.row(0) == key) {
                // A frame compaction rewrote since it was cached, or a key
                // that moved: read again.
                locations.forget_frame(p, base);
                continue;
            }
            if !cached {
                locations.cache_frame(p, base, batch.clone());
            }
            return Ok(Some(KeyedRow {
                partition: p,
                offset,
                ingested_at_us: meta.header.ingested_at_us,
                record,
            }));
        }
        Err(LogError::KeyLookup {
            table: self.def().name.clone(),
            reason: "the key's latest record kept moving; try again",
        })
    }

    /// Routes a batch of a statement still being received, so the statement
    /// holds its rows once, already split by partition.
    pub fn route_into(&self, batch: &RecordBatch, into: &mut RoutedRows) -> Result<(), LogError> {
        into.add(self.route(batch)?);
        Ok(())
    }

    /// Appends a statement's routed rows atomically and durably.
    pub async fn append_routed(&self, routed: RoutedRows) -> Result<u64, LogError> {
        let Some(keyed) = &self.keyed else {
            return self.commit_routed(routed).await;
        };
        let mut index = keyed.index.lock().await;
        let Some(live) = index.as_mut() else {
            return self.commit_routed(routed).await;
        };
        let batches: Vec<RecordBatch> = routed.parts.iter().map(|(_, b)| b.clone()).collect();
        let n = self.commit_routed(routed).await?;
        for b in &batches {
            live.note(&self.def(), keyed.codec(), b)?;
        }
        Ok(n)
    }

    /// Appends a statement whose rows are `spilled` on disk, then `rest`,
    /// atomically and durably: the writer writes them piece by piece (no
    /// other statement of the table commits meanwhile) and commits them
    /// with one record, so memory holds one piece at a time.
    pub async fn append_spilled(
        &self,
        spilled: super::spilled_rows::SpilledRows,
        rest: RoutedRows,
    ) -> Result<u64, LogError> {
        self.check_statement_writes()?;
        if self.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned(self.def().name.clone()));
        }
        let rows = spilled.rows() + rest.rows();
        let spilled = spilled.finish()?;
        // As for a statement in memory, the index of live keys is held
        // while the rows commit; it is built again from the log at its
        // next use rather than noted row by row.
        let mut live = match &self.keyed {
            Some(keyed) => Some(keyed.index.lock().await),
            None => None,
        };
        // Two pieces in flight: one written while the next is read.
        let (pieces, received) = std::sync::mpsc::sync_channel(2);
        let (reply, rx) = oneshot::channel();
        self.sender
            .send(WriterRequest::AppendStream(StreamRequest {
                pieces: received,
                reply,
            }))
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?;
        let feeder = tokio::task::spawn_blocking(move || {
            let mut piece = Vec::new();
            let mut bytes = 0;
            let send = |piece: &mut Vec<(usize, RecordBatch)>| {
                pieces
                    .send(Ok(std::mem::take(piece)))
                    .map_err(|_| LogError::WriterStopped("a streamed statement".into()))
            };
            let read = spilled.for_each(|p, batch| {
                bytes += batch.get_array_memory_size() as u64;
                piece.push((p, batch));
                if bytes >= STREAM_PIECE_BYTES {
                    bytes = 0;
                    send(&mut piece)?;
                }
                Ok(())
            });
            let read = read.and_then(|_| {
                piece.extend(rest.into_parts());
                send(&mut piece)
            });
            if let Err(e) = read {
                let _ = pieces.send(Err(e));
            }
        });
        let written = rx
            .await
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?;
        let _ = feeder.await;
        written?;
        if let Some(live) = live.as_mut() {
            **live = None;
        }
        Ok(rows)
    }

    /// Statements may not write a table a source feeds.
    pub fn check_statement_writes(&self) -> Result<(), LogError> {
        match self.def().written_by_source() {
            Some(by) => Err(LogError::WrittenBySource {
                table: self.def().name.clone(),
                by,
            }),
            None => Ok(()),
        }
    }

    async fn commit_routed(&self, routed: RoutedRows) -> Result<u64, LogError> {
        self.check_statement_writes()?;
        let rows = routed.rows;
        if rows == 0 {
            return Ok(0);
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned(self.def().name.clone()));
        }
        let parts = coalesce(routed.parts, self.partitions.len())?;
        self.append_and_wait(parts, Vec::new()).await?;
        Ok(rows)
    }

    /// Hands one append to the writer and waits for its commit.
    async fn append_and_wait(
        &self,
        parts: Vec<(usize, RecordBatch)>,
        positions: Vec<(usize, i64)>,
    ) -> Result<(), LogError> {
        let (reply, rx) = oneshot::channel();
        self.sender
            .send(WriterRequest::Append(AppendRequest {
                parts,
                positions,
                upkeep: Upkeep::None,
                reply,
            }))
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?;
        rx.await
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?
    }

    /// Appends rows a source read, each batch into the partition it names,
    /// and commits `positions` (partition, next source offset) in the same
    /// commit record: after a crash the table holds exactly the rows read
    /// before the positions [`TableLog::source_positions`] gives. Also
    /// commits positions with no rows.
    pub async fn append_from_source(
        &self,
        parts: Vec<(usize, RecordBatch)>,
        positions: Vec<(usize, i64)>,
    ) -> Result<u64, LogError> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned(self.def().name.clone()));
        }
        let n = self.partitions.len();
        let mut rows = 0;
        let mut stored = Vec::with_capacity(parts.len());
        for (p, batch) in parts {
            if p >= n {
                return Err(LogError::Arrow(
                    arrow::error::ArrowError::InvalidArgumentError(format!(
                        "table {} has no partition {p}",
                        self.def().name
                    )),
                ));
            }
            let def = self.def();
            let batch = self
                .suppressions
                .apply(as_stored(&def, &batch)?, def.columns.len())?;
            rows += batch.num_rows() as u64;
            stored.push((p, batch));
        }
        self.append_and_wait(coalesce(stored, n)?, positions)
            .await?;
        Ok(rows)
    }

    /// Rows erasure `id` dropped from this table's writes since start-up.
    pub fn suppressed_rows(&self, id: u64) -> u64 {
        self.suppressions.dropped(id)
    }

    /// The next source offset of each partition as recovered at open (-1:
    /// none yet); empty when no source ever committed to this table.
    pub fn source_positions(&self) -> &[i64] {
        &self.recovered_positions
    }

    /// Makes every partition durable and rotates the commit log, so it no
    /// longer carries copies of frames: once compaction has removed
    /// records (a DELETE, then VACUUM), no file keeps them.
    pub async fn drop_carried_frames(&self) -> Result<(), LogError> {
        self.upkeep(Upkeep::DropCarried).await
    }

    /// Closes every partition's active segment that holds frames; writes
    /// after it go to new segments.
    pub async fn close_active_segments(&self) -> Result<(), LogError> {
        self.upkeep(Upkeep::CloseSegments).await
    }

    async fn upkeep(&self, upkeep: Upkeep) -> Result<(), LogError> {
        let (reply, rx) = oneshot::channel();
        self.sender
            .send(WriterRequest::Append(AppendRequest {
                parts: Vec::new(),
                positions: Vec::new(),
                upkeep,
                reply,
            }))
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?;
        rx.await
            .map_err(|_| LogError::WriterStopped(self.def().name.clone()))?
    }

    /// Splits a batch by partition: `hash(key) % partitions`, or round-robin
    /// when the table has no partition key.
    fn route(&self, batch: &RecordBatch) -> Result<Vec<(usize, RecordBatch)>, LogError> {
        let def = self.def();
        let batch = &self
            .suppressions
            .apply(as_stored(&def, batch)?, def.columns.len())?;
        let n = self.partitions.len();
        if n == 1 {
            return Ok(vec![(0, batch.clone())]);
        }
        let rows = batch.num_rows();
        // A tombstone of a table keyed by row goes where its row is.
        let positions = batch
            .columns()
            .get(def.columns.len() + 1)
            .filter(|_| def.options.keyed_by_row)
            .and_then(|c| c.as_any().downcast_ref::<arrow::array::Int64Array>())
            .filter(|c| c.null_count() < c.len());
        let mut assignment: Vec<usize> = match def.partition_key_index() {
            Some(k) => {
                let keys = compute::cast(batch.column(k), &DataType::Utf8)?;
                let keys = keys
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| arrow::error::ArrowError::CastError("partition key".into()))?;
                (0..rows)
                    .map(|i| {
                        if keys.is_null(i) {
                            0
                        } else {
                            partition_for_key(keys.value(i).as_bytes(), n)
                        }
                    })
                    .collect()
            }
            None => {
                let start = self.round_robin.fetch_add(rows as u64, Ordering::Relaxed);
                (0..rows)
                    .map(|i| ((start + i as u64) % n as u64) as usize)
                    .collect()
            }
        };
        if let Some(positions) = positions {
            for (row, p) in assignment.iter_mut().enumerate() {
                if positions.is_valid(row) {
                    *p = sluice_catalog::row_partition(positions.value(row)).min(n - 1);
                }
            }
        }
        let mut indices: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (row, p) in assignment.into_iter().enumerate() {
            indices[p].push(row as u32);
        }
        let mut out = Vec::new();
        for (p, idx) in indices.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let idx = UInt32Array::from(idx);
            let columns: Vec<ArrayRef> = batch
                .columns()
                .iter()
                .map(|c| compute::take(c.as_ref(), &idx, None))
                .collect::<Result<_, _>>()?;
            out.push((p, RecordBatch::try_new(batch.schema(), columns)?));
        }
        Ok(out)
    }
}

/// The partition a key goes to. CRC32C of the key's text form: stable across
/// restarts and versions.
pub fn partition_for_key(key: &[u8], partitions: usize) -> usize {
    (crc32c::crc32c(key) as usize) % partitions
}

/// Concatenates small pieces of the same partition into one frame, so that a
/// statement of many small batches (or a group of many one-row statements)
/// does not write many tiny frames; pieces
/// that are large already become frames as they are, without a copy.
pub(super) fn coalesce(
    parts: Vec<(usize, RecordBatch)>,
    partitions: usize,
) -> Result<Vec<(usize, RecordBatch)>, LogError> {
    const MERGE_BELOW_ROWS: usize = 8 * 1024;
    let mut by_partition: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions];
    for (p, b) in parts {
        by_partition[p].push(b);
    }
    let mut out = Vec::new();
    for (p, batches) in by_partition.into_iter().enumerate() {
        let mut group: Vec<RecordBatch> = Vec::new();
        let mut rows = 0;
        for b in batches {
            // Pieces from different statements may differ in schema
            // details (nullability, metadata); only equal ones are merged.
            let fits = group.first().is_none_or(|g| {
                rows + b.num_rows() <= MERGE_BELOW_ROWS && g.schema_ref() == b.schema_ref()
            });
            if !fits {
                out.push((p, concat(&group)?));
                group.clear();
                rows = 0;
            }
            rows += b.num_rows();
            group.push(b);
        }
        if !group.is_empty() {
            out.push((p, concat(&group)?));
        }
    }
    Ok(out)
}

fn concat(batches: &[RecordBatch]) -> Result<RecordBatch, LogError> {
    if batches.len() == 1 {
        return Ok(batches[0].clone());
    }
    Ok(compute::concat_batches(&batches[0].schema(), batches)?)
}

pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use sluice_catalog::{ColumnDef, SqlType, TableOptions};

    fn def() -> TableDef {
        def_named("t")
    }

    /// A table of one BIGINT `id` column in two partitions.
    pub(crate) fn def_named(name: &str) -> TableDef {
        TableDef {
            id: 1,
            name: name.into(),
            columns: vec![ColumnDef {
                name: "id".into(),
                ty: SqlType::BigInt,
                nullable: false,
            }],
            options: TableOptions {
                partitions: 2,
                ..TableOptions::default()
            },
        }
    }

    /// Every id the table holds, sorted.
    pub(crate) async fn ids(log: &TableLog) -> Vec<i64> {
        let mut out = Vec::new();
        for p in log.partitions() {
            for meta in p.frames_in_range(0, p.end_offset()) {
                let batch = p.read_frame(&meta).await.unwrap();
                let col = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                out.extend(col.values().iter().copied());
            }
        }
        out.sort_unstable();
        out
    }

    /// Small groups are made durable by the commit record alone; when the
    /// partitions lose what was never fsynced (a machine crash), recovery
    /// writes it back from the commit log.
    #[tokio::test]
    async fn frames_lost_from_partitions_come_back_from_the_commit_log() {
        let dir = tempfile::tempdir().unwrap();
        let log =
            TableLog::open(def(), dir.path(), LogConfig::default(), None, Vec::new()).unwrap();
        let schema = def().data_schema();
        for i in 0..10 {
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(vec![i, i + 100]))],
            )
            .unwrap();
            log.append(vec![batch]).await.unwrap();
        }
        let ends: Vec<u64> = log.partitions().iter().map(|p| p.end_offset()).collect();
        assert_eq!(ends.iter().sum::<u64>(), 20);
        drop(log);
        for p in 0..2 {
            for entry in std::fs::read_dir(dir.path().join(format!("p{p}"))).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "seg") {
                    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    f.set_len(f.metadata().unwrap().len() / 3).unwrap();
                }
            }
        }
        let log =
            TableLog::open(def(), dir.path(), LogConfig::default(), None, Vec::new()).unwrap();
        let back: Vec<u64> = log.partitions().iter().map(|p| p.end_offset()).collect();
        assert_eq!(back, ends);
        let mut want: Vec<i64> = (0..10).chain(100..110).collect();
        want.sort_unstable();
        assert_eq!(ids(&log).await, want);
        // And the log goes on from there.
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![7777]))]).unwrap();
        log.append(vec![batch]).await.unwrap();
        assert_eq!(ids(&log).await.len(), 21);
    }

    /// `close_active_segments` (VACUUM) leaves every committed frame in a
    /// closed segment and an empty active one, which a restart keeps as the
    /// active one, so the closed segment never takes writes again.
    #[tokio::test]
    async fn closed_active_segments_stay_closed_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let schema = def().data_schema();
        let batch = |v: Vec<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(v))]).unwrap()
        };
        let log =
            TableLog::open(def(), dir.path(), LogConfig::default(), None, Vec::new()).unwrap();
        log.append(vec![batch(vec![1, 2, 3, 4])]).await.unwrap();
        log.close_active_segments().await.unwrap();
        // Nothing new: a second call opens no other segment.
        log.close_active_segments().await.unwrap();
        for p in log.partitions() {
            let closed = p.closed_local_segments();
            assert_eq!(closed.len(), 1, "partition {}", p.index);
            assert_eq!(
                closed[0].1.len(),
                1,
                "its one frame is in the closed segment"
            );
        }
        drop(log);
        let log =
            TableLog::open(def(), dir.path(), LogConfig::default(), None, Vec::new()).unwrap();
        for p in log.partitions() {
            assert_eq!(p.closed_local_segments().len(), 1, "partition {}", p.index);
        }
        log.append(vec![batch(vec![5, 6])]).await.unwrap();
        for p in log.partitions() {
            let closed = p.closed_local_segments();
            assert_eq!(closed.len(), 1);
            assert_eq!(closed[0].1.len(), 1, "the closed segment took no new frame");
        }
        assert_eq!(ids(&log).await, vec![1, 2, 3, 4, 5, 6]);
    }
}
