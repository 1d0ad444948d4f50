//! PostgreSQL's reading of syntax that the parser or DataFusion reads
//! otherwise, rewritten on the statement before it is planned:
//!
//! - a unary minus binds tighter than `^`: `-3 ^ 2` is `(-3) ^ 2` = 9
//!   (the parser reads `-(3 ^ 2)`);
//! - the prefix operators `@` (absolute value), `|/` (square root), `||/`
//!   (cube root) and `~` (bitwise not) are their functions, and `~` binds
//!   more loosely than arithmetic (`~1 + 1` is `~(1 + 1)`);
//! - a row comparison is the comparison of its fields, with SQL's NULLs:
//!   `(1, NULL) = (1, 2)` and `ROW(1, 2) < ROW(1, NULL)` are NULL, not
//!   false, and `(1, NULL) IN ((1, 1))` is the OR of such equalities;
//! - `(a, b) IN (SELECT c, d ...)` is true where a row equals, NULL where a
//!   NULL field decides, false otherwise (the planner takes one column);
//! - `x = ANY (array)` is NULL where no element equals x and one is NULL
//!   (it is `NOT (x <> ALL (array))`, which the planner gets right);
//! - `GROUP BY ()` is the one group of all rows, and `DISTINCT ON (1)`
//!   names the first output column;
//! - `x BETWEEN SYMMETRIC a AND b` is `(x BETWEEN a AND b OR x BETWEEN b
//!   AND a)`, and `(a, b) OVERLAPS (c, d)` compares the periods as
//!   PostgreSQL does;
//! - `U&'\0041'` is the string it spells;
//! - `json_agg(x ORDER BY y)`, `jsonb_agg` and `json_object_agg(k, v)`
//!   are `array_agg` (with its ordering and filter) turned into JSON by
//!   the server's `json_agg_of`, `jsonb_agg_of` and
//!   `json_object_agg_of`;
//! - `x LIKE 'a#_c' ESCAPE '#'` is the pattern with backslash escapes;
//! - `x SIMILAR TO 'pattern'` is the regular expression PostgreSQL makes
//!   of the pattern (`%` any text, `_` one character, anchored);
//! - `COLLATE "C"` (and `POSIX`, `default`, `ucs_basic`) is how text
//!   compares here already, by code point;
//! - `every` is `bool_and`, `variance` is `var_samp`, and `array_remove`
//!   and `array_replace` reach every occurrence (`pg_array_remove`, which
//!   removes NULLs too, and `array_replace_all`);
//! - `make_interval(days => 3)` names its arguments: they become the
//!   positional list with zeros for those left out;
//! - `FETCH FIRST n ROWS ONLY` is `LIMIT n`, and a parameter of `LIMIT`
//!   or `OFFSET` is a bigint;
//! - a numeric literal beyond what a 38-digit numeric holds (`1e308`) is
//!   a double precision;
//! - `INTERVAL '1 month 2 days 03:04:05'` (and `INTERVAL '2' DAY`) is its
//!   text cast to an interval, which the server reads as PostgreSQL
//!   reads interval text;
//! - `ARRAY(subquery)` is the array of the subquery's rows (see
//!   `crate::array_subquery`);
//! - `array_agg(DISTINCT x)`, `string_agg(DISTINCT x, d)` and the JSON
//!   aggregates' DISTINCT forms order their values by `x`, as PostgreSQL's
//!   sorted DISTINCT gives them.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgumentList, FunctionArguments,
    GroupByExpr, Ident, ObjectName, Select, Statement, UnaryOperator, Value, ValueWithSpan,
    VisitMut, VisitorMut,
};

use crate::set_returning::call;

/// Rewrites `statement` as the module header says.
pub fn rewrite_postgres_syntax(statement: &mut Statement) -> Result<(), crate::SqlError> {
    // An INSERT's VALUES take each target column's type row by row, not
    // one type per VALUES column.
    let in_insert = matches!(statement, Statement::Insert(_));
    let mut rewriter = PostgresSyntax {
        error: None,
        in_insert,
    };
    let _ = statement.visit(&mut rewriter);
    rewriter.error.map_or(Ok(()), Err)
}

struct PostgresSyntax {
    /// What PostgreSQL refuses that the rewrite found.
    error: Option<crate::SqlError>,
    /// The statement is an INSERT.
    in_insert: bool,
}

