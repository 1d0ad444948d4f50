//! Query execution apart from serving.
//!
//! Ad-hoc queries (SELECT, `COPY (query) TO`, catalog queries, the SELECT
//! of an `INSERT ... SELECT`) run on a thread pool of their own, the
//! [`QueryExecutor`], whose threads run at a lower OS priority than the
//! runtime that accepts connections, reads and writes sockets, commits
//! groups, checkpoints and maintains views. A CPU-bound plan then holds
//! only query threads: a new connection, a `SELECT 1` on a fresh worker,
//! a cancel request, an INSERT and a view's next batch still find the
//! serving runtime free, and the kernel gives it the CPU first.
//!
//! Rows cross between the two runtimes through a bounded channel, so a
//! slow client holds back its query instead of buffering its result.
//! Dropping the receiving stream (the client went away, a cancel or a
//! timeout ended the statement) aborts the query's task at its next yield
//! point: DataFusion's scans and exchanges yield, and so does every join
//! (see `yielding_joins.rs`).
//!
//! The pool is one per process, made on first use and never dropped (a
//! tokio runtime may not be dropped from inside another's task).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use arrow::datatypes::{DataType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{NestedLoopJoinExec, NestedLoopJoinExecBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::ExecutionPlan;
use futures::{Stream, StreamExt};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// How much lower the query threads' priority is than the server's
/// (`nice` steps): at 19 the kernel weighs a runnable serving thread about
/// 70 times a query thread (1024 against 15), yet queries still get every
/// CPU the server leaves idle. 10 (weight 110) let two heavy queries
/// triple a single-row INSERT's p99 in `tests/isolation.rs`.
const QUERY_NICE: i32 = 19;

/// Batches a query may compute ahead of its client.
const AHEAD: usize = 2;

/// The stack of every query thread: deep plans recurse while they run
/// and are dropped (as the serving runtime's threads, see `main.rs`).
const QUERY_STACK_BYTES: usize = 64 << 20;

/// Query threads per CPU. More threads than CPUs, so that a few heavy
/// queries (a nested-loop join can run seconds between yields) hold some
/// threads while a short query still finds an idle one; the kernel shares
/// the CPUs between them.
const THREADS_PER_CPU: usize = 4;

/// The fewest query threads, whatever the CPUs.
const MIN_THREADS: usize = 16;

/// The thread pool ad-hoc queries execute on.
pub struct QueryExecutor {
    handle: Handle,
}

static EXECUTOR: OnceLock<QueryExecutor> = OnceLock::new();
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

impl QueryExecutor {
    /// The process's query pool, made on first use (see
    /// [`THREADS_PER_CPU`]), each thread with a large stack for deep plans.
    pub fn get() -> &'static QueryExecutor {
        EXECUTOR.get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .saturating_mul(THREADS_PER_CPU)
                .max(MIN_THREADS);
            let runtime = RUNTIME.get_or_init(|| {
                match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .thread_name("sluice-query")
                    .thread_stack_size(QUERY_STACK_BYTES)
                    .on_thread_start(lower_priority)
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    // Without threads the process cannot serve at all.
                    Err(e) => panic!("cannot start the query threads: {e}"),
                }
            });
            QueryExecutor {
                handle: runtime.handle().clone(),
            }
        })
    }

    /// Executes `plan` on the query pool; its batches arrive on the
    /// returned stream, and dropping the stream stops the query.
    pub fn stream(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
    ) -> SendableRecordBatchStream {
        let schema = plan.schema();
        let stop = Arc::new(AtomicBool::new(false));
        let plan = match interruptible(plan, &stop) {
            Ok(plan) => plan,
            Err(e) => {
                return Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::once(async move { Err(e) }),
                ))
            }
        };
        let (sender, receiver) = mpsc::channel(AHEAD);
        let pump = async move {
            // Operators spawn their own tasks onto the runtime they are
            // executed on, so the plan is executed here, not by the caller.
            let mut batches = match datafusion::physical_plan::execute_stream(plan, task) {
                Ok(batches) => batches,
                Err(e) => {
                    let _ = sender.send(Err(e)).await;
                    return;
                }
            };
            while let Some(batch) = batches.next().await {
                let failed = batch.is_err();
                if sender.send(batch).await.is_err() || failed {
                    return;
                }
            }
        };
        let task = self.handle.spawn(pump.in_current_span());
        Box::pin(RecordBatchStreamAdapter::new(
            schema,
            Received {
                receiver,
                task: AbortOnDrop { task, stop },
                ended: false,
            },
        ))
    }

    /// All of `plan`'s batches, computed on the query pool (an `INSERT
    /// ... SELECT`); dropping the returned future stops it.
    pub async fn collect(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
    ) -> Result<Vec<arrow::record_batch::RecordBatch>> {
        let stop = Arc::new(AtomicBool::new(false));
        let plan = interruptible(plan, &stop)?;
        let work = datafusion::physical_plan::collect(plan, task);
        AbortOnDrop {
            task: self.handle.spawn(work.in_current_span()),
            stop,
        }
        .await
    }
}

