//! What tools beyond drivers send, one test per failure found trying them
//! (the tools' own scenarios are in `tests/drivers/`): dbt's comment
//! header before Sluice's own statements, pandas' `FLOAT(53)` columns,
//! connectorx's `COPY ... TO STDOUT WITH BINARY`, psql's `\d+`, the
//! catalog views tools read (`pg_tables`, `pg_matviews`, `pg_indexes`),
//! DuckDB's `ctid` ranges and exported snapshots; answers compared with
//! PostgreSQL 15's where it has the same statement.

mod common;

use common::differential::Oracle;
use common::Server;
use futures::TryStreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_tools_send_as_postgresql_takes_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    // dbt puts a comment before every statement it sends.
    c.batch_execute(
        "/* {\"app\": \"dbt\", \"node_id\": \"model.x\"} */
         CREATE TABLE m (id BIGINT, score FLOAT(53), ratio FLOAT(10), plain FLOAT);
         -- load
         INSERT INTO m VALUES (1, 0.5, 0.25, 2.5), (2, 1.5, 0.75, 3.5);
         /* refresh */ FLUSH;
         VACUUM /* keyed tables only */ m",
    )
    .await
    .map(|_| ())
    .or_else(|e| {
        // VACUUM of an append-only table is refused for what it is, not
        // for the comment.
        assert!(!e.to_string().contains("syntax"), "{e}");
        Ok::<(), tokio_postgres::Error>(())
    })
    .unwrap();
    // pandas' to_sql declares float64 columns FLOAT(53): double precision.
    let types: Vec<String> = c
        .query(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = 'm'::regclass AND attnum > 0 ORDER BY attnum",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        types,
        ["bigint", "double precision", "real", "double precision"]
    );
    // connectorx (polars) reads with the pre-9.0 spelling of binary COPY.
    let out: Vec<bytes::Bytes> = c
        .copy_out("COPY (SELECT id, score FROM m ORDER BY id) TO STDOUT WITH BINARY")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let data = out.concat();
    assert!(data.starts_with(b"PGCOPY\n\xff\r\n\0"), "{data:?}");
    // Two rows of two fields each, then the trailer.
    assert_eq!(
        &data[data.len() - 2..],
        &[0xff, 0xff],
        "the binary COPY trailer"
    );
}

/// knex sends every `.limit(n)` as `LIMIT $n` with the parameter's type
/// unspecified: PostgreSQL types it bigint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_limit_parameter_is_a_bigint() {
    use tokio_postgres::types::Type;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let st = c
        .prepare("SELECT x FROM generate_series(1, 5) x WHERE x > $1 ORDER BY x LIMIT $2 OFFSET $3")
        .await
        .unwrap();
    assert_eq!(st.params(), &[Type::INT4, Type::INT8, Type::INT8]);
    let rows: Vec<i32> = c
        .query(&st, &[&1i32, &2i64, &1i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, [3, 4]);
}

