//! Running views: one task per view follows its source table's commits.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::prelude::SessionConfig;
use parking_lot::{Mutex, RwLock};
use sluice_catalog::ViewDef;
use sluice_sql::sqlparser::ast;
use sluice_sql::sqlparser::dialect::PostgreSqlDialect;
use sluice_sql::sqlparser::parser::Parser;
use tokio::sync::watch;
use tracing::{error, info, info_span, Instrument};

use crate::error::SluiceError;
use crate::log::{LogStore, TableLog};
use crate::query::{project_frame, LogTableProvider};

use super::pipeline::{compile, CompiledView};

/// Frames read from the log per pipeline run.
const FRAMES_PER_DELTA: usize = 16;

/// What readers of a view see: rows as of a commit of the source table.
#[derive(Default)]
struct Published {
    batches: Vec<RecordBatch>,
    consumed: Vec<u64>,
    state_rows: u64,
}

pub struct View {
    pub def: ViewDef,
    pub schema: SchemaRef,
    pub source: Arc<TableLog>,
    published: RwLock<Published>,
    progress: watch::Sender<Vec<u64>>,
    failure: Mutex<Option<String>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl View {
    /// The rows of the last published snapshot.
    pub fn snapshot(&self) -> Vec<RecordBatch> {
        self.published.read().batches.clone()
    }

    /// Offsets consumed per source partition, and rows of state held.
    pub fn progress(&self) -> (Vec<u64>, u64) {
        let p = self.published.read();
        (p.consumed.clone(), p.state_rows)
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Waits until the view has consumed `target` (per partition).
    async fn wait_for(&self, target: &[u64]) -> Result<(), SluiceError> {
        let mut rx = self.progress.subscribe();
        loop {
            if let Some(f) = self.failure() {
                return Err(SluiceError::Internal(format!(
                    "materialized view \"{}\" failed: {f}",
                    self.def.name
                )));
            }
            let done = {
                let consumed = rx.borrow_and_update();
                consumed.len() == target.len() && consumed.iter().zip(target).all(|(c, t)| c >= t)
            };
            if done {
                return Ok(());
            }
            if tokio::time::timeout(std::time::Duration::from_millis(200), rx.changed())
                .await
                .is_ok_and(|r| r.is_err())
            {
                return Err(SluiceError::Internal(format!(
                    "materialized view \"{}\" stopped",
                    self.def.name
                )));
            }
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }
}

/// All running views.
pub struct ViewManager {
    store: Arc<LogStore>,
    config: SessionConfig,
    views: RwLock<HashMap<String, Arc<View>>>,
}

fn parse_query(sql: &str) -> Result<ast::Query, SluiceError> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_query())
        .map(|q| *q)
        .map_err(|e| SluiceError::Sql(sluice_sql::SqlError::Syntax(e.to_string())))
}

impl ViewManager {
    /// Starts every view in the catalog; each backfills from the log.
    pub async fn start(
        store: Arc<LogStore>,
        config: SessionConfig,
    ) -> Result<Arc<ViewManager>, SluiceError> {
        let manager = Arc::new(ViewManager {
            store: store.clone(),
            config,
            views: RwLock::new(HashMap::new()),
        });
        for def in store.view_defs() {
            let query = parse_query(&def.query)?;
            let compiled = compile(&query, &store, manager.config.clone()).await?;
            manager.launch(def, compiled);
        }
        Ok(manager)
    }

    pub fn view(&self, name: &str) -> Option<Arc<View>> {
        self.views.read().get(name).cloned()
    }

    pub fn views(&self) -> Vec<Arc<View>> {
        let mut v: Vec<_> = self.views.read().values().cloned().collect();
        v.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        v
    }

    /// Creates a view durably and starts it. `Ok(false)` when it exists and
    /// `if_not_exists` was given.
    pub async fn create(
        &self,
        name: &str,
        if_not_exists: bool,
        query: &ast::Query,
    ) -> Result<bool, SluiceError> {
        if self.store.name_exists(name) {
            if if_not_exists && self.view(name).is_some() {
                return Ok(false);
            }
            return Err(SluiceError::Catalog(
                sluice_catalog::CatalogError::DuplicateTable(name.to_string()),
            ));
        }
        let compiled = compile(query, &self.store, self.config.clone()).await?;
        let def = self.store.create_view_def(ViewDef {
            id: 0,
            name: name.to_string(),
            query: query.to_string(),
        })?;
        self.launch(def, compiled);
        Ok(true)
    }

