//! Keeping the server standing: cancel requests (a driver's `cancel()`,
//! psql's Ctrl-C), `statement_timeout`, and `--max-connections`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{http_get, sample, scalar, sqlstate, text_rows, Server};
use tokio_postgres::NoTls;

/// The server's words for a failure.
fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// A query that runs for minutes unless it is stopped.
const LONG_QUERY: &str =
    "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_stops_a_long_query_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let token = c.cancel_token();
    let running = tokio::spawn(async move {
        let r = c.simple_query(LONG_QUERY).await;
        (c, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancelled_at = Instant::now();
    token.cancel_query(NoTls).await.expect("send the cancel");
    let (c, result) = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the query stopped")
        .unwrap();
    let stopped_after = cancelled_at.elapsed();
    let e = result.expect_err("a cancelled query fails");
    assert_eq!(sqlstate(&e), "57014");
    assert!(
        message(&e).contains("canceling statement due to user request"),
        "{e}"
    );
    assert!(
        stopped_after < Duration::from_secs(1),
        "stopped {stopped_after:?} after the cancel"
    );
    assert_eq!(scalar(&c, "SELECT 41 + 1").await, 42);

    // A prepared statement (extended protocol) is cancelled the same way.
    let token = c.cancel_token();
    let running = tokio::spawn(async move {
        let r = c.query(LONG_QUERY, &[]).await;
        (c, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(NoTls).await.unwrap();
    let (c, result) = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the prepared query stopped")
        .unwrap();
    assert_eq!(sqlstate(&result.expect_err("cancelled")), "57014");
    assert_eq!(scalar(&c, "SELECT 1").await, 1);

    // A cancel request with the wrong key does nothing.
    let other = server.connect().await;
    let sleeping = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(1.5)").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    other.cancel_token().cancel_query(NoTls).await.unwrap();
    sleeping
        .await
        .unwrap()
        .expect("a cancel of another connection");
}

#[test]
fn ctrl_c_in_psql_cancels_its_query() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let mut psql = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-U", "test", "-d", "test", "-c", LONG_QUERY])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    std::thread::sleep(Duration::from_millis(800));
    let sent = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &psql.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while psql.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "psql still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = sent.elapsed();
    let out = psql.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("canceling statement due to user request"),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(1),
        "psql ended {took:?} after Ctrl-C"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_stops_a_statement_and_is_kept_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let other = server.connect().await;
    c.batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    assert_eq!(text_rows(&c, "SHOW statement_timeout").await, ["300ms"]);
    assert_eq!(text_rows(&other, "SHOW statement_timeout").await, ["0"]);

    let started = Instant::now();
    let e = c.simple_query("SELECT pg_sleep(10)").await.unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    assert!(
        message(&e).contains("canceling statement due to statement timeout"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let started = Instant::now();
    let e = c.query(LONG_QUERY, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    assert!(started.elapsed() < Duration::from_secs(2));

    // Each statement gets the whole timeout; quick ones are unaffected.
    for _ in 0..3 {
        c.batch_execute("SELECT pg_sleep(0.1)").await.unwrap();
    }
    // The other session has no timeout.
    other.batch_execute("SELECT pg_sleep(0.5)").await.unwrap();

    c.batch_execute("SET statement_timeout = 2000")
        .await
        .unwrap();
    assert_eq!(text_rows(&c, "SHOW statement_timeout").await, ["2s"]);
    c.batch_execute("RESET statement_timeout").await.unwrap();
    assert_eq!(text_rows(&c, "SHOW statement_timeout").await, ["0"]);
    c.batch_execute("SELECT pg_sleep(0.5)").await.unwrap();

    let e = c
        .batch_execute("SET statement_timeout = 'soon'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    assert!(
        message(&e).contains("invalid value for parameter \"statement_timeout\": \"soon\""),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_write_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT, note TEXT) WITH (partitions = 2)")
        .await
        .unwrap();

    // INSERT ... SELECT stopped while its SELECT runs.
    c.batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let e = c
        .batch_execute(
            "INSERT INTO t SELECT x AS id, pg_sleep(5) AS note FROM generate_series(1, 3) AS s(x)",
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    c.batch_execute("RESET statement_timeout").await.unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM t").await, 0);

    // A COPY of 1M rows cancelled halfway through its data.
    use futures::SinkExt;
    let sink = c.copy_in("COPY t FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    for i in 0..500_000 {
        sink.feed(bytes::Bytes::from(format!("{i}\tfirst half\n")))
            .await
            .unwrap();
    }
    sink.flush().await.unwrap();
    c.cancel_token().cancel_query(NoTls).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 500_000..1_000_000 {
        sink.feed(bytes::Bytes::from(format!("{i}\tsecond half\n")))
            .await
            .unwrap();
    }
    let e = sink.finish().await.expect_err("a cancelled COPY fails");
    assert_eq!(sqlstate(&e), "57014");
    assert_eq!(scalar(&c, "SELECT count(*) FROM t").await, 0);

    // The table still takes rows.
    c.batch_execute("INSERT INTO t VALUES (1, 'after')")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM t").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_fetch_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT) WITH (partitions = 2);
         CREATE SUBSCRIPTION g FROM ev;
         DECLARE c SUBSCRIPTION CURSOR FOR g;",
    )
    .await
    .unwrap();
    let token = c.cancel_token();
    let waiting = tokio::spawn(async move {
        let r = c
            .simple_query("FETCH 10 FROM c WITH (timeout = '30s')")
            .await;
        (c, r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.unwrap();
    let (c, result) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the FETCH stopped waiting")
        .unwrap();
    assert_eq!(sqlstate(&result.expect_err("cancelled")), "57014");
    c.batch_execute("INSERT INTO ev VALUES (1), (2), (3)")
        .await
        .unwrap();
    let rows = c.simple_query("FETCH 10 FROM c").await.unwrap();
    assert_eq!(common::rows_of(rows).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--max-connections", "3"]);
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(server.connect().await);
    }
    let e = tokio_postgres::connect(&server.conn_string(), NoTls)
        .await
        .err()
        .expect("a fourth connection is refused");
    assert_eq!(sqlstate(&e), "53300");
    assert!(
        message(&e).contains("sorry, too many clients already"),
        "{e}"
    );
    // A cancel request is not a connection: it still gets through.
    let token = open[0].cancel_token();
    token.cancel_query(NoTls).await.unwrap();
    assert_eq!(scalar(&open[1], "SELECT 1").await, 1);

    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match tokio_postgres::connect(&server.conn_string(), NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                assert_eq!(scalar(&c, "SELECT 2").await, 2);
                break;
            }
            Err(e) => {
                assert_eq!(sqlstate(&e), "53300");
                assert!(
                    Instant::now() < deadline,
                    "the closed connection's place stayed taken"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_load_loses_nothing_and_leaves_nothing_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints a minute apart: only the shutdown's own can cover the
    // last rows.
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "60000"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, tenant BIGINT) WITH (partitions = 2);
         CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, count(*) AS n FROM ev GROUP BY tenant;",
    )
    .await
    .unwrap();
    // Writers that insert until the server goes, keeping what was acknowledged.
    let mut writers = Vec::new();
    for w in 0..4i64 {
        let client = server.connect().await;
        writers.push(tokio::spawn(async move {
            let insert = client
                .prepare("INSERT INTO ev VALUES ($1, $2)")
                .await
                .unwrap();
            let mut acked = Vec::new();
            for i in 0.. {
                let id = w * 1_000_000_000 + i;
                match client.execute(&insert, &[&id, &(id % 7)]).await {
                    Ok(1) => acked.push(id),
                    Ok(n) => panic!("INSERT counted {n}"),
                    Err(_) => break,
                }
            }
            acked
        }));
    }
    // A statement running when the signal comes is let finish.
    let sleeper = server.connect().await;
    let sleeping = tokio::spawn(async move { sleeper.simple_query("SELECT pg_sleep(1)").await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (server, status)
    });
    let (mut server, status) = status.await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    sleeping
        .await
        .unwrap()
        .expect("the running statement finished");
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(acked.len() > 10, "the load ran ({} rows)", acked.len());
    assert!(server.log_text().contains("every view checkpointed"));

    server.start_again();
    let c = server.connect().await;
    let stored: std::collections::HashSet<i64> = c
        .query("SELECT id FROM ev", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lost: Vec<&i64> = acked.iter().filter(|id| !stored.contains(id)).collect();
    assert!(lost.is_empty(), "acknowledged rows lost: {lost:?}");
    // The view restored from the shutdown's checkpoint, which covers the
    // whole log: nothing was replayed.
    let restored = text_rows(
        &c,
        "SELECT source_offsets FROM sluice_catalog.checkpoints WHERE view_name = 'per_tenant' AND attempt = 0",
    )
    .await;
    let ends = text_rows(
        &c,
        "SELECT end_offset FROM sluice_catalog.partitions WHERE table_name = 'ev' ORDER BY partition",
    )
    .await;
    assert_eq!(
        restored,
        [format!("(0=>{}, 1=>{})", ends[0], ends[1])],
        "restored from {restored:?}, the log ends at {ends:?}"
    );
    assert_eq!(
        scalar(&c, "SELECT CAST(sum(n) AS BIGINT) FROM per_tenant").await,
        stored.len() as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_beyond_query_memory_fails_alone_or_spills() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--query-memory", "20000000"]);
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE ev (id BIGINT) WITH (partitions = 2)")
        .await
        .unwrap();
    let writer = server.connect().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_writing = stop.clone();
    let writing = tokio::spawn(async move {
        let mut acked = 0i64;
        while !stop_writing.load(std::sync::atomic::Ordering::Relaxed) {
            writer
                .execute("INSERT INTO ev VALUES ($1)", &[&acked])
                .await
                .expect("INSERTs keep being acknowledged");
            acked += 1;
        }
        acked
    });
    // A hash join's build side cannot spill: the query fails with 53200.
    let e = c
        .simple_query(
            "SELECT count(*) FROM generate_series(1, 3000000) AS a(x) \
             JOIN generate_series(1, 3000000) AS b(y) ON x = y",
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "53200");
    assert!(message(&e).starts_with("out of memory"), "{}", message(&e));
    // A sort larger than the pool spills and succeeds.
    assert_eq!(
        scalar(
            &c,
            "SELECT count(*) FROM (SELECT x FROM generate_series(1, 3000000) AS s(x) ORDER BY x DESC) t"
        )
        .await,
        3_000_000
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writing.await.unwrap();
    assert!(acked > 0);
    assert_eq!(scalar(&c, "SELECT count(*) FROM ev").await, acked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_workload_say_what_sql_says() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    assert_eq!(http_get(server.http_port, "/livez").await.0, 200);
    assert_eq!(http_get(server.http_port, "/readyz").await.0, 200);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, tenant BIGINT) WITH (partitions = 2);
         CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, count(*) AS n FROM ev GROUP BY tenant;
         CREATE SUBSCRIPTION billing FROM ev;",
    )
    .await
    .unwrap();
    let (_, before) = http_get(server.http_port, "/metrics").await;
    let checkpoints_before = before
        .lines()
        .find_map(|l| l.strip_prefix("sluice_checkpoints_total{outcome=\"committed\"} "))
        .map_or(0.0, |v| v.trim().parse().unwrap());
    let insert = c.prepare("INSERT INTO ev VALUES ($1, $2)").await.unwrap();
    for i in 0..300i64 {
        c.execute(&insert, &[&i, &(i % 3)]).await.unwrap();
    }
    c.batch_execute(
        "INSERT INTO ev SELECT x AS id, 7 AS tenant FROM generate_series(1, 700) AS s(x); FLUSH",
    )
    .await
    .unwrap();
    let _ = c.simple_query("SELECT * FROM no_such_table").await;

    let (status, metrics) = http_get(server.http_port, "/metrics").await;
    assert_eq!(status, 200);
    // Prometheus' own parser reads it.
    let mut parse = Command::new("python3")
        .args([
            "-c",
            "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
             print(len(list(p(sys.stdin.read()))))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write;
        parse
            .stdin
            .take()
            .unwrap()
            .write_all(metrics.as_bytes())
            .unwrap();
    }
    let parsed = parse.wait_with_output().unwrap();
    assert!(
        parsed.status.success(),
        "the metrics do not parse: {}\n{metrics}",
        String::from_utf8_lossy(&parsed.stderr)
    );

    // Rows ingested are the rows inserted.
    assert_eq!(
        sample(&metrics, "sluice_table_records{table=\"ev\"}"),
        1000.0
    );
    // A subscription's lag is what sluice_catalog.lag says.
    for row in c
        .query(
            "SELECT CAST(partition AS VARCHAR), lag_records FROM sluice_catalog.lag WHERE consumer = 'billing'",
            &[],
        )
        .await
        .unwrap()
    {
        let partition: String = row.get(0);
        let lag: i64 = row.get(1);
        assert_eq!(
            sample(
                &metrics,
                &format!("sluice_lag_records{{consumer=\"billing\",kind=\"subscription\",source=\"ev\",partition=\"{partition}\"}}")
            ),
            lag as f64
        );
    }
    assert_eq!(
        sample(&metrics, "sluice_lag_records{consumer=\"per_tenant\",kind=\"view\",source=\"ev\",partition=\"0\"}"),
        0.0
    );
    // Checkpoints were counted, statements by kind and outcome too.
    assert!(
        sample(&metrics, "sluice_checkpoints_total{outcome=\"committed\"}") > checkpoints_before
    );
    assert!(
        sample(
            &metrics,
            "sluice_statements_total{kind=\"insert\",outcome=\"ok\"}"
        ) >= 301.0
    );
    assert!(
        sample(
            &metrics,
            "sluice_statements_total{kind=\"select\",outcome=\"error\"}"
        ) >= 1.0
    );
    assert_eq!(
        sample(&metrics, "sluice_view_failed{view=\"per_tenant\"}"),
        0.0
    );
    assert!(sample(&metrics, "sluice_connections_active") >= 1.0);
    assert!(sample(&metrics, "process_resident_memory_bytes") > 0.0);
}
