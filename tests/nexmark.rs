//! Nexmark: persons, auctions and bids from the `nexmark` crate's
//! generator (a fixed base time, so every run sees the same events),
//! loaded by COPY into watermarked append-only tables, half before the
//! views exist (backfill) and half after (the stream). Every Nexmark query
//! Sluice supports runs as a materialized view and equals the same query
//! run as a batch query; the ones it refuses are refused with 0A000, and
//! the list of them is printed. `SLUICE_NEXMARK_EVENTS` sets how many
//! events (default 100,000).

mod common;
#[path = "../benches/nexmark/events.rs"]
mod events;
#[path = "../benches/nexmark/queries.rs"]
mod queries;

use common::{sqlstate, text_rows, Server};
use events::{generate, TABLES};
use futures::SinkExt;
use queries::QUERIES;

/// The queries that must be supported.
const REQUIRED: &[&str] = &["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q15", "q16"];

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
    let rows = generate(0, events);
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
