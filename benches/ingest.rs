//! Micro-benchmarks of the ingest path, stage by stage: parsing COPY CSV
//! into validated Arrow batches, and appending batches to a partitioned log
//! (routing, IPC framing, fsync, commit).
//!
//!     cargo bench --bench ingest

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice::ingest::CopyParser;
use sluice::log::{LogConfig, LogStore};

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
