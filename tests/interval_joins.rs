//! Time-bounded joins: interval joins (equi-joins bounded by a time band
//! between two watermarked tables) and window joins (two TUMBLEs of one
//! size joined on their windows). After random out-of-order streams, with
//! SIGKILL at random moments and restarts from checkpoints, each view
//! equals its query run as a batch query over the rows it did not list as
//! late; an outer join's NULL-padded rows are there exactly for the rows
//! whose band or window the other table's watermark has closed (or whose
//! key is NULL). State stays bounded by the band or the open windows, and
//! what cannot be bounded is refused.

mod common;

use common::{assert_view_refused, crash_runs_or, scalar, text_rows, Server};
use rand::{Rng, SeedableRng};

const TABLES: &str = "
    CREATE TABLE auction (id BIGINT, seller BIGINT, at TIMESTAMP,
        WATERMARK FOR at AS at - INTERVAL '2 seconds')
        APPEND ONLY WITH (partitions = 2, watermark_idle_timeout = '1 hour');
    CREATE TABLE bid (auction BIGINT, price BIGINT, at TIMESTAMP,
        WATERMARK FOR at AS at - INTERVAL '2 seconds')
        APPEND ONLY WITH (partitions = 2, watermark_idle_timeout = '1 hour');
";

/// A view: its name and its query over `{auction}` and `{bid}` (the tables,
/// or their TUMBLEs of `window` for a window join) and `{auction_windows}`
/// and `{bid_windows}` (their TUMBLEs of [`AGGREGATED_WINDOW`], for
/// aggregates), and for outer joins when a preserved row is final: a
/// condition on it against `{wm}`, the other table's watermark (or
/// `{wm_auction}` and `{wm_bid}`).
struct Case {
    name: &'static str,
    query: &'static str,
    window: Option<&'static str>,
    left_final: Option<&'static str>,
    right_final: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        name: "inner_band",
        query: "SELECT a.id, a.seller, b.price, a.at AS a_at, b.at AS b_at FROM {auction} a \
                JOIN {bid} b ON a.id = b.auction AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
        window: None,
        left_final: None,
        right_final: None,
    },
    Case {
        name: "inner_pair",
        query: "SELECT a.id, b.price FROM {auction} a, {bid} b \
                WHERE a.id = b.auction AND b.at >= a.at - INTERVAL '3 seconds' \
                AND b.at < a.at + INTERVAL '4 seconds' AND b.price > a.seller",
        window: None,
        left_final: None,
        right_final: None,
    },
    Case {
        name: "left_band",
        query: "SELECT a.id, a.at AS a_at, b.price FROM {auction} a \
                LEFT JOIN {bid} b ON a.id = b.auction AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
        window: None,
        left_final: Some("a.at + INTERVAL '10 seconds' < {wm}"),
        right_final: None,
    },
    Case {
        name: "right_band",
        query: "SELECT a.seller, b.auction, b.price, b.at AS b_at FROM {auction} a \
                RIGHT JOIN {bid} b ON a.id = b.auction AND a.at BETWEEN b.at - INTERVAL '5 seconds' AND b.at",
        window: None,
        left_final: None,
        right_final: Some("b.at < {wm}"),
    },
    Case {
        name: "full_band",
        query: "SELECT a.id, a.at AS a_at, b.auction, b.at AS b_at FROM {auction} a \
                FULL JOIN {bid} b ON a.id = b.auction AND b.at >= a.at - INTERVAL '3 seconds' \
                AND b.at <= a.at + INTERVAL '5 seconds'",
        window: None,
        left_final: Some("a.at + INTERVAL '5 seconds' < {wm}"),
        right_final: Some("b.at + INTERVAL '3 seconds' < {wm}"),
    },
    Case {
        name: "agg_over_band",
        query: "SELECT a.seller, count(*) AS n, sum(b.price) AS total FROM {auction} a \
                JOIN {bid} b ON a.id = b.auction AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds' \
                GROUP BY a.seller",
        window: None,
        left_final: None,
        right_final: None,
    },
    Case {
        name: "inner_window",
        query: "SELECT a.id, a.seller, b.price, a.window_start, b.window_end, b.at AS b_at FROM {auction} a \
                JOIN {bid} b ON a.id = b.auction AND a.window_start = b.window_start \
                AND a.window_end = b.window_end",
        window: Some("5 seconds"),
        left_final: None,
        right_final: None,
    },
    Case {
        name: "left_window",
        query: "SELECT a.id, a.window_start, a.at AS a_at, b.price FROM {auction} a \
                LEFT JOIN {bid} b ON a.window_start = b.window_start AND a.id = b.auction",
        window: Some("5 seconds"),
        left_final: Some("a.window_end <= {wm}"),
        right_final: None,
    },
    Case {
        name: "right_window",
        query: "SELECT a.seller, b.auction, b.price, b.window_start FROM {auction} a \
                RIGHT JOIN {bid} b ON a.id = b.auction AND a.window_start = b.window_start \
                AND a.window_end = b.window_end AND b.price > a.seller",
        window: Some("5 seconds"),
        left_final: None,
        right_final: Some("b.window_end <= {wm}"),
    },
    Case {
        name: "full_window",
        query: "SELECT a.id, a.window_start AS a_window, b.auction, b.window_start AS b_window \
                FROM {auction} a FULL JOIN {bid} b \
                ON a.id = b.auction AND a.window_start = b.window_start AND a.window_end = b.window_end",
        window: Some("5 seconds"),
        left_final: Some("a.window_end <= {wm}"),
        right_final: Some("b.window_end <= {wm}"),
    },
    Case {
        name: "agg_over_window",
        query: "SELECT a.window_start, a.seller, count(*) AS n, max(b.price) AS top FROM {auction} a \
                JOIN {bid} b ON a.id = b.auction AND a.window_start = b.window_start \
                AND a.window_end = b.window_end GROUP BY a.window_start, a.seller",
        window: Some("5 seconds"),
        left_final: None,
        right_final: None,
    },
    // A table joined with itself: one source whose watermark moves both
    // sides.
    Case {
        name: "left_self_band",
        query: "SELECT a.id, a.at AS a_at, b.price, b.at AS b_at FROM \
                (SELECT auction AS id, at FROM {bid} x) a \
                LEFT JOIN {bid} b ON a.id = b.auction \
                AND b.at BETWEEN a.at + INTERVAL '1 second' AND a.at + INTERVAL '4 seconds'",
        window: None,
        left_final: Some("a.at + INTERVAL '4 seconds' < {wm}"),
        right_final: None,
    },
    // A band against an aggregate grouped by the window_end of a TUMBLE
    // (Nexmark q7): the aggregate's rows change until the watermark passes
    // their window_end, and the join takes their pairs back and forth.
    Case {
        name: "band_on_window_max",
        query: "SELECT b.auction, b.price, b.at AS b_at, m.window_end FROM {bid} b \
                JOIN (SELECT max(price) AS top, window_end FROM {bid_windows} w GROUP BY window_end) m \
                ON b.price = m.top AND b.at BETWEEN m.window_end - INTERVAL '5 seconds' AND m.window_end",
        window: None,
        left_final: None,
        right_final: None,
    },
    Case {
        name: "left_window_groups",
        query: "SELECT a.id, a.window_end, a.n, b.price, b.at AS b_at FROM \
                (SELECT seller AS id, count(*) AS n, window_end FROM {auction_windows} w \
                 GROUP BY seller, window_end) a \
                LEFT JOIN {bid} b ON a.id = b.auction \
                AND b.at BETWEEN a.window_end - INTERVAL '5 seconds' AND a.window_end",
        window: None,
        left_final: Some("a.window_end < {wm_bid} AND a.window_end < {wm_auction}"),
        right_final: None,
    },
    Case {
        name: "right_over_window_groups",
        query: "SELECT a.id, a.top, a.window_end, b.auction, b.price, b.at AS b_at FROM \
                (SELECT seller AS id, max(id) AS top, window_end FROM {auction_windows} w \
                 GROUP BY seller, window_end) a \
                RIGHT JOIN {bid} b ON a.id = b.auction \
                AND a.window_end BETWEEN b.at AND b.at + INTERVAL '5 seconds'",
        window: None,
        left_final: None,
        right_final: Some("b.at + INTERVAL '5 seconds' < {wm}"),
    },
    // The same, keyed by window_start: its rows change until a window
    // after their time.
    Case {
        name: "full_window_start_groups",
        query: "SELECT a.id, a.n, a.window_start, b.auction, b.price, b.at AS b_at FROM \
                (SELECT seller AS id, count(*) AS n, window_start FROM {auction_windows} w \
                 GROUP BY seller, window_start) a \
                FULL JOIN {bid} b ON a.id = b.auction \
                AND b.at BETWEEN a.window_start AND a.window_start + INTERVAL '3 seconds'",
        window: None,
        left_final: Some(
            "a.window_start + INTERVAL '3 seconds' < {wm_bid} \
             AND a.window_start + INTERVAL '5 seconds' <= {wm_auction}",
        ),
        right_final: Some("b.at + INTERVAL '5 seconds' <= {wm}"),
    },
];