impl VisitorMut for PostgresSyntax {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // `~` binds more loosely than arithmetic: `~1 + 1` is `~(1 + 1)`.
        if let Expr::BinaryOp { op, .. } = expr {
            if is_arithmetic(op) {
                if let Some(chain) = without_leftmost_bitwise_not(expr) {
                    *expr = Expr::UnaryOp {
                        op: UnaryOperator::BitwiseNot,
                        expr: nested(chain),
                    };
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(e) = rewrite(expr) {
            *expr = e;
        }
        if let Expr::Function(f) = expr {
            if let Some(sqlparser::ast::WindowType::WindowSpec(spec)) = &mut f.over {
                if let Some(frame) = &mut spec.window_frame {
                    frame_offsets_as_text(frame);
                    if let Err(e) = frame_offsets_in_range(frame) {
                        self.error = Some(e);
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut sqlparser::ast::Query) -> ControlFlow<()> {
        if let sqlparser::ast::SetExpr::Values(values) = query.body.as_mut() {
            values_typed_by_their_column(&mut values.rows, self.in_insert);
        }
        // FETCH FIRST n ROWS ONLY is LIMIT n (WITH TIES and PERCENT stay
        // for the planner to refuse).
        if let Some(fetch) = &query.fetch {
            if !fetch.with_ties && !fetch.percent {
                let count = fetch.quantity.clone().unwrap_or_else(|| {
                    Expr::Value(ValueWithSpan::from(Value::Number("1".into(), false)))
                });
                let offset = match &query.limit_clause {
                    Some(sqlparser::ast::LimitClause::LimitOffset { offset, .. }) => offset.clone(),
                    _ => None,
                };
                query.limit_clause = Some(sqlparser::ast::LimitClause::LimitOffset {
                    limit: Some(count),
                    offset,
                    limit_by: vec![],
                });
                query.fetch = None;
            }
        }
        // A parameter of LIMIT or OFFSET is a bigint, as PostgreSQL types
        // it: a client that sends it untyped (knex, node-postgres) sends
        // its text.
        if let Some(sqlparser::ast::LimitClause::LimitOffset { limit, offset, .. }) =
            &mut query.limit_clause
        {
            for e in limit
                .iter_mut()
                .chain(offset.iter_mut().map(|o| &mut o.value))
            {
                if matches!(e, Expr::Value(v) if matches!(v.value, Value::Placeholder(_))) {
                    *e = Expr::Cast {
                        kind: sqlparser::ast::CastKind::Cast,
                        expr: Box::new(e.clone()),
                        data_type: sqlparser::ast::DataType::BigInt(None),
                        array: false,
                        format: None,
                    };
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        // `DISTINCT ON (1)` names the first output column, as ORDER BY 1
        // does.
        if let Some(sqlparser::ast::Distinct::On(exprs)) = &mut select.distinct {
            for e in exprs.iter_mut() {
                let Expr::Value(v) = e else { continue };
                let Value::Number(n, _) = &v.value else {
                    continue;
                };
                let item = n
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| n.checked_sub(1))
                    .and_then(|i| select.projection.get(i));
                match item {
                    Some(sqlparser::ast::SelectItem::UnnamedExpr(x))
                    | Some(sqlparser::ast::SelectItem::ExprWithAlias { expr: x, .. }) => {
                        *e = x.clone()
                    }
                    _ => {}
                }
            }
        }
        if let GroupByExpr::Expressions(exprs, modifiers) = &mut select.group_by {
            if modifiers.is_empty() {
                exprs.retain(|e| !matches!(e, Expr::Tuple(t) if t.is_empty()));
            }
        }
        ControlFlow::Continue(())
    }
}

fn nested(e: Expr) -> Box<Expr> {
    Box::new(Expr::Nested(Box::new(e)))
}

/// The operators that bind more tightly than PostgreSQL's prefix
/// operators other than the sign (`~`, `@`, `|/`).
fn is_arithmetic(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo
            | BinaryOperator::PGExp
    )
}

/// A chain of arithmetic whose leftmost operand the parser read as `~a`,
/// with `a` there instead (the caller puts the `~` over the chain).
fn without_leftmost_bitwise_not(e: &Expr) -> Option<Expr> {
    match e {
        Expr::BinaryOp { left, op, right } if is_arithmetic(op) => {
            without_leftmost_bitwise_not(left).map(|l| Expr::BinaryOp {
                left: Box::new(l),
                op: op.clone(),
                right: right.clone(),
            })
        }
        Expr::UnaryOp {
            op: UnaryOperator::BitwiseNot,
            expr,
        } => Some(expr.as_ref().clone()),
        _ => None,
    }
}

/// The sign applied to the leftmost operand of a chain of `^`.
fn push_sign_into_power(op: UnaryOperator, e: Expr) -> Expr {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::PGExp,
            right,
        } => Expr::BinaryOp {
            left: Box::new(push_sign_into_power(op, *left)),
            op: BinaryOperator::PGExp,
            right,
        },
        other => Expr::UnaryOp {
            op,
            expr: Box::new(other),
        },
    }
}

/// `x LIKE 'a#_c' ESCAPE '#'` (and ILIKE, SIMILAR's cousins aside): the
/// planner reads only a backslash as the escape, so a literal pattern is
/// written again with backslashes (a backslash of its own doubled), and
/// `ESCAPE ''` (no escape at all) doubles every backslash.
fn like_escape(expr: &Expr) -> Option<Expr> {
    let (Expr::Like {
        pattern,
        escape_char: Some(escape),
        ..
    }
    | Expr::ILike {
        pattern,
        escape_char: Some(escape),
        ..
    }) = expr
    else {
        return None;
    };
    let Value::SingleQuotedString(e) = &escape.value else {
        return None;
    };
    let escape = match e.chars().collect::<Vec<_>>().as_slice() {
        [] => None,
        ['\\'] => return None,
        [c] => Some(*c),
        _ => return None,
    };
    let Expr::Value(v) = pattern.as_ref() else {
        return None;
    };
    let Value::SingleQuotedString(p) = &v.value else {
        return None;
    };
    let mut out = String::with_capacity(p.len() + 4);
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            out.push('\\');
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    let pattern = Box::new(Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(
        out,
    ))));
    Some(match expr.clone() {
        Expr::Like {
            negated, any, expr, ..
        } => Expr::Like {
            negated,
            any,
            expr,
            pattern,
            escape_char: None,
        },
        Expr::ILike {
            negated, any, expr, ..
        } => Expr::ILike {
            negated,
            any,
            expr,
            pattern,
            escape_char: None,
        },
        _ => return None,
    })
}

fn rewrite(expr: &Expr) -> Option<Expr> {
    if let Some(e) = crate::array_subquery::array_of_subquery(expr) {
        return Some(e);
    }
    if let Some(e) = like_escape(expr) {
        return Some(e);
    }
    match expr {
        Expr::UnaryOp {
            op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
            expr: inner,
        } if matches!(
            inner.as_ref(),
            Expr::BinaryOp {
                op: BinaryOperator::PGExp,
                ..
            }
        ) =>
        {
            Some(push_sign_into_power(*op, inner.as_ref().clone()))
        }
        Expr::UnaryOp { op, expr: inner } => {
            let name = match op {
                UnaryOperator::PGAbs => "abs",
                UnaryOperator::PGSquareRoot => "sqrt",
                UnaryOperator::PGCubeRoot => "cbrt",
                UnaryOperator::BitwiseNot => {
                    // ~x is x XOR -1 in two's complement.
                    return Some(Expr::Nested(Box::new(Expr::BinaryOp {
                        left: nested(inner.as_ref().clone()),
                        op: BinaryOperator::PGBitwiseXor,
                        right: Box::new(Expr::UnaryOp {
                            op: UnaryOperator::Minus,
                            expr: Box::new(Expr::Value(ValueWithSpan::from(Value::Number(
                                "1".into(),
                                false,
                            )))),
                        }),
                    })));
                }
                _ => return None,
            };
            Some(call(name, vec![inner.as_ref().clone()]))
        }
        Expr::BinaryOp { left, op, right } if *op != BinaryOperator::Overlaps => {
            let (Some(l), Some(r)) = (row_fields(left), row_fields(right)) else {
                return None;
            };
            if l.len() != r.len() || l.is_empty() {
                return None;
            }
            row_comparison(&l, op, &r)
        }
        // `(a, b) IN ((c, d), ...)` is the OR of the rows' equalities, each
        // with SQL's NULLs.
        Expr::InList {
            expr: x,
            list,
            negated,
        } => {
            let l = row_fields(x)?;
            let equal: Vec<Expr> = list
                .iter()
                .map(|item| {
                    let r = row_fields(item).filter(|r| r.len() == l.len() && !r.is_empty())?;
                    row_comparison(&l, &BinaryOperator::Eq, &r)
                })
                .collect::<Option<_>>()?;
            let any = equal
                .into_iter()
                .reduce(|acc, e| binary(acc, BinaryOperator::Or, e))?;
            let any = Expr::Nested(Box::new(any));
            Some(if *negated {
                Expr::UnaryOp {
                    op: UnaryOperator::Not,
                    expr: Box::new(any),
                }
            } else {
                any
            })
        }
        // `(a, b) IN (SELECT c, d ...)`: true where a row equals, NULL
        // where one may (a NULL field decides), false otherwise.
        Expr::InSubquery {
            expr: x,
            subquery,
            negated,
        } => {
            let l = row_fields(x).filter(|l| l.len() > 1)?;
            let columns: Vec<String> = (1..=l.len()).map(|i| format!("__sluice_in_{i}")).collect();
            let equal: Vec<String> = l
                .iter()
                .zip(&columns)
                .map(|(e, c)| format!("__sluice_in.{c} = ({e})"))
                .collect();
            let rows = format!(
                "SELECT 1 FROM ({subquery}) AS __sluice_in({})",
                columns.join(", ")
            );
            let found = format!(
                "CASE WHEN EXISTS ({rows} WHERE ({equal}) IS TRUE) THEN true \
                 WHEN EXISTS ({rows} WHERE ({equal}) IS NULL) THEN NULL ELSE false END",
                equal = equal.join(" AND ")
            );
            let found = sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
                .try_with_sql(&found)
                .and_then(|mut p| p.parse_expr())
                .ok()?;
            let found = Expr::Nested(Box::new(found));
            Some(if *negated {
                Expr::UnaryOp {
                    op: UnaryOperator::Not,
                    expr: Box::new(found),
                }
            } else {
                found
            })
        }
        // `x = ANY (array)` is `NOT (x <> ALL (array))`: the planner's
        // `<> ALL` has SQL's NULLs (a NULL element that could match makes
        // it unknown), its `= ANY` does not (false).
        Expr::AnyOp {
            left,
            compare_op: BinaryOperator::Eq,
            right,
            ..
        } if !is_subquery(right) => Some(Expr::Nested(Box::new(Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(Expr::Nested(Box::new(Expr::AllOp {
                left: left.clone(),
                compare_op: BinaryOperator::NotEq,
                right: right.clone(),
            }))),
        }))),
        Expr::Between {
            expr: x,
            negated,
            low,
            high,
        } => {
            let Expr::Function(f) = low.as_ref() else {
                return None;
            };
            if f.name.to_string() != crate::token_syntax::SYMMETRIC_MARK {
                return None;
            }
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            let [FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(a))] =
                list.args.as_slice()
            else {
                return None;
            };
            let between = |lo: &Expr, hi: &Expr| Expr::Between {
                expr: x.clone(),
                negated: false,
                low: Box::new(lo.clone()),
                high: hi.clone().into(),
            };
            let either = Expr::Nested(Box::new(binary(
                between(a, high),
                BinaryOperator::Or,
                between(high, a),
            )));
            Some(if *negated {
                Expr::UnaryOp {
                    op: UnaryOperator::Not,
                    expr: Box::new(either),
                }
            } else {
                either
            })
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Overlaps,
            right,
        } => {
            let (Expr::Tuple(l), Expr::Tuple(r)) = (left.as_ref(), right.as_ref()) else {
                return None;
            };
            let ([s1, e1], [s2, e2]) = (l.as_slice(), r.as_slice()) else {
                return None;
            };
            // Each period from its earlier end to its later one; they
            // overlap when each starts before the other ends, or both
            // start at once.
            let (s1, e1) = (
                call("least", vec![s1.clone(), e1.clone()]),
                call("greatest", vec![s1.clone(), e1.clone()]),
            );
            let (s2, e2) = (
                call("least", vec![s2.clone(), e2.clone()]),
                call("greatest", vec![s2.clone(), e2.clone()]),
            );
            Some(Expr::Nested(Box::new(binary(
                Expr::Nested(Box::new(binary(
                    binary(s1.clone(), BinaryOperator::Lt, e2),
                    BinaryOperator::And,
                    binary(s2.clone(), BinaryOperator::Lt, e1),
                ))),
                BinaryOperator::Or,
                binary(s1, BinaryOperator::Eq, s2),
            ))))
        }
        Expr::Function(f) => json_aggregate(f)
            .or_else(|| renamed_function(f))
            .or_else(|| array_cat_operator(f))
            .or_else(|| row_constructor(f))
            .or_else(|| named_make_interval(f))
            .or_else(|| distinct_in_order(f)),
        Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if too_large_for_numeric(n)) => {
            let Value::Number(n, _) = &v.value else {
                return None;
            };
            Some(Expr::Cast {
                kind: sqlparser::ast::CastKind::DoubleColon,
                expr: Box::new(Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(
                    n.clone(),
                )))),
                data_type: sqlparser::ast::DataType::DoublePrecision,
                array: false,
                format: None,
            })
        }
        Expr::SimilarTo {
            negated,
            expr: inner,
            pattern,
            escape_char,
        } => {
            let Expr::Value(v) = pattern.as_ref() else {
                return None;
            };
            let Value::SingleQuotedString(p) = &v.value else {
                return None;
            };
            let escape = match escape_char.as_ref().map(|e| &e.value) {
                None => Some('\\'),
                Some(Value::SingleQuotedString(e)) => e.chars().next(),
                Some(_) => return None,
            };
            Some(Expr::BinaryOp {
                left: inner.clone(),
                op: if *negated {
                    BinaryOperator::PGRegexNotMatch
                } else {
                    BinaryOperator::PGRegexMatch
                },
                right: Box::new(Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(
                    similar_to_regex(p, escape),
                )))),
            })
        }
        Expr::Collate {
            expr: inner,
            collation,
        } => {
            let name = collation.to_string().trim_matches('"').to_ascii_lowercase();
            matches!(
                name.as_str(),
                "c" | "posix" | "default" | "ucs_basic" | "c.utf-8" | "c.utf8"
            )
            .then(|| inner.as_ref().clone())
        }
        // `INTERVAL '1.5' MINUTE`, `INTERVAL '...' HOUR TO MINUTE`,
        // `INTERVAL '1.2345' SECOND(2)`: a cast to the interval type with
        // those fields and precision, which keeps only those fields
        // (`query::pg_casts`). A bare number counts in the last field's
        // unit, as PostgreSQL reads it.
        Expr::Interval(i) => {
            let text = match i.value.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(t) => t.clone(),
                    _ => return None,
                },
                _ => return None,
            };
            let name = |f: &Option<sqlparser::ast::DateTimeField>| {
                f.as_ref().map(|f| {
                    f.to_string()
                        .to_ascii_uppercase()
                        .trim_end_matches('S')
                        .to_string()
                })
            };
            let (leading, last) = (name(&i.leading_field), name(&i.last_field));
            use sqlparser::ast::IntervalFields as F;
            let fields = match (leading.as_deref(), last.as_deref()) {
                (None, None) => None,
                (Some("YEAR"), None) => Some(F::Year),
                (Some("MONTH"), None) => Some(F::Month),
                (Some("DAY"), None) => Some(F::Day),
                (Some("HOUR"), None) => Some(F::Hour),
                (Some("MINUTE"), None) => Some(F::Minute),
                (Some("SECOND"), None) => Some(F::Second),
                (Some("YEAR"), Some("MONTH")) => Some(F::YearToMonth),
                (Some("DAY"), Some("HOUR")) => Some(F::DayToHour),
                (Some("DAY"), Some("MINUTE")) => Some(F::DayToMinute),
                (Some("DAY"), Some("SECOND")) => Some(F::DayToSecond),
                (Some("HOUR"), Some("MINUTE")) => Some(F::HourToMinute),
                (Some("HOUR"), Some("SECOND")) => Some(F::HourToSecond),
                (Some("MINUTE"), Some("SECOND")) => Some(F::MinuteToSecond),
                _ => return None,
            };
            let bare_number = text.trim().parse::<f64>().is_ok();
            let text = match (last.as_ref().or(leading.as_ref()), bare_number) {
                (Some(unit), true) => format!("{text} {}", unit.to_ascii_lowercase()),
                _ => text,
            };
            let precision = match (&fields, i.fractional_seconds_precision) {
                (_, Some(p)) => Some(p),
                (Some(F::Second), None) => i.leading_precision,
                _ => None,
            };
            Some(Expr::Cast {
                kind: sqlparser::ast::CastKind::DoubleColon,
                expr: Box::new(Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(
                    text,
                )))),
                data_type: sqlparser::ast::DataType::Interval { fields, precision },
                array: false,
                format: None,
            })
        }
        Expr::Value(v) => match &v.value {
            Value::UnicodeStringLiteral(s) => Some(Expr::Value(ValueWithSpan {
                value: Value::SingleQuotedString(s.clone()),
                span: v.span,
            })),
            _ => None,
        },
        _ => None,
    }
}

