//! The query protocols, simple and extended: messages in, calls to the
//! [`Engine`], responses out.

use super::errors::IntoPgWire;
use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
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
use sluice_sql::{parse_sql, split_statements, Statement};
use tracing::{debug, debug_span, info_span, Instrument};

use super::login::{LoginHandler, Logins};
use super::{encode, export};
use crate::auth::Authenticator;
use crate::engine::{prepared_fetch, BoundParams, Engine, Outcome, Planner, Prepared, Session};
use crate::error::SluiceError;
use crate::ingest::BoundParam;
use crate::metrics::{statement_kind, METRICS};
use crate::query::cancel::{ConnectionRegistry, ShuttingDown};
use crate::query::SCAN_NOTICES;

/// The connection handlers: one instance serves every connection. They
/// translate: protocol messages into calls to the [`Engine`], its outcomes
/// into messages.
pub struct Handlers {
    pub(super) engine: Arc<Engine>,
    connections: Arc<ConnectionRegistry>,
    logins: Arc<Logins>,
}

impl Handlers {
    pub fn new(engine: Arc<Engine>, auth: Arc<Authenticator>) -> Handlers {
        let connections = engine.connections.clone();
        Handlers {
            logins: Arc::new(Logins::new(auth, connections.clone())),
            connections,
            engine,
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
            engine: self.engine.clone(),
            connections: self.connections.clone(),
            logins: self.logins.clone(),
        }
    }

    /// Runs one statement's SQL in the engine, sending the NOTICEs it
    /// raises while it runs (backfill progress), and answers in `format`.
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
        let session = session(client);
        let (notices, mut raised) = tokio::sync::mpsc::unbounded_channel();
        let outcome = {
            let work = self.engine.execute(&session, sql, &notices);
            tokio::pin!(work);
            loop {
                tokio::select! {
                    outcome = &mut work => break outcome?,
                    Some(message) = raised.recv() => {
                        let info = pgwire::error::ErrorInfo::new("NOTICE".into(), "00000".into(), message);
                        client
                            .send(PgWireBackendMessage::NoticeResponse(info.into()))
                            .await
                            .map_err(|e| SluiceError::Protocol(PgWireError::from(e).to_string()))?;
                    }
                }
            }
        };
        self.respond(client, &session, outcome, format).await
    }

    /// An outcome as pgwire's response, rows encoded in `format`.
    async fn respond<C>(
        &self,
        client: &mut C,
        session: &Arc<Session>,
        outcome: Outcome,
        format: &Format,
    ) -> Result<Response, SluiceError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
    {
        let options = || Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        Ok(match outcome {
            Outcome::Done { tag, rows } => {
                let tag = match tag {
                    "INSERT" => Tag::new(tag).with_oid(0),
                    _ => Tag::new(tag),
                };
                Response::Execution(match rows {
                    Some(n) => tag.with_rows(n as usize),
                    None => tag,
                })
            }
            Outcome::TransactionStart(tag) => Response::TransactionStart(Tag::new(tag)),
            Outcome::TransactionEnd(tag) => Response::TransactionEnd(Tag::new(tag)),
            Outcome::Batches {
                schema,
                batches,
                tag,
            } => {
                let mut resp =
                    encode::batches(&schema, batches, format, options()).map_err(encode_error)?;
                if tag != "SELECT" {
                    resp.set_command_tag(tag);
                }
                Response::Query(resp)
            }
            Outcome::Stream { schema, rows } => {
                // An error while the rows stream fails the open block.
                let session = session.clone();
                Response::Query(
                    encode::computed(
                        schema.as_ref().clone(),
                        rows,
                        format,
                        options(),
                        move || session.note_failure(),
                    )
                    .map_err(encode_error)?,
                )
            }
            Outcome::CopyIn { binary, columns } => Response::CopyIn(CopyResponse::new(
                i8::from(binary),
                columns,
                futures::stream::empty(),
            )),
            Outcome::CopyOut {
                rows,
                copy,
                columns,
            } => match export::to_stdout(rows, &copy, columns).await? {
                export::CopyOut::Stream(response) => response,
                export::CopyOut::EmptyBinary { columns } => {
                    send_empty_binary_copy(client, columns).await?;
                    Response::Execution(Tag::new("COPY").with_rows(0))
                }
            },
            Outcome::Empty => Response::EmptyQuery,
        })
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
    Ok(fields
        .iter()
        .map(|f| match f {
            Some(f) => wire_type(f),
            None => Type::UNKNOWN,
        })
        .collect())
}

/// The protocol's type of a column or parameter of this field.
fn wire_type(f: &arrow::datatypes::Field) -> Type {
    Type::from_oid(crate::types::PgType::of_field(f).oid).unwrap_or(Type::TEXT)
}

