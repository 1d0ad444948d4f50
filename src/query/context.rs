use std::sync::Arc;

use datafusion::execution::context::SessionContext;
use datafusion::prelude::SessionConfig;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::setup_pg_catalog;

use crate::log::LogStore;
use crate::stream::ViewManager;
use crate::subscribe::SubscriptionManager;

use super::system::{PublicSchema, SystemSchema};

/// Name of the one catalog (database) the server shows.
pub const CATALOG_NAME: &str = "sluice";

/// Settings shared by the query context and the views' pipelines.
pub fn session_config() -> SessionConfig {
    SessionConfig::new()
        .with_default_catalog_and_schema(CATALOG_NAME, "public")
        .with_create_default_catalog_and_schema(true)
        .with_information_schema(true)
}

/// The shared DataFusion context: the log tables in `public`, the system
/// tables in `sluice_catalog`, and the `pg_catalog` that psql and drivers
/// query.
pub fn build_context(
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    subs: Arc<SubscriptionManager>,
) -> Result<SessionContext, datafusion::error::DataFusionError> {
    let ctx = SessionContext::new_with_config(session_config());
    let catalog = ctx.catalog(CATALOG_NAME).ok_or_else(|| {
        datafusion::error::DataFusionError::Internal("default catalog missing".into())
    })?;
    catalog.register_schema(
        "public",
        Arc::new(PublicSchema {
            store: store.clone(),
            views: views.clone(),
        }),
    )?;
    catalog.register_schema(
        "sluice_catalog",
        Arc::new(SystemSchema { store, views, subs }),
    )?;
    setup_pg_catalog(&ctx, CATALOG_NAME, EmptyContextProvider).map_err(|e| *e)?;
    Ok(ctx)
}
