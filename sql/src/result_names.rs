//! The names PostgreSQL gives a query's result columns, and room for the
//! columns whose names repeat.
//!
//! DataFusion names an unaliased column after its whole expression
//! (`count(*)`, `Int64(1)`, `t.id + Int64(1)`), where PostgreSQL names it
//! after a column or function in it, or `?column?` (its `FigureColname`):
//! a driver that reads rows by column name (psycopg's dict rows, pandas,
//! SQLAlchemy) sees PostgreSQL's names. And DataFusion refuses two result
//! columns of one name (`SELECT id, id`, `SELECT count(*), count(*)`),
//! which PostgreSQL allows: a column whose name repeats an earlier one is
//! planned under an alias of its own, and shown under its name.

use std::ops::ControlFlow;

use sqlparser::ast::{
    AccessExpr, DataType, Expr, Ident, Query, SelectItem, SetExpr, Statement, TrimWhereField,
    VisitMut, VisitorMut,
};

/// What one item of a SELECT list shows as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultName {
    /// `*` or `t.*`: the columns it expands to keep their names.
    Wildcard,
    /// One column, named as PostgreSQL names it.
    Named(String),
}

/// What an alias made for a repeated name starts with.
const REPEATED_NAME_ALIAS: &str = "__sluice_column_";

/// The alias datafusion-pg-catalog's rewrite gives a column a wildcard of
/// the same SELECT also expands to (`SELECT oid, *` plans as
/// `SELECT oid AS __alias_oid, *`).
const CATALOG_RULE_ALIAS: &str = "__alias_";

/// The names of the result columns of `stmt`, item by item of its SELECT
/// list (the first SELECT of a set operation), when it is a query; every
/// SELECT of a query, or of an `INSERT ... SELECT`, gets unique aliases for
/// items whose names repeat.
pub fn name_result_columns(stmt: &mut Statement) -> Option<Vec<ResultName>> {
    match stmt {
        Statement::Query(query) => {
            let names = first_select_names(query);
            give_repeated_names_aliases(query);
            names
        }
        Statement::Insert(insert) => {
            if let Some(source) = insert.source.as_mut() {
                give_repeated_names_aliases(source);
            }
            None
        }
        _ => None,
    }
}

fn first_select_names(query: &Query) -> Option<Vec<ResultName>> {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => {
                return Some(select.projection.iter().map(item_name).collect());
            }
            SetExpr::Query(q) => body = q.body.as_ref(),
            SetExpr::SetOperation { left, .. } => body = left.as_ref(),
            _ => return None,
        }
    }
}

/// Every SELECT of the query (subqueries too) plans each of its items
/// under a name DataFusion keeps apart from the others: an expression
/// under its PostgreSQL name (DataFusion's own names of two expressions
/// may collide, `CAST('x' AS date)` and `CAST('x' AS timestamp)` both
/// being `Utf8("x")`), and a name that repeats under an alias of its own.
fn give_repeated_names_aliases(query: &mut Query) {
    /// Whether the next query visited is the statement's own (the first).
    struct Aliases {
        top: bool,
    }
    impl VisitorMut for Aliases {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            visit(query.body.as_mut(), std::mem::take(&mut self.top));
            ControlFlow::Continue(())
        }
    }
    fn visit(body: &mut SetExpr, top: bool) {
        match body {
            SetExpr::Select(select) => {
                // A result column named beside `*` may repeat one `*`
                // gives (`SELECT *, id FROM t`): it is kept apart whatever
                // `*` turns out to hold. Only in the result: a subquery's
                // columns are referred to by their names.
                let beside_wildcard = top
                    && select.projection.iter().any(|item| {
                        matches!(
                            item,
                            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
                        )
                    });
                let mut seen: Vec<String> = Vec::new();
                for (i, item) in select.projection.iter_mut().enumerate() {
                    let ResultName::Named(name) = item_name(item) else {
                        continue;
                    };
                    let catalog_alias = matches!(item, SelectItem::ExprWithAlias { alias, .. }
                        if alias.value.starts_with(CATALOG_RULE_ALIAS));
                    let repeated = seen.contains(&name) || (beside_wildcard && !catalog_alias);
                    seen.push(name.clone());
                    let (expr, named) = match item {
                        SelectItem::UnnamedExpr(e) => (
                            e.clone(),
                            matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)),
                        ),
                        SelectItem::ExprWithAlias { expr, .. } => (expr.clone(), true),
                        _ => continue,
                    };
                    let alias = match (repeated, named) {
                        (true, _) => format!("{REPEATED_NAME_ALIAS}{i}"),
                        (false, false) => name,
                        (false, true) => continue,
                    };
                    *item = SelectItem::ExprWithAlias {
                        expr,
                        alias: Ident::with_quote('"', alias),
                    };
                }
            }
            SetExpr::Query(q) => visit(q.body.as_mut(), top),
            SetExpr::SetOperation { left, right, .. } => {
                visit(left.as_mut(), top);
                visit(right.as_mut(), top);
            }
            _ => {}
        }
    }
    let _ = query.visit(&mut Aliases { top: true });
}

