//! Start-up and authentication on the wire: pgwire's start-up messages in,
//! calls to [`crate::auth`] out, and PostgreSQL's FATAL errors when a login
//! is refused. One [`LoginHandler`] per connection, since a SCRAM exchange
//! keeps its state between messages.

use std::fmt::Debug;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::{SASLState, SCRAM_SHA_256_METHOD, SCRAM_SHA_256_PLUS_METHOD};
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, AuthSource,
    DefaultServerParameterProvider, LoginInfo, Password, ServerParameterProvider, StartupHandler,
};
use pgwire::api::{
    ClientInfo, PgWireConnectionState, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
    METADATA_APPLICATION_NAME, METADATA_DATABASE, METADATA_USER,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::{ReadyForQuery, TransactionStatus};
use pgwire::messages::startup::{
    Authentication, BackendKeyData, ParameterStatus, PasswordMessageFamily,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Mutex;
use tracing::info;

use super::handler::session;
use crate::auth::{AuthMethod, Authenticator, RoleStore, SessionRole, SCRAM_ITERATIONS};
use crate::metrics::METRICS;
use crate::query::cancel::ConnectionRegistry;

/// One process id sequence for all connections (what cancel requests name).
static PIDS: LazyLock<RandomPidSecretKeyGenerator> =
    LazyLock::new(RandomPidSecretKeyGenerator::default);

/// What every connection's login shares.
pub struct Logins {
    auth: Arc<Authenticator>,
    /// Offers SCRAM-SHA-256 only: for plain connections.
    scram: ScramAuth,
    /// Offers -PLUS too, bound to the server's certificate: for TLS ones.
    scram_plus: Option<ScramAuth>,
    connections: Arc<ConnectionRegistry>,
}

impl Logins {
    pub fn new(auth: Arc<Authenticator>, connections: Arc<ConnectionRegistry>) -> Logins {
        let source: Arc<dyn AuthSource> = Arc::new(RoleSecrets(auth.roles.clone()));
        let mut scram = ScramAuth::new(source.clone());
        scram.set_iterations(SCRAM_ITERATIONS as usize);
        let scram_plus = auth.tls.as_ref().and_then(|tls| {
            let mut plus = ScramAuth::new(source);
            plus.set_iterations(SCRAM_ITERATIONS as usize);
            match plus.configure_certificate(&tls.cert_pem) {
                Ok(()) => Some(plus),
                Err(e) => {
                    tracing::warn!(error = %e, "SCRAM-SHA-256-PLUS (channel binding) is off: the certificate's signature algorithm is not one it can bind to");
                    None
                }
            }
        });
        Logins {
            auth,
            scram,
            scram_plus,
            connections,
        }
    }
}

/// The roles' secrets, as pgwire's SCRAM exchange asks for them.
#[derive(Debug)]
struct RoleSecrets(Arc<RoleStore>);

#[async_trait]
impl AuthSource for RoleSecrets {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let secret = self.0.login_secret(login.user().unwrap_or_default());
        Ok(Password::new(Some(secret.salt), secret.salted_password))
    }
}

/// One connection's start-up: trust, or a SCRAM exchange, then the
/// session is registered and told who it is.
pub struct LoginHandler {
    logins: Arc<Logins>,
    sasl: Mutex<SASLState>,
}

impl LoginHandler {
    pub fn new(logins: Arc<Logins>) -> LoginHandler {
        LoginHandler {
            logins,
            sasl: Mutex::new(SASLState::Initial),
        }
    }

    /// The SCRAM mechanisms this connection may use: -PLUS only over TLS
    /// (offered on a plain connection, libpq gives up).
    fn scram_for<C: ClientInfo>(&self, client: &C) -> &ScramAuth {
        match (&self.logins.scram_plus, client.is_secure()) {
            (Some(plus), true) => plus,
            _ => &self.logins.scram,
        }
    }
}

fn meta<C: ClientInfo>(client: &C, key: &str) -> String {
    client.metadata().get(key).cloned().unwrap_or_default()
}

/// A FATAL error, which ends the connection, counted as a refused login.
fn refused(code: &str, message: String, reason: &str) -> PgWireError {
    METRICS.auth_failure(reason);
    info!(code, message = %message, "login refused");
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message,
    )))
}

/// Whether a SASLInitialResponse body is a mechanism name, an int32
/// length (-1: no data) and exactly that many bytes.
fn sasl_initial_response_is_whole(body: &[u8]) -> bool {
    let Some(nul) = body.iter().position(|b| *b == 0) else {
        return false;
    };
    let rest = &body[nul + 1..];
    let Some((len, data)) = rest.split_first_chunk::<4>() else {
        return false;
    };
    match i32::from_be_bytes(*len) {
        -1 => data.is_empty(),
        n => n >= 0 && data.len() == n as usize,
    }
}

fn password_failed(user: &str) -> PgWireError {
    refused(
        "28P01",
        format!("password authentication failed for user \"{user}\""),
        "password",
    )
}

