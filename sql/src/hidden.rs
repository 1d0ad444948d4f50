//! Keeps the hidden columns (`_partition`, `_offset`, `_ingested_at`) out of
//! `SELECT *`, `NATURAL` joins and column alias lists while leaving them
//! selectable by name, and expands `*` as PostgreSQL does.
//!
//! DataFusion expands wildcards and matches `NATURAL` columns while
//! planning, from the tables' full schemas, so the rewrite happens on the
//! AST, knowing each relation's columns (a table's or view's from the
//! catalog, a derived table's from its select list):
//!
//! - `NATURAL JOIN` becomes `JOIN ... USING` the visible columns both
//!   sides share (a cross join when they share none);
//! - `*` over joins with `USING` lists each `USING` column once, first
//!   (`COALESCE` of both sides for a full join), then the other columns of
//!   each side, as PostgreSQL's output does;
//! - `*` over a log table gets `EXCLUDE (<hidden columns>)`, and an
//!   unqualified `*` over a join becomes one qualified wildcard per
//!   relation, so that only the log tables' hidden columns are excluded;
//! - `t AS x(a, b)` over a log table names its visible columns (the rest
//!   keep their names), as PostgreSQL's alias list does;
//! - `EXCEPT ALL` and `INTERSECT ALL` keep multiplicities (DataFusion's
//!   keep each row of the left side whatever the right side's count): each
//!   side's rows are numbered within their value, and the numbered rows
//!   go through `EXCEPT` / `INTERSECT`.

use std::ops::ControlFlow;

use sqlparser::ast::{
    ExcludeSelectItem, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, JoinConstraint, JoinOperator, ObjectName, ObjectNamePart, Query,
    Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr, TableAlias, TableAliasColumnDef,
    TableFactor, TableWithJoins, Value, ValueWithSpan, VisitMut, VisitorMut,
    WildcardAdditionalOptions,
};

use crate::parse::ident_name;

/// A table's or view's columns as the planner sees them: those `*`
/// shows, then the hidden ones (empty for a view).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelationColumns {
    pub visible: Vec<String>,
    pub hidden: Vec<String>,
}

/// Rewrites `statement` as the module header says. `columns` is given the
/// unqualified, case-folded name of a relation and returns its columns
/// (`None` for a name it does not know).
pub fn hide_system_columns<F>(statement: &mut sqlparser::ast::Statement, columns: F)
where
    F: Fn(&str) -> Option<RelationColumns>,
{
    let mut rewriter = WildcardRewriter {
        columns,
        ctes: Vec::new(),
    };
    let _ = statement.visit(&mut rewriter);
}

struct WildcardRewriter<F> {
    columns: F,
    /// The common table expressions in scope, innermost last, with their
    /// columns where known.
    ctes: Vec<Vec<(String, Option<Vec<String>>)>>,
}

impl<F: Fn(&str) -> Option<RelationColumns>> VisitorMut for WildcardRewriter<F> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let mut scope = Vec::new();
        if let Some(with) = &mut query.with {
            for cte in &mut with.cte_tables {
                // A CTE's columns are what its body gives; the CTEs before
                // it are in scope there.
                self.ctes.push(scope.clone());
                let columns = if cte.alias.columns.is_empty() {
                    self.query_columns(&cte.query)
                } else {
                    Some(
                        cte.alias
                            .columns
                            .iter()
                            .map(|c| ident_name(&c.name))
                            .collect(),
                    )
                };
                self.ctes.pop();
                scope.push((ident_name(&cte.alias.name), columns));
            }
        }
        self.ctes.push(scope);
        self.rewrite_set_expr(&mut query.body);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.ctes.pop();
        ControlFlow::Continue(())
    }
}

/// A relation in a FROM clause: the name its columns are qualified with,
/// its visible columns where known, and a log table's hidden columns.
#[derive(Debug, Clone)]
struct Relation {
    qualifier: Option<String>,
    visible: Option<Vec<String>>,
    hidden: Option<Vec<String>>,
}

/// A column of a FROM item's output: its name and what it is.
#[derive(Debug, Clone)]
struct OutputColumn {
    name: String,
    expr: Expr,
    /// The expression needs `AS name` (a merged `USING` column).
    aliased: bool,
}

