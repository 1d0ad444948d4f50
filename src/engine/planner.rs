//! Planning: SQL to a DataFusion plan for a session's role, with the
//! rewrites PostgreSQL clients need and the privilege check on every table
//! and view the plan reads or writes; and what Parse prepares.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use sluice_sql::sqlparser::ast;
use sluice_sql::{
    parse_sql, rewrite_window_functions, split_statements, InsertValue, ResultName, Statement,
};

use super::returning::Returning;
use super::{
    check_on_conflict, shown_name, shown_session_setting, transaction_setting, SessionSettings,
};
use crate::auth::{ObjectKind, RoleStore, SessionRole};
use crate::error::SluiceError;
use crate::ingest::{implicit_insert_columns, PreparedInsert};
use crate::log::{LogStore, TableLog};
use crate::metrics::statement_kind;
use crate::query::cancel::show_timeout;
use crate::query::ON_CONFLICT_DO_NOTHING;
use crate::system::PointRead;

/// A statement prepared with Parse.
#[derive(Debug, Clone)]
pub enum Prepared {
    Empty,
    /// Planned by DataFusion; may take parameters.
    Plan {
        plan: Box<LogicalPlan>,
        params: ParamFields,
        is_insert: bool,
        /// The result's columns as the client sees them.
        columns: SchemaRef,
        /// Its SQL, planned again when a table it reads was dropped and
        /// created anew since.
        source: Arc<str>,
        /// An INSERT's RETURNING list (`columns` are its columns).
        returning: Option<Arc<Returning>>,
    },
    /// An INSERT of literals and parameters, staged without a plan, and
    /// its RETURNING list.
    Insert(Arc<PreparedInsert>, Option<Arc<Returning>>),
    /// A point read of a view, answered from its index; the plan describes
    /// the statement.
    PointRead {
        plan: Box<LogicalPlan>,
        params: ParamFields,
        read: Arc<PointRead>,
        /// The result's columns as the client sees them.
        columns: SchemaRef,
    },
    /// Executed as in the simple protocol when the portal runs (no
    /// parameters, no result rows).
    Direct(String),
    /// `UPDATE` or `DELETE` with parameters: the query that finds the rows
    /// it writes, planned with its placeholders, bound when it runs.
    Modify {
        change: Arc<RowChange>,
        plan: Box<LogicalPlan>,
        params: ParamFields,
    },
    /// Executed as in the simple protocol, returning rows of a schema
    /// known when it was prepared (FETCH from a subscription cursor).
    Rows {
        sql: String,
        schema: SchemaRef,
    },
}

/// What an `UPDATE` or `DELETE` writes for the rows its query finds.
#[derive(Debug)]
pub enum RowChange {
    /// New versions of the rows (the query gives every column).
    Update { table: String },
    /// Tombstones of the rows' keys (the query gives the key columns).
    Delete { table: String },
    /// A DELETE of an append-only table: an erasure of the rows its
    /// condition matches once its parameters are bound (the query only
    /// gave their types).
    Erase { table: String, selection: String },
}

/// A planned statement's parameter types in order, found once when it is
/// prepared rather than at every Bind.
pub type ParamFields = Arc<Vec<Option<FieldRef>>>;

impl Prepared {
    /// What the statements metric counts it as.
    pub(crate) fn kind(&self) -> String {
        match self {
            Prepared::Direct(sql) | Prepared::Rows { sql, .. } => statement_kind(sql),
            Prepared::Plan {
                is_insert: true, ..
            }
            | Prepared::Insert(..) => "insert".into(),
            Prepared::Plan { .. } | Prepared::PointRead { .. } => "select".into(),
            Prepared::Modify { change, .. } => match change.as_ref() {
                RowChange::Update { .. } => "update".into(),
                RowChange::Delete { .. } | RowChange::Erase { .. } => "delete".into(),
            },
            Prepared::Empty => "other".into(),
        }
    }

    /// The columns of the rows it answers with (None: it answers with a
    /// command tag only).
    pub fn result_columns(&self) -> Option<&SchemaRef> {
        match self {
            Prepared::Plan {
                columns,
                is_insert: false,
                ..
            }
            | Prepared::Plan {
                columns,
                returning: Some(_),
                ..
            }
            | Prepared::PointRead { columns, .. }
            | Prepared::Rows {
                schema: columns, ..
            } => Some(columns),
            Prepared::Insert(_, Some(returning)) => Some(&returning.columns),
            _ => None,
        }
    }

