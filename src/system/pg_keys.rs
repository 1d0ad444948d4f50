//! Primary keys and indexes as `pg_catalog` shows them, so psql's `\d`,
//! JDBC's `getPrimaryKeys`/`getIndexInfo`, SQLAlchemy's reflection and
//! `pg_indexes` find them. A keyed table has, as in PostgreSQL, a unique
//! btree index `<table>_pkey` (a `pg_class` row of relkind `i` and a
//! `pg_index` row) and a primary-key constraint of the same name (a
//! `pg_constraint` row); each `CREATE INDEX` is an index of its own; a
//! relation with any index says `relhasindex` in its own `pg_class` row.
//!
//! The table's oid is the one `pg_class` gives it; the primary key's index
//! and constraint oids are derived from it, a created index's from its
//! catalog id (fixed offsets above any oid `pg_class` hands out), so they
//! stay the same from query to query.
//! `pg_get_indexdef` and `pg_get_constraintdef` answer from the indexes
//! tables seen by the last catalog scan.
//!
//! `pg_index.indkey`/`indoption` and `pg_constraint.conkey`/`confkey` are
//! arrays here (datafusion-pg-catalog keeps them as text), so `unnest`,
//! `_pg_expandarray` and `generate_subscripts` work on them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use arrow::array::{Array, ArrayRef, AsArray, Int64Builder, ListBuilder, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::physical_plan::{collect, ExecutionPlan};

use crate::log::LogStore;
use crate::stream::ViewManager;

/// Offsets from a table's oid to its primary-key index's and constraint's.
/// `pg_class` counts oids up from 16384, far below these.
const INDEX_OID_OFFSET: i32 = 0x2000_0000;
const CONSTRAINT_OID_OFFSET: i32 = 0x3000_0000;
/// Offset from a created index's catalog id to its oid.
const CREATED_INDEX_OID_OFFSET: i32 = 0x2800_0000;
/// PostgreSQL's oid of the btree access method (`pg_am`).
const BTREE_AM_OID: i32 = 403;

/// One index of a relation as the catalog describes it: a keyed table's
/// primary key, or an index `CREATE INDEX` made.
#[derive(Debug, Clone)]
pub struct RelationIndex {
    pub table_oid: i32,
    pub namespace_oid: i32,
    pub schema: String,
    pub table: String,
    /// `(attnum, name)` of each key column, in key order.
    pub columns: Vec<(i16, String)>,
    /// Each column's `indoption` (1: DESC, 2: NULLS FIRST).
    pub options: Vec<i16>,
    /// The primary key (unique, with a constraint), or a created index.
    pub primary: bool,
    name: String,
    index_oid: i32,
}

impl RelationIndex {
    pub fn index_oid(&self) -> i32 {
        self.index_oid
    }

    pub fn constraint_oid(&self) -> i32 {
        self.table_oid.wrapping_add(CONSTRAINT_OID_OFFSET)
    }

    pub fn key_name(&self) -> String {
        self.name.clone()
    }

    /// The columns as `pg_get_indexdef` lists them, each with its order
    /// when not the default (`ASC NULLS LAST`).
    fn column_list(&self) -> String {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, (_, c))| {
                let option = self.options.get(i).copied().unwrap_or(0);
                let order = match (option & 1 != 0, option & 2 != 0) {
                    (false, false) => "",
                    (false, true) => " NULLS FIRST",
                    (true, true) => " DESC",
                    (true, false) => " DESC NULLS LAST",
                };
                format!("{}{order}", quote_ident(c))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `pg_get_indexdef(index, column, _)`: the whole definition for
    /// column 0, else that key column's name.
    pub fn index_def(&self, column: i64) -> Option<String> {
        if column == 0 {
            return Some(format!(
                "CREATE {}INDEX {} ON {}.{} USING btree ({})",
                if self.primary { "UNIQUE " } else { "" },
                quote_ident(&self.key_name()),
                quote_ident(&self.schema),
                quote_ident(&self.table),
                self.column_list()
            ));
        }
        let i = usize::try_from(column).ok()?.checked_sub(1)?;
        self.columns.get(i).map(|(_, c)| quote_ident(c))
    }

    pub fn constraint_def(&self) -> String {
        format!("PRIMARY KEY ({})", self.column_list())
    }
}

/// Quotes an identifier the way PostgreSQL prints it: bare when it is
/// lower case letters, digits and underscores not starting with a digit.
fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// The indexes the catalog last described, by index and
/// constraint oid.
pub struct PrimaryKeys {
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    seen: RwLock<HashMap<i32, Arc<RelationIndex>>>,
}

impl fmt::Debug for PrimaryKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrimaryKeys")
    }
}

