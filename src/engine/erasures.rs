//! Erasure requests: `ERASE FROM` (and `DELETE` on an append-only
//! table), carried out to the end on a task of their own, taken up again
//! after a restart, and `VERIFY ERASURE`.
//!
//! An erasure is first a record in the ledger (`crate::log::erasure`).
//! Over an append-only table it then finds the matching rows' positions
//! and records them (from then on no read returns them), closes the
//! active segments and moves them to the object store, rewrites each
//! segment holding a matching row with that row a hole, drops the copies
//! the commit logs carry, and computes every view reading the table again
//! from the log (views over an append-only table keep too little to take
//! rows back), deleting the old views' checkpoints. Over a keyed table, or
//! one without a key that takes DELETE, it is a DELETE followed by VACUUM.
//! Each step can run again: after a crash the work resumes from the
//! ledger at start-up.

use std::collections::BTreeMap;

use arrow::array::{Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use sluice_sql::sqlparser::ast::{Expr, Value, Visit, Visitor};

use super::*;
use crate::log::erasure::{ErasedRows, ErasureRecord, RegisteredExport, LEDGER_FILE};
use crate::log::now_us;
use crate::log::suppress::{RowFilter, Suppression};

/// What an erasure's work needs, owned, so that it runs on its own task:
/// a client that goes away does not stop an erasure halfway.
#[derive(Clone)]
pub(crate) struct ErasureWork {
    store: Arc<LogStore>,
    objects: Arc<DurableStore>,
    views: Arc<ViewManager>,
    planner: Arc<Planner>,
    ctx: Arc<SessionContext>,
    /// One erasure at a time.
    running: Arc<tokio::sync::Mutex<()>>,
}

impl Engine {
    pub(crate) fn erasure_work(&self) -> ErasureWork {
        ErasureWork {
            store: self.store.clone(),
            objects: self.objects.clone(),
            views: self.views.clone(),
            planner: self.planner.clone(),
            ctx: self.ctx.clone(),
            running: self.erasing.clone(),
        }
    }

    /// Runs a statement of this family.
    pub(super) async fn erasure_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::Erase {
                table,
                selection,
                suppress,
            } => {
                self.erase(session, table, selection, suppress, "ERASE")
                    .await
            }
            Statement::VerifyErasure { id } => self.verify_erasure(session, id).await,
            other => Err(misrouted("erasures", &other)),
        }
    }

    /// Accepts an erasure (one table, or every table `selection` applies
    /// to) into the ledger and carries it out; answers `tag` with the rows
    /// removed.
    pub(crate) async fn erase(
        &self,
        session: &Session,
        table: Option<String>,
        selection: Option<String>,
        suppress: Option<String>,
        tag: &'static str,
    ) -> Result<Outcome, SluiceError> {
        if session.transaction.lock().open {
            return Err(SluiceError::ActiveTransaction(
                "an erasure cannot run inside a transaction block: it rewrites files and views that other transactions read",
            ));
        }
        let role = session.role();
        let work = self.erasure_work();
        let tables: Vec<Arc<TableLog>> = match &table {
            Some(name) => vec![self.store.table(name).ok_or_else(|| {
                match self.store.name_exists(name) {
                    // A view's rows come from its tables: erase there.
                    true => SluiceError::WrongObjectType(name.clone(), "table"),
                    false => SluiceError::UndefinedTable(name.clone()),
                }
            })?],
            None => {
                let selection = selection.as_deref().unwrap_or("true");
                let mut matching = Vec::new();
                for t in self.store.tables() {
                    let sql = format!("SELECT 1 FROM \"{}\" WHERE {selection}", t.def().name);
                    if work.plan(&sql).await.is_ok() {
                        matching.push(t);
                    }
                }
                if matching.is_empty() {
                    return Err(SluiceError::UndefinedColumn(format!(
                        "{selection}\" (no table has the columns of this condition"
                    )));
                }
                matching
            }
        };
        for t in &tables {
            self.roles.check(
                &role,
                ObjectKind::Table,
                &t.def().name,
                sluice_sql::Privilege::Delete,
            )?;
            // A condition that cannot run is refused before anything is
            // recorded.
            if let Some(s) = &selection {
                work.plan(&format!("SELECT 1 FROM \"{}\" WHERE {s}", t.def().name))
                    .await?;
            }
            // A subscription holds positions in a view's rows, which the
            // erasure of an append-only table computes again (a keyed
            // table's views take the rows back instead).
            let rebuilt = match t.def().is_append_only() {
                true => self.views.readers_of(&t.def().name),
                false => Vec::new(),
            };
            for view in rebuilt {
                if let Some(sub) = self
                    .store
                    .subscription_defs()
                    .into_iter()
                    .find(|s| s.source == view.def.name)
                {
                    return Err(SluiceError::ObjectInUse(format!(
                        "subscription \"{}\" reads materialized view \"{}\", which the erasure computes again from the log; drop the subscription (or subscribe to the table) and erase again",
                        sub.name, view.def.name
                    )));
                }
            }
        }
        let suppress_until_us = match suppress.as_deref() {
            None => None,
            Some("forever") => Some(i64::MAX),
            Some(d) => Some(now_us().saturating_add(sluice_sql::parse_duration_us(d)?)),
        };
        // A suppressing condition must run on rows as they are written.
        let mut filters = Vec::new();
        if suppress_until_us.is_some() {
            for t in &tables {
                let filter =
                    suppression_filter(&t.def(), selection.as_deref()).map_err(|e| {
                        SluiceError::Unsupported(format!(
                            "this condition cannot suppress rows as they are written to \"{}\" ({e}): it must use the table's own columns only",
                            t.def().name
                        ))
                    })?;
                filters.push((t.clone(), filter));
            }
        }
        let record = {
            let mut ledger = self.store.erasures().lock();
            let record = ErasureRecord {
                id: ledger.next_id(),
                tables: tables.iter().map(|t| t.def().name.clone()).collect(),
                all_tables: table.is_none(),
                predicate: selection,
                requester: role.name.clone(),
                requested_at_us: now_us(),
                completed_at_us: None,
                step: "accepted".into(),
                error: None,
                rows_removed: 0,
                erased: Vec::new(),
                files_rewritten: Vec::new(),
                not_reached: Vec::new(),
                suppress_until_us,
                suppress,
            };
            ledger.put(record.clone())?;
            record
        };
        // In force from now: rows written while the erasure runs are dropped.
        if let Some(until) = suppress_until_us {
            for (t, filter) in filters {
                t.suppressions
                    .add(Suppression::new(record.id, until, filter));
            }
        }
        let done = tokio::spawn(
            work.run(record.id)
                .instrument(tracing::info_span!("erasure", id = record.id)),
        )
        .await
        .map_err(|e| SluiceError::Internal(format!("the erasure's task failed: {e}")))??;
        Ok(Outcome::Done {
            tag,
            rows: Some(done.rows_removed),
        })
    }

    /// `VERIFY ERASURE n`: every place a row of erasure n could still be,
    /// read: the erased positions in the segments, and every file of the
    /// data directory and the object store (Parquet decoded, every text
    /// and binary column compared with the condition's text values; other
    /// files as raw bytes). One row per finding; none when the erasure
    /// holds.
    async fn verify_erasure(&self, session: &Session, id: u64) -> Result<Outcome, SluiceError> {
        let record =
            self.store
                .erasures()
                .lock()
                .get(id)
                .ok_or_else(|| SluiceError::Evaluation {
                    sqlstate: "42704",
                    message: format!("erasure {id} does not exist"),
                })?;
        let role = session.role();
        for t in &record.tables {
            if self.store.table(t).is_some() {
                self.roles
                    .check(&role, ObjectKind::Table, t, sluice_sql::Privilege::Delete)?;
            }
        }
        let needles = text_values(record.predicate.as_deref());
        let mut findings: Vec<(String, String)> = Vec::new();
        // The erased positions: each a hole, or gone with its segment.
        for rows in &record.erased {
            let Some(table) = self
                .store
                .tables()
                .into_iter()
                .find(|t| t.def().id == rows.table_id)
            else {
                continue;
            };
            let Some(part) = table.partitions().get(rows.partition as usize) else {
                continue;
            };
            let lo = rows.offsets.first().copied().unwrap_or(0);
            let hi = rows.offsets.last().map_or(0, |o| o + 1);
            for meta in part.frames_in_range(lo, hi) {
                let batch = part.read_frame(&meta).await?;
                let base = meta.header.base_offset;
                for &o in rows
                    .offsets
                    .iter()
                    .filter(|&&o| o >= base && o < meta.end_offset())
                {
                    let i = (o - base) as usize;
                    if i < batch.num_rows() && batch.columns().iter().any(|c| c.is_valid(i)) {
                        findings.push((
                            format!(
                                "table \"{}\" partition {} offset {o}",
                                table.def().name,
                                rows.partition
                            ),
                            "the erased row's values are still stored".into(),
                        ));
                    }
                }
            }
        }
        // Files of the erased tables, of the views reading them (and of
        // views no longer in the catalog), and every file that belongs to
        // no table or view; other tables may hold the same values.
        let erased_ids = table_ids(&self.store, &record.tables);
        let mut view_names: BTreeMap<u64, String> = BTreeMap::new();
        for t in &record.tables {
            for v in self.views.readers_of(t) {
                view_names.insert(v.def.id, v.def.name.clone());
            }
        }
        let known_views: Vec<u64> = self.store.view_defs().iter().map(|d| d.id).collect();
        let owner = |key: &str| -> Option<String> {
            let mut parts = key
                .split('/')
                .skip_while(|p| *p != "tables" && *p != "views");
            let kind = parts.next()?;
            let id = parts.next()?.parse::<u64>().ok();
            match (kind, id) {
                ("tables", Some(id)) if erased_ids.contains(&id) => Some(String::new()),
                ("tables", _) => None,
                ("views", Some(id)) => match view_names.get(&id) {
                    Some(name) => Some(format!(" (materialized view \"{name}\", which may also hold rows of the other tables it reads)")),
                    None if !known_views.contains(&id) => Some(" (a view no longer in the catalog)".into()),
                    None => None,
                },
                _ => Some(String::new()),
            }
        };
        let data_dir = self.store.data_dir().to_path_buf();
        let mut files = Vec::new();
        list_files(&data_dir, &mut files);
        for path in files {
            if path.file_name().is_some_and(|n| n == LEDGER_FILE) {
                continue;
            }
            let key = path
                .strip_prefix(&data_dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            let Some(note) = owner(&key) else {
                continue;
            };
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            findings.extend(scan_bytes(&format!("{key}{note}"), bytes.into(), &needles));
        }
        if self.objects.url().starts_with("s3://") {
            for object in self.objects.list("").await? {
                let Some(note) = owner(&object.key) else {
                    continue;
                };
                let bytes = self.objects.get(&object.key).await?;
                let shown = format!(
                    "{}/{}{note}",
                    self.objects.url().trim_end_matches('/'),
                    object.key
                );
                findings.extend(scan_bytes(&shown, bytes, &needles));
            }
        }
        let exports = self.store.exports().lock().records();
        for e in exports {
            if let Ok(bytes) = export::get(&e.location).await {
                findings.extend(scan_bytes(&e.location, bytes, &needles));
            }
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("location", DataType::Utf8, false),
            Field::new("finding", DataType::Utf8, false),
        ]));
        let (locations, what): (Vec<String>, Vec<String>) = findings.into_iter().unzip();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(locations)),
                Arc::new(StringArray::from(what)),
            ],
        )?;
        Ok(Outcome::Batches {
            schema,
            batches: vec![batch],
            tag: "SELECT",
        })
    }
}