/// The TUMBLE the window aggregates above group by.
const AGGREGATED_WINDOW: &str = "5 seconds";

impl Case {
    /// The view's query: the tables, or their TUMBLEs.
    fn view_query(&self) -> String {
        let input = |table: &str| match self.window {
            Some(size) => format!("TUMBLE({table}, at, INTERVAL '{size}')"),
            None => table.to_string(),
        };
        let windows = |table: &str| format!("TUMBLE({table}, at, INTERVAL '{AGGREGATED_WINDOW}')");
        self.query
            .replace("{auction}", &input("auction"))
            .replace("{bid}", &input("bid"))
            .replace("{auction_windows}", &windows("auction"))
            .replace("{bid_windows}", &windows("bid"))
    }

    /// The same query as a batch query over the rows the view accepted,
    /// windowed as TUMBLE windows them.
    fn batch_query(&self) -> String {
        let windowed = |table: &str, size: &str| {
            format!(
                "(SELECT *, date_bin(INTERVAL '{size}', at) AS window_start, \
                 date_bin(INTERVAL '{size}', at) + INTERVAL '{size}' AS window_end FROM {} w)",
                accepted(table, self.name)
            )
        };
        let input = |table: &str| match self.window {
            Some(size) => windowed(table, size),
            None => accepted(table, self.name),
        };
        self.query
            .replace("{auction}", &input("auction"))
            .replace("{bid}", &input("bid"))
            .replace("{auction_windows}", &windowed("auction", AGGREGATED_WINDOW))
            .replace("{bid_windows}", &windowed("bid", AGGREGATED_WINDOW))
    }
}

