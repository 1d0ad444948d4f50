//! Nexmark: persons, auctions and bids from the `nexmark` crate's
//! generator (a fixed base time, so every run sees the same events),
//! loaded by COPY into watermarked append-only tables, half before the
//! views exist (backfill) and half after (the stream). Every Nexmark query
//! Sluice supports runs as a materialized view and equals the same query
//! run as a batch query; the ones it refuses are refused with 0A000, and
//! the list of them is printed. `SLUICE_NEXMARK_EVENTS` sets how many
//! events (default 100,000).

mod common;

use common::{sqlstate, text_rows, Server};
use futures::SinkExt;
use nexmark::config::NexmarkConfig;
use nexmark::event::Event;
use nexmark::EventGenerator;

const TABLES: &str = "
    CREATE TABLE person (id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR,
        city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR,
        WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') APPEND ONLY;
    CREATE TABLE auction (id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
        reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT,
        extra VARCHAR,
        WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') APPEND ONLY;
    CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
        date_time TIMESTAMP, extra VARCHAR,
        WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds')
        APPEND ONLY WITH (partitions = 2);
";

/// A query: its name, its text, and the columns to compare (a float
/// average is rounded: its last digits follow the order of additions).
struct Query {
    name: &'static str,
    sql: &'static str,
    compare: &'static str,
}

const QUERIES: &[Query] = &[
    Query {
        name: "q0",
        sql: "SELECT auction, bidder, price, date_time FROM bid",
        compare: "*",
    },
    Query {
        name: "q1",
        sql: "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
        compare: "*",
    },
    Query {
        name: "q2",
        sql: "SELECT auction, price FROM bid \
              WHERE auction = 1007 OR auction = 1020 OR auction = 2001 OR auction = 2019 OR auction = 2087",
        compare: "*",
    },
    Query {
        name: "q3",
        sql: "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P on A.seller = P.id \
              WHERE A.category = 10 and (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')",
        compare: "*",
    },
    Query {
        name: "q4",
        sql: "SELECT Q.category, AVG(Q.final) as avg FROM ( \
                SELECT MAX(B.price) AS final, A.category FROM auction A, bid B \
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
                GROUP BY A.id, A.category) Q \
              GROUP BY Q.category",
        compare: "category, round(avg, 6)",
    },
    Query {
        name: "q5",
        sql: "SELECT AuctionBids.auction, AuctionBids.num FROM ( \
                SELECT bid.auction, count(*) AS num, window_start AS starttime \
                FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
                GROUP BY window_start, bid.auction) AS AuctionBids \
              JOIN ( \
                SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM ( \
                    SELECT count(*) AS num, window_start AS starttime_c \
                    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
                    GROUP BY bid.auction, window_start) AS CountBids \
                GROUP BY CountBids.starttime_c) AS MaxBids \
              ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn",
        compare: "*",
    },
    Query {
        name: "q7",
        sql: "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN ( \
                SELECT MAX(price) AS maxprice, window_end as date_time \
                FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 \
              ON B.price = B1.maxprice \
              WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
        compare: "*",
    },
    Query {
        name: "q8",
        sql: "SELECT P.id, P.name, P.starttime FROM ( \
                SELECT id, name, window_start AS starttime, window_end AS endtime \
                FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) \
                GROUP BY id, name, window_start, window_end) P \
              JOIN ( \
                SELECT seller, window_start AS starttime, window_end AS endtime \
                FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) \
                GROUP BY seller, window_start, window_end) A \
              ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
        compare: "*",
    },
    Query {
        name: "q9",
        sql: "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, \
                auction, bidder, price, bid_date_time FROM ( \
                SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, \
                ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC, B.bidder) AS rownum \
                FROM auction A, bid B \
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) tmp \
              WHERE rownum <= 1",
        compare: "*",
    },
    Query {
        name: "q15",
        sql: "SELECT to_char(date_time, 'YYYY-MM-DD') as day, count(*) AS total_bids, \
                count(*) filter (where price < 10000) AS rank1_bids, \
                count(distinct bidder) AS total_bidders, \
                count(distinct auction) filter (where price >= 1000000) AS rank3_auctions \
              FROM bid GROUP BY to_char(date_time, 'YYYY-MM-DD')",
        compare: "*",
    },
    Query {
        name: "q17",
        sql: "SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, \
                min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price \
              FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
        compare: "auction, day, total_bids, min_price, max_price, round(avg_price, 6), sum_price",
    },
    Query {
        name: "q18",
        sql: "SELECT auction, bidder, price, channel, url, date_time, extra FROM ( \
                SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, extra) AS rank_number \
                FROM bid) t \
              WHERE rank_number <= 1",
        compare: "*",
    },
    Query {
        name: "q19",
        sql: "SELECT * FROM ( \
                SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time, bidder, extra) AS rank_number \
                FROM bid) t \
              WHERE rank_number <= 10",
        compare: "*",
    },
    Query {
        name: "q20",
        sql: "SELECT auction, bidder, price, channel, url, B.date_time as bid_date_time, \
                item_name, description, initial_bid, reserve, A.date_time as auction_date_time, expires, seller, category \
              FROM bid AS B INNER JOIN auction AS A on B.auction = A.id WHERE A.category = 10",
        compare: "*",
    },
    Query {
        name: "q21",
        sql: "SELECT auction, bidder, price, channel, \
                CASE WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' \
                     WHEN LOWER(channel) = 'facebook' THEN '2' WHEN LOWER(channel) = 'baidu' THEN '3' \
                     ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] END AS channel_id \
              FROM bid \
              WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] is not null \
                 or LOWER(channel) in ('apple', 'google', 'facebook', 'baidu')",
        compare: "*",
    },
    Query {
        name: "q22",
        sql: "SELECT auction, bidder, price, channel, split_part(url, '/', 4) as dir1, \
                split_part(url, '/', 5) as dir2, split_part(url, '/', 6) as dir3 FROM bid",
        compare: "*",
    },
];

