//! Materialized views kept up to date from the log.
//!
//! A view is a graph of incremental operators ([`operator::Operator`]):
//! its sources (tables and views) send deltas, DataFusion plans filter
//! and project them, joins ([`join`], and [`interval_join`] for joins
//! bounded by a time band) and aggregates below joins run as
//! stages of the view's graph ([`graph`]), as do Top-N ([`top_n`]:
//! `ROW_NUMBER() ... <= N`, `ORDER BY ... LIMIT N`), and the last stage is the
//! aggregate ([`aggregate`]) or the view's rows ([`rows`]). A background
//! task per view reads each group commit of its sources, runs it through
//! the graph, and publishes a new snapshot of the view's rows together with
//! the offsets it has consumed. Readers see the last published snapshot: a
//! consistent cut at commits of the sources, never half a statement.

#[cfg(test)]
mod accumulator_audit;
mod aggregate;
mod band;
mod changes;
mod delta;
mod graph;
mod group_table;
mod interval_join;
mod join;
pub mod operator;
mod pipeline;
mod point_index;
mod retract;
mod rows;
mod runner;
mod shared_column;
mod top_n;
mod vectorized_groups;
mod view;

pub use changes::{change_schema, OP_COLUMN};
pub use operator::OperatorStats;
pub use pipeline::EmitOptions;
pub use runner::ViewManager;
pub use view::{BackfillProgress, LateRow, View, ViewLookup, ViewSource};

/// The columns a query sees of the table or view `name`: those `*` shows,
/// then the hidden ones (see `sluice_sql::hide_system_columns`).
pub fn relation_columns(
    store: &crate::log::LogStore,
    views: &dyn ViewLookup,
    name: &str,
) -> Option<sluice_sql::RelationColumns> {
    if let Some(t) = store.table(name) {
        let hidden: Vec<String> = t
            .def
            .hidden_columns()
            .iter()
            .map(|c| c.to_string())
            .collect();
        let visible = t
            .def
            .columns
            .iter()
            .map(|c| c.name.clone())
            .filter(|c| !hidden.contains(c))
            .collect();
        return Some(sluice_sql::RelationColumns { visible, hidden });
    }
    let v = views.view(name)?;
    Some(sluice_sql::RelationColumns {
        visible: v.schema.fields().iter().map(|f| f.name().clone()).collect(),
        hidden: Vec::new(),
    })
}
