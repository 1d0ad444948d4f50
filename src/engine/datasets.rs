//! Datasets: `CREATE DATASET`, `REFRESH DATASET` (a new version),
//! `COPY DATASET ... TO` (the rows as Parquet and a manifest beside them),
//! `VERIFY DATASET` and `DROP DATASET`.
//!
//! A version is a query over a cut of the log (`name@version`, which pins
//! what it reads) and keeps no rows: writing it out or verifying it
//! computes it again, reading every table and materialized view the query
//! names at that cut. The rows come out in one order whatever the plan
//! did (by the split part, then by every column), a `split` column is
//! added when the dataset is split (by `hash64(split_key, seed)`, so a
//! key's rows are all in one part and stay there), and their content hash
//! (SHA-256 of the column names and types and every value, see
//! [`ContentHasher`]) is what a version records and `VERIFY` compares.
//!
//! A version streams ([`stream_version`]): the order is a sort on one
//! binary key (arrow's row format of the split part and every column, the
//! order the rows have always had), which DataFusion sorts within
//! `--query-memory`, spilling to disk past it; the rows are hashed and
//! counted as they come, and `COPY DATASET` writes them to the file as
//! they come (one pass: a hash that differs from the version's removes
//! the file and fails with 55000).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::checkpoint::format::ParquetStreamWriter;
use sluice_catalog::{DatasetDef, DatasetSplit, DatasetVersion};

use crate::types::PgType;

use super::*;