impl Engine {
    /// Notes a file an export wrote, for erasures to rewrite.
    pub(crate) fn register_export(
        &self,
        session: &Session,
        location: &str,
        dataset: Option<(String, u32)>,
        rows: u64,
        sha256: String,
    ) -> Result<(), SluiceError> {
        let mut exports = self.store.exports().lock();
        // A location written again is one export, its newest content.
        let id = exports
            .records()
            .iter()
            .find(|e| e.location == location)
            .map_or_else(|| exports.next_id(), |e| e.id);
        exports.put(RegisteredExport {
            id,
            location: location.to_string(),
            version: dataset.as_ref().map(|d| d.1),
            dataset: dataset.map(|d| d.0),
            rows,
            sha256,
            written_at_us: now_us(),
            written_by: session.role().name.clone(),
        })?;
        Ok(())
    }
}

impl ErasureWork {
    async fn plan(&self, sql: &str) -> Result<LogicalPlan, SluiceError> {
        let stmt = match parse_sql(sql)? {
            Statement::Query(q) => *q,
            _ => return Err(SluiceError::Internal(format!("not a query: {sql}"))),
        };
        self.planner.plan(stmt, &SessionRole::default()).await
    }

    /// A query's rows, read as the server itself (the requester's
    /// privileges were checked when the erasure was accepted).
    async fn collect(&self, sql: &str) -> Result<Vec<RecordBatch>, SluiceError> {
        let plan = self.plan(sql).await?;
        let mut state = self.ctx.state();
        state
            .config_mut()
            .set_extension(Arc::new(SessionRole::default()));
        let df = DataFrame::new(state, plan);
        let task = Arc::new(df.task_ctx());
        let physical = {
            let _snapshot = self.store.transactions().snapshot_guard().await;
            df.create_physical_plan().await?
        };
        Ok(datafusion::physical_plan::collect(physical, task).await?)
    }

