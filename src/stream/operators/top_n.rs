//! Top-N: the first N rows of each group in an order.
//! `ROW_NUMBER() OVER (PARTITION BY g ORDER BY o)` filtered by `rn <= N`
//! (the rows come out numbered), and `ORDER BY o LIMIT N` (one group, not
//! numbered). Ties in `o` are broken by the whole row, so the view is one
//! definite answer the batch query may also give.
//!
//! Deltas: for each group a delta touches, the group's top N before and
//! after the delta are compared and the difference sent on: rows that left
//! the top (or changed their number) are taken back, rows that entered it
//! are inserted. A row taken back by the input may let another re-enter.
//!
//! State: per group (the arrow-row bytes of the PARTITION BY values), its
//! rows ordered by the ORDER BY values' arrow-row bytes then the row's own,
//! each with how many copies it has. Over inputs that never take rows back,
//! a row past the N-th can never re-enter, so only the top N are kept; over
//! inputs that do, every row is (any may re-enter).
//!
//! Checkpoint: every held row with its count, whole each time.
//!
//! Watermark: nothing; groups stay while they have rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow::compute::{self, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use crate::error::SluiceError;

/// Arrow-row bytes.
type Bytes = Box<[u8]>;

/// A group's rows in order: (order bytes, row bytes) to copies.
type Ranked = BTreeMap<(Bytes, Bytes), u64>;

/// What a Top-N ranks and keeps.
pub struct TopNSpec {
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    pub order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    pub limit: usize,
    /// Whether the rows come out with their number (`ROW_NUMBER`), as the
    /// output schema's last column.
    pub numbered: bool,
    /// Whether the input may take rows back (all rows are then kept).
    pub input_retracts: bool,
}

pub struct TopNOperator {
    spec: TopNSpec,
    input: SchemaRef,
    output: SchemaRef,
    group_rows: RowConverter,
    order_rows: RowConverter,
    whole_rows: RowConverter,
    groups: HashMap<Bytes, Ranked, ahash::RandomState>,
    held: u64,
    description: String,
    rows_in: u64,
    rows_out: u64,
}

/// A row's group, place in its group's order, and whole bytes.
struct Keyed {
    group: Bytes,
    order: Bytes,
    row: Bytes,
}

