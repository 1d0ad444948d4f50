//! Materialized views over the wire: incremental results, FLUSH, restart,
//! refusals, and stream/batch equivalence on random event streams.

mod common;

use common::{sqlstate, Server};
use rand::{Rng, SeedableRng};

const USAGE: &str = "CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP) \
                     APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')";

/// View queries and the batch query each must equal (same SQL, ordered).
const SHAPES: [(&str, &str, &str); 6] = [
    (
        "totals",
        "SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS events, MIN(tokens) AS lo, MAX(tokens) AS hi, \
         AVG(tokens) AS mean, COUNT(DISTINCT event_id) AS ids FROM usage GROUP BY tenant",
        "tenant",
    ),
    (
        "per_minute",
        "SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, COUNT(*) AS events \
         FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start, window_end",
        "tenant, window_start",
    ),
    (
        "big_events",
        "SELECT event_id, tenant, tokens * 2 AS doubled FROM usage WHERE tokens >= 2000",
        "event_id",
    ),
    (
        "sliding",
        "SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, MAX(tokens) AS top \
         FROM HOP(usage, event_time, INTERVAL '20 seconds', INTERVAL '1 minute') GROUP BY tenant, window_start, window_end",
        "tenant, window_start",
    ),
    ("overall", "SELECT COUNT(*) AS n, SUM(tokens) AS s, MAX(event_time) AS latest FROM usage", "n"),
    (
        "by_hour",
        "SELECT date_bin(INTERVAL '1 hour', event_time) AS hour, COUNT(*) AS n FROM usage WHERE tenant <> 't3' GROUP BY 1",
        "hour",
    ),
];

async fn rows_text(c: &tokio_postgres::Client, sql: &str) -> Vec<Vec<Option<String>>> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

async fn assert_views_equal_batch(c: &tokio_postgres::Client, context: &str) {
    for (name, query, order) in SHAPES {
        let view = rows_text(c, &format!("SELECT * FROM {name} ORDER BY {order}")).await;
        let batch = rows_text(c, &format!("SELECT * FROM ({query}) AS q ORDER BY {order}")).await;
        assert!(!view.is_empty(), "{context}: view {name} is empty");
        assert_eq!(
            view, batch,
            "{context}: view {name} differs from its batch query"
        );
    }
}

async fn insert_random(
    c: &tokio_postgres::Client,
    rng: &mut rand::rngs::StdRng,
    first_id: usize,
    n: usize,
) {
    insert_jittered(c, rng, first_id, n, 90).await
}

