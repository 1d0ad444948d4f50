//! Nexmark on Sluice: generates the event stream in-process (the `nexmark`
//! crate, fixed base time), loads `person`, `auction` and `bid` by COPY
//! into a fresh release server, then creates each query of `queries.rs`
//! as a materialized view, one at a time, and measures its backfill: the
//! server's CPU time from CREATE until FLUSH returns (events per
//! CPU-second, all events of the three tables counted), the wall time,
//! and the server's peak resident memory while it ran. Each view is then
//! checked against the same query run as a batch query (row counts, and
//! no row of either missing from the other), and dropped.
//!
//!   cargo bench --bench nexmark -- [events] [q0,q3,...]
//!
//! Default 10,000,000 events and every query. Prints a Markdown table.

#[path = "events.rs"]
mod events;
#[path = "queries.rs"]
mod queries;
#[path = "../common/server.rs"]
mod server;

use server::{cpu_seconds, rss_bytes, scalar, start, try_scalar};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::SinkExt;

/// Events generated and sent per COPY.
const CHUNK: usize = 200_000;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let events: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let only: Option<Vec<String>> = args
        .get(1)
        .map(|a| a.split(',').map(str::to_string).collect());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = start(dir.path());
    let pid = server.child.id();
    let conn = format!(
        "host=127.0.0.1 port={} user=bench dbname=sluice",
        server.port
    );
    let mut client = None;
    for _ in 0..300 {
        if let Ok((c, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
            tokio::spawn(connection);
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = client.expect("connect to sluice");
    c.batch_execute(events::TABLES).await.expect("tables");

    let started = Instant::now();
    let tables = ["person", "auction", "bid"];
    let mut from = 0;
    while from < events {
        let count = CHUNK.min(events - from);
        let rows = events::generate(from, count);
        for (table, rows) in tables.iter().zip(rows) {
            let sink = c
                .copy_in(&format!("COPY {table} FROM STDIN"))
                .await
                .expect("COPY");
            futures::pin_mut!(sink);
            sink.send(bytes::Bytes::from(rows))
                .await
                .expect("COPY data");
            sink.finish().await.expect("COPY end");
        }
        from += count;
    }
    let counts = [
        scalar(&c, "SELECT count(*) FROM person").await,
        scalar(&c, "SELECT count(*) FROM auction").await,
        scalar(&c, "SELECT count(*) FROM bid").await,
    ];
    eprintln!(
        "loaded {events} events (persons {}, auctions {}, bids {}) in {:.1} s",
        counts[0],
        counts[1],
        counts[2],
        started.elapsed().as_secs_f64()
    );
    let idle_rss = rss_bytes(pid);

    println!("| query | events per CPU-second | server CPU s | wall s | peak RSS MiB | view rows | equals batch |");
    println!("|---|---|---|---|---|---|---|");
    let mut refused = Vec::new();
    for q in queries::QUERIES {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == q.name))
        {
            continue;
        }
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid)));
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, done) = (peak.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
        let created = c
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {} AS {}", q.name, q.sql))
            .await;
        if let Err(e) = created {
            done.store(true, Ordering::Relaxed);
            let _ = sampler.await;
            let why = e
                .as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string());
            refused.push(format!("{}: {why}", q.name));
            continue;
        }
        c.batch_execute("FLUSH").await.expect("FLUSH");
        let (cpu1, wall) = (cpu_seconds(pid), t0.elapsed().as_secs_f64());
        done.store(true, Ordering::Relaxed);
        let _ = sampler.await;
        let cpu = cpu1 - cpu0;
        let view = format!("SELECT {} FROM {}", q.compare, q.name);
        let batch = format!("SELECT {} FROM ({}) b", q.compare, q.sql);
        let rows = scalar(&c, &format!("SELECT count(*) FROM ({view}) v")).await;
        // The batch query may not fit the server's query memory (q16's
        // six COUNT(DISTINCT)s): the row says so and the run goes on.
        let checked = async {
            let batch_rows = try_scalar(&c, &format!("SELECT count(*) FROM ({batch}) v")).await?;
            let missing = try_scalar(
                &c,
                &format!("SELECT count(*) FROM (({view}) EXCEPT ({batch})) d"),
            )
            .await?
                + try_scalar(
                    &c,
                    &format!("SELECT count(*) FROM (({batch}) EXCEPT ({view})) d"),
                )
                .await?;
            Ok::<_, String>((batch_rows, missing))
        }
        .await;
        let equal = match checked {
            Ok((batch_rows, 0)) if batch_rows == rows => "yes".to_string(),
            Ok((batch_rows, missing)) => {
                format!("NO ({rows} vs {batch_rows} rows, {missing} differ)")
            }
            Err(why) => format!(
                "not checked: the batch query failed ({})",
                why.lines().next().unwrap_or_default()
            ),
        };
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {} |",
            q.name,
            events as f64 / cpu.max(0.01),
            cpu,
            wall,
            peak.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
            rows,
            equal
        );
        c.batch_execute(&format!("DROP MATERIALIZED VIEW {}", q.name))
            .await
            .expect("DROP");
    }
    println!();
    println!(
        "Server RSS with the tables loaded and no view: {:.0} MiB.",
        idle_rss as f64 / (1 << 20) as f64
    );
    for r in refused {
        println!("- refused {r}");
    }
}