/// The catalog views tools decide by, and the functions psql's `\d+`
/// and DuckDB's ATTACH call, answer as PostgreSQL's do for the same
/// relations: a materialized view is in `pg_matviews`, not `pg_tables`
/// (dbt renamed it as a table), a primary key is in `pg_indexes` (DuckDB's
/// ATTACH failed on `relation "pg_indexes" does not exist`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_views_answer_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Oracle::start(dir.path()).await;
    o.setup(
        "CREATE TABLE ev (id BIGINT, name TEXT);
         CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT);
         CREATE TABLE pair (a BIGINT, b TEXT, c BIGINT, PRIMARY KEY (a, b));
         INSERT INTO ev VALUES (1, 'a'), (2, 'b'), (3, 'a');
         CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM ev GROUP BY name;
         CREATE VIEW named AS SELECT id FROM ev WHERE id > 1",
        "",
    )
    .await;
    o.sluice("FLUSH").await;
    for sql in [
        "SELECT schemaname, tablename, tablespace, hasindex, hasrules, hastriggers, rowsecurity \
         FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
        "SELECT schemaname, matviewname, tablespace, hasindexes, ispopulated \
         FROM pg_matviews ORDER BY matviewname",
        "SELECT schemaname, tablename, indexname, tablespace, indexdef FROM pg_indexes \
         WHERE schemaname = 'public' ORDER BY indexname",
        "SELECT schemaname, tablename, indexname FROM pg_catalog.pg_indexes \
         WHERE tablename = 'kv'",
        "SELECT viewname FROM pg_views WHERE schemaname = 'public'",
        // A view that PostgreSQL could update in place is not insertable here.
        "SELECT table_name, table_type, is_insertable_into, is_typed, commit_action, \
         user_defined_type_name FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
        "SELECT pg_is_in_recovery()",
        "SELECT count(*) FROM pg_stat_wal_receiver",
        "SELECT col_description('ev'::regclass, 1), obj_description('ev'::regclass, 'pg_class')",
        "SELECT pg_is_other_temp_schema(oid) FROM pg_namespace WHERE nspname = 'public'",
        "SELECT ARRAY(SELECT x FROM generate_series(1, 5) x WHERE x > 2 ORDER BY x DESC)",
        "SELECT ARRAY(SELECT name FROM ev WHERE id > 9)",
        "SELECT id, ARRAY(SELECT k FROM kv WHERE v = ev.id) FROM ev ORDER BY id",
        "SELECT x FROM unnest(ARRAY[3, 1, 2]) x ORDER BY x",
        "SELECT pg_get_function_result(oid), pg_get_function_arguments(oid) FROM pg_proc \
         WHERE proname IN ('abs', 'now', 'concat') ORDER BY 1, 2",
    ] {
        if let Some(d) = o.differs(sql).await {
            panic!("{sql}\n{d}");
        }
    }
    // What each view says of the materialized view's query.
    let definition = o
        .sluice("SELECT definition FROM pg_matviews WHERE matviewname = 'mv'")
        .await;
    assert!(
        format!("{definition:?}").contains("count(*)"),
        "{definition:?}"
    );
    // psql's \d+ (ARRAY(subquery) over pg_class.reloptions) of each kind.
    let (ok, out, err) = o.server.psql(
        "\\d+ ev\n\\d+ mv\n\\d+ kv\n\\dn\n\\l\n\\du\n\\dm\n\\di\n\\df\n\\df abs\n\\d+ named\n",
    );
    assert!(ok, "{out}\n{err}");
    for expected in [
        "Table \"public.ev\"",
        "Materialized view \"public.mv\"",
        "\"kv_pkey\" PRIMARY KEY, btree (k)",
        "List of schemas",
        "List of databases",
        "List of roles",
        "List of functions",
        "pg_catalog | abs  | bigint           | bigint",
        "View \"public.named\"",
        "View definition:\nSELECT id FROM ev WHERE id > 1",
    ] {
        assert!(out.contains(expected), "{expected} in:\n{out}");
    }
}

/// A scan split by `ctid` ranges (DuckDB's parallel scan) reads every row
/// once, however the ranges are cut: `pg_class.relpages` counts the
/// blocks the ranges number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctid_ranges_cover_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE big (x BIGINT) WITH (partitions = 3);
         INSERT INTO big SELECT x FROM generate_series(1, 10000) x;
         CREATE TABLE k (id BIGINT PRIMARY KEY, v TEXT);
         INSERT INTO k VALUES (1, 'a'), (2, 'b');
         CREATE MATERIALIZED VIEW per AS SELECT x % 7 AS m, count(*) AS n FROM big GROUP BY x % 7;
         FLUSH",
    )
    .await
    .unwrap();
    let pages: i32 = c
        .query_one("SELECT relpages FROM pg_class WHERE relname = 'big'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(pages >= 3, "{pages}");
    let count = |sql: String| {
        let c = &c;
        async move {
            let row = c.query_one(&sql, &[]).await.unwrap();
            (row.get::<_, i64>(0), row.get::<_, Option<i64>>(1))
        }
    };
    for cut in [1, 2, 3] {
        let mut bounds: Vec<i64> = (0..=pages as i64).step_by(cut).collect();
        bounds.push(4294967295);
        let mut rows = 0;
        let mut sum = 0;
        for w in bounds.windows(2) {
            let (n, s) = count(format!(
                "SELECT count(*), sum(x) FROM big WHERE ctid BETWEEN '({},0)'::tid AND '({},0)'::tid",
                w[0], w[1]
            ))
            .await;
            rows += n;
            sum += s.unwrap_or(0);
        }
        assert_eq!((rows, sum), (10000, 10000 * 10001 / 2), "blocks of {cut}");
    }
    // A keyed table and a view: every row in the range holding (0,1).
    for (relation, all) in [("k", 2), ("per", 7)] {
        let (n, _) = count(format!(
            "SELECT count(*), NULL::bigint FROM {relation} \
             WHERE ctid BETWEEN '(0,0)'::tid AND '(4294967295,0)'::tid"
        ))
        .await;
        assert_eq!(n, all, "{relation}");
        let (n, _) = count(format!(
            "SELECT count(*), NULL::bigint FROM {relation} \
             WHERE ctid BETWEEN '(1,0)'::tid AND '(4294967295,0)'::tid"
        ))
        .await;
        assert_eq!(n, 0, "{relation}");
    }
}

