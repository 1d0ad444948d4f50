//! Checkpoints: views stay exact through SIGKILL at random moments, on the
//! local file system and on S3; the object store may vanish for a while and
//! the data disk may fill up.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime};
use common::s3::S3Server;
use common::{scalar, sqlstate, Server};
use futures::SinkExt;
use rand::{Rng, SeedableRng};

const TENANTS: usize = 50;
const EVENTS: usize = 20_000;
const BATCH: usize = 25;

const SETUP: &str = "
CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT NOT NULL,
                    event_time TIMESTAMP NOT NULL,
                    WATERMARK FOR event_time AS event_time - INTERVAL '10 minutes')
  APPEND ONLY WITH (partitions = 4, partition_key = 'tenant');
CREATE MATERIALIZED VIEW by_tenant AS
  SELECT tenant, SUM(tokens) AS tokens, COUNT(*) AS events FROM usage GROUP BY tenant;
CREATE MATERIALIZED VIEW per_minute AS
  SELECT tenant, window_start, SUM(tokens) AS tokens, COUNT(*) AS events
  FROM TUMBLE(usage, event_time, INTERVAL '1 minute')
  GROUP BY tenant, window_start, window_end;";

#[derive(Clone)]
struct Event {
    id: String,
    tenant: String,
    tokens: i64,
    time_us: i64,
}

/// The workload: 20,000 usage events of 50 tenants, tokens 50..4000, one
/// every 100 ms of event time, up to 3 s out of order.
fn workload(seed: u64) -> Vec<Event> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let base = 1_767_225_600_000_000i64; // 2026-01-01
    (0..EVENTS)
        .map(|i| Event {
            id: format!("e{i:05}"),
            tenant: format!("tenant{:02}", rng.random_range(0..TENANTS)),
            tokens: rng.random_range(50..=4000),
            time_us: base + i as i64 * 100_000 + rng.random_range(-3_000_000..3_000_000),
        })
        .collect()
}

fn timestamp(us: i64) -> String {
    DateTime::from_timestamp_micros(us)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        .unwrap_or_default()
}

/// What the writers did: batches still to send, events known to be in the
/// log, and batches sent without an answer.
struct Ledger {
    pending: VecDeque<Vec<usize>>,
    landed: HashSet<usize>,
    in_doubt: Vec<Vec<usize>>,
}

