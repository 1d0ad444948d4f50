use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, SendableRecordBatchStream};
use futures::StreamExt;

use super::cancel::StatementWatch;
use crate::error::SluiceError;
use crate::ingest::{conform_batch, IngestError};
use crate::log::transaction::stage_statement;
use crate::log::{StagedWrites, TableLog};

/// Receives the rows of an `INSERT` planned by DataFusion, validates all of
/// them, then appends them to the log as one atomic statement (or, inside
/// a transaction block, stages them until COMMIT).
pub struct LogSink {
    table: Arc<TableLog>,
    schema: SchemaRef,
    on_conflict_do_nothing: bool,
}

impl LogSink {
    pub fn new(table: Arc<TableLog>, schema: SchemaRef, on_conflict_do_nothing: bool) -> Self {
        LogSink {
            table,
            schema,
            on_conflict_do_nothing,
        }
    }
}

impl fmt::Debug for LogSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogSink({})", self.table.def().name)
    }
}

impl DisplayAs for LogSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogSink: table={}", self.table.def().name)
    }
}

#[async_trait]
impl DataSink for LogSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        ctx: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut batches = Vec::new();
        let mut row = 1u64;
        let mut staged = 0u64;
        let limit = self.table.max_statement_bytes();
        // A cancel or timeout stops the SELECT that feeds the rows, and is
        // looked at once more before they are appended; never during.
        let watch = ctx
            .session_config()
            .get_extension::<StatementWatch>()
            .map(|w| w.as_ref().clone())
            .unwrap_or_else(StatementWatch::never);
        let cancelled = |e: SluiceError| DataFusionError::External(Box::new(e));
        while let Some(batch) = watch
            .run(async { Ok(data.next().await) })
            .await
            .map_err(cancelled)?
        {
            let batch = batch?;
            let n = batch.num_rows() as u64;
            let batch = conform_batch(&self.table.def(), &batch, row)
                .map_err(crate::error::into_datafusion)?;
            staged += batch.get_array_memory_size() as u64;
            if staged > limit {
                return Err(crate::error::into_datafusion(IngestError::TooLarge {
                    limit,
                }));
            }
            batches.push(batch);
            row += n;
        }
        watch.check().map_err(cancelled)?;
        // Inside a transaction block the rows wait for COMMIT.
        let staging = ctx
            .session_config()
            .get_extension::<parking_lot::Mutex<StagedWrites>>();
        match staging {
            None => {
                self.table
                    .append_keyed(batches, self.on_conflict_do_nothing)
                    .await
            }
            Some(staged) => {
                stage_statement(&staged, &self.table, batches, self.on_conflict_do_nothing).await
            }
        }
        .map_err(crate::error::into_datafusion)
    }
}
