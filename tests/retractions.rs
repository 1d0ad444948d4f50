//! Views over keyed tables retract: an update takes back the old row and
//! adds the new one, a delete takes back. Property test against the batch
//! query (also across SIGKILL), and deletion end to end: from every view,
//! and after compaction from every file.

mod common;

use std::time::Duration;

use common::{files_containing, load_requests, more_requests, scalar, text_rows, Server};
use rand::{Rng, SeedableRng};

/// Views over `kv` (and over each other): each view's definition, and the
/// query over the table whose result it must equal.
const VIEWS: [(&str, &str, &str); 8] = [
    (
        "big",
        "SELECT k, grp, v FROM kv WHERE v >= 500",
        "SELECT k, grp, v FROM kv WHERE v >= 500",
    ),
    (
        "per_group",
        "SELECT grp, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a, MIN(v) AS lo, MAX(v) AS hi FROM kv GROUP BY grp",
        "SELECT grp, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a, MIN(v) AS lo, MAX(v) AS hi FROM kv GROUP BY grp",
    ),
    (
        "totals",
        "SELECT COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi FROM kv",
        "SELECT COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi FROM kv",
    ),
    (
        "per_window",
        "SELECT grp, window_start, window_end, COUNT(*) AS n, MAX(v) AS hi FROM TUMBLE(kv, at, INTERVAL '1 minute') GROUP BY grp, window_start, window_end",
        "SELECT grp, window_start, window_end, COUNT(*) AS n, MAX(v) AS hi FROM TUMBLE(kv, at, INTERVAL '1 minute') GROUP BY grp, window_start, window_end",
    ),
    (
        "projected",
        "SELECT grp, v * 2 AS doubled FROM kv WHERE grp <> 'g0'",
        "SELECT grp, v * 2 AS doubled FROM kv WHERE grp <> 'g0'",
    ),
    (
        "filtered",
        "SELECT grp, COUNT(*) FILTER (WHERE v >= 500) AS big, SUM(v) FILTER (WHERE v < 100) AS small, MAX(v) FILTER (WHERE k LIKE 'k1%') AS hi1, AVG(v) FILTER (WHERE v > 250) AS avg_mid, COUNT(*) AS n FROM kv GROUP BY grp",
        "SELECT grp, COUNT(*) FILTER (WHERE v >= 500) AS big, SUM(v) FILTER (WHERE v < 100) AS small, MAX(v) FILTER (WHERE k LIKE 'k1%') AS hi1, AVG(v) FILTER (WHERE v > 250) AS avg_mid, COUNT(*) AS n FROM kv GROUP BY grp",
    ),
    // Views over views that change rows in place: retractions propagate.
    (
        "busy_groups",
        "SELECT grp, n FROM per_group WHERE n > 25",
        "SELECT grp, COUNT(*) AS n FROM kv GROUP BY grp HAVING COUNT(*) > 25",
    ),
    (
        "big_per_group",
        "SELECT grp, COUNT(*) AS n, MAX(v) AS hi FROM big GROUP BY grp",
        "SELECT grp, COUNT(*) AS n, MAX(v) AS hi FROM kv WHERE v >= 500 GROUP BY grp",
    ),
];

/// A result as sorted text rows.
async fn sorted(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut out = text_rows(c, sql).await;
    out.sort();
    out
}

