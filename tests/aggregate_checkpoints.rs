//! Checkpoints never change a view: every aggregate a view accepts, over
//! every column type, equals its batch query after every FLUSH (each one a
//! checkpoint), after a restart from the checkpoint, after SIGKILL during a
//! load, and with checkpoints every 10 ms during a continuous load.

mod common;

use std::time::{Duration, Instant};

use common::{text_rows, Server};
use rand::{Rng, SeedableRng};

/// The example: COUNT(DISTINCT) over text forgot its values at
/// every checkpoint.
#[tokio::test]
async fn count_distinct_over_text_survives_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k TEXT, g INT);
         CREATE MATERIALIZED VIEW v AS SELECT g, COUNT(DISTINCT k) AS dk, COUNT(*) AS c FROM t GROUP BY g;
         INSERT INTO t VALUES ('a',0),('b',0),('c',0); FLUSH;
         INSERT INTO t VALUES ('x',1); FLUSH;
         INSERT INTO t VALUES ('y',1); FLUSH;",
    )
    .await
    .unwrap();
    let batch = "SELECT g, COUNT(DISTINCT k), COUNT(*) FROM t GROUP BY g ORDER BY g";
    let expected = vec!["0|3|3".to_string(), "1|2|2".to_string()];
    assert_eq!(text_rows(&c, batch).await, expected);
    assert_eq!(text_rows(&c, "SELECT * FROM v ORDER BY g").await, expected);
    // A value seen before a checkpoint is still known after it.
    c.batch_execute("INSERT INTO t VALUES ('a',0),('x',1); FLUSH;")
        .await
        .unwrap();
    let expected = vec!["0|3|4".to_string(), "1|2|3".to_string()];
    assert_eq!(text_rows(&c, "SELECT * FROM v ORDER BY g").await, expected);
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_eq!(text_rows(&c, "SELECT * FROM v ORDER BY g").await, expected);
    c.batch_execute("INSERT INTO t VALUES ('b',0),('z',1); FLUSH;")
        .await
        .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM v ORDER BY g").await,
        text_rows(&c, batch).await
    );
}

