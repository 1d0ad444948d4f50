//! Micro-benchmarks of the ingest path, stage by stage: parsing COPY CSV
//! into validated Arrow batches, decoding the same rows as Kafka JSON
//! records, and appending batches to a partitioned log (routing, IPC
//! framing, fsync, commit).
//!
//!     cargo bench --bench ingest

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice::ingest::CopyParser;
use sluice::log::{LogConfig, LogStore};
use sluice::source::decode::{KafkaRecord, RecordDecoder};

const ROWS: usize = 200_000;

fn usage_csv(rows: usize) -> Vec<u8> {
    let mut s = String::with_capacity(rows * 60);
    for i in 0..rows {
        s.push_str(&format!(
            "evt-{i:09},tenant-{:02},{},2026-01-01 00:{:02}:{:02}.{:06}\n",
            i % 50,
            50 + i % 3950,
            (i / 60000) % 60,
            (i / 1000) % 60,
            i % 1000 * 1000
        ));
    }
    s.into_bytes()
}

/// The same rows as [`usage_csv`], one JSON record each, in polls of
/// 16,384 records (what a source appends in one commit).
fn usage_records(rows: usize) -> Vec<Vec<KafkaRecord>> {
    let records: Vec<KafkaRecord> = (0..rows)
        .map(|i| KafkaRecord {
            partition: 0,
            offset: i as i64,
            key: None,
            timestamp_ms: Some(1_767_225_600_000),
            payload: Some(
                format!(
                    r#"{{"event_id": "evt-{i:09}", "tenant": "tenant-{:02}", "tokens": {}, "event_time": "2026-01-01 00:{:02}:{:02}.{:06}"}}"#,
                    i % 50,
                    50 + i % 3950,
                    (i / 60000) % 60,
                    (i / 1000) % 60,
                    i % 1000 * 1000
                )
                .into_bytes(),
            ),
        })
        .collect();
    records
        .chunks(16_384)
        .map(<[KafkaRecord]>::to_vec)
        .collect()
}

fn table_sql() -> sluice_sql::Statement {
    sluice_sql::parse_sql(
        "CREATE TABLE usage (event_id TEXT, tenant TEXT, tokens BIGINT, event_time TIMESTAMP) \
         APPEND ONLY WITH (partitions = 4, partition_key = 'tenant')",
    )
    .expect("valid DDL")
}

fn bench(c: &mut Criterion) {
    let csv = usage_csv(ROWS);
    let sluice_sql::Statement::CreateTable(ct) = table_sql() else {
        panic!("not a CREATE TABLE")
    };
    let copy = match sluice_sql::parse_sql("COPY usage FROM STDIN WITH (FORMAT csv)")
        .expect("valid COPY")
    {
        sluice_sql::Statement::CopyFrom(c) => c,
        _ => panic!("not a COPY"),
    };
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(10);

    group.bench_function("copy_csv_parse", |b| {
        b.iter(|| {
            let mut p = CopyParser::new(&ct.table, copy.clone(), u64::MAX).expect("parser");
            // psql sends one line per CopyData message; feed in 64 KiB chunks.
            for chunk in csv.chunks(64 * 1024) {
                p.feed(chunk).expect("feed");
            }
            p.finish().expect("batches")
        })
    });

    let polls = usage_records(ROWS);
    let mut kafka_table = ct.table.clone();
    kafka_table
        .columns
        .extend(sluice_catalog::kafka_column_defs());
    let decoder = RecordDecoder::new(&kafka_table, sluice_catalog::SourceFormat::Json);
    group.bench_function("kafka_json_decode", |b| {
        b.iter_batched(
            || polls.clone(),
            |polls| {
                for poll in polls {
                    let decoded = decoder.decode(poll);
                    assert!(decoded.dead.is_empty() && decoded.rows.is_some());
                }
            },
            BatchSize::LargeInput,
        )
    });

    let mut p = CopyParser::new(&ct.table, copy.clone(), u64::MAX).expect("parser");
    p.feed(&csv).expect("feed");
    let batches = p.finish().expect("batches");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(LogStore::open(dir.path(), LogConfig::default()).expect("store"));
    let table = store
        .create_table(ct.table.clone(), false)
        .expect("create")
        .expect("new table");
    group.bench_function("log_append_fsync", |b| {
        b.iter_batched(
            || batches.clone(),
            |batches| runtime.block_on(table.append(batches)).expect("append"),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
