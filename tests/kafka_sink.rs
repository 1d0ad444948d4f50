//! Sinks: a view's changes or a table's rows written to a Kafka topic in
//! transactions, against librdkafka's mock cluster (a Kafka-protocol
//! broker inside this test process, on 127.0.0.1). With `KAFKA_BOOTSTRAP`
//! set, one more test runs against that real broker.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{crash_runs_or, scalar, sqlstate, Server};
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{Message, Offset, TopicPartitionList};

type Record = (Option<String>, Option<String>);

/// Every record of `topic` a `read_committed` consumer sees, in order per
/// partition: (key, value), `None` for a tombstone.
fn read_topic(bootstrap: &str, topic: &str) -> Vec<Record> {
    read_partitions(bootstrap, topic).concat()
}

/// [`read_topic`], partition by partition.
fn read_partitions(bootstrap: &str, topic: &str) -> Vec<Vec<Record>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "sink-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len() as i32;
    let mut ends = Vec::new();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        ends.push(high);
        list.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).expect("assign");
    let mut per_partition: Vec<Vec<Record>> = vec![Vec::new(); partitions as usize];
    let mut next = vec![0i64; partitions as usize];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_record = Instant::now();
    // A real broker ends a transaction with a marker that takes an offset
    // and is never delivered: there, a quiet topic counts as read through.
    while next.iter().zip(&ends).any(|(n, e)| n < e)
        && last_record.elapsed() < Duration::from_secs(5)
    {
        assert!(
            Instant::now() < deadline,
            "topic {topic} not read to its end"
        );
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        last_record = Instant::now();
        let m = m.expect("record");
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
        per_partition[m.partition() as usize].push((text(m.key()), text(m.payload())));
        next[m.partition() as usize] = m.offset() + 1;
    }
    per_partition
}

/// The table a consumer ends with that applies upserts and tombstones.
fn apply_upserts(records: &[Record]) -> BTreeMap<String, String> {
    let mut table = BTreeMap::new();
    for (key, value) in records {
        let key = key.clone().expect("every record has a key");
        match value {
            Some(v) => table.insert(key, v.clone()),
            None => table.remove(&key),
        };
    }
    table
}

