//! A correlated scalar subquery that does not aggregate its rows
//! (`SELECT a, (SELECT b FROM u WHERE u.k = t.k) FROM t`): PostgreSQL
//! gives the one row's value, NULL when there is none, and fails with
//! 21000 when there are more. DataFusion plans such a subquery only when
//! it aggregates, so its value is taken by `__sluice_single_row`, an
//! aggregate with exactly that meaning, and the subquery becomes a join
//! grouped by the correlated columns as any aggregated one does.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, LogicalPlan, LogicalPlanBuilder, Signature,
    Subquery, Volatility,
};

use super::udf::pg_error;

const NAME: &str = "__sluice_single_row";

/// The aggregate, to register in every session that plans queries.
pub fn single_row() -> AggregateUDF {
    AggregateUDF::new_from_impl(SingleRow {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SingleRow {
    signature: Signature,
}

impl AggregateUDFImpl for SingleRow {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(OneValue {
            value: ScalarValue::try_from(args.return_field.data_type())?,
            rows: 0,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                "value",
                args.return_field.data_type().clone(),
                true,
            )),
            Arc::new(Field::new("rows", DataType::UInt64, false)),
        ])
    }
}

#[derive(Debug)]
struct OneValue {
    value: ScalarValue,
    rows: u64,
}

impl OneValue {
    fn take(&mut self, values: &ArrayRef, rows: impl Iterator<Item = (usize, u64)>) -> Result<()> {
        for (i, n) in rows {
            if n == 0 {
                continue;
            }
            if self.rows == 0 {
                self.value = ScalarValue::try_from_array(values, i)?;
            }
            self.rows += n;
        }
        Ok(())
    }
}

impl Accumulator for OneValue {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let v = &values[0];
        self.take(v, (0..v.len()).map(|i| (i, 1)))
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let counts: &UInt64Array = states[1].as_primitive::<UInt64Type>();
        self.take(&states[0], (0..counts.len()).map(|i| (i, counts.value(i))))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.rows > 1 {
            return Err(pg_error(
                "21000",
                "more than one row returned by a subquery used as an expression",
            ));
        }
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size()
    }
}

/// A correlated scalar subquery whose plan is a projection of one column
/// over rows it does not aggregate, with that column taken by
/// `__sluice_single_row`; None for any other subquery.
pub(super) fn single_row_subquery(sq: &Subquery) -> Result<Option<Subquery>> {
    if sq.outer_ref_columns.is_empty() {
        return Ok(None);
    }
    let LogicalPlan::Projection(projection) = sq.subquery.as_ref() else {
        return Ok(None);
    };
    let [expr] = projection.expr.as_slice() else {
        return Ok(None);
    };
    if !rows_unaggregated(projection.input.as_ref()) {
        return Ok(None);
    }
    let name = projection.schema.field(0).name().clone();
    let inner = match expr {
        Expr::Alias(a) => a.expr.as_ref().clone(),
        e => e.clone(),
    };
    let single =
        Expr::AggregateFunction(datafusion::logical_expr::expr::AggregateFunction::new_udf(
            Arc::new(single_row()),
            vec![inner],
            false,
            None,
            vec![],
            None,
        ))
        .alias(name);
    let plan = LogicalPlanBuilder::from(projection.input.as_ref().clone())
        .aggregate(Vec::<Expr>::new(), vec![single])?
        .build()?;
    Ok(Some(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns: sq.outer_ref_columns.clone(),
        spans: sq.spans.clone(),
    }))
}

/// Whether the plan's rows come straight from its relations, filtered
/// (no aggregate, limit, distinct, window or set operation decides how
/// many there are).
fn rows_unaggregated(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Filter(f) => rows_unaggregated(&f.input),
        LogicalPlan::SubqueryAlias(a) => rows_unaggregated(&a.input),
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::Join(j) => rows_unaggregated(&j.left) && rows_unaggregated(&j.right),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    #[test]
    fn one_row_gives_its_value_none_null_and_more_fail() {
        let mut acc = OneValue {
            value: ScalarValue::Int32(None),
            rows: 0,
        };
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int32(None));
        let one: ArrayRef = Arc::new(Int32Array::from(vec![Some(7)]));
        acc.update_batch(&[one]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int32(Some(7)));
        // A state of one more row, merged: two rows.
        let state = acc.state().unwrap();
        let states: Vec<ArrayRef> = state.iter().map(|s| s.to_array().unwrap()).collect();
        acc.merge_batch(&states).unwrap();
        let e = acc.evaluate().unwrap_err().to_string();
        assert!(e.contains("more than one row"), "{e}");
    }
}
