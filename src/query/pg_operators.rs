//! Operators planned as PostgreSQL resolves them, where DataFusion's own
//! differ (an extension of DataFusion's SQL planner, which hands each
//! binary operator here first, with its operands' schema):
//!
//! - `interval * number`, `number * interval`, `interval / number`
//!   (DataFusion refuses them);
//! - interval comparisons by one span (30-day months, 24-hour days);
//! - `date ± interval` is a timestamp (DataFusion's drops the hours);
//! - `timestamp - timestamp` is days and time (`386 days 15:39:22`);
//!   `date - date` is an `integer`;
//! - `numeric / numeric` is exact (`super::pg_numeric`);
//! - `real` with an integer or numeric operand is computed as `double
//!   precision`, as PostgreSQL picks `float8` operators for it;
//! - the JSON operators over `json` and `jsonb` (`->`, `->>`, `#>`, `#>>`,
//!   `@>`, `<@`, `?`, `?|`, `?&`, `||`, `-`, `#-`), where a string literal
//!   on the other side reads as JSON (`super::pg_json`).

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{cast, BinaryExpr, Expr, ExprSchemable, Operator};
use sluice_sql::sqlparser::ast::BinaryOperator;

use super::temporal::{
    interval_div, interval_mul, interval_span, timestamp_difference, timestamp_minus_interval,
    timestamp_plus_interval,
};

#[derive(Debug, Default)]
pub struct PgOperators;

fn call(udf: Arc<datafusion::logical_expr::ScalarUDF>, args: Vec<Expr>) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(udf, args))
}

fn binary(l: Expr, op: Operator, r: Expr) -> Expr {
    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r)))
}

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

fn is_number(t: &DataType) -> bool {
    t.is_numeric()
}

fn timestamp_of(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Timestamp(_, tz) => Some(DataType::Timestamp(TimeUnit::Microsecond, tz.clone())),
        DataType::Date32 | DataType::Date64 => {
            Some(DataType::Timestamp(TimeUnit::Microsecond, None))
        }
        _ => None,
    }
}

/// `e` (of type `from`) as a `to`: itself when it is one already.
fn cast_from(e: &Expr, from: &DataType, to: DataType) -> Expr {
    if *from == to {
        e.clone()
    } else {
        cast(e.clone(), to)
    }
}

fn comparison(op: &BinaryOperator) -> Option<Operator> {
    Some(match op {
        BinaryOperator::Eq => Operator::Eq,
        BinaryOperator::NotEq => Operator::NotEq,
        BinaryOperator::Lt => Operator::Lt,
        BinaryOperator::LtEq => Operator::LtEq,
        BinaryOperator::Gt => Operator::Gt,
        BinaryOperator::GtEq => Operator::GtEq,
        _ => return None,
    })
}

impl ExprPlanner for PgOperators {
    /// `ROW(a, b)` and `(a, b)` name their fields `f1`, `f2`, as
    /// PostgreSQL's anonymous records do (`to_jsonb(ROW(1, 2))` is
    /// `{"f1": 1, "f2": 2}`); DataFusion's are `c0`, `c1`.
    fn plan_struct_literal(
        &self,
        args: Vec<Expr>,
        is_named_struct: bool,
    ) -> Result<PlannerResult<Vec<Expr>>> {
        if is_named_struct {
            return Ok(PlannerResult::Original(args));
        }
        let named = args
            .into_iter()
            .enumerate()
            .flat_map(|(i, a)| [datafusion::logical_expr::lit(format!("f{}", i + 1)), a])
            .collect();
        Ok(PlannerResult::Planned(
            datafusion::functions::core::named_struct().call(named),
        ))
    }

