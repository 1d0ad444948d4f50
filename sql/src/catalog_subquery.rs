//! Catalog queries of drivers (SQLAlchemy's column reflection) select a
//! column's default or identity with a correlated scalar subquery over
//! `pg_catalog` (`(SELECT pg_get_expr(...) FROM pg_attrdef WHERE ...)`).
//! DataFusion plans a correlated scalar subquery only when it is
//! aggregated, and not at all inside CASE. So:
//! - a subquery that reads only catalogs Sluice keeps empty (`pg_attrdef`:
//!   no column has a default; `pg_sequence`: there are no sequences) is
//!   NULL, which is what it returns;
//! - another catalog subquery returns at most one row, so its one
//!   selected value is wrapped in `max()`, which keeps the answer.
//!
//! Only subqueries that read `pg_catalog` tables alone are rewritten: a
//! user's query keeps PostgreSQL's meaning.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Query, SelectItem, SetExpr, Statement, TableFactor, VisitMut, VisitorMut,
};

const AGGREGATES: [&str; 10] = [
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "json_agg",
];

/// Catalogs that hold no rows in Sluice.
const EMPTY_CATALOGS: [&str; 2] = ["pg_attrdef", "pg_sequence"];

struct CatalogSubqueries;

/// The tables a subquery reads, when it reads only `pg_catalog` tables.
fn catalog_tables(query: &Query) -> Option<Vec<String>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let mut tables = Vec::new();
    for t in &select.from {
        for r in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            let TableFactor::Table { name, .. } = r else {
                return None;
            };
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
                .collect();
            match parts.as_slice() {
                [schema, table] if schema == "pg_catalog" => tables.push(table.clone()),
                [table] if table.starts_with("pg_") => tables.push(table.clone()),
                _ => return None,
            }
        }
    }
    (!tables.is_empty()).then_some(tables)
}

/// `ARRAY(SELECT ... FROM unnest(c.reloptions) x)` (psql's `\d+`): no
/// relation has options (`reloptions` is NULL in every `pg_class` row),
/// so the array is empty. DataFusion cannot plan a subquery reading an
/// outer column through `unnest`.
fn unnests_options(expr: &Expr) -> bool {
    let Expr::Function(f) = expr else {
        return false;
    };
    let sqlparser::ast::FunctionArguments::Subquery(query) = &f.args else {
        return false;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let [from] = select.from.as_slice() else {
        return false;
    };
    let array = match &from.relation {
        TableFactor::UNNEST { array_exprs, .. } => array_exprs.first(),
        TableFactor::Table {
            name,
            args: Some(args),
            ..
        } if name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("unnest")) =>
        {
            match args.args.first() {
                Some(sqlparser::ast::FunctionArg::Unnamed(
                    sqlparser::ast::FunctionArgExpr::Expr(e),
                )) => Some(e),
                _ => None,
            }
        }
        _ => None,
    };
    let column = match array {
        Some(Expr::CompoundIdentifier(parts)) => parts.last(),
        Some(Expr::Identifier(i)) => Some(i),
        _ => None,
    };
    column.is_some_and(|c| c.value.eq_ignore_ascii_case("reloptions"))
}

fn is_aggregate(e: &Expr) -> bool {
    match e {
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| AGGREGATES.contains(&i.value.to_lowercase().as_str())),
        _ => false,
    }
}

fn max_of(e: Expr) -> Expr {
    crate::set_returning::call("max", vec![e])
}

impl VisitorMut for CatalogSubqueries {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if unnests_options(expr) {
            *expr = crate::set_returning::call("make_array", vec![]);
            return ControlFlow::Continue(());
        }
        let Expr::Subquery(query) = expr else {
            return ControlFlow::Continue(());
        };
        let Some(tables) = catalog_tables(query) else {
            return ControlFlow::Continue(());
        };
        if tables.iter().all(|t| EMPTY_CATALOGS.contains(&t.as_str())) {
            *expr = Expr::Value(sqlparser::ast::Value::Null.into());
            return ControlFlow::Continue(());
        }
        if query.limit_clause.is_some() {
            return ControlFlow::Continue(());
        }
        let SetExpr::Select(select) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let grouped = !matches!(
            &select.group_by,
            sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty()
        );
        if grouped || select.projection.len() != 1 {
            return ControlFlow::Continue(());
        }
        let item = &mut select.projection[0];
        let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item else {
            return ControlFlow::Continue(());
        };
        if !is_aggregate(e) {
            *e = max_of(e.clone());
        }
        ControlFlow::Continue(())
    }
}

