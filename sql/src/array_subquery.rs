//! `ARRAY(subquery)`: an array of the subquery's one column, in the
//! subquery's order, and `{}` (not NULL) when it returns no rows. psql's
//! `\d+` sends it (`array(select 'toast.' || x from unnest(tc.reloptions)
//! x)`), as do catalog queries of other tools.
//!
//! DataFusion has no such constructor; the subquery becomes a scalar
//! subquery aggregating its column with `array_agg`, ordered by the
//! subquery's `ORDER BY`, and an empty result becomes an empty array. A
//! subquery that groups, is distinct, or has a LIMIT is aggregated from
//! outside (`SELECT array_agg(v) FROM (subquery) AS s(v)`).

use sqlparser::ast::{
    Expr, FunctionArguments, LimitClause, OrderByKind, Query, SelectItem, SetExpr,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// `expr` rewritten when it is `ARRAY(subquery)`.
pub(crate) fn array_of_subquery(expr: &Expr) -> Option<Expr> {
    let Expr::Function(f) = expr else {
        return None;
    };
    let FunctionArguments::Subquery(query) = &f.args else {
        return None;
    };
    let is_array = f.name.0.len() == 1
        && f.name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("array"));
    if !is_array {
        return None;
    }
    let aggregated = aggregate_inside(query).unwrap_or_else(|| aggregate_outside(query));
    parse_expr(&format!("coalesce(({aggregated}), make_array())"))
}

/// The subquery with its one column aggregated in place, when it is a
/// plain SELECT (no grouping, DISTINCT or LIMIT).
fn aggregate_inside(query: &Query) -> Option<String> {
    let limited = match &query.limit_clause {
        None => false,
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => limit.is_some() || offset.is_some() || !limit_by.is_empty(),
        Some(_) => true,
    };
    if limited || query.fetch.is_some() || query.with.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let grouped = match &select.group_by {
        sqlparser::ast::GroupByExpr::Expressions(e, m) => !e.is_empty() || !m.is_empty(),
        sqlparser::ast::GroupByExpr::All(_) => true,
    };
    if grouped || select.distinct.is_some() || select.having.is_some() {
        return None;
    }
    let [item] = select.projection.as_slice() else {
        return None;
    };
    let value = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return None,
    };
    let order = match query.order_by.as_ref().map(|o| &o.kind) {
        None => String::new(),
        Some(OrderByKind::Expressions(exprs)) if !exprs.is_empty() => {
            let exprs: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
            format!(" ORDER BY {}", exprs.join(", "))
        }
        Some(_) => return None,
    };
    let mut select = select.clone();
    select.projection = vec![SelectItem::UnnamedExpr(parse_expr(&format!(
        "array_agg({value}{order})"
    ))?)];
    Some(select.to_string())
}

fn aggregate_outside(query: &Query) -> String {
    format!("SELECT array_agg(sluice_array.v) FROM ({query}) AS sluice_array (v)")
}

fn parse_expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .ok()?
        .parse_expr()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::{Statement, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    struct Arrays;
    impl VisitorMut for Arrays {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Some(e) = array_of_subquery(expr) {
                *expr = e;
            }
            ControlFlow::Continue(())
        }
    }

    fn rewritten(sql: &str) -> String {
        let mut s: Vec<Statement> = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let _ = s[0].visit(&mut Arrays);
        s[0].to_string()
    }

    #[test]
    fn an_array_of_a_subquery_aggregates_its_column_in_order() {
        assert_eq!(
            rewritten("SELECT array(SELECT x FROM t WHERE y > 1 ORDER BY y DESC)"),
            "SELECT coalesce((SELECT array_agg(x ORDER BY y DESC) FROM t WHERE y > 1), make_array())"
        );
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT DISTINCT x FROM t)"),
            "SELECT coalesce((SELECT array_agg(sluice_array.v) FROM (SELECT DISTINCT x FROM t) AS sluice_array (v)), make_array())"
        );
        // An array literal and a call of another name stay.
        assert_eq!(rewritten("SELECT ARRAY[1, 2]"), "SELECT ARRAY[1, 2]");
    }
}
