//! Statement execution for both query protocols.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, field_into_pg_type, into_pg_type, PG_OID_ALIAS_KEY,
};
use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::{Sink, SinkExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{send_query_response, ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, DescribeResponse, FieldInfo, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers, Type, DEFAULT_NAME,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyDone, CopyOutResponse};
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Parse, ParseComplete,
    TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use sluice_catalog::SqlType;
use sluice_sql::sqlparser::ast;
use sluice_sql::{
    hide_system_columns, parse_sql, rewrite_window_functions, split_statements, ExportTarget,
    InsertValue, IsolationLevel, StartAt, Statement, TransactionOp,
};
use tracing::{debug, debug_span, info_span, Instrument};

use super::{encode, export};
use crate::error::SluiceError;
use crate::ingest::conform_batch;
use crate::ingest::{BoundParam, CopyParser, PreparedInsert, RowStager};
use crate::log::transaction::stage_statement;
use crate::log::{LogStore, TableLog};
use crate::metrics::{statement_kind, METRICS};
use crate::query::{PointRead, ON_CONFLICT_DO_NOTHING, SCAN_NOTICES};
use crate::store::DurableStore;
use crate::stream::{BackfillProgress, EmitOptions, ViewManager};

use super::copy::CopyState;
use super::login::{LoginHandler, Logins};
use super::session::{Characteristics, Session, TransactionState};
use crate::auth::{grant_targets, Authenticator, ObjectKind, RoleStore, SessionRole};
use crate::query::cancel::{
    cancellable, parse_timeout, show_timeout, ConnectionRegistry, ShuttingDown, StatementWatch,
};
use crate::subscribe::{timestamp_us, SubscriptionCursor, SubscriptionError, SubscriptionManager};

/// The connection handlers: one instance serves every connection.
pub struct Handlers {
    store: Arc<LogStore>,
    objects: Arc<DurableStore>,
    views: Arc<ViewManager>,
    subs: Arc<SubscriptionManager>,
    ctx: Arc<SessionContext>,
    compat: Arc<PostgresCompatibilityParser>,
    parser: Arc<SluiceQueryParser>,
    connections: Arc<ConnectionRegistry>,
    logins: Arc<Logins>,
    roles: Arc<RoleStore>,
}

impl Handlers {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<LogStore>,
        views: Arc<ViewManager>,
        subs: Arc<SubscriptionManager>,
        ctx: Arc<SessionContext>,
        objects: Arc<DurableStore>,
        connections: Arc<ConnectionRegistry>,
        auth: Arc<Authenticator>,
    ) -> Handlers {
        let logins = Arc::new(Logins::new(auth.clone(), connections.clone()));
        let compat = Arc::new(PostgresCompatibilityParser::new());
        Handlers {
            parser: Arc::new(SluiceQueryParser {
                store: store.clone(),
                ctx: ctx.clone(),
                compat: compat.clone(),
                roles: auth.roles.clone(),
            }),
            store,
            objects,
            views,
            subs,
            ctx,
            compat,
            connections,
            logins,
            roles: auth.roles.clone(),
        }
    }
}

pub(super) fn session<C: ClientInfo>(client: &C) -> Arc<Session> {
    client
        .session_extensions()
        .get_or_insert_with(Session::default)
}

/// A statement sent after a shutdown began: FATAL 57P01, which closes the
/// connection, as PostgreSQL's shutdown does.
fn terminating(e: ShuttingDown) -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "FATAL".into(),
        "57P01".into(),
        e.to_string(),
    )))
}

/// A cancel request: the connection it names stops its running statement.
pub struct CancelListener {
    connections: Arc<ConnectionRegistry>,
}

#[async_trait]
impl CancelHandler for CancelListener {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let found = self
            .connections
            .cancel(request.pid, &request.secret_key.to_bytes());
        debug!(pid = request.pid, found, "cancel request");
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(self.clone_handle())
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(self.clone_handle())
    }

    /// A handler of its own for each connection: a SCRAM exchange keeps
    /// state between its messages.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(LoginHandler::new(self.logins.clone()))
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(CancelListener {
            connections: self.connections.clone(),
        })
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        Arc::new(self.clone_handle())
    }
}

impl Handlers {
    fn clone_handle(&self) -> Handlers {
        Handlers {
            store: self.store.clone(),
            objects: self.objects.clone(),
            views: self.views.clone(),
            subs: self.subs.clone(),
            ctx: self.ctx.clone(),
            compat: self.compat.clone(),
            parser: self.parser.clone(),
            connections: self.connections.clone(),
            logins: self.logins.clone(),
            roles: self.roles.clone(),
        }
    }
}

/// A statement prepared with Parse.
#[derive(Debug, Clone)]
pub enum Prepared {
    Empty,
    /// Planned by DataFusion; may take parameters.
    Plan {
        plan: Box<LogicalPlan>,
        params: ParamFields,
        is_insert: bool,
    },
    /// An INSERT of literals and parameters, staged without a plan.
    Insert(Arc<PreparedInsert>),
    /// A point read of a view, answered from its index; the plan describes
    /// the statement.
    PointRead {
        plan: Box<LogicalPlan>,
        params: ParamFields,
        read: Arc<PointRead>,
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
}

/// A planned statement's parameter types in order, found once when it is
/// prepared rather than at every Bind.
pub type ParamFields = Arc<Vec<Option<FieldRef>>>;

impl Prepared {
    /// What the statements metric counts it as.
    fn kind(&self) -> String {
        match self {
            Prepared::Direct(sql) | Prepared::Rows { sql, .. } => statement_kind(sql),
            Prepared::Plan {
                is_insert: true, ..
            }
            | Prepared::Insert(_) => "insert".into(),
            Prepared::Plan { .. } | Prepared::PointRead { .. } => "select".into(),
            Prepared::Modify { change, .. } => match change.as_ref() {
                RowChange::Update { .. } => "update".into(),
                RowChange::Delete { .. } => "delete".into(),
            },
            Prepared::Empty => "other".into(),
        }
    }

