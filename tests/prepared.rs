//! A prepared statement holds a plan, never data: each execution of a
//! prepared query over a view, a keyed table, `changelog()` or a system
//! table reads the state as of that execution, as an unprepared query does.

mod common;

use std::time::{Duration, Instant};

use common::{text_rows, Server};

const SETUP: &str = "
CREATE TABLE ev (id BIGINT, probe INT, n INT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 second')
    WITH (partitions = 2);
CREATE TABLE users (id TEXT PRIMARY KEY, plan TEXT, score INT) WITH (partitions = 2);
CREATE MATERIALIZED VIEW v AS SELECT probe, COUNT(*) AS n, SUM(n) AS total FROM ev GROUP BY probe;
CREATE MATERIALIZED VIEW v_close AS
    SELECT window_start, COUNT(*) AS n FROM TUMBLE(ev, at, INTERVAL '1 minute')
    GROUP BY window_start, window_end EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW v_keyed AS SELECT plan, COUNT(*) AS n, SUM(score) AS score FROM users GROUP BY plan;
CREATE MATERIALIZED VIEW v_rows AS SELECT id, probe FROM ev WHERE n > 1;
CREATE MATERIALIZED VIEW v_over_view AS SELECT probe, COUNT(*) AS n FROM v_rows GROUP BY probe;
CREATE MATERIALIZED VIEW v_over_updating AS SELECT COUNT(*) AS groups, SUM(n) AS n FROM v;
";

/// Queries whose every column is text, so that the extended protocol's
/// answer and the simple protocol's compare as strings. Each changes from
/// one round to the next.
const QUERIES: [&str; 16] = [
    "SELECT CAST(probe AS TEXT) AS p, CAST(n AS TEXT) AS c, CAST(total AS TEXT) AS t FROM v ORDER BY p",
    "SELECT CAST(n AS TEXT) AS c FROM v WHERE probe = 1",
    "SELECT CAST(window_start AS TEXT) AS w, CAST(n AS TEXT) AS c FROM v_close ORDER BY w",
    "SELECT plan, CAST(n AS TEXT) AS c, CAST(score AS TEXT) AS s FROM v_keyed ORDER BY plan",
    "SELECT CAST(COUNT(*) AS TEXT) AS c FROM v_rows",
    "SELECT CAST(probe AS TEXT) AS p, CAST(n AS TEXT) AS c FROM v_over_view ORDER BY p",
    "SELECT CAST(groups AS TEXT) AS g, CAST(n AS TEXT) AS c FROM v_over_updating",
    "SELECT id, plan, CAST(score AS TEXT) AS s FROM users ORDER BY id",
    "SELECT id, _op, CAST(_offset AS TEXT) AS o FROM changelog(users) ORDER BY id, o",
    "SELECT table_name, CAST(SUM(end_offset) AS TEXT) AS e FROM sluice_catalog.partitions GROUP BY table_name ORDER BY table_name",
    "SELECT table_name, CAST(statements AS TEXT) AS s FROM sluice_catalog.tables ORDER BY table_name",
    "SELECT CAST(MAX(last_event_time) AS TEXT) AS t FROM sluice_catalog.watermarks",
    "SELECT view_name, CAST(consumed_rows AS TEXT) AS c, CAST(state_rows AS TEXT) AS s FROM sluice_catalog.views ORDER BY view_name",
    "SELECT consumer, CAST(SUM(committed_offset) AS TEXT) AS o FROM sluice_catalog.lag GROUP BY consumer ORDER BY consumer",
    "SELECT CAST(COUNT(*) AS TEXT) AS c FROM sluice_catalog.checkpoints WHERE completed IS NOT NULL",
    "SELECT view_name, CAST(COUNT(*) AS TEXT) AS c FROM sluice_catalog.late_rows GROUP BY view_name ORDER BY view_name",
];

/// Round `r`'s writes: new events (one of them late once the watermark
/// has moved), an upsert and, from round 2, a delete of a user.
fn round_sql(r: usize) -> String {
    let mut sql = format!(
        "INSERT INTO ev VALUES ({id}, 1, {r}, TIMESTAMP '2026-01-01 10:00:00' + INTERVAL '{m} minutes'), \
                              ({id2}, 2, 3, TIMESTAMP '2026-01-01 10:00:00' + INTERVAL '{m} minutes');
         INSERT INTO ev VALUES ({id3}, 1, 2, TIMESTAMP '2026-01-01 09:00:00');
         INSERT INTO users VALUES ('u{r}', 'plan{p}', {r}), ('u0', 'plan0', {r});",
        id = r * 10,
        id2 = r * 10 + 1,
        id3 = r * 10 + 2,
        m = 2 * r,
        p = r % 2,
    );
    if r >= 2 {
        sql.push_str(&format!("DELETE FROM users WHERE id = 'u{}';", r - 1));
    }
    sql.push_str("FLUSH;");
    sql
}

fn text_of(row: &tokio_postgres::Row) -> String {
    (0..row.len())
        .map(|i| {
            row.get::<_, Option<String>>(i)
                .unwrap_or_else(|| "NULL".into())
        })
        .collect::<Vec<_>>()
        .join("|")
}

#[tokio::test]
async fn prepared_statements_read_each_execution_fresh() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints only at FLUSH, so system tables stand still between reads.
    let server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "3600000"]);
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    c.batch_execute("CREATE SUBSCRIPTION watch FROM ev")
        .await
        .unwrap();
    c.batch_execute(&round_sql(0)).await.unwrap();
    let mut prepared = Vec::new();
    for q in QUERIES {
        prepared.push(
            c.prepare(q)
                .await
                .unwrap_or_else(|e| panic!("prepare {q}: {e:?}")),
        );
    }
    let mut previous: Vec<Vec<String>> = vec![Vec::new(); QUERIES.len()];
    for r in 1..5 {
        c.batch_execute(&round_sql(r)).await.unwrap();
        for (i, q) in QUERIES.iter().enumerate() {
            let fresh = text_rows(&c, q).await;
            let again: Vec<String> = c
                .query(&prepared[i], &[])
                .await
                .unwrap_or_else(|e| panic!("{q}: {e}"))
                .iter()
                .map(text_of)
                .collect();
            assert_eq!(again, fresh, "round {r}: prepared {q}");
            previous[i] = fresh;
        }
    }
    // Every query saw its data move (else the check above proves nothing).
    let mut moved = vec![false; QUERIES.len()];
    for r in 5..7 {
        c.batch_execute(&round_sql(r)).await.unwrap();
        for (i, q) in QUERIES.iter().enumerate() {
            let again: Vec<String> = c
                .query(&prepared[i], &[])
                .await
                .unwrap()
                .iter()
                .map(text_of)
                .collect();
            assert_eq!(again, text_rows(&c, q).await, "round {r}: prepared {q}");
            moved[i] |= again != previous[i];
            previous[i] = again;
        }
    }
    for (i, q) in QUERIES.iter().enumerate() {
        assert!(moved[i], "{q} did not change between rounds");
    }
}