#[async_trait]
impl QueryParser for Planner {
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
        if let Some(prepared) =
            prepared_fetch(&session(_client), sql).map_err(SluiceError::into_pg)?
        {
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
            Prepared::Insert(insert, _) => insert
                .param_types()
                .iter()
                .map(|t| {
                    let column = sluice_catalog::ColumnDef {
                        name: String::new(),
                        ty: t.clone(),
                        nullable: true,
                    };
                    Ok(wire_type(&column.to_field()))
                })
                .collect(),
            _ => Ok(vec![]),
        }
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match stmt.result_columns() {
            Some(columns) => {
                super::encode::pg_fields(columns, format.unwrap_or(&Format::UnifiedText), None)
            }
            None => Ok(vec![]),
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
            unconstrained: false,
        },
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON => SqlType::Text,
        Type::JSONB => SqlType::Jsonb,
        Type::BYTEA => SqlType::Bytea,
        Type::DATE => SqlType::Date,
        Type::TIMESTAMP => SqlType::Timestamp,
        Type::TIMESTAMPTZ => SqlType::TimestampTz,
        Type::INTERVAL => SqlType::Interval,
        Type::TIME => SqlType::Time,
        Type::BOOL_ARRAY => SqlType::Array(Box::new(SqlType::Boolean)),
        Type::INT2_ARRAY => SqlType::Array(Box::new(SqlType::SmallInt)),
        Type::INT4_ARRAY => SqlType::Array(Box::new(SqlType::Int)),
        Type::INT8_ARRAY => SqlType::Array(Box::new(SqlType::BigInt)),
        Type::FLOAT4_ARRAY => SqlType::Array(Box::new(SqlType::Real)),
        Type::FLOAT8_ARRAY => SqlType::Array(Box::new(SqlType::Double)),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY => SqlType::Array(Box::new(SqlType::Text)),
        Type::DATE_ARRAY => SqlType::Array(Box::new(SqlType::Date)),
        Type::TIMESTAMP_ARRAY => SqlType::Array(Box::new(SqlType::Timestamp)),
        Type::TIMESTAMPTZ_ARRAY => SqlType::Array(Box::new(SqlType::TimestampTz)),
        _ => return None,
    })
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
                        out.push(Response::Error(Box::new(super::errors::error_info(e))));
                        break;
                    }
                }
            }
            let span = info_span!("statement", sql = %truncate(&piece));
            let notices = Arc::new(parking_lot::Mutex::new(Vec::new()));
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
                    out.push(Response::Error(Box::new(super::errors::error_info(e))));
                    break;
                }
            }
        }
        Ok(out)
    }
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

/// After a failed statement: a block that the failure ended (a COMMIT
/// that could not commit) leaves the connection idle, which the next
/// ReadyForQuery must say, as PostgreSQL's does.
fn settle_after_error<C: ClientInfo>(client: &mut C) {
    if !session(client).transaction.lock().open {
        client.set_transaction_status(TransactionStatus::Idle);
    }
}

fn note_failure<C: ClientInfo>(client: &C) {
    session(client).note_failure();
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
    type QueryParser = Planner;

    fn query_parser(&self) -> Arc<Planner> {
        self.engine.planner.clone()
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

    /// Runs a bound portal: a statement run as its SQL, or a prepared one
    /// with its parameters decoded here.
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
        let session = session(client);
        let prepared = &portal.statement.statement;
        // A parameter of a prepared INSERT sent in binary is read in the
        // type the client declared for it at Parse, else in its column's.
        let binary_types: Vec<SqlType> = match prepared {
            Prepared::Insert(insert, _) => insert
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
                .collect(),
            _ => Vec::new(),
        };
        let params = match prepared {
            Prepared::Empty => return Ok(Response::EmptyQuery),
            Prepared::Direct(sql) | Prepared::Rows { sql, .. } => {
                let span = info_span!("statement", sql = %truncate(sql));
                return self
                    .execute(client, sql, &portal.result_column_format)
                    .instrument(span)
                    .await
                    .map_err(SluiceError::into_pg);
            }
            Prepared::Insert(..) => BoundParams::Insert(
                portal
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
                    .collect(),
            ),
            Prepared::Plan { params, .. }
            | Prepared::PointRead { params, .. }
            | Prepared::Modify { params, .. } => {
                BoundParams::Values(bound_parameters(portal, params)?)
            }
        };
        // A prepared statement's span is at debug level: drivers run them
        // by the thousand a second, and an enabled span (its fields
        // formatted, its slot taken and freed) cost a tenth of a point
        // read's CPU. `SLUICE_LOG=sluice=debug` shows them.
        let span = debug_span!("statement", sql = %truncate(&portal.statement.id));
        let outcome = self
            .engine
            .run_prepared(&session, prepared, params)
            .instrument(span)
            .await
            .map_err(SluiceError::into_pg)?;
        self.respond(client, &session, outcome, &portal.result_column_format)
            .await
            .map_err(SluiceError::into_pg)
    }
}