/// A RANGE frame's `INTERVAL '1 minute' PRECEDING` (or `'1 minute'::interval`),
/// which the rewrite above made a cast, back to the interval literal
/// DataFusion takes there (a frame offset is a number or an interval
/// literal to it, not a cast).
fn frame_offsets_as_text(frame: &mut sqlparser::ast::WindowFrame) {
    for offset in frame_offsets(frame) {
        if let Expr::Cast {
            expr: inner,
            data_type: sqlparser::ast::DataType::Interval { .. },
            ..
        } = offset.as_ref()
        {
            if matches!(inner.as_ref(), Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)))
            {
                **offset = Expr::Interval(sqlparser::ast::Interval {
                    value: inner.clone(),
                    leading_field: None,
                    leading_precision: None,
                    last_field: None,
                    fractional_seconds_precision: None,
                });
            }
        }
    }
}

/// The offsets of a frame's bounds (`n PRECEDING`, `n FOLLOWING`).
fn frame_offsets(frame: &mut sqlparser::ast::WindowFrame) -> Vec<&mut Box<Expr>> {
    use sqlparser::ast::WindowFrameBound;
    std::iter::once(&mut frame.start_bound)
        .chain(frame.end_bound.as_mut())
        .filter_map(|bound| match bound {
            WindowFrameBound::Preceding(Some(offset))
            | WindowFrameBound::Following(Some(offset)) => Some(offset),
            _ => None,
        })
        .collect()
}

