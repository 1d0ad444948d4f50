//! Views with many groups equal their batch queries: tens of thousands of
//! groups as well as a handful, one key column and two, windows that close
//! by the watermark, HAVING, and a keyed table whose rows are replaced and
//! deleted (retractions), after every FLUSH (a checkpoint), after SIGKILL
//! while a writer loads rows, and after more rows on the restored state.
//! Every aggregate here has a vectorized accumulator, so the append-only
//! views hold their groups in one key table, with COUNT, SUM, MIN and MAX
//! of integer, date and time columns in columns the published rows share,
//! and the other aggregates in DataFusion's vectorized accumulators.

mod common;

use std::time::Duration;

use common::{crash_runs_or, text_rows, Server};
use rand::{Rng, SeedableRng};

/// Distinct user keys: tens of thousands of groups.
const USERS: u64 = 40_000;

/// (view, query): each view is its query; ORDER BY is added to compare.
const VIEWS: &[(&str, &str)] = &[
    (
        "per_user",
        "SELECT k, COUNT(*) AS n, SUM(tokens) AS s, MIN(tokens) AS lo, MAX(tokens) AS hi, AVG(tokens) AS a, MAX(note) AS last_note FROM ev GROUP BY k",
    ),
    (
        "per_user_and_tier",
        "SELECT k, tier, COUNT(tokens) AS n, SUM(tokens) AS s FROM ev GROUP BY k, tier",
    ),
    (
        "per_tier",
        "SELECT tier % 3 AS t, COUNT(*) AS n, SUM(tokens) AS s, MIN(note) AS first_note FROM ev GROUP BY tier % 3",
    ),
    (
        "busy_users",
        "SELECT k, COUNT(*) AS n FROM ev GROUP BY k HAVING COUNT(*) > 3",
    ),
    (
        "per_user_minute",
        "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(tokens) AS s FROM TUMBLE(ev, at, INTERVAL '1 minute') GROUP BY k, window_start, window_end",
    ),
    (
        "keyed_per_user",
        "SELECT grp, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi FROM kv GROUP BY grp",
    ),
];

const SETUP: &str = "
    CREATE TABLE ev (k TEXT, tier BIGINT, tokens BIGINT, note TEXT, at TIMESTAMP,
                     WATERMARK FOR at AS at - INTERVAL '5 seconds')
        APPEND ONLY WITH (partitions = 3);
    CREATE TABLE kv (id BIGINT PRIMARY KEY, grp TEXT, v BIGINT) WITH (partitions = 2);";

