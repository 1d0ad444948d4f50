//! The wrong answers of issue 46, one test each, every one checked against
//! PostgreSQL 15 running beside Sluice: the same statement on both, and
//! the answers compared by column names, type oids and typmods, values as
//! text, and SQLSTATEs.

mod common;

use common::differential::Oracle;
use common::raw_client::Answer;

/// Sluice and PostgreSQL holding the same small tables.
async fn oracle(dir: &std::path::Path) -> Oracle {
    let mut oracle = Oracle::start(dir).await;
    oracle
        .setup(
            "CREATE TABLE n1 (k INT, a TEXT);\n\
             CREATE TABLE n2 (k INT, b TEXT);\n\
             INSERT INTO n1 VALUES (1, 'x'), (2, 'y'), (NULL, 'z');\n\
             INSERT INTO n2 VALUES (1, 'p'), (NULL, 'q'), (3, 'r');\n\
             CREATE TABLE t (id INT, x DOUBLE PRECISION, y NUMERIC(12,3));\n\
             INSERT INTO t VALUES (1, 1.005, 2.5), (2, 2.345, 0.125), (3, -7.5, 10);",
            "WITH (partitions = 3)",
        )
        .await;
    oracle
}

/// Asserts each statement answers as in PostgreSQL.
async fn agree(sql: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = oracle(dir.path()).await;
    for q in sql {
        oracle.check(q).await;
    }
}