/// More rows than a partition ever holds: a ROWS or GROUPS offset past it
/// frames the same rows as it (DataFusion adds offsets to row numbers, and
/// would overflow near `u64::MAX`).
const FRAME_OFFSET_CAP: u64 = 1 << 40;

/// A ROWS or GROUPS frame's offset is a bigint: one past its range fails
/// with 22003 as in PostgreSQL, and one past [`FRAME_OFFSET_CAP`] is
/// capped there.
fn frame_offsets_in_range(frame: &mut sqlparser::ast::WindowFrame) -> Result<(), crate::SqlError> {
    use sqlparser::ast::WindowFrameUnits;
    if frame.units == WindowFrameUnits::Range {
        return Ok(());
    }
    for offset in frame_offsets(frame) {
        let Expr::Value(v) = offset.as_mut() else {
            continue;
        };
        let Value::Number(n, _) = &mut v.value else {
            continue;
        };
        let Ok(value) = n.parse::<u128>() else {
            continue;
        };
        if value > i64::MAX as u128 {
            return Err(crate::SqlError::OutOfRange("bigint out of range".into()));
        }
        if value > FRAME_OFFSET_CAP as u128 {
            *n = FRAME_OFFSET_CAP.to_string();
        }
    }
    Ok(())
}

/// Whether a numeric literal's exponent takes it past 38 digits.
fn too_large_for_numeric(n: &str) -> bool {
    match n.to_ascii_lowercase().split_once('e') {
        Some((_, exp)) => exp.parse::<i64>().map(|e| e.abs() > 30).unwrap_or(false),
        None => false,
    }
}