/// What streaming a version's rows gives besides the rows.
pub(super) struct Summary {
    pub(super) rows: u64,
    pub(super) split_rows: Vec<(String, u64)>,
    pub(super) content_hash: String,
}

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn dataset_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        let role = session.role();
        match stmt {
            Statement::CreateDataset(d) => {
                if self.store.dataset_def(&d.name).is_some() {
                    return Err(sluice_catalog::CatalogError::DuplicateDataset(d.name).into());
                }
                if let Some(function) = sluice_sql::unfixed_function(&d.query) {
                    return Err(SluiceError::NotFixed {
                        function,
                        object: "a dataset",
                    });
                }
                let split = d.split.map(|s| DatasetSplit {
                    parts: s.parts,
                    key: s.key,
                    seed: s.seed,
                });
                let mut def = DatasetDef {
                    id: 0,
                    name: d.name.clone(),
                    query: d.query.to_string(),
                    split,
                    owner: role.name.clone(),
                    versions: Vec::new(),
                };
                let version = self.new_version(session, &def, d.at_cut.as_deref()).await?;
                def.versions.push(version.clone());
                if let Err(e) = self.store.create_dataset_def(def) {
                    let _ = self.store.drop_cut_def(&version.cut);
                    return Err(e.into());
                }
                Ok(Outcome::done("CREATE DATASET"))
            }
            Statement::RefreshDataset { name, at_cut } => {
                let mut def = self.owned_dataset(&role, &name)?;
                let version = self.new_version(session, &def, at_cut.as_deref()).await?;
                def.versions.push(version.clone());
                if let Err(e) = self.store.replace_dataset_def(def) {
                    let _ = self.store.drop_cut_def(&version.cut);
                    return Err(e.into());
                }
                Ok(Outcome::done("REFRESH DATASET"))
            }
            Statement::CopyDataset {
                name,
                version,
                location,
            } => {
                let def = self.dataset(&name)?;
                let v = version_of(&def, version)?;
                let location = file_in_directory(&location, &name, v.version);
                let (summary, written) = write_version(
                    &self.planner,
                    &self.views,
                    &session.role(),
                    &def,
                    &v,
                    &location,
                )
                .await?;
                let rows = summary.rows;
                let manifest = dataset_manifest(&self.store, &def, &v, rows)?;
                let sha256 = written.sha256()?;
                written.publish(&location).await?;
                export::put(&format!("{location}.manifest.json"), manifest.into()).await?;
                self.register_export(
                    session,
                    &location,
                    Some((name.clone(), v.version)),
                    rows,
                    sha256,
                )?;
                Ok(Outcome::Done {
                    tag: "COPY",
                    rows: Some(rows),
                })
            }
            Statement::VerifyDataset { name, version } => {
                let def = self.dataset(&name)?;
                let v = version_of(&def, Some(version))?;
                let computed = self.summarize(session, &def, &v.cut).await?;
                let schema = verify_schema();
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(StringArray::from(vec![name])),
                    Arc::new(arrow::array::Int64Array::from(vec![v.version as i64])),
                    Arc::new(arrow::array::Int64Array::from(vec![computed.rows as i64])),
                    Arc::new(StringArray::from(vec![v.content_hash.clone()])),
                    Arc::new(StringArray::from(vec![computed.content_hash.clone()])),
                    Arc::new(arrow::array::BooleanArray::from(vec![
                        computed.content_hash == v.content_hash,
                    ])),
                ];
                Ok(Outcome::Batches {
                    batches: vec![RecordBatch::try_new(schema.clone(), columns)?],
                    schema,
                    tag: "VERIFY",
                })
            }
            Statement::DropDataset { names, if_exists } => {
                for name in &names {
                    match self.store.dataset_def(name) {
                        Some(_) => {
                            self.owned_dataset(&role, name)?;
                        }
                        None if if_exists => {}
                        None => {
                            return Err(sluice_catalog::CatalogError::UndefinedDataset(
                                name.clone(),
                            )
                            .into())
                        }
                    }
                }
                for name in &names {
                    if self.store.dataset_def(name).is_some() {
                        self.store.drop_dataset_def(name)?;
                    }
                }
                Ok(Outcome::done("DROP DATASET"))
            }
            _ => Err(SluiceError::Internal("not a dataset statement".into())),
        }
    }

    fn dataset(&self, name: &str) -> Result<DatasetDef, SluiceError> {
        self.store
            .dataset_def(name)
            .ok_or_else(|| sluice_catalog::CatalogError::UndefinedDataset(name.to_string()).into())
    }

    /// The dataset, when `role` owns it (or is a superuser).
    fn owned_dataset(&self, role: &SessionRole, name: &str) -> Result<DatasetDef, SluiceError> {
        let def = self.dataset(name)?;
        self.check_owns(role, &def.owner, "dataset", name)?;
        Ok(def)
    }

    /// The tables the query reads, directly or through materialized views.
    fn dataset_tables(&self, query: &ast::Query) -> Vec<Arc<crate::log::TableLog>> {
        let mut tables: Vec<Arc<crate::log::TableLog>> = Vec::new();
        let mut add = |t: Arc<crate::log::TableLog>| {
            if !tables.iter().any(|x| Arc::ptr_eq(x, &t)) {
                tables.push(t);
            }
        };
        for (_, name) in self.relations_named(query) {
            if let Some(t) = self.store.table(&name) {
                add(t);
            } else if let Some(v) = self.views.view(&name) {
                for input in v.source.inputs() {
                    if let crate::stream::ViewSource::Table(t) = input {
                        add(t);
                    }
                }
            }
        }
        tables
    }

    /// Takes the next version's cut (of the tables the query reads, or a
    /// copy of `at_cut`'s positions for them) and computes the version.
    async fn new_version(
        &self,
        session: &Session,
        def: &DatasetDef,
        at_cut: Option<&str>,
    ) -> Result<DatasetVersion, SluiceError> {
        let role = session.role();
        let query = parse_dataset_query(&def.query)?;
        let number = def.versions.last().map_or(1, |v| v.version + 1);
        let cut = format!("{}@{number}", def.name);
        let tables = self.dataset_tables(&query);
        match at_cut {
            None => {
                crate::log::cut::take_cut(&self.store, &cut, &tables, false, &role.name).await?;
            }
            Some(from) => {
                let source = self
                    .store
                    .cut_def(from)
                    .ok_or_else(|| crate::log::cut::CutError::UndefinedCut(from.to_string()))?;
                let mut covered = Vec::new();
                for t in &tables {
                    let c = source
                        .tables
                        .iter()
                        .find(|c| c.table_id == t.def().id)
                        .ok_or_else(|| crate::log::cut::CutError::NotCovered {
                            cut: from.to_string(),
                            table: t.name(),
                        })?;
                    covered.push(c.clone());
                }
                self.store.create_cut_def(sluice_catalog::CutDef {
                    id: 0,
                    name: cut.clone(),
                    created_at_us: crate::checkpoint::now_us(),
                    all_tables: false,
                    owner: role.name.clone(),
                    tables: covered,
                    view_checkpoints: Vec::new(),
                })?;
            }
        }
        match self.summarize(session, def, &cut).await {
            Ok(c) => Ok(DatasetVersion {
                version: number,
                cut,
                created_at_us: crate::checkpoint::now_us(),
                rows: c.rows,
                split_rows: c.split_rows,
                content_hash: c.content_hash,
            }),
            Err(e) => {
                // Nothing of a version that could not be computed stays.
                let _ = self.store.drop_cut_def(&cut);
                Err(e)
            }
        }
    }

    /// The dataset's rows at `cut` counted and hashed as they stream.
    async fn summarize(
        &self,
        session: &Session,
        def: &DatasetDef,
        cut: &str,
    ) -> Result<Summary, SluiceError> {
        summarize(&self.planner, &self.views, &session.role(), def, cut).await
    }
}

