//! View checkpoints: each view's state, its rows and the source offsets they
//! cover, committed together by one manifest in the object store.
//!
//! An epoch writes its data files first (Parquet: rows appended since the
//! last epoch, the open groups' accumulator states, new late rows), then the
//! manifest naming every file of the view's state. Recovery takes the newest
//! manifest whose files are all present and intact; files of any other epoch
//! are garbage. Uploads run beside the view's task, retrying with backoff,
//! so a slow or absent store delays checkpoints, never the view.

pub(crate) mod format;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parking_lot::Mutex;
use sluice_catalog::{CheckpointFile, CheckpointManifest, FileKind, StatePartId, ViewClockState};
use tokio::task::AbortHandle;
use tracing::{info, info_span, warn, Instrument};

use crate::store::{DurableStore, StoreError};

pub use format::{decode_parquet, encode_parquet, encode_state_part};

/// Attempts kept for `sluice_catalog.checkpoints`.
const RECORDS_KEPT: usize = 2_000;
/// A checkpoint is not due sooner than this many times what the last one
/// cost after it began: with a large state, checkpoints take at most about
/// a fifth of a view's time (as Flink's minimum pause between checkpoints
/// does, here found from the cost).
const PACE: u64 = 4;
/// Longest wait between two attempts of a failing checkpoint.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One checkpoint attempt, as `sluice_catalog.checkpoints` shows it.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub view: String,
    pub epoch: u64,
    pub attempt: u32,
    pub started_at_us: i64,
    pub completed_at_us: Option<i64>,
    pub duration_ms: u64,
    pub bytes: u64,
    pub source_offsets: Vec<u64>,
    pub error: Option<String>,
}

/// The checkpoint subsystem shared by all views: where to write, how often,
/// and what happened.
pub struct Checkpoints {
    pub store: Arc<DurableStore>,
    pub interval: Duration,
    records: Mutex<VecDeque<CheckpointRecord>>,
    /// The last committed manifest, per view id.
    committed: Mutex<HashMap<u64, CheckpointManifest>>,
    /// Manifests kept past their epoch because cuts name them (see
    /// [`Checkpoints::pin_latest`]), by view id and epoch, with how many
    /// cuts do. Their files are not garbage.
    pinned: Mutex<HashMap<(u64, u64), (CheckpointManifest, usize)>>,
}

pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Checkpoints {
    pub fn new(store: Arc<DurableStore>, interval: Duration) -> Arc<Checkpoints> {
        Arc::new(Checkpoints {
            store,
            interval,
            records: Mutex::new(VecDeque::new()),
            committed: Mutex::new(HashMap::new()),
            pinned: Mutex::new(HashMap::new()),
        })
    }

    pub fn records(&self) -> Vec<CheckpointRecord> {
        self.records.lock().iter().cloned().collect()
    }

    /// The view's last committed epoch and when it completed.
    pub fn last_committed(&self, view_id: u64) -> Option<(u64, i64)> {
        self.committed
            .lock()
            .get(&view_id)
            .map(|m| (m.epoch, m.completed_at_us))
    }

    /// The view's last committed manifest.
    pub fn latest(&self, view_id: u64) -> Option<CheckpointManifest> {
        self.committed.lock().get(&view_id).cloned()
    }

    /// Keeps the view's last committed checkpoint (for a cut) until
    /// [`Checkpoints::unpin`]: garbage collection and start-up leave its
    /// files. Returns its manifest.
    pub fn pin_latest(&self, view_id: u64) -> Option<CheckpointManifest> {
        let latest = self.latest(view_id)?;
        self.pinned
            .lock()
            .entry((view_id, latest.epoch))
            .or_insert_with(|| (latest.clone(), 0))
            .1 += 1;
        Some(latest)
    }

    /// Keeps a checkpoint a cut named before a restart, if its manifest
    /// is still there (an erasure deletes every epoch but its own).
    pub async fn pin_epoch(&self, view_id: u64, epoch: u64) -> Option<CheckpointManifest> {
        if let Some(entry) = self.pinned.lock().get_mut(&(view_id, epoch)) {
            entry.1 += 1;
            return Some(entry.0.clone());
        }
        let key = CheckpointManifest::key(view_id, epoch);
        let manifest = match self.store.get(&key).await {
            Ok(bytes) => CheckpointManifest::decode(&bytes).ok()?,
            Err(e) => {
                warn!(view_id, epoch, error = %e, "a checkpoint a cut keeps is gone; reads at the cut replay the log");
                return None;
            }
        };
        let mut pinned = self.pinned.lock();
        let entry = pinned
            .entry((view_id, epoch))
            .or_insert_with(|| (manifest, 0));
        entry.1 += 1;
        Some(entry.0.clone())
    }

    /// Lets a cut's checkpoint go: its files are garbage at the view's
    /// next epoch (or start) unless another cut keeps it.
    pub fn unpin(&self, view_id: u64, epoch: u64) {
        let mut pinned = self.pinned.lock();
        if let Some(entry) = pinned.get_mut(&(view_id, epoch)) {
            entry.1 -= 1;
            if entry.1 == 0 {
                pinned.remove(&(view_id, epoch));
            }
        }
    }

    /// The kept checkpoints of a view, oldest first.
    pub fn pinned(&self, view_id: u64) -> Vec<CheckpointManifest> {
        let mut kept: Vec<CheckpointManifest> = self
            .pinned
            .lock()
            .iter()
            .filter(|((v, _), _)| *v == view_id)
            .map(|(_, (m, _))| m.clone())
            .collect();
        kept.sort_by_key(|m| m.epoch);
        kept
    }

    /// The objects of a view's kept checkpoints: manifests and files.
    fn pinned_keys(&self, view_id: u64) -> std::collections::HashSet<String> {
        self.pinned(view_id)
            .iter()
            .flat_map(|m| {
                m.files
                    .iter()
                    .map(|f| f.key.clone())
                    .chain([CheckpointManifest::key(m.view_id, m.epoch)])
            })
            .collect()
    }

    /// Reads a kept checkpoint back whole, checking every file.
    pub async fn load(&self, m: &CheckpointManifest) -> Result<RestoredCheckpoint, StoreError> {
        self.load_epoch(&CheckpointManifest::key(m.view_id, m.epoch))
            .await
    }

    /// The checkpoint a view was restored from at start-up, listed as
    /// attempt 0 of its epoch: where the view's replay of the log began.
    pub fn record_restored(&self, m: &CheckpointManifest) {
        self.record(CheckpointRecord {
            view: m.view.clone(),
            epoch: m.epoch,
            attempt: 0,
            started_at_us: m.started_at_us,
            completed_at_us: Some(m.completed_at_us),
            duration_ms: ((m.completed_at_us - m.started_at_us).max(0) / 1000) as u64,
            bytes: 0,
            source_offsets: m.source_offsets.clone(),
            error: None,
        });
    }

    fn record(&self, r: CheckpointRecord) {
        let mut records = self.records.lock();
        if records.len() >= RECORDS_KEPT {
            records.pop_front();
        }
        records.push_back(r);
    }

    /// Deletes a dropped view's checkpoints (in the background).
    pub fn forget(self: &Arc<Self>, view_id: u64) {
        self.committed.lock().remove(&view_id);
        self.pinned.lock().retain(|(v, _), _| *v != view_id);
        let this = self.clone();
        tokio::spawn(async move {
            let prefix = CheckpointManifest::view_prefix(view_id);
            if let Err(e) = this.store.delete_prefix(&prefix).await {
                warn!(view_id, error = %e, "could not delete a dropped view's checkpoints");
            }
        });
    }

    /// Deletes a replaced view's checkpoints, every epoch, and returns
    /// once they are gone (an erasure: its files hold erased rows).
    pub async fn forget_now(&self, view_id: u64) -> Result<(), StoreError> {
        self.committed.lock().remove(&view_id);
        self.pinned.lock().retain(|(v, _), _| *v != view_id);
        self.store
            .delete_prefix(&CheckpointManifest::view_prefix(view_id))
            .await
    }

    /// Deletes the checkpoints of every view id not in `known`.
    pub async fn forget_all_but(&self, known: &[u64]) -> Result<(), StoreError> {
        for o in self.store.list("views").await? {
            let id = o.key.split('/').nth(1).and_then(|s| s.parse::<u64>().ok());
            if id.is_some_and(|id| !known.contains(&id)) {
                self.store.delete(&o.key).await?;
            }
        }
        Ok(())
    }

    /// Loads a view's newest complete checkpoint and deletes the files of
    /// every other epoch (incomplete or superseded).
    pub async fn load_latest(
        &self,
        view_id: u64,
        view: &str,
    ) -> Result<Option<RestoredCheckpoint>, StoreError> {
        let prefix = CheckpointManifest::view_prefix(view_id);
        let objects = self.store.list(&prefix).await?;
        let mut manifests: Vec<(u64, String)> = objects
            .iter()
            .filter_map(|o| CheckpointManifest::epoch_of_key(&o.key).map(|e| (e, o.key.clone())))
            .collect();
        manifests.sort();
        let mut restored = None;
        for (epoch, key) in manifests.iter().rev() {
            match self.load_epoch(key).await {
                Ok(r) => {
                    restored = Some(r);
                    break;
                }
                Err(e) => {
                    warn!(view, epoch, error = %e, "checkpoint is unusable; trying an older one")
                }
            }
        }
        let keep: Vec<String> = match &restored {
            Some(r) => {
                let m: &CheckpointManifest = &r.manifest;
                let mut keep: Vec<String> = m.files.iter().map(|f| f.key.clone()).collect();
                keep.push(CheckpointManifest::key(view_id, m.epoch));
                keep
            }
            None => Vec::new(),
        };
        let pinned = self.pinned_keys(view_id);
        for o in objects
            .iter()
            .filter(|o| !keep.contains(&o.key) && !pinned.contains(&o.key))
        {
            if let Err(e) = self.store.delete(&o.key).await {
                warn!(key = %o.key, error = %e, "could not delete a stale checkpoint file");
            }
        }
        if let Some(r) = &restored {
            self.committed.lock().insert(view_id, r.manifest.clone());
        }
        Ok(restored)
    }

    async fn load_epoch(&self, key: &str) -> Result<RestoredCheckpoint, StoreError> {
        let corrupt = |key: &str, reason: String| StoreError::Corrupt {
            key: key.to_string(),
            reason,
        };
        let bytes = self.store.get(key).await?;
        let manifest = CheckpointManifest::decode(&bytes).map_err(|r| corrupt(key, r))?;
        let mut restored = RestoredCheckpoint {
            manifest: manifest.clone(),
            appended: Vec::new(),
            groups: Vec::new(),
            operators: Vec::new(),
            late: Vec::new(),
            changes: Vec::new(),
        };
        for file in &manifest.files {
            let data = self.store.get(&file.key).await?;
            if data.len() as u64 != file.bytes || crc32c::crc32c(&data) != file.crc32c {
                return Err(corrupt(&file.key, "size or checksum mismatch".into()));
            }
            let batches = decode_parquet(data).map_err(|e| corrupt(&file.key, e.to_string()))?;
            match file.kind {
                FileKind::Rows => restored.appended.extend(batches),
                FileKind::Groups => restored.groups.extend(batches),
                FileKind::Operators | FileKind::OperatorRows => {
                    restored.operators.push(RestoredPart {
                        id: file.part,
                        rows: batches,
                    })
                }
                FileKind::Late => restored.late.extend(batches),
                FileKind::Changes => restored.changes.extend(batches),
            }
        }
        Ok(restored)
    }
}