impl PrimaryKeys {
    pub fn new(store: Arc<LogStore>, views: Arc<ViewManager>) -> Self {
        Self {
            store,
            views,
            seen: RwLock::new(HashMap::new()),
        }
    }

    /// The indexes of the relations among `pg_class`'s rows (`oid`,
    /// `relname`, `relnamespace`, all in schema `public`): keyed tables'
    /// primary keys and created indexes, remembered for `pg_get_indexdef`
    /// and `pg_get_constraintdef`.
    pub fn relations(&self, pg_class: &[RecordBatch]) -> Vec<Arc<RelationIndex>> {
        let created = self.store.index_defs();
        let views: HashMap<String, (u64, Vec<String>)> = self
            .views
            .views()
            .iter()
            .map(|v| {
                let columns = v.schema.fields().iter().map(|f| f.name().clone()).collect();
                (v.def.name.clone(), (v.def.id, columns))
            })
            .collect();
        let mut out = Vec::new();
        for batch in pg_class {
            let schema = batch.schema();
            let (Ok(oid), Ok(name), Ok(ns)) = (
                schema.index_of("oid"),
                schema.index_of("relname"),
                schema.index_of("relnamespace"),
            ) else {
                continue;
            };
            let (Some(oids), Some(names), Some(nss)) = (
                batch
                    .column(oid)
                    .as_primitive_opt::<arrow::datatypes::Int32Type>(),
                batch.column(name).as_string_opt::<i32>(),
                batch
                    .column(ns)
                    .as_primitive_opt::<arrow::datatypes::Int32Type>(),
            ) else {
                continue;
            };
            for row in 0..batch.num_rows() {
                if names.is_null(row) || oids.is_null(row) {
                    continue;
                }
                let relation = names.value(row);
                // The relation's id and column names, in order.
                let (id, column_names, key): (u64, Vec<String>, Vec<String>) =
                    match self.store.table(relation) {
                        Some(table) => {
                            let def = table.def();
                            (
                                def.id,
                                def.columns.iter().map(|c| c.name.clone()).collect(),
                                def.options.primary_key.clone(),
                            )
                        }
                        None => match views.get(relation) {
                            Some((id, columns)) => (*id, columns.clone(), Vec::new()),
                            None => continue,
                        },
                    };
                let table_oid = oids.value(row);
                let index = |columns: &[String], attnums: &dyn Fn(&str) -> Option<usize>| {
                    columns
                        .iter()
                        .filter_map(|k| Some((i16::try_from(attnums(k)? + 1).ok()?, k.clone())))
                        .collect::<Vec<_>>()
                };
                let by_table = |k: &str| column_names.iter().position(|c| c == k);
                if !key.is_empty() {
                    out.push(Arc::new(RelationIndex {
                        table_oid,
                        namespace_oid: nss.value(row),
                        schema: "public".into(),
                        table: relation.to_string(),
                        options: vec![0; key.len()],
                        columns: index(&key, &by_table),
                        primary: true,
                        name: format!("{relation}_pkey"),
                        index_oid: table_oid.wrapping_add(INDEX_OID_OFFSET),
                    }));
                }
                for def in created.iter().filter(|i| i.on == id) {
                    let columns = index(&def.columns, &by_table);
                    out.push(Arc::new(RelationIndex {
                        table_oid,
                        namespace_oid: nss.value(row),
                        schema: "public".into(),
                        table: relation.to_string(),
                        columns,
                        options: def.options.clone(),
                        primary: false,
                        name: def.name.clone(),
                        index_oid: CREATED_INDEX_OID_OFFSET
                            .wrapping_add(i32::try_from(def.id).unwrap_or(0)),
                    }));
                }
            }
        }
        if let Ok(mut seen) = self.seen.write() {
            for r in &out {
                seen.insert(r.index_oid(), r.clone());
                if r.primary {
                    seen.insert(r.constraint_oid(), r.clone());
                }
            }
        }
        out
    }

