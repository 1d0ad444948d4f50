//! Views with joins, DISTINCT and UNION equal their own query run as a
//! batch query over the tables: after random inserts, upserts and deletes
//! on every side (keys from a small domain, NULL keys, multi-table
//! transactions), and again after SIGKILL at random moments and a restart
//! from checkpoints.

mod common;

use common::{crash_runs_or, sqlstate, text_rows, Server};
use rand::{Rng, SeedableRng};

const TABLES: &str = "
    CREATE TABLE l (k BIGINT, v BIGINT) APPEND ONLY WITH (partitions = 2);
    CREATE TABLE s (k BIGINT, x BIGINT) APPEND ONLY;
    CREATE TABLE r (id BIGINT PRIMARY KEY, k BIGINT, w BIGINT) WITH (partitions = 2);
    CREATE TABLE d (k BIGINT PRIMARY KEY, name TEXT);
";

/// Every join kind, a three-way join, a self-join, aggregates over joins,
/// DISTINCT and UNION.
const VIEWS: &[(&str, &str)] = &[
    // Views that views below join: one whose rows only grow, one whose
    // rows change in place.
    ("big_l", "SELECT k, v FROM l WHERE v > 50"),
    (
        "agg_r",
        "SELECT k, count(*) AS n, sum(w) AS total FROM r GROUP BY k",
    ),
    (
        "join_append_view",
        "SELECT b.k, b.v, d.name FROM big_l b JOIN d ON b.k = d.k",
    ),
    (
        "join_changing_view",
        "SELECT l.v, a.n, a.total FROM l LEFT JOIN agg_r a ON l.k = a.k",
    ),
    (
        "inner_lr",
        "SELECT l.k, l.v, r.id, r.w FROM l JOIN r ON l.k = r.k",
    ),
    (
        "inner_filtered",
        "SELECT l.v, r.w FROM l JOIN r ON l.k = r.k AND l.v < r.w * 5 WHERE r.w % 3 <> 0",
    ),
    (
        "left_lr",
        "SELECT l.k, l.v, r.id FROM l LEFT JOIN r ON l.k = r.k",
    ),
    (
        "right_lr",
        "SELECT l.v, r.id, r.k FROM l RIGHT JOIN r ON l.k = r.k",
    ),
    ("semi", "SELECT k, v FROM l WHERE k IN (SELECT k FROM r)"),
    (
        "anti",
        "SELECT k, v FROM l WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.k = l.k)",
    ),
    (
        "three",
        "SELECT l.v, r.w, d.name FROM l JOIN r ON l.k = r.k JOIN d ON d.k = r.k",
    ),
    (
        "self_join",
        "SELECT a.v AS a, b.v AS b FROM l a JOIN l b ON a.k = b.k AND a.v < b.v",
    ),
    (
        "agg_over_join",
        "SELECT d.name, count(*) AS n, sum(l.v) AS total, min(l.v) AS lo, max(l.v) AS hi \
         FROM l JOIN d ON l.k = d.k GROUP BY d.name",
    ),
    (
        "count_distinct",
        "SELECT d.name, count(DISTINCT l.v) AS values, count(DISTINCT r.w) AS ws \
         FROM l JOIN d ON l.k = d.k LEFT JOIN r ON r.k = l.k GROUP BY d.name",
    ),
    (
        "left_agg",
        "SELECT l.k, count(r.id) AS matches FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.k",
    ),
    (
        "keyed_both",
        "SELECT r.id, d.name FROM r LEFT JOIN d ON r.k = d.k",
    ),
    ("distinct_k", "SELECT DISTINCT k FROM l"),
    (
        "join_over_aggregate",
        "SELECT l.k, l.v, t.n, t.top FROM l JOIN (SELECT k, count(*) AS n, max(w) AS top FROM r GROUP BY k) t ON l.k = t.k",
    ),
    (
        "two_aggregates",
        "SELECT a.k, a.n, b.total FROM (SELECT k, count(*) AS n FROM l GROUP BY k) a \
         LEFT JOIN (SELECT k, sum(w) AS total FROM r GROUP BY k) b ON a.k = b.k",
    ),
    (
        "aggregate_over_join_over_aggregate",
        "SELECT d.name, sum(t.n) AS n FROM d JOIN (SELECT k, count(*) AS n FROM l GROUP BY k) t ON d.k = t.k GROUP BY d.name",
    ),
    (
        "join_over_distinct",
        "SELECT d.name, t.k FROM d JOIN (SELECT DISTINCT k FROM s) t ON d.k = t.k",
    ),
    (
        "having",
        "SELECT k, count(*) AS n FROM l GROUP BY k HAVING count(*) > 2",
    ),
    (
        "having_join",
        "SELECT d.name, sum(l.v) AS total FROM l JOIN d ON l.k = d.k GROUP BY d.name HAVING sum(l.v) > 100",
    ),
    (
        "from_subquery",
        "SELECT t.k, t.doubled, r.id FROM (SELECT k, v * 2 AS doubled FROM l WHERE v > 10) t JOIN r ON r.k = t.k",
    ),
    (
        "case_coalesce",
        "SELECT CASE WHEN l.v > 50 THEN 'big' ELSE 'small' END AS size, coalesce(r.w, -1) AS w \
         FROM l LEFT JOIN r ON l.k = r.k",
    ),
    (
        "union_all",
        "SELECT k FROM l UNION ALL SELECT k FROM s UNION ALL SELECT k FROM r",
    ),
    ("union_distinct", "SELECT k FROM l UNION SELECT k FROM d"),
    // Nexmark q5's shape: one aggregate written twice (keys in another
    // order), the second under a maximum; the two share one stage.
    (
        "repeated_aggregate",
        "SELECT a.k, a.n FROM (SELECT k, w % 3 AS g, count(*) AS n FROM r GROUP BY k, w % 3) a \
         JOIN (SELECT g, max(n) AS m FROM (SELECT w % 3 AS g, k, count(*) AS n FROM r GROUP BY w % 3, k) c GROUP BY g) b \
         ON a.g = b.g AND a.n >= b.m",
    ),
    // The second computes only some of the first's aggregates (the
    // optimizer drops the sum nothing reads): it shares the stage too.
    (
        "repeated_aggregate_subset",
        "SELECT a.k, a.n, a.total FROM (SELECT k, w % 3 AS g, count(*) AS n, sum(w) AS total FROM r GROUP BY k, w % 3) a \
         JOIN (SELECT g, max(n) AS m FROM (SELECT w % 3 AS g, k, count(*) AS n, sum(w) AS total FROM r GROUP BY w % 3, k) c GROUP BY g) b \
         ON a.g = b.g AND a.n >= b.m",
    ),
    // Aggregates with no GROUP BY below a join: their one row exists
    // before any input, and every change takes it back and sends it anew.
    (
        "global_max_r",
        "SELECT a.k, a.n FROM (SELECT k, count(*) AS n FROM r GROUP BY k) a \
         JOIN (SELECT max(n) AS m FROM (SELECT k, count(id) AS n FROM r GROUP BY k) c) b ON a.n = b.m",
    ),
    (
        "global_max_l",
        "SELECT a.k, a.n FROM (SELECT k, count(*) AS n FROM l GROUP BY k) a \
         JOIN (SELECT max(n) AS m FROM (SELECT k, count(v) AS n FROM l GROUP BY k) c) b ON a.n = b.m",
    ),
    (
        "global_count_left",
        "SELECT a.k, a.name, b.n, b.total FROM (SELECT k, name, 1 AS one FROM d) a \
         LEFT JOIN (SELECT 1 AS one, count(*) AS n, sum(w) AS total FROM r) b ON a.one = b.one",
    ),
];