    /// A dataset version's rows as they compute now, counted and hashed
    /// as they stream (none kept), read as the server.
    async fn summarize_version(
        &self,
        def: &sluice_catalog::DatasetDef,
        cut: &str,
    ) -> Result<datasets::Summary, SluiceError> {
        datasets::summarize(
            &self.planner,
            &self.views,
            &SessionRole::default(),
            def,
            cut,
        )
        .await
    }

    fn save(&self, record: &ErasureRecord) -> Result<(), SluiceError> {
        Ok(self.store.erasures().lock().put(record.clone())?)
    }

    /// Carries out erasure `id` from wherever it stands; returns it
    /// completed. A failed step is recorded in the ledger and retried at
    /// the next start.
    pub(crate) async fn run(self, id: u64) -> Result<ErasureRecord, SluiceError> {
        let _one = self.running.lock().await;
        let Some(mut record) = self.store.erasures().lock().get(id) else {
            return Err(SluiceError::Internal(format!(
                "erasure {id} is not in the ledger"
            )));
        };
        if record.is_complete() {
            return Ok(record);
        }
        match self.steps(&mut record).await {
            Ok(()) => {
                record.step = "done".into();
                record.error = None;
                record.completed_at_us = Some(now_us());
                self.save(&record)?;
                tracing::info!(id, rows = record.rows_removed, "erasure completed");
                Ok(record)
            }
            Err(e) => {
                record.error = Some(e.to_string());
                self.save(&record)?;
                tracing::warn!(id, error = %e, "erasure failed; it resumes at the next start");
                Err(e)
            }
        }
    }

