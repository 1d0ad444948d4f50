//! Erasures in force: rows matching an erasure that suppresses (`ERASE
//! ... WITH (suppress = 'forever' | '30 days')`) are dropped when they
//! are written (INSERT, COPY, a Kafka source, a transaction's COMMIT), so
//! neither late rows nor a replay bring them back. The condition is
//! evaluated by a [`RowFilter`] the engine builds (the log knows no SQL);
//! dropped rows are counted per erasure since the server started.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch};

use super::error::LogError;
use super::table::now_us;

/// Which rows of a batch (the table's columns, stored form) match a
/// condition: true where the row matches.
pub trait RowFilter: Send + Sync {
    fn matching(&self, rows: &RecordBatch) -> Result<BooleanArray, String>;
}

/// One erasure in force over a table.
pub struct Suppression {
    pub erasure: u64,
    /// Microseconds since the epoch; `i64::MAX`: forever.
    pub until_us: i64,
    pub filter: Arc<dyn RowFilter>,
    dropped: AtomicU64,
}

impl Suppression {
    pub fn new(erasure: u64, until_us: i64, filter: Arc<dyn RowFilter>) -> Suppression {
        Suppression {
            erasure,
            until_us,
            filter,
            dropped: AtomicU64::new(0),
        }
    }
}

/// A table's erasures in force.
#[derive(Default)]
pub struct Suppressions {
    list: parking_lot::RwLock<Vec<Arc<Suppression>>>,
}

impl Suppressions {
    pub fn add(&self, s: Suppression) {
        let mut list = self.list.write();
        list.retain(|o| o.erasure != s.erasure);
        list.push(Arc::new(s));
    }

    /// Rows erasure `id` dropped since start-up.
    pub fn dropped(&self, id: u64) -> u64 {
        self.list
            .read()
            .iter()
            .find(|s| s.erasure == id)
            .map_or(0, |s| s.dropped.load(Ordering::Relaxed))
    }

    /// `batch` (stored form: the table's `columns` first, then a keyed
    /// table's tombstone flag) without the rows an erasure in force
    /// matches. Tombstones always pass: they delete, they hold no row.
    pub fn apply(&self, batch: RecordBatch, columns: usize) -> Result<RecordBatch, LogError> {
        self.filter(batch, columns, true)
    }

    /// [`Suppressions::apply`] without counting the dropped rows: which
    /// of a statement's rows will be written (INSERT ... RETURNING).
    pub fn kept(&self, batch: RecordBatch, columns: usize) -> Result<RecordBatch, LogError> {
        self.filter(batch, columns, false)
    }

    fn filter(
        &self,
        batch: RecordBatch,
        columns: usize,
        count: bool,
    ) -> Result<RecordBatch, LogError> {
        let list = self.list.read();
        if list.is_empty() || batch.num_rows() == 0 {
            return Ok(batch);
        }
        let now = now_us();
        let values = batch.project(&(0..columns.min(batch.num_columns())).collect::<Vec<_>>())?;
        let tombstone = super::keyed::deleted_flags_at(&batch, columns).cloned();
        let mut keep = vec![true; batch.num_rows()];
        for s in list.iter().filter(|s| s.until_us > now) {
            let matching = s.filter.matching(&values).map_err(|reason| {
                LogError::Arrow(arrow::error::ArrowError::ComputeError(format!(
                    "evaluating the condition of erasure {}: {reason}",
                    s.erasure
                )))
            })?;
            let mut dropped = 0;
            for (i, kept) in keep.iter_mut().enumerate() {
                let is_tombstone = tombstone
                    .as_ref()
                    .is_some_and(|t| t.is_valid(i) && t.value(i));
                if *kept && !is_tombstone && matching.is_valid(i) && matching.value(i) {
                    *kept = false;
                    dropped += 1;
                }
            }
            if count {
                s.dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        if keep.iter().all(|k| *k) {
            return Ok(batch);
        }
        Ok(arrow::compute::filter_record_batch(
            &batch,
            &BooleanArray::from(keep),
        )?)
    }
}