    /// `extract(field FROM x)` is an exact numeric, as in PostgreSQL.
    fn plan_extract(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(PlannerResult::Planned(call(
            super::pg_time_functions::extract_udf(),
            args,
        )))
    }

    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        // Only these operators are ever planned differently; asking the
        // type of every operand of a long AND/OR chain would make planning
        // quadratic in its length.
        if !matches!(
            expr.op,
            BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq
                | BinaryOperator::Arrow
                | BinaryOperator::LongArrow
                | BinaryOperator::HashArrow
                | BinaryOperator::HashLongArrow
                | BinaryOperator::AtArrow
                | BinaryOperator::ArrowAt
                | BinaryOperator::PGOverlap
                | BinaryOperator::Question
                | BinaryOperator::QuestionPipe
                | BinaryOperator::QuestionAnd
                | BinaryOperator::StringConcat
                | BinaryOperator::HashMinus
        ) {
            return Ok(PlannerResult::Original(expr));
        }
        // Operands whose type is not known yet (a parameter) keep
        // DataFusion's planning.
        let (Ok(lt), Ok(rt)) = (expr.left.get_type(schema), expr.right.get_type(schema)) else {
            return Ok(PlannerResult::Original(expr));
        };
        let RawBinaryExpr {
            op,
            mut left,
            mut right,
        } = expr;
        let (mut lt, mut rt) = (lt, rt);
        // PostgreSQL's unknown-literal rule in arithmetic: a quoted
        // literal beside a number takes the number's type (`1 + '2'` is
        // 3), and added to a timestamp it is an interval.
        let untyped = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(Some(_)), None));
        let arithmetic = matches!(
            op,
            BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
        );
        let fits_int4 = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Int64(Some(v)), _) if i32::try_from(*v).is_ok());
        let int4_literal = fits_int4(&left) || fits_int4(&right);
        // A numeric literal keeps its own digits after the point, as
        // PostgreSQL's unknown becomes an unconstrained numeric.
        let literal_type = |e: &Expr, other: &DataType| match (e, other) {
            (Expr::Literal(ScalarValue::Utf8(Some(text)), _), DataType::Decimal128(..)) => {
                let scale = text
                    .trim()
                    .split_once('.')
                    .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count());
                DataType::Decimal128(38, scale.min(38) as i8)
            }
            // Beside an integer literal that PostgreSQL reads as integer.
            (_, DataType::Int64) if int4_literal => DataType::Int32,
            (_, other) => other.clone(),
        };
        if arithmetic {
            if untyped(&right) && is_number(&lt) {
                rt = literal_type(&right, &lt);
                right = cast(right, rt.clone());
            } else if untyped(&left) && is_number(&rt) {
                lt = literal_type(&left, &rt);
                left = cast(left, lt.clone());
            } else if op == BinaryOperator::Plus
                && untyped(&right)
                && matches!(lt, DataType::Timestamp(..))
            {
                rt = DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano);
                right = cast(right, rt.clone());
            } else if op == BinaryOperator::Plus
                && untyped(&left)
                && matches!(rt, DataType::Timestamp(..))
            {
                lt = DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano);
                left = cast(left, lt.clone());
            }
        }
        // JSON travels as text with a metadata tag, so only text operands
        // need their field read.
        let json = |e: &Expr, t: &DataType| {
            matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
                && e.to_field(schema)
                    .map(|(_, f)| crate::types::is_json(&f))
                    .unwrap_or(false)
        };
        let (left_json, right_json) = (json(&left, &lt), json(&right, &rt));
        if left_json || right_json {
            if let Some(e) = json_operator(&op, &left, &right, left_json, right_json) {
                return Ok(PlannerResult::Planned(e));
            }
        }
        let arrays = list_depth(&lt) > 0 && list_depth(&rt) > 0;
        let planned = match (&op, &lt, &rt) {
            (BinaryOperator::StringConcat, l, r) if arrays => {
                Some(array_concat(&left, l, &right, r))
            }
            (BinaryOperator::AtArrow, _, _) if arrays => Some(call(
                Arc::new(super::pg_array_contains::array_contains()),
                vec![left.clone(), right.clone()],
            )),
            (BinaryOperator::ArrowAt, _, _) if arrays => Some(call(
                Arc::new(super::pg_array_contains::array_contains()),
                vec![right.clone(), left.clone()],
            )),
            (BinaryOperator::PGOverlap, _, _) if arrays => Some(call(
                Arc::new(super::pg_array_contains::array_overlap()),
                vec![left.clone(), right.clone()],
            )),
            (BinaryOperator::Divide, l, r)
                if (is_decimal(l) || is_decimal(r))
                    && (is_decimal(l) || l.is_integer())
                    && (is_decimal(r) || r.is_integer()) =>
            {
                Some(call(
                    super::pg_numeric::numeric_divide(),
                    vec![left.clone(), right.clone()],
                ))
            }
            (BinaryOperator::Multiply, l, r) if is_interval(l) && is_number(r) => Some(call(
                interval_mul(),
                vec![left.clone(), cast(right.clone(), DataType::Float64)],
            )),
            (BinaryOperator::Multiply, l, r) if is_number(l) && is_interval(r) => Some(call(
                interval_mul(),
                vec![right.clone(), cast(left.clone(), DataType::Float64)],
            )),
            (BinaryOperator::Divide, l, r) if is_interval(l) && is_number(r) => Some(call(
                interval_div(),
                vec![left.clone(), cast(right.clone(), DataType::Float64)],
            )),
            // A date compared with a timestamp is the timestamp of its
            // midnight, in microseconds (the planner's common type,
            // nanoseconds, holds only the years 1677 to 2262).
            (op, DataType::Date32, DataType::Timestamp(_, zone))
            | (op, DataType::Timestamp(_, zone), DataType::Date32)
                if comparison(op).is_some() =>
            {
                let ts = DataType::Timestamp(TimeUnit::Microsecond, zone.clone());
                comparison(op).map(|o| {
                    binary(
                        cast_from(&left, &lt, ts.clone()),
                        o,
                        cast_from(&right, &rt, ts),
                    )
                })
            }
            (op, l, r) if is_interval(l) && is_interval(r) && comparison(op).is_some() => {
                comparison(op).map(|o| {
                    binary(
                        call(interval_span(), vec![left.clone()]),
                        o,
                        call(interval_span(), vec![right.clone()]),
                    )
                })
            }
            // timestamp (or date) ± interval, checked against PostgreSQL's
            // range.
            (BinaryOperator::Plus | BinaryOperator::Minus, l, r)
                if is_interval(r) && timestamp_of(l).is_some() =>
            {
                let f = match op {
                    BinaryOperator::Plus => timestamp_plus_interval(),
                    _ => timestamp_minus_interval(),
                };
                timestamp_of(l).map(|t| call(f, vec![cast_from(&left, l, t), right.clone()]))
            }
            (BinaryOperator::Plus, l, r) if is_interval(l) && timestamp_of(r).is_some() => {
                timestamp_of(r).map(|t| {
                    call(
                        timestamp_plus_interval(),
                        vec![cast_from(&right, r, t), left.clone()],
                    )
                })
            }
            (BinaryOperator::Minus, DataType::Date32, DataType::Date32) => Some(cast(
                binary(left.clone(), Operator::Minus, right.clone()),
                DataType::Int32,
            )),
            (BinaryOperator::Minus, l, r)
                if matches!(l, DataType::Timestamp(..)) || matches!(r, DataType::Timestamp(..)) =>
            {
                match (timestamp_of(l), timestamp_of(r)) {
                    (Some(lt), Some(rt)) => Some(call(
                        timestamp_difference(),
                        vec![cast(left.clone(), lt), cast(right.clone(), rt)],
                    )),
                    _ => None,
                }
            }
            (
                BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide,
                l,
                r,
            ) if (*l == DataType::Float32 && (r.is_integer() || is_decimal(r)))
                || (*r == DataType::Float32 && (l.is_integer() || is_decimal(l))) =>
            {
                let o = match op {
                    BinaryOperator::Plus => Operator::Plus,
                    BinaryOperator::Minus => Operator::Minus,
                    BinaryOperator::Multiply => Operator::Multiply,
                    _ => Operator::Divide,
                };
                Some(binary(
                    cast(left.clone(), DataType::Float64),
                    o,
                    cast(right.clone(), DataType::Float64),
                ))
            }
            _ => None,
        };
        Ok(match planned {
            Some(e) => PlannerResult::Planned(e),
            None => PlannerResult::Original(RawBinaryExpr { op, left, right }),
        })
    }
}