    /// Rewrites the registered exports that hold matching rows: a dataset
    /// version's file (and manifest) as the version now computes, a
    /// query's file without the rows the condition matches. A file that
    /// cannot be read, or holds the condition's values without its
    /// columns, is listed as not reached.
    async fn rewrite_exports(
        &self,
        record: &mut ErasureRecord,
        erased_ids: &[u64],
    ) -> Result<(), SluiceError> {
        let needles = text_values(record.predicate.as_deref());
        let exports = self.store.exports().lock().records();
        for mut export in exports {
            let not_reached = |why: String| format!("{}: {why}", export.location);
            let old = match export::get(&export.location).await {
                Ok(b) => b,
                Err(e) => {
                    let note = not_reached(format!("could not be read ({e})"));
                    if !record.not_reached.contains(&note) {
                        record.not_reached.push(note);
                    }
                    continue;
                }
            };
            let dataset = export
                .dataset
                .as_ref()
                .and_then(|d| self.store.dataset_def(d))
                .and_then(|d| {
                    let v = d
                        .versions
                        .iter()
                        .find(|v| Some(v.version) == export.version)
                        .cloned()?;
                    Some((d, v))
                });
            let new_sha256 = match dataset {
                Some((def, v)) => {
                    let covers = self
                        .store
                        .cut_def(&v.cut)
                        .is_some_and(|c| c.tables.iter().any(|t| erased_ids.contains(&t.table_id)));
                    if !covers || crate::log::erasure::sha256_hex(&old) == v.content_hash {
                        continue;
                    }
                    // Written as COPY DATASET writes it (the same bytes),
                    // as the rows stream.
                    let (summary, written) = datasets::write_version(
                        &self.planner,
                        &self.views,
                        &SessionRole::default(),
                        &def,
                        &v,
                        &export.location,
                    )
                    .await?;
                    let manifest = datasets::dataset_manifest(&self.store, &def, &v, summary.rows)?;
                    export.rows = summary.rows;
                    let new_sha256 = written.sha256()?;
                    written.publish(&export.location).await?;
                    export::put(
                        &format!("{}.manifest.json", export.location),
                        manifest.into(),
                    )
                    .await?;
                    new_sha256
                }
                None => {
                    let batches = match decode_parquet(&old) {
                        Some(b) => b,
                        None => continue,
                    };
                    let Some(schema) = batches.first().map(|b| b.schema()) else {
                        continue;
                    };
                    let filter = match condition_filter(&schema, record.predicate.as_deref()) {
                        Ok(f) => f,
                        Err(_) => {
                            if !scan_bytes(&export.location, old.clone(), &needles).is_empty() {
                                let note = not_reached(
                                    "holds the condition's values but not all of its columns, so its rows cannot be told apart".into(),
                                );
                                if !record.not_reached.contains(&note) {
                                    record.not_reached.push(note);
                                }
                            }
                            continue;
                        }
                    };
                    let mut kept = Vec::with_capacity(batches.len());
                    let mut removed = 0usize;
                    for b in batches {
                        let matching = filter.matching(&b).map_err(|e| {
                            SluiceError::Internal(format!("{}: {e}", export.location))
                        })?;
                        let keep: arrow::array::BooleanArray = (0..b.num_rows())
                            .map(|i| Some(!(matching.is_valid(i) && matching.value(i))))
                            .collect();
                        removed += b.num_rows() - keep.true_count();
                        kept.push(arrow::compute::filter_record_batch(&b, &keep)?);
                    }
                    if removed == 0 {
                        continue;
                    }
                    export.rows -= removed as u64;
                    let new = encode(kept).await?;
                    let new_sha256 = crate::log::erasure::sha256_hex(&new);
                    export::put(&export.location, new).await?;
                    new_sha256
                }
            };
            record
                .files_rewritten
                .push(crate::log::erasure::RewrittenFile {
                    location: export.location.clone(),
                    old_sha256: crate::log::erasure::sha256_hex(&old),
                    new_sha256: new_sha256.clone(),
                });
            export.sha256 = new_sha256;
            self.store.exports().lock().put(export)?;
            self.save(record)?;
        }
        Ok(())
    }