/// One operator state file read back: a part's rows, or (`id` None) a
/// file of an earlier version holding every part as Arrow IPC bytes.
pub struct RestoredPart {
    pub id: Option<StatePartId>,
    pub rows: Vec<RecordBatch>,
}

/// What a view gets back from its newest checkpoint.
pub struct RestoredCheckpoint {
    pub manifest: CheckpointManifest,
    pub appended: Vec<RecordBatch>,
    pub groups: Vec<RecordBatch>,
    /// The operators' state, file by file in the order written.
    pub operators: Vec<RestoredPart>,
    pub late: Vec<RecordBatch>,
    /// The view's change log, when it keeps one.
    pub changes: Vec<RecordBatch>,
}

/// The view's state at one point, taken by the view's task between deltas.
pub struct Capture {
    pub source_offsets: Vec<u64>,
    pub clock: ViewClockState,
    pub late_count: u64,
    /// Rows appended since the previous capture.
    pub appended: Vec<RecordBatch>,
    /// Open groups, rewritten each epoch.
    pub groups: Vec<RecordBatch>,
    /// The operators' state, part by part: all of it, or what it gained
    /// since the last capture (`operators_whole` false).
    pub operators: Option<Vec<OperatorPart>>,
    pub operators_whole: bool,
    /// Late rows kept since the previous capture.
    pub late: Option<RecordBatch>,
    /// Whether the view keeps a change log, and what it gained since the
    /// previous capture.
    pub changes_kept: bool,
    pub changes: Option<RecordBatch>,
    /// Rows of the sources on which the view's plans fail.
    pub failed_rows: Vec<sluice_catalog::FailedRowEntry>,
    /// An erasing epoch (`VACUUM`): once it commits, no file of another
    /// epoch stays, not even the previous one as a fallback, so that rows
    /// deleted from the sources are in no checkpoint file. The state it
    /// writes is whole.
    pub erases: bool,
}