/// Whether DataFusion plans a subquery once its value is aggregated: one
/// table, filtered by equalities alone (psql's lookups over two catalogs
/// with an inequality are not, and stay NULL, as the rules make them).
fn decorrelates(query: &Query) -> bool {
    fn equalities(e: &Expr) -> bool {
        match e {
            Expr::BinaryOp {
                left,
                op: sqlparser::ast::BinaryOperator::And,
                right,
            } => equalities(left) && equalities(right),
            Expr::BinaryOp {
                op: sqlparser::ast::BinaryOperator::Eq,
                ..
            } => true,
            Expr::Nested(e) => equalities(e),
            _ => false,
        }
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    matches!(select.from.as_slice(), [t] if t.joins.is_empty())
        && select.selection.as_ref().is_none_or(equalities)
}

/// Puts each scalar subquery that is a whole item of a select list in
/// parentheses (`((SELECT ...))`, the same expression): the compatibility
/// rules of datafusion-pg-catalog replace such an item by NULL when it is
/// correlated, and give it `LIMIT 1`, which DataFusion cannot decorrelate,
/// when they cannot tell. [`rewrite_catalog_subqueries`] makes them plan.
/// Only subqueries DataFusion can then plan are kept ([`decorrelates`]).
/// True when there was one.
pub fn protect_projection_subqueries(statement: &mut Statement) -> bool {
    struct Protect(bool);
    impl VisitorMut for Protect {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) =
                        item
                    else {
                        continue;
                    };
                    if matches!(e, Expr::Subquery(q) if decorrelates(q)) {
                        *e = Expr::Nested(Box::new(e.clone()));
                        self.0 = true;
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut protect = Protect(false);
    let _ = statement.visit(&mut protect);
    protect.0
}

/// Aggregates the value of correlated scalar subqueries over `pg_catalog`.
pub fn rewrite_catalog_subqueries(statement: &mut Statement) {
    let _ = statement.visit(&mut CatalogSubqueries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut s = crate::parse_one(sql);
        rewrite_catalog_subqueries(&mut s);
        s.to_string()
    }

    #[test]
    fn the_options_of_a_relation_are_none() {
        assert_eq!(
            rewritten("SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c"),
            "SELECT pg_catalog.array_to_string(c.reloptions || make_array(), ', ') FROM pg_catalog.pg_class c"
        );
    }

    #[test]
    fn only_plannable_select_list_subqueries_are_kept_from_the_rules() {
        let mut s = crate::parse_one(
            "SELECT (SELECT nspname FROM pg_namespace WHERE oid = pronamespace), \
             (SELECT c.collname FROM pg_collation c, pg_type t WHERE c.oid = a.x AND t.oid <> a.y) \
             FROM pg_proc",
        );
        assert!(protect_projection_subqueries(&mut s));
        assert_eq!(
            s.to_string(),
            "SELECT ((SELECT nspname FROM pg_namespace WHERE oid = pronamespace)), \
             (SELECT c.collname FROM pg_collation c, pg_type t WHERE c.oid = a.x AND t.oid <> a.y) \
             FROM pg_proc"
        );
    }

    #[test]
    fn only_catalog_subqueries_are_aggregated() {
        assert_eq!(
            rewritten("SELECT a.attname, CASE WHEN a.atthasdef THEN (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef d WHERE d.adnum = a.attnum) END AS def FROM pg_catalog.pg_attribute a"),
            "SELECT a.attname, CASE WHEN a.atthasdef THEN NULL END AS def FROM pg_catalog.pg_attribute a"
        );
        assert_eq!(
            rewritten("SELECT (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = a.attrelid) FROM pg_catalog.pg_attribute a"),
            "SELECT (SELECT max(c.relname) FROM pg_catalog.pg_class c WHERE c.oid = a.attrelid) FROM pg_catalog.pg_attribute a"
        );
        for kept in [
            "SELECT (SELECT x FROM t WHERE t.k = u.k) FROM u",
            "SELECT (SELECT count(*) FROM pg_class c WHERE c.oid = a.attrelid) FROM pg_attribute a",
        ] {
            let mut s = crate::parse_one(kept);
            let before = s.to_string();
            rewrite_catalog_subqueries(&mut s);
            assert_eq!(s.to_string(), before);
        }
    }
}
