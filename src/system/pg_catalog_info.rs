//! What `pg_catalog` (psql's `\d`, JDBC's `DatabaseMetaData`, SQLAlchemy's
//! reflection) is told about tables: the columns as the table defines
//! them, NOT NULL included, without the hidden columns (`_partition`,
//! `_offset`, `_ingested_at`, and a Kafka-fed table's `_kafka_*`), which
//! `SELECT *` does not show either.
//!
//! The query planner sees every column as nullable (NOT NULL is enforced
//! when rows are staged, with PostgreSQL's error), so the catalog cannot
//! simply read the planner's schemas.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Int32Type, Schema};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;

use crate::log::LogStore;
use crate::stream::ViewManager;

use super::pg_keys::{index_class_rows, scan_all, KeyCatalog, KeyCatalogTable, PrimaryKeys};

#[derive(Clone)]
pub struct SluiceCatalogInfo {
    pub catalogs: Arc<dyn CatalogProviderList>,
    pub store: Arc<LogStore>,
}

impl fmt::Debug for SluiceCatalogInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SluiceCatalogInfo")
    }
}

#[async_trait]
impl CatalogInfo for SluiceCatalogInfo {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        CatalogInfo::catalog_names(&self.catalogs).await
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        CatalogInfo::schema_names(&self.catalogs, catalog).await
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        CatalogInfo::table_names(&self.catalogs, catalog, schema).await
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        if schema == "public" {
            if let Some(t) = self.store.table(table) {
                // A Kafka-fed table's Kafka columns are hidden too.
                let def = t.def();
                let hidden = def.hidden_columns();
                let schema = def.data_schema();
                let shown: Vec<_> = schema
                    .fields()
                    .iter()
                    .filter(|f| !hidden.contains(&f.name().as_str()))
                    .cloned()
                    .collect();
                return Ok(Some(Arc::new(Schema::new(shown))));
            }
        }
        CatalogInfo::table_schema(&self.catalogs, catalog, schema, table).await
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        CatalogInfo::table_type(&self.catalogs, catalog, schema, table).await
    }
}

/// `pg_catalog` as datafusion-pg-catalog builds it, except that
/// `pg_class` gives materialized views relkind `m` (its relkind comes from
/// DataFusion's table types, which know only tables and views), so psql's
/// `\dm` lists them, `\dv` does not, and `\d v` says "Materialized view".
///
/// Primary keys show as indexes and constraints ([`super::pg_keys`]), and
/// `pg_settings` lists the settings `SHOW` answers.
pub struct SluicePgCatalog {
    pub inner: Arc<dyn SchemaProvider>,
    pub store: Arc<LogStore>,
    pub views: Arc<ViewManager>,
    pub keys: Arc<PrimaryKeys>,
    pub hidden: Arc<HiddenRelations>,
    pub names: Arc<RelationNames>,
}

/// The names of the relations on the search path by oid, so that
/// `pg_get_viewdef(oid)` (psql's `\d+` of a view) finds the view. Filled
/// by each `pg_class` scan, which is how a client comes by an oid.
#[derive(Debug, Default)]
pub struct RelationNames(parking_lot::RwLock<std::collections::HashMap<i64, String>>);

impl RelationNames {
    pub fn name(&self, oid: i64) -> Option<String> {
        self.0.read().get(&oid).cloned()
    }
}

/// Relations outside the search path (`public`, then `pg_catalog`): the
/// `sluice_catalog` and `information_schema` tables, which
/// `pg_table_is_visible` answers false for, so that a driver's reflection of
/// the default schema does not list them. Filled by each `pg_class` scan.
#[derive(Debug, Default)]
pub struct HiddenRelations(parking_lot::RwLock<HashSet<i32>>);

impl HiddenRelations {
    /// `pg_table_is_visible(oid)`; an oid no scan has seen is visible.
    pub fn function(self: Arc<Self>) -> datafusion::logical_expr::ScalarUDF {
        use super::pg_keys::{as_columnar, int64s, rows_of, CatalogFunction};
        let visible = move |args: &[datafusion::logical_expr::ColumnarValue]| {
            let rows = rows_of(args);
            let hidden = self.0.read();
            let out: BooleanArray = int64s(&args[0], rows)?
                .iter()
                .map(|oid| {
                    let oid = i32::try_from((*oid)?).ok()?;
                    Some(!hidden.contains(&oid))
                })
                .collect();
            Ok(as_columnar(args, Arc::new(out)))
        };
        datafusion::logical_expr::ScalarUDF::new_from_impl(CatalogFunction::new(
            "pg_table_is_visible",
            1,
            DataType::Boolean,
            visible,
        ))
    }
}

impl fmt::Debug for SluicePgCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SluicePgCatalog")
    }
}

