//! ASOF JOIN. Batch queries equal DuckDB's ASOF JOIN on random data with
//! duplicate times, NULL keys and times and unmatched probes, for every
//! inequality, LEFT and inner, with and without a tolerance (DuckDB has no
//! tie rule and no tolerance: its answer is taken per distinct right time,
//! the latest row by `_partition, _offset` of that time wins, and the
//! tolerance filters its match). Views equal their batch query through
//! rows out of order, late rows, a keyed right side's updates and deletes,
//! checkpoints and SIGKILL; the as-known-at view differs from the plain
//! one exactly where a feature was ingested after the label's time; and
//! the view's state stays within its bound.

mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::{crash_runs_or, python_has, scalar, sqlstate, text_rows, Server};
use rand::rngs::StdRng as Rand;
use rand::{Rng, SeedableRng};

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// `TIMESTAMP '2026-01-01 00:00:00' + s seconds` as a literal.
fn ts(s: i64) -> String {
    let base = 1_767_225_600i64; // 2026-01-01 00:00:00 UTC
    let t = chrono::DateTime::from_timestamp(base + s, 0).unwrap_or_default();
    format!("TIMESTAMP '{}'", t.format("%Y-%m-%d %H:%M:%S"))
}

fn maybe<T: ToString>(rng: &mut Rand, v: T, null_pct: u32) -> String {
    match rng.random_range(0..100) < null_pct {
        true => "NULL".into(),
        false => v.to_string(),
    }
}

