//! The operators' HTTP endpoint (`--http-listen`): `/livez`, `/readyz`,
//! `/metrics` and the status page at `/`. It only translates: requests
//! in, calls to the engine (metrics are rendered by [`crate::metrics`],
//! the page by [`crate::status`]), responses out.
//!
//! It starts before recovery, so that a probe can tell a server that is
//! recovering (`/readyz` 503) from one that is down (no answer).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use datafusion::prelude::SessionContext;
use tokio::net::TcpListener;
use tracing::{info, info_span, warn, Instrument};

use crate::query::cancel::ConnectionRegistry;

/// What the endpoint answers from, filled in as recovery goes.
#[derive(Default)]
pub struct HttpState {
    serving: OnceLock<Serving>,
    ready: AtomicBool,
}

struct Serving {
    ctx: Arc<SessionContext>,
    connections: Arc<ConnectionRegistry>,
}

impl HttpState {
    /// The log and the catalog are open and the views restored from
    /// their checkpoints: `/metrics` and the status page have data (the
    /// views may still be replaying).
    pub fn set_serving(&self, ctx: Arc<SessionContext>, connections: Arc<ConnectionRegistry>) {
        let _ = self.serving.set(Serving { ctx, connections });
    }

    /// Recovery is done (every view has replayed the log up to where it
    /// ended at start-up): `/readyz` answers 200.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}

/// Binds `addr` and serves the endpoint in the background; the bound
/// address.
pub async fn start(addr: SocketAddr, state: Arc<HttpState>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot serve HTTP on {addr} ({e}): give --http-listen another address, or off"
            ),
        )
    })?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(status_page))
        .with_state(state);
    tokio::spawn(
        async move {
            if let Err(e) = axum::serve(listener, app).await {
                warn!(error = %e, "the HTTP endpoint stopped");
            }
        }
        .instrument(info_span!("http")),
    );
    info!(http_listen = %bound, "HTTP endpoint is up");
    Ok(bound)
}

async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    match state.ready.load(Ordering::Acquire) {
        true => (StatusCode::OK, "ready\n").into_response(),
        false => (StatusCode::SERVICE_UNAVAILABLE, "not ready: recovering\n").into_response(),
    }
}

#[derive(serde::Deserialize)]
struct PageQuery {
    /// `main`: the sections alone, as the page's script refreshes them.
    part: Option<String>,
}

async fn status_page(
    State(state): State<Arc<HttpState>>,
    Query(query): Query<PageQuery>,
) -> Response {
    let Some(ready) = state.serving.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: recovering\n").into_response();
    };
    let html = match query.part.as_deref() {
        Some("main") => crate::status::main(&ready.ctx).await,
        _ => crate::status::page(&ready.ctx).await,
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<HttpState>>) -> Response {
    let Some(ready) = state.serving.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: recovering\n").into_response();
    };
    match crate::metrics::render(&ready.ctx, ready.connections.len()).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            warn!(error = %e, "could not render metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn status(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        text.split_whitespace().nth(1).unwrap_or("").to_string()
    }

    #[tokio::test]
    async fn readyz_is_503_until_recovery_is_done() {
        let state = Arc::new(HttpState::default());
        let addr = start("127.0.0.1:0".parse().unwrap(), state.clone())
            .await
            .unwrap();
        assert_eq!(status(addr, "/livez").await, "200");
        assert_eq!(status(addr, "/readyz").await, "503");
        assert_eq!(status(addr, "/metrics").await, "503");
        state.set_serving(
            Arc::new(SessionContext::new()),
            Arc::new(ConnectionRegistry::new(None)),
        );
        assert_eq!(status(addr, "/readyz").await, "503", "views still replay");
        // Served now (a bare context has no sluice_catalog to read: 500).
        assert_ne!(status(addr, "/metrics").await, "503");
        state.set_ready();
        assert_eq!(status(addr, "/readyz").await, "200");
        assert_eq!(status(addr, "/nothing").await, "404");
    }
}
