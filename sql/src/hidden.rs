//! Keeps the hidden columns (`_partition`, `_offset`, `_ingested_at`) out of
//! `SELECT *` while leaving them selectable by name.
//!
//! DataFusion expands wildcards while planning, so the rewrite happens on the
//! AST: a wildcard over a log table gets `EXCLUDE (<hidden columns>)`, and an
//! unqualified wildcard over a join becomes one qualified wildcard per
//! relation, so that only the log tables' hidden columns are excluded.

use std::ops::ControlFlow;

use sqlparser::ast::{
    ExcludeSelectItem, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, TableFactor, VisitMut, VisitorMut,
    WildcardAdditionalOptions,
};

use crate::parse::ident_name;

/// Rewrites every wildcard in `statement` that would expand to a log table's
/// hidden columns. `hidden_columns` is given the unqualified, case-folded
/// name, and returns a log table's hidden columns (`None` for anything
/// else).
pub fn hide_system_columns<F>(statement: &mut sqlparser::ast::Statement, hidden_columns: F)
where
    F: Fn(&str) -> Option<Vec<String>>,
{
    let mut rewriter = WildcardRewriter { hidden_columns };
    let _ = statement.visit(&mut rewriter);
}

struct WildcardRewriter<F> {
    hidden_columns: F,
}

impl<F: Fn(&str) -> Option<Vec<String>>> VisitorMut for WildcardRewriter<F> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.rewrite_set_expr(&mut query.body);
        ControlFlow::Continue(())
    }
}

/// A relation in a FROM clause: the name its columns are qualified with, and
/// a log table's hidden columns.
struct Relation {
    qualifier: Option<String>,
    hidden: Option<Vec<String>>,
}

impl<F: Fn(&str) -> Option<Vec<String>>> WildcardRewriter<F> {
    fn rewrite_set_expr(&self, body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => self.rewrite_select(select),
            SetExpr::SetOperation { left, right, .. } => {
                self.rewrite_set_expr(left);
                self.rewrite_set_expr(right);
            }
            _ => {}
        }
    }

    fn relation(&self, factor: &TableFactor) -> Relation {
        match factor {
            TableFactor::Table { name, alias, .. } => {
                let table = last_part(name);
                Relation {
                    qualifier: Some(
                        alias
                            .as_ref()
                            .map(|a| ident_name(&a.name))
                            .unwrap_or_else(|| table.clone()),
                    ),
                    hidden: (self.hidden_columns)(&table),
                }
            }
            TableFactor::Derived { alias, .. } => Relation {
                qualifier: alias.as_ref().map(|a| ident_name(&a.name)),
                hidden: None,
            },
            _ => Relation {
                qualifier: None,
                hidden: None,
            },
        }
    }

    fn rewrite_select(&self, select: &mut Select) {
        let relations: Vec<Relation> = select
            .from
            .iter()
            .flat_map(|twj| {
                std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation))
            })
            .map(|f| self.relation(f))
            .collect();
        if !relations.iter().any(|r| r.hidden.is_some()) {
            return;
        }
        let mut projection = Vec::with_capacity(select.projection.len());
        for item in select.projection.drain(..) {
            match item {
                SelectItem::Wildcard(mut opts) if relations.len() == 1 => {
                    add_exclude(
                        &mut opts,
                        relations[0].hidden.as_deref().unwrap_or_default(),
                    );
                    projection.push(SelectItem::Wildcard(opts));
                }
                SelectItem::Wildcard(opts)
                    if opts.opt_exclude.is_none()
                        && opts.opt_except.is_none()
                        && relations.iter().all(|r| r.qualifier.is_some()) =>
                {
                    for r in &relations {
                        let mut o = opts.clone();
                        if let Some(hidden) = &r.hidden {
                            add_exclude(&mut o, hidden);
                        }
                        let q = r.qualifier.clone().unwrap_or_default();
                        projection.push(SelectItem::QualifiedWildcard(
                            SelectItemQualifiedWildcardKind::ObjectName(ObjectName(vec![
                                ObjectNamePart::Identifier(Ident::with_quote('"', q)),
                            ])),
                            o,
                        ));
                    }
                }
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(name),
                    mut opts,
                ) => {
                    let q = last_part(&name);
                    if let Some(hidden) = relations
                        .iter()
                        .find(|r| r.qualifier.as_deref() == Some(q.as_str()))
                        .and_then(|r| r.hidden.as_ref())
                    {
                        add_exclude(&mut opts, hidden);
                    }
                    projection.push(SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(name),
                        opts,
                    ));
                }
                other => projection.push(other),
            }
        }
        select.projection = projection;
    }
}

fn last_part(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_name)
        .unwrap_or_default()
}

fn add_exclude(opts: &mut WildcardAdditionalOptions, hidden_columns: &[String]) {
    let mut names: Vec<ObjectName> = match opts.opt_exclude.take() {
        Some(ExcludeSelectItem::Single(n)) => vec![n],
        Some(ExcludeSelectItem::Multiple(ns)) => ns,
        None => vec![],
    };
    for hidden in hidden_columns {
        if !names.iter().any(|n| &last_part(n) == hidden) {
            names.push(ObjectName(vec![ObjectNamePart::Identifier(Ident::new(
                hidden,
            ))]));
        }
    }
    opts.opt_exclude = Some(ExcludeSelectItem::Multiple(names));
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_catalog::HIDDEN_COLUMNS;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn rewrite(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        hide_system_columns(&mut s, |t| {
            (t == "usage" || t == "other")
                .then(|| HIDDEN_COLUMNS.iter().map(|c| c.to_string()).collect())
        });
        s.to_string()
    }

    #[test]
    fn single_table_wildcard_excludes_hidden_columns() {
        assert_eq!(
            rewrite("SELECT * FROM usage"),
            "SELECT * EXCLUDE (_partition, _offset, _ingested_at) FROM usage"
        );
        assert_eq!(rewrite("SELECT * FROM plain"), "SELECT * FROM plain");
        assert_eq!(
            rewrite("SELECT _offset FROM usage"),
            "SELECT _offset FROM usage"
        );
    }

    #[test]
    fn join_wildcard_is_split_per_relation() {
        assert_eq!(
            rewrite("SELECT * FROM usage u JOIN plain p ON u.a = p.a"),
            "SELECT \"u\".* EXCLUDE (_partition, _offset, _ingested_at), \"p\".* FROM usage u JOIN plain p ON u.a = p.a"
        );
        assert_eq!(
            rewrite("SELECT x.* FROM (SELECT * FROM other) AS x"),
            "SELECT x.* FROM (SELECT * EXCLUDE (_partition, _offset, _ingested_at) FROM other) AS x"
        );
    }
}
