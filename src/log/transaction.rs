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
//! Record: one JSON [`TransactionRecord`] in a [`RecordFile`].
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

/// `transactions.log` in the data directory.
pub struct TransactionLog {
    file: RecordFile,
    /// Everything the log's records commit, merged.
    merged: TransactionRecord,
}

impl TransactionLog {
    pub fn open(data_dir: &Path) -> Result<TransactionLog, LogError> {
        let (file, records) =
            RecordFile::open(&data_dir.join(FILE_NAME), PREALLOCATE_BYTES, |body| {
                serde_json::from_slice::<TransactionRecord>(body).is_ok()
            })?;
        let mut merged = TransactionRecord::default();
        for body in records {
            if let Ok(r) = serde_json::from_slice::<TransactionRecord>(&body) {
                merged.merge(r);
            }
        }
        Ok(TransactionLog { file, merged })
    }

    /// What the records commit, for recovery.
    pub fn recovered(&self) -> &TransactionRecord {
        &self.merged
    }

    fn write(
        &mut self,
        tables: Vec<(u64, Vec<u64>)>,
        offsets: Vec<OffsetsEntry>,
    ) -> Result<(), LogError> {
        let record = TransactionRecord {
            seq: self.merged.seq + 1,
            tables,
            offsets,
        };
        let mut merged = self.merged.clone();
        merged.merge(record.clone());
        if self.file.len() >= ROTATE_BYTES {
            self.file.replace(&encode(&merged)?)?;
        } else {
            self.file.append(&encode(&record)?)?;
        }
        self.merged = merged;
        Ok(())
    }

    /// Empties the log once every table and group it names holds what it
    /// committed in its own files.
    pub fn clear(&mut self) -> Result<(), LogError> {
        let empty = TransactionRecord {
            seq: self.merged.seq,
            ..Default::default()
        };
        self.file.replace(&encode(&empty)?)?;
        self.merged = empty;
        Ok(())
    }
}

fn encode(record: &TransactionRecord) -> Result<Vec<u8>, LogError> {
    serde_json::to_vec(record).map_err(|e| LogError::Io {
        path: FILE_NAME.into(),
        source: std::io::Error::other(e),
    })
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
            .entry(table.def.id)
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
    let earlier = match on_conflict_do_nothing && table.def.is_keyed() {
        true => staged.lock().records(table.def.id).to_vec(),
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
        let ends = self.ends.get(&table.def.id);
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
                .map(|t| (t.def.id, t.commits().borrow().clone()))
                .collect(),
        });
        let mut open = self.snapshots.lock();
        open.retain(|s| s.strong_count() > 0);
        open.push(Arc::downgrade(&snapshot));
        snapshot
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

    /// Held while a statement plans its reads: no transaction publishes
    /// meanwhile, so a statement sees all of one or none of it.
    pub async fn snapshot_guard(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.visibility.clone().read_owned().await
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
                    .entry(table.def.id)
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
                Err(e) => Err(super::table::copy_error(e)),
            });
        }
    }

    async fn commit_group(
        &self,
        tables: Vec<(Arc<TableLog>, Vec<RecordBatch>)>,
        offsets: Vec<OffsetsEntry>,
        snapshot: Option<&Snapshot>,
    ) -> Result<(), LogError> {
        // 1. Every table writes its frames, all at once, and waits.
        // Dropping a prepared table (on any error below) takes its frames
        // back.
        let prepared =
            futures::future::try_join_all(tables.into_iter().map(|(table, records)| async move {
                let since = snapshot.map(|s| s.ends(&table));
                table.prepare(records, since.as_deref()).await
            }))
            .await?;
        // 2. The commit point.
        let ends: Vec<(u64, Vec<u64>)> = prepared
            .iter()
            .map(|p| (p.table_id(), p.ends().to_vec()))
            .collect();
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || log.lock().write(ends, offsets))
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
        log.write(vec![(1, vec![5, 7]), (2, vec![3])], vec![entry(9, 4)])
            .unwrap();
        log.write(vec![(1, vec![6, 7])], vec![entry(9, 2), entry(8, 1)])
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
        log.write(vec![(1, vec![5])], vec![]).unwrap();
        log.clear().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        assert_eq!(log.recovered().table_ends(1), None);
        log.write(vec![(2, vec![1])], vec![]).unwrap();
        assert_eq!(log.recovered().seq, 2);
    }

    #[test]
    fn a_torn_record_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TransactionLog::open(dir.path()).unwrap();
        log.write(vec![(1, vec![5])], vec![]).unwrap();
        log.write(vec![(1, vec![9])], vec![]).unwrap();
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
}
