//! The query side: DataFusion table providers over the log, the insert sink,
//! the `sluice_catalog` system tables, point reads of views, stopping a
//! running statement, and the session context that ties them together.

pub mod activity;
pub mod asof_exec;
pub mod asof_join;
pub mod cancel;
mod checked_arithmetic;
mod checked_math;
mod checked_sum;
mod config;
mod constant_errors;
mod correlated_in;
pub(crate) mod dialect;
pub mod executor;
mod float_min_max;
mod hop_windows;
pub mod index_bounds;
mod interval_keys;
pub mod join_keys;
pub mod per_outer_value;
mod pg_array_contains;
mod pg_array_remove;
mod pg_casts;
pub(crate) mod pg_functions;
mod pg_generate_series;
mod pg_hash;
mod pg_json;
mod pg_number_functions;
mod pg_numeric;
mod pg_operators;
pub(crate) mod pg_roles;
mod pg_string_functions;
mod pg_text_functions;
mod pg_time_bins;
mod pg_time_functions;
mod pg_type_planner;
pub(crate) mod provider;
pub mod sample;
mod single_row;
mod sink;
mod sized_functions;
pub mod stable_hash;
mod temporal;
mod udf;
mod yielding_joins;

pub use checked_arithmetic::CheckedArithmetic;
pub use checked_sum::{checked_sum, out_of_range as sum_out_of_range};
pub use config::{session_config, CATALOG_NAME};
pub use dialect::{postgres_plan, postgres_state, register_functions};
pub use executor::QueryExecutor;
pub use hop_windows::hop_window_starts;
pub use pg_functions::{setting, version_string};
pub use pg_type_planner::PgTypePlanner;
pub(crate) use provider::{changelog_frame, project_frame};
pub use provider::{literal_i64, LogTableProvider, ON_CONFLICT_DO_NOTHING, SCAN_NOTICES};
pub use yielding_joins::YieldingJoins;
