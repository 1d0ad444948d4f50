//! Literal keys of a simple query taken out as parameters, so that a
//! point read sent as text (`SELECT * FROM totals WHERE tenant = 'acme'`,
//! as psql and client-side binding drivers send it) can reuse the lookup
//! found for the same text with other keys (`... WHERE tenant = $1`).
//!
//! Only the shape a point read can have is touched: one `SELECT` from one
//! table or view with a WHERE clause and nothing else (no join, GROUP BY,
//! ORDER BY, LIMIT, DISTINCT). Integers, strings and booleans in the
//! WHERE clause become `$1`, `$2`, ... in order; other literals stay.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Query, SetExpr, Value, VisitMut, VisitorMut};

/// A literal taken out of a query, as the SQL text typed it.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyLiteral {
    Integer(i64),
    Text(String),
    Boolean(bool),
}

/// Replaces the WHERE clause's literals of a point-read-shaped query by
/// parameters; returns them in parameter order, or None (and leaves the
/// query as it was) when the query has another shape, a parameter of its
/// own, or no literal to take out.
pub fn parameterize_key_literals(query: &mut Query) -> Option<Vec<KeyLiteral>> {
    if query.with.is_some()
        || query.order_by.is_some()
        || query.limit_clause.is_some()
        || query.fetch.is_some()
        || !query.locks.is_empty()
    {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let plain = select.distinct.is_none()
        && select.from.len() == 1
        && select.from[0].joins.is_empty()
        && matches!(
            &select.group_by,
            sqlparser::ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty()
        )
        && select.having.is_none()
        && select.named_window.is_empty()
        && select.qualify.is_none();
    if !plain {
        return None;
    }
    let selection = select.selection.as_mut()?;
    let mut taker = Taker::default();
    let _ = selection.visit(&mut taker);
    if taker.has_placeholder || taker.taken.is_empty() {
        return None;
    }
    // The literals go out in the order they were met, numbered so.
    let _ = selection.visit(&mut Replacer { next: 0 });
    Some(taker.taken)
}

#[derive(Default)]
struct Taker {
    taken: Vec<KeyLiteral>,
    has_placeholder: bool,
}

fn key_literal(value: &Value) -> Option<KeyLiteral> {
    match value {
        Value::Number(n, false) => n.parse().ok().map(KeyLiteral::Integer),
        Value::SingleQuotedString(s) => Some(KeyLiteral::Text(s.clone())),
        Value::Boolean(b) => Some(KeyLiteral::Boolean(*b)),
        _ => None,
    }
}

impl VisitorMut for Taker {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Value(v) = expr {
            match &v.value {
                Value::Placeholder(_) => self.has_placeholder = true,
                value => self.taken.extend(key_literal(value)),
            }
        }
        ControlFlow::Continue(())
    }
}

struct Replacer {
    next: usize,
}

impl VisitorMut for Replacer {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Value(v) = expr {
            if key_literal(&v.value).is_some() {
                self.next += 1;
                v.value = Value::Placeholder(format!("${}", self.next));
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn query(sql: &str) -> Query {
        match Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
        {
            sqlparser::ast::Statement::Query(q) => *q,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn takes_the_where_clauses_literals_out() {
        let mut q = query("SELECT a, b FROM v WHERE k = 'acme' AND 5 = n AND f = true AND x = 1.5");
        let taken = parameterize_key_literals(&mut q).unwrap();
        assert_eq!(
            taken,
            [
                KeyLiteral::Text("acme".into()),
                KeyLiteral::Integer(5),
                KeyLiteral::Boolean(true)
            ]
        );
        assert_eq!(
            q.to_string(),
            "SELECT a, b FROM v WHERE k = $1 AND $2 = n AND f = $3 AND x = 1.5"
        );
    }

    #[test]
    fn leaves_other_shapes_alone() {
        for sql in [
            "SELECT * FROM v WHERE k = $1",
            "SELECT * FROM v",
            "SELECT * FROM v WHERE k = 1 LIMIT 1",
            "SELECT * FROM v WHERE k = 1 ORDER BY k",
            "SELECT k, count(*) FROM v WHERE k = 1 GROUP BY k",
            "SELECT * FROM v JOIN w ON v.k = w.k WHERE v.k = 1",
            "SELECT * FROM v, w WHERE v.k = 1",
            "SELECT DISTINCT k FROM v WHERE k = 1",
            "SELECT * FROM v WHERE k = 1.5",
            "WITH x AS (SELECT 1) SELECT * FROM v WHERE k = 1",
        ] {
            let mut q = query(sql);
            let before = q.to_string();
            assert_eq!(parameterize_key_literals(&mut q), None, "{sql}");
            assert_eq!(q.to_string(), before);
        }
    }
}
