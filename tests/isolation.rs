//! One heavy query never stalls the server: ad-hoc queries run on their
//! own threads (see `src/query/executor.rs`), so new connections, writes
//! and views stay prompt beside them, and a cancel or a timeout stops them
//! at once. And one data directory serves one server.
//!
//! The bounds asserted here are the issue's, with room for a debug build
//! on a shared machine; `benches/mixed_load.sh` measures the same beside
//! PostgreSQL in a release build.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{python_has, run_client, sqlstate, Server};
use tokio_postgres::NoTls;

/// A cross join that runs for minutes unless it is stopped, as a mistyped
/// join does.
const HEAVY: &str =
    "SELECT count(*) FROM generate_series(1, 150000) a(x), generate_series(1, 150000) b(x) WHERE a.x + b.x = 1";

/// The tests here measure latency and CPU: one at a time, so that one's
/// heavy queries do not take the CPUs another measures with.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 99).div_ceil(100) - 1]
}

/// Starts `n` copies of the heavy query, each on its own connection.
async fn start_heavy(server: &Server, n: usize) -> Vec<tokio_postgres::CancelToken> {
    let mut tokens = Vec::new();
    for _ in 0..n {
        let c = server.connect().await;
        tokens.push(c.cancel_token());
        tokio::spawn(async move {
            let _ = c.simple_query(HEAVY).await;
        });
    }
    // Let them get going.
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokens
}

/// CPU seconds the process has used (user + system), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// The share of one CPU the process uses over `window`.
fn cpu_share(pid: u32, window: Duration) -> f64 {
    let before = cpu_seconds(pid);
    std::thread::sleep(window);
    (cpu_seconds(pid) - before) / window.as_secs_f64()
}

async fn insert_latencies(c: &tokio_postgres::Client, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        c.execute("INSERT INTO ev VALUES ($1, 'x')", &[&(i as i64)])
            .await
            .unwrap();
        out.push(started.elapsed());
    }
    out
}

/// How long after an INSERT returns the view counts its row.
async fn freshness(c: &tokio_postgres::Client, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let before: i64 = c
            .query_one("SELECT coalesce(sum(n), 0)::bigint FROM ev_counts", &[])
            .await
            .unwrap()
            .get(0);
        c.execute("INSERT INTO ev VALUES (-1, 'y')", &[])
            .await
            .unwrap();
        let started = Instant::now();
        loop {
            let now: i64 = c
                .query_one("SELECT coalesce(sum(n), 0)::bigint FROM ev_counts", &[])
                .await
                .unwrap()
                .get(0);
            if now > before {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the view never caught up"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        out.push(started.elapsed());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_queries_leave_connections_writes_and_views_prompt() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, k TEXT);
         CREATE MATERIALIZED VIEW ev_counts AS SELECT k, count(*) AS n FROM ev GROUP BY k;",
    )
    .await
    .unwrap();
    let idle_insert = p99(insert_latencies(&c, 100).await);
    let idle_fresh = p99(freshness(&c, 20).await);

    let heavy = start_heavy(&server, 2).await;
    let mut connects = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        let fresh = server.connect().await;
        fresh.simple_query("SELECT 1").await.unwrap();
        connects.push(started.elapsed());
    }
    let busy_insert = p99(insert_latencies(&c, 100).await);
    let busy_fresh = p99(freshness(&c, 20).await);
    let connect = p99(connects);
    eprintln!(
        "with two heavy queries: connect + SELECT 1 p99 {connect:?}; INSERT p99 {busy_insert:?} \
         (idle {idle_insert:?}); view freshness p99 {busy_fresh:?} (idle {idle_fresh:?})"
    );
    for t in heavy {
        t.cancel_query(NoTls).await.unwrap();
    }
    // The bounds, with a few milliseconds of slack where the
    // idle figure is itself a few milliseconds (a debug build's jitter).
    let slack = Duration::from_millis(15);
    assert!(
        connect < Duration::from_millis(50),
        "connect + SELECT 1 p99 {connect:?}"
    );
    assert!(
        busy_insert <= idle_insert * 3 + slack,
        "INSERT p99 {busy_insert:?}, idle {idle_insert:?}"
    );
    assert!(
        busy_fresh <= idle_fresh * 3 + slack,
        "view freshness p99 {busy_fresh:?}, idle {idle_fresh:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_timeout_stop_a_heavy_query_at_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let pid = server.pid();

    // A cancel request.
    let c = server.connect().await;
    let token = c.cancel_token();
    let running = tokio::spawn(async move {
        let r = c.simple_query(HEAVY).await;
        (c, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    token.cancel_query(NoTls).await.unwrap();
    let (c, result) = running.await.unwrap();
    let answered = asked.elapsed();
    assert_eq!(sqlstate(&result.expect_err("cancelled")), "57014");
    let idle = tokio::task::spawn_blocking(move || cpu_share(pid, Duration::from_millis(500)))
        .await
        .unwrap();
    eprintln!("cancel answered after {answered:?}; then the server used {idle:.2} CPUs");
    assert!(
        answered < Duration::from_millis(200),
        "cancel took {answered:?}"
    );
    assert!(
        idle < 0.2,
        "the server still uses {idle:.2} CPUs after the cancel"
    );

    // statement_timeout.
    c.batch_execute("SET statement_timeout = '1s'")
        .await
        .unwrap();
    let started = Instant::now();
    let e = c.simple_query(HEAVY).await.expect_err("timed out");
    let took = started.elapsed();
    assert_eq!(sqlstate(&e), "57014");
    eprintln!("statement_timeout of 1 s fired after {took:?}");
    assert!(
        took < Duration::from_millis(1200),
        "a 1 s timeout ended the query after {took:?}"
    );

    // A client that goes away (its process killed, say): its query stops.
    let (gone, connection) = tokio_postgres::connect(&server.conn_string(), NoTls)
        .await
        .unwrap();
    let socket = tokio::spawn(connection);
    tokio::spawn(async move {
        let _ = gone.simple_query(HEAVY).await;
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Dropping the connection closes the socket.
    socket.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = tokio::task::spawn_blocking(move || cpu_share(pid, Duration::from_millis(500)))
        .await
        .unwrap();
    eprintln!("after the client left, the server used {left:.2} CPUs");
    assert!(
        left < 0.2,
        "a disconnected client's query still runs ({left:.2} CPUs)"
    );
}

#[test]
fn a_second_server_on_a_held_data_directory_refuses_to_start() {
    let _serial = ONE_AT_A_TIME.blocking_lock();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let second = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&server.data_dir)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(!second.status.success(), "a second server started: {said}");
    assert!(
        said.contains("in use by another Sluice server")
            && said.contains(&format!("pid {}", server.pid())),
        "{said}"
    );
    // After SIGKILL of the first, a new one starts on the same directory.
    server.restart();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = server.connect().await;
        c.simple_query("SELECT 1").await.unwrap();
    });
}

#[test]
fn python_drivers_cancel_a_heavy_query_within_200_ms() {
    let _serial = ONE_AT_A_TIME.blocking_lock();
    if !python_has("psycopg, asyncpg") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/cancel_scenario.py");
    run_client(
        "cancel_scenario.py",
        Command::new("python3")
            .arg(script)
            .arg(server.port.to_string()),
    );
}