#[async_trait]
impl StartupHandler for LoginHandler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let auth = &self.logins.auth;
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = meta(client, METADATA_USER);
                if user.is_empty() {
                    return Err(refused(
                        "28000",
                        "no PostgreSQL user name specified in startup packet".into(),
                        "password",
                    ));
                }
                if auth.tls_required && !client.is_secure() {
                    return Err(refused(
                        "28000",
                        format!(
                            "no pg_hba.conf entry for host \"{}\", user \"{user}\", database \"{}\", no encryption",
                            client.socket_addr().ip(),
                            meta(client, METADATA_DATABASE)
                        ),
                        "no_encryption",
                    ));
                }
                match auth.method {
                    AuthMethod::Trust => {
                        let role = match auth.roles.role(&user) {
                            Some(role) if !role.login => return Err(no_login(&user)),
                            Some(_) => SessionRole {
                                name: user,
                                trusted_unknown: false,
                            },
                            None => SessionRole {
                                name: user,
                                trusted_unknown: true,
                            },
                        };
                        self.finish(client, role).await?;
                    }
                    AuthMethod::Scram => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        let mut mechanisms = vec![SCRAM_SHA_256_METHOD.to_string()];
                        if client.is_secure() && self.logins.scram_plus.is_some() {
                            mechanisms.push(SCRAM_SHA_256_PLUS_METHOD.to_string());
                        }
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                                mechanisms,
                            )))
                            .await?;
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(msg)
                if auth.method == AuthMethod::Scram =>
            {
                let user = meta(client, METADATA_USER);
                let mut state = self.sasl.lock().await;
                let msg = if let SASLState::Initial = *state {
                    // pgwire reads the declared length without a bound.
                    if let PasswordMessageFamily::Raw(body) = &msg {
                        if !sasl_initial_response_is_whole(body) {
                            return Err(refused(
                                "08P01",
                                "malformed SASLInitialResponse message".into(),
                                "protocol",
                            ));
                        }
                    }
                    let first = msg.into_sasl_initial_response()?;
                    let plus_here = client.is_secure() && self.logins.scram_plus.is_some();
                    match first.auth_method.as_str() {
                        SCRAM_SHA_256_METHOD => {}
                        SCRAM_SHA_256_PLUS_METHOD if plus_here => {}
                        other => {
                            return Err(PgWireError::UnsupportedSASLAuthMethod(other.to_string()))
                        }
                    }
                    *state = SASLState::ScramClientFirstReceived;
                    PasswordMessageFamily::SASLInitialResponse(first)
                } else {
                    PasswordMessageFamily::SASLResponse(msg.into_sasl_response()?)
                };
                let (reply, next) = match self
                    .scram_for(client)
                    .process_scram_message(client, msg, &state)
                    .await
                {
                    Ok(step) => step,
                    Err(PgWireError::IoError(e)) => return Err(PgWireError::IoError(e)),
                    // A wrong proof, a channel binding that does not match,
                    // a malformed SCRAM message: all one answer.
                    Err(_) => return Err(password_failed(&user)),
                };
                *state = next;
                if !matches!(*state, SASLState::Finished) {
                    client
                        .send(PgWireBackendMessage::Authentication(reply))
                        .await?;
                    return Ok(());
                }
                client
                    .feed(PgWireBackendMessage::Authentication(reply))
                    .await?;
                // The proof matched a role's own secret: the role exists.
                match auth.roles.role(&user) {
                    Some(role) if role.login => {
                        self.finish(
                            client,
                            SessionRole {
                                name: user,
                                trusted_unknown: false,
                            },
                        )
                        .await?;
                    }
                    Some(_) => return Err(no_login(&user)),
                    None => return Err(password_failed(&user)),
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn no_login(user: &str) -> PgWireError {
    refused(
        "28000",
        format!("role \"{user}\" is not permitted to log in"),
        "no_login",
    )
}

impl LoginHandler {
    /// Authentication is done: AuthenticationOk, the server's parameters,
    /// the cancel key; then the connection is registered (counted against
    /// `--max-connections`, 53300 beyond it, as PostgreSQL does after
    /// authentication) and ready.
    async fn finish<C>(&self, client: &mut C, role: SessionRole) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, secret) = PIDS.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        client
            .feed(PgWireBackendMessage::Authentication(Authentication::Ok))
            .await?;
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.is_superuser = self.logins.auth.roles.is_superuser(&role);
        for (k, v) in parameters.server_parameters(client).unwrap_or_default() {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    k, v,
                )))
                .await?;
        }
        client
            .feed(PgWireBackendMessage::BackendKeyData(BackendKeyData::new(
                pid,
                secret.clone(),
            )))
            .await?;

        let session = session(client);
        session.activity.identify(
            pid,
            &role.name,
            &meta(client, METADATA_DATABASE),
            &meta(client, METADATA_APPLICATION_NAME),
            client.socket_addr().to_string(),
        );
        let _ = session.role.set(role);
        let registered = self
            .logins
            .connections
            .register(
                pid,
                secret.to_bytes().to_vec(),
                session.cancel.clone(),
                session.activity.clone(),
            )
            .inspect(|_| METRICS.connection_opened())
            .map_err(|e| {
                METRICS.connection_refused();
                PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    "53300".into(),
                    e.to_string(),
                )))
            })?;
        client.session_extensions().insert(registered);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                TransactionStatus::Idle,
            )))
            .await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::sasl_initial_response_is_whole as whole;

    #[test]
    fn sasl_initial_responses_are_checked_before_pgwire_reads_them() {
        assert!(whole(b"SCRAM-SHA-256\0\0\0\0\x03abc"));
        assert!(whole(b"SCRAM-SHA-256\0\xff\xff\xff\xff"));
        assert!(!whole(b"SCRAM-SHA-256\0\0\0\0\x09abc"));
        assert!(!whole(b"SCRAM-SHA-256\0\0\0"));
        assert!(!whole(b"SCRAM-SHA-256"));
        assert!(!whole(b"SCRAM-SHA-256\0\x80\0\0\0"));
    }
}
