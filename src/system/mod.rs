//! What a session's DataFusion context holds over the engine's state: the
//! system catalogs (`sluice_catalog`, `pg_catalog`'s tables that need the
//! log, `information_schema`), materialized views as tables and point
//! reads of them, views (named queries) planned when read, and which tables and views a plan reads (for
//! privileges). It sits above the log, the views, subscriptions and
//! connectors, whose state it shows; `query/` below it holds the SQL
//! machinery (dialect, functions, table providers of the log, execution).

mod access;
mod catalog_cuts;
mod catalog_views;
mod context;
mod information_schema;
mod pg_catalog_info;
mod pg_keys;
mod pg_routines;
mod point_read;
mod query_views;
mod sluice_catalog;
mod view_at_cut;
mod view_table;

pub use access::{plan_access, replaced_tables, PlanAccess};
pub use context::build_context;
pub use point_read::PointRead;
pub use query_views::rewrite_for_planning;
pub use sluice_catalog::Connectors;