type Rand = rand::rngs::StdRng;

fn key(rng: &mut Rand) -> String {
    match rng.random_range(0..6) {
        5 => "NULL".into(),
        k => k.to_string(),
    }
}

/// One random write: appends, upserts, updates or deletes.
fn one_write(rng: &mut Rand) -> String {
    match rng.random_range(0..9) {
        0..=2 => {
            let n = rng.random_range(1..6);
            let rows: Vec<String> = (0..n)
                .map(|_| format!("({}, {})", key(rng), rng.random_range(0..100)))
                .collect();
            format!("INSERT INTO l VALUES {}", rows.join(", "))
        }
        3 => format!(
            "INSERT INTO s VALUES ({}, {})",
            key(rng),
            rng.random_range(0..100)
        ),
        4 | 5 => format!(
            "INSERT INTO r VALUES ({}, {}, {})",
            rng.random_range(0..8),
            key(rng),
            rng.random_range(0..20)
        ),
        6 => format!(
            "UPDATE r SET w = w + 1 WHERE id = {}",
            rng.random_range(0..8)
        ),
        7 => format!(
            "INSERT INTO d VALUES ({}, '{}')",
            rng.random_range(0..5),
            ["x", "y", "z"][rng.random_range(0..3)]
        ),
        _ => match rng.random_bool(0.5) {
            true => format!("DELETE FROM r WHERE id = {}", rng.random_range(0..8)),
            false => format!("DELETE FROM d WHERE k = {}", rng.random_range(0..5)),
        },
    }
}

