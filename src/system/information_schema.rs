//! `information_schema` as PostgreSQL shows it: `columns` lists each
//! column of the tables and views with PostgreSQL's type names, lengths,
//! precisions and scales (and no hidden column), in PostgreSQL's column
//! types (`sql_identifier` names, `cardinal_number`, `yes_or_no`);
//! `tables`, `views`, `schemata` and the rest are DataFusion's, with the
//! same column types.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::log::LogStore;
use crate::stream::ViewManager;
use crate::types::{declared_field, oid, PgType};

/// The schema, over every catalog's tables.
pub struct InformationSchema {
    pub inner: InformationSchemaProvider,
    pub catalogs: Arc<dyn CatalogProviderList>,
    pub store: Arc<LogStore>,
    pub views: Arc<ViewManager>,
}

impl std::fmt::Debug for InformationSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("information_schema")
    }
}

/// PostgreSQL's column types of `information_schema`.
fn identifier(name: &str) -> Field {
    declared_field(name, DataType::Utf8, "name")
}
fn cardinal(name: &str) -> Field {
    Field::new(name, DataType::Int32, true)
}
fn character(name: &str) -> Field {
    declared_field(name, DataType::Utf8, "varchar")
}
fn yes_or_no(name: &str) -> Field {
    declared_field(name, DataType::Utf8, "varchar(3)")
}

/// The same columns in PostgreSQL's types: names as `sql_identifier`,
/// counts as `cardinal_number`, the rest `character_data` (or
/// `yes_or_no` for a YES/NO column).
fn retyped(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                let name = f.name().as_str();
                match f.data_type() {
                    DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
                        if name.ends_with("_catalog")
                            || name.ends_with("_schema")
                            || name.ends_with("_name")
                            || name == "schema_owner" =>
                    {
                        identifier(name)
                    }
                    DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
                        if name.starts_with("is_") =>
                    {
                        yes_or_no(name)
                    }
                    DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => character(name),
                    t if t.is_integer() => cardinal(name),
                    _ => f.as_ref().clone(),
                }
            })
            .collect::<Vec<_>>(),
    ))
}

fn columns_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        identifier("table_catalog"),
        identifier("table_schema"),
        identifier("table_name"),
        identifier("column_name"),
        cardinal("ordinal_position"),
        character("column_default"),
        yes_or_no("is_nullable"),
        character("data_type"),
        cardinal("character_maximum_length"),
        cardinal("character_octet_length"),
        cardinal("numeric_precision"),
        cardinal("numeric_precision_radix"),
        cardinal("numeric_scale"),
        cardinal("datetime_precision"),
        character("interval_type"),
        cardinal("interval_precision"),
        identifier("udt_catalog"),
        identifier("udt_schema"),
        identifier("udt_name"),
        identifier("dtd_identifier"),
        yes_or_no("is_identity"),
        character("is_generated"),
        yes_or_no("is_updatable"),
    ]))
}

/// What `information_schema.columns` says of one column.
struct ColumnFacts {
    data_type: String,
    char_max: Option<i32>,
    char_octets: Option<i32>,
    precision: Option<i32>,
    radix: Option<i32>,
    scale: Option<i32>,
    datetime_precision: Option<i32>,
    udt_name: String,
}

fn facts(field: &Field) -> ColumnFacts {
    let t = PgType::of_field(field);
    let name = t.format();
    let base = name.split('(').next().unwrap_or(&name).to_string();
    let mut f = ColumnFacts {
        data_type: if name.ends_with("[]") {
            "ARRAY".into()
        } else {
            base
        },
        char_max: t.max_length(),
        char_octets: None,
        precision: None,
        radix: None,
        scale: None,
        datetime_precision: None,
        udt_name: t.type_name(),
    };
    match t.oid {
        oid::INT2 => (f.precision, f.radix, f.scale) = (Some(16), Some(2), Some(0)),
        oid::INT4 => (f.precision, f.radix, f.scale) = (Some(32), Some(2), Some(0)),
        oid::INT8 => (f.precision, f.radix, f.scale) = (Some(64), Some(2), Some(0)),
        oid::FLOAT4 => (f.precision, f.radix) = (Some(24), Some(2)),
        oid::FLOAT8 => (f.precision, f.radix) = (Some(53), Some(2)),
        oid::NUMERIC => {
            f.radix = Some(10);
            if let Some((p, s)) = t.precision_scale() {
                (f.precision, f.scale) = (Some(p), Some(s));
            }
        }
        oid::TEXT | oid::VARCHAR | oid::BPCHAR => {
            f.char_octets = Some(match f.char_max {
                Some(n) => n * 4,
                None => 1_073_741_824,
            })
        }
        oid::DATE => f.datetime_precision = Some(0),
        oid::TIMESTAMP | oid::TIMESTAMPTZ | oid::TIME | oid::INTERVAL => {
            f.datetime_precision = Some(6)
        }
        _ => {}
    }
    f
}

