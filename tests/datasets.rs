//! Datasets: versions pinned to cuts of the log, exported as Parquet with
//! a manifest, verified against the log. Two exports of one version are
//! the same bytes; a version verifies after more writes, a new version and
//! SIGKILL; a split key's rows are in one part and stay there; DuckDB reads
//! the file back to the rows the version holds. `examples/eval_dataset.py`
//! runs against a server as a user would run it.

mod common;

use std::process::Command;

use common::{python_has, run_client, sqlstate, text_rows, Server};

/// VERIFY through the extended protocol (its row described when it is
/// prepared) and the simple one.
async fn verified(c: &tokio_postgres::Client, version: u32) -> bool {
    let sql = format!("VERIFY DATASET evals VERSION {version}");
    let simple = text_rows(c, &sql).await[0].ends_with("|t");
    let rows = c.query(&sql, &[]).await.unwrap();
    let extended: bool = rows[0].get("verified");
    assert_eq!(simple, extended);
    extended
}

async fn log_requests(c: &tokio_postgres::Client, from: i64, to: i64) {
    c.batch_execute(&format!(
        "INSERT INTO requests SELECT i, 'user_' || (i % 41), 'prompt ' || i, i % 5 \
         FROM generate_series({from}, {to}) i"
    ))
    .await
    .unwrap();
}

/// Each user's split part in an exported file, read by DuckDB.
fn parts_by_duckdb(path: &str) -> Vec<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            &format!(
                "import duckdb\n\
                 for u, s, n in duckdb.sql(\"SELECT user_id, min(split), count(DISTINCT split) FROM '{path}' GROUP BY 1 ORDER BY 1\").fetchall():\n\
                 \x20   print(f'{{u}}|{{s}}|{{n}}')"
            ),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_versions_export_the_same_bytes_and_verify_through_writes_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE requests (id BIGINT, user_id TEXT, prompt TEXT, score INT)
             APPEND ONLY WITH (partitions = 3, partition_key = 'user_id');
         CREATE MATERIALIZED VIEW per_user AS SELECT user_id, count(*) AS asked FROM requests GROUP BY user_id;",
    )
    .await
    .unwrap();
    log_requests(&c, 0, 1999).await;
    c.batch_execute(
        "CREATE DATASET evals AS
           SELECT r.id, r.user_id, r.prompt, p.asked FROM requests r JOIN per_user p ON r.user_id = p.user_id
           WHERE r.score >= 1
         WITH (split = 'train 80, validation 10, test 10', split_key = 'user_id', seed = 7)",
    )
    .await
    .unwrap();
    log_requests(&c, 2000, 2999).await;
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let path = |name: &str| out.join(name).to_string_lossy().into_owned();
    for name in ["a.parquet", "b.parquet"] {
        c.batch_execute(&format!(
            "COPY DATASET evals VERSION 1 TO '{}' WITH (FORMAT parquet)",
            path(name)
        ))
        .await
        .unwrap();
    }
    let a = std::fs::read(path("a.parquet")).unwrap();
    assert_eq!(
        a,
        std::fs::read(path("b.parquet")).unwrap(),
        "one version, one file"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path("a.parquet.manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["rows"], 1600, "{manifest}");
    assert_eq!(manifest["cut"]["tables"][0]["table"], "requests");
    assert!(verified(&c, 1).await);

    // The version holds the rows at its cut, and the view as it was there.
    let asked = text_rows(&c, "SELECT max(asked) FROM per_user AS OF CUT \"evals@1\"").await;
    assert_eq!(asked, ["49"]);

    // A second version; the first still verifies and exports the same.
    c.batch_execute("REFRESH DATASET evals").await.unwrap();
    let versions = text_rows(
        &c,
        "SELECT version, rows FROM sluice_catalog.dataset_versions ORDER BY version",
    )
    .await;
    assert_eq!(versions, ["1|1600", "2|2400"]);
    c.batch_execute(&format!("COPY DATASET evals TO '{}'", path("v2.parquet")))
        .await
        .unwrap();
    assert!(verified(&c, 1).await && verified(&c, 2).await);

    // SIGKILL: versions and their cuts are durable.
    drop(c);
    server.kill9();
    server.restart();
    let c = server.connect().await;
    log_requests(&c, 3000, 3099).await;
    assert!(verified(&c, 1).await && verified(&c, 2).await);
    c.batch_execute(&format!(
        "COPY DATASET evals VERSION 1 TO '{}'",
        path("c.parquet")
    ))
    .await
    .unwrap();
    assert_eq!(
        a,
        std::fs::read(path("c.parquet")).unwrap(),
        "after SIGKILL too"
    );
    // To a directory that exists: the version's file in it, manifest
    // beside (before: 58030 "Is a directory").
    let into = out.join("into");
    std::fs::create_dir_all(&into).unwrap();
    c.batch_execute(&format!(
        "COPY DATASET evals VERSION 1 TO '{}'",
        into.display()
    ))
    .await
    .unwrap();
    assert_eq!(a, std::fs::read(into.join("evals-v1.parquet")).unwrap());
    assert!(into.join("evals-v1.parquet.manifest.json").exists());

    // DuckDB reads the files: each user in one part, the same in both
    // versions.
    if python_has("duckdb") {
        let v1 = parts_by_duckdb(&path("a.parquet"));
        let v2 = parts_by_duckdb(&path("v2.parquet"));
        assert_eq!(v1.len(), 41);
        assert!(v1.iter().all(|r| r.ends_with("|1")), "{v1:?}");
        assert_eq!(v1, v2, "a user keeps its part as rows are added");
    }

    // What is refused, with its SQLSTATE.
    for (sql, state) in [
        ("DROP CUT \"evals@1\"", "2BP01"),
        ("CREATE DATASET evals AS SELECT 1", "42710"),
        ("VERIFY DATASET nope VERSION 1", "42704"),
        ("VERIFY DATASET evals VERSION 7", "22023"),
        ("CREATE DATASET late AS SELECT id, now() AS at FROM requests", "42P17"),
        ("CREATE DATASET chance AS SELECT id FROM requests WHERE random() < 0.5", "42P17"),
        ("CREATE DATASET nokey AS SELECT id FROM requests WITH (split = 'a 50, b 50', split_key = 'user_id')", "42703"),
        ("CREATE DATASET cutless AS SELECT id FROM requests AS OF CUT nope", "42704"),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), state, "{sql}: {e:?}");
    }
    // A refused dataset leaves nothing behind: no dataset, no cut.
    let left = text_rows(
        &c,
        "SELECT count(*) FROM sluice_catalog.cuts WHERE cut_name NOT LIKE 'evals@%'",
    )
    .await;
    assert_eq!(left, ["0"]);
    c.batch_execute("DROP DATASET evals").await.unwrap();
    assert_eq!(
        text_rows(&c, "SELECT count(*) FROM sluice_catalog.cuts").await,
        ["0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eval_dataset_example_runs() {
    if !python_has("psycopg, pandas, pyarrow") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let out = dir.path().join("evals");
    run_client(
        "examples/eval_dataset.py",
        Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/eval_dataset.py"
            ))
            .arg("--sluice")
            .arg(format!(
                "host=127.0.0.1 port={} user=sluice dbname=sluice",
                server.port
            ))
            .arg("--out")
            .arg(&out),
    );
}

