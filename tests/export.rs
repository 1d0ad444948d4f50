//! `COPY ... TO`: text and CSV to the client, Parquet to a path or S3 that
//! other engines (DuckDB here) read back.

mod common;

use common::s3::S3Server;
use common::{sqlstate, Server};
use futures::TryStreamExt;

const SETUP: &str = "CREATE TABLE t (id BIGINT, name TEXT, at TIMESTAMP) APPEND ONLY WITH (partitions = 2, partition_key = 'id');
INSERT INTO t VALUES (1, 'a,b', '2026-01-01 00:00:00'), (2, NULL, '2026-01-01 00:00:01'), (3, 'tab\tx', NULL);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stdout_as_csv_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    let (ok, out, err) = server.psql(
        "COPY (SELECT id, name, _partition, _offset FROM t ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER);\n",
    );
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "id,name,_partition,_offset");
    assert_eq!(lines.len(), 4);
    assert!(lines[1].starts_with("1,\"a,b\","), "{out}");
    assert!(lines[2].starts_with("2,,"), "NULL is empty in CSV: {out}");

    // Text format through a driver's COPY OUT.
    let stream = c
        .copy_out("COPY (SELECT id, name FROM t ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let text: String = chunks
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert_eq!(text, "1\ta,b\n2\t\\N\n3\ttab\\tx\n");

    // A table by name, all its columns (no hidden ones).
    let (ok, out, _) = server.psql("COPY t TO STDOUT;\n");
    assert!(ok);
    assert_eq!(out.lines().count(), 3);
    assert_eq!(out.lines().next().map(|l| l.split('\t').count()), Some(3));

    for (sql, state) in [
        ("COPY t TO STDOUT WITH (FORMAT parquet)", "0A000"),
        ("COPY t TO '/tmp/x.csv' WITH (FORMAT csv)", "0A000"),
        ("COPY (SELECT nope FROM t) TO STDOUT", "42703"),
        ("COPY missing TO STDOUT", "42P01"),
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
    }
}

/// Reads a Parquet file with DuckDB: (rows, sum of id, max _offset).
fn duckdb_summary(path: &std::path::Path) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, duckdb; r = duckdb.sql(f\"SELECT COUNT(*), SUM(id), MAX(_offset), MIN(_partition) FROM '{sys.argv[1]}'\").fetchall()[0]; print(*r)",
        ])
        .arg(path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "DuckDB (pip install duckdb) reads the file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_parquet_keeps_offsets_and_duckdb_reads_it() {
    let s3 = S3Server::start("sluice-export");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_env(dir.path(), &[], &s3.env());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    c.batch_execute(
        "INSERT INTO t SELECT value, 'more', NULL FROM generate_series(10, 1009) AS s(value)",
    )
    .await
    .unwrap();
    let path = dir.path().join("export/usage.parquet");
    let n = c
        .execute(
            &format!(
                "COPY (SELECT _partition, _offset, * FROM t) TO '{}' WITH (FORMAT parquet)",
                path.display()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 1003);
    let expected_max = c
        .query_one("SELECT MAX(_offset) FROM t", &[])
        .await
        .unwrap()
        .get::<_, i64>(0);
    let sum: i64 = 1 + 2 + 3 + (10..=1009).sum::<i64>();
    assert_eq!(
        duckdb_summary(&path),
        format!("1003 {sum} {expected_max} 0")
    );

    // The same to S3.
    let n = c
        .execute(
            "COPY (SELECT _partition, _offset, id FROM t WHERE id < 100) TO 's3://sluice-export/out/small.parquet' WITH (FORMAT parquet)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 93);
    assert_eq!(s3.keys("out/"), vec!["out/small.parquet".to_string()]);
}
