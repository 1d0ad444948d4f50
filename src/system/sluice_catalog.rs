//! The `public` schema (the log tables) and the `sluice_catalog` schema of
//! system tables, both read live from the [`LogStore`].

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::common::Result;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::auth::{ObjectKind, RoleStore, SessionRole};
use std::sync::atomic::Ordering;

use crate::log::LogStore;
use crate::sink::SinkManager;
use crate::source::SourceManager;
use crate::stream::ViewManager;
use crate::subscribe::SubscriptionManager;

use super::catalog_cuts::{
    cuts_batch, cuts_schema, dataset_versions_batch, dataset_versions_schema, datasets_batch,
    datasets_schema, erasures_batch, erasures_schema,
};
use super::view_table::ViewTable;
use crate::query::activity::ActivityRow;
use crate::query::cancel::ConnectionRegistry;
use crate::query::provider::LogTableProvider;

/// The user's tables, materialized views and views, as the catalog names
/// them now.
pub struct PublicSchema {
    pub store: Arc<LogStore>,
    pub views: Arc<ViewManager>,
    pub query_views: Arc<super::query_views::QueryViews>,
}

impl fmt::Debug for PublicSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PublicSchema")
    }
}

impl PublicSchema {
    /// `relation` read at a cut or through a sample (see
    /// `sluice_sql::ReadAt`).
    async fn read_at(
        &self,
        relation: &str,
        read: &sluice_sql::ReadAt,
    ) -> Result<Arc<dyn TableProvider>> {
        use crate::error::{into_datafusion, SluiceError};
        let table = self.store.table(relation);
        let base: Arc<dyn TableProvider> = match (&table, &read.as_of) {
            (Some(t), None) => Arc::new(LogTableProvider::new(t.clone())),
            (Some(t), Some(as_of)) => {
                let ends =
                    crate::log::cut::ends_at(&self.store, t, as_of).map_err(into_datafusion)?;
                Arc::new(LogTableProvider::new(t.clone()).at(ends))
            }
            (None, as_of) => match (self.views.view(relation), as_of) {
                (Some(v), Some(as_of)) => Arc::new(super::view_at_cut::ViewAtCut::new(
                    self.views.clone(),
                    self.store.clone(),
                    relation,
                    v.schema.clone(),
                    as_of.clone(),
                )),
                (None, Some(_)) if self.store.query_view(relation).is_some() => {
                    return Err(into_datafusion(SluiceError::Unsupported(format!(
                        "AS OF reads tables and materialized views; \"{relation}\" is a view: read its tables AS OF instead"
                    ))))
                }
                _ => match self.table(relation).await? {
                    Some(p) => p,
                    None => {
                        return Err(into_datafusion(SluiceError::UndefinedTable(
                            relation.to_string(),
                        )))
                    }
                },
            },
        };
        let Some(sample) = &read.sample else {
            return Ok(base);
        };
        let schema = base.schema();
        let index = |c: &str| {
            schema
                .index_of(c)
                .map_err(|_| into_datafusion(SluiceError::UndefinedColumn(c.to_string())))
        };
        let (keys, seed) = match sample.method {
            sluice_sql::SampleMethod::Hash => {
                let by: Vec<String> = match (&sample.by, &table) {
                    (by, _) if !by.is_empty() => by.clone(),
                    (_, Some(t)) if t.def().has_primary_key() => t
                        .def()
                        .primary_key_indices()
                        .iter()
                        .map(|&i| t.def().columns[i].name.clone())
                        .collect(),
                    _ => {
                        return Err(into_datafusion(SluiceError::Unsupported(format!(
                            "TABLESAMPLE HASH of \"{relation}\" needs the columns to hash: BY (column), or a table with a PRIMARY KEY"
                        ))))
                    }
                };
                let keys = by.iter().map(|c| index(c)).collect::<Result<Vec<_>>>()?;
                (keys, sample.seed.unwrap_or(0) as u64)
            }
            sluice_sql::SampleMethod::Bernoulli => {
                let keys = match &table {
                    Some(_) => vec![index("_partition")?, index("_offset")?],
                    None => (0..schema.fields().len()).collect(),
                };
                let seed = match sample.seed {
                    Some(s) => s as u64,
                    None => {
                        use std::hash::{BuildHasher, Hasher};
                        std::collections::hash_map::RandomState::new()
                            .build_hasher()
                            .finish()
                    }
                };
                (keys, seed)
            }
        };
        Ok(Arc::new(crate::query::sample::SampledTable::new(
            base,
            keys,
            seed,
            sample.percent,
        )))
    }
}