/// A lone COUNT(DISTINCT) (DataFusion's batch plan rewrites it into two
/// GROUP BYs, which a view refused), per group and over the whole table,
/// over an append-only table and a keyed one, and SUM(DISTINCT), equal
/// their batch queries after each FLUSH, after SIGKILL and a restart from
/// the checkpoint, and after SIGKILL before a checkpoint.
#[tokio::test]
async fn a_lone_count_distinct_equals_its_batch_query_across_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server
        .connect()
        .await
        .batch_execute(
            "CREATE TABLE ev (user_id TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 3, partition_key = 'user_id');
             CREATE TABLE kv (k INT PRIMARY KEY, user_id TEXT, tokens BIGINT);
             CREATE MATERIALIZED VIEW per_user AS SELECT user_id, COUNT(DISTINCT tokens) AS n FROM ev GROUP BY user_id;
             CREATE MATERIALIZED VIEW users AS SELECT COUNT(DISTINCT user_id) AS n FROM ev;
             CREATE MATERIALIZED VIEW sums AS SELECT user_id, SUM(DISTINCT tokens) AS s FROM ev GROUP BY user_id;
             CREATE MATERIALIZED VIEW keyed AS SELECT user_id, COUNT(DISTINCT tokens) AS n FROM kv GROUP BY user_id;",
        )
        .await
        .unwrap();
    let views = [
        (
            "per_user",
            "SELECT user_id, COUNT(DISTINCT tokens) FROM ev GROUP BY user_id ORDER BY 1",
        ),
        ("users", "SELECT COUNT(DISTINCT user_id) FROM ev"),
        (
            "sums",
            "SELECT user_id, SUM(DISTINCT tokens) FROM ev GROUP BY user_id ORDER BY 1",
        ),
        (
            "keyed",
            "SELECT user_id, COUNT(DISTINCT tokens) FROM kv GROUP BY user_id ORDER BY 1",
        ),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut next_key = 0;
    for round in 0..12 {
        let c = server.connect().await;
        let mut rows = Vec::new();
        let mut keyed = Vec::new();
        for _ in 0..rng.random_range(1..40) {
            let user = rng.random_range(0..300);
            let tokens = match rng.random_range(0..10) {
                0 => "NULL".to_string(),
                _ => rng.random_range(0..20).to_string(),
            };
            rows.push(format!("('u{user}', {tokens})"));
            let k = match next_key > 0 && rng.random_bool(0.5) {
                true => rng.random_range(0..next_key),
                false => {
                    next_key += 1;
                    next_key - 1
                }
            };
            // One version per key and statement: an upsert of a key
            // written in an earlier round.
            if !keyed.iter().any(|(x, _): &(i32, String)| *x == k) {
                keyed.push((k, format!("({k}, 'u{}', {tokens})", user % 20)));
            }
        }
        let keyed: Vec<String> = keyed.into_iter().map(|(_, v)| v).collect();
        c.batch_execute(&format!(
            "INSERT INTO ev VALUES {}; INSERT INTO kv VALUES {}; DELETE FROM kv WHERE k = {};{}",
            rows.join(", "),
            keyed.join(", "),
            rng.random_range(0..next_key.max(1)),
            // Round 8's rows are killed before a checkpoint holds them.
            if round == 8 { "" } else { " FLUSH;" }
        ))
        .await
        .unwrap();
        drop(c);
        if matches!(round, 4 | 8) {
            server.restart();
        }
        let c = server.connect().await;
        c.batch_execute("FLUSH").await.unwrap();
        for (view, batch) in views {
            let shown = match view {
                "users" => format!("SELECT * FROM {view}"),
                _ => format!("SELECT * FROM {view} ORDER BY 1"),
            };
            assert_eq!(
                text_rows(&c, &shown).await,
                text_rows(&c, batch).await,
                "{view} after round {round}"
            );
        }
    }
}

/// Columns of every type of docs/tables.md's list, and the aggregates a view
/// takes over each.
const COLUMNS: [(&str, &str, bool); 14] = [
    ("c_bool", "BOOLEAN", false),
    ("c_small", "SMALLINT", true),
    ("c_int", "INT", true),
    ("c_big", "BIGINT", true),
    ("c_real", "REAL", true),
    ("c_double", "DOUBLE PRECISION", true),
    ("c_num", "NUMERIC(12,2)", true),
    ("c_text", "TEXT", false),
    ("c_varchar", "VARCHAR(10)", false),
    ("c_bytea", "BYTEA", false),
    ("c_date", "DATE", false),
    ("c_ts", "TIMESTAMP", false),
    ("c_tstz", "TIMESTAMPTZ", false),
    ("c_json", "JSONB", false),
];

/// `t`, append-only or (by default) taking UPDATE and DELETE.
fn create_table(append_only: bool) -> String {
    let cols: Vec<String> = COLUMNS
        .iter()
        .map(|(name, ty, _)| format!("{name} {ty}"))
        .collect();
    format!(
        "CREATE TABLE t (g INT, {}){} WITH (partitions = 3)",
        cols.join(", "),
        if append_only { " APPEND ONLY" } else { "" }
    )
}

/// One view per column: every aggregate over it (SUM and AVG over numbers).
fn view_query(column: &str, numeric: bool) -> String {
    let mut aggs = vec![
        format!("COUNT({column}) AS n"),
        format!("COUNT(DISTINCT {column}) AS nd"),
        format!("MIN({column}) AS lo"),
        format!("MAX({column}) AS hi"),
        "COUNT(*) AS rows".to_string(),
    ];
    if numeric {
        aggs.push(format!("SUM({column}) AS s"));
        aggs.push(format!("SUM(DISTINCT {column}) AS sd"));
        aggs.push(format!("AVG({column}) AS a"));
        aggs.push(format!("AVG(DISTINCT {column}) AS ad"));
    }
    format!("SELECT g, {} FROM t GROUP BY g", aggs.join(", "))
}

