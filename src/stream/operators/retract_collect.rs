//! Aggregates over a multiset, for views whose input takes rows back:
//! `bool_and`, `bool_or`, `string_agg`, `array_agg`, `first_value` and
//! `last_value`, each with or without `ORDER BY`. DataFusion's
//! accumulators for them only add; taking a row back needs every row the
//! group still holds.
//!
//! A group keeps each distinct input row (its ORDER BY values, then its
//! arguments) as order-preserving row bytes, with how many copies remain;
//! the map's order is the aggregate's ORDER BY (ties by the values). The
//! result is computed from the whole multiset when asked for, so taking a
//! row back is exact. Checkpointed as the row bytes and their counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, ListArray, UInt32Array};
use arrow::compute::{self, SortOptions};
use arrow::datatypes::{DataType, Field, Int64Type};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::Accumulator;

/// Which aggregate a [`RetractableCollect`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectKind {
    BoolAnd,
    BoolOr,
    /// `string_agg(value, delimiter)`.
    StringAgg,
    ArrayAgg,
    FirstValue,
    LastValue,
}

impl CollectKind {
    /// The kind for an aggregate's DataFusion name.
    pub fn of(name: &str) -> Option<CollectKind> {
        Some(match name {
            "bool_and" => CollectKind::BoolAnd,
            "bool_or" => CollectKind::BoolOr,
            "string_agg" => CollectKind::StringAgg,
            "array_agg" => CollectKind::ArrayAgg,
            "first_value" => CollectKind::FirstValue,
            "last_value" => CollectKind::LastValue,
            _ => return None,
        })
    }

    /// NULL values are no rows of the aggregate (PostgreSQL's bool_and,
    /// bool_or and string_agg skip them; array_agg and first_value keep
    /// them).
    fn skips_nulls(self) -> bool {
        matches!(
            self,
            CollectKind::BoolAnd | CollectKind::BoolOr | CollectKind::StringAgg
        )
    }
}

/// One group's rows of a collecting aggregate, as a multiset.
#[derive(Debug)]
pub struct RetractableCollect {
    kind: CollectKind,
    /// How many ORDER BY columns lead each row (the arguments follow).
    ordering: usize,
    /// The aggregate's argument count (string_agg's delimiter is one).
    arguments: usize,
    result_type: DataType,
    converter: RowConverter,
    rows: BTreeMap<Vec<u8>, i64>,
}

impl RetractableCollect {
    /// `arguments`: the aggregate's argument types; `ordering`: its ORDER
    /// BY columns' types and directions, fed after the arguments as
    /// DataFusion's aggregate operator feeds them.
    pub fn new(
        kind: CollectKind,
        arguments: Vec<DataType>,
        ordering: Vec<(DataType, SortOptions)>,
        result_type: DataType,
    ) -> Result<RetractableCollect> {
        let fields = ordering
            .iter()
            .map(|(t, o)| SortField::new_with_options(t.clone(), *o))
            .chain(arguments.iter().map(|t| SortField::new(t.clone())))
            .collect();
        Ok(RetractableCollect {
            kind,
            ordering: ordering.len(),
            arguments: arguments.len(),
            result_type,
            converter: RowConverter::new(fields)?,
            rows: BTreeMap::new(),
        })
    }

    fn add(&mut self, values: &[ArrayRef], sign: i64) -> Result<()> {
        if values.len() != self.arguments + self.ordering || values.is_empty() {
            return Err(DataFusionError::Internal(format!(
                "{:?} takes {} columns, got {}",
                self.kind,
                self.arguments + self.ordering,
                values.len()
            )));
        }
        // Ordering first, so that the map's order is the ORDER BY's.
        let columns: Vec<ArrayRef> = values[self.arguments..]
            .iter()
            .chain(&values[..self.arguments])
            .cloned()
            .collect();
        let value = &values[0];
        let rows = self.converter.convert_columns(&columns)?;
        for i in 0..value.len() {
            if self.kind.skips_nulls() && value.is_null(i) {
                continue;
            }
            self.count(rows.row(i).as_ref(), sign);
        }
        Ok(())
    }

