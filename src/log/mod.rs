//! Log storage: every table is a set of partitions, each an ordered sequence
//! of segment files holding framed Arrow IPC batches.
//!
//! Data flows one way: a statement's rows are routed to partitions
//! ([`TableLog::append`]), the table's writer thread writes and fsyncs the
//! frames, records the new end offsets in the table's commit log, and only
//! then makes the frames visible to readers and acknowledges the statement.

mod commit;
mod error;
mod frame;
mod partition;
mod store;
mod table;

pub use error::LogError;
pub use partition::{FrameMeta, PartitionStats};
pub use store::LogStore;
pub use table::{OffsetRange, TableLog};
