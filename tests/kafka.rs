//! Kafka topics feeding tables, against librdkafka's mock cluster (a
//! Kafka-protocol broker inside this test process, on 127.0.0.1): exactly
//! once across SIGKILL, dead letters, a broker that goes down.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{crash_runs_or, scalar, sqlstate, Server};
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// Sends `(partition, payload)` records and waits until the broker has
/// them all.
fn produce(producer: &BaseProducer, topic: &str, records: &[(i32, String)]) {
    for (i, (partition, payload)) in records.iter().enumerate() {
        let key = format!("k{i}");
        loop {
            let record = BaseRecord::to(topic)
                .partition(*partition)
                .key(&key)
                .payload(payload);
            match producer.send(record) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn event(id: i64) -> (i32, String) {
    (
        (id % 4) as i32,
        format!(
            r#"{{"id": {id}, "tenant": "t{}", "amount": {}, "at": "2026-01-01 00:{:02}:{:02}"}}"#,
            id % 7,
            id % 100,
            (id / 60) % 60,
            id % 60
        ),
    )
}

fn create_sql(bootstrap: &str, topic: &str) -> String {
    format!(
        "CREATE TABLE ev (id BIGINT NOT NULL, tenant TEXT, amount BIGINT, at TIMESTAMP) \
         WITH (connector = 'kafka', topic = '{topic}', bootstrap_servers = '{bootstrap}', format = 'json')"
    )
}

/// Waits until `sql` returns `want`, or fails after `within`.
async fn wait_for(c: &tokio_postgres::Client, sql: &str, want: i64, within: Duration) {
    let start = Instant::now();
    loop {
        let got = scalar(c, sql).await;
        if got == want {
            return;
        }
        assert!(start.elapsed() < within, "{sql}: {got}, expected {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every row once, each partition's rows in Kafka's order with no offset
/// missing, and every row in the partition it was produced to.
async fn assert_exactly_once(c: &tokio_postgres::Client, n: i64) {
    assert_eq!(scalar(c, "SELECT count(*) FROM ev").await, n);
    assert_eq!(scalar(c, "SELECT count(DISTINCT id) FROM ev").await, n);
    let rows = c
        .query(
            "SELECT _partition, _kafka_offset, id FROM ev ORDER BY _partition, _offset",
            &[],
        )
        .await
        .unwrap();
    let mut next: HashMap<i32, i64> = HashMap::new();
    for r in rows {
        let (p, o, id): (i32, i64, i64) = (r.get(0), r.get(1), r.get(2));
        let expected = next.entry(p).or_insert(0);
        assert_eq!(o, *expected, "partition {p}: Kafka offsets in table order");
        *expected += 1;
        assert_eq!(id % 4, p as i64, "row {id} in partition {p}");
    }
}

/// The view equals its query run as a batch query.
async fn assert_view_matches(c: &tokio_postgres::Client) {
    c.batch_execute("FLUSH").await.unwrap();
    let view =
        common::text_rows(c, "SELECT tenant, n, total FROM per_tenant ORDER BY tenant").await;
    let batch = common::text_rows(
        c,
        "SELECT tenant, count(*) AS n, sum(amount) AS total FROM ev GROUP BY tenant ORDER BY tenant",
    )
    .await;
    assert_eq!(view, batch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_feeds_its_table_exactly_once_across_kills() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("events", 4, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&create_sql(&bootstrap, "events"))
        .await
        .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_tenant AS \
         SELECT tenant, count(*) AS n, sum(amount) AS total FROM ev GROUP BY tenant",
    )
    .await
    .unwrap();

    // Long mode (SLUICE_CRASH_RUNS=10): 100,000 records and 10 kills.
    let kills = crash_runs_or(3);
    let n: i64 = if kills >= 10 { 100_000 } else { 20_000 };
    let done = Arc::new(AtomicBool::new(false));
    let producing = {
        let bootstrap = bootstrap.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let p = producer(&bootstrap);
            let records: Vec<(i32, String)> = (0..n).map(event).collect();
            for chunk in records.chunks(500) {
                produce(&p, "events", chunk);
                std::thread::sleep(Duration::from_millis(10));
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1200))).await;
        server.kill9();
        server.start_again();
    }
    producing.join().unwrap();
    assert!(done.load(Ordering::Acquire));
    let c = server.connect().await;
    wait_for(&c, "SELECT count(*) FROM ev", n, Duration::from_secs(120)).await;
    assert_exactly_once(&c, n).await;
    assert_view_matches(&c).await;
    // Caught up: the source shows no lag.
    wait_for(
        &c,
        "SELECT CAST(sum(lag_records) AS BIGINT) FROM sluice_catalog.sources WHERE table_name = 'ev'",
        0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        scalar(
            &c,
            "SELECT CAST(sum(next_offset) AS BIGINT) FROM sluice_catalog.sources"
        )
        .await,
        n
    );

    // After a clean restart: nothing read twice.
    server.restart();
    let c = server.connect().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_exactly_once(&c, n).await;
    assert_view_matches(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_do_not_parse_become_dead_letters() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("mixed", 2, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&create_sql(&bootstrap, "mixed"))
        .await
        .unwrap();
    let mut records = Vec::new();
    for id in 0..100 {
        let (_, good) = event(id);
        records.push(((id % 2) as i32, good));
    }
    // At offsets 50.. of each partition: not JSON, a wrong type, a missing
    // NOT NULL column, not an object.
    let bad = [
        "not json",
        r#"{"id": "seven"}"#,
        r#"{"tenant": "t1"}"#,
        "[1, 2, 3]",
    ];
    for (i, b) in bad.iter().enumerate() {
        records.push(((i % 2) as i32, b.to_string()));
    }
    for id in 100..110 {
        let (_, good) = event(id);
        records.push(((id % 2) as i32, good));
    }
    produce(&producer(&bootstrap), "mixed", &records);
    wait_for(&c, "SELECT count(*) FROM ev", 110, Duration::from_secs(30)).await;
    wait_for(
        &c,
        "SELECT count(*) FROM ev_dead_letters",
        4,
        Duration::from_secs(10),
    )
    .await;
    let dead = c
        .query(
            "SELECT kafka_partition, kafka_offset, payload, error FROM ev_dead_letters \
             ORDER BY kafka_partition, kafka_offset",
            &[],
        )
        .await
        .unwrap();
    let dead: Vec<(i32, i64, Vec<u8>, String)> = dead
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        dead.iter().map(|d| (d.0, d.1)).collect::<Vec<_>>(),
        [(0, 50), (0, 51), (1, 50), (1, 51)]
    );
    assert_eq!(dead[0].2, b"not json");
    assert!(dead[0].3.contains("invalid JSON"), "{}", dead[0].3);
    assert!(
        dead[2].3.contains("invalid input syntax for type bigint"),
        "{}",
        dead[2].3
    );
    assert!(dead[1].3.contains("not-null"), "{}", dead[1].3);
    assert_eq!(
        scalar(
            &c,
            "SELECT CAST(sum(dead_letters) AS BIGINT) FROM sluice_catalog.sources"
        )
        .await,
        4
    );

    // The same counts on /metrics, per partition.
    let (_, metrics) = common::http_get(server.http_port, "/metrics").await;
    for k in 0..2 {
        let labels = format!("{{table=\"ev\",topic=\"mixed\",partition=\"{k}\"}}");
        assert_eq!(
            common::sample(
                &metrics,
                &format!("sluice_kafka_source_dead_letters{labels}")
            ),
            2.0
        );
        assert_eq!(
            common::sample(
                &metrics,
                &format!("sluice_kafka_source_next_offset{labels}")
            ),
            57.0
        );
    }

    // The Kafka columns are hidden from `SELECT *`, and selectable.
    let star = c.query("SELECT * FROM ev LIMIT 1", &[]).await.unwrap();
    assert_eq!(star[0].columns().len(), 4);
    let key: Vec<u8> = c
        .query_one("SELECT _kafka_key FROM ev WHERE id = 0", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(key, b"k0");
    assert_eq!(
        scalar(
            &c,
            "SELECT count(*) FROM ev WHERE _kafka_timestamp IS NOT NULL"
        )
        .await,
        110
    );

    // Statements may not write either table.
    for sql in [
        "INSERT INTO ev (id) VALUES (1)",
        "INSERT INTO ev VALUES (1, 't', 2, now())",
        "INSERT INTO ev SELECT id, tenant, amount, at FROM ev",
        "COPY ev (id) FROM STDIN",
        "INSERT INTO ev_dead_letters (kafka_partition, kafka_offset, error) VALUES (0, 0, 'x')",
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), "42809", "{sql}: {e}");
    }
    // A prepared INSERT, as drivers send it.
    let e = c
        .execute("INSERT INTO ev (id) VALUES ($1)", &[&1i64])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42809", "{e}");
    // psql's \d shows the table's own columns, as `SELECT *` does.
    let (ok, out, err) = server.psql("\\d ev");
    assert!(ok, "{err}");
    assert!(out.contains("tenant") && !out.contains("_kafka"), "{out}");
    let e = c
        .batch_execute("DROP TABLE ev_dead_letters")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "55006", "{e}");

    // A restart reads nothing twice, dead letters included.
    server.restart();
    let c = server.connect().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(scalar(&c, "SELECT count(*) FROM ev").await, 110);
    assert_eq!(scalar(&c, "SELECT count(*) FROM ev_dead_letters").await, 4);

    c.batch_execute("DROP TABLE ev").await.unwrap();
    for t in ["ev", "ev_dead_letters"] {
        let e = c
            .batch_execute(&format!("SELECT * FROM {t}"))
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "42P01", "{t}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_goes_down_is_reported_and_nothing_is_lost() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("events", 4, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&create_sql(&bootstrap, "events"))
        .await
        .unwrap();
    let p = producer(&bootstrap);
    let first: Vec<(i32, String)> = (0..1000).map(event).collect();
    produce(&p, "events", &first);
    wait_for(&c, "SELECT count(*) FROM ev", 1000, Duration::from_secs(30)).await;

    mock.broker_down(1).unwrap();
    let down_for = if crash_runs_or(3) >= 10 { 10 } else { 4 };
    tokio::time::sleep(Duration::from_secs(down_for)).await;
    let reported = scalar(
        &c,
        "SELECT count(*) FROM sluice_catalog.sources WHERE last_error IS NOT NULL AND errors > 0",
    )
    .await;
    assert!(reported > 0, "the source reports the broker's failure");
    mock.broker_up(1).unwrap();

    let second: Vec<(i32, String)> = (1000..2000).map(event).collect();
    produce(&p, "events", &second);
    wait_for(&c, "SELECT count(*) FROM ev", 2000, Duration::from_secs(60)).await;
    assert_exactly_once(&c, 2000).await;
}

/// The mock broker keeps about 5 MB per partition: records past that are
/// deleted from the front, as Kafka's retention would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_before_they_were_read_are_counted_and_skipped() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("big", 1, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT NOT NULL, pad TEXT) WITH (connector = 'kafka', \
         topic = 'big', bootstrap_servers = '{bootstrap}')"
    ))
    .await
    .unwrap();
    let pad = "x".repeat(1000);
    let record = |id: i64| (0, format!(r#"{{"id": {id}, "pad": "{pad}"}}"#));
    let p = producer(&bootstrap);
    produce(&p, "big", &(0..10).map(record).collect::<Vec<_>>());
    wait_for(&c, "SELECT count(*) FROM ev", 10, Duration::from_secs(30)).await;

    // While the server is down, 8 MB more: the front of the partition goes.
    server.kill9();
    produce(&p, "big", &(10..8010).map(record).collect::<Vec<_>>());
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let (low, high) =
        rdkafka::consumer::Consumer::fetch_watermarks(&consumer, "big", 0, Duration::from_secs(10))
            .unwrap();
    assert!(low > 10, "the mock broker deleted the oldest records");
    server.start_again();
    let c = server.connect().await;
    wait_for(
        &c,
        "SELECT count(*) FROM ev",
        10 + high - low,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        scalar(&c, "SELECT min(id) FROM ev WHERE id >= 10").await,
        low
    );
    assert_eq!(
        scalar(&c, "SELECT skipped_records FROM sluice_catalog.sources").await,
        low - 10
    );
    let error = common::text_rows(&c, "SELECT last_error FROM sluice_catalog.sources").await;
    assert!(
        error[0].contains("deleted by Kafka's retention")
            && error[0].contains(&format!("resuming at {low}")),
        "{error:?}"
    );
    // The skip is committed: a restart does not count it again.
    server.restart();
    let c = server.connect().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scalar(&c, "SELECT skipped_records FROM sluice_catalog.sources").await,
        0
    );
    assert_eq!(scalar(&c, "SELECT count(*) FROM ev").await, 10 + high - low);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_source_checks_the_topic_and_the_options() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("events", 3, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let e = c
        .batch_execute(&create_sql(&bootstrap, "no_such_topic"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42704", "{e}");
    let e = c
        .batch_execute(&format!(
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 'events', \
             bootstrap_servers = '{bootstrap}', kafka_partitions = '2-3')"
        ))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "{e}");
    // Nothing was left behind by the refused statements.
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM sluice_catalog.tables").await,
        0
    );

    // A server that owns partitions 1-2 of three reads only those, from
    // the records at or after `start`.
    let p = producer(&bootstrap);
    let early: Vec<(i32, String)> = (0..30).map(|i| ((i % 3) as i32, event(i).1)).collect();
    produce(&p, "events", &early);
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT NOT NULL, tenant TEXT, amount BIGINT, at TIMESTAMP) \
         WITH (connector = 'kafka', topic = 'events', bootstrap_servers = '{bootstrap}', \
         kafka_partitions = '1-2', start = 'latest')"
    ))
    .await
    .unwrap();
    assert_eq!(
        scalar(
            &c,
            "SELECT count(*) FROM sluice_catalog.partitions WHERE table_name = 'ev'"
        )
        .await,
        3
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late: Vec<(i32, String)> = (30..60).map(|i| ((i % 3) as i32, event(i).1)).collect();
    produce(&p, "events", &late);
    wait_for(&c, "SELECT count(*) FROM ev", 20, Duration::from_secs(30)).await;
    assert_eq!(scalar(&c, "SELECT min(id) FROM ev").await, 31);
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM ev WHERE _partition = 0").await,
        0
    );
}

