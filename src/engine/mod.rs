//! Statement execution, for a session and its role, without any protocol:
//! DDL, DML, views, subscriptions, transactions and the privilege checks
//! on each. The wire (`src/server`) turns protocol messages into calls
//! here and each [`Outcome`] into messages; a test or another front end
//! can drive an [`Engine`] directly.
//!
//! Each family of statements has its module, which runs its statements:
//! `tables` (CREATE/DROP TABLE, VACUUM), `dml` (INSERT, UPDATE, DELETE,
//! COPY), `views` (materialized views, REBUILD, FLUSH), `subscriptions`
//! (subscriptions and cursors), `connectors` (sinks), `roles` (roles and
//! privileges), `transactions` (blocks, SET, exported snapshots in
//! `snapshots`), `relations` (views that are named queries, CREATE TABLE
//! AS, RENAME, REFRESH) and `queries`. Here are what
//! they share (opening the engine, planning and running plans, prepared
//! statements) and [`Engine::dispatch`], which only routes.

mod connectors;
mod copy;
mod cuts;
mod datasets;
mod dml;
mod erasures;
mod export;
mod planner;
mod queries;
mod relations;
mod returning;
mod roles;
mod session;
mod snapshots;
mod subscriptions;
mod tables;
mod text_reads;
mod transactions;
mod views;

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
use crate::ingest::{
    conform_batch, implicit_insert_columns, BoundParam, CopyParser, PreparedInsert, RowStager,
};
use crate::log::transaction::stage_statement;
use crate::log::{
    attach_remote_segments, below_cuts, below_snapshots, spawn_compaction, spawn_tiering,
    LogConfig, LogStore, TableLog,
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
pub(crate) use dml::{check_on_conflict, insert_count};
use planner::{delete_query, keyed_table, update_query};
pub use planner::{Planner, Prepared, RowChange};
pub use session::{Characteristics, Session, TransactionState};
pub use subscriptions::prepared_fetch;
pub(crate) use transactions::{shown_name, shown_session_setting, transaction_setting};

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
    /// Held while an erasure runs: one at a time.
    erasing: Arc<tokio::sync::Mutex<()>>,
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
        // Erasures in force drop matching rows from the first write on.
        erasures::install_suppressions(&store);
        attach_remote_segments(&store, &objects).await?;
        spawn_tiering(store.clone(), objects.clone(), config.tiering_interval);
        let checkpoints = Checkpoints::new(objects.clone(), config.checkpoint_interval);
        let views = ViewManager::start(store.clone(), checkpoints, session_config()).await?;
        spawn_compaction(
            store.clone(),
            objects.clone(),
            config.compaction_interval,
            below_cuts(
                below_snapshots(views.compaction_horizon(), store.transactions().clone()),
                store.clone(),
            ),
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
        let engine = Engine {
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
            erasing: Default::default(),
        };
        // Erasures a crash or a failed step left unfinished go on.
        erasures::resume_erasures(engine.erasure_work());
        Ok(engine)
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
            Prepared::Insert(..)
            | Prepared::Plan {
                is_insert: true, ..
            } if read_only => return Err(SluiceError::ReadOnlyTransaction("INSERT")),
            Prepared::Modify { change, .. } if read_only => {
                return Err(SluiceError::ReadOnlyTransaction(match change.as_ref() {
                    RowChange::Update { .. } => "UPDATE",
                    RowChange::Delete { .. } | RowChange::Erase { .. } => "DELETE",
                }))
            }
            _ => {}
        }
        self.begin_statement(session).await;
        match (prepared, params) {
            (Prepared::Modify { change, .. }, BoundParams::Values(params))
                if matches!(change.as_ref(), RowChange::Erase { .. }) =>
            {
                let RowChange::Erase { table, selection } = change.as_ref() else {
                    unreachable!("matched above")
                };
                let selection = erasures::bind_parameters(selection, &params)?;
                self.erase(
                    session,
                    Some(table.clone()),
                    Some(selection),
                    None,
                    "DELETE",
                )
                .await
            }
            (Prepared::Modify { change, plan, .. }, BoundParams::Values(params)) => {
                let plan = plan.as_ref().clone().replace_params_with_values(&params)?;
                self.change_rows(session, change, plan).await
            }
            (Prepared::Insert(insert, returning), BoundParams::Insert(params)) => {
                self.run_insert(session, insert, &params, returning.as_deref())
                    .await
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
                    returning,
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
                if let Some(returning) = returning {
                    return self.run_insert_returning(session, plan, returning).await;
                }
                self.run_plan(session, plan, Some(columns.clone()), *is_insert)
                    .await
            }
            _ => Err(SluiceError::Internal(
                "a prepared statement bound the wrong kind of parameters".into(),
            )),
        }
    }
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

    /// Routes a statement to the module of its family.
    async fn dispatch(
        &self,
        session: &Session,
        stmt: Statement,
        sql: &str,
        notices: &Notices,
    ) -> Result<Outcome, SluiceError> {
        use Statement as S;
        match stmt {
            s @ (S::CreateTable(_) | S::DropTable { .. } | S::Compact { .. } | S::ShowTables) => {
                self.table_statement(session, s).await
            }
            s @ (S::CopyTo(_)
            | S::CopyFrom(_)
            | S::Insert { .. }
            | S::Update { .. }
            | S::Delete { .. }) => self.change_statement(session, s).await,
            s @ (S::CreateView(_)
            | S::DropView { .. }
            | S::Flush
            | S::ShowViews
            | S::ExplainView { .. }
            | S::ExplainCreateView(_)
            | S::RebuildView { .. }) => self.view_statement(session, s, notices).await,
            s @ (S::CreateSubscription(_)
            | S::DropSubscription { .. }
            | S::ResetSubscription { .. }
            | S::DeclareCursor { .. }
            | S::Fetch(_)
            | S::CloseCursor { .. }) => self.subscription_statement(session, s).await,
            s @ (S::CreateSink(_) | S::DropSink { .. }) => self.sink_statement(session, s).await,
            s @ (S::CreateCut { .. } | S::DropCut { .. }) => self.cut_statement(session, s).await,
            s @ (S::Erase { .. } | S::VerifyErasure { .. }) => {
                self.erasure_statement(session, s).await
            }
            s @ (S::CreateDataset(_)
            | S::RefreshDataset { .. }
            | S::CopyDataset { .. }
            | S::VerifyDataset { .. }
            | S::DropDataset { .. }) => self.dataset_statement(session, s).await,
            s @ (S::CreateRole { .. } | S::AlterRole { .. } | S::DropRole { .. } | S::Grant(_)) => {
                self.role_statement(session, s).await
            }
            s @ (S::Transaction(_) | S::Set { .. } | S::Deallocate(_)) => {
                self.transaction_statement(session, s).await
            }
            s @ (S::RefreshView { .. }
            | S::CreateQueryView(_)
            | S::DropQueryView { .. }
            | S::CreateTableAs(_)
            | S::CreateIndex(_)
            | S::DropIndex { .. }
            | S::RenameRelation { .. }) => self.relation_statement(session, s).await,
            s @ S::Query(_) => self.query_statement(session, s, sql).await,
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
        use crate::query::per_outer_value as per_value;
        let _snapshot = self.store.transactions().snapshot_guard().await;
        let (state, mut plan) = df.into_parts();
        if per_value::needs_per_outer_value(&plan) {
            plan = per_value::evaluate_per_outer_value(&state, plan).await?;
        }
        // A correlated subquery the optimizer cannot turn into a join is
        // evaluated per outer value instead.
        match state.create_physical_plan(&plan).await {
            Err(e) if per_value::is_correlation_error(&e) => {
                let plan = per_value::evaluate_per_outer_value(&state, plan).await?;
                Ok(state.create_physical_plan(&plan).await?)
            }
            planned => Ok(planned?),
        }
    }

    async fn plan_query(&self, sql: &str, user: &SessionRole) -> Result<LogicalPlan, SluiceError> {
        let stmt = match parse_sql(sql)? {
            Statement::Query(q) => *q,
            _ => return Err(SluiceError::Internal(format!("not a query: {sql}"))),
        };
        self.planner.plan(stmt, user).await
    }

    /// Refuses to drop a relation something still reads.
    /// A table or view by name, and which it is.
    fn relation_kind(&self, name: &str) -> Option<ObjectKind> {
        self.found(name).map(|found| match found {
            relations::Found::MaterializedView => ObjectKind::View,
            // A view (a named query) takes a table's privileges.
            relations::Found::Table | relations::Found::View => ObjectKind::Table,
        })
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
            Prepared::Plan {
                plan,
                returning: Some(returning),
                ..
            } => {
                self.planner.check_access(&role, plan)?;
                returning.check_access(&self.planner, &role)
            }
            Prepared::Plan { plan, .. } | Prepared::PointRead { plan, .. } => {
                self.planner.check_access(&role, plan)
            }
            Prepared::Insert(insert, returning) => {
                if let Some(t) = self.store.table(&insert.table) {
                    t.check_statement_writes()?;
                }
                self.roles.check(
                    &role,
                    ObjectKind::Table,
                    &insert.table,
                    sluice_sql::Privilege::Insert,
                )?;
                match returning {
                    Some(r) => r.check_access(&self.planner, &role),
                    None => Ok(()),
                }
            }
            Prepared::Modify { change, plan, .. } => {
                let (table, privilege) = match change.as_ref() {
                    RowChange::Update { table } => (table, sluice_sql::Privilege::Update),
                    RowChange::Delete { table } | RowChange::Erase { table, .. } => {
                        (table, sluice_sql::Privilege::Delete)
                    }
                };
                self.roles
                    .check(&role, ObjectKind::Table, table, privilege)?;
                self.planner.check_access(&role, plan)
            }
            Prepared::Empty | Prepared::Direct(_) | Prepared::Rows { .. } => Ok(()),
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
                None => match self.query_view_dependents(name).into_iter().next() {
                    Some(view) => format!("view {view}"),
                    None => return Ok(()),
                },
            },
        };
        Err(SluiceError::DependentObjects {
            kind,
            name: name.to_string(),
            dependent,
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

/// What `SHOW` answers from the session rather than the server.
pub(crate) struct SessionSettings {
    /// The open transaction's (or the defaults, outside a block).
    current: Characteristics,
    defaults: Characteristics,
    statement_timeout: Option<std::time::Duration>,
}

/// A statement given to a family that does not run it (a routing bug).
fn misrouted(family: &str, stmt: &Statement) -> SluiceError {
    let kind = format!("{stmt:?}");
    let kind = kind
        .split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_string();
    SluiceError::Internal(format!(
        "statement {kind} was routed to the {family} statements"
    ))
}