async fn writer(port: u16, use_copy: bool, events: Arc<Vec<Event>>, ledger: Arc<Mutex<Ledger>>) {
    let Ok((client, conn)) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=w dbname=w"),
        tokio_postgres::NoTls,
    )
    .await
    else {
        return;
    };
    tokio::spawn(conn);
    loop {
        let Some(batch) = ledger.lock().unwrap().pending.pop_front() else {
            return;
        };
        let result = if use_copy {
            let mut data = String::new();
            for &i in &batch {
                let e = &events[i];
                data.push_str(&format!(
                    "{}\t{}\t{}\t{}\n",
                    e.id,
                    e.tenant,
                    e.tokens,
                    timestamp(e.time_us)
                ));
            }
            async {
                let sink = client.copy_in("COPY usage FROM STDIN").await?;
                futures::pin_mut!(sink);
                sink.send(bytes::Bytes::from(data)).await?;
                sink.finish().await
            }
            .await
            .map(|_| ())
        } else {
            let values: Vec<String> = batch
                .iter()
                .map(|&i| {
                    let e = &events[i];
                    format!(
                        "('{}', '{}', {}, '{}')",
                        e.id,
                        e.tenant,
                        e.tokens,
                        timestamp(e.time_us)
                    )
                })
                .collect();
            client
                .batch_execute(&format!("INSERT INTO usage VALUES {}", values.join(", ")))
                .await
        };
        {
            let mut l = ledger.lock().unwrap();
            match result {
                Ok(()) => l.landed.extend(batch),
                Err(_) => {
                    l.in_doubt.push(batch);
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Four writers: two send INSERTs, two COPY.
fn start_writers(
    port: u16,
    events: &Arc<Vec<Event>>,
    ledger: &Arc<Mutex<Ledger>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| tokio::spawn(writer(port, w % 2 == 1, events.clone(), ledger.clone())))
        .collect()
}

/// Asks the log which events of unanswered batches landed; the rest are
/// sent again (only the missing ones).
async fn resolve_in_doubt(server: &Server, events: &[Event], ledger: &Mutex<Ledger>) {
    let doubtful = std::mem::take(&mut ledger.lock().unwrap().in_doubt);
    let c = server.connect().await;
    for batch in doubtful {
        let ids: Vec<String> = batch
            .iter()
            .map(|&i| format!("'{}'", events[i].id))
            .collect();
        let rows = c
            .query(
                &format!(
                    "SELECT event_id FROM usage WHERE event_id IN ({})",
                    ids.join(", ")
                ),
                &[],
            )
            .await
            .unwrap();
        let found: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
        let mut l = ledger.lock().unwrap();
        let missing: Vec<usize> = batch
            .into_iter()
            .filter(|&i| {
                let there = found.contains(&events[i].id);
                if there {
                    l.landed.insert(i);
                }
                !there
            })
            .collect();
        if !missing.is_empty() {
            l.pending.push_front(missing);
        }
    }
}

/// Checks the log holds every landed event once and that both views equal
/// the truth computed here; returns the tenants with any wrong number.
async fn verify(server: &Server, events: &[Event], ledger: &Mutex<Ledger>) -> usize {
    let c = server.connect().await;
    c.batch_execute("FLUSH")
        .await
        .unwrap_or_else(|e| panic!("FLUSH: {e}\n{}", server.log_text()));
    let landed = ledger.lock().unwrap().landed.clone();

    let rows = c.query("SELECT event_id FROM usage", &[]).await.unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in &rows {
        *seen.entry(r.get(0)).or_default() += 1;
    }
    let dup: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(dup.is_empty(), "events in the log twice: {dup:?}");
    let expected: HashSet<String> = landed.iter().map(|&i| events[i].id.clone()).collect();
    let got: HashSet<String> = seen.into_keys().collect();
    assert_eq!(
        got, expected,
        "the log holds exactly the acknowledged events"
    );

    let mut by_tenant: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut per_minute: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for &i in &landed {
        let e = &events[i];
        let t = by_tenant.entry(e.tenant.clone()).or_default();
        t.0 += e.tokens;
        t.1 += 1;
        let minute = e.time_us - e.time_us.rem_euclid(60_000_000);
        let w = per_minute.entry((e.tenant.clone(), minute)).or_default();
        w.0 += e.tokens;
        w.1 += 1;
    }
    let mut wrong: HashSet<String> = HashSet::new();
    let view: BTreeMap<String, (i64, i64)> = c
        .query("SELECT tenant, tokens, events FROM by_tenant", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for t in view.keys().chain(by_tenant.keys()) {
        if view.get(t) != by_tenant.get(t) {
            wrong.insert(t.clone());
        }
    }
    let view: BTreeMap<(String, i64), (i64, i64)> = c
        .query(
            "SELECT tenant, window_start, tokens, events FROM per_minute",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let start: NaiveDateTime = r.get(1);
            (
                (r.get(0), start.and_utc().timestamp_micros()),
                (r.get(2), r.get(3)),
            )
        })
        .collect();
    for k in view.keys().chain(per_minute.keys()) {
        if view.get(k) != per_minute.get(k) {
            wrong.insert(k.0.clone());
        }
    }
    let late = scalar(
        &c,
        "SELECT CAST(SUM(late_rows) AS BIGINT) FROM sluice_catalog.views",
    )
    .await;
    assert_eq!(
        late, 0,
        "no event is late by design (3 s disorder, 10 min delay)"
    );
    wrong.len()
}

/// Ingests the workload with four writers (two INSERT, two COPY), killing
/// the server with SIGKILL at `runs` seeded random moments; after each
/// restart the log and both views are checked against the truth.
async fn crash_runs(
    dir: &std::path::Path,
    extra: &[&str],
    env: &[(String, String)],
    runs: usize,
    seed: u64,
) {
    let events = Arc::new(workload(seed));
    let mut flags = vec!["--checkpoint-interval-ms", "200"];
    flags.extend_from_slice(extra);
    let mut server = Server::start_env(dir, &flags, env);
    server.connect().await.batch_execute(SETUP).await.unwrap();
    let ledger = Arc::new(Mutex::new(Ledger {
        pending: (0..EVENTS)
            .collect::<Vec<_>>()
            .chunks(BATCH)
            .map(|c| c.to_vec())
            .collect(),
        landed: HashSet::new(),
        in_doubt: Vec::new(),
    }));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x00c0_ffee);
    let mut exact = 0;
    let mut tenants_wrong = 0;
    for _ in 0..runs {
        let writers = start_writers(server.port, &events, &ledger);
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..900))).await;
        server.kill9();
        for w in writers {
            w.await.unwrap();
        }
        server.restart();
        resolve_in_doubt(&server, &events, &ledger).await;
        let wrong = verify(&server, &events, &ledger).await;
        tenants_wrong += wrong;
        if wrong == 0 {
            exact += 1;
        }
    }
    let during_kills = ledger.lock().unwrap().landed.len();
    // The rest of the workload without kills, then the final check.
    let writers = start_writers(server.port, &events, &ledger);
    for w in writers {
        w.await.unwrap();
    }
    assert!(ledger.lock().unwrap().in_doubt.is_empty());
    assert_eq!(ledger.lock().unwrap().landed.len(), EVENTS);
    let final_wrong = verify(&server, &events, &ledger).await;
    let restored = server
        .log_text()
        .matches("restored view from checkpoint")
        .count();
    println!(
        "crash runs: {exact}/{runs} exact, tenants wrong: {tenants_wrong} (final: {final_wrong} of {TENANTS}); \
         views restored from checkpoints: {restored}, events landed while killing: {during_kills}"
    );
    assert_eq!(exact, runs, "every run exact");
    assert_eq!(final_wrong, 0);
    // Every restart after the first FLUSH restores both views from a
    // checkpoint instead of replaying the log.
    assert!(
        restored >= 2 * (runs - 1),
        "views restored from checkpoints: {restored}"
    );
}