type Rand = rand::rngs::StdRng;

/// Event time of the stream: seconds since 2026-01-01 00:00:00.
fn ts(seconds_ms: i64) -> String {
    let base = 1_767_225_600_000i64;
    format!("to_timestamp_millis({})", base + seconds_ms)
}

/// One statement of auctions and one of bids around event time `now_ms`,
/// up to 4 seconds out of order (so that some rows are late), with keys
/// that match often and some NULLs.
fn writes(rng: &mut Rand, now_ms: i64) -> Vec<String> {
    let mut auctions = Vec::new();
    for _ in 0..rng.random_range(1..6) {
        let at = now_ms - rng.random_range(0..4000);
        auctions.push(format!(
            "({}, {}, {})",
            rng.random_range(0..12),
            rng.random_range(0..50),
            ts(at)
        ));
    }
    let mut bids = Vec::new();
    for _ in 0..rng.random_range(1..8) {
        let at = now_ms - rng.random_range(0..4000);
        let auction = match rng.random_range(0..10) {
            0 => "NULL".to_string(),
            _ => rng.random_range(0..14).to_string(),
        };
        bids.push(format!(
            "({auction}, {}, {})",
            rng.random_range(0..100),
            ts(at)
        ));
    }
    vec![
        format!("INSERT INTO auction VALUES {}", auctions.join(", ")),
        format!("INSERT INTO bid VALUES {}", bids.join(", ")),
    ]
}

/// A table's rows that view `view` did not list as late, as a derived
/// table of the same name.
fn accepted(table: &str, view: &str) -> String {
    let columns = match table {
        "auction" => "t.id, t.seller, t.at",
        _ => "t.auction, t.price, t.at",
    };
    format!(
        "(SELECT {columns} FROM {table} t LEFT JOIN \
         (SELECT \"partition\", \"offset\" FROM sluice_catalog.late_rows \
          WHERE view_name = '{view}' AND table_name = '{table}') l \
         ON t._partition = l.\"partition\" AND t._offset = l.\"offset\" WHERE l.\"offset\" IS NULL)"
    )
}

