//! The PostgreSQL wire front end: connections, the simple and extended query
//! protocols, and `COPY ... FROM STDIN`.

mod copy;
mod export;
mod handler;
mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use pgwire::tokio::process_socket;
use tokio::net::TcpListener;
use tracing::{info, info_span, warn, Instrument};

use crate::checkpoint::Checkpoints;
use crate::log::{attach_remote_segments, spawn_compaction, spawn_tiering, LogConfig, LogStore};
use crate::query::{build_context, session_config};
use crate::store::DurableStore;
use crate::stream::ViewManager;
use crate::subscribe::SubscriptionManager;

pub use handler::Handlers;

/// What `sluice serve` is given.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub log: LogConfig,
    /// `s3://bucket/prefix`; `None` keeps objects under `<data_dir>/objects`.
    pub object_store: Option<String>,
    pub checkpoint_interval: std::time::Duration,
    pub tiering_interval: std::time::Duration,
    pub compaction_interval: std::time::Duration,
}

/// Opens the data directory (recovering every table) and serves clients
/// until the process ends.
pub async fn serve(config: ServerConfig) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let objects = Arc::new(DurableStore::open(
        config.object_store.as_deref(),
        &config.data_dir.join("objects"),
    )?);
    let store = Arc::new(LogStore::open(&config.data_dir, config.log)?);
    attach_remote_segments(&store, &objects).await?;
    spawn_tiering(store.clone(), objects.clone(), config.tiering_interval);

    let checkpoints = Checkpoints::new(objects.clone(), config.checkpoint_interval);
    let views = ViewManager::start(store.clone(), checkpoints, session_config()).await?;
    spawn_compaction(
        store.clone(),
        objects.clone(),
        config.compaction_interval,
        views.compaction_horizon(),
    );
    let subs = SubscriptionManager::open(store.clone(), views.clone())?;
    let ctx = Arc::new(build_context(store.clone(), views.clone(), subs.clone())?);
    let handlers = Arc::new(Handlers::new(store, views, subs, ctx, objects.clone()));
    let listener = TcpListener::bind(config.listen).await?;
    info!(listen = %listener.local_addr()?, data_dir = %config.data_dir.display(),
          object_store = objects.url(), "sluice is ready");
    loop {
        let (socket, addr) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let handlers = handlers.clone();
        tokio::spawn(
            async move {
                if let Err(e) = process_socket(socket, None, handlers).await {
                    warn!(error = %e, "connection ended with an error");
                }
            }
            .instrument(info_span!("connection", peer = %addr)),
        );
    }
}