/// `make_interval(years => 1, days => 3)` with its arguments in place.
fn named_make_interval(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    if name != "make_interval" {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    const NAMES: [&str; 7] = ["years", "months", "weeks", "days", "hours", "mins", "secs"];
    let mut args: Vec<Option<Expr>> = vec![None; 7];
    let mut named = false;
    for (i, a) in list.args.iter().enumerate() {
        match a {
            FunctionArg::Named {
                name,
                arg: sqlparser::ast::FunctionArgExpr::Expr(e),
                ..
            }
            | FunctionArg::ExprNamed {
                name: Expr::Identifier(name),
                arg: sqlparser::ast::FunctionArgExpr::Expr(e),
                ..
            } => {
                named = true;
                let at = NAMES
                    .iter()
                    .position(|n| name.value.eq_ignore_ascii_case(n))?;
                args[at] = Some(e.clone());
            }
            FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e)) if i < 7 => {
                args[i] = Some(e.clone())
            }
            _ => return None,
        }
    }
    if !named {
        return None;
    }
    let zero = || Expr::Value(ValueWithSpan::from(Value::Number("0".into(), false)));
    Some(call(
        "make_interval",
        args.into_iter().map(|a| a.unwrap_or_else(zero)).collect(),
    ))
}

/// In a `VALUES` list, a quoted literal or NULL beside a value of a
/// stated type (`'{"a":1}'::jsonb`, `DATE '2026-01-01'`) in the same
/// column takes that type, as PostgreSQL resolves the column's type before
/// reading its untyped literals; the planner would otherwise read them as
/// text and refuse the column's mixed types.
/// In an INSERT's VALUES, whose rows each take the target column's type,
/// only a NULL takes its sibling's type (so the column's values agree on
/// it); a quoted literal stays as it is.
fn values_typed_by_their_column(rows: &mut [sqlparser::ast::Parens<Vec<Expr>>], in_insert: bool) {
    let columns = rows.iter().map(|r| r.content.len()).max().unwrap_or(0);
    for c in 0..columns {
        let stated = rows.iter().find_map(|r| match r.content.get(c) {
            Some(Expr::Cast {
                data_type, array, ..
            }) if !*array => Some(data_type.clone()),
            Some(Expr::TypedString(t)) => Some(t.data_type.clone()),
            _ => None,
        });
        let Some(data_type) = stated else { continue };
        for row in rows.iter_mut() {
            let Some(e) = row.content.get_mut(c) else {
                continue;
            };
            let untyped = match e {
                Expr::Value(v) => match v.value {
                    Value::Null => true,
                    Value::SingleQuotedString(_) => !in_insert,
                    _ => false,
                },
                _ => false,
            };
            if untyped {
                *e = Expr::Cast {
                    kind: sqlparser::ast::CastKind::DoubleColon,
                    expr: Box::new(e.clone()),
                    data_type: data_type.clone(),
                    array: false,
                    format: None,
                };
            }
        }
    }
}

