//! What tools beyond drivers send, one test per failure found trying them
//! (the tools' own scenarios come with the tools issue): dbt's comment
//! header before Sluice's own statements, pandas' `FLOAT(53)` columns,
//! and connectorx's `COPY ... TO STDOUT WITH BINARY`.

mod common;

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
