//! What each connection is doing: who it is and the statement it runs
//! now (or ran last), as `sluice_catalog.sessions` and the status page
//! show it. Kept by the connection, read by whoever lists connections
//! ([`super::cancel::ConnectionRegistry`]); no protocol in it.

use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

/// One connection's identity and current statement.
#[derive(Default)]
pub struct Activity {
    state: Mutex<ActivityRow>,
}

/// What a connection is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionState {
    /// Connected, not yet ready for statements.
    #[default]
    Starting,
    Idle,
    /// Between statements inside a transaction block.
    IdleInTransaction,
    /// Running a statement (or sending its rows).
    Active,
}

impl SessionState {
    /// As `pg_stat_activity.state` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Starting => "starting",
            SessionState::Idle => "idle",
            SessionState::IdleInTransaction => "idle in transaction",
            SessionState::Active => "active",
        }
    }
}

/// A snapshot of one connection, as listed.
#[derive(Debug, Clone, Default)]
pub struct ActivityRow {
    pub pid: i32,
    pub user: String,
    pub database: String,
    pub application_name: String,
    pub client_addr: String,
    pub backend_start: Option<SystemTime>,
    pub state: SessionState,
    /// The statement running now, or else the last one.
    pub query: Arc<str>,
    /// When that statement started.
    pub query_start: Option<SystemTime>,
}

/// Longest statement text kept: a multi-megabyte `INSERT` is listed by
/// its beginning.
const MAX_QUERY_CHARS: usize = 4096;

impl Activity {
    /// The connection has started up as `pid` for `user` on `database`.
    pub fn identify(
        &self,
        pid: i32,
        user: &str,
        database: &str,
        application_name: &str,
        client_addr: String,
    ) {
        let mut s = self.state.lock();
        s.pid = pid;
        s.user = user.to_string();
        s.database = database.to_string();
        s.application_name = application_name.to_string();
        s.client_addr = client_addr;
        s.backend_start = Some(SystemTime::now());
        s.state = SessionState::Idle;
    }

    /// A statement starts; the connection is active until the guard is
    /// dropped. A prepared statement's text is shared, not copied, at each
    /// execution.
    pub fn begin(&self, query: Arc<str>) -> ActiveStatement<'_> {
        let query = match query.char_indices().nth(MAX_QUERY_CHARS) {
            Some((end, _)) => Arc::from(format!("{}...", &query[..end])),
            None => query,
        };
        let mut s = self.state.lock();
        s.state = SessionState::Active;
        s.query = query;
        s.query_start = Some(SystemTime::now());
        ActiveStatement {
            activity: self,
            in_transaction: false,
        }
    }

    pub fn row(&self) -> ActivityRow {
        self.state.lock().clone()
    }
}

/// A statement running on a connection (see [`Activity::begin`]).
pub struct ActiveStatement<'a> {
    activity: &'a Activity,
    in_transaction: bool,
}

impl ActiveStatement<'_> {
    /// Whether a transaction block is open once the statement is done.
    pub fn in_transaction(&mut self, open: bool) {
        self.in_transaction = open;
    }
}

impl Drop for ActiveStatement<'_> {
    fn drop(&mut self) {
        self.activity.state.lock().state = match self.in_transaction {
            true => SessionState::IdleInTransaction,
            false => SessionState::Idle,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_active_while_its_statement_runs() {
        let a = Activity::default();
        a.identify(7, "ann", "db", "psql", "127.0.0.1:5000".into());
        assert_eq!(a.row().state, SessionState::Idle);
        {
            let mut running = a.begin(Arc::from("SELECT 1"));
            assert_eq!(a.row().state, SessionState::Active);
            assert_eq!(&*a.row().query, "SELECT 1");
            running.in_transaction(true);
        }
        let row = a.row();
        assert_eq!(row.state, SessionState::IdleInTransaction);
        assert_eq!(&*row.query, "SELECT 1", "the last statement stays listed");
        assert!(row.query_start.is_some());
        let long = "x".repeat(MAX_QUERY_CHARS + 10);
        drop(a.begin(Arc::from(long)));
        assert_eq!(a.row().query.len(), MAX_QUERY_CHARS + 3);
    }
}
