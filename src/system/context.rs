use std::sync::Arc;

use datafusion::execution::context::SessionContext;
use datafusion_pg_catalog::pg_catalog::{
    setup_pg_catalog, PgCatalogSchemaProvider, PgCatalogStaticTables,
};

use crate::auth::RoleStore;
use crate::log::LogStore;
use crate::stream::ViewManager;
use crate::subscribe::SubscriptionManager;

use super::pg_catalog_info::{HiddenRelations, SluiceCatalogInfo, SluicePgCatalog};
use super::pg_keys::{key_functions, PrimaryKeys};
use super::sluice_catalog::{PublicSchema, SystemSchema};
use crate::query::cancel::ConnectionRegistry;
use crate::query::pg_roles::RoleDirectory;
use crate::query::provider::LogTableProvider;
use crate::query::{session_config, CATALOG_NAME};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::datasource::TableProvider;

/// The shared DataFusion context: the log tables in `public`, the system
/// tables in `sluice_catalog`, and the `pg_catalog` that psql and drivers
/// query.
///
/// `query_memory`: the most memory all queries together may hold in
/// DataFusion's operators (sorts, aggregates and joins). A sort or an
/// aggregate that would go beyond its share spills to temporary files; an
/// operator that cannot spill (a hash join's build side) fails its query
/// with 53200, and the server and the other statements carry on. Views do
/// not draw on it: their state is kept whatever its size.
pub fn build_context(
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    subs: Arc<SubscriptionManager>,
    connectors: super::sluice_catalog::Connectors,
    connections: Arc<ConnectionRegistry>,
    query_memory: Option<usize>,
    roles: Arc<RoleStore>,
) -> Result<SessionContext, datafusion::error::DataFusionError> {
    let runtime = match query_memory {
        Some(bytes) => {
            use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
            use datafusion::execution::runtime_env::RuntimeEnvBuilder;
            let pool = TrackConsumersPool::new(
                FairSpillPool::new(bytes),
                std::num::NonZeroUsize::new(3).unwrap_or(std::num::NonZeroUsize::MIN),
            );
            Some(
                RuntimeEnvBuilder::new()
                    .with_memory_pool(Arc::new(pool))
                    .build_arc()?,
            )
        }
        None => None,
    };
    let mut config = session_config();
    if let Some(bytes) = query_memory {
        // Each sort holds back this much to merge what it spilled
        // (DataFusion's default is 10 MB): a query with several sorts side
        // by side (a merge join's inputs, one per partition) must fit in
        // the pool.
        let reserve = (bytes / 16).clamp(256 * 1024, 10 * 1024 * 1024);
        config = config.set_usize("datafusion.execution.sort_spill_reservation_bytes", reserve);
    }
    let ctx = SessionContext::new_with_state(
        crate::query::postgres_state(config, runtime)
            .with_physical_optimizer_rule(Arc::new(crate::query::YieldingJoins))
            .with_query_planner(Arc::new(crate::query::asof_join::AsofQueryPlanner))
            .build(),
    );
    let catalog = ctx.catalog(CATALOG_NAME).ok_or_else(|| {
        datafusion::error::DataFusionError::Internal("default catalog missing".into())
    })?;
    let roles_for_functions = roles.clone();
    let store_for_udtf = store.clone();
    let store_for_catalog = store.clone();
    let store_for_keys = store.clone();
    let store_for_viewdefs = store.clone();
    let store_for_info = store.clone();
    let store_for_attributes = store.clone();
    let query_views = Arc::new(super::query_views::QueryViews::new(
        store.clone(),
        views.clone(),
    ));
    query_views.plan_in(&ctx);
    catalog.register_schema(
        "public",
        Arc::new(PublicSchema {
            store: store.clone(),
            views: views.clone(),
            query_views,
        }),
    )?;
    catalog.register_schema(
        "sluice_catalog",
        Arc::new(SystemSchema {
            store,
            views: views.clone(),
            subs,
            connectors,
            connections,
            roles: roles.clone(),
        }),
    )?;
    catalog.register_schema(
        "information_schema",
        Arc::new(super::information_schema::InformationSchema {
            inner: datafusion::catalog::information_schema::InformationSchemaProvider::new(
                ctx.state().catalog_list().clone(),
            ),
            catalogs: ctx.state().catalog_list().clone(),
            store: store_for_info.clone(),
            views: views.clone(),
        }),
    )?;
    ctx.register_udtf(
        "changelog",
        Arc::new(ChangelogFunction {
            store: store_for_udtf,
        }),
    );
    setup_pg_catalog(&ctx, CATALOG_NAME, RoleDirectory(roles.clone())).map_err(|e| *e)?;
    // setup_pg_catalog puts in its own type planner; ours reads
    // PostgreSQL's type names, and hands it the oid aliases.
    {
        let state = ctx.state_ref();
        let existing = state.read().clone();
        *state.write() =
            datafusion::execution::session_state::SessionStateBuilder::new_from_existing(existing)
                .with_type_planner(crate::query::dialect::type_planner())
                .build();
    }
    // The same pg_catalog, told about tables by Sluice's catalog (NOT NULL,
    // no hidden columns) rather than by the planner's schemas.
    let static_tables = Arc::new(PgCatalogStaticTables::try_new()?);
    let pg_catalog = PgCatalogSchemaProvider::try_new(
        SluiceCatalogInfo {
            catalogs: ctx.state().catalog_list().clone(),
            store: store_for_catalog,
        },
        static_tables.clone(),
        RoleDirectory(roles),
    )?;
    let keys = Arc::new(PrimaryKeys::new(store_for_keys, views.clone()));
    let hidden = Arc::new(HiddenRelations::default());
    let names = Arc::new(super::pg_catalog_info::RelationNames::default());
    catalog.register_schema(
        "pg_catalog",
        Arc::new(SluicePgCatalog {
            inner: Arc::new(pg_catalog),
            store: store_for_attributes,
            views: views.clone(),
            keys: keys.clone(),
            hidden: hidden.clone(),
            names: names.clone(),
        }),
    )?;
    ctx.register_udf(hidden.function());
    crate::query::register_functions(&ctx);
    ctx.register_udf(crate::query::pg_roles::has_table_privilege(
        roles_for_functions,
    ));
    for f in key_functions(keys) {
        ctx.register_udf(f);
    }
    for f in super::catalog_views::function_signature_functions(
        static_tables.pg_proc.data(),
        static_tables.pg_type.data(),
    ) {
        ctx.register_udf(f);
    }
    ctx.register_udf(super::catalog_views::viewdef_function(
        views.clone(),
        store_for_viewdefs,
        names,
    ));
    Ok(ctx)
}

/// `changelog(t)`: every record of keyed table `t`, upserts and tombstones,
/// with `_op`, `_partition`, `_offset` and `_ingested_at`.
struct ChangelogFunction {
    store: Arc<LogStore>,
}

impl std::fmt::Debug for ChangelogFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("changelog()")
    }
}

impl TableFunctionImpl for ChangelogFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        use datafusion::logical_expr::Expr;
        let name = match args.exprs() {
            [Expr::Column(c)] => c.name.clone(),
            [Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(s)), _)] => s.clone(),
            _ => {
                return Err(datafusion::error::DataFusionError::Plan(
                    "changelog() takes one table: changelog(t)".into(),
                ))
            }
        };
        let table = self.store.table(&name).ok_or_else(|| {
            datafusion::error::DataFusionError::Plan(format!("table '{name}' not found"))
        })?;
        if !table.def().is_keyed() {
            return Err(datafusion::error::DataFusionError::NotImplemented(format!(
                "changelog() reads keyed tables; \"{name}\" is append-only, so its rows are its changes"
            )));
        }
        Ok(Arc::new(LogTableProvider::changelog(table)))
    }
}
