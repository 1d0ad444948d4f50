//! Statement execution for both query protocols.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::UInt64Array;
use arrow::datatypes::DataType;
use arrow_pg::datatypes::df::{deserialize_parameters_with_server_types, encode_dataframe};
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, into_pg_type};
use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::{Sink, SinkExt};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::StartupHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireServerHandlers, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use sluice_sql::sqlparser::ast;
use sluice_sql::{
    hide_system_columns, parse_sql, rewrite_window_functions, split_statements, ExportTarget,
    Statement, TransactionOp,
};
use tracing::{debug, info_span, Instrument};

use super::export;
use crate::error::SluiceError;
use crate::ingest::{CopyParser, RowStager};
use crate::log::LogStore;
use crate::query::SCAN_NOTICES;
use crate::stream::{EmitOptions, ViewManager};

use super::copy::CopyState;
use super::session::Session;

/// The connection handlers: one instance serves every connection.
pub struct Handlers {
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    ctx: Arc<SessionContext>,
    compat: Arc<PostgresCompatibilityParser>,
    parser: Arc<SluiceQueryParser>,
}

impl Handlers {
    pub fn new(
        store: Arc<LogStore>,
        views: Arc<ViewManager>,
        ctx: Arc<SessionContext>,
    ) -> Handlers {
        let compat = Arc::new(PostgresCompatibilityParser::new());
        Handlers {
            parser: Arc::new(SluiceQueryParser {
                store: store.clone(),
                ctx: ctx.clone(),
                compat: compat.clone(),
            }),
            store,
            views,
            ctx,
            compat,
        }
    }
}

pub(super) fn session<C: ClientInfo>(client: &C) -> Arc<Session> {
    client
        .session_extensions()
        .get_or_insert_with(Session::default)
}

pub struct StartupHandlerImpl;

impl NoopStartupHandler for StartupHandlerImpl {}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(self.clone_handle())
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(self.clone_handle())
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(StartupHandlerImpl)
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        Arc::new(self.clone_handle())
    }
}

impl Handlers {
    fn clone_handle(&self) -> Handlers {
        Handlers {
            store: self.store.clone(),
            views: self.views.clone(),
            ctx: self.ctx.clone(),
            compat: self.compat.clone(),
            parser: self.parser.clone(),
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
        is_insert: bool,
    },
    /// Executed as in the simple protocol when the portal runs (no
    /// parameters, no result rows).
    Direct(String),
}

pub struct SluiceQueryParser {
    store: Arc<LogStore>,
    ctx: Arc<SessionContext>,
    compat: Arc<PostgresCompatibilityParser>,
}

/// PostgreSQL settings that `SHOW` answers.
fn show_value(name: &str) -> Option<&'static str> {
    Some(match name {
        "server_version" => "16.6",
        "server_version_num" => "160006",
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" => "on",
        "datestyle" => "ISO, MDY",
        "timezone" => "UTC",
        "transaction_isolation" | "default_transaction_isolation" => "read committed",
        "search_path" => "public",
        "integer_datetimes" => "on",
        "max_identifier_length" => "63",
        "application_name" => "",
        _ => return None,
    })
}