/// The queries the issue's acceptance names: each must be supported.
const REQUIRED: &[&str] = &["q0", "q1", "q2", "q3", "q4", "q5", "q8"];

/// 2026-01-01 00:00:00 UTC in milliseconds: every run the same events.
const BASE_TIME_MS: u64 = 1_767_225_600_000;

fn timestamp(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// A value for COPY's text format.
fn text(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// The events' rows in COPY text form, by table.
fn generate(events: usize) -> [String; 3] {
    let config = NexmarkConfig {
        base_time: BASE_TIME_MS,
        ..Default::default()
    };
    let mut out = [String::new(), String::new(), String::new()];
    for event in EventGenerator::new(config).take(events) {
        match event {
            Event::Person(p) => out[0].push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                p.id,
                text(&p.name),
                text(&p.email_address),
                text(&p.credit_card),
                text(&p.city),
                text(&p.state),
                timestamp(p.date_time),
                text(&p.extra)
            )),
            Event::Auction(a) => out[1].push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                a.id,
                text(&a.item_name),
                text(&a.description),
                a.initial_bid,
                a.reserve,
                timestamp(a.date_time),
                timestamp(a.expires),
                a.seller,
                a.category,
                text(&a.extra)
            )),
            Event::Bid(b) => out[2].push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                b.auction,
                b.bidder,
                b.price,
                text(&b.channel),
                text(&b.url),
                timestamp(b.date_time),
                text(&b.extra)
            )),
        }
    }
    out
}

async fn copy(c: &tokio_postgres::Client, table: &str, rows: &str) {
    let sink = c
        .copy_in(&format!("COPY {table} FROM STDIN"))
        .await
        .unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(rows.to_string()))
        .await
        .unwrap();
    sink.finish().await.unwrap();
}

/// Splits COPY text rows in two halves, at a line.
fn halves(rows: &str) -> (&str, &str) {
    let mid = rows.len() / 2;
    let at = rows[mid..].find('\n').map_or(rows.len(), |i| mid + i + 1);
    rows.split_at(at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_equal_their_batch_queries() {
    let events: usize = std::env::var("SLUICE_NEXMARK_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let rows = generate(events);
    let tables = ["person", "auction", "bid"];
    for (table, rows) in tables.iter().zip(&rows) {
        copy(&c, table, halves(rows).0).await;
    }
    let mut supported = Vec::new();
    let mut refused = Vec::new();
    for q in QUERIES {
        match c
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {} AS {}", q.name, q.sql))
            .await
        {
            Ok(()) => supported.push(q),
            Err(e) => {
                assert_eq!(sqlstate(&e), "0A000", "{}: {e}", q.name);
                let why = e
                    .as_db_error()
                    .map(|d| d.message().to_string())
                    .unwrap_or_default();
                refused.push(format!("{}: {why}", q.name));
            }
        }
    }
    for (table, rows) in tables.iter().zip(&rows) {
        copy(&c, table, halves(rows).1).await;
    }
    c.batch_execute("FLUSH").await.unwrap();
    for q in &supported {
        let mut view = text_rows(&c, &format!("SELECT {} FROM {}", q.compare, q.name)).await;
        let mut batch = text_rows(&c, &format!("SELECT {} FROM ({}) b", q.compare, q.sql)).await;
        view.sort();
        batch.sort();
        assert!(
            !batch.is_empty() || q.name == "q2",
            "{} has no rows",
            q.name
        );
        assert_eq!(view.len(), batch.len(), "{}: row counts", q.name);
        assert!(
            view == batch,
            "{}: the view differs from its batch query",
            q.name
        );
        eprintln!("{}: {} rows, equal to the batch query", q.name, view.len());
    }
    for r in &refused {
        eprintln!("refused {r}");
    }
    let missing: Vec<&&str> = REQUIRED
        .iter()
        .filter(|n| !supported.iter().any(|q| q.name == **n))
        .collect();
    assert!(
        missing.is_empty(),
        "not supported: {missing:?}\n{refused:?}"
    );
}
