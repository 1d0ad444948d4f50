//! `current_user`, `session_user`, `current_role` and `user` name the
//! session's role. They are bound into the statement as a string when it is
//! planned, since one planner serves every session.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query, SelectItem, SetExpr,
    Statement, Value, VisitMut, VisitorMut,
};

const SESSION_USER_FUNCTIONS: [&str; 4] = ["current_user", "session_user", "current_role", "user"];

struct BindUser<'a>(&'a str);

/// The function's name when `e` is one of them, as PostgreSQL names the
/// column it gives.
fn session_user_function(e: &Expr) -> Option<String> {
    let name = match e {
        Expr::Identifier(i) if i.quote_style.is_none() => i.value.to_lowercase(),
        Expr::Function(f) => f.name.0.last()?.as_ident()?.value.to_lowercase(),
        _ => return None,
    };
    SESSION_USER_FUNCTIONS
        .contains(&name.as_str())
        .then_some(name)
}

impl VisitorMut for BindUser<'_> {
    type Break = ();

    /// `SELECT current_user` gives a column named `current_user`, as
    /// PostgreSQL's does, not one named after the bound string.
    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in select.projection.iter_mut() {
                if let SelectItem::UnnamedExpr(e) = item {
                    if let Some(name) = session_user_function(e) {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::new(name),
                        };
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // Reserved words in PostgreSQL, so never a column when unquoted
        // (`user` is left alone: sqlparser reads it as a column name).
        if let Expr::Identifier(i) = expr {
            let v = i.value.to_lowercase();
            if i.quote_style.is_none() && SESSION_USER_FUNCTIONS[..3].contains(&v.as_str()) {
                *expr = Expr::value(Value::SingleQuotedString(self.0.to_string()));
            }
            return ControlFlow::Continue(());
        }
        if let Expr::Function(f) = expr {
            // has_table_privilege(table, privilege) asks about the session's
            // role: the three-argument form, with the role named.
            let is_privilege_check = f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("has_table_privilege"));
            if is_privilege_check {
                if let FunctionArguments::List(list) = &mut f.args {
                    if list.args.len() == 2 {
                        list.args.insert(
                            0,
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::value(
                                Value::SingleQuotedString(self.0.to_string()),
                            ))),
                        );
                    }
                }
                return ControlFlow::Continue(());
            }
            let name = f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase());
            let in_pg_catalog = f.name.0.len() == 1
                || f.name
                    .0
                    .first()
                    .and_then(|p| p.as_ident())
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_catalog"));
            let no_arguments = match &f.args {
                FunctionArguments::None => true,
                FunctionArguments::List(l) => l.args.is_empty(),
                FunctionArguments::Subquery(_) => false,
            };
            if in_pg_catalog
                && no_arguments
                && name.is_some_and(|n| SESSION_USER_FUNCTIONS.contains(&n.as_str()))
            {
                *expr = Expr::value(Value::SingleQuotedString(self.0.to_string()));
            }
        }
        ControlFlow::Continue(())
    }
}

/// Replaces the session-user functions in `stmt` with `user`.
pub fn bind_session_user(stmt: &mut Statement, user: &str) {
    let _ = stmt.visit(&mut BindUser(user));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_user_functions_become_the_role_name() {
        for (sql, expected) in [
            ("SELECT current_user", "SELECT 'alice' AS current_user"),
            (
                "SELECT session_user, CURRENT_ROLE",
                "SELECT 'alice' AS session_user, 'alice' AS current_role",
            ),
            ("SELECT upper(current_user)", "SELECT upper('alice')"),
            (
                "SELECT * FROM t WHERE owner = current_user",
                "SELECT * FROM t WHERE owner = 'alice'",
            ),
            ("SELECT \"user\" FROM t", "SELECT \"user\" FROM t"),
            (
                "SELECT has_table_privilege('t', 'SELECT')",
                "SELECT has_table_privilege('alice', 't', 'SELECT')",
            ),
        ] {
            let mut stmt = crate::parse_one(sql);
            bind_session_user(&mut stmt, "alice");
            assert_eq!(stmt.to_string(), expected, "{sql}");
        }
    }
}
