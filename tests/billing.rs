//! The store-offsets-in-the-sink pattern with a real sink: the Python
//! billing consumer in `examples/` writes per-tenant totals and its next
//! offsets into PostgreSQL in one transaction per batch. Killed at random
//! points while rows keep arriving, its totals are exact after every kill.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::postgres::Postgres;
use common::Server;
use rand::{Rng, SeedableRng};

const KILLS: usize = 12;

fn consumer(server: &Server, pg: &Postgres, drain: bool) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/billing_consumer.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .args(["--sluice", &server.conn_string()])
        .args(["--postgres", &pg.conn_string()])
        .args(["--batch", "150"])
        .stdout(Stdio::null());
    if drain {
        cmd.arg("--drain");
    }
    cmd.spawn().expect("python3 runs the consumer")
}

/// Per-tenant totals and next offsets in PostgreSQL (empty before the
/// consumer's first commit).
async fn sink_state(pg: &tokio_postgres::Client) -> (BTreeMap<String, i64>, BTreeMap<i32, i64>) {
    let exists: bool = pg
        .query_one("SELECT to_regclass('billing_offsets') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    if !exists {
        return Default::default();
    }
    // One snapshot for both tables.
    let rows = pg
        .query(
            "SELECT 't', tenant, tokens FROM billing_totals UNION ALL
             SELECT 'o', CAST(partition AS TEXT), next_offset FROM billing_offsets",
            &[],
        )
        .await
        .unwrap();
    let mut totals = BTreeMap::new();
    let mut offsets = BTreeMap::new();
    for r in rows {
        let kind: String = r.get(0);
        let key: String = r.get(1);
        let v: i64 = r.get(2);
        if kind == "t" {
            totals.insert(key, v);
        } else {
            offsets.insert(key.parse().unwrap(), v);
        }
    }
    (totals, offsets)
}

/// The totals of the rows below `offsets` (per partition), from Sluice.
async fn truth_below(
    c: &tokio_postgres::Client,
    offsets: &BTreeMap<i32, i64>,
) -> BTreeMap<String, i64> {
    if offsets.is_empty() {
        return BTreeMap::new();
    }
    let cond: Vec<String> = offsets
        .iter()
        .map(|(p, o)| format!("(_partition = {p} AND _offset < {o})"))
        .collect();
    c.query(
        &format!(
            "SELECT tenant, CAST(SUM(tokens) AS BIGINT) FROM usage WHERE {} GROUP BY tenant",
            cond.join(" OR ")
        ),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_consumer_is_exact_through_kills() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let pg = Postgres::start(dir.path());
    let pgc = pg.connect().await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE usage (tenant TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant');
         CREATE SUBSCRIPTION billing FROM usage;",
    )
    .await
    .unwrap();

    // Rows keep arriving while the consumer is killed and restarted.
    let writer = server.connect().await;
    let writes = tokio::spawn(async move {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..80 {
            let values: Vec<String> = (0..100)
                .map(|_| {
                    format!(
                        "('t{}', {})",
                        rng.random_range(0..25),
                        rng.random_range(1..5000)
                    )
                })
                .collect();
            writer
                .batch_execute(&format!("INSERT INTO usage VALUES {}", values.join(", ")))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    });

    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut exact = 0;
    let mut progressed = 0;
    let mut last_offsets = BTreeMap::new();
    for run in 0..KILLS {
        let mut child = consumer(&server, &pg, false);
        // Kill at a random moment once the consumer is working: a loaded
        // machine can take longer to start Python than a fixed delay.
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(5) && sink_state(&pgc).await.1 == last_offsets
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..700))).await;
        // SIGKILL by pid: no chance to finish a transaction.
        let status = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let _ = child.wait();
        let (totals, offsets) = sink_state(&pgc).await;
        let truth = truth_below(&c, &offsets).await;
        assert_eq!(
            totals, truth,
            "run {run}: totals match the rows below the stored offsets"
        );
        exact += 1;
        if offsets != last_offsets {
            progressed += 1;
        }
        last_offsets = offsets;
    }
    writes.await.unwrap();
    let mut child = consumer(&server, &pg, true);
    let status = tokio::task::block_in_place(|| child.wait()).unwrap();
    assert!(status.success(), "the draining run ends cleanly");

    let (totals, offsets) = sink_state(&pgc).await;
    let all: BTreeMap<String, i64> = c
        .query(
            "SELECT tenant, CAST(SUM(tokens) AS BIGINT) FROM usage GROUP BY tenant",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(totals, all, "every row counted exactly once");
    let rows: i64 = offsets.values().sum();
    assert_eq!(rows, 8000);
    eprintln!("billing consumer: {exact}/{KILLS} kills exact, {progressed} made progress, 8000 rows, totals exact");
    assert!(
        progressed >= KILLS / 2,
        "the consumer committed between kills"
    );
}