    fn plan(plan: LogicalPlan, is_insert: bool) -> Result<Prepared, SluiceError> {
        Ok(Prepared::Plan {
            params: Arc::new(ordered_parameter_types(&plan)?),
            plan: Box::new(plan),
            is_insert,
        })
    }
}

pub struct SluiceQueryParser {
    store: Arc<LogStore>,
    ctx: Arc<SessionContext>,
    compat: Arc<PostgresCompatibilityParser>,
    roles: Arc<RoleStore>,
}

impl SluiceQueryParser {
    /// Plans a statement DataFusion executes: wildcards over log tables lose
    /// the hidden columns, and DDL or DML other than INSERT is refused.
    /// `role` is the session's: `current_user` and `session_user` name
    /// it, and the plan is checked against its privileges (SELECT on every
    /// table and view it reads, INSERT on every table it inserts into).
    async fn plan(
        &self,
        mut stmt: ast::Statement,
        role: &SessionRole,
    ) -> Result<LogicalPlan, SluiceError> {
        let store = self.store.clone();
        sluice_sql::bind_session_user(&mut stmt, &role.name);
        rewrite_window_functions(&mut stmt)?;
        sluice_sql::rewrite_regproc_zero(&mut stmt);
        sluice_sql::rewrite_catalog_subqueries(&mut stmt);
        sluice_sql::rewrite_set_returning(&mut stmt);
        hide_system_columns(&mut stmt, |t| store.table(t).is_some());
        let state = self.ctx.state();
        let plan = state
            .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
            .await?;
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
                Ok(plan)
            }
        }
    }

    /// SELECT on what `plan` reads, INSERT on what it inserts into.
    fn check_access(&self, role: &SessionRole, plan: &LogicalPlan) -> Result<(), SluiceError> {
        if self.roles.is_superuser(role) {
            return Ok(());
        }
        let access = crate::query::plan_access(plan);
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
    fn compat_statement(&self, sql: &str, fallback: ast::Statement, user: &str) -> ast::Statement {
        let lower = sql.to_ascii_lowercase();
        if ["current_user", "session_user", "current_role"]
            .iter()
            .any(|f| lower.contains(f))
        {
            let mut s = fallback;
            sluice_sql::bind_session_user(&mut s, user);
            return self.compat.rewrite(s);
        }
        if let Some(s) = sluice_sql::driver_query(sql) {
            return s;
        }
        match self.compat.parse(sql) {
            Ok(mut s) if s.len() == 1 => s.remove(0),
            _ => fallback,
        }
    }

    /// SQL that answers statements expressed as queries (SHOW ...).
    /// `session`: what the settings kept by the session show.
    fn query_for(&self, stmt: &Statement, session: Option<&SessionSettings>) -> Option<String> {
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
    fn insert_with_columns(
        &self,
        table: &str,
        mut statement: ast::Statement,
        on_conflict_do_nothing: bool,
    ) -> Result<ast::Statement, SluiceError> {
        let log = self
            .store
            .table(table)
            .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
        check_on_conflict(&log.def, on_conflict_do_nothing)?;
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
                insert.columns = log
                    .def
                    .columns
                    .iter()
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
    async fn prepare(&self, sql: &str, role: &SessionRole) -> Result<Prepared, SluiceError> {
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
            return Prepared::plan(self.plan(s, user).await?, false);
        }
        match stmt {
            Statement::Insert {
                values: Some(rows),
                statement,
                table,
                columns,
                on_conflict_do_nothing,
            } => {
                let log = self
                    .store
                    .table(&table)
                    .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
                check_on_conflict(&log.def, on_conflict_do_nothing)?;
                let literal = rows
                    .iter()
                    .flatten()
                    .all(|v| matches!(v, InsertValue::Literal(_)));
                if let Some(insert) =
                    PreparedInsert::new(&log.def, columns, rows, on_conflict_do_nothing)?
                {
                    return Ok(Prepared::Insert(Arc::new(insert)));
                }
                if literal {
                    return Ok(Prepared::Direct(piece));
                }
                let statement =
                    self.insert_with_columns(&table, *statement, on_conflict_do_nothing)?;
                Prepared::plan(self.plan(statement, user).await?, true)
            }
            Statement::Insert {
                values: None,
                statement,
                table,
                on_conflict_do_nothing,
                ..
            } => {
                let statement =
                    self.insert_with_columns(&table, *statement, on_conflict_do_nothing)?;
                Prepared::plan(self.plan(statement, user).await?, true)
            }
            Statement::Query(q) => {
                let s = self.compat_statement(&piece, *q, &user.name);
                let plan = self.plan(s, user).await?;
                if let Some(read) = PointRead::recognize(&plan) {
                    return Ok(Prepared::PointRead {
                        params: Arc::new(ordered_parameter_types(&plan)?),
                        plan: Box::new(plan),
                        read: Arc::new(read),
                    });
                }
                Prepared::plan(plan, false)
            }
            // Answered when it runs, as rows of one text column.
            Statement::ExplainView { .. } | Statement::ExplainCreateView(_) => Ok(Prepared::Rows {
                sql: piece,
                schema: plan_lines_schema(),
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
            Statement::Delete { table, selection } => {
                let sql = delete_query(&self.store, &table, selection.as_deref())?;
                self.prepare_change(piece, RowChange::Delete { table }, &sql, user)
                    .await
            }
            _ => Ok(Prepared::Direct(piece)),
        }
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

/// What EXPLAIN answers: one text column.
fn plan_lines_schema() -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("QUERY PLAN", DataType::Utf8, false),
    ]))
}

/// A keyed table by name, for statements only keyed tables take.
fn keyed_table(store: &LogStore, table: &str, what: &str) -> Result<Arc<TableLog>, SluiceError> {
    let log = store
        .table(table)
        .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
    if !log.def.is_keyed() {
        return Err(SluiceError::Unsupported(format!(
            "{what} needs a keyed table (with a PRIMARY KEY); \"{table}\" is append-only"
        )));
    }
    Ok(log)
}

/// The query that gives an UPDATE's new versions: every column of the
/// matching latest rows, the assigned ones replaced.
fn update_query(
    store: &LogStore,
    table: &str,
    assignments: &[(String, String)],
    selection: Option<&str>,
) -> Result<String, SluiceError> {
    let log = keyed_table(store, table, "UPDATE")?;
    let def = &log.def;
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
    let items: Vec<String> = def
        .columns
        .iter()
        .map(
            |c| match assignments.iter().rev().find(|(name, _)| name == &c.name) {
                Some((_, expr)) => format!("({expr}) AS \"{}\"", c.name),
                None => format!("\"{}\"", c.name),
            },
        )
        .collect();
    Ok(format!(
        "SELECT {} FROM \"{table}\"{}",
        items.join(", "),
        selection.map(|s| format!(" WHERE {s}")).unwrap_or_default()
    ))
}

/// The query that gives the keys a DELETE takes back.
fn delete_query(
    store: &LogStore,
    table: &str,
    selection: Option<&str>,
) -> Result<String, SluiceError> {
    let log = keyed_table(store, table, "DELETE")?;
    let keys: Vec<String> = log
        .def
        .options
        .primary_key
        .iter()
        .map(|k| format!("\"{k}\""))
        .collect();
    Ok(format!(
        "SELECT {} FROM \"{table}\"{}",
        keys.join(", "),
        selection.map(|s| format!(" WHERE {s}")).unwrap_or_default()
    ))
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
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) = e
                {
                    if let Expr::Placeholder(p) = expr.as_ref() {
                        found.push((p.id.clone(), field.clone()));
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
        TypeSignature::OneOf(options) => {
            let mut found = options.iter().map(|o| only_argument_type(o, i));
            let first = found.next()??;
            found.all(|t| t.as_ref() == Some(&first)).then_some(first)
        }
        _ => None,
    }
}

/// A portal's parameters as values of the types the plan infers for them.
fn bound_parameters<S: Clone>(
    portal: &Portal<S>,
    fields: &[Option<FieldRef>],
) -> PgWireResult<ParamValues> {
    let wire = wire_types(fields)?;
    let type_refs: Vec<Option<&DataType>> = fields
        .iter()
        .map(|f| f.as_ref().map(|f| f.data_type()))
        .collect();
    // An oid[] is read as the int4[] it is stored as (same binary layout).
    let wire: Vec<Type> = wire
        .into_iter()
        .map(|t| {
            if t == Type::OID_ARRAY {
                Type::INT4_ARRAY
            } else {
                t
            }
        })
        .collect();
    let wire_refs: Vec<Option<&Type>> = wire.iter().map(Some).collect();
    deserialize_parameters_with_server_types(portal, &type_refs, &wire_refs)
}

fn wire_types(fields: &[Option<FieldRef>]) -> PgWireResult<Vec<Type>> {
    fields
        .iter()
        .map(|f| match f {
            Some(f) => match f.data_type() {
                // `oid[]` (asyncpg's type lookup takes one): a list of
                // int4 whose element is marked as an oid.
                DataType::List(element)
                    if element.metadata().get(PG_OID_ALIAS_KEY).map(String::as_str)
                        == Some("oid") =>
                {
                    Ok(Type::OID_ARRAY)
                }
                _ => field_into_pg_type(f),
            },
            None => Ok(Type::UNKNOWN),
        })
        .collect()
}

#[async_trait]
impl QueryParser for SluiceQueryParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        debug!(sql = %truncate(sql), "parse");
        if let Some(prepared) = prepared_fetch(_client, sql).map_err(SluiceError::into_pg)? {
            return Ok(Some(prepared));
        }
        self.prepare(sql, &session(_client).role())
            .await
            .map(Some)
            .map_err(SluiceError::into_pg)
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        match stmt {
            Prepared::Plan { params, .. }
            | Prepared::PointRead { params, .. }
            | Prepared::Modify { params, .. } => wire_types(params),
            Prepared::Insert(insert) => insert
                .param_types()
                .iter()
                .map(|t| into_pg_type(&t.to_arrow()))
                .collect(),
            _ => Ok(vec![]),
        }
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match stmt {
            Prepared::Plan {
                plan,
                is_insert: false,
                ..
            }
            | Prepared::PointRead { plan, .. } => arrow_schema_to_pg_fields(
                plan.schema().as_arrow(),
                format.unwrap_or(&Format::UnifiedText),
                None,
            ),
            Prepared::Rows { schema, .. } => {
                arrow_schema_to_pg_fields(schema, format.unwrap_or(&Format::UnifiedText), None)
            }
            _ => Ok(vec![]),
        }
    }
}

/// The column type whose binary form a parameter declared at Parse as
/// `t` has (None: a type no column has; the column's own type is used).
fn declared_sql_type(t: &Type) -> Option<SqlType> {
    Some(match *t {
        Type::BOOL => SqlType::Boolean,
        Type::INT2 => SqlType::SmallInt,
        Type::INT4 => SqlType::Int,
        Type::INT8 => SqlType::BigInt,
        Type::FLOAT4 => SqlType::Real,
        Type::FLOAT8 => SqlType::Double,
        Type::NUMERIC => SqlType::Numeric {
            precision: 38,
            scale: 0,
        },
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON => SqlType::Text,
        Type::JSONB => SqlType::Jsonb,
        Type::BYTEA => SqlType::Bytea,
        Type::DATE => SqlType::Date,
        Type::TIMESTAMP => SqlType::Timestamp,
        Type::TIMESTAMPTZ => SqlType::TimestampTz,
        _ => return None,
    })
}

/// ON CONFLICT DO NOTHING needs a key to conflict on.
fn check_on_conflict(def: &sluice_catalog::TableDef, on_conflict: bool) -> Result<(), SluiceError> {
    if on_conflict && !def.is_keyed() {
        return Err(SluiceError::Unsupported(format!(
            "ON CONFLICT needs a keyed table (with a PRIMARY KEY); \"{}\" is append-only",
            def.name
        )));
    }
    Ok(())
}