/// `pg_export_snapshot()` names a transaction's snapshot; another session's
/// REPEATABLE READ block reads exactly it with `SET TRANSACTION SNAPSHOT`,
/// whatever was committed since, while the exporter's block is open.
/// Misuse fails with PostgreSQL's SQLSTATEs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_snapshot_is_read_by_other_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Oracle::start(dir.path()).await;
    let (exporter, writer, reader) = (
        o.server.connect().await,
        o.server.connect().await,
        o.server.connect().await,
    );
    exporter
        .batch_execute(
            "CREATE TABLE t (x BIGINT) WITH (partitions = 2);
             INSERT INTO t SELECT x FROM generate_series(1, 100) x",
        )
        .await
        .unwrap();
    exporter
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .unwrap();
    let id: String = exporter
        .query_one("SELECT pg_export_snapshot()", &[])
        .await
        .unwrap()
        .get(0);
    writer
        .batch_execute("INSERT INTO t SELECT x FROM generate_series(101, 150) x")
        .await
        .unwrap();
    reader
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{id}'"
        ))
        .await
        .unwrap();
    let seen: i64 = reader
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(seen, 100);
    reader.batch_execute("COMMIT").await.unwrap();
    let now: i64 = reader
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(now, 150);
    // Misuse, against PostgreSQL: outside a block, an unknown id, after a
    // query, at READ COMMITTED.
    for script in [
        "SET TRANSACTION SNAPSHOT '00000003-00000099-1'",
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT 'nope'",
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1; SET TRANSACTION SNAPSHOT 'nope'",
        "BEGIN; SET TRANSACTION SNAPSHOT 'nope'",
    ] {
        let mut codes = Vec::new();
        for (who, client) in [("Sluice", &mut o.sluice), ("PostgreSQL", &mut o.postgres)] {
            let _ = client.one("ROLLBACK").await;
            let mut last = None;
            for stmt in script.split("; ") {
                last = Some(client.one(stmt).await.expect("answers"));
            }
            match last {
                Some(common::raw_client::Answer::Error { sqlstate, message }) => {
                    codes.push((sqlstate, message))
                }
                other => panic!("{who}: {script}: {other:?}"),
            }
            let _ = client.one("ROLLBACK").await;
        }
        assert_eq!(codes[0].0, codes[1].0, "{script}: {codes:?}");
    }
    // The id is gone once the exporter's block ends.
    exporter.batch_execute("COMMIT").await.unwrap();
    reader
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let gone = reader
        .batch_execute(&format!("SET TRANSACTION SNAPSHOT '{id}'"))
        .await
        .unwrap_err();
    assert_eq!(gone.code().map(|c| c.code()), Some("22023"));
}

/// A binary COPY of JSONB writes its version byte, as PostgreSQL's does
/// (DuckDB's ATTACH failed with "JSONB version number mismatch").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_copy_of_jsonb_has_its_version_byte() {
    use tokio_postgres::binary_copy::BinaryCopyOutStream;
    use tokio_postgres::types::Type;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE j (id BIGINT, doc JSONB); INSERT INTO j VALUES (1, '{\"k\": [1, 2]}')",
    )
    .await
    .unwrap();
    let stream = c
        .copy_out("COPY (SELECT id, doc FROM j) TO STDOUT (FORMAT binary)")
        .await
        .unwrap();
    let rows: Vec<_> = BinaryCopyOutStream::new(stream, &[Type::INT8, Type::JSONB])
        .try_collect()
        .await
        .unwrap();
    let doc: serde_json::Value = rows[0].get(1);
    assert_eq!(doc, serde_json::json!({"k": [1, 2]}));
}

