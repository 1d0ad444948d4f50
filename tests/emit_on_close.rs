//! `EMIT ON WINDOW CLOSE` over window functions and over interval joins,
//! checked against PostgreSQL 15: the same rows (less those Sluice listed
//! as late) go to a PostgreSQL server beside it, and each view must hold
//! exactly PostgreSQL's answer to its query restricted to what is final at
//! the watermark: for window functions, the rows behind the watermark
//! whose following rows (`lead`, `n FOLLOWING`) are behind it too; for an
//! aggregate over an interval join, the windows that end by the least of
//! the watermarks that bound the window's time through the join. The
//! stream is out of order (some rows late), and the server is killed with
//! SIGKILL and restarted between checks: rows emitted for good are never
//! emitted twice nor lost.

mod common;

use common::postgres::Postgres;
use common::{crash_runs_or, text_rows, Server};
use rand::{Rng, SeedableRng};

const SLUICE_TABLES: &str = "
    CREATE TABLE ev (id BIGINT, k INT, v INT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '3 seconds') APPEND ONLY WITH (partitions = 1);
    CREATE TABLE clicks (id BIGINT, user_id INT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '2 seconds') APPEND ONLY WITH (partitions = 1);
    CREATE TABLE views (id BIGINT, user_id INT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '2 seconds') APPEND ONLY WITH (partitions = 1);
";

const POSTGRES_TABLES: &str = "
    CREATE TABLE ev (id BIGINT, k INT, v INT, ts TIMESTAMP);
    CREATE TABLE clicks (id BIGINT, user_id INT, ts TIMESTAMP);
    CREATE TABLE views (id BIGINT, user_id INT, ts TIMESTAMP);
";

