//! A materialized view as the rest of the server sees it: its definition
//! and schema, what it reads ([`ViewSource`]), the rows it last published
//! with the source offsets they cover, its late rows, its change log for
//! subscriptions, and how far its checkpoints and backfill have come.
//! Readers (queries, point reads, subscriptions, views over this view, the
//! view's compiler) use this; the view's task (`runner.rs`) writes it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use parking_lot::{Mutex, RwLock};
use sluice_catalog::ViewDef;
use tokio::sync::{watch, Notify};

use crate::error::SluiceError;
use crate::log::TableLog;

use super::changes::change_schema;
use super::operators::operator::OperatorStats;
use super::point_index::PointIndex;

/// How long FLUSH waits for a view's checkpoint before it reports that the
/// object store is not taking it.
pub(super) const FLUSH_CHECKPOINT_WAIT: Duration = Duration::from_secs(60);

/// What readers of a view see: rows as of a commit of the source table.
#[derive(Default)]
pub(super) struct Published {
    pub(super) batches: Vec<RecordBatch>,
    /// Counts publishes: how far a view over this one has read when its
    /// rows change in place.
    pub(super) seq: u64,
    pub(super) consumed: Vec<u64>,
    pub(super) state_rows: u64,
    pub(super) watermark_us: Option<i64>,
    pub(super) late_count: u64,
    pub(super) late: Vec<LateRow>,
    /// Indexes of `batches` built by point reads; a publish drops them.
    pub(super) indexes: Mutex<Vec<Arc<PointIndex>>>,
    /// Each operator's counters as of this publish.
    pub(super) operators: Vec<OperatorStats>,
}

/// A source row that arrived after its window had closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateRow {
    /// Which of the view's inputs the row is of (0 for a view over one).
    pub input: u32,
    pub partition: u32,
    pub offset: u64,
    pub event_time_us: i64,
    pub watermark_us: i64,
}

/// Late rows kept per view for `sluice_catalog.late_rows`; all are counted.
pub(super) const LATE_ROWS_KEPT: usize = 100_000;

pub struct View {
    pub def: ViewDef,
    pub schema: SchemaRef,
    pub source: ViewSource,
    /// The operator graph, as `EXPLAIN MATERIALIZED VIEW` shows it.
    pub explain: Vec<String>,
    /// Published rows never change; new rows are only appended.
    pub append_only: bool,
    pub(super) published: RwLock<Published>,
    pub(super) progress: watch::Sender<Vec<u64>>,
    /// Source offsets covered by the last committed checkpoint.
    pub(super) checkpointed: watch::Sender<Vec<u64>>,
    /// Rows of the view's change stream the last committed checkpoint
    /// holds: appended rows of an append-only view, or rows of the change
    /// log of a view that updates rows. A subscription reads this far,
    /// since rows past it could come out otherwise after a crash.
    pub(super) durable_rows: watch::Sender<u64>,
    /// Subscriptions read the view: keep a change log (for a view that
    /// updates rows in place).
    pub(super) changes_wanted: AtomicBool,
    /// The last committed checkpoint keeps the change log.
    pub(super) changes_durable: watch::Sender<bool>,
    /// The change log (rows with `_op`), including rows not yet durable.
    pub(super) changelog: RwLock<Vec<RecordBatch>>,
    /// A FLUSH wants a checkpoint now; `wake` tells the view's task.
    pub(super) checkpoint_asked: AtomicBool,
    /// A VACUUM wants an erasing checkpoint (see `Capture::erases`).
    pub(super) erase_asked: AtomicBool,
    /// Source offsets covered by the last erasing checkpoint (empty before
    /// the first).
    pub(super) erased: watch::Sender<Vec<u64>>,
    pub(super) wake: Arc<Notify>,
    pub(super) failure: Mutex<Option<String>>,
    /// Why the view's rows cannot be computed from its state now (its
    /// select list divides by a count that is zero, say), with the
    /// SQLSTATE: reads fail with it until a later publish computes them.
    /// The view goes on reading meanwhile.
    pub(super) unavailable: Mutex<Option<(&'static str, String)>>,
    /// How many publishes found the rows not computable.
    pub(super) compute_errors: AtomicU64,
    pub(super) task: Mutex<Option<tokio::task::AbortHandle>>,
    /// Source rows the task has applied since it started.
    pub(super) applied_rows: Arc<AtomicU64>,
    /// The catch-up the task started with, while it lasts.
    pub(super) backfill: Option<BackfillStart>,
}

/// What a view's task had to read when it started.
pub(super) struct BackfillStart {
    pub(super) kind: &'static str,
    pub(super) started: std::time::Instant,
    pub(super) total_rows: u64,
}

/// How far a backfill, a catch-up after restart or a rebuild has come.
#[derive(Debug, Clone)]
pub struct BackfillProgress {
    /// "backfill" (a new view), "catch-up" (after a restart) or "rebuild".
    pub kind: &'static str,
    pub done_rows: u64,
    pub total_rows: u64,
    pub rows_per_second: f64,
    pub eta_seconds: Option<f64>,
}

impl View {
    /// Fails when the view's rows cannot be computed now (see
    /// `unavailable`), with the error that computing them gave.
    pub fn readable(&self) -> Result<(), SluiceError> {
        match &*self.unavailable.lock() {
            Some((sqlstate, message)) => Err(SluiceError::Evaluation {
                sqlstate,
                message: format!(
                    "materialized view \"{}\" cannot be read until its rows compute again: {message}",
                    self.def.name
                ),
            }),
            None => Ok(()),
        }
    }