/// A value of a column's type as a SQL literal: a small domain, so that
/// DISTINCT has repeats, and about one NULL in eight. Numbers are
/// multiples of 1/4, whose sums are exact in any order.
fn literal(rng: &mut rand::rngs::StdRng, ty: &str) -> String {
    if rng.random_range(0..8) == 0 {
        return "NULL".into();
    }
    let x: i64 = rng.random_range(-5..6);
    match ty {
        "BOOLEAN" => (x > 0).to_string(),
        "SMALLINT" | "INT" | "BIGINT" => x.to_string(),
        "REAL" | "DOUBLE PRECISION" => format!("{}", x as f64 * 0.25),
        "NUMERIC(12,2)" => format!("{}.25", x),
        "TEXT" => format!("'text-{x}'"),
        "VARCHAR(10)" => format!("'v{x}'"),
        "BYTEA" => format!("'\\x{:02x}ff'", x + 10),
        "DATE" => format!("DATE '2026-01-{:02}'", x + 10),
        "TIMESTAMP" => format!("TIMESTAMP '2026-01-01 10:00:{:02}'", x + 10),
        "TIMESTAMPTZ" => format!("TIMESTAMPTZ '2026-01-01 10:00:{:02}+00'", x + 10),
        "JSONB" => format!("'{{\"k\": {x}}}'"),
        other => panic!("no literal for {other}"),
    }
}

fn insert(rng: &mut rand::rngs::StdRng, rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|_| {
            let mut v = vec![rng.random_range(0..4).to_string()];
            v.extend(COLUMNS.iter().map(|(_, ty, _)| literal(rng, ty)));
            format!("({})", v.join(", "))
        })
        .collect();
    format!("INSERT INTO t VALUES {}", values.join(", "))
}

async fn create_views(c: &tokio_postgres::Client, append_only: bool) {
    c.batch_execute(&create_table(append_only)).await.unwrap();
    for (name, _, numeric) in COLUMNS {
        let sql = format!(
            "CREATE MATERIALIZED VIEW v_{name} AS {}",
            view_query(name, numeric)
        );
        c.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Every view equals its query run as a batch query now.
async fn assert_views_equal_batch(c: &tokio_postgres::Client, context: &str) {
    for (name, _, numeric) in COLUMNS {
        let view = text_rows(c, &format!("SELECT * FROM v_{name} ORDER BY g")).await;
        let batch = text_rows(c, &format!("{} ORDER BY g", view_query(name, numeric))).await;
        assert_eq!(view, batch, "view over {name} {context}");
    }
}

#[tokio::test]
async fn every_aggregate_over_every_type_equals_its_batch_query() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    // Rows are updated and deleted too: every aggregate takes them back.
    create_views(&c, false).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    for round in 0..6 {
        let rows = rng.random_range(1..40);
        c.batch_execute(&insert(&mut rng, rows)).await.unwrap();
        if round > 0 {
            let g: i32 = rng.random_range(0..5);
            c.batch_execute(&format!(
                "DELETE FROM t WHERE g = {g}; UPDATE t SET g = g + 1, c_int = c_int - 1 WHERE g % 3 = {};",
                g % 3
            ))
            .await
            .unwrap();
        }
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after FLUSH {round}")).await;
    }
    // A restart restores every view from its checkpoint.
    drop(c);
    server.restart();
    let mut c = server.connect().await;
    assert_views_equal_batch(&c, "after a restart").await;
    for round in 0..3 {
        c.batch_execute(&insert(&mut rng, 25)).await.unwrap();
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after restart and FLUSH {round}")).await;
    }
    // SIGKILL while a writer loads rows, at a random moment.
    for kill in 0..2 {
        let port = server.port;
        let seed = rng.random::<u64>();
        let writer = tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let Some(w) = common::try_connect(port).await else {
                return;
            };
            for _ in 0..200 {
                let rows = rng.random_range(1..10);
                if w.batch_execute(&insert(&mut rng, rows)).await.is_err() {
                    return;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..600))).await;
        drop(c);
        server.restart();
        let _ = writer.await;
        c = server.connect().await;
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after SIGKILL {kill}")).await;
        c.batch_execute(&insert(&mut rng, 20)).await.unwrap();
        c.batch_execute("FLUSH").await.unwrap();
        assert_views_equal_batch(&c, &format!("after SIGKILL {kill} and more rows")).await;
    }
}

