//! Records from a Kafka topic into a table, beside the same rows by COPY;
//! then the table's rows out to a topic through a sink.
//!
//! Starts librdkafka's mock cluster in this process (one broker on
//! 127.0.0.1), produces N JSON records over 4 partitions before anything
//! is measured, then starts a fresh release server and creates a table fed
//! by the topic: the time and the server's CPU until every record is a
//! row. Then the same rows, as CSV, by `COPY ... FROM STDIN` into a plain
//! 4-partition table of the same columns. Last, a sink of that table into
//! a 4-partition topic: the time and the server's CPU until the sink has
//! committed every row in its Kafka transactions.
//!
//!   cargo bench --bench kafka -- [records]
//!
//! Default 1,000,000 records. Prints a Markdown table row per path.

#[path = "common/server.rs"]
mod server;

use std::time::{Duration, Instant};

use futures::SinkExt;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use server::{cpu_seconds, scalar, start};

const COLUMNS: &str = "id BIGINT NOT NULL, tenant TEXT, tokens BIGINT, at TIMESTAMP";

fn json(id: u64) -> String {
    format!(
        r#"{{"id": {id}, "tenant": "tenant-{}", "tokens": {}, "at": "2026-12-01 10:{:02}:{:02}.{:03}"}}"#,
        id % 50,
        id % 1000,
        (id / 60_000) % 60,
        (id / 1000) % 60,
        id % 1000
    )
}

fn csv(id: u64) -> String {
    format!(
        "{id},tenant-{},{},2026-12-01 10:{:02}:{:02}.{:03}\n",
        id % 50,
        id % 1000,
        (id / 60_000) % 60,
        (id / 1000) % 60,
        id % 1000
    )
}

fn row(path: &str, records: u64, wall: f64, cpu: f64) {
    println!(
        "| {path} | {records} | {wall:.2} s | {:.0} | {cpu:.2} s | {:.0} |",
        records as f64 / wall,
        records as f64 / cpu
    );
}

#[tokio::main]
async fn main() {
    let records: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.replace(['_', ','], "").parse().ok())
        .unwrap_or(1_000_000);
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("events", 4, 1).expect("topic");
    mock.create_topic("out", 4, 1).expect("topic");
    let bootstrap = mock.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let t = Instant::now();
    for id in 0..records {
        let payload = json(id);
        loop {
            let record = BaseRecord::<(), str>::to("events")
                .partition((id % 4) as i32)
                .payload(&payload);
            match producer.send(record) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    eprintln!(
        "produced {records} records in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for p in 0..4 {
        let (low, _) = producer
            .client()
            .fetch_watermarks("events", p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(
            low, 0,
            "the mock broker deleted the oldest records of partition {p}: use fewer records"
        );
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let server = start(dir.path());
    let pid = server.child.id();
    let c = loop {
        let conn = format!(
            "host=127.0.0.1 port={} user=bench dbname=bench",
            server.port
        );
        if let Ok((c, conn)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            break c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("| path | records | wall | records/s | server CPU | records per CPU-second |");
    println!("|---|---|---|---|---|---|");

    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    c.batch_execute(&format!(
        "CREATE TABLE from_kafka ({COLUMNS}) WITH (connector = 'kafka', topic = 'events', \
         bootstrap_servers = '{bootstrap}', format = 'json')"
    ))
    .await
    .expect("create the source table");
    while scalar(&c, "SELECT count(*) FROM from_kafka").await < records as i64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    row(
        "Kafka topic (JSON) into a table",
        records,
        t0.elapsed().as_secs_f64(),
        cpu_seconds(pid) - cpu0,
    );

    c.batch_execute(&format!(
        "CREATE TABLE by_copy ({COLUMNS}) APPEND ONLY WITH (partitions = 4)"
    ))
    .await
    .expect("create the COPY table");
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    let sink = c
        .copy_in("COPY by_copy FROM STDIN WITH (FORMAT csv)")
        .await
        .expect("COPY");
    let mut sink = Box::pin(sink);
    let mut chunk = String::with_capacity(1 << 20);
    for id in 0..records {
        chunk.push_str(&csv(id));
        if chunk.len() >= 1 << 20 {
            let data = bytes::Bytes::from(std::mem::take(&mut chunk));
            sink.send(data).await.expect("COPY data");
        }
    }
    if !chunk.is_empty() {
        sink.send(bytes::Bytes::from(chunk))
            .await
            .expect("COPY data");
    }
    sink.as_mut().finish().await.expect("COPY done");
    row(
        "the same rows by COPY (CSV)",
        records,
        t0.elapsed().as_secs_f64(),
        cpu_seconds(pid) - cpu0,
    );
    assert_eq!(
        scalar(&c, "SELECT count(DISTINCT id) FROM from_kafka").await,
        records as i64
    );

    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    c.batch_execute(&format!(
        "CREATE SINK out FROM by_copy INTO kafka WITH (topic = 'out', bootstrap_servers = '{bootstrap}')"
    ))
    .await
    .expect("create the sink");
    let sent = "SELECT CAST(coalesce(sum(committed_offset), 0) AS BIGINT) FROM sluice_catalog.lag \
                WHERE kind = 'sink' AND consumer = 'out'";
    while scalar(&c, sent).await < records as i64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    row(
        "the table to a topic by a sink (JSON, transactions)",
        records,
        t0.elapsed().as_secs_f64(),
        cpu_seconds(pid) - cpu0,
    );
}
