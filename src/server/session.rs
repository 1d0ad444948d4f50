//! Per-connection state kept in pgwire's session extensions.

use std::collections::HashMap;

use parking_lot::Mutex;

use sluice_sql::TransactionOp;

use super::copy::CopyState;
use crate::error::SluiceError;
use crate::subscribe::SubscriptionCursor;

/// The connection's transaction block, as BEGIN, COMMIT, ROLLBACK and
/// savepoints move it.
#[derive(Debug, Default, Clone)]
pub struct TransactionState {
    pub open: bool,
    /// A statement failed inside the block: everything but COMMIT,
    /// ROLLBACK or ROLLBACK TO SAVEPOINT is refused until then, as in
    /// PostgreSQL.
    pub failed: bool,
    /// Writes and FETCHes that took effect in the block. They take effect
    /// as they run, so a ROLLBACK TO SAVEPOINT can only go back past none.
    pub effects: u64,
    /// Open savepoints, oldest first, with `effects` when each was set.
    pub savepoints: Vec<(String, u64)>,
}

impl TransactionState {
    /// SAVEPOINT, RELEASE SAVEPOINT or ROLLBACK TO SAVEPOINT; the command
    /// tag.
    pub fn savepoint(&mut self, op: &TransactionOp) -> Result<&'static str, SluiceError> {
        let (verb, name) = match op {
            TransactionOp::Savepoint(n) => ("SAVEPOINT", n),
            TransactionOp::Release(n) => ("RELEASE SAVEPOINT", n),
            TransactionOp::RollbackTo(n) => ("ROLLBACK TO SAVEPOINT", n),
            _ => return Err(SluiceError::Internal("not a savepoint command".into())),
        };
        if !self.open {
            return Err(SluiceError::NoTransactionBlock(verb));
        }
        let found = self.savepoints.iter().rposition(|(n, _)| n == name);
        match op {
            TransactionOp::Savepoint(_) => {
                if self.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                self.savepoints.push((name.clone(), self.effects));
                Ok("SAVEPOINT")
            }
            TransactionOp::Release(_) => {
                if self.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                let at = found.ok_or_else(|| SluiceError::UndefinedSavepoint(name.clone()))?;
                self.savepoints.truncate(at);
                Ok("RELEASE")
            }
            _ => {
                let at = found.ok_or_else(|| SluiceError::UndefinedSavepoint(name.clone()))?;
                let since = self.effects - self.savepoints[at].1;
                if since > 0 {
                    return Err(SluiceError::Unsupported(format!(
                        "ROLLBACK TO SAVEPOINT cannot undo the {since} write or FETCH statements run since savepoint \"{name}\": statements take effect as they run, even inside a transaction block"
                    )));
                }
                self.savepoints.truncate(at + 1);
                self.failed = false;
                Ok("ROLLBACK")
            }
        }
    }
}

#[derive(Default)]
pub struct Session {
    /// The `COPY ... FROM STDIN` in progress on this connection.
    pub copy: Mutex<Option<CopyState>>,
    /// Open subscription cursors by name.
    pub cursors: Mutex<HashMap<String, SubscriptionCursor>>,
    pub transaction: Mutex<TransactionState>,
    /// Names of the statements prepared with Parse, for DEALLOCATE ALL.
    pub prepared: Mutex<std::collections::HashSet<String>>,
}