/// Rows of one part of one operator's state (see `Operator::snapshot`).
pub struct OperatorPart {
    pub id: StatePartId,
    pub rows: Vec<RecordBatch>,
}

/// Called with each committed manifest, and whether it was an erasing
/// epoch (the other epochs' files are deleted by then).
pub type OnCommit = Arc<dyn Fn(&CheckpointManifest, bool) + Send + Sync>;

/// A view's checkpointing, owned by the view's task.
pub struct ViewCheckpointer {
    shared: Arc<Checkpoints>,
    view_id: u64,
    view: String,
    /// The last committed manifest: its append-only files carry over.
    last: Arc<Mutex<Option<CheckpointManifest>>>,
    next_epoch: u64,
    in_flight: Option<tokio::task::JoinHandle<()>>,
    /// Set by the upload task when it is completely done (garbage
    /// collected too), just before it wakes the view's task.
    upload_done: Arc<std::sync::atomic::AtomicBool>,
    /// The view's task, woken when an upload is done so that a checkpoint
    /// asked for meanwhile starts at once.
    wake: Arc<tokio::sync::Notify>,
    abort: Option<AbortHandle>,
    captured_offsets: Option<Vec<u64>>,
    captured_late: u64,
    last_capture: Instant,
    /// What the last committed epoch cost, in microseconds: capturing the
    /// state on the view's task and writing it.
    last_cost_us: Arc<std::sync::atomic::AtomicU64>,
    on_commit: OnCommit,
    /// Batches of the view's appended rows already captured.
    pub appended_done: usize,
}

impl Drop for ViewCheckpointer {
    fn drop(&mut self) {
        if let Some(a) = self.abort.take() {
            a.abort();
        }
    }
}

impl ViewCheckpointer {
    pub fn new(
        shared: Arc<Checkpoints>,
        view_id: u64,
        view: &str,
        restored: Option<&CheckpointManifest>,
        appended_done: usize,
        on_commit: OnCommit,
        wake: Arc<tokio::sync::Notify>,
    ) -> ViewCheckpointer {
        ViewCheckpointer {
            shared,
            view_id,
            view: view.to_string(),
            last: Arc::new(Mutex::new(restored.cloned())),
            next_epoch: restored.map(|m| m.epoch + 1).unwrap_or(1),
            in_flight: None,
            upload_done: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            wake,
            abort: None,
            captured_offsets: restored.map(|m| m.source_offsets.clone()),
            captured_late: restored.map(|m| m.late_count).unwrap_or(0),
            last_capture: Instant::now(),
            last_cost_us: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            on_commit,
            appended_done,
        }
    }