impl<F: Fn(&str) -> Option<RelationColumns>> WildcardRewriter<F> {
    fn rewrite_set_expr(&self, body: &mut SetExpr) {
        if let Some(counted) = self.counted_set_operation(body) {
            *body = counted;
        }
        match body {
            SetExpr::Select(select) => self.rewrite_select(select),
            SetExpr::SetOperation { left, right, .. } => {
                self.rewrite_set_expr(left);
                self.rewrite_set_expr(right);
            }
            _ => {}
        }
    }

    /// `a EXCEPT ALL b` (or `INTERSECT ALL`) with rows numbered within
    /// their value on both sides; None for any other body, or when the
    /// left side's columns are unknown.
    fn counted_set_operation(&self, body: &SetExpr) -> Option<SetExpr> {
        let SetExpr::SetOperation {
            left,
            op,
            set_quantifier: sqlparser::ast::SetQuantifier::All,
            right,
        } = body
        else {
            return None;
        };
        let op = match op {
            sqlparser::ast::SetOperator::Except => "EXCEPT",
            sqlparser::ast::SetOperator::Intersect => "INTERSECT",
            _ => return None,
        };
        let names = self.set_expr_columns(left)?;
        let columns: Vec<String> = (1..=names.len())
            .map(|i| format!("__sluice_c{i}"))
            .collect();
        let list = columns.join(", ");
        let side = |alias: &str, q: &SetExpr| {
            format!(
                "SELECT {alias}.*, row_number() OVER (PARTITION BY {list}) AS __sluice_n \
                 FROM ({q}) AS {alias}({list})"
            )
        };
        let outputs: Vec<String> = columns
            .iter()
            .zip(&names)
            .map(|(c, n)| format!("{c} AS \"{}\"", n.replace('"', "\"\"")))
            .collect();
        let sql = format!(
            "SELECT {} FROM ({} {op} {}) AS __sluice_counted",
            outputs.join(", "),
            side("__sluice_l", left),
            side("__sluice_r", right)
        );
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        let mut parsed = sqlparser::parser::Parser::parse_sql(&dialect, &sql).ok()?;
        match parsed.pop()? {
            sqlparser::ast::Statement::Query(q) => Some(*q.body),
            _ => None,
        }
    }

    fn set_expr_columns(&self, body: &SetExpr) -> Option<Vec<String>> {
        match body {
            SetExpr::SetOperation { left, .. } => self.set_expr_columns(left),
            SetExpr::Query(q) => self.query_columns(q),
            other => {
                let q = Query {
                    with: None,
                    body: Box::new(other.clone()),
                    order_by: None,
                    limit_clause: None,
                    fetch: None,
                    locks: vec![],
                    for_clause: None,
                    settings: None,
                    format_clause: None,
                    pipe_operators: vec![],
                };
                self.query_columns(&q)
            }
        }
    }

    fn cte(&self, name: &str) -> Option<Option<Vec<String>>> {
        self.ctes
            .iter()
            .rev()
            .flat_map(|scope| scope.iter().rev())
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
    }

    /// A FROM item: its name, columns and hidden columns. A derived
    /// table's columns are worked out only `with_derived` (they cost a walk
    /// of the subquery, and only NATURAL, USING and `*` over it need them).
    fn relation(&self, factor: &TableFactor, with_derived: bool) -> Relation {
        match factor {
            TableFactor::Table {
                name, alias, args, ..
            } => {
                let table = last_part(name);
                let qualifier = Some(
                    alias
                        .as_ref()
                        .map(|a| ident_name(&a.name))
                        .unwrap_or_else(|| table.clone()),
                );
                if args.is_some() || name.0.len() > 1 && !is_public(name) {
                    return Relation {
                        qualifier,
                        visible: None,
                        hidden: None,
                    };
                }
                // `public.t` names the table even where a CTE `t` is in scope.
                if let Some(cte) = (name.0.len() == 1).then(|| self.cte(&table)).flatten() {
                    return Relation {
                        qualifier,
                        visible: renamed(cte, alias.as_ref()),
                        hidden: None,
                    };
                }
                let known = (self.columns)(&table);
                Relation {
                    qualifier,
                    visible: renamed(known.as_ref().map(|k| k.visible.clone()), alias.as_ref()),
                    hidden: known.map(|k| k.hidden).filter(|h| !h.is_empty()),
                }
            }
            TableFactor::Derived {
                alias, subquery, ..
            } => Relation {
                qualifier: alias.as_ref().map(|a| ident_name(&a.name)),
                visible: if with_derived {
                    renamed(self.query_columns(subquery), alias.as_ref())
                } else {
                    None
                },
                hidden: None,
            },
            _ => Relation {
                qualifier: None,
                visible: None,
                hidden: None,
            },
        }
    }

