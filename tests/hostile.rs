//! Hostile input never takes the server down: deep and huge statements are
//! answered or refused with 54001/54000, random SQL either answers (the
//! same answer as DataFusion over the same rows) or fails with a SQLSTATE,
//! and malformed protocol messages close only their own connection.
//!
//! The random-query and wire-fuzz tests run for `SLUICE_FUZZ_SECS` seconds
//! each (60 by default, as in CI), with a fixed seed (`SLUICE_FUZZ_SEED`).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array,
    Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{sqlstate, Server};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn fuzz_secs() -> u64 {
    std::env::var("SLUICE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

fn fuzz_seed() -> u64 {
    std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261130)
}

fn alive(server: &Server) -> bool {
    std::path::Path::new(&format!("/proc/{}", server.pid())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", server.pid()))
            .unwrap_or_default()
            .contains(") Z ")
}

fn rss_kib(server: &Server) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The statement's outcome: Ok, or the SQLSTATE it failed with.
async fn outcome(c: &tokio_postgres::Client, sql: &str) -> Result<(), String> {
    c.simple_query(sql)
        .await
        .map(|_| ())
        .map_err(|e| sqlstate(&e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_and_huge_statements_are_answered_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (x INT)").await.unwrap();

    let chain = |n: usize| format!("SELECT 1 WHERE {}", vec!["1=1"; n].join(" AND "));
    // 2,000 terms: a query builder's filter; PostgreSQL answers it.
    let rows = c
        .simple_query(&chain(2_000))
        .await
        .expect("2,000-term AND chain");
    let answered = rows
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(answered, 1, "one row");
    let or_chain = format!(
        "SELECT count(*) FROM t WHERE {}",
        (0..2_000)
            .map(|i| format!("x = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    );
    c.simple_query(&or_chain)
        .await
        .expect("2,000-term OR chain");
    assert_eq!(outcome(&c, &chain(100_000)).await, Err("54001".into()));
    // The same through the extended protocol.
    let e = c.prepare(&chain(100_000)).await.unwrap_err();
    assert_eq!(sqlstate(&e), "54001");

    let nested = |depth: usize| {
        format!(
            "SELECT * FROM {}(SELECT 1 AS x){}",
            "(SELECT * FROM ".repeat(depth),
            ") AS s".repeat(depth)
        )
    };
    // A generated query nests subqueries a hundred deep; PostgreSQL answers.
    assert_eq!(
        common::scalar(
            &c,
            &format!("SELECT CAST(x AS BIGINT) FROM ({}) AS top", nested(100))
        )
        .await,
        1
    );
    let nested = nested(1_000);
    let r = outcome(&c, &nested).await;
    assert!(
        r.is_ok() || r == Err("54001".into()),
        "1,000 nested subqueries: {r:?}"
    );
    let deep_parens = format!("SELECT {}1{}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(outcome(&c, &deep_parens).await, Err("54001".into()));

    let in_list = format!(
        "SELECT count(*) FROM t WHERE x IN ({})",
        (0..100_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let r = outcome(&c, &in_list).await;
    assert!(
        r.is_ok() || r == Err("54001".into()),
        "100,000-element IN list: {r:?}"
    );

    let literal = format!("SELECT length('{}')", "x".repeat(100 << 20));
    assert_eq!(outcome(&c, &literal).await, Err("54000".into()));

    // A view over a deep query is refused the same way.
    let view = format!(
        "CREATE MATERIALIZED VIEW deep AS SELECT x FROM t WHERE {}",
        vec!["x = 1"; 100_000].join(" OR ")
    );
    assert_eq!(outcome(&c, &view).await, Err("54001".into()));

    // The connection and the server go on.
    assert_eq!(common::scalar(&c, "SELECT count(*) FROM t").await, 0);
    assert!(alive(&server));
    assert!(!server.log_text().contains("overflowed its stack"));
}

/// A row of the fuzz table, and both its SQL literal and Arrow forms.
#[derive(Clone)]
struct FuzzRow {
    i: Option<i32>,
    b: Option<i64>,
    d: Option<f64>,
    n: Option<i128>, // hundredths
    s: Option<String>,
    ts: Option<i64>, // microseconds
    flag: Option<bool>,
    dt: Option<i32>, // days
}

const FUZZ_TABLE: &str = "CREATE TABLE f (i INT, b BIGINT, d DOUBLE PRECISION, n NUMERIC(12,2), \
                          s TEXT, ts TIMESTAMP, flag BOOLEAN, dt DATE) WITH (partitions = 3)";

fn fuzz_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int32, true),
        Field::new("b", DataType::Int64, true),
        Field::new("d", DataType::Float64, true),
        Field::new("n", DataType::Decimal128(12, 2), true),
        Field::new("s", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("dt", DataType::Date32, true),
    ]))
}

fn pick<T: Clone>(rng: &mut StdRng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())].clone()
}

fn random_row(rng: &mut StdRng) -> FuzzRow {
    let null = |rng: &mut StdRng| rng.random_range(0..6) == 0;
    FuzzRow {
        i: (!null(rng)).then(|| pick(rng, &[0, 1, -1, 7, 42, i32::MAX, i32::MIN, 1000])),
        b: (!null(rng)).then(|| pick(rng, &[0, 3, -3, i64::MAX, i64::MIN + 1, 1 << 40])),
        d: (!null(rng)).then(|| {
            pick(
                rng,
                &[
                    0.5,
                    -2.25,
                    f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    1e300,
                    3.0,
                ],
            )
        }),
        n: (!null(rng)).then(|| pick(rng, &[0, 125, -99_999_999_999, 99_999_999_999, 1])),
        s: (!null(rng))
            .then(|| pick(rng, &["", "a", "O'Brien", "é ü", "zz", "42", "NaN"]).to_string()),
        ts: (!null(rng)).then(|| {
            pick(
                rng,
                &[
                    0,
                    1_767_261_600_000_000,
                    1_767_261_659_000_000,
                    -62_135_596_800_000_000, // 0001-01-01
                    253_402_300_799_000_000, // 9999-12-31 23:59:59
                ],
            )
        }),
        flag: (!null(rng)).then(|| rng.random()),
        dt: (!null(rng)).then(|| pick(rng, &[0, 20_454, -719_162, 2_932_896])),
    }
}

fn row_literal(r: &FuzzRow) -> String {
    fn opt<T>(v: &Option<T>, f: impl Fn(&T) -> String) -> String {
        v.as_ref().map(f).unwrap_or_else(|| "NULL".into())
    }
    let ts = |us: &i64| {
        let t = chrono::DateTime::from_timestamp_micros(*us)
            .unwrap()
            .naive_utc();
        format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.6f"))
    };
    let dt = |days: &i32| {
        let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
            + chrono::Duration::days(*days as i64);
        format!("'{}'", d.format("%Y-%m-%d"))
    };
    let d = |x: &f64| {
        if x.is_nan() {
            "'NaN'".into()
        } else if x.is_infinite() {
            if *x > 0.0 {
                "'Infinity'".into()
            } else {
                "'-Infinity'".into()
            }
        } else {
            format!("{x:?}")
        }
    };
    let n = |h: &i128| {
        let sign = if *h < 0 { "-" } else { "" };
        format!("{sign}{}.{:02}", h.abs() / 100, h.abs() % 100)
    };
    format!(
        "({}, {}, {}, {}, {}, {}, {}, {})",
        opt(&r.i, |v| v.to_string()),
        opt(&r.b, |v| v.to_string()),
        opt(&r.d, d),
        opt(&r.n, n),
        opt(&r.s, |v| format!("'{}'", v.replace('\'', "''"))),
        opt(&r.ts, ts),
        opt(&r.flag, |v| v.to_string()),
        opt(&r.dt, dt),
    )
}

fn rows_batch(rows: &[FuzzRow]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.i))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.b))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.d))),
        Arc::new(
            Decimal128Array::from_iter(rows.iter().map(|r| r.n))
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.s.clone()))),
        Arc::new(TimestampMicrosecondArray::from_iter(
            rows.iter().map(|r| r.ts),
        )),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.flag))),
        Arc::new(Date32Array::from_iter(rows.iter().map(|r| r.dt))),
    ];
    RecordBatch::try_new(fuzz_schema(), cols).unwrap()
}