    async fn steps(&self, record: &mut ErasureRecord) -> Result<(), SluiceError> {
        for name in record.tables.clone() {
            // A table dropped since holds nothing any more.
            let Some(log) = self.store.table(&name) else {
                continue;
            };
            let def = log.def();
            if def.is_keyed() {
                record.step = format!("deleting from \"{name}\"");
                self.save(record)?;
                let sql = planner::delete_query(&self.store, &name, record.predicate.as_deref())?;
                let found = self.collect(&sql).await?;
                let tombstones = dml::tombstones_of(&def, &found)?;
                record.rows_removed += log.append_keyed(tombstones, false).await?;
                record.step = format!("vacuuming \"{name}\"");
                self.save(record)?;
                tables::vacuum(&self.store, &self.objects, &self.views, &log).await?;
                if def.has_primary_key() {
                    let kept = format!(
                        "the keys of the deleted rows of \"{name}\", in tombstones until its delete_retention passes (they tell views and subscribers to take the rows back)"
                    );
                    if !record.not_reached.contains(&kept) {
                        record.not_reached.push(kept);
                    }
                }
                continue;
            }
            if !record.erased.iter().any(|r| r.table_id == def.id) {
                record.step = format!("finding rows of \"{name}\"");
                self.save(record)?;
                let sql = format!(
                    "SELECT _partition, _offset FROM \"{name}\"{}",
                    record
                        .predicate
                        .as_deref()
                        .map(|p| format!(" WHERE {p}"))
                        .unwrap_or_default()
                );
                let mut found: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
                for batch in self.collect(&sql).await? {
                    let partitions = batch
                        .column(0)
                        .as_any()
                        .downcast_ref::<arrow::array::Int32Array>()
                        .ok_or_else(|| SluiceError::Internal("_partition is not int4".into()))?;
                    let offsets = batch
                        .column(1)
                        .as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                        .ok_or_else(|| SluiceError::Internal("_offset is not int8".into()))?;
                    for i in 0..batch.num_rows() {
                        found
                            .entry(partitions.value(i) as u32)
                            .or_default()
                            .push(offsets.value(i) as u64);
                    }
                }
                for (partition, mut offsets) in found {
                    offsets.sort_unstable();
                    record.rows_removed += offsets.len() as u64;
                    record.erased.push(ErasedRows {
                        table_id: def.id,
                        partition,
                        offsets,
                    });
                }
                // Durable first: a restart leaves these rows out too.
                self.save(record)?;
            }
            for rows in record.erased.iter().filter(|r| r.table_id == def.id) {
                if let Some(part) = log.partitions().get(rows.partition as usize) {
                    part.erase(rows.offsets.iter().copied());
                }
            }
            record.step = format!("rewriting segments of \"{name}\"");
            self.save(record)?;
            log.close_active_segments().await?;
            crate::log::tier_table(&log, &self.objects, &self.store.cut_pins(&log)).await?;
            let rewritten = crate::log::erase_segments(&log, &self.objects).await?;
            record.files_rewritten.extend(rewritten);
            self.store.transactions().drop_carried_frames().await?;
            record.step = format!("rebuilding the views over \"{name}\"");
            self.save(record)?;
            self.views.rebuild_after_erasure(&name).await?;
        }
        // Dataset versions keep no rows, but their recorded content hash
        // (what COPY DATASET and VERIFY DATASET check) covered the rows:
        // each version whose cut covers an erased table is hashed again.
        let erased_ids = table_ids(&self.store, &record.tables);
        for mut dataset in self.store.dataset_defs() {
            let mut changed = false;
            for i in 0..dataset.versions.len() {
                let v = dataset.versions[i].clone();
                let covers = self
                    .store
                    .cut_def(&v.cut)
                    .is_some_and(|c| c.tables.iter().any(|t| erased_ids.contains(&t.table_id)));
                if !covers {
                    continue;
                }
                record.step = format!("hashing dataset version {} again", v.cut);
                self.save(record)?;
                let computed = self.summarize_version(&dataset, &v.cut).await?;
                if computed.content_hash == v.content_hash {
                    continue;
                }
                record
                    .files_rewritten
                    .push(crate::log::erasure::RewrittenFile {
                        location: format!("dataset version {} (its content hash)", v.cut),
                        old_sha256: v.content_hash.clone(),
                        new_sha256: computed.content_hash.clone(),
                    });
                let version = &mut dataset.versions[i];
                version.rows = computed.rows;
                version.split_rows = computed.split_rows;
                version.content_hash = computed.content_hash;
                changed = true;
            }
            if changed {
                self.store.replace_dataset_def(dataset)?;
            }
        }
        self.rewrite_exports(record, &erased_ids).await?;
        let untracked = "copies clients took (COPY ... TO STDOUT, psql's \\copy, query results), and files exported before the server registered exports".to_string();
        if !record.not_reached.contains(&untracked) {
            record.not_reached.push(untracked);
        }
        Ok(())
    }
}

