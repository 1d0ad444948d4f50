//! Cuts and reads `AS OF`, checked against PostgreSQL 15: a cut taken
//! while four writers insert; the table's rows at the cut go to a
//! PostgreSQL server, and each view read `AS OF CUT` must equal
//! PostgreSQL's answer to its query over them. More writes push the table
//! past its retention (the cut keeps what it needs), the server is killed
//! with SIGKILL, and the reads still give the same rows. Once the cut is
//! dropped, retention deletes those rows, and reads at the same offsets
//! fail with 55000 rather than give fewer rows.

mod common;

use common::postgres::Postgres;
use common::{scalar, sqlstate, text_rows, Server};

const FLAGS: [&str; 6] = [
    "--segment-bytes",
    "20000",
    "--tiering-interval-ms",
    "100",
    "--checkpoint-interval-ms",
    "200",
];

const TABLES: &str = "
    CREATE TABLE req (id BIGINT, user_id INT, ts TIMESTAMP, tokens BIGINT, body TEXT,
        WATERMARK FOR ts AS ts - INTERVAL '2 hours')
        APPEND ONLY WITH (partitions = 2, partition_key = 'user_id', retention_bytes = '120kB');
    CREATE TABLE users (user_id INT, tier TEXT) APPEND ONLY;
";

/// A view: its name, its query on Sluice, and the same on PostgreSQL.
const VIEWS: &[(&str, &str, &str)] = &[
    (
        "per_user",
        "SELECT user_id, count(*) AS n, sum(tokens) AS t FROM req GROUP BY user_id",
        "SELECT user_id, count(*) AS n, sum(tokens) AS t FROM req GROUP BY user_id",
    ),
    (
        "per_tier",
        "SELECT u.tier, count(*) AS n, max(r.tokens) AS top FROM req r JOIN users u ON r.user_id = u.user_id GROUP BY u.tier",
        "SELECT u.tier, count(*) AS n, max(r.tokens) AS top FROM req r JOIN users u ON r.user_id = u.user_id GROUP BY u.tier",
    ),
    (
        "per_window",
        "SELECT window_start, count(*) AS n, sum(tokens) AS t FROM TUMBLE(req, ts, INTERVAL '10 minutes') GROUP BY window_start",
        "SELECT date_bin('10 minutes', ts, TIMESTAMP '1970-01-01') AS window_start, count(*) AS n, sum(tokens) AS t FROM req GROUP BY 1",
    ),
];

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// One writer: `inserts` statements of 20 rows (and a user now and then).
async fn writer(c: tokio_postgres::Client, w: i64, inserts: i64) {
    for i in 0..inserts {
        let rows: Vec<String> = (0..20)
            .map(|j| {
                let id = w * 1_000_000 + i * 20 + j;
                format!(
                    "({id}, {}, TIMESTAMP '2026-01-01' + INTERVAL '{} seconds', {}, 'row {id}')",
                    id % 13,
                    (id * 7) % 3600,
                    id % 97
                )
            })
            .collect();
        c.batch_execute(&format!("INSERT INTO req VALUES {}", rows.join(", ")))
            .await
            .unwrap();
        if i % 10 == 0 {
            c.batch_execute(&format!(
                "INSERT INTO users VALUES ({}, 'tier{}')",
                (w * 5 + i) % 13,
                i % 3
            ))
            .await
            .unwrap();
        }
    }
}

/// The views read at the cut, each as PostgreSQL computes it over the
/// rows read at the cut.
async fn check_at_cut(c: &tokio_postgres::Client, pg: &tokio_postgres::Client, when: &str) {
    for (name, _, postgres) in VIEWS {
        let at = sorted(text_rows(c, &format!("SELECT * FROM {name} AS OF CUT c")).await);
        let expected = sorted(text_rows(pg, postgres).await);
        assert!(!expected.is_empty(), "{name}");
        assert_eq!(at, expected, "{name} AS OF CUT c {when}");
    }
}

