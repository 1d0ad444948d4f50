//! Cuts: one offset per partition of some tables, taken at one commit
//! (`CREATE CUT`), and the positions reads `AS OF` resolve to.
//!
//! A read at a cut returns exactly the rows below its offsets, from the
//! first offset retention held when the cut was taken. While a cut exists,
//! retention deletes no segment it needs and compaction of a keyed table
//! works below it only, so such a read gives the same rows whenever it
//! runs. `AS OF OFFSETS` and `AS OF TIMESTAMP` name positions without
//! pinning them: they read what retention still holds below them, and
//! fail when retention took the position itself.

use std::sync::Arc;

use sluice_catalog::{CutDef, CutTable};
use sluice_sql::AsOf;

use super::store::LogStore;
use super::table::{now_us, TableLog};

/// Why a read at a position cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    #[error("cut \"{0}\" does not exist")]
    UndefinedCut(String),
    #[error("cut \"{cut}\" does not cover table \"{table}\" (it was taken before the table was created, or without it)")]
    NotCovered { cut: String, table: String },
    #[error("partition {partition} of \"{table}\": offsets below {start} were deleted by retention; \"{table}\" cannot be read {at}")]
    OutsideRetention {
        table: String,
        partition: usize,
        start: u64,
        at: String,
    },
    #[error("{0}")]
    BadPosition(String),
    #[error("invalid input syntax for type timestamp with time zone: \"{0}\"")]
    BadTimestamp(String),
}

crate::layer_error!(CutError);

impl CutError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            CutError::UndefinedCut(_) => "42704",
            CutError::NotCovered { .. } | CutError::BadPosition(_) => "22023",
            CutError::OutsideRetention { .. } => "55000",
            CutError::BadTimestamp(_) => "22007",
        }
    }
}

/// How a position reads in messages: `AS OF CUT c`.
pub fn shown(as_of: &AsOf) -> String {
    match as_of {
        AsOf::Cut(c) => format!("AS OF CUT {c}"),
        AsOf::Offsets(o) => format!(
            "AS OF OFFSETS ({})",
            o.iter()
                .map(|(p, o)| format!("{p} => {o}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        AsOf::Timestamp(t) => format!("AS OF TIMESTAMP '{t}'"),
    }
}

/// A `timestamptz` literal (any form PostgreSQL reads; UTC when it has
/// no zone) in microseconds since the epoch.
fn timestamp_us(text: &str) -> Result<i64, CutError> {
    crate::types::datetime::parse_timestamp(text, true)
        .map_err(|_| CutError::BadTimestamp(text.to_string()))
}

/// Takes a cut of `tables` at one commit (no transaction publishes while
/// their ends are read) and records it durably. Retention does not run
/// on them meanwhile, so the starts it records are still held.
pub async fn take_cut(
    store: &LogStore,
    name: &str,
    tables: &[Arc<TableLog>],
    all_tables: bool,
    owner: &str,
) -> Result<CutDef, super::LogError> {
    let mut held = Vec::with_capacity(tables.len());
    for t in tables {
        held.push(t.tiering_lock().lock().await);
    }
    let snapshot = store.transactions().take_snapshot(tables).await;
    let covered = tables
        .iter()
        .map(|t| CutTable {
            table_id: t.def().id,
            starts: t.partitions().iter().map(|p| p.start_offset()).collect(),
            ends: snapshot.ends(t),
        })
        .collect();
    let def = store.create_cut_def(CutDef {
        id: 0,
        name: name.to_string(),
        created_at_us: now_us(),
        all_tables,
        owner: owner.to_string(),
        tables: covered,
        view_checkpoints: Vec::new(),
    })?;
    drop(held);
    Ok(def)
}

/// Per partition of `table`, the ends a read `as_of` stops at (the rows
/// below them are read).
pub fn ends_at(store: &LogStore, table: &TableLog, as_of: &AsOf) -> Result<Vec<u64>, CutError> {
    let name = table.name();
    let parts = table.partitions();
    let outside = |partition: usize, start: u64| CutError::OutsideRetention {
        table: name.clone(),
        partition,
        start,
        at: shown(as_of),
    };
    match as_of {
        AsOf::Cut(c) => {
            let cut = store
                .cut_def(c)
                .ok_or_else(|| CutError::UndefinedCut(c.clone()))?;
            let covered = cut
                .tables
                .iter()
                .find(|t| t.table_id == table.def().id)
                .ok_or_else(|| CutError::NotCovered {
                    cut: c.clone(),
                    table: name.clone(),
                })?;
            let starts_ends = covered.starts.iter().zip(&covered.ends);
            for (k, (p, (&start, &end))) in parts.iter().zip(starts_ends).enumerate() {
                if end > start && p.start_offset() > start {
                    return Err(outside(k, p.start_offset()));
                }
            }
            Ok(covered.ends.clone())
        }
        AsOf::Offsets(offsets) => {
            let mut ends = vec![None; parts.len()];
            for &(p, o) in offsets {
                let k = p as usize;
                let Some(part) = parts.get(k) else {
                    return Err(CutError::BadPosition(format!(
                        "table \"{name}\" has no partition {p} (it has {})",
                        parts.len()
                    )));
                };
                let committed = table.commits().borrow().get(k).copied().unwrap_or(0);
                if o > committed {
                    return Err(CutError::BadPosition(format!(
                        "offset {o} of partition {p} of \"{name}\" is beyond its end, {committed}"
                    )));
                }
                if o < part.start_offset() {
                    return Err(outside(k, part.start_offset()));
                }
                ends[k] = Some(o);
            }
            ends.iter()
                .enumerate()
                .map(|(k, e)| {
                    e.ok_or_else(|| {
                        CutError::BadPosition(format!(
                            "AS OF OFFSETS gives no offset for partition {k} of \"{name}\" (it has {} partitions): name each",
                            parts.len()
                        ))
                    })
                })
                .collect()
        }
        AsOf::Timestamp(text) => {
            let at = timestamp_us(text)?;
            if at > now_us() {
                return Err(CutError::BadPosition(format!(
                    "AS OF TIMESTAMP '{text}' is in the future"
                )));
            }
            let committed = table.commits().borrow().clone();
            let mut ends = Vec::with_capacity(parts.len());
            for (k, p) in parts.iter().enumerate() {
                // The first record committed after the time, or the end.
                let end = p
                    .offset_at_time(at.saturating_add(1))
                    .min(committed.get(k).copied().unwrap_or(0));
                let start = p.start_offset();
                if start > 0 && p.first_ingested_us().is_some_and(|t| t > at) {
                    return Err(outside(k, start));
                }
                ends.push(end);
            }
            Ok(ends)
        }
    }
}

/// Bytes of the segments `cut` keeps from retention in `table` (those
/// holding offsets below its ends).
pub fn pinned_bytes(table: &TableLog, covered: &CutTable) -> u64 {
    table
        .partitions()
        .iter()
        .zip(covered.starts.iter().zip(&covered.ends))
        .filter(|(_, (start, end))| end > start)
        .map(|(p, (_, end))| p.bytes_below(*end))
        .sum()
}