/// A FETCH prepared with Parse: its rows have the cursor's schema.
fn prepared_fetch<C: ClientInfo>(client: &C, sql: &str) -> Result<Option<Prepared>, SluiceError> {
    // Every Parse comes here: only a statement that starts with FETCH is
    // read again.
    let starts_with_fetch = sql
        .trim_start()
        .get(..5)
        .is_some_and(|w| w.eq_ignore_ascii_case("fetch"));
    if !starts_with_fetch {
        return Ok(None);
    }
    let Ok(pieces) = split_statements(sql) else {
        return Ok(None);
    };
    let [piece] = pieces.as_slice() else {
        return Ok(None);
    };
    let Ok(Statement::Fetch(fetch)) = parse_sql(piece) else {
        return Ok(None);
    };
    let schema = session(client)
        .cursors
        .lock()
        .get(&fetch.cursor)
        .map(|c| c.schema.clone())
        .ok_or(SubscriptionError::UndefinedCursor(fetch.cursor))?;
    Ok(Some(Prepared::Rows {
        sql: piece.clone(),
        schema,
    }))
}

/// Runs an `INSERT ... SELECT` plan. A cancel stops it while the SELECT
/// computes; the rows are appended when the plan's sink has them all.
async fn insert_count(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    task: datafusion::execution::TaskContext,
    watch: StatementWatch,
) -> Result<Response, SluiceError> {
    // The sink looks at the statement's watch (see `LogSink`).
    let mut config = task.session_config().clone();
    config.set_extension(Arc::new(watch));
    let task = Arc::new(task.with_session_config(config));
    let batches = datafusion::physical_plan::collect(plan, task).await?;
    let rows = batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>().map(|a| a.value(0)))
        .unwrap_or(0);
    Ok(Response::Execution(
        Tag::new("INSERT").with_oid(0).with_rows(rows as usize),
    ))
}