/// A view: its query on Sluice, and on PostgreSQL the same query over
/// `{ev}`, `{clicks}` and `{views}` (the rows the view accepted) with what
/// is final as of `{h_ev}` (ev's watermark) or `{h_clicks}` and `{h_views}`.
struct Case {
    name: &'static str,
    sluice: &'static str,
    postgres: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "ev_ranked",
        sluice: "SELECT id, k, v, ts,
                    row_number() OVER (PARTITION BY k ORDER BY ts) AS rn,
                    rank() OVER (PARTITION BY k ORDER BY ts) AS rk,
                    lag(v) OVER (PARTITION BY k ORDER BY ts) AS prev,
                    lag(v, 2, -1) OVER (PARTITION BY k ORDER BY ts) AS prev2,
                    sum(v) OVER (PARTITION BY k ORDER BY ts) AS running,
                    sum(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS last3,
                    first_value(v) OVER (PARTITION BY k ORDER BY ts) AS first_v,
                    count(*) OVER (PARTITION BY k ORDER BY ts) AS n
                 FROM ev",
        postgres: "SELECT * FROM (SELECT id, k, v, ts,
                    row_number() OVER (PARTITION BY k ORDER BY ts) AS rn,
                    rank() OVER (PARTITION BY k ORDER BY ts) AS rk,
                    lag(v) OVER (PARTITION BY k ORDER BY ts) AS prev,
                    lag(v, 2, -1) OVER (PARTITION BY k ORDER BY ts) AS prev2,
                    sum(v) OVER (PARTITION BY k ORDER BY ts) AS running,
                    sum(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS last3,
                    first_value(v) OVER (PARTITION BY k ORDER BY ts) AS first_v,
                    count(*) OVER (PARTITION BY k ORDER BY ts) AS n
                 FROM {ev} ev) q WHERE ts < {h_ev}",
    },
    Case {
        name: "ev_ahead",
        sluice: "SELECT id, k, ts,
                    lead(v) OVER (PARTITION BY k ORDER BY ts) AS next_v,
                    max(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS m
                 FROM ev",
        postgres: "SELECT id, k, ts, next_v, m FROM (SELECT id, k, ts,
                    lead(v) OVER (PARTITION BY k ORDER BY ts) AS next_v,
                    max(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS m,
                    lead(ts, 2) OVER (PARTITION BY k ORDER BY ts) AS second_after
                 FROM {ev} ev) q WHERE second_after < {h_ev}",
    },
    Case {
        name: "ev_whole",
        sluice: "SELECT id, ts, row_number() OVER (ORDER BY ts) AS rn,
                    sum(v) OVER (ORDER BY ts ROWS 3 PRECEDING) AS s
                 FROM ev WHERE v % 3 <> 0",
        postgres: "SELECT * FROM (SELECT id, ts, row_number() OVER (ORDER BY ts) AS rn,
                    sum(v) OVER (ORDER BY ts ROWS 3 PRECEDING) AS s
                 FROM {ev} ev WHERE v % 3 <> 0) q WHERE ts < {h_ev}",
    },
    Case {
        name: "joined_bins",
        sluice: "SELECT date_bin(INTERVAL '10 seconds', c.ts, TIMESTAMP '1970-01-01') AS w,
                    count(*) AS n, sum(v.id) AS s
                 FROM clicks c JOIN views v ON c.user_id = v.user_id
                    AND c.ts BETWEEN v.ts AND v.ts + INTERVAL '5 seconds'
                 GROUP BY 1",
        postgres: "SELECT date_bin(INTERVAL '10 seconds', c.ts, TIMESTAMP '1970-01-01') AS w,
                    count(*) AS n, sum(v.id) AS s
                 FROM {clicks} c JOIN {views} v ON c.user_id = v.user_id
                    AND c.ts BETWEEN v.ts AND v.ts + INTERVAL '5 seconds'
                 GROUP BY 1
                 HAVING date_bin(INTERVAL '10 seconds', c.ts, TIMESTAMP '1970-01-01') + INTERVAL '10 seconds'
                    <= least({h_clicks}, {h_views})",
    },
    Case {
        name: "joined_tumble",
        sluice: "SELECT window_start, c.user_id, count(*) AS n
                 FROM TUMBLE(clicks, ts, INTERVAL '10 seconds') c JOIN views v ON c.user_id = v.user_id
                    AND v.ts BETWEEN c.ts - INTERVAL '1 second' AND c.ts + INTERVAL '4 seconds'
                 GROUP BY window_start, c.user_id",
        postgres: "SELECT window_start, c.user_id, count(*) AS n
                 FROM (SELECT *, date_bin(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01') AS window_start
                       FROM {clicks} clicks) c
                 JOIN {views} v ON c.user_id = v.user_id
                    AND v.ts BETWEEN c.ts - INTERVAL '1 second' AND c.ts + INTERVAL '4 seconds'
                 GROUP BY window_start, c.user_id
                 HAVING window_start + INTERVAL '10 seconds' <= least({h_clicks}, {h_views} - INTERVAL '4 seconds')",
    },
];

type Rand = rand::rngs::StdRng;

/// The stream's rows: ids, and event times that never repeat (ties would
/// leave `row_number()` free to number peers either way).
struct Stream {
    rng: Rand,
    now_ms: i64,
    next_id: i64,
    used: std::collections::HashSet<i64>,
}

impl Stream {
    /// An event time up to `jitter_ms` behind now, as a TIMESTAMP literal.
    fn time(&mut self, jitter_ms: i64) -> String {
        let mut us = (self.now_ms - self.rng.random_range(0..jitter_ms)) * 1000;
        while !self.used.insert(us) {
            us += 1;
        }
        let (s, frac) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
        format!(
            "TIMESTAMP '2026-01-01 {:02}:{:02}:{:02}.{frac:06}'",
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    }

    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// One INSERT per table around the next moment of the stream.
    fn writes(&mut self) -> Vec<String> {
        self.now_ms += self.rng.random_range(0..1200);
        let mut ev = Vec::new();
        for _ in 0..self.rng.random_range(1..5) {
            let (id, t) = (self.id(), self.time(4500));
            let (k, v) = (self.rng.random_range(0..4), self.rng.random_range(0..50));
            ev.push(format!("({id}, {k}, {v}, {t})"));
        }
        let mut clicks = Vec::new();
        for _ in 0..self.rng.random_range(0..5) {
            let (id, t) = (self.id(), self.time(3000));
            clicks.push(format!("({id}, {}, {t})", self.rng.random_range(0..3)));
        }
        let mut views = Vec::new();
        for _ in 0..self.rng.random_range(0..5) {
            let (id, t) = (self.id(), self.time(3000));
            views.push(format!("({id}, {}, {t})", self.rng.random_range(0..3)));
        }
        [("ev", ev), ("clicks", clicks), ("views", views)]
            .into_iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(t, rows)| format!("INSERT INTO {t} VALUES {}", rows.join(", ")))
            .collect()
    }
}

async fn write(sluice: &tokio_postgres::Client, pg: &tokio_postgres::Client, stream: &mut Stream) {
    for w in stream.writes() {
        sluice.batch_execute(&w).await.unwrap();
        pg.batch_execute(&w).await.unwrap();
    }
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// A table's watermark on Sluice (one partition: its largest event time
/// less the delay), as a TIMESTAMP literal.
async fn watermark(c: &tokio_postgres::Client, table: &str, delay: &str) -> String {
    let rows = text_rows(
        c,
        &format!("SELECT CAST(max(ts) - INTERVAL '{delay}' AS TEXT) FROM {table}"),
    )
    .await;
    format!("TIMESTAMP '{}'", rows[0])
}

/// The ids of `table`'s rows that view `view` listed as late.
async fn late_ids(c: &tokio_postgres::Client, view: &str, table: &str) -> Vec<String> {
    text_rows(
        c,
        &format!(
            "SELECT CAST(t.id AS TEXT) FROM {table} t JOIN sluice_catalog.late_rows l \
             ON t._partition = l.\"partition\" AND t._offset = l.\"offset\" \
             WHERE l.view_name = '{view}' AND l.table_name = '{table}'"
        ),
    )
    .await
}

async fn check_views(sluice: &tokio_postgres::Client, pg: &tokio_postgres::Client, when: &str) {
    sluice.batch_execute("FLUSH").await.unwrap();
    let h_ev = watermark(sluice, "ev", "3 seconds").await;
    let h_clicks = watermark(sluice, "clicks", "2 seconds").await;
    let h_views = watermark(sluice, "views", "2 seconds").await;
    let mut sizes = Vec::new();
    let mut late_total = 0;
    for case in CASES {
        let mut query = case
            .postgres
            .replace("{h_ev}", &h_ev)
            .replace("{h_clicks}", &h_clicks)
            .replace("{h_views}", &h_views);
        for table in ["ev", "clicks", "views"] {
            let late = late_ids(sluice, case.name, table).await;
            late_total += late.len();
            let accepted = match late.is_empty() {
                true => format!("(SELECT * FROM {table})"),
                false => format!(
                    "(SELECT * FROM {table} WHERE id NOT IN ({}))",
                    late.join(", ")
                ),
            };
            query = query.replace(&format!("{{{table}}}"), &accepted);
        }
        let view = sorted(text_rows(sluice, &format!("SELECT * FROM {}", case.name)).await);
        let expected = sorted(text_rows(pg, &query).await);
        assert_eq!(view, expected, "{} {when}\nPostgreSQL: {query}", case.name);
        sizes.push(format!("{}={}", case.name, view.len()));
    }
    eprintln!("{when}: {} late={late_total}", sizes.join(" "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_emitted_on_window_close_equal_postgres_through_late_rows_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let sluice_dir = dir.path().join("sluice");
    std::fs::create_dir_all(&sluice_dir).unwrap();
    let mut server = Server::start_with(&sluice_dir, &["--checkpoint-interval-ms", "200"]);
    let postgres = Postgres::start(dir.path());
    let pg = postgres.connect().await;
    pg.batch_execute(POSTGRES_TABLES).await.unwrap();
    let c = server.connect().await;
    c.batch_execute(SLUICE_TABLES).await.unwrap();
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut stream = Stream {
        rng: Rand::seed_from_u64(seed),
        now_ms: 10_000,
        next_id: 0,
        used: Default::default(),
    };
    // Rows before the views: they backfill.
    for _ in 0..8 {
        write(&c, &pg, &mut stream).await;
    }
    for case in CASES {
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {} AS {} EMIT ON WINDOW CLOSE",
            case.name, case.sluice
        ))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    }
    check_views(&c, &pg, "after backfill").await;
    for round in 0..2 {
        for _ in 0..12 {
            write(&c, &pg, &mut stream).await;
        }
        check_views(&c, &pg, &format!("after round {round}")).await;
    }
    let late = common::scalar(&c, "SELECT count(*) FROM sluice_catalog.late_rows").await;
    assert!(late > 0, "the stream should have late rows");
    // Every view has emitted rows by now: the comparison is not of empties.
    for case in CASES {
        let n = common::scalar(&c, &format!("SELECT count(*) FROM {}", case.name)).await;
        assert!(n > 0, "{} emitted nothing", case.name);
    }
    drop(c);

    // SIGKILL while the views are still applying what was just written.
    for kill in 0..crash_runs_or(3) {
        let c = server.connect().await;
        for _ in 0..stream.rng.random_range(3..15) {
            write(&c, &pg, &mut stream).await;
        }
        drop(c);
        let pause = stream.rng.random_range(0..400);
        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        server.kill9();
        server.restart();
        let c = server.connect().await;
        check_views(&c, &pg, &format!("after kill {kill}")).await;
    }
}
