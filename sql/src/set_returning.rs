//! PostgreSQL's set-returning catalog functions and composite field access,
//! as drivers use them (JDBC's `getPrimaryKeys` and `getIndexInfo`,
//! SQLAlchemy's key reflection), rewritten into what DataFusion plans:
//! - `information_schema._pg_expandarray(a)` in a select list returns one
//!   `(x, n)` row per element: `unnest(_pg_expandarray(a))`, where the
//!   server's `_pg_expandarray` returns the list of `(x, n)` structs;
//! - `generate_subscripts(a, d)` returns `1..=cardinality(a)` for the
//!   first dimension: `unnest(CASE WHEN d = 1 THEN range(1, cardinality + 1) END)`;
//! - `(expr).field` reads a field of a composite value:
//!   `get_field(expr, 'field')`;
//! - `generate_series(a, b [, step])` returns one row per value, in a
//!   select list as in FROM, and its column is named `generate_series`
//!   (an `integer` when its bounds are integer literals that fit);
//! - `jsonb_array_elements(j)`, `jsonb_array_elements_text(j)`,
//!   `jsonb_object_keys(j)` (and their `json_` twins) return one row per
//!   element or key: `unnest` of the list the server's `..._list`
//!   function gives.
//!
//! DataFusion zips several `unnest`s of one select list row by row, as
//! PostgreSQL does with set-returning functions of equal length.

use std::ops::ControlFlow;

use sqlparser::ast::{
    AccessExpr, BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement, Value, VisitMut, VisitorMut,
};

/// A call of function `name` with `args`.
pub(crate) fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn number(n: i64) -> Expr {
    Expr::Value(Value::Number(n.to_string(), false).into())
}

/// The function's last name part in lower case, and its plain arguments.
fn named_call(e: &Expr) -> Option<(String, Vec<Expr>)> {
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((name, args))
}

struct SetReturning;

impl VisitorMut for SetReturning {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut sqlparser::ast::Query) -> ControlFlow<()> {
        lateral_functions(query);
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(
        &mut self,
        factor: &mut sqlparser::ast::TableFactor,
    ) -> ControlFlow<()> {
        generate_series_relation(factor);
        name_unnest_column(factor);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some((name, mut args)) = named_call(expr) {
            match (name.as_str(), args.len()) {
                (
                    "jsonb_array_elements"
                    | "json_array_elements"
                    | "jsonb_array_elements_text"
                    | "json_array_elements_text"
                    | "jsonb_object_keys"
                    | "json_object_keys",
                    1,
                ) => {
                    let list = format!("{}_list", name.replacen("json_", "jsonb_", 1));
                    // json_array_elements keeps json's type.
                    let list = if name == "json_array_elements" {
                        "json_array_elements_list".to_string()
                    } else {
                        list
                    };
                    let elements = call("unnest", vec![call(&list, args)]);
                    // unnest loses the elements' type: say it again.
                    let json = match name.as_str() {
                        "jsonb_array_elements" => Some(sqlparser::ast::DataType::JSONB),
                        "json_array_elements" => Some(sqlparser::ast::DataType::JSON),
                        _ => None,
                    };
                    *expr = match json {
                        Some(data_type) => Expr::Cast {
                            kind: sqlparser::ast::CastKind::Cast,
                            expr: Box::new(elements),
                            data_type,
                            array: false,
                            format: None,
                        },
                        None => elements,
                    };
                }
                // The server's generate_series types the values as
                // PostgreSQL does (integer, bigint or numeric).
                ("generate_series", 2 | 3) => {
                    *expr = call("unnest", vec![call("generate_series", args)]);
                }
                ("_pg_expandarray", 1) => {
                    *expr = call("unnest", vec![call("_pg_expandarray", args)]);
                }
                ("generate_subscripts", 2) => {
                    let dimension = args.pop();
                    let array = args.swap_remove(0);
                    // cardinality() is unsigned; range() takes BIGINT.
                    let count = Expr::Cast {
                        kind: sqlparser::ast::CastKind::Cast,
                        expr: Box::new(call("cardinality", vec![array])),
                        data_type: sqlparser::ast::DataType::BigInt(None),
                        array: false,
                        format: None,
                    };
                    let end = Expr::BinaryOp {
                        left: Box::new(count),
                        op: BinaryOperator::Plus,
                        right: Box::new(number(1)),
                    };
                    // Arrays here have one dimension; another is an empty
                    // set, as in PostgreSQL. Comparing the dimension also
                    // keeps its parameter typed when it is one.
                    let first = Expr::BinaryOp {
                        left: Box::new(dimension.unwrap_or_else(|| number(1))),
                        op: BinaryOperator::Eq,
                        right: Box::new(number(1)),
                    };
                    let subscripts = Expr::Case {
                        case_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                        end_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                        operand: None,
                        conditions: vec![sqlparser::ast::CaseWhen {
                            condition: first,
                            result: call("range", vec![number(1), end]),
                        }],
                        else_result: None,
                    };
                    *expr = call("unnest", vec![subscripts]);
                }
                _ => {}
            }
            return ControlFlow::Continue(());
        }
        if let Expr::CompoundFieldAccess { root, access_chain } = expr {
            if matches!(
                root.as_ref(),
                Expr::Identifier(_) | Expr::CompoundIdentifier(_)
            ) {
                return ControlFlow::Continue(());
            }
            let mut base = std::mem::replace(root.as_mut(), Expr::value(Value::Null));
            if let Expr::Nested(inner) = base {
                base = *inner;
            }
            let mut rest = Vec::new();
            for access in std::mem::take(access_chain) {
                match access {
                    AccessExpr::Dot(Expr::Identifier(field)) if rest.is_empty() => {
                        let name = Expr::Value(Value::SingleQuotedString(field.value).into());
                        base = call("get_field", vec![base, name]);
                    }
                    other => rest.push(other),
                }
            }
            *expr = if rest.is_empty() {
                base
            } else {
                Expr::CompoundFieldAccess {
                    root: Box::new(base),
                    access_chain: rest,
                }
            };
        }
        ControlFlow::Continue(())
    }
}

