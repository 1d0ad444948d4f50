//! `FROM f(...) WITH ORDINALITY`: the function's rows numbered from 1 in
//! the order it returns them, in a last column named `ordinality` (or as
//! the alias list names it), as PostgreSQL gives them.
//!
//! DataFusion reads the clause and drops it (a table function's rows come
//! back without the column), or refuses it for `unnest`. A call whose
//! arguments are constants becomes a derived table numbering the rows
//! with `row_number() OVER ()` (the call's rows come from one partition,
//! in order). A call reading other relations' columns (a lateral call) is
//! refused with 0A000 rather than answered without its numbers.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Ident, Query, Statement, TableAlias, TableFactor, Visit,
    VisitMut, Visitor, VisitorMut,
};

use crate::error::SqlError;

/// Rewrites `statement` as the module header says.
pub fn rewrite_ordinality(statement: &mut Statement) -> Result<(), SqlError> {
    let mut rewriter = Ordinality { refused: None };
    let _ = statement.visit(&mut rewriter);
    match rewriter.refused {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Ordinality {
    refused: Option<SqlError>,
}

impl VisitorMut for Ordinality {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let (function, alias, args) = match factor {
            TableFactor::Table {
                name,
                alias,
                args: Some(args),
                with_ordinality: true,
                ..
            } => {
                let function = last_name(name);
                let args: Vec<Expr> = args
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                        _ => None,
                    })
                    .collect();
                (function, alias.clone(), args)
            }
            TableFactor::UNNEST {
                alias,
                array_exprs,
                with_ordinality: true,
                with_offset: false,
                ..
            } => ("unnest".to_string(), alias.clone(), array_exprs.clone()),
            _ => return ControlFlow::Continue(()),
        };
        if args.iter().any(reads_columns) {
            self.refused = Some(SqlError::Unsupported(format!(
                "WITH ORDINALITY over {function}() of other relations' columns is not supported"
            )));
            return ControlFlow::Break(());
        }
        // A one-column function takes the table alias as its column's
        // name; an alias list names the function's columns, then the
        // number.
        let inner_alias = alias
            .as_ref()
            .filter(|a| a.columns.is_empty())
            .map(|a| a.name.to_string())
            .unwrap_or_else(|| function.clone());
        let call = format!(
            "{function}({})",
            args.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let sql =
            format!("SELECT *, row_number() OVER () AS ordinality FROM {call} AS {inner_alias}");
        let Some(subquery) = crate::set_returning::parse_query(&sql) else {
            return ControlFlow::Continue(());
        };
        *factor = TableFactor::Derived {
            lateral: false,
            subquery,
            alias: Some(alias.unwrap_or(TableAlias {
                explicit: true,
                name: Ident::new(function),
                columns: vec![],
                at: None,
            })),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

fn last_name(name: &sqlparser::ast::ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_lowercase())
        .unwrap_or_default()
}

/// Whether `e` names a column (of a relation beside the call).
fn reads_columns(e: &Expr) -> bool {
    struct Columns(bool);
    impl Visitor for Columns {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            // A subquery's own columns are its own.
            ControlFlow::Continue(())
        }
    }
    let mut v = Columns(false);
    let _ = e.visit(&mut v);
    v.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> Result<String, SqlError> {
        let mut s = crate::parse_one(sql);
        rewrite_ordinality(&mut s)?;
        Ok(s.to_string())
    }

    #[test]
    fn constant_calls_number_their_rows_and_lateral_ones_are_refused() {
        assert_eq!(
            rewritten("SELECT * FROM generate_series(2, 4) WITH ORDINALITY").unwrap(),
            "SELECT * FROM (SELECT *, row_number() OVER () AS ordinality FROM generate_series(2, 4) AS generate_series) AS generate_series"
        );
        assert_eq!(
            rewritten("SELECT * FROM generate_series(2, 4) WITH ORDINALITY AS g(v, n)").unwrap(),
            "SELECT * FROM (SELECT *, row_number() OVER () AS ordinality FROM generate_series(2, 4) AS generate_series) AS g (v, n)"
        );
        assert_eq!(
            rewritten("SELECT * FROM unnest(ARRAY[10, 20]) WITH ORDINALITY AS u").unwrap(),
            "SELECT * FROM (SELECT *, row_number() OVER () AS ordinality FROM UNNEST(ARRAY[10, 20]) AS u) AS u"
        );
        assert_eq!(
            rewritten("SELECT * FROM t, unnest(t.a) WITH ORDINALITY")
                .unwrap_err()
                .sqlstate(),
            "0A000"
        );
        assert_eq!(
            rewritten("SELECT * FROM generate_series(1, 2)").unwrap(),
            "SELECT * FROM generate_series(1, 2)"
        );
    }
}
