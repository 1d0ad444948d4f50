//! Functions whose value is not fixed by their arguments: the time, the
//! session, chance. A materialized view or a dataset must come out the
//! same when it is computed again from the same log, so their definitions
//! may not call them.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Query, Visit, Visitor};

/// Functions a definition may not call (PostgreSQL's volatile and stable
/// functions that users reach for, and their DataFusion spellings).
const NOT_FIXED: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "random_normal",
    "setseed",
    "gen_random_uuid",
    "uuid",
    "current_user",
    "session_user",
    "current_role",
    "user",
    "current_schema",
    "current_database",
    "current_catalog",
    "current_setting",
    "pg_backend_pid",
    "inet_client_addr",
    "inet_client_port",
    "txid_current",
    "pg_current_xact_id",
    "pg_export_snapshot",
    "version",
];

/// The first function in `query` whose value is not fixed by its inputs,
/// as it is named there.
pub fn unfixed_function(query: &Query) -> Option<String> {
    struct Finder;
    impl Visitor for Finder {
        type Break = String;
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
            if let Expr::Function(f) = expr {
                if let Some(name) = f.name.0.last().and_then(|p| p.as_ident()) {
                    let lower = name.value.to_lowercase();
                    if NOT_FIXED.contains(&lower.as_str()) {
                        return ControlFlow::Break(lower);
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    match query.visit(&mut Finder) {
        ControlFlow::Break(name) => Some(name),
        ControlFlow::Continue(()) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn found(sql: &str) -> Option<String> {
        let q = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_query()
            .unwrap();
        unfixed_function(&q)
    }

    #[test]
    fn time_chance_and_session_are_found() {
        assert_eq!(
            found("SELECT a FROM t WHERE ts > now() - INTERVAL '1 day'").as_deref(),
            Some("now")
        );
        assert_eq!(
            found("SELECT CURRENT_TIMESTAMP AS at FROM t").as_deref(),
            Some("current_timestamp")
        );
        assert_eq!(
            found("SELECT a FROM t WHERE random() < 0.1").as_deref(),
            Some("random")
        );
        assert_eq!(
            found("SELECT gen_random_uuid(), a FROM t").as_deref(),
            Some("gen_random_uuid")
        );
        assert_eq!(
            found("SELECT current_user, a FROM t").as_deref(),
            Some("current_user")
        );
        assert_eq!(
            found("SELECT a FROM (SELECT a FROM t WHERE a < random()) s").as_deref(),
            Some("random")
        );
        assert_eq!(
            found("SELECT hashtext(a), date_bin(INTERVAL '1 minute', ts) FROM t"),
            None
        );
    }
}