/// Whether every argument is an integer literal (maybe negated) that fits
/// an `integer`, as PostgreSQL types it.
fn int4_literals(args: &[Expr]) -> bool {
    args.iter().all(|a| {
        let (neg, inner) = match a {
            Expr::UnaryOp {
                op: sqlparser::ast::UnaryOperator::Minus,
                expr,
            } => (true, expr.as_ref()),
            e => (false, e),
        };
        match inner {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => n
                    .parse::<i64>()
                    .map(|n| i32::try_from(if neg { -n } else { n }).is_ok())
                    .unwrap_or(false),
                _ => false,
            },
            _ => false,
        }
    })
}

/// An integer literal, maybe negated.
fn integer_literal(e: &Expr) -> bool {
    let e = match e {
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Minus,
            expr,
        } => expr.as_ref(),
        e => e,
    };
    matches!(e, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n.parse::<i64>().is_ok()))
}

fn int4(e: Expr) -> Expr {
    Expr::Cast {
        kind: sqlparser::ast::CastKind::Cast,
        expr: Box::new(e),
        data_type: sqlparser::ast::DataType::Integer(None),
        array: false,
        format: None,
    }
}

const SERIES_ALIAS: &str = "sluice_series";

/// `FROM generate_series(...)` as a subquery whose column is named
/// `generate_series` (DataFusion names it `value`).
fn generate_series_relation(factor: &mut sqlparser::ast::TableFactor) {
    use sqlparser::ast::{TableAlias, TableFactor, TableFunctionArgs};
    let TableFactor::Table {
        name,
        alias,
        args: Some(TableFunctionArgs { args, .. }),
        ..
    } = factor
    else {
        return;
    };
    if !name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .is_some_and(|i| i.value.eq_ignore_ascii_case("generate_series"))
    {
        return;
    }
    // The call inside the subquery this makes has this alias, so that the
    // visitor, which goes on into that subquery, leaves it be.
    if alias.as_ref().is_some_and(|a| a.name.value == SERIES_ALIAS) {
        return;
    }
    let plain: Option<Vec<Expr>> = args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let Some(plain) = plain else {
        return;
    };
    let args_text: Vec<String> = plain.iter().map(|e| e.to_string()).collect();
    // DataFusion's table function counts in bigint, lazily: it serves
    // integer literals. Other series (numeric, dates as timestamptz,
    // columns) are the server's generate_series in a select list, which
    // types them as PostgreSQL does (this visitor then unnests it).
    let (value, from) = if int4_literals(&plain) {
        (int4(Expr::Identifier(Ident::new("value"))), true)
    } else if plain.iter().all(integer_literal) {
        (Expr::Identifier(Ident::new("value")), true)
    } else {
        (call("generate_series", plain.clone()), false)
    };
    // As in PostgreSQL, a function returning one column takes the table
    // alias as its column name too (`FROM generate_series(1, 3) x`).
    let column = match alias {
        Some(a) if a.columns.is_empty() => a.name.to_string(),
        _ => "generate_series".to_string(),
    };
    let sql = if from {
        format!(
            "SELECT {value} AS {column} FROM generate_series({}) AS {SERIES_ALIAS}",
            args_text.join(", ")
        )
    } else {
        format!("SELECT {value} AS {column}")
    };
    let Some(query) = parse_query(&sql) else {
        return;
    };
    let alias = alias.clone().or_else(|| {
        Some(TableAlias {
            explicit: true,
            name: Ident::new("generate_series"),
            columns: vec![],
            at: None,
        })
    });
    *factor = TableFactor::Derived {
        lateral: false,
        subquery: query,
        alias,
        sample: None,
    };
}

