//! Tells a catalog query (psql's `\d`, a driver's type lookup) from a
//! user's query. The compatibility rules that make catalog queries plan
//! (`datafusion-pg-catalog`'s: scalar subqueries in a projection replaced
//! by NULL or given `LIMIT 1`, `= ANY` rewritten, `COLLATE` dropped) change
//! what a user's query means, so they apply to catalog queries alone.

use std::ops::ControlFlow;

use sqlparser::ast::{DataType, Expr, ObjectName, Statement, TableFactor, Visit, Visitor};

/// Whether `statement` reads PostgreSQL's catalogs: a relation in
/// `pg_catalog` or `information_schema` (or an unqualified `pg_...`
/// one), a cast to an oid alias type (`::regclass`), a function qualified
/// with `pg_catalog.`, or an `OPERATOR(pg_catalog.~)`.
pub fn reads_catalog(statement: &Statement) -> bool {
    let mut finder = CatalogFinder { found: false };
    let _ = statement.visit(&mut finder);
    finder.found
}

struct CatalogFinder {
    found: bool,
}

fn parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
        .collect()
}

fn is_catalog_relation(name: &ObjectName) -> bool {
    match parts(name).as_slice() {
        [.., schema, _] => schema == "pg_catalog" || schema == "information_schema",
        [table] => table.starts_with("pg_"),
        _ => false,
    }
}

fn is_oid_alias(ty: &DataType) -> bool {
    match ty {
        DataType::Regclass => true,
        DataType::Custom(name, _) => matches!(
            parts(name).last().map(String::as_str),
            Some(
                "regclass"
                    | "regtype"
                    | "regproc"
                    | "regprocedure"
                    | "regnamespace"
                    | "regrole"
                    | "regoper"
                    | "regoperator"
                    | "regconfig"
                    | "oid"
            )
        ),
        DataType::Array(inner) => match inner {
            sqlparser::ast::ArrayElemTypeDef::AngleBracket(t)
            | sqlparser::ast::ArrayElemTypeDef::SquareBracket(t, _)
            | sqlparser::ast::ArrayElemTypeDef::Parenthesis(t) => is_oid_alias(t),
            sqlparser::ast::ArrayElemTypeDef::None => false,
        },
        _ => false,
    }
}

impl Visitor for CatalogFinder {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, .. } = factor {
            if is_catalog_relation(name) {
                self.found = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        let found = match expr {
            Expr::Cast { data_type, .. } => is_oid_alias(data_type),
            Expr::Function(f) => {
                let p = parts(&f.name);
                p.len() == 2 && p[0] == "pg_catalog"
            }
            Expr::BinaryOp { op, .. } => {
                matches!(
                    op,
                    sqlparser::ast::BinaryOperator::PGCustomBinaryOperator(_)
                )
            }
            _ => false,
        };
        if found {
            self.found = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_one;

    #[test]
    fn catalog_queries_are_told_from_user_queries() {
        for sql in [
            "SELECT * FROM pg_catalog.pg_class",
            "SELECT relname FROM pg_class",
            "SELECT column_name FROM information_schema.columns",
            "SELECT 't'::regclass",
            "SELECT pg_catalog.format_type(23, -1)",
            "SELECT a FROM t WHERE b OPERATOR(pg_catalog.~) '^x'",
            "SELECT x FROM t WHERE x IN (SELECT oid FROM pg_type)",
        ] {
            assert!(reads_catalog(&parse_one(sql)), "{sql}");
        }
        for sql in [
            "SELECT a, (SELECT max(b) FROM n2 WHERE n2.k = n1.k) FROM n1",
            "SELECT (SELECT k FROM t)",
            "SELECT * FROM t WHERE k = ANY (SELECT k FROM u)",
            "SELECT s COLLATE \"C\" FROM t",
        ] {
            assert!(!reads_catalog(&parse_one(sql)), "{sql}");
        }
    }
}