/// INTERVAL and TIME columns read from JSON: strings in any of
/// PostgreSQL's input forms; a value that is none is a dead letter.
#[tokio::test]
async fn interval_and_time_fields_arrive_as_postgresql_reads_them() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("spans", 1, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE spans (id BIGINT NOT NULL, took INTERVAL, at TIME) \
         WITH (connector = 'kafka', topic = 'spans', bootstrap_servers = '{bootstrap}', format = 'json')"
    ))
    .await
    .unwrap();
    let records: Vec<(i32, String)> = [
        r#"{"id": 1, "took": "1 day 02:00:00", "at": "10:30:00"}"#,
        r#"{"id": 2, "took": "P1DT2H", "at": "23:59:59.999999"}"#,
        r#"{"id": 3, "took": null, "at": null}"#,
        r#"{"id": 4, "took": "-3 mons +4 days 00:00:01.5"}"#,
        r#"{"id": 5, "took": "a while", "at": "10:30:00"}"#,
    ]
    .iter()
    .map(|r| (0, r.to_string()))
    .collect();
    produce(&producer(&bootstrap), "spans", &records);
    wait_for(&c, "SELECT count(*) FROM spans", 4, Duration::from_secs(30)).await;
    wait_for(
        &c,
        "SELECT count(*) FROM spans_dead_letters",
        1,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        common::text_rows(&c, "SELECT id, took, at FROM spans ORDER BY id").await,
        [
            "1|1 day 02:00:00|10:30:00",
            "2|1 day 02:00:00|23:59:59.999999",
            "3|NULL|NULL",
            "4|-3 mons +4 days 00:00:01.5|NULL"
        ]
    );
}