#[async_trait]
impl SchemaProvider for SluicePgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        for view in super::catalog_views::CATALOG_VIEWS {
            if !names.iter().any(|n| n == view) {
                names.push(view.to_string());
            }
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if let Some(view) = super::catalog_views::catalog_view(name) {
            return Ok(Some(view));
        }
        if name == "pg_settings" {
            return Ok(Some(
                Arc::new(crate::query::pg_functions::settings_table()?),
            ));
        }
        let table = self.inner.table(name).await?;
        if let (Some(inner), Some(kind)) = (&table, super::pg_routines::RoutineCatalog::of(name)) {
            let Some(pg_proc) = self.inner.table("pg_proc").await? else {
                return Ok(table);
            };
            return Ok(Some(Arc::new(
                super::pg_routines::RoutineCatalogTable::new(
                    kind,
                    inner.clone(),
                    pg_proc,
                    self.inner.table("pg_namespace").await?,
                ),
            )));
        }
        let key_catalog = match name {
            "pg_index" => Some(KeyCatalog::Index),
            "pg_constraint" => Some(KeyCatalog::Constraint),
            _ => None,
        };
        match (table, key_catalog) {
            (Some(inner), None) if name == "pg_attribute" => {
                let Some(pg_class) = self.table("pg_class").await? else {
                    return Ok(Some(inner));
                };
                Ok(Some(Arc::new(PgAttribute {
                    inner,
                    pg_class,
                    namespaces: self.inner.table("pg_namespace").await?,
                    store: self.store.clone(),
                    views: self.views.clone(),
                })))
            }
            (Some(inner), None) if name == "pg_class" => Ok(Some(Arc::new(PgClass {
                namespaces: self.inner.table("pg_namespace").await?,
                hidden: self.hidden.clone(),
                names: self.names.clone(),
                store: Some(self.store.clone()),
                ..PgClass::new(inner, self.views.clone(), self.keys.clone())
            }))),
            (Some(inner), Some(kind)) => {
                let Some(pg_class) = self.inner.table("pg_class").await? else {
                    return Ok(Some(inner));
                };
                Ok(Some(Arc::new(KeyCatalogTable::new(
                    kind,
                    inner,
                    pg_class,
                    self.keys.clone(),
                ))))
            }
            (other, _) => Ok(other),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name) || super::catalog_views::CATALOG_VIEWS.contains(&name)
    }
}

struct PgClass {
    inner: Arc<dyn TableProvider>,
    views: Arc<ViewManager>,
    keys: Arc<PrimaryKeys>,
    /// The inner schema and `reloptions` (SQLAlchemy's index reflection
    /// reads it; no relation has options, so it is NULL).
    schema: SchemaRef,
    namespaces: Option<Arc<dyn TableProvider>>,
    hidden: Arc<HiddenRelations>,
    names: Arc<RelationNames>,
    /// For `relpages`: a log table's blocks as its `ctid` numbers them
    /// (see `sluice_sql::rewrite_ctid_ranges`), so that a reader splitting
    /// a scan by `ctid` ranges (DuckDB) covers every row.
    store: Option<Arc<LogStore>>,
}

impl PgClass {
    fn new(inner: Arc<dyn TableProvider>, views: Arc<ViewManager>, keys: Arc<PrimaryKeys>) -> Self {
        let mut fields: Vec<Field> = inner
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(
            "reloptions",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ));
        Self {
            inner,
            views,
            keys,
            schema: Arc::new(Schema::new(fields)),
            namespaces: None,
            hidden: Arc::default(),
            names: Arc::default(),
            store: None,
        }
    }
}

impl fmt::Debug for PgClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pg_class")
    }
}

