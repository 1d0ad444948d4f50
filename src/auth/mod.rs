//! Who a connection is: roles and their passwords, how a login is checked
//! (trust or SCRAM-SHA-256), and TLS. The wire's start-up messages are
//! translated into calls here by `server::login`.

pub mod error;
pub mod privileges;
pub mod roles;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tracing::warn;

pub use error::AuthError;
pub use privileges::{grant_targets, ObjectKind};
pub use roles::{LoginSecret, RoleStore, SessionRole, BOOTSTRAP_SUPERUSER, SCRAM_ITERATIONS};
pub use tls::ServerTls;

/// How logins are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// Anyone connecting is who they say they are (loopback only).
    Trust,
    /// SCRAM-SHA-256 (and -PLUS, with channel binding, over TLS).
    Scram,
}

/// What `sluice serve` is told about authentication and TLS.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// None: SCRAM when the bootstrap superuser has a password, else trust.
    pub method: Option<AuthMethod>,
    /// The bootstrap superuser's password (`--superuser-password-file`,
    /// `SLUICE_PASSWORD`), set when it has none.
    pub superuser_password: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Plain (unencrypted) connections are refused.
    pub tls_required: bool,
}

/// Everything a connection's login needs, shared by all connections.
pub struct Authenticator {
    pub roles: Arc<RoleStore>,
    pub method: AuthMethod,
    pub tls_required: bool,
    pub tls: Option<ServerTls>,
}

impl Authenticator {
    /// Opens the roles in `data_dir`, creates the bootstrap superuser,
    /// loads the certificate, and checks that `listen` is not opened to a
    /// network without passwords.
    pub fn start(
        config: &AuthConfig,
        data_dir: &std::path::Path,
        listen: SocketAddr,
    ) -> Result<Authenticator, AuthError> {
        let roles = Arc::new(RoleStore::open(data_dir)?);
        let has_password = roles.bootstrap(config.superuser_password.as_deref())?;
        let method = match config.method {
            Some(m) => m,
            None if has_password => AuthMethod::Scram,
            None => AuthMethod::Trust,
        };
        let loopback = listen.ip().is_loopback();
        match method {
            AuthMethod::Trust if !loopback => {
                return Err(AuthError::Config(format!(
                    "refusing to listen on {listen} with trust authentication: anyone who can reach it could connect as any role. Listen on a loopback address (127.0.0.1), or give the superuser a password (--superuser-password-file or SLUICE_PASSWORD) and use --auth scram"
                )))
            }
            AuthMethod::Trust => warn!(
                listen = %listen,
                "trust authentication: every connection is accepted without a password (loopback only); give the superuser a password with --superuser-password-file or SLUICE_PASSWORD to require passwords"
            ),
            AuthMethod::Scram if !has_password && !loopback => {
                return Err(AuthError::Config(format!(
                    "refusing to listen on {listen}: the superuser \"{BOOTSTRAP_SUPERUSER}\" has no password; give one with --superuser-password-file or SLUICE_PASSWORD"
                )))
            }
            AuthMethod::Scram => {}
        }
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(tls::load(cert, key)?),
            (None, None) => None,
            _ => {
                return Err(AuthError::Config(
                    "--tls-cert and --tls-key go together".into(),
                ))
            }
        };
        if config.tls_required && tls.is_none() {
            return Err(AuthError::Config(
                "--tls-required needs --tls-cert and --tls-key".into(),
            ));
        }
        roles.set_trust(method == AuthMethod::Trust);
        Ok(Authenticator {
            roles,
            method,
            tls_required: config.tls_required,
            tls,
        })
    }
}