/// The dataset's rows at `cut` counted and hashed as they stream, none
/// kept.
pub(super) async fn summarize(
    planner: &Planner,
    views: &ViewManager,
    role: &SessionRole,
    def: &DatasetDef,
    cut: &str,
) -> Result<Summary, SluiceError> {
    stream_version(planner, views, role, def, cut, |_| Ok(())).await
}

/// Writes version `v` as Parquet as its rows stream, to a file beside
/// `location` (or a local one for an object store), checking its hash at
/// the end: a version that no longer computes to it leaves no file and
/// fails with 55000. `COPY DATASET` and an erasure's rewrite of a
/// version's export both write through here, so the same rows make the
/// same bytes.
pub(super) async fn write_version(
    planner: &Planner,
    views: &ViewManager,
    role: &SessionRole,
    def: &DatasetDef,
    v: &DatasetVersion,
    location: &str,
) -> Result<(Summary, WrittenFile), SluiceError> {
    let file = WrittenFile::beside(location)?;
    let mut writer: Option<ParquetStreamWriter<std::io::BufWriter<std::fs::File>>> = None;
    let mut pending = Rechunked::default();
    let write = |b: &RecordBatch, writer: &mut Option<_>| -> Result<(), SluiceError> {
        let w = match writer {
            Some(w) => w,
            None => writer.insert(
                ParquetStreamWriter::try_new(std::io::BufWriter::new(file.create()?), &b.schema())
                    .map_err(parquet_error)?,
            ),
        };
        w.write(b).map_err(parquet_error)
    };
    let streamed = stream_version(planner, views, role, def, &v.cut, |b| {
        for chunk in pending.push(b)? {
            write(&chunk, &mut writer)?;
        }
        Ok(())
    })
    .await;
    let summary = match streamed {
        Ok(s) => s,
        Err(e) => {
            file.remove();
            return Err(e);
        }
    };
    let finished = pending
        .finish()
        .and_then(|last| last.iter().try_for_each(|b| write(b, &mut writer)))
        .and_then(|_| match writer.take() {
            Some(w) => w.finish().map_err(parquet_error),
            // No rows: the file is empty, as before.
            None => file.create().map(|_| ()),
        });
    if let Err(e) = finished {
        file.remove();
        return Err(e);
    }
    if summary.content_hash != v.content_hash {
        file.remove();
        return Err(SluiceError::ObjectNotReady(format!(
            "dataset \"{}\" version {} no longer computes to its content hash (the log under its cut changed: an erasure?); VERIFY DATASET {} VERSION {} says more",
            def.name, v.version, def.name, v.version
        )));
    }
    Ok((summary, file))
}

fn parquet_error(e: parquet::errors::ParquetError) -> SluiceError {
    SluiceError::Internal(format!("encoding Parquet: {e}"))
}

/// Batches cut into pieces of [`FILE_BATCH_ROWS`] rows whatever sizes
/// came in, so that the same rows make the same Parquet bytes however the
/// sort handed them over.
#[derive(Default)]
struct Rechunked {
    held: Vec<RecordBatch>,
    rows: usize,
}

/// The rows of each batch `COPY DATASET` hands the Parquet writer.
const FILE_BATCH_ROWS: usize = 8192;

impl Rechunked {
    /// Takes `b`; returns the whole pieces it completes.
    fn push(&mut self, b: &RecordBatch) -> Result<Vec<RecordBatch>, SluiceError> {
        self.held.push(b.clone());
        self.rows += b.num_rows();
        let mut out = Vec::new();
        if self.rows < FILE_BATCH_ROWS {
            return Ok(out);
        }
        let all = arrow::compute::concat_batches(&b.schema(), &self.held)?;
        let mut at = 0;
        while all.num_rows() - at >= FILE_BATCH_ROWS {
            out.push(all.slice(at, FILE_BATCH_ROWS));
            at += FILE_BATCH_ROWS;
        }
        let rest = all.slice(at, all.num_rows() - at);
        self.rows = rest.num_rows();
        self.held = vec![rest];
        Ok(out)
    }