    pub fn by_oid(&self, oid: i64) -> Option<Arc<RelationIndex>> {
        let oid = i32::try_from(oid).ok()?;
        self.seen.read().ok()?.get(&oid).cloned()
    }
}

/// Which catalog table a [`KeyCatalogTable`] extends.
#[derive(Debug, Clone, Copy)]
pub enum KeyCatalog {
    Index,
    Constraint,
}

impl KeyCatalog {
    /// Vector columns kept as arrays, with their element type.
    fn array_columns(self) -> &'static [(&'static str, DataType)] {
        match self {
            KeyCatalog::Index => &[
                ("indkey", DataType::Int16),
                ("indoption", DataType::Int16),
                ("indcollation", DataType::Int32),
                ("indclass", DataType::Int32),
            ],
            KeyCatalog::Constraint => &[("conkey", DataType::Int16), ("confkey", DataType::Int16)],
        }
    }
}

/// `pg_index` or `pg_constraint`: PostgreSQL's own rows as
/// datafusion-pg-catalog ships them, plus one row per index (per primary key for `pg_constraint`).
pub struct KeyCatalogTable {
    pub kind: KeyCatalog,
    pub inner: Arc<dyn TableProvider>,
    /// The unwrapped `pg_class`, for the tables' oids.
    pub pg_class: Arc<dyn TableProvider>,
    pub keys: Arc<PrimaryKeys>,
    schema: SchemaRef,
}

impl fmt::Debug for KeyCatalogTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} catalog", self.kind)
    }
}

