//! Prepared point reads of materialized views (`WHERE key = $1`) are
//! answered from an index of the view's published snapshot. Each answer
//! must equal the planned query's, after every round of writes, for keys
//! of several types, several key columns, literals, aliases, keys that
//! match nothing or many rows, and NULL.

mod common;

use chrono::{NaiveDate, NaiveDateTime};
use common::{sqlstate, text_rows, Server};
use tokio_postgres::types::{ToSql, Type};

const SETUP: &str = "
CREATE TABLE ev (id BIGINT, probe INT, tenant TEXT, day DATE, amount NUMERIC(10,2), at TIMESTAMP,
    WATERMARK FOR at AS at - INTERVAL '1 second') WITH (partitions = 2);
CREATE MATERIALIZED VIEW by_probe AS SELECT probe, COUNT(*) AS n, SUM(id) AS ids FROM ev GROUP BY probe;
CREATE MATERIALIZED VIEW by_tenant_day AS
    SELECT tenant, day, COUNT(*) AS n, MAX(id) AS last FROM ev GROUP BY tenant, day;
CREATE MATERIALIZED VIEW by_amount AS SELECT amount, COUNT(*) AS n FROM ev GROUP BY amount;
CREATE MATERIALIZED VIEW per_minute AS
    SELECT window_start, COUNT(*) AS n FROM TUMBLE(ev, at, INTERVAL '1 minute')
    GROUP BY window_start, window_end EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW big AS SELECT id, probe, tenant FROM ev WHERE id % 2 = 0;
";

fn round_sql(r: i64) -> String {
    let rows: Vec<String> = (0..6)
        .map(|i| {
            let id = r * 10 + i;
            format!(
                "({id}, {probe}, 't{t}', DATE '2026-01-0{d}', {a}.{c}0, TIMESTAMP '2026-01-01 10:00:00' + INTERVAL '{m} minutes')",
                probe = i % 3,
                t = (r + i) % 2,
                d = 1 + i % 2,
                a = i % 2,
                c = 5 * (i % 2),
                m = r,
            )
        })
        .collect();
    format!("INSERT INTO ev VALUES {}; FLUSH;", rows.join(", "))
}

/// A prepared query, its parameters, and the same query with literals.
struct Case {
    sql: &'static str,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    literal: String,
}

fn cases() -> Vec<Case> {
    let at = |m: u32| {
        NaiveDate::from_ymd_opt(2026, 1, 1)
            .unwrap()
            .and_hms_opt(10, m, 0)
            .unwrap()
    };
    let mut out = Vec::new();
    let mut case =
        |sql: &'static str, params: Vec<Box<dyn ToSql + Sync + Send>>, literals: &[&str]| {
            let mut literal = sql.to_string();
            for (i, l) in literals.iter().enumerate().rev() {
                literal = literal.replace(&format!("${}", i + 1), l);
            }
            out.push(Case {
                sql,
                params,
                literal,
            });
        };
    for probe in [0, 1, 2, 99] {
        case(
            "SELECT * FROM by_probe WHERE probe = $1",
            vec![Box::new(probe)],
            &[&probe.to_string()],
        );
        case(
            "SELECT ids, probe FROM by_probe WHERE $1 = probe",
            vec![Box::new(probe)],
            &[&probe.to_string()],
        );
        case(
            "SELECT x.n AS count FROM by_probe AS x WHERE x.probe = $1",
            vec![Box::new(probe)],
            &[&probe.to_string()],
        );
        case(
            "SELECT id, tenant FROM big WHERE probe = $1",
            vec![Box::new(probe)],
            &[&probe.to_string()],
        );
    }
    case(
        "SELECT * FROM by_probe WHERE probe = $1",
        vec![Box::new(None::<i32>)],
        &["NULL"],
    );
    case("SELECT n FROM by_probe WHERE probe = 1", vec![], &[]);
    for (tenant, day) in [("t0", 1), ("t1", 2), ("t2", 1)] {
        case(
            "SELECT * FROM by_tenant_day WHERE tenant = $1 AND day = $2",
            vec![
                Box::new(tenant),
                Box::new(NaiveDate::from_ymd_opt(2026, 1, day).unwrap()),
            ],
            &[&format!("'{tenant}'"), &format!("DATE '2026-01-0{day}'")],
        );
        case(
            "SELECT last, n FROM by_tenant_day WHERE day = $2 AND tenant = $1",
            vec![
                Box::new(tenant),
                Box::new(NaiveDate::from_ymd_opt(2026, 1, day).unwrap()),
            ],
            &[&format!("'{tenant}'"), &format!("DATE '2026-01-0{day}'")],
        );
    }
    // Literals of another type than the key column: only an exact value
    // of the column's type is looked up; the rest is planned, with SQL's
    // coercions (1.5 is no INT, and a cast would make it 1).
    for sql in [
        "SELECT n, ids FROM by_probe WHERE probe = 1.5",
        "SELECT n, ids FROM by_probe WHERE probe = 1.0",
        "SELECT n, ids FROM by_probe WHERE probe = '1'",
        "SELECT n, ids FROM by_probe WHERE probe = 99999999999",
        "SELECT n, ids FROM by_probe WHERE probe = -1",
        "SELECT n, ids FROM by_probe WHERE probe = CAST(1 AS BIGINT)",
        "SELECT n, ids FROM by_probe WHERE probe = CAST(2 AS SMALLINT)",
    ] {
        case(sql, vec![], &[]);
    }
    case(
        "SELECT n FROM by_tenant_day WHERE tenant = 't1' AND day = '2026-01-02'",
        vec![],
        &[],
    );
    case("SELECT n FROM by_amount WHERE amount = 1.50", vec![], &[]);
    case("SELECT n FROM by_amount WHERE amount = 1.5", vec![], &[]);
    case("SELECT n FROM by_amount WHERE amount = 1", vec![], &[]);
    case("SELECT n FROM by_amount WHERE amount = 0", vec![], &[]);
    for m in [0, 1, 2, 7] {
        case(
            "SELECT window_start, n FROM per_minute WHERE window_start = $1",
            vec![Box::new(at(m))],
            &[&format!("TIMESTAMP '2026-01-01 10:0{m}:00'")],
        );
    }
    out
}

