//! One client connection: TLS negotiation, then pgwire's message loop over
//! a socket whose frames are checked first ([`FrameGuard`]).
//!
//! This is pgwire's `process_socket` with the guard put in: pgwire's loop
//! takes the socket type it negotiated, so the loop is here, calling
//! pgwire's public `process_message` and `process_error` as its own does.
//! A frame that breaks the protocol is answered with a FATAL 08P01 and the
//! connection is closed, as PostgreSQL answers it.

use std::io;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use pgwire::tokio::TlsAcceptor;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};
use tracing::info;

use super::frames::{FrameGuard, ProtocolViolation};

/// How long a client has to finish logging in (pgwire's, and PostgreSQL's
/// `authentication_timeout` default).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves one TCP connection until the client leaves, breaks the protocol
/// or takes longer than [`STARTUP_TIMEOUT`] to log in.
pub async fn serve_connection<H: PgWireServerHandlers>(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    handlers: H,
    max_message_bytes: u64,
) -> io::Result<()> {
    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        negotiated = negotiate_tls(tcp, tls) => negotiated?,
    };
    // A direct TLS handshake when TLS is off: not a PostgreSQL client.
    let Some(negotiated) = negotiated else {
        return Ok(());
    };
    // The guard takes over what negotiation read ahead, so that every
    // byte after the TLS handshake is checked.
    let parts = negotiated.into_parts();
    let guard = FrameGuard::new(parts.io, parts.read_buf, max_message_bytes);
    let mut guarded = FramedParts::new(guard, parts.codec);
    guarded.write_buf = parts.write_buf;
    let mut socket = Framed::from_parts(guarded);

    let startup_handler = handlers.startup_handler();
    let simple_query_handler = handlers.simple_query_handler();
    let extended_query_handler = handlers.extended_query_handler();
    let copy_handler = handlers.copy_handler();
    let cancel_handler = handlers.cancel_handler();
    let error_handler = handlers.error_handler();
    loop {
        let logging_in = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let next = if logging_in {
            tokio::select! {
                _ = &mut startup_timeout => None,
                next = socket.next() => next,
            }
        } else {
            socket.next().await
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(e)) => return refuse_frame(&mut socket, e).await,
            None => return Ok(()),
        };
        // The client is leaving; some (asyncpg) wait for the close.
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            return Ok(());
        }
        let is_extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        if let Err(mut e) = process_message(
            message,
            &mut socket,
            startup_handler.clone(),
            simple_query_handler.clone(),
            extended_query_handler.clone(),
            copy_handler.clone(),
            cancel_handler.clone(),
        )
        .await
        {
            error_handler.on_error(&socket, &mut e);
            process_error(&mut socket, e, is_extended_query).await?;
        }
    }
}

/// Answers a frame that could not be read with a FATAL error and closes the
/// connection: 08P01 (or what the guard said) for a malformed frame; a
/// broken socket just ends.
async fn refuse_frame<T, C>(socket: &mut Framed<T, C>, error: PgWireError) -> io::Result<()>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    C: tokio_util::codec::Encoder<PgWireBackendMessage, Error = io::Error>
        + tokio_util::codec::Decoder,
{
    let (sqlstate, message) = match &error {
        PgWireError::IoError(e) => match ProtocolViolation::of(e) {
            Some(v) => (v.sqlstate, v.message.clone()),
            None => return Err(io::Error::new(e.kind(), e.to_string())),
        },
        // What pgwire's decoder refused (a guard-checked frame it still
        // does not take, such as a protocol version it lacks).
        other => ("08P01", other.to_string()),
    };
    info!(%sqlstate, %message, "protocol violation: connection closed");
    let info = ErrorInfo::new("FATAL".into(), sqlstate.into(), message);
    socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    socket.close().await
}