    /// How long after a capture the next one is due: the interval, or
    /// [`PACE`] times what the last epoch cost when that is longer.
    fn pause(&self) -> Duration {
        let cost = self.last_cost_us.load(std::sync::atomic::Ordering::Relaxed);
        self.shared
            .interval
            .max(Duration::from_micros(cost.saturating_mul(PACE)))
    }

    /// True when a new epoch should be captured now: nothing is uploading,
    /// the view moved since the last capture, and the interval passed (or a
    /// FLUSH asked). A view whose state takes long to capture and write
    /// waits longer (see [`ViewCheckpointer::pause`]), so checkpoints take
    /// at most about a fifth of its time however large its state.
    /// `force`: capture even if the view has not moved (its change log
    /// starts or stops).
    pub fn due(&mut self, offsets: &[u64], late_count: u64, asked: bool, force: bool) -> bool {
        if self.uploading() {
            return false;
        }
        self.in_flight = None;
        let moved =
            self.captured_offsets.as_deref() != Some(offsets) || late_count != self.captured_late;
        force || (moved && (asked || self.last_capture.elapsed() >= self.pause()))
    }

    /// True while an epoch is being written.
    pub fn uploading(&self) -> bool {
        self.in_flight.is_some() && !self.upload_done.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Starts writing an epoch; retries until it commits. `captured_in`:
    /// how long capturing it took on the view's task.
    pub fn start(&mut self, capture: Capture, appended_done: usize, captured_in: Duration) {
        self.captured_offsets = Some(capture.source_offsets.clone());
        self.captured_late = capture.late_count;
        self.last_capture = Instant::now();
        self.appended_done = appended_done;
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let shared = self.shared.clone();
        let last = self.last.clone();
        let view_id = self.view_id;
        let view = self.view.clone();
        let on_commit = self.on_commit.clone();
        let done = self.upload_done.clone();
        done.store(false, std::sync::atomic::Ordering::Release);
        let wake = self.wake.clone();
        let last_cost_us = self.last_cost_us.clone();
        let span = info_span!("checkpoint", view = %view, epoch);
        let handle = tokio::spawn(
            async move {
                let began = Instant::now();
                let mut attempt = 0u32;
                loop {
                    attempt += 1;
                    let started = now_us();
                    let clock = Instant::now();
                    let previous = last.lock().clone();
                    let result = write_epoch(
                        &shared.store,
                        view_id,
                        &view,
                        epoch,
                        previous.as_ref(),
                        &capture,
                        started,
                    )
                    .await;
                    let duration_ms = clock.elapsed().as_millis() as u64;
                    crate::metrics::METRICS.checkpoint(result.is_ok(), clock.elapsed());
                    match result {
                        Ok(manifest) => {
                            shared.record(CheckpointRecord {
                                view: view.clone(),
                                epoch,
                                attempt,
                                started_at_us: started,
                                completed_at_us: Some(manifest.completed_at_us),
                                duration_ms,
                                bytes: manifest.bytes(),
                                source_offsets: manifest.source_offsets.clone(),
                                error: None,
                            });
                            shared.committed.lock().insert(view_id, manifest.clone());
                            if attempt > 1 {
                                info!(attempt, "checkpoint committed after retries");
                            }
                            if capture.erases {
                                // Deleted before the commit is announced, so
                                // that VACUUM returns with the files gone.
                                // Retried until it works: VACUUM waits
                                // for it (and times out with 58030).
                                // The checkpoints cuts kept hold the
                                // erased rows too: reads at those cuts
                                // replay the (erased) log instead.
                                shared.pinned.lock().retain(|(v, _), _| *v != view_id);
                                let mut tries = 0u32;
                                while let Err(e) = collect_garbage(&shared, None, &manifest).await {
                                    tries += 1;
                                    warn!(error = %e, tries, "could not delete the files of earlier epochs; retrying");
                                    let backoff = Duration::from_millis(100u64 << tries.min(6));
                                    tokio::time::sleep(backoff.min(MAX_BACKOFF)).await;
                                }
                                info!("erasing checkpoint committed; earlier epochs deleted");
                                on_commit(&manifest, true);
                            } else {
                                on_commit(&manifest, false);
                                if let Some(previous) = previous.as_ref() {
                                    // Errors are retried by the next epoch.
                                    let _ = collect_garbage(&shared, Some(previous), &manifest).await;
                                }
                            }
                            *last.lock() = Some(manifest);
                            let cost = captured_in + began.elapsed();
                            last_cost_us.store(
                                cost.as_micros() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            done.store(true, std::sync::atomic::Ordering::Release);
                            wake.notify_one();
                            return;
                        }
                        Err(e) => {
                            warn!(attempt, error = %e, "checkpoint failed; retrying");
                            shared.record(CheckpointRecord {
                                view: view.clone(),
                                epoch,
                                attempt,
                                started_at_us: started,
                                completed_at_us: None,
                                duration_ms,
                                bytes: 0,
                                source_offsets: capture.source_offsets.clone(),
                                error: Some(e.to_string()),
                            });
                            let backoff = Duration::from_millis(100u64 << attempt.min(6));
                            tokio::time::sleep(backoff.min(MAX_BACKOFF)).await;
                        }
                    }
                }
            }
            .instrument(span),
        );
        self.abort = Some(handle.abort_handle());
        self.in_flight = Some(handle);
    }
}

/// Writes one epoch: data files, then the manifest that commits them.
async fn write_epoch(
    store: &DurableStore,
    view_id: u64,
    view: &str,
    epoch: u64,
    previous: Option<&CheckpointManifest>,
    capture: &Capture,
    started_at_us: i64,
) -> Result<CheckpointManifest, StoreError> {
    // Append-only files of earlier epochs stay part of the state.
    let mut files: Vec<CheckpointFile> = previous
        .map(|m| {
            m.files
                .iter()
                .filter(|f| match f.kind {
                    FileKind::Groups => false,
                    // The joins' state is kept unless written whole again.
                    FileKind::Operators | FileKind::OperatorRows => {
                        !(capture.operators.is_some() && capture.operators_whole)
                    }
                    // A log that is no longer kept is dropped whole.
                    FileKind::Changes => capture.changes_kept,
                    FileKind::Rows | FileKind::Late => true,
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut new_files: Vec<NewFile> = Vec::new();
    let mut add = |kind, name: String, batches: Vec<RecordBatch>| {
        new_files.push(NewFile {
            kind,
            name,
            batches,
            part: None,
        })
    };
    if capture.appended.iter().any(|b| b.num_rows() > 0) {
        add(
            FileKind::Rows,
            "rows.parquet".into(),
            capture.appended.clone(),
        );
    }
    if !capture.groups.is_empty() {
        add(
            FileKind::Groups,
            "groups.parquet".into(),
            capture.groups.clone(),
        );
    }
    if let Some(l) = capture.late.as_ref().filter(|l| l.num_rows() > 0) {
        add(FileKind::Late, "late.parquet".into(), vec![l.clone()]);
    }
    if let Some(c) = capture.changes.as_ref().filter(|c| c.num_rows() > 0) {
        add(FileKind::Changes, "changes.parquet".into(), vec![c.clone()]);
    }
    // Each part of each operator's state is a file of its own columns.
    for p in capture.operators.iter().flatten() {
        if p.rows.iter().all(|b| b.num_rows() == 0) {
            continue;
        }
        let (kind, name) = match capture.operators_whole {
            true => (FileKind::Operators, "operators"),
            false => (FileKind::OperatorRows, "operator-rows"),
        };
        new_files.push(NewFile {
            kind,
            name: format!("{name}-{}-{}.parquet", p.id.stage, p.id.part),
            batches: p.rows.clone(),
            part: Some(p.id),
        });
    }
    let mut puts: Vec<(String, Bytes)> = Vec::new();
    for NewFile {
        kind,
        name,
        batches,
        part,
    } in new_files
    {
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let corrupt = |e: String| StoreError::Corrupt {
            key: name.clone(),
            reason: e,
        };
        let data: Bytes = tokio::task::spawn_blocking(move || match part {
            Some(_) => encode_state_part(&batches),
            None => encode_parquet(&batches),
        })
        .await
        .map_err(|e| corrupt(e.to_string()))?
        .map_err(|e| corrupt(e.to_string()))?;
        let key = CheckpointManifest::data_key(view_id, epoch, &name);
        let file = CheckpointFile {
            key: key.clone(),
            kind,
            rows,
            bytes: data.len() as u64,
            crc32c: crc32c::crc32c(&data),
            part,
        };
        puts.push((key, data));
        files.push(file);
    }
    store.put_all(puts).await?;
    let manifest = CheckpointManifest {
        view_id,
        view: view.to_string(),
        epoch,
        started_at_us,
        completed_at_us: now_us(),
        source_offsets: capture.source_offsets.clone(),
        clock: capture.clock.clone(),
        late_count: capture.late_count,
        files,
        changes_kept: capture.changes_kept,
        stages_shared: true,
        failed_rows: capture.failed_rows.clone(),
    };
    store
        .put(
            &CheckpointManifest::key(view_id, epoch),
            Bytes::from(manifest.encode()),
        )
        .await?;
    Ok(manifest)
}

/// A data file an epoch writes.
struct NewFile {
    kind: FileKind,
    name: String,
    batches: Vec<RecordBatch>,
    part: Option<StatePartId>,
}

/// After epoch n commits, epoch n-1 stays as a fallback (`fallback`);
/// what only epochs before it named is deleted. Without a fallback, only
/// epoch n's files stay.
async fn collect_garbage(
    shared: &Checkpoints,
    fallback: Option<&CheckpointManifest>,
    current: &CheckpointManifest,
) -> Result<(), StoreError> {
    let store = &shared.store;
    let objects = store
        .list(&CheckpointManifest::view_prefix(current.view_id))
        .await?;
    // Read after the listing: a cut that kept an epoch before it was
    // listed keeps its files.
    let pinned = shared.pinned_keys(current.view_id);
    let keep = |key: &str| {
        pinned.contains(key)
            || key == CheckpointManifest::key(current.view_id, current.epoch)
            || current.files.iter().any(|f| f.key == key)
            || fallback.is_some_and(|p| {
                key == CheckpointManifest::key(p.view_id, p.epoch)
                    || p.files.iter().any(|f| f.key == key)
            })
    };
    let mut failed = None;
    for o in objects.iter().filter(|o| !keep(&o.key)) {
        // Files of the epoch being written next are not listed yet: this
        // runs before the next epoch starts.
        if let Err(e) = store.delete(&o.key).await {
            warn!(key = %o.key, error = %e, "could not delete an old checkpoint file");
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view whose epochs cost more than a quarter of the interval waits
    /// four times their cost between captures; a FLUSH does not wait.
    #[test]
    fn a_costly_state_is_captured_less_often() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(DurableStore::local(dir.path()).unwrap());
        let shared = Checkpoints::new(store, Duration::from_millis(100));
        let mut c = ViewCheckpointer::new(
            shared,
            1,
            "v",
            None,
            0,
            Arc::new(|_: &CheckpointManifest, _: bool| {}),
            Arc::new(tokio::sync::Notify::new()),
        );
        assert_eq!(c.pause(), Duration::from_millis(100));
        c.last_cost_us
            .store(10_000, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(c.pause(), Duration::from_millis(100));
        c.last_cost_us
            .store(2_000_000, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(c.pause(), Duration::from_secs(8));
        c.last_capture = Instant::now() - Duration::from_secs(2);
        assert!(!c.due(&[5], 0, false, false), "not yet: the pause is 8 s");
        assert!(c.due(&[5], 0, true, false), "a FLUSH asks for one now");
        c.last_capture = Instant::now() - Duration::from_secs(9);
        assert!(c.due(&[5], 0, false, false));
    }
}