/// `array_cat(a, b)` is `a || b` over arrays, which the planner reads as
/// PostgreSQL does (an empty array adds nothing, one of fewer dimensions
/// is an element).
fn array_cat_operator(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    if name != "array_cat" || f.name.0.len() != 1 {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let [FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(a)), FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(b))] =
        list.args.as_slice()
    else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    Some(Expr::Nested(Box::new(binary(
        Expr::Nested(Box::new(a.clone())),
        BinaryOperator::StringConcat,
        Expr::Nested(Box::new(b.clone())),
    ))))
}

/// `ROW(a, b)` names its fields `f1`, `f2`, as PostgreSQL's anonymous
/// records do (`to_jsonb(ROW(1, 2))` is `{"f1": 1, "f2": 2}`); the
/// planner's `row` names them `c0`, `c1`.
fn row_constructor(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    if name != "row" || f.name.0.len() != 1 || f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() || list.args.is_empty() {
        return None;
    }
    let mut args = Vec::with_capacity(list.args.len() * 2);
    for (i, a) in list.args.iter().enumerate() {
        let FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e)) = a else {
            return None;
        };
        args.push(Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(
            format!("f{}", i + 1),
        ))));
        args.push(e.clone());
    }
    Some(call("named_struct", args))
}

/// Aggregates PostgreSQL names otherwise: `every`, `variance`.
fn renamed_function(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    let new = match name.as_str() {
        "every" => "bool_and",
        "variance" => "var_samp",
        // PostgreSQL's remove and replace every occurrence; the planner's
        // functions of these names, the first only.
        "array_remove" => "pg_array_remove",
        "array_replace" => "array_replace_all",
        _ => return None,
    };
    let mut f = f.clone();
    f.name = ObjectName::from(vec![Ident::new(new)]);
    Some(Expr::Function(f))
}

/// PostgreSQL's regular expression for a SIMILAR TO pattern
/// (`similar_escape`): anchored, `%` and `_` as wildcards, the POSIX
/// characters SQL's patterns do not have escaped.
pub fn similar_to_regex(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::from("^(?:");
    let mut chars = pattern.chars();
    let mut in_bracket = false;
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            if let Some(n) = chars.next() {
                if n.is_alphanumeric() {
                    out.push(n);
                } else {
                    out.push('\\');
                    out.push(n);
                }
            }
            continue;
        }
        if in_bracket {
            out.push(c);
            if c == ']' {
                in_bracket = false;
            }
            continue;
        }
        match c {
            '%' => out.push_str(".*"),
            '_' => out.push('.'),
            '[' => {
                in_bracket = true;
                out.push('[');
            }
            '.' | '^' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push_str(")$");
    out
}

/// `json_agg(...)` as `json_agg_of(array_agg(...))`, and so on.
fn json_aggregate(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    if f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let array_agg = |arg: FunctionArg| {
        let mut inner = f.clone();
        inner.name = ObjectName::from(vec![Ident::new("array_agg")]);
        let mut args = FunctionArgumentList {
            duplicate_treatment: list.duplicate_treatment,
            args: vec![arg],
            clauses: list.clauses.clone(),
        };
        order_distinct(&mut args);
        inner.args = FunctionArguments::List(args);
        Expr::Function(inner)
    };
    match (name.as_str(), list.args.as_slice()) {
        // Each value made JSON before it is gathered: a jsonb value (a
        // text cast to jsonb) stays a number or an object. A DISTINCT
        // aggregate gathers the values themselves, in their own order.
        (
            "json_agg" | "jsonb_agg",
            [FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e))],
        ) if list.duplicate_treatment.is_none() => {
            let to_json = match name.as_str() {
                "json_agg" => "to_json",
                _ => "to_jsonb",
            };
            let arg = FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(call(
                to_json,
                vec![e.clone()],
            )));
            Some(call(&format!("{name}_of_json"), vec![array_agg(arg)]))
        }
        ("json_agg" | "jsonb_agg", [arg]) => {
            Some(call(&format!("{name}_of"), vec![array_agg(arg.clone())]))
        }
        ("json_object_agg" | "jsonb_object_agg", [k, v]) => Some(call(
            &format!("{name}_of"),
            vec![array_agg(k.clone()), array_agg(v.clone())],
        )),
        _ => None,
    }
}