/// What dbt's `view`, `table` and `materialized_view` models send:
/// `CREATE VIEW`, `CREATE TABLE ... AS`, `ALTER ... RENAME TO`, `DROP
/// VIEW`, `REFRESH MATERIALIZED VIEW` (each refused before), answered as
/// PostgreSQL answers them, errors' SQLSTATEs included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_tables_as_renames_and_refresh_answer_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Oracle::start(dir.path()).await;
    o.setup(
        "CREATE TABLE ev (id BIGINT, name TEXT, amount NUMERIC(12,3));
         INSERT INTO ev VALUES (1, 'a', 1.5), (2, 'b', 2.25), (3, 'a', 4);
         CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM ev GROUP BY name",
        "",
    )
    .await;
    for sql in [
        "CREATE VIEW v AS SELECT name, count(*), sum(amount) AS total FROM ev GROUP BY name",
        "SELECT * FROM v ORDER BY name",
        "CREATE VIEW v2 (n, c) AS SELECT name, count FROM v WHERE count > 1",
        "SELECT * FROM v2",
        "SELECT n FROM v2 JOIN ev ON ev.name = v2.n ORDER BY ev.id",
        "CREATE VIEW v AS SELECT 1",
        "CREATE OR REPLACE VIEW v AS SELECT name FROM ev",
        "CREATE OR REPLACE VIEW v AS SELECT name AS other, count(*), sum(amount) AS total FROM ev GROUP BY name",
        "CREATE OR REPLACE VIEW v AS SELECT name, count(*), sum(amount) AS total, max(id) AS top FROM ev GROUP BY name",
        "SELECT * FROM v ORDER BY name",
        "DROP VIEW v",
        "DROP VIEW ev",
        "DROP VIEW nope",
        "DROP VIEW IF EXISTS nope",
        "SELECT viewname, definition IS NOT NULL FROM pg_views WHERE schemaname = 'public' ORDER BY 1",
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
        "CREATE TABLE t2 AS SELECT id, name, amount * 2 AS dbl FROM ev WHERE id > 1",
        // A computed numeric column is declared numeric(p,s) with the
        // result's precision and scale (PostgreSQL: unconstrained, each
        // value keeping its scale): the values are the same.
        "SELECT id, name, CAST(dbl AS TEXT) FROM t2 ORDER BY id",
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 't2' ORDER BY ordinal_position",
        "CREATE TABLE t2 AS SELECT 1 AS x",
        "CREATE TABLE t5 (a, b) AS SELECT id, name FROM ev WHERE id = 1",
        "SELECT a, b FROM t5",
        "CREATE TABLE t6 (a, b, c) AS SELECT id FROM ev",
        "ALTER TABLE t2 RENAME TO t3",
        "SELECT id, name, CAST(dbl AS TEXT) FROM t3 ORDER BY id",
        "INSERT INTO t3 VALUES (9, 'z', 1)",
        "SELECT count(*) FROM t3",
        "SELECT * FROM t2",
        "ALTER VIEW t3 RENAME TO t4",
        "ALTER MATERIALIZED VIEW t3 RENAME TO t4",
        "ALTER TABLE v2 RENAME TO v4",
        "SELECT * FROM v4",
        "ALTER VIEW v4 RENAME TO v5",
        "SELECT * FROM v5",
        "ALTER TABLE nope RENAME TO x",
        "ALTER TABLE IF EXISTS nope RENAME TO x",
        "ALTER TABLE t3 RENAME TO ev",
        "DROP VIEW v, v5",
        "INSERT INTO ev VALUES (4, 'c', 1)",
        "REFRESH MATERIALIZED VIEW mv",
        "SELECT * FROM mv ORDER BY name",
        "REFRESH MATERIALIZED VIEW t3",
        "REFRESH MATERIALIZED VIEW nope",
    ] {
        if let Some(d) = o.differs(sql).await {
            panic!("{sql}\n{d}");
        }
    }
}

