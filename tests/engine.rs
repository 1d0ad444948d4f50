//! The engine runs statements for a session with no protocol in between,
//! as another front end (or a test) would drive it: DDL, writes, queries,
//! privileges, transaction blocks, COPY and views.

use std::sync::Arc;

use futures::TryStreamExt;
use sluice::auth::RoleStore;
use sluice::engine::{Engine, EngineConfig, Outcome, Session};

async fn open(dir: &std::path::Path) -> Engine {
    let roles = Arc::new(RoleStore::open(dir).unwrap());
    roles.bootstrap(None).unwrap();
    Engine::open(&EngineConfig::new(dir), roles).await.unwrap()
}

fn session_as(engine: &Engine, role: &str) -> Session {
    let session = Session::default();
    let _ = session.role.set(engine.roles.session_of(role));
    session
}

async fn run(engine: &Engine, session: &Session, sql: &str) -> Result<Outcome, (String, String)> {
    let (notices, _raised) = tokio::sync::mpsc::unbounded_channel();
    engine
        .execute(session, sql, &notices)
        .await
        .map_err(|e| (e.sqlstate().to_string(), e.message()))
}

/// What an outcome reports: a command's tag and count, or the rows.
async fn shown(outcome: Outcome) -> String {
    match outcome {
        Outcome::Done { tag, rows } => match rows {
            Some(n) => format!("{tag} {n}"),
            None => tag.to_string(),
        },
        Outcome::TransactionStart(tag) | Outcome::TransactionEnd(tag) => tag.to_string(),
        Outcome::Batches { batches, .. } => pretty(&batches),
        Outcome::Stream { rows, .. } => pretty(&rows.try_collect::<Vec<_>>().await.unwrap()),
        Outcome::CopyIn { binary, columns } => format!("COPY IN binary={binary} columns={columns}"),
        Outcome::CopyOut { .. } => "COPY OUT".into(),
        Outcome::Empty => "EMPTY".into(),
    }
}

fn pretty(batches: &[arrow::record_batch::RecordBatch]) -> String {
    arrow::util::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
}

async fn ok(engine: &Engine, session: &Session, sql: &str) -> String {
    match run(engine, session, sql).await {
        Ok(outcome) => shown(outcome).await,
        Err((code, message)) => panic!("{sql}: {code} {message}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_for_a_session_without_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path()).await;
    let admin = session_as(&engine, "sluice");
    assert_eq!(
        ok(&engine, &admin, "CREATE TABLE t (k BIGINT, v BIGINT)").await,
        "CREATE TABLE"
    );
    assert_eq!(
        ok(&engine, &admin, "INSERT INTO t VALUES (1, 10), (2, 20)").await,
        "INSERT 2"
    );
    // A transaction block: its rows are gone after ROLLBACK.
    assert_eq!(ok(&engine, &admin, "BEGIN").await, "BEGIN");
    assert_eq!(
        ok(&engine, &admin, "INSERT INTO t VALUES (3, 30)").await,
        "INSERT 1"
    );
    assert_eq!(ok(&engine, &admin, "ROLLBACK").await, "ROLLBACK");
    // COPY FROM STDIN: the engine takes the data as it comes.
    assert_eq!(
        ok(&engine, &admin, "COPY t FROM STDIN").await,
        "COPY IN binary=false columns=2"
    );
    engine.copy_data(&admin, b"4\t40\n5\t");
    engine.copy_data(&admin, b"50\n");
    assert_eq!(engine.copy_done(&admin).await.unwrap(), 2);
    let rows = ok(&engine, &admin, "SELECT k, v FROM t ORDER BY k").await;
    assert!(
        rows.contains("| 5 | 50 |") && !rows.contains("| 3 "),
        "{rows}"
    );

    // Privileges are the engine's: a role without the grant is refused.
    ok(&engine, &admin, "CREATE ROLE alice LOGIN").await;
    let alice = session_as(&engine, "alice");
    assert_eq!(
        run(&engine, &alice, "SELECT * FROM t").await.err(),
        Some(("42501".into(), "permission denied for table t".into()))
    );
    ok(&engine, &admin, "GRANT SELECT ON t TO alice").await;
    let rows = ok(&engine, &alice, "SELECT count(*) AS n FROM t").await;
    assert!(rows.contains("| 4 |"), "{rows}");

    // A view, kept up to date and read like a table.
    ok(
        &engine,
        &admin,
        "CREATE MATERIALIZED VIEW totals AS SELECT sum(v) AS total FROM t",
    )
    .await;
    assert_eq!(ok(&engine, &admin, "FLUSH").await, "FLUSH");
    let rows = ok(&engine, &admin, "SELECT total FROM totals").await;
    assert!(rows.contains("| 120   |"), "{rows}");
}
