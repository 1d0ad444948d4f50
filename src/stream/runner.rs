//! Running views: one task per view follows its sources' commits, runs
//! each delta through the view's compiled dataflow, publishes the rows and
//! commits checkpoints; [`ViewManager`] starts, rebuilds and drops them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, StringArray, TimestampMicrosecondArray, UInt32Array,
    UInt64Array,
};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::prelude::SessionConfig;
use parking_lot::{Mutex, RwLock};
use sluice_catalog::{CheckpointManifest, FileKind, ViewClockState, ViewDef};
use sluice_sql::sqlparser::ast;
use sluice_sql::sqlparser::dialect::PostgreSqlDialect;
use sluice_sql::sqlparser::parser::Parser;
use tokio::sync::{watch, Notify};
use tracing::{error, info, info_span, warn, Instrument};

use crate::checkpoint::{Capture, Checkpoints, RestoredCheckpoint, ViewCheckpointer};
use crate::error::SluiceError;
use crate::log::{EventTimeProgress, FrameMeta, LogStore, TableLog, WatermarkTracker};
use crate::query::{project_frame, LogTableProvider};

use super::changes::ChangeTracker;
pub use super::compile::pipeline::EmitOptions;
use super::compile::pipeline::{compile, CompiledView, WindowClosing};
use super::operators::retract::KeyedVersions;
pub use super::view::BackfillProgress;
use super::view::{
    BackfillStart, LateRow, Published, View, ViewLookup, ViewSource, FLUSH_CHECKPOINT_WAIT,
    LATE_ROWS_KEPT,
};

/// Frames read from the log per pipeline run.
const FRAMES_PER_DELTA: usize = 16;

/// All running views.
pub struct ViewManager {
    pub(super) store: Arc<LogStore>,
    pub(super) checkpoints: Arc<Checkpoints>,
    pub(super) config: SessionConfig,
    views: RwLock<HashMap<String, Arc<View>>>,
    /// Rebuilds under way: the new view, by name, until it replaces the
    /// old one.
    rebuilding: RwLock<HashMap<String, Arc<View>>>,
}

pub(super) fn parse_query(sql: &str) -> Result<ast::Query, SluiceError> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_query())
        .map(|q| *q)
        .map_err(|e| SluiceError::Sql(sluice_sql::SqlError::Syntax(e.to_string())))
}

impl ViewLookup for ViewManager {
    fn view(&self, name: &str) -> Option<Arc<View>> {
        ViewManager::view(self, name)
    }
}

impl ViewManager {
    /// Starts every view in the catalog from its newest checkpoint (or
    /// from the start of the log when it has none).
    pub async fn start(
        store: Arc<LogStore>,
        checkpoints: Arc<Checkpoints>,
        config: SessionConfig,
    ) -> Result<Arc<ViewManager>, SluiceError> {
        let manager = Arc::new(ViewManager {
            store: store.clone(),
            checkpoints,
            config,
            views: RwLock::new(HashMap::new()),
            rebuilding: RwLock::new(HashMap::new()),
        });
        // Before any view collects its old epochs.
        manager.keep_cut_checkpoints().await;
        for def in store.view_defs() {
            let compiled = manager.compile_stored(&def).await?;
            // A view over a view that changes rows in place starts again
            // from that view's rows (restored already), not from its own
            // checkpoint, which does not say which of those rows it saw.
            let restored = if compiled.retracting
                && (matches!(compiled.source, ViewSource::View(_))
                    || compiled.source.reads_changing_view())
            {
                None
            } else {
                manager.load_checkpoint(&def, &compiled).await?
            };
            let from_checkpoint = restored.is_some();
            if let Err(e) = manager.launch(def.clone(), compiled, restored) {
                if !from_checkpoint {
                    return Err(e);
                }
                // A checkpoint whose state does not fit the view's operators
                // (written by a version that compiled the query otherwise)
                // is set aside: the view is computed again from the log.
                warn!(view = %def.name, error = %e, "checkpoint does not fit the view's operators; rebuilding the view from the log");
                let compiled = manager.compile_stored(&def).await?;
                manager.launch(def, compiled, None)?;
            }
        }
        // Checkpoints of views that were dropped while an upload ran.
        let known: Vec<u64> = store.view_defs().iter().map(|d| d.id).collect();
        manager.checkpoints.forget_all_but(&known).await?;
        Ok(manager)
    }

    /// A stored view's query, compiled as it was created.
    async fn compile_stored(&self, def: &ViewDef) -> Result<CompiledView, SluiceError> {
        let emit = EmitOptions {
            emit_on_window_close: def.emit_on_window_close,
            allowed_lateness_us: def.allowed_lateness_us,
        };
        compile(
            &parse_query(&def.query)?,
            &self.store,
            self,
            self.config.clone(),
            emit,
        )
        .await
    }

    pub fn checkpoints(&self) -> &Arc<Checkpoints> {
        &self.checkpoints
    }

