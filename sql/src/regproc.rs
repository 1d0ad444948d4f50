//! Drivers test `regproc` catalog columns against 0 (`typreceive != 0`,
//! ADBC's first query); PostgreSQL reads that 0 as the oid of "no
//! function", which the column prints as `-`. Sluice's `pg_catalog` holds
//! these columns as text, so the comparison is rewritten to `'-'`. For
//! the same reason a function named as a regproc literal
//! (`typinput = 'pg_catalog.array_in'::regproc`, pgJDBC's type lookup)
//! is its name as text, without its schema.

use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, DataType, Expr, Statement, Value, VisitMut, VisitorMut};

/// `regproc` columns of `pg_type`, `pg_proc` and `pg_aggregate`.
const REGPROC_COLUMNS: [&str; 11] = [
    "typinput",
    "typoutput",
    "typreceive",
    "typsend",
    "typmodin",
    "typmodout",
    "typanalyze",
    "typsubscript",
    "aggfnoid",
    "aggtransfn",
    "aggfinalfn",
];

struct RegprocZero;

fn is_regproc_column(e: &Expr) -> bool {
    let name = match e {
        Expr::Identifier(i) => &i.value,
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(i) => &i.value,
            None => return false,
        },
        _ => return false,
    };
    REGPROC_COLUMNS.contains(&name.to_lowercase().as_str())
}

fn is_zero(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "0"))
}

impl VisitorMut for RegprocZero {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(name) = regproc_literal(expr) {
            *expr = Expr::Value(Value::SingleQuotedString(name).into());
            return ControlFlow::Continue(());
        }
        if let Some(call) = regtype_of_oid(expr).or_else(|| regtypes_of_oids(expr)) {
            *expr = call;
            return ControlFlow::Continue(());
        }
        if let Expr::BinaryOp { left, op, right } = expr {
            if matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq)
                && is_regproc_column(left)
                && is_zero(right)
            {
                **right = Expr::Value(Value::SingleQuotedString("-".into()).into());
            }
        }
        ControlFlow::Continue(())
    }
}

/// What `e` casts when it is a cast to the named type (`x::regtype`,
/// which the parser keeps as a custom type).
fn cast_to<'a>(e: &'a Expr, type_name: &str) -> Option<&'a Expr> {
    let Expr::Cast {
        expr, data_type, ..
    } = e
    else {
        return None;
    };
    let DataType::Custom(ty, _) = data_type else {
        return None;
    };
    ty.0.last()?
        .as_ident()?
        .value
        .eq_ignore_ascii_case(type_name)
        .then_some(expr.as_ref())
}

/// The function that names a type by its oid (`atttypid::regtype`).
pub const REGTYPE_NAME_FUNCTION: &str = "sluice_regtype_name";

/// `x::regtype` of a value that is not a name: a call of
/// [`REGTYPE_NAME_FUNCTION`]. A name (`'int4'::regtype`) is left to the
/// compatibility parser, which looks it up in `pg_type`.
fn regtype_of_oid(e: &Expr) -> Option<Expr> {
    let expr = cast_to(e, "regtype")?;
    if matches!(expr, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_) | Value::Placeholder(_)))
    {
        return None;
    }
    Some(crate::set_returning::call(
        REGTYPE_NAME_FUNCTION,
        vec![expr.clone()],
    ))
}

/// The function that names the types of an oid array (`proargtypes::regtype[]`).
pub const REGTYPE_NAMES_FUNCTION: &str = "sluice_regtype_names";

/// `x::regtype[]` of a value that is not a literal: a call of
/// [`REGTYPE_NAMES_FUNCTION`].
fn regtypes_of_oids(e: &Expr) -> Option<Expr> {
    let Expr::Cast {
        expr, data_type, ..
    } = e
    else {
        return None;
    };
    let DataType::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(element, None)) = data_type
    else {
        return None;
    };
    let DataType::Custom(ty, _) = element.as_ref() else {
        return None;
    };
    let named =
        ty.0.last()?
            .as_ident()?
            .value
            .eq_ignore_ascii_case("regtype");
    if !named || matches!(expr.as_ref(), Expr::Value(_)) {
        return None;
    }
    Some(crate::set_returning::call(
        REGTYPE_NAMES_FUNCTION,
        vec![expr.as_ref().clone()],
    ))
}

