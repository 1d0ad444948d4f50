//! Metamorphic checks: answers Sluice must give whatever PostgreSQL would,
//! checked against Sluice's own answers to related queries, so they find
//! wrong answers no corpus thought to ask about.
//!
//! - Ternary logic partitioning (TLP): every row of a query is in exactly
//!   one of its `WHERE p`, `WHERE NOT (p)` and `WHERE (p) IS NULL`
//!   answers, for a random condition `p` that may be NULL: over one table,
//!   over a join (the condition in `ON` of an inner join, and in `WHERE`
//!   over a LEFT join), over groups (`HAVING`), and for aggregates (count
//!   is the sum of the three counts, max the max of the three maxes).
//! - NoREC: `count(*) ... WHERE p` equals the count of rows for which the
//!   select list's `(p) IS TRUE` is true (the condition evaluated as a
//!   value, where no filter push-down or index can reach it).
//!
//! The schema repeats column names across tables (`f` and `g` have the
//! same columns, `g` is keyed), every column holds NULLs, and conditions
//! use IN, ANY, ALL and EXISTS subqueries over `f` itself, row
//! comparisons and arrays holding NULL. A check whose queries fail (an
//! overflow in one partition, say) is skipped and counted, never a pass;
//! the server must answer every query (no panic, no lost connection).
//!
//! CI runs 150 conditions with a fixed seed (`SLUICE_FUZZ_SEED` changes
//! it); `SLUICE_METAMORPHIC_CHECKS` sets how many and
//! `SLUICE_METAMORPHIC_SECONDS` stops the run after that long (the long
//! mode). Each failure is printed as it is found, so a run cut short still
//! says what it found.

mod common;

use std::collections::BTreeMap;

use common::query_gen::{insert_rows, rng, QueryGen, FUZZ_TABLE};
use common::{rows_of, Server};

/// The rows of `sql` as text, or its error.
async fn answer(c: &tokio_postgres::Client, sql: &str) -> Result<Vec<String>, String> {
    match c.simple_query(sql).await {
        Ok(m) => Ok(rows_of(m)),
        Err(e) => match e.as_db_error() {
            Some(db) => Err(format!("{}: {}", db.code().code(), db.message())),
            None => panic!("{sql}: the server did not answer: {e}"),
        },
    }
}

/// How many times each row occurs.
fn multiset(rows: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r).or_default() += 1;
    }
    m
}

#[derive(Default)]
struct Tally {
    checked: usize,
    skipped: usize,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, what: &str, outcome: Result<Option<String>, String>) {
        match outcome {
            Ok(None) => self.checked += 1,
            Ok(Some(difference)) => {
                self.checked += 1;
                let failure = format!("{what}: {difference}");
                eprintln!("metamorphic failure: {failure}");
                self.failures.push(failure);
            }
            Err(_) => self.skipped += 1,
        }
    }
}

/// `p`, `NOT (p)` and `(p) IS NULL`: each row satisfies exactly one.
fn partitions(p: &str) -> [String; 3] {
    [
        p.to_string(),
        format!("NOT ({p})"),
        format!("({p}) IS NULL"),
    ]
}

/// TLP over the rows of `select ... FROM from` partitioned by `p` in
/// WHERE (`extra` is ANDed to every part, for a join's own condition).
async fn tlp_where(
    c: &tokio_postgres::Client,
    select: &str,
    from: &str,
    p: &str,
) -> Result<Option<String>, String> {
    let all = answer(c, &format!("SELECT {select} FROM {from}")).await?;
    let mut parts = Vec::new();
    for cond in partitions(p) {
        parts.extend(answer(c, &format!("SELECT {select} FROM {from} WHERE {cond}")).await?);
    }
    let (all, parts) = (multiset(all), multiset(parts));
    Ok((all != parts).then(|| {
        format!(
            "SELECT {select} FROM {from} WHERE {p}: {} rows in all, {} in the three parts",
            all.values().sum::<usize>(),
            parts.values().sum::<usize>()
        )
    }))
}

