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
use datafusion::physical_plan::ExecutionPlan;

use crate::error::SluiceError;
use crate::stream::ViewManager;

pub struct ViewTable {
    views: Arc<ViewManager>,
    name: String,
    /// The view's schema when the plan was made.
    schema: SchemaRef,
}

impl ViewTable {
    pub fn new(views: Arc<ViewManager>, name: &str, schema: SchemaRef) -> ViewTable {
        ViewTable {
            views,
            name: name.to_string(),
            schema,
        }
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
        super::sluice_catalog::scan_rows(
            &self.schema,
            view.snapshot(),
            state,
            projection,
            filters,
            limit,
        )
        .await
    }
}