async fn rows_at_cut(c: &tokio_postgres::Client) -> (Vec<String>, Vec<String>) {
    (
        sorted(text_rows(c, "SELECT id, user_id, ts, tokens FROM req AS OF CUT c").await),
        sorted(text_rows(c, "SELECT user_id, tier FROM users AS OF CUT c").await),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_at_a_cut_equal_postgres_through_writes_retention_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let sluice_dir = dir.path().join("sluice");
    std::fs::create_dir_all(&sluice_dir).unwrap();
    let mut server = Server::start_with(&sluice_dir, &FLAGS);
    let postgres = Postgres::start(dir.path());
    let pg = postgres.connect().await;
    pg.batch_execute(
        "CREATE TABLE req (id BIGINT, user_id INT, ts TIMESTAMP, tokens BIGINT);
         CREATE TABLE users (user_id INT, tier TEXT);",
    )
    .await
    .unwrap();
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    for (name, query, _) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }

    // Four writers; the cut is taken while they write.
    let mut writers = Vec::new();
    for w in 0..4 {
        writers.push(tokio::spawn(writer(server.connect().await, w, 30)));
    }
    while scalar(&c, "SELECT count(*) FROM req").await < 600 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    c.batch_execute("CREATE CUT c FOR ALL TABLES")
        .await
        .unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let total = scalar(&c, "SELECT count(*) FROM req").await;
    assert_eq!(total, 4 * 30 * 20);

    // The rows at the cut are those below its offsets, read another way.
    let offsets = text_rows(
        &c,
        "SELECT offsets FROM sluice_catalog.cuts WHERE cut_name = 'c' AND table_name = 'req'",
    )
    .await;
    let below: Vec<String> = offsets[0]
        .split(", ")
        .map(|p| {
            let (k, end) = p.split_once(" => ").unwrap();
            format!("(_partition = {k} AND _offset < {end})")
        })
        .collect();
    let by_offsets = sorted(
        text_rows(
            &c,
            &format!(
                "SELECT id, user_id, ts, tokens FROM req WHERE {}",
                below.join(" OR ")
            ),
        )
        .await,
    );
    let (req_rows, user_rows) = rows_at_cut(&c).await;
    assert_eq!(req_rows, by_offsets);
    assert!(
        req_rows.len() >= 600 && (req_rows.len() as i64) < total,
        "the cut was taken mid-write: {} of {total}",
        req_rows.len()
    );
    let n = scalar(
        &c,
        "SELECT rows FROM sluice_catalog.cuts WHERE table_name = 'req'",
    )
    .await;
    assert_eq!(n as usize, req_rows.len());

    // PostgreSQL gets the rows at the cut.
    for chunk in req_rows.chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split('|').collect();
                format!("({}, {}, '{}', {})", f[0], f[1], f[2], f[3])
            })
            .collect();
        pg.batch_execute(&format!("INSERT INTO req VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }
    for r in &user_rows {
        let (u, tier) = r.split_once('|').unwrap();
        pg.batch_execute(&format!("INSERT INTO users VALUES ({u}, '{tier}')"))
            .await
            .unwrap();
    }
    check_at_cut(&c, &pg, "after the writers").await;

    // The live views have moved on; the reads at the cut have not.
    c.batch_execute("FLUSH").await.unwrap();
    let live = scalar(&c, "SELECT sum(n) FROM per_user").await;
    assert_eq!(live, total);

    // Past retention: the cut keeps the segments it needs.
    for round in 0..6 {
        c.batch_execute(&format!(
            "INSERT INTO req SELECT 9000000 + {round} * 1000 + i, i % 13, TIMESTAMP '2026-01-01 01:00:00', 1, \
             md5(CAST(i AS TEXT)) || md5(CAST(i + 1 AS TEXT)) || md5(CAST(i + 2 AS TEXT)) || md5(CAST(i + 3 AS TEXT)) \
             || md5(CAST(i + {round} AS TEXT)) || md5(CAST(i * 7 AS TEXT)) FROM generate_series(1, 500) i"
        ))
        .await
        .unwrap();
    }
    let mut waited = 0;
    while scalar(
        &c,
        "SELECT sum(pinned_segments) FROM sluice_catalog.partitions WHERE table_name = 'req'",
    )
    .await
        == 0
    {
        waited += 1;
        assert!(
            waited < 300,
            "retention never reached the cut's segments: {:?}",
            text_rows(&c, "SELECT * FROM sluice_catalog.partitions").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        scalar(
            &c,
            "SELECT bytes_pinned FROM sluice_catalog.cuts WHERE table_name = 'req'"
        )
        .await
            > 0
    );
    assert_eq!(rows_at_cut(&c).await, (req_rows.clone(), user_rows.clone()));
    check_at_cut(&c, &pg, "after retention ran").await;

    // SIGKILL: the cut is durable, the reads exact.
    drop(c);
    server.kill9();
    server.restart();
    let c = server.connect().await;
    assert_eq!(rows_at_cut(&c).await, (req_rows.clone(), user_rows.clone()));
    check_at_cut(&c, &pg, "after SIGKILL").await;

    // Without the cut, retention deletes those rows: a read at a position
    // it took, or a view whose rows it took, fails instead of returning
    // fewer rows.
    let at = offsets[0].clone();
    c.batch_execute("DROP CUT c").await.unwrap();
    let mut waited = 0;
    while scalar(
        &c,
        "SELECT min(start_offset) FROM sluice_catalog.partitions WHERE table_name = 'req'",
    )
    .await
        == 0
    {
        waited += 1;
        assert!(waited < 300, "retention never ran after DROP CUT");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for sql in [
        "SELECT count(*) FROM req AS OF OFFSETS (0 => 1, 1 => 1)".to_string(),
        format!("SELECT * FROM per_user AS OF OFFSETS ({at})"),
    ] {
        let e = c.simple_query(&sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), "55000", "{sql}: {e:?}");
    }
    let e = c
        .simple_query("SELECT * FROM req AS OF CUT c")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42704");
}