    /// Waits until every view has applied what its sources held when this
    /// was called, has failed, or was dropped: after a start, the end of
    /// the replay beyond each view's checkpoint.
    pub async fn caught_up(&self) {
        let targets: Vec<(Arc<View>, Vec<u64>)> = self
            .views()
            .into_iter()
            .map(|v| {
                let ends = v.source_end();
                (v, ends)
            })
            .collect();
        for (view, ends) in targets {
            loop {
                let current = self
                    .view(&view.def.name)
                    .is_some_and(|v| Arc::ptr_eq(&v, &view));
                let (consumed, _) = view.progress();
                let done =
                    consumed.len() != ends.len() || consumed.iter().zip(&ends).all(|(c, e)| c >= e);
                if done || !current || view.failure().is_some() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }

    /// The view's newest usable checkpoint. One that covers more than the
    /// source holds (the log lost committed data) is set aside and the view
    /// rebuilt from the log.
    async fn load_checkpoint(
        &self,
        def: &ViewDef,
        compiled: &CompiledView,
    ) -> Result<Option<RestoredCheckpoint>, SluiceError> {
        let started = std::time::Instant::now();
        let Some(restored) = self.checkpoints.load_latest(def.id, &def.name).await? else {
            return Ok(None);
        };
        // A view input may restore to fewer rows than this view had read:
        // the view waits for it to catch up.
        let ends: Vec<u64> = (0..compiled.source.offsets())
            .map(|k| match compiled.source.input_at(k) {
                Some((ViewSource::Table(t), p)) => {
                    t.commits().borrow().get(p).copied().unwrap_or(0)
                }
                _ => u64::MAX,
            })
            .collect();
        let offsets = &restored.manifest.source_offsets;
        if offsets.len() != ends.len() || offsets.iter().zip(&ends).any(|(o, e)| o > e) {
            warn!(view = %def.name, ?offsets, ?ends, "checkpoint is ahead of the log; rebuilding the view from the log");
            return Ok(None);
        }
        info!(view = %def.name, epoch = restored.manifest.epoch, ?offsets,
              elapsed_ms = started.elapsed().as_millis() as u64, "restored view from checkpoint");
        self.checkpoints.record_restored(&restored.manifest);
        Ok(Some(restored))
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
        emit: EmitOptions,
    ) -> Result<bool, SluiceError> {
        if self.store.name_exists(name) {
            if if_not_exists && self.view(name).is_some() {
                return Ok(false);
            }
            return Err(SluiceError::Catalog(
                sluice_catalog::CatalogError::DuplicateTable(name.to_string()),
            ));
        }
        self.refuse_unrepeatable(query)?;
        let compiled = compile(query, &self.store, self, self.config.clone(), emit).await?;
        let def = self.store.create_view_def(ViewDef {
            id: 0,
            name: name.to_string(),
            query: query.to_string(),
            emit_on_window_close: emit.emit_on_window_close,
            allowed_lateness_us: emit.allowed_lateness_us,
            start_offsets: None,
        })?;
        let id = def.id;
        if let Err(e) = self.launch(def, compiled, None) {
            // A view that cannot start is not created: nothing of it stays.
            self.views.write().remove(name);
            self.store.drop_view_def(name)?;
            self.checkpoints.forget(id);
            return Err(e);
        }
        Ok(true)
    }

    pub fn drop_view(&self, name: &str) -> Result<(), SluiceError> {
        if let Some(view) = self.dependents(name).into_iter().next() {
            return Err(SluiceError::DependentObjects {
                kind: "materialized view",
                name: name.to_string(),
                dependent: format!("materialized view {view}"),
            });
        }
        let def = self.store.drop_view_def(name)?;
        self.views.write().remove(name);
        self.checkpoints.forget(def.id);
        Ok(())
    }

    /// How far compaction may rewrite a keyed table: below the offsets
    /// every view over it has checkpointed, so that a view restored from
    /// its checkpoint still finds the versions it applied.
    pub fn compaction_horizon(self: &Arc<Self>) -> crate::log::Horizon {
        let weak = Arc::downgrade(self);
        Arc::new(move |table: &TableLog| {
            let mut horizon = vec![u64::MAX; table.partitions().len()];
            let Some(manager) = weak.upgrade() else {
                return horizon;
            };
            let mut views = manager.views();
            views.extend(manager.rebuilding.read().values().cloned());
            for v in views {
                let Some(range) = v.source.offsets_of(&table.def().name) else {
                    continue;
                };
                let saved = v.checkpointed_offsets();
                for (h, c) in horizon.iter_mut().zip(saved.get(range).unwrap_or(&[])) {
                    *h = (*h).min(*c);
                }
            }
            horizon
        })
    }

    /// The operator graph a view over `query` would have, without
    /// creating it (`EXPLAIN CREATE MATERIALIZED VIEW`).
    pub async fn explain(
        &self,
        query: &ast::Query,
        emit: EmitOptions,
    ) -> Result<Vec<String>, SluiceError> {
        self.refuse_unrepeatable(query)?;
        let compiled = compile(query, &self.store, self, self.config.clone(), emit).await?;
        Ok(compiled.explain)
    }

    /// Progress of a view's rebuild, or else of its own backfill.
    pub fn progress(&self, name: &str) -> Option<BackfillProgress> {
        if let Some(new) = self.rebuilding.read().get(name) {
            return Some(new.backfill_progress().unwrap_or(BackfillProgress {
                kind: "rebuild",
                done_rows: 0,
                total_rows: 0,
                rows_per_second: 0.0,
                eta_seconds: None,
            }));
        }
        self.view(name).and_then(|v| v.backfill_progress())
    }

    /// `ALTER MATERIALIZED VIEW v REBUILD [FROM ...]`: computes the view
    /// again from the retained log (from each partition's first retained
    /// offset, or the first ingested at or after `from_us`) as a new view
    /// nobody reads yet, while the old one keeps serving. Once the new one
    /// has caught up with what was committed when the rebuild began and a
    /// checkpoint holds it, the catalog switches to it in one durable
    /// change and the next query reads it. A crash before the switch
    /// leaves the old view in place.
    pub async fn rebuild(&self, name: &str, from_us: Option<i64>) -> Result<(), SluiceError> {
        let old = self.view(name).ok_or_else(|| {
            if self.store.table(name).is_some() {
                SluiceError::WrongObjectType(name.to_string(), "materialized view")
            } else {
                SluiceError::UndefinedTable(name.to_string())
            }
        })?;
        if let Some(dependent) = self.dependents(name).into_iter().next() {
            return Err(SluiceError::Unsupported(format!(
                "materialized view \"{dependent}\" reads \"{name}\"; drop it before rebuilding \"{name}\""
            )));
        }
        // Subscriptions hold positions in the view's rows, which a rebuild
        // computes afresh.
        if let Some(sub) = self
            .store
            .subscription_defs()
            .into_iter()
            .find(|s| s.source == name)
        {
            return Err(SluiceError::Unsupported(format!(
                "subscription \"{}\" reads \"{name}\"; drop it before rebuilding \"{name}\"",
                sub.name
            )));
        }
        let start_offsets = start_offsets_of(&old, from_us)?;
        self.rebuild_held(&old, start_offsets).await
    }

    /// Rebuilds `old` from `start_offsets`, marked as being rebuilt (one
    /// rebuild of a view at a time) until it is done.
    async fn rebuild_held(
        &self,
        old: &Arc<View>,
        start_offsets: Vec<u64>,
    ) -> Result<(), SluiceError> {
        let name = &old.def.name;
        {
            let mut rebuilding = self.rebuilding.write();
            if rebuilding.contains_key(name) {
                return Err(SluiceError::ObjectInUse(format!(
                    "materialized view \"{name}\" is already being rebuilt"
                )));
            }
            // Held by a placeholder until the new view exists.
            rebuilding.insert(name.to_string(), old.clone());
        }
        let result = self.rebuild_into(old, start_offsets).await;
        self.rebuilding.write().remove(name);
        result
    }

    /// The views that read `table`, directly or through other views, in
    /// creation order (a view's source view first).
    pub fn readers_of(&self, table: &str) -> Vec<Arc<View>> {
        let all = self.views();
        let mut reached: Vec<Arc<View>> = Vec::new();
        let mut names = vec![table.to_string()];
        while let Some(name) = names.pop() {
            for v in all.iter().filter(|v| v.source.reads(&name)) {
                if !reached.iter().any(|r| Arc::ptr_eq(r, v)) {
                    reached.push(v.clone());
                    names.push(v.def.name.clone());
                }
            }
        }
        reached.sort_by_key(|v| v.def.id);
        reached
    }

    /// An erasure removed rows from `table`, which views over an
    /// append-only table cannot take back (they keep less state than
    /// that needs, and closed windows are final): every view reading it,
    /// directly or through other views, is computed again from the log
    /// (which no longer holds the rows), as `REBUILD` does, and the old
    /// views' checkpoints are deleted, every epoch. The views are rebuilt
    /// in waves: those of a wave read no view still to be rebuilt, and run
    /// at once (each replay is one task, so a wave keeps as many cores
    /// busy as it has views); a view over a view waits for its source's
    /// wave. Returns the views rebuilt.
    pub async fn rebuild_after_erasure(&self, table: &str) -> Result<Vec<String>, SluiceError> {
        let mut done = Vec::new();
        let mut old_views: Vec<(u64, std::sync::Weak<View>)> = Vec::new();
        let mut waiting: Vec<String> = self
            .readers_of(table)
            .iter()
            .map(|v| v.def.name.clone())
            .collect();
        while !waiting.is_empty() {
            let (wave, later): (Vec<String>, Vec<String>) =
                waiting.iter().cloned().partition(|name| {
                    self.view(name).is_none_or(|v| {
                        !waiting
                            .iter()
                            .any(|other| other != name && v.source.reads(other))
                    })
                });
            // Views read one another without cycles, so a wave is never
            // empty; were it so, the rest go together.
            let (wave, later) = match wave.is_empty() {
                true => (later, Vec::new()),
                false => (wave, later),
            };
            // The view as it is now: its source view may have just been
            // rebuilt (it is compiled again over the new one).
            let olds: Vec<Arc<View>> = wave.iter().filter_map(|name| self.view(name)).collect();
            let rebuilds = olds.iter().map(|old| async move {
                self.rebuild_held(old, start_offsets_of(old, None)?).await
            });
            let results = futures::future::join_all(rebuilds).await;
            for (old, result) in olds.into_iter().zip(results) {
                result?;
                old_views.push((old.def.id, Arc::downgrade(&old)));
                done.push(old.def.name.clone());
            }
            waiting = later;
        }
        // The old views stop at their next step once nothing holds them;
        // then no epoch of theirs is left anywhere.
        let deadline = std::time::Instant::now() + FLUSH_CHECKPOINT_WAIT;
        while old_views.iter().any(|(_, w)| w.strong_count() > 0)
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (id, _) in old_views {
            self.checkpoints
                .forget_now(id)
                .await
                .map_err(|e| SluiceError::CheckpointPending {
                    view: table.to_string(),
                    reason: format!("deleting the checkpoints of a view before the erasure: {e}"),
                })?;
        }
        Ok(done)
    }
}

/// Where a rebuild of `old` starts reading (see [`ViewManager::rebuild`]).
fn start_offsets_of(old: &View, from_us: Option<i64>) -> Result<Vec<u64>, SluiceError> {
    Ok(match (&old.source, from_us) {
            (ViewSource::Table(t), None) => t.partitions().iter().map(|p| p.start_offset()).collect(),
            (ViewSource::Table(t), Some(ts)) => t.partitions().iter().map(|p| p.offset_at_time(ts)).collect(),
            (ViewSource::View(_), None) => vec![0],
            (ViewSource::Constant, _) => vec![0],
            (ViewSource::View(_), Some(_)) => {
                return Err(SluiceError::Unsupported(
                    "a view over a view rebuilds from its source's rows only: use REBUILD or REBUILD FROM EARLIEST".into(),
                ))
            }
            (ViewSource::Several(inputs), from) => {
                let mut offsets = Vec::new();
                for input in inputs {
                    match (input, from) {
                        (ViewSource::Table(t), None) => {
                            offsets.extend(t.partitions().iter().map(|p| p.start_offset()))
                        }
                        (ViewSource::Table(t), Some(ts)) => {
                            offsets.extend(t.partitions().iter().map(|p| p.offset_at_time(ts)))
                        }
                        (_, None) => offsets.push(0),
                        (_, Some(_)) => {
                            return Err(SluiceError::Unsupported(
                                "a view that reads a view rebuilds from its sources' rows only: use REBUILD or REBUILD FROM EARLIEST".into(),
                            ))
                        }
                    }
                }
                offsets
            }
    })
}

impl ViewManager {
    async fn rebuild_into(
        &self,
        old: &Arc<View>,
        start_offsets: Vec<u64>,
    ) -> Result<(), SluiceError> {
        let name = old.def.name.clone();
        let query = parse_query(&old.def.query)?;
        let emit = EmitOptions {
            emit_on_window_close: old.def.emit_on_window_close,
            allowed_lateness_us: old.def.allowed_lateness_us,
        };
        let compiled = compile(&query, &self.store, self, self.config.clone(), emit).await?;
        let def = ViewDef {
            id: self.store.reserve_id()?,
            start_offsets: Some(start_offsets.clone()),
            ..old.def.clone()
        };
        let new = self.start_view(def, compiled, None, "rebuild", None)?;
        self.rebuilding.write().insert(name.clone(), new.clone());
        info!(view = %name, ?start_offsets, "rebuilding view");
        let caught_up = async {
            let target = new.source_end();
            new.wait_for(&target).await?;
            match tokio::time::timeout(FLUSH_CHECKPOINT_WAIT, new.wait_checkpointed(&target)).await
            {
                Ok(r) => r,
                Err(_) => Err(SluiceError::CheckpointPending {
                    view: name.clone(),
                    reason: "the rebuilt view's first checkpoint is not committed".into(),
                }),
            }
        }
        .await;
        if let Err(e) = caught_up {
            self.checkpoints.forget(new.def.id);
            return Err(e);
        }
        let replaced = self.store.replace_view_def(new.def.clone())?;
        self.views.write().insert(name.clone(), new);
        self.checkpoints.forget(replaced.id);
        info!(view = %name, "rebuilt view replaced the old one");
        Ok(())
    }

    /// Refuses a view that reads a relation `AS OF` a position or through
    /// `TABLESAMPLE`, and a view over tables whose query calls a function
    /// its inputs do not fix (`now()`, `random()`, `current_user`): the
    /// view computed again from the same log (a restart without checkpoint,
    /// REBUILD, a read at a cut) must give the same rows. A view over no
    /// table is computed once and kept as it came out, so it may.
    fn refuse_unrepeatable(&self, query: &ast::Query) -> Result<(), SluiceError> {
        let mut named = Vec::new();
        let _ = ast::visit_relations(query, |name| {
            if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                named.push(sluice_sql::ident_name(last));
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        // A view follows the log as it grows: it reads no cut, and
        // samples by a filter it can compute incrementally.
        if let Some((relation, read)) = named.iter().find_map(|n| sluice_sql::ReadAt::from_name(n))
        {
            return Err(SluiceError::Unsupported(match read.as_of {
                Some(_) => format!(
                    "a materialized view follows the log as it grows and cannot read \"{relation}\" AS OF a position; read the view AS OF instead"
                ),
                None => format!(
                    "TABLESAMPLE of \"{relation}\" in a materialized view is not supported; filter by a hash instead: WHERE abs(hash64(key, seed)) % 100 < percent"
                ),
            }));
        }
        let reads = named
            .iter()
            .any(|r| self.store.table(r).is_some() || self.view(r).is_some());
        match sluice_sql::unfixed_function(query) {
            Some(function) if reads => Err(SluiceError::NotFixed {
                function,
                object: "a materialized view",
            }),
            _ => Ok(()),
        }
    }

    /// Names of the views that read `relation` (a table or a view).
    pub fn dependents(&self, relation: &str) -> Vec<String> {
        self.views()
            .iter()
            .filter(|v| v.source.reads(relation))
            .map(|v| v.def.name.clone())
            .collect()
    }

    /// Returns once every view reflects every row committed before the call
    /// and a checkpoint holds that state. Views are flushed in creation
    /// order, so a view's source view is flushed before it.
    pub async fn flush(&self) -> Result<(), SluiceError> {
        self.flush_in_order(self.views()).await
    }

    /// Brings each of `views` up to what was committed at the call and
    /// checkpoints it, a view's source views first.
    async fn flush_in_order(&self, mut views: Vec<Arc<View>>) -> Result<(), SluiceError> {
        views.sort_by_key(|v| v.def.id);
        for view in views {
            let target = view.source_end();
            view.wait_for(&target).await?;
            self.checkpoint_wait(&view, view.wait_checkpointed(&target))
                .await?;
        }
        Ok(())
    }

    /// Makes `name` (and the views it reads) reflect every row committed
    /// before the call, checkpointed: `REFRESH MATERIALIZED VIEW`.
    pub async fn flush_view(&self, name: &str) -> Result<(), SluiceError> {
        let all = self.views();
        let mut reached: Vec<Arc<View>> = Vec::new();
        let mut names = vec![name.to_string()];
        while let Some(next) = names.pop() {
            if let Some(v) = all.iter().find(|v| v.def.name == next) {
                if !reached.iter().any(|r| Arc::ptr_eq(r, v)) {
                    reached.push(v.clone());
                    for input in v.source.inputs() {
                        if let ViewSource::View(upstream) = input {
                            names.push(upstream.def.name.clone());
                        }
                    }
                }
            }
        }
        self.flush_in_order(reached).await
    }

    /// Makes every view that reads `table`, directly or through other
    /// views, reflect every row committed before the call, and leaves that
    /// state as its only checkpoint (`VACUUM`: rows deleted from the table
    /// are then in no view's checkpoint file). Returns how many views.
    pub async fn erase_from(&self, table: &str) -> Result<usize, SluiceError> {
        // A view's source view goes first.
        let reached = self.readers_of(table);
        for view in &reached {
            let target = view.source_end();
            view.wait_for(&target).await?;
            self.checkpoint_wait(view, view.erase(&target)).await?;
        }
        Ok(reached.len())
    }

    /// Waits for `wait` (a view's checkpoint), at most
    /// FLUSH_CHECKPOINT_WAIT, then fails with the view's last checkpoint
    /// error.
    async fn checkpoint_wait(
        &self,
        view: &View,
        wait: impl std::future::Future<Output = Result<(), SluiceError>>,
    ) -> Result<(), SluiceError> {
        match tokio::time::timeout(FLUSH_CHECKPOINT_WAIT, wait).await {
            Ok(r) => r,
            Err(_) => {
                let reason = self
                    .checkpoints
                    .records()
                    .iter()
                    .rev()
                    .find(|r| r.view == view.def.name)
                    .and_then(|r| r.error.clone())
                    .unwrap_or_else(|| "still writing".into());
                Err(SluiceError::CheckpointPending {
                    view: view.def.name.clone(),
                    reason,
                })
            }
        }
    }

    fn launch(
        &self,
        def: ViewDef,
        compiled: CompiledView,
        restored: Option<RestoredCheckpoint>,
    ) -> Result<(), SluiceError> {
        let kind = if restored.is_some() {
            "catch-up"
        } else {
            "backfill"
        };
        let view = self.start_view(def, compiled, restored, kind, None)?;
        self.views.write().insert(view.def.name.clone(), view);
        Ok(())
    }

    /// Builds a view and starts its task, without making it visible.
    /// With `until`, the task reads its sources up to those offsets only
    /// and never checkpoints (a view computed at a cut).
    pub(super) fn start_view(
        &self,
        def: ViewDef,
        mut compiled: CompiledView,
        restored: Option<RestoredCheckpoint>,
        kind: &'static str,
        until: Option<Vec<u64>>,
    ) -> Result<Arc<View>, SluiceError> {
        let partitions = compiled.source.offsets();
        let first = def
            .start_offsets
            .clone()
            .filter(|o| o.len() == partitions)
            .unwrap_or_else(|| vec![0; partitions]);
        let mut start = TaskStart {
            consumed: first,
            clock: ViewClockState::default(),
            late_count: 0,
            late: Vec::new(),
        };
        let mut restored_changes = Vec::new();
        let manifest = match restored {
            Some(r) => {
                compiled.restore(r.appended, r.groups)?;
                compiled.restore_operators(&r.operators, r.manifest.stages_shared)?;
                compiled.restore_failed_rows(&r.manifest.failed_rows);
                restored_changes = r.changes;
                start.consumed = r.manifest.source_offsets.clone();
                start.clock = r.manifest.clock.clone();
                start.late_count = r.manifest.late_count;
                start.late = late_rows_from(&r.late);
                Some(r.manifest)
            }
            None => None,
        };
        // Readers see the restored state at once. A global aggregate has
        // its one row before it reads anything, and that row may not
        // compute (`count(*) / count(x)` is 0 / 0 over no rows): reads
        // fail until it does (see `View::unavailable`).
        let mut unavailable = None;
        let batches = match compiled.snapshot() {
            Ok(b) => b,
            Err(e) if e.is_data_exception() => {
                unavailable = Some((e.sqlstate(), e.message()));
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        let published = Published {
            batches,
            seq: 0,
            consumed: start.consumed.clone(),
            state_rows: compiled.state_rows(),
            watermark_us: start.clock.watermark_us,
            late_count: start.late_count,
            late: start.late.clone(),
            indexes: Default::default(),
            operators: compiled.operator_stats(),
        };
        let (progress, _) = watch::channel(start.consumed.clone());
        let (checkpointed, _) = watch::channel(start.consumed.clone());
        let append_only = compiled.append_only();
        let (durable_rows, _) = watch::channel(
            manifest
                .as_ref()
                .map_or(0, |m| change_stream_rows(m, append_only)),
        );
        let changes_kept = manifest.as_ref().is_some_and(|m| m.changes_kept) && !append_only;
        let (changes_durable, _) = watch::channel(changes_kept);
        let tracker = if changes_kept {
            // Rows of the sources that fail are in no change yet.
            let rows = match compiled.rows_without_failed() {
                Ok(rows) => rows,
                Err(e) if e.is_data_exception() => Vec::new(),
                Err(e) => return Err(e),
            };
            Some(ChangeTracker::new(&compiled.schema, &rows)?)
        } else {
            None
        };
        let changes_wanted = self
            .store
            .subscription_defs()
            .iter()
            .any(|s| s.source == def.name);
        let backfill = match &compiled.source {
            ViewSource::View(_) => None,
            source => {
                let ends = source.ends();
                let total: u64 = ends
                    .iter()
                    .zip(&start.consumed)
                    .map(|(e, c)| e.saturating_sub(*c))
                    .sum();
                (total > 0).then(|| BackfillStart {
                    kind,
                    started: std::time::Instant::now(),
                    total_rows: total,
                })
            }
        };
        let applied_rows = Arc::new(AtomicU64::new(0));
        let view = Arc::new(View {
            schema: compiled.schema.clone(),
            source: compiled.source.clone(),
            explain: compiled.explain.clone(),
            append_only: compiled.append_only(),
            published: RwLock::new(published),
            progress,
            checkpointed,
            durable_rows,
            changes_wanted: AtomicBool::new(changes_wanted),
            changes_durable,
            changelog: RwLock::new(if changes_kept {
                restored_changes
            } else {
                Vec::new()
            }),
            checkpoint_asked: AtomicBool::new(false),
            erase_asked: AtomicBool::new(false),
            erased: watch::channel(Vec::new()).0,
            wake: Arc::new(Notify::new()),
            failure: Mutex::new(None),
            unavailable: Mutex::new(unavailable),
            compute_errors: AtomicU64::new(0),
            task: Mutex::new(None),
            applied_rows: applied_rows.clone(),
            backfill,
            def,
        });
        let weak = Arc::downgrade(&view);
        let on_commit = {
            let weak = weak.clone();
            Arc::new(move |m: &CheckpointManifest, erased: bool| {
                if let Some(v) = weak.upgrade() {
                    v.checkpointed.send_replace(m.source_offsets.clone());
                    if erased {
                        v.erased.send_replace(m.source_offsets.clone());
                    }
                    v.durable_rows
                        .send_replace(change_stream_rows(m, v.append_only));
                    v.changes_durable.send_replace(m.changes_kept);
                    v.wake.notify_one();
                }
            })
        };
        let checkpointer = ViewCheckpointer::new(
            self.checkpoints.clone(),
            view.def.id,
            &view.def.name,
            manifest.as_ref(),
            compiled.appended_batches(),
            on_commit,
            view.wake.clone(),
        );
        let task = ViewTask {
            view: weak,
            wake: view.wake.clone(),
            interval: self.checkpoints.interval,
            compiled,
            checkpointer,
            consumed: start.consumed,
            late_count: start.late_count,
            late_kept: start.late.len(),
            late_unsaved: Vec::new(),
            applied_rows,
            tracker,
            publish_cost: Duration::ZERO,
            until,
        };
        let span = info_span!("view", name = %view.def.name);
        let handle = match task.compiled.source.clone() {
            ViewSource::Table(t) => {
                tokio::spawn(follow_table(task, t, start.clock).instrument(span))
            }
            ViewSource::View(v) if !v.append_only => {
                tokio::spawn(follow_changing_view(task, v).instrument(span))
            }
            ViewSource::View(v) => tokio::spawn(follow_view(task, v).instrument(span)),
            ViewSource::Constant => tokio::spawn(follow_nothing(task).instrument(span)),
            ViewSource::Several(inputs) => tokio::spawn(
                follow_inputs(task, inputs, self.store.transactions().clone(), start.clock)
                    .instrument(span),
            ),
        };
        *view.task.lock() = Some(handle.abort_handle());
        Ok(view)
    }
}

/// Where a view's task starts: from a checkpoint or from nothing.
struct TaskStart {
    consumed: Vec<u64>,
    clock: ViewClockState,
    late_count: u64,
    late: Vec<LateRow>,
}

/// What a view's task owns: the compiled pipeline, the offsets it has
/// consumed, and its checkpointing.
struct ViewTask {
    view: std::sync::Weak<View>,
    wake: Arc<Notify>,
    interval: Duration,
    compiled: CompiledView,
    checkpointer: ViewCheckpointer,
    consumed: Vec<u64>,
    late_count: u64,
    late_kept: usize,
    /// Late rows kept since the last checkpoint capture.
    late_unsaved: Vec<LateRow>,
    /// Source rows applied, for backfill progress.
    applied_rows: Arc<AtomicU64>,
    /// The change log's base while the view keeps one.
    tracker: Option<ChangeTracker>,
    /// How long the last publish took, with the copies of shared columns
    /// the changes since the one before made (see [`ViewTask::wait`]).
    publish_cost: Duration,
    /// A view computed at a cut: the source offsets it stops at.
    until: Option<Vec<u64>>,
}

/// A view whose publish costs more than this reads its input only after a
/// pause of [`PUBLISH_PACE`] times that cost.
const PUBLISH_PAUSE_FROM: Duration = Duration::from_millis(2);
const PUBLISH_PACE: u32 = 4;
/// The longest pause, whatever a publish costs.
const PUBLISH_PAUSE_MAX: Duration = Duration::from_secs(1);

impl ViewTask {
    /// Sends up the rows the view's operators hold before any input (see
    /// [`CompiledView::start`]); false when that failed and the view
    /// stopped.
    async fn start_operators(&mut self, ctx: Arc<TaskContext>) -> bool {
        let started = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            self.compiled.start(ctx),
        ))
        .await
        .map_err(|_| SluiceError::Internal("the view's pipeline panicked".into()))
        .and_then(|r| r);
        match started {
            Ok(()) => true,
            Err(e) => {
                self.publish(Err(e), None, Vec::new());
                false
            }
        }
    }

    /// Publishes the view's rows as of `consumed`; false when the view is
    /// gone or stopped.
    fn publish(
        &mut self,
        result: Result<(), SluiceError>,
        watermark_us: Option<i64>,
        late: Vec<LateRow>,
    ) -> bool {
        let Some(view) = self.view.upgrade() else {
            return false;
        };
        let began = std::time::Instant::now();
        // The state took every delta when `result` is Ok; then an error of
        // the data in computing the rows from it (a division by a count
        // that is zero over what was read so far) leaves the view reading
        // on, and its reads failing until the rows compute again.
        let applied = result.is_ok();
        let snapshot = result.and_then(|_| self.compiled.snapshot());
        self.late_count += late.len() as u64;
        let room = LATE_ROWS_KEPT.saturating_sub(self.late_kept);
        let kept: Vec<LateRow> = late.iter().take(room).copied().collect();
        self.late_kept += kept.len();
        self.late_unsaved.extend(kept);
        let published = match snapshot {
            Err(e) if applied && e.is_data_exception() => {
                view.publish_unavailable(&e, &self.consumed, &self.compiled, watermark_us, late)
            }
            snapshot => view.publish(snapshot, &self.consumed, &self.compiled, watermark_us, late),
        };
        // A change after the last publish copied what it shared with
        // readers: that is part of what publishing costs.
        self.publish_cost = began.elapsed() + self.compiled.take_copy_time();
        published
    }

    /// Starts a checkpoint epoch when one is due (see
    /// [`ViewCheckpointer::due`]).
    fn checkpoint_if_due(&mut self, clock: ViewClockState) {
        if self.until.is_some() {
            return;
        }
        let Some(view) = self.view.upgrade() else {
            return;
        };
        let asked = view.checkpoint_asked.load(Ordering::Acquire);
        let erase = view.erase_asked.load(Ordering::Acquire);
        let wanted = !view.append_only && view.changes_wanted.load(Ordering::Acquire);
        let toggle = wanted != self.tracker.is_some();
        if !self
            .checkpointer
            .due(&self.consumed, self.late_count, asked, toggle || erase)
        {
            return;
        }
        let capture_began = std::time::Instant::now();
        let changes = match self.capture_changes(&view, wanted) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "could not capture the view's changes for a checkpoint");
                return;
            }
        };
        let appended = self
            .compiled
            .appended_since(self.checkpointer.appended_done);
        let groups = self.compiled.state_batches();
        let operators = self.compiled.operator_state(erase);
        let (appended, groups, operators) = match (appended, groups, operators) {
            (Ok(a), Ok(g), Ok(o)) => (a, g, o),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                warn!(error = %e, "could not capture the view's state for a checkpoint");
                return;
            }
        };
        let capture = Capture {
            source_offsets: self.consumed.clone(),
            clock,
            late_count: self.late_count,
            appended,
            groups,
            operators_whole: operators.as_ref().is_some_and(|(_, whole)| *whole),
            operators: operators.map(|(o, _)| o),
            late: late_rows_batch(&std::mem::take(&mut self.late_unsaved)),
            changes_kept: wanted,
            changes,
            failed_rows: self.compiled.failed_rows(),
            erases: erase,
        };
        view.checkpoint_asked.store(false, Ordering::Release);
        if erase {
            view.erase_asked.store(false, Ordering::Release);
        }
        self.checkpointer.start(
            capture,
            self.compiled.appended_batches(),
            capture_began.elapsed(),
        );
    }

