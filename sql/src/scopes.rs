//! Names resolve in the innermost scope that has them, as PostgreSQL
//! resolves them, also where a subquery reads a relation under the name an
//! outer query uses too.
//!
//! In `SELECT * FROM abc WHERE a = ANY (SELECT a FROM abc WHERE b = 10)`
//! the inner `a` is the inner `abc`'s. DataFusion gives the outer
//! reference and the inner column the same qualifier (`abc.a`), and once
//! it pulls the correlation out of the subquery the two are one column:
//! the comparison becomes `abc.a = abc.a` and every row matches. So a
//! relation of a subquery whose name (or alias) an enclosing query also
//! uses gets an alias of its own, and the subquery's references that
//! qualify a column with that name (its own, and those of subqueries
//! below it that do not declare the name again) take the alias. Nothing
//! else changes: unqualified names already resolve innermost first, and
//! result columns are named by their columns, not their relations.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArgExpr, Ident, ObjectName, ObjectNamePart, Query, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement, TableAlias, TableFactor, TableWithJoins,
    VisitMut, VisitorMut,
};

use crate::parse::ident_name;

/// Rewrites `statement` as the module header says.
pub fn rename_shadowing_relations(statement: &mut Statement) {
    let _ = statement.visit(&mut Scopes::default());
}

#[derive(Default)]
struct Scopes {
    /// The relation names each enclosing query's FROM declares, outermost
    /// first (the query being visited last).
    stack: Vec<Vec<String>>,
    renamed: usize,
}

impl VisitorMut for Scopes {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let declared = match query.body.as_mut() {
            SetExpr::Select(select) => declared_names(&mut select.from),
            _ => Vec::new(),
        };
        self.stack.push(declared);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let declared = self.stack.pop().unwrap_or_default();
        let outer: Vec<&String> = self.stack.iter().flatten().collect();
        let shadowing: Vec<String> = declared
            .into_iter()
            .filter(|name| outer.contains(&name))
            .collect();
        if shadowing.is_empty() {
            return ControlFlow::Continue(());
        }
        for old in shadowing {
            self.renamed += 1;
            let new = format!("__inner{}_{old}", self.renamed);
            if let SetExpr::Select(select) = query.body.as_mut() {
                for from in select.from.iter_mut() {
                    alias_relation(from, &old, &new);
                }
            }
            // Every reference in this query (its nested queries' own
            // relations of that name are renamed already).
            let _ = query.visit(&mut Requalify {
                old: &old,
                new: &new,
            });
        }
        ControlFlow::Continue(())
    }
}

/// The names the FROM clause's relations go by (their aliases, or their
/// tables' names).
fn declared_names(from: &mut [TableWithJoins]) -> Vec<String> {
    let mut names = Vec::new();
    for t in from.iter_mut() {
        each_factor(t, &mut |factor| {
            if let Some(name) = factor_name(factor) {
                names.push(name);
            }
        });
    }
    names
}

fn each_factor(t: &mut TableWithJoins, f: &mut dyn FnMut(&mut TableFactor)) {
    factor(&mut t.relation, f);
    for join in t.joins.iter_mut() {
        factor(&mut join.relation, f);
    }
}

fn factor(t: &mut TableFactor, f: &mut dyn FnMut(&mut TableFactor)) {
    match t {
        TableFactor::NestedJoin {
            table_with_joins,
            alias: None,
        } => each_factor(table_with_joins, f),
        other => f(other),
    }
}

fn factor_alias(t: &mut TableFactor) -> Option<&mut Option<TableAlias>> {
    match t {
        TableFactor::Table { alias, .. }
        | TableFactor::Derived { alias, .. }
        | TableFactor::Function { alias, .. }
        | TableFactor::UNNEST { alias, .. }
        | TableFactor::NestedJoin { alias, .. } => Some(alias),
        _ => None,
    }
}

fn factor_name(t: &mut TableFactor) -> Option<String> {
    if let Some(Some(alias)) = factor_alias(t) {
        return Some(ident_name(&alias.name));
    }
    match t {
        TableFactor::Table { name, .. } => last_name(name),
        _ => None,
    }
}

fn last_name(name: &ObjectName) -> Option<String> {
    match name.0.last() {
        Some(ObjectNamePart::Identifier(i)) => Some(ident_name(i)),
        _ => None,
    }
}

/// Gives the relation named `old` in `t` the alias `new`.
fn alias_relation(t: &mut TableWithJoins, old: &str, new: &str) {
    each_factor(t, &mut |factor| {
        if factor_name(factor).as_deref() != Some(old) {
            return;
        }
        let Some(alias) = factor_alias(factor) else {
            return;
        };
        match alias {
            Some(a) => a.name = Ident::new(new),
            None => {
                *alias = Some(TableAlias {
                    explicit: true,
                    name: Ident::new(new),
                    columns: vec![],
                    at: None,
                })
            }
        }
    });
}

/// Replaces the qualifier `old` of column references and `old.*` by `new`.
struct Requalify<'a> {
    old: &'a str,
    new: &'a str,
}

impl Requalify<'_> {
    /// `[schema.]old` as a qualifier.
    fn qualifies(&self, parts: &[Ident]) -> bool {
        parts
            .last()
            .is_some_and(|q| ident_name(q) == self.old && parts.len() <= 2)
    }

    fn object_name(&self, name: &mut ObjectName) {
        let idents: Option<Vec<Ident>> = name
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(i) => Some(i.clone()),
                _ => None,
            })
            .collect();
        if idents.is_some_and(|i| self.qualifies(&i)) {
            *name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(self.new))]);
        }
    }
}