async fn insert_jittered(
    c: &tokio_postgres::Client,
    rng: &mut rand::rngs::StdRng,
    first_id: usize,
    n: usize,
    jitter_secs: i64,
) {
    let mut values = Vec::with_capacity(n);
    for i in first_id..first_id + n {
        // Event times move forward 3 s a row, jittered back, out of order.
        let secs = i as i64 * 3 - rng.random_range(0..jitter_secs);
        let ts = chrono::DateTime::from_timestamp(1_767_225_600 + secs, 0)
            .unwrap()
            .naive_utc();
        values.push(format!(
            "('e{i}', 't{}', {}, '{}')",
            rng.random_range(0..7),
            rng.random_range(50..4000),
            ts.format("%Y-%m-%d %H:%M:%S")
        ));
    }
    c.batch_execute(&format!("INSERT INTO usage VALUES {}", values.join(", ")))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_their_batch_queries_on_random_streams() {
    for seed in [1u64, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Server::start(dir.path());
        let c = server.connect().await;
        c.batch_execute(USAGE).await.unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Some rows before the views exist (backfill), more after (tail).
        insert_random(&c, &mut rng, 0, 300).await;
        for (name, query, _) in SHAPES {
            c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
                .await
                .unwrap();
        }
        let mut next = 300;
        for _ in 0..8 {
            let n = rng.random_range(1..200);
            insert_random(&c, &mut rng, next, n).await;
            next += n;
        }
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("seed {seed}")).await;
        // Views rebuild from the log after a restart.
        drop(c);
        server.restart();
        let c = server.connect().await;
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("seed {seed}, after restart")).await;
        insert_random(&c, &mut rng, next, 50).await;
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("seed {seed}, after restart and more rows")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_statements_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(USAGE).await.unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW totals AS SELECT tenant, SUM(tokens) AS tokens FROM usage GROUP BY tenant")
        .await
        .unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW IF NOT EXISTS totals AS SELECT 1 FROM usage")
        .await
        .unwrap();
    let cases = [
        ("CREATE MATERIALIZED VIEW totals AS SELECT tenant FROM usage", "42P07"),
        ("CREATE MATERIALIZED VIEW v AS SELECT * FROM missing", "42P01"),
        ("CREATE MATERIALIZED VIEW v AS SELECT a.tenant FROM usage a FULL JOIN usage b ON a.tenant = b.tenant AND a.tokens < b.tokens", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant FROM usage ORDER BY tokens", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant, percentile_cont(0.5) WITHIN GROUP (ORDER BY tokens) FROM usage GROUP BY tenant", "0A000"),
        // SUM(DISTINCT) over rows that change in place works now; an
        // aggregate of DISTINCT values with a second argument that is not
        // a constant is refused.
        ("CREATE MATERIALIZED VIEW v AS SELECT string_agg(DISTINCT tenant, tenant) FROM totals", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant, COUNT(*) FROM usage GROUP BY tenant EMIT ON WINDOW CLOSE", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT * FROM HOP(usage, event_time, INTERVAL '2 minutes', INTERVAL '1 minute')", "22023"),
        ("DROP TABLE usage", "2BP01"),
        ("DROP TABLE totals", "42809"),
        ("DROP MATERIALIZED VIEW usage", "42809"),
        ("DROP MATERIALIZED VIEW nope", "42P01"),
    ];
    for (sql, code) in cases {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
    }
    let names = rows_text(&c, "SHOW MATERIALIZED VIEWS").await;
    assert_eq!(names, vec![vec![Some("totals".to_string())]]);
    let tables = rows_text(&c, "SHOW TABLES").await;
    assert_eq!(tables, vec![vec![Some("usage".to_string())]]);
    c.batch_execute("INSERT INTO usage VALUES ('e1', 'a', 5, NULL), ('e2', 'a', 7, NULL); FLUSH")
        .await
        .unwrap();
    let state = rows_text(
        &c,
        "SELECT state_rows, lag_rows FROM sluice_catalog.views WHERE view_name = 'totals'",
    )
    .await;
    assert_eq!(
        state,
        vec![vec![Some("1".to_string()), Some("0".to_string())]]
    );
    c.batch_execute(
        "DROP MATERIALIZED VIEW totals; DROP MATERIALIZED VIEW IF EXISTS totals; DROP TABLE usage",
    )
    .await
    .unwrap();
}