impl Handlers {
    /// Runs one statement of a simple query (or a prepared statement that
    /// takes no parameters and returns no rows). The caller has begun the
    /// statement's cancel generation.
    async fn execute<C>(
        &self,
        client: &mut C,
        sql: &str,
        format: &Format,
    ) -> Result<Response, SluiceError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = parse_sql(sql)?;
        if session(client).transaction.lock().failed && !matches!(stmt, Statement::Transaction(_)) {
            return Err(SluiceError::TransactionAborted);
        }
        if let Some(verb) = stmt.writes() {
            check_writable(client, verb)?;
        }
        if !matches!(stmt, Statement::Transaction(_) | Statement::Set { .. }) {
            self.begin_statement(client).await;
        }
        let shown = SessionSettings {
            current: characteristics(client),
            defaults: defaults(client),
            statement_timeout: session(client).cancel.timeout(),
        };
        if let Some(q) = self.parser.query_for(&stmt, Some(&shown)) {
            let s = self.parser.compat_statement(
                &q,
                ast::Statement::Commit {
                    chain: false,
                    end: false,
                    modifier: None,
                },
                &session(client).role().name,
            );
            let plan = self.parser.plan(s, &session(client).role()).await?;
            return self
                .run_plan(client, plan, false, &Format::UnifiedText)
                .await;
        }
        // A FETCH moves a cursor, which ROLLBACK TO SAVEPOINT cannot undo.
        let fetch = matches!(stmt, Statement::Fetch(_));
        let result = self.dispatch(client, stmt, sql, format).await;
        if fetch && result.is_ok() {
            note_fetch(client);
        }
        result
    }

    async fn dispatch<C>(
        &self,
        client: &mut C,
        stmt: Statement,
        sql: &str,
        format: &Format,
    ) -> Result<Response, SluiceError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match stmt {
            Statement::CreateTable(ct) => {
                let name = ct.table.name.clone();
                let existed = self.store.table(&name).is_some();
                self.store.create_table(ct.table, ct.if_not_exists)?;
                if !existed {
                    self.roles
                        .created(&session(client).role(), ObjectKind::Table, &[name])?;
                }
                Ok(Response::Execution(Tag::new("CREATE TABLE")))
            }
            Statement::DropTable { names, if_exists } => {
                for name in &names {
                    if self.store.table(name).is_none() {
                        if self.views.view(name).is_some() {
                            return Err(SluiceError::WrongObjectType(name.clone(), "table"));
                        }
                        if if_exists {
                            continue;
                        }
                        return Err(SluiceError::UndefinedTable(name.clone()));
                    }
                    self.roles
                        .check_owner(&session(client).role(), ObjectKind::Table, name)?;
                    self.check_dependents("table", name)?;
                }
                for name in &names {
                    if self.store.table(name).is_some() {
                        self.store.drop_table(name)?;
                        self.roles
                            .dropped(ObjectKind::Table, std::slice::from_ref(name))?;
                    }
                }
                Ok(Response::Execution(Tag::new("DROP TABLE")))
            }
            Statement::CopyTo(copy) => {
                if matches!(copy.target, ExportTarget::Location(_)) {
                    self.roles.check_superuser(
                        &session(client).role(),
                        "permission denied to COPY to a file: only superusers may COPY to a file or an object store; COPY ... TO STDOUT (psql's \\copy) works for everyone",
                    )?;
                }
                let plan = self
                    .parser
                    .plan(
                        ast::Statement::Query(copy.query.clone()),
                        &session(client).role(),
                    )
                    .await?;
                let df = self.dataframe(client, plan).await?;
                match &copy.target {
                    ExportTarget::Stdout => match export::to_stdout(df, &copy).await? {
                        export::CopyOut::Stream(response) => Ok(response),
                        export::CopyOut::EmptyBinary { columns } => {
                            send_empty_binary_copy(client, columns).await?;
                            Ok(Response::Execution(Tag::new("COPY").with_rows(0)))
                        }
                    },
                    ExportTarget::Location(location) => export::to_location(df, location).await,
                }
            }
            Statement::CopyFrom(copy) => {
                let table = self
                    .store
                    .table(&copy.table)
                    .ok_or_else(|| SluiceError::UndefinedTable(copy.table.clone()))?;
                self.roles.check(
                    &session(client).role(),
                    ObjectKind::Table,
                    &copy.table,
                    sluice_sql::Privilege::Insert,
                )?;
                let columns = if copy.columns.is_empty() {
                    table.def.columns.len()
                } else {
                    copy.columns.len()
                };
                let format = i8::from(copy.format == sluice_sql::CopyFormat::Binary);
                let parser = CopyParser::new(&table.def, copy, table.max_statement_bytes())?;
                *session(client).copy.lock() = Some(CopyState {
                    table,
                    parser: Some(parser),
                    routed: Default::default(),
                    error: None,
                    watch: session(client).cancel.watch(),
                    _running: self.connections.running().ok(),
                });
                Ok(Response::CopyIn(CopyResponse::new(
                    format,
                    columns,
                    futures::stream::empty(),
                )))
            }
            Statement::Insert {
                table,
                columns,
                values: Some(rows),
                on_conflict_do_nothing,
                ..
            } if rows
                .iter()
                .flatten()
                .all(|v| matches!(v, InsertValue::Literal(_))) =>
            {
                let log = self
                    .store
                    .table(&table)
                    .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
                self.roles.check(
                    &session(client).role(),
                    ObjectKind::Table,
                    &table,
                    sluice_sql::Privilege::Insert,
                )?;
                check_on_conflict(&log.def, on_conflict_do_nothing)?;
                let mut stager = RowStager::new(&log.def, &columns, false)?
                    .with_limit(log.max_statement_bytes());
                for (i, row) in rows.iter().enumerate() {
                    let fields: Vec<Option<&str>> = row
                        .iter()
                        .map(|v| match v {
                            InsertValue::Literal(text) => text.as_deref(),
                            InsertValue::Param(_) => None,
                        })
                        .collect();
                    stager.push_row(&fields, i as u64 + 1)?;
                }
                let n = self
                    .write(client, &log, stager.finish()?, on_conflict_do_nothing)
                    .await?;
                Ok(Response::Execution(
                    Tag::new("INSERT").with_oid(0).with_rows(n as usize),
                ))
            }
            Statement::Insert {
                table,
                statement,
                on_conflict_do_nothing,
                ..
            } => {
                let statement =
                    self.parser
                        .insert_with_columns(&table, *statement, on_conflict_do_nothing)?;
                let plan = self.parser.plan(statement, &session(client).role()).await?;
                self.run_plan(client, plan, true, &Format::UnifiedText)
                    .await
            }
            Statement::CreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let role = session(client).role();
                // A view is read with its own grant: its owner must be able
                // to read what it reads.
                for (kind, name) in self.relations_named(&cv.query) {
                    self.roles
                        .check(&role, kind, &name, sluice_sql::Privilege::Select)?;
                }
                let existed = self.views.view(&cv.name).is_some();
                self.views
                    .create(&cv.name, cv.if_not_exists, &cv.query, emit)
                    .await?;
                if !existed {
                    self.roles
                        .created(&role, ObjectKind::View, std::slice::from_ref(&cv.name))?;
                }
                Ok(Response::Execution(Tag::new("CREATE MATERIALIZED VIEW")))
            }
            Statement::DropView { names, if_exists } => {
                for name in &names {
                    if self.views.view(name).is_none() {
                        if self.store.table(name).is_some() {
                            return Err(SluiceError::WrongObjectType(
                                name.clone(),
                                "materialized view",
                            ));
                        }
                        if !if_exists {
                            return Err(SluiceError::UndefinedTable(name.clone()));
                        }
                    }
                }
                for name in &names {
                    if self.views.view(name).is_some() {
                        self.roles
                            .check_owner(&session(client).role(), ObjectKind::View, name)?;
                        self.check_dependents("materialized view", name)?;
                    }
                }
                for name in &names {
                    if self.views.view(name).is_some() {
                        self.views.drop_view(name)?;
                        self.roles
                            .dropped(ObjectKind::View, std::slice::from_ref(name))?;
                    }
                }
                Ok(Response::Execution(Tag::new("DROP MATERIALIZED VIEW")))
            }
            Statement::Flush => {
                let views = self.views.clone();
                let flush = async move { views.flush().await };
                self.with_progress_notices(client, flush, |views| {
                    views
                        .views()
                        .iter()
                        .filter_map(|v| v.backfill_progress().map(|p| (v.def.name.clone(), p)))
                        .collect()
                })
                .await?;
                Ok(Response::Execution(Tag::new("FLUSH")))
            }
            Statement::ShowViews => Err(SluiceError::Unsupported("SHOW MATERIALIZED VIEWS".into())),
            Statement::ExplainView { name } => {
                let view = self
                    .views
                    .view(&name)
                    .ok_or_else(|| match self.store.table(&name) {
                        Some(_) => SluiceError::WrongObjectType(name.clone(), "materialized view"),
                        None => SluiceError::UndefinedTable(name.clone()),
                    })?;
                self.plan_lines(client, &view.explain, format)
            }
            Statement::ExplainCreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let lines = self.views.explain(&cv.query, emit).await?;
                self.plan_lines(client, &lines, format)
            }
            // The simple protocol handles DEALLOCATE before it gets here.
            Statement::Deallocate(_) => Err(SluiceError::Unsupported(
                "DEALLOCATE in the extended query protocol; send it as a simple query".into(),
            )),
            Statement::Transaction(op) => self.transaction(client, op).await,
            Statement::CreateSubscription(c) => {
                let role = session(client).role();
                if let Some(kind) = self.relation_kind(&c.source) {
                    self.roles
                        .check(&role, kind, &c.source, sluice_sql::Privilege::Select)?;
                }
                self.subs.create(&c).await?;
                self.roles.created(
                    &role,
                    ObjectKind::Subscription,
                    std::slice::from_ref(&c.name),
                )?;
                Ok(Response::Execution(Tag::new("CREATE SUBSCRIPTION")))
            }
            Statement::DropSubscription { names, if_exists } => {
                for name in &names {
                    self.roles.check_owner(
                        &session(client).role(),
                        ObjectKind::Subscription,
                        name,
                    )?;
                }
                self.subs.drop_subscriptions(&names, if_exists)?;
                self.roles.dropped(ObjectKind::Subscription, &names)?;
                Ok(Response::Execution(Tag::new("DROP SUBSCRIPTION")))
            }
            Statement::ResetSubscription { name, to } => {
                self.roles
                    .check_owner(&session(client).role(), ObjectKind::Subscription, &name)?;
                self.subs.reset(&name, &to).await?;
                Ok(Response::Execution(Tag::new("ALTER SUBSCRIPTION")))
            }
            Statement::CreateRole { name, options } => {
                self.roles
                    .create(&session(client).role(), &name, &options)?;
                Ok(Response::Execution(Tag::new("CREATE ROLE")))
            }
            Statement::AlterRole { name, options } => {
                self.roles.alter(&session(client).role(), &name, &options)?;
                Ok(Response::Execution(Tag::new("ALTER ROLE")))
            }
            Statement::DropRole { names, if_exists } => {
                self.roles
                    .drop_roles(&session(client).role(), &names, if_exists)?;
                Ok(Response::Execution(Tag::new("DROP ROLE")))
            }
            Statement::Grant(g) => {
                let targets = grant_targets(
                    &g.objects,
                    |n| self.relation_kind(n),
                    || {
                        let mut all: Vec<(ObjectKind, String)> = self
                            .store
                            .tables()
                            .iter()
                            .map(|t| (ObjectKind::Table, t.def.name.clone()))
                            .collect();
                        all.extend(
                            self.views
                                .views()
                                .iter()
                                .map(|v| (ObjectKind::View, v.def.name.clone())),
                        );
                        all
                    },
                    |n| self.subs.exists(n),
                )?;
                self.roles.grant(&session(client).role(), &g, &targets)?;
                Ok(Response::Execution(Tag::new(if g.grant {
                    "GRANT"
                } else {
                    "REVOKE"
                })))
            }
            Statement::DeclareCursor {
                name,
                subscription,
                since,
            } => {
                let s = session(client);
                if s.cursors.lock().contains_key(&name) {
                    return Err(SubscriptionError::DuplicateCursor(name).into());
                }
                if self.subs.exists(&subscription) {
                    self.roles.check(
                        &s.role(),
                        ObjectKind::Subscription,
                        &subscription,
                        sluice_sql::Privilege::Usage,
                    )?;
                }
                let in_transaction = s.transaction.lock().open;
                let cursor =
                    self.subs
                        .declare(&name, &subscription, since.as_ref(), in_transaction)?;
                s.cursors.lock().insert(name, cursor);
                Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
            }
            Statement::Fetch(fetch) => self.fetch(client, fetch, format).await,
            Statement::CloseCursor { name } => {
                let s = session(client);
                let mut cursors = s.cursors.lock();
                match name {
                    Some(name) => {
                        cursors
                            .remove(&name)
                            .ok_or(SubscriptionError::UndefinedCursor(name))?;
                    }
                    None => cursors.clear(),
                }
                Ok(Response::Execution(Tag::new("CLOSE CURSOR")))
            }
            Statement::RebuildView { name, from } => {
                if self.views.view(&name).is_some() {
                    self.roles
                        .check_owner(&session(client).role(), ObjectKind::View, &name)?;
                }
                self.rebuild(client, &name, &from).await
            }
            Statement::Update {
                table,
                assignments,
                selection,
            } => {
                self.check_change(client, &table, sluice_sql::Privilege::Update)?;
                self.update(client, &table, &assignments, selection.as_deref())
                    .await
            }
            Statement::Delete { table, selection } => {
                self.check_change(client, &table, sluice_sql::Privilege::Delete)?;
                self.delete(client, &table, selection.as_deref()).await
            }
            Statement::Compact { table } => {
                let log = keyed_table(&self.store, &table, "VACUUM")?;
                self.roles
                    .check_owner(&session(client).role(), ObjectKind::Table, &table)?;
                // Erasure that finishes: the active segment closes, so
                // that every record committed so far is in a closed
                // segment; the views reading the table apply the deletes
                // and keep that state as their only checkpoint, which also
                // lets compaction reach every record; closed segments go to
                // the object store, where compaction rewrites them.
                log.close_active_segments().await?;
                self.views.erase_from(&table).await?;
                crate::log::tier_table(&log, &self.objects).await?;
                let horizon = crate::log::below_snapshots(
                    self.views.compaction_horizon(),
                    self.store.transactions().clone(),
                )(&log);
                let report = crate::log::compact_table(&log, &self.objects, &horizon).await?;
                tracing::info!(table = %table, ?report, "compacted on request");
                Ok(Response::Execution(Tag::new("VACUUM")))
            }
            Statement::Set { name, value } if name == "statement_timeout" || name == "all" => {
                let timeout = match value.to_lowercase().as_str() {
                    "default" | "" => None,
                    v => Some(
                        parse_timeout(v).ok_or_else(|| SluiceError::InvalidParameter {
                            name: name.clone(),
                            value: value.clone(),
                        })?,
                    ),
                };
                session(client).cancel.set_timeout(timeout);
                Ok(Response::Execution(Tag::new("SET")))
            }
            Statement::Set { .. } => Ok(Response::Execution(Tag::new("SET"))),
            Statement::ShowTables => Err(SluiceError::Unsupported("SHOW TABLES".into())),
            Statement::Query(q) => {
                let s = self
                    .parser
                    .compat_statement(sql, *q, &session(client).role().name);
                let plan = self.parser.plan(s, &session(client).role()).await?;
                self.run_plan(client, plan, false, &Format::UnifiedText)
                    .await
            }
        }
    }

    /// `ALTER MATERIALIZED VIEW v REBUILD [FROM ...]`, reporting progress
    /// as NOTICEs while it runs.
    async fn rebuild<C>(
        &self,
        client: &mut C,
        name: &str,
        from: &StartAt,
    ) -> Result<Response, SluiceError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let from_us = match from {
            StartAt::Timestamp(text) => Some(timestamp_us(text)?),
            _ => None,
        };
        let views = self.views.clone();
        let view = name.to_string();
        let rebuild = async move { views.rebuild(&view, from_us).await };
        let view = name.to_string();
        self.with_progress_notices(client, rebuild, move |views| {
            views
                .progress(&view)
                .map(|p| vec![(view.clone(), p)])
                .unwrap_or_default()
        })
        .await?;
        Ok(Response::Execution(Tag::new("ALTER MATERIALIZED VIEW")))
    }

    /// Runs `work` on its own task (it finishes even if the client goes
    /// away) and sends a NOTICE with each backfill's progress every second
    /// (the first after 250 ms) until it is done.
    async fn with_progress_notices<C, F>(
        &self,
        client: &mut C,
        work: F,
        progress: impl Fn(&ViewManager) -> Vec<(String, BackfillProgress)>,
    ) -> Result<(), SluiceError>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
        F: std::future::Future<Output = Result<(), SluiceError>> + Send + 'static,
    {
        let mut task = tokio::spawn(work.in_current_span());
        // The first report early (a short rebuild still shows one), then
        // one a second.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + std::time::Duration::from_millis(250),
            std::time::Duration::from_secs(1),
        );
        loop {
            tokio::select! {
                done = &mut task => {
                    return done.map_err(|e| SluiceError::Internal(e.to_string()))?;
                }
                _ = tick.tick() => {
                    for (name, p) in progress(&self.views) {
                        let message = progress_message(&name, &p);
                        let info = pgwire::error::ErrorInfo::new("NOTICE".into(), "00000".into(), message);
                        client
                            .send(PgWireBackendMessage::NoticeResponse(info.into()))
                            .await
                            .map_err(|e| SluiceError::Protocol(PgWireError::from(e).to_string()))?;
                    }
                }
            }
        }
    }

    /// Lines of a plan as EXPLAIN answers them: one text column.
    fn plan_lines<C: ClientInfo>(
        &self,
        client: &C,
        lines: &[String],
        format: &Format,
    ) -> Result<Response, SluiceError> {
        let schema = plan_lines_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::StringArray::from_iter_values(lines))],
        )?;
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        Ok(Response::Query(
            encode::batches(&schema, vec![batch], format, options).map_err(encode_error)?,
        ))
    }

    /// Runs a plan over the latest rows of the tables (as the open
    /// transaction sees them) and collects it.
    async fn collect_plan<C: ClientInfo>(
        &self,
        client: &C,
        plan: LogicalPlan,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let df = self.dataframe(client, plan).await?;
        let task = Arc::new(df.task_ctx());
        let physical = self.physical_plan(df).await?;
        Ok(datafusion::physical_plan::collect(physical, task).await?)
    }

    /// Rows a statement writes: appended now, or staged in the open
    /// transaction block until COMMIT.
    async fn write<C: ClientInfo>(
        &self,
        client: &C,
        log: &Arc<TableLog>,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
    ) -> Result<u64, SluiceError> {
        // The last look before the rows are committed.
        session(client).cancel.watch().check()?;
        let staging = session(client).transaction.lock().staging();
        Ok(match staging {
            None => log.append_keyed(batches, on_conflict_do_nothing).await?,
            Some(staged) => stage_statement(&staged, log, batches, on_conflict_do_nothing).await?,
        })
    }

    /// A statement is about to run: in a REPEATABLE READ block, the first
    /// takes the snapshot every later one reads.
    async fn begin_statement<C: ClientInfo>(&self, client: &C) {
        let s = session(client);
        let take = {
            let mut t = s.transaction.lock();
            t.queried |= t.open;
            t.open
                && t.snapshot.is_none()
                && t.characteristics.isolation == IsolationLevel::RepeatableRead
        };
        if !take {
            return;
        }
        let tables = self.store.tables();
        let snapshot = self.store.transactions().take_snapshot(&tables).await;
        let mut t = s.transaction.lock();
        if t.open && t.snapshot.is_none() {
            t.snapshot = Some(snapshot);
        }
    }

    /// A plan as a DataFrame. Inside a transaction block its scans also
    /// read the block's own uncommitted rows (and in REPEATABLE READ, the
    /// block's snapshot), and an INSERT stages its rows there.
    async fn dataframe<C: ClientInfo>(
        &self,
        client: &C,
        plan: LogicalPlan,
    ) -> Result<DataFrame, SluiceError> {
        let (staging, snapshot, role) = {
            let s = session(client);
            let t = s.transaction.lock();
            (t.staging(), t.snapshot.clone(), s.role())
        };
        if matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Statement(_)) {
            return Ok(self.ctx.execute_logical_plan(plan).await?);
        }
        let mut state = self.ctx.state();
        // The system tables show the session's role what it may see.
        state.config_mut().set_extension(Arc::new(role));
        if let Some(staged) = staging {
            state.config_mut().set_extension(staged);
            if let Some(snapshot) = snapshot {
                state.config_mut().set_extension(snapshot);
            }
        }
        Ok(DataFrame::new(state, plan))
    }

    /// Plans a DataFrame's execution. Scans take their snapshot of the
    /// log while planning, which no multi-table transaction publishes
    /// during: a statement sees all of such a transaction or none of it.
    async fn physical_plan(
        &self,
        df: DataFrame,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, SluiceError> {
        let _snapshot = self.store.transactions().snapshot_guard().await;
        Ok(df.create_physical_plan().await?)
    }

    /// `UPDATE t SET ... [WHERE ...]` on a keyed table: the matching latest
    /// rows with the new values, appended as new versions in one statement.
    async fn update<C: ClientInfo>(
        &self,
        client: &C,
        table: &str,
        assignments: &[(String, String)],
        selection: Option<&str>,
    ) -> Result<Response, SluiceError> {
        let sql = update_query(&self.store, table, assignments, selection)?;
        let plan = self.plan_query(&sql, &session(client).role()).await?;
        self.change_rows(
            client,
            &RowChange::Update {
                table: table.to_string(),
            },
            plan,
        )
        .await
    }

    /// `DELETE FROM t [WHERE ...]` on a keyed table: a tombstone for the key
    /// of each matching latest row, appended in one statement.
    async fn delete<C: ClientInfo>(
        &self,
        client: &C,
        table: &str,
        selection: Option<&str>,
    ) -> Result<Response, SluiceError> {
        let sql = delete_query(&self.store, table, selection)?;
        let plan = self.plan_query(&sql, &session(client).role()).await?;
        self.change_rows(
            client,
            &RowChange::Delete {
                table: table.to_string(),
            },
            plan,
        )
        .await
    }

    async fn plan_query(&self, sql: &str, user: &SessionRole) -> Result<LogicalPlan, SluiceError> {
        let stmt = match parse_sql(sql)? {
            Statement::Query(q) => *q,
            _ => return Err(SluiceError::Internal(format!("not a query: {sql}"))),
        };
        self.parser.plan(stmt, user).await
    }

    /// Runs an UPDATE's or DELETE's query and writes what it found: new
    /// versions, or tombstones of the keys.
    async fn change_rows<C: ClientInfo>(
        &self,
        client: &C,
        change: &RowChange,
        plan: LogicalPlan,
    ) -> Result<Response, SluiceError> {
        let found = self.collect_plan(client, plan).await?;
        match change {
            RowChange::Update { table } => {
                let log = keyed_table(&self.store, table, "UPDATE")?;
                let mut row = 1;
                let mut batches = Vec::new();
                for b in found {
                    batches.push(conform_batch(&log.def, &b, row)?);
                    row += b.num_rows() as u64;
                }
                let n = self.write(client, &log, batches, false).await?;
                Ok(Response::Execution(
                    Tag::new("UPDATE").with_rows(n as usize),
                ))
            }
            RowChange::Delete { table } => {
                let log = keyed_table(&self.store, table, "DELETE")?;
                let tombstones: Vec<RecordBatch> = found
                    .iter()
                    .filter(|b| b.num_rows() > 0)
                    .map(|b| crate::log::keyed::tombstones(&log.def, b))
                    .collect::<Result<_, _>>()?;
                let n = self.write(client, &log, tombstones, false).await?;
                Ok(Response::Execution(
                    Tag::new("DELETE").with_rows(n as usize),
                ))
            }
        }
    }

    /// Refuses to drop a relation something still reads.
    /// A table or view by name, and which it is.
    fn relation_kind(&self, name: &str) -> Option<ObjectKind> {
        if self.store.table(name).is_some() {
            Some(ObjectKind::Table)
        } else if self.views.view(name).is_some() {
            Some(ObjectKind::View)
        } else {
            None
        }
    }

    /// The tables and views a query names (CTE names and missing names
    /// left out: planning reports those).
    fn relations_named(&self, query: &ast::Query) -> Vec<(ObjectKind, String)> {
        let mut out = vec![];
        let _ = ast::visit_relations(query, |name| {
            let plain = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| match i.quote_style {
                    Some(_) => i.value.clone(),
                    None => i.value.to_lowercase(),
                });
            if let Some(n) = plain {
                if let Some(kind) = self.relation_kind(&n) {
                    if !out.contains(&(kind, n.clone())) {
                        out.push((kind, n));
                    }
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        out
    }

    /// What a prepared statement needs of the session's privileges (those
    /// run as simple statements are checked when they run).
    fn check_prepared<C: ClientInfo>(
        &self,
        client: &C,
        prepared: &Prepared,
    ) -> Result<(), SluiceError> {
        let role = session(client).role();
        if self.roles.is_superuser(&role) {
            return Ok(());
        }
        match prepared {
            Prepared::Plan { plan, .. } | Prepared::PointRead { plan, .. } => {
                self.parser.check_access(&role, plan)
            }
            Prepared::Insert(insert) => Ok(self.roles.check(
                &role,
                ObjectKind::Table,
                &insert.table,
                sluice_sql::Privilege::Insert,
            )?),
            Prepared::Modify { change, plan, .. } => {
                let (table, privilege) = match change.as_ref() {
                    RowChange::Update { table } => (table, sluice_sql::Privilege::Update),
                    RowChange::Delete { table } => (table, sluice_sql::Privilege::Delete),
                };
                self.roles
                    .check(&role, ObjectKind::Table, table, privilege)?;
                self.parser.check_access(&role, plan)
            }
            Prepared::Empty | Prepared::Direct(_) | Prepared::Rows { .. } => Ok(()),
        }
    }

    /// UPDATE or DELETE on `table` (an existing table).
    fn check_change<C: ClientInfo>(
        &self,
        client: &C,
        table: &str,
        privilege: sluice_sql::Privilege,
    ) -> Result<(), SluiceError> {
        if self.store.table(table).is_some() {
            self.roles
                .check(&session(client).role(), ObjectKind::Table, table, privilege)?;
        }
        Ok(())
    }

    fn check_dependents(&self, kind: &'static str, name: &str) -> Result<(), SluiceError> {
        let dependent = match self.views.dependents(name).into_iter().next() {
            Some(view) => format!("materialized view {view}"),
            None => match self.subs.dependents(name).into_iter().next() {
                Some(sub) => format!("subscription {sub}"),
                None => return Ok(()),
            },
        };
        Err(SluiceError::DependentObjects {
            kind,
            name: name.to_string(),
            dependent,
        })
    }

    /// BEGIN, COMMIT, ROLLBACK. COMMIT makes the block's writes and the
    /// positions of the subscription cursors that fetched in it durable
    /// and visible in one commit; ROLLBACK (or COMMIT of a failed block)
    /// drops the writes and rewinds the cursors. Cursors declared in the
    /// block close with it.
    async fn transaction<C: ClientInfo>(
        &self,
        client: &C,
        op: TransactionOp,
    ) -> Result<Response, SluiceError> {
        let s = session(client);
        let state = s.transaction.lock().clone();
        match &op {
            TransactionOp::Begin(modes) => {
                if state.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                if !state.open {
                    *s.transaction.lock() = TransactionState {
                        open: true,
                        characteristics: s.defaults.lock().with(*modes),
                        ..Default::default()
                    };
                }
                return Ok(Response::TransactionStart(Tag::new("BEGIN")));
            }
            TransactionOp::SetModes(modes) => {
                // Outside a block PostgreSQL only warns, and nothing
                // changes.
                if state.open {
                    s.transaction.lock().set_modes(*modes)?;
                }
                return Ok(Response::Execution(Tag::new("SET")));
            }
            TransactionOp::SetDefaults(modes) => {
                if state.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                let mut defaults = s.defaults.lock();
                *defaults = defaults.with(*modes);
                return Ok(Response::Execution(Tag::new("SET")));
            }
            TransactionOp::Savepoint(_)
            | TransactionOp::Release(_)
            | TransactionOp::RollbackTo(_) => {
                let tag = s.transaction.lock().savepoint(&op)?;
                return Ok(Response::Execution(Tag::new(tag)));
            }
            TransactionOp::Commit | TransactionOp::Rollback => {}
        }
        let commit = op == TransactionOp::Commit && !state.failed;
        let staged = std::mem::take(&mut *state.staged.lock());
        let mut cursors = std::mem::take(&mut *s.cursors.lock());
        let result = match commit {
            true => {
                let moved: Vec<&SubscriptionCursor> = cursors
                    .values()
                    .filter(|c| c.fetched_in_transaction())
                    .collect();
                crate::transaction::commit(
                    &self.store,
                    &self.subs,
                    staged,
                    &moved,
                    state.snapshot.clone(),
                )
                .await
            }
            false => Ok(()),
        };
        for cursor in cursors.values_mut() {
            if !cursor.fetched_in_transaction() {
                continue;
            }
            match commit && result.is_ok() {
                true => SubscriptionManager::committed_in_transaction(cursor),
                false => cursor.rollback(),
            }
        }
        cursors.retain(|_, c| !c.declared_in_transaction);
        s.cursors.lock().extend(cursors);
        *s.transaction.lock() = TransactionState::default();
        result?;
        Ok(Response::TransactionEnd(Tag::new(if commit {
            "COMMIT"
        } else {
            "ROLLBACK"
        })))
    }

    /// FETCH from a subscription cursor. Outside a transaction block the
    /// new position is committed before the rows are sent.
    async fn fetch<C: ClientInfo>(
        &self,
        client: &C,
        fetch: sluice_sql::Fetch,
        format: &Format,
    ) -> Result<Response, SluiceError> {
        let s = session(client);
        let in_transaction = s.transaction.lock().open;
        let mut cursor = s
            .cursors
            .lock()
            .remove(&fetch.cursor)
            .ok_or_else(|| SubscriptionError::UndefinedCursor(fetch.cursor.clone()))?;
        cursor.begin_fetch_in_transaction();
        let timeout = fetch
            .timeout_us
            .map(|us| std::time::Duration::from_micros(us.max(0) as u64));
        let mut notices = Vec::new();
        let watch = s.cancel.watch();
        let result = async {
            // A cancel while the FETCH reads or waits for rows stops it
            // with nothing committed; the cursor goes back below.
            let batches = watch
                .run(
                    self.subs
                        .fetch(&mut cursor, fetch.count, timeout, &mut notices),
                )
                .await?;
            watch.check()?;
            if !in_transaction {
                self.subs.commit(&mut cursor).await?;
            }
            Ok::<_, SluiceError>(batches)
        }
        .await;
        if result.is_err() && !in_transaction {
            cursor.rollback();
        }
        let schema = cursor.schema.clone();
        s.cursors.lock().insert(cursor.name.clone(), cursor);
        let _ = SCAN_NOTICES.try_with(|n| n.lock().extend(notices));
        let batches = result?;
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let mut resp = encode::batches(&schema, batches, format, options).map_err(encode_error)?;
        resp.set_command_tag("FETCH");
        Ok(Response::Query(resp))
    }

    async fn run_plan<C>(
        &self,
        client: &C,
        plan: LogicalPlan,
        is_insert: bool,
        format: &Format,
    ) -> Result<Response, SluiceError>
    where
        C: ClientInfo,
    {
        let df = self.dataframe(client, plan).await?;
        let task = df.task_ctx();
        let schema = df.schema().as_arrow().clone();
        let physical = self.physical_plan(df).await?;
        let session = session(client);
        let watch = session.cancel.watch();
        if is_insert {
            return insert_count(physical, task, watch).await;
        }
        let task = Arc::new(task);
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let batches = datafusion::physical_plan::execute_stream(physical, task)?;
        let batches = cancellable(batches, watch);
        let resp = encode::computed(schema, batches, format, options, move || {
            let mut t = session.transaction.lock();
            if t.open {
                t.failed = true;
            }
        })
        .map_err(encode_error)?;
        Ok(Response::Query(resp))
    }
}

#[async_trait]
impl SimpleQueryHandler for Handlers {
    /// Counted as running until its results are sent, so that a shutdown
    /// waits for it; refused once a shutdown has begun.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let _running = self.connections.running().map_err(terminating)?;
        let _timed = METRICS.round_trip();
        let session = session(client);
        let mut active = session.activity.begin(Arc::from(
            sluice_sql::redact_passwords(&query.query).as_ref(),
        ));
        let result = self._on_query(client, query).await;
        active.in_transaction(session.transaction.lock().open);
        result
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let pieces = match split_statements(query) {
            Ok(p) => p,
            Err(e) => return Err(SluiceError::from(e).into_pg()),
        };
        if pieces.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            if let Some(target) = deallocation(&piece) {
                match deallocate(client, target) {
                    Ok(r) => {
                        out.push(r);
                        continue;
                    }
                    Err(e) => {
                        note_failure(client);
                        if out.is_empty() {
                            return Err(e.into_pg());
                        }
                        out.push(Response::Error(Box::new(pg_error_info(e))));
                        break;
                    }
                }
            }
            let span = info_span!("statement", sql = %truncate(&piece));
            let notices = Arc::new(parking_lot::Mutex::new(Vec::new()));
            session(client).cancel.begin();
            let result = SCAN_NOTICES
                .scope(
                    notices.clone(),
                    self.execute(client, &piece, &Format::UnifiedText)
                        .instrument(span),
                )
                .await;
            METRICS.statement(&statement_kind(&piece), result.is_ok());
            send_notices(client, &notices).await?;
            match result {
                Ok(resp) => {
                    let is_copy = matches!(resp, Response::CopyIn(_));
                    out.push(resp);
                    if is_copy {
                        break;
                    }
                }
                Err(e) => {
                    debug!(error = %e, "statement failed");
                    note_failure(client);
                    if out.is_empty() {
                        settle_after_error(client);
                        return Err(e.into_pg());
                    }
                    // The status pgwire derives from the responses says
                    // "failed block" after an error; a COMMIT that failed
                    // ended the block, which a ROLLBACK tag says first.
                    let status = out
                        .iter()
                        .fold(client.transaction_status(), |s, r| match r {
                            Response::TransactionStart(_) => s.to_in_transaction_state(),
                            Response::TransactionEnd(_) => s.to_idle_state(),
                            _ => s,
                        });
                    if status != TransactionStatus::Idle && !session(client).transaction.lock().open
                    {
                        out.push(Response::TransactionEnd(Tag::new("ROLLBACK")));
                    }
                    out.push(Response::Error(Box::new(pg_error_info(e))));
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// "rebuild of \"v\": 4200000 of 10000000 rows (42.0%), 2100000 rows/s, about 3 s left"
fn progress_message(view: &str, p: &BackfillProgress) -> String {
    let percent = if p.total_rows > 0 {
        p.done_rows as f64 * 100.0 / p.total_rows as f64
    } else {
        0.0
    };
    let eta = match p.eta_seconds {
        Some(s) => format!(", about {} s left", s.ceil() as u64),
        None => String::new(),
    };
    format!(
        "{} of \"{view}\": {} of {} rows ({percent:.1}%), {} rows/s{eta}",
        p.kind,
        p.done_rows,
        p.total_rows,
        p.rows_per_second.round() as u64
    )
}

/// A statement failed: an open transaction block is now aborted.
/// What a `DEALLOCATE` statement removes (`Some(None)`: all), if `sql` is
/// one. Only statements that start with the word are parsed again.
fn deallocation(sql: &str) -> Option<Option<String>> {
    let starts = sql
        .trim_start()
        .get(..10)
        .is_some_and(|w| w.eq_ignore_ascii_case("deallocate"));
    match starts.then(|| parse_sql(sql)) {
        Some(Ok(Statement::Deallocate(target))) => Some(target),
        _ => None,
    }
}

/// `DEALLOCATE name | ALL`: forgets statements prepared with Parse.
fn deallocate<C>(client: &C, target: Option<String>) -> Result<Response, SluiceError>
where
    C: ClientInfo + ClientPortalStore,
    C::PortalStore: PortalStore,
{
    let s = session(client);
    let mut prepared = s.prepared.lock();
    let names: Vec<String> = match target {
        Some(name) => {
            if name.is_empty() || !prepared.contains_key(&name) {
                return Err(SluiceError::UndefinedPreparedStatement(name));
            }
            vec![name]
        }
        None => prepared.keys().filter(|n| !n.is_empty()).cloned().collect(),
    };
    for name in names {
        client.portal_store().rm_statement(&name);
        prepared.remove(&name);
    }
    Ok(Response::Execution(Tag::new("DEALLOCATE")))
}

/// The characteristics of the transaction a statement runs in: the open
/// block's, or else the session's defaults.
fn characteristics<C: ClientInfo>(client: &C) -> Characteristics {
    let s = session(client);
    let t = s.transaction.lock();
    match t.open {
        true => t.characteristics,
        false => *s.defaults.lock(),
    }
}

fn defaults<C: ClientInfo>(client: &C) -> Characteristics {
    *session(client).defaults.lock()
}

/// Refuses a write in a READ ONLY transaction, as PostgreSQL does.
fn check_writable<C: ClientInfo>(client: &C, verb: &'static str) -> Result<(), SluiceError> {
    match characteristics(client).read_only {
        true => Err(SluiceError::ReadOnlyTransaction(verb)),
        false => Ok(()),
    }
}

/// The transaction settings `SHOW` answers from the session.
#[derive(Clone, Copy)]
enum TransactionSetting {
    Isolation,
    ReadOnly,
}

impl TransactionSetting {
    fn value(self, c: Characteristics) -> &'static str {
        match self {
            TransactionSetting::Isolation => c.isolation.name(),
            TransactionSetting::ReadOnly if c.read_only => "on",
            TransactionSetting::ReadOnly => "off",
        }
    }
}

fn transaction_setting(name: &str) -> Option<TransactionSetting> {
    match name {
        "transaction_isolation"
        | "transaction isolation level"
        | "default_transaction_isolation" => Some(TransactionSetting::Isolation),
        "transaction_read_only" | "default_transaction_read_only" => {
            Some(TransactionSetting::ReadOnly)
        }
        _ => None,
    }
}

/// What `SHOW` answers from the session rather than the server.
struct SessionSettings {
    /// The open transaction's (or the defaults, outside a block).
    current: Characteristics,
    defaults: Characteristics,
    statement_timeout: Option<std::time::Duration>,
}

/// The column name of `SHOW <setting>`, when `stmt` shows a setting the
/// session keeps (a transaction setting, `statement_timeout`).
fn shown_session_setting(stmt: &Statement) -> Option<String> {
    let Statement::Query(q) = stmt else {
        return None;
    };
    let ast::Statement::ShowVariable { variable } = q.as_ref() else {
        return None;
    };
    let name = shown_name(variable);
    (transaction_setting(&name).is_some() || name == "statement_timeout").then_some(name)
}

/// The setting `SHOW` names (`transaction isolation level` in words).
fn shown_name(variable: &[ast::Ident]) -> String {
    variable
        .iter()
        .map(|i| i.value.to_lowercase())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A FETCH moved a cursor inside the transaction block.
fn note_fetch<C: ClientInfo>(client: &C) {
    let s = session(client);
    let mut t = s.transaction.lock();
    if t.open {
        t.fetches += 1;
    }
}

/// After a failed statement: a block that the failure ended (a COMMIT
/// that could not commit) leaves the connection idle, which the next
/// ReadyForQuery must say, as PostgreSQL's does.
fn settle_after_error<C: ClientInfo>(client: &mut C) {
    if !session(client).transaction.lock().open {
        client.set_transaction_status(TransactionStatus::Idle);
    }
}

pub(super) fn note_failure<C: ClientInfo>(client: &C) {
    let s = session(client);
    let mut t = s.transaction.lock();
    if t.open {
        t.failed = true;
    }
}

/// Sends the NOTICE messages a statement raised, before its results.
async fn send_notices<C>(
    client: &mut C,
    notices: &parking_lot::Mutex<Vec<String>>,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let pending: Vec<String> = std::mem::take(&mut *notices.lock());
    for message in pending {
        let info = pgwire::error::ErrorInfo::new("NOTICE".into(), "01000".into(), message);
        client
            .send(PgWireBackendMessage::NoticeResponse(info.into()))
            .await?;
    }
    Ok(())
}

/// A binary `COPY ... TO STDOUT` of no rows, sent as PostgreSQL sends it:
/// the header and the trailer in one CopyData (see [`export::CopyOut`]).
async fn send_empty_binary_copy<C>(client: &mut C, columns: usize) -> Result<(), SluiceError>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
{
    let messages = [
        PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            1,
            columns as i16,
            vec![1; columns],
        )),
        PgWireBackendMessage::CopyData(export::empty_binary_copy()),
        PgWireBackendMessage::CopyDone(CopyDone::new()),
    ];
    for m in messages {
        client
            .feed(m)
            .await
            .map_err(|e| SluiceError::Protocol(format!("{e:?}")))?;
    }
    Ok(())
}

/// An error of starting a query's result stream: DataFusion's errors (the
/// scans run here) keep their SQLSTATE; anything else is a protocol error.
fn encode_error(e: PgWireError) -> SluiceError {
    match e {
        PgWireError::ApiError(inner) => match inner.downcast::<DataFusionError>() {
            Ok(df) => SluiceError::DataFusion(*df),
            Err(other) => SluiceError::Protocol(other.to_string()),
        },
        other => SluiceError::Protocol(other.to_string()),
    }
}

fn pg_error_info(e: SluiceError) -> pgwire::error::ErrorInfo {
    pgwire::error::ErrorInfo::new("ERROR".into(), e.sqlstate().into(), e.message())
}

/// A statement as logged: passwords starred out, the first 200 characters.
fn truncate(sql: &str) -> String {
    let sql = sluice_sql::redact_passwords(sql);
    match sql.char_indices().nth(200) {
        Some((i, _)) => sql[..i].to_string(),
        None => sql.into_owned(),
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handlers {
    type Statement = Prepared;
    type QueryParser = SluiceQueryParser;

    fn query_parser(&self) -> Arc<SluiceQueryParser> {
        self.parser.clone()
    }

    /// Parse as pgwire does it, remembering the statement's name for
    /// `DEALLOCATE ALL`.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A Parse or Bind that fails inside a block aborts it, as any
        // failed statement does.
        let result = self.parse_statement(client, message).await;
        if result.is_err() {
            note_failure(client);
        }
        result
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let result = self.bind_portal(client, message).await;
        if result.is_err() {
            note_failure(client);
        }
        result
    }

    /// A point read runs here whole and its rows and CommandComplete are
    /// fed, to go out with Sync's ReadyForQuery in one write; pgwire's
    /// default flushes after CommandComplete. Everything else (and a
    /// point read fetched a few rows at a time) takes pgwire's path.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let _running = self.connections.running().map_err(terminating)?;
        let _timed = METRICS.round_trip();
        let portal_name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(portal_name) {
            Some(Entry::Value(portal)) => Some(portal),
            _ => None,
        };
        let session = session(client);
        let sql = portal
            .as_ref()
            .and_then(|p| session.prepared.lock().get(&p.statement.id).cloned());
        let mut active = session.activity.begin(sql.unwrap_or_default());
        let result = self.execute_portal(client, message, portal).await;
        active.in_transaction(session.transaction.lock().open);
        result
    }

    /// A statement prepared with Parse is forgotten with its text.
    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                client.portal_store().rm_statement(name);
                session(client).prepared.lock().remove(name);
            }
            TARGET_TYPE_BYTE_PORTAL => client.portal_store().rm_portal(name),
            _ => {}
        }
        client
            .send(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
            .await?;
        Ok(())
    }

    /// Describe answers as pgwire does, with two differences. A statement
    /// that returns no rows answers NoData, as PostgreSQL does: pgwire's
    /// default sends an empty RowDescription when the statement has
    /// parameters, which pgJDBC reads as "a result was returned when none
    /// was expected" on a prepared INSERT. And the answer is fed, not sent:
    /// it goes out with the rest of the reply at Sync or Flush, so a
    /// prepared statement's round trip is one write, not two.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let (parameters, fields) = match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
                Some(Entry::Value(stmt)) => {
                    let described = self.do_describe_statement(client, &stmt).await?;
                    let parameters = Some(
                        described
                            .parameters()
                            .map(|p| p.iter().map(|t| t.oid()).collect())
                            .unwrap_or_default(),
                    );
                    (parameters, described.fields().to_vec())
                }
                Some(Entry::Empty) => (Some(Vec::new()), Vec::new()),
                None => return Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
                Some(Entry::Value(portal)) => {
                    let described = self.do_describe_portal(client, &portal).await?;
                    (None, described.fields().to_vec())
                }
                Some(Entry::Empty) => (None, Vec::new()),
                None => return Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => return Err(PgWireError::InvalidTargetType(other)),
        };
        if let Some(oids) = parameters {
            client
                .feed(PgWireBackendMessage::ParameterDescription(
                    ParameterDescription::new(oids),
                ))
                .await?;
        }
        let message = match fields.is_empty() {
            true => PgWireBackendMessage::NoData(NoData::new()),
            false => PgWireBackendMessage::RowDescription(RowDescription::new(
                fields.iter().map(Into::into).collect(),
            )),
        };
        client.feed(message).await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let notices = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let result = SCAN_NOTICES
            .scope(notices.clone(), self.run_portal(client, portal))
            .await;
        METRICS.statement(&portal.statement.statement.kind(), result.is_ok());
        send_notices(client, &notices).await?;
        if result.is_err() {
            note_failure(client);
            settle_after_error(client);
        }
        result
    }
}