fn runs() -> usize {
    common::crash_runs_or(20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_stay_exact_through_sigkill_local_store() {
    let dir = tempfile::tempdir().unwrap();
    crash_runs(dir.path(), &[], &[], runs(), 0x51u64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_stay_exact_through_sigkill_s3_store() {
    let s3 = S3Server::start("sluice-crash");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("crash");
    crash_runs(
        dir.path(),
        &["--object-store", &url],
        &s3.env(),
        runs(),
        0x53u64,
    )
    .await;
    let keys = s3.keys("crash/views/");
    assert!(
        keys.iter().any(|k| k.contains("manifest-")),
        "checkpoints are in the bucket: {keys:?}"
    );
}

/// The S3 server stops answering for 30 seconds: ingest keeps being
/// acknowledged from the local log, checkpoint attempts fail and are shown,
/// and once the store is back the view's checkpoint catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_store_outage_delays_checkpoints_but_not_ingest() {
    let s3 = S3Server::start("sluice-outage");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("outage");
    let mut server = Server::start_env(
        dir.path(),
        &["--object-store", &url, "--checkpoint-interval-ms", "200"],
        &s3.env(),
    );
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k TEXT, n BIGINT) APPEND ONLY WITH (partitions = 2, partition_key = 'k');
         CREATE MATERIALIZED VIEW totals AS SELECT k, SUM(n) AS n, COUNT(*) AS c FROM t GROUP BY k;
         INSERT INTO t VALUES ('a', 1), ('b', 2);
         FLUSH;",
    )
    .await
    .unwrap();

    s3.pause();
    let paused_at = std::time::Instant::now();
    let mut acked = 2i64;
    while paused_at.elapsed() < Duration::from_secs(30) {
        c.batch_execute("INSERT INTO t VALUES ('a', 10), ('b', 20), ('c', 30)")
            .await
            .expect("ingest is acknowledged while the object store is away");
        acked += 3;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let failed = scalar(
        &c,
        "SELECT COUNT(*) FROM sluice_catalog.checkpoints WHERE view_name = 'totals' AND error IS NOT NULL",
    )
    .await;
    assert!(failed >= 1, "failing checkpoint attempts are shown");
    // The view itself kept up; only its checkpoint is behind.
    let rows = scalar(&c, "SELECT CAST(SUM(c) AS BIGINT) FROM totals").await;
    assert_eq!(rows, acked);
    s3.resume();

    // Caught up: FLUSH commits a checkpoint covering every row.
    c.batch_execute("FLUSH").await.unwrap();
    let r = c
        .query_one(
            "SELECT last_checkpoint_epoch, checkpoint_age_seconds FROM sluice_catalog.views WHERE view_name = 'totals'",
            &[],
        )
        .await
        .unwrap();
    assert!(r.get::<_, Option<i64>>(0).is_some());
    assert!(r.get::<_, Option<f64>>(1).unwrap() < 30.0);
    let retried = scalar(
        &c,
        "SELECT COUNT(*) FROM sluice_catalog.checkpoints WHERE view_name = 'totals' AND attempt > 1 AND error IS NULL",
    )
    .await;
    assert!(
        retried >= 1,
        "the failing epoch committed on a later attempt"
    );

    // Nothing was lost: after SIGKILL the view comes back from the new
    // checkpoint with every row.
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        scalar(&c, "SELECT CAST(SUM(c) AS BIGINT) FROM totals").await,
        acked
    );
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM t").await, acked);
    assert!(server.log_text().contains("restored view from checkpoint"));
}

/// A data directory on a small tmpfs: once it is full, writes fail with
/// 53100 and the server keeps answering reads; freeing space lets writes
/// continue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_fails_writes_with_53100_and_keeps_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let server = Server::start(&mnt);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (n BIGINT, pad TEXT) APPEND ONLY;
         CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS c FROM t;
         INSERT INTO t SELECT value, 'x' FROM generate_series(1, 1000) AS s(value);
         FLUSH;",
    )
    .await
    .unwrap();
    // Fill the file system.
    let filler = mnt.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let err = c
        .batch_execute(
            "INSERT INTO t SELECT value, repeat('y', 100) FROM generate_series(1, 50000) AS s(value)",
        )
        .await
        .expect_err("the disk is full");
    assert_eq!(sqlstate(&err), "53100", "{err:?}");
    // Reads go on, from the log and from the view.
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM t").await, 1000);
    assert_eq!(scalar(&c, "SELECT c FROM v").await, 1000);
    // Space comes back: writes continue and nothing half-written shows.
    std::fs::remove_file(&filler).unwrap();
    c.batch_execute("INSERT INTO t VALUES (1, 'z'); FLUSH;")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM t").await, 1001);
    assert_eq!(scalar(&c, "SELECT c FROM v").await, 1001);
}

