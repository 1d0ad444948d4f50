//! The DataFusion settings every session and every view's pipeline share.

use datafusion::prelude::SessionConfig;

/// Name of the one catalog (database) the server shows.
pub const CATALOG_NAME: &str = "sluice";

/// Settings shared by the query context and the views' pipelines.
pub fn session_config() -> SessionConfig {
    SessionConfig::new()
        .with_default_catalog_and_schema(CATALOG_NAME, "public")
        .with_create_default_catalog_and_schema(true)
        // Sluice's own `information_schema` (PostgreSQL's type names) is
        // registered in the catalog instead of DataFusion's.
        .with_information_schema(false)
}
