//! The differential suite: Sluice against PostgreSQL 15 on the same rows.
//!
//! - `corpus_answers_as_postgres`: every query of `tests/differential/
//!   corpus/*.sql` over the tables of `schema.sql`;
//! - `random_queries_answer_as_postgres`: queries from a generator with a
//!   fixed seed (`SLUICE_DIFFERENTIAL_QUERIES` sets how many, 1,800 by
//!   default; `SLUICE_FUZZ_SEED` the seed);
//! - `views_answer_as_postgres`: each view of `views.sql` against its
//!   query in PostgreSQL, after inserts, updates, deletes and a SIGKILL.
//!
//! Answers compare column names, type oids and typmods, values as text,
//! and SQLSTATEs. A difference fails the test unless `allowed.txt` lists
//! its query with the reason.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::differential::{statements, Difference, Oracle, Rules};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(suite_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What `allowed.txt` lets pass: queries, each on a line of its own,
/// and kinds of difference, each on a line `rule <name>`; under each,
/// lines starting with whitespace say why.
struct Allowed {
    queries: BTreeMap<String, String>,
    rules: Rules,
}

fn allowed() -> Allowed {
    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    let mut entry: Option<String> = None;
    for line in read("allowed.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(q) = &entry {
                reasons
                    .entry(q.clone())
                    .and_modify(|r: &mut String| {
                        r.push(' ');
                        r.push_str(line.trim())
                    })
                    .or_insert_with(|| line.trim().to_string());
            }
        } else {
            let e = line.trim().trim_end_matches(';').to_string();
            reasons.entry(e.clone()).or_default();
            entry = Some(e);
        }
    }
    let mut rules = Rules::default();
    let mut queries = BTreeMap::new();
    for (entry, why) in reasons {
        assert!(!why.is_empty(), "allowed.txt: no reason for {entry}");
        match entry.strip_prefix("rule ") {
            Some("numeric-scale") => rules.numeric_scale = true,
            Some("data-exception-order") => rules.data_exception_order = true,
            Some("numeric-range") => rules.numeric_range = true,
            Some(other) => panic!("allowed.txt: no rule named {other}"),
            None => {
                queries.insert(entry, why);
            }
        }
    }
    Allowed { queries, rules }
}