/// An erasure of a table a topic feeds: the rows go, and with `suppress`
/// the topic's later records that match are dropped as they arrive and
/// stay out after a SIGKILL and restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_in_force_drops_matching_records_from_the_topic() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("erased", 4, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&create_sql(&bootstrap, "erased"))
        .await
        .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, count(*) AS n, sum(amount) AS total FROM ev GROUP BY tenant",
    )
    .await
    .unwrap();
    let p = producer(&bootstrap);
    produce(&p, "erased", &(0..700).map(event).collect::<Vec<_>>());
    wait_for(&c, "SELECT count(*) FROM ev", 700, Duration::from_secs(30)).await;
    // A table a source feeds takes no DELETE from statements, but erasure.
    let erased = c
        .execute("DELETE FROM ev WHERE tenant = 't3'", &[])
        .await
        .unwrap();
    assert_eq!(erased, 100);
    c.batch_execute("ERASE FROM ev WHERE tenant = 't3' WITH (suppress = 'forever')")
        .await
        .unwrap();
    produce(&p, "erased", &(700..1400).map(event).collect::<Vec<_>>());
    wait_for(&c, "SELECT count(*) FROM ev", 1200, Duration::from_secs(30)).await;
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM ev WHERE tenant = 't3'").await,
        0
    );
    assert_eq!(
        scalar(
            &c,
            "SELECT suppressed_rows FROM sluice_catalog.erasures WHERE erasure = 2"
        )
        .await,
        100
    );
    assert_view_matches(&c).await;
    server.kill9();
    produce(&p, "erased", &(1400..2100).map(event).collect::<Vec<_>>());
    server.start_again();
    let c = server.connect().await;
    wait_for(&c, "SELECT count(*) FROM ev", 1800, Duration::from_secs(60)).await;
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM ev WHERE tenant = 't3'").await,
        0
    );
    assert_view_matches(&c).await;
}
