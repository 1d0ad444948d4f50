//! Stopping a running statement: a cancel request from another connection
//! (what psql sends on Ctrl-C, what a driver's `cancel()` sends) or the
//! session's `statement_timeout`.
//!
//! Each connection has one [`StatementCancel`]. Every statement starts
//! with [`StatementCancel::begin`], which gives it a generation number and
//! a deadline; a cancel request marks every generation begun so far as
//! cancelled. Work looks at its [`StatementWatch`] only where stopping
//! leaves nothing half done: between the batches of a query's result
//! (dropping a DataFusion stream stops its tasks), while a FETCH waits for
//! rows, between the messages of a COPY, and before anything is committed.
//! A statement that has begun to commit no longer looks, so a cancel that
//! arrives during a commit is too late, as in PostgreSQL.
//!
//! Nothing here knows the wire: the [`ConnectionRegistry`] maps the key a
//! client was given at start-up to its connection's [`StatementCancel`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::activity::{Activity, ActivityRow};
use crate::error::SluiceError;

pub use crate::error::CancelReason;

/// One connection's statements, as a cancel request or a timeout sees them.
pub struct StatementCancel {
    /// The last generation a cancel request reached.
    cancelled_through: watch::Sender<u64>,
    state: Mutex<CancelState>,
}

struct CancelState {
    generation: u64,
    /// When the current statement's time is up.
    deadline: Option<Instant>,
    /// `statement_timeout`; None is 0 (no limit).
    timeout: Option<Duration>,
}

impl Default for StatementCancel {
    fn default() -> Self {
        StatementCancel {
            cancelled_through: watch::Sender::new(0),
            state: Mutex::new(CancelState {
                generation: 0,
                deadline: None,
                timeout: None,
            }),
        }
    }
}

impl StatementCancel {
    /// A statement starts: a cancel request that came before it does not
    /// reach it, and its time is counted from now.
    pub fn begin(&self) -> StatementWatch {
        let mut s = self.state.lock();
        s.generation += 1;
        s.deadline = s.timeout.map(|t| Instant::now() + t);
        self.watch_of(&s)
    }

    /// The watch of the statement running now (the last one begun).
    pub fn watch(&self) -> StatementWatch {
        self.watch_of(&self.state.lock())
    }

    fn watch_of(&self, s: &CancelState) -> StatementWatch {
        StatementWatch {
            generation: s.generation,
            deadline: s.deadline,
            cancelled_through: self.cancelled_through.subscribe(),
        }
    }

    /// A cancel request: whatever runs on the connection now stops at its
    /// next look.
    pub fn cancel(&self) {
        let generation = self.state.lock().generation;
        self.cancelled_through.send_replace(generation);
    }

    pub fn set_timeout(&self, timeout: Option<Duration>) {
        self.state.lock().timeout = timeout.filter(|t| !t.is_zero());
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.state.lock().timeout
    }
}

/// What one statement looks at to know whether to stop.
#[derive(Clone)]
pub struct StatementWatch {
    generation: u64,
    deadline: Option<Instant>,
    cancelled_through: watch::Receiver<u64>,
}

impl StatementWatch {
    /// A watch that never fires (work no statement started).
    pub fn never() -> StatementWatch {
        StatementWatch {
            generation: u64::MAX,
            deadline: None,
            cancelled_through: watch::Sender::new(0).subscribe(),
        }
    }

    fn reason(&self) -> Option<CancelReason> {
        let through = *self.cancelled_through.borrow();
        if through >= self.generation {
            return Some(CancelReason::User);
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Some(CancelReason::Timeout),
            _ => None,
        }
    }

    /// Err when the statement is to stop.
    pub fn check(&self) -> Result<(), SluiceError> {
        match self.reason() {
            Some(reason) => Err(SluiceError::Canceled(reason)),
            None => Ok(()),
        }
    }

    /// Resolves when the statement is to stop.
    pub async fn cancelled(&self) -> CancelReason {
        let mut rx = self.cancelled_through.clone();
        let generation = self.generation;
        let by_request = async move {
            // The sender lives as long as the connection; if it is gone
            // nobody can cancel any more.
            let reached = rx.wait_for(|through| *through >= generation).await.is_ok();
            if !reached {
                std::future::pending::<()>().await;
            }
            CancelReason::User
        };
        match self.deadline {
            Some(deadline) => tokio::select! {
                reason = by_request => reason,
                _ = tokio::time::sleep_until(deadline) => CancelReason::Timeout,
            },
            None => by_request.await,
        }
    }

