//! Closed segments move to the object store as Parquet; reads, views and
//! backfills span local and remote segments; retention deletes whole
//! segments and a read below the start says so.

mod common;

use std::time::{Duration, Instant};

use common::s3::S3Server;
use common::{scalar, Server};

const FLAGS: [&str; 4] = ["--segment-bytes", "20000", "--tiering-interval-ms", "100"];

async fn wait_for(c: &tokio_postgres::Client, sql: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while scalar(c, sql).await == 0 {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every partition of `table` has at least two segments in the
/// object store.
async fn wait_moved(c: &tokio_postgres::Client, table: &str) {
    wait_for(
        c,
        &format!(
            "SELECT CAST(MIN(remote_segments) >= 2 AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = '{table}'"
        ),
        "segments to move",
    )
    .await;
}

fn local_segment_files(server: &Server) -> usize {
    let mut n = 0;
    for t in std::fs::read_dir(server.data_dir.join("tables"))
        .unwrap()
        .flatten()
    {
        for p in std::fs::read_dir(t.path()).unwrap().flatten() {
            if p.path().is_dir() {
                n += std::fs::read_dir(p.path())
                    .unwrap()
                    .flatten()
                    .filter(|f| f.path().extension().is_some_and(|e| e == "seg"))
                    .count();
            }
        }
    }
    n
}

/// `statements` INSERTs of 1,000 rows each into `t (id, body)`, ids 0 up.
async fn insert_thousands(c: &tokio_postgres::Client, statements: i64) {
    for i in 0..statements {
        c.batch_execute(&format!(
            "INSERT INTO t SELECT {i} * 1000 + value, 'row' FROM generate_series(0, 999) AS s(value)"
        ))
        .await
        .unwrap();
    }
}

async fn frames_read(c: &tokio_postgres::Client, table: &str) -> i64 {
    scalar(
        c,
        &format!("SELECT CAST(SUM(frames_read) AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = '{table}'"),
    )
    .await
}

async fn check_contents(c: &tokio_postgres::Client) {
    let r = c
        .query_one("SELECT COUNT(*), SUM(id), COUNT(DISTINCT id) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 10_000);
    assert_eq!(r.get::<_, i64>(2), 10_000);
    let r = c.query_one("SELECT n, s FROM v", &[]).await.unwrap();
    assert_eq!(r.get::<_, i64>(0), 10_000);
}

async fn reads_span_local_and_remote_segments(mut server: Server) {
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY WITH (partitions = 2);
         CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n, SUM(id) AS s FROM t;",
    )
    .await
    .unwrap();
    insert_thousands(&c, 10).await;
    wait_moved(&c, "t").await;
    // Only the active segment of each partition (plus at most one closed
    // one still moving) stays local.
    assert!(
        local_segment_files(&server) <= 4,
        "local copies are dropped"
    );
    check_contents(&c).await;
    // Offset pruning reaches into remote segments: one partition's tail
    // reads a handful of the partition's 10 frames. (FLUSH first: the
    // view's reads count too.)
    c.batch_execute("FLUSH").await.unwrap();
    let before = scalar(
        &c,
        "SELECT frames_read FROM sluice_catalog.partitions WHERE partition = 1",
    )
    .await;
    let n = scalar(
        &c,
        "SELECT COUNT(*) FROM t WHERE _partition = 1 AND _offset >= 1000 AND _offset < 2000",
    )
    .await;
    assert_eq!(n, 1000);
    let read = scalar(
        &c,
        "SELECT frames_read FROM sluice_catalog.partitions WHERE partition = 1",
    )
    .await
        - before;
    assert!(read <= 3, "read {read} frames for one frame's offsets");
    drop(c);

    // After SIGKILL: segments are found in the store, a new view backfills
    // across remote and local segments.
    server.restart();
    let c = server.connect().await;
    check_contents(&c).await;
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_partition AS
           SELECT _partition AS p, COUNT(*) AS n, MIN(_offset) AS lo, MAX(_offset) AS hi FROM t GROUP BY _partition;
         INSERT INTO t VALUES (-1, 'late');
         FLUSH;",
    )
    .await
    .unwrap();
    let rows = c
        .query("SELECT p, n, lo, hi FROM per_partition ORDER BY p", &[])
        .await
        .unwrap();
    let got: Vec<(i32, i64, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let want = c
        .query(
            "SELECT _partition, COUNT(*), MIN(_offset), MAX(_offset) FROM t GROUP BY _partition ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let want: Vec<(i32, i64, i64, i64)> = want
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(got.iter().map(|g| g.1).sum::<i64>(), 10_001);
    assert!(server
        .log_text()
        .contains("attached segments in the object store"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_move_to_the_local_object_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &FLAGS);
    reads_span_local_and_remote_segments(server).await;
    let objects = dir.path().join("data/objects/tables");
    let parquet = std::fs::read_dir(objects.join("1/p0")).unwrap().count();
    assert!(parquet >= 2, "Parquet segments under objects/tables/1/p0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_move_to_s3() {
    let s3 = S3Server::start("sluice-segments");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("seg");
    let mut flags: Vec<&str> = FLAGS.to_vec();
    flags.extend(["--object-store", &url]);
    let server = Server::start_env(dir.path(), &flags, &s3.env());
    reads_span_local_and_remote_segments(server).await;
    let keys = s3.keys("seg/tables/1/p0/");
    assert!(
        keys.len() >= 2 && keys.iter().all(|k| k.ends_with(".parquet")),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_whole_segments_and_reads_below_the_start_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &FLAGS);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY WITH (retention_bytes = '40kB');
         CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n FROM t;",
    )
    .await
    .unwrap();
    insert_thousands(&c, 20).await;
    wait_for(
        &c,
        "SELECT deleted_segments FROM sluice_catalog.partitions WHERE table_name = 't'",
        "retention",
    )
    .await;
    // Let the tiering rounds that were under way finish.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let start = scalar(&c, "SELECT start_offset FROM sluice_catalog.partitions").await;
    assert!(
        start > 0 && start % 1000 == 0,
        "whole segments go: start {start}"
    );
    let n = scalar(&c, "SELECT COUNT(*) FROM t").await;
    assert_eq!(n, 20_000 - start);
    assert_eq!(scalar(&c, "SELECT MIN(_offset) FROM t").await, start);
    // The view counted every row before retention ran.
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(scalar(&c, "SELECT n FROM v").await, 20_000);

    // Asking for offsets below the start: rows from the start, a NOTICE.
    let (ok, out, err) = server.psql("SELECT COUNT(*) FROM t WHERE _offset >= 0;\n");
    assert!(ok, "{err}");
    assert!(out.contains(&(20_000 - start).to_string()), "{out}");
    assert!(
        err.contains("NOTICE")
            && err.contains("deleted by retention")
            && err.contains(&format!("reading from {start}")),
        "psql shows the notice: {err}"
    );
    assert!(
        scalar(
            &c,
            "SELECT reads_below_start FROM sluice_catalog.partitions"
        )
        .await
            >= 1
    );
}

/// Predicates on the event-time column skip frames by their event-time
/// bounds, in local and remote segments alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_time_predicates_prune_frames() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &FLAGS);
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE e (id BIGINT, body TEXT, at TIMESTAMP) APPEND ONLY")
        .await
        .unwrap();
    for h in 0..10 {
        c.batch_execute(&format!(
            "INSERT INTO e SELECT value, 'row', to_timestamp_seconds(1767225600 + {h} * 3600 + value)
             FROM generate_series(0, 999) AS s(value)"
        ))
        .await
        .unwrap();
    }
    wait_moved(&c, "e").await;
    let before = frames_read(&c, "e").await;
    let n = scalar(
        &c,
        "SELECT COUNT(*) FROM e WHERE at >= TIMESTAMP '2026-01-01 03:00:00' AND at < TIMESTAMP '2026-01-01 04:00:00'",
    )
    .await;
    assert_eq!(n, 1000);
    let read = frames_read(&c, "e").await - before;
    assert_eq!(read, 1, "one hour's frame of ten");
    let before = frames_read(&c, "e").await;
    let n = scalar(
        &c,
        "SELECT COUNT(*) FROM e WHERE at > TIMESTAMP '2026-01-01 08:10:00'",
    )
    .await;
    assert_eq!(n, 399 + 1000);
    assert_eq!(frames_read(&c, "e").await - before, 2);
}

/// A segment larger than one S3 request's worth goes up as a multipart
/// upload and reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_segment_goes_to_s3_in_parts() {
    let s3 = S3Server::start("sluice-large");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("big");
    let server = Server::start_env(
        dir.path(),
        &[
            "--segment-bytes",
            "40000000",
            "--tiering-interval-ms",
            "100",
            "--object-store",
            &url,
        ],
        &s3.env(),
    );
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE big (id BIGINT, body TEXT) APPEND ONLY")
        .await
        .unwrap();
    for i in 0..6 {
        c.batch_execute(&format!(
            "INSERT INTO big SELECT {i} * 100000 + value, concat(md5(CAST(value AS TEXT)), md5(CAST({i} + value AS TEXT)))
             FROM generate_series(0, 99999) AS s(value)"
        ))
        .await
        .unwrap();
    }
    // The next write closes the full segment.
    c.batch_execute("INSERT INTO big VALUES (-1, 'last')")
        .await
        .unwrap();
    wait_for(
        &c,
        "SELECT remote_segments FROM sluice_catalog.partitions WHERE table_name = 'big'",
        "the upload",
    )
    .await;
    let remote_bytes = scalar(&c, "SELECT remote_bytes FROM sluice_catalog.partitions").await;
    assert!(
        remote_bytes > 16 << 20,
        "the segment is over the multipart threshold: {remote_bytes}"
    );
    let r = c
        .query_one(
            "SELECT COUNT(*), SUM(id), COUNT(DISTINCT body) FROM big",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 600_001);
    assert_eq!(r.get::<_, i64>(1), (0..600_000i64).sum::<i64>() - 1);
}

/// A segment object that cannot be read at start-up does not keep the
/// server down: the rest is served, reads of that partition say what is
/// missing, and the partition counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_segment_object_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &FLAGS);
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY")
        .await
        .unwrap();
    insert_thousands(&c, 10).await;
    wait_moved(&c, "t").await;
    drop(c);
    server.kill9();
    let p0 = dir.path().join("data/objects/tables/1/p0");
    let mut objects: Vec<_> = std::fs::read_dir(&p0)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    objects.sort();
    let lost = objects[0].clone();
    std::fs::write(&lost, b"not parquet at all").unwrap();
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        scalar(
            &c,
            "SELECT unreadable_segments FROM sluice_catalog.partitions"
        )
        .await,
        1
    );
    let remaining = scalar(&c, "SELECT COUNT(*) FROM t").await;
    assert!(remaining < 10_000 && remaining > 0, "{remaining}");
    let (ok, _, err) = server.psql("SELECT COUNT(*) FROM t;\n");
    assert!(ok);
    assert!(
        err.contains("unreadable") && err.contains(lost.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
    // Writes go on.
    c.batch_execute("INSERT INTO t VALUES (1, 'after')")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM t").await, remaining + 1);
}
