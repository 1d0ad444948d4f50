//! Per-connection state kept in pgwire's session extensions.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::copy::CopyState;
use crate::subscribe::SubscriptionCursor;

/// The connection's transaction block, as BEGIN, COMMIT and ROLLBACK move it.
#[derive(Debug, Default, Clone, Copy)]
pub struct TransactionState {
    pub open: bool,
    /// A statement failed inside the block: everything but COMMIT or
    /// ROLLBACK is refused until it ends, as in PostgreSQL.
    pub failed: bool,
}

#[derive(Default)]
pub struct Session {
    /// The `COPY ... FROM STDIN` in progress on this connection.
    pub copy: Mutex<Option<CopyState>>,
    /// Open subscription cursors by name.
    pub cursors: Mutex<HashMap<String, SubscriptionCursor>>,
    pub transaction: Mutex<TransactionState>,
}