    /// The last piece (fewer rows), if any.
    fn finish(self) -> Result<Vec<RecordBatch>, SluiceError> {
        match self.held.first() {
            Some(first) if self.rows > 0 => Ok(vec![arrow::compute::concat_batches(
                &first.schema(),
                &self.held,
            )?]),
            _ => Ok(Vec::new()),
        }
    }
}

/// A dataset file being written: beside its destination on a server path
/// (renamed into place at the end), or a local file for an object store
/// (uploaded in parts at the end).
pub(super) struct WrittenFile {
    path: std::path::PathBuf,
}

static NEXT_WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl WrittenFile {
    fn beside(location: &str) -> Result<WrittenFile, SluiceError> {
        let n = NEXT_WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let suffix = format!(".partial-{}-{n}", std::process::id());
        let path = match location.starts_with("s3://") {
            true => std::env::temp_dir().join(format!("sluice-dataset{suffix}")),
            false => std::path::PathBuf::from(format!("{location}{suffix}")),
        };
        // A server path's directory is made as an export makes it.
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| SluiceError::Io(format!("writing {location}: {e}")))?;
        }
        Ok(WrittenFile { path })
    }

    fn create(&self) -> Result<std::fs::File, SluiceError> {
        std::fs::File::create(&self.path)
            .map_err(|e| SluiceError::Io(format!("writing {}: {e}", self.path.display())))
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// SHA-256 of the file's bytes, read in pieces.
    pub(super) fn sha256(&self) -> Result<String, SluiceError> {
        use std::io::Read;
        let mut f = std::fs::File::open(&self.path)
            .map_err(|e| SluiceError::Io(format!("reading {}: {e}", self.path.display())))?;
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| SluiceError::Io(format!("reading {}: {e}", self.path.display())))?;
            if n == 0 {
                break;
            }
            ctx.update(&buf[..n]);
        }
        Ok(ctx
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }

    /// Puts the file at `location`: renamed there on a server path,
    /// uploaded to an object store.
    pub(super) async fn publish(self, location: &str) -> Result<(), SluiceError> {
        if location.starts_with("s3://") {
            let put = export::put_file(location, &self.path).await;
            self.remove();
            return put;
        }
        std::fs::rename(&self.path, location).map_err(|e| {
            self.remove();
            SluiceError::Io(format!("writing {location}: {e}"))
        })
    }
}

/// What `COPY DATASET` writes beside the rows.
pub(super) fn dataset_manifest(
    store: &LogStore,
    def: &DatasetDef,
    v: &DatasetVersion,
    rows: u64,
) -> Result<String, SluiceError> {
    let cut = store.cut_def(&v.cut);
    let tables: Vec<serde_json::Value> = cut
        .iter()
        .flat_map(|c| &c.tables)
        .map(|t| {
            let name = store
                .tables()
                .iter()
                .find(|x| x.def().id == t.table_id)
                .map(|x| x.name());
            serde_json::json!({"table": name, "starts": t.starts, "ends": t.ends})
        })
        .collect();
    let manifest = serde_json::json!({
        "dataset": def.name,
        "version": v.version,
        "query": def.query,
        "cut": {"name": v.cut, "tables": tables},
        "split": def.split.as_ref().map(|s| serde_json::json!({
            "parts": s.parts, "key": s.key, "seed": s.seed,
        })),
        // The last erasure the file reflects.
        "erasure_ledger_position": store.erasures().lock().next_id() - 1,
        "rows": rows,
        "rows_per_split": v.split_rows,
        "content_hash": v.content_hash,
        "content_hash_of": "SHA-256 of the column names and types (as PostgreSQL's format_type spells them), then each value in the file's order, each after its length as 4 little-endian bytes (a NULL as length 0xFFFFFFFF alone): integers, floats, dates, times and timestamps as their little-endian bytes, text and bytea as themselves, anything else as its text",
        "created_at_us": v.created_at_us,
        "format": "parquet",
    });
    serde_json::to_string_pretty(&manifest).map_err(|e| SluiceError::Internal(e.to_string()))
}

/// The rows of a batch a version is computed in.
const DATASET_BATCH_ROWS: usize = 2048;