    fn plan(
        (plan, columns): (LogicalPlan, SchemaRef),
        is_insert: bool,
        source: &str,
    ) -> Result<Prepared, SluiceError> {
        Ok(Prepared::Plan {
            params: Arc::new(ordered_parameter_types(&plan)?),
            plan: Box::new(plan),
            is_insert,
            columns,
            source: Arc::from(source),
            returning: None,
        })
    }
}

pub struct Planner {
    pub(super) store: Arc<LogStore>,
    pub(super) views: Arc<crate::stream::ViewManager>,
    pub(super) ctx: Arc<SessionContext>,
    pub(super) compat: Arc<PostgresCompatibilityParser>,
    pub(super) roles: Arc<RoleStore>,
}

impl Planner {
    /// Plans a statement DataFusion executes: wildcards over log tables lose
    /// the hidden columns, and DDL or DML other than INSERT is refused.
    /// `role` is the session's: `current_user` and `session_user` name
    /// it, and the plan is checked against its privileges (SELECT on every
    /// table and view it reads, INSERT on every table it inserts into).
    pub(crate) async fn plan(
        &self,
        stmt: ast::Statement,
        role: &SessionRole,
    ) -> Result<LogicalPlan, SluiceError> {
        Ok(self.plan_shown(stmt, role).await?.0)
    }