/// The batch query over the rows a view accepted: all rows of `usage`
/// minus that view's late rows.
fn accepted_rows(view: &str) -> String {
    format!(
        "(SELECT u.tenant, u.tokens, u.event_time FROM usage u LEFT JOIN \
         (SELECT \"partition\", \"offset\" FROM sluice_catalog.late_rows WHERE view_name = '{view}') l \
         ON u._partition = l.\"partition\" AND u._offset = l.\"offset\" WHERE l.\"offset\" IS NULL) AS a"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_views_with_late_rows_equal_batch_over_accepted_rows() {
    for seed in [7u64, 8] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Server::start(dir.path());
        let c = server.connect().await;
        c.batch_execute(
            "CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP, \
             WATERMARK FOR event_time AS event_time - INTERVAL '30 seconds') APPEND ONLY \
             WITH (partitions = 4)",
        )
        .await
        .unwrap();
        let window = "SELECT tenant, window_start, window_end, SUM(tokens) AS tokens, COUNT(*) AS events \
                      FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start, window_end";
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW live AS {window}"))
            .await
            .unwrap();
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW final AS {window} EMIT ON WINDOW CLOSE"
        ))
        .await
        .unwrap();
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW lenient WITH (allowed_lateness = '2 minutes') AS {window}"
        ))
        .await
        .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut next = 0;
        for _ in 0..15 {
            // Jitter of up to 5 minutes against a 30 s delay: some rows are late.
            let n = rng.random_range(5..60);
            insert_jittered(&c, &mut rng, next, n, 300).await;
            next += n;
        }
        c.batch_execute("FLUSH").await.unwrap();
        let late: i64 = common::scalar(
            &c,
            "SELECT COUNT(*) FROM sluice_catalog.late_rows WHERE view_name = 'live'",
        )
        .await;
        assert!(late > 0, "seed {seed}: the stream should have late rows");
        let lenient: i64 = common::scalar(
            &c,
            "SELECT COUNT(*) FROM sluice_catalog.late_rows WHERE view_name = 'lenient'",
        )
        .await;
        assert!(
            lenient < late,
            "allowed lateness accepts more rows ({lenient} vs {late})"
        );
        for view in ["live", "lenient"] {
            let got = rows_text(
                &c,
                &format!("SELECT * FROM {view} ORDER BY tenant, window_start"),
            )
            .await;
            let want = rows_text(
                &c,
                &format!(
                    "SELECT tenant, date_bin(INTERVAL '1 minute', event_time) AS window_start, \
                     date_bin(INTERVAL '1 minute', event_time) + INTERVAL '1 minute' AS window_end, \
                     SUM(tokens) AS tokens, COUNT(*) AS events FROM {} GROUP BY 1, 2, 3 ORDER BY 1, 2",
                    accepted_rows(view)
                ),
            )
            .await;
            assert_eq!(
                got, want,
                "seed {seed}: {view} differs from the batch query over accepted rows"
            );
        }
        // EMIT ON WINDOW CLOSE shows exactly the closed windows of the live view.
        let mark: String = c
            .query_one("SELECT CAST(watermark AS TEXT) FROM sluice_catalog.views WHERE view_name = 'final'", &[])
            .await
            .unwrap()
            .get(0);
        let closed = rows_text(&c, "SELECT * FROM final ORDER BY tenant, window_start").await;
        let live_closed = rows_text(
            &c,
            &format!("SELECT * FROM live WHERE window_end <= CAST('{mark}' AS TIMESTAMP) ORDER BY tenant, window_start"),
        )
        .await;
        assert!(!closed.is_empty());
        assert_eq!(closed, live_closed, "seed {seed}: final windows");
        // The same decisions after rebuilding from the log.
        let before = rows_text(
            &c,
            "SELECT * FROM sluice_catalog.late_rows ORDER BY view_name, \"partition\", \"offset\"",
        )
        .await;
        let live_before = rows_text(&c, "SELECT * FROM live ORDER BY tenant, window_start").await;
        drop(c);
        server.restart();
        let c = server.connect().await;
        c.batch_execute("FLUSH").await.unwrap();
        let after = rows_text(
            &c,
            "SELECT * FROM sluice_catalog.late_rows ORDER BY view_name, \"partition\", \"offset\"",
        )
        .await;
        assert_eq!(before, after, "seed {seed}: late rows after restart");
        let live_after = rows_text(&c, "SELECT * FROM live ORDER BY tenant, window_start").await;
        assert_eq!(live_before, live_after, "seed {seed}: view after restart");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_windows_drop_their_state() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, event_time TIMESTAMP, WATERMARK FOR event_time AS event_time - INTERVAL '2 seconds') \
         APPEND ONLY WITH (partitions = 1)",
    )
    .await
    .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_second AS SELECT window_start, window_end, COUNT(*) AS n \
         FROM TUMBLE(ev, event_time, INTERVAL '1 second') GROUP BY window_start, window_end EMIT ON WINDOW CLOSE",
    )
    .await
    .unwrap();
    // 1,000,000 events over 10,000 one-second windows, in 20 COPY statements.
    let mut max_state = 0i64;
    for chunk in 0..20 {
        let mut data = String::with_capacity(50_000 * 40);
        for i in chunk * 50_000..(chunk + 1) * 50_000 {
            let second = i / 100;
            data.push_str(&format!(
                "{i}\t2026-01-01 {:02}:{:02}:{:02}.{:06}\n",
                second / 3600,
                second / 60 % 60,
                second % 60,
                (i % 100) * 10_000
            ));
        }
        let sink = c.copy_in("COPY ev FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        sink.finish().await.unwrap();
        c.batch_execute("FLUSH").await.unwrap();
        let state: i64 = common::scalar(
            &c,
            "SELECT state_rows FROM sluice_catalog.views WHERE view_name = 'per_second'",
        )
        .await;
        max_state = max_state.max(state);
    }
    let closed: i64 = common::scalar(&c, "SELECT COUNT(*) FROM per_second").await;
    let total: i64 = common::scalar(&c, "SELECT SUM(n) FROM per_second").await;
    // Windows up to the watermark (last event 02:46:39.99 - 2 s) are final.
    assert!(
        (9_990..10_000).contains(&closed),
        "closed windows: {closed}"
    );
    assert_eq!(total, closed * 100);
    assert!(max_state <= 5, "open windows held: {max_state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_append_only_views() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP, \
         WATERMARK FOR event_time AS event_time - INTERVAL '30 seconds') APPEND ONLY WITH (partitions = 4)",
    )
    .await
    .unwrap();
    let minutes = "SELECT tenant, window_start, window_end, SUM(tokens) AS tokens FROM TUMBLE(usage, event_time, INTERVAL '1 minute') \
                   GROUP BY tenant, window_start, window_end";
    c.batch_execute(&format!(
        "CREATE MATERIALIZED VIEW minutes AS {minutes} EMIT ON WINDOW CLOSE"
    ))
    .await
    .unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW busy AS SELECT tenant, window_start, tokens FROM minutes WHERE tokens >= 3000")
        .await
        .unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS windows FROM minutes GROUP BY tenant")
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut next = 0;
    for _ in 0..10 {
        let n = rng.random_range(20..80);
        insert_random(&c, &mut rng, next, n).await;
        next += n;
    }
    check_view_chain(&c, "before restart").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    check_view_chain(&c, "after restart").await;
    let e = c
        .batch_execute("DROP MATERIALIZED VIEW minutes")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "2BP01");
    c.batch_execute("DROP MATERIALIZED VIEW busy, per_tenant; DROP MATERIALIZED VIEW minutes")
        .await
        .unwrap();
}