/// TLP of an inner join's ON: `ON e AND p`, `ON e AND NOT p` and `ON e
/// AND (p) IS NULL` together give the rows of `ON e`.
async fn tlp_on(c: &tokio_postgres::Client, p: &str) -> Result<Option<String>, String> {
    let select = "a.i, a.s, b.i, b.s";
    let on = "a.i = b.i OR a.s = b.s";
    let all = answer(
        c,
        &format!("SELECT {select} FROM f AS a JOIN g AS b ON {on}"),
    )
    .await?;
    let mut parts = Vec::new();
    for cond in partitions(p) {
        parts.extend(
            answer(
                c,
                &format!("SELECT {select} FROM f AS a JOIN g AS b ON ({on}) AND {cond}"),
            )
            .await?,
        );
    }
    Ok((multiset(all) != multiset(parts)).then(|| format!("JOIN ... ON ({on}) AND {p}")))
}

/// TLP of HAVING over groups of `f` by `flag`.
async fn tlp_having(c: &tokio_postgres::Client, h: &str) -> Result<Option<String>, String> {
    let base = "SELECT flag, count(*), max(i) FROM f GROUP BY flag";
    let all = answer(c, base).await?;
    let mut parts = Vec::new();
    for cond in partitions(h) {
        parts.extend(answer(c, &format!("{base} HAVING {cond}")).await?);
    }
    Ok((multiset(all) != multiset(parts)).then(|| format!("{base} HAVING {h}")))
}

/// count(*) and max(i) over `f` equal those combined from the three parts.
async fn tlp_aggregates(c: &tokio_postgres::Client, p: &str) -> Result<Option<String>, String> {
    let whole = answer(c, "SELECT count(*), max(i), min(s) FROM f").await?;
    let mut count = 0i64;
    let mut max: Option<i64> = None;
    let mut min: Option<String> = None;
    for cond in partitions(p) {
        let row = answer(
            c,
            &format!("SELECT count(*), max(i), min(s) FROM f WHERE {cond}"),
        )
        .await?;
        let fields: Vec<&str> = row
            .first()
            .map(|r| r.split('|').collect())
            .unwrap_or_default();
        count += fields
            .first()
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0);
        if let Some(m) = fields.get(1).and_then(|m| m.parse::<i64>().ok()) {
            max = Some(max.map_or(m, |x| x.max(m)));
        }
        if let Some(s) = fields.get(2).filter(|s| **s != "NULL") {
            // Text compares by code point here and in PostgreSQL's C
            // collation the test server uses.
            let s = s.to_string();
            min = Some(min.map_or(s.clone(), |x| if s < x { s } else { x }));
        }
    }
    let combined = format!(
        "{count}|{}|{}",
        max.map_or("NULL".to_string(), |m| m.to_string()),
        min.unwrap_or_else(|| "NULL".to_string())
    );
    let whole = whole.first().cloned().unwrap_or_default();
    Ok((whole != combined)
        .then(|| format!("aggregates WHERE {p}: {whole} whole, {combined} from parts")))
}

/// NoREC: the filter's count equals the count of rows where the condition
/// as a value is true.
async fn norec(c: &tokio_postgres::Client, p: &str) -> Result<Option<String>, String> {
    let filtered = answer(c, &format!("SELECT count(*) FROM f WHERE {p}")).await?;
    let counted = answer(
        c,
        &format!("SELECT count(*) FROM (SELECT ({p}) IS TRUE AS t FROM f) AS q WHERE t"),
    )
    .await?;
    Ok((filtered != counted)
        .then(|| format!("WHERE {p}: {filtered:?} rows filtered, {counted:?} where it is true")))
}

/// A condition of the shapes whose NULLs and name binding went wrong
/// before (subqueries over `f` inside a query over `f`, ANY and ALL, row
/// comparisons, arrays holding NULL), around a generated condition `p`.
fn shaped_condition(g: &mut QueryGen<'_>) -> String {
    use rand::Rng;
    let p = g.predicate("");
    let op = ["=", "<>", "<", ">=", ">"][g.rng.random_range(0..5)];
    match g.rng.random_range(0..9) {
        0 => format!("i {op} ANY (SELECT i FROM f WHERE {p})"),
        1 => format!("i {op} ALL (SELECT i FROM f WHERE {p})"),
        2 => format!("n {op} ANY (SELECT n FROM g WHERE {p})"),
        3 => format!("EXISTS (SELECT 1 FROM f AS x WHERE x.i = f.i AND {p})"),
        4 => format!("i IN (SELECT i FROM f WHERE {p})"),
        5 => format!("(i, flag) IN ((7, true), (NULL, false), (42, NULL)) OR {p}"),
        6 => format!("ROW(i, b) {op} ROW(7, NULL::bigint) OR {p}"),
        7 => format!("i {op} ANY (ARRAY[1, NULL, 7]) AND {p}"),
        _ => format!("i {op} ALL (ARRAY[0, 42, NULL]) OR NOT {p}"),
    }
}

