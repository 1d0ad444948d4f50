//! A materialized view read at a cut (`v AS OF CUT c`, `AS OF OFFSETS`,
//! `AS OF TIMESTAMP`): its rows as of exactly the offsets of the tables it
//! reads at that position, computed when the query runs (see
//! `ViewManager::rows_at`), not when it is planned.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use sluice_sql::AsOf;

use crate::log::LogStore;
use crate::stream::ViewManager;

pub struct ViewAtCut {
    views: Arc<ViewManager>,
    store: Arc<LogStore>,
    name: String,
    schema: SchemaRef,
    as_of: AsOf,
}

impl fmt::Debug for ViewAtCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ViewAtCut({} {:?})", self.name, self.as_of)
    }
}

impl ViewAtCut {
    pub fn new(
        views: Arc<ViewManager>,
        store: Arc<LogStore>,
        name: &str,
        schema: SchemaRef,
        as_of: AsOf,
    ) -> ViewAtCut {
        ViewAtCut {
            views,
            store,
            name: name.to_string(),
            schema,
            as_of,
        }
    }

    /// The view it reads.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[async_trait]
impl TableProvider for ViewAtCut {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let schema = Arc::new(self.schema.project(&projection)?);
        let stream = Arc::new(AtCutStream {
            views: self.views.clone(),
            store: self.store.clone(),
            name: self.name.clone(),
            as_of: self.as_of.clone(),
            projection,
            schema: schema.clone(),
        });
        crate::query::provider::streaming_scan(schema, vec![stream], limit)
    }
}

struct AtCutStream {
    views: Arc<ViewManager>,
    store: Arc<LogStore>,
    name: String,
    as_of: AsOf,
    projection: Vec<usize>,
    schema: SchemaRef,
}

impl fmt::Debug for AtCutStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtCutStream({})", self.name)
    }
}

impl PartitionStream for AtCutStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (views, store, name, as_of) = (
            self.views.clone(),
            self.store.clone(),
            self.name.clone(),
            self.as_of.clone(),
        );
        let projection = self.projection.clone();
        let rows = futures::stream::once(async move {
            let shown = crate::log::cut::shown(&as_of);
            views
                .rows_at(&name, &shown, |t| {
                    crate::log::cut::ends_at(&store, t, &as_of).map_err(Into::into)
                })
                .await
                .map_err(crate::error::into_datafusion)
        })
        .flat_map(move |batches| {
            let out: Vec<Result<_>> = match batches {
                Ok(b) => b
                    .iter()
                    .map(|b| b.project(&projection).map_err(Into::into))
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(out)
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), rows))
    }
}