fn item_name(item: &SelectItem) -> ResultName {
    match item {
        SelectItem::UnnamedExpr(e) => ResultName::Named(expr_name(e).0),
        SelectItem::ExprWithAlias { alias, .. } => {
            let name = ident_name(alias);
            let name = match name.strip_prefix(CATALOG_RULE_ALIAS) {
                Some(column) if alias.quote_style.is_none() => column.to_string(),
                _ => name,
            };
            ResultName::Named(name)
        }
        SelectItem::ExprWithAliases { .. }
        | SelectItem::QualifiedWildcard(..)
        | SelectItem::Wildcard(_) => ResultName::Wildcard,
    }
}

/// An identifier as DataFusion and PostgreSQL read it: folded to lower
/// case unless quoted.
fn ident_name(i: &Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    }
}

const UNNAMED: &str = "?column?";

/// PostgreSQL's name for an expression's column and how strongly it
/// holds (2: a column or function name; 1: a keyword such as `case`, which
/// a cast's type name overrides; 0: `?column?`).
fn expr_name(e: &Expr) -> (String, u8) {
    let keyword = |k: &str| (k.to_string(), 1);
    match e {
        Expr::Identifier(i) => (ident_name(i), 2),
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(i) => (ident_name(i), 2),
            None => (UNNAMED.into(), 0),
        },
        Expr::CompoundFieldAccess { root, access_chain } => {
            // `(row).field` names the field; `a[1]` names `a`.
            match access_chain.iter().rev().find_map(|a| match a {
                AccessExpr::Dot(Expr::Identifier(i)) => Some(ident_name(i)),
                _ => None,
            }) {
                Some(field) => (field, 2),
                None => expr_name(root),
            }
        }
        Expr::Function(f) => match f.name.0.last().and_then(|p| p.as_ident()) {
            Some(i) => (ident_name(i), 2),
            None => (UNNAMED.into(), 0),
        },
        Expr::Nested(inner) | Expr::Collate { expr: inner, .. } => expr_name(inner),
        Expr::Cast {
            expr, data_type, ..
        } => {
            let (name, strength) = expr_name(expr);
            if strength <= 1 {
                (type_name(data_type), 1)
            } else {
                (name, strength)
            }
        }
        Expr::TypedString(t) => (type_name(&t.data_type), 1),
        Expr::Interval(_) => keyword("interval"),
        // A CASE is named after its ELSE result when that has a name.
        Expr::Case {
            else_result: Some(e),
            ..
        } if expr_name(e).1 == 2 => expr_name(e),
        Expr::Case { .. } => keyword("case"),
        Expr::Exists { .. } => keyword("exists"),
        Expr::Array(_) => keyword("array"),
        Expr::Tuple(_) => keyword("row"),
        Expr::Extract { .. } => ("extract".into(), 2),
        Expr::Substring {
            shorthand: true, ..
        } => ("substr".into(), 2),
        Expr::Substring { .. } => ("substring".into(), 2),
        Expr::Position { .. } => ("position".into(), 2),
        Expr::Overlay { .. } => ("overlay".into(), 2),
        Expr::Ceil { .. } => ("ceil".into(), 2),
        Expr::Floor { .. } => ("floor".into(), 2),
        Expr::AtTimeZone { .. } => ("timezone".into(), 2),
        Expr::Trim { trim_where, .. } => (
            match trim_where {
                Some(TrimWhereField::Leading) => "ltrim",
                Some(TrimWhereField::Trailing) => "rtrim",
                _ => "btrim",
            }
            .into(),
            2,
        ),
        Expr::Subquery(q) => match first_select_names(q).as_deref() {
            Some([ResultName::Named(name)]) if name != UNNAMED => (name.clone(), 2),
            _ => (UNNAMED.into(), 0),
        },
        _ => (UNNAMED.into(), 0),
    }
}

