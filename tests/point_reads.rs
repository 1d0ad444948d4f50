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
    case("SELECT n FROM by_amount WHERE amount = 1.50", vec![], &[]);
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
            let mut want = text_rows(&c, &case.literal).await;
            got.sort();
            want.sort();
            assert_eq!(got, want, "round {round}: {} vs {}", case.sql, case.literal);
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