    /// The change log's new rows since the last capture (starting the log
    /// with every row as an insert), or stops the log when no longer
    /// wanted.
    fn capture_changes(
        &mut self,
        view: &View,
        wanted: bool,
    ) -> Result<Option<RecordBatch>, SluiceError> {
        if !wanted {
            if self.tracker.take().is_some() {
                view.changelog.write().clear();
            }
            return Ok(None);
        }
        let rows = match self.compiled.snapshot() {
            Ok(rows) => rows,
            // Rows that do not compute now have no changes yet: the next
            // capture after they do takes them all.
            Err(e) if e.is_data_exception() => return Ok(None),
            Err(e) => return Err(e),
        };
        let tracker = match &mut self.tracker {
            Some(t) => t,
            None => self.tracker.insert(ChangeTracker::new(&view.schema, &[])?),
        };
        let changes = tracker.diff(&rows)?;
        if let Some(c) = &changes {
            view.changelog.write().push(c.clone());
        }
        Ok(changes)
    }

    /// `ends` (the sources' committed ends), no further than the view reads.
    fn bounded(&self, mut ends: Vec<u64>) -> Vec<u64> {
        if let Some(until) = &self.until {
            for (e, u) in ends.iter_mut().zip(until) {
                *e = (*e).min(*u);
            }
        }
        ends
    }