/// The ids of the tables named (those that still exist).
fn table_ids(store: &LogStore, names: &[String]) -> Vec<u64> {
    store
        .tables()
        .iter()
        .filter(|t| names.contains(&t.def().name))
        .map(|t| t.def().id)
        .collect()
}

/// Which rows match an erasure's condition, as DataFusion evaluates it
/// over a table's own columns.
struct ConditionFilter {
    schema: arrow::datatypes::SchemaRef,
    condition: Arc<dyn datafusion::physical_expr::PhysicalExpr>,
}

impl RowFilter for ConditionFilter {
    fn matching(&self, rows: &RecordBatch) -> Result<arrow::array::BooleanArray, String> {
        let rows = RecordBatch::try_new(self.schema.clone(), rows.columns().to_vec())
            .map_err(|e| e.to_string())?;
        let value = self
            .condition
            .evaluate(&rows)
            .and_then(|v| v.into_array(rows.num_rows()))
            .map_err(|e| e.to_string())?;
        value
            .as_any()
            .downcast_ref::<arrow::array::BooleanArray>()
            .cloned()
            .ok_or_else(|| "the condition is not boolean".to_string())
    }
}

/// Built with DataFusion's own functions, the same at the ERASE and at
/// every start (before any source writes a row).
fn suppression_filter(
    def: &sluice_catalog::TableDef,
    predicate: Option<&str>,
) -> Result<Arc<dyn RowFilter>, SluiceError> {
    Ok(Arc::new(condition_filter(&def.data_schema(), predicate)?))
}