/// Creates `view` as `query` in Sluice, and compares it (after FLUSH) with
/// PostgreSQL's answer to the query.
async fn view_agrees(oracle: &mut Oracle, view: &str, query: &str) {
    let created = oracle
        .sluice(&format!("CREATE MATERIALIZED VIEW {view} AS {query}"))
        .await;
    assert!(
        !matches!(created, Answer::Error { .. }),
        "view {view} refused: {created:?}"
    );
    assert!(!matches!(
        oracle.sluice("FLUSH").await,
        Answer::Error { .. }
    ));
    if let Some(d) = oracle.view_differs(view, query).await {
        panic!("{d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn to_char_takes_postgresql_patterns_in_queries_and_views() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = oracle(dir.path()).await;
    oracle
        .check("SELECT to_char(DATE '2015-07-15', 'YYYY-MM-DD')")
        .await;
    oracle
        .setup(
            "CREATE TABLE d (day DATE);\nINSERT INTO d VALUES ('2015-07-15'), ('2026-01-31');",
            "",
        )
        .await;
    view_agrees(
        &mut oracle,
        "formatted",
        "SELECT to_char(day, 'YYYY-MM-DD') AS f, to_char(day, 'Dy DD Mon') AS g FROM d",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_minus_binds_tighter_than_power() {
    agree(&["SELECT -3 ^ 2", "SELECT - 2 ^ 2 * 3"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_compare_as_spans() {
    agree(&[
        "SELECT (TIMESTAMP '2023-08-10' - TIMESTAMP '2022-07-19') > INTERVAL '7 days'",
        "SELECT TIMESTAMP '2023-08-10' - TIMESTAMP '2022-07-19'",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlated_count_counts_each_row() {
    agree(&["SELECT a, (SELECT count(*) FROM n2 WHERE n2.k = n1.k) FROM n1 ORDER BY a"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scalar_subquery_of_two_rows_is_an_error() {
    agree(&["SELECT (SELECT k FROM n2 WHERE k IS NOT NULL)"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn natural_join_matches_the_visible_columns_only() {
    agree(&["SELECT * FROM n1 NATURAL JOIN n2"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_using_shows_the_key_once() {
    agree(&["SELECT * FROM n1 JOIN n2 USING (k) ORDER BY k"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_join_on_is_not_distinct_from_keeps_null_matches() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = oracle(dir.path()).await;
    view_agrees(
        &mut oracle,
        "null_safe",
        "SELECT n1.a, n2.b FROM n1 JOIN n2 ON n1.k IS NOT DISTINCT FROM n2.k",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_over_an_ordered_subquery_takes_its_first_rows() {
    agree(&["SELECT id FROM (SELECT id FROM t ORDER BY id DESC) q LIMIT 2"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decimal_literals_are_numeric() {
    agree(&[
        "SELECT round(y, 2), 1.00 * y, round(1.005, 2), 0.1 + 0.2 FROM t ORDER BY id",
        "SELECT round(x::numeric, 2) FROM t ORDER BY id",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statement_follows_a_table_dropped_and_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = Oracle::start(dir.path()).await;
    let sluice = oracle.server.connect().await;
    let (pg, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres", oracle.pg.port),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let rows = |r: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>| match r {
        Ok(rows) => Ok(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>()),
        Err(e) => Err(common::sqlstate(&e)),
    };
    for (who, c) in [("Sluice", &sluice), ("PostgreSQL", &pg)] {
        c.batch_execute("CREATE TABLE u (v INT); INSERT INTO u VALUES (1)")
            .await
            .unwrap();
        let read = c.prepare("SELECT v FROM u").await.unwrap();
        assert_eq!(rows(c.query(&read, &[]).await), Ok(vec![1]), "{who}");
        c.batch_execute("DROP TABLE u").await.unwrap();
        assert_eq!(
            rows(c.query(&read, &[]).await),
            Err("42P01".into()),
            "{who}: over the dropped table"
        );
        for round in [2, 3] {
            c.batch_execute(&format!(
                "CREATE TABLE u (v INT); INSERT INTO u VALUES ({round})"
            ))
            .await
            .unwrap();
            assert_eq!(
                rows(c.query(&read, &[]).await),
                Ok(vec![round]),
                "{who}: the table created again ({round})"
            );
            c.batch_execute("DROP TABLE u").await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_joining_a_global_aggregate_has_the_querys_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = Oracle::start(dir.path()).await;
    oracle
        .setup(
            "CREATE TABLE ev (id INT, k TEXT);\n\
             CREATE TABLE kv (id INT PRIMARY KEY, k TEXT);\n\
             INSERT INTO ev VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'a'), (5, 'c');\n\
             INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'b'), (4, 'c');",
            "WITH (partitions = 3)",
        )
        .await;
    let query = |t: &str| {
        format!(
            "SELECT a.k, a.n FROM (SELECT k, count(*) AS n FROM {t} GROUP BY k) a \
             JOIN (SELECT max(n) AS m FROM (SELECT k, count(id) AS n FROM {t} GROUP BY k) c) b \
             ON a.n = b.m"
        )
    };
    view_agrees(&mut oracle, "top_ev", &query("ev")).await;
    view_agrees(&mut oracle, "top_kv", &query("kv")).await;
    // The maximum moves: rows retract from both sides of the join.
    oracle
        .setup(
            "INSERT INTO ev VALUES (6, 'b'), (7, 'b'), (8, 'b');\n\
             UPDATE kv SET k = 'c' WHERE id = 2;\n\
             DELETE FROM kv WHERE id = 3;",
            "",
        )
        .await;
    assert!(!matches!(
        oracle.sluice("FLUSH").await,
        Answer::Error { .. }
    ));
    for (view, t) in [("top_ev", "ev"), ("top_kv", "kv")] {
        if let Some(d) = oracle.view_differs(view, &query(t)).await {
            panic!("{d}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytea_literals_are_bytes() {
    agree(&["SELECT '\\x0102'::bytea, length('\\x0102'::bytea), octet_length('\\x0102'::bytea)"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamptz_is_shown_in_utc_with_its_zone() {
    agree(&[
        "SELECT '2026-01-01 10:00:00+02'::timestamptz",
        "SELECT CAST('2026-01-01 10:00:00+02' AS timestamptz) = TIMESTAMPTZ '2026-01-01 08:00:00+00'",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_multiply_and_window_ranks_are_bigint() {
    agree(&[
        "SELECT 3 * INTERVAL '1 second', INTERVAL '1 day' * 1.5",
        "SELECT id, row_number() OVER (ORDER BY id), rank() OVER (ORDER BY id) FROM t ORDER BY id",
    ])
    .await;
}