    /// Waits for the source to move, a FLUSH, or the next checkpoint time.
    /// False when the source is gone.
    ///
    /// A view whose publish is costly (one over millions of groups reads
    /// every group to publish) first pauses for a few times that cost, so
    /// that many commits share one publish instead of each paying for one,
    /// which would take the CPU ingest needs; its rows then trail the log
    /// by at most the pause more.
    async fn wait<T>(&self, changes: &mut watch::Receiver<T>) -> bool {
        if self.publish_cost > PUBLISH_PAUSE_FROM {
            let pause = (self.publish_cost * PUBLISH_PACE).min(PUBLISH_PAUSE_MAX);
            tokio::time::sleep(pause).await;
        }
        tokio::select! {
            r = changes.changed() => r.is_ok(),
            _ = self.wake.notified() => true,
            _ = tokio::time::sleep(self.interval) => true,
        }
    }
}

/// Rows of the view's change stream a manifest holds: appended rows of an
/// append-only view, else the change log.
fn change_stream_rows(m: &CheckpointManifest, append_only: bool) -> u64 {
    let kind = if append_only {
        FileKind::Rows
    } else {
        FileKind::Changes
    };
    m.files
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| f.rows)
        .sum()
}

/// Late rows as a batch for a checkpoint.
fn late_rows_batch(rows: &[LateRow]) -> Option<RecordBatch> {
    if rows.is_empty() {
        return None;
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "partition",
            Arc::new(rows.iter().map(|r| r.partition).collect::<UInt32Array>()),
        ),
        (
            "offset",
            Arc::new(rows.iter().map(|r| r.offset).collect::<UInt64Array>()),
        ),
        (
            "event_time_us",
            Arc::new(rows.iter().map(|r| r.event_time_us).collect::<Int64Array>()),
        ),
        (
            "watermark_us",
            Arc::new(rows.iter().map(|r| r.watermark_us).collect::<Int64Array>()),
        ),
        (
            "input",
            Arc::new(rows.iter().map(|r| r.input).collect::<UInt32Array>()),
        ),
    ];
    RecordBatch::try_from_iter(columns).ok()
}