/// Streams the dataset's rows at `cut` to `each` in the file's order,
/// split, counting and hashing them as they pass: the query is sorted by
/// one key, arrow's row format of the split part and every column (NULLs
/// first, as the order has always been), so DataFusion's external sort
/// keeps memory within `--query-memory`.
pub(super) async fn stream_version(
    planner: &Planner,
    views: &ViewManager,
    role: &SessionRole,
    def: &DatasetDef,
    cut: &str,
    mut each: impl FnMut(&RecordBatch) -> Result<(), SluiceError>,
) -> Result<Summary, SluiceError> {
    use datafusion::logical_expr::{col, expr::ScalarFunction, Expr, LogicalPlanBuilder};
    let mut query = parse_dataset_query(&def.query)?;
    sluice_sql::read_relations_at(&mut query, cut, |r| {
        planner.store.table(r).is_some() || views.view(r).is_some()
    })?;
    let (plan, columns) = planner
        .plan_shown(ast::Statement::Query(Box::new(query)), role)
        .await?;
    // The file's columns: the query's, named as shown (and typed as the
    // plan types them), then the split part.
    let mut fields: Vec<Field> = plan
        .schema()
        .fields()
        .iter()
        .zip(columns.fields())
        .map(|(f, shown)| {
            f.as_ref()
                .clone()
                .with_nullable(true)
                .with_name(shown.name())
        })
        .collect();
    // By position: the query's names may repeat.
    let positional: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .enumerate()
        .map(|(i, c)| Expr::Column(c).alias(format!("c{i}")))
        .collect();
    let mut kept: Vec<Expr> = (0..fields.len()).map(|i| col(format!("c{i}"))).collect();
    let mut builder = LogicalPlanBuilder::from(plan).project(positional)?;
    let mut keys = kept.clone();
    if let Some(split) = &def.split {
        let at = fields
            .iter()
            .position(|f| f.name() == &split.key)
            .ok_or_else(|| {
                SluiceError::UndefinedColumn(format!(
                    "{} (the split_key, among the dataset's columns)",
                    split.key
                ))
            })?;
        let part = Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(split_part_udf(split.clone())),
            vec![col(format!("c{at}"))],
        ));
        let mut with_part = kept.clone();
        with_part.push(part.alias("split_part"));
        builder = builder.project(with_part)?;
        kept.push(col("split_part"));
        keys.insert(0, col("split_part"));
        fields.push(Field::new("split", DataType::Utf8, false));
    }
    let key = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(order_key_udf()), keys));
    let mut with_key = kept.clone();
    with_key.push(key.alias("order_key"));
    let plan = builder
        .project(with_key)?
        .sort(vec![col("order_key").sort(true, false)])?
        .project(kept)?
        .build()?;
    let schema = Arc::new(Schema::new(fields));
    // Read at a cut: no transaction's writes or snapshot apply.
    let mut state = planner.ctx.state();
    state.config_mut().set_extension(Arc::new(role.clone()));
    // The sort merges what it spilled with a small reservation, so that
    // even a `--query-memory` of a few batches leaves room to sort.
    // Batches of fewer rows than queries use, so that each one the sort
    // holds is a small part of a small `--query-memory` too.
    state
        .config_mut()
        .options_mut()
        .execution
        .sort_spill_reservation_bytes = 1 << 20;
    // One sort, not one per partition merged: DataFusion's merge of many
    // partitions' spill files takes memory it cannot spill, which a small
    // `--query-memory` cannot give. A table of several partitions scans as
    // several streams; without `repartition_sorts` off, the optimizer would
    // sort each and merge them (53200 under load, when the four sorts'
    // merges meet).
    state.config_mut().options_mut().optimizer.repartition_sorts = false;
    let config = std::mem::take(state.config_mut())
        .with_batch_size(DATASET_BATCH_ROWS)
        .with_target_partitions(1);
    *state.config_mut() = config;
    let df = DataFrame::new(state, plan);
    let task = Arc::new(df.task_ctx());
    let physical = {
        let _snapshot = planner.store.transactions().snapshot_guard().await;
        df.create_physical_plan().await?
    };
    let mut stream = datafusion::physical_plan::execute_stream(physical, task)?;
    let mut hasher = ContentHasher::new(&schema);
    let mut rows = 0u64;
    let mut split_rows: Vec<(String, u64)> = def
        .split
        .iter()
        .flat_map(|s| s.parts.iter().map(|(p, _)| (p.clone(), 0)))
        .collect();
    use futures::StreamExt;
    while let Some(batch) = stream.next().await {
        let batch = RecordBatch::try_new(schema.clone(), batch?.columns().to_vec())?;
        if batch.num_rows() == 0 {
            continue;
        }
        hasher.update(&batch)?;
        rows += batch.num_rows() as u64;
        if def.split.is_some() {
            let parts = batch.column(batch.num_columns() - 1).as_string::<i32>();
            for part in parts.iter().flatten() {
                if let Some((_, n)) = split_rows.iter_mut().find(|(p, _)| p == part) {
                    *n += 1;
                }
            }
        }
        each(&batch)?;
    }
    Ok(Summary {
        rows,
        split_rows,
        content_hash: hasher.finish(),
    })
}