impl VisitorMut for Requalify<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let column = parts.len() - 1;
                if self.qualifies(&parts[..column]) {
                    let col = parts[column].clone();
                    *parts = vec![Ident::new(self.new), col];
                }
            }
            Expr::QualifiedWildcard(name, _) => self.object_name(name),
            Expr::Function(f) => {
                if let sqlparser::ast::FunctionArguments::List(list) = &mut f.args {
                    for arg in list.args.iter_mut() {
                        let e = match arg {
                            sqlparser::ast::FunctionArg::Unnamed(e) => e,
                            sqlparser::ast::FunctionArg::Named { arg, .. } => arg,
                            sqlparser::ast::FunctionArg::ExprNamed { arg, .. } => arg,
                        };
                        if let FunctionArgExpr::QualifiedWildcard(name) = e {
                            self.object_name(name);
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, select: &mut sqlparser::ast::Select) -> ControlFlow<()> {
        for item in select.projection.iter_mut() {
            if let SelectItem::QualifiedWildcard(
                SelectItemQualifiedWildcardKind::ObjectName(n),
                _,
            ) = item
            {
                self.object_name(n);
            }
        }
        ControlFlow::Continue(())
    }
}

/// A LATERAL subquery that reads the relations before it and computes a
/// window function is refused (0A000) in a materialized view: the planner
/// applies the outer row's condition after the window, so `row_number()
/// OVER ()` would count rows of every outer row together, where
/// PostgreSQL counts per outer row. (A query computes such a subquery per
/// outer value instead; a view has no rows to take the values from.)
pub fn refuse_windows_in_lateral(statement: &Statement) -> Result<(), crate::SqlError> {
    use sqlparser::ast::{Visit, Visitor};
    struct Lateral(bool);
    impl Visitor for Lateral {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Derived {
                lateral: true,
                subquery,
                ..
            } = factor
            {
                if has_window(subquery) && reads_outside(subquery) {
                    self.0 = true;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = Lateral(false);
    let _ = statement.visit(&mut found);
    match found.0 {
        true => Err(crate::SqlError::Unsupported(
            "a window function in a LATERAL subquery that reads the relations before it is not supported"
                .into(),
        )),
        false => Ok(()),
    }
}

fn has_window(query: &Query) -> bool {
    use sqlparser::ast::{Visit, Visitor};
    struct Window(bool);
    impl Visitor for Window {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if matches!(e, Expr::Function(f) if f.over.is_some()) {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut w = Window(false);
    let _ = query.visit(&mut w);
    w.0
}

/// Whether `query` qualifies a column by a name none of its own FROM
/// clauses declares (a reference to a relation outside it).
fn reads_outside(query: &Query) -> bool {
    use sqlparser::ast::{Visit, Visitor};
    struct Names {
        declared: Vec<String>,
        qualifiers: Vec<String>,
    }
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let Some(name) = factor_name(&mut factor.clone()) {
                self.declared.push(name);
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::CompoundIdentifier(parts) = e {
                if parts.len() >= 2 {
                    self.qualifiers.push(ident_name(&parts[parts.len() - 2]));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names {
        declared: Vec::new(),
        qualifiers: Vec::new(),
    };
    let _ = query.visit(&mut names);
    names.qualifiers.iter().any(|q| !names.declared.contains(q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_one;

    fn renamed(sql: &str) -> String {
        let mut s = parse_one(sql);
        rename_shadowing_relations(&mut s);
        s.to_string()
    }

    #[test]
    fn a_subquery_relation_named_as_an_outer_one_gets_its_own_alias() {
        assert_eq!(
            renamed("SELECT * FROM abc WHERE a = ANY (SELECT a FROM abc WHERE abc.b = 10)"),
            "SELECT * FROM abc WHERE a = ANY(SELECT a FROM abc AS __inner1_abc WHERE __inner1_abc.b = 10)"
        );
        // The outer reference keeps its qualifier where the inner query
        // names the relation otherwise.
        assert_eq!(
            renamed("SELECT * FROM abc WHERE EXISTS (SELECT 1 FROM abc x WHERE x.a = abc.a)"),
            "SELECT * FROM abc WHERE EXISTS (SELECT 1 FROM abc x WHERE x.a = abc.a)"
        );
        // An alias that an outer query uses too.
        assert_eq!(
            renamed("SELECT * FROM t x WHERE x.k IN (SELECT x.k FROM u x, public.x y WHERE y.k = 1)"),
            "SELECT * FROM t x WHERE x.k IN (SELECT __inner1_x.k FROM u __inner1_x, public.x y WHERE y.k = 1)"
        );
        // A nested subquery's reference resolves to the nearest relation
        // of the name: the renamed one.
        assert_eq!(
            renamed("SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k))"),
            "SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM t AS __inner1_t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = __inner1_t.k))"
        );
        assert_eq!(
            renamed("SELECT t.* FROM t JOIN u ON t.k = u.k"),
            "SELECT t.* FROM t JOIN u ON t.k = u.k"
        );
    }

    #[test]
    fn windows_in_a_correlated_lateral_subquery_are_refused() {
        let refused = |sql: &str| refuse_windows_in_lateral(&parse_one(sql)).is_err();
        assert!(refused(
            "SELECT * FROM t1, LATERAL (SELECT t2.*, row_number() OVER () FROM t2 WHERE t1.f1 = t2.f1) s"
        ));
        assert!(!refused(
            "SELECT * FROM t1, LATERAL (SELECT t2.*, row_number() OVER () FROM t2 WHERE t2.f1 = 1) s"
        ));
        assert!(!refused(
            "SELECT * FROM t1, LATERAL (SELECT count(*) FROM t2 WHERE t1.f1 = t2.f1) s"
        ));
    }
}
