//! The PostgreSQL wire front end: connections, the simple and extended query
//! protocols, and `COPY ... FROM STDIN`.

mod connection;
mod copy;
mod encode;
mod errors;
mod export;
mod frames;
mod handler;
mod login;

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::FutureExt;

use tokio::net::{TcpListener, TcpStream};
use tracing::{info, info_span, warn, Instrument};

use crate::auth::{AuthConfig, Authenticator};
use crate::engine::{Engine, EngineConfig};
use crate::http::HttpState;
use crate::query::cancel::ConnectionRegistry;
use crate::stream::ViewManager;

pub use handler::Handlers;

/// Connections that ended with an error (a malformed message, a broken
/// socket) since start-up.
pub static CONNECTION_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Connections that ended because serving them panicked.
pub static PANICKED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Logs a panic as one line (its message, where, and the span it happened
/// in, which names the connection and the statement) instead of a
/// backtrace; `SLUICE_PANIC_BACKTRACE=1` adds the backtrace to the line.
pub fn install_panic_hook() {
    let with_backtrace = std::env::var_os("SLUICE_PANIC_BACKTRACE").is_some_and(|v| v != "0");
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if with_backtrace {
            let bt = std::backtrace::Backtrace::force_capture();
            tracing::error!(%message, %location, backtrace = %bt, "panic");
        } else {
            tracing::error!(%message, %location, "panic");
        }
    }));
}

/// What `sluice serve` is given.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// The data directory and how it is kept.
    pub engine: EngineConfig,
    /// How long a shutdown waits for running statements.
    pub shutdown_timeout: std::time::Duration,
    /// Where `/livez`, `/readyz` and `/metrics` are served; None: nowhere.
    pub http_listen: Option<SocketAddr>,
    /// How logins are checked, and TLS.
    pub auth: AuthConfig,
}

/// Runs the server on a runtime of its own until it stops, its threads'
/// stacks `stack_bytes` each (deep statements recurse while they are
/// parsed, planned and dropped).
///
/// The runtime lives here rather than in `main` so that the whole server
/// is compiled once, in this crate: driven from the binary, the server's
/// future was compiled again there, which took a release build more than
/// two minutes.
pub fn run(
    config: ServerConfig,
    stack_bytes: usize,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(stack_bytes)
        .build()?;
    let served = runtime.block_on(serve(config));
    // Background tasks (tiering, compaction, view tasks) are left as a
    // crash would leave them, which they survive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    served
}

/// Opens the data directory (recovering every table) and serves clients
/// until SIGTERM or SIGINT, then shuts down cleanly (see [`shut_down`]).
pub async fn serve(config: ServerConfig) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Before anything reads or writes the directory; held until we return.
    let _data_dir_lock = crate::log::DataDirLock::acquire(&config.engine.data_dir)?;
    // First, so that a server that must not start (trust on a public
    // address, a certificate that does not load) stops before recovery.
    let auth = Arc::new(Authenticator::start(
        &config.auth,
        &config.engine.data_dir,
        config.listen,
    )?);
    let tls = auth.tls.as_ref().map(|t| t.acceptor.clone());
    // Up before recovery, so that /readyz can say 503 while it runs.
    let http = Arc::new(HttpState::default());
    if let Some(addr) = config.http_listen {
        crate::http::start(addr, http.clone()).await?;
    }
    let engine = Arc::new(Engine::open(&config.engine, auth.roles.clone()).await?);
    let (views, connections, ctx, objects) = (
        engine.views.clone(),
        engine.connections.clone(),
        engine.ctx.clone(),
        engine.objects.clone(),
    );
    let handlers = Arc::new(Handlers::new(engine, auth.clone()));
    http.set_serving(ctx.clone(), connections.clone());
    // Ready once every view has replayed the log up to where it ends now;
    // clients may connect (and write) meanwhile.
    let replaying = views.clone();
    tokio::spawn(
        async move {
            let started = std::time::Instant::now();
            replaying.caught_up().await;
            http.set_ready();
            info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "recovery done: every view has replayed the log"
            );
        }
        .instrument(info_span!("recovery")),
    );
    let listener = TcpListener::bind(config.listen).await?;
    info!(listen = %listener.local_addr()?, data_dir = %config.engine.data_dir.display(),
          object_store = objects.url(), auth = ?auth.method, tls = auth.tls.is_some(),
          tls_required = auth.tls_required, "sluice is ready");
    let mut shutdown = ShutdownSignal::new()?;
    loop {
        let (socket, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    continue;
                }
            },
            signal = shutdown.recv() => {
                drop(listener);
                return shut_down(signal, &connections, &views, config.shutdown_timeout).await;
            }
        };
        let _ = socket.set_nodelay(true);
        let max_message_bytes = config.engine.log.max_statement_bytes;
        let handlers = handlers.clone();
        let tls = tls.clone();
        let gone = PeerWatch::of(&socket).map(|w| w.stop_when_gone(addr, connections.clone()));
        tokio::spawn(
            async move {
                let _watching = gone;
                // A panic while serving one connection (a bug) ends that
                // connection only; the panic hook has logged it with its
                // statement.
                let served = AssertUnwindSafe(connection::serve_connection(
                    socket,
                    tls,
                    handlers,
                    max_message_bytes,
                ))
                .catch_unwind()
                .await;
                match served {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let n = CONNECTION_ERRORS.fetch_add(1, Ordering::Relaxed) + 1;
                        warn!(error = %e, ended_by_errors = n, "connection ended with an error");
                    }
                    Err(_) => {
                        let n = PANICKED_CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
                        warn!(panicked_connections = n, "connection closed after a panic");
                    }
                }
            }
            .instrument(info_span!("connection", peer = %addr)),
        );
    }
}