/// `array_agg(DISTINCT x)` and `string_agg(DISTINCT x, d)` as
/// `... ORDER BY x`: PostgreSQL sorts a DISTINCT aggregate's input, so its
/// values come out in order (NULL last); DataFusion's come in hash order.
fn distinct_in_order(f: &Function) -> Option<Expr> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    if f.over.is_some() || !matches!(name.as_str(), "array_agg" | "string_agg") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let mut ordered = list.clone();
    if !order_distinct(&mut ordered) {
        return None;
    }
    let mut f = f.clone();
    f.args = FunctionArguments::List(ordered);
    Some(Expr::Function(f))
}

/// Adds `ORDER BY` the first argument to a DISTINCT argument list that has
/// none; whether it did.
fn order_distinct(list: &mut FunctionArgumentList) -> bool {
    use sqlparser::ast::{DuplicateTreatment, FunctionArgumentClause, OrderByExpr, OrderByOptions};
    let ordered = list
        .clauses
        .iter()
        .any(|c| matches!(c, FunctionArgumentClause::OrderBy(_)));
    let first = match list.args.first() {
        Some(FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e))) => e.clone(),
        _ => return false,
    };
    if list.duplicate_treatment != Some(DuplicateTreatment::Distinct) || ordered {
        return false;
    }
    list.clauses
        .push(FunctionArgumentClause::OrderBy(vec![OrderByExpr {
            expr: first,
            options: OrderByOptions {
                asc: None,
                nulls_first: None,
            },
            with_fill: None,
        }]));
    true
}

fn binary(l: Expr, op: BinaryOperator, r: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(l),
        op,
        right: Box::new(r),
    }
}

/// The fields of a row constructor: `(a, b)` or `ROW(a, b)`.
fn row_fields(e: &Expr) -> Option<Vec<Expr>> {
    match e {
        Expr::Tuple(fields) => Some(fields.clone()),
        Expr::Nested(inner) => row_fields(inner),
        Expr::Function(f)
            if f.over.is_none()
                && f.name.0.len() == 1
                && f.name.to_string().eq_ignore_ascii_case("row") =>
        {
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
                return None;
            }
            list.args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e)) => {
                        Some(e.clone())
                    }
                    _ => None,
                })
                .collect()
        }
        // A `ROW(...)` already named as PostgreSQL names its fields
        // (`row_constructor`): `named_struct('f1', a, 'f2', b)`.
        Expr::Function(f)
            if f.over.is_none()
                && f.name.0.len() == 1
                && f.name.to_string().eq_ignore_ascii_case("named_struct") =>
        {
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            let mut fields = Vec::new();
            for (i, pair) in list.args.chunks(2).enumerate() {
                let [FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(Expr::Value(k))), FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(v))] =
                    pair
                else {
                    return None;
                };
                if k.value != Value::SingleQuotedString(format!("f{}", i + 1)) {
                    return None;
                }
                fields.push(v.clone());
            }
            (!fields.is_empty()).then_some(fields)
        }
        _ => None,
    }
}

fn is_subquery(e: &Expr) -> bool {
    match e {
        Expr::Subquery(_) => true,
        Expr::Nested(inner) => is_subquery(inner),
        _ => false,
    }
}