/// Late rows back from a checkpoint's batches.
fn late_rows_from(batches: &[RecordBatch]) -> Vec<LateRow> {
    let mut out = Vec::new();
    for b in batches {
        let col = |i: usize| b.columns().get(i).cloned();
        let (Some(p), Some(o), Some(e), Some(w)) = (col(0), col(1), col(2), col(3)) else {
            continue;
        };
        let (Some(p), Some(o), Some(e), Some(w)) = (
            p.as_any().downcast_ref::<UInt32Array>(),
            o.as_any().downcast_ref::<UInt64Array>(),
            e.as_any().downcast_ref::<Int64Array>(),
            w.as_any().downcast_ref::<Int64Array>(),
        ) else {
            continue;
        };
        // Written before views over several inputs had late rows: input 0.
        let input = col(4);
        let input = input
            .as_ref()
            .and_then(|c| c.as_any().downcast_ref::<UInt32Array>());
        for i in 0..b.num_rows() {
            out.push(LateRow {
                input: input.map_or(0, |c| c.value(i)),
                partition: p.value(i),
                offset: o.value(i),
                event_time_us: e.value(i),
                watermark_us: w.value(i),
            });
        }
    }
    out
}

/// The view's clock: its watermark, computed from the rows it has applied,
/// one source commit at a time, with idleness measured in commit (ingest)
/// time. Replaying the same log therefore makes the same decisions.
struct ViewClock {
    tracker: Option<WatermarkTracker>,
    max_event: Vec<Option<i64>>,
    last_commit: Vec<Option<i64>>,
    first_commit: Option<i64>,
    watermark: Option<i64>,
}

impl ViewClock {
    fn new(table: &TableLog) -> ViewClock {
        let n = table.partitions().len();
        ViewClock {
            tracker: table.def().options.watermark.as_ref().map(|w| {
                WatermarkTracker::new(
                    w.delay_us,
                    Duration::from_millis(table.def().options.watermark_idle_timeout_ms),
                )
            }),
            max_event: vec![None; n],
            last_commit: vec![None; n],
            first_commit: None,
            watermark: None,
        }
    }

    /// What a checkpoint records of the clock.
    fn state(&self) -> ViewClockState {
        ViewClockState {
            max_event_us: self.max_event.clone(),
            last_commit_us: self.last_commit.clone(),
            first_commit_us: self.first_commit,
            watermark_us: self.watermark,
            inputs: Vec::new(),
        }
    }

    /// Continues from a checkpoint's clock.
    fn resume(&mut self, s: &ViewClockState) {
        if s.max_event_us.len() == self.max_event.len() {
            self.max_event = s.max_event_us.clone();
        }
        if s.last_commit_us.len() == self.last_commit.len() {
            self.last_commit = s.last_commit_us.clone();
        }
        self.first_commit = s.first_commit_us;
        self.watermark = s.watermark_us;
        if let (Some(t), Some(w)) = (&self.tracker, s.watermark_us) {
            t.resume_from(w);
        }
    }

    /// Takes in one commit's frames and moves the watermark.
    fn advance(&mut self, commit_us: i64, frames: &[(i64, usize, FrameMeta)]) {
        let first = *self.first_commit.get_or_insert(commit_us);
        for (_, p, f) in frames {
            if f.header.max_event_us != i64::MIN {
                self.max_event[*p] = self.max_event[*p].max(Some(f.header.max_event_us));
            }
            self.last_commit[*p] = Some(commit_us);
        }
        let Some(tracker) = &self.tracker else { return };
        let progress: Vec<EventTimeProgress> = self
            .max_event
            .iter()
            .zip(&self.last_commit)
            .map(|(max, last)| EventTimeProgress {
                max_event_us: *max,
                since_last_append: Duration::from_micros(
                    (commit_us - last.unwrap_or(first)).max(0) as u64,
                ),
            })
            .collect();
        self.watermark = tracker.compute(&progress).watermark_us;
    }
}

/// Splits off the rows whose window closed before they arrived.
fn split_late(
    batch: RecordBatch,
    closing: &WindowClosing,
    watermark_us: i64,
    partition: usize,
    base_offset: u64,
    late: &mut Vec<LateRow>,
) -> Result<RecordBatch, SluiceError> {
    let Some(time_index) = closing.time_index else {
        return Ok(batch);
    };
    let column = arrow::compute::cast(
        batch.column(time_index),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    let Some(times) = column.as_any().downcast_ref::<TimestampMicrosecondArray>() else {
        return Ok(batch);
    };
    let threshold = watermark_us.saturating_sub(closing.lateness_us);
    let keep: BooleanArray = (0..times.len())
        .map(|i| {
            let is_late = times.is_valid(i) && closing.window_end(times.value(i)) <= threshold;
            if is_late {
                late.push(LateRow {
                    input: 0,
                    partition: partition as u32,
                    offset: base_offset + i as u64,
                    event_time_us: times.value(i),
                    watermark_us,
                });
            }
            Some(!is_late)
        })
        .collect();
    Ok(filter_record_batch(&batch, &keep)?)
}

/// Takes rows back through the pipeline, guarded as [`apply_guarded`].
async fn retract_guarded(
    compiled: &mut CompiledView,
    rows: Vec<RecordBatch>,
    ctx: Arc<TaskContext>,
) -> Result<(), SluiceError> {
    futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(compiled.retract(rows, ctx)))
        .await
        .map_err(|_| SluiceError::Internal("the view's pipeline panicked".into()))?
}

/// Runs a delta through the pipeline; a panic there stops this view, not
/// the server.
async fn apply_guarded(
    compiled: &mut CompiledView,
    delta: Vec<RecordBatch>,
    ctx: Arc<TaskContext>,
    watermark: Option<i64>,
) -> Result<(), SluiceError> {
    futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        compiled.apply(delta, ctx, watermark),
    ))
    .await
    .map_err(|_| SluiceError::Internal("the view's pipeline panicked".into()))?
}

impl View {
    /// Publishes the view's new rows with the offsets they cover, or records
    /// why the view stopped (then returns false).
    fn publish(
        &self,
        snapshot: Result<Vec<RecordBatch>, SluiceError>,
        consumed: &[u64],
        compiled: &CompiledView,
        watermark_us: Option<i64>,
        late: Vec<LateRow>,
    ) -> bool {
        let batches = match snapshot {
            Ok(b) => b,
            Err(e) => {
                error!(error = %e, "view stopped");
                *self.failure.lock() = Some(e.message());
                return false;
            }
        };
        *self.unavailable.lock() = None;
        {
            let mut p = self.published.write();
            p.batches = batches;
            p.indexes.get_mut().clear();
            p.seq += 1;
            advance(&mut p, consumed, compiled, watermark_us, late);
        }
        self.progress.send_replace(consumed.to_vec());
        true
    }

