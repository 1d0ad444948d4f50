//! Statement execution, for a session and its role, without any protocol:
//! DDL, DML, views, subscriptions, transactions and the privilege checks
//! on each. The wire (`src/server`) turns protocol messages into calls
//! here and each [`Outcome`] into messages; a test or another front end
//! can drive an [`Engine`] directly.

mod copy;
mod export;
mod planner;
mod session;
mod text_reads;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use sluice_sql::sqlparser::ast;
use sluice_sql::{
    parse_sql, split_statements, CopyTo, ExportTarget, InsertValue, IsolationLevel, StartAt,
    Statement, TransactionOp,
};
use tracing::Instrument;

use crate::auth::{grant_targets, ObjectKind, RoleStore, SessionRole};
use crate::checkpoint::Checkpoints;
use crate::error::SluiceError;
use crate::ingest::{conform_batch, BoundParam, CopyParser, PreparedInsert, RowStager};
use crate::log::transaction::stage_statement;
use crate::log::{
    attach_remote_segments, below_snapshots, spawn_compaction, spawn_tiering, LogConfig, LogStore,
    TableLog,
};
use crate::query::cancel::{cancellable, parse_timeout, ConnectionRegistry, StatementWatch};
use crate::query::session_config;
use crate::query::{QueryExecutor, SCAN_NOTICES};
use crate::sink::SinkManager;
use crate::source::SourceManager;
use crate::store::DurableStore;
use crate::stream::{BackfillProgress, EmitOptions, ViewManager};
use crate::subscribe::{timestamp_us, SubscriptionCursor, SubscriptionError, SubscriptionManager};
use crate::system::build_context;
use crate::system::PointRead;

pub use copy::CopyState;
use planner::{delete_query, keyed_table, update_query};
pub use planner::{Planner, Prepared, RowChange};
pub use session::{Characteristics, Session, TransactionState};

/// Where a statement's NOTICE messages go while it runs (progress of a
/// backfill); the wire sends them as they come.
pub type Notices = tokio::sync::mpsc::UnboundedSender<String>;

/// Rows as a query computes them.
pub type RowStream = futures::stream::BoxStream<'static, Result<RecordBatch, SluiceError>>;

/// What a statement did, for the wire to report.
pub enum Outcome {
    /// A command: its tag and, for those that count rows, how many.
    Done {
        tag: &'static str,
        rows: Option<u64>,
    },
    /// BEGIN opened a transaction block.
    TransactionStart(&'static str),
    /// COMMIT or ROLLBACK ended it.
    TransactionEnd(&'static str),
    /// Rows computed whole (EXPLAIN, FETCH, a point read), and the tag that
    /// counts them.
    Batches {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        tag: &'static str,
    },
    /// A query's rows as they are computed; a cancel stops them.
    Stream { schema: SchemaRef, rows: RowStream },
    /// `COPY ... FROM STDIN` began: the session holds its state until the
    /// data ends ([`Engine::copy_data`], [`Engine::copy_done`]).
    CopyIn { binary: bool, columns: usize },
    /// `COPY (query) TO STDOUT`: the rows, for the wire to send as the
    /// statement's options ask.
    CopyOut {
        rows: SendableRecordBatchStream,
        copy: Box<CopyTo>,
        /// The columns as a header names them.
        columns: SchemaRef,
    },
    /// An empty statement.
    Empty,
}

impl Outcome {
    pub fn done(tag: &'static str) -> Outcome {
        Outcome::Done { tag, rows: None }
    }
}

/// The parameters a portal bound, decoded by the wire.
pub enum BoundParams<'a> {
    /// Values for a plan's `$n`.
    Values(ParamValues),
    /// Values for a prepared INSERT, converted as its columns need.
    Insert(Vec<BoundParam<'a>>),
}

/// What the engine opens: where its data is and how it keeps it.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub log: LogConfig,
    /// `s3://bucket/prefix`; `None` keeps objects under `<data_dir>/objects`.
    pub object_store: Option<String>,
    pub checkpoint_interval: Duration,
    pub tiering_interval: Duration,
    pub compaction_interval: Duration,
    /// Connections beyond this many are refused (53300); None: no limit.
    pub max_connections: Option<usize>,
    /// Memory all queries together may hold (see `build_context`); None:
    /// no limit.
    pub query_memory: Option<usize>,
}

impl EngineConfig {
    /// The defaults of `sluice serve`, over `data_dir`.
    pub fn new(data_dir: &Path) -> EngineConfig {
        EngineConfig {
            data_dir: data_dir.to_path_buf(),
            log: LogConfig::default(),
            object_store: None,
            checkpoint_interval: Duration::from_secs(1),
            tiering_interval: Duration::from_secs(1),
            compaction_interval: Duration::from_secs(30),
            max_connections: Some(100),
            query_memory: Some(4 << 30),
        }
    }
}

/// Everything statements run against: one instance serves every session.
pub struct Engine {
    pub store: Arc<LogStore>,
    pub objects: Arc<DurableStore>,
    pub views: Arc<ViewManager>,
    pub subs: Arc<SubscriptionManager>,
    pub sources: Arc<SourceManager>,
    pub sinks: Arc<SinkManager>,
    pub ctx: Arc<SessionContext>,
    pub planner: Arc<Planner>,
    pub connections: Arc<ConnectionRegistry>,
    pub roles: Arc<RoleStore>,
    /// Plans of point reads sent as text, by their text with the keys
    /// taken out.
    text_reads: text_reads::TextPointReads,
}

impl Engine {
    /// Opens the data directory: recovers every table, attaches the
    /// segments in the object store, restores the views from their
    /// checkpoints (their catch-up goes on in the background) and the
    /// subscriptions, and starts tiering and compaction.
    pub async fn open(config: &EngineConfig, roles: Arc<RoleStore>) -> Result<Engine, SluiceError> {
        let objects = Arc::new(DurableStore::open(
            config.object_store.as_deref(),
            &config.data_dir.join("objects"),
        )?);
        let store = Arc::new(LogStore::open(&config.data_dir, config.log)?);
        attach_remote_segments(&store, &objects).await?;
        spawn_tiering(store.clone(), objects.clone(), config.tiering_interval);
        let checkpoints = Checkpoints::new(objects.clone(), config.checkpoint_interval);
        let views = ViewManager::start(store.clone(), checkpoints, session_config()).await?;
        spawn_compaction(
            store.clone(),
            objects.clone(),
            config.compaction_interval,
            below_snapshots(views.compaction_horizon(), store.transactions().clone()),
        );
        let subs = SubscriptionManager::open(store.clone(), views.clone())?;
        // Every table and consumer group now holds in its own files what
        // the transaction log committed.
        store.transactions().clear()?;
        let sources = SourceManager::start(store.clone());
        let sinks = SinkManager::start(store.clone(), views.clone(), subs.clone());
        let connections = Arc::new(ConnectionRegistry::new(config.max_connections));
        let ctx = Arc::new(build_context(
            store.clone(),
            views.clone(),
            subs.clone(),
            crate::system::Connectors {
                sources: sources.clone(),
                sinks: sinks.clone(),
            },
            connections.clone(),
            config.query_memory,
            roles.clone(),
        )?);
        let compat = Arc::new(PostgresCompatibilityParser::new());
        Ok(Engine {
            planner: Arc::new(Planner {
                store: store.clone(),
                views: views.clone(),
                ctx: ctx.clone(),
                compat,
                roles: roles.clone(),
            }),
            store,
            objects,
            views,
            subs,
            sources,
            sinks,
            ctx,
            connections,
            roles,
            text_reads: Default::default(),
        })
    }

