//! Per-connection state kept in pgwire's session extensions.

use parking_lot::Mutex;

use super::copy::CopyState;

#[derive(Default)]
pub struct Session {
    /// The `COPY ... FROM STDIN` in progress on this connection.
    pub copy: Mutex<Option<CopyState>>,
}