#[async_trait]
impl SchemaProvider for PublicSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.store.table_names();
        names.extend(self.views.views().iter().map(|v| v.def.name.clone()));
        names.extend(self.store.query_views().into_iter().map(|v| v.name));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.store.table(name) {
            return Ok(Some(Arc::new(LogTableProvider::new(t))));
        }
        if let Some((relation, read)) = sluice_sql::ReadAt::from_name(name) {
            return self.read_at(&relation, &read).await.map(Some);
        }
        if let Some(t) = name
            .strip_suffix(crate::query::provider::ON_CONFLICT_DO_NOTHING)
            .and_then(|base| self.store.table(base))
        {
            return Ok(Some(Arc::new(
                LogTableProvider::new(t).on_conflict_do_nothing(),
            )));
        }
        match self.views.view(name) {
            Some(v) => {
                let indexes = self
                    .store
                    .index_defs()
                    .into_iter()
                    .filter(|i| i.on == v.def.id)
                    .filter_map(|i| {
                        let columns = i
                            .columns
                            .iter()
                            .map(|c| v.schema.index_of(c).ok())
                            .collect::<Option<Vec<usize>>>()?;
                        Some((i.name, columns))
                    })
                    .collect();
                Ok(Some(Arc::new(
                    ViewTable::new(self.views.clone(), name, v.schema.clone())
                        .with_indexes(indexes, self.store.clone()),
                )))
            }
            None => match self.store.query_view(name) {
                Some(def) => Ok(Some(self.query_views.provider(&def).await?)),
                // `pg_catalog` is on the search path: its views not named
                // by the catalog rules (`pg_indexes`) are found without it.
                None => Ok(super::catalog_views::catalog_view(name)),
            },
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.store.name_exists(name) || self.views.view(name).is_some()
    }
}

/// Schema `sluice_catalog`: read-only views of the server's state.
pub struct SystemSchema {
    pub store: Arc<LogStore>,
    pub views: Arc<ViewManager>,
    pub subs: Arc<SubscriptionManager>,
    pub connectors: Connectors,
    pub connections: Arc<ConnectionRegistry>,
    pub roles: Arc<RoleStore>,
}

/// What connects the server to Kafka: the sources feeding tables and the
/// sinks writing to topics.
pub struct Connectors {
    pub sources: Arc<SourceManager>,
    pub sinks: Arc<SinkManager>,
}

impl fmt::Debug for SystemSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SystemSchema")
    }
}

