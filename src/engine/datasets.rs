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
//! [`content_hash`]) is what a version records and `VERIFY` compares.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use sluice_catalog::{DatasetDef, DatasetSplit, DatasetVersion};

use crate::types::PgType;

use super::*;

/// A version's rows, computed.
pub(super) struct Computed {
    pub(super) batch: RecordBatch,
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
                let computed = self.compute(session, &def, &v.cut).await?;
                if computed.content_hash != v.content_hash {
                    return Err(SluiceError::ObjectNotReady(format!(
                        "dataset \"{name}\" version {} no longer computes to its content hash (the log under its cut changed: an erasure?); VERIFY DATASET {name} VERSION {} says more",
                        v.version, v.version
                    )));
                }
                let rows = computed.batch.num_rows() as u64;
                let manifest = dataset_manifest(&self.store, &def, &v, &computed)?;
                let batches = vec![computed.batch];
                let data = tokio::task::spawn_blocking(move || {
                    crate::checkpoint::encode_parquet(&batches)
                })
                .await
                .map_err(|e| SluiceError::Internal(e.to_string()))?
                .map_err(|e| SluiceError::Internal(format!("encoding Parquet: {e}")))?;
                let sha256 = crate::log::erasure::sha256_hex(&data);
                export::put(&location, data).await?;
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
                let computed = self.compute(session, &def, &v.cut).await?;
                let schema = verify_schema();
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(StringArray::from(vec![name])),
                    Arc::new(arrow::array::Int64Array::from(vec![v.version as i64])),
                    Arc::new(arrow::array::Int64Array::from(vec![
                        computed.batch.num_rows() as i64,
                    ])),
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
                })?;
            }
        }
        match self.compute(session, def, &cut).await {
            Ok(c) => Ok(DatasetVersion {
                version: number,
                cut,
                created_at_us: crate::checkpoint::now_us(),
                rows: c.batch.num_rows() as u64,
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

    /// The dataset's rows at `cut`, in their order, split, and hashed.
    async fn compute(
        &self,
        session: &Session,
        def: &DatasetDef,
        cut: &str,
    ) -> Result<Computed, SluiceError> {
        compute_version(&self.planner, &self.views, &session.role(), def, cut).await
    }
}

/// What `COPY DATASET` writes beside the rows.
pub(super) fn dataset_manifest(
    store: &LogStore,
    def: &DatasetDef,
    v: &DatasetVersion,
    computed: &Computed,
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
        "rows": computed.batch.num_rows(),
        "rows_per_split": v.split_rows,
        "content_hash": v.content_hash,
        "content_hash_of": "SHA-256 of the column names and types (as PostgreSQL's format_type spells them), then each value in the file's order, each after its length as 4 little-endian bytes (a NULL as length 0xFFFFFFFF alone): integers, floats, dates, times and timestamps as their little-endian bytes, text and bytea as themselves, anything else as its text",
        "created_at_us": v.created_at_us,
        "format": "parquet",
    });
    serde_json::to_string_pretty(&manifest).map_err(|e| SluiceError::Internal(e.to_string()))
}