/// The timing-dependent form: checkpoints every 10 ms while rows arrive.
#[tokio::test]
async fn checkpoints_every_10ms_during_a_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "10"]);
    let c = server.connect().await;
    create_views(&c, true).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut statements = 0;
    while Instant::now() < deadline {
        let rows = rng.random_range(1..6);
        c.batch_execute(&insert(&mut rng, rows)).await.unwrap();
        statements += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..8))).await;
    }
    let epochs: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM sluice_catalog.checkpoints WHERE completed IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    eprintln!("{statements} statements, {epochs} checkpoints completed during the load");
    assert!(epochs > 20, "only {epochs} checkpoints during the load");
    c.batch_execute("FLUSH").await.unwrap();
    assert_views_equal_batch(&c, "after a load with 10 ms checkpoints").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_views_equal_batch(&c, "after a restart from a 10 ms checkpoint").await;
}

/// An aggregate over an aggregate (a histogram of per-user counts, and
/// the same over a keyed table whose rows are replaced and deleted) is a
/// view: the inner GROUP BY is a stage whose changing rows the outer one
/// takes in and back. Each equals its batch query through writes and a
/// SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_over_an_aggregate_equals_its_batch_query() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let mut c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE hits (user_id BIGINT, page TEXT) APPEND ONLY WITH (partitions = 2);
         CREATE TABLE profiles (id BIGINT PRIMARY KEY, team BIGINT, score BIGINT);",
    )
    .await
    .unwrap();
    let views = [
        (
            "hits_histogram",
            "SELECT n, count(*) AS users FROM (SELECT user_id, count(*) AS n FROM hits GROUP BY user_id) u GROUP BY n",
        ),
        (
            "team_spread",
            "SELECT max(total) AS top, min(total) AS bottom, count(*) AS teams FROM \
             (SELECT team, sum(score) AS total FROM profiles GROUP BY team) t",
        ),
    ];
    for (name, query) in views {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    for round in 0..8 {
        for _ in 0..5 {
            let hits: Vec<String> = (0..rng.random_range(1..20))
                .map(|_| {
                    format!(
                        "({}, 'p{}')",
                        rng.random_range(0..30),
                        rng.random_range(0..3)
                    )
                })
                .collect();
            c.batch_execute(&format!("INSERT INTO hits VALUES {}", hits.join(", ")))
                .await
                .unwrap();
            let id = rng.random_range(0..25);
            c.batch_execute(&match rng.random_range(0..3) {
                0 => format!("DELETE FROM profiles WHERE id = {id}"),
                _ => format!(
                    "INSERT INTO profiles VALUES ({id}, {}, {})",
                    rng.random_range(0..4),
                    rng.random_range(0..100)
                ),
            })
            .await
            .unwrap();
        }
        if round == 5 {
            server.kill9();
            server.restart();
            c = server.connect().await;
        }
        c.batch_execute("FLUSH").await.unwrap();
        for (name, query) in views {
            let mut view = text_rows(&c, &format!("SELECT * FROM {name}")).await;
            let mut batch = text_rows(&c, query).await;
            view.sort();
            batch.sort();
            assert_eq!(view, batch, "{name} after round {round}");
        }
    }
}
