//! Views that are named queries (`CREATE VIEW`): a view holds no rows and
//! is planned each time a statement reads it, with the rewrites every
//! statement gets ([`rewrite_for_planning`]), so it reads whatever the
//! relations it names hold then, and whatever relation has that name then
//! (as Redshift's late-binding views do): renaming or replacing what it
//! reads never breaks it. Its columns are named as the view says.
//!
//! A view is read with the reader's privileges on what it reads (as
//! PostgreSQL's `security_invoker` views are): `access` walks into it.

use std::sync::{Arc, OnceLock, Weak};

use datafusion::catalog::view::ViewTable;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::{SessionContext, SessionState};
use datafusion::logical_expr::{col, Expr, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use sluice_catalog::QueryViewDef;
use sluice_sql::sqlparser::ast;

use crate::log::LogStore;
use crate::stream::{ViewLookup, ViewManager};

/// The rewrites a statement gets before DataFusion plans it: PostgreSQL's
/// reading of syntax DataFusion reads otherwise, catalog queries made
/// plannable, `ctid` ranges, and the hidden columns left out of `*`.
pub fn rewrite_for_planning(
    stmt: &mut ast::Statement,
    store: &LogStore,
    views: &dyn ViewLookup,
) -> Result<(), sluice_sql::SqlError> {
    sluice_sql::rewrite_regproc_zero(stmt);
    sluice_sql::rewrite_catalog_subqueries(stmt);
    sluice_sql::rewrite_ordinality(stmt)?;
    sluice_sql::rewrite_set_returning(stmt);
    sluice_sql::rewrite_postgres_syntax(stmt)?;
    sluice_sql::rename_shadowing_relations(stmt);
    sluice_sql::rewrite_ctid_ranges(stmt, |name| {
        crate::stream::relation_columns(store, views, name)
    });
    sluice_sql::hide_system_columns(stmt, |name| {
        crate::stream::relation_columns(store, views, name)
    });
    sluice_sql::rewrite_asof_joins(stmt)
}

/// Plans views when a statement reads them, in the server's context.
pub struct QueryViews {
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    state: OnceLock<Weak<parking_lot::RwLock<SessionState>>>,
}

impl QueryViews {
    pub fn new(store: Arc<LogStore>, views: Arc<ViewManager>) -> Self {
        QueryViews {
            store,
            views,
            state: OnceLock::new(),
        }
    }

    /// The context views are planned in (the one they are read from).
    pub fn plan_in(&self, ctx: &SessionContext) {
        let _ = self.state.set(Arc::downgrade(&ctx.state_ref()));
    }

    /// The view as a relation of the plan reading it.
    pub async fn provider(&self, def: &QueryViewDef) -> Result<Arc<dyn TableProvider>> {
        let state = self
            .state
            .get()
            .and_then(Weak::upgrade)
            .map(|s| s.read().clone())
            .ok_or_else(|| DataFusionError::Internal("views are planned in no context".into()))?;
        let mut stmt = sluice_sql::sqlparser::parser::Parser::parse_sql(
            &sluice_sql::sqlparser::dialect::PostgreSqlDialect {},
            &def.query,
        )
        .map_err(|e| DataFusionError::Plan(format!("view \"{}\": {e}", def.name)))?
        .pop()
        .ok_or_else(|| DataFusionError::Plan(format!("view \"{}\" has no query", def.name)))?;
        sluice_sql::rewrite_window_functions(&mut stmt).map_err(crate::error::into_datafusion)?;
        rewrite_for_planning(&mut stmt, &self.store, self.views.as_ref())
            .map_err(crate::error::into_datafusion)?;
        let plan = state
            .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
            .await?;
        let plan = crate::query::postgres_plan(plan)?;
        let fields = plan.schema().columns();
        if fields.len() != def.columns.len() {
            return Err(DataFusionError::Plan(format!(
                "view \"{}\" gives {} columns now, not the {} it was created with",
                def.name,
                fields.len(),
                def.columns.len()
            )));
        }
        let named: Vec<Expr> = fields
            .into_iter()
            .zip(&def.columns)
            .map(|(c, name)| col(c).alias(name))
            .collect();
        let plan = LogicalPlanBuilder::from(plan).project(named)?.build()?;
        Ok(Arc::new(ViewTable::new(plan, Some(def.query.clone()))))
    }
}