    /// Runs a bound prepared statement (not `Direct` or `Rows` ones, which
    /// run as their SQL through [`Engine::execute`]). Privileges are checked
    /// at every execution, not only when the statement was prepared: a
    /// REVOKE in between applies.
    pub async fn run_prepared(
        &self,
        session: &Session,
        prepared: &Prepared,
        params: BoundParams<'_>,
    ) -> Result<Outcome, SluiceError> {
        session.cancel.begin();
        self.check_prepared(session, prepared)?;
        if session.transaction.lock().failed {
            return Err(SluiceError::TransactionAborted);
        }
        let read_only = session.characteristics().read_only;
        match prepared {
            Prepared::Insert(_)
            | Prepared::Plan {
                is_insert: true, ..
            } if read_only => return Err(SluiceError::ReadOnlyTransaction("INSERT")),
            Prepared::Modify { change, .. } if read_only => {
                return Err(SluiceError::ReadOnlyTransaction(match change.as_ref() {
                    RowChange::Update { .. } => "UPDATE",
                    RowChange::Delete { .. } => "DELETE",
                }))
            }
            _ => {}
        }
        self.begin_statement(session).await;
        match (prepared, params) {
            (Prepared::Modify { change, plan, .. }, BoundParams::Values(params)) => {
                let plan = plan.as_ref().clone().replace_params_with_values(&params)?;
                self.change_rows(session, change, plan).await
            }
            (Prepared::Insert(insert), BoundParams::Insert(params)) => {
                self.run_insert(session, insert, &params).await
            }
            (
                Prepared::PointRead {
                    read,
                    columns,
                    plan,
                    ..
                },
                BoundParams::Values(params),
            ) => {
                if read.reads_table() && session.transaction.lock().open {
                    let plan = plan.as_ref().clone().replace_params_with_values(&params)?;
                    return self
                        .run_plan(session, plan, Some(columns.clone()), false)
                        .await;
                }
                let batch = read
                    .execute(&self.views, &self.store, Some(&params))
                    .await?;
                Ok(Outcome::Batches {
                    schema: columns.clone(),
                    batches: vec![batch],
                    tag: "SELECT",
                })
            }
            (
                Prepared::Plan {
                    plan,
                    is_insert,
                    columns,
                    source,
                    ..
                },
                BoundParams::Values(params),
            ) => {
                // A table dropped since is gone (42P01); one created anew
                // under its name is read by a new plan of the same SQL.
                let fresh = match crate::system::replaced_tables(plan, &self.store)? {
                    false => None,
                    true => match self.planner.prepare(source, &session.role()).await? {
                        Prepared::Plan {
                            plan: fresh,
                            columns: fresh_columns,
                            ..
                        } => {
                            let same = fresh_columns.fields().len() == columns.fields().len()
                                && fresh_columns
                                    .fields()
                                    .iter()
                                    .zip(columns.fields())
                                    .all(|(a, b)| a.data_type() == b.data_type());
                            if !same {
                                return Err(SluiceError::Unsupported(
                                    "cached plan must not change result type".into(),
                                ));
                            }
                            Some(fresh)
                        }
                        _ => None,
                    },
                };
                let plan = fresh.as_deref().unwrap_or(plan.as_ref());
                let plan = plan.clone().replace_params_with_values(&params)?;
                self.run_plan(session, plan, Some(columns.clone()), *is_insert)
                    .await
            }
            _ => Err(SluiceError::Internal(
                "a prepared statement bound the wrong kind of parameters".into(),
            )),
        }
    }