    /// The names of a query's output columns, where they can be told
    /// without planning it.
    fn query_columns(&self, query: &Query) -> Option<Vec<String>> {
        let mut body = query.body.as_ref();
        while let SetExpr::SetOperation { left, .. } = body {
            body = left;
        }
        match body {
            SetExpr::Select(select) => {
                let relations = self.relations(select, true);
                let mut names = Vec::new();
                for item in &select.projection {
                    match item {
                        SelectItem::UnnamedExpr(Expr::Identifier(i)) => names.push(ident_name(i)),
                        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                            names.push(ident_name(parts.last()?))
                        }
                        SelectItem::ExprWithAlias { alias, .. } => names.push(ident_name(alias)),
                        SelectItem::Wildcard(opts) => {
                            let excluded = excluded(opts);
                            for c in self.expansion(select, &relations)? {
                                if !excluded.contains(&c.name) {
                                    names.push(c.name);
                                }
                            }
                        }
                        SelectItem::QualifiedWildcard(
                            SelectItemQualifiedWildcardKind::ObjectName(n),
                            opts,
                        ) => {
                            let q = last_part(n);
                            let r = relations
                                .iter()
                                .find(|r| r.qualifier.as_deref() == Some(q.as_str()))?;
                            let excluded = excluded(opts);
                            names.extend(
                                r.visible
                                    .clone()?
                                    .into_iter()
                                    .filter(|c| !excluded.contains(c)),
                            );
                        }
                        _ => return None,
                    }
                }
                Some(names)
            }
            SetExpr::Query(q) => self.query_columns(q),
            SetExpr::Values(v) => {
                let n = v.rows.first()?.len();
                Some((1..=n).map(|i| format!("column{i}")).collect())
            }
            _ => None,
        }
    }

    /// The select's FROM items in order (each item, then its joins).
    fn relations(&self, select: &Select, with_derived: bool) -> Vec<Relation> {
        select
            .from
            .iter()
            .flat_map(|twj| {
                std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation))
            })
            .map(|f| self.relation(f, with_derived))
            .collect()
    }

    fn rewrite_select(&self, select: &mut Select) {
        // `(a JOIN b USING (k))` as a FROM item is `a JOIN b USING (k)`:
        // the parentheses group what already groups from the left.
        for twj in &mut select.from {
            while let TableFactor::NestedJoin {
                table_with_joins,
                alias: None,
            } = &mut twj.relation
            {
                let inner = std::mem::replace(
                    table_with_joins.as_mut(),
                    TableWithJoins {
                        relation: TableFactor::Table {
                            name: ObjectName(vec![]),
                            alias: None,
                            args: None,
                            with_hints: vec![],
                            version: None,
                            with_ordinality: false,
                            partitions: vec![],
                            json_path: None,
                            sample: None,
                            index_hints: vec![],
                        },
                        joins: vec![],
                    },
                );
                let outer_joins = std::mem::take(&mut twj.joins);
                twj.relation = inner.relation;
                twj.joins = inner.joins;
                twj.joins.extend(outer_joins);
            }
        }
        // Column alias lists over log tables name the visible columns.
        for twj in &mut select.from {
            self.rewrite_alias_list(&mut twj.relation);
            for j in &mut twj.joins {
                self.rewrite_alias_list(&mut j.relation);
            }
        }
        let joined_by_columns = select.from.iter().any(|twj| {
            twj.joins.iter().any(|j| {
                matches!(
                    constraint(&j.join_operator),
                    Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
                )
            })
        });
        let relations = self.relations(select, joined_by_columns);
        // NATURAL joins use the visible columns both sides share.
        if joined_by_columns {
            let mut at = 0;
            for twj in &mut select.from {
                let n = 1 + twj.joins.len();
                self.rewrite_natural_joins(twj, &relations[at..at + n]);
                at += n;
            }
            merge_using_columns(select, &relations);
        }
        wildcard_arguments_as_rows(select, &relations);
        let expansion = if joined_by_columns {
            self.expansion(select, &relations)
        } else {
            None
        };
        if expansion.is_none() && !relations.iter().any(|r| r.hidden.is_some()) {
            return;
        }
        let mut projection = Vec::with_capacity(select.projection.len());
        for item in select.projection.drain(..) {
            match item {
                SelectItem::Wildcard(opts)
                    if expansion.is_some()
                        && opts.opt_except.is_none()
                        && opts.opt_replace.is_none()
                        && opts.opt_rename.is_none() =>
                {
                    let excluded = excluded(&opts);
                    for c in expansion.iter().flatten() {
                        if excluded.contains(&c.name) {
                            continue;
                        }
                        projection.push(if c.aliased {
                            SelectItem::ExprWithAlias {
                                expr: c.expr.clone(),
                                alias: Ident::with_quote('"', c.name.clone()),
                            }
                        } else {
                            SelectItem::UnnamedExpr(c.expr.clone())
                        });
                    }
                }
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

    /// `t AS x(a, b)` over a log table: the listed names for its first
    /// visible columns, the others' own names, then the hidden columns.
    fn rewrite_alias_list(&self, factor: &mut TableFactor) {
        let TableFactor::Table {
            name,
            alias: Some(alias),
            args: None,
            ..
        } = factor
        else {
            return;
        };
        if alias.columns.is_empty() {
            return;
        }
        let Some(known) = (self.columns)(&last_part(name)) else {
            return;
        };
        if known.hidden.is_empty() || alias.columns.len() > known.visible.len() {
            return;
        }
        let given = alias.columns.len();
        for c in known.visible.iter().skip(given).chain(&known.hidden) {
            alias.columns.push(TableAliasColumnDef {
                name: Ident::with_quote('"', c.clone()),
                data_type: None,
            });
        }
    }

    fn rewrite_natural_joins(&self, twj: &mut TableWithJoins, relations: &[Relation]) {
        let mut left_columns: Option<Vec<String>> = relations[0].visible.clone();
        for (k, join) in twj.joins.iter_mut().enumerate() {
            let right = relations[k + 1].clone();
            let is_natural = matches!(
                constraint(&join.join_operator),
                Some(JoinConstraint::Natural)
            );
            if is_natural {
                if let (Some(l), Some(r)) = (&left_columns, &right.visible) {
                    let common: Vec<String> = l.iter().filter(|c| r.contains(c)).cloned().collect();
                    let new = if common.is_empty() {
                        JoinConstraint::On(Expr::Value(ValueWithSpan::from(Value::Boolean(true))))
                    } else {
                        JoinConstraint::Using(
                            common
                                .iter()
                                .map(|c| {
                                    ObjectName(vec![ObjectNamePart::Identifier(Ident::with_quote(
                                        '"',
                                        c.clone(),
                                    ))])
                                })
                                .collect(),
                        )
                    };
                    set_constraint(&mut join.join_operator, new);
                }
            }
            left_columns = match (left_columns, right.visible, constraint(&join.join_operator)) {
                (Some(l), Some(r), Some(JoinConstraint::Using(cols))) => {
                    let using: Vec<String> = cols.iter().map(last_part).collect();
                    let mut out = using.clone();
                    out.extend(l.into_iter().filter(|c| !using.contains(c)));
                    out.extend(r.into_iter().filter(|c| !using.contains(c)));
                    Some(out)
                }
                (Some(mut l), Some(r), _) => {
                    l.extend(r);
                    Some(l)
                }
                _ => None,
            };
        }
    }

    /// The columns `*` gives over the select's FROM clause, as PostgreSQL
    /// orders them; None where a relation's columns or name are unknown.
    fn expansion(&self, select: &Select, relations: &[Relation]) -> Option<Vec<OutputColumn>> {
        let mut out = Vec::new();
        let mut at = 0;
        for twj in &select.from {
            let mut columns = columns_of(&relations[at])?;
            at += 1;
            for join in &twj.joins {
                let right = columns_of(&relations[at])?;
                at += 1;
                match constraint(&join.join_operator) {
                    Some(JoinConstraint::Using(cols)) => {
                        let using: Vec<String> = cols.iter().map(last_part).collect();
                        let mut merged = Vec::new();
                        for u in &using {
                            let l = columns.iter().find(|c| &c.name == u)?;
                            let r = right.iter().find(|c| &c.name == u)?;
                            merged.push(match &join.join_operator {
                                JoinOperator::FullOuter(_) => OutputColumn {
                                    name: u.clone(),
                                    expr: coalesce(l.expr.clone(), r.expr.clone()),
                                    aliased: true,
                                },
                                JoinOperator::Right(_) | JoinOperator::RightOuter(_) => r.clone(),
                                _ => l.clone(),
                            });
                        }
                        merged.extend(columns.into_iter().filter(|c| !using.contains(&c.name)));
                        merged.extend(right.into_iter().filter(|c| !using.contains(&c.name)));
                        columns = merged;
                    }
                    Some(JoinConstraint::Natural) => return None,
                    _ => columns.extend(right),
                }
            }
            out.extend(columns);
        }
        Some(out)
    }
}

/// An unqualified reference to a column a `USING` join merged reads the
/// merged column: the right side's after a RIGHT join, `COALESCE` of both
/// sides after a FULL one (DataFusion reads the left side's, or finds the
/// name ambiguous). In the select list it keeps its name; ORDER BY, which
/// may name an output column, is left alone.
fn merge_using_columns(select: &mut Select, relations: &[Relation]) {
    let mut merged: Vec<(String, Expr)> = Vec::new();
    let mut at = 0;
    for twj in &select.from {
        let mut left: Vec<&Relation> = vec![&relations[at]];
        let mut here: Vec<(String, Expr, bool)> = Vec::new();
        at += 1;
        for join in &twj.joins {
            let right = &relations[at];
            at += 1;
            if let Some(JoinConstraint::Using(cols)) = constraint(&join.join_operator) {
                for u in cols.iter().map(last_part) {
                    let column = |r: &Relation| {
                        r.qualifier.as_ref().map(|q| {
                            Expr::CompoundIdentifier(vec![
                                Ident::with_quote('"', q.clone()),
                                Ident::with_quote('"', u.clone()),
                            ])
                        })
                    };
                    let earlier = here.iter().position(|(n, _, _)| *n == u);
                    let left_expr = match earlier {
                        Some(i) => Some(here[i].1.clone()),
                        None => match left.as_slice() {
                            [only] => column(only),
                            many => many
                                .iter()
                                .rev()
                                .find(|r| r.visible.as_ref().is_some_and(|v| v.contains(&u)))
                                .and_then(|r| column(r)),
                        },
                    };
                    let (Some(l), Some(r)) = (left_expr, column(right)) else {
                        continue;
                    };
                    let changed = earlier.is_some_and(|i| here[i].2);
                    let (expr, changed) = match &join.join_operator {
                        JoinOperator::FullOuter(_) => (coalesce(l, r), true),
                        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => (r, true),
                        _ => (l, changed),
                    };
                    match earlier {
                        Some(i) => here[i] = (u, expr, changed),
                        None => here.push((u, expr, changed)),
                    }
                }
            }
            left.push(right);
        }
        merged.extend(
            here.into_iter()
                .filter(|(_, _, c)| *c)
                .map(|(n, e, _)| (n, e)),
        );
    }
    if merged.is_empty() {
        return;
    }
    let mut rewriter = MergedColumns {
        merged: &merged,
        depth: 0,
    };
    for item in select.projection.iter_mut() {
        match item {
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => {
                let name = ident_name(i);
                if let Some((_, e)) = merged.iter().find(|(n, _)| *n == name) {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', name),
                    };
                }
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let _ = e.visit(&mut rewriter);
            }
            _ => {}
        }
    }
    if let Some(e) = &mut select.selection {
        let _ = e.visit(&mut rewriter);
    }
    if let Some(e) = &mut select.having {
        let _ = e.visit(&mut rewriter);
    }
    if let sqlparser::ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for e in exprs.iter_mut() {
            let _ = e.visit(&mut rewriter);
        }
    }
}

