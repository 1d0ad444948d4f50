//! What every operator of a view's dataflow is: something that takes
//! deltas on its inputs and gives deltas out, moves with the watermark,
//! and can be written into a checkpoint and read back.
//!
//! A view is a graph of these (see `compile/graph/` for the joins and
//! `pipeline.rs` for the view's last stage): sources (a table's commits),
//! filters and projections (DataFusion physical plans run per delta),
//! joins ([`super::join::JoinOperator`]) and the aggregate
//! ([`super::aggregate::AggregatePipeline`]) or the view's rows.

use arrow::record_batch::RecordBatch;

use crate::error::SluiceError;

/// Rows an edge of the graph carries at once: rows inserted (weight +1)
/// and rows taken back (weight -1).
#[derive(Debug, Default, Clone)]
pub struct Delta {
    pub insert: Vec<RecordBatch>,
    pub retract: Vec<RecordBatch>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.insert
            .iter()
            .chain(&self.retract)
            .all(|b| b.num_rows() == 0)
    }
}

/// One part of an operator's state: the batches it holds.
pub type StatePart = Vec<RecordBatch>;

/// What `sluice_catalog.view_operators` and `EXPLAIN MATERIALIZED VIEW`
/// show of an operator.
#[derive(Debug, Clone, Default)]
pub struct OperatorStats {
    /// "join", "aggregate", "rows", "source".
    pub kind: &'static str,
    /// One line: what the operator computes.
    pub description: String,
    pub state_rows: u64,
    pub state_bytes: u64,
    pub input_rows: u64,
    pub output_rows: u64,
}

pub trait Operator: Send + Sync {
    /// The rows the operator gives before any input (a global aggregate's
    /// one row: `count(*)` of nothing is 0), sent once when the view
    /// starts from nothing; a view restored from a checkpoint sent them
    /// before. Most operators give none.
    fn start(&mut self) -> Result<Delta, SluiceError> {
        Ok(Delta::default())
    }

    /// Applies a delta that arrived on input `input`; returns the delta it
    /// sends on.
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError>;

    /// The watermark of input `input` moved to `watermark_us`: state it
    /// makes final or obsolete is emitted or dropped. Each input has its
    /// own (a join's two sides may be two tables). Operators whose state
    /// no watermark bounds keep the default: nothing happens.
    fn advance_watermark(
        &mut self,
        _input: usize,
        _watermark_us: i64,
    ) -> Result<Delta, SluiceError> {
        Ok(Delta::default())
    }

    /// The operator's state, for a checkpoint: its parts (a join's two
    /// sides), each as the batches it holds. A checkpoint writes each part
    /// as a Parquet file of its own, straight from these batches.
    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError>;

    /// What the state gained since the last snapshot or call, when that is
    /// all that changed (nothing was taken out or rewritten), so that a
    /// checkpoint writes only that; `None` when a checkpoint must write the
    /// whole state again ([`Operator::snapshot`]). Restoring the snapshot
    /// and then every such gain, in order, gives the state.
    fn appended_since_capture(&mut self) -> Result<Option<Vec<StatePart>>, SluiceError> {
        Ok(None)
    }

    /// Puts back rows of part `part` that [`Operator::snapshot`] or
    /// [`Operator::appended_since_capture`] gave, in the order they were
    /// written.
    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError>;

    fn stats(&self) -> OperatorStats;

    /// Rows of its input on which the operator's expressions failed with
    /// an error of the data since the last call, each with +1 (inserted)
    /// or -1 (taken back) and its error; the operator went on without
    /// them (see `stream::compile::failed_rows`). Most operators fail
    /// instead and have none.
    fn take_failed_rows(&mut self) -> Vec<FailedRow> {
        Vec::new()
    }
}

/// A row an operator set aside, how it counts, and why.
pub type FailedRow = (RecordBatch, i64, SluiceError);

/// A view the engine cannot keep exact: refused with 0A000 at CREATE.
pub fn unsupported(what: impl Into<String>) -> SluiceError {
    SluiceError::Unsupported(what.into())
}

pub use crate::query::join_keys::{canonical_key, nullable};