    pub fn drop_view(&self, name: &str) -> Result<(), SluiceError> {
        self.store.drop_view_def(name)?;
        self.views.write().remove(name);
        Ok(())
    }

    /// Names of the views that read `table`.
    pub fn dependents(&self, table: &str) -> Vec<String> {
        self.views()
            .iter()
            .filter(|v| v.source.def.name == table)
            .map(|v| v.def.name.clone())
            .collect()
    }

    /// Returns once every view reflects every row committed before the call.
    pub async fn flush(&self) -> Result<(), SluiceError> {
        for view in self.views() {
            let target = view.source.commits().borrow().clone();
            view.wait_for(&target).await?;
        }
        Ok(())
    }

    fn launch(&self, def: ViewDef, compiled: CompiledView) {
        let partitions = compiled.source.partitions().len();
        let (progress, _) = watch::channel(vec![0; partitions]);
        let view = Arc::new(View {
            schema: compiled.schema.clone(),
            source: compiled.source.clone(),
            published: RwLock::new(Published {
                consumed: vec![0; partitions],
                ..Default::default()
            }),
            progress,
            failure: Mutex::new(None),
            task: Mutex::new(None),
            def,
        });
        let span = info_span!("view", name = %view.def.name);
        let handle = tokio::spawn(follow(Arc::downgrade(&view), compiled).instrument(span));
        *view.task.lock() = Some(handle.abort_handle());
        self.views.write().insert(view.def.name.clone(), view);
    }
}

/// The view's task: apply each commit of the source table, then publish.
async fn follow(view: std::sync::Weak<View>, mut compiled: CompiledView) {
    let table = compiled.source.clone();
    let mut commits = table.commits();
    let provider_schema =
        datafusion::datasource::TableProvider::schema(&LogTableProvider::new(table.clone()));
    let projection: Vec<usize> = (0..provider_schema.fields().len()).collect();
    let data_columns = table.def.columns.len();
    let ctx = Arc::new(TaskContext::default());
    let mut consumed = vec![0u64; table.partitions().len()];
    let mut first = true;
    loop {
        let ends = commits.borrow_and_update().clone();
        let behind = ends.iter().zip(&consumed).any(|(e, c)| e > c);
        if behind || first {
            let started = std::time::Instant::now();
            let result: Result<(), SluiceError> = async {
                for (k, part) in table.partitions().iter().enumerate() {
                    let frames = part.frames_in_range(consumed[k], ends[k]);
                    for chunk in frames.chunks(FRAMES_PER_DELTA) {
                        let mut delta = Vec::with_capacity(chunk.len());
                        for meta in chunk {
                            let batch = part.read_frame(meta)?;
                            delta.push(project_frame(
                                &batch,
                                meta,
                                k as i32,
                                &projection,
                                data_columns,
                                &provider_schema,
                            )?);
                        }
                        // A panic in a pipeline stops this view, not the server.
                        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                            compiled.apply(delta, ctx.clone()),
                        ))
                        .await
                        .map_err(|_| {
                            SluiceError::Internal("the view's pipeline panicked".into())
                        })??;
                    }
                }
                Ok(())
            }
            .await;
            let Some(view) = view.upgrade() else { return };
            if let Err(e) = result {
                error!(error = %e, "view stopped");
                *view.failure.lock() = Some(e.message());
                return;
            }
            let batches = match compiled.snapshot() {
                Ok(b) => b,
                Err(e) => {
                    error!(error = %e, "view stopped");
                    *view.failure.lock() = Some(e.message());
                    return;
                }
            };
            consumed = ends;
            {
                let mut p = view.published.write();
                p.batches = batches;
                p.consumed = consumed.clone();
                p.state_rows = compiled.state_rows();
            }
            view.progress.send_replace(consumed.clone());
            if first {
                info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "view caught up with its source"
                );
            }
            first = false;
        }
        if commits.changed().await.is_err() {
            return;
        }
    }
}