#[async_trait]
impl TableProvider for PgClass {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
        let mut batches = scan_all(self.inner.as_ref(), state).await?;
        let schema = self.inner.schema();
        let keyed = self.keys.relations(&batches);
        batches.push(index_class_rows(&schema, &keyed)?);
        let keyed: HashSet<i32> = keyed.iter().map(|r| r.table_oid).collect();
        let column = |name: &str| {
            schema
                .index_of(name)
                .map_err(|_| DataFusionError::Internal(format!("pg_class has no column {name}")))
        };
        let (relname, relkind, oid, hasindex) = (
            column("relname")?,
            column("relkind")?,
            column("oid")?,
            column("relhasindex")?,
        );
        if let Some(namespaces) = &self.namespaces {
            let on_path = search_path_namespaces(namespaces.as_ref(), state).await?;
            let relnamespace = column("relnamespace")?;
            let mut hidden = HashSet::new();
            let mut names = std::collections::HashMap::new();
            for batch in &batches {
                let (Some(oids), Some(nss), Some(rel)) = (
                    batch.column(oid).as_primitive_opt::<Int32Type>(),
                    batch.column(relnamespace).as_primitive_opt::<Int32Type>(),
                    batch.column(relname).as_string_opt::<i32>(),
                ) else {
                    continue;
                };
                for ((o, ns), name) in oids.iter().zip(nss.iter()).zip(rel.iter()) {
                    if let (Some(o), Some(ns)) = (o, ns) {
                        if !on_path.contains(&ns) {
                            hidden.insert(o);
                        } else if let Some(name) = name {
                            names.insert(i64::from(o), name.to_string());
                        }
                    }
                }
            }
            *self.hidden.0.write() = hidden;
            *self.names.0.write() = names;
        }
        let views: HashSet<String> = self
            .views
            .views()
            .iter()
            .map(|v| v.def.name.clone())
            .collect();
        let mut out = Vec::with_capacity(batches.len());
        for batch in batches {
            let (Some(names), Some(kinds), Some(oids), Some(hasindexes)) = (
                batch.column(relname).as_string_opt::<i32>(),
                batch.column(relkind).as_string_opt::<i32>(),
                batch.column(oid).as_primitive_opt::<Int32Type>(),
                batch.column(hasindex).as_boolean_opt(),
            ) else {
                return Err(DataFusionError::Internal("pg_class column types".into()));
            };
            let kinds: StringArray = names
                .iter()
                .zip(kinds.iter())
                .map(|(name, kind)| match (name, kind) {
                    (Some(n), Some("v")) if views.contains(n) => Some("m"),
                    (_, kind) => kind,
                })
                .collect();
            let hasindexes: BooleanArray = oids
                .iter()
                .zip(hasindexes.iter())
                .map(|(oid, has)| match oid {
                    Some(oid) if keyed.contains(&oid) => Some(true),
                    _ => has,
                })
                .collect();
            let mut columns = batch.columns().to_vec();
            if let (Some(store), Ok(pages)) = (&self.store, schema.index_of("relpages")) {
                if let Some(current) = batch.column(pages).as_primitive_opt::<Int32Type>() {
                    let pages_of = |name: Option<&str>| {
                        let t = store.table(name?)?;
                        let end = t.commits().borrow().iter().copied().max().unwrap_or(0);
                        i32::try_from(end.div_ceil(sluice_sql::CTID_ROWS_PER_BLOCK as u64)).ok()
                    };
                    let relpages: arrow::array::Int32Array = names
                        .iter()
                        .zip(current.iter())
                        .map(|(name, now)| pages_of(name).or(now))
                        .collect();
                    columns[pages] = Arc::new(relpages);
                }
            }
            columns[relkind] = Arc::new(kinds);
            columns[hasindex] = Arc::new(hasindexes);
            columns.push(arrow::array::new_null_array(
                self.schema
                    .field(self.schema.fields().len() - 1)
                    .data_type(),
                batch.num_rows(),
            ));
            out.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        }
        super::sluice_catalog::scan_rows(&self.schema, out, state, projection, filters, limit).await
    }
}

/// The oids of the namespaces on the search path: `public` and `pg_catalog`.
async fn search_path_namespaces(
    namespaces: &dyn TableProvider,
    state: &dyn Session,
) -> Result<HashSet<i32>, DataFusionError> {
    let mut out = HashSet::new();
    for batch in scan_all(namespaces, state).await? {
        let schema = batch.schema();
        let (Ok(oid), Ok(name)) = (schema.index_of("oid"), schema.index_of("nspname")) else {
            continue;
        };
        let (Some(oids), Some(names)) = (
            batch.column(oid).as_primitive_opt::<Int32Type>(),
            batch.column(name).as_string_opt::<i32>(),
        ) else {
            continue;
        };
        for (o, n) in oids.iter().zip(names.iter()) {
            if let (Some(o), Some("public" | "pg_catalog")) = (o, n) {
                out.insert(o);
            }
        }
    }
    Ok(out)
}

/// `pg_attribute` with each column's type and typmod as PostgreSQL has
/// them (`varchar(5)`: 1043 and 9, `jsonb`: 3802, `numeric(12,3)`: its
/// typmod), from the tables' and views' own fields, where
/// datafusion-pg-catalog knows only Arrow's types.
pub struct PgAttribute {
    pub inner: Arc<dyn TableProvider>,
    pub pg_class: Arc<dyn TableProvider>,
    pub namespaces: Option<Arc<dyn TableProvider>>,
    pub store: Arc<LogStore>,
    pub views: Arc<ViewManager>,
}

impl fmt::Debug for PgAttribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pg_attribute")
    }
}