/// The condition over rows of `schema` (its columns taken as nullable: the
/// stored rows' may be declared either way).
fn condition_filter(
    schema: &arrow::datatypes::SchemaRef,
    predicate: Option<&str>,
) -> Result<ConditionFilter, SluiceError> {
    let schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let ctx = SessionContext::new();
    let df_schema = datafusion::common::DFSchema::try_from(schema.as_ref().clone())?;
    let expr = ctx.parse_sql_expr(predicate.unwrap_or("true"), &df_schema)?;
    let condition = ctx.create_physical_expr(expr, &df_schema)?;
    Ok(ConditionFilter { schema, condition })
}

/// A Parquet file's rows (None: not a Parquet file that decodes).
fn decode_parquet(bytes: &bytes::Bytes) -> Option<Vec<RecordBatch>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .and_then(|b| b.build())
        .ok()?;
    reader.collect::<Result<Vec<_>, _>>().ok()
}

/// Rows as the Parquet file exports write.
async fn encode(batches: Vec<RecordBatch>) -> Result<bytes::Bytes, SluiceError> {
    tokio::task::spawn_blocking(move || crate::checkpoint::encode_parquet(&batches))
        .await
        .map_err(|e| SluiceError::Internal(e.to_string()))?
        .map_err(|e| SluiceError::Internal(format!("encoding Parquet: {e}")))
}

/// Puts back in force every suppressing erasure of the ledger (at start).
pub(crate) fn install_suppressions(store: &LogStore) {
    let now = now_us();
    for record in store.erasures().lock().records() {
        let Some(until) = record.suppress_until_us.filter(|u| *u > now) else {
            continue;
        };
        for name in &record.tables {
            let Some(table) = store.table(name) else {
                continue;
            };
            match suppression_filter(&table.def(), record.predicate.as_deref()) {
                Ok(filter) => table
                    .suppressions
                    .add(Suppression::new(record.id, until, filter)),
                Err(e) => {
                    tracing::error!(id = record.id, table = %name, error = %e, "an erasure's condition no longer applies to the table; its rows are not suppressed")
                }
            }
        }
    }
}