/// Views over the `minutes` view equal their queries run over its rows.
async fn check_view_chain(c: &tokio_postgres::Client, round: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let closed = rows_text(c, "SELECT * FROM minutes ORDER BY tenant, window_start").await;
    assert!(!closed.is_empty(), "{round}");
    let busy = rows_text(c, "SELECT * FROM busy ORDER BY tenant, window_start").await;
    let want = rows_text(
        c,
        "SELECT tenant, window_start, tokens FROM minutes WHERE tokens >= 3000 ORDER BY tenant, window_start",
    )
    .await;
    assert!(!busy.is_empty(), "{round}");
    assert_eq!(busy, want, "{round}: busy");
    let per = rows_text(c, "SELECT * FROM per_tenant ORDER BY tenant").await;
    let want = rows_text(
        c,
        "SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS windows FROM minutes GROUP BY tenant ORDER BY tenant",
    )
    .await;
    assert_eq!(per, want, "{round}: per_tenant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_never_see_half_a_statement() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(USAGE).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW counts AS SELECT COUNT(*) AS n, SUM(tokens) AS s FROM usage",
    )
    .await
    .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW rows_seen AS SELECT event_id FROM usage WHERE tokens > 0",
    )
    .await
    .unwrap();
    // Each statement writes 400 rows across all four partitions.
    let conn = server.conn_string();
    let writer = tokio::spawn(async move {
        let (w, conn) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        for s in 0..40 {
            let values: Vec<String> = (0..400)
                .map(|i| format!("('s{s}-{i}', 't{}', 1, NULL)", i % 13))
                .collect();
            w.batch_execute(&format!("INSERT INTO usage VALUES {}", values.join(", ")))
                .await
                .unwrap();
        }
    });
    let mut reads = 0;
    while !writer.is_finished() {
        let n: i64 = common::scalar(&c, "SELECT n FROM counts").await;
        let s: i64 = common::scalar(&c, "SELECT COALESCE(s, 0) FROM counts").await;
        let seen: i64 = common::scalar(&c, "SELECT COUNT(*) FROM rows_seen").await;
        assert_eq!(n % 400, 0, "a read saw part of a statement: {n} rows");
        assert_eq!(s % 400, 0, "a read saw part of a statement: sum {s}");
        assert_eq!(seen % 400, 0, "a read saw part of a statement: {seen} rows");
        reads += 1;
    }
    writer.await.unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(common::scalar(&c, "SELECT n FROM counts").await, 16_000);
    assert!(reads > 0);
}