/// `split_part(key)`: the part of a split dataset a row's key puts it in
/// (see [`part_of`]).
fn split_part_udf(split: DatasetSplit) -> datafusion::logical_expr::ScalarUDF {
    use datafusion::logical_expr::{ColumnarValue, Volatility};
    let f = move |args: &[ColumnarValue]| -> datafusion::common::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let key = &arrays[0];
        let hashes = crate::query::stable_hash::row_hashes(
            std::slice::from_ref(key),
            split.seed as u64,
            key.len(),
        )?;
        let parts: StringArray = hashes.iter().map(|h| Some(part_of(&split, *h))).collect();
        Ok(ColumnarValue::Array(Arc::new(parts)))
    };
    datafusion::logical_expr::ScalarUDF::new_from_impl(AnyArgs {
        name: "split_part",
        signature: datafusion::logical_expr::Signature::any(1, Volatility::Immutable),
        returns: DataType::Utf8,
        compute: Arc::new(f),
    })
}

/// `order_key(c1, c2, ...)`: arrow's row format of the columns, ascending
/// with NULLs first: byte order is the rows' order.
fn order_key_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::logical_expr::{ColumnarValue, Volatility};
    let f = |args: &[ColumnarValue]| -> datafusion::common::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        Ok(ColumnarValue::Array(Arc::new(order_keys(&arrays)?)))
    };
    datafusion::logical_expr::ScalarUDF::new_from_impl(AnyArgs {
        name: "order_key",
        signature: datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable),
        returns: DataType::Binary,
        compute: Arc::new(f),
    })
}

/// Each row's sort key: arrow's row format of `columns` (ascending, NULLs
/// first), whose byte order is the rows' order.
fn order_keys(columns: &[ArrayRef]) -> Result<arrow::array::BinaryArray, arrow::error::ArrowError> {
    let converter = arrow::row::RowConverter::new(
        columns
            .iter()
            .map(|a| arrow::row::SortField::new(a.data_type().clone()))
            .collect(),
    )?;
    let rows = converter.convert_columns(columns)?;
    // Sized exactly: the sort counts what the keys take.
    let bytes = rows.iter().map(|r| r.as_ref().len()).sum();
    let mut keys = arrow::array::BinaryBuilder::with_capacity(rows.num_rows(), bytes);
    for r in rows.iter() {
        keys.append_value(r.as_ref());
    }
    Ok(keys.finish())
}

type ComputeFn = Arc<
    dyn Fn(
            &[datafusion::logical_expr::ColumnarValue],
        ) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue>
        + Send
        + Sync,
>;

/// A function of any arguments with a fixed result type, for the plans
/// of one version's computation.
struct AnyArgs {
    name: &'static str,
    signature: datafusion::logical_expr::Signature,
    returns: DataType,
    compute: ComputeFn,
}

impl std::fmt::Debug for AnyArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for AnyArgs {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.compute, &other.compute)
    }
}

impl Eq for AnyArgs {}

impl std::hash::Hash for AnyArgs {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for AnyArgs {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue> {
        (self.compute)(&args.args)
    }
}

/// The row `VERIFY DATASET` answers with (known when it is prepared).
pub(super) fn verify_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("dataset", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("content_hash", DataType::Utf8, false),
        Field::new("computed_hash", DataType::Utf8, false),
        Field::new("verified", DataType::Boolean, false),
    ]))
}

/// `COPY DATASET d TO` a directory (a server directory that exists, or an
/// `s3://` key ending in `/`) writes `d-v<version>.parquet` in it, with the
/// manifest beside it; any other location is the file itself.
fn file_in_directory(location: &str, name: &str, version: u32) -> String {
    let file = format!("{name}-v{version}.parquet");
    let is_directory = match location.strip_prefix("s3://") {
        Some(_) => location.ends_with('/'),
        None => location.ends_with('/') || std::path::Path::new(location).is_dir(),
    };
    match is_directory {
        true => format!("{}/{file}", location.trim_end_matches('/')),
        false => location.to_string(),
    }
}