#[tokio::test]
async fn prepared_statement_on_a_dropped_view_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    let stmt = c.prepare("SELECT * FROM v_over_view").await.unwrap();
    c.batch_execute("DROP MATERIALIZED VIEW v_over_view")
        .await
        .unwrap();
    let e = c.query(&stmt, &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "42P01", "{e}");
    // The connection goes on.
    assert_eq!(common::scalar(&c, "SELECT COUNT(*) FROM v").await, 0);
}

/// One connection polls a prepared point query on a view every few
/// milliseconds while another inserts: every insert shows within the
/// view's normal freshness (well under a second here; 10 s is the bound
/// that tells "fresh" from "frozen").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_prepared_query_sees_every_insert() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let w = server.connect().await;
    w.batch_execute(SETUP).await.unwrap();
    let r = server.connect().await;
    let stmt = r.prepare("SELECT n FROM v WHERE probe = $1").await.unwrap();
    let mut worst = Duration::ZERO;
    for i in 1..=20i64 {
        w.batch_execute(&format!(
            "INSERT INTO ev VALUES ({i}, 1, 1, TIMESTAMP '2026-01-01 10:00:00')"
        ))
        .await
        .unwrap();
        let acked = Instant::now();
        loop {
            let rows = r.query(&stmt, &[&1i32]).await.unwrap();
            let n: Option<i64> = rows.first().map(|row| row.get(0));
            if n == Some(i) {
                break;
            }
            assert!(
                acked.elapsed() < Duration::from_secs(10),
                "insert {i} not visible to the prepared poller after 10 s (it sees {n:?})"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        worst = worst.max(acked.elapsed());
    }
    eprintln!("slowest insert to poller: {worst:?}");
}

/// psycopg 3, with `prepare=True` and with its automatic threshold (the
/// fifth execution of a query prepares it), over the same queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_prepared_reads_are_fresh() {
    if !common::python_has("psycopg") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints only at FLUSH, so system tables stand still between reads.
    let server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "3600000"]);
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    // Then every query of the tokio-postgres test, after each of several
    // rounds of writes, three ways.
    let rounds: Vec<Vec<String>> = (20..25)
        .map(|r| {
            round_sql(r)
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .collect();
    let extra = serde_json::json!({ "queries": QUERIES, "rounds": rounds }).to_string();
    let script = format!(
        r#"
import json, sys
import psycopg
dsn = "host=127.0.0.1 port={port} user=test dbname=test"
w = psycopg.connect(dsn, autocommit=True)
r = psycopg.connect(dsn, autocommit=True)
queries = [
    "SELECT n FROM v WHERE probe = 1",
    "SELECT n FROM v_keyed WHERE plan = 'plan0'",
    "SELECT count(*) FROM users",
    "SELECT count(*) FROM changelog(users)",
    "SELECT state_rows FROM sluice_catalog.views WHERE view_name = 'v_rows'",
    "SELECT n FROM v_over_view WHERE probe = 1",
]
for i in range(1, 13):
    w.execute("INSERT INTO ev VALUES (%s, 1, 2, TIMESTAMP '2026-01-01 10:00:00')", (i,))
    w.execute("INSERT INTO users VALUES (%s, 'plan0', 1)", ("u%d" % i,))
    w.execute("FLUSH")
    for q in queries:
        explicit = r.execute(q, prepare=True).fetchone()
        automatic = r.execute(q).fetchone()   # prepared from the 5th time on
        plain = r.execute(q, prepare=False).fetchone()
        assert explicit == plain == automatic, (i, q, explicit, automatic, plain)
    assert r.execute(queries[0], prepare=True).fetchone()[0] == i, i
extra = json.loads(sys.argv[1])
for stmts in extra["rounds"]:
    for s in stmts:
        w.execute(s)
    for q in extra["queries"]:
        explicit = r.execute(q, prepare=True).fetchall()
        automatic = r.execute(q).fetchall()
        plain = r.execute(q, prepare=False).fetchall()
        assert explicit == plain == automatic, (q, explicit, automatic, plain)
print("ok", r.prepare_threshold)
"#,
        port = server.port
    );
    common::run_client(
        "psycopg script",
        std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(extra),
    );
}

/// psql's `\bind` (psql 16 and later) runs a query through the extended
/// protocol.
#[test]
fn psql_bind_reads_fresh() {
    let version = std::process::Command::new("psql")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let major: u32 = version
        .split_whitespace()
        .find_map(|w| w.split('.').next().and_then(|m| m.parse().ok()))
        .unwrap_or(0);
    if major < 16 {
        eprintln!("psql {major} has no \\bind; SKIPPED");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (ok, out, err) = server.psql(&format!(
        "{SETUP}
         INSERT INTO ev VALUES (1, 1, 1, TIMESTAMP '2026-01-01 10:00:00'); FLUSH;
         SELECT n FROM v WHERE probe = $1 \\bind 1 \\g
         INSERT INTO ev VALUES (2, 1, 1, TIMESTAMP '2026-01-01 10:00:00'); FLUSH;
         SELECT n FROM v WHERE probe = $1 \\bind 1 \\g"
    ));
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert!(lines.contains(&"1") && lines.contains(&"2"), "{out}");
}

/// A parameter passed straight to a function takes the type the function
/// accepts, as PostgreSQL infers it; drivers that bind by the described
/// type (tokio-postgres, asyncpg) can then send it.
#[tokio::test]
async fn a_function_argument_parameter_takes_the_functions_type() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let sleep = c.prepare("SELECT pg_sleep($1) AS slept").await.unwrap();
    assert_eq!(sleep.params(), &[tokio_postgres::types::Type::FLOAT8]);
    c.query(&sleep, &[&0.01f64]).await.unwrap();
    // A cast still decides where there is one.
    let cast = c
        .prepare("SELECT pg_sleep(CAST($1 AS DOUBLE PRECISION))")
        .await
        .unwrap();
    assert_eq!(cast.params(), &[tokio_postgres::types::Type::FLOAT8]);
    // Functions that coerce their arguments: a string function's
    // parameter is text, a numeric one's double precision.
    use tokio_postgres::types::Type;
    for (sql, ty) in [
        ("SELECT upper($1) AS u", Type::TEXT),
        ("SELECT length($1) AS n", Type::TEXT),
        ("SELECT abs($1) AS a", Type::FLOAT8),
    ] {
        let statement = c
            .prepare(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(statement.params(), std::slice::from_ref(&ty), "{sql}");
    }
    let upper = c.prepare("SELECT upper($1) AS u").await.unwrap();
    let row = c.query_one(&upper, &[&"sluice"]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "SLUICE");
    let abs = c.prepare("SELECT abs($1) AS a").await.unwrap();
    let row = c.query_one(&abs, &[&-2.5f64]).await.unwrap();
    assert_eq!(row.get::<_, f64>(0), 2.5);
}

/// `INSERT ... RETURNING` through the extended protocol: Describe gives the
/// list's columns, and each execution its rows, whichever way the INSERT
/// is staged (parameters only, expressions, a SELECT).
#[tokio::test]
async fn insert_returning_describes_and_returns_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT NOT NULL, name TEXT) WITH (partitions = 3)")
        .await
        .unwrap();
    let staged = c
        .prepare("INSERT INTO t (id, name) VALUES ($1, $2) RETURNING id, name AS n")
        .await
        .unwrap();
    let columns: Vec<(&str, String)> = staged
        .columns()
        .iter()
        .map(|c| (c.name(), c.type_().name().to_string()))
        .collect();
    assert_eq!(columns, [("id", "int8".into()), ("n", "text".into())]);
    for i in 0..3i64 {
        let rows = c.query(&staged, &[&i, &format!("u{i}")]).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, i64>(0), i);
        assert_eq!(rows[0].get::<_, String>(1), format!("u{i}"));
    }
    let planned = c
        .prepare("INSERT INTO t SELECT id + $1, upper(name) FROM t RETURNING name")
        .await
        .unwrap();
    let mut names: Vec<String> = c
        .query(&planned, &[&100i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    names.sort();
    assert_eq!(names, ["U0", "U1", "U2"]);
    // Without RETURNING an INSERT still describes no rows.
    let plain = c.prepare("INSERT INTO t VALUES ($1, 'x')").await.unwrap();
    assert!(plain.columns().is_empty());
    assert_eq!(c.execute(&plain, &[&7i64]).await.unwrap(), 1);
    assert_eq!(
        text_rows(&c, "SELECT count(*) FROM t").await,
        ["7".to_string()]
    );
    // ON CONFLICT with RETURNING is refused before anything is written.
    c.batch_execute("CREATE TABLE k (id BIGINT PRIMARY KEY, name TEXT)")
        .await
        .unwrap();
    let e = c
        .simple_query("INSERT INTO k VALUES (1, 'a') ON CONFLICT DO NOTHING RETURNING id")
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "0A000");
}