/// DuckDB's answers, one list of `left id|right id` per query.
fn duckdb_answers(
    dir: &std::path::Path,
    queries: &[(String, Option<i64>, bool, bool)],
) -> Vec<Vec<String>> {
    let mut script = String::from(
        "import duckdb\n\
         c = duckdb.connect()\n\
         c.execute(\"CREATE TABLE l AS SELECT * FROM read_csv('l.csv', header=true, columns={'id':'INT','k':'INT','t':'TIMESTAMP'})\")\n\
         c.execute(\"CREATE TABLE r AS SELECT * FROM read_csv('r.csv', header=true, columns={'id':'INT','k':'INT','t':'TIMESTAMP','p':'BIGINT','o':'BIGINT'})\")\n\
         c.execute(\"CREATE TABLE w AS SELECT k, t, arg_max(id, p * 1000000000000 + o) AS id FROM r WHERE t IS NOT NULL GROUP BY k, t\")\n\
         c.execute(\"CREATE TABLE wt AS SELECT t, arg_max(id, p * 1000000000000 + o) AS id FROM r WHERE t IS NOT NULL GROUP BY t\")\n",
    );
    for (i, (op, tolerance, keyed, left)) in queries.iter().enumerate() {
        let (w, on) = match keyed {
            true => ("w", format!("l.k = w.k AND l.t {op} w.t")),
            false => ("wt AS w", format!("l.t {op} w.t")),
        };
        let tol = tolerance
            .map(|s| s.to_string())
            .unwrap_or_else(|| "None".into());
        let _ = write!(
            script,
            "print('#{i}')\n\
             for lid, rid, lt, rt in c.execute(\"SELECT l.id, w.id, l.t, w.t FROM l ASOF LEFT JOIN {w} ON {on}\").fetchall():\n\
             \x20   tol = {tol}\n\
             \x20   if rid is not None and tol is not None and abs((lt - rt).total_seconds()) > tol: rid = None\n\
             \x20   if rid is None and not {left}: continue\n\
             \x20   print(f'{{lid}}|{{\"NULL\" if rid is None else rid}}')\n",
            left = if *left { "True" } else { "False" },
        );
    }
    std::fs::write(dir.join("oracle.py"), script).unwrap();
    let out = Command::new("python3")
        .arg("oracle.py")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut answers = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.starts_with('#') {
            true => answers.push(Vec::new()),
            false => answers.last_mut().unwrap().push(line.to_string()),
        }
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_asof_joins_equal_duckdb_for_every_inequality_kind_and_tolerance() {
    if !python_has("duckdb") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(data.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE l (id INT, k INT, t TIMESTAMP);
         CREATE TABLE r (id INT, k INT, t TIMESTAMP) WITH (partitions = 3);",
    )
    .await
    .unwrap();
    let mut rng = Rand::seed_from_u64(52);
    for (table, rows, from) in [("l", 1500, 0), ("r", 800, 100_000)] {
        for chunk in 0..(rows / 100) {
            let values: Vec<String> = (0..100)
                .map(|i| {
                    let id = from + chunk * 100 + i;
                    let k = rng.random_range(0..12);
                    let k = maybe(&mut rng, k, 5);
                    let t = ts(60 * rng.random_range(0..150));
                    let t = maybe(&mut rng, t, 5);
                    format!("({id}, {k}, {t})")
                })
                .collect();
            c.batch_execute(&format!("INSERT INTO {table} VALUES {}", values.join(", ")))
                .await
                .unwrap();
        }
    }
    // The rows as DuckDB reads them, with the right rows' log positions.
    let csv = |rows: Vec<String>, header: &str| {
        let mut s = format!("{header}\n");
        for r in rows {
            s.push_str(&r.replace("NULL", "").replace('|', ","));
            s.push('\n');
        }
        s
    };
    let l = text_rows(&c, "SELECT id, k, t FROM l").await;
    let r = text_rows(&c, "SELECT id, k, t, _partition, _offset FROM r").await;
    std::fs::write(dir.path().join("l.csv"), csv(l, "id,k,t")).unwrap();
    std::fs::write(dir.path().join("r.csv"), csv(r, "id,k,t,p,o")).unwrap();

    let mut cases = Vec::new();
    for op in [">=", ">", "<=", "<"] {
        for tolerance in [None, Some(1800)] {
            for left in [false, true] {
                cases.push((op.to_string(), tolerance, true, left));
            }
        }
    }
    // Without equality keys.
    cases.push((">=".to_string(), None, false, true));
    cases.push(("<".to_string(), Some(600), false, false));
    let expected = duckdb_answers(dir.path(), &cases);
    for ((op, tolerance, keyed, left), expected) in cases.iter().zip(&expected) {
        let on = match keyed {
            true => format!("l.k = r.k AND l.t {op} r.t"),
            false => format!("l.t {op} r.t"),
        };
        let with = tolerance
            .map(|s| format!(" WITH (tolerance = '{s} seconds')"))
            .unwrap_or_default();
        let kind = if *left { "LEFT " } else { "" };
        let sql = format!("SELECT l.id, r.id FROM l {kind}ASOF JOIN r ON {on}{with}");
        let got = sorted(text_rows(&c, &sql).await);
        let expected = sorted(expected.clone());
        let missing: Vec<&String> = expected
            .iter()
            .filter(|r| !got.contains(r))
            .take(5)
            .collect();
        let extra: Vec<&String> = got
            .iter()
            .filter(|r| !expected.contains(r))
            .take(5)
            .collect();
        assert_eq!(
            got.len(),
            expected.len(),
            "{sql}: missing {missing:?}, extra {extra:?}"
        );
        assert!(
            missing.is_empty(),
            "{sql}: missing {missing:?}, extra {extra:?}"
        );
        assert!(!got.is_empty(), "{sql} matched nothing");
    }
    // The other spellings give the same rows.
    let plain = sorted(text_rows(&c, "SELECT l.id, r.id FROM l LEFT ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (tolerance = '1800 seconds')").await);
    for sql in [
        "SELECT l.id, r.id FROM l LEFT ASOF JOIN r MATCH_CONDITION (l.t >= r.t) ON l.k = r.k WITH (tolerance = '30 minutes')",
        "SELECT l.id, r.id FROM l ASOF LEFT JOIN r ON r.k = l.k AND r.t <= l.t AND r.t >= l.t - INTERVAL '30 minutes'",
        "SELECT x.id, y.id FROM l x LEFT OUTER ASOF JOIN r y ON x.k = y.k AND x.t >= y.t AND x.t - INTERVAL '1800 seconds' <= y.t",
    ] {
        assert_eq!(sorted(text_rows(&c, sql).await), plain, "{sql}");
    }
    // USING (k, t): the last column is the time, matched with >=; each
    // USING column is listed once, the left's.
    let using = sorted(text_rows(&c, "SELECT * FROM l ASOF JOIN r USING (k, t)").await);
    let on = sorted(
        text_rows(
            &c,
            "SELECT l.k, l.t, l.id, r.id FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t",
        )
        .await,
    );
    assert_eq!(using, on);
    // A plain query runs the ASOF operator, never a join of all pairs.
    let plan = text_rows(
        &c,
        "EXPLAIN SELECT l.id, r.id FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t",
    )
    .await
    .join("\n");
    assert!(plan.contains("AsofJoinExec"), "{plan}");

    // What is refused, with its SQLSTATE.
    for (sql, state) in [
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k", "42601"),
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t AND l.id < r.id", "0A000"),
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t AND r.id > 3", "0A000"),
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (tolerance = 'soon')", "22023"),
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (speed = 1)", "22023"),
        ("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND l.t <= r.t WITH (as_known_at = true)", "0A000"),
        ("SELECT * FROM l ASOF JOIN (SELECT k, t FROM r) s ON l.k = s.k AND l.t >= s.t WITH (as_known_at = true)", "0A000"),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
    }
}

/// Spilling: the sorts below a batch ASOF join spill to stay within the
/// query memory (40 MB for 1.5 M probes and their text), and the answer
/// is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_asof_join_spills_within_the_query_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--query-memory", "40000000"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE l (id BIGINT, k BIGINT, t BIGINT, pad TEXT);
         CREATE TABLE r (id BIGINT, k BIGINT, t BIGINT, pad TEXT);
         INSERT INTO l SELECT i, i % 1000, i * 7 % 100003, 'x' || i FROM generate_series(1, 1500000) i;
         INSERT INTO r SELECT i, i % 1000, i * 13 % 100003, 'y' || i FROM generate_series(1, 100000) i;",
    )
    .await
    .unwrap();
    // Each probe's match is the right row of its key with the greatest
    // time at or before its own: counted two ways.
    let query = "SELECT count(*), sum(length(l.pad) + length(r.pad)) FROM l ASOF JOIN r ON l.k = r.k AND l.t >= r.t";
    let asof: i64 = text_rows(&c, query).await[0]
        .split('|')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    // The same count from the rows' formulas: probes at or after their
    // key's first right time.
    let mut first = vec![i64::MAX; 1000];
    for i in 1..=100_000i64 {
        let k = (i % 1000) as usize;
        first[k] = first[k].min(i * 13 % 100_003);
    }
    let expected = (1..=1_500_000i64)
        .filter(|i| i * 7 % 100_003 >= first[(i % 1000) as usize])
        .count() as i64;
    assert_eq!(asof, expected);
    assert!(asof > 1_000_000);
    let analyzed = text_rows(&c, &format!("EXPLAIN ANALYZE {query}"))
        .await
        .join("\n");
    let spills: u64 = analyzed
        .split("spill_count=")
        .skip(1)
        .filter_map(|s| {
            s.split(|ch: char| !ch.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(spills > 0, "the sorts should spill: {analyzed}");
}

const TABLES: &str = "
    CREATE TABLE probes (id BIGINT, k INT, t TIMESTAMP, WATERMARK FOR t AS t - INTERVAL '5 seconds') APPEND ONLY;
    CREATE TABLE feats (id BIGINT, k INT, t TIMESTAMP, WATERMARK FOR t AS t - INTERVAL '5 seconds') APPEND ONLY;
    CREATE TABLE kfeats (id BIGINT PRIMARY KEY, k INT, t TIMESTAMP, v INT);
";

/// (name, view query with `{p}`, `{f}`, `{kf}` for the tables, closes).
const VIEWS: &[(&str, &str, bool)] = &[
    ("asof_inner", "SELECT p.id, f.id AS fid FROM {p} p ASOF JOIN {f} f ON p.k = f.k AND p.t >= f.t", false),
    ("asof_tolerance", "SELECT p.id, f.id AS fid FROM {p} p LEFT ASOF JOIN {f} f ON p.k = f.k AND p.t >= f.t WITH (tolerance = '20 seconds')", false),
    ("asof_strict", "SELECT p.id, f.id AS fid, f.t AS ft FROM {p} p LEFT ASOF JOIN {f} f ON p.k = f.k AND p.t > f.t", false),
    ("asof_ahead", "SELECT p.id, f.id AS fid FROM {p} p LEFT ASOF JOIN {f} f ON p.k = f.k AND p.t <= f.t", false),
    ("asof_keyed", "SELECT p.id, f.id AS fid, f.v FROM {p} p LEFT ASOF JOIN {kf} f MATCH_CONDITION (p.t >= f.t) ON p.k = f.k", false),
    ("asof_closed", "SELECT p.id, f.id AS fid FROM {p} p LEFT ASOF JOIN {f} f ON p.k = f.k AND p.t >= f.t", true),
    // A keyed table's rows as the probes: updated and deleted.
    ("asof_keyed_left", "SELECT p.id, p.v, f.id AS fid FROM {kf} p LEFT ASOF JOIN {f} f ON p.k = f.k AND p.t >= f.t", false),
];

/// A table's rows that view `view` did not list as late, as a derived
/// table (with the log positions that break ties).
fn accepted(table: &str, view: &str) -> String {
    format!(
        "(SELECT t.id, t.k, t.t, t._partition, t._offset FROM {table} t LEFT JOIN \
         (SELECT \"partition\", \"offset\" FROM sluice_catalog.late_rows \
          WHERE view_name = '{view}' AND table_name = '{table}') l \
         ON t._partition = l.\"partition\" AND t._offset = l.\"offset\" WHERE l.\"offset\" IS NULL)"
    )
}

/// The least over partitions of the greatest time, less the delay.
async fn watermark(c: &tokio_postgres::Client, table: &str) -> String {
    text_rows(
        c,
        &format!(
            "SELECT CAST(min(m) - INTERVAL '5 seconds' AS TEXT) FROM \
             (SELECT _partition, max(t) AS m FROM {table} GROUP BY _partition)"
        ),
    )
    .await[0]
        .clone()
}

async fn check_views(c: &tokio_postgres::Client, when: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let horizon = watermark(c, "feats").await;
    let mut sizes = Vec::new();
    for (name, query, closes) in VIEWS {
        let mut batch = query
            .replace("{p}", &accepted("probes", name))
            .replace("{f}", &accepted("feats", name))
            .replace("{kf}", "kfeats");
        if *closes {
            // Final rows only: the right watermark has passed the probe.
            batch = format!("{batch} WHERE p.t < TIMESTAMP '{horizon}'");
        }
        let view = sorted(text_rows(c, &format!("SELECT * FROM {name}")).await);
        let expected = sorted(text_rows(c, &batch).await);
        assert_eq!(view, expected, "{name} {when}\nbatch: {batch}");
        sizes.push(format!("{name}={}", view.len()));
    }
    let late = scalar(c, "SELECT count(*) FROM sluice_catalog.late_rows").await;
    eprintln!("{when}: {} late={late}", sizes.join(" "));
}

/// Rows of both sides around `now` (seconds): most a little out of order,
/// some behind the watermark (late); the keyed side's rows inserted,
/// updated and deleted.
fn writes(rng: &mut Rand, now: i64, next_id: &mut i64) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["probes", "feats"] {
        let rows: Vec<String> = (0..rng.random_range(1..6))
            .map(|_| {
                *next_id += 1;
                let back = match rng.random_range(0..10) {
                    0 => rng.random_range(6..30),
                    _ => rng.random_range(0..5),
                };
                let k = rng.random_range(0..6);
                let k = maybe(rng, k, 5);
                format!("({}, {k}, {})", *next_id, ts(now - back))
            })
            .collect();
        out.push(format!("INSERT INTO {table} VALUES {}", rows.join(", ")));
    }
    let id = rng.random_range(0..40);
    out.push(match rng.random_range(0..4) {
        0 => format!("DELETE FROM kfeats WHERE id = {id}"),
        1 => format!(
            "UPDATE kfeats SET t = {}, v = {} WHERE id = {id}",
            ts(now - rng.random_range(0..60)),
            rng.random_range(0..100)
        ),
        _ => format!(
            "INSERT INTO kfeats VALUES ({id}, {}, {}, {}) ON CONFLICT (id) DO UPDATE SET k = EXCLUDED.k, t = EXCLUDED.t, v = EXCLUDED.v",
            rng.random_range(0..6),
            ts(now - rng.random_range(0..60)),
            rng.random_range(0..100)
        ),
    });
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asof_views_equal_their_batch_query_through_late_rows_keyed_updates_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let mut rng = Rand::seed_from_u64(
        std::env::var("SLUICE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(52),
    );
    let (mut now, mut next_id) = (0i64, 0i64);
    // Rows before the views: they backfill.
    for _ in 0..10 {
        now += rng.random_range(0..4);
        for w in writes(&mut rng, now, &mut next_id) {
            c.batch_execute(&w).await.unwrap();
        }
    }
    for (name, query, closes) in VIEWS {
        let q = query
            .replace("{p}", "probes")
            .replace("{f}", "feats")
            .replace("{kf}", "kfeats");
        let emit = if *closes { " EMIT ON WINDOW CLOSE" } else { "" };
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {q}{emit}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    check_views(&c, "after backfill").await;
    // A view's definition shows the join as written.
    let shown = text_rows(
        &c,
        "SELECT definition FROM pg_matviews WHERE matviewname = 'asof_tolerance'",
    )
    .await
    .join("");
    assert!(
        shown.contains(
            "LEFT ASOF JOIN feats f ON p.k = f.k AND p.t >= f.t WITH (tolerance = '20 seconds')"
        ) && !shown.contains("sluice_asof"),
        "{shown}"
    );
    for round in 0..3 {
        for _ in 0..15 {
            now += rng.random_range(0..4);
            for w in writes(&mut rng, now, &mut next_id) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        check_views(&c, &format!("after round {round}")).await;
    }
    let late = scalar(&c, "SELECT count(*) FROM sluice_catalog.late_rows").await;
    assert!(late > 0, "the stream should have late rows");
    let explained = text_rows(&c, "EXPLAIN MATERIALIZED VIEW asof_tolerance")
        .await
        .join("\n");
    assert!(
        explained.contains("asof join 0")
            && explained.contains("plus one before it, none before the lookback bound"),
        "{explained}"
    );
    drop(c);
    for kill in 0..crash_runs_or(3) {
        let c = server.connect().await;
        for _ in 0..rng.random_range(3..20) {
            now += rng.random_range(0..4);
            for w in writes(&mut rng, now, &mut next_id) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(rng.random_range(0..400))).await;
        server.kill9();
        server.restart();
        let c = server.connect().await;
        check_views(&c, &format!("after kill {kill}")).await;
    }
    // EMIT ON WINDOW CLOSE needs a watermark on the right input.
    let c = server.connect().await;
    let e = c
        .batch_execute("CREATE MATERIALIZED VIEW bad AS SELECT p.id FROM probes p ASOF JOIN kfeats f ON p.k = f.k AND p.t >= f.t EMIT ON WINDOW CLOSE")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");
}

/// Times that are numbers keep their fractions in a view: 5.5 matches
/// 5.25, not 5.75 (a float and a numeric time, each beside its batch
/// query).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_and_float_times_order_as_numbers_in_views() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let float = "SELECT fa.id, fb.id AS bid FROM fa ASOF JOIN fb ON fa.k = fb.k AND fa.t >= fb.t";
    let numeric = "SELECT na.id, fb.id AS bid FROM na LEFT ASOF JOIN fb ON na.k = fb.k AND na.t <= fb.n WITH (tolerance = '0.3')";
    c.batch_execute(&format!(
        "CREATE TABLE fa (k INT, t FLOAT8, id INT) APPEND ONLY;
         CREATE TABLE fb (k INT, t FLOAT8, n NUMERIC(6,2), id INT) APPEND ONLY;
         CREATE TABLE na (k INT, t NUMERIC(6,2), id INT) APPEND ONLY;
         CREATE MATERIALIZED VIEW vf AS {float};
         CREATE MATERIALIZED VIEW vn AS {numeric};
         INSERT INTO fb VALUES (1, 5.25, 5.25, 10), (1, 5.75, 5.75, 11), (1, -0.5, -0.5, 12), (1, -0.25, 5.5, 13);
         INSERT INTO fa VALUES (1, 5.5, 1), (1, -0.3, 2), (1, 5.8, 3);
         INSERT INTO na VALUES (1, 5.3, 1), (1, 5.6, 2), (1, 5.76, 3);
         FLUSH;"
    ))
    .await
    .unwrap();
    for (view, query, expected) in [
        ("vf", float, vec!["1|10", "2|12", "3|11"]),
        ("vn", numeric, vec!["1|13", "2|11", "3|NULL"]),
    ] {
        let got = sorted(text_rows(&c, &format!("SELECT * FROM {view}")).await);
        assert_eq!(got, expected, "{view}");
        assert_eq!(sorted(text_rows(&c, query).await), expected, "{query}");
    }
}

/// Labels joined to the features known when they were labeled: a
/// feature backfilled after the label (its time before the label's, its
/// ingestion after) is the plain view's match and not the as-known-at
/// view's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_as_known_at_view_differs_exactly_on_features_ingested_after_the_label() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE labels (id BIGINT, user_id INT, labeled_at TIMESTAMPTZ) APPEND ONLY;
         CREATE TABLE features (id BIGINT, user_id INT, updated_at TIMESTAMPTZ, score INT) APPEND ONLY;
         CREATE MATERIALIZED VIEW plain AS SELECT l.id, f.id AS fid FROM labels l LEFT ASOF JOIN features f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at;
         CREATE MATERIALIZED VIEW known AS SELECT l.id, f.id AS fid FROM labels l LEFT ASOF JOIN features f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at WITH (as_known_at = true);",
    )
    .await
    .unwrap();
    // Features known before the labels: an hour ago, a minute apart.
    c.batch_execute(
        "INSERT INTO features SELECT i, i % 20, now() - INTERVAL '1 hour' + i * INTERVAL '1 minute', i FROM generate_series(0, 59) i",
    )
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    c.batch_execute("INSERT INTO labels SELECT i, i % 25, now() FROM generate_series(1, 50) i")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    // Backfilled after the labels: times between the earlier features'.
    c.batch_execute(
        "INSERT INTO features SELECT 1000 + i, i % 10, now() - INTERVAL '3 minutes' - i * INTERVAL '7 seconds', i FROM generate_series(0, 9) i",
    )
    .await
    .unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    let plain = sorted(text_rows(&c, "SELECT * FROM plain").await);
    let known = sorted(text_rows(&c, "SELECT * FROM known").await);
    // Each view equals its batch query.
    assert_eq!(plain, sorted(text_rows(&c, "SELECT l.id, f.id FROM labels l LEFT ASOF JOIN features f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at").await));
    assert_eq!(known, sorted(text_rows(&c, "SELECT l.id, f.id FROM labels l LEFT ASOF JOIN features f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at WITH (as_known_at = true)").await));
    // The known view is the plain join over the features ingested before
    // the labels.
    let before = sorted(text_rows(&c, "SELECT l.id, f.id FROM labels l LEFT ASOF JOIN (SELECT * FROM features WHERE id < 1000) f ON l.user_id = f.user_id AND l.labeled_at >= f.updated_at").await);
    assert_eq!(known, before);
    // They differ exactly on the labels whose plain match came later.
    let differ: Vec<&String> = plain.iter().filter(|r| !known.contains(r)).collect();
    let backfilled: Vec<&String> = plain
        .iter()
        .filter(|r| {
            r.rsplit('|')
                .next()
                .and_then(|f| f.parse::<i64>().ok())
                .is_some_and(|f| f >= 1000)
        })
        .collect();
    assert_eq!(differ, backfilled);
    assert!(!differ.is_empty() && differ.len() < plain.len());
}

/// The right side's state stays within its bound: per key, the rows at or
/// after the floor (the oldest pending probe or the left watermark) and
/// one before it, beside the pending probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asof_view_keeps_no_more_than_its_bound() {
    let rows: i64 = std::env::var("SLUICE_ASOF_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW bounded AS SELECT p.id, f.id AS fid FROM probes p LEFT ASOF JOIN feats f ON p.k = f.k AND p.t >= f.t EMIT ON WINDOW CLOSE",
    )
    .await
    .unwrap();
    let keys = 1000;
    let chunk = 20_000;
    let mut at = 0;
    while at < rows {
        // A second per 100 rows; probes and features interleaved in time.
        c.batch_execute(&format!(
            "INSERT INTO feats SELECT i, i % {keys}, TIMESTAMP '2026-01-01' + (i / 100) * INTERVAL '1 second' FROM generate_series({at}, {end}) i;
             INSERT INTO probes SELECT i, (i * 7) % {keys}, TIMESTAMP '2026-01-01' + (i / 100) * INTERVAL '1 second' + INTERVAL '500 milliseconds' FROM generate_series({at}, {end}) i;",
            end = at + chunk - 1
        ))
        .await
        .unwrap();
        at += chunk;
    }
    c.batch_execute("FLUSH").await.unwrap();
    let state = scalar(
        &c,
        "SELECT state_rows FROM sluice_catalog.view_operators WHERE view_name = 'bounded' AND kind = 'asof join'",
    )
    .await;
    // Pending probes: those the right watermark has not passed; right
    // rows at or after the floor; one per key before it.
    let (left_h, right_h) = (watermark(&c, "probes").await, watermark(&c, "feats").await);
    let pending = scalar(
        &c,
        &format!("SELECT count(*) FROM probes WHERE t >= TIMESTAMP '{right_h}'"),
    )
    .await;
    let floor = std::cmp::min(left_h.clone(), right_h.clone());
    let recent = scalar(
        &c,
        &format!("SELECT count(*) FROM feats WHERE t >= TIMESTAMP '{floor}'"),
    )
    .await;
    let bound = pending + recent + keys;
    eprintln!(
        "state {state} rows, bound {bound} (pending {pending}, recent {recent}), of {} inputs",
        2 * rows
    );
    assert!(state <= bound, "state {state} > bound {bound}");
    assert!(state < 2 * rows / 20, "state {state} is not bounded");
    // Every probe the watermark passed is out, each with its match.
    let out = scalar(&c, "SELECT count(*) FROM bounded").await;
    assert_eq!(out, rows - pending);
    let unmatched = scalar(&c, "SELECT count(*) FROM bounded WHERE fid IS NULL").await;
    let expected = scalar(&c, &format!("SELECT count(*) FROM probes p LEFT ASOF JOIN feats f ON p.k = f.k AND p.t >= f.t WHERE f.id IS NULL AND p.t < TIMESTAMP '{right_h}'")).await;
    assert_eq!(unmatched, expected);
}
