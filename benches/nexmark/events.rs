//! Nexmark events from the `nexmark` crate's generator, as rows of COPY's
//! text format for the tables `person`, `auction` and `bid`. The base time
//! is fixed, so every run sees the same events. Shared by
//! `tests/nexmark.rs` and the benchmark beside this file.

use nexmark::config::NexmarkConfig;
use nexmark::event::Event;
use nexmark::EventGenerator;

/// The three tables, append-only, with a 4-second watermark on each
/// event time (as Flink's Nexmark setup declares it), and q13's side
/// input: 10,000 keys, each with its number as text as the value (Flink's
/// setup reads such a file).
pub const TABLES: &str = "
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
    CREATE TABLE side_input (key BIGINT, value VARCHAR) APPEND ONLY;
    INSERT INTO side_input SELECT value AS key, CAST(value AS VARCHAR) AS value FROM generate_series(0, 9999) AS s(value);
";

/// 2026-01-01 00:00:00 UTC in milliseconds: every run the same events.
const BASE_TIME_MS: u64 = 1_767_225_600_000;

pub fn timestamp(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// A value for COPY's text format.
pub fn text(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// Events `from..from + count` of the stream, as COPY text rows by table.
pub fn generate(from: usize, count: usize) -> [String; 3] {
    let config = NexmarkConfig {
        base_time: BASE_TIME_MS,
        ..Default::default()
    };
    let mut out = [String::new(), String::new(), String::new()];
    for event in EventGenerator::new(config)
        .with_offset(from as u64)
        .take(count)
    {
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