/// A write alone, or two in one transaction.
fn random_write(rng: &mut Rand) -> String {
    match rng.random_range(0..5) {
        0 => format!("BEGIN; {}; {}; COMMIT", one_write(rng), one_write(rng)),
        _ => one_write(rng),
    }
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// Every view equals its query run over the tables, as multisets.
async fn check_views(c: &tokio_postgres::Client, when: &str) {
    check_listed(c, VIEWS, when).await
}

/// Each of `views` equals its query, as multisets.
async fn check_listed(c: &tokio_postgres::Client, views: &[(&str, &str)], when: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let mut sizes = Vec::new();
    for (name, query) in views {
        let view = sorted(text_rows(c, &format!("SELECT * FROM {name}")).await);
        let batch = sorted(text_rows(c, query).await);
        assert_eq!(view, batch, "{name} {when}");
        sizes.push(format!("{name}={}", view.len()));
    }
    eprintln!("{when}: {}", sizes.join(" "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_views_equal_batch_queries_through_changes_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(13);
    let mut rng = Rand::seed_from_u64(seed);
    // Some rows before the views: they backfill.
    for _ in 0..20 {
        c.batch_execute(&random_write(&mut rng)).await.unwrap();
    }
    for (name, query) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    check_views(&c, "after backfill").await;
    let stages: Vec<String> = text_rows(
        &c,
        "SELECT kind FROM sluice_catalog.view_operators WHERE view_name = 'repeated_aggregate' ORDER BY operator",
    )
    .await;
    assert_eq!(
        stages,
        ["aggregate", "aggregate", "join", "rows"],
        "one aggregate stage for the two"
    );
    let stages: Vec<String> = text_rows(
        &c,
        "SELECT kind FROM sluice_catalog.view_operators WHERE view_name = 'repeated_aggregate_subset' ORDER BY operator",
    )
    .await;
    assert_eq!(
        stages,
        ["aggregate", "aggregate", "join", "rows"],
        "one aggregate stage for the two"
    );
    for round in 0..4 {
        for _ in 0..30 {
            c.batch_execute(&random_write(&mut rng)).await.unwrap();
        }
        check_views(&c, &format!("after round {round}")).await;
    }
    drop(c);

    // SIGKILL while the views are still applying what was just written.
    let kills = crash_runs_or(3);
    for kill in 0..kills {
        let c = server.connect().await;
        let writes = rng.random_range(5..40);
        for _ in 0..writes {
            c.batch_execute(&random_write(&mut rng)).await.unwrap();
        }
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(rng.random_range(0..400))).await;
        server.kill9();
        server.restart();
        let c = server.connect().await;
        check_views(&c, &format!("after kill {kill}")).await;
    }
}

/// Views created over empty tables: a global aggregate below a join has
/// its one row from the start (`count(*)` of nothing is 0), before any
/// write, and after a SIGKILL the view restored from a checkpoint does not
/// send it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_aggregates_below_joins_have_their_row_before_any_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let counts = "SELECT a.n, b.m FROM (SELECT count(*) AS n FROM l) a JOIN (SELECT count(*) AS m FROM r) b ON a.n = b.m";
    let views: Vec<(&str, &str)> = VIEWS
        .iter()
        .copied()
        .filter(|(name, _)| name.starts_with("global_"))
        .chain([("counts", counts)])
        .collect();
    for (name, query) in &views {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(text_rows(&c, "SELECT * FROM counts").await, ["0|0"]);
    c.batch_execute("INSERT INTO d VALUES (1, 'one')")
        .await
        .unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM global_count_left").await,
        ["1|one|0|NULL"]
    );
    check_listed(&c, &views, "before any row of l and r").await;
    // A checkpoint of the views before any row of l and r, then a SIGKILL.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    server.kill9();
    server.restart();
    let c = server.connect().await;
    c.batch_execute(
        "INSERT INTO l VALUES (1, 10), (1, 20), (2, 5); \
         INSERT INTO r VALUES (1, 1, 7), (2, 1, 8), (3, 2, 9)",
    )
    .await
    .unwrap();
    check_listed(&c, &views, "after the first rows").await;
    c.batch_execute("DELETE FROM r WHERE id = 3; INSERT INTO r VALUES (4, 2, 1), (5, 2, 2), (6, 2, 3); INSERT INTO l VALUES (3, 1)")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    server.kill9();
    server.restart();
    let c = server.connect().await;
    check_listed(&c, &views, "after a second SIGKILL").await;
    c.batch_execute("DELETE FROM r WHERE id = 1; DELETE FROM r WHERE id = 2")
        .await
        .unwrap();
    check_listed(&c, &views, "after deletes").await;
}

/// What the dataflow cannot keep exact is refused at CREATE, naming what
/// to change.
#[tokio::test]
async fn joins_that_cannot_be_kept_exact_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    for (query, says) in [
        ("SELECT * FROM l, r", "needs an equality"),
        ("SELECT * FROM l JOIN r ON l.v < r.w", "needs an equality"),
        (
            "SELECT * FROM l FULL JOIN r ON l.k = r.k AND l.v < r.w",
            "equalities of columns",
        ),
        (
            "SELECT * FROM l WHERE k NOT IN (SELECT k FROM r)",
            "NOT IN (subquery)",
        ),
        (
            "SELECT * FROM l JOIN r ON l.k = r.k AND random() > 0.5",
            "random()",
        ),
        (
            "SELECT * FROM l LEFT JOIN r ON l.k = r.k AND l.v < r.w",
            "equalities of columns",
        ),
        (
            "SELECT l.k, t.n FROM l JOIN (SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v) AS n FROM l) t ON l.k = t.k",
            "window function",
        ),
    ] {
        let e = c
            .batch_execute(&format!("CREATE MATERIALIZED VIEW bad AS {query}"))
            .await
            .unwrap_err();
        // random() is refused in every view over tables, joins or not
        // (42P17: computed again from the log it would differ).
        let expected = if says == "random()" { "42P17" } else { "0A000" };
        assert_eq!(sqlstate(&e), expected, "{query}: {e}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains(says), "{query}: {message}");
    }
    // Nothing was created.
    assert!(text_rows(&c, "SELECT view_name FROM sluice_catalog.views")
        .await
        .is_empty());
}

/// sql/examples/enrichment.sql: a price change re-derives the tenant's
/// bill, and a deleted tenant's bill goes (its usage shows as unbilled);
/// each step equals the batch query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enrichment_example_follows_price_changes_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sql/examples/enrichment.sql"
    ))
    .unwrap();
    let (setup, rest) = example.split_once("-- load").unwrap();
    let (load, change) = rest.split_once("-- change").unwrap();
    c.batch_execute(setup).await.unwrap();
    let bill =
        "SELECT tenant, plan, hour, tokens, cost_cents FROM hourly_bill ORDER BY tenant, hour";
    let batch_bill = "SELECT u.tenant, t.plan, date_trunc('hour', u.event_time) AS hour, \
        SUM(u.tokens), SUM(u.tokens * t.price_per_1k_cents) / 1000 \
        FROM usage u JOIN tenants t ON u.tenant = t.tenant \
        GROUP BY u.tenant, t.plan, date_trunc('hour', u.event_time) ORDER BY 1, 3";

    c.batch_execute(load).await.unwrap();
    assert_eq!(
        text_rows(&c, bill).await,
        [
            "acme|pro|2026-11-30 10:00:00|4000|800",
            "acme|pro|2026-11-30 11:00:00|2000|400",
            "globex|free|2026-11-30 10:00:00|2000|100",
            "initech|pro|2026-11-30 11:00:00|5000|1000",
        ]
    );
    assert_eq!(text_rows(&c, bill).await, text_rows(&c, batch_bill).await);
    assert_eq!(
        text_rows(&c, "SELECT * FROM unbilled").await,
        ["hooli|1|700"]
    );

    c.batch_execute(change).await.unwrap();
    assert_eq!(
        text_rows(&c, bill).await,
        [
            "acme|enterprise|2026-11-30 10:00:00|4000|600",
            "acme|enterprise|2026-11-30 11:00:00|2000|300",
            "globex|free|2026-11-30 10:00:00|2000|100",
            "hooli|free|2026-11-30 11:00:00|700|35",
        ]
    );
    assert_eq!(text_rows(&c, bill).await, text_rows(&c, batch_bill).await);
    assert_eq!(
        text_rows(&c, "SELECT * FROM unbilled").await,
        ["initech|1|5000"]
    );

    // The operator graph, and where its state is.
    let plan = text_rows(&c, "EXPLAIN MATERIALIZED VIEW hourly_bill")
        .await
        .join("\n");
    assert!(
        plan.contains("join 0: INNER JOIN ON u.tenant = t.tenant"),
        "{plan}"
    );
    assert!(
        plan.contains("aggregate: GROUP BY u.tenant, t.plan"),
        "{plan}"
    );
    assert!(plan.contains("table tenants (keyed"), "{plan}");
    // Through the extended protocol too (drivers prepare it): the rows
    // are described as one text column.
    let lines = c
        .query("EXPLAIN MATERIALIZED VIEW hourly_bill", &[])
        .await
        .unwrap();
    assert!(lines.len() > 3, "{lines:?}");
    assert!(lines[0].get::<_, String>("QUERY PLAN").starts_with("reads"));
    let plan = text_rows(&c, "EXPLAIN MATERIALIZED VIEW unbilled")
        .await
        .join("\n");
    assert!(plan.contains("LEFT ANTI JOIN"), "{plan}");
    let operators = text_rows(
        &c,
        "SELECT operator, kind, state_rows > 0, input_rows > 0 FROM sluice_catalog.view_operators \
         WHERE view_name = 'hourly_bill' ORDER BY operator",
    )
    .await;
    assert_eq!(operators, ["0|join|t|t", "1|aggregate|t|t"]);
    let plan = text_rows(
        &c,
        "EXPLAIN CREATE MATERIALIZED VIEW later AS SELECT t.plan, count(*) FROM usage u \
         LEFT JOIN tenants t ON u.tenant = t.tenant GROUP BY t.plan",
    )
    .await
    .join("\n");
    assert!(plan.contains("join 0: LEFT JOIN"), "{plan}");
    assert!(
        text_rows(
            &c,
            "SELECT view_name FROM sluice_catalog.views WHERE view_name = 'later'"
        )
        .await
        .is_empty(),
        "EXPLAIN CREATE creates nothing"
    );
    let e = c
        .batch_execute("EXPLAIN MATERIALIZED VIEW nope")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42P01");
}