    /// A prepared INSERT's rows, from the bound values, appended (or
    /// staged in the open block).
    async fn run_insert(
        &self,
        session: &Session,
        insert: &PreparedInsert,
        params: &[BoundParam<'_>],
    ) -> Result<Outcome, SluiceError> {
        let log = self
            .store
            .table(&insert.table)
            .ok_or_else(|| SluiceError::UndefinedTable(insert.table.clone()))?;
        let batches = insert.stage(&log.def, params, log.max_statement_bytes())?;
        let n = self
            .write(session, &log, batches, insert.on_conflict_do_nothing)
            .await?;
        Ok(Outcome::Done {
            tag: "INSERT",
            rows: Some(n),
        })
    }
}

/// Lines of a plan as EXPLAIN answers them: one text column.
fn plan_lines(lines: &[String]) -> Result<Outcome, SluiceError> {
    let schema = planner::plan_lines_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::StringArray::from_iter_values(lines))],
    )?;
    Ok(Outcome::Batches {
        schema,
        batches: vec![batch],
        tag: "SELECT",
    })
}

impl Engine {
    /// Runs one statement given as SQL (a statement of a simple query, or
    /// a prepared one that takes no parameters). From here a cancel
    /// request or `statement_timeout` stops it.
    pub async fn execute(
        &self,
        session: &Session,
        sql: &str,
        notices: &Notices,
    ) -> Result<Outcome, SluiceError> {
        session.cancel.begin();
        let stmt = parse_sql(sql)?;
        if session.transaction.lock().failed && !matches!(stmt, Statement::Transaction(_)) {
            return Err(SluiceError::TransactionAborted);
        }
        if let Some(verb) = stmt.writes() {
            session.check_writable(verb)?;
        }
        if !matches!(stmt, Statement::Transaction(_) | Statement::Set { .. }) {
            self.begin_statement(session).await;
        }
        let shown = SessionSettings {
            current: session.characteristics(),
            defaults: *session.defaults.lock(),
            statement_timeout: session.cancel.timeout(),
        };
        if let Some(q) = self.planner.query_for(&stmt, Some(&shown)) {
            let s = self.planner.compat_statement(
                &q,
                ast::Statement::Commit {
                    chain: false,
                    end: false,
                    modifier: None,
                },
                &session.role().name,
            );
            let (plan, columns) = self.planner.plan_shown(s, &session.role()).await?;
            return self.run_plan(session, plan, Some(columns), false).await;
        }
        // A FETCH moves a cursor, which ROLLBACK TO SAVEPOINT cannot undo.
        let fetch = matches!(stmt, Statement::Fetch(_));
        let changes_catalog = text_reads::changes_catalog(&stmt);
        let result = self.dispatch(session, stmt, sql, notices).await;
        self.text_reads.after(changes_catalog);
        if fetch && result.is_ok() {
            session.note_fetch();
        }
        result
    }

