//! Top-N: the first N rows of each group in an order (or the N after the
//! first M).
//! `ROW_NUMBER() OVER (PARTITION BY g ORDER BY o)` filtered by `rn <= N`
//! (the rows come out numbered), and `ORDER BY o LIMIT N OFFSET M` (one
//! group, not numbered; OFFSET alone keeps every row after the first M).
//! Ties in `o` are broken by the whole row, so the view is one definite
//! answer the batch query may also give.
//!
//! Deltas: for each group a delta touches, the group's top N before and
//! after the delta are compared and the difference sent on: rows that left
//! the top (or changed their number) are taken back, rows that entered it
//! are inserted. A row taken back by the input may let another re-enter.
//!
//! State: per group, its rows in order ([`RankedGroups`]). Over inputs
//! that never take rows back, a row past the (M+N)-th can never re-enter,
//! so only the first M+N are kept; over inputs that do, every row is (any
//! may re-enter).
//!
//! Checkpoint: every held row with its count, whole each time.
//!
//! Watermark: nothing; groups stay while they have rows.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use arrow::compute::{self, SortOptions};
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::{Bytes, OutputRows, RankedGroups};
use crate::error::SluiceError;

/// What a Top-N ranks and keeps.
pub struct TopNSpec {
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    pub order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    /// How many rows of each group's order are skipped (`OFFSET`).
    pub offset: usize,
    /// How many rows after those the group keeps (`LIMIT`).
    pub limit: usize,
    /// Rows that tie with the last kept one on the ORDER BY values are
    /// kept too (`FETCH FIRST n ROWS WITH TIES`).
    pub with_ties: bool,
    /// Whether the rows come out with their number (`ROW_NUMBER`), as the
    /// output schema's last column.
    pub numbered: bool,
    /// Whether the input may take rows back (all rows are then kept).
    pub input_retracts: bool,
}

pub struct TopNOperator {
    offset: usize,
    limit: usize,
    with_ties: bool,
    numbered: bool,
    input_retracts: bool,
    input: SchemaRef,
    output: SchemaRef,
    groups: RankedGroups,
    description: String,
    rows_in: u64,
    rows_out: u64,
}

impl TopNOperator {
    pub fn new(
        spec: TopNSpec,
        input: SchemaRef,
        output: SchemaRef,
        description: String,
    ) -> Result<TopNOperator, SluiceError> {
        let expected = input.fields().len() + usize::from(spec.numbered);
        if output.fields().len() != expected {
            return Err(SluiceError::Internal(format!(
                "a Top-N of {} columns cannot give {}",
                input.fields().len(),
                output.fields().len()
            )));
        }
        Ok(TopNOperator {
            groups: RankedGroups::new(input.clone(), spec.partition_by, spec.order_by)?,
            offset: spec.offset,
            limit: spec.limit,
            with_ties: spec.with_ties,
            numbered: spec.numbered,
            input_retracts: spec.input_retracts,
            input,
            output,
            description,
            rows_in: 0,
            rows_out: 0,
        })
    }

    /// Rows out of their whole bytes, numbered when the Top-N numbers.
    fn rows(&self, rows: &[(Bytes, u64)]) -> Result<RecordBatch, SluiceError> {
        let mut columns = self.groups.columns(rows.iter().map(|(r, _)| r))?;
        if self.numbered {
            let numbers: ArrayRef =
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|(_, n)| *n)));
            let field = &self.output.fields()[self.input.fields().len()];
            columns.push(compute::cast(&numbers, field.data_type())?);
        }
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// Which rows of a group's order a Top-N gives.
struct Places {
    offset: usize,
    limit: usize,
    with_ties: bool,
    numbered: bool,
}

/// A group's `limit` rows after the first `offset` (and, with ties, the
/// rows whose ORDER BY values equal the last one's), copies counted one by
/// one, each with its number from 1 (0 when the Top-N does not number its
/// rows, so that rows compare by their bytes alone).
fn top(groups: &RankedGroups, group: &[u8], places: &Places) -> OutputRows {
    let mut out = Vec::new();
    let Some(ranked) = groups.group(group) else {
        return out;
    };
    let mut skip = places.offset;
    let mut last: Option<&Bytes> = None;
    for ((order, row), copies) in ranked {
        for _ in 0..*copies {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if out.len() >= places.limit && !(places.with_ties && last == Some(order)) {
                return out;
            }
            let number = match places.numbered {
                true => out.len() as u64 + 1,
                false => 0,
            };
            out.push((row.clone(), number));
            last = Some(order);
        }
    }
    out
}