/// `sluice_catalog.lag`: per view and source partition, the offset its
/// last checkpoint covers, the offset it has processed, the end, and the
/// lag in records and seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_shows_processed_and_checkpointed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "3600000"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k TEXT, n BIGINT) APPEND ONLY WITH (partitions = 2, partition_key = 'k');
         CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(*) AS c FROM t GROUP BY k;
         INSERT INTO t SELECT CAST(value % 7 AS TEXT), value FROM generate_series(1, 1000) AS s(value);",
    )
    .await
    .unwrap();
    let lag_sql = "SELECT partition, committed_offset, processed_offset, end_offset, lag_records, lag_seconds \
                   FROM sluice_catalog.lag WHERE consumer = 'v' AND kind = 'view' AND source = 't' ORDER BY partition";
    // Wait for the view to process everything; with an hour between
    // checkpoints, none covers it yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rows = c.query(lag_sql, &[]).await.unwrap();
        if rows.iter().all(|r| r.get::<_, i64>(4) == 0) {
            for r in &rows {
                assert_eq!(r.get::<_, Option<i64>>(1), Some(0), "no checkpoint yet");
                assert_eq!(r.get::<_, i64>(2), r.get::<_, i64>(3));
                assert_eq!(r.get::<_, Option<f64>>(5), Some(0.0));
            }
            assert_eq!(rows.iter().map(|r| r.get::<_, i64>(3)).sum::<i64>(), 1000);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "view did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // FLUSH checkpoints: committed reaches the end.
    c.batch_execute("FLUSH").await.unwrap();
    for r in c.query(lag_sql, &[]).await.unwrap() {
        assert_eq!(r.get::<_, Option<i64>>(1), Some(r.get::<_, i64>(3)));
    }
}

