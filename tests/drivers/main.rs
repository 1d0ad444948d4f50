//! Driver conformance: each driver runs its scenario against a real server
//! (`tests/drivers/*`): asyncpg, psycopg2 + SQLAlchemy + pandas, ADBC,
//! pgJDBC, node-postgres, psql and tokio-postgres (psycopg 3 in `wire.rs` and
//! `prepared.rs`); and the tools users point at a PostgreSQL database:
//! DuckDB's ATTACH, dbt, polars and pandas, Spark, knex. In CI (`CI` set) every driver must be
//! installed; elsewhere a missing one says SKIPPED.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::{run_client as run, scalar, sqlstate, text_rows, Server};
use futures::pin_mut;
use futures::StreamExt;
use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};
use tokio_postgres::types::Type;

fn here(file: &str) -> String {
    format!("{}/tests/drivers/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// True when the driver is there; in CI its absence fails the test.
fn available(what: &str, probe: &mut Command) -> bool {
    let ok = probe.output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "{what} must be installed in CI"
        );
        eprintln!("{what} not installed; SKIPPED");
    }
    ok
}

fn python_scenario(modules: &str, script: &str) {
    if !common::python_has(modules) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    run(
        script,
        Command::new("python3")
            .arg(here(script))
            .arg(server.port.to_string()),
    );
}

/// JSONB, NUMERIC(12,3) and VARCHAR(8) as psycopg 3 and asyncpg read
/// them: JSON values, precision and scale, length.
#[test]
fn python_drivers_read_column_types() {
    for (driver, module) in [("psycopg", "psycopg"), ("asyncpg", "asyncpg")] {
        if !common::python_has(module) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path());
        run(
            driver,
            Command::new("python3")
                .arg(here("types_scenario.py"))
                .arg(server.port.to_string())
                .arg(driver),
        );
    }
}

#[test]
fn asyncpg() {
    python_scenario("asyncpg", "asyncpg_scenario.py");
}

#[test]
fn psycopg2_sqlalchemy_pandas() {
    python_scenario(
        "psycopg, psycopg2, sqlalchemy, pandas, greenlet",
        "sqlalchemy_scenario.py",
    );
}

/// ADBC: rows straight into Arrow.
#[test]
fn adbc() {
    python_scenario("adbc_driver_postgresql, pyarrow", "adbc_scenario.py");
}