/// The view's rows as the sink writes them: key JSON to value JSON.
async fn view_as_records(c: &tokio_postgres::Client) -> BTreeMap<String, String> {
    c.query("SELECT tenant, n, total FROM per_tenant", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let (tenant, n, total): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
            (
                format!(r#"{{"tenant":"{tenant}"}}"#),
                format!(r#"{{"tenant":"{tenant}","n":{n},"total":{total}}}"#),
            )
        })
        .collect()
}

/// Waits until the sink has written everything its group can read.
async fn wait_caught_up(c: &tokio_postgres::Client, sink: &str, within: Duration) {
    let start = Instant::now();
    loop {
        c.batch_execute("FLUSH").await.unwrap();
        let lag = scalar(
            c,
            &format!(
                "SELECT CAST(coalesce(sum(lag_records), -1) AS BIGINT) FROM sluice_catalog.lag \
                 WHERE kind = 'sink' AND consumer = '{sink}'"
            ),
        )
        .await;
        if lag == 0 {
            return;
        }
        assert!(start.elapsed() < within, "sink {sink} still {lag} behind");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn insert_sql(from: i64, rows: i64) -> String {
    let values: Vec<String> = (from..from + rows)
        .map(|i| format!("({i}, 't{}', {})", (i * 7919) % 40, i % 13))
        .collect();
    format!("INSERT INTO ev VALUES {}", values.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_view_sunk_to_a_topic_across_kills_ends_with_the_views_rows() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("totals", 3, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    // HAVING makes groups leave and come back: tombstones and upserts.
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT, tenant TEXT, amount BIGINT) APPEND ONLY WITH (partitions = 2);
         CREATE MATERIALIZED VIEW per_tenant AS
             SELECT tenant, count(*) AS n, sum(amount) AS total FROM ev
             GROUP BY tenant HAVING sum(amount) % 3 <> 0;
         CREATE SINK totals FROM per_tenant INTO kafka
             WITH (topic = 'totals', bootstrap_servers = '{bootstrap}', key = 'tenant');"
    ))
    .await
    .unwrap();

    // Long mode (SLUICE_CRASH_RUNS=10): 10 kills and more rows.
    let kills = crash_runs_or(3);
    let per_round: i64 = if kills >= 10 { 2_000 } else { 600 };
    let mut rng = rand::rngs::StdRng::seed_from_u64(1818);
    let mut next_id = 0;
    for _ in 0..kills {
        let c = server.connect().await;
        for _ in 0..per_round / 100 {
            c.batch_execute(&insert_sql(next_id, 100)).await.unwrap();
            next_id += 100;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..60))).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
        server.kill9();
        server.start_again();
    }
    // A broker that goes away: the sink reports it and carries on after.
    let c = server.connect().await;
    mock.broker_down(1).unwrap();
    c.batch_execute(&insert_sql(next_id, 100)).await.unwrap();
    next_id += 100;
    let start = Instant::now();
    while scalar(
        &c,
        "SELECT count(*) FROM sluice_catalog.sinks WHERE sink_name = 'totals' AND last_error IS NOT NULL AND errors > 0",
    )
    .await
        == 0
    {
        assert!(start.elapsed() < Duration::from_secs(60), "the sink reports the broker's failure");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    mock.broker_up(1).unwrap();
    c.batch_execute(&insert_sql(next_id, 100)).await.unwrap();
    wait_caught_up(&c, "totals", Duration::from_secs(120)).await;
    let consumer_ends_with = apply_upserts(&read_topic(&bootstrap, "totals"));
    let view = view_as_records(&c).await;
    assert!(!view.is_empty());
    assert_eq!(consumer_ends_with, view);
    let records = read_topic(&bootstrap, "totals");
    assert!(
        records.iter().any(|(_, v)| v.is_none()),
        "groups that left the view were sent as tombstones"
    );
    assert_eq!(
        scalar(
            &c,
            "SELECT count(*) FROM sluice_catalog.sinks WHERE sink_name = 'totals' AND key = 'tenant'"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_sunk_to_a_topic_sends_each_row_once_and_sinks_are_checked() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("rows", 2, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, tenant TEXT, amount BIGINT) APPEND ONLY WITH (partitions = 2);
         CREATE TABLE plans (tenant TEXT PRIMARY KEY, price BIGINT);
         CREATE MATERIALIZED VIEW per_tenant AS
             SELECT tenant, count(*) AS n, sum(amount) AS total FROM ev GROUP BY tenant;",
    )
    .await
    .unwrap();
    c.batch_execute(&insert_sql(0, 500)).await.unwrap();
    let sink = |extra: &str| {
        format!(
            "CREATE SINK rows_out FROM ev INTO kafka WITH (topic = 'rows', \
             bootstrap_servers = '{bootstrap}'{extra})"
        )
    };
    // Refused, and nothing left behind.
    for (sql, code) in [
        (
            format!(
                "CREATE SINK s FROM per_tenant INTO kafka WITH (topic = 'rows', bootstrap_servers = '{bootstrap}')"
            ),
            "0A000",
        ),
        (sink(", key = 'nope'"), "42703"),
        (
            format!(
                "CREATE SINK s FROM ev INTO kafka WITH (topic = 'no_such_topic', bootstrap_servers = '{bootstrap}')"
            ),
            "42704",
        ),
        (
            format!(
                "CREATE SINK s FROM nowhere INTO kafka WITH (topic = 'rows', bootstrap_servers = '{bootstrap}')"
            ),
            "42P01",
        ),
        (sink(", format = 'avro'"), "22023"),
    ] {
        let e = c.batch_execute(&sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
    }
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM sluice_catalog.sinks").await,
        0
    );

    c.batch_execute(&sink("")).await.unwrap();
    let e = c.batch_execute(&sink("")).await.unwrap_err();
    assert_eq!(sqlstate(&e), "42710", "{e}");
    assert_eq!(
        e.as_db_error().map(|d| d.message()),
        Some("sink \"rows_out\" already exists")
    );
    c.batch_execute(&sink("").replace("CREATE SINK", "CREATE SINK IF NOT EXISTS"))
        .await
        .unwrap();
    c.batch_execute(&insert_sql(500, 500)).await.unwrap();
    wait_caught_up(&c, "rows_out", Duration::from_secs(60)).await;
    let records = read_topic(&bootstrap, "rows");
    assert_eq!(records.len(), 1000);
    let mut ids: Vec<i64> = records
        .iter()
        .map(|(key, value)| {
            assert!(key.is_none());
            let v: serde_json::Value = serde_json::from_str(value.as_deref().unwrap()).unwrap();
            v["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    // Table partition k went to topic partition k, in the table's order.
    for (k, records) in read_partitions(&bootstrap, "rows").iter().enumerate() {
        let sent: Vec<i64> = records
            .iter()
            .map(|(_, v)| {
                let v: serde_json::Value = serde_json::from_str(v.as_deref().unwrap()).unwrap();
                v["id"].as_i64().unwrap()
            })
            .collect();
        let table: Vec<i64> = c
            .query(
                "SELECT id FROM ev WHERE _partition = $1 ORDER BY _offset",
                &[&(k as i32)],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(sent, table, "partition {k}");
    }
    assert_eq!(
        scalar(
            &c,
            "SELECT records_sent FROM sluice_catalog.sinks WHERE sink_name = 'rows_out'"
        )
        .await,
        1000
    );

    let (_, metrics) = common::http_get(server.http_port, "/metrics").await;
    assert_eq!(
        common::sample(
            &metrics,
            "sluice_kafka_sink_records_sent{sink=\"rows_out\",topic=\"rows\"}"
        ),
        1000.0
    );
    assert_eq!(
        common::sample(
            &metrics,
            "sluice_lag_records{consumer=\"rows_out\",kind=\"sink\",source=\"ev\",partition=\"0\"}"
        ),
        0.0
    );

    // A keyed table: its primary key is the records' key by default.
    c.batch_execute(&format!(
        "CREATE SINK plans_out FROM plans INTO kafka WITH (topic = 'rows', bootstrap_servers = '{bootstrap}');
         INSERT INTO plans VALUES ('acme', 10), ('initech', 20);
         UPDATE plans SET price = 11 WHERE tenant = 'acme';
         DELETE FROM plans WHERE tenant = 'initech';"
    ))
    .await
    .unwrap();
    wait_caught_up(&c, "plans_out", Duration::from_secs(60)).await;
    let keyed: Vec<_> = read_topic(&bootstrap, "rows")
        .into_iter()
        .filter(|(k, _)| k.is_some())
        .collect();
    assert_eq!(
        apply_upserts(&keyed),
        BTreeMap::from([(
            r#"{"tenant":"acme"}"#.to_string(),
            r#"{"tenant":"acme","price":11}"#.to_string()
        )])
    );

    // The sink's group is its own; its source cannot go while it runs.
    for (sql, code) in [
        ("DROP SUBSCRIPTION rows_out", "42809"),
        ("DECLARE c SUBSCRIPTION CURSOR FOR rows_out", "42809"),
        ("ALTER SUBSCRIPTION rows_out RESET TO EARLIEST", "42809"),
        ("DROP TABLE ev", "2BP01"),
        ("DROP SINK nope", "42704"),
    ] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
    }
    c.batch_execute("CREATE SUBSCRIPTION plain FROM ev")
        .await
        .unwrap();
    let e = c.batch_execute("DROP SINK plain").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42809", "{e}");

    // A restart sends nothing again.
    server.restart();
    let c = server.connect().await;
    c.batch_execute(&insert_sql(1000, 10)).await.unwrap();
    wait_caught_up(&c, "rows_out", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let unkeyed = read_topic(&bootstrap, "rows")
        .into_iter()
        .filter(|(k, _)| k.is_none())
        .count();
    assert_eq!(unkeyed, 1010);

    c.batch_execute(
        "DROP SINK rows_out, plans_out; DROP SINK IF EXISTS rows_out; DROP TABLE plans",
    )
    .await
    .unwrap();
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM sluice_catalog.sinks").await,
        0
    );
}

/// Exactly once into an append topic across SIGKILL needs a broker that
/// keeps offsets committed in a transaction and transaction markers,
/// which the mock cluster does not: set KAFKA_BOOTSTRAP to a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_sunk_to_a_real_broker_is_exactly_once_across_kills() {
    let Ok(bootstrap) = std::env::var("KAFKA_BOOTSTRAP") else {
        eprintln!("SKIPPED: set KAFKA_BOOTSTRAP to a Kafka broker to run this test");
        return;
    };
    let topic = format!("sluice-sink-test-{}", std::process::id());
    {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("admin client");
        admin
            .create_topics(
                &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await
            .expect("create topic");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT, tenant TEXT, amount BIGINT) APPEND ONLY WITH (partitions = 2);
         CREATE SINK out FROM ev INTO kafka WITH (topic = '{topic}', bootstrap_servers = '{bootstrap}');"
    ))
    .await
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut next_id = 0;
    for _ in 0..crash_runs_or(3) {
        let c = server.connect().await;
        for _ in 0..10 {
            c.batch_execute(&insert_sql(next_id, 100)).await.unwrap();
            next_id += 100;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
        server.kill9();
        server.start_again();
    }
    let c = server.connect().await;
    wait_caught_up(&c, "out", Duration::from_secs(120)).await;
    let mut ids: Vec<i64> = read_topic(&bootstrap, &topic)
        .iter()
        .map(|(_, v)| {
            let v: serde_json::Value = serde_json::from_str(v.as_deref().unwrap()).unwrap();
            v["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..next_id).collect::<Vec<_>>());
}

/// Every column type out through a sink and back in through a source: the
/// same rows (a jsonb document comes back compact).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_column_type_goes_out_through_a_sink_and_back_through_a_source() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("rt", 1, 1).unwrap();
    let bootstrap = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let columns = "b BOOLEAN, s SMALLINT, i INT, l BIGINT, r REAL, d DOUBLE PRECISION, \
                   n NUMERIC(10,3), t TEXT, v VARCHAR(5), y BYTEA, dt DATE, ts TIMESTAMP, \
                   tz TIMESTAMPTZ, j JSONB";
    c.batch_execute(&format!(
        "CREATE TABLE every ({columns}) APPEND ONLY;
         INSERT INTO every VALUES
             (true, 1, 2, 3, 1.1, 2.25, 12.345, 'x \"q\"\n', 'abc', '\\x00ff', '2026-01-02',
              '2026-01-02 03:04:05.123456', '2026-01-02 03:04:05+02', '{{\"k\": [1, {{\"z\": null}}]}}'),
             (false, -1, -2, -3, 'NaN', '-Infinity', -0.5, '', '', '\\x', '1970-01-01',
              '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', '\"s\"'),
             (NULL, NULL, NULL, NULL, 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
         CREATE SINK every_out FROM every INTO kafka WITH (topic = 'rt', bootstrap_servers = '{bootstrap}');
         CREATE TABLE back ({columns}) WITH (connector = 'kafka', topic = 'rt', \
             bootstrap_servers = '{bootstrap}', format = 'json');"
    ))
    .await
    .unwrap();
    let start = Instant::now();
    while scalar(&c, "SELECT count(*) FROM back").await < 3 {
        if start.elapsed() > Duration::from_secs(60) {
            let sinks = common::text_rows(
                &c,
                "SELECT records_sent, last_error FROM sluice_catalog.sinks",
            )
            .await;
            let sources = common::text_rows(
                &c,
                "SELECT next_offset, dead_letters, last_error FROM sluice_catalog.sources",
            )
            .await;
            let back = common::text_rows(
                &c,
                "SELECT CAST(payload AS TEXT), error FROM back_dead_letters",
            )
            .await;
            panic!("rows did not come back: sinks {sinks:?}, sources {sources:?}, back {back:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM back_dead_letters").await,
        0
    );
    let same = "SELECT b, s, i, l, r, d, n, t, v, y, dt, ts, tz, \
                replace(CAST(j AS TEXT), ' ', '') AS j FROM";
    for (a, b) in [("every", "back"), ("back", "every")] {
        let extra = common::text_rows(&c, &format!("{same} {a} EXCEPT {same} {b}")).await;
        assert!(extra.is_empty(), "in {a}, not in {b}: {extra:?}");
    }
}
