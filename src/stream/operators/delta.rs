//! The source of a view's pipeline: a table provider that yields whatever
//! batches were placed in its slot when the plan runs, so one physical plan
//! serves every delta.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use parking_lot::Mutex;

/// Batches waiting to go through a view's plan.
pub type DeltaSlot = Arc<Mutex<Vec<RecordBatch>>>;

pub struct DeltaTable {
    pub schema: SchemaRef,
    pub slot: DeltaSlot,
}

impl fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeltaTable")
    }
}

#[async_trait]
impl TableProvider for DeltaTable {
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
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        projected_delta_exec(self.schema.clone(), self.slot.clone(), projection)
    }
}

/// A plan that yields the batches in `slot` each time it runs.
pub fn delta_exec(schema: SchemaRef, slot: DeltaSlot) -> Result<Arc<dyn ExecutionPlan>> {
    projected_delta_exec(schema, slot, None)
}

fn projected_delta_exec(
    schema: SchemaRef,
    slot: DeltaSlot,
    projection: Option<&Vec<usize>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let stream: Arc<dyn PartitionStream> = Arc::new(DeltaStream {
        schema: schema.clone(),
        slot,
    });
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        vec![stream],
        projection,
        [],
        false,
        None,
    )?))
}

struct DeltaStream {
    schema: SchemaRef,
    slot: DeltaSlot,
}

impl fmt::Debug for DeltaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeltaStream")
    }
}

impl PartitionStream for DeltaStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let batches: Vec<Result<RecordBatch>> = self.slot.lock().iter().cloned().map(Ok).collect();
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        ))
    }
}