/// What dbt's runs leave (a table made by CREATE TABLE AS and renamed, a
/// view over it, a refreshed materialized view) survives SIGKILL: the
/// renamed table keeps its rows and takes new ones under its new name, the
/// view is planned again after the restart, the old names are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_tables_and_views_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE src (id BIGINT, name TEXT) WITH (partitions = 2);
         INSERT INTO src SELECT x, 'n' || (x % 3) FROM generate_series(1, 100) x;
         CREATE TABLE m__tmp WITH (primary_key = 'name') AS
             SELECT name, count(*) AS n FROM src GROUP BY name;
         ALTER TABLE m__tmp RENAME TO m;
         CREATE VIEW big_names AS SELECT name FROM m WHERE n > 33;
         CREATE MATERIALIZED VIEW per AS SELECT name, count(*) AS n FROM src GROUP BY name;
         INSERT INTO src VALUES (101, 'n9');
         REFRESH MATERIALIZED VIEW per;
         INSERT INTO m VALUES ('z', 1)",
    )
    .await
    .unwrap();
    drop(c);
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    let rows = |sql: &'static str| {
        let c = &c;
        async move {
            c.query(sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| format!("{}|{}", r.get::<_, String>(0), r.get::<_, i64>(1)))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        rows("SELECT name, n FROM m ORDER BY name").await,
        ["n0|33", "n1|34", "n2|33", "z|1"]
    );
    let names: Vec<String> = c
        .query("SELECT name FROM big_names", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names, ["n1"]);
    assert!(rows("SELECT name, n FROM per ORDER BY name")
        .await
        .contains(&"n9|1".to_string()));
    let gone = c.query("SELECT * FROM m__tmp", &[]).await.unwrap_err();
    assert_eq!(gone.code().map(|c| c.code()), Some("42P01"));
    c.batch_execute("INSERT INTO m VALUES ('z', 2)")
        .await
        .unwrap();
    assert_eq!(
        rows("SELECT name, n FROM m WHERE name = 'z'").await,
        ["z|2"]
    );
}

/// `CREATE INDEX` on a table, a keyed table and a materialized view: reads
/// filtered by the indexed columns (equalities, `IN`, ranges, a range after
/// an equality) answer as PostgreSQL's do, through the index (its scans
/// count them); `pg_indexes` lists the indexes as PostgreSQL does; errors
/// carry PostgreSQL's SQLSTATEs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_answer_filtered_reads_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Oracle::start(dir.path()).await;
    o.setup(
        "CREATE TABLE ev (id BIGINT, user_id TEXT, amount NUMERIC(10,2), at TIMESTAMPTZ, flag BOOLEAN);
         INSERT INTO ev SELECT g, 'u' || (g % 50), g * 1.5,
             TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 minute', g % 3 = 0
             FROM generate_series(1, 5000) g;
         CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT, city TEXT);
         INSERT INTO users SELECT g, 'n' || g, 'c' || (g % 7) FROM generate_series(1, 500) g;
         CREATE MATERIALIZED VIEW per_user AS
             SELECT user_id, count(*) AS n, sum(amount) AS total FROM ev GROUP BY user_id",
        "",
    )
    .await;
    for sql in [
        "CREATE INDEX ON ev (user_id)",
        "CREATE INDEX ev_at_id ON ev (at, id)",
        "CREATE INDEX users_city ON users USING btree (city)",
        "CREATE INDEX per_user_n ON per_user (n, user_id)",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ev_flag ON ev (flag DESC)",
        "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
        "SELECT count(*), sum(amount) FROM ev WHERE user_id = 'u7'",
        "SELECT count(*) FROM ev WHERE user_id IN ('u1', 'u2', 'nobody')",
        "SELECT id FROM ev WHERE at >= '2026-01-02 00:00:00+00' AND at < '2026-01-02 01:00:00+00' ORDER BY id",
        "SELECT count(*) FROM ev WHERE at > TIMESTAMPTZ '2026-01-04 10:00:00+00'",
        "SELECT count(*) FROM ev WHERE at <= '2026-01-01 02:00:00+00'",
        "SELECT count(*) FROM ev WHERE at BETWEEN '2026-01-03 00:00:00+00' AND '2026-01-03 00:30:00+00'",
        "SELECT * FROM ev WHERE at = '2026-01-01 00:10:00+00' AND id = 10",
        "SELECT id FROM ev WHERE at = '2026-01-01 00:10:00+00' AND id > 10",
        "SELECT count(*) FROM ev WHERE user_id = 'u7' AND id < 1000",
        "SELECT count(*) FROM ev WHERE flag AND user_id = 'u9'",
        "SELECT e.id, u.name FROM ev e JOIN users u ON u.id = e.id WHERE e.user_id = 'u3' ORDER BY e.id",
        "INSERT INTO ev VALUES (9999, 'u7', 1, now(), true)",
        "SELECT count(*), sum(amount) FROM ev WHERE user_id = 'u7'",
        "SELECT id FROM users WHERE city = 'c3' ORDER BY id",
        "UPDATE users SET city = 'c3' WHERE id IN (1, 2)",
        "DELETE FROM users WHERE id = 3",
        "INSERT INTO users VALUES (1000, 'new', 'c3')",
        "SELECT id, name FROM users WHERE city = 'c3' ORDER BY id",
        "SELECT count(*) FROM users WHERE city IN ('c1', 'c2')",
        "REFRESH MATERIALIZED VIEW per_user",
        "SELECT * FROM per_user WHERE n >= 101 ORDER BY user_id",
        "SELECT user_id FROM per_user WHERE n = 100 AND user_id < 'u20' ORDER BY 1",
        "CREATE INDEX ev_user_id_idx ON ev (id)",
        "CREATE INDEX IF NOT EXISTS ev_user_id_idx ON ev (id)",
        "CREATE INDEX bad ON ev (nosuch)",
        "CREATE INDEX bad ON nosuch (a)",
        "DROP INDEX nosuch",
        "DROP INDEX IF EXISTS nosuch",
        "DROP INDEX users_pkey",
        "CREATE INDEX ev_amount ON ev (amount)",
        "SELECT count(*) FROM ev WHERE amount > 7000",
        "DROP INDEX ev_at_id, ev_amount",
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    ] {
        if let Some(d) = o.differs(sql).await {
            panic!("{sql}\n{d}");
        }
    }
    // The reads went through the indexes.
    let c = o.server.connect().await;
    for (index, at_least) in [("ev_user_id_idx", 5), ("users_city", 3), ("per_user_n", 2)] {
        let scans: i64 = c
            .query_one(
                "SELECT scans FROM sluice_catalog.indexes WHERE index_name = $1",
                &[&index],
            )
            .await
            .unwrap()
            .get(0);
        assert!(scans >= at_least, "{index}: {scans} scans");
    }
    // What Sluice's indexes do not do, refused with a reason.
    for (sql, code) in [
        ("CREATE UNIQUE INDEX u ON ev (id)", "0A000"),
        ("CREATE INDEX e ON ev ((id + 1))", "0A000"),
        ("CREATE INDEX p ON ev (id) WHERE flag", "0A000"),
        ("CREATE INDEX g ON ev USING gin (user_id)", "0A000"),
        ("CREATE VIEW plain AS SELECT 1 AS x", ""),
        ("CREATE INDEX v ON plain (x)", "42809"),
    ] {
        match c.batch_execute(sql).await {
            Ok(()) => assert!(code.is_empty(), "{sql} was taken"),
            Err(e) => assert_eq!(e.code().map(|c| c.code()), Some(code), "{sql}: {e}"),
        }
    }
}