    /// Why the view's rows cannot be computed now, if they cannot.
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable.lock().as_ref().map(|(_, m)| m.clone())
    }

    /// How many publishes found the view's rows not computable.
    pub fn compute_errors(&self) -> u64 {
        self.compute_errors.load(Ordering::Relaxed)
    }

    /// The rows of the last published snapshot.
    pub fn snapshot(&self) -> Vec<RecordBatch> {
        self.published.read().batches.clone()
    }

    /// The rows of the last published snapshot whose `columns` equal
    /// `key`, as `projection` of the view's columns in `schema`: a hash
    /// lookup in an index of that snapshot, built by the first such read.
    pub fn point_read(
        &self,
        columns: &[usize],
        key: &[ScalarValue],
        projection: &[usize],
        schema: SchemaRef,
    ) -> Result<RecordBatch, SluiceError> {
        let p = self.published.read();
        let index = self.snapshot_index(&p, columns)?;
        index.lookup(&p.batches, key, projection, schema)
    }

    /// The rows of the last published snapshot whose `columns` fall in
    /// `ranges` (see [`PointIndex::rows_in`]), whole: an ordered index of
    /// that snapshot, built by the first such read.
    pub fn index_read(
        &self,
        columns: &[usize],
        ranges: &crate::log::column_index::KeyRanges,
    ) -> Result<RecordBatch, SluiceError> {
        let p = self.published.read();
        let index = self.snapshot_index(&p, columns)?;
        index.rows_in(&p.batches, ranges, self.schema.clone())
    }

    /// The index of snapshot `p` on `columns`, built now if no read built it.
    fn snapshot_index(
        &self,
        p: &Published,
        columns: &[usize],
    ) -> Result<Arc<PointIndex>, SluiceError> {
        let mut indexes = p.indexes.lock();
        Ok(match indexes.iter().find(|i| i.columns() == columns) {
            Some(i) => i.clone(),
            None => {
                let built = Arc::new(PointIndex::build(&self.schema, &p.batches, columns)?);
                indexes.push(built.clone());
                built
            }
        })
    }

    /// The last published rows and that publish's sequence number.
    pub fn snapshot_with_seq(&self) -> (Vec<RecordBatch>, u64) {
        let p = self.published.read();
        (p.batches.clone(), p.seq)
    }

    /// Each operator's counters as of the last publish, and the view's
    /// watermark.
    pub fn operators(&self) -> (Vec<OperatorStats>, Option<i64>) {
        let p = self.published.read();
        (p.operators.clone(), p.watermark_us)
    }

    /// Rows in the last published snapshot.
    pub fn published_rows(&self) -> u64 {
        self.published
            .read()
            .batches
            .iter()
            .map(|b| b.num_rows() as u64)
            .sum()
    }

    /// How many times the view has published (a position in its rows for
    /// a view over it, when they change in place).
    pub fn published_seq(&self) -> u64 {
        self.published.read().seq
    }

    /// What the view still has to apply of its source: committed rows of
    /// a table, or rows another view has published.
    pub fn source_end(&self) -> Vec<u64> {
        self.source.ends()
    }

    /// Source offsets the last committed checkpoint covers.
    pub fn checkpointed_offsets(&self) -> Vec<u64> {
        self.checkpointed.borrow().clone()
    }

    /// Rows of an append-only view that a committed checkpoint holds.
    pub fn durable_rows(&self) -> u64 {
        *self.durable_rows.borrow()
    }

    /// Changes whenever a checkpoint commits more rows.
    pub fn watch_durable_rows(&self) -> watch::Receiver<u64> {
        self.durable_rows.subscribe()
    }

