//! COUNT, SUM, MIN and MAX over the groups of an aggregate whose input
//! never takes rows back, each one column of values in group order that
//! the view's published rows and its checkpoints share instead of copying.
//!
//! They compute what the functions a view's plan names compute: a SUM of
//! bigint fails on overflow (22003) as Sluice's `sum` does, other sums
//! wrap as DataFusion's do.
//!
//! DataFusion's `GroupsAccumulator` owns its vectors: reading its values
//! means taking them out and building the accumulator again, so a view
//! held each value twice, once in the accumulator and once in its
//! published rows. Here a column is handed out as an Arrow buffer over the
//! same memory. A change to a column that a reader still holds copies it
//! first; once the readers let go, it changes in place.
//!
//! State: per aggregate, the value of each group and (SUM, MIN, MAX) a bit
//! per group saying whether it has seen a value that is not NULL, as
//! DataFusion's accumulators keep them. Checkpoint: the value column is the
//! aggregate's state, in the layout DataFusion's accumulator of the same
//! function writes (one column of the result type), so either restores the
//! other's checkpoint. Watermark: nothing here; the aggregate drops closed
//! windows' groups by building the columns again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use arrow::compute;
use arrow::datatypes::*;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::error::SluiceError;

/// One aggregate over groups, with its values shared with readers.
pub(crate) trait SharedColumn: Send + Sync {
    /// Adds the rows of one delta (`args`, the aggregate's argument) to
    /// their groups; there are `total` groups now.
    fn update(
        &mut self,
        args: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError>;

    /// Merges states (as [`SharedColumn::values`] gives them, or
    /// DataFusion's accumulator of the same function) into their groups.
    fn merge(
        &mut self,
        states: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError>;

    /// Every group's value, which is also its state; shares the column.
    fn values(&mut self) -> ArrayRef;

    /// Bytes held (all of a shared column counts here).
    fn size(&self) -> usize;

    /// Time spent copying columns that readers held, since the last call.
    fn take_copy_time(&mut self) -> Duration;
}

/// A shared column for `agg`, or None when it is another function, takes
/// DISTINCT or more than one argument, or has a type kept here as
/// DataFusion does not keep it.
pub(crate) fn shared_column(agg: &AggregateFunctionExpr) -> Option<Box<dyn SharedColumn>> {
    if agg.is_distinct() || agg.expressions().len() != 1 || !agg.order_bys().is_empty() {
        return None;
    }
    let data_type = agg.field().data_type().clone();
    let function = match agg.fun().name().to_lowercase().as_str() {
        "count" if data_type == DataType::Int64 => Function::Count,
        "sum"
            if matches!(
                data_type,
                DataType::Int64 | DataType::UInt64 | DataType::Float64
            ) =>
        {
            Function::Sum
        }
        // Integer types only: DataFusion's MIN and MAX of floats follow
        // partial_cmp, and NaN is not kept the same way here.
        "min" => Function::Min,
        "max" => Function::Max,
        _ => return None,
    };
    macro_rules! column {
        ($t:ty) => {
            Some(Box::new(PrimitiveColumn::<$t>::new(function, data_type)) as Box<dyn SharedColumn>)
        };
    }
    match &data_type {
        DataType::Int8 => column!(Int8Type),
        DataType::Int16 => column!(Int16Type),
        DataType::Int32 => column!(Int32Type),
        DataType::Int64 => column!(Int64Type),
        DataType::UInt8 => column!(UInt8Type),
        DataType::UInt16 => column!(UInt16Type),
        DataType::UInt32 => column!(UInt32Type),
        DataType::UInt64 => column!(UInt64Type),
        DataType::Float64 if function == Function::Sum => column!(Float64Type),
        DataType::Date32 => column!(Date32Type),
        DataType::Date64 => column!(Date64Type),
        DataType::Time32(TimeUnit::Second) => column!(Time32SecondType),
        DataType::Time32(TimeUnit::Millisecond) => column!(Time32MillisecondType),
        DataType::Time64(TimeUnit::Microsecond) => column!(Time64MicrosecondType),
        DataType::Time64(TimeUnit::Nanosecond) => column!(Time64NanosecondType),
        DataType::Timestamp(TimeUnit::Second, _) => column!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => column!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => column!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => column!(TimestampNanosecondType),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Function {
    Count,
    Sum,
    Min,
    Max,
}

/// A vector that is handed out as an Arrow buffer without copying, and is
/// copied only when it changes while a reader still holds it.
struct CopyOnWrite<N: ArrowNativeType> {
    /// The values while no reader holds them (empty while `shared` is Some).
    owned: Vec<N>,
    shared: Option<ScalarBuffer<N>>,
}

impl<N: ArrowNativeType> CopyOnWrite<N> {
    fn new() -> Self {
        CopyOnWrite {
            owned: Vec::new(),
            shared: None,
        }
    }

    /// The values to change: the shared buffer's own memory when no reader
    /// holds it any more, a copy when one does (the time it took added to
    /// `copying`).
    fn owned(&mut self, copying: &mut Duration) -> &mut Vec<N> {
        if let Some(buffer) = self.shared.take() {
            self.owned = match buffer.into_inner().into_vec::<N>() {
                Ok(values) => values,
                Err(buffer) => {
                    let began = Instant::now();
                    // As much room as the shared one had, so that the
                    // groups made next do not move it again.
                    let values = buffer.typed_data::<N>();
                    let room = buffer.capacity() / std::mem::size_of::<N>();
                    let mut copy = Vec::with_capacity(room.max(values.len()));
                    copy.extend_from_slice(values);
                    *copying += began.elapsed();
                    copy
                }
            };
        }
        &mut self.owned
    }

    fn share(&mut self) -> Buffer {
        let buffer = match self.shared.take() {
            Some(buffer) => buffer,
            None => ScalarBuffer::from(std::mem::take(&mut self.owned)),
        };
        self.shared = Some(buffer.clone());
        buffer.into_inner()
    }

    fn size(&self) -> usize {
        match &self.shared {
            Some(buffer) => buffer.inner().capacity(),
            None => self.owned.capacity() * std::mem::size_of::<N>(),
        }
    }
}

struct PrimitiveColumn<T: ArrowPrimitiveType> {
    function: Function,
    data_type: DataType,
    values: CopyOnWrite<T::Native>,
    /// A bit per group, set once it has seen a value that is not NULL
    /// (COUNT is never NULL and keeps none).
    seen: Option<CopyOnWrite<u8>>,
    len: usize,
    /// Time spent copying what readers held (see
    /// [`SharedColumn::take_copy_time`]).
    copying: Duration,
}

impl<T: ArrowPrimitiveType> PrimitiveColumn<T> {
    fn new(function: Function, data_type: DataType) -> Self {
        PrimitiveColumn {
            function,
            data_type,
            values: CopyOnWrite::new(),
            seen: (function != Function::Count).then(CopyOnWrite::new),
            len: 0,
            copying: Duration::ZERO,
        }
    }

    fn grow(&mut self, total: usize) {
        if total > self.len {
            self.values
                .owned(&mut self.copying)
                .resize(total, T::Native::default());
            if let Some(seen) = self.seen.as_mut() {
                seen.owned(&mut self.copying).resize(total.div_ceil(8), 0);
            }
            self.len = total;
        }
    }

    /// Folds `input` (of the value type) into the groups, skipping NULLs.
    fn fold(&mut self, input: &ArrayRef, group_ids: &[usize]) -> Result<(), SluiceError> {
        let input = match input.data_type() == &self.data_type {
            true => input.clone(),
            false => compute::cast(input, &self.data_type)?,
        };
        let input = input.as_primitive::<T>();
        let function = self.function;
        // Sluice's SUM of bigint fails on overflow, where DataFusion's
        // (and its SUM of other types) wraps.
        let checked = function == Function::Sum && self.data_type == DataType::Int64;
        let values = self.values.owned(&mut self.copying);
        let Some(seen) = self.seen.as_mut().map(|s| s.owned(&mut self.copying)) else {
            return Err(SluiceError::Internal("COUNT folded as a value".into()));
        };
        for (row, &g) in group_ids.iter().enumerate() {
            if input.is_null(row) {
                continue;
            }
            let x = input.value(row);
            let (byte, bit) = (g / 8, 1u8 << (g % 8));
            let first = seen[byte] & bit == 0;
            seen[byte] |= bit;
            let v = &mut values[g];
            match function {
                Function::Sum if checked => {
                    *v = v
                        .add_checked(x)
                        .map_err(|_| crate::query::sum_out_of_range())?
                }
                Function::Sum => *v = v.add_wrapping(x),
                Function::Min if first || x < *v => *v = x,
                Function::Max if first || x > *v => *v = x,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The one column of an aggregate's argument (or of its state).
pub(crate) fn first_column(columns: &[ArrayRef]) -> Result<&ArrayRef, SluiceError> {
    columns
        .first()
        .ok_or_else(|| SluiceError::Internal("an aggregate without its column".into()))
}

impl<T: ArrowPrimitiveType> SharedColumn for PrimitiveColumn<T> {
    fn update(
        &mut self,
        args: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError> {
        self.grow(total);
        let arg = first_column(args)?;
        if self.function != Function::Count {
            return self.fold(arg, group_ids);
        }
        let counts = self.values.owned(&mut self.copying);
        let one = T::Native::usize_as(1);
        match arg.logical_nulls() {
            None => group_ids
                .iter()
                .for_each(|&g| counts[g] = counts[g].add_wrapping(one)),
            Some(nulls) => group_ids
                .iter()
                .zip(nulls.iter())
                .filter(|(_, valid)| *valid)
                .for_each(|(&g, _)| counts[g] = counts[g].add_wrapping(one)),
        }
        Ok(())
    }

    fn merge(
        &mut self,
        states: &[ArrayRef],
        group_ids: &[usize],
        total: usize,
    ) -> Result<(), SluiceError> {
        self.grow(total);
        let state = first_column(states)?;
        if self.function != Function::Count {
            return self.fold(state, group_ids);
        }
        let state = compute::cast(state, &self.data_type)?;
        let state = state.as_primitive::<T>();
        let counts = self.values.owned(&mut self.copying);
        for (row, &g) in group_ids.iter().enumerate() {
            if state.is_valid(row) {
                counts[g] = counts[g].add_wrapping(state.value(row));
            }
        }
        Ok(())
    }

    fn values(&mut self) -> ArrayRef {
        let values = ScalarBuffer::new(self.values.share(), 0, self.len);
        let nulls = self
            .seen
            .as_mut()
            .map(|seen| NullBuffer::new(BooleanBuffer::new(seen.share(), 0, self.len)));
        Arc::new(PrimitiveArray::<T>::new(values, nulls).with_data_type(self.data_type.clone()))
    }

    fn size(&self) -> usize {
        self.values.size() + self.seen.as_ref().map_or(0, |s| s.size())
    }

    fn take_copy_time(&mut self) -> Duration {
        std::mem::take(&mut self.copying)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, TimestampMicrosecondArray};

    use super::*;

    fn ints(values: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(values.to_vec()))
    }

    #[test]
    fn a_published_column_stays_as_it_was_and_is_changed_in_place_once_let_go() {
        let mut sum = PrimitiveColumn::<Int64Type>::new(Function::Sum, DataType::Int64);
        sum.update(&[ints(&[Some(1), None, Some(5)])], &[0, 1, 0], 2)
            .unwrap();
        let published = sum.values();
        assert_eq!(published.as_ref(), ints(&[Some(6), None]).as_ref());
        // A reader holds the column: the change goes to a copy.
        sum.update(&[ints(&[Some(10), Some(7)])], &[0, 2], 3)
            .unwrap();
        assert_eq!(published.as_ref(), ints(&[Some(6), None]).as_ref());
        let second = sum.values();
        assert_eq!(second.as_ref(), ints(&[Some(16), None, Some(7)]).as_ref());
        let before = second.to_data().buffers()[0].as_ptr();
        drop((published, second));
        // No reader: the next change is made in the same memory.
        sum.update(&[ints(&[Some(1)])], &[1], 3).unwrap();
        let third = sum.values();
        assert_eq!(third.to_data().buffers()[0].as_ptr(), before);
        assert_eq!(third.as_ref(), ints(&[Some(16), Some(1), Some(7)]).as_ref());
    }

    #[test]
    fn count_min_and_max_skip_nulls_and_merge_their_states() {
        let mut count = PrimitiveColumn::<Int64Type>::new(Function::Count, DataType::Int64);
        let mut min = PrimitiveColumn::<Int64Type>::new(Function::Min, DataType::Int64);
        let mut max = PrimitiveColumn::<Int64Type>::new(Function::Max, DataType::Int64);
        let rows = [ints(&[Some(3), None, Some(-2), Some(i64::MAX), None])];
        let groups = [0, 0, 0, 1, 2];
        for c in [&mut count as &mut dyn SharedColumn, &mut min, &mut max] {
            c.update(&rows, &groups, 3).unwrap();
        }
        assert_eq!(
            count.values().as_ref(),
            ints(&[Some(2), Some(1), Some(0)]).as_ref()
        );
        assert_eq!(
            min.values().as_ref(),
            ints(&[Some(-2), Some(i64::MAX), None]).as_ref()
        );
        assert_eq!(
            max.values().as_ref(),
            ints(&[Some(3), Some(i64::MAX), None]).as_ref()
        );
        // States merged into other groups, as a restore does.
        let mut restored = PrimitiveColumn::<Int64Type>::new(Function::Count, DataType::Int64);
        restored.merge(&[count.values()], &[1, 1, 0], 2).unwrap();
        assert_eq!(
            restored.values().as_ref(),
            ints(&[Some(0), Some(3)]).as_ref()
        );
        let mut restored = PrimitiveColumn::<Int64Type>::new(Function::Min, DataType::Int64);
        restored.merge(&[min.values()], &[0, 0, 1], 2).unwrap();
        assert_eq!(restored.values().as_ref(), ints(&[Some(-2), None]).as_ref());
    }

    #[test]
    fn a_bigint_sum_that_overflows_fails_as_the_batch_sum_does() {
        let mut sum = PrimitiveColumn::<Int64Type>::new(Function::Sum, DataType::Int64);
        sum.update(&[ints(&[Some(i64::MAX), Some(-5)])], &[0, 1], 2)
            .unwrap();
        let failed = sum.update(&[ints(&[Some(1)])], &[0], 2).unwrap_err();
        assert!(
            failed.to_string().contains("bigint out of range"),
            "{failed}"
        );
        // Below the limit, negative sums are kept exactly.
        sum.update(&[ints(&[Some(i64::MIN + 5)])], &[1], 2).unwrap();
        assert_eq!(
            sum.values()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(1),
            i64::MIN
        );
    }

    #[test]
    fn a_column_keeps_its_type_and_time_zone() {
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        let mut max = PrimitiveColumn::<TimestampMicrosecondType>::new(Function::Max, tz.clone());
        let at: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(5), Some(9), None]).with_timezone("+00:00"),
        );
        max.update(&[at], &[0, 0, 1], 2).unwrap();
        let values = max.values();
        assert_eq!(values.data_type(), &tz);
        assert_eq!(values.null_count(), 1);
        assert_eq!(
            values.as_primitive::<TimestampMicrosecondType>().value(0),
            9
        );
    }
}
