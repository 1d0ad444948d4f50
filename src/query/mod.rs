//! The query side: DataFusion table providers over the log, the insert sink,
//! the `sluice_catalog` system tables, and the session context that ties
//! them together.

mod context;
mod provider;
mod sink;
mod system;
mod view_table;

pub use context::{build_context, session_config};
pub(crate) use provider::{changelog_frame, project_frame};
pub use provider::{LogTableProvider, ON_CONFLICT_DO_NOTHING, SCAN_NOTICES};