/// Replaces unqualified references to merged columns, outside subqueries
/// (whose own relations come first).
struct MergedColumns<'a> {
    merged: &'a [(String, Expr)],
    depth: usize,
}

impl VisitorMut for MergedColumns<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0 {
            if let Expr::Identifier(i) = expr {
                let name = ident_name(i);
                if let Some((_, e)) = self.merged.iter().find(|(n, _)| *n == name) {
                    *expr = Expr::Nested(Box::new(e.clone()));
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// `count(DISTINCT t.*)`: a relation's row as an argument is the row of
/// its visible columns (DataFusion reads `t.*` there as one value for
/// every row).
fn wildcard_arguments_as_rows(select: &mut Select, relations: &[Relation]) {
    struct Rows<'a> {
        relations: &'a [Relation],
    }
    impl VisitorMut for Rows<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            let Expr::Function(f) = expr else {
                return ControlFlow::Continue(());
            };
            let FunctionArguments::List(list) = &mut f.args else {
                return ControlFlow::Continue(());
            };
            for arg in list.args.iter_mut() {
                let FunctionArg::Unnamed(FunctionArgExpr::QualifiedWildcard(name)) = arg else {
                    continue;
                };
                let q = last_part(name);
                let Some(r) = self
                    .relations
                    .iter()
                    .find(|r| r.qualifier.as_deref() == Some(q.as_str()))
                else {
                    continue;
                };
                let Some(columns) = columns_of(r) else {
                    continue;
                };
                let fields: Vec<Expr> = columns.into_iter().map(|c| c.expr).collect();
                *arg = FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Tuple(fields)));
            }
            ControlFlow::Continue(())
        }
    }
    let mut rows = Rows { relations };
    for item in select.projection.iter_mut() {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = e.visit(&mut rows);
        }
    }
    if let Some(e) = &mut select.having {
        let _ = e.visit(&mut rows);
    }
}