/// A condition over groups, as HAVING takes it.
fn group_condition(g: &mut QueryGen<'_>) -> String {
    use rand::Rng;
    let term = |g: &mut QueryGen<'_>| -> String {
        match g.rng.random_range(0..5) {
            0 => format!(
                "max(i) {} {}",
                ["<", ">", "=", "<>"][g.rng.random_range(0..4)],
                ["0", "7", "NULL", "2147483647"][g.rng.random_range(0..4)]
            ),
            1 => format!("count(*) > {}", g.rng.random_range(0..40)),
            2 => "min(s) IS NULL".into(),
            3 => format!("bool_or({})", g.predicate("")),
            _ => format!(
                "flag IS {}",
                ["TRUE", "NOT FALSE", "NULL"][g.rng.random_range(0..3)]
            ),
        }
    };
    match g.rng.random_range(0..3) {
        0 => term(g),
        1 => format!("({} AND {})", term(g), term(g)),
        _ => format!("({} OR NOT {})", term(g), term(g)),
    }
}

/// How long the long mode may run, if it is bounded by time.
fn time_budget() -> Option<std::time::Duration> {
    std::env::var("SLUICE_METAMORPHIC_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(std::time::Duration::from_secs)
}

fn check_count() -> usize {
    std::env::var("SLUICE_METAMORPHIC_CHECKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ternary_logic_partitioning_and_norec_hold() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let mut rng = rng();
    // f and g have the same columns; g is keyed by i.
    c.batch_execute(&format!("{FUZZ_TABLE} WITH (partitions = 3)"))
        .await
        .unwrap();
    let keyed = FUZZ_TABLE.replace(
        "CREATE TABLE f (i INT,",
        "CREATE TABLE g (i INT PRIMARY KEY,",
    );
    c.batch_execute(&keyed).await.unwrap();
    for _ in 0..4 {
        c.batch_execute(&insert_rows(&mut rng, 25)).await.unwrap();
    }
    // g: f's rows with a key (upserts keep the last of each).
    c.batch_execute("INSERT INTO g SELECT * FROM f WHERE i IS NOT NULL")
        .await
        .unwrap();
    let checks = check_count();
    let mut tally = Tally::default();
    let started = std::time::Instant::now();
    let budget = time_budget();
    for n in 0..checks {
        if budget.is_some_and(|b| started.elapsed() > b) {
            break;
        }
        let mut g = QueryGen::new(&mut rng);
        let p = if n % 2 == 0 {
            g.predicate("")
        } else {
            shaped_condition(&mut g)
        };
        tally.record("tlp where", tlp_where(&c, "i, s, flag, n", "f", &p).await);
        tally.record("norec", norec(&c, &p).await);
        tally.record("tlp aggregates", tlp_aggregates(&c, &p).await);
        if n % 3 == 0 {
            let mut g = QueryGen::new(&mut rng);
            let joined = g.predicate("a.");
            tally.record("tlp on", tlp_on(&c, &joined).await);
            tally.record(
                "tlp left join",
                tlp_where(
                    &c,
                    "a.i, a.s, b.i, b.d",
                    "f AS a LEFT JOIN g AS b ON a.i = b.i",
                    &joined,
                )
                .await,
            );
            let mut g = QueryGen::new(&mut rng);
            let h = group_condition(&mut g);
            tally.record("tlp having", tlp_having(&c, &h).await);
        }
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "metamorphic: {} checks in {:.0?} ({} skipped on errors), {} failed",
        tally.checked,
        started.elapsed(),
        tally.skipped,
        tally.failures.len()
    );
    // Most checks must run: a generator whose queries all fail checks
    // nothing.
    assert!(
        tally.checked > tally.skipped,
        "{} checked, {} skipped",
        tally.checked,
        tally.skipped
    );
    assert!(
        tally.failures.is_empty(),
        "{} metamorphic checks failed:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
}