/// A string literal read as jsonb, as PostgreSQL reads an untyped literal
/// beside a jsonb operand.
fn as_jsonb(e: &Expr, is_json: bool) -> Expr {
    match e {
        Expr::Literal(ScalarValue::Utf8(_), _) if !is_json => {
            Expr::Cast(datafusion::logical_expr::expr::Cast {
                expr: Box::new(e.clone()),
                field: Arc::new(super::pg_json::jsonb_field("")),
            })
        }
        e => e.clone(),
    }
}

fn json_operator(
    op: &BinaryOperator,
    left: &Expr,
    right: &Expr,
    left_json: bool,
    right_json: bool,
) -> Option<Expr> {
    use super::pg_json as j;
    let (l, r) = (left.clone(), right.clone());
    Some(match op {
        BinaryOperator::Arrow if left_json => call(j::jsonb_get(), vec![l, r]),
        BinaryOperator::LongArrow if left_json => call(j::jsonb_get_text(), vec![l, r]),
        BinaryOperator::HashArrow if left_json => call(j::jsonb_path(), vec![l, r]),
        BinaryOperator::HashLongArrow if left_json => call(j::jsonb_path_text(), vec![l, r]),
        BinaryOperator::AtArrow => call(
            j::jsonb_contains(),
            vec![as_jsonb(left, left_json), as_jsonb(right, right_json)],
        ),
        BinaryOperator::ArrowAt => call(
            j::jsonb_contains(),
            vec![as_jsonb(right, right_json), as_jsonb(left, left_json)],
        ),
        BinaryOperator::Question if left_json => call(j::jsonb_exists(), vec![l, r]),
        BinaryOperator::QuestionPipe if left_json => call(j::jsonb_exists_any(), vec![l, r]),
        BinaryOperator::QuestionAnd if left_json => call(j::jsonb_exists_all(), vec![l, r]),
        BinaryOperator::StringConcat => call(
            j::jsonb_concat(),
            vec![as_jsonb(left, left_json), as_jsonb(right, right_json)],
        ),
        BinaryOperator::Minus if left_json => call(j::jsonb_delete(), vec![l, r]),
        BinaryOperator::HashMinus if left_json => call(j::jsonb_delete_path(), vec![l, r]),
        BinaryOperator::Eq | BinaryOperator::NotEq => binary(
            as_jsonb(left, left_json),
            match op {
                BinaryOperator::Eq => Operator::Eq,
                _ => Operator::NotEq,
            },
            as_jsonb(right, right_json),
        ),
        _ => return None,
    })
}