/// Lowers the calling thread's scheduling priority (Linux: `nice` is per
/// thread). Best effort: a thread left at normal priority still works.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers; on failure the
    // thread keeps its priority, which is harmless.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, QUERY_NICE);
    }
}

/// A query's task, stopped when its handle is dropped: aborted at its
/// next yield, and its join filters fail at their next batch (see
/// [`interruptible`]), so that a join that runs long between yields stops
/// too.
struct AbortOnDrop<T> {
    task: JoinHandle<T>,
    stop: Arc<AtomicBool>,
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

impl<T> Future for AbortOnDrop<Result<T>> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(outcome) => outcome,
                Err(e) => Err(stopped(e)),
            })
    }
}

/// Why a query's task ended without its answer: a panic (the panic hook
/// has logged it, with the statement's span) or an abort.
fn stopped(e: tokio::task::JoinError) -> DataFusionError {
    let message = if e.is_panic() {
        let payload = e.into_panic();
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // Arrow's arrays of text, bytea and lists hold at most 2 GiB per
        // column of a batch, and its infallible builders panic past that
        // (a 1 MB constant repeated over a batch of 5,000 rows): the
        // statement asked for more memory than a value may take.
        if text.contains("offset overflow") {
            return DataFusionError::External(Box::new(crate::error::SluiceError::Evaluation {
                sqlstate: "54000",
                message: "out of memory: a text, bytea or array column of one batch would \
                          exceed 2 GiB"
                    .into(),
            }));
        }
        format!("the query failed unexpectedly: {text}")
    } else {
        "the query was stopped".to_string()
    };
    DataFusionError::External(Box::new(crate::error::SluiceError::Internal(message)))
}

/// The batches the query's task sends, for as long as the task lives.
struct Received {
    receiver: mpsc::Receiver<Result<arrow::record_batch::RecordBatch>>,
    task: AbortOnDrop<()>,
    /// The task's end has been seen.
    ended: bool,
}

impl Stream for Received {
    type Item = Result<arrow::record_batch::RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.receiver.poll_recv(cx) {
            Poll::Ready(None) if !self.ended => {
                // The task dropped its sender: all rows came, or it
                // panicked, which must not pass for the end of the rows.
                match Pin::new(&mut self.task.task).poll(cx) {
                    Poll::Ready(joined) => {
                        self.ended = true;
                        Poll::Ready(joined.err().map(|e| Err(stopped(e))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
            other => other,
        }
    }
}

/// `plan` with every nested-loop join's filter made to fail once `stop`
/// is set. A nested-loop join evaluates its filter for each row of one
/// side against a batch of the other and returns only when it has output
/// rows, so a join whose filter matches nothing (`a.x + b.x = 1`) never
/// yields: aborting its task would wait for the whole join.
fn interruptible(
    plan: Arc<dyn ExecutionPlan>,
    stop: &Arc<AtomicBool>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(filter) = join.filter() else {
            return Ok(Transformed::no(node));
        };
        let checked = JoinFilter::new(
            Arc::new(StopCheck {
                inner: Arc::clone(filter.expression()),
                stop: Arc::clone(stop),
            }),
            filter.column_indices().to_vec(),
            Arc::clone(filter.schema()),
        );
        let rebuilt = NestedLoopJoinExecBuilder::from(join)
            .with_filter(Some(checked))
            .build()?;
        Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// An expression that fails once its query is stopped, else is `inner`.
#[derive(Debug)]
struct StopCheck {
    inner: Arc<dyn PhysicalExpr>,
    stop: Arc<AtomicBool>,
}

impl PartialEq for StopCheck {
    fn eq(&self, other: &Self) -> bool {
        self.inner.as_ref() == other.inner.as_ref() && Arc::ptr_eq(&self.stop, &other.stop)
    }
}

impl Eq for StopCheck {}

impl std::hash::Hash for StopCheck {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl std::fmt::Display for StopCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for StopCheck {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.inner.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.inner.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(DataFusionError::External(Box::new(
                crate::error::SluiceError::Internal("the query was stopped".into()),
            )));
        }
        self.inner.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(StopCheck {
            inner: children.swap_remove(0),
            stop: Arc::clone(&self.stop),
        }))
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt_sql(f)
    }
}
