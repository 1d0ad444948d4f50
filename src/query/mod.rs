//! The query side: DataFusion table providers over the log, the insert sink,
//! the `sluice_catalog` system tables, point reads of views, stopping a
//! running statement, and the session context that ties them together.

mod access;
pub mod activity;
pub mod cancel;
mod checked_arithmetic;
mod checked_math;
mod checked_sum;
mod constant_errors;
mod context;
mod dialect;
pub mod executor;
mod float_min_max;
mod hop_windows;
mod information_schema;
mod pg_casts;
mod pg_catalog_info;
mod pg_functions;
mod pg_json;
mod pg_keys;
mod pg_number_functions;
mod pg_numeric;
mod pg_operators;
mod pg_roles;
mod pg_text_functions;
mod pg_time_bins;
mod pg_time_functions;
mod pg_type_planner;
mod point_read;
mod provider;
mod sink;
mod sized_functions;
mod system;
mod temporal;
mod udf;
mod view_table;
mod yielding_joins;

pub use access::{plan_access, replaced_tables, PlanAccess};
pub use checked_arithmetic::CheckedArithmetic;
pub use checked_sum::{checked_sum, out_of_range as sum_out_of_range};
pub use context::{build_context, session_config};
pub use dialect::{postgres_plan, postgres_state, register_functions};
pub use executor::QueryExecutor;
pub use hop_windows::hop_window_starts;
pub use pg_functions::{setting, version_string};
pub use pg_type_planner::PgTypePlanner;
pub use point_read::PointRead;
pub(crate) use provider::{changelog_frame, project_frame};
pub use provider::{
    literal_i64, relation_columns, LogTableProvider, ON_CONFLICT_DO_NOTHING, SCAN_NOTICES,
};
pub use system::Connectors;
pub use yielding_joins::YieldingJoins;