    fn count(&mut self, row: &[u8], n: i64) {
        let left = match self.rows.get_mut(row) {
            Some(c) => {
                *c += n;
                *c
            }
            None => {
                self.rows.insert(row.to_vec(), n);
                n
            }
        };
        if left <= 0 {
            self.rows.remove(row);
        }
    }

    /// The rows in order, each as many times as it occurs: the argument
    /// columns.
    fn columns(&self) -> Result<Vec<ArrayRef>> {
        let parser = self.converter.parser();
        let distinct = self
            .converter
            .convert_rows(self.rows.keys().map(|k| parser.parse(k)))?;
        let repeats: UInt32Array = self
            .rows
            .values()
            .enumerate()
            .flat_map(|(i, &n)| std::iter::repeat_n(i as u32, n.max(0) as usize))
            .collect();
        distinct[self.ordering..]
            .iter()
            .map(|c| Ok(compute::take(c.as_ref(), &repeats, None)?))
            .collect()
    }
}

impl Accumulator for RetractableCollect {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.rows.is_empty() {
            return ScalarValue::try_from(&self.result_type);
        }
        let columns = self.columns()?;
        let value = &columns[0];
        match self.kind {
            CollectKind::BoolAnd | CollectKind::BoolOr => {
                let values = value.as_boolean();
                let result = match self.kind {
                    CollectKind::BoolAnd => compute::bool_and(values),
                    _ => compute::bool_or(values),
                };
                Ok(ScalarValue::Boolean(result))
            }
            CollectKind::StringAgg => {
                let text = compute::cast(value, &DataType::Utf8)?;
                let delimiters = match columns.get(1) {
                    Some(d) => compute::cast(d, &DataType::Utf8)?,
                    None => Arc::new(arrow::array::StringArray::new_null(text.len())),
                };
                let (text, delimiters) = (text.as_string::<i32>(), delimiters.as_string::<i32>());
                let mut out = String::new();
                for i in 0..text.len() {
                    // Each value after the first is preceded by its own
                    // row's delimiter, as PostgreSQL writes it.
                    if i > 0 && delimiters.is_valid(i) {
                        out.push_str(delimiters.value(i));
                    }
                    out.push_str(text.value(i));
                }
                ScalarValue::Utf8(Some(out)).cast_to(&self.result_type)
            }
            CollectKind::ArrayAgg => {
                let item = match &self.result_type {
                    DataType::List(f) => f.clone(),
                    _ => Arc::new(Field::new_list_field(value.data_type().clone(), true)),
                };
                let value = compute::cast(value, item.data_type())?;
                let offsets = arrow::buffer::OffsetBuffer::from_lengths([value.len()]);
                let list = ListArray::try_new(item, offsets, value, None)?;
                Ok(ScalarValue::List(Arc::new(list)))
            }
            CollectKind::FirstValue => ScalarValue::try_from_array(value, 0),
            CollectKind::LastValue => ScalarValue::try_from_array(value, value.len() - 1),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .rows
                .keys()
                .map(|k| k.len() + std::mem::size_of::<i64>())
                .sum::<usize>()
    }