/// The name PostgreSQL shows for a type in a cast's column (`int4`, not
/// `integer`).
fn type_name(t: &DataType) -> String {
    let text = t.to_string().to_lowercase();
    let base = text
        .split(['(', '['])
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let known = match base.as_str() {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double" | "double precision" | "float" | "float8" => "float8",
        "boolean" | "bool" => "bool",
        "varchar" | "character varying" => "varchar",
        "char" | "character" | "bpchar" => "bpchar",
        "numeric" | "decimal" | "dec" => "numeric",
        "timestamp with time zone" | "timestamptz" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "time" | "time without time zone" => "time",
        _ if base.starts_with("interval") => "interval",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    match base.rsplit('.').next() {
        Some(last) if !last.is_empty() => last.trim_matches('"').to_string(),
        _ => UNNAMED.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_one;

    fn names(sql: &str) -> (Vec<String>, String) {
        let mut stmt = parse_one(sql);
        let names = name_result_columns(&mut stmt)
            .unwrap_or_default()
            .into_iter()
            .map(|n| match n {
                ResultName::Wildcard => "*".to_string(),
                ResultName::Named(n) => n,
            })
            .collect();
        (names, stmt.to_string())
    }

    #[test]
    fn columns_are_named_as_postgresql_names_them() {
        let (n, _) = names(
            "SELECT id, t.value, count(*), sum(x) AS Total, \"Q\", 1, id + 1, \
             upper(v), CAST(v AS text), 1::int, '1'::bigint, CASE WHEN a THEN 1 END, \
             CASE WHEN a THEN 1 END::text, true::bool, DATE '2026-01-01', \
             extract(year FROM ts), trim(v), pg_catalog.lower(v), (SELECT max(x) FROM u), \
             EXISTS (SELECT 1), a[1], now() AT TIME ZONE 'UTC', (id), \
             CASE WHEN a THEN 1 ELSE lower(v) END, CASE WHEN a THEN v ELSE 'x' END, *, t.* FROM t",
        );
        assert_eq!(
            n,
            [
                "id", "value", "count", "total", "Q", "?column?", "?column?", "upper", "v", "int4",
                "int8", "case", "text", "bool", "date", "extract", "btrim", "lower", "max",
                "exists", "a", "timezone", "id", "lower", "case", "*", "*"
            ]
        );
    }

    #[test]
    fn repeated_names_get_aliases_of_their_own() {
        let (n, sql) = names("SELECT id, id, count(*), count(*) AS count, 1 AS a FROM t");
        assert_eq!(n, ["id", "id", "count", "count", "a"]);
        assert_eq!(
            sql,
            "SELECT id, id AS \"__sluice_column_1\", count(*) AS \"count\", \
             count(*) AS \"__sluice_column_3\", 1 AS a FROM t"
        );
    }

    #[test]
    fn a_column_beside_a_wildcard_is_kept_apart() {
        let (n, sql) = names("SELECT *, id FROM t");
        assert_eq!(n, ["*", "id"]);
        assert_eq!(sql, "SELECT *, id AS \"__sluice_column_1\" FROM t");
        // A subquery's columns keep the names the query refers to.
        let (_, sql) = names("SELECT x FROM (SELECT *, x FROM t) q");
        assert_eq!(sql, "SELECT x FROM (SELECT *, x FROM t) q");
    }

    #[test]
    fn a_set_operation_is_named_by_its_first_select() {
        let (n, sql) = names("SELECT 1 AS a, 2 AS a UNION ALL SELECT x, x FROM t");
        assert_eq!(n, ["a", "a"]);
        assert!(sql.contains("2 AS \"__sluice_column_1\""), "{sql}");
        assert!(sql.contains("x AS \"__sluice_column_1\""), "{sql}");
    }

    #[test]
    fn an_insert_select_gets_aliases_and_no_names() {
        let mut stmt = parse_one("INSERT INTO t SELECT v, CAST(v AS text) FROM u");
        assert_eq!(name_result_columns(&mut stmt), None);
        assert!(stmt.to_string().contains("AS \"__sluice_column_1\""));
    }

    #[test]
    fn the_catalog_rules_alias_shows_the_column() {
        let (n, sql) = names("SELECT oid AS __alias_oid, * FROM pg_namespace");
        assert_eq!(n, ["oid", "*"]);
        assert!(!sql.contains("__sluice_column"), "{sql}");
    }
}