    async fn dispatch(
        &self,
        session: &Session,
        stmt: Statement,
        sql: &str,
        notices: &Notices,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateTable(ct) => {
                let name = ct.table.name.clone();
                let existed = self.store.table(&name).is_some();
                if ct.table.options.source.is_some() {
                    if self
                        .sources
                        .create_table(ct.table, ct.if_not_exists)
                        .await?
                    {
                        let dead = crate::source::dead_letter_table_name(&name);
                        self.roles
                            .created(&session.role(), ObjectKind::Table, &[name, dead])?;
                    }
                    return Ok(Outcome::done("CREATE TABLE"));
                }
                self.store.create_table(ct.table, ct.if_not_exists)?;
                if !existed {
                    self.roles
                        .created(&session.role(), ObjectKind::Table, &[name])?;
                }
                Ok(Outcome::done("CREATE TABLE"))
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
                        .check_owner(&session.role(), ObjectKind::Table, name)?;
                    self.check_dependents("table", name)?;
                    if let Some(table) = self.store.table(name) {
                        if let Some(of) = &table.def.options.dead_letters_of {
                            if self.store.table(of).is_some() && !names.contains(of) {
                                return Err(SluiceError::ObjectInUse(format!(
                                    "table \"{name}\" holds the dead letters of table \"{of}\": DROP TABLE {of} drops both"
                                )));
                            }
                        }
                        if table.def.options.source.is_some() {
                            self.check_dependents(
                                "table",
                                &crate::source::dead_letter_table_name(name),
                            )?;
                        }
                    }
                }
                for name in &names {
                    let Some(table) = self.store.table(name) else {
                        continue;
                    };
                    let mut dropped = vec![name.clone()];
                    if table.def.options.source.is_some() {
                        self.sources.stop(name).await;
                        dropped.push(crate::source::dead_letter_table_name(name));
                    }
                    for name in dropped {
                        if self.store.table(&name).is_some() {
                            self.store.drop_table(&name)?;
                            self.roles
                                .dropped(ObjectKind::Table, std::slice::from_ref(&name))?;
                        }
                    }
                }
                Ok(Outcome::done("DROP TABLE"))
            }
            Statement::CopyTo(copy) => {
                if matches!(copy.target, ExportTarget::Location(_)) {
                    self.roles.check_superuser(
                        &session.role(),
                        "permission denied to COPY to a file: only superusers may COPY to a file or an object store; COPY ... TO STDOUT (psql's \\copy) works for everyone",
                    )?;
                }
                let (plan, columns) = self
                    .planner
                    .plan_shown(ast::Statement::Query(copy.query.clone()), &session.role())
                    .await?;
                let rows = self.query_rows(session, plan).await?;
                match &copy.target {
                    ExportTarget::Stdout => Ok(Outcome::CopyOut {
                        rows,
                        copy: Box::new(copy),
                        columns,
                    }),
                    ExportTarget::Location(location) => Ok(Outcome::Done {
                        tag: "COPY",
                        rows: Some(export::to_location(rows, columns, location).await?),
                    }),
                }
            }
            Statement::CopyFrom(copy) => {
                let table = self
                    .store
                    .table(&copy.table)
                    .ok_or_else(|| SluiceError::UndefinedTable(copy.table.clone()))?;
                table.check_statement_writes()?;
                self.roles.check(
                    &session.role(),
                    ObjectKind::Table,
                    &copy.table,
                    sluice_sql::Privilege::Insert,
                )?;
                let columns = if copy.columns.is_empty() {
                    table.def.columns.len()
                } else {
                    copy.columns.len()
                };
                let binary = copy.format == sluice_sql::CopyFormat::Binary;
                let parser = CopyParser::new(&table.def, copy, table.max_statement_bytes())?;
                *session.copy.lock() = Some(CopyState {
                    table,
                    parser: Some(parser),
                    routed: Default::default(),
                    error: None,
                    watch: session.cancel.watch(),
                    _running: self.connections.running().ok(),
                });
                Ok(Outcome::CopyIn { binary, columns })
            }
            Statement::Insert {
                table,
                columns,
                values: Some(rows),
                on_conflict_do_nothing,
                on_conflict_update,
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
                log.check_statement_writes()?;
                self.roles.check(
                    &session.role(),
                    ObjectKind::Table,
                    &table,
                    sluice_sql::Privilege::Insert,
                )?;
                check_on_conflict(
                    &log.def,
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
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
                    .write(session, &log, stager.finish()?, on_conflict_do_nothing)
                    .await?;
                Ok(Outcome::Done {
                    tag: "INSERT",
                    rows: Some(n),
                })
            }
            Statement::Insert {
                table,
                statement,
                on_conflict_do_nothing,
                on_conflict_update,
                ..
            } => {
                let statement = self.planner.insert_with_columns(
                    &table,
                    *statement,
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                let plan = self.planner.plan(statement, &session.role()).await?;
                self.run_plan(session, plan, None, true).await
            }
            Statement::CreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let role = session.role();
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
                Ok(Outcome::done("CREATE MATERIALIZED VIEW"))
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
                            .check_owner(&session.role(), ObjectKind::View, name)?;
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
                Ok(Outcome::done("DROP MATERIALIZED VIEW"))
            }
            Statement::Flush => {
                let views = self.views.clone();
                let flush = async move { views.flush().await };
                self.with_progress_notices(notices, flush, |views| {
                    views
                        .views()
                        .iter()
                        .filter_map(|v| v.backfill_progress().map(|p| (v.def.name.clone(), p)))
                        .collect()
                })
                .await?;
                Ok(Outcome::done("FLUSH"))
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
                plan_lines(&view.explain)
            }
            Statement::ExplainCreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let lines = self.views.explain(&cv.query, emit).await?;
                plan_lines(&lines)
            }
            // The simple protocol handles DEALLOCATE before it gets here.
            Statement::Deallocate(_) => Err(SluiceError::Unsupported(
                "DEALLOCATE in the extended query protocol; send it as a simple query".into(),
            )),
            Statement::Transaction(op) => self.transaction(session, op).await,
            Statement::CreateSubscription(c) => {
                let role = session.role();
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
                Ok(Outcome::done("CREATE SUBSCRIPTION"))
            }
            Statement::CreateSink(c) => {
                let role = session.role();
                if let Some(kind) = self.relation_kind(&c.source) {
                    self.roles
                        .check(&role, kind, &c.source, sluice_sql::Privilege::Select)?;
                }
                if self.sinks.create(&c).await? {
                    self.roles.created(
                        &role,
                        ObjectKind::Subscription,
                        std::slice::from_ref(&c.name),
                    )?;
                }
                Ok(Outcome::done("CREATE SINK"))
            }
            Statement::DropSink { names, if_exists } => {
                for name in &names {
                    if self.subs.exists(name) {
                        self.roles
                            .check_owner(&session.role(), ObjectKind::Subscription, name)?;
                    }
                }
                self.sinks.drop_sinks(&names, if_exists).await?;
                self.roles.dropped(ObjectKind::Subscription, &names)?;
                Ok(Outcome::done("DROP SINK"))
            }
            Statement::DropSubscription { names, if_exists } => {
                for name in &names {
                    self.roles
                        .check_owner(&session.role(), ObjectKind::Subscription, name)?;
                }
                self.subs.drop_subscriptions(&names, if_exists, false)?;
                self.roles.dropped(ObjectKind::Subscription, &names)?;
                Ok(Outcome::done("DROP SUBSCRIPTION"))
            }
            Statement::ResetSubscription { name, to } => {
                self.refuse_sink_group(&name)?;
                self.roles
                    .check_owner(&session.role(), ObjectKind::Subscription, &name)?;
                self.subs.reset(&name, &to).await?;
                Ok(Outcome::done("ALTER SUBSCRIPTION"))
            }
            Statement::CreateRole { name, options } => {
                self.roles.create(&session.role(), &name, &options)?;
                Ok(Outcome::done("CREATE ROLE"))
            }
            Statement::AlterRole { name, options } => {
                self.roles.alter(&session.role(), &name, &options)?;
                Ok(Outcome::done("ALTER ROLE"))
            }
            Statement::DropRole { names, if_exists } => {
                self.roles.drop_roles(&session.role(), &names, if_exists)?;
                Ok(Outcome::done("DROP ROLE"))
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
                self.roles.grant(&session.role(), &g, &targets)?;
                Ok(Outcome::done(if g.grant { "GRANT" } else { "REVOKE" }))
            }
            Statement::DeclareCursor {
                name,
                subscription,
                since,
            } => {
                let s = session;
                if s.cursors.lock().contains_key(&name) {
                    return Err(SubscriptionError::DuplicateCursor(name).into());
                }
                self.refuse_sink_group(&subscription)?;
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
                Ok(Outcome::done("DECLARE CURSOR"))
            }
            Statement::Fetch(fetch) => self.fetch(session, fetch).await,
            Statement::CloseCursor { name } => {
                let s = session;
                let mut cursors = s.cursors.lock();
                match name {
                    Some(name) => {
                        cursors
                            .remove(&name)
                            .ok_or(SubscriptionError::UndefinedCursor(name))?;
                    }
                    None => cursors.clear(),
                }
                Ok(Outcome::done("CLOSE CURSOR"))
            }
            Statement::RebuildView { name, from } => {
                if self.views.view(&name).is_some() {
                    self.roles
                        .check_owner(&session.role(), ObjectKind::View, &name)?;
                }
                self.rebuild(notices, &name, &from).await
            }
            Statement::Update {
                table,
                assignments,
                selection,
            } => {
                self.check_change(session, &table, sluice_sql::Privilege::Update)?;
                self.update(session, &table, &assignments, selection.as_deref())
                    .await
            }
            Statement::Delete { table, selection } => {
                self.check_change(session, &table, sluice_sql::Privilege::Delete)?;
                self.delete(session, &table, selection.as_deref()).await
            }
            Statement::Compact { table } => {
                let log = keyed_table(&self.store, &table, "VACUUM")?;
                self.roles
                    .check_owner(&session.role(), ObjectKind::Table, &table)?;
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
                Ok(Outcome::done("VACUUM"))
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
                session.cancel.set_timeout(timeout);
                Ok(Outcome::done("SET"))
            }
            Statement::Set { .. } => Ok(Outcome::done("SET")),
            Statement::ShowTables => Err(SluiceError::Unsupported("SHOW TABLES".into())),
            Statement::Query(q) => {
                if let ast::Statement::Query(query) = q.as_ref() {
                    if let Some(answer) = self.text_point_read(session, sql, query).await {
                        return Ok(answer);
                    }
                }
                let s = self.planner.compat_statement(sql, *q, &session.role().name);
                let (plan, columns) = self.planner.plan_shown(s, &session.role()).await?;
                // A view's row by its key given as literals: a lookup in
                // the view's index, as a prepared point read is.
                // A keyed table inside a block is read with the block's
                // writes, by the plan.
                let in_block = || session.transaction.lock().open;
                let read = PointRead::recognize(&plan)
                    .filter(|r| !(r.has_params() || r.reads_table() && in_block()));
                if let Some(read) = read {
                    return Ok(Outcome::Batches {
                        schema: columns,
                        batches: vec![read.execute(&self.views, &self.store, None).await?],
                        tag: "SELECT",
                    });
                }
                self.run_plan(session, plan, Some(columns), false).await
            }
        }
    }

    /// `ALTER MATERIALIZED VIEW v REBUILD [FROM ...]`, reporting progress
    /// as NOTICEs while it runs.
    async fn rebuild(
        &self,
        notices: &Notices,
        name: &str,
        from: &StartAt,
    ) -> Result<Outcome, SluiceError> {
        let from_us = match from {
            StartAt::Timestamp(text) => Some(timestamp_us(text)?),
            _ => None,
        };
        let views = self.views.clone();
        let view = name.to_string();
        let rebuild = async move { views.rebuild(&view, from_us).await };
        let view = name.to_string();
        self.with_progress_notices(notices, rebuild, move |views| {
            views
                .progress(&view)
                .map(|p| vec![(view.clone(), p)])
                .unwrap_or_default()
        })
        .await?;
        Ok(Outcome::done("ALTER MATERIALIZED VIEW"))
    }

    /// Runs `work` on its own task (it finishes even if the client goes
    /// away) and gives `notices` each backfill's progress every second
    /// (the first after 250 ms) until it is done.
    async fn with_progress_notices<F>(
        &self,
        notices: &Notices,
        work: F,
        progress: impl Fn(&ViewManager) -> Vec<(String, BackfillProgress)>,
    ) -> Result<(), SluiceError>
    where
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
                        // A client that went away gets no more; the work
                        // goes on.
                        let _ = notices.send(progress_message(&name, &p));
                    }
                }
            }
        }
    }

    /// Runs a plan over the latest rows of the tables (as the open
    /// transaction sees them) and collects it.
    async fn collect_plan(
        &self,
        session: &Session,
        plan: LogicalPlan,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let df = self.dataframe(session, plan).await?;
        let task = Arc::new(df.task_ctx());
        let physical = self.physical_plan(df).await?;
        Ok(datafusion::physical_plan::collect(physical, task).await?)
    }

    /// Rows a statement writes: appended now, or staged in the open
    /// transaction block until COMMIT.
    async fn write(
        &self,
        session: &Session,
        log: &Arc<TableLog>,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
    ) -> Result<u64, SluiceError> {
        // The last look before the rows are committed.
        session.cancel.watch().check()?;
        let staging = session.transaction.lock().staging();
        Ok(match staging {
            None => log.append_keyed(batches, on_conflict_do_nothing).await?,
            Some(staged) => stage_statement(&staged, log, batches, on_conflict_do_nothing).await?,
        })
    }

    /// A statement is about to run: in a REPEATABLE READ block, the first
    /// takes the snapshot every later one reads.
    async fn begin_statement(&self, session: &Session) {
        let s = session;
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
    async fn dataframe(
        &self,
        session: &Session,
        plan: LogicalPlan,
    ) -> Result<DataFrame, SluiceError> {
        let (staging, snapshot, role) = {
            let s = session;
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
    /// A query's rows, computed on the query threads (see
    /// [`QueryExecutor`]); dropping the stream stops the query.
    async fn query_rows(
        &self,
        session: &Session,
        plan: LogicalPlan,
    ) -> Result<SendableRecordBatchStream, SluiceError> {
        let df = self.dataframe(session, plan).await?;
        let task = Arc::new(df.task_ctx());
        let physical = self.physical_plan(df).await?;
        Ok(QueryExecutor::get().stream(physical, task))
    }

    async fn physical_plan(
        &self,
        df: DataFrame,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, SluiceError> {
        let _snapshot = self.store.transactions().snapshot_guard().await;
        Ok(df.create_physical_plan().await?)
    }

    /// `UPDATE t SET ... [WHERE ...]` on a keyed table: the matching latest
    /// rows with the new values, appended as new versions in one statement.
    async fn update(
        &self,
        session: &Session,
        table: &str,
        assignments: &[(String, String)],
        selection: Option<&str>,
    ) -> Result<Outcome, SluiceError> {
        let sql = update_query(&self.store, table, assignments, selection)?;
        let plan = self.plan_query(&sql, &session.role()).await?;
        self.change_rows(
            session,
            &RowChange::Update {
                table: table.to_string(),
            },
            plan,
        )
        .await
    }

    /// `DELETE FROM t [WHERE ...]` on a keyed table: a tombstone for the key
    /// of each matching latest row, appended in one statement.
    async fn delete(
        &self,
        session: &Session,
        table: &str,
        selection: Option<&str>,
    ) -> Result<Outcome, SluiceError> {
        let sql = delete_query(&self.store, table, selection)?;
        let plan = self.plan_query(&sql, &session.role()).await?;
        self.change_rows(
            session,
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
        self.planner.plan(stmt, user).await
    }

    /// Runs an UPDATE's or DELETE's query and writes what it found: new
    /// versions, or tombstones of the keys.
    async fn change_rows(
        &self,
        session: &Session,
        change: &RowChange,
        plan: LogicalPlan,
    ) -> Result<Outcome, SluiceError> {
        let found = self.collect_plan(session, plan).await?;
        match change {
            RowChange::Update { table } => {
                let log = keyed_table(&self.store, table, "UPDATE")?;
                let mut row = 1;
                let mut batches = Vec::new();
                for b in found {
                    batches.push(conform_batch(&log.def, &b, row)?);
                    row += b.num_rows() as u64;
                }
                let n = self.write(session, &log, batches, false).await?;
                Ok(Outcome::Done {
                    tag: "UPDATE",
                    rows: Some(n),
                })
            }
            RowChange::Delete { table } => {
                let log = keyed_table(&self.store, table, "DELETE")?;
                let tombstones: Vec<RecordBatch> = found
                    .iter()
                    .filter(|b| b.num_rows() > 0)
                    .map(|b| crate::log::keyed::tombstones(&log.def, b))
                    .collect::<Result<_, _>>()?;
                let n = self.write(session, &log, tombstones, false).await?;
                Ok(Outcome::Done {
                    tag: "DELETE",
                    rows: Some(n),
                })
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
    fn check_prepared(&self, session: &Session, prepared: &Prepared) -> Result<(), SluiceError> {
        let role = session.role();
        if self.roles.is_superuser(&role) {
            return Ok(());
        }
        match prepared {
            Prepared::Plan { plan, .. } | Prepared::PointRead { plan, .. } => {
                self.planner.check_access(&role, plan)
            }
            Prepared::Insert(insert) => {
                if let Some(t) = self.store.table(&insert.table) {
                    t.check_statement_writes()?;
                }
                Ok(self.roles.check(
                    &role,
                    ObjectKind::Table,
                    &insert.table,
                    sluice_sql::Privilege::Insert,
                )?)
            }
            Prepared::Modify { change, plan, .. } => {
                let (table, privilege) = match change.as_ref() {
                    RowChange::Update { table } => (table, sluice_sql::Privilege::Update),
                    RowChange::Delete { table } => (table, sluice_sql::Privilege::Delete),
                };
                self.roles
                    .check(&role, ObjectKind::Table, table, privilege)?;
                self.planner.check_access(&role, plan)
            }
            Prepared::Empty | Prepared::Direct(_) | Prepared::Rows { .. } => Ok(()),
        }
    }

    /// UPDATE or DELETE on `table` (an existing table).
    fn check_change(
        &self,
        session: &Session,
        table: &str,
        privilege: sluice_sql::Privilege,
    ) -> Result<(), SluiceError> {
        if let Some(t) = self.store.table(table) {
            t.check_statement_writes()?;
            self.roles
                .check(&session.role(), ObjectKind::Table, table, privilege)?;
        }
        Ok(())
    }

    /// A sink's consumer group is the sink's alone: no cursor reads it and
    /// no RESET moves it.
    fn refuse_sink_group(&self, name: &str) -> Result<(), SluiceError> {
        match self.subs.get(name) {
            Some(g) if g.def.sink.is_some() => {
                Err(SubscriptionError::IsSink(name.to_string()).into())
            }
            _ => Ok(()),
        }
    }

    fn check_dependents(&self, kind: &'static str, name: &str) -> Result<(), SluiceError> {
        let dependent = match self.views.dependents(name).into_iter().next() {
            Some(view) => format!("materialized view {view}"),
            None => match self.subs.dependents(name).into_iter().next() {
                Some(sub) => match self.subs.get(&sub).is_some_and(|g| g.def.sink.is_some()) {
                    true => format!("sink {sub}"),
                    false => format!("subscription {sub}"),
                },
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
    async fn transaction(
        &self,
        session: &Session,
        op: TransactionOp,
    ) -> Result<Outcome, SluiceError> {
        let s = session;
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
                return Ok(Outcome::TransactionStart("BEGIN"));
            }
            TransactionOp::SetModes(modes) => {
                // Outside a block PostgreSQL only warns, and nothing
                // changes.
                if state.open {
                    s.transaction.lock().set_modes(*modes)?;
                }
                return Ok(Outcome::done("SET"));
            }
            TransactionOp::SetDefaults(modes) => {
                if state.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                let mut defaults = s.defaults.lock();
                *defaults = defaults.with(*modes);
                return Ok(Outcome::done("SET"));
            }
            TransactionOp::Savepoint(_)
            | TransactionOp::Release(_)
            | TransactionOp::RollbackTo(_) => {
                let tag = s.transaction.lock().savepoint(&op)?;
                return Ok(Outcome::done(tag));
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
        Ok(Outcome::TransactionEnd(if commit {
            "COMMIT"
        } else {
            "ROLLBACK"
        }))
    }

    /// FETCH from a subscription cursor. Outside a transaction block the
    /// new position is committed before the rows are sent.
    async fn fetch(
        &self,
        session: &Session,
        fetch: sluice_sql::Fetch,
    ) -> Result<Outcome, SluiceError> {
        let s = session;
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
        Ok(Outcome::Batches {
            schema,
            batches: result?,
            tag: "FETCH",
        })
    }

    /// Runs a planned query: an `INSERT ... SELECT` to its end, anything
    /// else as a stream of rows that a cancel stops, shown as `columns`
    /// (the plan's own when None).
    pub(crate) async fn run_plan(
        &self,
        session: &Session,
        plan: LogicalPlan,
        columns: Option<SchemaRef>,
        is_insert: bool,
    ) -> Result<Outcome, SluiceError> {
        let df = self.dataframe(session, plan).await?;
        let task = df.task_ctx();
        let schema = columns.unwrap_or_else(|| Arc::new(df.schema().as_arrow().clone()));
        let physical = self.physical_plan(df).await?;
        let watch = session.cancel.watch();
        if is_insert {
            return insert_count(physical, task, watch).await;
        }
        let batches = QueryExecutor::get().stream(physical, Arc::new(task));
        Ok(Outcome::Stream {
            schema,
            rows: Box::pin(cancellable(batches, watch)),
        })
    }
}

/// `ON CONFLICT ... DO UPDATE SET ...` is what an INSERT into a keyed
/// table does anyway (the row with the same key is replaced) when its
/// target is the primary key and it sets every other column from
/// `EXCLUDED`, as ORMs' upserts write it; anything else would keep parts
/// of the old row, which a keyed table's INSERT does not.
fn check_conflict_update(
    def: &sluice_catalog::TableDef,
    update: Option<&sluice_sql::ConflictUpdate>,
) -> Result<(), SluiceError> {
    let Some(update) = update else {
        return Ok(());
    };
    let key = &def.options.primary_key;
    let refuse = |why: String| {
        SluiceError::Unsupported(format!(
            "ON CONFLICT DO UPDATE on \"{}\" {why}: an INSERT into a keyed table replaces the whole row with the same key, so DO UPDATE is taken only as ON CONFLICT ({}) DO UPDATE SET every other column = EXCLUDED.column, with no WHERE",
            def.name,
            key.join(", ")
        ))
    };
    let target_is_key = match &update.constraint {
        Some(name) => *name == format!("{}_pkey", def.name),
        None => {
            let mut named = update.columns.clone();
            named.sort();
            named.dedup();
            let mut primary = key.clone();
            primary.sort();
            named == primary && update.columns.len() == key.len()
        }
    };
    if !target_is_key {
        return Err(refuse(
            "needs the primary key as its conflict target".into(),
        ));
    }
    if update.filtered {
        return Err(refuse("has a WHERE clause".into()));
    }
    for (column, source) in &update.sets {
        if def.column_index(column).is_none() {
            return Err(crate::ingest::IngestError::UndefinedColumn(column.clone()).into());
        }
        if source.as_deref() != Some(column.as_str()) {
            return Err(refuse(format!(
                "sets \"{column}\" to something other than EXCLUDED.{column}"
            )));
        }
    }
    for c in &def.columns {
        if !key.contains(&c.name) && !update.sets.iter().any(|(s, _)| *s == c.name) {
            return Err(refuse(format!("does not set \"{}\"", c.name)));
        }
    }
    Ok(())
}

/// An INSERT's ON CONFLICT clause: DO NOTHING and DO UPDATE need a key to
/// conflict on, and DO UPDATE must mean the upsert a keyed table's INSERT
/// is ([`check_conflict_update`]).
pub(super) fn check_on_conflict(
    def: &sluice_catalog::TableDef,
    do_nothing: bool,
    update: Option<&sluice_sql::ConflictUpdate>,
) -> Result<(), SluiceError> {
    if (do_nothing || update.is_some()) && !def.is_keyed() {
        return Err(SluiceError::Unsupported(format!(
            "ON CONFLICT needs a keyed table (with a PRIMARY KEY); \"{}\" is append-only",
            def.name
        )));
    }
    check_conflict_update(def, update)
}

/// A FETCH prepared with Parse: its rows have the cursor's schema.
pub fn prepared_fetch(session: &Session, sql: &str) -> Result<Option<Prepared>, SluiceError> {
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
    let schema = session
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
) -> Result<Outcome, SluiceError> {
    // The sink looks at the statement's watch (see `LogSink`).
    let mut config = task.session_config().clone();
    config.set_extension(Arc::new(watch));
    let task = Arc::new(task.with_session_config(config));
    let batches = QueryExecutor::get().collect(plan, task).await?;
    let rows = batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>().map(|a| a.value(0)))
        .unwrap_or(0);
    Ok(Outcome::Done {
        tag: "INSERT",
        rows: Some(rows),
    })
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

/// The transaction settings `SHOW` answers from the session.
#[derive(Clone, Copy)]
pub(crate) enum TransactionSetting {
    Isolation,
    ReadOnly,
}

impl TransactionSetting {
    pub(crate) fn value(self, c: Characteristics) -> &'static str {
        match self {
            TransactionSetting::Isolation => c.isolation.name(),
            TransactionSetting::ReadOnly if c.read_only => "on",
            TransactionSetting::ReadOnly => "off",
        }
    }
}

pub(crate) fn transaction_setting(name: &str) -> Option<TransactionSetting> {
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
pub(crate) struct SessionSettings {
    /// The open transaction's (or the defaults, outside a block).
    current: Characteristics,
    defaults: Characteristics,
    statement_timeout: Option<std::time::Duration>,
}

/// The column name of `SHOW <setting>`, when `stmt` shows a setting the
/// session keeps (a transaction setting, `statement_timeout`).
pub(crate) fn shown_session_setting(stmt: &Statement) -> Option<String> {
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
pub(super) fn shown_name(variable: &[ast::Ident]) -> String {
    variable
        .iter()
        .map(|i| i.value.to_lowercase())
        .collect::<Vec<_>>()
        .join(" ")
}