/// Event time of row `i`: rows are written in time order, so none is late
/// and the windowed view equals its batch query; a minute holds 6,000 rows.
fn at(i: u64) -> String {
    let s = i / 100;
    format!(
        "TIMESTAMP '2026-01-01 {:02}:{:02}:{:02}'",
        10 + s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// `rows` events numbered from `first`, over `users` keys.
fn events(rng: &mut rand::rngs::StdRng, first: u64, rows: u64, users: u64) -> String {
    let values: Vec<String> = (first..first + rows)
        .map(|i| {
            let tokens = match rng.random_range(0..10) {
                0 => "NULL".to_string(),
                _ => rng.random_range(-1000..1000i64).to_string(),
            };
            format!(
                "('u{:06}', {}, {tokens}, 'n{}', {})",
                rng.random_range(0..users),
                rng.random_range(0..5),
                rng.random_range(0..50),
                at(i)
            )
        })
        .collect();
    format!("INSERT INTO ev VALUES {}", values.join(", "))
}

/// Upserts and deletes of the keyed table.
fn keyed(rng: &mut rand::rngs::StdRng, rows: u64) -> String {
    let values: Vec<String> = (0..rows)
        .map(|_| {
            format!(
                "({}, 'g{}', {})",
                rng.random_range(0..60_000),
                rng.random_range(0..30_000),
                rng.random_range(0..100)
            )
        })
        .collect();
    format!(
        "INSERT INTO kv VALUES {}; DELETE FROM kv WHERE id % 97 = {};",
        values.join(", "),
        rng.random_range(0..97)
    )
}

async fn create_views(c: &tokio_postgres::Client) {
    c.batch_execute(SETUP).await.unwrap();
    for (name, sql) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {sql}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

async fn assert_views_equal_batch(c: &tokio_postgres::Client, context: &str) {
    for (name, sql) in VIEWS {
        let view = text_rows(c, &format!("SELECT * FROM {name} ORDER BY 1, 2")).await;
        let batch = text_rows(c, &format!("{sql} ORDER BY 1, 2")).await;
        assert!(!view.is_empty(), "{name} is empty {context}");
        assert_eq!(view.len(), batch.len(), "{name} rows {context}");
        assert!(view == batch, "{name} differs from its query {context}");
    }
}

/// How many groups the view holds, from `sluice_catalog.view_operators`.
async fn groups_held(c: &tokio_postgres::Client, view: &str) -> i64 {
    c.query_one(
        "SELECT state_rows FROM sluice_catalog.view_operators WHERE view_name = $1 AND kind = 'aggregate'",
        &[&view],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_with_many_groups_equal_their_batch_queries_through_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let mut c = server.connect().await;
    create_views(&c).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut next = 0u64;
    // Few keys first, then the many.
    for users in [20, USERS, USERS] {
        for _ in 0..10 {
            c.batch_execute(&events(&mut rng, next, 2_000, users))
                .await
                .unwrap();
            next += 2_000;
        }
        c.batch_execute(&keyed(&mut rng, 12_000)).await.unwrap();
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after FLUSH with {users} users")).await;
    }
    let held = groups_held(&c, "per_user").await;
    assert!(held > 20_000, "per_user holds {held} groups");
    let held = groups_held(&c, "keyed_per_user").await;
    assert!(held > 10_000, "keyed_per_user holds {held} groups");
    // Closed windows leave the state: only the open minutes stay.
    let open = groups_held(&c, "per_user_minute").await;
    let total = text_rows(&c, "SELECT COUNT(*) FROM per_user_minute").await;
    assert!(
        (open as usize) < total[0].parse::<usize>().unwrap(),
        "per_user_minute holds {open} groups of {total:?} rows"
    );

    for kill in 0..crash_runs_or(2) {
        let port = server.port;
        let seed = rng.random::<u64>();
        let from = next;
        // The writer's rows are numbered after everything before, so
        // none is late; whatever of it committed before the kill stays.
        let writer = tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let Some(w) = common::try_connect(port).await else {
                return;
            };
            for round in 0..100u64 {
                let sql = match round % 4 {
                    3 => keyed(&mut rng, 200),
                    _ => events(&mut rng, from + round * 500, 500, USERS),
                };
                if w.batch_execute(&sql).await.is_err() {
                    return;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
        drop(c);
        server.restart();
        let _ = writer.await;
        next += 100 * 500;
        c = server.connect().await;
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after SIGKILL {kill}")).await;
        c.batch_execute(&events(&mut rng, next, 3_000, USERS))
            .await
            .unwrap();
        next += 3_000;
        c.batch_execute(&keyed(&mut rng, 500)).await.unwrap();
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after SIGKILL {kill} and more rows")).await;
    }
}

/// The views of [`float_keys_group_as_the_batch_query_groups_them`].
const FLOAT_VIEWS: &[(&str, &str)] = &[
    (
        "by_f",
        "SELECT f, r, COUNT(*) AS c, SUM(n) AS s FROM fe GROUP BY f, r",
    ),
    (
        "by_f_keyed",
        "SELECT f, COUNT(*) AS c, SUM(n) AS s FROM fk GROUP BY f",
    ),
];

async fn assert_float_views_equal_batch(c: &tokio_postgres::Client, context: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    for (view, query) in FLOAT_VIEWS {
        let shown = text_rows(c, &format!("SELECT * FROM {view} ORDER BY 1, 2, 3")).await;
        let batch = text_rows(c, &format!("{query} ORDER BY 1, 2, 3")).await;
        assert_eq!(shown, batch, "{view} {context}");
        assert!(
            !shown.iter().any(|r| r.starts_with("-0")),
            "{view} shows -0 {context}: {shown:?}"
        );
    }
}

/// Float keys group as the batch query groups them: `-0.0` and `0.0` are
/// one group (shown as 0), each NaN and NULL one group, in a view over
/// append-only rows and one over a keyed table's, across SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_keys_group_as_the_batch_query_groups_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE fe (f DOUBLE PRECISION, r REAL, n BIGINT) APPEND ONLY WITH (partitions = 2);
         CREATE TABLE fk (id BIGINT PRIMARY KEY, f DOUBLE PRECISION, n BIGINT);",
    )
    .await
    .unwrap();
    for (view, query) in FLOAT_VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {view} AS {query}"))
            .await
            .unwrap();
    }
    let values = ["0.0", "-0.0", "'NaN'", "NULL", "1.5", "-1.5"];
    let insert = |round: usize| {
        let rows: Vec<String> = (0..60)
            .map(|i| {
                let f = values[(i + round) % values.len()];
                let r = values[(i / 6 + round) % values.len()];
                format!("({f}, CAST({r} AS REAL), {i})")
            })
            .collect();
        let keyed: Vec<String> = (0..30)
            .map(|i| {
                format!(
                    "({i}, {}, {})",
                    values[(i + round) % values.len()],
                    i + round
                )
            })
            .collect();
        format!(
            "INSERT INTO fe VALUES {}; INSERT INTO fk VALUES {}",
            rows.join(", "),
            keyed.join(", ")
        )
    };
    c.batch_execute(&insert(0)).await.unwrap();
    assert_float_views_equal_batch(&c, "after the first rows").await;
    c.batch_execute(&insert(1)).await.unwrap();
    assert_float_views_equal_batch(&c, "after more rows").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    c.batch_execute(&insert(2)).await.unwrap();
    assert_float_views_equal_batch(&c, "after SIGKILL").await;
}

/// The view of [`aggregates_of_each_column_type_equal_their_batch_query`]:
/// COUNT, SUM, MIN and MAX over integer, double, date and time columns,
/// with NULLs and FILTER, each kept in a column the published rows share.
const TYPED_VIEW: &str = "SELECT k, COUNT(*) AS c, COUNT(b) AS cb, SUM(s) AS ss, SUM(i) AS si,
        SUM(b) AS sb, SUM(d) AS sd, MIN(s) AS mins, MAX(s) AS maxs, MIN(i) AS mini,
        MAX(b) AS maxb, MAX(b) FILTER (WHERE i > 0) AS maxbf, COUNT(d) FILTER (WHERE s < 0) AS cdf,
        MIN(dt) AS mindt, MAX(dt) AS maxdt, MIN(ts) AS mints, MAX(tz) AS maxtz, MIN(d) AS mind
    FROM tv GROUP BY k";

/// `rows` rows of `tv` over 2,000 keys, a tenth of each column NULL.
fn typed_rows(rng: &mut rand::rngs::StdRng, rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|_| {
            let n: i64 = rng.random_range(-30_000..30_000);
            let columns = [
                format!("{}", n / 2),
                format!("{}", n * 1_000),
                format!("{}", n * 1_000_000_007),
                // Halves add up exactly in any order.
                format!("{}.5", n / 4),
                format!("DATE '2026-01-01' + {}", n.rem_euclid(900)),
                format!("TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{n} seconds'"),
                format!("TIMESTAMPTZ '2026-06-01 00:00:00+00' + INTERVAL '{n} minutes'"),
            ];
            let columns: Vec<String> = columns
                .into_iter()
                .map(|text| match rng.random_range(0..10) {
                    0 => "NULL".to_string(),
                    _ => text,
                })
                .collect();
            format!(
                "('k{}', {})",
                rng.random_range(0..2_000),
                columns.join(", ")
            )
        })
        .collect();
    format!("INSERT INTO tv VALUES {}", values.join(", "))
}

async fn assert_typed_view_equals_batch(c: &tokio_postgres::Client, context: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let shown = text_rows(c, "SELECT * FROM typed ORDER BY k").await;
    let batch = text_rows(c, &format!("{TYPED_VIEW} ORDER BY k")).await;
    assert!(
        shown.len() > 1_000,
        "typed holds {} rows {context}",
        shown.len()
    );
    assert!(shown == batch, "typed differs from its query {context}");
}

/// COUNT, SUM, MIN and MAX over SMALLINT, INT, BIGINT, DOUBLE, DATE,
/// TIMESTAMP and TIMESTAMPTZ columns, with NULLs and FILTER, equal the
/// batch query after each load, a checkpoint, and SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_of_each_column_type_equal_their_batch_query() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE tv (k TEXT, s SMALLINT, i INT, b BIGINT, d DOUBLE PRECISION, dt DATE,
                          ts TIMESTAMP, tz TIMESTAMPTZ) APPEND ONLY WITH (partitions = 2)",
    )
    .await
    .unwrap();
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW typed AS {TYPED_VIEW}"))
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    c.batch_execute(&typed_rows(&mut rng, 3_000)).await.unwrap();
    assert_typed_view_equals_batch(&c, "after the first rows").await;
    c.batch_execute(&typed_rows(&mut rng, 3_000)).await.unwrap();
    assert_typed_view_equals_batch(&c, "after more rows").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_typed_view_equals_batch(&c, "after SIGKILL").await;
    c.batch_execute(&typed_rows(&mut rng, 3_000)).await.unwrap();
    assert_typed_view_equals_batch(&c, "after SIGKILL and more rows").await;
}

