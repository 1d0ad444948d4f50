//! Recognizing a time band in a join's condition: `b.t BETWEEN a.t AND
//! a.t + INTERVAL '10 seconds'`, or a pair of `>=`/`<` comparisons, between
//! one time column of each input. Both bounds make the join an interval
//! join (see `interval_join.rs`), whose state the watermarks bound.
//!
//! Each comparison is read as `right.t - left.t` against a constant; the
//! band is the tightest lower and upper bound found for one pair of
//! columns, inclusive (a strict `<` is still checked exactly by the join's
//! condition; the band only decides what can still match).
//!
//! Tracing a column back to a source ([`source_column`]) tells whose
//! watermark moves it: a table's column, a TUMBLE's `window_start` or
//! `window_end` over it, or such a window as the group key of an aggregate
//! stage below the join.

use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};

/// `right.time - left.time` lies in `[lo_us, hi_us]` for every pair the
/// condition lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeBand {
    pub left: Column,
    pub right: Column,
    pub lo_us: i64,
    pub hi_us: i64,
}

/// The band of a join condition, when it bounds the distance between one
/// column of each input from both sides.
pub fn find_band(filter: &Expr, left: &DFSchema, right: &DFSchema) -> Option<TimeBand> {
    let mut bounds: Vec<(Column, Column, Option<i64>, Option<i64>)> = Vec::new();
    for conjunct in split_conjunction(filter) {
        for (a, op, b) in comparisons(conjunct) {
            let (Some((ca, oa)), Some((cb, ob))) = (time_term(a), time_term(b)) else {
                continue;
            };
            // a op b  <=>  ca - cb op ob - oa
            let k = ob.saturating_sub(oa);
            let side = |c: &Column| (left.has_column(c), right.has_column(c));
            let (l, r, op, k) = match (side(&ca), side(&cb)) {
                ((true, false), (false, true)) => (ca, cb, flip(op), k.saturating_neg()),
                ((false, true), (true, false)) => (cb, ca, op, k),
                _ => continue,
            };
            // Now r - l op k.
            let at = match bounds.iter().position(|b| b.0 == l && b.1 == r) {
                Some(at) => at,
                None => {
                    bounds.push((l, r, None, None));
                    bounds.len() - 1
                }
            };
            let entry = &mut bounds[at];
            match op {
                Operator::Gt | Operator::GtEq => entry.2 = Some(entry.2.map_or(k, |lo| lo.max(k))),
                Operator::Lt | Operator::LtEq => entry.3 = Some(entry.3.map_or(k, |hi| hi.min(k))),
                _ => {}
            }
        }
    }
    bounds.into_iter().find_map(|(left, right, lo, hi)| {
        Some(TimeBand {
            left,
            right,
            lo_us: lo?,
            hi_us: hi?,
        })
    })
}

/// The comparisons an expression makes: `x BETWEEN lo AND hi` is two.
fn comparisons(e: &Expr) -> Vec<(&Expr, Operator, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) =>
        {
            vec![(left.as_ref(), *op, right.as_ref())]
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => vec![
            (expr.as_ref(), Operator::GtEq, low.as_ref()),
            (expr.as_ref(), Operator::LtEq, high.as_ref()),
        ],
        _ => Vec::new(),
    }
}