/// A value of a result column as the simple protocol prints it.
fn text(row: &tokio_postgres::Row, i: usize) -> String {
    let t = row.columns()[i].type_().clone();
    let s = match t {
        Type::INT8 => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
        Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
        Type::TEXT => row.get::<_, Option<String>>(i),
        Type::DATE => row.get::<_, Option<NaiveDate>>(i).map(|v| v.to_string()),
        Type::TIMESTAMP => row
            .get::<_, Option<NaiveDateTime>>(i)
            .map(|v| v.format("%Y-%m-%d %H:%M:%S").to_string()),
        other => panic!("no text for {other}"),
    };
    s.unwrap_or_else(|| "NULL".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_answer_as_planned_queries_do() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    let cases = cases();
    let mut statements = Vec::new();
    for case in &cases {
        statements.push(c.prepare(case.sql).await.unwrap());
    }
    let mut matched = 0;
    for round in 0..5 {
        c.batch_execute(&round_sql(round)).await.unwrap();
        for (case, stmt) in cases.iter().zip(&statements) {
            let params: Vec<&(dyn ToSql + Sync)> =
                case.params.iter().map(|p| p.as_ref() as _).collect();
            let mut got: Vec<String> = c
                .query(stmt, &params)
                .await
                .unwrap_or_else(|e| panic!("{}: {e:?}", case.sql))
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| text(r, i))
                        .collect::<Vec<_>>()
                        .join("|")
                })
                .collect();
            // The literal query as a simple query (looked up too, when
            // it is a point read), and planned: a subquery is no point
            // read.
            let mut literal = text_rows(&c, &case.literal).await;
            let mut want =
                text_rows(&c, &format!("SELECT * FROM ({}) AS planned", case.literal)).await;
            got.sort();
            literal.sort();
            want.sort();
            assert_eq!(got, want, "round {round}: {} vs {}", case.sql, case.literal);
            assert_eq!(literal, want, "round {round}: {}", case.literal);
            matched += got.len();
        }
    }
    assert!(matched > 100, "the cases find rows: {matched}");

    // A prepared point read outlives neither a DROP nor a change of shape.
    let stmt = c
        .prepare("SELECT n FROM by_probe WHERE probe = $1")
        .await
        .unwrap();
    c.batch_execute(
        "DROP MATERIALIZED VIEW by_probe; \
         CREATE MATERIALIZED VIEW by_probe AS SELECT probe, COUNT(*) AS n FROM ev GROUP BY probe; FLUSH",
    )
    .await
    .unwrap();
    let e = c.query(&stmt, &[&1i32]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e:?}");
    c.batch_execute("DROP MATERIALIZED VIEW by_probe")
        .await
        .unwrap();
    let e = c.query(&stmt, &[&1i32]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "42P01", "{e:?}");
}

