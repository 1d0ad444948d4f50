//! Transactions that write to several tables (and commit consumer-group
//! offsets) at once.
//!
//! A statement inside `BEGIN ... COMMIT` stages its records here instead of
//! appending them ([`StagedWrites`]); they become visible and durable at
//! COMMIT, all together, or never. A transaction that touches one table is
//! that table's ordinary group commit. One that touches more commits in
//! three steps:
//!
//! 1. *prepare*: each table's writer writes the records as frames and
//!    fsyncs them, but neither commits nor publishes them, and takes no
//!    other writes until told what became of them;
//! 2. *commit point*: one record in `transactions.log` names every table's
//!    new end offsets and every consumer group's new offsets, fsynced;
//! 3. *publish*: each writer makes the frames visible. Readers are held
//!    off meanwhile (the visibility lock), so no statement sees one
//!    table's rows without the other's. The table's own commit log learns
//!    the new ends with its next group commit; until then this log holds
//!    them.
//!
//! Transactions that reach COMMIT while a group is being committed form
//! the next group, which commits as one transaction.
//!
//! A crash before step 2 leaves frames past every committed end, which
//! recovery cuts; after it, recovery takes each table's ends as the larger
//! of its own commit log and this log, and each group's offsets as the
//! newer by sequence number. Once every table and group has written its
//! own record at start-up, this log is emptied.
//!
//! Record: `1u8 | json_len u32 | json | (table u64 | partition u32 |
//! frame_len u32 | frame)*` in a [`RecordFile`]: a JSON
//! [`TransactionRecord`] and the frames the transaction wrote (older
//! records are the JSON alone). Carrying the frames makes the record's one
//! fsync the transaction's only one: the tables write their frames without
//! fsyncing them, as a table's commit log carries a small group's frames
//! (`super::commit`). Recovery writes back any carried frame a partition
//! lost. Before the log drops frames (when it is rotated, or emptied at
//! start-up), every table that carried some fsyncs its partitions. Keyed
//! tables never carry frames here, so that DELETE and VACUUM leave no copy
//! of a record in this log.
//!
//! A REPEATABLE READ transaction reads one [`Snapshot`]: every table's
//! committed ends when its first statement ran. Its writes to keyed tables
//! commit only if no other transaction committed a record of the same keys
//! since (first committer wins, 40001 otherwise), and compaction keeps
//! every version an open snapshot reads.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Weak};

use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use super::error::LogError;
use super::record_file::RecordFile;
use super::table::TableLog;

const FILE_NAME: &str = "transactions.log";
/// Past this size the log is rewritten as one record that merges them all.
const ROTATE_BYTES: u64 = 1 << 20;
const PREALLOCATE_BYTES: u64 = 256 << 10;

/// A consumer group's offsets committed by a transaction. The body is the
/// group's own offsets record; `seq` orders it against the group's file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OffsetsEntry {
    pub subscription: u64,
    pub seq: u64,
    pub body: serde_json::Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TransactionRecord {
    pub seq: u64,
    /// Table id and every partition's end offset after the transaction.
    pub tables: Vec<(u64, Vec<u64>)>,
    pub offsets: Vec<OffsetsEntry>,
}

impl TransactionRecord {
    /// Folds a later record in: larger ends per table, newer offsets per
    /// group.
    fn merge(&mut self, later: TransactionRecord) {
        self.seq = self.seq.max(later.seq);
        for (id, ends) in later.tables {
            match self.tables.iter_mut().find(|(t, _)| *t == id) {
                Some((_, mine)) => {
                    for (m, e) in mine.iter_mut().zip(&ends) {
                        *m = (*m).max(*e);
                    }
                }
                None => self.tables.push((id, ends)),
            }
        }
        for entry in later.offsets {
            match self
                .offsets
                .iter_mut()
                .find(|o| o.subscription == entry.subscription)
            {
                Some(mine) if mine.seq >= entry.seq => {}
                Some(mine) => *mine = entry,
                None => self.offsets.push(entry),
            }
        }
    }

    pub fn table_ends(&self, id: u64) -> Option<&[u64]> {
        self.tables
            .iter()
            .find(|(t, _)| *t == id)
            .map(|(_, e)| e.as_slice())
    }