/// How many array dimensions a type has (0: not an array).
fn list_depth(t: &DataType) -> usize {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            1 + list_depth(f.data_type())
        }
        _ => 0,
    }
}

/// An array type without its fields' metadata: arrays whose element
/// fields differ only in metadata (a `::int[]` cast tags its elements)
/// concatenate as one type.
fn untagged_list(t: &DataType) -> DataType {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            DataType::new_list(untagged_list(f.data_type()), f.is_nullable())
        }
        t => t.clone(),
    }
}

/// `left || right` over arrays, as PostgreSQL's `array_cat`: an array of
/// one dimension fewer is appended (or prepended) as one element, unless
/// it is empty or NULL, when the other is the result whole.
fn array_concat(left: &Expr, lt: &DataType, right: &Expr, rt: &DataType) -> Expr {
    use datafusion::functions::expr_fn::coalesce;
    use datafusion::functions_nested::expr_fn::{array_concat, cardinality};
    use datafusion::logical_expr::{lit, when};
    let l = cast_from(left, lt, untagged_list(lt));
    let r = cast_from(right, rt, untagged_list(rt));
    let joined = array_concat(vec![l.clone(), r.clone()]);
    let empty = |e: Expr| coalesce(vec![cardinality(e), lit(0u64)]).eq(lit(0u64));
    let whole = |cond: Expr, result: Expr| {
        when(cond, result.clone())
            .otherwise(joined.clone())
            .unwrap_or(joined.clone())
    };
    match list_depth(lt).cmp(&list_depth(rt)) {
        std::cmp::Ordering::Greater => whole(empty(r), l),
        std::cmp::Ordering::Less => whole(empty(l), r),
        std::cmp::Ordering::Equal => joined,
    }
}

fn is_decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}