const SYSTEM_TABLES: [&str; 17] = [
    "checkpoints",
    "cuts",
    "dataset_versions",
    "datasets",
    "erasures",
    "indexes",
    "lag",
    "late_rows",
    "partitions",
    "sessions",
    "sinks",
    "sources",
    "subscriptions",
    "tables",
    "view_operators",
    "views",
    "watermarks",
];

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        SYSTEM_TABLES.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let store = self.store.clone();
        let views = self.views.clone();
        let subs = self.subs.clone();
        let connections = self.connections.clone();
        let sources = self.connectors.sources.clone();
        let sinks = self.connectors.sinks.clone();
        let (table, visibility) = match name {
            "sinks" => (
                SystemTable::live(Arc::new(move || sinks_batch(&sinks)))?,
                Visibility::Object("sink_name", ObjectKind::Subscription),
            ),
            "sources" => (
                SystemTable::live(Arc::new(move || sources_batch(&sources)))?,
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "partitions" => (
                SystemTable::of_store(store, partitions_schema(), partitions_batch),
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "cuts" => (
                SystemTable::of_store(store, cuts_schema(), cuts_batch),
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "erasures" => (
                SystemTable::of_store(store, erasures_schema(), erasures_batch),
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "datasets" => (
                SystemTable::of_store(store, datasets_schema(), datasets_batch),
                Visibility::Sessions,
            ),
            "dataset_versions" => (
                SystemTable::of_store(store, dataset_versions_schema(), dataset_versions_batch),
                Visibility::Sessions,
            ),
            "watermarks" => (
                SystemTable::of_store(store, watermarks_schema(), watermarks_batch),
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "tables" => (
                SystemTable::of_store(store, tables_schema(), tables_batch),
                Visibility::Object("table_name", ObjectKind::Table),
            ),
            "indexes" => (
                SystemTable::live(Arc::new(move || indexes_batch(&store, &views)))?,
                Visibility::Object("relation_name", ObjectKind::Table),
            ),
            "checkpoints" => (
                SystemTable::live(Arc::new(move || checkpoints_batch(&views)))?,
                Visibility::Object("view_name", ObjectKind::View),
            ),
            "lag" => (
                SystemTable::live(Arc::new(move || lag_batch(&views, &subs)))?,
                Visibility::Consumer,
            ),
            "subscriptions" => (
                SystemTable::live(Arc::new(move || subscriptions_batch(&subs)))?,
                Visibility::Object("subscription_name", ObjectKind::Subscription),
            ),
            "late_rows" => (
                SystemTable::live(Arc::new(move || late_rows_batch(&views)))?,
                Visibility::Object("view_name", ObjectKind::View),
            ),
            "views" => (
                SystemTable::live(Arc::new(move || views_batch(&views)))?,
                Visibility::Object("view_name", ObjectKind::View),
            ),
            "view_operators" => (
                SystemTable::live(Arc::new(move || view_operators_batch(&views)))?,
                Visibility::Object("view_name", ObjectKind::View),
            ),
            "sessions" => (
                SystemTable::live(Arc::new(move || sessions_batch(&connections)))?,
                Visibility::Sessions,
            ),
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(SystemTable {
            visibility,
            roles: Some(self.roles.clone()),
            ..table
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        SYSTEM_TABLES.contains(&name)
    }
}

/// Builds a system table's rows from the server's state as it is now.
type BuildRows = Arc<dyn Fn() -> Result<RecordBatch> + Send + Sync>;

/// A system table: its rows are built at each scan, never at planning, so
/// that a prepared statement reads the state as of each execution. A scan
/// for a session (its role in the session config) keeps the rows of the
/// objects that role may see.
struct SystemTable {
    schema: SchemaRef,
    build: BuildRows,
    visibility: Visibility,
    roles: Option<Arc<RoleStore>>,
}

/// Which rows of a system table a role sees.
#[derive(Debug, Clone, Copy)]
enum Visibility {
    /// Rows whose `column` names an object of `kind` the role owns or holds
    /// a privilege on.
    Object(&'static str, ObjectKind),
    /// `lag`: rows of the views and subscriptions (by the `kind` column,
    /// the name in `consumer`) the role may see.
    Consumer,
    /// `sessions`: every session, as `pg_stat_activity` shows them; the
    /// query text of another role's session only to superusers.
    Sessions,
}

impl SystemTable {
    /// `batch` as `role` may see it.
    fn visible_to(&self, role: &SessionRole, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(roles) = &self.roles else {
            return Ok(batch);
        };
        if roles.is_superuser(role) {
            return Ok(batch);
        }
        let text = |name: &str| -> Result<StringArray> {
            let column = batch.column_by_name(name).ok_or_else(|| {
                datafusion::error::DataFusionError::Internal(format!("no column {name}"))
            })?;
            Ok(arrow::compute::cast(column, &DataType::Utf8)?
                .as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .unwrap_or_else(|| StringArray::from(Vec::<String>::new())))
        };
        match self.visibility {
            Visibility::Object(column, kind) => {
                let names = text(column)?;
                let keep: BooleanArray = names
                    .iter()
                    .map(|n| Some(n.is_some_and(|n| roles.may_see(role, kind, n))))
                    .collect();
                Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
            }
            Visibility::Consumer => {
                let (names, kinds) = (text("consumer")?, text("kind")?);
                let keep: BooleanArray = names
                    .iter()
                    .zip(kinds.iter())
                    .map(|(n, k)| {
                        let kind = match k {
                            Some("view") => ObjectKind::View,
                            _ => ObjectKind::Subscription,
                        };
                        Some(n.is_some_and(|n| roles.may_see(role, kind, n)))
                    })
                    .collect();
                Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
            }
            Visibility::Sessions => {
                let users = text("user_name")?;
                let queries = text("query")?;
                let shown: StringArray = users
                    .iter()
                    .zip(queries.iter())
                    .map(|(u, q)| match u == Some(role.name.as_str()) {
                        true => q,
                        false => Some("<insufficient privilege>"),
                    })
                    .collect();
                let mut columns = batch.columns().to_vec();
                if let Ok(at) = batch.schema().index_of("query") {
                    columns[at] = Arc::new(shown);
                }
                Ok(RecordBatch::try_new(batch.schema(), columns)?)
            }
        }
    }
}

impl SystemTable {
    fn of_store(
        store: Arc<LogStore>,
        schema: SchemaRef,
        build: fn(&LogStore, &SchemaRef) -> Result<RecordBatch>,
    ) -> SystemTable {
        let s = schema.clone();
        SystemTable {
            schema,
            build: Arc::new(move || build(&store, &s)),
            visibility: Visibility::Sessions,
            roles: None,
        }
    }

    /// A table whose builder also defines its schema (built once here for
    /// it; the rows come from each scan).
    fn live(build: BuildRows) -> Result<SystemTable> {
        Ok(SystemTable {
            schema: build()?.schema(),
            build,
            visibility: Visibility::Sessions,
            roles: None,
        })
    }
}

impl fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SystemTable")
    }
}

#[async_trait]
impl TableProvider for SystemTable {
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
        let mut batch = (self.build)()?;
        if let Some(role) = state.config().get_extension::<SessionRole>() {
            batch = self.visible_to(&role, batch)?;
        }
        scan_rows(&self.schema, vec![batch], state, projection, filters, limit).await
    }
}

/// A scan of rows built when the scan starts (a system table's, a view's
/// snapshot), with the projection, filters and limit applied.
pub(super) async fn scan_rows(
    schema: &SchemaRef,
    rows: Vec<RecordBatch>,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    MemTable::try_new(schema.clone(), vec![rows])?
        .scan(state, projection, filters, limit)
        .await
}

/// `columns` cast to the types of `fields`, in order (a catalog's rows as
/// the catalog declares them).
pub(super) fn cast_to(
    columns: &[arrow::array::ArrayRef],
    fields: &arrow::datatypes::Fields,
) -> Result<Vec<arrow::array::ArrayRef>> {
    Ok(columns
        .iter()
        .zip(fields)
        .map(|(c, f)| arrow::compute::cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// The column `name` of `batch` as text, when it has one.
pub(super) fn text_column(batch: &RecordBatch, name: &str) -> Option<arrow::array::ArrayRef> {
    batch
        .column_by_name(name)
        .and_then(|c| arrow::compute::cast(c, &DataType::Utf8).ok())
}

fn partitions_schema() -> SchemaRef {
    let i64f = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        i64f("start_offset"),
        i64f("end_offset"),
        i64f("rows"),
        i64f("bytes"),
        i64f("segments"),
        i64f("torn_frames_dropped"),
        i64f("frames_read"),
        i64f("remote_segments"),
        i64f("remote_bytes"),
        i64f("deleted_segments"),
        i64f("reads_below_start"),
        i64f("unreadable_segments"),
        // Times retention kept a segment because a cut needs it.
        i64f("pinned_segments"),
        // Keyed tables (NULL for append-only ones).
        Field::new("dirty_ratio", DataType::Float64, true),
        Field::new("compactions", DataType::Int64, true),
        Field::new("compacted_records", DataType::Int64, true),
        Field::new("compacted_bytes_reclaimed", DataType::Int64, true),
        Field::new("compaction_progress", DataType::Utf8, true),
    ]))
}

fn partitions_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut names = vec![];
    let mut parts = vec![];
    let mut cols: [Vec<i64>; 13] = Default::default();
    let mut dirty = vec![];
    let mut runs = vec![];
    let mut removed = vec![];
    let mut reclaimed = vec![];
    let mut progress = vec![];
    for t in store.tables() {
        for p in t.partitions() {
            let s = p.stats();
            let keyed = t.def().is_keyed();
            let c = p.compaction.lock().clone();
            dirty.push(c.dirty_ratio.filter(|_| keyed));
            runs.push(keyed.then_some(c.runs as i64));
            removed.push(keyed.then_some(c.records_removed as i64));
            reclaimed.push(keyed.then_some(c.bytes_before.saturating_sub(c.bytes_after) as i64));
            progress.push(keyed.then(|| match c.in_progress {
                Some((done, total)) => format!("{done} of {total} segments"),
                None => "idle".to_string(),
            }));
            names.push(t.def().name.clone());
            parts.push(p.index as i32);
            let values = [
                s.start_offset,
                s.end_offset,
                s.end_offset - s.start_offset,
                s.bytes,
                s.segments,
                s.torn_frames_dropped,
                s.frames_read,
                s.remote_segments,
                s.remote_bytes,
                s.deleted_segments,
                s.reads_below_start,
                s.unreadable_segments,
                s.pinned_segments,
            ];
            for (c, v) in cols.iter_mut().zip(values) {
                c.push(v as i64);
            }
        }
    }
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(Int32Array::from(parts)),
    ];
    arrays.extend(
        cols.into_iter()
            .map(|c| Arc::new(Int64Array::from(c)) as ArrayRef),
    );
    arrays.push(Arc::new(Float64Array::from(dirty)));
    arrays.push(Arc::new(Int64Array::from(runs)));
    arrays.push(Arc::new(Int64Array::from(removed)));
    arrays.push(Arc::new(Int64Array::from(reclaimed)));
    arrays.push(Arc::new(StringArray::from(progress)));
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

fn tables_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partitions", DataType::Int32, false),
        Field::new("partition_key", DataType::Utf8, true),
        Field::new("retention_seconds", DataType::Int64, true),
        Field::new("statements", DataType::Int64, false),
        Field::new("commits", DataType::Int64, false),
        Field::new("ingested_bytes", DataType::Int64, false),
    ]))
}