    /// [`Planner::plan`], and the result's columns as the client sees
    /// them: named as PostgreSQL names them (see `sluice_sql::result_names`).
    pub(crate) async fn plan_shown(
        &self,
        stmt: ast::Statement,
        role: &SessionRole,
    ) -> Result<(LogicalPlan, SchemaRef), SluiceError> {
        // Planning changes nothing but the plan: a panic in it (a bug of
        // the planner's, as an overflow in constant folding) fails the
        // statement with XX000 and leaves the connection usable.
        use futures::FutureExt;
        std::panic::AssertUnwindSafe(self.plan_shown_unguarded(stmt, role))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                let reason = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                Err(SluiceError::Internal(format!(
                    "planning the statement failed unexpectedly: {reason}"
                )))
            })
    }

    async fn plan_shown_unguarded(
        &self,
        mut stmt: ast::Statement,
        role: &SessionRole,
    ) -> Result<(LogicalPlan, SchemaRef), SluiceError> {
        let names = sluice_sql::name_result_columns(&mut stmt);
        let store = self.store.clone();
        sluice_sql::bind_session_user(&mut stmt, &role.name);
        rewrite_window_functions(&mut stmt)?;
        if let ast::Statement::Insert(ast::Insert {
            table: ast::TableObject::TableName(name),
            ..
        }) = &stmt
        {
            let table = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(sluice_sql::ident_name);
            if let Some(t) = table.and_then(|t| self.store.table(&t)) {
                t.check_statement_writes()?;
            }
        }
        crate::system::rewrite_for_planning(&mut stmt, &store, self.views.as_ref())?;
        let state = self.ctx.state();
        let plan = state
            .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
            .await?;
        let plan = crate::query::postgres_plan(plan)?;
        match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Copy(_) | LogicalPlan::Statement(_) => Err(
                SluiceError::Unsupported(format!("statement not supported: {}", plan.display())),
            ),
            LogicalPlan::Dml(dml)
                if !matches!(dml.op, datafusion::logical_expr::WriteOp::Insert(_)) =>
            {
                Err(SluiceError::Unsupported(format!(
                    "{} is not supported",
                    dml.op
                )))
            }
            _ => {
                self.check_access(role, &plan)?;
                let shown = shown_columns(plan.schema().as_arrow(), names.as_deref());
                Ok((plan, shown))
            }
        }
    }

    /// SELECT on what `plan` reads, INSERT on what it inserts into.
    pub(crate) fn check_access(
        &self,
        role: &SessionRole,
        plan: &LogicalPlan,
    ) -> Result<(), SluiceError> {
        let access = crate::system::plan_access(plan);
        for name in &access.inserts {
            if let Some(t) = self.store.table(name) {
                t.check_statement_writes()?;
            }
        }
        if self.roles.is_superuser(role) {
            return Ok(());
        }
        for (kind, name) in &access.reads {
            self.roles
                .check(role, *kind, name, sluice_sql::Privilege::Select)?;
        }
        for name in &access.inserts {
            self.roles
                .check(role, ObjectKind::Table, name, sluice_sql::Privilege::Insert)?;
        }
        Ok(())
    }

    /// Re-reads a query with the compatibility rules that rewrite psql's and
    /// drivers' catalog queries into SQL DataFusion can plan.
    ///
    /// A query naming the session's role (`current_user`, `session_user`,
    /// `current_role`) is `fallback` with the role bound in, then those
    /// rules: they would rename `current_user` to `session_user`, and the
    /// column with it.
    pub(crate) fn compat_statement(
        &self,
        sql: &str,
        mut fallback: ast::Statement,
        user: &str,
    ) -> ast::Statement {
        // Before the compatibility rules, which would look a regproc
        // literal up as an oid (Sluice's regproc columns are names).
        sluice_sql::rewrite_regproc_literals(&mut fallback);
        let rewritten = sluice_sql::regproc_literals_in_text(sql);
        let sql = rewritten.as_deref().unwrap_or(sql);
        let lower = sql.to_ascii_lowercase();
        if ["current_user", "session_user", "current_role"]
            .iter()
            .any(|f| lower.contains(f))
        {
            let mut s = fallback;
            sluice_sql::bind_session_user(&mut s, user);
            if !sluice_sql::reads_catalog(&s) {
                return s;
            }
            return self.compat.rewrite(s);
        }
        if let Some(s) = sluice_sql::driver_query(sql) {
            return s;
        }
        // A user's query keeps PostgreSQL's meaning: the rules are for
        // catalog queries (see `sluice_sql::reads_catalog`). The fallback
        // is the statement itself when it is a query; otherwise `sql` says.
        let plain = match fallback {
            ast::Statement::Query(_) => Some(fallback.clone()),
            _ => sluice_sql::sqlparser::parser::Parser::parse_sql(
                &sluice_sql::sqlparser::dialect::PostgreSqlDialect {},
                sql,
            )
            .ok()
            .and_then(|mut s| (s.len() == 1).then(|| s.remove(0))),
        };
        if let Some(plain) = &plain {
            if !sluice_sql::reads_catalog(plain) {
                return plain.clone();
            }
        }
        let parsed = match self.compat.parse(sql) {
            Ok(mut s) if s.len() == 1 => s.remove(0),
            _ => return fallback,
        };
        // A scalar subquery in a select list (sqlsmith's `(SELECT nspname
        // FROM pg_namespace WHERE oid = pronamespace)`) is kept from the
        // rules that would make it NULL, unless the statement is one the
        // rules replace whole (then the rules' statement differs).
        if let Some(plain) = plain {
            let mut protected = plain.clone();
            // Most catalog queries have no such subquery: one rewrite.
            if sluice_sql::protect_projection_subqueries(&mut protected)
                && self.compat.rewrite(plain).to_string() == parsed.to_string()
            {
                return self.compat.rewrite(protected);
            }
        }
        parsed
    }

    /// SQL that answers statements expressed as queries (SHOW ...).
    /// `session`: what the settings kept by the session show.
    pub(crate) fn query_for(
        &self,
        stmt: &Statement,
        session: Option<&SessionSettings>,
    ) -> Option<String> {
        match stmt {
            Statement::ShowTables => Some(
                "SELECT table_name AS name FROM information_schema.tables \
                 WHERE table_schema = 'public' AND table_name IN \
                 (SELECT DISTINCT table_name FROM sluice_catalog.tables) ORDER BY table_name"
                    .into(),
            ),
            Statement::ShowViews => {
                Some("SELECT view_name AS name FROM sluice_catalog.views ORDER BY view_name".into())
            }
            Statement::Query(q) => match q.as_ref() {
                ast::Statement::ShowVariable { variable } => {
                    let name = shown_name(variable);
                    let name = if name == "time zone" {
                        "timezone".to_string()
                    } else {
                        name
                    };
                    let value = match (transaction_setting(&name), session) {
                        (Some(setting), Some(s)) => Some(
                            setting
                                .value(match name.starts_with("default_") {
                                    true => s.defaults,
                                    false => s.current,
                                })
                                .to_string(),
                        ),
                        (None, Some(s)) if name == "statement_timeout" => {
                            Some(show_timeout(s.statement_timeout))
                        }
                        _ => crate::query::setting(&name).map(str::to_string),
                    };
                    value.map(|v| format!("SELECT '{v}' AS \"{name}\""))
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// An INSERT without a column list names the table's columns, so that
    /// DataFusion does not expect values for the hidden columns.
    pub(crate) fn insert_with_columns(
        &self,
        table: &str,
        mut statement: ast::Statement,
        on_conflict_do_nothing: bool,
        on_conflict_update: Option<&sluice_sql::ConflictUpdate>,
    ) -> Result<ast::Statement, SluiceError> {
        let log = self
            .store
            .table(table)
            .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
        check_on_conflict(&log.def(), on_conflict_do_nothing, on_conflict_update)?;
        if let ast::Statement::Insert(insert) = &mut statement {
            if on_conflict_do_nothing {
                // The target under the name that inserts with ON CONFLICT
                // DO NOTHING semantics.
                insert.table = ast::TableObject::TableName(ast::ObjectName(vec![
                    ast::ObjectNamePart::Identifier(ast::Ident::with_quote(
                        '"',
                        format!("{table}{ON_CONFLICT_DO_NOTHING}"),
                    )),
                ]));
            }
            if insert.columns.is_empty() {
                let def = log.def();
                // VALUES or a SELECT with fewer values than the table has
                // columns write its first columns.
                let width = match insert.source.as_deref().map(|q| q.body.as_ref()) {
                    Some(ast::SetExpr::Values(v)) => v.rows.first().map(|r| r.len()),
                    Some(ast::SetExpr::Select(s))
                        if !s.projection.iter().any(|i| {
                            matches!(
                                i,
                                ast::SelectItem::Wildcard(_)
                                    | ast::SelectItem::QualifiedWildcard(..)
                            )
                        }) =>
                    {
                        Some(s.projection.len())
                    }
                    _ => None,
                };
                let implicit = width.map(|w| implicit_insert_columns(&def, w));
                insert.columns = def
                    .columns
                    .iter()
                    .filter(|c| {
                        implicit
                            .as_ref()
                            .is_none_or(|i| i.is_empty() || i.contains(&c.name))
                    })
                    .map(|c| {
                        ast::ObjectName(vec![ast::ObjectNamePart::Identifier(
                            ast::Ident::with_quote('"', &c.name),
                        )])
                    })
                    .collect();
            }
        }
        Ok(statement)
    }

    /// `user`: the session's role, which `current_user` names.
    pub(crate) async fn prepare(
        &self,
        sql: &str,
        role: &SessionRole,
    ) -> Result<Prepared, SluiceError> {
        let user = role;
        let mut pieces = split_statements(sql)?;
        if pieces.is_empty() {
            return Ok(Prepared::Empty);
        }
        if pieces.len() > 1 {
            return Err(SluiceError::Sql(sluice_sql::SqlError::Syntax(
                "cannot insert multiple commands into a prepared statement".into(),
            )));
        }
        let piece = pieces.remove(0);
        let stmt = parse_sql(&piece)?;
        if let Some(setting) = shown_session_setting(&stmt) {
            // Answered when it runs, from the session.
            return Ok(Prepared::Rows {
                sql: piece,
                schema: Arc::new(arrow::datatypes::Schema::new(vec![
                    arrow::datatypes::Field::new(setting, DataType::Utf8, false),
                ])),
            });
        }
        if let Some(q) = self.query_for(&stmt, None) {
            let s = self.compat_statement(
                &q,
                ast::Statement::Commit {
                    chain: false,
                    end: false,
                    modifier: None,
                },
                &user.name,
            );
            return Prepared::plan(self.plan_shown(s, user).await?, false, &piece);
        }
        match stmt {
            Statement::Insert {
                values: Some(rows),
                statement,
                table,
                columns,
                on_conflict_do_nothing,
                on_conflict_update,
                returning,
            } => {
                let log = self
                    .store
                    .table(&table)
                    .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
                log.check_statement_writes()?;
                check_on_conflict(
                    &log.def(),
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                let literal = rows
                    .iter()
                    .flatten()
                    .all(|v| matches!(v, InsertValue::Literal(_)));
                let returning = match returning {
                    Some(q) => Some(Arc::new(self.returning(&table, &q, user).await?)),
                    None => None,
                };
                let columns = match columns.is_empty() {
                    true => {
                        implicit_insert_columns(&log.def(), rows.first().map_or(0, |r| r.len()))
                    }
                    false => columns,
                };
                if let Some(insert) =
                    PreparedInsert::new(&log.def(), columns, rows, on_conflict_do_nothing)?
                {
                    return Ok(Prepared::Insert(Arc::new(insert), returning));
                }
                if literal && returning.is_none() {
                    return Ok(Prepared::Direct(piece));
                }
                let statement = self.insert_with_columns(
                    &table,
                    *statement,
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                self.prepared_insert_plan(statement, returning, &piece, user)
                    .await
            }
            Statement::Insert {
                values: None,
                statement,
                table,
                on_conflict_do_nothing,
                on_conflict_update,
                returning,
                ..
            } => {
                let returning = match returning {
                    Some(q) => Some(Arc::new(self.returning(&table, &q, user).await?)),
                    None => None,
                };
                let statement = self.insert_with_columns(
                    &table,
                    *statement,
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                self.prepared_insert_plan(statement, returning, &piece, user)
                    .await
            }
            Statement::Query(mut q) => {
                // `pg_export_snapshot()` exports when the portal runs.
                if super::snapshots::stand_in_for_export(&mut q) {
                    let text = q.to_string();
                    let s = self.compat_statement(&text, *q, &user.name);
                    let (_, schema) = self.plan_shown(s, user).await?;
                    return Ok(Prepared::Rows { sql: piece, schema });
                }
                let s = self.compat_statement(&piece, *q, &user.name);
                let (plan, columns) = self.plan_shown(s, user).await?;
                if let Some(read) = PointRead::recognize(&plan) {
                    return Ok(Prepared::PointRead {
                        params: Arc::new(ordered_parameter_types(&plan)?),
                        plan: Box::new(plan),
                        read: Arc::new(read),
                        columns,
                    });
                }
                Prepared::plan((plan, columns), false, &piece)
            }
            // Answered when it runs, as rows of one text column.
            Statement::ExplainView { .. } | Statement::ExplainCreateView(_) => Ok(Prepared::Rows {
                sql: piece,
                schema: plan_lines_schema(),
            }),
            Statement::VerifyDataset { .. } => Ok(Prepared::Rows {
                sql: piece,
                schema: super::datasets::verify_schema(),
            }),
            Statement::Update {
                table,
                assignments,
                selection,
            } => {
                let sql = update_query(&self.store, &table, &assignments, selection.as_deref())?;
                self.prepare_change(piece, RowChange::Update { table }, &sql, user)
                    .await
            }
            Statement::Delete { table, selection }
                if self
                    .store
                    .table(&table)
                    .is_some_and(|t| t.def().is_append_only()) =>
            {
                let Some(selection) = selection else {
                    return Ok(Prepared::Direct(piece));
                };
                let sql = format!("SELECT _partition, _offset FROM \"{table}\" WHERE {selection}");
                self.prepare_change(piece, RowChange::Erase { table, selection }, &sql, user)
                    .await
            }
            Statement::Delete { table, selection } => {
                let sql = delete_query(&self.store, &table, selection.as_deref())?;
                self.prepare_change(piece, RowChange::Delete { table }, &sql, user)
                    .await
            }
            _ => Ok(Prepared::Direct(piece)),
        }
    }

    /// A planned INSERT, prepared; with a RETURNING list, its rows are
    /// the statement's result.
    async fn prepared_insert_plan(
        &self,
        statement: ast::Statement,
        returning: Option<Arc<Returning>>,
        piece: &str,
        user: &SessionRole,
    ) -> Result<Prepared, SluiceError> {
        let prepared = Prepared::plan(self.plan_shown(statement, user).await?, true, piece)?;
        Ok(match (prepared, returning) {
            (
                Prepared::Plan {
                    plan,
                    params,
                    source,
                    ..
                },
                Some(returning),
            ) => Prepared::Plan {
                plan,
                params,
                is_insert: true,
                columns: returning.columns.clone(),
                source,
                returning: Some(returning),
            },
            (prepared, _) => prepared,
        })
    }

    /// An UPDATE or DELETE: with parameters, its query planned now and
    /// bound when it runs; without, run as a simple query.
    async fn prepare_change(
        &self,
        piece: String,
        change: RowChange,
        sql: &str,
        user: &SessionRole,
    ) -> Result<Prepared, SluiceError> {
        let stmt = match parse_sql(sql)? {
            Statement::Query(q) => *q,
            _ => return Err(SluiceError::Internal(format!("not a query: {sql}"))),
        };
        let plan = self.plan(stmt, user).await?;
        let params = ordered_parameter_types(&plan)?;
        if params.is_empty() {
            return Ok(Prepared::Direct(piece));
        }
        Ok(Prepared::Modify {
            change: Arc::new(change),
            plan: Box::new(plan),
            params: Arc::new(params),
        })
    }
}

/// `schema` with its columns renamed as `names` (a query's SELECT list,
/// item by item) names them. A wildcard's columns keep theirs; so do the
/// items between two wildcards, which cannot be told apart.
fn shown_columns(schema: &Schema, names: Option<&[ResultName]>) -> SchemaRef {
    let fields = schema.fields();
    let n = fields.len();
    let mut shown: Vec<Option<&str>> = vec![None; n];
    if let Some(names) = names {
        let named = |r: &&ResultName| matches!(r, ResultName::Named(_));
        let head = names.iter().take_while(named).count();
        let tail = names.iter().rev().take_while(named).count();
        let fits = if head == names.len() {
            names.len() == n
        } else {
            head + tail <= n
        };
        if fits {
            for (i, name) in names[..head].iter().enumerate() {
                if let ResultName::Named(name) = name {
                    shown[i] = Some(name);
                }
            }
            if head < names.len() {
                for (k, name) in names[names.len() - tail..].iter().enumerate() {
                    if let ResultName::Named(name) = name {
                        shown[n - tail + k] = Some(name);
                    }
                }
            }
        }
    }
    if shown
        .iter()
        .zip(fields.iter())
        .all(|(s, f)| s.is_none_or(|s| s == f.name()))
    {
        return Arc::new(schema.clone());
    }
    let renamed: Vec<FieldRef> = fields
        .iter()
        .zip(shown)
        .map(|(f, s)| match s {
            Some(name) if name != f.name() => Arc::new(f.as_ref().clone().with_name(name)),
            _ => f.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(
        renamed,
        schema.metadata().clone(),
    ))
}

/// What EXPLAIN answers: one text column.
pub(super) fn plan_lines_schema() -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("QUERY PLAN", DataType::Utf8, false),
    ]))
}

/// A keyed table by name, for statements only keyed tables take.
pub(super) fn keyed_table(
    store: &LogStore,
    table: &str,
    what: &str,
) -> Result<Arc<TableLog>, SluiceError> {
    let log = store
        .table(table)
        .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
    if !log.def().is_keyed() {
        return Err(SluiceError::Unsupported(format!(
            "{what} cannot change rows of \"{table}\": it is append-only ({}); DELETE erases rows from it (an erasure), and tables created without APPEND ONLY, a WATERMARK or a source take UPDATE and DELETE",
            append_only_because(&log.def())
        )));
    }
    Ok(log)
}

/// Why a table without a key is append-only, in the words of its DDL.
fn append_only_because(def: &sluice_catalog::TableDef) -> &'static str {
    if def.options.source.is_some() {
        "a Kafka topic feeds it"
    } else if def.options.dead_letters_of.is_some() {
        "it holds a source's dead letters"
    } else if def.options.watermark.is_some() {
        "its WATERMARK orders its rows"
    } else {
        "created APPEND ONLY, or before tables without a key could change"
    }
}

/// The names an UPDATE of a table keyed by row gives the rows' old values
/// (the new ones take the columns' own names).
pub(super) fn old_value_name(i: usize) -> String {
    format!("sluice old value {i}")
}

/// The query that gives an UPDATE's new versions: every column of the
/// matching latest rows, the assigned ones replaced.
pub(super) fn update_query(
    store: &LogStore,
    table: &str,
    assignments: &[(String, String)],
    selection: Option<&str>,
) -> Result<String, SluiceError> {
    let log = keyed_table(store, table, "UPDATE")?;
    let def = &log.def();
    for (column, _) in assignments {
        if def.column_index(column).is_none() {
            return Err(SluiceError::Sql(sluice_sql::SqlError::UndefinedColumn(
                column.clone(),
            )));
        }
        if def.options.primary_key.contains(column) {
            return Err(SluiceError::Unsupported(format!(
                "UPDATE cannot change primary key column \"{column}\": DELETE the row and INSERT it under the new key"
            )));
        }
    }
    let mut items: Vec<String> = def
        .columns
        .iter()
        .map(
            |c| match assignments.iter().rev().find(|(name, _)| name == &c.name) {
                // A bare parameter takes its column's type, as PostgreSQL
                // infers it (drivers send `SET col = $1`).
                Some((_, expr)) if is_parameter(expr) => {
                    format!("CAST({expr} AS {}) AS \"{}\"", c.ty.pg_name(), c.name)
                }
                Some((_, expr)) => format!("({expr}) AS \"{}\"", c.name),
                None => format!("\"{}\"", c.name),
            },
        )
        .collect();
    if def.options.keyed_by_row {
        // The old row, to delete, and where it is: an update of a row is
        // its deletion and the new row's insertion.
        items.extend(
            def.columns
                .iter()
                .enumerate()
                .map(|(i, c)| format!("\"{table}\".\"{}\" AS \"{}\"", c.name, old_value_name(i))),
        );
        items.extend(hidden_position_columns(table));
    }
    Ok(format!(
        "SELECT {} FROM \"{table}\"{}",
        items.join(", "),
        selection.map(|s| format!(" WHERE {s}")).unwrap_or_default()
    ))
}

/// The query that gives the keys a DELETE takes back.
pub(super) fn delete_query(
    store: &LogStore,
    table: &str,
    selection: Option<&str>,
) -> Result<String, SluiceError> {
    let log = keyed_table(store, table, "DELETE")?;
    let def = log.def();
    let keys: Vec<String> = match def.options.keyed_by_row {
        // The whole row, which its tombstone keeps, and where it is.
        true => def
            .columns
            .iter()
            .map(|c| format!("\"{}\"", c.name))
            .chain(hidden_position_columns(table))
            .collect(),
        false => def
            .options
            .primary_key
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect(),
    };
    Ok(format!(
        "SELECT {} FROM \"{table}\"{}",
        keys.join(", "),
        selection.map(|s| format!(" WHERE {s}")).unwrap_or_default()
    ))
}

/// `$n`, alone.
fn is_parameter(expr: &str) -> bool {
    let e = expr.trim();
    e.len() > 1 && e.starts_with('$') && e[1..].bytes().all(|b| b.is_ascii_digit())
}

/// A row's partition and offset, by which a table keyed by row knows it.
fn hidden_position_columns(table: &str) -> [String; 2] {
    [
        format!("\"{table}\".\"{}\"", sluice_catalog::HIDDEN_COLUMNS[0]),
        format!("\"{table}\".\"{}\"", sluice_catalog::HIDDEN_COLUMNS[1]),
    ]
}

/// The parameters' types in order, as fields: a `$n::type` cast keeps the
/// cast's field, whose metadata can name a PostgreSQL type (`oid`) that
/// Arrow's type alone does not.
fn ordered_parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<FieldRef>>, SluiceError> {
    let mut types: HashMap<String, Option<FieldRef>> = plan
        .get_parameter_types()?
        .into_iter()
        .map(|(id, t)| (id, t.map(|t| Arc::new(Field::new("", t, true)))))
        .collect();
    // Casts only add to an open type or to a list's element (`oid[]`);
    // a point read's `$1` compared with a column skips this walk.
    let casts_matter = types.values().any(|t| {
        t.as_ref()
            .is_none_or(|f| matches!(f.data_type(), DataType::List(_)))
    });
    let casts = match casts_matter {
        true => cast_parameter_types(plan)?,
        false => Vec::new(),
    };
    for (id, field) in casts {
        match types.get_mut(&id) {
            Some(slot @ None) => *slot = Some(field),
            // Same type, and the cast's field may say more (an oid).
            Some(Some(known)) if known.data_type() == field.data_type() => *known = field,
            _ => {}
        }
    }
    let mut entries: Vec<(usize, Option<FieldRef>)> = types
        .into_iter()
        .filter_map(|(k, v)| {
            k.trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .map(|i| (i, v))
        })
        .collect();
    entries.sort_by_key(|(i, _)| *i);
    let n = entries.last().map(|(i, _)| *i).unwrap_or(0);
    let mut out = vec![None; n];
    for (i, t) in entries {
        if i >= 1 {
            out[i - 1] = t;
        }
    }
    Ok(out)
}

/// The types of parameters written `$n::type` (SQLAlchemy writes every
/// parameter so), which DataFusion's inference, from comparisons with
/// columns, leaves open.
fn cast_parameter_types(plan: &LogicalPlan) -> Result<Vec<(String, FieldRef)>, SluiceError> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Cast, Expr, TryCast};
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        let inputs = node.inputs();
        let schema = datafusion::logical_expr::utils::merge_schema(&inputs);
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) = e
                {
                    if let Expr::Placeholder(p) = expr.as_ref() {
                        found.push((p.id.clone(), field.clone()));
                    }
                }
                // `x = ANY($1)` and `$1 = ANY(xs)` (DataFusion's
                // `array_has(list, element)`): an array of x's type, or
                // the array's element type, as PostgreSQL infers them.
                if let Expr::ScalarFunction(f) = e {
                    if f.func.name() == "array_has" && f.args.len() == 2 {
                        use datafusion::logical_expr::ExprSchemable;
                        match (&f.args[0], &f.args[1]) {
                            (Expr::Placeholder(p), element) => {
                                if let Ok(t) = element.get_type(&schema) {
                                    let item = Arc::new(Field::new_list_field(t, true));
                                    found.push((
                                        p.id.clone(),
                                        Arc::new(Field::new("", DataType::List(item), true)),
                                    ));
                                }
                            }
                            (list, Expr::Placeholder(p)) => {
                                if let Ok(DataType::List(item)) = list.get_type(&schema) {
                                    found.push((
                                        p.id.clone(),
                                        Arc::new(Field::new("", item.data_type().clone(), true)),
                                    ));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                // A function argument takes the one type the function
                // accepts there (`pg_sleep($1)`: float8), as PostgreSQL
                // infers it from the function's signature.
                if let Expr::ScalarFunction(f) = e {
                    for (i, arg) in f.args.iter().enumerate() {
                        if let (Expr::Placeholder(p), Some(t)) = (
                            arg,
                            only_argument_type(&f.func.signature().type_signature, i),
                        ) {
                            found.push((p.id.clone(), Arc::new(Field::new("", t, true))));
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found)
}

/// The one type a signature accepts for argument `i`, if it has one.
fn only_argument_type(
    signature: &datafusion::logical_expr::TypeSignature,
    i: usize,
) -> Option<DataType> {
    use datafusion::common::types::NativeType;
    use datafusion::logical_expr::{TypeSignature, TypeSignatureClass};
    match signature {
        TypeSignature::Exact(types) => types.get(i).cloned(),
        TypeSignature::Uniform(_, types) if types.len() == 1 => types.first().cloned(),
        // `upper($1)` is text and `abs($1)` double precision, as
        // PostgreSQL resolves an unknown argument to its category's
        // preferred type.
        TypeSignature::String(n) if i < *n => Some(DataType::Utf8),
        TypeSignature::Numeric(n) if i < *n => Some(DataType::Float64),
        TypeSignature::Coercible(coercions) => match coercions.get(i)?.desired_type() {
            TypeSignatureClass::Integer => Some(DataType::Int64),
            TypeSignatureClass::Float | TypeSignatureClass::Numeric => Some(DataType::Float64),
            TypeSignatureClass::Native(t) => match t.native() {
                NativeType::String => Some(DataType::Utf8),
                NativeType::Int64 => Some(DataType::Int64),
                NativeType::Float64 => Some(DataType::Float64),
                NativeType::Boolean => Some(DataType::Boolean),
                _ => None,
            },
            _ => None,
        },
        // PostgreSQL resolves an unknown argument to text when any
        // candidate takes a string there (`length($1)`: text, not bytea).
        TypeSignature::OneOf(options) => {
            let found: Vec<Option<DataType>> =
                options.iter().map(|o| only_argument_type(o, i)).collect();
            if found.contains(&Some(DataType::Utf8)) {
                return Some(DataType::Utf8);
            }
            let first = found.first()?.clone()?;
            found
                .iter()
                .all(|t| t.as_ref() == Some(&first))
                .then_some(first)
        }
        _ => None,
    }
}