/// A keyed table read by its whole primary key is answered from where each
/// key's latest record is, kept by the table's writer. Its answers must
/// equal the planned query's through upserts, deletes, UPDATE, COPY,
/// ON CONFLICT DO NOTHING, transactions over two tables, compaction that
/// leaves holes where old versions were, and SIGKILL (the locations are
/// built again from the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_point_reads_equal_the_latest_rows() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--segment-bytes", "4000", "--tiering-interval-ms", "100"];
    let mut server = Server::start_with(dir.path(), &flags);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT, note TEXT) WITH (partitions = 2, delete_retention = '0s');
         CREATE TABLE pair (a INT, b TEXT, v BIGINT, PRIMARY KEY (a, b));",
    )
    .await
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        std::env::var("SLUICE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(7),
    );
    let key = |rng: &mut rand::rngs::StdRng| format!("k{}", rng.random_range(0..40));
    for round in 0..6 {
        let c = server.connect().await;
        for _ in 0..25 {
            let k = key(&mut rng);
            let v: i64 = rng.random_range(0..1000);
            let sql = match rng.random_range(0..9) {
                0 => format!("DELETE FROM kv WHERE k = '{k}'"),
                1 => format!("UPDATE kv SET v = v + 1 WHERE k = '{k}'"),
                2 => format!("INSERT INTO kv VALUES ('{k}', {v}, 'kept') ON CONFLICT DO NOTHING"),
                3 => format!(
                    "BEGIN; INSERT INTO kv VALUES ('{k}', {v}, 'tx'); INSERT INTO pair VALUES ({}, 'b{}', {v}); COMMIT",
                    v % 5,
                    v % 3
                ),
                4 => format!("DELETE FROM pair WHERE a = {}", v % 5),
                _ => format!("INSERT INTO kv VALUES ('{k}', {v}, NULL), ('{}', {v}, 'two')", key(&mut rng)),
            };
            c.batch_execute(&sql).await.unwrap();
        }
        let sink = c
            .copy_in::<_, bytes::Bytes>("COPY kv FROM STDIN")
            .await
            .unwrap();
        {
            use futures::SinkExt;
            let mut sink = Box::pin(sink);
            let rows: String = (0..5)
                .map(|_| format!("{}\t{}\tcopied\n", key(&mut rng), rng.random_range(0..1000)))
                .collect();
            sink.send(bytes::Bytes::from(rows)).await.unwrap();
            sink.as_mut().finish().await.unwrap();
        }
        if round % 2 == 1 {
            c.batch_execute("VACUUM kv").await.unwrap();
        }
        // Prepared after the writes of the first round: the locations are
        // built by the first read, then kept.
        let by_key = c
            .prepare("SELECT v, note FROM kv WHERE k = $1")
            .await
            .unwrap();
        let by_pair = c
            .prepare("SELECT * FROM pair WHERE b = $2 AND a = $1")
            .await
            .unwrap();
        let mut found = 0;
        for i in 0..40 {
            let k = format!("k{i}");
            let got: Vec<String> = c
                .query(&by_key, &[&k])
                .await
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{}|{}",
                        r.get::<_, i64>(0),
                        r.get::<_, Option<String>>(1).as_deref().unwrap_or("NULL")
                    )
                })
                .collect();
            let literal = format!("SELECT v, note FROM kv WHERE k = '{k}'");
            let simple = text_rows(&c, &literal).await;
            let planned = text_rows(&c, &format!("SELECT * FROM ({literal}) AS planned")).await;
            assert_eq!(got, planned, "round {round}: prepared read of {k}");
            assert_eq!(simple, planned, "round {round}: {literal}");
            found += got.len();
        }
        assert!(found > 10, "round {round}: the reads find rows ({found})");
        for a in 0..5i32 {
            for b in ["b0", "b1", "b2"] {
                let got: Vec<String> = c
                    .query(&by_pair, &[&a, &b])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| {
                        format!(
                            "{}|{}|{}",
                            r.get::<_, i32>(0),
                            r.get::<_, String>(1),
                            r.get::<_, i64>(2)
                        )
                    })
                    .collect();
                let planned = text_rows(
                    &c,
                    &format!(
                        "SELECT * FROM (SELECT * FROM pair WHERE a = {a} AND b = '{b}') AS planned"
                    ),
                )
                .await;
                assert_eq!(got, planned, "round {round}: pair ({a}, {b})");
            }
        }
        // Inside a block the read sees the block's own writes.
        c.batch_execute("BEGIN; INSERT INTO kv VALUES ('inside', 1, 'mine')")
            .await
            .unwrap();
        let mine: Vec<i64> = c
            .query(&by_key, &[&"inside"])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(mine, [1]);
        c.batch_execute("ROLLBACK").await.unwrap();
        assert!(c.query(&by_key, &[&"inside"]).await.unwrap().is_empty());
        if round % 3 == 2 {
            server.kill9();
            server.restart();
        }
    }
    // A table dropped and created again is not the table a statement was
    // prepared for.
    let c = server.connect().await;
    let stmt = c.prepare("SELECT v FROM kv WHERE k = $1").await.unwrap();
    c.batch_execute("DROP TABLE kv; CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT)")
        .await
        .unwrap();
    let e = c.query(&stmt, &[&"k1"]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e:?}");
}