/// Takes up every erasure the ledger holds that did not complete (a
/// crash, or a step that failed), one after the other, in the background.
pub(crate) fn resume_erasures(work: ErasureWork) {
    let pending: Vec<u64> = work
        .store
        .erasures()
        .lock()
        .records()
        .into_iter()
        .filter(|r| !r.is_complete())
        .map(|r| r.id)
        .collect();
    if pending.is_empty() {
        return;
    }
    tokio::spawn(
        async move {
            for id in pending {
                tracing::info!(id, "resuming an erasure");
                if let Err(e) = work.clone().run(id).await {
                    tracing::warn!(id, error = %e, "a resumed erasure failed");
                }
            }
        }
        .instrument(tracing::info_span!("erasure_resume")),
    );
}

/// A prepared DELETE's condition with its bound parameters written in as
/// literals: what the ledger records and the erasure runs.
pub(crate) fn bind_parameters(
    selection: &str,
    params: &datafusion::common::ParamValues,
) -> Result<String, SluiceError> {
    use datafusion::common::ScalarValue;
    use sluice_sql::sqlparser::dialect::PostgreSqlDialect;
    use sluice_sql::sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, selection)
        .tokenize()
        .map_err(|e| SluiceError::Internal(e.to_string()))?;
    let mut out = String::new();
    for t in tokens {
        let Token::Placeholder(p) = &t else {
            out.push_str(&t.to_string());
            continue;
        };
        let value = params.get_placeholders_with_values(p)?;
        let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
        out.push_str(&match &value.value {
            v if v.is_null() => "NULL".to_string(),
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => quoted(s),
            ScalarValue::Boolean(Some(b)) => b.to_string(),
            v if v.data_type().is_numeric() => v.to_string(),
            v => quoted(&v.to_string()),
        });
    }
    Ok(out)
}

/// The text literals of a condition: what `VERIFY ERASURE` looks for in
/// files.
fn text_values(predicate: Option<&str>) -> Vec<String> {
    struct Texts(Vec<String>);
    impl Visitor for Texts {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> std::ops::ControlFlow<()> {
            if let Expr::Value(v) = expr {
                if let Value::SingleQuotedString(s) = &v.value {
                    if !s.is_empty() {
                        self.0.push(s.clone());
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let Some(p) = predicate else {
        return Vec::new();
    };
    let Ok(Statement::Query(q)) = parse_sql(&format!("SELECT 1 WHERE {p}")) else {
        return Vec::new();
    };
    let mut texts = Texts(Vec::new());
    let _ = q.visit(&mut texts);
    texts.0.sort();
    texts.0.dedup();
    texts.0
}

fn list_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => list_files(&path, out),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
}

/// Where a file holds one of `needles`: in a Parquet file, a text or
/// binary value containing it; in any other file (or a Parquet file that
/// does not decode), its bytes.
fn scan_bytes(location: &str, bytes: bytes::Bytes, needles: &[String]) -> Vec<(String, String)> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let mut found: Vec<(String, String)> = Vec::new();
    let mut note = |what: String| {
        let finding = (location.to_string(), what);
        if !found.contains(&finding) {
            found.push(finding);
        }
    };
    let holds = |value: &[u8], n: &str| value.windows(n.len()).any(|w| w == n.as_bytes());
    if needles.is_empty() {
        return Vec::new();
    }
    let reader = bytes
        .starts_with(b"PAR1")
        .then(|| ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).and_then(|b| b.build()))
        .and_then(Result::ok);
    let Some(reader) = reader else {
        for n in needles {
            if holds(&bytes, n) {
                note(format!("its bytes hold '{n}'"));
            }
        }
        return found;
    };
    for batch in reader.flatten() {
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            let values = match field.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    arrow::compute::cast(column, &DataType::LargeBinary)
                }
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                    arrow::compute::cast(column, &DataType::LargeBinary)
                }
                _ => continue,
            };
            let Ok(values) = values else {
                continue;
            };
            let Some(values) = values
                .as_any()
                .downcast_ref::<arrow::array::LargeBinaryArray>()
            else {
                continue;
            };
            for n in needles {
                if values.iter().flatten().any(|v| holds(v, n)) {
                    note(format!("column \"{}\" holds '{n}'", field.name()));
                }
            }
        }
    }
    found
}
