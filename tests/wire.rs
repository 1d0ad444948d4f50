//! The wire protocol as clients use it: psql, tokio-postgres (prepared
//! statements, binary results), psycopg, errors and restarts.

mod common;

use common::{scalar, sqlstate, Server};

const USAGE: &str = "CREATE TABLE usage (event_id TEXT, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP) \
                     APPEND ONLY WITH (partitions = 4, partition_key = 'tenant', retention = '7 days')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_prepared_statements_and_binary_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(USAGE).await.unwrap();
    let insert = c
        .prepare("INSERT INTO usage (event_id, tenant, tokens, event_time) VALUES ($1, $2, $3, $4)")
        .await
        .unwrap();
    let t0 = chrono::NaiveDate::from_ymd_opt(2024, 5, 1)
        .unwrap()
        .and_hms_opt(12, 0, 0)
        .unwrap();
    for i in 0..20i64 {
        let n = c
            .execute(
                &insert,
                &[
                    &format!("e{i}"),
                    &format!("t{}", i % 3),
                    &(i * 10),
                    &(t0 + chrono::Duration::seconds(i)),
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    // Binary results through a prepared query with a parameter.
    let rows = c
        .query("SELECT tenant, SUM(tokens) AS s, COUNT(*) AS n FROM usage WHERE tokens >= $1 GROUP BY tenant ORDER BY tenant", &[&50i64])
        .await
        .unwrap();
    let got: Vec<(String, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mut want = std::collections::BTreeMap::new();
    for i in 5..20i64 {
        let e = want.entry(format!("t{}", i % 3)).or_insert((0i64, 0i64));
        e.0 += i * 10;
        e.1 += 1;
    }
    let want: Vec<(String, i64, i64)> = want.into_iter().map(|(k, (s, n))| (k, s, n)).collect();
    assert_eq!(got, want);
    let row = c
        .query_one(
            "SELECT event_time, _partition, _offset FROM usage WHERE event_id = $1",
            &[&"e3"],
        )
        .await
        .unwrap();
    let at: chrono::NaiveDateTime = row.get(0);
    assert_eq!(at, t0 + chrono::Duration::seconds(3));
    let p: i32 = row.get(1);
    assert!((0..4).contains(&p));
    // Same key, same partition; offsets within a partition are dense.
    let rows = c
        .query(
            "SELECT tenant, _partition, _offset FROM usage ORDER BY _partition, _offset",
            &[],
        )
        .await
        .unwrap();
    let mut by_tenant = std::collections::HashMap::new();
    let mut expected_offset = std::collections::HashMap::new();
    for r in &rows {
        let (t, p, o): (String, i32, i64) = (r.get(0), r.get(1), r.get(2));
        assert_eq!(*by_tenant.entry(t).or_insert(p), p);
        let next = expected_offset.entry(p).or_insert(0i64);
        assert_eq!(o, *next);
        *next += 1;
    }
    // Transactions are accepted.
    c.batch_execute("BEGIN; INSERT INTO usage VALUES ('x1','t9',1,NULL); COMMIT")
        .await
        .unwrap();
    c.batch_execute("BEGIN; ROLLBACK").await.unwrap();
    // INSERT ... SELECT
    let n = c.execute("INSERT INTO usage SELECT event_id || '-copy', tenant, tokens, event_time FROM usage WHERE tenant = 't0'", &[]).await.unwrap();
    assert_eq!(n, 7);
    let total: i64 = scalar(&c, "SELECT COUNT(*) FROM usage").await;
    assert_eq!(total, 28);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_star_hides_system_columns() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(USAGE).await.unwrap();
    c.batch_execute("INSERT INTO usage VALUES ('e1','a',1,'2024-01-01 00:00:00')")
        .await
        .unwrap();
    let row = c.query_one("SELECT * FROM usage", &[]).await.unwrap();
    let names: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["event_id", "tenant", "tokens", "event_time"]);
    let row = c
        .query_one("SELECT u.*, _offset FROM usage u", &[])
        .await
        .unwrap();
    assert_eq!(row.columns().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_sqlstate_and_leave_the_connection_usable() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(USAGE).await.unwrap();
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM missing", "42P01"),
        (USAGE, "42P07"),
        ("SELECT nope FROM usage", "42703"),
        ("INSERT INTO usage VALUES ('e','t','abc',NULL)", "22P02"),
        ("INSERT INTO usage VALUES ('e',NULL,1,NULL)", "23502"),
        ("INSERT INTO usage VALUES ('e','t',1,NULL,5)", "22P04"),
        ("UPDATE usage SET tokens = 1", "0A000"),
        ("CREATE TABLE k (id TEXT PRIMARY KEY) APPEND ONLY", "42601"),
        ("DELETE FROM usage WHERE nope = 1", "42703"),
    ];
    for (sql, code) in cases {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
        // Still usable.
        let one: i64 = scalar(&c, "SELECT 1::BIGINT").await;
        assert_eq!(one, 1);
    }
    // A bad row rejects the whole statement.
    let e = c
        .batch_execute(
            "INSERT INTO usage VALUES ('a','t',1,NULL), ('b','t',2,NULL), ('c','t','x',NULL)",
        )
        .await
        .unwrap_err();
    assert!(
        e.as_db_error()
            .unwrap()
            .message()
            .contains("row 3, column tokens"),
        "{e}"
    );
    let n: i64 = scalar(&c, "SELECT COUNT(*) FROM usage").await;
    assert_eq!(n, 0);
    // JSONB is validated on write.
    c.batch_execute("CREATE TABLE docs (d JSONB) APPEND ONLY")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO docs VALUES ('{\"a\": [1, 2]}')")
        .await
        .unwrap();
    let e = c
        .batch_execute("INSERT INTO docs VALUES ('{\"a\": ')")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22P02");
    // DROP TABLE [IF EXISTS]
    c.batch_execute("DROP TABLE docs").await.unwrap();
    c.batch_execute("DROP TABLE IF EXISTS docs").await.unwrap();
    assert_eq!(
        sqlstate(&c.batch_execute("DROP TABLE docs").await.unwrap_err()),
        "42P01"
    );
    c.batch_execute(&USAGE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        .await
        .unwrap();
}

/// Functions refuse what PostgreSQL's refuse, with its SQLSTATE and words,
/// instead of answering NaN or infinity or an Arrow message.
#[tokio::test]
async fn function_errors_are_postgresql_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE f (x DOUBLE PRECISION) APPEND ONLY; INSERT INTO f VALUES (4), (0)",
    )
    .await
    .unwrap();
    for (sql, code, message) in [
        (
            "SELECT sqrt(-1::double)",
            "2201F",
            "cannot take square root of a negative number",
        ),
        (
            "SELECT ln(x) FROM f",
            "2201E",
            "cannot take logarithm of zero",
        ),
        (
            "SELECT log(-5)",
            "2201E",
            "cannot take logarithm of a negative number",
        ),
        (
            "SELECT power(10::double, 400)",
            "22003",
            "value out of range: overflow",
        ),
        (
            "SELECT exp(1000::double)",
            "22003",
            "value out of range: overflow",
        ),
        (
            "SELECT abs(-9223372036854775808)",
            "22003",
            "bigint out of range",
        ),
        (
            "SELECT substr('abc', 1, -1)",
            "22011",
            "negative substring length not allowed",
        ),
        (
            "SELECT 'x'::boolean",
            "22P02",
            "invalid input syntax for type boolean: \"x\"",
        ),
        (
            "SELECT 'bad'::timestamp",
            "22007",
            "invalid input syntax for type timestamp: \"bad\"",
        ),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
        let db = e.as_db_error().expect("a server error");
        assert_eq!(db.message(), message, "{sql}");
    }
    let row = c
        .query_one(
            "SELECT sqrt(x), power(x, 0.5), exp(0), ln(1) FROM f WHERE x > 0",
            &[],
        )
        .await
        .unwrap();
    let values: Vec<f64> = (0..4).map(|i| row.get(i)).collect();
    assert_eq!(values, [2.0, 2.0, 1.0, 0.0]);
}

/// Integer arithmetic that leaves its type fails with 22003, as in
/// PostgreSQL, in constants, over columns, with a bound parameter and in a
/// view; it never wraps around. Float division by zero fails with 22012.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_overflow_is_an_error_not_a_wrapped_number() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE n (a BIGINT, b INT, s SMALLINT) APPEND ONLY;
         INSERT INTO n VALUES (9223372036854775800, 2147483600, 32000), (1, 2, 3)",
    )
    .await
    .unwrap();
    for (sql, message) in [
        (
            "SELECT 9223372036854775807::BIGINT + 1",
            "bigint out of range",
        ),
        (
            "SELECT -9223372036854775807::BIGINT - 2",
            "bigint out of range",
        ),
        ("SELECT a * 2 FROM n", "bigint out of range"),
        ("SELECT b + b FROM n", "integer out of range"),
        ("SELECT s * s FROM n", "smallint out of range"),
        (
            "SELECT SUM(a) FROM (SELECT a FROM n UNION ALL SELECT a FROM n) u",
            "bigint out of range",
        ),
        (
            "SELECT b, SUM(a + a) FROM n GROUP BY b",
            "bigint out of range",
        ),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect(sql);
        assert_eq!(
            (db.code().code(), db.message()),
            ("22003", message),
            "{sql}"
        );
    }
    // Float division by zero is an error too, not infinity.
    for sql in [
        "SELECT 1.5 / 0",
        "SELECT CAST(a AS DOUBLE) / (b - b) FROM n",
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect(sql);
        assert_eq!(
            (db.code().code(), db.message()),
            ("22012", "division by zero"),
            "{sql}"
        );
    }
    // So is a float result too large for its type.
    let e = c
        .simple_query("SELECT CAST(a AS DOUBLE) * 1e300 FROM n")
        .await
        .unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(
        (db.code().code(), db.message()),
        ("22003", "value out of range: overflow")
    );
    // In range, the same expressions answer, under PostgreSQL's names.
    let rows = c
        .simple_query("SELECT a + 10, b - 1 FROM n WHERE a < 100")
        .await
        .unwrap();
    let row = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .unwrap();
    assert_eq!(row.columns()[0].name(), "?column?");
    assert_eq!((row.get(0), row.get(1)), (Some("11"), Some("1")));
    // An integer SUM is a bigint, so SUM(integer) does not overflow early.
    assert_eq!(scalar(&c, "SELECT SUM(b) FROM n").await, 2147483602);
    let st = c
        .prepare("SELECT a + $1 FROM n WHERE a < 100")
        .await
        .unwrap();
    let ok: i64 = c.query_one(&st, &[&5i64]).await.unwrap().get(0);
    assert_eq!(ok, 6);
    let e = c.query_one(&st, &[&i64::MAX]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "22003");
    // A view over an overflowing row never shows a wrapped number: it
    // reads on, and its reads fail with 22003 as the query does, while the
    // row is there (docs/views.md, "When a view's rows do not compute").
    c.batch_execute("CREATE MATERIALIZED VIEW doubled AS SELECT a * 2 AS twice FROM n; FLUSH")
        .await
        .unwrap();
    let e = c.simple_query("SELECT * FROM doubled").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22003", "{e}");
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(message.contains("bigint out of range"), "{message}");
    let e = c.simple_query("SELECT a * 2 FROM n").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22003", "{e}");
    // So does an aggregate view whose sum leaves bigint.
    c.batch_execute(
        "CREATE MATERIALIZED VIEW total AS SELECT b > 0 AS positive, SUM(a) AS s FROM n GROUP BY b > 0;
         INSERT INTO n VALUES (9223372036854775800, 5, 1)",
    )
    .await
    .unwrap();
    let failed = view_error(&c, "total").await;
    assert!(failed.contains("bigint out of range"), "{failed}");
    assert_eq!(scalar(&c, "SELECT 1::BIGINT").await, 1);
}

