//! Log storage: every table is a set of partitions, each an ordered sequence
//! of segment files holding framed Arrow IPC batches.
//!
//! Data flows one way: a statement's rows are routed to partitions
//! ([`TableLog::append`]), the table's writer thread writes and fsyncs the
//! frames, records the new end offsets in the table's commit log, and only
//! then makes the frames visible to readers and acknowledges the statement.

pub mod column_index;
mod commit;
mod compaction;
pub mod cut;
mod dir_lock;
pub mod erasure;
mod error;
mod frame;
pub mod keyed;
mod partition;
mod record_file;
mod remote;
pub mod spilled_rows;
mod store;
pub mod suppress;
mod table;
mod table_writer;
mod tiering;
pub mod transaction;
mod watermark;

pub use compaction::{
    below_cuts, below_snapshots, compact_table, erase_segments, spawn_compaction, CompactionReport,
    Horizon,
};
pub use dir_lock::{DataDirLock, DirLockError, LOCK_FILE};
pub use error::LogError;
pub use partition::{
    CompactionStats, EventTimeProgress, FrameLocation, FrameMeta, PartitionLog, PartitionStats,
};
pub use record_file::RecordFile;
pub use remote::RemoteSegment;
pub use store::LogStore;
pub use table::{now_us, KeyedRow, OffsetRange, PreparedAppend, RoutedRows, TableLog};
pub use tiering::{attach_remote_segments, spawn_tiering, tier_table};
pub use transaction::{Snapshot, StagedWrites, TransactionCoordinator};
pub use watermark::{PartitionWatermark, TableWatermark, WatermarkTracker};

/// Limits and sizes of the log, from the server's flags.
#[derive(Debug, Clone, Copy)]
pub struct LogConfig {
    /// A partition's active segment is closed once it reaches this size.
    pub segment_max_bytes: u64,
    /// ... or once it has been open this long (checked at the next write).
    pub segment_max_age: std::time::Duration,
    /// The most Arrow memory one statement (an INSERT or a COPY) may stage
    /// before it is appended; beyond it the statement fails with 54000.
    pub max_statement_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_max_bytes: 128 << 20,
            segment_max_age: std::time::Duration::from_secs(600),
            max_statement_bytes: 4 << 30,
        }
    }
}
