//! What `pg_catalog` (psql's `\d`, JDBC's `DatabaseMetaData`, SQLAlchemy's
//! reflection) is told about tables: the columns as the table defines
//! them, NOT NULL included, without the hidden columns (`_partition`,
//! `_offset`, `_ingested_at`), which `SELECT *` does not show either.
//!
//! The query planner sees every column as nullable (NOT NULL is enforced
//! when rows are staged, with PostgreSQL's error), so the catalog cannot
//! simply read the planner's schemas.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::CatalogProviderList;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;

use crate::log::LogStore;

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