/// A SUM of bigint that leaves bigint fails the view as it fails the batch
/// query (22003), rather than wrapping around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bigint_sum_that_overflows_fails_the_view_as_it_fails_the_query() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE o (k TEXT, b BIGINT) APPEND ONLY;
         CREATE MATERIALIZED VIEW o_sums AS SELECT k, SUM(b) AS s, COUNT(*) AS c FROM o GROUP BY k;
         INSERT INTO o VALUES ('a', 9223372036854775807), ('b', 1);
         FLUSH;",
    )
    .await
    .unwrap();
    c.batch_execute("INSERT INTO o VALUES ('a', 1)")
        .await
        .unwrap();
    let query = c
        .simple_query("SELECT k, SUM(b) FROM o GROUP BY k")
        .await
        .unwrap_err();
    assert_eq!(
        query.code(),
        Some(&tokio_postgres::error::SqlState::NUMERIC_VALUE_OUT_OF_RANGE)
    );
    let flush = c.batch_execute("FLUSH").await.unwrap_err();
    assert!(
        flush.to_string().contains("bigint out of range")
            || format!("{:?}", flush.as_db_error()).contains("bigint out of range"),
        "{flush:?}"
    );
    let error: String = c
        .query_one(
            "SELECT error FROM sluice_catalog.views WHERE view_name = 'o_sums'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(error, "bigint out of range");
}