impl Operator for TopNOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input != 0 {
            return Err(SluiceError::Internal(format!(
                "a Top-N has no input {input}"
            )));
        }
        let places = Places {
            offset: self.offset,
            limit: self.limit,
            with_ties: self.with_ties,
            numbered: self.numbered,
        };
        let kept = match self.input_retracts {
            true => None,
            false => Some(self.offset.saturating_add(self.limit) as u64),
        };
        let changed = self.groups.apply_delta(
            delta,
            "Top-N",
            |groups, g| Ok(top(groups, g, &places)),
            // Over an input that never takes rows back, a group keeps its
            // first offset + limit rows only (and those tied with the
            // last): the others can never re-enter.
            |groups, g| {
                if let Some(kept) = kept {
                    groups.truncate(g, kept, places.with_ties)
                }
            },
        )?;
        self.rows_in += changed.rows_in;
        self.rows_out += changed.came.len() as u64;
        changed.delta(|rows| self.rows(rows))
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        self.groups.state_parts()
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        self.groups.restore_part(part, rows, "Top-N")
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "top-n",
            description: self.description.clone(),
            state_rows: self.groups.held(),
            state_bytes: self.groups.state_bytes(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("cat", DataType::Utf8, true),
            Field::new("price", DataType::Int64, true),
        ]))
    }

    fn batch(rows: &[(&str, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    /// Top 2 per `cat` by price, highest first, numbered.
    fn top2(input_retracts: bool) -> TopNOperator {
        let s = schema();
        let output = Arc::new(Schema::new(vec![
            Field::new("cat", DataType::Utf8, true),
            Field::new("price", DataType::Int64, true),
            Field::new("rn", DataType::UInt64, true),
        ]));
        let descending = SortOptions {
            descending: true,
            nulls_first: false,
        };
        TopNOperator::new(
            TopNSpec {
                partition_by: vec![col("cat", &s).unwrap()],
                order_by: vec![(col("price", &s).unwrap(), descending)],
                offset: 0,
                limit: 2,
                with_ties: false,
                numbered: true,
                input_retracts,
            },
            s,
            output,
            "test".into(),
        )
        .unwrap()
    }

    /// A delta's rows as "cat price rn", sorted.
    fn shown(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        for b in batches {
            let cats = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let prices = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            let rns = b.column(2).as_any().downcast_ref::<UInt64Array>().unwrap();
            for i in 0..b.num_rows() {
                out.push(format!(
                    "{} {} {}",
                    cats.value(i),
                    prices.value(i),
                    rns.value(i)
                ));
            }
        }
        out.sort();
        out
    }

    fn insert(op: &mut TopNOperator, rows: &[(&str, i64)]) -> Delta {
        op.apply(
            0,
            &Delta {
                insert: vec![batch(rows)],
                retract: vec![],
            },
        )
        .unwrap()
    }

    #[test]
    fn a_row_entering_the_top_renumbers_those_below_and_pushes_the_last_out() {
        let mut op = top2(false);
        let d = insert(&mut op, &[("a", 10), ("a", 30), ("b", 5)]);
        assert_eq!(shown(&d.insert), ["a 10 2", "a 30 1", "b 5 1"]);
        assert!(shown(&d.retract).is_empty());
        let d = insert(&mut op, &[("a", 20)]);
        assert_eq!(shown(&d.retract), ["a 10 2"]);
        assert_eq!(shown(&d.insert), ["a 20 2"]);
        let d = insert(&mut op, &[("a", 40)]);
        assert_eq!(shown(&d.retract), ["a 20 2", "a 30 1"]);
        assert_eq!(shown(&d.insert), ["a 30 2", "a 40 1"]);
        // A row below the top changes nothing.
        assert!(insert(&mut op, &[("a", 1)]).is_empty());
        // Over an input that never takes rows back, only the top is kept.
        assert_eq!(op.stats().state_rows, 3);
    }

    #[test]
    fn a_row_taken_back_lets_the_next_one_re_enter() {
        let mut op = top2(true);
        insert(&mut op, &[("a", 10), ("a", 30), ("a", 20), ("a", 20)]);
        assert_eq!(op.stats().state_rows, 4);
        let d = op
            .apply(
                0,
                &Delta {
                    insert: vec![],
                    retract: vec![batch(&[("a", 30)])],
                },
            )
            .unwrap();
        // The two copies of 20 are now first and second: one moves up.
        assert_eq!(shown(&d.retract), ["a 30 1"]);
        assert_eq!(shown(&d.insert), ["a 20 1"]);
    }

    #[test]
    fn state_comes_back_from_its_snapshot() {
        let mut op = top2(true);
        insert(&mut op, &[("a", 10), ("a", 30), ("b", 5), ("b", 5)]);
        let parts = op.snapshot().unwrap();
        let mut restored = top2(true);
        restored.restore(0, &parts[0]).unwrap();
        assert_eq!(restored.stats().state_rows, 4);
        let d = insert(&mut restored, &[("b", 7)]);
        assert_eq!(shown(&d.retract), ["b 5 1"]);
        assert_eq!(shown(&d.insert), ["b 7 1"]);
    }
}