/// Random SQL over table `f`: expressions of every kind, casts between the
/// types, NULLs and edge values, aggregates, joins, subqueries and
/// windows. Every output column is cast to TEXT so that answers compare as
/// strings.
struct QueryGen<'a> {
    rng: &'a mut StdRng,
}

const COLUMNS: [(&str, &str); 8] = [
    ("i", "int"),
    ("b", "int"),
    ("d", "float"),
    ("n", "num"),
    ("s", "text"),
    ("ts", "time"),
    ("flag", "bool"),
    ("dt", "date"),
];

impl QueryGen<'_> {
    fn column(&mut self, kind: &str) -> String {
        let of_kind: Vec<&str> = COLUMNS
            .iter()
            .filter(|(_, k)| {
                *k == kind || (kind == "number" && matches!(*k, "int" | "float" | "num"))
            })
            .map(|(c, _)| *c)
            .collect();
        pick(self.rng, &of_kind).to_string()
    }

    fn literal(&mut self, kind: &str) -> String {
        if self.rng.random_range(0..10) == 0 {
            return "NULL".into();
        }
        match kind {
            "int" | "number" => pick(
                self.rng,
                &["0", "1", "-1", "2147483647", "9223372036854775807", "3"],
            )
            .into(),
            "float" => pick(
                self.rng,
                &[
                    "0.5",
                    "CAST('NaN' AS DOUBLE)",
                    "CAST('Infinity' AS DOUBLE)",
                    "1e308",
                    "-2.5",
                ],
            )
            .into(),
            "num" => pick(
                self.rng,
                &[
                    "CAST(1.25 AS DECIMAL(12,2))",
                    "CAST(-99999999999.99 AS DECIMAL(12,2))",
                    "CAST(0 AS DECIMAL(12,2))",
                ],
            )
            .into(),
            "text" => pick(
                self.rng,
                &[
                    "''",
                    "'a'",
                    "'O''Brien'",
                    "'42'",
                    "'2026-01-01'",
                    "'NaN'",
                    "'true'",
                ],
            )
            .into(),
            "time" => pick(
                self.rng,
                &[
                    "TIMESTAMP '2026-01-01 10:00:00'",
                    "TIMESTAMP '1970-01-01 00:00:00'",
                    "TIMESTAMP '9999-12-31 23:59:59'",
                ],
            )
            .into(),
            "bool" => pick(self.rng, &["true", "false"]).into(),
            "date" => pick(self.rng, &["DATE '2026-01-01'", "DATE '0001-01-01'"]).into(),
            _ => "NULL".into(),
        }
    }

    /// An expression of roughly the given kind, up to `depth` deep.
    fn expr(&mut self, kind: &str, depth: u32) -> String {
        if depth == 0 || self.rng.random_range(0..3) == 0 {
            return if self.rng.random_range(0..3) == 0 {
                self.literal(kind)
            } else {
                match kind {
                    "any" => pick(self.rng, &COLUMNS).0.to_string(),
                    "number" | "int" | "float" | "num" | "text" | "time" | "bool" | "date" => {
                        self.column(kind)
                    }
                    _ => self.column("int"),
                }
            };
        }
        let d = depth - 1;
        match kind {
            "bool" => match self.rng.random_range(0..9) {
                0 => format!("({} AND {})", self.expr("bool", d), self.expr("bool", d)),
                1 => format!("({} OR {})", self.expr("bool", d), self.expr("bool", d)),
                2 => format!("(NOT {})", self.expr("bool", d)),
                3 => {
                    let k = pick(self.rng, &["number", "text", "time", "date"]);
                    let op = pick(self.rng, &["=", "<>", "<", "<=", ">", ">="]);
                    format!("({} {op} {})", self.expr(k, d), self.expr(k, d))
                }
                4 => format!("({} IS NULL)", self.expr("any", d)),
                5 => format!(
                    "({} BETWEEN {} AND {})",
                    self.expr("number", d),
                    self.literal("int"),
                    self.literal("int")
                ),
                6 => format!(
                    "({} IN ({}, {}, {}))",
                    self.expr("int", d),
                    self.literal("int"),
                    self.literal("int"),
                    self.literal("int")
                ),
                7 => format!(
                    "({} LIKE '{}')",
                    self.expr("text", d),
                    pick(self.rng, &["%a%", "_", "", "O%"])
                ),
                _ => format!("(i IN (SELECT i FROM f WHERE {}))", self.expr("bool", d)),
            },
            "text" => match self.rng.random_range(0..6) {
                0 => format!("({} || {})", self.expr("text", d), self.expr("text", d)),
                1 => format!("upper({})", self.expr("text", d)),
                2 => format!(
                    "substr({}, {}, 2)",
                    self.expr("text", d),
                    self.literal("int")
                ),
                3 => format!("CAST({} AS TEXT)", self.expr("any", d)),
                4 => format!("coalesce({}, 'none')", self.expr("text", d)),
                _ => format!(
                    "CASE WHEN {} THEN {} ELSE {} END",
                    self.expr("bool", d),
                    self.expr("text", d),
                    self.expr("text", d)
                ),
            },
            "time" => match self.rng.random_range(0..3) {
                0 => format!("date_bin(INTERVAL '1 minute', {})", self.expr("time", d)),
                1 => format!("({} + INTERVAL '1 day')", self.expr("time", d)),
                _ => format!("date_trunc('hour', {})", self.expr("time", d)),
            },
            "date" => format!("CAST({} AS DATE)", self.expr("time", d)),
            // Numbers, with casts between every type.
            _ => match self.rng.random_range(0..9) {
                0..=3 => {
                    let op = pick(self.rng, &["+", "-", "*", "/", "%"]);
                    format!(
                        "({} {op} {})",
                        self.expr("number", d),
                        self.expr("number", d)
                    )
                }
                4 => format!("abs({})", self.expr("number", d)),
                5 => format!(
                    "CAST({} AS {})",
                    self.expr("any", d),
                    pick(
                        self.rng,
                        &[
                            "INT",
                            "BIGINT",
                            "DOUBLE",
                            "DECIMAL(12,2)",
                            "SMALLINT",
                            "REAL"
                        ]
                    )
                ),
                6 => format!("length({})", self.expr("text", d)),
                7 => format!("(SELECT max(i) FROM f WHERE {})", self.expr("bool", d)),
                _ => format!(
                    "CASE WHEN {} THEN {} END",
                    self.expr("bool", d),
                    self.expr("number", d)
                ),
            },
        }
    }

    fn query(&mut self) -> String {
        let text = |e: String| format!("CAST({e} AS TEXT)");
        match self.rng.random_range(0..6) {
            // Projection and filter.
            0 | 1 => {
                let cols: Vec<String> = (0..self.rng.random_range(1..4))
                    .map(|_| {
                        let k = pick(self.rng, &["any", "number", "text", "bool", "time", "date"]);
                        text(self.expr(k, 3))
                    })
                    .collect();
                format!("SELECT {} FROM f WHERE {}", cols.join(", "), self.expr("bool", 3))
            }
            // Aggregates.
            2 => {
                let kind = pick(self.rng, &["text", "bool", "int", "date"]);
                let key = self.expr(kind, 2);
                let agg = pick(self.rng, &["count", "min", "max", "sum", "avg", "count(DISTINCT"]);
                // Not MIN/MAX over DOUBLE: DataFusion's grouped MIN and MAX
                // over floats holding NaN depend on the order of the rows.
                // AVG of integers is a float sum here (PostgreSQL's is
                // numeric), whose last digits depend on the order of the
                // rows: AVG is compared over numerics only.
                let arg = if agg == "sum" || agg == "avg" {
                    let kinds: &[&str] = if agg == "avg" { &["num", "num"] } else { &["int", "num"] };
                    let kind = pick(self.rng, kinds);
                    self.column(kind)
                } else {
                    let kind = pick(self.rng, &["int", "num", "text", "time", "date"]);
                    self.column(kind)
                };
                let call = if agg.ends_with("DISTINCT") {
                    format!("{agg} {arg})")
                } else {
                    format!("{agg}({arg})")
                };
                format!(
                    "SELECT {}, {} FROM f WHERE {} GROUP BY 1",
                    text(key),
                    text(call),
                    self.expr("bool", 2)
                )
            }
            // A self-join on an equality.
            3 => format!(
                "SELECT {}, {} FROM f AS a JOIN f AS b ON a.{c} = b.{c} WHERE {}",
                text("a.s".into()),
                text("b.i".into()),
                self.expr("bool", 1).replace("i ", "a.i "),
                c = pick(self.rng, &["i", "s", "flag", "dt"])
            ),
            // A subquery in FROM.
            4 => format!(
                "SELECT {} FROM (SELECT i, s, d FROM f WHERE {}) AS sub",
                text("count(*) + sum(CASE WHEN i > 0 THEN 1 ELSE 0 END)".to_string()),
                self.expr("bool", 2)
            ),
            // Windows.
            _ => format!(
                "SELECT {}, {} FROM f WHERE ts BETWEEN TIMESTAMP '2000-01-01 00:00:00' AND TIMESTAMP '2100-01-01 00:00:00' GROUP BY 1",
                text("date_bin(INTERVAL '1 minute', ts)".into()),
                text(pick(self.rng, &["count(*)", "sum(i)", "max(s)", "min(n)"]).into())
            ),
        }
    }
}

