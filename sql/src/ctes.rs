//! `WITH` in a materialized view: each common table expression is put in
//! place of the names that read it, as a subquery (`FROM m` becomes
//! `FROM (query) AS m`), so the dataflow compiler sees one query. A CTE
//! sees the ones before it; inside its own body its name is the relation
//! it may shadow, as in PostgreSQL. `WITH RECURSIVE` is refused. A CTE read
//! twice is computed twice (its rows are the same each time: a view's
//! query has no volatile functions).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Ident, Query, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};

use crate::SqlError;

/// A CTE in scope: its name, its query (CTEs inlined) and column names.
struct Named {
    name: String,
    query: Query,
    columns: Vec<Ident>,
}

struct Inline {
    scope: Vec<Named>,
    /// How many names each query being visited put in scope.
    pushed: Vec<usize>,
    error: Option<SqlError>,
}

fn key(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

impl VisitorMut for Inline {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let Some(with) = query.with.take() else {
            self.pushed.push(0);
            return ControlFlow::Continue(());
        };
        if with.recursive {
            self.error = Some(SqlError::Unsupported(
                "WITH RECURSIVE is not supported in a materialized view".into(),
            ));
            return ControlFlow::Break(());
        }
        let count = with.cte_tables.len();
        for cte in with.cte_tables {
            let mut body = *cte.query;
            // The CTEs before it are in scope in its body; not itself.
            let mut inner = Inline {
                scope: std::mem::take(&mut self.scope),
                pushed: Vec::new(),
                error: None,
            };
            let flow = body.visit(&mut inner);
            self.scope = inner.scope;
            if let (ControlFlow::Break(()), Some(e)) = (flow, inner.error) {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
            self.scope.push(Named {
                name: key(&cte.alias.name),
                query: body,
                columns: cte.alias.columns.iter().map(|c| c.name.clone()).collect(),
            });
        }
        self.pushed.push(count);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        let n = self.pushed.pop().unwrap_or(0);
        self.scope.truncate(self.scope.len().saturating_sub(n));
        ControlFlow::Continue(())
    }

    // After the factor's children: the subquery put in is not visited.
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name, alias, args, ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let [part] = name.0.as_slice() else {
            return ControlFlow::Continue(());
        };
        let (Some(ident), None) = (part.as_ident(), args.as_ref()) else {
            return ControlFlow::Continue(());
        };
        let wanted = key(ident);
        // The innermost CTE of that name.
        let Some(cte) = self.scope.iter().rev().find(|c| c.name == wanted) else {
            return ControlFlow::Continue(());
        };
        let alias = match alias.take() {
            Some(mut a) => {
                if a.columns.is_empty() {
                    a.columns = cte.columns.iter().cloned().map(column).collect();
                }
                a
            }
            None => TableAlias {
                explicit: true,
                name: ident.clone(),
                columns: cte.columns.iter().cloned().map(column).collect(),
                at: None,
            },
        };
        *factor = TableFactor::Derived {
            lateral: false,
            subquery: Box::new(cte.query.clone()),
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

fn column(name: Ident) -> TableAliasColumnDef {
    TableAliasColumnDef {
        name,
        data_type: None,
    }
}

/// Puts each CTE of `statement` in place of the relations that name it.
pub fn inline_ctes(statement: &mut Statement) -> Result<(), SqlError> {
    let mut inline = Inline {
        scope: Vec::new(),
        pushed: Vec::new(),
        error: None,
    };
    let _ = statement.visit(&mut inline);
    match inline.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inlined(sql: &str) -> String {
        let mut s = crate::parse_one(sql);
        inline_ctes(&mut s).unwrap();
        s.to_string()
    }

    #[test]
    fn each_cte_takes_the_place_of_its_name() {
        assert_eq!(
            inlined("WITH m AS (SELECT u, count(*) AS n FROM ev GROUP BY u) SELECT u, n FROM m WHERE n > 1"),
            "SELECT u, n FROM (SELECT u, count(*) AS n FROM ev GROUP BY u) AS m WHERE n > 1"
        );
        // A later CTE reads an earlier one; column names; an alias.
        assert_eq!(
            inlined("WITH a (x) AS (SELECT id FROM t), b AS (SELECT x FROM a) SELECT * FROM b AS bb JOIN a ON a.x = bb.x"),
            "SELECT * FROM (SELECT x FROM (SELECT id FROM t) AS a (x)) AS bb JOIN (SELECT id FROM t) AS a (x) ON a.x = bb.x"
        );
        // Inside its own body, its name is the table it shadows.
        assert_eq!(
            inlined("WITH ev AS (SELECT * FROM ev WHERE id > 1) SELECT count(*) FROM ev"),
            "SELECT count(*) FROM (SELECT * FROM ev WHERE id > 1) AS ev"
        );
    }

    #[test]
    fn recursive_ctes_are_refused() {
        let mut s = crate::parse_one("WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r");
        assert!(inline_ctes(&mut s).is_err());
    }
}
