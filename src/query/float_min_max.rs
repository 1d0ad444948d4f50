//! `min` and `max` of floats with PostgreSQL's order: NaN is greater than
//! every other value, so `max` is NaN when any value is and `min` is NaN
//! only when every value is. DataFusion's grouped `min` and `max` compare
//! floats with `partial_cmp`, under which a NaN replaces the current
//! extreme and the next number replaces the NaN: the answer depended on
//! the order of the rows. These replace DataFusion's under the same names
//! and delegate everything but the grouped float accumulator to them
//! (same signature, return type and state, so checkpoints read back).

use std::cmp::Ordering;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array};
use arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::Result;
use datafusion::functions_aggregate::min_max::{Max, Min};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature,
};

/// The `min` and `max` to register in every session that plans queries.
pub fn float_min_max() -> [AggregateUDF; 2] {
    [
        AggregateUDF::new_from_impl(FloatMinMax {
            inner: AggregateUDF::new_from_impl(Min::new()),
            max: false,
        }),
        AggregateUDF::new_from_impl(FloatMinMax {
            inner: AggregateUDF::new_from_impl(Max::new()),
            max: true,
        }),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatMinMax {
    inner: AggregateUDF,
    max: bool,
}

fn is_float(args: &AccumulatorArgs) -> bool {
    matches!(
        args.return_field.data_type(),
        DataType::Float32 | DataType::Float64
    )
}

impl AggregateUDFImpl for FloatMinMax {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        // DataFusion's one-group accumulators order floats totally already.
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        if !is_float(&args) {
            return self.inner.create_groups_accumulator(args);
        }
        Ok(Box::new(FloatExtremes {
            max: self.max,
            data_type: args.return_field.data_type().clone(),
            values: Vec::new(),
            seen: Vec::new(),
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}

/// PostgreSQL's order of floats: NaN above everything, all NaNs equal.
fn pg_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Each group's extreme so far. State: the extreme, in the result type.
#[derive(Debug)]
struct FloatExtremes {
    max: bool,
    data_type: DataType,
    values: Vec<f64>,
    seen: Vec<bool>,
}

impl FloatExtremes {
    fn take(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let values = emit_to.take_needed(&mut self.values);
        let seen = emit_to.take_needed(&mut self.seen);
        let out: Float64Array = values
            .into_iter()
            .zip(seen)
            .map(|(v, s)| s.then_some(v))
            .collect();
        Ok(arrow::compute::cast(&out, &self.data_type)?)
    }
}

impl GroupsAccumulator for FloatExtremes {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.values.resize(total_num_groups, 0.0);
        self.seen.resize(total_num_groups, false);
        let floats = arrow::compute::cast(&values[0], &DataType::Float64)?;
        let floats = floats.as_primitive::<Float64Type>();
        let wanted = if self.max {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        for (i, &g) in group_indices.iter().enumerate() {
            if floats.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                continue;
            }
            let v = floats.value(i);
            if !self.seen[g] || pg_cmp(v, self.values[g]) == wanted {
                self.values[g] = v;
                self.seen[g] = true;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.take(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.take(emit_to)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    /// Each row its own group: its value, or NULL where filtered out.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let v = arrow::compute::cast(&values[0], &self.data_type)?;
        Ok(vec![match opt_filter {
            Some(f) => arrow::compute::nullif(&v, &arrow::compute::not(&kept(f))?)?,
            None => v,
        }])
    }

    fn size(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<f64>() + self.seen.capacity()
    }
}

/// The rows a filter keeps: true where it is true (NULL keeps none).
fn kept(f: &BooleanArray) -> BooleanArray {
    f.iter().map(|v| Some(v.unwrap_or(false))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn run(max: bool, values: &[Option<f64>]) -> Option<f64> {
        let mut acc = FloatExtremes {
            max,
            data_type: DataType::Float64,
            values: Vec::new(),
            seen: Vec::new(),
        };
        for v in values {
            let a: ArrayRef = Arc::new(Float64Array::from(vec![*v]));
            acc.update_batch(&[a], &[0], None, 1).unwrap();
        }
        let out = acc.evaluate(EmitTo::All).unwrap();
        let out = out.as_primitive::<Float64Type>();
        out.is_valid(0).then(|| out.value(0))
    }

    #[test]
    fn nan_is_the_greatest_float_in_any_order() {
        let nan = f64::NAN;
        assert!(run(true, &[Some(0.0), Some(nan), Some(1e300)])
            .unwrap()
            .is_nan());
        assert!(run(true, &[Some(nan), Some(1e300)]).unwrap().is_nan());
        assert_eq!(
            run(false, &[Some(0.0), Some(nan), Some(-2.25)]),
            Some(-2.25)
        );
        assert_eq!(run(false, &[Some(nan), Some(3.0)]), Some(3.0));
        assert!(run(false, &[Some(nan), None]).unwrap().is_nan());
        assert_eq!(run(true, &[None]), None);
    }
}