    /// The distinct rows' bytes and their counts, as two lists.
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let rows = BinaryArray::from_iter_values(self.rows.keys());
        let counts = Int64Array::from_iter_values(self.rows.values().copied());
        let list = |values: ArrayRef| {
            let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
            let offsets = arrow::buffer::OffsetBuffer::from_lengths([values.len()]);
            Ok::<_, DataFusionError>(ScalarValue::List(Arc::new(ListArray::try_new(
                field, offsets, values, None,
            )?)))
        };
        Ok(vec![list(Arc::new(rows))?, list(Arc::new(counts))?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (rows, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for i in 0..rows.len() {
            if rows.is_null(i) {
                continue;
            }
            let (r, c) = (rows.value(i), counts.value(i));
            let (r, c) = (r.as_binary::<i32>(), c.as_primitive::<Int64Type>());
            for j in 0..r.len() {
                self.count(r.value(j), c.value(j));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int32Array, StringArray};

    fn booleans(values: &[Option<bool>]) -> ArrayRef {
        Arc::new(BooleanArray::from(values.to_vec()))
    }

    #[test]
    fn bool_and_forgets_the_false_taken_back() {
        let mut acc = RetractableCollect::new(
            CollectKind::BoolAnd,
            vec![DataType::Boolean],
            vec![],
            DataType::Boolean,
        )
        .unwrap();
        acc.update_batch(&[booleans(&[Some(true), Some(false), None])])
            .unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Boolean(Some(false)));
        acc.retract_batch(&[booleans(&[Some(false)])]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Boolean(Some(true)));
        acc.retract_batch(&[booleans(&[Some(true)])]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Boolean(None));
    }

    #[test]
    fn string_agg_in_order_after_retraction_and_restore() {
        let descending = SortOptions {
            descending: true,
            nulls_first: true,
        };
        let new = || {
            RetractableCollect::new(
                CollectKind::StringAgg,
                vec![DataType::Utf8, DataType::Utf8],
                vec![(DataType::Int32, descending)],
                DataType::Utf8,
            )
            .unwrap()
        };
        let mut acc = new();
        let values: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "b"]));
        let delimiters: ArrayRef = Arc::new(StringArray::from(vec![",", ",", ";", ","]));
        let order: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3, 2]));
        acc.update_batch(&[values, delimiters, order]).unwrap();
        assert_eq!(
            acc.evaluate().unwrap(),
            ScalarValue::Utf8(Some("c,b,b,a".into()))
        );
        let values: ArrayRef = Arc::new(StringArray::from(vec!["b"]));
        let delimiters: ArrayRef = Arc::new(StringArray::from(vec![","]));
        let order: ArrayRef = Arc::new(Int32Array::from(vec![2]));
        acc.retract_batch(&[values, delimiters, order]).unwrap();
        let state: Vec<ArrayRef> = acc
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut restored = new();
        restored.merge_batch(&state).unwrap();
        assert_eq!(
            restored.evaluate().unwrap(),
            ScalarValue::Utf8(Some("c,b,a".into()))
        );
    }

    #[test]
    fn array_agg_keeps_nulls_and_first_value_follows_the_order() {
        let list = DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)));
        let mut acc =
            RetractableCollect::new(CollectKind::ArrayAgg, vec![DataType::Int32], vec![], list)
                .unwrap();
        let values: ArrayRef = Arc::new(Int32Array::from(vec![Some(3), None, Some(1)]));
        acc.update_batch(&[values]).unwrap();
        let ScalarValue::List(l) = acc.evaluate().unwrap() else {
            panic!("not a list")
        };
        assert_eq!(l.value(0).len(), 3);
        assert_eq!(l.value(0).null_count(), 1);

        let mut first = RetractableCollect::new(
            CollectKind::FirstValue,
            vec![DataType::Int32],
            vec![(DataType::Int32, SortOptions::default())],
            DataType::Int32,
        )
        .unwrap();
        let values: ArrayRef = Arc::new(Int32Array::from(vec![10, 20, 30]));
        let order: ArrayRef = Arc::new(Int32Array::from(vec![2, 1, 3]));
        first
            .update_batch(&[values.clone(), order.clone()])
            .unwrap();
        assert_eq!(first.evaluate().unwrap(), ScalarValue::Int32(Some(20)));
        first
            .retract_batch(&[values.slice(1, 1), order.slice(1, 1)])
            .unwrap();
        assert_eq!(first.evaluate().unwrap(), ScalarValue::Int32(Some(10)));
    }
}