    /// Runs `work` unless the statement is to stop first; `work` is
    /// dropped then, so it must be work that stopping anywhere leaves
    /// undone (reading, waiting), never a commit.
    pub async fn run<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, SluiceError>>,
    ) -> Result<T, SluiceError> {
        self.check()?;
        tokio::select! {
            biased;
            reason = self.cancelled() => Err(SluiceError::Canceled(reason)),
            done = work => done,
        }
    }
}

/// `inner`'s items until the statement is to stop, then that error and
/// no more: the inner stream is dropped, which stops the work behind it.
pub fn cancellable<S, E>(
    inner: S,
    watch: StatementWatch,
) -> impl Stream<Item = Result<arrow::record_batch::RecordBatch, SluiceError>> + Send
where
    S: Stream<Item = Result<arrow::record_batch::RecordBatch, E>> + Send + Unpin + 'static,
    E: Into<SluiceError>,
{
    futures::stream::unfold(Some((inner, watch)), |state| async move {
        let (mut inner, watch) = state?;
        if let Err(e) = watch.check() {
            return Some((Err(e), None));
        }
        tokio::select! {
            biased;
            reason = watch.cancelled() => Some((Err(SluiceError::Canceled(reason)), None)),
            next = inner.next() => {
                next.map(|item| (item.map_err(Into::into), Some((inner, watch))))
            }
        }
    })
}

/// The open connections: each one's [`StatementCancel`] by the process
/// id and secret key it was given at start-up, as a cancel request names
/// it, and the most there may be.
#[derive(Default)]
pub struct ConnectionRegistry {
    sessions: Mutex<HashMap<CancelKey, Listed>>,
    /// `--max-connections`; None: no limit.
    max: Option<usize>,
    /// Statements (and COPYs) running now, for a shutdown to wait on.
    running: AtomicUsize,
    idle: tokio::sync::Notify,
    shutting_down: AtomicBool,
}

/// What a cancel request names: the process id and the secret key.
type CancelKey = (i32, Vec<u8>);

/// A registered connection: what stops its statement, and what it does.
struct Listed {
    cancel: Arc<StatementCancel>,
    activity: Arc<Activity>,
}

/// A connection beyond `--max-connections` (53300).
#[derive(Debug, thiserror::Error)]
#[error("sorry, too many clients already")]
pub struct TooManyConnections;

impl ConnectionRegistry {
    pub fn new(max: Option<usize>) -> ConnectionRegistry {
        ConnectionRegistry {
            max,
            ..ConnectionRegistry::default()
        }
    }

    /// A statement starts running; it counts until the guard is dropped.
    /// Err once a shutdown has begun: no statement starts after it.
    pub fn running(self: &Arc<Self>) -> Result<Running, ShuttingDown> {
        self.running.fetch_add(1, Ordering::AcqRel);
        let guard = Running {
            registry: self.clone(),
        };
        match self.shutting_down.load(Ordering::Acquire) {
            true => Err(ShuttingDown),
            false => Ok(guard),
        }
    }