/// A row of a source on which a view's expression fails (a division by
/// zero in one row's values, below an aggregate, in a filter or in a
/// select list) no longer stops the view: it reads on without the row,
/// its reads fail with the row's error (as the query over the same rows
/// does) while the row is there, through a SIGKILL, and answer again,
/// equal to the query, once the row is deleted or replaced. Before, the
/// view stopped for good at the first such row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_row_that_fails_sets_the_view_aside_until_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "100"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE m (id INT PRIMARY KEY, k TEXT NOT NULL, x INT) \
             WITH (partitions = 4, delete_retention = '0s');
         CREATE TABLE a (k TEXT NOT NULL, x INT) WITH (partitions = 3);
         CREATE MATERIALIZED VIEW m_sums AS SELECT k, sum(100 / x) AS s, count(*) AS n FROM m GROUP BY k;
         CREATE MATERIALIZED VIEW m_rows AS SELECT id, 100 / x AS q FROM m WHERE 10 / x >= 0;
         CREATE MATERIALIZED VIEW a_sums AS SELECT k, sum(100 / x) AS s FROM a GROUP BY k;
         INSERT INTO m VALUES (1, 'a', 10), (2, 'a', 0), (3, 'b', 5), (4, 'b', NULL), (5, 'c', 0);
         INSERT INTO a VALUES ('a', 10), ('a', 0), ('b', 4);
         FLUSH;",
    )
    .await
    .unwrap();
    let rows = |r: Vec<tokio_postgres::SimpleQueryMessage>| common::rows_of(r);
    for view in ["m_sums", "m_rows", "a_sums"] {
        let e = c
            .simple_query(&format!("SELECT * FROM {view}"))
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "22012", "{view}: {e}");
    }
    // The query over the same rows fails the same way.
    let e = c
        .simple_query("SELECT k, sum(100 / x) FROM m GROUP BY k")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{e}");
    let status = rows(
        c.simple_query(
            "SELECT view_name, error IS NULL, compute_error LIKE 'division by zero (in 2 rows%' \
             FROM sluice_catalog.views WHERE view_name LIKE 'm%' ORDER BY 1",
        )
        .await
        .unwrap(),
    );
    assert_eq!(status, ["m_rows|t|t", "m_sums|t|t"], "neither view stopped");
    // The views read on meanwhile.
    c.batch_execute("INSERT INTO m VALUES (6, 'c', 20), (7, 'a', 50); FLUSH")
        .await
        .unwrap();
    // A checkpoint keeps the failed rows: they count after a SIGKILL.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    drop(c);
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    for view in ["m_sums", "m_rows", "a_sums"] {
        let e = c
            .simple_query(&format!("SELECT * FROM {view}"))
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "22012", "after SIGKILL, {view}: {e}");
    }
    // One row replaced, one deleted: nothing fails any more.
    c.batch_execute("INSERT INTO m VALUES (2, 'a', 25); DELETE FROM m WHERE id = 5; FLUSH")
        .await
        .unwrap();
    let query = "SELECT k, sum(100 / x) AS s, count(*) AS n FROM m GROUP BY k ORDER BY k";
    let expected = rows(c.simple_query(query).await.unwrap());
    assert_eq!(expected, ["a|16|3", "b|20|2", "c|5|1"]);
    assert_eq!(
        rows(
            c.simple_query("SELECT k, s, n FROM m_sums ORDER BY k")
                .await
                .unwrap()
        ),
        expected
    );
    assert_eq!(
        rows(
            c.simple_query("SELECT id, q FROM m_rows ORDER BY id")
                .await
                .unwrap()
        ),
        rows(
            c.simple_query("SELECT id, 100 / x FROM m WHERE 10 / x >= 0 ORDER BY id")
                .await
                .unwrap()
        )
    );
    // An append-only table never takes its row back: its view stays
    // unreadable, as its query stays failing, until it is made again with
    // a query that does not fail.
    let e = c.simple_query("SELECT * FROM a_sums").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{e}");
    c.batch_execute(
        "DROP MATERIALIZED VIEW a_sums; \
         CREATE MATERIALIZED VIEW a_sums AS SELECT k, sum(100 / NULLIF(x, 0)) AS s FROM a GROUP BY k; FLUSH",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(
            c.simple_query("SELECT k, s FROM a_sums ORDER BY k")
                .await
                .unwrap()
        ),
        ["a|10", "b|25"]
    );
}