/// Fails with every difference not allowed; prints the count compared.
fn report(what: &str, compared: usize, differences: Vec<Difference>) {
    let allowed = allowed().queries;
    let (allowed_seen, wrong): (Vec<_>, Vec<_>) = differences
        .into_iter()
        .partition(|d| allowed.contains_key(d.query.trim_end_matches(';')));
    // Written past the test harness's capture, so that every run (CI's
    // too) shows how much was compared.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "differential {what}: {compared} queries compared with PostgreSQL, {} differences ({} allowed)",
        wrong.len() + allowed_seen.len(),
        allowed_seen.len()
    );
    if let Ok(path) = std::env::var("SLUICE_DIFFERENTIAL_REPORT") {
        let text: Vec<String> = wrong.iter().map(|d| d.to_string()).collect();
        let _ = std::fs::write(path, text.join("\n\n"));
    }
    assert!(
        wrong.is_empty(),
        "{} answers differ from PostgreSQL's:\n\n{}",
        wrong.len(),
        wrong
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

async fn loaded_oracle(dir: &Path) -> Oracle {
    let mut oracle = Oracle::start(dir).await;
    oracle.rules = allowed().rules;
    oracle
        .setup(&read("schema.sql"), "WITH (partitions = 3)")
        .await;
    oracle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_answers_as_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = loaded_oracle(dir.path()).await;
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite_dir().join("corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let only = std::env::var("SLUICE_DIFFERENTIAL_ONLY").ok();
    let mut differences = Vec::new();
    let mut compared = 0;
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        for sql in statements(&std::fs::read_to_string(&file).unwrap()) {
            compared += 1;
            if let Some(d) = oracle.differs(&sql).await {
                differences.push(d);
            }
            oracle.ensure_connected().await;
        }
    }
    report("corpus", compared, differences);
}

fn random_query_count() -> usize {
    std::env::var("SLUICE_DIFFERENTIAL_QUERIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_800)
}

/// Generated queries after which the table stops growing (60 rows, then
/// 20 more every 200 queries: 300 rows at most).
const MAX_GROWTH_QUERIES: usize = 2400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_answer_as_postgres() {
    use common::query_gen::{insert_rows, rng, QueryGen, FUZZ_TABLE};
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = Oracle::start(dir.path()).await;
    oracle.rules = allowed().rules;
    let mut rng = rng();
    oracle.setup(FUZZ_TABLE, "WITH (partitions = 3)").await;
    oracle.setup(&insert_rows(&mut rng, 60), "").await;
    let mut differences = Vec::new();
    let total = random_query_count();
    for n in 1..=total {
        if n % 200 == 0 && n <= MAX_GROWTH_QUERIES {
            // More rows arrive between queries, as in a live table; up to
            // a size where the generator's joins stay quick, so that the
            // long mode's time grows with its count only.
            oracle.setup(&insert_rows(&mut rng, 20), "").await;
        }
        let sql = QueryGen::new(&mut rng).query();
        if let Some(d) = oracle.differs(&sql).await {
            differences.push(d);
        }
        oracle.ensure_connected().await;
    }
    report("random", total, differences);
}

/// The views of `views.sql`: each view's name and query.
fn views() -> Vec<(String, String)> {
    statements(&read("views.sql"))
        .into_iter()
        .map(|stmt| {
            let rest = stmt
                .strip_prefix("CREATE MATERIALIZED VIEW ")
                .unwrap_or_else(|| panic!("views.sql: not a view: {stmt}"));
            let (name, query) = rest
                .split_once(" AS ")
                .unwrap_or_else(|| panic!("views.sql: no AS in {stmt}"));
            (name.trim().to_string(), query.trim().to_string())
        })
        .collect()
}

/// Rows for the views' tables: `ev` from id `from`, and rows of `n1`,
/// `n2` (NULL keys among them) and `kv`, the same on every run.
fn view_rows(from: i32, count: i32) -> String {
    let ev: Vec<String> = (from..from + count)
        .map(|id| {
            let k = ["a", "b", "c", "O'Neil"][(id % 4) as usize].replace('\'', "''");
            let n = match id % 9 {
                0 => "NULL".to_string(),
                m => ((id * 37) % 101 - 30 + m).to_string(),
            };
            let x = format!("{}.{:03}", (id * 13) % 50 - 10, (id * 7919) % 1000);
            let ts = format!(
                "2026-01-{:02} {:02}:{:02}:{:02}",
                1 + (id * 3) % 20,
                (id * 5) % 24,
                (id * 11) % 60,
                id % 60
            );
            format!("({id}, '{k}', {n}, {x}, '{ts}')")
        })
        .collect();
    let key = |i: i32| {
        if i % 4 == 0 {
            "NULL".to_string()
        } else {
            (i % 5).to_string()
        }
    };
    let n1: Vec<String> = (from..from + 4)
        .map(|i| format!("({}, 'a{i}')", key(i)))
        .collect();
    let n2: Vec<String> = (from..from + 3)
        .map(|i| format!("({}, 'b{i}')", key(i + 1)))
        .collect();
    let kv: Vec<String> = (from..from + count / 2)
        .map(|k| {
            let doc = if k % 3 == 0 {
                format!("{{\"a\": {k}, \"b\": \"x{k}\"}}")
            } else {
                format!("{{\"b\": [{k}]}}")
            };
            format!("({k}, 'g{}', {}, '{doc}')", k % 4, (k * 17) % 40)
        })
        .collect();
    // Intervals of every sign mix and times of day, NULLs among them.
    let spans: Vec<String> = (from..from + count / 2)
        .map(|id| {
            let d = match id % 5 {
                0 => "NULL".to_string(),
                1 => format!("'{} days {:02}:{:02}:00'", id % 7, id % 24, id % 60),
                // Months against days: `1 mon -45 days` spans less than
                // `3 days`, though it has more months.
                2 => format!("'{} mons -{} days'", id % 3, 20 + id % 30),
                3 => format!("'{}.{:06} seconds'", id * 13, (id * 7919) % 1_000_000),
                _ => format!("'1 year -{} hours'", id % 30),
            };
            let t = match id % 4 {
                0 => "NULL".to_string(),
                m => format!(
                    "'{:02}:{:02}:{:02}.{}'",
                    (id * 5) % 24,
                    (id * 7) % 60,
                    id % 60,
                    m
                ),
            };
            format!("({id}, {d}, {t})")
        })
        .collect();
    // Arrays: empty, NULL, with NULL elements, repeated elements, quoted.
    let bags: Vec<String> = (from..from + count / 2)
        .map(|id| {
            let xs = match id % 5 {
                0 => "NULL".to_string(),
                1 => "'{}'".to_string(),
                2 => format!("'{{{id},{},NULL}}'", id % 3),
                3 => format!("ARRAY[{}, {}]", id % 4, id % 4),
                _ => "'{7}'".to_string(),
            };
            let tags = match id % 4 {
                0 => "'{a,b}'",
                1 => "'{\"x y\",NULL,a}'",
                2 => "NULL",
                _ => "ARRAY['b']",
            };
            format!("({id}, {xs}, {tags})")
        })
        .collect();
    format!(
        "INSERT INTO ev VALUES {};\nINSERT INTO n1 VALUES {};\nINSERT INTO n2 VALUES {};\nINSERT INTO kv VALUES {};\nINSERT INTO spans VALUES {};\nINSERT INTO bags VALUES {};",
        ev.join(", "),
        n1.join(", "),
        n2.join(", "),
        kv.join(", "),
        spans.join(", "),
        bags.join(", ")
    )
}

/// Compares every view with PostgreSQL's answer to its query; returns the
/// differences, each named with the step.
async fn compare_views(oracle: &mut Oracle, step: &str) -> Vec<Difference> {
    if let common::raw_client::Answer::Error { sqlstate, message } = oracle.sluice("FLUSH").await {
        panic!("{step}: FLUSH failed: {sqlstate} {message}");
    }
    let mut out = Vec::new();
    for (name, query) in views() {
        if let Some(mut d) = oracle.view_differs(&name, &query).await {
            d.sql = format!("{step}: {}", d.sql);
            out.push(d);
        }
    }
    out
}

/// Run on a thread with a large stack: the suite's future, unoptimized,
/// takes more than a test thread's 2 MB.
#[test]
fn views_answer_as_postgres() {
    common::on_large_stack(views_suite);
}

async fn views_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = Oracle::start(dir.path()).await;
    oracle.rules = allowed().rules;
    oracle
        .setup(&read("views_schema.sql"), "WITH (partitions = 3)")
        .await;
    for (name, query) in views() {
        if let common::raw_client::Answer::Error { sqlstate, message } = oracle
            .sluice(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
        {
            panic!("Sluice refused view {name}: {sqlstate} {message}")
        }
    }
    let mut differences = Vec::new();
    oracle.setup(&view_rows(1, 40), "").await;
    differences.extend(compare_views(&mut oracle, "after inserts").await);

    oracle.setup(&view_rows(41, 20), "").await;
    oracle
        .setup(
            "UPDATE kv SET v = v + 5, grp = 'g9' WHERE k % 3 = 0;\n\
             DELETE FROM kv WHERE k % 5 = 0;\n\
             UPDATE kv SET doc = '{\"a\": null}' WHERE k = 7;",
            "",
        )
        .await;
    differences.extend(compare_views(&mut oracle, "after updates and deletes").await);

    oracle.server.kill9();
    oracle.server.start_again();
    oracle.reconnect().await;
    differences.extend(compare_views(&mut oracle, "after SIGKILL").await);

    oracle.setup(&view_rows(61, 20), "").await;
    oracle
        .setup(
            "DELETE FROM kv WHERE grp = 'g9';\nUPDATE kv SET v = 0 WHERE k = 2;",
            "",
        )
        .await;
    differences.extend(compare_views(&mut oracle, "after more rows").await);
    let steps = random_steps(&mut oracle, &mut differences).await;
    report("views", views().len() * (4 + steps), differences);
}

/// Random steps after the fixed ones: each inserts rows, updates and
/// deletes random keys of the keyed table, and SIGKILLs the server at
/// random, then compares every view. `SLUICE_FUZZ_SEED` picks the steps;
/// `SLUICE_PROPERTY_STEPS` says how many (3 by default; more for a long
/// run). Returns how many steps ran.
async fn random_steps(oracle: &mut Oracle, differences: &mut Vec<Difference>) -> usize {
    use rand::Rng;
    let steps: usize = std::env::var("SLUICE_PROPERTY_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rng = common::query_gen::rng();
    let mut next_id = 81;
    for step in 0..steps {
        let count = rng.random_range(2..16);
        let mut sql = view_rows(next_id, count);
        next_id += count;
        // kv's keys so far run up to next_id / 2 or so.
        for _ in 0..rng.random_range(0..4) {
            let k = rng.random_range(1..next_id);
            sql.push_str(&match rng.random_range(0..3) {
                0 => format!("\nDELETE FROM kv WHERE k = {k};"),
                1 => format!(
                    "\nUPDATE kv SET v = {}, grp = 'g{}' WHERE k = {k};",
                    rng.random_range(-5..50),
                    rng.random_range(0..5)
                ),
                _ => format!(
                    "\nUPDATE kv SET doc = '{{\"b\": [{k}, {}]}}' WHERE k % {} = 0;",
                    rng.random_range(0..9),
                    rng.random_range(2..7)
                ),
            });
        }
        // Tables without a primary key take UPDATE and DELETE too.
        for _ in 0..rng.random_range(0..4) {
            let id = rng.random_range(1..next_id);
            sql.push_str(&match rng.random_range(0..4) {
                0 => format!("\nDELETE FROM ev WHERE id = {id};"),
                1 => format!(
                    "\nUPDATE ev SET n = n + {}, k = 'c' WHERE id % {} = {};",
                    rng.random_range(-9..9),
                    rng.random_range(3..9),
                    id % 3
                ),
                2 => format!("\nDELETE FROM n1 WHERE k = {};", id % 5),
                _ => format!(
                    "\nUPDATE n2 SET k = {}, b = b || 'u' WHERE k = {};",
                    rng.random_range(0..5),
                    id % 5
                ),
            });
        }
        oracle.setup(&sql, "").await;
        let killed = rng.random_bool(0.4);
        if killed {
            oracle.server.kill9();
            oracle.server.start_again();
            oracle.reconnect().await;
        }
        let name = format!(
            "random step {step}{}",
            if killed { " (after SIGKILL)" } else { "" }
        );
        differences.extend(compare_views(oracle, &name).await);
    }
    steps
}

/// The peak resident memory of process `pid` while `work` runs, sampled
/// every 10 ms, in KiB.
async fn peak_rss_kib<T>(pid: u32, work: impl std::future::Future<Output = T>) -> (T, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let rss = move || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0u64)
    };
    let (done, peak) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
    };
    let out = work.await;
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    (out, peak.load(Ordering::Relaxed))
}