fn parse_dataset_query(sql: &str) -> Result<ast::Query, SluiceError> {
    match parse_sql(sql)? {
        Statement::Query(q) => match *q {
            ast::Statement::Query(q) => Ok(*q),
            _ => Err(SluiceError::Internal(format!("not a query: {sql}"))),
        },
        _ => Err(SluiceError::Internal(format!("not a query: {sql}"))),
    }
}

fn version_of(def: &DatasetDef, version: Option<u32>) -> Result<DatasetVersion, SluiceError> {
    let found = match version {
        Some(n) => def.versions.iter().find(|v| v.version == n),
        None => def.versions.last(),
    };
    found.cloned().ok_or_else(|| SluiceError::Evaluation {
        sqlstate: "22023",
        message: format!(
            "dataset \"{}\" has no version {} (it has {})",
            def.name,
            version.unwrap_or(0),
            def.versions
                .iter()
                .map(|v| v.version.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The part a row whose key hashes to `hash` is in: its place in a
/// million, against the parts' shares in order.
fn part_of(split: &DatasetSplit, hash: u64) -> &str {
    let place = (hash % 1_000_000) as f64;
    let mut upto = 0.0;
    for (name, share) in &split.parts {
        upto += share * 10_000.0;
        if place < upto {
            return name;
        }
    }
    split.parts.last().map_or("", |(n, _)| n.as_str())
}

/// SHA-256 of the column names and types (as PostgreSQL's `format_type`
/// spells them), then every value, each with its
/// length (a NULL as a length no value has): integers, floats, dates,
/// times and timestamps as their little-endian bytes, text and bytea as
/// themselves, anything else (booleans too) as its text. Fed batch by
/// batch in the file's order.
pub(super) struct ContentHasher {
    ctx: ring::digest::Context,
    buf: Vec<u8>,
}

fn put_value(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

impl ContentHasher {
    pub(super) fn new(schema: &Schema) -> ContentHasher {
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
        for f in schema.fields() {
            put_value(&mut buf, f.name().as_bytes());
            // PostgreSQL's spelling, which no library upgrade changes.
            put_value(&mut buf, PgType::of_field(f).format().as_bytes());
        }
        ContentHasher {
            ctx: ring::digest::Context::new(&ring::digest::SHA256),
            buf,
        }
    }

    pub(super) fn update(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        use std::fmt::Write as _;
        let options = arrow::util::display::FormatOptions::default();
        let columns: Vec<HashedColumn> = batch
            .columns()
            .iter()
            .map(|c| HashedColumn::new(c, &options))
            .collect::<Result<_, _>>()?;
        let mut text = String::new();
        let buf = &mut self.buf;
        for row in 0..batch.num_rows() {
            for c in &columns {
                match c {
                    _ if c.array().is_null(row) => buf.extend_from_slice(&u32::MAX.to_le_bytes()),
                    HashedColumn::Fixed { data, width, .. } => {
                        let at = (data.offset() + row) * width;
                        put_value(buf, &data.buffers()[0].as_slice()[at..at + width]);
                    }
                    HashedColumn::Text(a) => {
                        put_value(buf, a.as_string::<i32>().value(row).as_bytes())
                    }
                    HashedColumn::Bytes(a) => put_value(buf, a.as_binary::<i32>().value(row)),
                    HashedColumn::Other(_, f) => {
                        text.clear();
                        let _ = write!(text, "{}", f.value(row));
                        put_value(buf, text.as_bytes());
                    }
                }
            }
            if buf.len() >= 1 << 16 {
                self.ctx.update(buf);
                buf.clear();
            }
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> String {
        self.ctx.update(&self.buf);
        let digest = self.ctx.finish();
        digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The content hash of rows held whole (see [`ContentHasher`]).
#[cfg(test)]
fn content_hash(batch: &RecordBatch) -> Result<String, SluiceError> {
    let mut hasher = ContentHasher::new(&batch.schema());
    hasher.update(batch)?;
    Ok(hasher.finish())
}

/// A column as [`ContentHasher`] reads its values.
enum HashedColumn<'a> {
    /// A fixed-width primitive (booleans are packed bits: not here).
    Fixed {
        array: &'a ArrayRef,
        data: arrow::array::ArrayData,
        width: usize,
    },
    Text(&'a ArrayRef),
    Bytes(&'a ArrayRef),
    Other(&'a ArrayRef, arrow::util::display::ArrayFormatter<'a>),
}

impl<'a> HashedColumn<'a> {
    fn new(
        array: &'a ArrayRef,
        options: &'a arrow::util::display::FormatOptions<'a>,
    ) -> Result<Self, SluiceError> {
        let ty = array.data_type();
        Ok(match ty.primitive_width() {
            Some(width) if ty.is_primitive() => HashedColumn::Fixed {
                array,
                data: array.to_data(),
                width,
            },
            _ => match ty {
                DataType::Utf8 => HashedColumn::Text(array),
                DataType::Binary => HashedColumn::Bytes(array),
                _ => HashedColumn::Other(
                    array,
                    arrow::util::display::ArrayFormatter::try_new(array.as_ref(), options)?,
                ),
            },
        })
    }

    fn array(&self) -> &ArrayRef {
        match self {
            HashedColumn::Fixed { array, .. }
            | HashedColumn::Text(array)
            | HashedColumn::Bytes(array)
            | HashedColumn::Other(array, _) => array,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int64Array, TimestampMicrosecondArray};

    fn batch(ids: Vec<Option<i64>>, names: Vec<Option<&str>>) -> RecordBatch {
        let n = ids.len() as i64;
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("name", Arc::new(StringArray::from(names)) as ArrayRef),
            (
                "at",
                Arc::new(TimestampMicrosecondArray::from_iter_values(0..n)) as ArrayRef,
            ),
            (
                "ok",
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn a_directory_gets_the_version_s_file() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().display().to_string();
        assert_eq!(
            file_in_directory(&at, "evals", 3),
            format!("{at}/evals-v3.parquet")
        );
        assert_eq!(
            file_in_directory(&format!("{at}/x.parquet"), "evals", 3),
            format!("{at}/x.parquet")
        );
        assert_eq!(
            file_in_directory("s3://bucket/sets/", "evals", 1),
            "s3://bucket/sets/evals-v1.parquet"
        );
        assert_eq!(
            file_in_directory("s3://bucket/sets/e.parquet", "evals", 1),
            "s3://bucket/sets/e.parquet"
        );
    }

    #[test]
    fn the_content_hash_is_the_documented_one() {
        let b = batch(
            vec![Some(1), None, Some(3)],
            vec![Some("a"), Some("b"), None],
        );
        // The bytes as the manifest spells them out, hashed here by hand.
        let mut expected = Vec::new();
        let put = |out: &mut Vec<u8>, bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        for (name, ty) in [
            ("id", "bigint"),
            ("name", "text"),
            ("at", "timestamp without time zone"),
            ("ok", "boolean"),
        ] {
            put(&mut expected, name.as_bytes());
            put(&mut expected, ty.as_bytes());
        }
        let null = u32::MAX.to_le_bytes();
        put(&mut expected, &1i64.to_le_bytes());
        put(&mut expected, b"a");
        put(&mut expected, &0i64.to_le_bytes());
        put(&mut expected, b"true");
        expected.extend_from_slice(&null);
        put(&mut expected, b"b");
        put(&mut expected, &1i64.to_le_bytes());
        put(&mut expected, b"false");
        put(&mut expected, &3i64.to_le_bytes());
        expected.extend_from_slice(&null);
        put(&mut expected, &2i64.to_le_bytes());
        put(&mut expected, b"true");
        let digest = ring::digest::digest(&ring::digest::SHA256, &expected);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(content_hash(&b).unwrap(), hex);
    }

    #[test]
    fn rows_come_out_in_one_order_whatever_order_they_came_in() {
        let a = batch(
            vec![Some(3), Some(1), Some(2)],
            vec![Some("c"), Some("a"), None],
        );
        let b = batch(
            vec![Some(2), Some(3), Some(1)],
            vec![None, Some("c"), Some("a")],
        );
        // Rows sorted by their keys, as the plan's sort does (bytewise).
        let sorted = |batch: &RecordBatch| {
            let keys = order_keys(&batch.columns()[..2]).unwrap();
            let mut order: Vec<usize> = (0..batch.num_rows()).collect();
            order.sort_by(|x, y| keys.value(*x).cmp(keys.value(*y)));
            let ids = batch
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>();
            order.iter().map(|&i| ids.value(i)).collect::<Vec<_>>()
        };
        assert_eq!(sorted(&a), vec![1, 2, 3]);
        assert_eq!(sorted(&a), sorted(&b));
        // NULLs first, as the order has always been.
        let nulls = batch(vec![Some(1), None], vec![Some("x"), Some("y")]);
        let keys = order_keys(&nulls.columns()[..1]).unwrap();
        assert!(keys.value(1) < keys.value(0));
    }
}
