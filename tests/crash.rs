//! Crash safety: SIGKILL while clients stream INSERT and COPY batches, and
//! torn or corrupt segment tails found on start-up.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{scalar, Server};
use futures::SinkExt;
use rand::{Rng, SeedableRng};

const USAGE: &str = "CREATE TABLE usage (event_id TEXT NOT NULL, tenant TEXT NOT NULL, tokens BIGINT, event_time TIMESTAMP) \
                     APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')";

/// What each writer did: batches acknowledged, and the one in flight when
/// the server died (whose fate the client cannot know).
#[derive(Default)]
struct Ledger {
    acked: Vec<String>,
    in_doubt: Vec<String>,
}

fn batch_rows(prefix: &str, n: usize) -> Vec<(String, String, i64)> {
    (0..n)
        .map(|i| {
            (
                format!("{prefix}-r{i}"),
                format!("t{}", i % 13),
                (i as i64) * 7 + 1,
            )
        })
        .collect()
}

async fn write_batches(
    port: u16,
    writer: usize,
    round: usize,
    use_copy: bool,
    ledger: Arc<Mutex<Ledger>>,
) {
    let conn = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=w dbname=w"),
        tokio_postgres::NoTls,
    )
    .await;
    let Ok((client, conn)) = conn else { return };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    for b in 0.. {
        let prefix = format!("k{round}-w{writer}-b{b}");
        let rows = batch_rows(&prefix, if use_copy { 300 } else { 40 });
        let result = if use_copy {
            let mut data = String::new();
            for (id, t, tok) in &rows {
                data.push_str(&format!("{id}\t{t}\t{tok}\t2024-01-01 00:00:00\n"));
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
            let values: Vec<String> = rows
                .iter()
                .map(|(id, t, tok)| format!("('{id}', '{t}', {tok}, '2024-01-01 00:00:00')"))
                .collect();
            client
                .batch_execute(&format!("INSERT INTO usage VALUES {}", values.join(", ")))
                .await
        };
        let mut l = ledger.lock().unwrap();
        match result {
            Ok(()) => l.acked.push(prefix),
            Err(_) => {
                l.in_doubt.push(prefix);
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_ingest_keeps_acknowledged_rows_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.connect().await.batch_execute(USAGE).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    const KILLS: usize = 12;
    for round in 0..KILLS {
        let mut tasks = Vec::new();
        for w in 0..4 {
            tasks.push(tokio::spawn(write_batches(
                server.port,
                w,
                round,
                w % 2 == 0,
                ledger.clone(),
            )));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(80..600))).await;
        server.kill9();
        for t in tasks {
            t.await.unwrap();
        }
        server.restart();
        verify(&server, &ledger).await;
    }
    let l = ledger.lock().unwrap();
    assert!(
        l.acked.len() > KILLS * 4,
        "too few batches were acknowledged: {}",
        l.acked.len()
    );
    println!(
        "crash runs: {KILLS}/{KILLS} exact, acknowledged batches: {}, in doubt: {}",
        l.acked.len(),
        l.in_doubt.len()
    );
}

async fn verify(server: &Server, ledger: &Arc<Mutex<Ledger>>) {
    let c = server.connect().await;
    let rows = c
        .query("SELECT event_id FROM usage", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", server.log_text()));
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in &rows {
        *counts.entry(r.get::<_, String>(0)).or_default() += 1;
    }
    let dup: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(dup.is_empty(), "duplicated rows: {dup:?}");
    let mut by_batch: HashMap<String, usize> = HashMap::new();
    for id in counts.keys() {
        let batch = id
            .rsplit_once("-r")
            .map(|(b, _)| b.to_string())
            .unwrap_or_default();
        *by_batch.entry(batch).or_default() += 1;
    }
    let l = ledger.lock().unwrap();
    let size = |b: &str| {
        if b.contains("-w0-") || b.contains("-w2-") {
            300
        } else {
            40
        }
    };
    for b in &l.acked {
        assert_eq!(
            by_batch.get(b).copied().unwrap_or(0),
            size(b),
            "acknowledged batch {b} incomplete"
        );
    }
    for b in &l.in_doubt {
        let n = by_batch.get(b).copied().unwrap_or(0);
        assert!(
            n == 0 || n == size(b),
            "unacknowledged batch {b} half present: {n} rows"
        );
    }
    let known: usize = l.acked.len() + l.in_doubt.len();
    assert!(by_batch.len() <= known, "rows from batches never sent");
}

fn segment_files(server: &Server) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for t in std::fs::read_dir(server.data_dir.join("tables")).unwrap() {
        let p0 = t.unwrap().path().join("p0");
        for f in std::fs::read_dir(p0).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "seg") {
                out.push(f);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tail_is_cut_at_the_last_good_frame() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY")
        .await
        .unwrap();
    // Statements of about 300 KB each: too large for the commit record to
    // carry their frames, so nothing can write the torn frame back.
    for i in 0..10 {
        c.batch_execute(&format!(
            "INSERT INTO t SELECT {i} * 100 + value, repeat('x', 3000) FROM generate_series(0, 99) AS s(value)"
        ))
        .await
        .unwrap();
    }
    drop(c);
    server.kill9();
    let seg = segment_files(&server).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 7).unwrap();
    drop(f);
    server.restart();
    let c = server.connect().await;
    let n: i64 = scalar(&c, "SELECT COUNT(*) FROM t").await;
    assert_eq!(
        n, 900,
        "the torn last frame is dropped, the nine before it kept"
    );
    let torn: i64 = scalar(
        &c,
        "SELECT torn_frames_dropped FROM sluice_catalog.partitions WHERE table_name = 't'",
    )
    .await;
    assert_eq!(torn, 1);
    assert!(server.log_text().contains("cut torn"), "recovery is logged");
    // Appends continue from the cut, and survive another restart.
    c.batch_execute("INSERT INTO t VALUES (5000, 'after')")
        .await
        .unwrap();
    drop(c);
    server.restart();
    let c = server.connect().await;
    let r = c
        .query_one("SELECT COUNT(*), MAX(_offset) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 901);
    assert_eq!(r.get::<_, i64>(1), 900);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Small statements' frames are carried by their commit records too: a
/// partition that loses them (here a corrupt frame, and everything after it
/// cut) gets them back from the commit log.
async fn corrupt_frame_cuts_the_log_there_and_the_commit_log_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id BIGINT) APPEND ONLY")
        .await
        .unwrap();
    for i in 0..10 {
        c.batch_execute(&format!("INSERT INTO t VALUES ({i})"))
            .await
            .unwrap();
    }
    drop(c);
    server.kill9();
    let seg = segment_files(&server).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let frame = bytes.len() / 10;
    // Flip a byte inside the payload of the sixth frame.
    bytes[5 * frame + frame / 2] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    server.restart();
    let c = server.connect().await;
    let r = c
        .query_one("SELECT COUNT(*), MAX(id) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 10, "every acknowledged row is back");
    assert_eq!(r.get::<_, i64>(1), 9);
    let torn: i64 = scalar(
        &c,
        "SELECT torn_frames_dropped FROM sluice_catalog.partitions WHERE table_name = 't'",
    )
    .await;
    assert_eq!(torn, 5, "the corrupt frame and the four after it were cut");
    assert!(
        server.log_text().contains("wrote back frames"),
        "the write-back is logged"
    );
    // The partition is whole again: appends continue after the restored
    // frames, and a second restart finds nothing to cut or write back.
    c.batch_execute("INSERT INTO t VALUES (10)").await.unwrap();
    drop(c);
    server.restart();
    let c = server.connect().await;
    let r = c
        .query_one("SELECT COUNT(*), MAX(_offset) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 11);
    assert_eq!(r.get::<_, i64>(1), 10);
}