/// `x < y` as `y > x`.
fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// `a + b` or `a - b`: the operator DataFusion plans, or the function
/// PostgreSQL's `timestamp ± interval` is planned as.
fn sum_terms(e: &Expr) -> Option<(&Expr, Operator, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus) =>
        {
            Some((left, *op, right))
        }
        Expr::ScalarFunction(f) => {
            let op = match f.func.name() {
                "timestamp_pl_interval" => Operator::Plus,
                "timestamp_mi_interval" => Operator::Minus,
                _ => return None,
            };
            match f.args.as_slice() {
                [l, r] => Some((l, op, r)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `col`, `col + c` or `col - c` with a constant duration `c`: the column
/// and the offset in microseconds.
fn time_term(e: &Expr) -> Option<(Column, i64)> {
    match e {
        Expr::Column(c) => Some((c.clone(), 0)),
        Expr::Cast(c) => time_term(&c.expr).filter(|_| c.field.data_type().is_temporal()),
        e if sum_terms(e).is_some() => {
            let (left, op, right) = sum_terms(e)?;
            let sign = match op {
                Operator::Plus => 1,
                _ => -1,
            };
            match (time_term(left), duration_us(right)) {
                (Some((c, o)), Some(d)) => Some((c, o.saturating_add(sign * d))),
                _ if sign == 1 => {
                    let (c, o) = time_term(right)?;
                    Some((c, o.saturating_add(duration_us(left)?)))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether `e` is the constant timestamp 1970-01-01 00:00:00.
fn is_epoch(e: &Expr) -> bool {
    match e {
        Expr::Literal(
            ScalarValue::TimestampSecond(Some(0), _)
            | ScalarValue::TimestampMillisecond(Some(0), _)
            | ScalarValue::TimestampMicrosecond(Some(0), _)
            | ScalarValue::TimestampNanosecond(Some(0), _),
            _,
        ) => true,
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Literal(ScalarValue::Utf8(Some(text)), _) => {
                crate::types::datetime::parse_timestamp(text, false).is_ok_and(|t| t == 0)
            }
            inner => is_epoch(inner),
        },
        _ => false,
    }
}

/// A constant interval of fixed length (no months), in microseconds.
fn duration_us(e: &Expr) -> Option<i64> {
    let Expr::Literal(v, _) = e else {
        return None;
    };
    scalar_duration_us(v)
}

/// A constant INTERVAL (of no months) or duration, in microseconds.
pub fn scalar_duration_us(v: &ScalarValue) -> Option<i64> {
    const DAY_US: i64 = 86_400_000_000;
    match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i.days as i64 * DAY_US + i.nanoseconds / 1000)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i.days as i64 * DAY_US + i.milliseconds as i64 * 1000)
        }
        ScalarValue::DurationSecond(Some(s)) => s.checked_mul(1_000_000),
        ScalarValue::DurationMillisecond(Some(ms)) => ms.checked_mul(1000),
        ScalarValue::DurationMicrosecond(Some(us)) => Some(*us),
        ScalarValue::DurationNanosecond(Some(ns)) => Some(ns / 1000),
        _ => None,
    }
}

/// What an input's output column is, traced back to a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedColumn {
    /// The source (a table or view) and its column.
    pub source: String,
    pub column: String,
    /// `Some(size)` when the output is a TUMBLE window of that size over
    /// the column: `date_bin(size, column)`, the `window_start`, or that
    /// plus the size, the `window_end` (see `end`); `None` when it is the
    /// column unchanged.
    pub window_us: Option<i64>,
    /// The output is the window's end rather than its start.
    pub end: bool,
    /// The output is a group key of this aggregate stage (the `window_end`
    /// of a TUMBLE of the source): its rows change until the source's
    /// watermark passes their window's end, and never after.
    pub stage: Option<usize>,
}

/// Which source's column the output column `index` of `plan` passes on
/// unchanged (through filters, renames and projections of plain columns),
/// or bins as a TUMBLE's `window_start` or `window_end`, or groups by as an
/// aggregate stage's key (see [`TracedColumn::stage`]). `None` when it is
/// computed otherwise.
pub fn source_column(plan: &LogicalPlan, index: usize) -> Option<TracedColumn> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let field = scan.projected_schema.fields().get(index)?;
            Some(TracedColumn {
                source: scan.table_name.table().to_string(),
                column: field.name().clone(),
                window_us: None,
                end: false,
                stage: None,
            })
        }
        LogicalPlan::Projection(p) => trace_expr(p.expr.get(index)?, &p.input),
        LogicalPlan::SubqueryAlias(a) => source_column(&a.input, index),
        LogicalPlan::Filter(f) => source_column(&f.input, index),
        LogicalPlan::Extension(e) => e
            .node
            .as_any()
            .downcast_ref::<super::graph::StageOutput>()?
            .traced(index),
        _ => None,
    }
}

/// The window size and the time of `date_bin(size, time)`, a TUMBLE's
/// `window_start`. PostgreSQL's date_bin always takes an origin; from the
/// epoch it is the two-argument form.
fn date_bin_window(args: &[Expr]) -> Option<(i64, &Expr)> {
    let (stride, column) = match args {
        [stride, column] => (stride, column),
        [stride, column, origin] if is_epoch(origin) => (stride, column),
        _ => return None,
    };
    Some((duration_us(stride).filter(|s| *s > 0)?, column))
}

/// What expression `e` over the rows of `input` is, traced as
/// [`source_column`] traces a column: a column, `date_bin(size, column)`,
/// or `date_bin(size, column) + size`.
pub fn trace_expr(e: &Expr, input: &LogicalPlan) -> Option<TracedColumn> {
    let e = e.clone().unalias_nested().data;
    match &e {
        Expr::Column(c) => source_column(input, input.schema().index_of_column(c).ok()?),
        Expr::ScalarFunction(f) if f.func.name() == "date_bin" => {
            let (size, column) = date_bin_window(&f.args)?;
            let inner =
                trace_expr(column, input).filter(|t| t.window_us.is_none() && t.stage.is_none())?;
            Some(TracedColumn {
                window_us: Some(size),
                ..inner
            })
        }
        // A cast to the type it has already.
        Expr::Cast(c)
            if c.expr.get_type(input.schema()).ok().as_ref() == Some(c.field.data_type()) =>
        {
            trace_expr(&c.expr, input)
        }
        e if matches!(sum_terms(e), Some((_, Operator::Plus, _))) => {
            let (left, _, right) = sum_terms(e)?;
            let start = trace_expr(left, input).filter(|t| !t.end && t.stage.is_none())?;
            let size = start.window_us?;
            (duration_us(right) == Some(size)).then_some(TracedColumn { end: true, ..start })
        }
        _ => None,
    }
}