/// The statements a random query generator for PostgreSQL (sqlsmith) found
/// taking servers down, and their kin: the light ones answer as PostgreSQL
/// does; each heavy one, under `statement_timeout = '1s'`, ends with 57014
/// within 200 ms of its limit or fails sooner with 54000/53200, and none
/// takes the server past `--query-memory` plus a margin. No panic, no
/// XX000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_statements_stop_in_time_within_memory() {
    let dir = tempfile::tempdir().unwrap();
    const QUERY_MEMORY: u64 = 1 << 30;
    let mut oracle =
        Oracle::start_with(dir.path(), &["--query-memory", &QUERY_MEMORY.to_string()]).await;
    oracle.rules = allowed().rules;
    let light = [
        "SELECT lpad(s, n, 'x') FROM (VALUES ('a', -1)) t(s, n)",
        "SELECT rpad(s, n) FROM (VALUES ('ab', -5), ('cd', 3)) t(s, n) ORDER BY 1",
        "SELECT repeat('ab', -2), repeat('ab', 0), repeat('ab', 2)",
        "SELECT length(lpad('a', 2147483647, 'x'))",
        "SELECT length(repeat('abc', 2147483647))",
        "SELECT (SELECT x FROM generate_series(1, 3) g(x) WHERE x > 5)",
        "SELECT (SELECT min(x) FROM generate_series(1, 3) g(x) WHERE x > 5) IS NULL",
        "SELECT (SELECT 1 WHERE false) FROM generate_series(1, 2)",
        "SELECT x FROM generate_series(1, 3) x WHERE x > (SELECT 9 WHERE false)",
    ];
    let mut differences = Vec::new();
    for sql in light {
        if let Some(d) = oracle.differs(sql).await {
            differences.push(d);
        }
    }
    report("hostile (light)", light.len(), differences);
    let heavy = [
        "SELECT count(*) FROM generate_series(1, 150000) a(x), generate_series(1, 150000) b(x) \
         WHERE a.x + b.x = 1",
        "SELECT count(*) FROM generate_series(1, 100000) a(x) JOIN generate_series(1, 100000) b(y) \
         ON a.x < b.y",
        "SELECT count(*) FROM generate_series(1, 3000) a(x), generate_series(1, 3000) b(y), \
         generate_series(1, 3000) c(z) WHERE a.x * b.y = c.z + 0.5",
        "SELECT length(repeat(a.t, b.n)) FROM (VALUES ('abcdefgh')) a(t), \
         generate_series(100000000, 100000100) b(n)",
        "SELECT sum(length(repeat(md5(x::text), 20000))) FROM generate_series(1, 200000) g(x)",
        "SELECT count(*) FROM (SELECT x, md5(x::text) FROM generate_series(1, 50000000) g(x) \
         ORDER BY 2) s",
    ];
    assert_eq!(
        oracle.sluice("SET statement_timeout = '1s'").await,
        common::raw_client::Answer::Command { tag: "SET".into() }
    );
    let pid = oracle.server.pid();
    let limit = Duration::from_millis(1000);
    let mut overruns = Vec::new();
    let mut peak_kib = 0;
    for sql in heavy {
        let started = Instant::now();
        let (answer, peak) = peak_rss_kib(pid, oracle.sluice(sql)).await;
        let took = started.elapsed();
        peak_kib = peak_kib.max(peak);
        eprintln!("{took:?}, peak RSS {peak} KiB: {sql}");
        match &answer {
            common::raw_client::Answer::Error { sqlstate, .. }
                if ["57014", "54000", "53200"].contains(&sqlstate.as_str()) => {}
            other => panic!("{sql}: {other:?}"),
        }
        if took > limit + Duration::from_millis(200) {
            overruns.push(format!("{took:?}: {sql}"));
        }
    }
    assert!(
        overruns.is_empty(),
        "statement_timeout overrun: {overruns:#?}"
    );
    // The margin: the server's own memory (tables, views, runtime) and
    // what a statement's batches hold outside the pool.
    let margin_kib = 768 * 1024;
    assert!(
        peak_kib < QUERY_MEMORY / 1024 + margin_kib,
        "peak RSS {peak_kib} KiB beyond --query-memory plus {margin_kib} KiB"
    );
    let log = oracle.server.log_text();
    let panics: Vec<&str> = log.lines().filter(|l| l.contains(" panic ")).collect();
    assert!(panics.is_empty(), "panics: {panics:#?}");
}
