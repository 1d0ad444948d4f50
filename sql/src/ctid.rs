//! `ctid` ranges: DuckDB's postgres extension (and other parallel readers)
//! split a scan by the physical position of rows, sending
//! `WHERE ctid BETWEEN '(0,0)'::tid AND '(999,0)'::tid` per task.
//!
//! A row of a log table is placed by its offset: block `_offset / 1024`,
//! tuple `_partition * 1024 + _offset % 1024 + 1` (a tuple number starts
//! at 1, as in PostgreSQL, so `(b,0)` bounds a block without matching a
//! row). Each row has one position, so ranges that do not overlap read
//! every row exactly once, however a reader cuts them; each comparison is
//! led by the `_offset` bound it implies, so a range reads only the frames
//! holding its blocks. A materialized view
//! has no offsets: its rows all sit at `(0,1)`, so the range holding that
//! position reads them all and the others none.
//!
//! Only `ctid` compared with `tid` literals in the WHERE clause of a
//! SELECT over one relation is rewritten; `ctid` elsewhere stays an
//! unknown column.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, DataType, Expr, Ident, ObjectName, Select, SetExpr, Statement, TableFactor,
    Value, VisitMut, VisitorMut,
};

use crate::RelationColumns;

/// Rows per block of a log table's `ctid`.
pub const ROWS_PER_BLOCK: i64 = 1024;

/// Rewrites `ctid` ranges as the module header says; `columns` is as for
/// [`crate::hide_system_columns`].
pub fn rewrite_ctid_ranges<F>(statement: &mut Statement, columns: F)
where
    F: Fn(&str) -> Option<RelationColumns>,
{
    let _ = statement.visit(&mut CtidRanges { columns });
}

struct CtidRanges<F> {
    columns: F,
}

impl<F: Fn(&str) -> Option<RelationColumns>> VisitorMut for CtidRanges<F> {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut sqlparser::ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            self.rewrite_select(select);
        }
        ControlFlow::Continue(())
    }
}

impl<F: Fn(&str) -> Option<RelationColumns>> CtidRanges<F> {
    fn rewrite_select(&self, select: &mut Select) {
        let [from] = select.from.as_slice() else {
            return;
        };
        let TableFactor::Table { name, .. } = &from.relation else {
            return;
        };
        if !from.joins.is_empty() {
            return;
        }
        let Some(relation) = name.0.last().and_then(|p| p.as_ident()) else {
            return;
        };
        let Some(columns) = (self.columns)(&crate::ident_name(relation)) else {
            return;
        };
        if columns.visible.iter().any(|c| c == "ctid") {
            return;
        }
        let position = match columns.hidden.iter().any(|c| c == "_offset") {
            true => Position::Offsets,
            false => Position::Fixed,
        };
        if let Some(selection) = &mut select.selection {
            rewrite_expr(selection, position);
        }
    }
}

#[derive(Clone, Copy)]
enum Position {
    /// A log table: by `_partition` and `_offset`.
    Offsets,
    /// Every row at `(0,1)`.
    Fixed,
}

impl Position {
    fn block(self) -> Expr {
        match self {
            Position::Offsets => parse(&format!("(_offset / {ROWS_PER_BLOCK})")),
            Position::Fixed => number(0),
        }
    }

    fn tuple(self) -> Expr {
        match self {
            Position::Offsets => parse(&format!(
                "(CAST(_partition AS BIGINT) * {ROWS_PER_BLOCK} + _offset % {ROWS_PER_BLOCK} + 1)"
            )),
            Position::Fixed => number(1),
        }
    }
}

fn rewrite_expr(expr: &mut Expr, position: Position) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And | BinaryOperator::Or,
            right,
        } => {
            rewrite_expr(left, position);
            rewrite_expr(right, position);
        }
        Expr::Nested(inner) => rewrite_expr(inner, position),
        Expr::Between {
            expr: e,
            negated,
            low,
            high,
        } if is_ctid(e) => {
            if let (Some(low), Some(high)) = (tid(low), tid(high)) {
                let within = Expr::BinaryOp {
                    left: Box::new(compare(position, BinaryOperator::GtEq, low)),
                    op: BinaryOperator::And,
                    right: Box::new(compare(position, BinaryOperator::LtEq, high)),
                };
                *expr = match negated {
                    true => Expr::UnaryOp {
                        op: sqlparser::ast::UnaryOperator::Not,
                        expr: Box::new(Expr::Nested(Box::new(within))),
                    },
                    false => Expr::Nested(Box::new(within)),
                };
            }
        }
        Expr::BinaryOp { left, op, right } if is_ctid(left) => {
            let op = op.clone();
            if let Some(bound) = tid(right) {
                if is_order(&op) {
                    *expr = compare(position, op, bound);
                }
            }
        }
        _ => {}
    }
}