    /// Records that the rows cannot be computed now (see `unavailable`):
    /// the offsets read move on, the rows published before stay for what
    /// reads them through the change log, and reads fail.
    fn publish_unavailable(
        &self,
        e: &SluiceError,
        consumed: &[u64],
        compiled: &CompiledView,
        watermark_us: Option<i64>,
        late: Vec<LateRow>,
    ) -> bool {
        warn!(error = %e, "the view's rows cannot be computed now; reads fail until they can");
        *self.unavailable.lock() = Some((e.sqlstate(), e.message()));
        self.compute_errors.fetch_add(1, Ordering::Relaxed);
        advance(
            &mut self.published.write(),
            consumed,
            compiled,
            watermark_us,
            late,
        );
        self.progress.send_replace(consumed.to_vec());
        true
    }
}

/// What a publish moves on whether or not the rows computed: the offsets
/// read, the state's size, the watermark and the late rows.
fn advance(
    p: &mut Published,
    consumed: &[u64],
    compiled: &CompiledView,
    watermark_us: Option<i64>,
    late: Vec<LateRow>,
) {
    p.consumed = consumed.to_vec();
    p.state_rows = compiled.state_rows();
    p.operators = compiled.operator_stats();
    p.watermark_us = watermark_us;
    p.late_count += late.len() as u64;
    let room = LATE_ROWS_KEPT.saturating_sub(p.late.len());
    p.late.extend(late.into_iter().take(room));
}

/// The task of a view over a view whose rows change in place: each publish
/// of the source is compared with the one before (deletes and inserts),
/// and the view applies the inserts and takes back the deletes.
async fn follow_changing_view(mut task: ViewTask, upstream: Arc<View>) {
    let mut changes = upstream.progress.subscribe();
    let ctx = Arc::new(TaskContext::default());
    if !task.start_operators(ctx.clone()).await {
        return;
    }
    let mut tracker = match ChangeTracker::new(&upstream.schema, &[]) {
        Ok(t) => t,
        Err(e) => {
            task.publish(Err(e), None, Vec::new());
            return;
        }
    };
    let mut first = true;
    loop {
        changes.borrow_and_update();
        let (batches, seq) = upstream.snapshot_with_seq();
        if seq > task.consumed[0] || first {
            let compiled = &mut task.compiled;
            let schema = upstream.schema.clone();
            let result: Result<(), SluiceError> = async {
                if let Some(diff) = tracker.diff(&batches)? {
                    let (inserts, deletes) = split_changes(&diff, &schema)?;
                    apply_guarded(compiled, vec![inserts], ctx.clone(), None).await?;
                    retract_guarded(compiled, vec![deletes], ctx.clone()).await?;
                }
                Ok(())
            }
            .await;
            task.consumed = vec![seq];
            if !task.publish(result, None, Vec::new()) {
                return;
            }
            first = false;
        }
        task.checkpoint_if_due(ViewClockState::default());
        if !task.wait(&mut changes).await {
            return;
        }
    }
}

/// Rows `from..to` of an append-only view's `batches` (those past `to`
/// were published after the reader fixed its end, and are read next time).
fn rows_between(batches: Vec<RecordBatch>, from: u64, to: u64) -> Vec<RecordBatch> {
    let (mut skip, mut take) = (from as usize, to.saturating_sub(from) as usize);
    let mut rows = Vec::new();
    for b in batches {
        if take == 0 {
            break;
        }
        if skip >= b.num_rows() {
            skip -= b.num_rows();
            continue;
        }
        let len = (b.num_rows() - skip).min(take);
        rows.push(b.slice(skip, len));
        take -= len;
        skip = 0;
    }
    rows
}

/// A change batch (the source's columns and `_op`) as its inserted rows
/// and its deleted rows.
fn split_changes(
    diff: &RecordBatch,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<(RecordBatch, RecordBatch), SluiceError> {
    let n = schema.fields().len();
    let ops = diff
        .column(n)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| SluiceError::Internal("change without _op".into()))?;
    let is_insert: BooleanArray = (0..ops.len())
        .map(|i| Some(ops.value(i) == "insert"))
        .collect();
    let is_delete = arrow::compute::not(&is_insert)?;
    let rows = RecordBatch::try_new(schema.clone(), diff.columns()[..n].to_vec())?;
    Ok((
        filter_record_batch(&rows, &is_insert)?,
        filter_record_batch(&rows, &is_delete)?,
    ))
}

/// The task of a view over another view: apply the rows the source view
/// appends, then publish.
async fn follow_view(mut task: ViewTask, upstream: Arc<View>) {
    let mut changes = upstream.progress.subscribe();
    let ctx = Arc::new(TaskContext::default());
    if !task.start_operators(ctx.clone()).await {
        return;
    }
    let mut first = true;
    loop {
        changes.borrow_and_update();
        let batches = upstream.snapshot();
        let total: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
        let consumed = task.consumed[0];
        if total > consumed || first {
            let delta = rows_between(batches, consumed, total);
            let result = apply_guarded(&mut task.compiled, delta, ctx.clone(), None).await;
            task.consumed = vec![total.max(consumed)];
            if !task.publish(result, None, Vec::new()) {
                return;
            }
            first = false;
        }
        task.checkpoint_if_due(ViewClockState::default());
        if !task.wait(&mut changes).await {
            return;
        }
    }
}

/// The task of a view over no table: computes its rows once (unless a
/// checkpoint kept them: its one offset is then 1), publishes them, then
/// only answers checkpoint requests.
async fn follow_nothing(mut task: ViewTask) {
    let ctx = Arc::new(TaskContext::default());
    if !task.start_operators(ctx.clone()).await {
        return;
    }
    if task.consumed != [1] {
        let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            task.compiled.compute_constant(ctx),
        ))
        .await
        .map_err(|_| SluiceError::Internal("the view's pipeline panicked".into()))
        .and_then(|r| r);
        task.consumed = vec![1];
        if !task.publish(result, None, Vec::new()) {
            return;
        }
        // Kept at once: computed again, `now()` would differ.
        if let Some(view) = task.view.upgrade() {
            view.checkpoint_asked.store(true, Ordering::Release);
        }
    }
    // Nothing ever changes: a channel whose sender stays here.
    let (_never, mut changes) = watch::channel(());
    loop {
        task.checkpoint_if_due(ViewClockState::default());
        if !task.wait(&mut changes).await {
            return;
        }
    }
}

/// The view's task: apply each commit of the source table, then publish.
async fn follow_table(mut task: ViewTask, table: Arc<TableLog>, clock_state: ViewClockState) {
    let mut commits = table.commits();
    let provider_schema =
        datafusion::datasource::TableProvider::schema(&LogTableProvider::new(table.clone()));
    let projection: Vec<usize> = (0..provider_schema.fields().len()).collect();
    let data_columns = table.def().columns.len();
    let ctx = Arc::new(TaskContext::default());
    if !task.start_operators(ctx.clone()).await {
        return;
    }
    let mut clock = ViewClock::new(&table);
    clock.resume(&clock_state);
    let closing = task.compiled.closing;
    // A self-join with a time band (an interval join of the table with
    // itself, or with an aggregate of its windows): rows behind the
    // watermark there are late, and the join moves with the watermark.
    let bands = task.compiled.band_columns(0, &provider_schema);
    let lateness = task.compiled.allowed_lateness_us();
    if !bands.is_empty() {
        if let Err(e) = task
            .compiled
            .advance_source_watermarks(&[clock.watermark], ctx.clone())
            .await
        {
            task.publish(Err(e), None, Vec::new());
            return;
        }
    }
    // A keyed table: the versions the view has applied, to take back.
    let mut versions = None;
    if table.def().is_keyed() {
        match KeyedVersions::start(&table, &provider_schema, &projection, &task.consumed).await {
            Ok(v) => versions = Some(v),
            Err(e) => {
                task.publish(Err(e), None, Vec::new());
                return;
            }
        }
    }
    let mut first = true;
    loop {
        let ends = task.bounded(commits.borrow_and_update().clone());
        let behind = ends.iter().zip(&task.consumed).any(|(e, c)| e > c);
        if behind || first {
            let started = std::time::Instant::now();
            let mut late = Vec::new();
            let consumed = &task.consumed;
            let compiled = &mut task.compiled;
            let applied_rows = task.applied_rows.clone();
            let versions = &mut versions;
            let bands = &bands;
            let result: Result<(), SluiceError> = async {
                // Frames in commit order: a group commit stamps all of its
                // frames with the same ingest time.
                let mut frames: Vec<(i64, usize, FrameMeta)> = Vec::new();
                for (k, part) in table.partitions().iter().enumerate() {
                    let start = part.start_offset();
                    if consumed[k] < start && ends[k] > consumed[k] {
                        part.note_read_below_start();
                        warn!(partition = k, from = consumed[k], start,
                              "offsets were deleted by retention before the view read them; continuing at the start");
                    }
                    for meta in part.frames_in_range(consumed[k], ends[k]) {
                        frames.push((meta.header.ingested_at_us, k, meta));
                    }
                }
                frames.sort_by_key(|(t, k, m)| (*t, *k, m.header.base_offset));
                for commit in frames.chunk_by(|a, b| a.0 == b.0) {
                    let watermark = clock.watermark;
                    for chunk in commit.chunks(FRAMES_PER_DELTA) {
                        let mut delta = Vec::with_capacity(chunk.len());
                        let mut chunk_rows = 0u64;
                        let mut gone = Vec::new();
                        for (_, k, meta) in chunk {
                            let part = &table.partitions()[*k];
                            let raw = part.read_frame(meta).await?;
                            let full = project_frame(
                                &raw,
                                meta,
                                *k as i32,
                                &projection,
                                data_columns,
                                &provider_schema,
                            )?;
                            // Rows of a frame the checkpoint already covers
                            // are skipped.
                            let skip =
                                consumed[*k].saturating_sub(meta.header.base_offset) as usize;
                            if let Some(v) = versions.as_mut() {
                                chunk_rows += full.num_rows().saturating_sub(skip) as u64;
                                delta.push(v.split(&raw, &full, skip, &mut gone).await?);
                                continue;
                            }
                            // Erased rows are left out: each run of kept
                            // rows goes on with its own first offset.
                            let rest = full.num_rows().saturating_sub(skip);
                            let first = meta.header.base_offset + skip as u64;
                            for (at, len) in part.kept_runs(first, rest) {
                            let rows = full.slice(skip.min(full.num_rows()) + at, len);
                            let base = first + at as u64;
                            chunk_rows += rows.num_rows() as u64;
                            delta.push(match (&closing, watermark) {
                                (Some(c), Some(w)) if c.time_index.is_some() => {
                                    split_late(rows, c, w, *k, base, &mut late)?
                                }
                                (_, Some(w)) if !bands.is_empty() => {
                                    let at = BandPosition {
                                        input: 0,
                                        partition: *k,
                                        base_offset: base,
                                    };
                                    split_behind(rows, bands, w, lateness, at, &mut late)?
                                }
                                _ => rows,
                            });
                            }
                        }
                        apply_guarded(compiled, delta, ctx.clone(), watermark).await?;
                        // Earlier versions go after the new rows, which may
                        // hold some of them (a key written twice).
                        if let (Some(v), false) = (versions.as_ref(), gone.is_empty()) {
                            let old = v.rows(&provider_schema, &gone)?;
                            retract_guarded(compiled, vec![old], ctx.clone()).await?;
                        }
                        applied_rows.fetch_add(chunk_rows, Ordering::Relaxed);
                    }
                    let before = clock.watermark;
                    clock.advance(commit[0].0, commit);
                    if let Some(w) = clock.watermark {
                        compiled.close_windows(w)?;
                    }
                    if !bands.is_empty() && clock.watermark != before {
                        compiled
                            .advance_source_watermarks(&[clock.watermark], ctx.clone())
                            .await?;
                    }
                }
                Ok(())
            }
            .await;
            task.consumed = ends;
            if !task.publish(result, clock.watermark, late) {
                return;
            }
            if first {
                info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "view caught up with its source"
                );
            }
            first = false;
        }
        task.checkpoint_if_due(clock.state());
        if !task.wait(&mut commits).await {
            return;
        }
    }
}

