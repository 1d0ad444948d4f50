//! The operators' HTTP endpoint (`--http-listen`): `/livez`, `/readyz` and
//! `/metrics`. It only translates: requests in, calls to the engine
//! (metrics are rendered by [`crate::metrics`]), responses out.
//!
//! It starts before recovery, so that a probe can tell a server that is
//! recovering (`/readyz` 503) from one that is down (no answer).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use datafusion::prelude::SessionContext;
use tokio::net::TcpListener;
use tracing::{info, info_span, warn, Instrument};

use crate::query::cancel::ConnectionRegistry;

/// What the endpoint answers from; filled in once recovery is done.
#[derive(Default)]
pub struct HttpState {
    ready: OnceLock<Ready>,
}

struct Ready {
    ctx: Arc<SessionContext>,
    connections: Arc<ConnectionRegistry>,
}

impl HttpState {
    /// Recovery is done: `/readyz` answers 200 and `/metrics` has data.
    pub fn set_ready(&self, ctx: Arc<SessionContext>, connections: Arc<ConnectionRegistry>) {
        let _ = self.ready.set(Ready { ctx, connections });
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
    match state.ready.get() {
        Some(_) => (StatusCode::OK, "ready\n").into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "not ready: recovering\n").into_response(),
    }
}

async fn metrics(State(state): State<Arc<HttpState>>) -> Response {
    let Some(ready) = state.ready.get() else {
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
        state.set_ready(
            Arc::new(SessionContext::new()),
            Arc::new(ConnectionRegistry::new(None)),
        );
        assert_eq!(status(addr, "/readyz").await, "200");
        assert_eq!(status(addr, "/nothing").await, "404");
    }
}