impl PgAttribute {
    /// attname as `name`, as PostgreSQL's is.
    fn out_schema(&self) -> SchemaRef {
        let inner = self.inner.schema();
        Arc::new(Schema::new(
            inner
                .fields()
                .iter()
                .map(|f| match f.name().as_str() {
                    "attname" => crate::types::declared_field("attname", DataType::Utf8, "name")
                        .with_nullable(f.is_nullable()),
                    _ => f.as_ref().clone(),
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// The field of column `attname` of the public relation `oid`.
    fn field_of(
        &self,
        relations: &std::collections::HashMap<i32, String>,
        oid: i32,
        attname: &str,
    ) -> Option<Field> {
        let name = relations.get(&oid)?;
        if let Some(t) = self.store.table(name) {
            return t
                .def()
                .columns
                .iter()
                .find(|c| c.name == attname)
                .map(|c| c.to_field());
        }
        let v = self.views.view(name)?;
        v.schema.field_with_name(attname).ok().cloned()
    }
}

#[async_trait]
impl TableProvider for PgAttribute {
    fn schema(&self) -> SchemaRef {
        self.out_schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
        // The oids of the relations in `public`.
        let public: HashSet<i32> = match &self.namespaces {
            Some(ns) => {
                let mut out = HashSet::new();
                for b in scan_all(ns.as_ref(), state).await? {
                    let (Ok(o), Ok(n)) =
                        (b.schema().index_of("oid"), b.schema().index_of("nspname"))
                    else {
                        continue;
                    };
                    if let (Some(oids), Some(names)) = (
                        b.column(o).as_primitive_opt::<Int32Type>(),
                        b.column(n).as_string_opt::<i32>(),
                    ) {
                        for (o, n) in oids.iter().zip(names.iter()) {
                            if let (Some(o), Some("public")) = (o, n) {
                                out.insert(o);
                            }
                        }
                    }
                }
                out
            }
            None => HashSet::new(),
        };
        let mut relations = std::collections::HashMap::new();
        for b in scan_all(self.pg_class.as_ref(), state).await? {
            let s = b.schema();
            let (Ok(o), Ok(n), Ok(ns)) = (
                s.index_of("oid"),
                s.index_of("relname"),
                s.index_of("relnamespace"),
            ) else {
                continue;
            };
            if let (Some(oids), Some(names), Some(nss)) = (
                b.column(o).as_primitive_opt::<Int32Type>(),
                b.column(n).as_string_opt::<i32>(),
                b.column(ns).as_primitive_opt::<Int32Type>(),
            ) {
                for i in 0..b.num_rows() {
                    if oids.is_valid(i) && names.is_valid(i) && public.contains(&nss.value(i)) {
                        relations.insert(oids.value(i), names.value(i).to_string());
                    }
                }
            }
        }
        let schema = self.out_schema();
        let mut out = Vec::new();
        for batch in scan_all(self.inner.as_ref(), state).await? {
            let s = batch.schema();
            let column = |name: &str| {
                s.index_of(name)
                    .map_err(|_| DataFusionError::Internal(format!("pg_attribute has no {name}")))
            };
            let (relid, attname, typid, typmod) = (
                column("attrelid")?,
                column("attname")?,
                column("atttypid")?,
                column("atttypmod")?,
            );
            let (Some(relids), Some(names), Some(typids), Some(typmods)) = (
                batch.column(relid).as_primitive_opt::<Int32Type>(),
                batch.column(attname).as_string_opt::<i32>(),
                batch.column(typid).as_primitive_opt::<Int32Type>(),
                batch.column(typmod).as_primitive_opt::<Int32Type>(),
            ) else {
                return Err(DataFusionError::Internal(
                    "pg_attribute column types".into(),
                ));
            };
            let mut new_typids = Vec::with_capacity(batch.num_rows());
            let mut new_typmods = Vec::with_capacity(batch.num_rows());
            for i in 0..batch.num_rows() {
                let field = (relids.is_valid(i) && names.is_valid(i))
                    .then(|| self.field_of(&relations, relids.value(i), names.value(i)))
                    .flatten();
                match field {
                    Some(f) => {
                        let t = crate::types::PgType::of_field(&f);
                        new_typids.push(Some(t.oid as i32));
                        new_typmods.push(Some(t.typmod));
                    }
                    None => {
                        new_typids.push(typids.is_valid(i).then(|| typids.value(i)));
                        new_typmods.push(typmods.is_valid(i).then(|| typmods.value(i)));
                    }
                }
            }
            let mut columns = batch.columns().to_vec();
            columns[typid] = Arc::new(arrow::array::Int32Array::from(new_typids));
            columns[typmod] = Arc::new(arrow::array::Int32Array::from(new_typmods));
            out.push(RecordBatch::try_new(schema.clone(), columns)?);
        }
        super::sluice_catalog::scan_rows(&schema, out, state, projection, filters, limit).await
    }
}