    pub fn group_offsets(&self, subscription: u64) -> Option<&OffsetsEntry> {
        self.offsets.iter().find(|o| o.subscription == subscription)
    }
}

/// A frame a transaction record carries, for recovery to write back into
/// the table's partition if the partition lost it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedFrame {
    pub table: u64,
    pub frame: super::commit::JournalFrame,
}

/// `transactions.log` in the data directory.
pub struct TransactionLog {
    file: RecordFile,
    /// Everything the log's records commit, merged.
    merged: TransactionRecord,
    /// The frames its records carry, oldest first.
    carried: Vec<CarriedFrame>,
}

/// The first byte of a record that carries frames (a JSON record starts
/// with `{`).
const WITH_FRAMES: u8 = 1;

/// A record's JSON and the frames it carries; `None` when it is neither
/// form.
fn decode(body: &[u8]) -> Option<(TransactionRecord, Vec<CarriedFrame>)> {
    if body.first() != Some(&WITH_FRAMES) {
        return Some((serde_json::from_slice(body).ok()?, Vec::new()));
    }
    let json_len = u32::from_le_bytes(body.get(1..5)?.try_into().ok()?) as usize;
    let record = serde_json::from_slice(body.get(5..5 + json_len)?).ok()?;
    let mut rest = &body[5 + json_len..];
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let table = u64::from_le_bytes(rest.get(0..8)?.try_into().ok()?);
        let partition = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
        let len = u32::from_le_bytes(rest.get(12..16)?.try_into().ok()?) as usize;
        let bytes = rest.get(16..16 + len)?.to_vec();
        frames.push(CarriedFrame {
            table,
            frame: super::commit::JournalFrame { partition, bytes },
        });
        rest = &rest[16 + len..];
    }
    Some((record, frames))
}

impl TransactionLog {
    pub fn open(data_dir: &Path) -> Result<TransactionLog, LogError> {
        let (file, records) =
            RecordFile::open(&data_dir.join(FILE_NAME), PREALLOCATE_BYTES, |body| {
                decode(body).is_some()
            })?;
        let mut merged = TransactionRecord::default();
        let mut carried = Vec::new();
        for (r, frames) in records.iter().filter_map(|body| decode(body)) {
            merged.merge(r);
            carried.extend(frames);
        }
        Ok(TransactionLog {
            file,
            merged,
            carried,
        })
    }

    /// What the records commit, for recovery.
    pub fn recovered(&self) -> &TransactionRecord {
        &self.merged
    }

    /// The frames the records carry for `table`, oldest first, for
    /// recovery.
    pub fn carried_frames(&self, table: u64) -> Vec<super::commit::JournalFrame> {
        self.carried
            .iter()
            .filter(|c| c.table == table)
            .map(|c| c.frame.clone())
            .collect()
    }

    /// True once the next record should rotate the log, which drops the
    /// frames it carries.
    fn is_full(&self) -> bool {
        self.file.len() >= ROTATE_BYTES
    }

    /// Appends a record carrying `frames` (table, partition, bytes), or,
    /// when the log is full, replaces the log by one record that merges
    /// them all and carries no frames: then every carried frame must be
    /// durable in its partition, `frames` included.
    fn write(
        &mut self,
        tables: Vec<(u64, Vec<u64>)>,
        offsets: Vec<OffsetsEntry>,
        frames: &[(u64, usize, Vec<u8>)],
    ) -> Result<(), LogError> {
        let record = TransactionRecord {
            seq: self.merged.seq + 1,
            tables,
            offsets,
        };
        let mut merged = self.merged.clone();
        merged.merge(record.clone());
        if self.is_full() {
            self.file.replace(&encode(&merged, &[])?)?;
            self.carried.clear();
        } else {
            self.file.append(&encode(&record, frames)?)?;
        }
        self.merged = merged;
        Ok(())
    }

    /// Replaces the log by one record merging every record it holds, with
    /// no frames (each carried frame is durable in its partition).
    fn rotate(&mut self) -> Result<(), LogError> {
        self.file.replace(&encode(&self.merged, &[])?)?;
        self.carried.clear();
        Ok(())
    }

