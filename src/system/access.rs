//! Which tables and views a planned statement reads and inserts into,
//! found by walking its whole plan (subqueries and `changelog(t)`
//! included), so that no way of writing a query skips a privilege check.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{LogicalPlan, TableSource, WriteOp};

use super::view_at_cut::ViewAtCut;
use super::view_table::ViewTable;
use crate::auth::ObjectKind;
use crate::query::provider::LogTableProvider;
use crate::query::sample::SampledTable;

/// The relations a plan touches.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PlanAccess {
    /// Tables and views it reads (a view's own sources are not listed: a
    /// view is read with its own grant).
    pub reads: Vec<(ObjectKind, String)>,
    /// Tables it inserts into.
    pub inserts: Vec<String>,
}

fn relation_of(source: &std::sync::Arc<dyn TableSource>) -> Option<(ObjectKind, String)> {
    provider_relation(&source_as_provider(source).ok()?)
}

fn provider_relation(
    provider: &std::sync::Arc<dyn datafusion::datasource::TableProvider>,
) -> Option<(ObjectKind, String)> {
    if let Some(t) = provider.downcast_ref::<LogTableProvider>() {
        return Some((ObjectKind::Table, t.table_name().to_string()));
    }
    // A sample reads the relation it samples.
    if let Some(s) = provider.downcast_ref::<SampledTable>() {
        return provider_relation(s.inner());
    }
    if let Some(v) = provider.downcast_ref::<ViewAtCut>() {
        return Some((ObjectKind::View, v.name().to_string()));
    }
    provider
        .downcast_ref::<ViewTable>()
        .map(|v| (ObjectKind::View, v.name().to_string()))
}

/// The relations `plan` reads and inserts into: those of the query
/// itself first, then those of its subqueries, so that a denial names the
/// first relation the query names, as PostgreSQL's does.
pub fn plan_access(plan: &LogicalPlan) -> PlanAccess {
    let mut access = PlanAccess::default();
    let mut nested: Vec<LogicalPlan> = Vec::new();
    let mut visit = |node: &LogicalPlan| {
        match node {
            LogicalPlan::TableScan(scan) => {
                if let Some(r) = relation_of(&scan.source) {
                    if !access.reads.contains(&r) {
                        access.reads.push(r);
                    }
                }
                // A view (a named query) is read with the reader's
                // privileges on what it reads.
                if let Some(view) = view_plan(&scan.source) {
                    nested.push(view);
                }
            }
            LogicalPlan::Dml(dml) if matches!(dml.op, WriteOp::Insert(_)) => {
                if let Some((_, name)) = relation_of(&dml.target) {
                    if !access.inserts.contains(&name) {
                        access.inserts.push(name);
                    }
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    };
    let _ = plan.apply(&mut visit);
    let _ = plan.apply_with_subqueries(&mut visit);
    // What the views read, after the query's own relations.
    for view in nested {
        let inner = plan_access(&view);
        for r in inner.reads {
            if !access.reads.contains(&r) {
                access.reads.push(r);
            }
        }
    }
    access
}

/// The plan of a view (a named query) a scan reads.
fn view_plan(source: &std::sync::Arc<dyn TableSource>) -> Option<LogicalPlan> {
    let provider = source_as_provider(source).ok()?;
    provider
        .downcast_ref::<datafusion::catalog::view::ViewTable>()
        .map(|v| v.logical_plan().clone())
}

/// Whether a table `plan` reads was dropped and created anew since it was
/// planned (the plan reads the old one); an error when one was dropped.
pub fn replaced_tables(
    plan: &LogicalPlan,
    store: &crate::log::LogStore,
) -> Result<bool, crate::error::SluiceError> {
    let mut replaced = false;
    let mut missing = None;
    let mut visit = |node: &LogicalPlan| {
        if let LogicalPlan::TableScan(scan) = node {
            if let Ok(provider) = source_as_provider(&scan.source) {
                if let Some(t) = provider.downcast_ref::<LogTableProvider>() {
                    match store.table(&t.table_name()) {
                        None => missing = Some(t.table_name()),
                        Some(now) if !t.reads(&now) => replaced = true,
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    };
    let _ = plan.apply_with_subqueries(&mut visit);
    match missing {
        Some(name) => Err(crate::error::SluiceError::UndefinedTable(name)),
        None => Ok(replaced),
    }
}