impl SluiceQueryParser {
    /// Plans a statement DataFusion executes: wildcards over log tables lose
    /// the hidden columns, and DDL or DML other than INSERT is refused.
    async fn plan(&self, mut stmt: ast::Statement) -> Result<LogicalPlan, SluiceError> {
        let store = self.store.clone();
        rewrite_window_functions(&mut stmt)?;
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
            _ => Ok(plan),
        }
    }

    /// Re-reads a query with the compatibility rules that rewrite psql's and
    /// drivers' catalog queries into SQL DataFusion can plan.
    fn compat_statement(&self, sql: &str, fallback: ast::Statement) -> ast::Statement {
        match self.compat.parse(sql) {
            Ok(mut s) if s.len() == 1 => s.remove(0),
            _ => fallback,
        }
    }

    /// SQL that answers statements expressed as queries (SHOW ...).
    fn query_for(&self, stmt: &Statement) -> Option<String> {
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
                    let name = variable
                        .iter()
                        .map(|i| i.value.to_lowercase())
                        .collect::<Vec<_>>()
                        .join(" ");
                    let name = if name == "time zone" {
                        "timezone".to_string()
                    } else {
                        name
                    };
                    show_value(&name).map(|v| format!("SELECT '{v}' AS \"{name}\""))
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
    ) -> Result<ast::Statement, SluiceError> {
        let log = self
            .store
            .table(table)
            .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
        if let ast::Statement::Insert(insert) = &mut statement {
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

    async fn prepare(&self, sql: &str) -> Result<Prepared, SluiceError> {
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
        if let Some(q) = self.query_for(&stmt) {
            let s = self.compat_statement(
                &q,
                ast::Statement::Commit {
                    chain: false,
                    end: false,
                    modifier: None,
                },
            );
            return Ok(Prepared::Plan {
                plan: Box::new(self.plan(s).await?),
                is_insert: false,
            });
        }
        match stmt {
            Statement::Insert {
                literal_rows: None,
                statement,
                table,
                ..
            } => {
                let statement = self.insert_with_columns(&table, *statement)?;
                Ok(Prepared::Plan {
                    plan: Box::new(self.plan(statement).await?),
                    is_insert: true,
                })
            }
            Statement::Query(q) => {
                let s = self.compat_statement(&piece, *q);
                Ok(Prepared::Plan {
                    plan: Box::new(self.plan(s).await?),
                    is_insert: false,
                })
            }
            _ => Ok(Prepared::Direct(piece)),
        }
    }
}

fn ordered_parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<DataType>>, SluiceError> {
    let types: HashMap<String, Option<DataType>> = plan.get_parameter_types()?;
    let mut entries: Vec<(usize, Option<DataType>)> = types
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

fn wire_types(types: &[Option<DataType>]) -> PgWireResult<Vec<Type>> {
    types
        .iter()
        .map(|t| match t {
            Some(t) => into_pg_type(t),
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
        debug!(sql, "parse");
        self.prepare(sql)
            .await
            .map(Some)
            .map_err(SluiceError::into_pg)
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        match stmt {
            Prepared::Plan { plan, .. } => {
                wire_types(&ordered_parameter_types(plan).map_err(SluiceError::into_pg)?)
            }
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
            } => arrow_schema_to_pg_fields(
                plan.schema().as_arrow(),
                format.unwrap_or(&Format::UnifiedText),
                None,
            ),
            _ => Ok(vec![]),
        }
    }
}

async fn insert_count(df: DataFrame) -> Result<Response, SluiceError> {
    let batches = df.collect().await?;
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
    /// takes no parameters and returns no rows).
    async fn execute<C>(&self, client: &mut C, sql: &str) -> Result<Response, SluiceError>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let stmt = parse_sql(sql)?;
        if let Some(q) = self.parser.query_for(&stmt) {
            let s = self.parser.compat_statement(
                &q,
                ast::Statement::Commit {
                    chain: false,
                    end: false,
                    modifier: None,
                },
            );
            let plan = self.parser.plan(s).await?;
            return self
                .run_plan(client, plan, false, &Format::UnifiedText)
                .await;
        }
        match stmt {
            Statement::CreateTable(ct) => {
                self.store.create_table(ct.table, ct.if_not_exists)?;
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
                    if let Some(view) = self.views.dependents(name).into_iter().next() {
                        return Err(SluiceError::DependentObjects {
                            kind: "table",
                            name: name.clone(),
                            view,
                        });
                    }
                }
                for name in &names {
                    if self.store.table(name).is_some() {
                        self.store.drop_table(name)?;
                    }
                }
                Ok(Response::Execution(Tag::new("DROP TABLE")))
            }
            Statement::CopyTo(copy) => {
                let plan = self
                    .parser
                    .plan(ast::Statement::Query(copy.query.clone()))
                    .await?;
                let df = self.ctx.execute_logical_plan(plan).await?;
                match &copy.target {
                    ExportTarget::Stdout => export::to_stdout(df, &copy).await,
                    ExportTarget::Location(location) => export::to_location(df, location).await,
                }
            }
            Statement::CopyFrom(copy) => {
                let table = self
                    .store
                    .table(&copy.table)
                    .ok_or_else(|| SluiceError::UndefinedTable(copy.table.clone()))?;
                let columns = if copy.columns.is_empty() {
                    table.def.columns.len()
                } else {
                    copy.columns.len()
                };
                let parser = CopyParser::new(&table.def, copy, table.max_statement_bytes())?;
                *session(client).copy.lock() = Some(CopyState {
                    table,
                    parser: Some(parser),
                    routed: Default::default(),
                    error: None,
                });
                Ok(Response::CopyIn(CopyResponse::new(
                    0,
                    columns,
                    futures::stream::empty(),
                )))
            }
            Statement::Insert {
                table,
                columns,
                literal_rows: Some(rows),
                ..
            } => {
                let log = self
                    .store
                    .table(&table)
                    .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
                let mut stager = RowStager::new(&log.def, &columns, false)?
                    .with_limit(log.max_statement_bytes());
                for (i, row) in rows.iter().enumerate() {
                    stager.push_row(row, i as u64 + 1)?;
                }
                let n = log.append(stager.finish()?).await?;
                Ok(Response::Execution(
                    Tag::new("INSERT").with_oid(0).with_rows(n as usize),
                ))
            }
            Statement::Insert {
                table, statement, ..
            } => {
                let statement = self.parser.insert_with_columns(&table, *statement)?;
                let plan = self.parser.plan(statement).await?;
                self.run_plan(client, plan, true, &Format::UnifiedText)
                    .await
            }
            Statement::CreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                self.views
                    .create(&cv.name, cv.if_not_exists, &cv.query, emit)
                    .await?;
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
                        self.views.drop_view(name)?;
                    }
                }
                Ok(Response::Execution(Tag::new("DROP MATERIALIZED VIEW")))
            }
            Statement::Flush => {
                self.views.flush().await?;
                Ok(Response::Execution(Tag::new("FLUSH")))
            }
            Statement::ShowViews => Err(SluiceError::Unsupported("SHOW MATERIALIZED VIEWS".into())),
            Statement::Transaction(op) => Ok(match op {
                TransactionOp::Begin => Response::TransactionStart(Tag::new("BEGIN")),
                TransactionOp::Commit => Response::TransactionEnd(Tag::new("COMMIT")),
                TransactionOp::Rollback => Response::TransactionEnd(Tag::new("ROLLBACK")),
            }),
            Statement::Set { .. } => Ok(Response::Execution(Tag::new("SET"))),
            Statement::ShowTables => Err(SluiceError::Unsupported("SHOW TABLES".into())),
            Statement::Query(q) => {
                let s = self.parser.compat_statement(sql, *q);
                let plan = self.parser.plan(s).await?;
                self.run_plan(client, plan, false, &Format::UnifiedText)
                    .await
            }
        }
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
        let df = self.ctx.execute_logical_plan(plan).await?;
        if is_insert {
            return insert_count(df).await;
        }
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let resp = encode_dataframe(df, format, Some(options))
            .await
            .map_err(|e| SluiceError::Protocol(e.to_string()))?;
        Ok(Response::Query(resp))
    }
}