fn tables_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    use std::sync::atomic::Ordering;
    let tables = store.tables();
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            tables.iter().map(|t| t.def().name.clone()),
        )),
        Arc::new(Int32Array::from_iter_values(
            tables.iter().map(|t| t.def().options.partitions as i32),
        )),
        Arc::new(StringArray::from(
            tables
                .iter()
                .map(|t| t.def().options.partition_key.clone())
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            tables
                .iter()
                .map(|t| t.def().options.retention_secs.map(|s| s as i64))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from_iter_values(
            tables
                .iter()
                .map(|t| t.counters().statements.load(Ordering::Relaxed) as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            tables
                .iter()
                .map(|t| t.counters().commits.load(Ordering::Relaxed) as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            tables
                .iter()
                .map(|t| t.counters().bytes.load(Ordering::Relaxed) as i64),
        )),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

fn watermarks_schema() -> SchemaRef {
    let ts = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Microsecond, None), true);
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        ts("watermark"),
        ts("last_event_time"),
        Field::new("idle", DataType::Boolean, false),
        ts("table_watermark"),
    ]))
}

/// One row per partition of every table with a WATERMARK clause.
fn watermarks_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut names = vec![];
    let mut parts = vec![];
    let mut marks = vec![];
    let mut last = vec![];
    let mut idle = vec![];
    let mut table_marks = vec![];
    for t in store.tables() {
        let Some(w) = t.watermark() else { continue };
        for p in &w.partitions {
            names.push(t.def().name.clone());
            parts.push(p.partition as i32);
            marks.push(p.watermark_us);
            last.push(p.last_event_us);
            idle.push(p.idle);
            table_marks.push(w.watermark_us);
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(Int32Array::from(parts)),
        Arc::new(TimestampMicrosecondArray::from(marks)),
        Arc::new(TimestampMicrosecondArray::from(last)),
        Arc::new(BooleanArray::from(idle)),
        Arc::new(TimestampMicrosecondArray::from(table_marks)),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

/// One row per materialized view: its source, progress and state size.
/// `sluice_catalog.indexes`: each index `CREATE INDEX` made, whether it
/// is built (a table's is built again after a restart by the first read
/// that uses it), its entries and the reads that used it.
fn indexes_batch(store: &LogStore, views: &ViewManager) -> Result<RecordBatch> {
    let (mut names, mut relations, mut columns) = (vec![], vec![], vec![]);
    let (mut built, mut entries, mut scans) = (vec![], vec![], vec![]);
    for def in store.index_defs() {
        let table = store.tables().into_iter().find(|t| t.def().id == def.on);
        let stats = table.as_ref().and_then(|t| {
            t.indexes()
                .into_iter()
                .find(|i| i.name == def.name)
                .map(|i| i.stats())
        });
        let relation = match &table {
            Some(t) => t.name(),
            None => match views.views().into_iter().find(|v| v.def.id == def.on) {
                Some(v) => v.def.name.clone(),
                None => continue,
            },
        };
        names.push(def.name.clone());
        relations.push(relation);
        columns.push(def.columns.join(", "));
        match stats {
            Some(s) => {
                built.push(Some(s.built));
                entries.push(Some(s.entries as i64));
                scans.push(s.scans as i64);
            }
            // A view's index is built per published snapshot.
            None => {
                built.push(None);
                entries.push(None);
                scans.push(store.view_index_scans(&def.name) as i64);
            }
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("index_name", DataType::Utf8, false),
        Field::new("relation_name", DataType::Utf8, false),
        Field::new("columns", DataType::Utf8, false),
        Field::new("built", DataType::Boolean, true),
        Field::new("entries", DataType::Int64, true),
        Field::new("scans", DataType::Int64, false),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(relations)),
            Arc::new(StringArray::from(columns)),
            Arc::new(arrow::array::BooleanArray::from(built)),
            Arc::new(Int64Array::from(entries)),
            Arc::new(Int64Array::from(scans)),
        ],
    )?)
}