/// `FROM unnest(a) x`: as in PostgreSQL, the one column takes the table
/// alias as its name (DataFusion names it `UNNEST(...)`).
fn name_unnest_column(factor: &mut sqlparser::ast::TableFactor) {
    use sqlparser::ast::{TableFactor, TableFunctionArgs};
    let (alias, one_array) = match factor {
        TableFactor::UNNEST {
            alias: Some(alias),
            array_exprs,
            with_offset: false,
            with_ordinality: false,
            ..
        } => (alias, array_exprs.len() == 1),
        // `pg_catalog.unnest(a) x`, as psql writes it.
        TableFactor::Table {
            name,
            alias: Some(alias),
            args: Some(TableFunctionArgs { args, .. }),
            with_ordinality: false,
            ..
        } if name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("unnest")) =>
        {
            (alias, args.len() == 1)
        }
        _ => return,
    };
    {
        if one_array && alias.columns.is_empty() {
            alias.columns.push(sqlparser::ast::TableAliasColumnDef {
                name: alias.name.clone(),
                data_type: None,
            });
        }
    }
}

/// A set-returning function in FROM after the one relation it reads
/// (`FROM t, LATERAL jsonb_array_elements(t.j) AS e`, `CROSS JOIN LATERAL
/// unnest(t.a) u(x)`, `JOIN LATERAL ... ON true`): DataFusion plans no
/// outer reference in FROM, so the relation becomes a subquery selecting
/// its columns and the function's, one row per element as PostgreSQL's
/// lateral call gives, under the relation's own name. References
/// qualified by the function's alias read that subquery.
fn lateral_functions(query: &mut sqlparser::ast::Query) {
    use sqlparser::ast::{JoinConstraint, JoinOperator, SetExpr, TableFactor};
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    // The relation and the function after it, as FROM holds them.
    let on_true = |c: &JoinConstraint| match c {
        JoinConstraint::None => true,
        JoinConstraint::On(Expr::Value(v)) => v.value == Value::Boolean(true),
        _ => false,
    };
    // `LEFT JOIN LATERAL ... ON true` also keeps the rows the function
    // gives nothing for, with NULLs.
    let lateral_join = |op: &JoinOperator| match op {
        JoinOperator::CrossJoin(c) | JoinOperator::Inner(c) | JoinOperator::Join(c) => {
            on_true(c).then_some(false)
        }
        JoinOperator::CrossApply => Some(false),
        JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => on_true(c).then_some(true),
        JoinOperator::OuterApply => Some(true),
        _ => None,
    };
    // Where the function is: an item of FROM after the others, or the
    // last join of the last item.
    let Some(last) = select.from.len().checked_sub(1) else {
        return;
    };
    let (function_join, keeps_empty) = match select.from[last].joins.last() {
        None if last > 0 => (None, false),
        Some(j) => match lateral_join(&j.join_operator) {
            Some(keeps) => (Some(select.from[last].joins.len() - 1), keeps),
            None => return,
        },
        None => return,
    };
    let function = match function_join {
        Some(j) => select.from[last].joins[j].relation.clone(),
        None => select.from[last].relation.clone(),
    };
    // The relations before it, each with where it is. Over several, they
    // must be joined by inner joins (the call then reads one of them,
    // named in its arguments: unnesting that relation before the joins
    // gives the same rows; an outer join could NULL it).
    let mut relations: Vec<(usize, Option<usize>)> = Vec::new();
    let mut outer_join_before = false;
    for (i, item) in select.from.iter().enumerate() {
        if i == last && function_join.is_none() {
            break;
        }
        relations.push((i, None));
        for (j, join) in item.joins.iter().enumerate() {
            if i == last && Some(j) == function_join {
                break;
            }
            if !matches!(
                join.join_operator,
                JoinOperator::CrossJoin(_) | JoinOperator::Inner(_) | JoinOperator::Join(_)
            ) {
                outer_join_before = true;
            }
            relations.push((i, Some(j)));
        }
    }
    let factor = |select: &sqlparser::ast::Select, (i, j): (usize, Option<usize>)| match j {
        Some(j) => select.from[i].joins[j].relation.clone(),
        None => select.from[i].relation.clone(),
    };
    let function = &function;
    let (name, args, alias) = match function {
        TableFactor::Table {
            name,
            alias,
            args: Some(args),
            with_ordinality: false,
            ..
        } => (
            name.0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase()),
            args.args.clone(),
            alias,
        ),
        TableFactor::Function {
            name, args, alias, ..
        } => (
            name.0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase()),
            args.clone(),
            alias,
        ),
        TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset: false,
            with_ordinality: false,
            ..
        } => (
            Some("unnest".to_string()),
            array_exprs
                .iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e.clone())))
                .collect(),
            alias,
        ),
        _ => return,
    };
    let Some(name) = name else {
        return;
    };
    let Some(args) = args
        .into_iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect::<Option<Vec<Expr>>>()
    else {
        return;
    };
    let cast = |e: Expr, data_type| Expr::Cast {
        kind: sqlparser::ast::CastKind::Cast,
        expr: Box::new(e),
        data_type,
        array: false,
        format: None,
    };
    // Each column the function returns: its name in PostgreSQL and the
    // select-list expression giving it (rewritten into `unnest` of a
    // list by the visitor, which goes on into the new subquery).
    let arguments = args.clone();
    let columns: Vec<(&str, Expr)> = match (name.as_str(), args.len()) {
        (
            "jsonb_array_elements"
            | "json_array_elements"
            | "jsonb_array_elements_text"
            | "json_array_elements_text",
            1,
        ) => vec![("value", call(&name, args))],
        ("jsonb_object_keys" | "json_object_keys", 1) => vec![(
            if name.starts_with("jsonb") {
                "jsonb_object_keys"
            } else {
                "json_object_keys"
            },
            call(&name, args),
        )],
        ("jsonb_each" | "json_each" | "jsonb_each_text" | "json_each_text", 1) => {
            let values = call(
                if name.ends_with("_text") {
                    "jsonb_each_text_values_list"
                } else {
                    "jsonb_each_values_list"
                },
                args.clone(),
            );
            let values = call("unnest", vec![values]);
            vec![
                (
                    "key",
                    call("unnest", vec![call("jsonb_object_keys_list", args)]),
                ),
                (
                    "value",
                    match name.as_str() {
                        "jsonb_each" => cast(values, sqlparser::ast::DataType::JSONB),
                        "json_each" => cast(values, sqlparser::ast::DataType::JSON),
                        _ => values,
                    },
                ),
            ]
        }
        ("unnest", 1) => vec![("unnest", call("unnest", args))],
        ("generate_series", 2 | 3) => vec![("generate_series", call("generate_series", args))],
        _ => return,
    };
    let qualifier_of = |left: &TableFactor| match left {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => alias
            .as_ref()
            .map(|a| a.name.clone())
            .or_else(|| name.0.last().and_then(|p| p.as_ident()).cloned()),
        TableFactor::Derived {
            alias: Some(alias),
            lateral: false,
            ..
        } => Some(alias.name.clone()),
        _ => None,
    };
    // The relations the arguments name (None: a column named alone).
    let mut named = Vec::new();
    for a in &arguments {
        let _ = sqlparser::ast::visit_expressions(a, |e| {
            match e {
                Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                    named.push(Some(parts[0].value.clone()))
                }
                Expr::Identifier(_) => named.push(None),
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
    }
    named.dedup();
    // A one-column function takes its alias as the column's name.
    let names: Vec<String> = match alias {
        Some(a) if !a.columns.is_empty() => a.columns.iter().map(|c| c.name.to_string()).collect(),
        Some(a) if columns.len() == 1 => vec![a.name.to_string()],
        _ => columns
            .iter()
            .map(|(n, _)| Ident::new(*n).to_string())
            .collect(),
    };
    if names.len() != columns.len() {
        return;
    }
    let items: Vec<String> = columns
        .iter()
        .zip(&names)
        .map(|((_, e), n)| format!("{e} AS {n}"))
        .collect();
    // The relation the call reads: the only one, or the one its
    // arguments name.
    let position = match relations.as_slice() {
        _ if outer_join_before => None,
        [one] => Some(*one),
        _ => match named.as_slice() {
            [Some(name)] => {
                let found: Vec<_> = relations
                    .iter()
                    .filter(|r| {
                        qualifier_of(&factor(select, **r)).is_some_and(|q| q.value == *name)
                    })
                    .collect();
                match found.as_slice() {
                    [one] => Some(**one),
                    _ => None,
                }
            }
            _ => None,
        },
    };
    let Some(position) = position.filter(|p| qualifier_of(&factor(select, *p)).is_some()) else {
        // A call reading several relations (or one after an outer join):
        // a LATERAL subquery computing the call per row of the relations
        // before it, under the function's name.
        if named.is_empty() {
            return;
        }
        let Some(subquery) = parse_query(&format!("SELECT {}", items.join(", "))) else {
            return;
        };
        let relation_name = alias
            .as_ref()
            .map(|a| a.name.clone())
            .unwrap_or_else(|| Ident::new(name.as_str()));
        let derived = TableFactor::Derived {
            lateral: true,
            subquery,
            alias: Some(sqlparser::ast::TableAlias {
                explicit: true,
                name: relation_name,
                columns: vec![],
                at: None,
            }),
            sample: None,
        };
        match function_join {
            Some(j) => select.from[last].joins[j].relation = derived,
            None => select.from[last].relation = derived,
        }
        return;
    };
    let left = factor(select, position);
    let Some(qualifier) = qualifier_of(&left) else {
        return;
    };
    let mut sql = format!("SELECT {qualifier}.*, {} FROM {left}", items.join(", "));
    if keeps_empty {
        // The rows whose call gives no element: the list it unnests is
        // empty or NULL.
        let list = match (name.as_str(), arguments.as_slice()) {
            ("unnest", [a]) => a.clone(),
            (
                "jsonb_array_elements"
                | "json_array_elements"
                | "jsonb_array_elements_text"
                | "json_array_elements_text",
                [a],
            ) => call("jsonb_array_elements_text_list", vec![a.clone()]),
            (
                "jsonb_object_keys" | "json_object_keys" | "jsonb_each" | "json_each"
                | "jsonb_each_text" | "json_each_text",
                [a],
            ) => call("jsonb_object_keys_list", vec![a.clone()]),
            _ => return,
        };
        let nulls: Vec<String> = names.iter().map(|n| format!("NULL AS {n}")).collect();
        sql = format!(
            "{sql} UNION ALL SELECT {qualifier}.*, {} FROM {left} WHERE coalesce(cardinality({list}), 0) = 0",
            nulls.join(", ")
        );
    }
    let Some(subquery) = parse_query(&sql) else {
        return;
    };
    let function_alias = alias.as_ref().map(|a| a.name.value.clone());
    let derived = TableFactor::Derived {
        lateral: false,
        subquery,
        alias: Some(sqlparser::ast::TableAlias {
            explicit: true,
            name: qualifier.clone(),
            columns: vec![],
            at: None,
        }),
        sample: None,
    };
    match position {
        (i, Some(j)) => select.from[i].joins[j].relation = derived,
        (i, None) => select.from[i].relation = derived,
    }
    match function_join {
        Some(j) => {
            select.from[last].joins.remove(j);
        }
        None => {
            select.from.remove(last);
        }
    }
    // `e.value` reads the subquery now.
    if let Some(function_alias) = function_alias {
        let _ = sqlparser::ast::visit_expressions_mut(query, |e| {
            if let Expr::CompoundIdentifier(parts) = e {
                if parts.len() == 2 && parts[0].value == function_alias {
                    parts[0] = qualifier.clone();
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
}

/// A query written as text (here and by `crate::ordinality`), parsed;
/// None if it does not parse.
pub(crate) fn parse_query(sql: &str) -> Option<Box<sqlparser::ast::Query>> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    match sqlparser::parser::Parser::parse_sql(&dialect, sql)
        .ok()?
        .pop()?
    {
        Statement::Query(q) => Some(q),
        _ => None,
    }
}

/// Rewrites `_pg_expandarray`, `generate_subscripts`, the JSON
/// set-returning functions and `(expr).field`.
pub fn rewrite_set_returning(statement: &mut Statement) {
    let _ = statement.visit(&mut SetReturning);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut s = crate::parse_one(sql);
        rewrite_set_returning(&mut s);
        s.to_string()
    }

    #[test]
    fn expandarray_and_field_access() {
        assert_eq!(
            rewritten("SELECT (information_schema._pg_expandarray(i.indkey)).n AS key_seq, information_schema._pg_expandarray(i.indkey) AS keys FROM pg_index i"),
            "SELECT get_field(unnest(_pg_expandarray(i.indkey)), 'n') AS key_seq, unnest(_pg_expandarray(i.indkey)) AS keys FROM pg_index i"
        );
        assert_eq!(
            rewritten("SELECT * FROM r WHERE r.a_attnum = (r.keys).x"),
            "SELECT * FROM r WHERE r.a_attnum = get_field(r.keys, 'x')"
        );
        assert_eq!(rewritten("SELECT t.a.b FROM t"), "SELECT t.a.b FROM t");
    }

    #[test]
    fn lateral_functions_become_a_subquery_of_their_relation() {
        assert_eq!(
            rewritten("SELECT t.id, e FROM t, LATERAL jsonb_array_elements_text(t.j -> 'tags') AS e WHERE e <> 'x'"),
            "SELECT t.id, e FROM (SELECT t.*, unnest(jsonb_array_elements_text_list(t.j -> 'tags')) AS e FROM t) AS t WHERE e <> 'x'"
        );
        assert_eq!(
            rewritten("SELECT r.id, u.x FROM requests r CROSS JOIN LATERAL unnest(r.a) AS u(x)"),
            "SELECT r.id, r.x FROM (SELECT r.*, unnest(r.a) AS x FROM requests r) AS r"
        );
        assert_eq!(
            rewritten("SELECT key, value FROM t JOIN LATERAL jsonb_each_text(t.j) ON true"),
            "SELECT key, value FROM (SELECT t.*, unnest(jsonb_object_keys_list(t.j)) AS key, unnest(jsonb_each_text_values_list(t.j)) AS value FROM t) AS t"
        );
        // LEFT JOIN LATERAL keeps the rows without elements.
        assert_eq!(
            rewritten("SELECT a.id, u FROM a LEFT JOIN LATERAL unnest(a.x) u ON true"),
            "SELECT a.id, u FROM (SELECT a.*, unnest(a.x) AS u FROM a UNION ALL SELECT a.*, NULL AS u FROM a WHERE coalesce(cardinality(a.x), 0) = 0) AS a"
        );
        // Not a lateral call of one relation: left alone.
        assert_eq!(
            rewritten("SELECT * FROM a LEFT JOIN LATERAL unnest(a.x) u ON a.id > 1"),
            "SELECT * FROM a LEFT JOIN LATERAL unnest(a.x) u ON a.id > 1"
        );
        // After inner joins: the relation its arguments name is unnested
        // in place.
        assert_eq!(
            rewritten("SELECT a.id, b.name, x FROM a JOIN b ON a.id = b.id, LATERAL unnest(b.xs) AS x"),
            "SELECT a.id, b.name, x FROM a JOIN (SELECT b.*, unnest(b.xs) AS x FROM b) AS b ON a.id = b.id"
        );
        assert_eq!(
            rewritten(
                "SELECT * FROM a, b CROSS JOIN LATERAL unnest(a.xs) AS u(x) WHERE a.id = b.id"
            ),
            "SELECT * FROM (SELECT a.*, unnest(a.xs) AS x FROM a) AS a, b WHERE a.id = b.id"
        );
        // After an outer join (its relation may be NULL there), with
        // arguments that name no relation or several: a LATERAL subquery
        // computing the call per row before it.
        assert_eq!(
            rewritten("SELECT * FROM a LEFT JOIN b ON a.id = b.id, LATERAL unnest(b.xs) AS x"),
            "SELECT * FROM a LEFT JOIN b ON a.id = b.id, LATERAL (SELECT unnest(b.xs) AS x) AS x"
        );
        assert_eq!(
            rewritten("SELECT * FROM a JOIN b ON a.id = b.id, LATERAL unnest(xs) AS x"),
            "SELECT * FROM a JOIN b ON a.id = b.id, LATERAL (SELECT unnest(xs) AS x) AS x"
        );
        assert_eq!(
            rewritten("SELECT * FROM x x1, x x2, generate_series(x1.a, x2.b)"),
            "SELECT * FROM x x1, x x2, LATERAL (SELECT unnest(generate_series(x1.a, x2.b)) AS generate_series) AS generate_series"
        );
        // Literal arguments: DataFusion's table function as it is.
        assert_eq!(
            rewritten("SELECT * FROM a, b, unnest(ARRAY[1, 2]) AS u"),
            "SELECT * FROM a, b, UNNEST(ARRAY[1, 2]) AS u (u)"
        );
    }

    #[test]
    fn generate_subscripts_counts_the_elements() {
        assert_eq!(
            rewritten("SELECT unnest(k) AS attnum, generate_subscripts(k, 1) AS ord FROM c"),
            "SELECT unnest(k) AS attnum, unnest(CASE WHEN 1 = 1 THEN range(1, CAST(cardinality(k) AS BIGINT) + 1) END) AS ord FROM c"
        );
    }

    #[test]
    fn unnest_in_from_names_its_column_by_the_alias() {
        assert_eq!(
            rewritten("SELECT x FROM unnest(a) x"),
            "SELECT x FROM UNNEST(a) x (x)"
        );
        assert_eq!(
            rewritten("SELECT v FROM unnest(a) AS x(v)"),
            "SELECT v FROM UNNEST(a) AS x (v)"
        );
        assert_eq!(
            rewritten("SELECT x FROM pg_catalog.unnest(a) x"),
            "SELECT x FROM pg_catalog.unnest(a) x (x)"
        );
    }

    #[test]
    fn generate_series_in_from_is_named_as_postgresql_names_it() {
        assert_eq!(
            rewritten("SELECT * FROM generate_series(1, 5, 2)"),
            "SELECT * FROM (SELECT CAST(value AS INTEGER) AS generate_series FROM generate_series(1, 5, 2) AS sluice_series) AS generate_series"
        );
        // The table alias names the column too; a column list names it.
        assert_eq!(
            rewritten("SELECT x FROM generate_series(1, 3) x"),
            "SELECT x FROM (SELECT CAST(value AS INTEGER) AS x FROM generate_series(1, 3) AS sluice_series) x"
        );
        assert_eq!(
            rewritten("SELECT n FROM generate_series(1, 3) AS s(n)"),
            "SELECT n FROM (SELECT CAST(value AS INTEGER) AS generate_series FROM generate_series(1, 3) AS sluice_series) AS s (n)"
        );
    }
}
