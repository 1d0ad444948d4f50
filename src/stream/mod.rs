//! Materialized views kept up to date from the log.
//!
//! A view follows one source table: for each group commit of the table it
//! reads the new frames of every partition, runs them through the view's
//! compiled pipeline (DataFusion physical plans and accumulators), and then
//! publishes a new snapshot of its rows together with the offsets it has
//! consumed. Readers see the last published snapshot: a consistent cut at a
//! commit of the source table, never half a statement.

#[cfg(test)]
mod accumulator_audit;
mod aggregate;
mod changes;
mod delta;
mod graph;
mod join;
pub mod operator;
mod pipeline;
mod point_index;
mod retract;
mod view;

pub use changes::{change_schema, OP_COLUMN};
pub use operator::OperatorStats;
pub use pipeline::ViewSource;
pub use view::{BackfillProgress, EmitOptions, LateRow, View, ViewManager};