/// How the sources' watermarks bound a time column's values still to
/// come: none is below the least of `horizon`'s terms, each a source's
/// watermark plus an offset (a join's time column is bounded by its own
/// side's watermark and by the other side's less the band, since a new row
/// there may still pair with an older one). With `window`, the value is
/// the start (or, when `.1`, the end) of a TUMBLE window of that size over
/// such a time; `horizon` is then the time's. The view's allowed lateness
/// comes off every term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeReach {
    pub horizon: Vec<(usize, i64)>,
    pub window: Option<(i64, bool)>,
}

impl TimeReach {
    /// The horizon, given each source's watermark; `None` while a source
    /// it needs has none.
    pub fn at(horizon: &[(usize, i64)], watermarks: &[Option<i64>]) -> Option<i64> {
        horizon
            .iter()
            .map(|(s, offset)| {
                Some(
                    watermarks
                        .get(*s)
                        .copied()
                        .flatten()?
                        .saturating_add(*offset),
                )
            })
            .try_fold(i64::MAX, |least, w| Some(least.min(w?)))
    }
}

/// The [`TimeReach`] of output column `index` of `plan`: a source's
/// WATERMARK column (`marked(source, column)` gives the source's index),
/// passed on through filters, renames and projections, binned by
/// `date_bin` as a TUMBLE, or an interval join's time column
/// ([`StageOutput::reach`](super::graph::StageOutput)).
pub fn time_reach(
    plan: &LogicalPlan,
    index: usize,
    marked: &dyn Fn(&str, &str) -> Option<usize>,
) -> Option<TimeReach> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let field = scan.projected_schema.fields().get(index)?;
            let source = marked(scan.table_name.table(), field.name())?;
            Some(TimeReach {
                horizon: vec![(source, 0)],
                window: None,
            })
        }
        LogicalPlan::Projection(p) => expr_reach(p.expr.get(index)?, &p.input, marked),
        LogicalPlan::SubqueryAlias(a) => time_reach(&a.input, index, marked),
        LogicalPlan::Filter(f) => time_reach(&f.input, index, marked),
        LogicalPlan::Extension(e) => e
            .node
            .as_any()
            .downcast_ref::<super::graph::StageOutput>()?
            .reach(index),
        _ => None,
    }
}

/// [`time_reach`] of an expression over the rows of `input`.
pub fn expr_reach(
    e: &Expr,
    input: &LogicalPlan,
    marked: &dyn Fn(&str, &str) -> Option<usize>,
) -> Option<TimeReach> {
    let e = e.clone().unalias_nested().data;
    match &e {
        Expr::Column(c) => time_reach(input, input.schema().index_of_column(c).ok()?, marked),
        Expr::ScalarFunction(f) if f.func.name() == "date_bin" => {
            let (size, column) = date_bin_window(&f.args)?;
            let inner = expr_reach(column, input, marked).filter(|r| r.window.is_none())?;
            Some(TimeReach {
                window: Some((size, false)),
                ..inner
            })
        }
        Expr::Cast(c)
            if c.expr.get_type(input.schema()).ok().as_ref() == Some(c.field.data_type()) =>
        {
            expr_reach(&c.expr, input, marked)
        }
        e if matches!(sum_terms(e), Some((_, Operator::Plus, _))) => {
            let (left, _, right) = sum_terms(e)?;
            let start = expr_reach(left, input, marked)?;
            let (size, false) = start.window? else {
                return None;
            };
            (duration_us(right) == Some(size)).then_some(TimeReach {
                window: Some((size, true)),
                ..start
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::logical_expr::{col, lit};

    use super::*;

    fn schema(table: &str) -> DFSchema {
        let s = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]);
        DFSchema::try_from_qualified_schema(table, &s).unwrap()
    }

    fn seconds(n: i64) -> Expr {
        lit(ScalarValue::new_interval_mdn(0, 0, n * 1_000_000_000))
    }

    #[test]
    fn finds_between_and_comparison_pairs() {
        let (a, b) = (schema("a"), schema("b"));
        let between = col("b.t").between(col("a.t"), col("a.t") + seconds(10));
        let band = find_band(&between, &a, &b).unwrap();
        assert_eq!((band.lo_us, band.hi_us), (0, 10_000_000));
        assert_eq!(band.left, Column::from_qualified_name("a.t"));

        // Written from the left's side, with a strict bound.
        let pair = col("a.t")
            .gt_eq(col("b.t") - seconds(5))
            .and(col("a.t").lt(col("b.t") + seconds(2)))
            .and(col("a.k").eq(col("b.k")));
        let band = find_band(&pair, &a, &b).unwrap();
        assert_eq!((band.lo_us, band.hi_us), (-2_000_000, 5_000_000));

        // One bound alone is no band.
        assert_eq!(find_band(&col("b.t").gt(col("a.t")), &a, &b), None);
        // Nor are two columns of the same input.
        let same = col("a.t").between(col("a.t"), col("a.t") + seconds(1));
        assert_eq!(find_band(&same, &a, &b), None);
    }
}