impl KeyCatalogTable {
    pub fn new(
        kind: KeyCatalog,
        inner: Arc<dyn TableProvider>,
        pg_class: Arc<dyn TableProvider>,
        keys: Arc<PrimaryKeys>,
    ) -> Self {
        let inner_schema = inner.schema();
        let fields: Vec<Field> = inner_schema
            .fields()
            .iter()
            .map(|f| match element_type(kind, f.name()) {
                // pg_index's are int2vector/oidvector, pg_constraint's arrays.
                Some(t) => {
                    let field = Field::new(
                        f.name(),
                        DataType::List(Arc::new(Field::new_list_field(t.clone(), true))),
                        true,
                    );
                    match (kind, t) {
                        (KeyCatalog::Index, DataType::Int16) => {
                            field.with_metadata(crate::types::declared("int2vector"))
                        }
                        (KeyCatalog::Index, _) => {
                            field.with_metadata(crate::types::declared("oidvector"))
                        }
                        _ => field,
                    }
                }
                None => f.as_ref().clone(),
            })
            .collect();
        Self {
            kind,
            inner,
            pg_class,
            keys,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    /// The row of one index, by column name.
    fn row(&self, r: &RelationIndex) -> HashMap<&'static str, ScalarValue> {
        let attnums: Vec<i16> = r.columns.iter().map(|(a, _)| *a).collect();
        let n = i16::try_from(attnums.len()).unwrap_or(i16::MAX);
        let int16s = |v: Vec<i16>| ScalarValue::Utf8(Some(vector_text(&v)));
        let mut row = HashMap::new();
        match self.kind {
            KeyCatalog::Index => {
                row.insert("indexrelid", ScalarValue::Int32(Some(r.index_oid())));
                row.insert("indrelid", ScalarValue::Int32(Some(r.table_oid)));
                row.insert("indnatts", ScalarValue::Int16(Some(n)));
                row.insert("indnkeyatts", ScalarValue::Int16(Some(n)));
                for key in ["indisunique", "indisprimary"] {
                    row.insert(key, ScalarValue::Boolean(Some(r.primary)));
                }
                for yes in ["indimmediate", "indisvalid", "indisready", "indislive"] {
                    row.insert(yes, ScalarValue::Boolean(Some(true)));
                }
                for no in [
                    "indnullsnotdistinct",
                    "indisexclusion",
                    "indisclustered",
                    "indcheckxmin",
                    "indisreplident",
                ] {
                    row.insert(no, ScalarValue::Boolean(Some(false)));
                }
                row.insert("indkey", int16s(attnums.clone()));
                let mut options = r.options.clone();
                options.resize(attnums.len(), 0);
                row.insert("indoption", int16s(options));
                row.insert("indcollation", int16s(vec![0; attnums.len()]));
                row.insert("indclass", int16s(vec![0; attnums.len()]));
                row.insert("indexprs", ScalarValue::Utf8(None));
                row.insert("indpred", ScalarValue::Utf8(None));
            }
            KeyCatalog::Constraint => {
                row.insert("oid", ScalarValue::Int32(Some(r.constraint_oid())));
                row.insert("conname", ScalarValue::Utf8(Some(r.key_name())));
                row.insert("connamespace", ScalarValue::Int32(Some(r.namespace_oid)));
                row.insert("contype", ScalarValue::Utf8(Some("p".into())));
                row.insert("condeferrable", ScalarValue::Boolean(Some(false)));
                row.insert("condeferred", ScalarValue::Boolean(Some(false)));
                row.insert("convalidated", ScalarValue::Boolean(Some(true)));
                row.insert("conrelid", ScalarValue::Int32(Some(r.table_oid)));
                row.insert("contypid", ScalarValue::Int32(Some(0)));
                row.insert("conindid", ScalarValue::Int32(Some(r.index_oid())));
                row.insert("conparentid", ScalarValue::Int32(Some(0)));
                row.insert("confrelid", ScalarValue::Int32(Some(0)));
                for t in ["confupdtype", "confdeltype", "confmatchtype"] {
                    row.insert(t, ScalarValue::Utf8(Some(" ".into())));
                }
                row.insert("conislocal", ScalarValue::Boolean(Some(true)));
                row.insert("coninhcount", ScalarValue::Int16(Some(0)));
                row.insert("connoinherit", ScalarValue::Boolean(Some(true)));
                row.insert("conkey", int16s(attnums));
            }
        }
        row
    }
}

fn element_type(kind: KeyCatalog, column: &str) -> Option<&'static DataType> {
    kind.array_columns()
        .iter()
        .find(|(n, _)| *n == column)
        .map(|(_, t)| t)
}

/// How datafusion-pg-catalog writes a vector: `1 2`.
fn vector_text(v: &[i16]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads `1 2`, `{1,2}` or `[1, 2]` into a list of `element` values; text
/// that is not a list of integers reads as NULL.
pub(super) fn text_to_list(text: &dyn Array, element: &DataType) -> Result<ArrayRef> {
    let text = arrow::compute::cast(text, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    let numbers = |s: &str| -> Option<Vec<i64>> {
        s.trim_matches(|c| matches!(c, '[' | ']' | '{' | '}'))
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<i64>().ok())
            .collect()
    };
    let mut lists = ListBuilder::new(Int64Builder::new());
    for s in text.iter() {
        match s.and_then(numbers) {
            Some(v) => {
                lists.values().append_slice(&v);
                lists.append(true);
            }
            None => lists.append(false),
        }
    }
    let target = DataType::List(Arc::new(Field::new_list_field(element.clone(), true)));
    Ok(arrow::compute::cast(&lists.finish(), &target)?)
}

/// One batch of `schema` with a row per entry of `rows`; a column a row
/// does not name is NULL, or its type's zero when it cannot be NULL.
pub fn rows_batch(
    schema: &SchemaRef,
    rows: &[HashMap<&'static str, ScalarValue>],
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values = rows
            .iter()
            .map(|row| match row.get(field.name().as_str()) {
                Some(v) => v.cast_to(field.data_type()),
                None if field.is_nullable() => ScalarValue::try_from(field.data_type()),
                None => ScalarValue::new_default(field.data_type()),
            })
            .collect::<Result<Vec<_>>>()?;
        columns.push(if values.is_empty() {
            arrow::array::new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(values)?
        });
    }
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

/// Scans a whole catalog table.
pub async fn scan_all(table: &dyn TableProvider, state: &dyn Session) -> Result<Vec<RecordBatch>> {
    let plan = table.scan(state, None, &[], None).await?;
    collect(plan, state.task_ctx()).await
}

#[async_trait]
impl TableProvider for KeyCatalogTable {
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
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let classes = scan_all(self.pg_class.as_ref(), state).await?;
        let relations = self.keys.relations(&classes);
        let mut batches = scan_all(self.inner.as_ref(), state).await?;
        // Only primary keys are constraints.
        let rows: Vec<_> = relations
            .iter()
            .filter(|r| r.primary || matches!(self.kind, KeyCatalog::Index))
            .map(|r| self.row(r))
            .collect();
        batches.push(rows_batch(&self.inner.schema(), &rows)?);
        let mut out = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut columns = batch.columns().to_vec();
            for (i, field) in batch.schema().fields().iter().enumerate() {
                if let Some(t) = element_type(self.kind, field.name()) {
                    columns[i] = text_to_list(&columns[i], t)?;
                }
            }
            out.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        }
        super::sluice_catalog::scan_rows(&self.schema, out, state, projection, filters, limit).await
    }
}