fn is_order(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Gt
            | BinaryOperator::GtEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Eq
    )
}

/// `(block, tuple) op (b, t)`, lexicographically. On a log table the
/// comparison is led by the `_offset` bound it implies, which the scan
/// uses to read only the frames holding those offsets.
fn compare(position: Position, op: BinaryOperator, (b, t): (i64, i64)) -> Expr {
    let (block, tuple) = (position.block(), position.tuple());
    let first = b.saturating_mul(ROWS_PER_BLOCK);
    let last = first.saturating_add(ROWS_PER_BLOCK - 1);
    let (exact, bound) = match op {
        BinaryOperator::Eq => (
            format!("({block} = {b} AND {tuple} = {t})"),
            format!("_offset BETWEEN {first} AND {last}"),
        ),
        BinaryOperator::Gt | BinaryOperator::GtEq | BinaryOperator::Lt | BinaryOperator::LtEq => {
            let (strict, tuple_op, bound) = match op {
                BinaryOperator::Gt => (">", ">", format!("_offset >= {first}")),
                BinaryOperator::GtEq => (">", ">=", format!("_offset >= {first}")),
                BinaryOperator::Lt => ("<", "<", format!("_offset <= {last}")),
                _ => ("<", "<=", format!("_offset <= {last}")),
            };
            (
                format!("({block} {strict} {b} OR ({block} = {b} AND {tuple} {tuple_op} {t}))"),
                bound,
            )
        }
        _ => return parse("NULL"),
    };
    match position {
        Position::Offsets => parse(&format!("({bound} AND {exact})")),
        Position::Fixed => parse(&exact),
    }
}

fn is_ctid(e: &Expr) -> bool {
    match e {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case("ctid"),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("ctid")),
        _ => false,
    }
}

/// `'(b,t)'::tid` as `(b, t)`.
fn tid(e: &Expr) -> Option<(i64, i64)> {
    let Expr::Cast {
        expr, data_type, ..
    } = e
    else {
        return None;
    };
    let is_tid = match data_type {
        DataType::Custom(ObjectName(parts), _) => parts
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i: &Ident| i.value.eq_ignore_ascii_case("tid")),
        _ => false,
    };
    if !is_tid {
        return None;
    }
    let Expr::Value(v) = expr.as_ref() else {
        return None;
    };
    let Value::SingleQuotedString(text) = &v.value else {
        return None;
    };
    let (b, t) = text
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?
        .split_once(',')?;
    Some((b.trim().parse().ok()?, t.trim().parse().ok()?))
}

fn number(n: i64) -> Expr {
    Expr::Value(Value::Number(n.to_string(), false).into())
}

fn parse(sql: &str) -> Expr {
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .unwrap_or(Expr::Value(Value::Null.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut s = crate::parse_one(sql);
        rewrite_ctid_ranges(&mut s, |name| match name {
            "t" => Some(RelationColumns {
                visible: vec!["a".into()],
                hidden: vec!["_partition".into(), "_offset".into()],
            }),
            "v" => Some(RelationColumns {
                visible: vec!["a".into()],
                hidden: vec![],
            }),
            _ => None,
        });
        s.to_string()
    }

    #[test]
    fn a_ctid_range_is_a_range_of_offsets() {
        assert_eq!(
            rewritten("SELECT a FROM t WHERE ctid BETWEEN '(0,0)'::tid AND '(1000,0)'::tid"),
            "SELECT a FROM t WHERE ((_offset >= 0 AND ((_offset / 1024) > 0 OR ((_offset / 1024) = 0 AND (CAST(_partition AS BIGINT) * 1024 + _offset % 1024 + 1) >= 0))) AND (_offset <= 1025023 AND ((_offset / 1024) < 1000 OR ((_offset / 1024) = 1000 AND (CAST(_partition AS BIGINT) * 1024 + _offset % 1024 + 1) <= 0))))"
        );
        assert_eq!(
            rewritten("SELECT a FROM v WHERE ctid BETWEEN '(0,0)'::tid AND '(4294967295,0)'::tid AND a > 1"),
            "SELECT a FROM v WHERE ((0 > 0 OR (0 = 0 AND 1 >= 0)) AND (0 < 4294967295 OR (0 = 4294967295 AND 1 <= 0))) AND a > 1"
        );
        // Unknown relations and other uses stay.
        assert_eq!(
            rewritten("SELECT a FROM x WHERE ctid > '(0,0)'::tid"),
            "SELECT a FROM x WHERE ctid > '(0,0)'::tid"
        );
    }
}