/// A query's answer as sorted rows of text.
async fn server_rows(c: &tokio_postgres::Client, sql: &str) -> Result<Vec<String>, String> {
    let mut rows = common::rows_of(c.simple_query(sql).await.map_err(|e| sqlstate(&e))?);
    rows.sort();
    Ok(rows)
}

async fn reference_rows(ctx: &SessionContext, sql: &str) -> Result<Vec<String>, String> {
    let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    let batches = df.collect().await.map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for b in batches {
        let cast: Vec<ArrayRef> = b
            .columns()
            .iter()
            .map(|c| arrow::compute::cast(c, &DataType::Utf8).expect("TEXT columns"))
            .collect();
        let cols: Vec<&StringArray> = cast
            .iter()
            .map(|c| {
                c.as_any()
                    .downcast_ref::<StringArray>()
                    .expect("TEXT columns")
            })
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                cols.iter()
                    .map(|c| {
                        if c.is_valid(i) {
                            c.value(i).to_string()
                        } else {
                            "NULL".into()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    rows.sort();
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_never_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(FUZZ_TABLE).await.unwrap();
    let mut rng = StdRng::seed_from_u64(fuzz_seed());
    let reference = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new().with_target_partitions(1),
    );
    // Integer overflow (in operators and SUM) is an error here, as in
    // PostgreSQL, where plain DataFusion wraps around.
    reference.add_analyzer_rule(Arc::new(sluice::query::CheckedArithmetic));
    reference.register_udaf(sluice::query::checked_sum());
    let mut all_rows: Vec<FuzzRow> = Vec::new();
    let load = |rng: &mut StdRng, n: usize, all: &mut Vec<FuzzRow>| {
        let rows: Vec<FuzzRow> = (0..n).map(|_| random_row(rng)).collect();
        all.extend(rows.iter().cloned());
        format!(
            "INSERT INTO f VALUES {}",
            rows.iter().map(row_literal).collect::<Vec<_>>().join(", ")
        )
    };
    let sql = load(&mut rng, 60, &mut all_rows);
    c.batch_execute(&sql).await.unwrap();
    let register = |rows: &[FuzzRow]| {
        let _ = reference.deregister_table("f");
        let table = MemTable::try_new(fuzz_schema(), vec![vec![rows_batch(rows)]]).unwrap();
        reference.register_table("f", Arc::new(table)).unwrap();
    };
    register(&all_rows);

    let deadline = Instant::now() + Duration::from_secs(fuzz_secs());
    let (mut tried, mut compared, mut views) = (0u64, 0u64, 0u64);
    let mut states: BTreeMap<String, u64> = BTreeMap::new();
    let mut mismatches = Vec::new();
    while Instant::now() < deadline {
        tried += 1;
        if tried % 200 == 0 {
            let sql = load(&mut rng, 20, &mut all_rows);
            c.batch_execute(&sql).await.unwrap();
            register(&all_rows);
        }
        let query = QueryGen { rng: &mut rng }.query();
        if tried % 50 == 0 {
            // The same query as a view, when the engine takes it.
            let name = format!("fz{views}");
            match outcome(&c, &format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await {
                Ok(()) => {
                    views += 1;
                    let batch = server_rows(&c, &query).await;
                    match c.batch_execute("FLUSH").await {
                        Ok(()) => {
                            let view = server_rows(&c, &format!("SELECT * FROM {name}")).await;
                            assert_eq!(view, batch, "view {name} differs from its query: {query}");
                        }
                        // The view failed on the rows: so must its query.
                        Err(e) => assert!(
                            batch.is_err(),
                            "view {name} failed ({e}) but its query answers: {query}"
                        ),
                    }
                    c.batch_execute(&format!("DROP MATERIALIZED VIEW {name}"))
                        .await
                        .unwrap();
                }
                Err(state) => *states.entry(state).or_insert(0) += 1,
            }
            continue;
        }
        let got = server_rows(&c, &query).await;
        let want = reference_rows(&reference, &query).await;
        match (&got, &want) {
            (Ok(g), Ok(w)) => {
                compared += 1;
                if g != w {
                    mismatches.push(format!("{query}\n  server: {g:?}\n  datafusion: {w:?}"));
                }
            }
            (Err(state), _) => *states.entry(state.clone()).or_insert(0) += 1,
            (Ok(_), Err(_)) => {}
        }
        if let (Err(state), Ok(_)) = (&got, &want) {
            mismatches.push(format!(
                "{query}\n  server failed with {state}; DataFusion answered"
            ));
        }
        assert!(alive(&server), "the server died on: {query}");
    }
    eprintln!(
        "random queries: {tried} tried, {compared} compared with DataFusion, {views} views; \
         SQLSTATEs seen ({}): {states:?}",
        states.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches, the first:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(alive(&server), "server restarts: 1");
    assert_eq!(
        common::scalar(&c, "SELECT count(*) FROM f").await,
        all_rows.len() as i64
    );
}

/// A startup message for user `fuzz`, database `fuzz`.
fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608u32.to_be_bytes());
    for s in ["user", "fuzz", "database", "fuzz"] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The SQLSTATEs of the ErrorResponse messages in what the server sent
/// (best effort: a response split across reads may be missed).
fn error_states(bytes: &[u8], seen: &mut BTreeMap<String, u64>) {
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let tag = bytes[at];
        let len = u32::from_be_bytes([bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4]])
            as usize;
        let end = (at + 1 + len).min(bytes.len());
        if tag == b'E' && len >= 4 {
            let mut fields = bytes[at + 5..end].split(|b| *b == 0);
            for f in fields.by_ref() {
                if let Some(code) = f.strip_prefix(b"C") {
                    *seen
                        .entry(String::from_utf8_lossy(code).into_owned())
                        .or_insert(0) += 1;
                }
            }
        }
        if len < 4 {
            break;
        }
        at = end;
    }
}

/// A valid message of the extended or simple protocol, or COPY data.
fn valid_message(rng: &mut StdRng) -> Vec<u8> {
    let cstr = |s: &str| {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    };
    match rng.random_range(0..7) {
        0 => message(
            b'Q',
            &cstr(pick(
                rng,
                &[
                    "SELECT 1",
                    "SELECT * FROM t",
                    "COPY t FROM STDIN",
                    "BEGIN",
                    "FLUSH",
                ],
            )),
        ),
        1 => {
            let mut b = cstr("");
            b.extend(cstr("SELECT $1::int + 1"));
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&23u32.to_be_bytes());
            message(b'P', &b)
        }
        2 => {
            let mut b = cstr("");
            b.extend(cstr(""));
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&0u16.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&1u32.to_be_bytes());
            b.push(b'5');
            b.extend_from_slice(&0u16.to_be_bytes());
            message(b'B', &b)
        }
        3 => {
            let mut b = cstr("");
            b.extend_from_slice(&0u32.to_be_bytes());
            message(b'E', &b)
        }
        4 => message(b'S', &[]),
        5 => message(b'd', b"1\n2\n"),
        _ => {
            let mut b = vec![b'S'];
            b.extend(cstr(""));
            message(b'D', &b)
        }
    }
}

