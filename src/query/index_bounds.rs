//! Which ranges of an index (`CREATE INDEX`) a scan's filters allow:
//! equalities (`=`, `IN`) on the index's leading columns, then at most a
//! range (`<`, `<=`, `>`, `>=`, `BETWEEN`) on the next one, each compared
//! with a constant. The ranges are of keys in arrow's row format, whose
//! byte order is the values' order and which encodes each column on its
//! own, so the encoding of leading columns is a prefix of the whole key.
//!
//! A filter the index cannot use is left out, which only widens the
//! ranges: the filter still runs above the scan. A constant that does not
//! convert to the column's type without loss (`int_column = 1.5`) is left
//! out the same way.

use std::ops::Bound;

use arrow::compute::{cast, CastOptions};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use crate::log::column_index::KeyRanges;

/// At most this many equality combinations (`IN` lists on several
/// columns) become separate ranges.
const MAX_RANGES: usize = 1024;

/// Column types whose order in arrow's row format is SQL's: the types
/// an index may be made on. (Floating point is not among them: the row
/// format orders -0 before 0 and NaN apart, SQL equality does not.)
pub fn indexable(ty: &DataType) -> bool {
    use DataType::*;
    matches!(
        ty,
        Boolean
            | Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Utf8
            | LargeUtf8
            | Utf8View
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(_, _)
            | Decimal128(_, _)
            | Decimal256(_, _)
            | Binary
            | LargeBinary
    )
}

/// What the filters say of one column.
#[derive(Default)]
struct ColumnConstraint {
    equal: Option<Vec<ScalarValue>>,
    lower: Option<(ScalarValue, bool)>,
    upper: Option<(ScalarValue, bool)>,
}

/// The key ranges `filters` allow in an index on `columns` (names and
/// types, in index order), with how many of its columns they use (a
/// range counts as half a column); None when the filters constrain
/// neither an equality nor a range of its first column.
pub fn key_ranges(filters: &[Expr], columns: &[(String, DataType)]) -> Option<(f32, KeyRanges)> {
    let constraints: Vec<ColumnConstraint> = columns
        .iter()
        .map(|(name, _)| constraint(filters, name))
        .collect();
    let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
    let mut used = 0.0;
    let mut k = 0;
    while k < columns.len() {
        let Some(values) = &constraints[k].equal else {
            break;
        };
        let ty = &columns[k].1;
        let Some(encoded) = values
            .iter()
            .map(|v| encode(v, ty))
            .collect::<Option<Vec<Vec<u8>>>>()
        else {
            break;
        };
        if prefixes.len() * encoded.len() > MAX_RANGES {
            break;
        }
        prefixes = prefixes
            .iter()
            .flat_map(|p| {
                encoded.iter().map(move |e| {
                    let mut key = p.clone();
                    key.extend_from_slice(e);
                    key
                })
            })
            .collect();
        used += 1.0;
        k += 1;
    }
    let range = constraints.get(k).map(|c| {
        let ty = &columns[k].1;
        let bound = |b: &Option<(ScalarValue, bool)>| {
            b.as_ref()
                .and_then(|(v, inclusive)| encode(v, ty).map(|e| (e, *inclusive)))
        };
        (bound(&c.lower), bound(&c.upper))
    });
    let range = range.filter(|(lo, hi)| lo.is_some() || hi.is_some());
    if used == 0.0 && range.is_none() {
        return None;
    }
    let mut ranges = Vec::with_capacity(prefixes.len());
    for p in prefixes {
        let (lo, hi) = match &range {
            None => (included_or_unbounded(p.clone()), below_successor(&p)),
            Some((lower, upper)) => {
                let lo = match lower {
                    Some((e, true)) => Bound::Included(concat(&p, e)),
                    Some((e, false)) => match successor(&concat(&p, e)) {
                        Some(s) => Bound::Included(s),
                        None => continue,
                    },
                    None => included_or_unbounded(p.clone()),
                };
                let hi = match upper {
                    Some((e, false)) => Bound::Excluded(concat(&p, e)),
                    Some((e, true)) => below_successor(&concat(&p, e)),
                    None => below_successor(&p),
                };
                (lo, hi)
            }
        };
        ranges.push((lo, hi));
    }
    if range.is_some() {
        used += 0.5;
    }
    Some((used, ranges))
}

/// Whether `filter` constrains one of `columns` in a way an index can use.
pub fn usable(filter: &Expr, columns: &[String]) -> bool {
    split_conjunction(filter).into_iter().any(|e| {
        columns
            .iter()
            .any(|c| !matches!(constraint_of(e, c), Constraint::None))
    })
}

fn included_or_unbounded(p: Vec<u8>) -> Bound<Vec<u8>> {
    match p.is_empty() {
        true => Bound::Unbounded,
        false => Bound::Included(p),
    }
}

/// Below every key that starts with `p`.
fn below_successor(p: &[u8]) -> Bound<Vec<u8>> {
    match successor(p) {
        Some(s) if !p.is_empty() => Bound::Excluded(s),
        _ => Bound::Unbounded,
    }
}

fn concat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    v.extend_from_slice(b);
    v
}

