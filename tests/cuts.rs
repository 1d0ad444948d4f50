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

/// Offsets replayed so far to compute views at a position.
async fn replayed(server: &Server) -> u64 {
    let (_, metrics) = common::http_get(server.http_port, "/metrics").await;
    common::sample(&metrics, "sluice_view_replayed_rows_total") as u64
}

/// A view's rows at a cut, and what computing them replayed.
async fn view_at(server: &Server, c: &tokio_postgres::Client, sql: &str) -> (Vec<String>, u64) {
    let before = replayed(server).await;
    let rows = sorted(text_rows(c, sql).await);
    (rows, replayed(server).await - before)
}

/// Both views read at cut c1 give the rows they gave at first, and
/// replay no row of the log.
async fn check_at_c1(server: &Server, at_cut: &[Vec<String>], when: &str) {
    let c = server.connect().await;
    for (k, view) in ["per_k", "per_minute"].iter().enumerate() {
        let (rows, replayed_rows) =
            view_at(server, &c, &format!("SELECT * FROM {view} AS OF CUT c1")).await;
        assert_eq!(rows, at_cut[k], "{view} AS OF CUT c1 {when}");
        assert_eq!(replayed_rows, 0, "{view} at the cut {when} replays no row");
    }
}

/// A cut keeps each view's checkpoint at the cut: after ten times more
/// rows than the cut holds, a read `AS OF CUT` replays none of the log
/// (before, every read computed the view from its first row), through a
/// restart and a SIGKILL; a read at a later position replays only the rows
/// after the kept checkpoint. Dropping the cut lets the checkpoint go; an
/// erasure deletes the checkpoints it kept (they hold the erased rows),
/// and reads at the cut then give the rows without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_read_at_a_cut_starts_from_the_checkpoint_the_cut_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let sluice_dir = dir.path().join("sluice");
    std::fs::create_dir_all(&sluice_dir).unwrap();
    let mut server = Server::start_with(&sluice_dir, &["--checkpoint-interval-ms", "100"]);
    // The same rows in PostgreSQL 15 give each expected answer.
    let postgres = Postgres::start(dir.path());
    let pg = postgres.connect().await;
    pg.batch_execute(
        "CREATE TABLE ev (id BIGINT NOT NULL, k TEXT NOT NULL, v BIGINT, ts TIMESTAMP NOT NULL)",
    )
    .await
    .unwrap();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT NOT NULL, k TEXT NOT NULL, v BIGINT, ts TIMESTAMP NOT NULL,
             WATERMARK FOR ts AS ts - INTERVAL '1 minute')
             APPEND ONLY WITH (partitions = 3, partition_key = 'k');
         CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k;
         CREATE MATERIALIZED VIEW per_minute AS
             SELECT window_start, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1 minute')
             GROUP BY window_start;",
    )
    .await
    .unwrap();
    let insert = |from: i64, to: i64| {
        format!(
            "INSERT INTO ev SELECT i, 'k' || (i % 7), i % 100,
                 TIMESTAMP '2026-01-01' + i * INTERVAL '1 second'
             FROM generate_series({from}, {to}) AS s(i)"
        )
    };
    for (from, to) in [(1, 500), (501, 1000)] {
        c.batch_execute(&insert(from, to)).await.unwrap();
        pg.batch_execute(&insert(from, to)).await.unwrap();
    }
    c.batch_execute("CREATE CUT c1").await.unwrap();
    // The views' rows at the cut, as PostgreSQL computes them over the
    // same rows.
    const PER_K: &str = "SELECT k, count(*), sum(v) FROM ev GROUP BY k";
    let expected = [
        ("per_k", PER_K),
        (
            "per_minute",
            "SELECT date_bin('1 minute', ts, TIMESTAMP '1970-01-01'), count(*) FROM ev GROUP BY 1",
        ),
    ];
    let mut at_cut = Vec::new();
    for (view, query) in expected {
        let (rows, replayed_rows) =
            view_at(&server, &c, &format!("SELECT * FROM {view} AS OF CUT c1")).await;
        let want = sorted(text_rows(&pg, query).await);
        assert_eq!(rows, want, "{view} AS OF CUT c1");
        assert_eq!(replayed_rows, 0, "{view} at the cut replays no row");
        at_cut.push(rows);
    }
    for i in 0..10 {
        let rows = insert(1001 + i * 1000, 2000 + i * 1000);
        c.batch_execute(&rows).await.unwrap();
        pg.batch_execute(&rows).await.unwrap();
    }
    c.batch_execute("FLUSH").await.unwrap();
    check_at_c1(&server, &at_cut, "after 10x more rows").await;
    // A later position replays the log from the kept checkpoint: 1,000
    // rows past the cut, not 2,000 from the start.
    let ends = text_rows(
        &c,
        "SELECT offsets FROM sluice_catalog.cuts WHERE cut_name = 'c1'",
    )
    .await;
    let cut_ends: Vec<u64> = ends[0]
        .split(", ")
        .map(|p| p.split(" => ").nth(1).unwrap().parse().unwrap())
        .collect();
    c.batch_execute("CREATE CUT c2").await.unwrap();
    let (rows, replayed_rows) = view_at(&server, &c, "SELECT * FROM per_k AS OF CUT c2").await;
    assert_eq!(replayed_rows, 0);
    assert_eq!(rows, sorted(text_rows(&pg, PER_K).await));
    c.batch_execute("DROP CUT c2").await.unwrap();
    let c2_ends = text_rows(
        &c,
        "SELECT string_agg(p || ' => ' || o, ', ' ORDER BY p) FROM (
             SELECT _partition AS p, max(_offset) + 1 AS o FROM ev WHERE id <= 2000 GROUP BY 1) s",
    )
    .await;
    let (rows, replayed_rows) = view_at(
        &server,
        &c,
        &format!("SELECT * FROM per_k AS OF OFFSETS ({})", c2_ends[0]),
    )
    .await;
    assert_eq!(
        rows,
        sorted(
            text_rows(
                &pg,
                "SELECT k, count(*), sum(v) FROM ev WHERE id <= 2000 GROUP BY k"
            )
            .await
        )
    );
    assert_eq!(replayed_rows, 1000, "only the rows after c1's checkpoint");
    assert_eq!(cut_ends.iter().sum::<u64>(), 1000);
    drop(c);
    server.terminate();
    server.start_again();
    check_at_c1(&server, &at_cut, "after a restart").await;
    server.kill9();
    server.start_again();
    check_at_c1(&server, &at_cut, "after SIGKILL").await;
    // Dropped, the cut keeps nothing: a read at its offsets replays from
    // the start.
    let c = server.connect().await;
    c.batch_execute("DROP CUT c1").await.unwrap();
    let c1_offsets = ends[0].clone();
    let (rows, replayed_rows) = view_at(
        &server,
        &c,
        &format!("SELECT * FROM per_k AS OF OFFSETS ({c1_offsets})"),
    )
    .await;
    assert_eq!(rows, at_cut[0]);
    assert_eq!(replayed_rows, 1000);
    // An erasure deletes the checkpoints a cut keeps: read at the cut,
    // the view no longer has the erased rows, computed from the log.
    c.batch_execute("CREATE CUT c3").await.unwrap();
    c.batch_execute("DELETE FROM ev WHERE k = 'k3'")
        .await
        .unwrap();
    pg.batch_execute("DELETE FROM ev WHERE k = 'k3'")
        .await
        .unwrap();
    let (rows, replayed_rows) = view_at(&server, &c, "SELECT * FROM per_k AS OF CUT c3").await;
    assert_eq!(rows, sorted(text_rows(&pg, PER_K).await));
    assert!(rows.iter().all(|r| !r.starts_with("k3|")));
    assert_eq!(replayed_rows, 11_000, "replayed from the start");
}