/// Recovery takes the newest manifest whose files are intact: an epoch
/// without a manifest (cut short by a crash) and a torn manifest are
/// ignored, the view falls back to the epoch before and replays the rest of
/// the log, and the stray files are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_epochs_and_torn_manifests_are_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "3600000"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k TEXT, n BIGINT) APPEND ONLY WITH (partitions = 2, partition_key = 'k');
         CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(*) AS c, SUM(n) AS s FROM t GROUP BY k;
         INSERT INTO t SELECT CAST(value % 5 AS TEXT), value FROM generate_series(1, 100) AS s(value);
         FLUSH;
         INSERT INTO t SELECT CAST(value % 5 AS TEXT), value FROM generate_series(101, 200) AS s(value);
         FLUSH;",
    )
    .await
    .unwrap();
    drop(c);
    server.kill9();
    let views = dir.path().join("data/objects/views/2");
    let mut manifests: Vec<_> = std::fs::read_dir(&views)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("manifest-")
        })
        .collect();
    manifests.sort();
    assert_eq!(manifests.len(), 2, "the newest epoch and the one before");
    let newest = manifests[1].clone();
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    let stray = views.join("epoch-00000000000000000099");
    std::fs::create_dir_all(&stray).unwrap();
    std::fs::write(stray.join("groups.parquet"), b"half an epoch").unwrap();

    server.restart();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    let r = c
        .query_one(
            "SELECT CAST(SUM(c) AS BIGINT), CAST(SUM(s) AS BIGINT) FROM v",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 200);
    assert_eq!(r.get::<_, i64>(1), (1..=200i64).sum::<i64>());
    let log = server.log_text();
    assert!(
        log.contains("checkpoint is unusable; trying an older one"),
        "{log}"
    );
    assert!(log.contains("restored view from checkpoint"));
    assert!(
        !stray.exists() || std::fs::read_dir(&stray).unwrap().next().is_none(),
        "stray epoch files deleted"
    );
    assert!(
        !newest.exists() || std::fs::read(&newest).unwrap() != bytes[..bytes.len() / 2],
        "torn manifest deleted"
    );
}

/// A view over no table is computed once: after SIGKILL it keeps the rows
/// it had (`now()` and `random()` too), and REBUILD computes them again.
#[tokio::test]
async fn a_view_over_no_table_keeps_its_rows_through_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE MATERIALIZED VIEW made AS SELECT now()::text AS at, random() AS r, 7 AS n; FLUSH",
    )
    .await
    .unwrap();
    let read = |c: tokio_postgres::Client| async move {
        let row = c.query_one("SELECT at, r, n FROM made", &[]).await.unwrap();
        (
            row.get::<_, String>(0),
            row.get::<_, f64>(1),
            row.get::<_, i32>(2),
        )
    };
    let before = read(c).await;
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    let c2 = server.connect().await;
    assert_eq!(read(c2).await, before);
    c.batch_execute("ALTER MATERIALIZED VIEW made REBUILD; FLUSH")
        .await
        .unwrap();
    let after = read(c).await;
    assert_ne!(after.0, before.0, "REBUILD computes now() again");
    assert_eq!(after.2, 7);
}