/// `information_schema.columns`, built when it is read.
struct Columns {
    catalogs: Arc<dyn CatalogProviderList>,
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
}

impl std::fmt::Debug for Columns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("information_schema.columns")
    }
}

impl Columns {
    /// Each column of a relation: its field and whether it may be NULL.
    async fn relation_columns(
        &self,
        schema_name: &str,
        table: &str,
        provider: &dyn SchemaProvider,
    ) -> Result<Vec<(Field, bool)>> {
        if schema_name == "public" {
            if let Some(t) = self.store.table(table) {
                let def = t.def();
                let hidden = def.hidden_columns();
                return Ok(def
                    .columns
                    .iter()
                    .filter(|c| !hidden.contains(&c.name.as_str()))
                    .map(|c| (c.to_field(), c.nullable))
                    .collect());
            }
            if let Some(v) = self.views.view(table) {
                return Ok(v
                    .schema
                    .fields()
                    .iter()
                    .map(|f| (f.as_ref().clone(), true))
                    .collect());
            }
        }
        Ok(match provider.table(table).await? {
            Some(t) => t
                .schema()
                .fields()
                .iter()
                .map(|f| (f.as_ref().clone(), f.is_nullable()))
                .collect(),
            None => vec![],
        })
    }

    async fn rows(&self) -> Result<RecordBatch> {
        let schema = columns_schema();
        let mut text: Vec<StringBuilder> = Vec::new();
        let mut ints: Vec<Int32Builder> = Vec::new();
        for f in schema.fields() {
            match f.data_type() {
                DataType::Int32 => ints.push(Int32Builder::new()),
                _ => text.push(StringBuilder::new()),
            }
        }
        for catalog_name in self.catalogs.catalog_names() {
            let Some(catalog) = self.catalogs.catalog(&catalog_name) else {
                continue;
            };
            let mut schemas = catalog.schema_names();
            schemas.sort();
            for schema_name in schemas {
                if schema_name == "information_schema" {
                    continue;
                }
                let Some(provider) = catalog.schema(&schema_name) else {
                    continue;
                };
                let mut tables = provider.table_names();
                tables.sort();
                for table in tables {
                    let columns = self
                        .relation_columns(&schema_name, &table, provider.as_ref())
                        .await?;
                    for (position, (field, nullable)) in columns.into_iter().enumerate() {
                        let f = facts(&field);
                        let texts: [Option<String>; 15] = [
                            Some(catalog_name.clone()),
                            Some(schema_name.clone()),
                            Some(table.clone()),
                            Some(field.name().clone()),
                            None,
                            Some(if nullable { "YES" } else { "NO" }.into()),
                            Some(f.data_type),
                            None,
                            Some(catalog_name.clone()),
                            Some("pg_catalog".into()),
                            Some(f.udt_name),
                            Some((position + 1).to_string()),
                            Some("NO".into()),
                            Some("NEVER".into()),
                            Some("YES".into()),
                        ];
                        for (b, v) in text.iter_mut().zip(texts) {
                            b.append_option(v);
                        }
                        let numbers = [
                            Some(position as i32 + 1),
                            f.char_max,
                            f.char_octets,
                            f.precision,
                            f.radix,
                            f.scale,
                            f.datetime_precision,
                            None,
                        ];
                        for (b, v) in ints.iter_mut().zip(numbers) {
                            b.append_option(v);
                        }
                    }
                }
            }
        }
        let mut text = text.into_iter();
        let mut ints = ints.into_iter();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            columns.push(match f.data_type() {
                DataType::Int32 => match ints.next() {
                    Some(mut b) => Arc::new(b.finish()),
                    None => break,
                },
                _ => match text.next() {
                    Some(mut b) => Arc::new(b.finish()),
                    None => break,
                },
            });
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[async_trait]
impl TableProvider for Columns {
    fn schema(&self) -> SchemaRef {
        columns_schema()
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
        let rows = self.rows().await?;
        super::sluice_catalog::scan_rows(
            &columns_schema(),
            vec![rows],
            state,
            projection,
            filters,
            limit,
        )
        .await
    }
}

/// One of DataFusion's tables, its columns in PostgreSQL's types. As in
/// PostgreSQL, `tables` and `views` do not list materialized views
/// (`pg_matviews` does).
struct Retyped {
    inner: Arc<dyn TableProvider>,
    without_materialized: Option<Arc<ViewManager>>,
    /// `tables`: with the columns PostgreSQL's has beyond DataFusion's
    /// (sqlsmith reads `is_insertable_into`).
    table_columns: bool,
}

/// `information_schema.tables`' columns after `table_type`, as
/// PostgreSQL's has them.
fn more_table_columns() -> [Field; 8] {
    [
        identifier("self_referencing_column_name"),
        character("reference_generation"),
        identifier("user_defined_type_catalog"),
        identifier("user_defined_type_schema"),
        identifier("user_defined_type_name"),
        yes_or_no("is_insertable_into"),
        yes_or_no("is_typed"),
        character("commit_action"),
    ]
}

impl std::fmt::Debug for Retyped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("information_schema table")
    }
}

