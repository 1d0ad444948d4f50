//! `TABLESAMPLE`: a relation read through a sample of its rows that never
//! depends on the query's plan or threads.
//!
//! - `HASH (p) [REPEATABLE (seed)] [BY (columns)]`: the rows whose key (the
//!   columns, or a keyed table's primary key) hashes (see
//!   [`super::stable_hash`]) below `p` percent. Membership depends on the
//!   key alone: it does not change as rows are added, during a replay or
//!   after a restart, and a key's rows are all in or all out.
//! - `BERNOULLI (p)` / `SYSTEM (p)`: each row with chance `p` percent. With
//!   `REPEATABLE (seed)`, a table's rows are chosen by their place in the
//!   log (`_partition`, `_offset`), so the same rows come back every time
//!   and rows added later leave the earlier choice alone; a view's rows by
//!   all their values. Without it, a new choice each time, as in
//!   PostgreSQL.

use std::fmt;
use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;

use super::stable_hash::{in_sample, row_hashes};

/// A relation read through a sample.
pub struct SampledTable {
    inner: Arc<dyn TableProvider>,
    /// The columns (of `inner`) whose values choose a row.
    keys: Vec<usize>,
    seed: u64,
    percent: f64,
}

impl fmt::Debug for SampledTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SampledTable({}%)", self.percent)
    }
}

impl SampledTable {
    /// `inner` sampled by the values of its columns `keys`, hashed from
    /// `seed`.
    pub fn new(inner: Arc<dyn TableProvider>, keys: Vec<usize>, seed: u64, percent: f64) -> Self {
        SampledTable {
            inner,
            keys,
            seed,
            percent,
        }
    }

    /// The relation it samples.
    pub fn inner(&self) -> &Arc<dyn TableProvider> {
        &self.inner
    }
}

#[async_trait]
impl TableProvider for SampledTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // The inner scan uses them to choose what to read; the rows are
        // filtered again above it.
        Ok(self
            .inner
            .supports_filters_pushdown(filters)?
            .into_iter()
            .map(|p| match p {
                TableProviderFilterPushDown::Unsupported => {
                    TableProviderFilterPushDown::Unsupported
                }
                _ => TableProviderFilterPushDown::Inexact,
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
        let mut columns: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.inner.schema().fields().len()).collect());
        let shown = columns.len();
        // The key columns are read too, after the asked ones when not
        // among them.
        let mut keys = Vec::with_capacity(self.keys.len());
        for &k in &self.keys {
            match columns.iter().position(|&c| c == k) {
                Some(at) => keys.push(at),
                None => {
                    columns.push(k);
                    keys.push(columns.len() - 1);
                }
            }
        }
        let input = self
            .inner
            .scan(state, Some(&columns), filters, None)
            .await?;
        let schema = Arc::new(input.schema().project(&(0..shown).collect::<Vec<_>>())?);
        let streams = (0..input.properties().partitioning.partition_count())
            .map(|partition| {
                Arc::new(SampledPartition {
                    input: input.clone(),
                    partition,
                    keys: keys.clone(),
                    shown,
                    seed: self.seed,
                    percent: self.percent,
                    schema: schema.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect::<Vec<_>>();
        super::provider::streaming_scan(schema, streams, limit)
    }
}

/// One partition of the inner scan, sampled.
struct SampledPartition {
    input: Arc<dyn ExecutionPlan>,
    partition: usize,
    keys: Vec<usize>,
    shown: usize,
    seed: u64,
    percent: f64,
    schema: SchemaRef,
}

impl fmt::Debug for SampledPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SampledPartition({})", self.partition)
    }
}

impl PartitionStream for SampledPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = self.schema.clone();
        let input = match self.input.execute(self.partition, ctx) {
            Ok(s) => s,
            Err(e) => {
                return Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::once(async move { Err(e) }),
                ))
            }
        };
        let (keys, shown, seed, percent) = (self.keys.clone(), self.shown, self.seed, self.percent);
        let out_schema = schema.clone();
        let rows = input.map(move |batch| {
            let batch = batch?;
            let columns: Vec<_> = keys.iter().map(|&k| batch.column(k).clone()).collect();
            let keep: BooleanArray = row_hashes(&columns, seed, batch.num_rows())?
                .into_iter()
                .map(|h| Some(in_sample(h, percent)))
                .collect();
            let kept = arrow::compute::filter_record_batch(&batch, &keep)?;
            let shown_columns = kept.columns()[..shown].to_vec();
            arrow::record_batch::RecordBatch::try_new_with_options(
                out_schema.clone(),
                shown_columns,
                &arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(kept.num_rows())),
            )
            .map_err(DataFusionError::from)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }
}