/// The `pg_class` rows of the indexes, in `schema`.
pub fn index_class_rows(
    schema: &SchemaRef,
    relations: &[Arc<RelationIndex>],
) -> Result<RecordBatch> {
    let rows: Vec<_> = relations
        .iter()
        .map(|r| {
            let mut row = HashMap::new();
            row.insert("oid", ScalarValue::Int32(Some(r.index_oid())));
            row.insert("relname", ScalarValue::Utf8(Some(r.key_name())));
            row.insert("relnamespace", ScalarValue::Int32(Some(r.namespace_oid)));
            row.insert("relam", ScalarValue::Int32(Some(BTREE_AM_OID)));
            row.insert("relfilenode", ScalarValue::Int32(Some(r.index_oid())));
            row.insert("relkind", ScalarValue::Utf8(Some("i".into())));
            row.insert("relpersistence", ScalarValue::Utf8(Some("p".into())));
            row.insert(
                "relnatts",
                ScalarValue::Int16(Some(i16::try_from(r.columns.len()).unwrap_or(0))),
            );
            row.insert("relispopulated", ScalarValue::Boolean(Some(true)));
            row.insert("relreplident", ScalarValue::Utf8(Some("n".into())));
            row
        })
        .collect();
    rows_batch(schema, &rows)
}

/// Answers `pg_get_indexdef(index [, column, pretty])` and
/// `pg_get_constraintdef(constraint [, pretty])` for the keyed tables'
/// keys; other oids answer NULL.
pub fn key_functions(keys: Arc<PrimaryKeys>) -> [ScalarUDF; 2] {
    let index_keys = keys.clone();
    let indexdef = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let oids = int64s(&args[0], rows)?;
        let cols = match args.get(1) {
            Some(c) => int64s(c, rows)?,
            None => vec![Some(0); rows],
        };
        let out: StringArray = oids
            .iter()
            .zip(cols)
            .map(|(oid, col)| index_keys.by_oid((*oid)?)?.index_def(col?))
            .collect();
        Ok(as_columnar(args, Arc::new(out)))
    };
    let constraintdef = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let out: StringArray = int64s(&args[0], rows)?
            .iter()
            .map(|oid| {
                let oid = (*oid)?;
                let r = keys.by_oid(oid)?;
                (i64::from(r.constraint_oid()) == oid).then(|| r.constraint_def())
            })
            .collect();
        Ok(as_columnar(args, Arc::new(out)))
    };
    [
        ScalarUDF::new_from_impl(CatalogFunction::new(
            "pg_get_indexdef",
            3,
            DataType::Utf8,
            indexdef,
        )),
        ScalarUDF::new_from_impl(CatalogFunction::new(
            "pg_get_constraintdef",
            2,
            DataType::Utf8,
            constraintdef,
        )),
    ]
}