async fn check_views(c: &tokio_postgres::Client, when: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    for (name, _, truth) in VIEWS {
        let view = sorted(c, &format!("SELECT * FROM {name}")).await;
        let batch = sorted(c, truth).await;
        assert_eq!(
            view, batch,
            "{when}: view {name} equals its query over the table"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_keyed_tables_equal_their_query_through_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &[
            "--segment-bytes",
            "4000",
            "--tiering-interval-ms",
            "200",
            "--compaction-interval-ms",
            "500",
        ],
    );
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, grp TEXT, v BIGINT, at TIMESTAMP) WITH (partitions = 4, delete_retention = '0s')",
    )
    .await
    .unwrap();
    for (name, query, _) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut statements = 0;
    let mut compacted = 0;
    for round in 0..6 {
        let c = server.connect().await;
        for _ in 0..25 {
            let k = |rng: &mut rand::rngs::StdRng| format!("k{}", rng.random_range(0..200));
            let sql = match rng.random_range(0..10) {
                0..=4 => {
                    let rows: Vec<String> = (0..20)
                        .map(|_| {
                            format!(
                                "('{}', 'g{}', {}, TIMESTAMP '2026-11-29 10:00:00' + INTERVAL '{} seconds')",
                                k(&mut rng),
                                rng.random_range(0..5),
                                rng.random_range(0..1000),
                                rng.random_range(0..300)
                            )
                        })
                        .collect();
                    // A key twice in one statement: the later row wins.
                    format!("INSERT INTO kv VALUES {}", rows.join(", "))
                }
                5..=6 => format!(
                    "UPDATE kv SET v = v + {}, grp = 'g{}' WHERE k IN ('{}', '{}', '{}')",
                    rng.random_range(1..100),
                    rng.random_range(0..5),
                    k(&mut rng),
                    k(&mut rng),
                    k(&mut rng)
                ),
                7 => format!(
                    "DELETE FROM kv WHERE grp = 'g{}' AND v < {}",
                    rng.random_range(0..5),
                    rng.random_range(0..300)
                ),
                _ => format!(
                    "DELETE FROM kv WHERE k IN ('{}', '{}')",
                    k(&mut rng),
                    k(&mut rng)
                ),
            };
            c.batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            statements += 1;
        }
        check_views(&c, &format!("round {round}")).await;
        if round % 2 == 1 {
            // Compaction between checkpoints and a SIGKILL: restored views
            // still find the versions they applied.
            c.batch_execute("VACUUM kv").await.unwrap();
            compacted += scalar(&c, "SELECT CAST(SUM(compacted_records) AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = 'kv'").await;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            server.restart();
            let c = server.connect().await;
            check_views(&c, &format!("after SIGKILL in round {round}")).await;
        }
    }
    assert!(compacted > 0, "compaction ran between checkpoints");
    eprintln!("retractions: {statements} statements over 6 rounds, 3 SIGKILLs, {compacted} records compacted; every view equal to its query each time");
}

/// The deletion request: `DELETE ... WHERE user_id = 'u42'` reaches every
/// view at once, and after compaction (zero grace period) no file holds
/// u42's prompts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_request_reaches_every_view_and_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "4000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sql/examples/deletion_request.sql"
    ))
    .unwrap();
    let (setup, rest) = example.split_once("-- load").unwrap();
    c.batch_execute(setup).await.unwrap();
    load_requests(&c).await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        scalar(&c, "SELECT COUNT(*) FROM eval_set WHERE user_id = 'u42'").await,
        10
    );
    assert!(scalar(&c, "SELECT COUNT(*) FROM per_user WHERE user_id = 'u42'").await == 1);

    // The example's deletion steps.
    let (delete, _) = rest.split_once("-- check").unwrap();
    c.batch_execute(delete).await.unwrap();
    assert_eq!(
        scalar(&c, "SELECT COUNT(*) FROM eval_set WHERE user_id = 'u42'").await,
        0
    );
    assert_eq!(
        scalar(&c, "SELECT COUNT(*) FROM per_user WHERE user_id = 'u42'").await,
        0
    );
    // 490 rows of other users, and the example's own row of u1.
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM eval_set").await, 491);

    // Later writes close the segments the tombstones are in; two more
    // checkpoints replace the views' epochs that still held u42's rows.
    more_requests(&c, "b").await;
    c.batch_execute("FLUSH").await.unwrap();
    c.batch_execute("VACUUM requests; FLUSH").await.unwrap();
    let left = files_containing(&server.data_dir, "PRIVATE-u42");
    assert!(
        left.is_empty(),
        "files still holding u42's prompts: {left:?}"
    );
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM eval_set").await, 791);
}