/// Applies a delta of one source through the joins and the pipeline,
/// guarded as [`apply_guarded`].
async fn apply_input_guarded(
    compiled: &mut CompiledView,
    source: usize,
    insert: Vec<RecordBatch>,
    retract: Vec<RecordBatch>,
    ctx: Arc<TaskContext>,
) -> Result<(), SluiceError> {
    futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        compiled.apply_input(source, insert, retract, ctx, None),
    ))
    .await
    .map_err(|_| SluiceError::Internal("the view's pipeline panicked".into()))?
}

/// How a view over several inputs reads one of them.
enum InputReader {
    /// A table's new frames; a keyed table's versions to take back.
    Table {
        table: Arc<TableLog>,
        schema: SchemaRef,
        versions: Option<Box<KeyedVersions>>,
    },
    /// The new rows of a view whose rows only grow.
    AppendView(Arc<View>),
    /// A view whose rows change in place: each publish compared with the
    /// one before.
    ChangingView(Arc<View>, Box<ChangeTracker>),
}

impl InputReader {
    /// Where this input can be read to now (its offsets in the view's).
    fn ends(&self) -> Vec<u64> {
        match self {
            InputReader::Table { table, .. } => table.commits().borrow().clone(),
            InputReader::AppendView(v) => vec![v.published_rows()],
            InputReader::ChangingView(v, _) => vec![v.published_seq()],
        }
    }

    fn watch(&self) -> watch::Receiver<Vec<u64>> {
        match self {
            InputReader::Table { table, .. } => table.commits(),
            InputReader::AppendView(v) | InputReader::ChangingView(v, _) => v.progress.subscribe(),
        }
    }
}

/// The task of a view over several inputs (a join or a union): apply each
/// input's news in turn, then publish. The tables' ends are read together
/// while no multi-table transaction publishes, so the view sees such a
/// transaction whole or not at all.
async fn follow_inputs(
    mut task: ViewTask,
    inputs: Vec<ViewSource>,
    transactions: Arc<crate::log::TransactionCoordinator>,
    clock_state: ViewClockState,
) {
    let ctx = Arc::new(TaskContext::default());
    if !task.start_operators(ctx.clone()).await {
        return;
    }
    let widths: Vec<usize> = inputs
        .iter()
        .map(|i| match i {
            ViewSource::Table(t) => t.partitions().len(),
            _ => 1,
        })
        .collect();
    let starts: Vec<usize> = widths
        .iter()
        .scan(0, |at, n| {
            let s = *at;
            *at += n;
            Some(s)
        })
        .collect();
    let mut readers = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let reader = match input {
            ViewSource::Table(table) => {
                let schema = datafusion::datasource::TableProvider::schema(&LogTableProvider::new(
                    table.clone(),
                ));
                let versions = match table.def().is_keyed() {
                    false => None,
                    true => {
                        let projection: Vec<usize> = (0..schema.fields().len()).collect();
                        let consumed = &task.consumed[starts[i]..starts[i] + widths[i]];
                        match KeyedVersions::start(table, &schema, &projection, consumed).await {
                            Ok(v) => Some(Box::new(v)),
                            Err(e) => {
                                task.publish(Err(e), None, Vec::new());
                                return;
                            }
                        }
                    }
                };
                InputReader::Table {
                    table: table.clone(),
                    schema,
                    versions,
                }
            }
            ViewSource::View(v) if v.append_only => InputReader::AppendView(v.clone()),
            ViewSource::View(v) => match ChangeTracker::new(&v.schema, &[]) {
                Ok(t) => InputReader::ChangingView(v.clone(), Box::new(t)),
                Err(e) => {
                    task.publish(Err(e), None, Vec::new());
                    return;
                }
            },
            ViewSource::Several(_) | ViewSource::Constant => {
                task.publish(
                    Err(SluiceError::Internal("nested view inputs".into())),
                    None,
                    Vec::new(),
                );
                return;
            }
        };
        readers.push(reader);
    }
    // Each table's clock: its watermark, moved commit by commit as for a
    // view over one table.
    let mut clocks: Vec<Option<ViewClock>> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match input {
            ViewSource::Table(t) => {
                let mut clock = ViewClock::new(t);
                if let Some(s) = clock_state.inputs.get(i) {
                    clock.resume(s);
                }
                Some(clock)
            }
            _ => None,
        })
        .collect();
    let bands: Vec<Vec<(usize, Option<i64>)>> = readers
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            InputReader::Table { schema, .. } => task.compiled.band_columns(i, schema),
            _ => Vec::new(),
        })
        .collect();
    // Restored interval joins learn where the watermarks were.
    let marks = input_watermarks(&clocks);
    if let Err(e) = task
        .compiled
        .advance_source_watermarks(&marks, ctx.clone())
        .await
    {
        task.publish(Err(e), None, Vec::new());
        return;
    }
    let mut watches: Vec<_> = readers.iter().map(|r| r.watch()).collect();
    let mut first = true;
    loop {
        let ends: Vec<u64> = {
            let _whole = transactions.snapshot_guard().await;
            for w in watches.iter_mut() {
                w.borrow_and_update();
            }
            task.bounded(readers.iter().flat_map(|r| r.ends()).collect())
        };
        let behind = ends.iter().zip(&task.consumed).any(|(e, c)| e > c);
        if behind || first {
            let started = std::time::Instant::now();
            let consumed = task.consumed.clone();
            let compiled = &mut task.compiled;
            let applied_rows = task.applied_rows.clone();
            let readers = &mut readers;
            let clocks = &mut clocks;
            let bands = &bands;
            let mut late = Vec::new();
            let late_rows = &mut late;
            let result: Result<(), SluiceError> = async {
                // The tables' news first, interleaved in commit order (so
                // that each table's watermark moves with the others').
                let mut tables = Vec::new();
                for (i, reader) in readers.iter_mut().enumerate() {
                    if let InputReader::Table {
                        table,
                        schema,
                        versions,
                    } = reader
                    {
                        let at = starts[i];
                        let news = TableNews {
                            input: i,
                            table,
                            schema,
                            range: (&consumed[at..at + widths[i]], &ends[at..at + widths[i]]),
                            band_columns: &bands[i],
                        };
                        tables.push((news, versions));
                    }
                }
                apply_tables_news(
                    compiled,
                    tables,
                    clocks,
                    late_rows,
                    &applied_rows,
                    ctx.clone(),
                )
                .await?;
                for (i, reader) in readers.iter_mut().enumerate() {
                    let at = starts[i];
                    match reader {
                        InputReader::Table { .. } => {}
                        InputReader::AppendView(v) => {
                            // Up to the end read with the tables' ends: a
                            // row published since is past `ends`, and the
                            // view's position says it was not read.
                            let delta = rows_between(v.snapshot(), consumed[at], ends[at]);
                            apply_input_guarded(compiled, i, delta, Vec::new(), ctx.clone())
                                .await?;
                        }
                        InputReader::ChangingView(v, tracker) => {
                            if ends[at] <= consumed[at] && !first {
                                continue;
                            }
                            let (batches, _) = v.snapshot_with_seq();
                            if let Some(diff) = tracker.diff(&batches)? {
                                let (inserts, deletes) = split_changes(&diff, &v.schema)?;
                                apply_input_guarded(
                                    compiled,
                                    i,
                                    vec![inserts],
                                    vec![deletes],
                                    ctx.clone(),
                                )
                                .await?;
                            }
                        }
                    }
                }
                Ok(())
            }
            .await;
            // An append-only view input may have restored fewer rows than
            // the checkpoint had read: the position stays until it is back.
            task.consumed = ends
                .iter()
                .zip(&consumed)
                .map(|(e, c)| (*e).max(*c))
                .collect();
            let watermark = view_watermark(clocks);
            if !task.publish(result, watermark, late) {
                return;
            }
            if first {
                info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "view caught up with its sources"
                );
            }
            first = false;
        }
        task.checkpoint_if_due(ViewClockState {
            inputs: clocks
                .iter()
                .map(|c| c.as_ref().map(|c| c.state()).unwrap_or_default())
                .collect(),
            ..ViewClockState::default()
        });
        let changed =
            futures::future::select_all(watches.iter_mut().map(|c| Box::pin(c.changed())));
        tokio::select! {
            (r, _, _) = changed => if r.is_err() { return },
            _ = task.wake.notified() => {},
            _ = tokio::time::sleep(task.interval) => {},
        }
    }
}