/// A view whose select list fails on the state it holds (a division by a
/// count that is zero) goes on reading: its reads fail with the error
/// (22012) and `sluice_catalog.views.compute_error` says why while the rows
/// do not compute, and the view answers again once they do, through a
/// SIGKILL. Before, CREATE over an empty table failed or the view stopped
/// for good at its first publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_whose_rows_do_not_compute_reads_on_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "100"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE b (k TEXT NOT NULL, x INT) WITH (partitions = 3);
         CREATE MATERIALIZED VIEW ratio AS SELECT count(*) / count(x) AS q FROM b;
         CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) / count(x) AS q FROM b GROUP BY k;
         FLUSH;",
    )
    .await
    .unwrap();
    // Over no rows, PostgreSQL's query fails too: reads fail, with 22012.
    let e = c.simple_query("SELECT * FROM ratio").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{e}");
    c.batch_execute("INSERT INTO b VALUES ('a', 1), ('a', 1), ('a', 2), ('c', NULL); FLUSH")
        .await
        .unwrap();
    let rows = |r: Vec<tokio_postgres::SimpleQueryMessage>| common::rows_of(r);
    assert_eq!(
        rows(c.simple_query("SELECT q FROM ratio").await.unwrap()),
        ["1"]
    );
    // Group c has no x: the whole result fails, as the query does.
    let e = c.simple_query("SELECT * FROM per_k").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{e}");
    let status = rows(
        c.simple_query(
            "SELECT view_name, error IS NULL, compute_error, compute_errors > 0 FROM sluice_catalog.views ORDER BY 1",
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        status,
        ["per_k|t|division by zero|t", "ratio|t|NULL|t"],
        "neither view stopped; per_k says why it cannot be read"
    );
    drop(c);
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    let e = c.simple_query("SELECT * FROM per_k").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "after SIGKILL: {e}");
    c.batch_execute("INSERT INTO b VALUES ('c', 5); FLUSH")
        .await
        .unwrap();
    assert_eq!(
        rows(
            c.simple_query("SELECT k, q FROM per_k ORDER BY k")
                .await
                .unwrap()
        ),
        ["a|1", "c|2"]
    );
    assert_eq!(
        rows(c.simple_query("SELECT q FROM ratio").await.unwrap()),
        ["1"]
    );
    // The batch query agrees (5 rows, 4 with x).
    assert_eq!(
        rows(
            c.simple_query("SELECT count(*) / count(x) FROM b")
                .await
                .unwrap()
        ),
        ["1"]
    );
}