/// A table's watermark as its rows make it: the least over partitions of
/// the largest event time, less the 2-second delay.
async fn watermark(c: &tokio_postgres::Client, table: &str) -> String {
    let rows = text_rows(
        c,
        &format!(
            "SELECT CAST(min(m) - INTERVAL '2 seconds' AS TEXT) FROM \
             (SELECT _partition, max(at) AS m FROM {table} GROUP BY _partition)"
        ),
    )
    .await;
    rows[0].clone()
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// Every view equals its batch query over its accepted rows; outer rows
/// padded with NULLs only where their band or window is closed.
async fn check_views(c: &tokio_postgres::Client, when: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let (wm_auction, wm_bid) = (watermark(c, "auction").await, watermark(c, "bid").await);
    let mut sizes = Vec::new();
    for case in CASES {
        let mut batch = case.batch_query();
        // Outer rows appear once final: the other side's watermark closed
        // the row's band or window, or its key is NULL (it can never match).
        let mut closed = Vec::new();
        let marks = |done: &str| {
            done.replace("{wm_bid}", &format!("TIMESTAMP '{wm_bid}'"))
                .replace("{wm_auction}", &format!("TIMESTAMP '{wm_auction}'"))
        };
        if let Some(done) = case.left_final {
            let done = marks(&done.replace("{wm}", &format!("TIMESTAMP '{wm_bid}'")));
            closed.push(format!("b.auction IS NOT NULL OR a.id IS NULL OR {done}"));
        }
        if let Some(done) = case.right_final {
            let done = marks(&done.replace("{wm}", &format!("TIMESTAMP '{wm_auction}'")));
            closed.push(format!("a.id IS NOT NULL OR b.auction IS NULL OR {done}"));
        }
        if !closed.is_empty() {
            let conditions = closed
                .iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" AND ");
            batch = format!("{batch} WHERE {conditions}");
        }
        let view = sorted(text_rows(c, &format!("SELECT * FROM {}", case.name)).await);
        let expected = sorted(text_rows(c, &batch).await);
        assert_eq!(view, expected, "{} {when}\nbatch: {batch}", case.name);
        sizes.push(format!("{}={}", case.name, view.len()));
    }
    let late = scalar(c, "SELECT count(*) FROM sluice_catalog.late_rows").await;
    eprintln!("{when}: {} late={late}", sizes.join(" "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_bounded_joins_equal_batch_queries_through_late_rows_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(21);
    let mut rng = Rand::seed_from_u64(seed);
    let mut now_ms = 0i64;
    // Some rows before the views: they backfill.
    for _ in 0..10 {
        now_ms += rng.random_range(0..1500);
        for w in writes(&mut rng, now_ms) {
            c.batch_execute(&w).await.unwrap();
        }
    }
    for case in CASES {
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {} AS {}",
            case.name,
            case.view_query()
        ))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    }
    check_views(&c, "after backfill").await;
    for round in 0..3 {
        for _ in 0..15 {
            now_ms += rng.random_range(0..1500);
            for w in writes(&mut rng, now_ms) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        check_views(&c, &format!("after round {round}")).await;
    }
    let late = scalar(&c, "SELECT count(*) FROM sluice_catalog.late_rows").await;
    assert!(late > 0, "the stream should have late rows");
    drop(c);

    // SIGKILL while the views are still applying what was just written.
    for kill in 0..crash_runs_or(3) {
        let c = server.connect().await;
        for _ in 0..rng.random_range(3..20) {
            now_ms += rng.random_range(0..1500);
            for w in writes(&mut rng, now_ms) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(rng.random_range(0..400))).await;
        server.kill9();
        server.restart();
        let c = server.connect().await;
        check_views(&c, &format!("after kill {kill}")).await;
    }
}

/// Two tables `a (id, at)` and `b (ref, at)` with 1-second watermark
/// delays.
const STEADY_TABLES: &str = "
    CREATE TABLE a (id BIGINT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 second') APPEND ONLY;
    CREATE TABLE b (ref BIGINT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 second') APPEND ONLY;
";

/// Streams `events` (`SLUICE_BAND_EVENTS` overrides) into `a` and `b`:
/// 1,000 rows per second of event time each, one statement per second,
/// row g of b referring to row g - `lag` of a. Returns the seconds sent
/// and the peak of `state` (one number), sampled every `every` seconds
/// and after FLUSH.
async fn stream_steadily(
    c: &tokio_postgres::Client,
    events: i64,
    lag: i64,
    state: &str,
    every: i64,
) -> (i64, i64) {
    let events: i64 = std::env::var("SLUICE_BAND_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(events);
    let seconds = events / 2000;
    let base = 1_767_225_600_000_000i64;
    let mut peak = 0;
    for s in 0..seconds {
        let (from, to) = (s * 1000, s * 1000 + 999);
        c.batch_execute(&format!(
            "INSERT INTO a SELECT g, to_timestamp_micros({base} + g * 1000) FROM generate_series({from}, {to}) AS t(g);
             INSERT INTO b SELECT g - {lag}, to_timestamp_micros({base} + g * 1000) FROM generate_series({from}, {to}) AS t(g);"
        ))
        .await
        .unwrap();
        if s % every == 0 {
            peak = peak.max(scalar(c, state).await);
        }
    }
    c.batch_execute("FLUSH").await.unwrap();
    (seconds, peak.max(scalar(c, state).await))
}

/// An interval join over 1,000,000 events (two tables, 1,000 rows per
/// second of event time each, one statement per second) with a 10-second
/// band keeps about the rows of one band: never more than twice one
/// table's rows per 10 seconds plus a small constant, sampled while it
/// runs and read from `sluice_catalog.view_operators`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_joins_state_stays_within_its_band() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(STEADY_TABLES).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW matched AS SELECT count(*) AS n FROM a
             JOIN b ON a.id = b.ref AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
    )
    .await
    .unwrap();
    let state = "SELECT state_rows FROM sluice_catalog.view_operators \
                 WHERE view_name = 'matched' AND kind = 'interval join'";
    // Row g of b refers to row g - 3000 of a, 3 seconds earlier.
    let (seconds, peak) = stream_steadily(&c, 1_000_000, 3000, state, 25).await;
    let matched = scalar(&c, "SELECT n FROM matched").await;
    // Every row of b but the first 3,000 has its row of a, 3 s earlier.
    assert_eq!(matched, seconds * 1000 - 3000);
    let per_band = 10 * 1000;
    eprintln!(
        "{} events: state peak {peak} rows (one table's rows per 10 s: {per_band})",
        seconds * 2000
    );
    assert!(
        peak <= 2 * per_band + 2000,
        "state peaked at {peak} rows, more than the band holds"
    );
    let late = scalar(
        &c,
        "SELECT late_rows FROM sluice_catalog.views WHERE view_name = 'matched'",
    )
    .await;
    assert_eq!(late, 0);
}

/// A band against the `window_end` of an aggregate over a TUMBLE (the
/// shape of Nexmark q7: the rows holding each window's top value) keeps
/// the rows of one band in the join and the open windows in the
/// aggregate, and finds one row per window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_band_on_an_aggregates_windows_keeps_one_band() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(STEADY_TABLES).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW top_refs AS SELECT b.ref, b.at FROM b JOIN
             (SELECT max(ref) AS top, window_end FROM TUMBLE(b, at, INTERVAL '10 seconds')
              GROUP BY window_end) m
             ON b.ref = m.top AND b.at BETWEEN m.window_end - INTERVAL '10 seconds' AND m.window_end",
    )
    .await
    .unwrap();
    let state = "SELECT sum(state_rows) FROM sluice_catalog.view_operators \
                 WHERE view_name = 'top_refs' AND kind IN ('interval join', 'aggregate')";
    let (seconds, peak) = stream_steadily(&c, 200_000, 0, state, 5).await;
    // b's refs grow with time: each window's top is its last row.
    let rows = text_rows(&c, "SELECT ref FROM top_refs ORDER BY ref").await;
    let expected: Vec<String> = (1..=seconds / 10)
        .map(|w| (w * 10_000 - 1).to_string())
        .collect();
    assert_eq!(rows, expected);
    let per_band = 10 * 1000;
    eprintln!("{} events: state peak {peak} rows", seconds * 2000);
    assert!(
        peak <= 2 * per_band + 2000,
        "state peaked at {peak} rows, more than one band and the open windows"
    );
    let windows = scalar(
        &c,
        "SELECT state_rows FROM sluice_catalog.view_operators \
         WHERE view_name = 'top_refs' AND kind = 'aggregate'",
    )
    .await;
    assert!(windows <= 2, "the aggregate kept {windows} windows");
}