type TextFunction = dyn Fn(&[ColumnarValue]) -> Result<ColumnarValue> + Send + Sync;

/// A catalog function of one to `max_args` arguments of any type that
/// answers a value of type `returns`.
pub(super) struct CatalogFunction {
    name: &'static str,
    signature: Signature,
    returns: DataType,
    f: Box<TextFunction>,
}

impl CatalogFunction {
    pub(super) fn new(
        name: &'static str,
        max_args: usize,
        returns: DataType,
        f: impl Fn(&[ColumnarValue]) -> Result<ColumnarValue> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            signature: Signature::new(
                TypeSignature::OneOf((1..=max_args).map(TypeSignature::Any).collect()),
                Volatility::Stable,
            ),
            returns,
            f: Box::new(f),
        }
    }
}

impl fmt::Debug for CatalogFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for CatalogFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CatalogFunction {}

impl std::hash::Hash for CatalogFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for CatalogFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        (self.f)(&args.args)
    }
}

pub(super) fn int64s(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<i64>>> {
    let values = arrow::compute::cast(&arg.to_array(rows)?, &DataType::Int64)?;
    Ok(values
        .as_primitive::<arrow::datatypes::Int64Type>()
        .iter()
        .collect())
}

pub(super) fn rows_of(args: &[ColumnarValue]) -> usize {
    args.iter()
        .find_map(|a| match a {
            ColumnarValue::Array(a) => Some(a.len()),
            ColumnarValue::Scalar(_) => None,
        })
        .unwrap_or(1)
}

/// A scalar when every argument was one.
pub(super) fn as_columnar(args: &[ColumnarValue], out: ArrayRef) -> ColumnarValue {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        match ScalarValue::try_from_array(&out, 0) {
            Ok(v) => ColumnarValue::Scalar(v),
            Err(_) => ColumnarValue::Array(out),
        }
    } else {
        ColumnarValue::Array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_read_as_lists() {
        let text = arrow::array::StringArray::from(vec![
            Some("1 2"),
            Some("[3, 4]"),
            Some("{5}"),
            Some(""),
            None,
            Some("x"),
        ]);
        let list = text_to_list(&text, &DataType::Int16).unwrap();
        let list = list.as_list::<i32>();
        let got: Vec<Option<Vec<i16>>> = (0..list.len())
            .map(|i| {
                list.is_valid(i).then(|| {
                    list.value(i)
                        .as_primitive::<arrow::datatypes::Int16Type>()
                        .values()
                        .to_vec()
                })
            })
            .collect();
        assert_eq!(
            got,
            vec![
                Some(vec![1, 2]),
                Some(vec![3, 4]),
                Some(vec![5]),
                Some(vec![]),
                None,
                None
            ]
        );
    }

    #[test]
    fn definitions_read_as_postgresql_prints_them() {
        let r = RelationIndex {
            table_oid: 16400,
            namespace_oid: 2200,
            schema: "public".into(),
            table: "Tenants".into(),
            columns: vec![(1, "region".into()), (3, "id".into())],
            options: vec![0, 0],
            primary: true,
            name: "Tenants_pkey".into(),
            index_oid: 1,
        };
        assert_eq!(
            r.index_def(0).as_deref(),
            Some("CREATE UNIQUE INDEX \"Tenants_pkey\" ON public.\"Tenants\" USING btree (region, id)")
        );
        assert_eq!(r.index_def(2).as_deref(), Some("id"));
        assert_eq!(r.index_def(3), None);
        assert_eq!(r.constraint_def(), "PRIMARY KEY (region, id)");
        // A created index, with each column's order as PostgreSQL prints it.
        let created = RelationIndex {
            primary: false,
            name: "by_time".into(),
            options: vec![3, 2],
            ..r
        };
        assert_eq!(
            created.index_def(0).as_deref(),
            Some("CREATE INDEX by_time ON public.\"Tenants\" USING btree (region DESC, id NULLS FIRST)")
        );
    }
}