/// A dataset of rows several times `--query-memory` (issue 71, item 3):
/// CREATE, COPY and VERIFY stream its rows through an external sort that
/// spills within the limit, so the server's peak memory grows by far less
/// than the rows take; two exports and one after a restart are the same
/// bytes, and VERIFY agrees. Before, a version was computed whole in memory
/// (the rows, their concatenation, their order and their row keys at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_larger_than_query_memory_streams_in_bounded_memory() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    const QUERY_MEMORY: u64 = 64 << 20;
    let mut server = Server::start_with(dir.path(), &["--query-memory", &QUERY_MEMORY.to_string()]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE logged (id BIGINT NOT NULL, user_id TEXT NOT NULL, prompt TEXT, score INT)
             APPEND ONLY WITH (partitions = 4)",
    )
    .await
    .unwrap();
    let rows = 600_000u64;
    let mut data = Vec::with_capacity(rows as usize * 100);
    for i in 0..rows {
        data.extend_from_slice(
            format!(
                "{i},user_{},{} {i},{}\n",
                i % 997,
                "prompt text ".repeat(6),
                i % 5
            )
            .as_bytes(),
        );
    }
    let text_bytes = data.len() as u64;
    let sink = c
        .copy_in("COPY logged FROM STDIN (FORMAT csv)")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for piece in data.chunks(1 << 20) {
        sink.send(bytes::Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), rows);
    drop(data);
    let before = server.peak_rss();
    c.batch_execute(
        "CREATE DATASET logs AS SELECT id, user_id, prompt, score FROM logged
         WITH (split = 'train 90, test 10', split_key = 'user_id', seed = 3)",
    )
    .await
    .unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let path = |name: &str| out.join(name).to_string_lossy().into_owned();
    for name in ["a.parquet", "b.parquet"] {
        c.batch_execute(&format!("COPY DATASET logs VERSION 1 TO '{}'", path(name)))
            .await
            .unwrap();
    }
    assert_eq!(
        text_rows(&c, "VERIFY DATASET logs VERSION 1").await,
        text_rows(&c, "VERIFY DATASET logs VERSION 1").await
    );
    assert!(text_rows(&c, "VERIFY DATASET logs VERSION 1").await[0].ends_with("|t"));
    let grown = server.peak_rss().saturating_sub(before);
    // The rows take more than their CSV text in memory, and their sort
    // keys about as much again: held whole they were several times the
    // limit. Streamed, the server's peak stays within the limit and a
    // fixed overhead.
    assert!(
        grown < QUERY_MEMORY + (48 << 20),
        "peak RSS grew by {grown} bytes computing a dataset of {text_bytes} bytes of text"
    );
    assert!(
        2 * text_bytes > QUERY_MEMORY,
        "the rows must not fit the limit"
    );
    let a = std::fs::read(path("a.parquet")).unwrap();
    assert_eq!(
        a,
        std::fs::read(path("b.parquet")).unwrap(),
        "two exports differ"
    );
    drop(c);
    server.terminate();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute(&format!(
        "COPY DATASET logs VERSION 1 TO '{}'",
        path("c.parquet")
    ))
    .await
    .unwrap();
    assert_eq!(
        a,
        std::fs::read(path("c.parquet")).unwrap(),
        "an export after a restart differs"
    );
    assert!(
        std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().contains(".partial")),
        "no partial file is left"
    );
    // Every row is in the file once, each user's rows in one part.
    let counted = text_rows(
        &c,
        "SELECT rows FROM sluice_catalog.dataset_versions WHERE dataset_name = 'logs'",
    )
    .await;
    assert_eq!(counted, [rows.to_string()]);
}