/// A view read by literal keys keeps the plan of its text with the keys
/// taken out; a view dropped and created again with other columns is
/// planned anew, and a dropped one gives its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_point_reads_follow_views_dropped_and_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (tenant TEXT, n BIGINT);
         INSERT INTO ev VALUES ('a', 1), ('a', 2), ('b', 5);
         CREATE MATERIALIZED VIEW t AS SELECT tenant, sum(n) AS total FROM ev GROUP BY tenant; FLUSH",
    )
    .await
    .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM t WHERE tenant = 'a'").await,
        ["a|3"]
    );
    assert_eq!(
        text_rows(&c, "SELECT * FROM t WHERE tenant = 'b'").await,
        ["b|5"]
    );
    c.batch_execute(
        "DROP MATERIALIZED VIEW t;
         CREATE MATERIALIZED VIEW t AS SELECT tenant, count(*) AS rows, max(n) AS top FROM ev GROUP BY tenant; FLUSH",
    )
    .await
    .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM t WHERE tenant = 'a'").await,
        ["a|2|2"]
    );
    c.batch_execute("DROP MATERIALIZED VIEW t").await.unwrap();
    let e = c
        .simple_query("SELECT * FROM t WHERE tenant = 'a'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42P01", "{e:?}");
}

/// Reads by key beside concurrent writers: a writer's own read after its
/// INSERT is acknowledged sees that INSERT, and no reader sees a key's
/// value go back, while VACUUM rewrites the segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_point_reads_see_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--segment-bytes", "4000", "--tiering-interval-ms", "100"];
    let server = Server::start_with(dir.path(), &flags);
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE counters (k BIGINT PRIMARY KEY, v BIGINT) WITH (partitions = 3, delete_retention = '0s')")
        .await
        .unwrap();
    const KEYS_PER_WRITER: i64 = 5;
    const WRITES: i64 = 60;
    let mut tasks = Vec::new();
    for w in 0..3i64 {
        let writer = server.connect().await;
        let reader = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let insert = writer
                .prepare("INSERT INTO counters VALUES ($1, $2)")
                .await
                .unwrap();
            let read = reader
                .prepare("SELECT v FROM counters WHERE k = $1")
                .await
                .unwrap();
            for v in 1..=WRITES {
                let k = w * KEYS_PER_WRITER + v % KEYS_PER_WRITER;
                writer.execute(&insert, &[&k, &v]).await.unwrap();
                let seen: Vec<i64> = reader
                    .query(&read, &[&k])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                assert_eq!(seen, [v], "key {k} right after writing {v}");
            }
        }));
    }
    let reader = server.connect().await;
    let watcher = tokio::spawn(async move {
        let read = reader
            .prepare("SELECT v FROM counters WHERE k = $1")
            .await
            .unwrap();
        let mut last = std::collections::HashMap::new();
        for i in 0..600i64 {
            let k = i % (3 * KEYS_PER_WRITER);
            let rows = reader.query(&read, &[&k]).await.unwrap();
            if let Some(r) = rows.first() {
                let v: i64 = r.get(0);
                let before = last.insert(k, v).unwrap_or(0);
                assert!(v >= before, "key {k} went back from {before} to {v}");
            }
        }
    });
    let vacuum = server.connect().await;
    for _ in 0..5 {
        vacuum.batch_execute("VACUUM counters").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    watcher.await.unwrap();
}