fn views_batch(manager: &ViewManager) -> Result<RecordBatch> {
    let views = manager.views();
    let mut consumed = vec![];
    let mut behind = vec![];
    let mut state = vec![];
    let mut marks = vec![];
    let mut late = vec![];
    let mut epochs = vec![];
    let mut ages = vec![];
    let mut progress = vec![];
    let now = crate::checkpoint::now_us();
    for v in &views {
        progress.push(manager.progress(&v.def.name));
        let last = manager.checkpoints().last_committed(v.def.id);
        epochs.push(last.map(|(e, _)| e as i64));
        ages.push(last.map(|(_, at)| (now - at).max(0) as f64 / 1e6));
        let (mark, late_count, _) = v.lateness();
        marks.push(mark);
        late.push(late_count as i64);
        let (offsets, rows) = v.progress();
        let ends = v.source_end();
        consumed.push(offsets.iter().sum::<u64>() as i64);
        behind.push(
            ends.iter()
                .zip(&offsets)
                .map(|(e, c)| e.saturating_sub(*c))
                .sum::<u64>() as i64,
        );
        state.push(rows as i64);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("source_table", DataType::Utf8, false),
        Field::new("definition", DataType::Utf8, false),
        Field::new("consumed_rows", DataType::Int64, false),
        Field::new("lag_rows", DataType::Int64, false),
        Field::new("state_rows", DataType::Int64, false),
        Field::new(
            "watermark",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("late_rows", DataType::Int64, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("last_checkpoint_epoch", DataType::Int64, true),
        Field::new("checkpoint_age_seconds", DataType::Float64, true),
        Field::new("backfill", DataType::Utf8, true),
        Field::new("backfill_done_rows", DataType::Int64, true),
        Field::new("backfill_total_rows", DataType::Int64, true),
        Field::new("backfill_rows_per_second", DataType::Float64, true),
        Field::new("backfill_eta_seconds", DataType::Float64, true),
        Field::new("compute_error", DataType::Utf8, true),
        Field::new("compute_errors", DataType::Int64, false),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            views.iter().map(|v| v.def.name.clone()),
        )),
        Arc::new(StringArray::from_iter_values(
            views.iter().map(|v| v.source.name().to_string()),
        )),
        Arc::new(StringArray::from_iter_values(
            views
                .iter()
                .map(|v| sluice_sql::unmark_asof_joins(&v.def.query)),
        )),
        Arc::new(Int64Array::from(consumed)),
        Arc::new(Int64Array::from(behind)),
        Arc::new(Int64Array::from(state)),
        Arc::new(TimestampMicrosecondArray::from(marks)),
        Arc::new(Int64Array::from(late)),
        Arc::new(StringArray::from(
            views.iter().map(|v| v.failure()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(epochs)),
        Arc::new(Float64Array::from(ages)),
        Arc::new(StringArray::from(
            progress
                .iter()
                .map(|p| p.as_ref().map(|p| p.kind))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            progress
                .iter()
                .map(|p| p.as_ref().map(|p| p.done_rows as i64))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            progress
                .iter()
                .map(|p| p.as_ref().map(|p| p.total_rows as i64))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            progress
                .iter()
                .map(|p| p.as_ref().map(|p| p.rows_per_second))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            progress
                .iter()
                .map(|p| p.as_ref().and_then(|p| p.eta_seconds))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            views.iter().map(|v| v.unavailable()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from_iter_values(
            views.iter().map(|v| v.compute_errors() as i64),
        )),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// Every subscription: its source, where it started, when it last
/// committed and how many records retention took before it read them.
fn subscriptions_batch(subs: &SubscriptionManager) -> Result<RecordBatch> {
    let mut name = vec![];
    let mut source = vec![];
    let mut start = vec![];
    let mut committed_at = vec![];
    let mut skipped = vec![];
    let mut error = vec![];
    for s in subs.subscriptions() {
        if s.def.sink.is_some() {
            continue;
        }
        name.push(s.def.name.clone());
        source.push(s.def.source.clone());
        start.push(match s.def.start {
            sluice_catalog::SubscriptionStart::Earliest => "earliest",
            sluice_catalog::SubscriptionStart::Latest => "latest",
        });
        match s.committed() {
            Some((_, sk, at)) => {
                committed_at.push(Some(at));
                skipped.push(Some(sk.iter().sum::<u64>() as i64));
                error.push(None);
            }
            None => {
                committed_at.push(None);
                skipped.push(None);
                error.push(Some("committed offsets cannot be read".to_string()));
            }
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("subscription_name", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("start", DataType::Utf8, false),
        Field::new(
            "committed_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            true,
        ),
        Field::new("skipped_records", DataType::Int64, true),
        Field::new("error", DataType::Utf8, true),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(name)),
        Arc::new(StringArray::from(source)),
        Arc::new(StringArray::from(start)),
        Arc::new(TimestampMicrosecondArray::from(committed_at).with_timezone("+00:00")),
        Arc::new(Int64Array::from(skipped)),
        Arc::new(StringArray::from(error)),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// How far each consumer (views and subscriptions) is behind its source,
/// per source partition: in records, and in seconds (the age of the oldest
/// record it has not processed, or for a group not committed).
/// One row per partition of every Kafka-fed table: how far the source has
/// read, how far the topic goes, and what went wrong last.
fn sources_batch(sources: &SourceManager) -> Result<RecordBatch> {
    let mut table = vec![];
    let mut topic = vec![];
    let mut partition = vec![];
    let mut owned = vec![];
    let mut high = vec![];
    let mut next = vec![];
    let mut lag = vec![];
    let mut rows = vec![];
    let mut dead = vec![];
    let mut skipped = vec![];
    let mut errors = vec![];
    let mut last_error = vec![];
    let mut last_error_at = vec![];
    for s in sources.statuses() {
        let error = s.last_error();
        for (k, p) in s.partitions.iter().enumerate() {
            let n = p.next_offset.load(Ordering::Relaxed);
            // The broker's statistics come once a second: the end is at
            // least what was read.
            let h = match p.high_watermark.load(Ordering::Relaxed) {
                h if h >= 0 => h.max(n),
                h => h,
            };
            table.push(s.table.clone());
            topic.push(s.topic.clone());
            partition.push(k as i32);
            owned.push(p.owned.load(Ordering::Relaxed));
            high.push((h >= 0).then_some(h));
            next.push((n >= 0).then_some(n));
            lag.push((h >= 0 && n >= 0).then(|| (h - n).max(0)));
            rows.push(p.rows.load(Ordering::Relaxed) as i64);
            dead.push(p.dead_letters.load(Ordering::Relaxed) as i64);
            skipped.push(p.skipped.load(Ordering::Relaxed) as i64);
            errors.push(s.errors.load(Ordering::Relaxed) as i64);
            last_error.push(error.as_ref().map(|(_, e)| e.clone()));
            last_error_at.push(error.as_ref().map(|(at, _)| *at));
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(table)),
        Arc::new(StringArray::from(topic)),
        Arc::new(Int32Array::from(partition)),
        Arc::new(BooleanArray::from(owned)),
        Arc::new(Int64Array::from(high)),
        Arc::new(Int64Array::from(next)),
        Arc::new(Int64Array::from(lag)),
        Arc::new(Int64Array::from(rows)),
        Arc::new(Int64Array::from(dead)),
        Arc::new(Int64Array::from(skipped)),
        Arc::new(Int64Array::from(errors)),
        Arc::new(StringArray::from(last_error)),
        Arc::new(TimestampMicrosecondArray::from(last_error_at).with_timezone("+00:00")),
    ];
    Ok(RecordBatch::try_new(sources_schema(), columns)?)
}

fn sources_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("owned", DataType::Boolean, false),
        Field::new("high_watermark", DataType::Int64, true),
        Field::new("next_offset", DataType::Int64, true),
        Field::new("lag_records", DataType::Int64, true),
        Field::new("rows_read", DataType::Int64, false),
        Field::new("dead_letters", DataType::Int64, false),
        Field::new("skipped_records", DataType::Int64, false),
        Field::new("errors", DataType::Int64, false),
        Field::new("last_error", DataType::Utf8, true),
        Field::new(
            "last_error_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("+00:00"))),
            true,
        ),
    ]))
}

/// One row per sink: what it reads, where it writes, how far it is.
fn sinks_batch(sinks: &SinkManager) -> Result<RecordBatch> {
    let mut name = vec![];
    let mut source = vec![];
    let mut topic = vec![];
    let mut key = vec![];
    let mut records = vec![];
    let mut transactions = vec![];
    let mut position = vec![];
    let mut errors = vec![];
    let mut last_error = vec![];
    let mut last_error_at = vec![];
    for s in sinks.statuses() {
        let error = s.last_error();
        name.push(s.name.clone());
        source.push(s.source.clone());
        topic.push(s.topic.clone());
        key.push((!s.key.is_empty()).then(|| s.key.clone()));
        records.push(s.records_sent.load(Ordering::Relaxed) as i64);
        transactions.push(s.transactions.load(Ordering::Relaxed) as i64);
        position.push(s.position.lock().iter().sum::<u64>() as i64);
        errors.push(s.errors.load(Ordering::Relaxed) as i64);
        last_error.push(error.as_ref().map(|(_, e)| e.clone()));
        last_error_at.push(error.as_ref().map(|(at, _)| *at));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("sink_name", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("topic", DataType::Utf8, false),
        Field::new("key", DataType::Utf8, true),
        Field::new("records_sent", DataType::Int64, false),
        Field::new("transactions", DataType::Int64, false),
        Field::new("rows_read", DataType::Int64, false),
        Field::new("errors", DataType::Int64, false),
        Field::new("last_error", DataType::Utf8, true),
        Field::new(
            "last_error_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("+00:00"))),
            true,
        ),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(name)),
        Arc::new(StringArray::from(source)),
        Arc::new(StringArray::from(topic)),
        Arc::new(StringArray::from(key)),
        Arc::new(Int64Array::from(records)),
        Arc::new(Int64Array::from(transactions)),
        Arc::new(Int64Array::from(position)),
        Arc::new(Int64Array::from(errors)),
        Arc::new(StringArray::from(last_error)),
        Arc::new(TimestampMicrosecondArray::from(last_error_at).with_timezone("+00:00")),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn lag_batch(views: &ViewManager, subs: &SubscriptionManager) -> Result<RecordBatch> {
    let now = crate::checkpoint::now_us();
    let mut consumer = vec![];
    let mut kind = vec![];
    let mut source = vec![];
    let mut partition = vec![];
    let mut committed = vec![];
    let mut processed = vec![];
    let mut end = vec![];
    let mut lag = vec![];
    let mut lag_seconds = vec![];
    let mut skipped = vec![];
    for v in views.views() {
        let (done, _) = v.progress();
        let ends = v.source_end();
        let saved = v.checkpointed_offsets();
        for (k, (&d, &e)) in done.iter().zip(&ends).enumerate() {
            consumer.push(v.def.name.clone());
            kind.push("view");
            let at = v.source.input_at(k);
            source.push(match &at {
                Some((input, _)) => input.name(),
                None => v.source.name(),
            });
            partition.push(at.as_ref().map_or(k, |(_, p)| *p) as i32);
            committed.push(saved.get(k).map(|&c| c as i64));
            processed.push(Some(d as i64));
            end.push(e as i64);
            lag.push(e.saturating_sub(d) as i64);
            let oldest = match &at {
                Some((crate::stream::ViewSource::Table(t), p)) if e > d => {
                    t.partitions().get(*p).and_then(|p| p.ingested_at(d))
                }
                Some((crate::stream::ViewSource::Table(_), _)) => Some(now),
                _ => None,
            };
            lag_seconds.push(oldest.map(|t| (now - t).max(0) as f64 / 1e6));
            skipped.push(0i64);
        }
    }
    for g in subs.lag() {
        consumer.push(g.name);
        kind.push(if g.sink { "sink" } else { "subscription" });
        source.push(g.source);
        partition.push(g.partition as i32);
        committed.push(Some(g.committed as i64));
        processed.push(None);
        end.push(g.end as i64);
        lag.push(g.end.saturating_sub(g.committed) as i64);
        lag_seconds.push(g.oldest_unread_us.map(|t| (now - t).max(0) as f64 / 1e6));
        skipped.push(g.skipped as i64);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("consumer", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("committed_offset", DataType::Int64, true),
        Field::new("processed_offset", DataType::Int64, true),
        Field::new("end_offset", DataType::Int64, false),
        Field::new("lag_records", DataType::Int64, false),
        Field::new("lag_seconds", DataType::Float64, true),
        Field::new("skipped_records", DataType::Int64, false),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(consumer)),
        Arc::new(StringArray::from(kind)),
        Arc::new(StringArray::from(source)),
        Arc::new(Int32Array::from(partition)),
        Arc::new(Int64Array::from(committed)),
        Arc::new(Int64Array::from(processed)),
        Arc::new(Int64Array::from(end)),
        Arc::new(Int64Array::from(lag)),
        Arc::new(Float64Array::from(lag_seconds)),
        Arc::new(Int64Array::from(skipped)),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// One row per open connection, as PostgreSQL's `pg_stat_activity` has it.
fn sessions_batch(connections: &ConnectionRegistry) -> Result<RecordBatch> {
    let rows = connections.activity();
    let ts = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Microsecond, None), true);
    let micros = |t: Option<std::time::SystemTime>| {
        t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_micros() as i64)
    };
    let text = |f: fn(&ActivityRow) -> &str| {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("pid", DataType::Int32, false),
        Field::new("user_name", DataType::Utf8, false),
        Field::new("database", DataType::Utf8, false),
        Field::new("application_name", DataType::Utf8, false),
        Field::new("client_addr", DataType::Utf8, false),
        ts("backend_start"),
        Field::new("state", DataType::Utf8, false),
        Field::new("query", DataType::Utf8, false),
        ts("query_start"),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.pid))),
        text(|r| &r.user),
        text(|r| &r.database),
        text(|r| &r.application_name),
        text(|r| &r.client_addr),
        Arc::new(TimestampMicrosecondArray::from(
            rows.iter()
                .map(|r| micros(r.backend_start))
                .collect::<Vec<_>>(),
        )),
        text(|r| r.state.as_str()),
        text(|r| &*r.query),
        Arc::new(TimestampMicrosecondArray::from(
            rows.iter()
                .map(|r| micros(r.query_start))
                .collect::<Vec<_>>(),
        )),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// Recent checkpoint attempts of every view, failed ones included.
fn checkpoints_batch(views: &ViewManager) -> Result<RecordBatch> {
    let records = views.checkpoints().records();
    let ts = |n: &str, null| Field::new(n, DataType::Timestamp(TimeUnit::Microsecond, None), null);
    let schema = Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("epoch", DataType::Int64, false),
        Field::new("attempt", DataType::Int32, false),
        ts("started", false),
        ts("completed", true),
        Field::new("duration_ms", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("source_offsets", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
    ]));
    let offsets = |o: &[u64]| {
        let parts: Vec<String> = o
            .iter()
            .enumerate()
            .map(|(p, o)| format!("{p}=>{o}"))
            .collect();
        format!("({})", parts.join(", "))
    };
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.view.clone()),
        )),
        Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.epoch as i64),
        )),
        Arc::new(Int32Array::from_iter_values(
            records.iter().map(|r| r.attempt as i32),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            records.iter().map(|r| r.started_at_us),
        )),
        Arc::new(TimestampMicrosecondArray::from(
            records
                .iter()
                .map(|r| r.completed_at_us)
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.duration_ms as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.bytes as i64),
        )),
        Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| offsets(&r.source_offsets)),
        )),
        Arc::new(StringArray::from(
            records.iter().map(|r| r.error.clone()).collect::<Vec<_>>(),
        )),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// Rows each view refused because their window had closed (the newest