/// A valid message, mutated: bytes flipped, cut short, a wrong or huge
/// declared length, or random bytes.
fn mutated_message(rng: &mut StdRng) -> Vec<u8> {
    let mut m = valid_message(rng);
    match rng.random_range(0..6) {
        0 => {
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..m.len());
                m[i] = rng.random();
            }
        }
        1 => m.truncate(rng.random_range(1..m.len().max(2))),
        2 if m.len() >= 5 => {
            let len = pick(
                rng,
                &[0u32, 1, 3, 4, 5, 0x7fff_ffff, 0xffff_ffff, 0x3fff_0000],
            );
            m[1..5].copy_from_slice(&len.to_be_bytes());
        }
        3 if m.len() >= 5 => {
            // Claim less than the body holds: the rest reads as the next message.
            let len = rng.random_range(4..(m.len() as u32));
            m[1..5].copy_from_slice(&len.to_be_bytes());
        }
        4 => m = (0..rng.random_range(1..64)).map(|_| rng.random()).collect(),
        _ => {}
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_wire_messages_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let canary = server.connect().await;
    canary
        .batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap();
    let port = server.port;
    let rss_before = rss_kib(&server);
    let secs = fuzz_secs();
    let seed = fuzz_seed();
    // The fuzzer runs on its own thread with blocking sockets.
    let fuzzer = std::thread::spawn(move || {
        let mut rng = StdRng::seed_from_u64(seed);
        let deadline = Instant::now() + Duration::from_secs(secs);
        let (mut connections, mut messages) = (0u64, 0u64);
        let mut states = BTreeMap::new();
        while Instant::now() < deadline {
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            connections += 1;
            let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
            if rng.random_range(0..10) > 0 {
                let _ = s.write_all(&startup());
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
            } else {
                let m = mutated_message(&mut rng);
                let _ = s.write_all(&m);
            }
            for _ in 0..rng.random_range(1..30) {
                let m = if rng.random_range(0..3) == 0 {
                    valid_message(&mut rng)
                } else {
                    mutated_message(&mut rng)
                };
                messages += 1;
                if s.write_all(&m).is_err() {
                    break;
                }
                let mut buf = [0u8; 8192];
                if let Ok(n) = s.read(&mut buf) {
                    error_states(&buf[..n], &mut states);
                }
            }
        }
        (connections, messages, states)
    });
    // Other connections are served all along.
    let mut canary_checks = 0;
    while !fuzzer.is_finished() {
        let n = common::scalar(&canary, "SELECT count(*) FROM t").await;
        assert_eq!(n, 2);
        let fresh = server.connect().await;
        assert_eq!(common::scalar(&fresh, "SELECT 1::BIGINT").await, 1);
        canary_checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (connections, messages, states) = fuzzer.join().unwrap();
    let rss_after = rss_kib(&server);
    let log = server.log_text();
    eprintln!(
        "wire fuzz: {connections} connections, {messages} messages, {canary_checks} canary checks; \
         SQLSTATEs answered ({}): {states:?}; RSS {rss_before} KiB -> {rss_after} KiB; \
         {} panics logged",
        states.len(),
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains(" panic "))
            .count()
    );
    assert!(alive(&server), "server restarts: 1");
    assert!(
        !log.contains("stack backtrace") && !log.contains("backtrace="),
        "a panic printed a backtrace"
    );
    let panics = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains(" panic "))
        .count();
    let closed = log.matches("connection closed after a panic").count();
    assert_eq!(
        panics, closed,
        "each panic is logged once, with its connection"
    );
    assert!(
        rss_after < rss_before + 512 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(common::scalar(&canary, "SELECT count(*) FROM t").await, 2);
}