/// What an interval join cannot bound or keep exact is refused with
/// 0A000, saying what to change.
#[tokio::test]
async fn interval_joins_that_cannot_be_bounded_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    c.batch_execute(
        "CREATE TABLE plain (id BIGINT, at TIMESTAMP) APPEND ONLY;
         CREATE TABLE keyed (id BIGINT PRIMARY KEY, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '1 second');",
    )
    .await
    .unwrap();
    for (query, says) in [
        (
            "SELECT a.id FROM auction a JOIN plain p ON a.id = p.id \
             AND p.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
            "needs a watermark on plain.at",
        ),
        (
            "SELECT a.id FROM auction a JOIN keyed k ON a.id = k.id \
             AND k.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
            "needs a watermark on keyed.at",
        ),
        (
            "SELECT a.id FROM auction a JOIN (SELECT auction, at + INTERVAL '1 second' AS at FROM bid) b \
             ON a.id = b.auction AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
            "passed through unchanged",
        ),
        (
            "SELECT a.id FROM TUMBLE(auction, at, INTERVAL '5 seconds') a \
             JOIN TUMBLE(bid, at, INTERVAL '10 seconds') b \
             ON a.id = b.auction AND a.window_start = b.window_start",
            "windows of one size",
        ),
        (
            "SELECT a.id FROM TUMBLE(auction, at, INTERVAL '5 seconds') a \
             LEFT JOIN TUMBLE(keyed, at, INTERVAL '5 seconds') k \
             ON a.id = k.id AND a.window_start = k.window_start",
            "needs a watermark on keyed.at",
        ),
        (
            "SELECT a.id FROM TUMBLE(auction, at, INTERVAL '5 seconds') a \
             JOIN TUMBLE(plain, at, INTERVAL '5 seconds') p \
             ON a.id = p.id AND a.window_start = p.window_start",
            "needs a watermark on plain.at",
        ),
    ] {
        assert_view_refused(&c, query, says).await;
    }
    // EXPLAIN says what the interval join keeps.
    c.batch_execute(
        "CREATE MATERIALIZED VIEW explained AS SELECT a.id FROM auction a JOIN bid b \
         ON a.id = b.auction AND b.at BETWEEN a.at AND a.at + INTERVAL '10 seconds'",
    )
    .await
    .unwrap();
    let plan = text_rows(&c, "EXPLAIN MATERIALIZED VIEW explained")
        .await
        .join("\n");
    assert!(
        plan.contains("interval join") && plan.contains("until the other input's watermark passes"),
        "{plan}"
    );
    c.batch_execute(
        "CREATE MATERIALIZED VIEW windowed AS SELECT a.id FROM TUMBLE(auction, at, INTERVAL '5 seconds') a \
         JOIN TUMBLE(bid, at, INTERVAL '5 seconds') b ON a.id = b.auction AND a.window_start = b.window_start",
    )
    .await
    .unwrap();
    let plan = text_rows(&c, "EXPLAIN MATERIALIZED VIEW windowed")
        .await
        .join("\n");
    assert!(
        plan.contains("window join") && plan.contains("until the other input closes their window"),
        "{plan}"
    );
}

