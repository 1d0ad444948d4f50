//! Drivers test `regproc` catalog columns against 0 (`typreceive != 0`,
//! ADBC's first query); PostgreSQL reads that 0 as the oid of "no
//! function", which the column prints as `-`. Sluice's `pg_catalog` holds
//! these columns as text, so the comparison is rewritten to `'-'`.

use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, Statement, Value, VisitMut, VisitorMut};

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

/// Rewrites `regproc_column = 0` and `<> 0` to compare with `'-'`.
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
}