/// An index is rebuilt from the log after SIGKILL by the first read that
/// uses it, then keeps up with new rows; dropping its table drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_survive_sigkill_and_follow_new_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, user_id TEXT) WITH (partitions = 3);
         INSERT INTO ev SELECT g, 'u' || (g % 10) FROM generate_series(1, 1000) g;
         CREATE INDEX ev_user ON ev (user_id)",
    )
    .await
    .unwrap();
    drop(c);
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    assert_eq!(index_built_and_scans(&c, "ev_user").await, (false, 0));
    assert_eq!(count_of_user(&c, "u3").await, 100);
    assert_eq!(index_built_and_scans(&c, "ev_user").await, (true, 1));
    c.batch_execute("INSERT INTO ev VALUES (1001, 'u3'), (1002, 'new')")
        .await
        .unwrap();
    assert_eq!(count_of_user(&c, "u3").await, 101);
    assert_eq!(count_of_user(&c, "new").await, 1);
    c.batch_execute("DROP TABLE ev; CREATE TABLE ev (id BIGINT, user_id TEXT)")
        .await
        .unwrap();
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'ev_user'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

async fn index_built_and_scans(c: &tokio_postgres::Client, index: &str) -> (bool, i64) {
    let r = c
        .query_one(
            "SELECT built, scans FROM sluice_catalog.indexes WHERE index_name = $1",
            &[&index],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

async fn count_of_user(c: &tokio_postgres::Client, user: &str) -> i64 {
    c.query_one("SELECT count(*) FROM ev WHERE user_id = $1", &[&user])
        .await
        .unwrap()
        .get(0)
}

/// `pg_proc`, `pg_type`, `pg_operator` and `pg_aggregate` list what Sluice
/// has: functions its planner knows, over types it has; every type a
/// function or operator names is in `pg_type`, by its name; and sqlsmith's
/// catalog queries (a correlated scalar subquery in the select list,
/// `unnest(proargtypes)`, `prorettype::regtype::text`) answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routine_catalog_lists_what_sluice_has() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let count = |sql: &'static str| {
        let c = &c;
        async move {
            c.query_one(sql, &[])
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        count("SELECT count(DISTINCT proname) FROM pg_proc WHERE proname IN ('upper', 'abs', 'count', 'sum', 'date_trunc', 'jsonb_build_object')").await,
        6
    );
    // PostgreSQL's functions Sluice does not have are not listed.
    assert_eq!(
        count("SELECT count(*) FROM pg_proc WHERE proname IN ('boolin', 'pg_advisory_lock', 'xmlagg', 'ts_rank', 'gen_random_uuid', 'txid_current')").await,
        0
    );
    for dangling in [
        "SELECT count(*) FROM pg_proc p LEFT JOIN pg_type t ON t.oid = p.prorettype WHERE t.oid IS NULL",
        "SELECT count(*) FROM (SELECT unnest(proargtypes) AS a FROM pg_proc) x LEFT JOIN pg_type t ON t.oid = x.a WHERE t.oid IS NULL",
        "SELECT count(*) FROM pg_operator o LEFT JOIN pg_type t ON t.oid = o.oprresult WHERE t.oid IS NULL",
        "SELECT count(*) FROM pg_proc WHERE prorettype::regtype::text ~ '^[0-9]+$' OR prorettype::regtype::text = 'unknown'",
        "SELECT count(*) FROM pg_type WHERE typname IN ('xml', 'uuid', 'tsvector', 'point', 'money')",
        "SELECT count(*) FROM pg_aggregate a LEFT JOIN pg_proc p ON p.proname = regexp_replace(CAST(a.aggfnoid AS TEXT), '^pg_catalog[.]', '') AND p.prokind = 'a' WHERE p.proname IS NULL",
    ] {
        assert_eq!(
            c.query_one(dangling, &[]).await.unwrap().get::<_, i64>(0),
            0,
            "{dangling}"
        );
    }
    assert!(count("SELECT count(*) FROM pg_aggregate").await > 0);
    assert_eq!(
        count("SELECT count(*) FROM pg_operator WHERE oprname = '~~' AND oprleft = 25 AND oprright = 25").await,
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM pg_operator WHERE oprname = '<->'").await,
        0
    );
    // sqlsmith's query of the functions, as it sends it.
    let routines = c
        .query(
            "select (select nspname from pg_namespace where oid = pronamespace), oid, prorettype, proname \
             from pg_proc \
             where prorettype::regtype::text not in ('event_trigger', 'trigger', 'opaque', 'internal') \
             and proname <> 'pg_event_trigger_table_rewrite_reason' \
             and proname !~ '^ri_fkey_' \
             and not (proretset or prokind = 'a' or prokind = 'w')",
            &[],
        )
        .await
        .unwrap();
    assert!(routines.len() > 100, "{} routines", routines.len());
    assert!(routines
        .iter()
        .all(|r| r.get::<_, Option<String>>(0).is_some()));
    let upper: Vec<i32> = c
        .query(
            "SELECT unnest(proargtypes) FROM pg_proc WHERE proname = 'upper'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(upper, [25]);
}

/// `oids::regtype[]` names each type, as `\df`-like tools and sqlsmith's
/// kin read function signatures (`array_to_string(proargtypes::regtype[],
/// ', ')`), described as `regtype[]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regtype_arrays_answer_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Oracle::start(dir.path()).await;
    for sql in [
        // (The array itself prints as `{text,integer}` here, `[0:1]=...` in
        // PostgreSQL, whose oidvector counts from 0.)
        "SELECT proname, array_length(proargtypes::regtype[], 1) FROM pg_proc WHERE proname = 'left'",
        "SELECT array_to_string(proargtypes::regtype[], ', ') FROM pg_proc WHERE proname IN ('left', 'strpos') ORDER BY 1",
        "SELECT format('%s(%s)', proname, array_to_string(proargtypes::regtype[], ', ')) FROM pg_proc WHERE proname = 'lpad' ORDER BY 1",
    ] {
        if let Some(d) = o.differs(sql).await {
            panic!("{sql}\n{d}");
        }
    }
}