/// A window join over a steady stream (two tables, 1,000 rows per second
/// of event time each, 5-second windows, a 1-second watermark delay)
/// keeps only the rows of open windows: per table at most the window it
/// is in, the one the delay still holds open and one statement's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_joins_state_is_its_open_windows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(STEADY_TABLES).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_window AS SELECT a.window_start, count(*) AS n
             FROM TUMBLE(a, at, INTERVAL '5 seconds') a
             JOIN TUMBLE(b, at, INTERVAL '5 seconds') b
             ON a.id = b.ref AND a.window_start = b.window_start AND a.window_end = b.window_end
             GROUP BY a.window_start",
    )
    .await
    .unwrap();
    let state = "SELECT state_rows FROM sluice_catalog.view_operators \
                 WHERE view_name = 'per_window' AND kind = 'window join'";
    // Row g of b refers to row g - 500 of a, half a second earlier: the
    // same window but for the first 500 rows of each window.
    let (seconds, peak) = stream_steadily(&c, 200_000, 500, state, 5).await;
    // Each window of 5,000 rows of b matches all but its first 500.
    let windows = seconds / 5;
    let matched = scalar(&c, "SELECT sum(n)::BIGINT FROM per_window").await;
    assert_eq!(matched, windows * 4500);
    let per_window = 5 * 1000;
    let bound = 2 * (per_window + 1000 + 1000) + 2000;
    eprintln!(
        "{} events: state peak {peak} rows (bound {bound})",
        seconds * 2000
    );
    assert!(peak > 0, "the join never held a row");
    assert!(
        peak <= bound,
        "state peaked at {peak} rows, more than the open windows hold"
    );
    let late = scalar(
        &c,
        "SELECT late_rows FROM sluice_catalog.views WHERE view_name = 'per_window'",
    )
    .await;
    assert_eq!(late, 0);
}