fn columns_of(r: &Relation) -> Option<Vec<OutputColumn>> {
    let q = r.qualifier.clone()?;
    Some(
        r.visible
            .clone()?
            .into_iter()
            .map(|c| OutputColumn {
                expr: Expr::CompoundIdentifier(vec![
                    Ident::with_quote('"', q.clone()),
                    Ident::with_quote('"', c.clone()),
                ]),
                name: c,
                aliased: false,
            })
            .collect(),
    )
}

fn coalesce(l: Expr, r: Expr) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new("coalesce")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![
                FunctionArg::Unnamed(FunctionArgExpr::Expr(l)),
                FunctionArg::Unnamed(FunctionArgExpr::Expr(r)),
            ],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// An alias list's names in place of the first columns' names.
fn renamed(columns: Option<Vec<String>>, alias: Option<&TableAlias>) -> Option<Vec<String>> {
    let mut columns = columns?;
    if let Some(a) = alias {
        for (c, given) in columns.iter_mut().zip(&a.columns) {
            *c = ident_name(&given.name);
        }
    }
    Some(columns)
}

fn is_public(name: &ObjectName) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(ident_name))
        .collect();
    matches!(parts.as_slice(), [.., schema, _] if schema == "public")
}

fn constraint(op: &JoinOperator) -> Option<&JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::AsOf { constraint: c, .. } => Some(c),
        _ => None,
    }
}