/// `(a, b) op (c, d)` as SQL defines a row comparison.
fn row_comparison(l: &[Expr], op: &BinaryOperator, r: &[Expr]) -> Option<Expr> {
    let pairs = l.iter().cloned().zip(r.iter().cloned());
    let all = |op: BinaryOperator, join: BinaryOperator| {
        pairs
            .clone()
            .map(|(a, b)| binary(a, op.clone(), b))
            .reduce(|acc, e| binary(acc, join.clone(), e))
    };
    let e = match op {
        BinaryOperator::Eq => all(BinaryOperator::Eq, BinaryOperator::And)?,
        BinaryOperator::NotEq => all(BinaryOperator::NotEq, BinaryOperator::Or)?,
        BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq => {
            // Lexicographic: the first pair that differs decides; the last
            // pair takes the operator itself (<= or >= when equal).
            let strict = match op {
                BinaryOperator::Lt | BinaryOperator::LtEq => BinaryOperator::Lt,
                _ => BinaryOperator::Gt,
            };
            let n = l.len();
            let mut e = binary(l[n - 1].clone(), op.clone(), r[n - 1].clone());
            for i in (0..n - 1).rev() {
                e = binary(
                    binary(l[i].clone(), strict.clone(), r[i].clone()),
                    BinaryOperator::Or,
                    Expr::Nested(Box::new(binary(
                        binary(l[i].clone(), BinaryOperator::Eq, r[i].clone()),
                        BinaryOperator::And,
                        Expr::Nested(Box::new(e)),
                    ))),
                );
            }
            e
        }
        _ => return None,
    };
    Some(Expr::Nested(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_one;

    fn rewritten(sql: &str) -> String {
        let mut s = parse_one(sql);
        rewrite_postgres_syntax(&mut s).unwrap();
        s.to_string()
    }

    #[test]
    fn distinct_aggregates_give_their_values_in_order() {
        assert_eq!(
            rewritten("SELECT array_agg(DISTINCT n), string_agg(DISTINCT s, ',') FROM t"),
            "SELECT array_agg(DISTINCT n ORDER BY n), string_agg(DISTINCT s, ',' ORDER BY s) FROM t"
        );
        assert_eq!(
            rewritten("SELECT array_agg(DISTINCT n ORDER BY n DESC), array_agg(n) FROM t"),
            "SELECT array_agg(DISTINCT n ORDER BY n DESC), array_agg(n) FROM t"
        );
        assert_eq!(
            rewritten("SELECT jsonb_agg(DISTINCT a) FROM t"),
            "SELECT jsonb_agg_of(array_agg(DISTINCT a ORDER BY a)) FROM t"
        );
    }

    #[test]
    fn syntax_reads_as_postgresql_reads_it() {
        let mut s = parse_one("SELECT -3 ^ 2");
        rewrite_postgres_syntax(&mut s).unwrap();
        let Statement::Query(q) = &s else { panic!() };
        let sqlparser::ast::SetExpr::Select(sel) = q.body.as_ref() else {
            panic!()
        };
        let sqlparser::ast::SelectItem::UnnamedExpr(Expr::BinaryOp { left, .. }) =
            &sel.projection[0]
        else {
            panic!("{s}")
        };
        assert!(matches!(left.as_ref(), Expr::UnaryOp { .. }));
        assert_eq!(rewritten("SELECT -(3 ^ 2)"), "SELECT -(3 ^ 2)");
        assert_eq!(rewritten("SELECT @ -5, |/ 25"), "SELECT abs(-5), sqrt(25)");
        assert_eq!(
            rewritten("SELECT ~1 + 1 * 2"),
            "SELECT (((1 + 1 * 2)) # -1)"
        );
        assert_eq!(rewritten("SELECT (~1) + 1"), "SELECT (((1) # -1)) + 1");
        assert_eq!(
            rewritten("SELECT ROW(1, 2) < ROW(1, NULL)"),
            "SELECT (1 < 1 OR (1 = 1 AND (2 < NULL)))"
        );
        assert_eq!(
            rewritten("SELECT (1, NULL) IN ((1, 1), (2, 2))"),
            "SELECT ((1 = 1 AND NULL = 1) OR (1 = 2 AND NULL = 2))"
        );
        assert_eq!(
            rewritten("SELECT * FROM t WHERE (a, b) IN (SELECT c, d FROM u)"),
            "SELECT * FROM t WHERE (CASE WHEN EXISTS (SELECT 1 FROM (SELECT c, d FROM u) AS __sluice_in (__sluice_in_1, __sluice_in_2) WHERE (__sluice_in.__sluice_in_1 = (a) AND __sluice_in.__sluice_in_2 = (b)) IS TRUE) THEN true WHEN EXISTS (SELECT 1 FROM (SELECT c, d FROM u) AS __sluice_in (__sluice_in_1, __sluice_in_2) WHERE (__sluice_in.__sluice_in_1 = (a) AND __sluice_in.__sluice_in_2 = (b)) IS NULL) THEN NULL ELSE false END)"
        );
        assert_eq!(
            rewritten("SELECT 1 = ANY(ARRAY[2, NULL])"),
            "SELECT (NOT (1 <> ALL(ARRAY[2, NULL])))"
        );
        assert_eq!(
            rewritten("SELECT 1 = ANY(SELECT k FROM t)"),
            "SELECT 1 = ANY(SELECT k FROM t)"
        );
        assert_eq!(
            rewritten("SELECT (1, NULL) = (1, 2)"),
            "SELECT (1 = 1 AND NULL = 2)"
        );
        assert_eq!(
            rewritten("SELECT (a, b) < (c, d)"),
            "SELECT (a < c OR (a = c AND (b < d)))"
        );
        assert_eq!(
            rewritten("SELECT 'abc' SIMILAR TO 'a%', 'a.c' NOT SIMILAR TO '(a|b)_c'"),
            "SELECT 'abc' ~ '^(?:a.*)$', 'a.c' !~ '^(?:(a|b).c)$'"
        );
        assert_eq!(
            rewritten("SELECT s FROM t ORDER BY s COLLATE \"C\""),
            "SELECT s FROM t ORDER BY s"
        );
        assert_eq!(
            rewritten("SELECT sum(x) OVER (ORDER BY x ROWS BETWEEN 9223372036854775807 FOLLOWING AND UNBOUNDED FOLLOWING) FROM t"),
            "SELECT sum(x) OVER (ORDER BY x ROWS BETWEEN 1099511627776 FOLLOWING AND UNBOUNDED FOLLOWING) FROM t"
        );
        let mut s = parse_one(
            "SELECT sum(x) OVER (ORDER BY x ROWS BETWEEN 18446744073709551615 FOLLOWING AND UNBOUNDED FOLLOWING) FROM t",
        );
        assert_eq!(
            rewrite_postgres_syntax(&mut s).unwrap_err().sqlstate(),
            "22003"
        );
        assert_eq!(
            rewritten("SELECT DISTINCT ON (1) x, y FROM t ORDER BY 1"),
            "SELECT DISTINCT ON (x) x, y FROM t ORDER BY 1"
        );
        assert_eq!(
            rewritten("SELECT count(*) FROM t GROUP BY ()"),
            "SELECT count(*) FROM t"
        );
    }
}