    /// A shutdown begins: statements running now may finish, no new one
    /// starts.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Waits until no statement runs, or `limit` has passed; how many
    /// still run.
    pub async fn wait_idle(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            let running = self.running.load(Ordering::Acquire);
            if running == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.running.load(Ordering::Acquire);
            }
        }
    }

    /// Registers a connection, unless there are as many as allowed; it
    /// stays registered while the guard lives.
    pub fn register(
        self: &Arc<Self>,
        pid: i32,
        secret: Vec<u8>,
        cancel: Arc<StatementCancel>,
        activity: Arc<Activity>,
    ) -> Result<Registered, TooManyConnections> {
        let mut sessions = self.sessions.lock();
        if self.max.is_some_and(|max| sessions.len() >= max) {
            return Err(TooManyConnections);
        }
        sessions.insert((pid, secret.clone()), Listed { cancel, activity });
        Ok(Registered {
            registry: self.clone(),
            key: (pid, secret),
        })
    }

    /// The client at `peer` went away: the statement its connection runs
    /// stops as a cancel request would stop it (nothing half committed),
    /// instead of running on for nobody.
    pub fn peer_gone(&self, peer: &str) {
        let found: Vec<Arc<StatementCancel>> = self
            .sessions
            .lock()
            .values()
            .filter(|l| l.activity.row().client_addr == peer)
            .map(|l| l.cancel.clone())
            .collect();
        for c in found {
            c.cancel();
        }
    }

    /// A cancel request. An unknown key or a wrong secret does nothing,
    /// as in PostgreSQL (the requester is told nothing either way).
    pub fn cancel(&self, pid: i32, secret: &[u8]) -> bool {
        let found = self
            .sessions
            .lock()
            .get(&(pid, secret.to_vec()))
            .map(|l| l.cancel.clone());
        match found {
            Some(c) => {
                c.cancel();
                true
            }
            None => false,
        }
    }

    /// What each open connection is doing, by process id.
    pub fn activity(&self) -> Vec<ActivityRow> {
        let listed: Vec<Arc<Activity>> = self
            .sessions
            .lock()
            .values()
            .map(|l| l.activity.clone())
            .collect();
        let mut rows: Vec<ActivityRow> = listed.iter().map(|a| a.row()).collect();
        rows.sort_by_key(|r| r.pid);
        rows
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The server is shutting down (57P01).
#[derive(Debug, thiserror::Error)]
#[error("terminating connection due to administrator command")]
pub struct ShuttingDown;

/// A running statement, counted while it lives.
pub struct Running {
    registry: Arc<ConnectionRegistry>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.registry.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.registry.idle.notify_waiters();
        }
    }
}

/// Unregisters its connection when dropped (when the connection ends).
pub struct Registered {
    registry: Arc<ConnectionRegistry>,
    key: CancelKey,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.sessions.lock().remove(&self.key);
    }
}

/// `statement_timeout` as `SET` takes it: a number of milliseconds, or a
/// number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`), as PostgreSQL
/// reads it. None: not a valid value.
pub fn parse_timeout(value: &str) -> Option<Duration> {
    let v = value.trim().trim_matches('\'').trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let number: f64 = number.parse().ok()?;
    let ms_per_unit = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (number * ms_per_unit).round();
    if !(0.0..=i32::MAX as f64).contains(&ms) {
        return None;
    }
    Some(Duration::from_millis(ms as u64))
}

/// A timeout as `SHOW` prints it: in the largest unit that divides it
/// exactly (`5s`, `1500ms`, `2min`), `0` for none, as PostgreSQL does.
pub fn show_timeout(timeout: Option<Duration>) -> String {
    let ms = timeout.map_or(0, |t| t.as_millis() as u64);
    if ms == 0 {
        return "0".into();
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_and_print_as_postgresql_does() {
        assert_eq!(parse_timeout("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_timeout("'5s'"), Some(Duration::from_secs(5)));
        assert_eq!(parse_timeout("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("2 min"), Some(Duration::from_secs(120)));
        assert_eq!(parse_timeout("0"), Some(Duration::ZERO));
        assert_eq!(parse_timeout("soon"), None);
        assert_eq!(parse_timeout("5 parsecs"), None);
        assert_eq!(parse_timeout("-1"), None);
        assert_eq!(show_timeout(Some(Duration::from_secs(5))), "5s");
        assert_eq!(show_timeout(Some(Duration::from_millis(1500))), "1500ms");
        assert_eq!(show_timeout(Some(Duration::from_secs(120))), "2min");
        assert_eq!(show_timeout(None), "0");
    }

    #[tokio::test]
    async fn a_cancel_reaches_the_running_statement_and_not_the_next() {
        let c = StatementCancel::default();
        let first = c.begin();
        assert!(first.check().is_ok());
        c.cancel();
        assert!(matches!(
            first.check(),
            Err(SluiceError::Canceled(CancelReason::User))
        ));
        assert_eq!(first.cancelled().await, CancelReason::User);
        let next = c.begin();
        assert!(next.check().is_ok());
    }

    #[tokio::test]
    async fn a_timeout_stops_work_that_would_wait_longer() {
        let c = StatementCancel::default();
        c.set_timeout(Some(Duration::from_millis(50)));
        let w = c.begin();
        let started = std::time::Instant::now();
        let result = w
            .run(async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(())
            })
            .await;
        assert!(matches!(
            result,
            Err(SluiceError::Canceled(CancelReason::Timeout))
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        c.set_timeout(None);
        assert!(c.begin().check().is_ok());
    }
}