impl Handlers {
    /// Execute: a point read runs whole here (see `on_execute`), anything
    /// else takes pgwire's path.
    async fn execute_portal<C>(
        &self,
        client: &mut C,
        message: Execute,
        portal: Option<Arc<Portal<Prepared>>>,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let point_read = match portal {
            Some(portal)
                if message.max_rows == 0
                    && matches!(portal.statement.statement, Prepared::PointRead { .. })
                    && matches!(client.state(), PgWireConnectionState::ReadyForQuery)
                    && matches!(*portal.state().lock().await, PortalExecutionState::Initial) =>
            {
                portal
            }
            _ => return self._on_execute(client, message).await,
        };
        client.set_state(PgWireConnectionState::QueryInProgress);
        let response = ExtendedQueryHandler::do_query(self, client, &point_read, 0).await;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        match response? {
            Response::Query(results) => {
                // As pgwire leaves a portal that has returned all its rows.
                *point_read.state().lock().await = PortalExecutionState::Finished;
                send_query_response(client, results, false).await
            }
            _ => Err(SluiceError::Internal("a point read answered no rows".into()).into_pg()),
        }
    }

    async fn parse_statement<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        let parser = self.query_parser();
        match StoredStatement::parse(client, &message, parser).await? {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        session(client).prepared.lock().insert(
            name,
            Arc::from(sluice_sql::redact_passwords(&message.query).as_ref()),
        );
        // Fed, not sent: Sync or Flush sends it with what follows.
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    /// Bind as pgwire does it, except that BindComplete is fed rather than
    /// sent: it goes out with the rest of the reply at Sync or Flush, in
    /// one write instead of a write of its own (the protocol asks for no
    /// more; pgbench's prepared statements send Bind, Execute and Sync
    /// together).
    async fn bind_portal<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) if message.parameters.is_empty() => {
                client.portal_store().put_empty_portal(portal_name);
            }
            Some(Entry::Empty) => {
                return Err(SluiceError::Protocol(format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement_name}\" requires 0",
                    message.parameters.len()
                ))
                .into_pg());
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    /// Binds a portal's parameters into a prepared INSERT and appends its
    /// rows. A parameter sent in binary is read in the type the client
    /// declared for it at Parse, else in the type of its column.
    async fn run_insert<C: ClientInfo, S>(
        &self,
        client: &C,
        portal: &Portal<S>,
        insert: &PreparedInsert,
    ) -> Result<Response, SluiceError> {
        let log = self
            .store
            .table(&insert.table)
            .ok_or_else(|| SluiceError::UndefinedTable(insert.table.clone()))?;
        let binary_types: Vec<SqlType> = insert
            .param_types()
            .iter()
            .enumerate()
            .map(|(i, column_type)| {
                portal
                    .statement
                    .parameter_types
                    .get(i)
                    .and_then(|t| t.as_ref())
                    .and_then(declared_sql_type)
                    .unwrap_or_else(|| column_type.clone())
            })
            .collect();
        let params: Vec<BoundParam> = portal
            .parameters
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                None => BoundParam::Null,
                Some(bytes) if portal.parameter_format.is_binary(i) => {
                    BoundParam::Binary(bytes, binary_types.get(i).unwrap_or(&SqlType::Text))
                }
                Some(bytes) => BoundParam::Text(bytes),
            })
            .collect();
        let batches = insert.stage(&log.def, &params, log.max_statement_bytes())?;
        let n = self
            .write(client, &log, batches, insert.on_conflict_do_nothing)
            .await?;
        Ok(Response::Execution(
            Tag::new("INSERT").with_oid(0).with_rows(n as usize),
        ))
    }

    /// Runs a bound portal: a statement handled directly, or a prepared
    /// plan with its parameters bound.
    async fn run_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        session(client).cancel.begin();
        // Privileges are checked at every execution, not only when the
        // statement was prepared: a REVOKE in between applies.
        self.check_prepared(client, &portal.statement.statement)
            .map_err(SluiceError::into_pg)?;
        match &portal.statement.statement {
            Prepared::Empty => Ok(Response::EmptyQuery),
            Prepared::Direct(sql) | Prepared::Rows { sql, .. } => {
                let span = info_span!("statement", sql = %truncate(sql));
                self.execute(client, sql, &portal.result_column_format)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
            Prepared::Plan { .. }
            | Prepared::Insert(_)
            | Prepared::PointRead { .. }
            | Prepared::Modify { .. }
                if session(client).transaction.lock().failed =>
            {
                Err(SluiceError::TransactionAborted.into_pg())
            }
            Prepared::Insert(_)
            | Prepared::Plan {
                is_insert: true, ..
            } if characteristics(client).read_only => {
                Err(SluiceError::ReadOnlyTransaction("INSERT").into_pg())
            }
            Prepared::Modify { change, .. } if characteristics(client).read_only => {
                Err(SluiceError::ReadOnlyTransaction(match change.as_ref() {
                    RowChange::Update { .. } => "UPDATE",
                    RowChange::Delete { .. } => "DELETE",
                })
                .into_pg())
            }
            Prepared::Modify {
                change,
                plan,
                params,
            } => {
                self.begin_statement(client).await;
                let params = bound_parameters(portal, params)?;
                let span = debug_span!("statement", sql = %truncate(&portal.statement.id));
                let plan = plan
                    .as_ref()
                    .clone()
                    .replace_params_with_values(&params)
                    .map_err(|e| SluiceError::from(e).into_pg())?;
                self.change_rows(client, change, plan)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
            // A prepared statement's span is at debug level: drivers run
            // them by the thousand a second, and an enabled span (its
            // fields formatted, its slot taken and freed) cost a tenth of
            // a point read's CPU. `SLUICE_LOG=sluice=debug` shows them.
            Prepared::Insert(insert) => {
                let span = debug_span!("statement", sql = %truncate(&portal.statement.id));
                self.begin_statement(client).await;
                self.run_insert(client, portal, insert)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
            Prepared::PointRead { params, read, .. } => {
                self.begin_statement(client).await;
                let params = bound_parameters(portal, params)?;
                let span = debug_span!("statement", sql = %truncate(&portal.statement.id));
                let _entered = span.enter();
                let batch = read
                    .execute(&self.views, Some(&params))
                    .map_err(SluiceError::into_pg)?;
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let schema = batch.schema();
                Ok(Response::Query(encode::batches(
                    &schema,
                    vec![batch],
                    &portal.result_column_format,
                    options,
                )?))
            }
            Prepared::Plan {
                plan,
                params,
                is_insert,
            } => {
                self.begin_statement(client).await;
                let params = bound_parameters(portal, params)?;
                let plan = plan
                    .as_ref()
                    .clone()
                    .replace_params_with_values(&params)
                    .map_err(|e| SluiceError::from(e).into_pg())?;
                let span = debug_span!("statement", sql = %truncate(&portal.statement.id));
                self.run_plan(client, plan, *is_insert, &portal.result_column_format)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
        }
    }
}