/// The least byte string above every string that starts with `p`; None
/// when there is none (all bytes 0xFF).
fn successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last != u8::MAX {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// `v` as the row format encodes one value of type `ty`; None when `v`
/// is NULL or does not convert to `ty` and back unchanged.
fn encode(v: &ScalarValue, ty: &DataType) -> Option<Vec<u8>> {
    if v.is_null() || !indexable(ty) {
        return None;
    }
    let array = v.to_array_of_size(1).ok()?;
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let typed = arrow::compute::cast_with_options(&array, ty, &strict).ok()?;
    let back = cast(&typed, &v.data_type()).ok()?;
    if ScalarValue::try_from_array(&back, 0).ok()? != *v {
        return None;
    }
    let converter = RowConverter::new(vec![SortField::new(ty.clone())]).ok()?;
    let rows = converter.convert_columns(&[typed]).ok()?;
    Some(rows.row(0).as_ref().to_vec())
}

enum Constraint {
    None,
    Equal(Vec<ScalarValue>),
    Lower(ScalarValue, bool),
    Upper(ScalarValue, bool),
    Between(ScalarValue, ScalarValue),
}

/// What the conjunction `filters` says of `column` (one constraint of
/// each kind is enough: the filters still run above the scan).
fn constraint(filters: &[Expr], column: &str) -> ColumnConstraint {
    let mut c = ColumnConstraint::default();
    for e in filters.iter().flat_map(split_conjunction) {
        match constraint_of(e, column) {
            Constraint::None => {}
            Constraint::Equal(v) => {
                c.equal.get_or_insert(v);
            }
            Constraint::Lower(v, inclusive) => {
                c.lower.get_or_insert((v, inclusive));
            }
            Constraint::Upper(v, inclusive) => {
                c.upper.get_or_insert((v, inclusive));
            }
            Constraint::Between(lo, hi) => {
                c.lower.get_or_insert((lo, true));
                c.upper.get_or_insert((hi, true));
            }
        }
    }
    c
}

fn is_column(e: &Expr, column: &str) -> bool {
    matches!(e, Expr::Column(c) if c.name == column)
}

fn literal(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        _ => None,
    }
}

fn constraint_of(e: &Expr, column: &str) -> Constraint {
    match e {
        // `c = a OR c = b`, as the optimizer writes a short `IN` list.
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => match (constraint_of(left, column), constraint_of(right, column)) {
            (Constraint::Equal(mut a), Constraint::Equal(b)) => {
                a.extend(b);
                Constraint::Equal(a)
            }
            _ => Constraint::None,
        },
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (op, value) = if is_column(left, column) {
                match literal(right) {
                    Some(v) => (*op, v),
                    None => return Constraint::None,
                }
            } else if is_column(right, column) {
                match (literal(left), op.swap()) {
                    (Some(v), Some(op)) => (op, v),
                    _ => return Constraint::None,
                }
            } else {
                return Constraint::None;
            };
            match op {
                Operator::Eq => Constraint::Equal(vec![value]),
                Operator::Gt => Constraint::Lower(value, false),
                Operator::GtEq => Constraint::Lower(value, true),
                Operator::Lt => Constraint::Upper(value, false),
                Operator::LtEq => Constraint::Upper(value, true),
                _ => Constraint::None,
            }
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, column) => {
            match list.list.iter().map(literal).collect::<Option<Vec<_>>>() {
                Some(values) if !values.is_empty() => Constraint::Equal(values),
                _ => Constraint::None,
            }
        }
        Expr::Between(b) if !b.negated && is_column(&b.expr, column) => {
            match (literal(&b.low), literal(&b.high)) {
                (Some(lo), Some(hi)) => Constraint::Between(lo, hi),
                _ => Constraint::None,
            }
        }
        _ => Constraint::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn ints() -> Vec<(String, DataType)> {
        vec![
            ("a".to_string(), DataType::Int64),
            ("b".to_string(), DataType::Utf8),
        ]
    }

    #[test]
    fn equalities_on_leading_columns_and_a_range_on_the_next() {
        let (used, r) = key_ranges(&[col("a").eq(lit(5i64))], &ints()).unwrap();
        assert_eq!((used, r.len()), (1.0, 1));
        let (used, r) = key_ranges(
            &[col("a").eq(lit(5i64)).and(col("b").gt_eq(lit("x")))],
            &ints(),
        )
        .unwrap();
        assert_eq!((used, r.len()), (1.5, 1));
        let (used, _) = key_ranges(
            &[col("a").in_list(vec![lit(1i64), lit(2i64)], false)],
            &ints(),
        )
        .unwrap();
        assert_eq!(used, 1.0);
        // Only the second column: the index cannot help.
        assert!(key_ranges(&[col("b").eq(lit("x"))], &ints()).is_none());
        // A constant that the column's type cannot hold exactly.
        assert!(key_ranges(&[col("a").eq(lit(1.5f64))], &ints()).is_none());
    }

    #[test]
    fn successor_skips_every_key_with_the_prefix() {
        assert_eq!(successor(&[1, 2, 0xFF]), Some(vec![1, 3]));
        assert_eq!(successor(&[0xFF, 0xFF]), None);
    }
}
