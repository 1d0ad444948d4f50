//! What `pg_catalog` (psql's `\d`, JDBC's `DatabaseMetaData`, SQLAlchemy's
//! reflection) is told about tables: the columns as the table defines
//! them, NOT NULL included, without the hidden columns (`_partition`,
//! `_offset`, `_ingested_at`), which `SELECT *` does not show either.
//!
//! The query planner sees every column as nullable (NOT NULL is enforced
//! when rows are staged, with PostgreSQL's error), so the catalog cannot
//! simply read the planner's schemas.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::array::{AsArray, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;

use crate::log::LogStore;
use crate::stream::ViewManager;

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
                return Ok(Some(t.def.data_schema()));
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
pub struct SluicePgCatalog {
    pub inner: Arc<dyn SchemaProvider>,
    pub views: Arc<ViewManager>,
}

impl fmt::Debug for SluicePgCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SluicePgCatalog")
    }
}

#[async_trait]
impl SchemaProvider for SluicePgCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let table = self.inner.table(name).await?;
        match table {
            Some(inner) if name == "pg_class" => Ok(Some(Arc::new(PgClass {
                inner,
                views: self.views.clone(),
            }))),
            other => Ok(other),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

struct PgClass {
    inner: Arc<dyn TableProvider>,
    views: Arc<ViewManager>,
}

impl fmt::Debug for PgClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pg_class")
    }
}

#[async_trait]
impl TableProvider for PgClass {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
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
        let all = self.inner.scan(state, None, &[], None).await?;
        let batches = collect(all, state.task_ctx()).await?;
        let schema = self.inner.schema();
        let (Ok(relname), Ok(relkind)) = (schema.index_of("relname"), schema.index_of("relkind"))
        else {
            return super::system::scan_rows(&schema, batches, state, projection, filters, limit)
                .await;
        };
        let views: HashSet<String> = self
            .views
            .views()
            .iter()
            .map(|v| v.def.name.clone())
            .collect();
        let mut out = Vec::with_capacity(batches.len());
        for batch in batches {
            let (Some(names), Some(kinds)) = (
                batch.column(relname).as_string_opt::<i32>(),
                batch.column(relkind).as_string_opt::<i32>(),
            ) else {
                out.push(batch);
                continue;
            };
            let kinds: StringArray = names
                .iter()
                .zip(kinds.iter())
                .map(|(name, kind)| match (name, kind) {
                    (Some(n), Some("v")) if views.contains(n) => Some("m"),
                    (_, kind) => kind,
                })
                .collect();
            let mut columns = batch.columns().to_vec();
            columns[relkind] = Arc::new(kinds);
            out.push(RecordBatch::try_new(batch.schema(), columns)?);
        }
        super::system::scan_rows(&schema, out, state, projection, filters, limit).await
    }
}