/// Float join keys join as `=` joins them in the batch query: `-0.0` with
/// `0.0`, a NaN with a NaN, NULL with nothing; in an equi-join and an
/// interval join, across SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_join_keys_join_as_the_batch_query_joins_them() {
    const FLOAT_JOINS: &[(&str, &str)] = &[
        (
            "fj",
            "SELECT a.f, a.x, b.y FROM fa a JOIN fb b ON a.f = b.f",
        ),
        (
            "fj_band",
            "SELECT a.f, a.x, b.y FROM fa a JOIN fb b ON a.f = b.f AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE fa (f DOUBLE PRECISION, x BIGINT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 minute') APPEND ONLY;
         CREATE TABLE fb (f DOUBLE PRECISION, y BIGINT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 minute') APPEND ONLY;",
    )
    .await
    .unwrap();
    for (name, query) in FLOAT_JOINS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let values = ["0.0", "-0.0", "'NaN'", "NULL", "2.5"];
    let insert = |round: usize| {
        let rows = |table_offset: usize| -> String {
            (0..10)
                .map(|i| {
                    format!(
                        "({}, {}, TIMESTAMP '2026-12-03 10:00:00' + INTERVAL '{} seconds')",
                        values[(i + table_offset + round) % values.len()],
                        round * 100 + i,
                        round * 20 + i
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "INSERT INTO fa VALUES {}; INSERT INTO fb VALUES {}",
            rows(0),
            rows(1)
        )
    };
    c.batch_execute(&insert(0)).await.unwrap();
    check_listed(&c, FLOAT_JOINS, "after the first rows").await;
    let joined = text_rows(&c, "SELECT count(*) FROM fj WHERE f = 0").await;
    assert!(joined[0] != "0", "no row joined on 0: {joined:?}");
    drop(c);
    server.restart();
    let c = server.connect().await;
    c.batch_execute(&insert(1)).await.unwrap();
    check_listed(&c, FLOAT_JOINS, "after SIGKILL").await;
}
