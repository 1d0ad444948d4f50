//! The query side: DataFusion table providers over the log, the insert sink,
//! the `sluice_catalog` system tables, point reads of views, stopping a
//! running statement, and the session context that ties them together.

mod access;
pub mod activity;
pub mod cancel;
mod checked_arithmetic;
mod checked_math;
mod checked_sum;
mod context;
mod hop_windows;
mod pg_catalog_info;
mod pg_functions;
mod pg_keys;
mod pg_roles;
mod point_read;
mod provider;
mod sink;
mod system;
mod timestamp_text;
mod view_table;
mod yielding_joins;

pub use access::{plan_access, PlanAccess};
pub use checked_arithmetic::CheckedArithmetic;
pub use checked_sum::{checked_sum, out_of_range as sum_out_of_range};
pub use context::{build_context, session_config};
pub use hop_windows::hop_window_starts;
pub use pg_functions::{setting, version_string};
pub use point_read::PointRead;
pub(crate) use provider::{changelog_frame, project_frame};
pub use provider::{literal_i64, LogTableProvider, ON_CONFLICT_DO_NOTHING, SCAN_NOTICES};
pub use system::Connectors;
pub use timestamp_text::TimestampText;
pub use yielding_joins::YieldingJoins;