/// pgJDBC from Debian's package (`libpostgresql-jdbc-java`).
#[test]
fn jdbc() {
    let jar = "/usr/share/java/postgresql.jar";
    if !available("javac", Command::new("javac").arg("-version"))
        || !available(jar, Command::new("test").args(["-f", jar]))
    {
        return;
    }
    let classes = tempfile::tempdir().unwrap();
    run(
        "javac",
        Command::new("javac")
            .args(["-cp", jar])
            .arg("-d")
            .arg(classes.path())
            .arg(here("JdbcScenario.java")),
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let classpath = format!("{jar}:{}", classes.path().display());
    run(
        "pgJDBC",
        Command::new("java")
            .args(["-cp", &classpath, "JdbcScenario"])
            .arg(server.port.to_string()),
    );
}

/// node-postgres from npm, installed by `.ci/run` under
/// `$HOME/.cache/sluice-node` (or where `SLUICE_NODE_MODULES` says).
#[test]
fn node_postgres() {
    let modules = node_modules();
    if !available(
        "node-postgres (pg, pg-cursor)",
        Command::new("node")
            .args(["-e", "require('pg'); require('pg-cursor')"])
            .env("NODE_PATH", &modules),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    run(
        "node-postgres",
        Command::new("node")
            .arg(here("node_pg_scenario.js"))
            .arg(server.port.to_string())
            .env("NODE_PATH", &modules),
    );
}

fn node_modules() -> String {
    std::env::var("SLUICE_NODE_MODULES").unwrap_or_else(|_| {
        format!(
            "{}/.cache/sluice-node/node_modules",
            std::env::var("HOME").unwrap_or_default()
        )
    })
}

/// knex over node-postgres, from npm beside node-postgres.
#[test]
fn knex() {
    let modules = node_modules();
    if !available(
        "knex",
        Command::new("node")
            .args(["-e", "require('knex'); require('pg')"])
            .env("NODE_PATH", &modules),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    run(
        "knex",
        Command::new("node")
            .arg(here("knex_scenario.js"))
            .arg(server.port.to_string())
            .env("NODE_PATH", &modules),
    );
}

/// The tools' own Python: a virtualenv `.ci/run` makes under
/// `$HOME/.cache/sluice-tools` (or where `SLUICE_TOOLS` says), since
/// DuckDB's postgres extension from the package registry needs the DuckDB
/// release it was built for, and dbt, polars and pyspark pin their own
/// dependencies.
fn tools_bin(program: &str) -> String {
    let root = std::env::var("SLUICE_TOOLS").unwrap_or_else(|_| {
        format!(
            "{}/.cache/sluice-tools",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{root}/bin/{program}")
}

/// Runs a tool's scenario with the tools' Python when `modules` import.
fn tool_scenario(what: &str, modules: &str, script: &str, extra: &[String]) {
    let python = tools_bin("python");
    if !available(
        what,
        Command::new(&python).args(["-c", &format!("import {modules}")]),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    run(
        what,
        Command::new(&python)
            .arg(here(script))
            .arg(server.port.to_string())
            .args(extra),
    );
}

/// DuckDB's postgres extension: ATTACH, reads of every relation kind, a
/// scan split into ctid ranges over connections sharing an exported
/// snapshot, writes.
#[test]
fn duckdb_attach() {
    tool_scenario(
        "DuckDB with its postgres extension",
        "duckdb, duckdb_ext, psycopg, pytz",
        "duckdb_attach_scenario.py",
        &[],
    );
}

/// dbt-postgres: view, table and materialized_view models, run twice,
/// tested, documented.
#[test]
fn dbt() {
    tool_scenario(
        "dbt-postgres",
        "dbt.adapters.postgres, psycopg",
        "dbt_scenario.py",
        &[tools_bin("dbt")],
    );
}

/// polars through connectorx, pandas through SQLAlchemy.
#[test]
fn polars_and_pandas() {
    tool_scenario(
        "polars, connectorx, pandas",
        "polars, connectorx, pandas, sqlalchemy, psycopg2, psycopg",
        "dataframes_scenario.py",
        &[],
    );
}

/// Spark's JDBC source with Debian's pgJDBC.
#[test]
fn spark() {
    tool_scenario(
        "pyspark",
        "pyspark, psycopg",
        "spark_scenario.py",
        &["/usr/share/java/postgresql.jar".to_string()],
    );
}

/// tokio-postgres: statements without result rows describe as NoData,
/// binary COPY in (what pgx's CopyFrom sends) with its atomicity, and the
/// PostgreSQL functions drivers call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE tp (id BIGINT NOT NULL, name TEXT, score DOUBLE PRECISION, \
         amount NUMERIC(12,2), at TIMESTAMP, day DATE, ok BOOLEAN, raw BYTEA)",
    )
    .await
    .unwrap();
    let insert = c
        .prepare("INSERT INTO tp (id, name) VALUES ($1, $2)")
        .await
        .unwrap();
    assert!(insert.columns().is_empty(), "an INSERT describes as NoData");
    assert_eq!(insert.params(), &[Type::INT8, Type::TEXT]);
    assert_eq!(c.execute(&insert, &[&1i64, &"one"]).await.unwrap(), 1);

    let types = [
        Type::INT8,
        Type::TEXT,
        Type::FLOAT8,
        Type::NUMERIC,
        Type::TIMESTAMP,
        Type::DATE,
        Type::BOOL,
        Type::BYTEA,
    ];
    let at = chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_micro_opt(3, 4, 5, 600_000)
        .unwrap();
    let day = chrono::NaiveDate::from_ymd_opt(1999, 12, 31).unwrap();
    let sink = c
        .copy_in("COPY tp FROM STDIN WITH (FORMAT binary)")
        .await
        .unwrap();
    let writer = BinaryCopyInWriter::new(sink, &types);
    pin_mut!(writer);
    for i in 0..1000i64 {
        let name = format!("n{i}");
        writer
            .as_mut()
            .write(&[
                &(10 + i),
                &name,
                &(i as f64 * 0.5),
                &rust_decimal_text(i),
                &at,
                &day,
                &(i % 2 == 0),
                &vec![0u8, 255, i as u8],
            ])
            .await
            .unwrap();
    }
    let none: Option<String> = None;
    let null_f: Option<f64> = None;
    writer
        .as_mut()
        .write(&[
            &5000i64,
            &none,
            &null_f,
            &NumericText(None),
            &None::<chrono::NaiveDateTime>,
            &None::<chrono::NaiveDate>,
            &None::<bool>,
            &None::<Vec<u8>>,
        ])
        .await
        .unwrap();
    assert_eq!(writer.finish().await.unwrap(), 1001);
    assert_eq!(
        text_rows(
            &c,
            "SELECT id, name, score, amount, at, day, ok, raw FROM tp WHERE id IN (11, 5000) ORDER BY id"
        )
        .await,
        vec![
            "11|n1|0.5|1.25|2026-01-02 03:04:05.6|1999-12-31|f|\\x00ff01".to_string(),
            "5000|NULL|NULL|NULL|NULL|NULL|NULL|NULL".to_string()
        ]
    );
    // A bad row (NULL id) rejects the whole binary COPY.
    let sink = c
        .copy_in("COPY tp (id, name) FROM STDIN WITH (FORMAT binary)")
        .await
        .unwrap();
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::TEXT]);
    pin_mut!(writer);
    writer.as_mut().write(&[&7000i64, &"x"]).await.unwrap();
    writer.as_mut().write(&[&None::<i64>, &"y"]).await.unwrap();
    let e = writer.finish().await.unwrap_err();
    assert_eq!(sqlstate(&e), "23502", "{e}");
    assert_eq!(scalar(&c, "SELECT count(*) FROM tp").await, 1002);

    // A prepared INSERT binds every type in binary, in the types the
    // server described, straight into the table (no plan per execution).
    let all = c
        .prepare(
            "INSERT INTO tp (id, name, score, amount, at, day, ok, raw) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .await
        .unwrap();
    assert_eq!(all.params(), &types);
    for i in 0..20i64 {
        let name = format!("p{i}");
        let n = c
            .execute(
                &all,
                &[
                    &(8000 + i),
                    &name,
                    &(i as f64 * 0.25),
                    &rust_decimal_text(i),
                    &at,
                    &day,
                    &(i % 2 == 1),
                    &vec![i as u8],
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    assert_eq!(
        text_rows(
            &c,
            "SELECT id, name, score, amount, at, day, ok, raw FROM tp WHERE id = 8003"
        )
        .await,
        vec!["8003|p3|0.75|3.75|2026-01-02 03:04:05.6|1999-12-31|t|\\x03".to_string()]
    );
    // Types the client declares at Parse win over the column's: an int4
    // and a varchar parameter for a BIGINT and a TEXT column; literals and
    // parameters mix, rows repeat a parameter.
    let typed = c
        .prepare_typed(
            "INSERT INTO tp (id, name, ok) VALUES ($1, $2, true), ($1 + 0, 'second', $3)",
            &[Type::INT4, Type::VARCHAR, Type::BOOL],
        )
        .await;
    assert!(
        typed.is_ok(),
        "an expression falls back to the planner: {typed:?}"
    );
    let typed = c
        .prepare_typed(
            "INSERT INTO tp (id, name, ok) VALUES ($1, $2, true), (9001, 'second', $3)",
            &[Type::INT4, Type::VARCHAR, Type::BOOL],
        )
        .await
        .unwrap();
    assert_eq!(
        c.execute(&typed, &[&9000i32, &"first", &false])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        text_rows(
            &c,
            "SELECT id, name, ok FROM tp WHERE id >= 9000 ORDER BY id"
        )
        .await,
        vec!["9000|first|t".to_string(), "9001|second|f".to_string()]
    );
    // Errors have PostgreSQL's SQLSTATEs, and the connection goes on.
    let e = c.execute(&insert, &[&None::<i64>, &"x"]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23502", "{e}");
    let text_insert = c
        .prepare_typed("INSERT INTO tp (id) VALUES ($1)", &[Type::TEXT])
        .await
        .unwrap();
    let e = c.execute(&text_insert, &[&"12x"]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "22P02", "{e}");
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(
        message.starts_with("invalid input syntax for type bigint: \"12x\""),
        "{message}"
    );
    assert_eq!(c.execute(&text_insert, &[&"12"]).await.unwrap(), 1);
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM tp").await,
        1002 + 20 + 2 + 1
    );
    // ON CONFLICT DO NOTHING on a keyed table, prepared.
    c.batch_execute("CREATE TABLE kp (id TEXT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    let upsert = c
        .prepare("INSERT INTO kp VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .await
        .unwrap();
    assert_eq!(c.execute(&upsert, &[&"a", &1i32]).await.unwrap(), 1);
    assert_eq!(c.execute(&upsert, &[&"a", &2i32]).await.unwrap(), 0);
    assert_eq!(
        text_rows(&c, "SELECT id, v FROM kp").await,
        vec!["a|1".to_string()]
    );
    // The statement outlives a DROP: 42P01, then it works on the new table.
    c.batch_execute("DROP TABLE kp").await.unwrap();
    let e = c.execute(&upsert, &[&"b", &1i32]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "42P01", "{e}");
    c.batch_execute("CREATE TABLE kp (id TEXT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    assert_eq!(c.execute(&upsert, &[&"b", &1i32]).await.unwrap(), 1);

    // Binary COPY out, read back by tokio-postgres' binary reader; an empty
    // result is a header and a trailer.
    for (filter, want) in [
        ("id IN (1, 11, 5000)", vec![1i64, 11, 5000]),
        ("id < 0", vec![]),
    ] {
        let stream = c
            .copy_out(&format!(
                "COPY (SELECT id, name, amount IS NULL AS no_amount FROM tp WHERE {filter} ORDER BY id) \
                 TO STDOUT WITH (FORMAT binary)"
            ))
            .await
            .unwrap();
        let rows = BinaryCopyOutStream::new(stream, &[Type::INT8, Type::TEXT, Type::BOOL]);
        pin_mut!(rows);
        let mut ids = Vec::new();
        while let Some(row) = rows.next().await {
            let row = row.unwrap();
            ids.push(row.get::<i64>(0));
            if row.get::<i64>(0) == 5000 {
                assert_eq!(row.get::<Option<&str>>(1), None);
                assert!(row.get::<bool>(2));
            }
        }
        assert_eq!(ids, want, "{filter}");
    }

    // What drivers and tools call.
    let v: String = c.query_one("SELECT version()", &[]).await.unwrap().get(0);
    assert!(v.starts_with("PostgreSQL 16.6 (Sluice "), "{v}");
    let tz: String = c
        .query_one("SELECT current_setting('TimeZone')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tz, "UTC");
    let object: String = c
        .query_one(
            "SELECT json_build_object('a', 1, 'b', true, 'c', NULL)::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(object, r#"{"a" : 1, "b" : true, "c" : null}"#);
    c.batch_execute("SELECT set_config('application_name', 'x', false); SELECT pg_sleep(0.05)")
        .await
        .unwrap();
    // count(*) reads no column: over changelog() too.
    c.batch_execute(
        "CREATE TABLE k (id TEXT PRIMARY KEY, v INT); INSERT INTO k VALUES ('a', 1), ('b', 2)",
    )
    .await
    .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM changelog(k)").await, 2);
}

/// A NUMERIC parameter written from its text (tokio-postgres has no
/// decimal type without an extra crate): PostgreSQL's binary numeric.
#[derive(Debug)]
struct NumericText(Option<String>);

fn rust_decimal_text(i: i64) -> NumericText {
    NumericText(Some(format!("{}.{:02}", i, (i * 25) % 100)))
}

impl tokio_postgres::types::ToSql for NumericText {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        let Some(text) = &self.0 else {
            return Ok(tokio_postgres::types::IsNull::Yes);
        };
        // Digits in base 10000 around the decimal point; scale 2.
        let (int, frac) = text.split_once('.').unwrap_or((text, "0"));
        let mut int_groups: Vec<i16> = Vec::new();
        let mut rest = int.trim_start_matches('0').to_string();
        while !rest.is_empty() {
            let cut = rest.len().saturating_sub(4);
            int_groups.insert(0, rest[cut..].parse()?);
            rest.truncate(cut);
        }
        let frac_group: i16 = format!("{frac:0<4}")[..4].parse()?;
        let weight = int_groups.len() as i16 - 1;
        let mut digits = int_groups;
        digits.push(frac_group);
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_u16(0);
        out.put_i16(2);
        for d in digits {
            out.put_i16(d);
        }
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    tokio_postgres::types::to_sql_checked!();
}

/// psql's `\d` shows NOT NULL and the table's own columns only.
#[test]
fn psql_describe() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (ok, out, err) = server.psql(
        "CREATE TABLE d (id BIGINT NOT NULL, note TEXT);
         \\d d",
    );
    assert!(ok, "{err}");
    let id = out
        .lines()
        .find(|l| l.trim_start().starts_with("id "))
        .unwrap_or("");
    assert!(id.contains("not null"), "{out}");
    assert!(
        !out.contains("_offset"),
        "hidden columns are not listed: {out}"
    );
    // \dm lists materialized views, \dt tables, \dv the system tables;
    // \d of a view says what it is; timestamps print as PostgreSQL's do.
    let (ok, out, err) = server.psql(
        "CREATE MATERIALIZED VIEW per_note AS SELECT note, COUNT(*) AS n FROM d GROUP BY note;
         \\dm
         \\dt
         \\dv sluice_catalog.*
         \\d per_note
         SELECT TIMESTAMP '2026-01-01 10:00:00' AS a, TIMESTAMP '2026-01-01 10:00:00.25' AS b;",
    );
    assert!(ok, "{err}");
    let line = |name: &str| {
        out.lines()
            .filter(|l| l.split('|').nth(1).map(str::trim) == Some(name))
            .map(|l| l.split('|').nth(2).map(str::trim).unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(line("per_note"), vec!["materialized view"], "{out}");
    assert_eq!(line("d"), vec!["table"], "{out}");
    assert_eq!(line("lag"), vec!["view"], "{out}");
    assert!(
        out.contains("Materialized view \"public.per_note\""),
        "{out}"
    );
    assert!(
        out.contains("2026-01-01 10:00:00 | 2026-01-01 10:00:00.25"),
        "{out}"
    );
    // A keyed table's \d lists its primary key, as PostgreSQL's does; a
    // table without one lists no indexes.
    let (ok, out, err) = server.psql(
        "CREATE TABLE tenants (region TEXT, id BIGINT, plan TEXT, PRIMARY KEY (region, id));
         \\d tenants
         \\d d",
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("\"tenants_pkey\" PRIMARY KEY, btree (region, id)"),
        "{out}"
    );
    assert_eq!(out.matches("Indexes:").count(), 1, "{out}");
}

/// A NUMERIC value's display scale, read from PostgreSQL's binary form
/// (ndigits, weight, sign, dscale, digits).
struct NumericScale(u16);

impl<'a> tokio_postgres::types::FromSql<'a> for NumericScale {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let scale = raw.get(6..8).ok_or("a numeric shorter than its header")?;
        Ok(NumericScale(u16::from_be_bytes([scale[0], scale[1]])))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

/// tokio-postgres reads JSONB as JSON, NUMERIC(12,3) with its scale and
/// VARCHAR(8) as varchar, from a table and a view; the catalog gives the
/// precision, scale and length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_reads_column_types() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE typed (id INT, doc JSONB, n NUMERIC(12,3), v VARCHAR(8));
         INSERT INTO typed VALUES (1, '{\"a\": [1, 2]}', 1.5, 'abc');
         CREATE MATERIALIZED VIEW typed_view AS SELECT doc, n, v FROM typed;
         FLUSH;",
    )
    .await
    .unwrap();
    for from in ["typed", "typed_view"] {
        let stmt = c
            .prepare(&format!("SELECT doc, n, v FROM {from}"))
            .await
            .unwrap();
        let types: Vec<&Type> = stmt.columns().iter().map(|c| c.type_()).collect();
        assert_eq!(
            types,
            [&Type::JSONB, &Type::NUMERIC, &Type::VARCHAR],
            "{from}"
        );
        let row = c.query_one(&stmt, &[]).await.unwrap();
        let doc: serde_json::Value = row.get(0);
        assert_eq!(doc, serde_json::json!({"a": [1, 2]}), "{from}");
        let n: NumericScale = row.get(1);
        assert_eq!(n.0, 3, "{from}: NUMERIC(12,3) keeps its scale");
        assert_eq!(row.get::<_, String>(2), "abc");
        let described = text_rows(
            &c,
            &format!(
                "SELECT column_name, data_type, numeric_precision, numeric_scale, \
                 character_maximum_length FROM information_schema.columns \
                 WHERE table_name = '{from}' AND column_name IN ('doc', 'n', 'v') \
                 ORDER BY column_name"
            ),
        )
        .await;
        assert_eq!(
            described,
            [
                "doc|jsonb|NULL|NULL|NULL",
                "n|numeric|12|3|NULL",
                "v|character varying|NULL|NULL|8"
            ],
            "{from}"
        );
    }
}

/// sqlsmith (Debian's), a query generator that reads the catalog first
/// (types, tables, columns, constraints, operators, functions,
/// aggregates, their arguments) and then sends random queries built from
/// it: it loads Sluice's catalog and runs its queries to the end, and the
/// server answers as before after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlsmith() {
    if !available("sqlsmith", Command::new("sqlsmith").arg("--version")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE events (id BIGINT, user_id TEXT, amount NUMERIC(10,2), at TIMESTAMPTZ,
             ok BOOLEAN, payload JSONB) WITH (partitions = 2);
         INSERT INTO events SELECT g, 'u' || (g % 7), g * 1.25,
             TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 minute', g % 2 = 0, '{\"k\": 1}'
             FROM generate_series(1, 200) g;
         CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT);
         INSERT INTO users VALUES (1, 'a'), (2, 'b');
         CREATE INDEX ON events (user_id);
         CREATE MATERIALIZED VIEW per_user AS SELECT user_id, count(*) AS n FROM events GROUP BY user_id",
    )
    .await
    .unwrap();
    // A short run in CI; SLUICE_SQLSMITH_QUERIES for a long one.
    let queries: u64 = std::env::var("SLUICE_SQLSMITH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let out = Command::new("sqlsmith")
        .arg(format!(
            "--target=host=127.0.0.1 port={} user=sluice dbname=sluice",
            server.port
        ))
        .arg(format!("--max-queries={queries}"))
        .args(["--seed=7", "--verbose"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sqlsmith failed:\n{log}");
    for stage in [
        "Loading types...done",
        "Loading columns and constraints...done",
        "Loading operators...done",
        "Loading routines...done",
        "Loading routine parameters...done",
        "Loading aggregates...done",
        "Loading aggregate parameters...done",
    ] {
        assert!(log.contains(stage), "{stage} missing:\n{log}");
    }
    // The server answers after the queries, as before them.
    let n: i64 = c
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 200);
}