#[async_trait]
impl SimpleQueryHandler for Handlers {
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
            let span = info_span!("statement", sql = %truncate(&piece));
            let notices = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let result = SCAN_NOTICES
                .scope(
                    notices.clone(),
                    self.execute(client, &piece).instrument(span),
                )
                .await;
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
                    if out.is_empty() {
                        return Err(e.into_pg());
                    }
                    out.push(Response::Error(Box::new(pg_error_info(e))));
                    break;
                }
            }
        }
        Ok(out)
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

fn pg_error_info(e: SluiceError) -> pgwire::error::ErrorInfo {
    pgwire::error::ErrorInfo::new("ERROR".into(), e.sqlstate().into(), e.message())
}

fn truncate(sql: &str) -> &str {
    match sql.char_indices().nth(200) {
        Some((i, _)) => &sql[..i],
        None => sql,
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handlers {
    type Statement = Prepared;
    type QueryParser = SluiceQueryParser;

    fn query_parser(&self) -> Arc<SluiceQueryParser> {
        self.parser.clone()
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
        send_notices(client, &notices).await?;
        result
    }
}

impl Handlers {
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
        match &portal.statement.statement {
            Prepared::Empty => Ok(Response::EmptyQuery),
            Prepared::Direct(sql) => {
                let span = info_span!("statement", sql = %truncate(sql));
                self.execute(client, sql)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
            Prepared::Plan { plan, is_insert } => {
                let types = ordered_parameter_types(plan).map_err(SluiceError::into_pg)?;
                let wire = wire_types(&types)?;
                let type_refs: Vec<Option<&DataType>> = types.iter().map(|t| t.as_ref()).collect();
                let wire_refs: Vec<Option<&Type>> = wire.iter().map(Some).collect();
                let params =
                    deserialize_parameters_with_server_types(portal, &type_refs, &wire_refs)?;
                let plan = plan
                    .as_ref()
                    .clone()
                    .replace_params_with_values(&params)
                    .map_err(|e| SluiceError::from(e).into_pg())?;
                let span = info_span!("statement", sql = %truncate(&portal.statement.id));
                self.run_plan(client, plan, *is_insert, &portal.result_column_format)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg)
            }
        }
    }
}