    /// Starts or stops the change log of a view that updates rows in place
    /// (subscriptions read it); the next checkpoint records the change.
    pub fn want_changes(&self, wanted: bool) {
        self.changes_wanted.store(wanted, Ordering::Release);
        self.checkpoint_asked.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Waits until a committed checkpoint keeps the change log.
    pub async fn wait_changes_durable(&self) -> Result<(), SluiceError> {
        let mut rx = self.changes_durable.subscribe();
        let wait = async {
            loop {
                if *rx.borrow_and_update() {
                    return Ok(());
                }
                if let Some(f) = self.failure() {
                    return Err(SluiceError::Internal(format!(
                        "materialized view \"{}\" failed: {f}",
                        self.def.name
                    )));
                }
                self.checkpoint_asked.store(true, Ordering::Release);
                self.wake.notify_one();
                let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
            }
        };
        match tokio::time::timeout(FLUSH_CHECKPOINT_WAIT, wait).await {
            Ok(r) => r,
            Err(_) => Err(SluiceError::CheckpointPending {
                view: self.def.name.clone(),
                reason: "the change log's first checkpoint is not committed".into(),
            }),
        }
    }

    /// Rows `[from, to)` of the view's change stream, with `_op`: the
    /// appended rows of an append-only view (all inserts), or the change
    /// log of a view that updates rows.
    pub fn change_rows(&self, from: u64, to: u64) -> Result<Vec<RecordBatch>, SluiceError> {
        let schema = change_schema(&self.schema);
        let batches = if self.append_only {
            self.snapshot()
        } else {
            self.changelog.read().clone()
        };
        let mut out = Vec::new();
        let mut at = 0u64;
        for b in batches {
            let len = b.num_rows() as u64;
            let (lo, hi) = (from.max(at), to.min(at + len));
            if lo < hi {
                let part = b.slice((lo - at) as usize, (hi - lo) as usize);
                let mut columns: Vec<ArrayRef> = part.columns().to_vec();
                if self.append_only {
                    columns.push(Arc::new(StringArray::from(vec!["insert"; part.num_rows()])));
                }
                out.push(RecordBatch::try_new(schema.clone(), columns)?);
            }
            at += len;
            if at >= to {
                break;
            }
        }
        Ok(out)
    }

    /// Offsets consumed per source partition, and rows of state held.
    pub fn progress(&self) -> (Vec<u64>, u64) {
        let p = self.published.read();
        (p.consumed.clone(), p.state_rows)
    }

    /// The view's watermark and its late rows (count, and those kept).
    pub fn lateness(&self) -> (Option<i64>, u64, Vec<LateRow>) {
        let p = self.published.read();
        (p.watermark_us, p.late_count, p.late.clone())
    }

    /// Progress of the catch-up the view started with; None once done.
    pub fn backfill_progress(&self) -> Option<BackfillProgress> {
        let b = self.backfill.as_ref()?;
        let done = self.applied_rows.load(Ordering::Relaxed).min(b.total_rows);
        if done >= b.total_rows {
            return None;
        }
        let secs = b.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        Some(BackfillProgress {
            kind: b.kind,
            done_rows: done,
            total_rows: b.total_rows,
            rows_per_second: rate,
            eta_seconds: (rate > 0.0).then(|| (b.total_rows - done) as f64 / rate),
        })
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Waits until the view has consumed `target` (per partition).
    pub(super) async fn wait_for(&self, target: &[u64]) -> Result<(), SluiceError> {
        self.wait_until(&self.progress, target).await
    }

    /// Asks for a checkpoint and waits until one covers `target`.
    pub(super) async fn wait_checkpointed(&self, target: &[u64]) -> Result<(), SluiceError> {
        self.checkpoint_asked.store(true, Ordering::Release);
        self.wake.notify_one();
        self.wait_until(&self.checkpointed, target).await
    }

    /// Asks for an erasing checkpoint and waits until one commits that
    /// covers `target` (which the view has consumed): the view's state as
    /// of `target` or later is then its only checkpoint.
    pub(super) async fn erase(&self, target: &[u64]) -> Result<(), SluiceError> {
        self.erase_asked.store(true, Ordering::Release);
        self.wake.notify_one();
        self.wait_until(&self.erased, target).await
    }

    pub(super) async fn wait_until(
        &self,
        progress: &watch::Sender<Vec<u64>>,
        target: &[u64],
    ) -> Result<(), SluiceError> {
        let mut rx = progress.subscribe();
        loop {
            if let Some(f) = self.failure() {
                return Err(SluiceError::Internal(format!(
                    "materialized view \"{}\" failed: {f}",
                    self.def.name
                )));
            }
            let done = {
                let consumed = rx.borrow_and_update();
                consumed.len() == target.len() && consumed.iter().zip(target).all(|(c, t)| c >= t)
            };
            if done {
                return Ok(());
            }
            if tokio::time::timeout(std::time::Duration::from_millis(200), rx.changed())
                .await
                .is_ok_and(|r| r.is_err())
            {
                return Err(SluiceError::Internal(format!(
                    "materialized view \"{}\" stopped",
                    self.def.name
                )));
            }
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }
}

/// Where a view's rows come from: a table's log, or the rows another view
/// appends (a filter/projection view or an EMIT ON WINDOW CLOSE view, whose
/// rows never change once published).
#[derive(Clone)]
pub enum ViewSource {
    Table(Arc<TableLog>),
    View(Arc<View>),
    /// Several tables and views, joined or unioned. The view's offsets
    /// are each input's in turn: a table's partitions, or one position in
    /// a view's rows.
    Several(Vec<ViewSource>),
    /// No table at all (`SELECT 1`, `VALUES`): the rows are computed once.
    /// The view has one offset, 1 once they are (so that FLUSH waits for
    /// them and a checkpoint says they are kept).
    Constant,
}

impl ViewSource {
    pub fn name(&self) -> String {
        match self {
            ViewSource::Table(t) => t.def().name.clone(),
            ViewSource::View(v) => v.def.name.clone(),
            ViewSource::Several(inputs) => inputs
                .iter()
                .map(|i| i.name())
                .collect::<Vec<_>>()
                .join(", "),
            ViewSource::Constant => String::new(),
        }
    }

    /// Whether the view reads `relation`.
    pub fn reads(&self, relation: &str) -> bool {
        match self {
            ViewSource::Several(inputs) => inputs.iter().any(|i| i.reads(relation)),
            ViewSource::Constant => false,
            one => one.name() == relation,
        }
    }

    /// The tables and views read, in the order of the view's offsets.
    pub fn inputs(&self) -> Vec<ViewSource> {
        match self {
            ViewSource::Several(inputs) => inputs.clone(),
            one => vec![one.clone()],
        }
    }

    /// How many of the view's offsets an input takes.
    pub(super) fn width(&self) -> usize {
        match self {
            ViewSource::Table(t) => t.partitions().len(),
            ViewSource::View(_) => 1,
            ViewSource::Several(inputs) => inputs.iter().map(|i| i.width()).sum(),
            ViewSource::Constant => 1,
        }
    }

    /// How many offsets the view keeps.
    pub fn offsets(&self) -> usize {
        self.width()
    }

    /// The input and its partition at position `k` of the view's offsets.
    pub fn input_at(&self, k: usize) -> Option<(ViewSource, usize)> {
        let mut at = 0;
        for input in self.inputs() {
            let n = input.width();
            if k < at + n {
                return Some((input, k - at));
            }
            at += n;
        }
        None
    }

    /// How far each input can be read now, in the order of the view's
    /// offsets: a table's committed ends, an append-only view's rows, or
    /// how many times a view whose rows change has published.
    pub fn ends(&self) -> Vec<u64> {
        self.inputs()
            .iter()
            .flat_map(|i| match i {
                ViewSource::Table(t) => t.commits().borrow().clone(),
                ViewSource::View(v) if v.append_only => vec![v.published_rows()],
                ViewSource::View(v) => vec![v.published_seq()],
                ViewSource::Several(_) => vec![],
                ViewSource::Constant => vec![1],
            })
            .collect()
    }

    /// Where `table`'s partitions lie in the view's offsets.
    pub fn offsets_of(&self, table: &str) -> Option<std::ops::Range<usize>> {
        let mut at = 0;
        for input in self.inputs() {
            let n = input.width();
            if matches!(&input, ViewSource::Table(t) if t.def().name == table) {
                return Some(at..at + n);
            }
            at += n;
        }
        None
    }

    /// Whether an input is a view whose rows change in place: the view
    /// then starts from its inputs' rows rather than from a checkpoint,
    /// which does not say which of those rows it saw.
    pub fn reads_changing_view(&self) -> bool {
        self.inputs()
            .iter()
            .any(|i| matches!(i, ViewSource::View(v) if !v.append_only))
    }
}

/// Finds a running view by name: what compiling a view over other views
/// needs of them (implemented by the `ViewManager`).
pub trait ViewLookup: Send + Sync {
    fn view(&self, name: &str) -> Option<Arc<View>>;
}