fn set_constraint(op: &mut JoinOperator, new: JoinConstraint) {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::AsOf { constraint: c, .. } => *c = new,
        _ => {}
    }
}

fn excluded(opts: &WildcardAdditionalOptions) -> Vec<String> {
    match &opts.opt_exclude {
        Some(ExcludeSelectItem::Single(n)) => vec![last_part(n)],
        Some(ExcludeSelectItem::Multiple(ns)) => ns.iter().map(last_part).collect(),
        None => vec![],
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
    if !names.is_empty() {
        opts.opt_exclude = Some(ExcludeSelectItem::Multiple(names));
    }
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
            let visible: Vec<String> = match t {
                "usage" => vec!["a".into(), "tenant".into()],
                "other" => vec!["k".into(), "b".into()],
                "n1" => vec!["k".into(), "a".into()],
                "n2" => vec!["k".into(), "b".into()],
                _ => return None,
            };
            Some(RelationColumns {
                visible,
                hidden: HIDDEN_COLUMNS.iter().map(|c| c.to_string()).collect(),
            })
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

    #[test]
    fn merged_using_columns_read_as_postgresql_merges_them() {
        assert_eq!(
            rewrite("SELECT k, k IS NULL FROM n1 FULL JOIN n2 USING (k) WHERE k > 2 ORDER BY k"),
            "SELECT coalesce(\"n1\".\"k\", \"n2\".\"k\") AS \"k\", (coalesce(\"n1\".\"k\", \"n2\".\"k\")) IS NULL FROM n1 FULL JOIN n2 USING(k) WHERE (coalesce(\"n1\".\"k\", \"n2\".\"k\")) > 2 ORDER BY k"
        );
        assert_eq!(
            rewrite("SELECT k FROM n1 RIGHT JOIN n2 USING (k)"),
            "SELECT \"n2\".\"k\" AS \"k\" FROM n1 RIGHT JOIN n2 USING(k)"
        );
        // After an inner or left join the left side's is the merged one,
        // as DataFusion reads it.
        assert_eq!(
            rewrite("SELECT k FROM n1 LEFT JOIN n2 USING (k)"),
            "SELECT k FROM n1 LEFT JOIN n2 USING(k)"
        );
    }

    #[test]
    fn parenthesized_joins_public_names_and_row_arguments_hide_system_columns() {
        assert_eq!(
            rewrite("SELECT * FROM (n1 a JOIN n1 b USING (k))"),
            "SELECT \"a\".\"k\", \"a\".\"a\", \"b\".\"a\" FROM n1 a JOIN n1 b USING(k)"
        );
        assert_eq!(
            rewrite("WITH n1 AS (VALUES (1, 2)) SELECT * FROM public.n1"),
            "WITH n1 AS (VALUES (1, 2)) SELECT * EXCLUDE (_partition, _offset, _ingested_at) FROM public.n1"
        );
        assert_eq!(
            rewrite("SELECT count(DISTINCT x.*) FROM n1 x"),
            "SELECT count(DISTINCT (\"x\".\"k\", \"x\".\"a\")) FROM n1 x"
        );
    }

    #[test]
    fn natural_and_using_joins_show_each_column_once() {
        assert_eq!(
            rewrite("SELECT * FROM n1 NATURAL JOIN n2"),
            "SELECT \"n1\".\"k\", \"n1\".\"a\", \"n2\".\"b\" FROM n1 JOIN n2 USING(\"k\")"
        );
        assert_eq!(
            rewrite("SELECT * FROM n1 FULL JOIN n2 USING (k)"),
            "SELECT coalesce(\"n1\".\"k\", \"n2\".\"k\") AS \"k\", \"n1\".\"a\", \"n2\".\"b\" FROM n1 FULL JOIN n2 USING(k)"
        );
        assert_eq!(
            rewrite("SELECT * FROM n1 NATURAL JOIN usage"),
            "SELECT \"n1\".\"a\", \"n1\".\"k\", \"usage\".\"tenant\" FROM n1 JOIN usage USING(\"a\")"
        );
        assert_eq!(
            rewrite("SELECT * FROM (SELECT 1 AS k) q NATURAL JOIN n1"),
            "SELECT \"q\".\"k\", \"n1\".\"a\" FROM (SELECT 1 AS k) q JOIN n1 USING(\"k\")"
        );
        assert_eq!(
            rewrite("SELECT * FROM n1 AS l(kk, aa)"),
            "SELECT * EXCLUDE (_partition, _offset, _ingested_at) FROM n1 AS l (kk, aa, \"_partition\", \"_offset\", \"_ingested_at\")"
        );
    }
}
