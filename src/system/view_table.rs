//! A materialized view as a table: each scan reads the view's last
//! published snapshot at that moment.
//!
//! A plan holds this provider, never the view's rows, so a prepared
//! statement executed again reads the view as of that execution (a
//! consistent cut at a commit of its source), exactly as a new query
//! does. The view is found by name at each scan, so a plan prepared
//! before `ALTER MATERIALIZED VIEW ... REBUILD` reads the rebuilt view, and
//! one prepared before `DROP` fails as PostgreSQL's does.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::TableProviderFilterPushDown;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::SluiceError;
use crate::log::LogStore;
use crate::query::index_bounds;
use crate::stream::ViewManager;

pub struct ViewTable {
    views: Arc<ViewManager>,
    name: String,
    /// The view's schema when the plan was made.
    schema: SchemaRef,
    /// Its indexes (`CREATE INDEX`): name and columns, by position.
    indexes: Vec<(String, Vec<usize>)>,
    /// Where reads that use an index are counted.
    store: Option<Arc<LogStore>>,
}

impl ViewTable {
    pub fn new(views: Arc<ViewManager>, name: &str, schema: SchemaRef) -> ViewTable {
        ViewTable {
            views,
            name: name.to_string(),
            schema,
            indexes: Vec::new(),
            store: None,
        }
    }

    /// Reads filtered by these columns (each an index's, by position) look
    /// the rows up in an index of the snapshot.
    pub fn with_indexes(
        mut self,
        indexes: Vec<(String, Vec<usize>)>,
        store: Arc<LogStore>,
    ) -> ViewTable {
        self.indexes = indexes;
        self.store = Some(store);
        self
    }

    fn index_columns(&self, index: &[usize]) -> Vec<(String, arrow::datatypes::DataType)> {
        index
            .iter()
            .map(|&c| {
                let f = self.schema.field(c);
                (f.name().clone(), f.data_type().clone())
            })
            .collect()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The view's schema when the plan was made.
    pub fn schema_when_planned(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl fmt::Debug for ViewTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ViewTable({})", self.name)
    }
}

#[async_trait]
impl TableProvider for ViewTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Inexact: an index narrows the rows; the filters still run.
        let names: Vec<String> = self
            .indexes
            .iter()
            .flat_map(|(_, i)| self.index_columns(i).into_iter().map(|(n, _)| n))
            .collect();
        Ok(filters
            .iter()
            .map(|f| match index_bounds::usable(f, &names) {
                true => TableProviderFilterPushDown::Inexact,
                false => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(view) = self.views.view(&self.name) else {
            return Err(DataFusionError::External(Box::new(
                SluiceError::UndefinedTable(self.name.clone()),
            )));
        };
        if view.schema.fields() != self.schema.fields() {
            // PostgreSQL's answer when a prepared statement's table changed shape.
            return Err(DataFusionError::External(Box::new(
                SluiceError::Unsupported("cached plan must not change result type".into()),
            )));
        }
        view.readable()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut best = None;
        for (name, index) in &self.indexes {
            if let Some((used, ranges)) =
                index_bounds::key_ranges(filters, &self.index_columns(index))
            {
                if best.as_ref().is_none_or(|(u, _, _, _)| used > *u) {
                    best = Some((used, name, index, ranges));
                }
            }
        }
        let rows = match best {
            Some((_, name, index, ranges)) => {
                if let Some(store) = &self.store {
                    store.note_view_index_scan(name);
                }
                vec![view
                    .index_read(index, &ranges)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?]
            }
            None => view.snapshot(),
        };
        super::sluice_catalog::scan_rows(&self.schema, rows, state, projection, filters, limit)
            .await
    }
}
