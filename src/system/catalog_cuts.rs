//! The `sluice_catalog` tables of reproducible reads and erasures:
//! `cuts`, `datasets`, `dataset_versions` and `erasures`, each a schema and
//! a batch computed from the [`LogStore`]'s catalog when read.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::Result;

use crate::log::LogStore;

pub(super) fn cuts_schema() -> SchemaRef {
    let i64f = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("cut_name", DataType::Utf8, false),
        Field::new("table_name", DataType::Utf8, false),
        Field::new(
            "created_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("owner", DataType::Utf8, false),
        // As `AS OF OFFSETS (...)` takes them: `0 => 8800, 1 => 9040`.
        Field::new("offsets", DataType::Utf8, false),
        i64f("rows"),
        i64f("bytes_pinned"),
    ]))
}

/// One row per table of each cut (of a table that still exists): where
/// the cut is, how many rows a read at it returns, and the bytes of
/// segments it keeps from retention.
pub(super) fn cuts_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut cuts = vec![];
    let mut tables = vec![];
    let mut created = vec![];
    let mut owners = vec![];
    let mut offsets = vec![];
    let mut rows = vec![];
    let mut pinned = vec![];
    let all = store.tables();
    for cut in store.cut_defs() {
        for covered in &cut.tables {
            let Some(t) = all.iter().find(|t| t.def().id == covered.table_id) else {
                continue;
            };
            cuts.push(cut.name.clone());
            tables.push(t.name());
            created.push(cut.created_at_us);
            owners.push(cut.owner.clone());
            offsets.push(
                covered
                    .ends
                    .iter()
                    .enumerate()
                    .map(|(k, e)| format!("{k} => {e}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            rows.push(
                covered
                    .starts
                    .iter()
                    .zip(&covered.ends)
                    .map(|(s, e)| e.saturating_sub(*s) as i64)
                    .sum::<i64>(),
            );
            pinned.push(crate::log::cut::pinned_bytes(t, covered) as i64);
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(cuts)),
        Arc::new(StringArray::from(tables)),
        Arc::new(TimestampMicrosecondArray::from(created).with_timezone("+00:00")),
        Arc::new(StringArray::from(owners)),
        Arc::new(StringArray::from(offsets)),
        Arc::new(Int64Array::from(rows)),
        Arc::new(Int64Array::from(pinned)),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

pub(super) fn erasures_schema() -> SchemaRef {
    let ts = |n: &str, nullable| {
        Field::new(
            n,
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            nullable,
        )
    };
    Arc::new(Schema::new(vec![
        Field::new("erasure", DataType::Int64, false),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("all_tables", DataType::Boolean, false),
        Field::new("predicate", DataType::Utf8, true),
        Field::new("requester", DataType::Utf8, false),
        ts("requested_at", false),
        ts("completed_at", true),
        Field::new("status", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("rows_removed", DataType::Int64, false),
        Field::new("files_rewritten", DataType::Int64, false),
        // `location old-sha256 -> new-sha256`, one per line.
        Field::new("rewritten", DataType::Utf8, false),
        Field::new("not_reached", DataType::Utf8, false),
        Field::new("suppress", DataType::Utf8, true),
        ts("suppress_until", true),
        Field::new("suppressed_rows", DataType::Int64, false),
    ]))
}

/// One row per table of each erasure in the ledger (of `ALL TABLES`: each
/// table it reached).
pub(super) fn erasures_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let records = store.erasures().lock().records();
    let suppressed = |table: &str, id: u64| {
        store
            .table(table)
            .map_or(0, |t| t.suppressed_rows(id) as i64)
    };
    let rows: Vec<(&crate::log::erasure::ErasureRecord, &String)> = records
        .iter()
        .flat_map(|r| r.tables.iter().map(move |t| (r, t)))
        .collect();
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(r, _)| r.id as i64),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(_, t)| t.as_str()),
        )),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|(r, _)| Some(r.all_tables)),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|(r, _)| r.predicate.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(r, _)| r.requester.as_str()),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                rows.iter().map(|(r, _)| r.requested_at_us),
            )
            .with_timezone("+00:00"),
        ),
        Arc::new(
            TimestampMicrosecondArray::from_iter(rows.iter().map(|(r, _)| r.completed_at_us))
                .with_timezone("+00:00"),
        ),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(r, _)| r.step.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|(r, _)| r.error.as_deref()),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(r, _)| r.rows_removed as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(r, _)| r.files_rewritten.len() as i64),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(r, _)| {
            r.files_rewritten
                .iter()
                .map(|f| format!("{} {} -> {}", f.location, f.old_sha256, f.new_sha256))
                .collect::<Vec<_>>()
                .join("\n")
        }))),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(r, _)| r.not_reached.join("\n")),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|(r, _)| r.suppress.as_deref()),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter(
                rows.iter()
                    .map(|(r, _)| r.suppress_until_us.filter(|u| *u != i64::MAX)),
            )
            .with_timezone("+00:00"),
        ),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(r, t)| suppressed(t, r.id)),
        )),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