    /// Empties the log once every table and group it names holds what it
    /// committed in its own files, durably.
    pub fn clear(&mut self) -> Result<(), LogError> {
        let empty = TransactionRecord {
            seq: self.merged.seq,
            ..Default::default()
        };
        self.file.replace(&encode(&empty, &[])?)?;
        self.merged = empty;
        self.carried.clear();
        Ok(())
    }
}

fn encode(
    record: &TransactionRecord,
    frames: &[(u64, usize, Vec<u8>)],
) -> Result<Vec<u8>, LogError> {
    let json = serde_json::to_vec(record).map_err(|e| LogError::Io {
        path: FILE_NAME.into(),
        source: std::io::Error::other(e),
    })?;
    if frames.is_empty() {
        return Ok(json);
    }
    let frame_bytes: usize = frames.iter().map(|(_, _, f)| 16 + f.len()).sum();
    let mut out = Vec::with_capacity(5 + json.len() + frame_bytes);
    out.push(WITH_FRAMES);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    for (table, partition, bytes) in frames {
        out.extend_from_slice(&table.to_le_bytes());
        out.extend_from_slice(&(*partition as u32).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

/// Records a transaction has written and not yet committed, per table, in
/// the order its statements wrote them (stored form, as the log keeps
/// them).
#[derive(Default, Clone)]
pub struct StagedWrites {
    tables: BTreeMap<u64, StagedTable>,
    bytes: u64,
}

#[derive(Clone)]
struct StagedTable {
    table: Arc<TableLog>,
    records: Vec<RecordBatch>,
}

/// Where a SAVEPOINT found the staged writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedMark(Vec<(u64, usize)>);

impl StagedWrites {
    /// Arrow memory the staged records take.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The records staged for a table, oldest first.
    pub fn records(&self, table_id: u64) -> &[RecordBatch] {
        self.tables
            .get(&table_id)
            .map_or(&[], |t| t.records.as_slice())
    }

    /// Adds one statement's records (from [`TableLog::stage`]).
    pub fn add(&mut self, table: &Arc<TableLog>, records: Vec<RecordBatch>) {
        let entry = self
            .tables
            .entry(table.def().id)
            .or_insert_with(|| StagedTable {
                table: table.clone(),
                records: Vec::new(),
            });
        for r in records.into_iter().filter(|r| r.num_rows() > 0) {
            self.bytes += r.get_array_memory_size() as u64;
            entry.records.push(r);
        }
    }

    pub fn mark(&self) -> StagedMark {
        StagedMark(
            self.tables
                .iter()
                .map(|(id, t)| (*id, t.records.len()))
                .collect(),
        )
    }

    /// Drops every record staged after `mark` (ROLLBACK TO SAVEPOINT).
    pub fn rollback_to(&mut self, mark: &StagedMark) {
        for (id, t) in self.tables.iter_mut() {
            let keep = mark.0.iter().find(|(m, _)| m == id).map_or(0, |(_, n)| *n);
            for r in t.records.drain(keep.min(t.records.len())..) {
                self.bytes = self.bytes.saturating_sub(r.get_array_memory_size() as u64);
            }
        }
    }

    /// The tables written to and their records, in table id order.
    pub fn into_tables(self) -> Vec<(Arc<TableLog>, Vec<RecordBatch>)> {
        self.tables
            .into_values()
            .filter(|t| !t.records.is_empty())
            .map(|t| (t.table, t.records))
            .collect()
    }
}

/// Stages one statement's records in a transaction: all of them, or none
/// when the statement fails. Returns how many it wrote.
pub async fn stage_statement(
    staged: &parking_lot::Mutex<StagedWrites>,
    table: &Arc<TableLog>,
    batches: Vec<RecordBatch>,
    on_conflict_do_nothing: bool,
) -> Result<u64, LogError> {
    let earlier = match on_conflict_do_nothing && table.def().is_keyed() {
        true => staged.lock().records(table.def().id).to_vec(),
        false => Vec::new(),
    };
    let records = table
        .stage(batches, on_conflict_do_nothing, &earlier)
        .await?;
    let rows = records.iter().map(|r| r.num_rows() as u64).sum();
    let bytes: u64 = records
        .iter()
        .map(|r| r.get_array_memory_size() as u64)
        .sum();
    let limit = table.max_statement_bytes();
    let mut staged = staged.lock();
    if staged.bytes() + bytes > limit {
        return Err(LogError::TransactionTooLarge { limit });
    }
    staged.add(table, records);
    Ok(rows)
}

/// Commits transactions across tables, never while a statement takes its
/// snapshot of what is committed. Transactions that reach COMMIT while
/// another commits wait and then commit together, as one (group commit):
/// each table prepares once with all their records, and one record of the
/// transaction log covers them all.
pub struct TransactionCoordinator {
    log: Arc<parking_lot::Mutex<TransactionLog>>,
    /// Transactions waiting for the next group.
    queue: parking_lot::Mutex<Vec<PendingCommit>>,
    /// One group commits at a time: a table's writer waits for the outcome
    /// of the group it prepared, so two interleaved groups could each wait
    /// for the other.
    one_at_a_time: tokio::sync::Mutex<()>,
    /// Held for reading while a statement snapshots the committed ends of
    /// the tables it reads; held for writing while a group publishes.
    visibility: Arc<tokio::sync::RwLock<()>>,
    /// The snapshots of open REPEATABLE READ transactions.
    snapshots: parking_lot::Mutex<Vec<Weak<Snapshot>>>,
    /// Snapshots named by `pg_export_snapshot()`, importable while the
    /// exporting transaction holds them.
    exported: parking_lot::Mutex<Vec<(String, Weak<Snapshot>)>>,
    exports: std::sync::atomic::AtomicU64,
    /// Tables whose frames the log carries: each fsyncs its partitions
    /// before the log is rotated.
    carried_by: parking_lot::Mutex<Vec<Weak<TableLog>>>,
}

struct PendingCommit {
    tables: Vec<(Arc<TableLog>, Vec<RecordBatch>)>,
    offsets: Vec<OffsetsEntry>,
    /// A REPEATABLE READ transaction's snapshot: its keyed writes are
    /// checked against what was committed since.
    snapshot: Option<Arc<Snapshot>>,
    reply: tokio::sync::oneshot::Sender<Result<(), LogError>>,
}

/// Every table's committed end offsets at one moment: what a REPEATABLE
/// READ transaction reads, whatever commits after.
#[derive(Debug)]
pub struct Snapshot {
    ends: HashMap<u64, Vec<u64>>,
}

impl Snapshot {
    /// Where the snapshot ends in each partition of `table`: nothing of a
    /// table created after it.
    pub fn ends(&self, table: &TableLog) -> Vec<u64> {
        let ends = self.ends.get(&table.def().id);
        (0..table.partitions().len())
            .map(|k| ends.and_then(|e| e.get(k)).copied().unwrap_or(0))
            .collect()
    }
}

impl TransactionCoordinator {
    pub fn new(log: TransactionLog) -> TransactionCoordinator {
        TransactionCoordinator {
            log: Arc::new(parking_lot::Mutex::new(log)),
            queue: parking_lot::Mutex::new(Vec::new()),
            one_at_a_time: tokio::sync::Mutex::new(()),
            visibility: Arc::new(tokio::sync::RwLock::new(())),
            snapshots: parking_lot::Mutex::new(Vec::new()),
            exported: parking_lot::Mutex::new(Vec::new()),
            exports: std::sync::atomic::AtomicU64::new(1),
            carried_by: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The committed ends of `tables` at one moment (no multi-table
    /// transaction publishes meanwhile), kept in mind for compaction
    /// until the last handle is dropped.
    pub async fn take_snapshot(&self, tables: &[Arc<TableLog>]) -> Arc<Snapshot> {
        let _shared = self.visibility.read().await;
        let snapshot = Arc::new(Snapshot {
            ends: tables
                .iter()
                .map(|t| (t.def().id, t.commits().borrow().clone()))
                .collect(),
        });
        let mut open = self.snapshots.lock();
        open.retain(|s| s.strong_count() > 0);
        open.push(Arc::downgrade(&snapshot));
        snapshot
    }

    /// Names `snapshot` so that other sessions can read it (`SET
    /// TRANSACTION SNAPSHOT`) for as long as its exporter holds it.
    pub fn export_snapshot(&self, snapshot: &Arc<Snapshot>) -> String {
        let n = self
            .exports
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("00000003-{n:08X}-1");
        let mut exported = self.exported.lock();
        exported.retain(|(_, s)| s.strong_count() > 0);
        exported.push((id.clone(), Arc::downgrade(snapshot)));
        id
    }

    /// The exported snapshot named `id`, while its exporter holds it.
    pub fn imported_snapshot(&self, id: &str) -> Option<Arc<Snapshot>> {
        self.exported
            .lock()
            .iter()
            .find(|(name, _)| name == id)
            .and_then(|(_, s)| s.upgrade())
    }

    /// Per partition of `table`, the offsets below which every version an
    /// open snapshot reads lies: compaction works below them only.
    pub fn snapshot_floor(&self, table: &TableLog) -> Vec<u64> {
        let mut floor = vec![u64::MAX; table.partitions().len()];
        for snapshot in self.snapshots.lock().iter().filter_map(Weak::upgrade) {
            for (f, end) in floor.iter_mut().zip(snapshot.ends(table)) {
                *f = (*f).min(end);
            }
        }
        floor
    }

    /// What the transaction log commits, for recovery.
    pub fn recovered(&self) -> TransactionRecord {
        self.log.lock().recovered().clone()
    }

    /// Makes every table whose frames the log carries fsync its
    /// partitions, so that the log may drop them. A table dropped since
    /// needs nothing.
    async fn sync_carried(&self) -> Result<(), LogError> {
        let tables = std::mem::take(&mut *self.carried_by.lock());
        for table in tables.iter().filter_map(Weak::upgrade) {
            match table.drop_carried_frames().await {
                Ok(()) | Err(LogError::WriterStopped(_)) => {}
                Err(e) => {
                    self.carried_by.lock().extend(tables);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Held while a statement plans its reads: no transaction publishes
    /// meanwhile, so a statement sees all of one or none of it.
    pub async fn snapshot_guard(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.visibility.clone().read_owned().await
    }

    /// Replaces the log by one record that carries no frames, after every
    /// table whose frames it carried fsynced them (an erasure: no copy of
    /// an erased row may stay here). Waits for the group committing.
    pub async fn drop_carried_frames(&self) -> Result<(), LogError> {
        let _one = self.one_at_a_time.lock().await;
        self.sync_carried().await?;
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || log.lock().rotate())
            .await
            .map_err(|e| LogError::WriterStopped(format!("transaction log: {e}")))?
    }

    /// Empties the log (once recovery wrote everything it held elsewhere).
    pub fn clear(&self) -> Result<(), LogError> {
        self.log.lock().clear()
    }

    /// Commits `tables`' staged records and `offsets` as one transaction:
    /// all durable and visible when this returns `Ok`, none otherwise.
    /// The group runs to the end on its own task, so a client that goes
    /// away in the middle cannot leave it half done.
    /// With a `snapshot` (REPEATABLE READ), fails with nothing committed
    /// when another transaction committed a record of a key it writes
    /// since.
    pub async fn commit(
        self: &Arc<Self>,
        tables: Vec<(Arc<TableLog>, Vec<RecordBatch>)>,
        offsets: Vec<OffsetsEntry>,
        snapshot: Option<Arc<Snapshot>>,
    ) -> Result<(), LogError> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.queue.lock().push(PendingCommit {
            tables,
            offsets,
            snapshot,
            reply,
        });
        let this = self.clone();
        tokio::spawn(async move { this.commit_queued().await }.in_current_span());
        result
            .await
            .map_err(|_| LogError::WriterStopped("transaction commit".into()))?
    }

    /// Commits every transaction queued by now as one group (nothing when
    /// an earlier call took them already). A transaction with a snapshot
    /// commits in a group of its own: its check against what others
    /// committed must not miss a transaction of its own group.
    async fn commit_queued(&self) {
        let _one = self.one_at_a_time.lock().await;
        let queued = std::mem::take(&mut *self.queue.lock());
        let (checked, group): (Vec<_>, Vec<_>) =
            queued.into_iter().partition(|p| p.snapshot.is_some());
        self.commit_pending(group).await;
        for pending in checked {
            self.commit_pending(vec![pending]).await;
        }
    }

    async fn commit_pending(&self, group: Vec<PendingCommit>) {
        if group.is_empty() {
            return;
        }
        let snapshot = match group.as_slice() {
            [only] => only.snapshot.clone(),
            _ => None,
        };
        let mut tables: BTreeMap<u64, (Arc<TableLog>, Vec<RecordBatch>)> = BTreeMap::new();
        let mut offsets = Vec::new();
        let mut replies = Vec::with_capacity(group.len());
        for pending in group {
            for (table, records) in pending.tables {
                tables
                    .entry(table.def().id)
                    .or_insert_with(|| (table, Vec::new()))
                    .1
                    .extend(records);
            }
            offsets.extend(pending.offsets);
            replies.push(pending.reply);
        }
        let result = self
            .commit_group(tables.into_values().collect(), offsets, snapshot.as_deref())
            .await;
        for reply in replies {
            let _ = reply.send(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(super::table_writer::copy_error(e)),
            });
        }
    }

    async fn commit_group(
        &self,
        tables: Vec<(Arc<TableLog>, Vec<RecordBatch>)>,
        offsets: Vec<OffsetsEntry>,
        snapshot: Option<&Snapshot>,
    ) -> Result<(), LogError> {
        // A full log is rotated by this group's record, dropping the
        // frames it carries: their tables fsync first, and this group's
        // tables fsync their own.
        let carry = !self.log.lock().is_full();
        if !carry {
            self.sync_carried().await?;
        }
        // 1. Every table writes its frames, all at once, and waits.
        // Dropping a prepared table (on any error below) takes its frames
        // back.
        let mut prepared =
            futures::future::try_join_all(tables.into_iter().map(|(table, records)| async move {
                let since = snapshot.map(|s| s.ends(&table));
                table.prepare(records, since.as_deref(), carry).await
            }))
            .await?;
        // 2. The commit point: one record, carrying the frames the tables
        // did not fsync.
        let ends: Vec<(u64, Vec<u64>)> = prepared
            .iter()
            .map(|p| (p.table_id(), p.ends().to_vec()))
            .collect();
        let mut frames = Vec::new();
        for p in prepared.iter_mut() {
            let carried = p.take_carried();
            if !carried.is_empty() {
                let mut by = self.carried_by.lock();
                if !by
                    .iter()
                    .any(|t| t.upgrade().is_some_and(|t| t.def().id == p.table_id()))
                {
                    by.push(Arc::downgrade(p.table()));
                }
            }
            frames.extend(carried.into_iter().map(|(k, f)| (p.table_id(), k, f)));
        }
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || log.lock().write(ends, offsets, &frames))
            .await
            .map_err(|e| LogError::WriterStopped(format!("transaction log: {e}")))??;
        // 3. Publish, with readers held off.
        let _exclusive = self.visibility.write().await;
        for p in prepared {
            p.publish().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sub: u64, seq: u64) -> OffsetsEntry {
        OffsetsEntry {
            subscription: sub,
            seq,
            body: serde_json::json!({ "seq": seq }),
        }
    }

    #[test]
    fn records_merge_to_the_largest_ends_and_the_newest_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        log.write(vec![(1, vec![5, 7]), (2, vec![3])], vec![entry(9, 4)], &[])
            .unwrap();
        log.write(vec![(1, vec![6, 7])], vec![entry(9, 2), entry(8, 1)], &[])
            .unwrap();
        let log = TransactionLog::open(dir.path()).unwrap();
        let r = log.recovered();
        assert_eq!(r.table_ends(1), Some(&[6u64, 7][..]));
        assert_eq!(r.table_ends(2), Some(&[3u64][..]));
        assert_eq!(r.group_offsets(9).map(|o| o.seq), Some(4));
        assert_eq!(r.group_offsets(8).map(|o| o.seq), Some(1));
        assert_eq!(r.seq, 2);
    }

    #[test]
    fn a_cleared_log_commits_nothing_and_keeps_counting() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        log.write(vec![(1, vec![5])], vec![], &[]).unwrap();
        log.clear().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        assert_eq!(log.recovered().table_ends(1), None);
        log.write(vec![(2, vec![1])], vec![], &[]).unwrap();
        assert_eq!(log.recovered().seq, 2);
    }

    #[test]
    fn a_torn_record_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        log.write(vec![(1, vec![5])], vec![], &[]).unwrap();
        log.write(vec![(1, vec![9])], vec![], &[]).unwrap();
        let path = dir.path().join(FILE_NAME);
        let bytes = std::fs::read(&path).unwrap();
        // Cut the second record in half.
        let first = 8 + u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        let second =
            8 + u32::from_le_bytes(bytes[first + 4..first + 8].try_into().unwrap()) as usize;
        std::fs::write(&path, &bytes[..first + second / 2]).unwrap();
        let log = TransactionLog::open(dir.path()).unwrap();
        assert_eq!(log.recovered().table_ends(1), Some(&[5u64][..]));
    }

    #[test]
    fn records_carry_frames_until_the_log_is_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        log.write(vec![(1, vec![1, 0])], vec![], &[(1, 0, vec![7; 10])])
            .unwrap();
        log.write(
            vec![(1, vec![1, 1]), (2, vec![1])],
            vec![],
            &[(1, 1, vec![8; 20]), (2, 0, vec![9; 30])],
        )
        .unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        assert_eq!(log.recovered().table_ends(1), Some(&[1u64, 1][..]));
        let frames = log.carried_frames(1);
        assert_eq!(
            frames
                .iter()
                .map(|f| (f.partition, f.bytes.len()))
                .collect::<Vec<_>>(),
            [(0, 10), (1, 20)]
        );
        assert_eq!(log.carried_frames(2)[0].bytes, vec![9; 30]);
        // A record of a megabyte fills the log: the next one rotates it,
        // keeping what every record committed and no frame.
        log.write(
            vec![(1, vec![2, 1])],
            vec![],
            &[(1, 0, vec![1; ROTATE_BYTES as usize])],
        )
        .unwrap();
        log.write(vec![(2, vec![2])], vec![], &[(2, 0, vec![2; 5])])
            .unwrap();
        let log = TransactionLog::open(dir.path()).unwrap();
        assert_eq!(log.recovered().table_ends(1), Some(&[2u64, 1][..]));
        assert_eq!(log.recovered().table_ends(2), Some(&[2u64][..]));
        assert!(log.carried_frames(1).is_empty() && log.carried_frames(2).is_empty());
    }

    /// A two-table transaction is durable by its record's one fsync: when
    /// the partitions lose what was never fsynced (a machine crash),
    /// recovery writes the frames back from the transaction log.
    #[tokio::test]
    async fn a_transactions_frames_lost_from_partitions_come_back_from_its_record() {
        use crate::log::table::tests::{def_named, ids};
        use crate::log::{LogConfig, LogStore};
        use arrow::array::Int64Array;

        let def = def_named;
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path(), LogConfig::default()).unwrap();
        let a = store.create_table(def("a"), false).unwrap().unwrap();
        let b = store.create_table(def("b"), false).unwrap().unwrap();
        let batch = |t: &TableLog, v: Vec<i64>| {
            RecordBatch::try_new(t.def().data_schema(), vec![Arc::new(Int64Array::from(v))])
                .unwrap()
        };
        for i in 0..5 {
            store
                .transactions()
                .commit(
                    vec![
                        (a.clone(), vec![batch(&a, vec![i, i + 10])]),
                        (b.clone(), vec![batch(&b, vec![i + 100])]),
                    ],
                    vec![],
                    None,
                )
                .await
                .unwrap();
        }
        let (a_id, b_id) = (a.def().id, b.def().id);
        let want_a: Vec<i64> = {
            let mut v: Vec<i64> = (0..5).chain(10..15).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(ids(&a).await, want_a);
        drop((a, b, store));
        // The machine lost the partitions' unsynced tails.
        for id in [a_id, b_id] {
            for p in 0..2 {
                let part = dir.path().join(format!("tables/{id}/p{p}"));
                for entry in std::fs::read_dir(&part).unwrap() {
                    let path = entry.unwrap().path();
                    if path.extension().is_some_and(|e| e == "seg") {
                        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                        f.set_len(f.metadata().unwrap().len() / 3).unwrap();
                    }
                }
            }
        }
        let store = LogStore::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(ids(&store.table("a").unwrap()).await, want_a);
        assert_eq!(
            ids(&store.table("b").unwrap()).await,
            (100..105).collect::<Vec<_>>()
        );
        // What start-up does once every table is open: the frames are
        // durable in the partitions now, and stay after the log is emptied.
        store.transactions().clear().unwrap();
        drop(store);
        let store = LogStore::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(ids(&store.table("a").unwrap()).await, want_a);
    }
}
