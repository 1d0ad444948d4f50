//! Materialized views kept up to date from the log.
//!
//! In layers, each importing only those before it: the operators
//! ([`operators`], one file each), a view as readers see it (`view.rs`,
//! with its change log and point index), the compiler of a query into
//! operators ([`compile`]), the runner of each view's task
//! (`runner.rs`, [`ViewManager`]), and views read at a position of the
//! log, from the checkpoints cuts keep (`at_cut.rs`).
//!
//! A view is a graph of incremental operators ([`operators::operator::Operator`]):
//! its sources (tables and views) send deltas, DataFusion plans filter
//! and project them, joins ([`operators::join`], and [`operators::interval_join`] for joins
//! bounded by a time band) and aggregates below joins run as
//! stages of the view's graph ([`compile::graph`]), as do Top-N ([`operators::top_n`]:
//! `ROW_NUMBER() ... <= N`, `ORDER BY ... LIMIT N`), and the last stage is the
//! aggregate ([`operators::aggregate`]) or the view's rows ([`operators::rows`]). A background
//! task per view reads each group commit of its sources, runs it through
//! the graph, and publishes a new snapshot of the view's rows together with
//! the offsets it has consumed. Readers see the last published snapshot: a
//! consistent cut at commits of the sources, never half a statement.

mod at_cut;
mod changes;
pub mod compile;
pub mod operators;
mod point_index;
mod runner;
mod view;

pub use changes::{change_schema, OP_COLUMN};
pub use compile::pipeline::EmitOptions;
pub use operators::operator::OperatorStats;
pub use runner::ViewManager;
pub use view::{BackfillProgress, LateRow, View, ViewLookup, ViewSource};

/// The columns a query sees of the table or view `name`: those `*` shows,
/// then the hidden ones (see `sluice_sql::hide_system_columns`).
pub fn relation_columns(
    store: &crate::log::LogStore,
    views: &dyn ViewLookup,
    name: &str,
) -> Option<sluice_sql::RelationColumns> {
    // A relation read at a cut or as a sample has its own columns.
    let read = sluice_sql::ReadAt::from_name(name).map(|(relation, _)| relation);
    let name = read.as_deref().unwrap_or(name);
    if let Some(t) = store.table(name) {
        let hidden: Vec<String> = t
            .def()
            .hidden_columns()
            .iter()
            .map(|c| c.to_string())
            .collect();
        let visible = t
            .def()
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