impl TopNOperator {
    pub fn new(
        spec: TopNSpec,
        input: SchemaRef,
        output: SchemaRef,
        description: String,
    ) -> Result<TopNOperator, SluiceError> {
        let group_fields = spec
            .partition_by
            .iter()
            .map(|e| e.data_type(&input).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        let order_fields = spec
            .order_by
            .iter()
            .map(|(e, o)| {
                e.data_type(&input)
                    .map(|t| SortField::new_with_options(t, *o))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let whole_fields = input
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let expected = input.fields().len() + usize::from(spec.numbered);
        if output.fields().len() != expected {
            return Err(SluiceError::Internal(format!(
                "a Top-N of {} columns cannot give {}",
                input.fields().len(),
                output.fields().len()
            )));
        }
        Ok(TopNOperator {
            group_rows: RowConverter::new(group_fields)?,
            order_rows: RowConverter::new(order_fields)?,
            whole_rows: RowConverter::new(whole_fields)?,
            spec,
            input,
            output,
            groups: HashMap::default(),
            held: 0,
            description,
            rows_in: 0,
            rows_out: 0,
        })
    }

    /// Each row of `batch` with its group, order and whole bytes.
    fn keyed(&self, batch: &RecordBatch) -> Result<Vec<Keyed>, SluiceError> {
        let n = batch.num_rows();
        let evaluate = |e: &Arc<dyn PhysicalExpr>| -> Result<ArrayRef, SluiceError> {
            Ok(e.evaluate(batch)?.into_array(n)?)
        };
        let group_columns = self
            .spec
            .partition_by
            .iter()
            .map(evaluate)
            .collect::<Result<Vec<_>, _>>()?;
        let order_columns = self
            .spec
            .order_by
            .iter()
            .map(|(e, _)| evaluate(e))
            .collect::<Result<Vec<_>, _>>()?;
        // No PARTITION BY (or no ORDER BY): one empty key for every row;
        // arrow-row has no rows to give for no columns.
        let key_bytes =
            |converter: &RowConverter, columns: &[ArrayRef]| -> Result<Vec<Bytes>, SluiceError> {
                if columns.is_empty() {
                    return Ok(vec![Box::from(&[][..]); n]);
                }
                let rows = converter.convert_columns(columns)?;
                Ok((0..n).map(|i| Box::from(rows.row(i).as_ref())).collect())
            };
        let groups = key_bytes(&self.group_rows, &group_columns)?;
        let orders = key_bytes(&self.order_rows, &order_columns)?;
        let wholes = key_bytes(&self.whole_rows, batch.columns())?;
        Ok(groups
            .into_iter()
            .zip(orders)
            .zip(wholes)
            .map(|((group, order), row)| Keyed { group, order, row })
            .collect())
    }

    /// A group's first `limit` rows, copies counted one by one, each with
    /// its number from 1 (0 when the Top-N does not number its rows, so
    /// that rows compare by their bytes alone).
    fn top(&self, group: &[u8]) -> Vec<(Bytes, u64)> {
        let mut out = Vec::new();
        let Some(ranked) = self.groups.get(group) else {
            return out;
        };
        for ((_, row), copies) in ranked {
            for _ in 0..*copies {
                if out.len() == self.spec.limit {
                    return out;
                }
                let number = match self.spec.numbered {
                    true => out.len() as u64 + 1,
                    false => 0,
                };
                out.push((row.clone(), number));
            }
        }
        out
    }

    /// Over an input that never takes rows back, a group keeps its top
    /// `limit` rows only: the others can never re-enter.
    fn trim(&mut self, group: &[u8]) {
        if self.spec.input_retracts {
            return;
        }
        let Some(ranked) = self.groups.get_mut(group) else {
            return;
        };
        let mut seen = 0u64;
        let mut cut = None;
        for (key, copies) in ranked.iter_mut() {
            let room = (self.spec.limit as u64).saturating_sub(seen);
            if room == 0 {
                cut = Some(key.clone());
                break;
            }
            if *copies > room {
                self.held -= *copies - room;
                *copies = room;
            }
            seen += *copies;
        }
        if let Some(cut) = cut {
            let gone = ranked.split_off(&cut);
            self.held -= gone.values().sum::<u64>();
        }
    }

    fn add(&mut self, k: Keyed, copies: u64) {
        *self
            .groups
            .entry(k.group)
            .or_default()
            .entry((k.order, k.row))
            .or_default() += copies;
        self.held += copies;
    }

    fn take(&mut self, k: Keyed) -> Result<(), SluiceError> {
        let missing =
            || SluiceError::Internal("a Top-N's input took back a row it never gave".into());
        let ranked = self.groups.get_mut(&k.group).ok_or_else(missing)?;
        let key = (k.order, k.row);
        let copies = ranked.get_mut(&key).ok_or_else(missing)?;
        *copies -= 1;
        if *copies == 0 {
            ranked.remove(&key);
        }
        if ranked.is_empty() {
            self.groups.remove(&k.group);
        }
        self.held -= 1;
        Ok(())
    }

    /// Rows out of their whole bytes, numbered when the Top-N numbers.
    fn rows(&self, rows: &[(Bytes, u64)]) -> Result<RecordBatch, SluiceError> {
        let parser = self.whole_rows.parser();
        let mut columns = self
            .whole_rows
            .convert_rows(rows.iter().map(|(r, _)| parser.parse(r)))?;
        if self.spec.numbered {
            let numbers: ArrayRef =
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|(_, n)| *n)));
            let field = &self.output.fields()[self.input.fields().len()];
            columns.push(compute::cast(&numbers, field.data_type())?);
        }
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// What is in `a` and not in `b`, copies counted.
fn minus(a: &[(Bytes, u64)], b: &[(Bytes, u64)]) -> Vec<(Bytes, u64)> {
    let mut left: HashMap<&(Bytes, u64), usize> = HashMap::new();
    for r in b {
        *left.entry(r).or_default() += 1;
    }
    a.iter()
        .filter(|r| match left.get_mut(r) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

impl Operator for TopNOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input != 0 {
            return Err(SluiceError::Internal(format!(
                "a Top-N has no input {input}"
            )));
        }
        let mut inserted = Vec::new();
        let mut retracted = Vec::new();
        for b in delta.insert.iter().filter(|b| b.num_rows() > 0) {
            self.rows_in += b.num_rows() as u64;
            inserted.extend(self.keyed(b)?);
        }
        for b in delta.retract.iter().filter(|b| b.num_rows() > 0) {
            self.rows_in += b.num_rows() as u64;
            retracted.extend(self.keyed(b)?);
        }
        if inserted.is_empty() && retracted.is_empty() {
            return Ok(Delta::default());
        }
        // Each touched group's top before the delta.
        let mut before: HashMap<Bytes, Vec<(Bytes, u64)>> = HashMap::new();
        for k in inserted.iter().chain(&retracted) {
            if !before.contains_key(&k.group) {
                before.insert(k.group.clone(), self.top(&k.group));
            }
        }
        for k in retracted {
            self.take(k)?;
        }
        for k in inserted {
            self.add(k, 1);
        }
        let (mut gone, mut came) = (Vec::new(), Vec::new());
        for (group, old) in before {
            let new = self.top(&group);
            self.trim(&group);
            gone.extend(minus(&old, &new));
            came.extend(minus(&new, &old));
        }
        let mut out = Delta::default();
        if !gone.is_empty() {
            out.retract.push(self.rows(&gone)?);
        }
        if !came.is_empty() {
            self.rows_out += came.len() as u64;
            out.insert.push(self.rows(&came)?);
        }
        Ok(out)
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let mut rows = Vec::with_capacity(self.held as usize);
        let mut copies = Vec::with_capacity(self.held as usize);
        for ranked in self.groups.values() {
            for ((_, row), n) in ranked {
                rows.push(row);
                copies.push(*n);
            }
        }
        let parser = self.whole_rows.parser();
        let mut columns = self
            .whole_rows
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        columns.push(Arc::new(UInt64Array::from(copies)));
        let mut fields = self.input.fields().to_vec();
        fields.push(Arc::new(Field::new("copies", DataType::UInt64, false)));
        Ok(vec![vec![RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?]])
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        if part != 0 {
            return Err(SluiceError::Internal(format!("a Top-N has no part {part}")));
        }
        let width = self.input.fields().len();
        for batch in rows {
            let copies = batch
                .columns()
                .get(width)
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                .filter(|_| batch.num_columns() == width + 1)
                .ok_or_else(|| {
                    SluiceError::Internal(
                        "the checkpoint's Top-N state has unexpected columns".into(),
                    )
                })?
                .clone();
            let rows = batch.project(&(0..width).collect::<Vec<_>>())?;
            for (i, k) in self.keyed(&rows)?.into_iter().enumerate() {
                self.add(k, copies.value(i));
            }
        }
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "top-n",
            description: self.description.clone(),
            state_rows: self.held,
            state_bytes: self
                .groups
                .iter()
                .map(|(g, r)| {
                    g.len() as u64
                        + r.keys()
                            .map(|(o, w)| (o.len() + w.len() + 24) as u64)
                            .sum::<u64>()
                })
                .sum(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
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
                limit: 2,
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
