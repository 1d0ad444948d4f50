//! Window table functions. `TUMBLE(t, col, size)` is `date_bin`: it becomes
//! a derived table over `t` with `window_start = date_bin(size, col)` and
//! `window_end = window_start + size`, so the same SQL runs as a batch query
//! over the log and as a view.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Ident, Statement, TableAlias, TableFactor, Value, VisitMut,
    VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::ddl::parse_duration_us;
use crate::error::SqlError;
use crate::parse::ident_name;

/// A `TUMBLE` found in a query: which table and time column it windows,
/// and the window size when it is a plain interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    pub table: String,
    pub column: String,
    pub size_us: Option<i64>,
    /// The slide of a `HOP` (for `TUMBLE`, the size).
    pub slide_us: Option<i64>,
}

/// Replaces every `TUMBLE(...)` in FROM clauses with its derived table, and
/// returns what each one windows.
pub fn rewrite_window_functions(statement: &mut Statement) -> Result<Vec<WindowSpec>, SqlError> {
    let mut v = WindowRewriter {
        error: None,
        specs: Vec::new(),
    };
    let _ = statement.visit(&mut v);
    match v.error {
        Some(e) => Err(e),
        None => Ok(v.specs),
    }
}

struct WindowRewriter {
    error: Option<SqlError>,
    specs: Vec<WindowSpec>,
}

impl VisitorMut for WindowRewriter {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name, alias, args, ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(args) = args else {
            return ControlFlow::Continue(());
        };
        let function = name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(ident_name)
            .unwrap_or_default();
        let result = match function.as_str() {
            "tumble" => tumble(&args.args, alias.clone()).map(|(derived, spec)| {
                self.specs.push(spec);
                derived
            }),
            "hop" => hop(&args.args, alias.clone()).map(|(derived, spec)| {
                self.specs.push(spec);
                derived
            }),
            _ => return ControlFlow::Continue(()),
        };
        match result {
            Ok(derived) => *factor = derived,
            Err(e) => {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

fn arg_text(arg: &FunctionArg) -> Option<String> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.to_string()),
        _ => None,
    }
}

/// The size of `INTERVAL '1 minute'` (or `INTERVAL '1' MINUTE`).
fn interval_us(arg: &FunctionArg) -> Option<i64> {
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Interval(interval))) = arg else {
        return None;
    };
    let Expr::Value(v) = interval.value.as_ref() else {
        return None;
    };
    let Value::SingleQuotedString(text) = &v.value else {
        return None;
    };
    let text = match &interval.leading_field {
        Some(unit) => format!("{text} {unit}"),
        None => text.clone(),
    };
    parse_duration_us(&text).ok().filter(|us| *us > 0)
}

fn tumble(
    args: &[FunctionArg],
    alias: Option<TableAlias>,
) -> Result<(TableFactor, WindowSpec), SqlError> {
    let usage = || SqlError::Syntax("TUMBLE takes (table, time column, INTERVAL size)".into());
    if args.len() != 3 {
        return Err(usage());
    }
    let table = arg_text(&args[0]).ok_or_else(usage)?;
    let column = arg_text(&args[1]).ok_or_else(usage)?;
    let size = arg_text(&args[2]).ok_or_else(usage)?;
    let size_us = interval_us(&args[2]);
    let sql = format!(
        "SELECT *, date_bin({size}, {column}) AS window_start, \
         date_bin({size}, {column}) + {} AS window_end FROM {table}",
        end_offset(&size, size_us)
    );
    windowed_table(&sql, &table, &column, alias, size_us, size_us)
}

/// `HOP(t, col, slide, size)`: each row belongs to every window of `size`
/// starting at a multiple of `slide` in `(col - size, col]`.
fn hop(
    args: &[FunctionArg],
    alias: Option<TableAlias>,
) -> Result<(TableFactor, WindowSpec), SqlError> {
    let usage =
        || SqlError::Syntax("HOP takes (table, time column, INTERVAL slide, INTERVAL size)".into());
    if args.len() != 4 {
        return Err(usage());
    }
    let table = arg_text(&args[0]).ok_or_else(usage)?;
    let column = arg_text(&args[1]).ok_or_else(usage)?;
    let slide = arg_text(&args[2]).ok_or_else(usage)?;
    let size = arg_text(&args[3]).ok_or_else(usage)?;
    let (slide_us, size_us) = (interval_us(&args[2]), interval_us(&args[3]));
    if let (Some(slide), Some(size)) = (slide_us, size_us) {
        if slide > size {
            return Err(SqlError::InvalidOption(
                "HOP slide must not be larger than the window size".into(),
            ));
        }
    }
    // With constant sizes, the window starts come from integer arithmetic
    // (`hop_window_starts`, the server's function) rather than a series
    // over timestamps; both give the same values and type.
    let starts = match (slide_us, size_us) {
        (Some(slide_us), Some(size_us)) => {
            format!("hop_window_starts({column}, {slide_us}, {size_us})")
        }
        _ => format!(
            "generate_series(date_bin({slide}, {column} - {size}) + {slide}, \
             date_bin({slide}, {column}), {slide})"
        ),
    };
    let sql = format!(
        "SELECT *, window_start + {} AS window_end FROM \
         (SELECT *, unnest({starts}) AS window_start FROM {table}) AS hop_windows",
        end_offset(&size, size_us)
    );
    windowed_table(&sql, &table, &column, alias, size_us, slide_us)
}

/// What `window_end` adds to `window_start`: the size as a duration when
/// it has a fixed length, since a timestamp plus a duration is one integer
/// addition per row where a timestamp plus an interval goes through
/// calendar arithmetic per value (two fifths of a TUMBLE view's CPU).
fn end_offset(size: &str, size_us: Option<i64>) -> String {
    match size_us {
        Some(us) => format!("arrow_cast({us}, 'Duration(Microsecond)')"),
        None => size.to_string(),
    }
}

/// The derived table that replaces a window function, named as the window
/// function's alias or else as its table.
fn windowed_table(
    sql: &str,
    table: &str,
    column: &str,
    alias: Option<TableAlias>,
    size_us: Option<i64>,
    slide_us: Option<i64>,
) -> Result<(TableFactor, WindowSpec), SqlError> {
    let subquery = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let alias = alias.unwrap_or(TableAlias {
        explicit: true,
        name: Ident::new(table.rsplit('.').next().unwrap_or(table).trim_matches('"')),
        columns: vec![],
        at: None,
    });
    let spec = WindowSpec {
        table: table.trim_matches('"').to_lowercase(),
        column: column.trim_matches('"').to_lowercase(),
        size_us,
        slide_us,
    };
    Ok((
        TableFactor::Derived {
            lateral: false,
            subquery,
            alias: Some(alias),
            sample: None,
        },
        spec,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumble_becomes_date_bin() {
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT tenant, window_start, SUM(tokens) FROM TUMBLE(usage, event_time, INTERVAL '1 minute') GROUP BY tenant, window_start",
        )
        .unwrap()
        .remove(0);
        let specs = rewrite_window_functions(&mut s).unwrap();
        assert_eq!(
            specs,
            vec![WindowSpec {
                table: "usage".into(),
                column: "event_time".into(),
                size_us: Some(60_000_000),
                slide_us: Some(60_000_000),
            }]
        );
        let text = s.to_string();
        assert!(
            text.contains("FROM (SELECT *, date_bin(INTERVAL '1 minute', event_time) AS window_start, date_bin(INTERVAL '1 minute', event_time) + arrow_cast(60000000, 'Duration(Microsecond)') AS window_end FROM usage) AS usage"),
            "{text}"
        );
    }
}