pub(super) fn datasets_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("dataset_name", DataType::Utf8, false),
        Field::new("owner", DataType::Utf8, false),
        Field::new("query", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, true),
        Field::new("split_key", DataType::Utf8, true),
        Field::new("seed", DataType::Int64, true),
        Field::new("versions", DataType::Int64, false),
    ]))
}

/// One row per dataset.
pub(super) fn datasets_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let defs = store.dataset_defs();
    let split = |f: fn(&sluice_catalog::DatasetSplit) -> String| -> StringArray {
        defs.iter().map(|d| d.split.as_ref().map(f)).collect()
    };
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            defs.iter().map(|d| d.name.clone()),
        )),
        Arc::new(StringArray::from_iter_values(
            defs.iter().map(|d| d.owner.clone()),
        )),
        Arc::new(StringArray::from_iter_values(
            defs.iter().map(|d| sluice_sql::unmark_asof_joins(&d.query)),
        )),
        Arc::new(split(|s| {
            s.parts
                .iter()
                .map(|(n, p)| format!("{n} {p}"))
                .collect::<Vec<_>>()
                .join(", ")
        })),
        Arc::new(split(|s| s.key.clone())),
        Arc::new(
            defs.iter()
                .map(|d| d.split.as_ref().map(|s| s.seed))
                .collect::<Int64Array>(),
        ),
        Arc::new(Int64Array::from_iter_values(
            defs.iter().map(|d| d.versions.len() as i64),
        )),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

pub(super) fn dataset_versions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("dataset_name", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("cut_name", DataType::Utf8, false),
        Field::new(
            "created_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("rows", DataType::Int64, false),
        // `train 80, validation 10, test 10` as rows: `train 812, ...`.
        Field::new("split_rows", DataType::Utf8, true),
        Field::new("content_hash", DataType::Utf8, false),
    ]))
}

/// One row per version of each dataset.
pub(super) fn dataset_versions_batch(store: &LogStore, schema: &SchemaRef) -> Result<RecordBatch> {
    let (mut names, mut numbers, mut cuts, mut created, mut rows, mut splits, mut hashes) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for d in store.dataset_defs() {
        for v in &d.versions {
            names.push(d.name.clone());
            numbers.push(v.version as i64);
            cuts.push(v.cut.clone());
            created.push(v.created_at_us);
            rows.push(v.rows as i64);
            splits.push((!v.split_rows.is_empty()).then(|| {
                v.split_rows
                    .iter()
                    .map(|(n, r)| format!("{n} {r}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }));
            hashes.push(v.content_hash.clone());
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(Int64Array::from(numbers)),
        Arc::new(StringArray::from(cuts)),
        Arc::new(TimestampMicrosecondArray::from(created).with_timezone("+00:00")),
        Arc::new(Int64Array::from(rows)),
        Arc::new(StringArray::from(splits)),
        Arc::new(StringArray::from(hashes)),
    ];
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}
