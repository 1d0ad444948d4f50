//! Materialized views over the wire: incremental results, FLUSH, restart,
//! refusals, and stream/batch equivalence on random event streams.

mod common;

use common::{sqlstate, Server};
use rand::{Rng, SeedableRng};

const USAGE: &str = "CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP) \
                     APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')";

/// View queries and the batch query each must equal (same SQL, ordered).
const SHAPES: [(&str, &str, &str); 5] = [
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
    let mut values = Vec::with_capacity(n);
    for i in first_id..first_id + n {
        // Event times move forward with jitter of up to 90 s, out of order.
        let secs = i as i64 * 3 - rng.random_range(0..90i64);
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
        ("CREATE MATERIALIZED VIEW v AS SELECT a.tenant FROM usage a JOIN usage b ON a.tenant = b.tenant", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant FROM usage ORDER BY tenant", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant, stddev(tokens) FROM usage GROUP BY tenant", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT * FROM totals", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT tenant, COUNT(*) FROM usage GROUP BY tenant EMIT ON WINDOW CLOSE", "0A000"),
        ("CREATE MATERIALIZED VIEW v AS SELECT * FROM HOP(usage, event_time, INTERVAL '10 seconds', INTERVAL '1 minute')", "0A000"),
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