/// The dataset's rows at `cut`, in their order, split, and hashed.
pub(super) async fn compute_version(
    planner: &Planner,
    views: &ViewManager,
    role: &SessionRole,
    def: &DatasetDef,
    cut: &str,
) -> Result<Computed, SluiceError> {
    let mut query = parse_dataset_query(&def.query)?;
    sluice_sql::read_relations_at(&mut query, cut, |r| {
        planner.store.table(r).is_some() || views.view(r).is_some()
    })?;
    let (plan, columns) = planner
        .plan_shown(ast::Statement::Query(Box::new(query)), role)
        .await?;
    // Read at a cut: no transaction's writes or snapshot apply.
    let mut state = planner.ctx.state();
    state.config_mut().set_extension(Arc::new(role.clone()));
    let df = DataFrame::new(state, plan);
    let task = Arc::new(df.task_ctx());
    let physical = {
        let _snapshot = planner.store.transactions().snapshot_guard().await;
        df.create_physical_plan().await?
    };
    let batches = datafusion::physical_plan::collect(physical, task)
        .await?
        .into_iter()
        .map(|b| export::named_as(b, &columns))
        .collect::<Result<Vec<_>, _>>()?;
    let schema: SchemaRef = match batches.first() {
        Some(b) => b.schema(),
        None => Arc::new(Schema::new(
            columns
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        )),
    };
    let mut batch = arrow::compute::concat_batches(&schema, &batches)?;
    let mut split_rows = Vec::new();
    if let Some(split) = &def.split {
        let key = batch.column_by_name(&split.key).ok_or_else(|| {
            SluiceError::UndefinedColumn(format!(
                "{} (the split_key, among the dataset's columns)",
                split.key
            ))
        })?;
        let hashes = crate::query::stable_hash::row_hashes(
            std::slice::from_ref(key),
            split.seed as u64,
            batch.num_rows(),
        )?;
        let parts: Vec<&str> = hashes.iter().map(|h| part_of(split, *h)).collect();
        split_rows = split
            .parts
            .iter()
            .map(|(p, _)| (p.clone(), parts.iter().filter(|x| **x == p).count() as u64))
            .collect();
        let mut fields = schema.fields().to_vec();
        fields.push(Arc::new(Field::new("split", DataType::Utf8, false)));
        let mut cols = batch.columns().to_vec();
        cols.push(Arc::new(StringArray::from(parts)));
        batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?;
    }
    let batch = in_order(batch, def.split.is_some())?;
    let content_hash = content_hash(&batch)?;
    Ok(Computed {
        batch,
        split_rows,
        content_hash,
    })
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

/// The rows in one order whatever the plan did: by every column (the
/// split part first, when there is one), NULLs last.
fn in_order(batch: RecordBatch, split_first: bool) -> Result<RecordBatch, SluiceError> {
    if batch.num_rows() < 2 {
        return Ok(batch);
    }
    let n = batch.num_columns();
    let mut order: Vec<usize> = (0..n).collect();
    if split_first {
        order.rotate_right(1);
    }
    let converter = arrow::row::RowConverter::new(
        order
            .iter()
            .map(|&i| arrow::row::SortField::new(batch.column(i).data_type().clone()))
            .collect(),
    )?;
    let columns: Vec<ArrayRef> = order.iter().map(|&i| batch.column(i).clone()).collect();
    let rows = converter.convert_columns(&columns)?;
    let mut indices: Vec<u32> = (0..batch.num_rows() as u32).collect();
    // Rows that tie are equal in every column: their order changes no byte.
    indices.sort_unstable_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
    let indices = arrow::array::UInt32Array::from(indices);
    let taken = batch
        .columns()
        .iter()
        .map(|c| arrow::compute::take(c, &indices, None))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(batch.schema(), taken)?)
}

/// SHA-256 of the column names and types (as PostgreSQL's `format_type`
/// spells them), then every value, each with its
/// length (a NULL as a length no value has): integers, floats, dates,
/// times and timestamps as their little-endian bytes, text and bytea as
/// themselves, anything else (booleans too) as its text.
fn content_hash(batch: &RecordBatch) -> Result<String, SluiceError> {
    use std::fmt::Write as _;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let put = |buf: &mut Vec<u8>, bytes: &[u8]| {
        buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        buf.extend_from_slice(bytes);
    };
    for f in batch.schema().fields() {
        put(&mut buf, f.name().as_bytes());
        // PostgreSQL's spelling, which no library upgrade changes.
        put(&mut buf, PgType::of_field(f).format().as_bytes());
    }
    let options = arrow::util::display::FormatOptions::default();
    let columns: Vec<HashedColumn> = batch
        .columns()
        .iter()
        .map(|c| HashedColumn::new(c, &options))
        .collect::<Result<_, _>>()?;
    let mut text = String::new();
    for row in 0..batch.num_rows() {
        for c in &columns {
            match c {
                _ if c.array().is_null(row) => buf.extend_from_slice(&u32::MAX.to_le_bytes()),
                HashedColumn::Fixed { data, width, .. } => {
                    let at = (data.offset() + row) * width;
                    put(&mut buf, &data.buffers()[0].as_slice()[at..at + width]);
                }
                HashedColumn::Text(a) => put(&mut buf, a.as_string::<i32>().value(row).as_bytes()),
                HashedColumn::Bytes(a) => put(&mut buf, a.as_binary::<i32>().value(row)),
                HashedColumn::Other(_, f) => {
                    text.clear();
                    let _ = write!(text, "{}", f.value(row));
                    put(&mut buf, text.as_bytes());
                }
            }
        }
        if buf.len() >= 1 << 16 {
            ctx.update(&buf);
            buf.clear();
        }
    }
    ctx.update(&buf);
    let digest = ctx.finish();
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// A column as [`content_hash`] reads its values.
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
        // The times differ by place; take the first two columns only.
        let a = a.project(&[0, 1]).unwrap();
        let b = b.project(&[0, 1]).unwrap();
        assert_eq!(in_order(a, false).unwrap(), in_order(b, false).unwrap());
    }
}