/// SIGTERM (what `docker stop`, systemd and `kill` send) or SIGINT (Ctrl-C
/// where the server runs).
struct ShutdownSignal {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    fn new() -> std::io::Result<ShutdownSignal> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignal {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// A clean stop: no new connections or statements, the running ones may
/// finish (for up to `limit`), then every view commits a checkpoint of
/// everything committed, so the next start replays nothing. Every
/// acknowledged write is already durable; a statement still running at
/// the limit was never acknowledged and is dropped with the process.
async fn shut_down(
    signal: &str,
    connections: &ConnectionRegistry,
    views: &ViewManager,
    limit: std::time::Duration,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let span = info_span!("shutdown", signal);
    async {
        info!(
            connections = connections.len(),
            "shutting down: no new connections or statements"
        );
        connections.begin_shutdown();
        let still_running = connections.wait_idle(limit).await;
        if still_running > 0 {
            warn!(
                still_running,
                limit_secs = limit.as_secs_f64(),
                "statements still running at the shutdown limit are dropped"
            );
        }
        let started = std::time::Instant::now();
        views.flush().await?;
        info!(
            views = views.views().len(),
            checkpoint_ms = started.elapsed().as_millis() as u64,
            "every view checkpointed; sluice stopped"
        );
        Ok(())
    }
    .instrument(span)
    .await
}

/// Watches a connection's socket for the client going away while a
/// statement runs. pgwire reads the socket only between statements, so a
/// client that closes its end during a long query (a killed script, a
/// dashboard's timeout) would leave the query running; this sees the
/// socket's end and stops the statement as a cancel request does.
struct PeerWatch {
    socket: TcpStream,
}

/// How often a socket with unread messages (a pipelining client) is looked
/// at again for its end.
const PEER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl PeerWatch {
    /// A second handle on the connection's socket (a dup of its descriptor,
    /// so reading its state takes nothing from pgwire's reads).
    fn of(socket: &TcpStream) -> Option<PeerWatch> {
        use std::os::fd::AsFd;
        let owned = socket.as_fd().try_clone_to_owned().ok()?;
        let std_socket = std::net::TcpStream::from(owned);
        std_socket.set_nonblocking(true).ok()?;
        TcpStream::from_std(std_socket)
            .ok()
            .map(|socket| PeerWatch { socket })
    }

    /// Runs until the client's end closes (then stops its statement) or
    /// the returned guard is dropped with the connection.
    fn stop_when_gone(self, peer: SocketAddr, connections: Arc<ConnectionRegistry>) -> WatchGuard {
        let watch = async move {
            let mut byte = [0u8; 1];
            loop {
                if self.socket.readable().await.is_err() {
                    break;
                }
                match self.socket.try_io(tokio::io::Interest::READABLE, || {
                    // MSG_PEEK leaves the bytes for pgwire.
                    let n = unsafe {
                        // SAFETY: recv into a live one-byte buffer.
                        libc::recv(
                            std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                            byte.as_mut_ptr().cast(),
                            1,
                            libc::MSG_PEEK,
                        )
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                }) {
                    // Its end is closed (or reset): nobody waits for rows.
                    Ok(0) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => break,
                    // Messages wait to be read: look again later.
                    Ok(_) => tokio::time::sleep(PEER_POLL).await,
                }
            }
            connections.peer_gone(&peer.to_string());
        };
        WatchGuard(tokio::spawn(
            watch.instrument(info_span!("peer_watch", peer = %peer)),
        ))
    }
}

/// Ends the watch with its connection: the watch's handle on the socket
/// must close with pgwire's, or the client would never see the end.
struct WatchGuard(tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
