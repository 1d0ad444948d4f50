use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sluice::auth::{AuthConfig, AuthMethod};
use sluice::engine::EngineConfig;
use sluice::log::LogConfig;
use sluice::server::ServerConfig;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than the system allocator: a statement allocates and
/// frees many small buffers (Arrow arrays, wire messages), and glibc's
/// malloc spent a tenth of a prepared INSERT's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gives memory the server has freed back to the system, once a second.
/// mimalloc returns freed arena memory a second after the free, but only
/// when a later allocation looks for it: an idle server kept what a view's
/// backfill and checkpoint had freed (about 120 bytes per group of a
/// 2M-group view) for as long as it stayed idle. Built without transparent
/// huge pages (Cargo.toml) for the same memory: faulting them in took
/// seconds of kernel time per backfill on some runs.
fn spawn_allocator_purge() {
    let started = std::thread::Builder::new()
        .name("allocator-purge".into())
        .spawn(|| {
            let _span = tracing::info_span!("allocator_purge").entered();
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                // SAFETY: mi_collect takes no pointers and may be called from
                // any thread at any time.
                unsafe { libmimalloc_sys::mi_collect(false) };
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "freed memory is returned to the system only as mimalloc allocates");
    }
}

/// Sluice: a streaming SQL database that speaks the PostgreSQL wire protocol.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server.
    Serve {
        /// Address to accept PostgreSQL connections on.
        #[arg(long, default_value = "127.0.0.1:5455")]
        listen: SocketAddr,
        /// Directory that holds the catalog and the table logs.
        #[arg(long, default_value = "./sluice-data")]
        data_dir: PathBuf,
        /// A partition's active segment file is closed and a new one started
        /// once it reaches this many bytes.
        #[arg(long, default_value_t = 128 * 1024 * 1024)]
        segment_bytes: u64,
        /// ... or once it has been open this many seconds (checked at the
        /// next write). Closed segments move to the object store.
        #[arg(long, default_value_t = 600)]
        segment_max_age_secs: u64,
        /// How often closed segments are moved to the object store and
        /// retention applied, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        tiering_interval_ms: u64,
        /// How often keyed tables with new records are compacted, in
        /// milliseconds (VACUUM compacts at once).
        #[arg(long, default_value_t = 30000)]
        compaction_interval_ms: u64,
        /// The most memory (Arrow bytes) one INSERT may stage before it is
        /// appended, and one transaction may hold uncommitted; a larger
        /// statement fails with SQLSTATE 54000. A COPY outside a
        /// transaction block moves its rows to disk past half of it (at
        /// most 64 MiB), so it loads any size.
        #[arg(long, default_value_t = 4 * 1024 * 1024 * 1024)]
        max_statement_bytes: u64,
        /// Where closed segments and view checkpoints are kept:
        /// `s3://bucket/prefix` (configured by the AWS_* environment
        /// variables) or a directory. Default: `<data-dir>/objects`.
        #[arg(long)]
        object_store: Option<String>,
        /// How often each view commits a checkpoint, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        checkpoint_interval_ms: u64,
        /// The most client connections open at once; one more is refused
        /// with SQLSTATE 53300 (cancel requests are not counted). 0: no
        /// limit.
        #[arg(long, default_value_t = 100)]
        max_connections: usize,
        /// On SIGTERM or SIGINT, how many seconds running statements may
        /// take to finish before the final checkpoint of every view.
        #[arg(long, default_value_t = 30.0)]
        shutdown_timeout: f64,
        /// The most memory, in bytes, that all queries together may hold
        /// in sorts, aggregates and joins. Sorts and aggregates beyond it
        /// spill to temporary files; a query that still needs more fails
        /// with SQLSTATE 53200. 0: no limit.
        #[arg(long, default_value_t = 4 * 1024 * 1024 * 1024)]
        query_memory: u64,
        /// Address of the HTTP endpoint (`/metrics` for Prometheus,
        /// `/livez`, `/readyz`), or `off`.
        #[arg(long, default_value = "127.0.0.1:9455")]
        http_listen: String,
        /// How logins are checked: `scram` (SCRAM-SHA-256 passwords) or
        /// `trust` (no password; loopback addresses only). Default: scram
        /// once the superuser `sluice` has a password, trust before.
        #[arg(long, value_parser = ["trust", "scram"])]
        auth: Option<String>,
        /// A file holding the password of the superuser `sluice`, set at
        /// the first start (or whenever it has none). SLUICE_PASSWORD
        /// gives it too.
        #[arg(long)]
        superuser_password_file: Option<PathBuf>,
        /// The server's certificate chain (PEM), for TLS.
        #[arg(long)]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long)]
        tls_key: Option<PathBuf>,
        /// Refuse connections that are not encrypted.
        #[arg(long)]
        tls_required: bool,
    },
}

/// The stack of every runtime thread.
const STATEMENT_STACK_BYTES: usize = 64 << 20;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            data_dir,
            segment_bytes,
            segment_max_age_secs,
            tiering_interval_ms,
            compaction_interval_ms,
            max_statement_bytes,
            object_store,
            checkpoint_interval_ms,
            max_connections,
            shutdown_timeout,
            query_memory,
            http_listen,
            auth,
            superuser_password_file,
            tls_cert,
            tls_key,
            tls_required,
        } => {
            let superuser_password = match superuser_password_file {
                Some(path) => match std::fs::read_to_string(&path) {
                    // One line, as a password file is written.
                    Ok(text) => Some(text.trim_end_matches(['\n', '\r']).to_string()),
                    Err(e) => {
                        tracing::error!(path = %path.display(), error = %e, "cannot read --superuser-password-file");
                        return std::process::ExitCode::FAILURE;
                    }
                },
                None => std::env::var("SLUICE_PASSWORD").ok(),
            };
            sluice::server::install_panic_hook();
            spawn_allocator_purge();
            let config = ServerConfig {
                listen,
                engine: EngineConfig {
                    data_dir,
                    log: LogConfig {
                        segment_max_bytes: segment_bytes,
                        segment_max_age: std::time::Duration::from_secs(segment_max_age_secs),
                        max_statement_bytes,
                    },
                    object_store,
                    checkpoint_interval: std::time::Duration::from_millis(
                        checkpoint_interval_ms.max(1),
                    ),
                    tiering_interval: std::time::Duration::from_millis(tiering_interval_ms.max(1)),
                    compaction_interval: std::time::Duration::from_millis(
                        compaction_interval_ms.max(1),
                    ),
                    max_connections: (max_connections > 0).then_some(max_connections),
                    query_memory: (query_memory > 0).then_some(query_memory as usize),
                },
                shutdown_timeout: std::time::Duration::try_from_secs_f64(shutdown_timeout)
                    .unwrap_or_default(),
                http_listen: match http_listen.as_str() {
                    "off" => None,
                    addr => match addr.parse() {
                        Ok(a) => Some(a),
                        Err(e) => {
                            tracing::error!(http_listen = addr, error = %e, "--http-listen takes an address (127.0.0.1:9455) or off");
                            return std::process::ExitCode::FAILURE;
                        }
                    },
                },
                auth: AuthConfig {
                    method: auth.map(|a| match a.as_str() {
                        "trust" => AuthMethod::Trust,
                        _ => AuthMethod::Scram,
                    }),
                    superuser_password,
                    tls_cert,
                    tls_key,
                    tls_required,
                },
            };
            match sluice::server::run(config, STATEMENT_STACK_BYTES) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "server stopped");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
