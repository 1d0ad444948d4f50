//! A session's state: its role, its transaction block, cursors, prepared
//! statement names, a COPY in progress, its cancel and settings. The wire
//! keeps one per connection.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use sluice_sql::{IsolationLevel, TransactionModes, TransactionOp};

use super::copy::CopyState;
use crate::auth::SessionRole;
use crate::error::SluiceError;
use crate::log::transaction::StagedMark;
use crate::log::{Snapshot, StagedWrites};
use crate::query::activity::Activity;
use crate::query::cancel::StatementCancel;
use crate::subscribe::SubscriptionCursor;

/// A transaction's isolation level and access mode.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Characteristics {
    pub isolation: IsolationLevel,
    pub read_only: bool,
}

impl Characteristics {
    /// These, with what `modes` names changed.
    pub fn with(self, modes: TransactionModes) -> Characteristics {
        Characteristics {
            isolation: modes.isolation.unwrap_or(self.isolation),
            read_only: modes.read_only.unwrap_or(self.read_only),
        }
    }
}

/// The connection's transaction block, as BEGIN, COMMIT, ROLLBACK and
/// savepoints move it.
#[derive(Default, Clone)]
pub struct TransactionState {
    pub open: bool,
    pub characteristics: Characteristics,
    /// A statement other than transaction control ran in the block: the
    /// isolation level can no longer change.
    pub queried: bool,
    /// What a REPEATABLE READ block reads, taken at its first statement
    /// (or imported with `SET TRANSACTION SNAPSHOT`).
    pub snapshot: Option<Arc<Snapshot>>,
    /// Snapshots a READ COMMITTED block exported, held until it ends.
    pub exported: Vec<Arc<Snapshot>>,
    /// A statement failed inside the block: everything but COMMIT,
    /// ROLLBACK or ROLLBACK TO SAVEPOINT is refused until then, as in
    /// PostgreSQL.
    pub failed: bool,
    /// FETCHes that moved a cursor in the block. A cursor's position is
    /// not saved at a savepoint, so ROLLBACK TO SAVEPOINT can only go back
    /// past none.
    pub fetches: u64,
    /// Records written in the block, committed at COMMIT.
    pub staged: Arc<Mutex<StagedWrites>>,
    /// Open savepoints, oldest first.
    pub savepoints: Vec<Savepoint>,
}

#[derive(Clone)]
pub struct Savepoint {
    name: String,
    fetches: u64,
    staged: StagedMark,
}

impl TransactionState {
    /// `SET TRANSACTION` in the open block. As in PostgreSQL, the
    /// isolation level and READ WRITE can only be set before its first
    /// statement.
    pub fn set_modes(&mut self, modes: TransactionModes) -> Result<(), SluiceError> {
        if self.failed {
            return Err(SluiceError::TransactionAborted);
        }
        let next = self.characteristics.with(modes);
        if self.queried && next.isolation != self.characteristics.isolation {
            return Err(SluiceError::ActiveTransaction(
                "SET TRANSACTION ISOLATION LEVEL must be called before any query",
            ));
        }
        if self.queried && self.characteristics.read_only && !next.read_only {
            return Err(SluiceError::ActiveTransaction(
                "transaction read-write mode must be set before any query",
            ));
        }
        self.characteristics = next;
        Ok(())
    }

    /// The records a statement writes go here when a block is open.
    pub fn staging(&self) -> Option<Arc<Mutex<StagedWrites>>> {
        self.open.then(|| self.staged.clone())
    }

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
        let found = self.savepoints.iter().rposition(|s| &s.name == name);
        match op {
            TransactionOp::Savepoint(_) => {
                if self.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                self.savepoints.push(Savepoint {
                    name: name.clone(),
                    fetches: self.fetches,
                    staged: self.staged.lock().mark(),
                });
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
                let since = self.fetches - self.savepoints[at].fetches;
                if since > 0 {
                    return Err(SluiceError::Unsupported(format!(
                        "ROLLBACK TO SAVEPOINT cannot undo the {since} FETCH statements run since savepoint \"{name}\": a cursor's position is not saved at a savepoint; ROLLBACK the whole transaction instead"
                    )));
                }
                self.staged.lock().rollback_to(&self.savepoints[at].staged);
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
    /// What later transactions start with (`SET SESSION CHARACTERISTICS`,
    /// `SET default_transaction_isolation`); autocommit statements are
    /// held to its READ ONLY too.
    pub defaults: Mutex<Characteristics>,
    /// The statements prepared with Parse by name ("" the unnamed one),
    /// with their text: for DEALLOCATE ALL, and for listing what an
    /// Execute runs.
    pub prepared: Mutex<HashMap<String, Arc<str>>>,
    /// The running statement, as a cancel request or `statement_timeout`
    /// stops it.
    pub cancel: Arc<StatementCancel>,
    /// Who the connection is and what it runs, as `sluice_catalog.sessions`
    /// lists it.
    pub activity: Arc<Activity>,
    /// The role the connection logged in as (set once, at start-up).
    pub role: OnceLock<SessionRole>,
}

impl Session {
    /// The session's role; the bootstrap superuser before start-up ends.
    pub fn role(&self) -> SessionRole {
        self.role.get().cloned().unwrap_or_default()
    }
}

impl Session {
    /// The characteristics of the transaction a statement runs in: the
    /// open block's, or else the session's defaults.
    pub fn characteristics(&self) -> Characteristics {
        let t = self.transaction.lock();
        match t.open {
            true => t.characteristics,
            false => *self.defaults.lock(),
        }
    }

    /// Refuses a write in a READ ONLY transaction, as PostgreSQL does.
    pub fn check_writable(&self, verb: &'static str) -> Result<(), SluiceError> {
        match self.characteristics().read_only {
            true => Err(SluiceError::ReadOnlyTransaction(verb)),
            false => Ok(()),
        }
    }

    /// A FETCH moved a cursor inside the transaction block.
    pub fn note_fetch(&self) {
        let mut t = self.transaction.lock();
        if t.open {
            t.fetches += 1;
        }
    }

    /// A statement failed: an open transaction block is now aborted.
    pub fn note_failure(&self) {
        let mut t = self.transaction.lock();
        if t.open {
            t.failed = true;
        }
    }
}