#[async_trait]
impl TableProvider for Retyped {
    fn schema(&self) -> SchemaRef {
        let schema = retyped(&self.inner.schema());
        if !self.table_columns {
            return schema;
        }
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(more_table_columns());
        Arc::new(Schema::new(fields))
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
        let schema = self.schema();
        let batches = super::pg_keys::scan_all(self.inner.as_ref(), state).await?;
        let rows = batches
            .into_iter()
            .map(|b| {
                let mut columns = super::sluice_catalog::cast_to(b.columns(), schema.fields())?;
                if self.table_columns {
                    columns.extend(table_columns_of(&b)?);
                }
                let batch = RecordBatch::try_new(schema.clone(), columns)?;
                match &self.without_materialized {
                    Some(views) => without_materialized(batch, views),
                    None => Ok(batch),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        super::sluice_catalog::scan_rows(&schema, rows, state, projection, filters, limit).await
    }
}

/// The values of [`more_table_columns`] for the rows of DataFusion's
/// `tables`: only a base table takes INSERT (a view is a query; a
/// materialized view is written by its dataflow alone).
fn table_columns_of(batch: &RecordBatch) -> Result<Vec<arrow::array::ArrayRef>> {
    use arrow::array::{AsArray, StringArray};
    let rows = batch.num_rows();
    let kinds = super::sluice_catalog::text_column(batch, "table_type");
    let insertable: StringArray = (0..rows)
        .map(|i| {
            let base = kinds
                .as_ref()
                .is_some_and(|k| k.as_string::<i32>().value(i) == "BASE TABLE");
            Some(if base { "YES" } else { "NO" })
        })
        .collect();
    let null = || arrow::array::new_null_array(&DataType::Utf8, rows);
    let no: StringArray = (0..rows).map(|_| Some("NO")).collect();
    Ok(vec![
        null(),
        null(),
        null(),
        null(),
        null(),
        Arc::new(insertable),
        Arc::new(no),
        null(),
    ])
}

/// The rows of `batch` that are not materialized views of `public`.
fn without_materialized(batch: RecordBatch, views: &ViewManager) -> Result<RecordBatch> {
    use arrow::array::{Array, AsArray, BooleanArray};
    let text = |name: &str| super::sluice_catalog::text_column(&batch, name);
    let (Some(schemas), Some(names)) = (text("table_schema"), text("table_name")) else {
        return Ok(batch);
    };
    let (schemas, names) = (schemas.as_string::<i32>(), names.as_string::<i32>());
    let keep: BooleanArray = (0..batch.num_rows())
        .map(|i| {
            let materialized = !schemas.is_null(i)
                && schemas.value(i) == "public"
                && !names.is_null(i)
                && views.view(names.value(i)).is_some();
            Some(!materialized)
        })
        .collect();
    Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name.eq_ignore_ascii_case("columns") {
            return Ok(Some(Arc::new(Columns {
                catalogs: self.catalogs.clone(),
                store: self.store.clone(),
                views: self.views.clone(),
            })));
        }
        Ok(self.inner.table(name).await?.map(|inner| {
            let without_materialized = ["tables", "views"]
                .contains(&name.to_ascii_lowercase().as_str())
                .then(|| self.views.clone());
            Arc::new(Retyped {
                inner,
                without_materialized,
                table_columns: name.eq_ignore_ascii_case("tables"),
            }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}