/// The function name of `'schema.name'::regproc`.
fn regproc_literal(e: &Expr) -> Option<String> {
    let Expr::Value(v) = cast_to(e, "regproc")? else {
        return None;
    };
    let Value::SingleQuotedString(name) = &v.value else {
        return None;
    };
    Some(name.rsplit('.').next().unwrap_or(name).to_string())
}

/// `sql` with each `'schema.name'::regproc` written `'name'`, for the
/// compatibility parser, whose own rule would look the name up in
/// `pg_proc` as an oid; None when there is none.
pub fn regproc_literals_in_text(sql: &str) -> Option<String> {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::{Token, Tokenizer};
    if !sql.to_ascii_lowercase().contains("regproc") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        if let (Token::SingleQuotedString(name), Some(Token::DoubleColon), Some(Token::Word(w))) =
            (&tokens[i], tokens.get(i + 1), tokens.get(i + 2))
        {
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("regproc") {
                out.push(Token::SingleQuotedString(
                    name.rsplit('.').next().unwrap_or(name).to_string(),
                ));
                i += 3;
                changed = true;
                continue;
            }
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    changed.then(|| out.iter().map(|t| t.to_string()).collect())
}

struct RegprocLiterals;

impl VisitorMut for RegprocLiterals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(name) = regproc_literal(expr) {
            *expr = Expr::Value(Value::SingleQuotedString(name).into());
        }
        ControlFlow::Continue(())
    }
}

/// Rewrites each `'schema.name'::regproc` to `'name'` alone (before the
/// compatibility parser's rules, which would look it up as an oid).
pub fn rewrite_regproc_literals(statement: &mut Statement) {
    let _ = statement.visit(&mut RegprocLiterals);
}

/// Rewrites `regproc_column = 0` and `<> 0` to compare with `'-'`, each
/// `'schema.name'::regproc` to `'name'`, and `oid::regtype` to the type's
/// name ([`REGTYPE_NAME_FUNCTION`]).
pub fn rewrite_regproc_zero(statement: &mut Statement) {
    let _ = statement.visit(&mut RegprocZero);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    #[test]
    fn zero_becomes_a_dash() {
        let sql = "SELECT oid FROM pg_catalog.pg_type WHERE (typreceive != 0 OR t.typsend <> 0) AND typlen != 0";
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        rewrite_regproc_zero(&mut s);
        assert_eq!(
            s.to_string(),
            "SELECT oid FROM pg_catalog.pg_type WHERE (typreceive <> '-' OR t.typsend <> '-') AND typlen <> 0"
        );
    }

    #[test]
    fn a_regproc_literal_in_text_is_its_function_name() {
        assert_eq!(
            regproc_literals_in_text(
                "SELECT typinput='pg_catalog.array_in'::regproc as is_array FROM pg_type"
            )
            .as_deref(),
            Some("SELECT typinput='array_in' as is_array FROM pg_type")
        );
        assert_eq!(regproc_literals_in_text("SELECT 1"), None);
    }

    #[test]
    fn a_regproc_literal_is_its_function_name() {
        let sql = "SELECT typinput = 'pg_catalog.array_in'::regproc AS is_array, 'int4in'::regproc FROM pg_type";
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        rewrite_regproc_zero(&mut s);
        assert_eq!(
            s.to_string(),
            "SELECT typinput = 'array_in' AS is_array, 'int4in' FROM pg_type"
        );
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT atttypid::regtype, 'int4'::regtype FROM pg_attribute",
        )
        .unwrap()
        .remove(0);
        rewrite_regproc_zero(&mut s);
        assert_eq!(
            s.to_string(),
            "SELECT sluice_regtype_name(atttypid), 'int4'::regtype FROM pg_attribute"
        );
    }
}