/// Each input's watermark (`None` for a view input, or a table without
/// a watermark or rows yet).
fn input_watermarks(clocks: &[Option<ViewClock>]) -> Vec<Option<i64>> {
    clocks
        .iter()
        .map(|c| c.as_ref().and_then(|c| c.watermark))
        .collect()
}

/// The watermark a view over several inputs shows: the least of its
/// tables' that have one.
fn view_watermark(clocks: &[Option<ViewClock>]) -> Option<i64> {
    let marked: Vec<&ViewClock> = clocks
        .iter()
        .flatten()
        .filter(|c| c.tracker.is_some())
        .collect();
    if marked.is_empty() {
        return None;
    }
    marked
        .iter()
        .map(|c| c.watermark)
        .collect::<Option<Vec<i64>>>()
        .and_then(|w| w.into_iter().min())
}

/// What a view over several inputs reads of one table: its frames from
/// `range.0` to `range.1` (per partition).
struct TableNews<'a> {
    input: usize,
    table: &'a Arc<TableLog>,
    schema: &'a SchemaRef,
    range: (&'a [u64], &'a [u64]),
    /// Columns an interval or window join bounds by the table's
    /// watermark (with a window join's window size): rows behind it there
    /// are late.
    band_columns: &'a [(usize, Option<i64>)],
}

/// Applies the tables' news to the view commit by commit, in commit
/// order across the tables, each as its input, counting the rows read in
/// `applied`. After each commit its table's clock moves and the interval
/// joins with it; rows an interval join would see behind the watermark
/// are listed in `late` instead.
async fn apply_tables_news(
    compiled: &mut CompiledView,
    mut tables: Vec<(TableNews<'_>, &mut Option<Box<KeyedVersions>>)>,
    clocks: &mut [Option<ViewClock>],
    late: &mut Vec<LateRow>,
    applied: &AtomicU64,
    ctx: Arc<TaskContext>,
) -> Result<(), SluiceError> {
    // (ingest time, which table, partition, frame)
    let mut frames: Vec<(i64, usize, usize, FrameMeta)> = Vec::new();
    for (t, (news, _)) in tables.iter().enumerate() {
        let (consumed, ends) = news.range;
        for (k, part) in news.table.partitions().iter().enumerate() {
            for meta in part.frames_in_range(consumed[k], ends[k]) {
                frames.push((meta.header.ingested_at_us, t, k, meta));
            }
        }
    }
    frames.sort_by_key(|(at, t, k, m)| (*at, *t, *k, m.header.base_offset));
    let lateness = compiled.allowed_lateness_us();
    // A group commit stamps all of its frames with the same ingest time.
    for commit in frames.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1) {
        let (news, versions) = &mut tables[commit[0].1];
        let input = news.input;
        let (consumed, schema, table) = (news.range.0, news.schema, news.table);
        let data_columns = table.def().columns.len();
        let projection: Vec<usize> = (0..schema.fields().len()).collect();
        let watermark = clocks
            .get(input)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.watermark);
        for chunk in commit.chunks(FRAMES_PER_DELTA) {
            let mut insert = Vec::with_capacity(chunk.len());
            let mut gone = Vec::new();
            let mut read = 0u64;
            for (_, _, k, meta) in chunk {
                let part = &table.partitions()[*k];
                let raw = part.read_frame(meta).await?;
                let full = project_frame(&raw, meta, *k as i32, &projection, data_columns, schema)?;
                // Rows the checkpoint already covers are skipped.
                let skip = consumed[*k].saturating_sub(meta.header.base_offset) as usize;
                let rest = full.num_rows().saturating_sub(skip);
                let first = meta.header.base_offset + skip as u64;
                let runs = match versions.as_mut() {
                    Some(v) => {
                        read += rest as u64;
                        insert.push(v.split(&raw, &full, skip, &mut gone).await?);
                        continue;
                    }
                    // Erased rows are left out: each run of kept rows goes
                    // on with its own first offset.
                    None => part.kept_runs(first, rest),
                };
                for (at, len) in runs {
                    let rows = full.slice(skip.min(full.num_rows()) + at, len);
                    read += len as u64;
                    insert.push(match (watermark, news.band_columns.is_empty()) {
                        (Some(w), false) => {
                            let at = BandPosition {
                                input,
                                partition: *k,
                                base_offset: first + at as u64,
                            };
                            split_behind(rows, news.band_columns, w, lateness, at, late)?
                        }
                        _ => rows,
                    });
                }
            }
            let retract = match (versions.as_ref(), gone.is_empty()) {
                (Some(v), false) => vec![v.rows(schema, &gone)?],
                _ => Vec::new(),
            };
            apply_input_guarded(compiled, input, insert, retract, ctx.clone()).await?;
            applied.fetch_add(read, Ordering::Relaxed);
        }
        if let Some(Some(clock)) = clocks.get_mut(input) {
            let before = clock.watermark;
            let frames: Vec<(i64, usize, FrameMeta)> = commit
                .iter()
                .map(|(at, _, k, m)| (*at, *k, m.clone()))
                .collect();
            clock.advance(commit[0].0, &frames);
            if clock.watermark != before {
                let marks = input_watermarks(clocks);
                compiled
                    .advance_source_watermarks(&marks, ctx.clone())
                    .await?;
            }
        }
    }
    Ok(())
}

/// Where the rows of a frame handed to [`split_behind`] come from.
struct BandPosition {
    input: usize,
    partition: usize,
    base_offset: u64,
}

/// Splits off the rows whose time in one of `columns` is behind the
/// watermark less the allowed lateness (for a window join's column, whose
/// TUMBLE window of that size has ended there): an interval or window join
/// can no longer take them exactly, so they are late.
fn split_behind(
    batch: RecordBatch,
    columns: &[(usize, Option<i64>)],
    watermark_us: i64,
    lateness_us: i64,
    at: BandPosition,
    late: &mut Vec<LateRow>,
) -> Result<RecordBatch, SluiceError> {
    let horizon = watermark_us.saturating_sub(lateness_us);
    let mut keep = vec![true; batch.num_rows()];
    for &(c, window) in columns {
        let column = arrow::compute::cast(
            batch.column(c),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let Some(times) = column.as_any().downcast_ref::<TimestampMicrosecondArray>() else {
            continue;
        };
        for (i, kept) in keep.iter_mut().enumerate() {
            let behind = |t: i64| match window {
                Some(size) => t - t.rem_euclid(size) + size <= horizon,
                None => t < horizon,
            };
            if *kept && times.is_valid(i) && behind(times.value(i)) {
                *kept = false;
                late.push(LateRow {
                    input: at.input as u32,
                    partition: at.partition as u32,
                    offset: at.base_offset + i as u64,
                    event_time_us: times.value(i),
                    watermark_us,
                });
            }
        }
    }
    if keep.iter().all(|k| *k) {
        return Ok(batch);
    }
    Ok(filter_record_batch(&batch, &BooleanArray::from(keep))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array};

    fn batch(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter(vec![(
            "v",
            Arc::new(Int64Array::from(values.to_vec())) as arrow::array::ArrayRef,
        )])
        .unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..c.len()).map(|i| c.value(i)).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn an_append_only_input_is_read_up_to_its_end_and_no_further() {
        let published = vec![batch(&[0, 1, 2]), batch(&[3, 4]), batch(&[5, 6, 7])];
        // Rows 5.. were published after the reader fixed its end at 5:
        // they belong to the next read, which starts at 5.
        assert_eq!(values(&rows_between(published.clone(), 1, 5)), [1, 2, 3, 4]);
        assert_eq!(values(&rows_between(published.clone(), 5, 8)), [5, 6, 7]);
        assert_eq!(
            values(&rows_between(published.clone(), 0, 8)),
            (0..8).collect::<Vec<_>>()
        );
        // An upstream that restored fewer rows than were read gives none.
        assert!(rows_between(published.clone(), 6, 4).is_empty());
        assert!(rows_between(published, 8, 8).is_empty());
    }
}