/// The error a view stopped with, waiting up to five seconds for one.
async fn view_error(c: &tokio_postgres::Client, view: &str) -> String {
    for _ in 0..100 {
        let rows = c
            .query(
                "SELECT error FROM sluice_catalog.views WHERE view_name = $1",
                &[&view],
            )
            .await
            .unwrap();
        if let Some(e) = rows[0].get::<_, Option<String>>(0) {
            return e;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_message_closes_only_that_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let good = server.connect().await;

    // A client that completes startup, then sends a message of an unknown
    // type with a bogus length.
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let mut startup = Vec::new();
    startup.extend_from_slice(&196608i32.to_be_bytes()); // protocol 3.0
    startup.extend_from_slice(b"user\0raw\0database\0raw\0\0");
    let mut packet = ((startup.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&startup);
    raw.write_all(&packet).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.ends_with(&[b'Z', 0, 0, 0, 5, b'I']) {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), raw.read(&mut buf))
            .await
            .expect("startup answered")
            .unwrap();
        assert!(n > 0, "server closed during startup");
        seen.extend_from_slice(&buf[..n]);
    }
    raw.write_all(&[b'!', 0, 0, 0, 2, 0xde, 0xad])
        .await
        .unwrap();
    // The server ends that connection (maybe after an ErrorResponse).
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match raw.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(closed, "a malformed message closes its connection");

    // Other connections are untouched.
    let one: i64 = scalar(&good, "SELECT 1::BIGINT").await;
    assert_eq!(one, 1);
    let other = server.connect().await;
    other.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_smoke_with_copy_and_catalog_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let csv = dir.path().join("usage.csv");
    let mut text = String::from("event_id,tenant,tokens,event_time\n");
    for i in 0..1000 {
        text.push_str(&format!(
            "e{i},t{},{},2024-01-01 00:{:02}:{:02}\n",
            i % 7,
            i,
            (i / 60) % 60,
            i % 60
        ));
    }
    std::fs::write(&csv, text).unwrap();
    let script = format!(
        "{USAGE};\n\\copy usage FROM '{}' WITH (FORMAT csv, HEADER true)\n\
         SELECT COUNT(*), SUM(tokens) FROM usage;\n\\dt\n\\d usage\n\\l\n\
         SELECT 1 AS a; SELECT 2 AS b;\n",
        csv.display()
    );
    let (ok, out, err) = server.psql(&script);
    assert!(ok, "psql failed: {err}\n{out}");
    let squeezed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(squeezed.contains("1000 | 499500"), "{out}");
    assert!(
        out.contains("usage") && out.contains("table"),
        "\\dt: {out}"
    );
    assert!(
        out.contains("event_time") && out.contains("timestamp without time zone"),
        "\\d: {out}"
    );
    assert!(out.contains("sluice"), "\\l: {out}");
    // A bad line fails the whole COPY and names line and column.
    std::fs::write(
        &csv,
        "e1,t1,1,2024-01-01 00:00:00\ne2,t1,oops,2024-01-01 00:00:00\n",
    )
    .unwrap();
    let (ok, _, err) = server.psql(&format!(
        "\\copy usage FROM '{}' WITH (FORMAT csv)\n",
        csv.display()
    ));
    assert!(!ok);
    assert!(
        err.contains("22P02") && err.contains("line 2, column tokens"),
        "{err}"
    );
    let (ok, out, err) = server.psql("SELECT COUNT(*) FROM usage;\n");
    assert!(ok, "{err}");
    assert!(out.contains("1000"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_every_row_and_offsets_seek() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    {
        let c = server.connect().await;
        c.batch_execute("CREATE TABLE ev (id BIGINT, body TEXT) APPEND ONLY WITH (partitions = 4)")
            .await
            .unwrap();
        // Many small statements: many frames per partition.
        for chunk in 0..100 {
            let values: Vec<String> = (0..400)
                .map(|i| format!("({}, 'x')", chunk * 400 + i))
                .collect();
            c.batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(",")))
                .await
                .unwrap();
        }
    }
    server.restart();
    let c = server.connect().await;
    let (n, s): (i64, i64) = {
        let r = c
            .query_one("SELECT COUNT(*), SUM(id) FROM ev", &[])
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(n, 40_000);
    assert_eq!(s, (0..40_000i64).sum::<i64>());
    let before = frames_read(&c).await;
    let rows = c
        .query("SELECT _offset FROM ev WHERE _partition = 2 AND _offset >= 8800 ORDER BY _offset LIMIT 100", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 100);
    assert_eq!(rows[0].get::<_, i64>(0), 8800);
    let read = frames_read(&c).await - before;
    // Partition 2 holds 100 frames of 100 rows; offsets 8800.. are in the last 12.
    assert!(read > 0 && read <= 12, "read {read} frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_smoke() {
    if !common::python_has("psycopg") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let script = format!(
        r#"
import psycopg, datetime
with psycopg.connect("host=127.0.0.1 port={port} user=test dbname=test", autocommit=True) as conn:
    conn.execute("""{USAGE}""")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO usage VALUES (%s, %s, %s, %s)",
            [(f"e{{i}}", f"t{{i % 3}}", i, datetime.datetime(2024, 1, 1, 0, 0, i)) for i in range(30)])
        with cur.copy("COPY usage (event_id, tenant, tokens) FROM STDIN") as copy:
            for i in range(30, 40):
                copy.write_row((f"e{{i}}", "t0", i))
        cur.execute("SELECT tenant, SUM(tokens) FROM usage WHERE tokens >= %s GROUP BY tenant ORDER BY tenant", (10,))
        rows = cur.fetchall()
        assert rows == [("t0", 12 + 15 + 18 + 21 + 24 + 27 + sum(range(30, 40))), ("t1", 10 + 13 + 16 + 19 + 22 + 25 + 28), ("t2", 11 + 14 + 17 + 20 + 23 + 26 + 29)], rows
        try:
            cur.execute("SELECT * FROM nope")
            raise SystemExit("expected an error")
        except psycopg.errors.UndefinedTable:
            pass
        cur.execute("SELECT COUNT(*) FROM usage")
        assert cur.fetchone()[0] == 40
print("ok")
"#,
        port = server.port
    );
    common::run_client(
        "psycopg script",
        std::process::Command::new("python3").arg("-c").arg(script),
    );
}

async fn frames_read(c: &tokio_postgres::Client) -> i64 {
    scalar(
        c,
        "SELECT SUM(frames_read) FROM sluice_catalog.partitions WHERE partition = 2",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.connect().await.batch_execute(USAGE).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..16 {
        let conn = server.conn_string();
        tasks.push(tokio::spawn(async move {
            let (c, conn) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            for i in 0..25 {
                c.batch_execute(&format!(
                    "INSERT INTO usage VALUES ('w{w}-{i}', 't{w}', 1, NULL)"
                ))
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let c = server.connect().await;
    let r = c
        .query_one(
            "SELECT statements, commits FROM sluice_catalog.tables WHERE table_name = 'usage'",
            &[],
        )
        .await
        .unwrap();
    let (statements, commits): (i64, i64) = (r.get(0), r.get(1));
    assert_eq!(statements, 400);
    assert!(
        commits < statements,
        "group commit: {commits} commits for {statements} statements"
    );
    let n: i64 = scalar(&c, "SELECT COUNT(*) FROM usage").await;
    assert_eq!(n, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_size_limit_and_segment_rolling() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &["--max-statement-bytes", "200000", "--segment-bytes", "8192"],
    );
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY WITH (partitions = 2)")
        .await
        .unwrap();
    // Inside a transaction block, a COPY larger than the limit fails
    // whole, with 54000: what a transaction stages is held in memory.
    let mut data = String::new();
    for i in 0..100_000 {
        data.push_str(&format!("{i}\tsome text to make the row wider\n"));
    }
    c.batch_execute("BEGIN").await.unwrap();
    {
        let sink = c.copy_in("COPY t FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(data.clone())).await.unwrap();
        let e = sink.finish().await.unwrap_err();
        assert_eq!(sqlstate(&e), "54000", "{e}");
    }
    c.batch_execute("ROLLBACK").await.unwrap();
    let n: i64 = scalar(&c, "SELECT COUNT(*) FROM t").await;
    assert_eq!(n, 0);
    // Outside one, a COPY of any size streams to disk past the limit and
    // loads every row, rows wider than the limit too.
    c.batch_execute("CREATE TABLE wide (id BIGINT, body TEXT) APPEND ONLY")
        .await
        .unwrap();
    data.push_str(&format!("100000\t{}\n", "w".repeat(300_000)));
    let sink = c.copy_in("COPY wide FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 100_001);
    let widest: i64 = scalar(&c, "SELECT max(length(body)) FROM wide").await;
    assert_eq!(widest, 300_000);
    // Small statements roll segments at 8 KiB; all rows survive a restart.
    for i in 0..200 {
        c.batch_execute(&format!("INSERT INTO t VALUES ({i}, 'row {i}')"))
            .await
            .unwrap();
    }
    drop(c);
    server.restart();
    let c = server.connect().await;
    let r = c
        .query_one("SELECT COUNT(*), SUM(id) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 200);
    assert_eq!(r.get::<_, i64>(1), (0..200).sum::<i64>());
    let segments: i64 = scalar(
        &c,
        "SELECT SUM(segments) FROM sluice_catalog.partitions WHERE table_name = 't'",
    )
    .await;
    assert!(segments > 4, "segments rolled: {segments}");
    c.batch_execute("INSERT INTO t VALUES (1000, 'after restart')")
        .await
        .unwrap();
    let n: i64 = scalar(&c, "SELECT COUNT(*) FROM t").await;
    assert_eq!(n, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_follow_event_time_and_skip_idle_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    // No partition key: single-row statements alternate p0, p1, p0, ...
    c.batch_execute(
        "CREATE TABLE ev (id INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 seconds') \
         APPEND ONLY WITH (partitions = 2, watermark_idle_timeout = '1 second')",
    )
    .await
    .unwrap();
    c.batch_execute("INSERT INTO ev VALUES (1, '2026-01-01 12:00:10')")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO ev VALUES (2, '2026-01-01 12:00:30')")
        .await
        .unwrap();
    let rows = watermark_rows(&c).await;
    assert_eq!(
        rows,
        vec![
            (
                0,
                Some("2026-01-01 12:00:05".into()),
                false,
                Some("2026-01-01 12:00:05".into())
            ),
            (
                1,
                Some("2026-01-01 12:00:25".into()),
                false,
                Some("2026-01-01 12:00:05".into())
            ),
        ]
    );
    // p1 goes quiet: it no longer holds the table back once p0 moves on.
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    c.batch_execute("INSERT INTO ev VALUES (3, '2026-01-01 12:00:20')")
        .await
        .unwrap();
    let rows = watermark_rows(&c).await;
    assert!(rows[1].2, "p1 is idle: {rows:?}");
    assert_eq!(rows[0].3.as_deref(), Some("2026-01-01 12:00:15"));
    // p1 wakes up with an old event: the table watermark does not go back.
    c.batch_execute("INSERT INTO ev VALUES (4, '2026-01-01 12:00:01')")
        .await
        .unwrap();
    let rows = watermark_rows(&c).await;
    assert!(!rows[1].2);
    assert_eq!(rows[1].1.as_deref(), Some("2026-01-01 12:00:25"));
    assert_eq!(rows[0].3.as_deref(), Some("2026-01-01 12:00:15"));
    // Recovered from the frames after a restart.
    drop(c);
    server.restart();
    let c = server.connect().await;
    let rows = watermark_rows(&c).await;
    assert_eq!(rows[0].1.as_deref(), Some("2026-01-01 12:00:15"));
    assert_eq!(rows[1].1.as_deref(), Some("2026-01-01 12:00:25"));
    assert_eq!(rows[0].3.as_deref(), Some("2026-01-01 12:00:15"));
}

type WatermarkRow = (i32, Option<String>, bool, Option<String>);

async fn watermark_rows(c: &tokio_postgres::Client) -> Vec<WatermarkRow> {
    c.query(
        "SELECT partition, to_char(watermark, 'YYYY-MM-DD HH24:MI:SS'), idle, \
         to_char(table_watermark, 'YYYY-MM-DD HH24:MI:SS') \
         FROM sluice_catalog.watermarks WHERE table_name = 'ev' ORDER BY partition",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// Savepoints as drivers use them (psycopg 3 wraps its type lookups in
/// one), a failure found while rows stream out aborting the block, and
/// DEALLOCATE of statements prepared with Parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_aborted_blocks_and_deallocate() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (a INT)").await.unwrap();
    let fails = |sql: &'static str, state: &'static str| {
        let c = &c;
        async move {
            let e = c.simple_query(sql).await.unwrap_err();
            assert_eq!(sqlstate(&e), state, "{sql}: {e:?}");
        }
    };
    fails("SAVEPOINT a", "25P01").await;
    c.batch_execute("BEGIN; SAVEPOINT a").await.unwrap();
    // Division by zero shows only while rows are computed.
    fails("SELECT 1 / (a - a) FROM (VALUES (1)) AS v(a)", "22012").await;
    fails("SELECT 1", "25P02").await;
    fails("RELEASE a", "25P02").await;
    c.batch_execute("ROLLBACK TO SAVEPOINT a").await.unwrap();
    assert_eq!(scalar(&c, "SELECT 2").await, 2);
    c.batch_execute("SAVEPOINT b; RELEASE SAVEPOINT b")
        .await
        .unwrap();
    fails("RELEASE b", "3B001").await;
    c.batch_execute("ROLLBACK").await.unwrap();
    // ROLLBACK TO SAVEPOINT takes back the writes made since.
    c.batch_execute(
        "BEGIN; SAVEPOINT s; INSERT INTO t VALUES (1); ROLLBACK TO s;
         INSERT INTO t VALUES (2); COMMIT",
    )
    .await
    .unwrap();

    let stmt = c.prepare("SELECT count(*) FROM t").await.unwrap();
    assert_eq!(c.query_one(&stmt, &[]).await.unwrap().get::<_, i64>(0), 1);
    fails("DEALLOCATE nope", "26000").await;
    c.batch_execute("DEALLOCATE ALL").await.unwrap();
    let e = c.query_one(&stmt, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e:?}");
}

/// Result columns carry PostgreSQL's names (`count`, `?column?`, `int4`)
/// and may repeat (`SELECT id, id`), in the simple and the extended
/// protocol, for psql, tokio-postgres and psycopg alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_have_postgresql_names_and_may_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id BIGINT, value TEXT);
         INSERT INTO t VALUES (1, 'a'), (2, 'b');
         INSERT INTO t SELECT id + 10, CAST(value AS TEXT) FROM t;",
    )
    .await
    .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM t").await, 4);
    let names = |cols: &[tokio_postgres::Column]| {
        cols.iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>()
    };
    let cases: [(&str, &[&str]); 6] = [
        ("SELECT id, id FROM t WHERE id = $1", &["id", "id"]),
        (
            "SELECT count(*), count(*), sum(id), max(id) + 1, upper(min(value)), 1::int \
             FROM t WHERE id > $1",
            &["count", "count", "sum", "?column?", "upper", "int4"],
        ),
        ("SELECT 1 AS a, 2 AS a, $1::bigint", &["a", "a", "int8"]),
        ("SELECT *, id FROM t WHERE id = $1", &["id", "value", "id"]),
        (
            "SELECT t.id, u.id FROM t JOIN t u ON t.id = u.id WHERE t.id = $1",
            &["id", "id"],
        ),
        (
            "SELECT id, id FROM t WHERE id = $1 UNION ALL SELECT 5, 5",
            &["id", "id"],
        ),
    ];
    for (sql, expected) in cases {
        let stmt = c
            .prepare_typed(sql, &[tokio_postgres::types::Type::INT8])
            .await;
        let stmt = stmt.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(names(stmt.columns()), expected, "Describe of {sql}");
        let rows = c.query(&stmt, &[&1i64]).await.unwrap();
        assert!(!rows.is_empty(), "{sql}");
        assert_eq!(names(rows[0].columns()), expected, "{sql}");
    }
    let rows = c
        .query("SELECT id, id FROM t ORDER BY id", &[])
        .await
        .unwrap();
    let pairs: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(pairs, [(1, 1), (2, 2), (11, 11), (12, 12)]);

    let (ok, out, err) = server.psql(
        "SELECT count(*), count(*) FROM t;\nSELECT id, id + 1, 'x' FROM t ORDER BY id LIMIT 1;\n\
         COPY (SELECT id, id FROM t ORDER BY id LIMIT 1) TO STDOUT WITH (FORMAT csv, HEADER);\n",
    );
    assert!(ok, "{err}");
    let squeezed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(squeezed.contains("count | count ---"), "{out}");
    assert!(squeezed.contains("id | ?column? | ?column? ---"), "{out}");
    assert!(out.contains("id,id\n1,1"), "COPY's header: {out}");

    if !common::python_has("psycopg") {
        return;
    }
    let script = format!(
        r#"
import psycopg
from psycopg.rows import dict_row
with psycopg.connect("host=127.0.0.1 port={port} user=test dbname=test", autocommit=True, row_factory=dict_row) as conn:
    row = conn.execute("SELECT count(*), max(value) FROM t WHERE id > %s", (0,)).fetchone()
    assert row == {{"count": 4, "max": "b"}}, row
    with conn.cursor() as cur:
        cur.execute("SELECT id, id FROM t WHERE id = %s", (1,), prepare=True)
        assert [d.name for d in cur.description] == ["id", "id"], cur.description
        assert cur.fetchall() == [{{"id": 1}}]
print("ok")
"#,
        port = server.port
    );
    common::run_client(
        "psycopg script",
        std::process::Command::new("python3").arg("-c").arg(script),
    );
}