/// 100,000 per view; `sluice_catalog.views.late_rows` counts all).
/// One row per operator of each view: where its state is and grows.
fn view_operators_batch(views: &ViewManager) -> Result<RecordBatch> {
    let mut view_names = vec![];
    let mut ids = vec![];
    let mut kinds = vec![];
    let mut descriptions = vec![];
    let mut state_rows = vec![];
    let mut state_bytes = vec![];
    let mut input_rows = vec![];
    let mut output_rows = vec![];
    let mut watermarks = vec![];
    for v in views.views() {
        let (operators, watermark) = v.operators();
        for (i, op) in operators.into_iter().enumerate() {
            view_names.push(v.def.name.clone());
            ids.push(i as i32);
            kinds.push(op.kind);
            descriptions.push(op.description);
            state_rows.push(op.state_rows as i64);
            state_bytes.push(op.state_bytes as i64);
            input_rows.push(op.input_rows as i64);
            output_rows.push(op.output_rows as i64);
            watermarks.push(watermark);
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("operator", DataType::Int32, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("description", DataType::Utf8, false),
        Field::new("state_rows", DataType::Int64, false),
        Field::new("state_bytes", DataType::Int64, false),
        Field::new("input_rows", DataType::Int64, false),
        Field::new("output_rows", DataType::Int64, false),
        Field::new(
            "watermark",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(view_names)),
        Arc::new(Int32Array::from(ids)),
        Arc::new(StringArray::from(kinds)),
        Arc::new(StringArray::from(descriptions)),
        Arc::new(Int64Array::from(state_rows)),
        Arc::new(Int64Array::from(state_bytes)),
        Arc::new(Int64Array::from(input_rows)),
        Arc::new(Int64Array::from(output_rows)),
        Arc::new(TimestampMicrosecondArray::from(watermarks)),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}

fn late_rows_batch(views: &ViewManager) -> Result<RecordBatch> {
    let mut view_names = vec![];
    let mut tables = vec![];
    let mut parts = vec![];
    let mut offsets = vec![];
    let mut times = vec![];
    let mut marks = vec![];
    for v in views.views() {
        let (_, _, rows) = v.lateness();
        for r in rows {
            view_names.push(v.def.name.clone());
            tables.push(
                v.source
                    .inputs()
                    .get(r.input as usize)
                    .map_or_else(|| v.source.name(), |i| i.name()),
            );
            parts.push(r.partition as i32);
            offsets.push(r.offset as i64);
            times.push(r.event_time_us);
            marks.push(r.watermark_us);
        }
    }
    let ts = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Microsecond, None), false);
    let schema = Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        ts("event_time"),
        ts("watermark"),
    ]));
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(view_names)),
        Arc::new(StringArray::from(tables)),
        Arc::new(Int32Array::from(parts)),
        Arc::new(Int64Array::from(offsets)),
        Arc::new(TimestampMicrosecondArray::from(times)),
        Arc::new(TimestampMicrosecondArray::from(marks)),
    ];
    Ok(RecordBatch::try_new(schema, arrays)?)
}
