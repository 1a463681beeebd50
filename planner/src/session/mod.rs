//! A session: settings, the catalog, and statement execution. Front ends (REPL, script runner,
//! wire server, tests) hand it statement texts and render what comes back.

mod constant;
mod ddl;
mod params;
pub use params::{bind_params, parameter_list};
mod settings;

pub use settings::SERVER_VERSION;
mod shared;
mod sinks;
pub use sinks::JOB_OPTIONS;
mod vocabulary;
pub use vocabulary::{Relation, RelationKind, Vocabulary};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::planner::{ParserOptions, SqlToRel};
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
use weir_connectors::sinks::{ChannelSink, SinkEvent};
use weir_engine::{spawn_job, JobConfig, JobHandle, MetricsSnapshot};

use crate::catalog::Catalog;
use crate::context::{new_session_state, PlanningContext};
use crate::error::{PlanError, Result};
use crate::sql::{object_name, parse_statement, StatementText, Transaction, WeirStatement};
use crate::stream_plan::{reads_tables, QueryModes, StreamPlanner};
use crate::{invalid, not_supported};

/// Session settings (`SET name = value`).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Instances of each parallel stage (the aggregation behind the keyed exchange).
    pub parallelism: usize,
    /// Where the catalog, sink jobs and their checkpoints are kept; `None` keeps everything
    /// in memory (and sinks cannot be created).
    pub data_dir: Option<PathBuf>,
    /// Checkpoint interval of sink jobs created from now on.
    pub checkpoint_interval: Duration,
    /// Delivery of sink jobs created from now on: exactly-once (true) or at-least-once.
    pub exactly_once: bool,
    /// Complete checkpoints kept per job.
    pub checkpoints_retained: usize,
    /// Relative paths in WITH options are resolved against this directory (default: the
    /// working directory).
    pub base_dir: Option<PathBuf>,
    /// Parallelism of resumed jobs (`weir resume --parallelism`); `None`: as created.
    pub resume_parallelism: Option<usize>,
    /// Whether opening the session resumes the data directory's unfinished jobs (the REPL,
    /// `weir serve`, `weir resume`); `weir -f` runs only its script's (materialized views
    /// stay readable either way).
    pub resume_jobs: bool,
    /// Bytes of window state each task keeps in memory before spilling to its store.
    pub memory_budget: usize,
    /// `idle_timeout` of sources whose table sets none.
    pub idle_timeout: Option<Duration>,
    /// `runtime_mode`, `window_emit` and `state_ttl`: what queries compute.
    pub modes: QueryModes,
    /// `late_rows` of tables created from now on that set none (`{table}` stands for the
    /// table's name).
    pub late_rows: Option<String>,
    /// When set, `path` options must lead inside this directory (wire sessions).
    pub file_root: Option<PathBuf>,
    /// PostgreSQL session parameters set by the client (`SET application_name = ...`).
    pub client_params: BTreeMap<String, String>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
            data_dir: None,
            checkpoint_interval: Duration::from_secs(1),
            exactly_once: true,
            checkpoints_retained: 3,
            base_dir: None,
            resume_parallelism: None,
            resume_jobs: true,
            memory_budget: weir_engine::runtime::DEFAULT_MEMORY_BUDGET,
            idle_timeout: None,
            modes: QueryModes::default(),
            late_rows: None,
            file_root: None,
            client_params: BTreeMap::new(),
        }
    }
}

/// Reads the jobs a process runs; see [`Session::job_observer`].
#[derive(Clone)]
pub struct JobObserver {
    shared: Arc<shared::Shared>,
}

impl JobObserver {
    /// Each job this process runs or ran (empty without a data directory).
    pub fn jobs(&self) -> Vec<crate::jobs::JobView> {
        self.shared
            .registry()
            .map(|r| r.views())
            .unwrap_or_default()
    }

    /// SHOW JOBS rows: also the data directory's jobs this process does not run.
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.shared.jobs_if_any(|j| j.rows()).unwrap_or_default()
    }
}

/// A streaming query that is running; rows arrive on `events` as windows close.
pub struct QueryRun {
    pub schema: SchemaRef,
    pub events: Receiver<SinkEvent>,
    pub job: JobHandle,
    /// Whether every source is bounded (the query ends by itself).
    pub bounded: bool,
    /// The query's LIMIT: once this many rows arrived it is complete, even over an unbounded
    /// source, and the reader stops the job.
    pub limit: Option<usize>,
}

impl QueryRun {
    /// Waits for the whole result of a bounded query.
    pub fn collect(self) -> Result<(Vec<RecordBatch>, MetricsSnapshot)> {
        let mut batches = Vec::new();
        let mut rows = 0;
        for ev in self.events.iter() {
            if let SinkEvent::Batch(b) = ev {
                rows += b.num_rows();
                batches.push(b);
                if self.limit.is_some_and(|l| rows >= l) {
                    break;
                }
            }
        }
        drop(self.events);
        let metrics = self
            .job
            .finish_early_or_wait(self.limit.is_some_and(|l| rows >= l))?;
        Ok((batches, metrics))
    }
}

/// What a statement produced.
pub enum StatementResult {
    /// A command finished; the text says which (e.g. `CREATE TABLE`).
    Command(String),
    /// Rows computed at once (SHOW, DESCRIBE, EXPLAIN, queries without tables).
    Rows(SchemaRef, Vec<RecordBatch>),
    /// A streaming query.
    Query(QueryRun),
    /// BEGIN, COMMIT, ROLLBACK: accepted, nothing done (weir has no transactions).
    Transaction(Transaction),
}

/// One user's session: its settings and DataFusion state, over the catalog and jobs it
/// shares with the sessions forked from it ([`Session::fork`]: one per wire connection).
pub struct Session {
    config: SessionConfig,
    state: SessionState,
    shared: Arc<shared::Shared>,
    /// The catalog the running statement reads: one snapshot for all of it.
    pinned: Option<Arc<Catalog>>,
    /// The data directory of the job a scratch session plans again (views live there).
    view_data_dir: Option<PathBuf>,
    /// Values of `$1`, `$2`, ... while a statement with bound parameters runs.
    params: Option<Vec<ScalarValue>>,
}

pub(crate) fn text_rows(columns: &[&str], rows: Vec<Vec<String>>) -> StatementResult {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(*c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = (0..columns.len())
        .map(|i| {
            Arc::new(StringArray::from(
                rows.iter().map(|r| r[i].clone()).collect::<Vec<_>>(),
            )) as ArrayRef
        })
        .collect();
    match RecordBatch::try_new(Arc::clone(&schema), arrays) {
        Ok(b) => StatementResult::Rows(schema, vec![b]),
        Err(e) => StatementResult::Command(format!("internal error: {e}")),
    }
}

impl Session {
    /// Opens a session; with a data directory, tables created earlier are there again and
    /// every unfinished sink job resumes from its newest checkpoint. Returns warnings about
    /// tables and jobs that could not be restored.
    pub fn open(config: SessionConfig) -> Result<(Self, Vec<String>)> {
        let mut session = Self::open_catalog_only(config)?;
        let mut warnings = std::mem::take(&mut session.1);
        warnings.extend(session.0.resume_jobs()?);
        Ok((session.0, warnings))
    }

    /// A session with the stored tables but without resuming jobs.
    fn open_catalog_only(config: SessionConfig) -> Result<(Self, Vec<String>)> {
        let (catalog, ddl) = Catalog::open(config.data_dir.as_deref())?;
        let jobs = config.data_dir.clone().map(crate::jobs::JobManager::new);
        let mut session = Self {
            config,
            state: new_session_state(),
            shared: Arc::new(shared::Shared::new(catalog, jobs)),
            pinned: None,
            view_data_dir: None,
            params: None,
        };
        let mut warnings = Vec::new();
        for text in ddl {
            let stmt = StatementText { text, line: 1 };
            if let Err(e) = session.execute(&stmt) {
                warnings.push(format!(
                    "could not restore `{}`: {e}",
                    weir_connectors::redact::redact(&stmt.text)
                ));
            }
        }
        Ok((session, warnings))
    }

    /// A new session over the same catalog and jobs, with settings of its own (a wire
    /// connection). The statements of two sessions run at the same time.
    pub fn fork(&self, config: SessionConfig) -> Self {
        Self {
            config,
            state: new_session_state(),
            shared: Arc::clone(&self.shared),
            pinned: None,
            view_data_dir: self.view_data_dir.clone(),
            params: None,
        }
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    pub fn config_mut(&mut self) -> &mut SessionConfig {
        &mut self.config
    }

    /// The catalog as it is now (a snapshot: later changes do not show in it); while a
    /// statement runs, the one it started with, and its own changes.
    pub fn catalog(&self) -> Arc<Catalog> {
        match &self.pinned {
            Some(c) => Arc::clone(c),
            None => self.shared.catalog(),
        }
    }

    /// Changes the shared catalog (all of `change` or nothing) and reads it from now on.
    fn change_catalog<R>(&mut self, change: impl FnOnce(&mut Catalog) -> Result<R>) -> Result<R> {
        let result = self.shared.change_catalog(change)?;
        if self.pinned.is_some() {
            self.pinned = Some(self.shared.catalog());
        }
        Ok(result)
    }

    /// Runs one statement.
    pub fn execute(&mut self, stmt: &StatementText) -> Result<StatementResult> {
        let statement = parse_statement(&stmt.text, stmt.line)?;
        self.execute_statement(statement, &stmt.text)
    }

    /// Runs one parsed statement; `text` is what it was parsed from (recorded for tables and
    /// jobs).
    pub fn execute_statement(
        &mut self,
        statement: WeirStatement,
        text: &str,
    ) -> Result<StatementResult> {
        let outer = self.pinned.replace(self.shared.catalog());
        let result = self.dispatch(statement, text);
        self.pinned = outer;
        result.map_err(|e| self.with_suggestion(e))
    }

    /// A handle that reads the jobs of this process from any thread (`/metrics`, the
    /// dashboard), as long as the process runs.
    pub fn job_observer(&self) -> JobObserver {
        JobObserver {
            shared: Arc::clone(&self.shared),
        }
    }

    /// An unknown relation's error names the closest known one.
    fn with_suggestion(&self, e: PlanError) -> PlanError {
        match e {
            PlanError::UnknownTable {
                name,
                suggestion: None,
            } => {
                let catalog = self.catalog();
                let names: Vec<String> = catalog
                    .tables()
                    .map(|t| t.name.clone())
                    .chain(catalog.views().map(|v| v.name.clone()))
                    .collect();
                let suggestion =
                    weir_connectors::suggest::closest(&name, names.iter().map(String::as_str))
                        .map(str::to_string);
                PlanError::UnknownTable { name, suggestion }
            }
            e => e,
        }
    }

    fn dispatch(&mut self, statement: WeirStatement, text: &str) -> Result<StatementResult> {
        match statement {
            WeirStatement::Sql(statement) => self.execute_sql(*statement, text),
            WeirStatement::CreateTable(table) => self.create_table(*table, text),
            WeirStatement::CreateJob(job) => self.create_job(*job, text),
            WeirStatement::DropJob {
                kind,
                name,
                if_exists,
            } => self.drop_job(kind, &name, if_exists),
            WeirStatement::CancelJob(name) => self.cancel_job(&name),
            WeirStatement::ShowJobs => Ok(self.show_jobs()),
            WeirStatement::ShowTables => Ok(self.show_tables()),
            WeirStatement::Show(target) => self.show(target),
            WeirStatement::Set { name, value } => self.set_statement(&name, &value),
            WeirStatement::Reset(name) => self.reset(name.as_deref()),
            WeirStatement::Transaction(t) => Ok(StatementResult::Transaction(t)),
            WeirStatement::SessionCommand(tag) => Ok(StatementResult::Command(tag.into())),
        }
    }

    /// Standard SQL: queries, EXPLAIN, DESCRIBE, CREATE VIEW, DROP TABLE, DROP VIEW.
    fn execute_sql(&mut self, statement: Statement, text: &str) -> Result<StatementResult> {
        match statement {
            Statement::CreateView(view) if !view.materialized => self.create_view(view, text),
            Statement::Drop {
                object_type: ObjectType::View,
                if_exists,
                names,
                ..
            } => {
                for name in &names {
                    let name = object_name(name)?;
                    if !self.change_catalog(|c| c.remove_view(&name))? && !if_exists {
                        return Err(invalid!("no view named {name}"));
                    }
                }
                Ok(StatementResult::Command("DROP VIEW".into()))
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => {
                for name in &names {
                    let name = object_name(name)?;
                    let removed = self.change_catalog(|catalog| {
                        if let Some(of) = catalog.get(&name).and_then(|t| t.late_rows_of.clone()) {
                            return Err(invalid!(
                                "{name} keeps the late rows of table {of}: it goes with DROP TABLE {of}, or CREATE OR REPLACE TABLE {of} without late_rows"
                            ));
                        }
                        let late = catalog.get(&name).and_then(|t| t.late_rows.clone());
                        if let Some(late) = late {
                            // The rows stay on disk until a table keeps late rows there again.
                            catalog.remove(&late.name)?;
                        }
                        catalog.remove(&name)
                    })?;
                    if !removed && !if_exists {
                        return Err(PlanError::unknown_table(name));
                    }
                }
                Ok(StatementResult::Command("DROP TABLE".into()))
            }
            Statement::ExplainTable { table_name, .. } => self.describe(&object_name(&table_name)?),
            Statement::Explain {
                statement, analyze, ..
            } => match *statement {
                Statement::Query(_) => self.explain(*statement, analyze),
                other => Err(not_supported!("EXPLAIN of {}", statement_kind(&other))),
            },
            Statement::Query(_) => self.query(statement),
            other => Err(not_supported!("{} statements", statement_kind(&other))),
        }
    }

    /// The columns a statement will return, without running it (the wire protocol's Describe):
    /// `Some(schema)` for queries and for statements that list things (SHOW, DESCRIBE,
    /// EXPLAIN), `None` for commands.
    pub fn describe_statement(&mut self, stmt: &StatementText) -> Result<Option<SchemaRef>> {
        let statement = parse_statement(&stmt.text, stmt.line)?;
        match statement {
            WeirStatement::Sql(s) => match *s {
                Statement::Explain { .. } => Ok(Some(Arc::new(Schema::new(vec![Field::new(
                    "plan",
                    DataType::Utf8,
                    true,
                )])))),
                Statement::Query(_) => {
                    let names = output_names(&s);
                    let plan = self.logical_plan(*s)?;
                    let schema = result_schema(&plan, names);
                    if !reads_tables(&plan) {
                        return Ok(Some(schema));
                    }
                    // Whether the result is updating (an `op` column first) takes the stream
                    // planner. A statement whose placeholders are not bound yet may not plan:
                    // it is described as append-only here, and its portal again once bound.
                    let catalog = self.catalog();
                    let updating = self
                        .stream_planner(&catalog)
                        .plan_query(&plan)
                        .map(|p| p.updating().is_some());
                    Ok(Some(match updating {
                        Ok(true) => weir_engine::changelog::text_schema(&schema),
                        Ok(false) => schema,
                        Err(_) if plan.get_parameter_types().is_ok_and(|t| !t.is_empty()) => schema,
                        Err(e) => return Err(e),
                    }))
                }
                // DESCRIBE lists columns and has no side effects: run it for its columns.
                describe @ Statement::ExplainTable { .. } => {
                    match self.execute_sql(describe, "")? {
                        StatementResult::Rows(schema, _) => Ok(Some(schema)),
                        _ => Ok(None),
                    }
                }
                _ => Ok(None),
            },
            // Listing statements have no side effects: run them for their columns.
            listing @ (WeirStatement::ShowJobs
            | WeirStatement::ShowTables
            | WeirStatement::Show(_)) => match self.execute_statement(listing, &stmt.text)? {
                StatementResult::Rows(schema, _) => Ok(Some(schema)),
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    pub(super) fn parser_options(&self) -> ParserOptions {
        ParserOptions::new().with_map_string_types_to_utf8view(false)
    }

    /// SQL statement -> optimized logical plan.
    fn logical_plan(&self, statement: Statement) -> Result<LogicalPlan> {
        let catalog = self.catalog();
        let ctx = PlanningContext::new(&self.state, &catalog);
        let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
        let plan = self.bind_params(planner.sql_statement_to_plan(statement)?)?;
        Ok(self.state.optimize(&plan)?)
    }

    /// How ad-hoc queries run.
    fn job_config(&self) -> JobConfig {
        JobConfig {
            memory_budget: self.config.memory_budget,
            idle_timeout: self.config.idle_timeout,
            ..JobConfig::default()
        }
    }

    /// The stream planner of ad-hoc queries.
    fn stream_planner<'a>(&'a self, catalog: &'a Catalog) -> StreamPlanner<'a> {
        StreamPlanner::new(
            catalog,
            self.state.execution_props(),
            self.config.parallelism,
        )
        .with_modes(self.config.modes)
    }

    fn next_job_name(&mut self) -> String {
        format!("query-{}", self.shared.next_query_number())
    }

    fn query(&mut self, statement: Statement) -> Result<StatementResult> {
        let names = output_names(&statement);
        let plan = self.logical_plan(statement)?;
        let schema = result_schema(&plan, names);
        if !reads_tables(&plan) {
            return self.run_constant(plan, schema);
        }
        let name = self.next_job_name();
        let (tx, rx) = crossbeam_channel::bounded(64);
        let catalog = self.catalog();
        let planned = self.stream_planner(&catalog).plan_query(&plan)?;
        let schema = match planned.updating() {
            Some(_) => weir_engine::changelog::text_schema(&schema),
            None => schema,
        };
        let graph = planned.into_job(&name, Arc::new(ChannelSink::new(tx)));
        let bounded = graph.is_bounded();
        let limit = result_limit(&plan)?;
        let job = spawn_job(graph, self.job_config())?;
        Ok(StatementResult::Query(QueryRun {
            schema,
            events: rx,
            job,
            bounded,
            limit,
        }))
    }

    /// A query that reads no table (`SELECT 1`, `SELECT now()`) runs on DataFusion directly,
    /// streamed and cancelled like any query.
    fn run_constant(&mut self, plan: LogicalPlan, schema: SchemaRef) -> Result<StatementResult> {
        let limit = result_limit(&plan)?;
        let (tx, rx) = crossbeam_channel::bounded(16);
        let name = self.next_job_name();
        let job =
            constant::spawn_constant(&name, &self.state, plan, self.config.memory_budget, tx)?;
        Ok(StatementResult::Query(QueryRun {
            schema,
            events: rx,
            job,
            bounded: true,
            limit,
        }))
    }

    fn explain(&mut self, statement: Statement, analyze: bool) -> Result<StatementResult> {
        let plan = self.logical_plan(statement)?;
        if !reads_tables(&plan) {
            return Ok(text_rows(
                &["plan"],
                vec![vec![format!(
                    "constant query, run by DataFusion:\n{}",
                    plan.display_indent()
                )]],
            ));
        }
        let (tx, rx) = crossbeam_channel::bounded(64);
        let name = self.next_job_name();
        let catalog = self.catalog();
        let graph =
            self.stream_planner(&catalog)
                .plan_job(&name, &plan, Arc::new(ChannelSink::new(tx)))?;
        let mut lines = graph.explain();
        if !analyze {
            return Ok(text_rows(
                &["plan"],
                lines.into_iter().map(|l| vec![l]).collect(),
            ));
        }
        if !graph.is_bounded() {
            return Err(invalid!(
                "EXPLAIN ANALYZE runs the query to its end, so it needs bounded sources"
            ));
        }
        let started = Instant::now();
        let job = spawn_job(graph, self.job_config())?;
        let run = QueryRun {
            schema: Arc::new(Schema::empty()),
            events: rx,
            job,
            bounded: true,
            limit: None,
        };
        let (_, m) = run.collect()?;
        let secs = started.elapsed().as_secs_f64();
        lines.push(String::new());
        lines.push(format!(
            "rows in: {}, rows out: {}, late rows dropped: {}, malformed rows skipped: {}",
            m.rows_in, m.rows_out, m.late_rows, m.skipped_rows
        ));
        lines.push(format!(
            "elapsed: {:.3} s ({:.0} rows/s)",
            secs,
            m.rows_in as f64 / secs.max(1e-9)
        ));
        Ok(text_rows(
            &["plan"],
            lines.into_iter().map(|l| vec![l]).collect(),
        ))
    }
}

/// The names PostgreSQL gives the result columns a query does not name: a function call's
/// function name (`count`, not `count(*)`), `?column?` for another expression that is not
/// a column (DataFusion would call `SELECT 1` `Int64(1)`). `None` per column keeps DataFusion's name; `None` overall when
/// the columns cannot be matched to select items (a wildcard, a set operation).
fn output_names(statement: &Statement) -> Option<Vec<Option<String>>> {
    use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr};
    let Statement::Query(q) = statement else {
        return None;
    };
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    /// `None`: a column, which keeps its name.
    fn name(e: &Expr) -> Option<String> {
        match e {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
            Expr::Function(f) => Some(
                f.name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map_or_else(|| f.name.to_string(), |i| i.value.to_ascii_lowercase()),
            ),
            Expr::Nested(inner) => name(inner),
            _ => Some("?column?".to_string()),
        }
    }
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some(name(e)),
            SelectItem::ExprWithAlias { .. } => Some(None),
            _ => None,
        })
        .collect()
}

/// The schema a query's reader sees: the plan's, with the names of [`output_names`].
fn result_schema(plan: &LogicalPlan, names: Option<Vec<Option<String>>>) -> SchemaRef {
    let schema = plan.schema().as_arrow().clone();
    match names {
        Some(names) if names.len() == schema.fields().len() => {
            let fields: Vec<Field> = schema
                .fields()
                .iter()
                .zip(names)
                .map(|(f, n)| match n {
                    Some(n) => f.as_ref().clone().with_name(n),
                    None => f.as_ref().clone(),
                })
                .collect();
            Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
        }
        _ => Arc::new(schema),
    }
}

fn statement_kind(s: &Statement) -> String {
    let text = s.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    words.join(" ").to_ascii_uppercase()
}

/// The LIMIT of a query's result: of its top node, or under the projections and aliases above
/// it (`SELECT a, count(*) AS n ... LIMIT 3` plans as a projection over the limit). A query
/// with one ends when that many rows came, even over an unbounded source.
fn result_limit(plan: &LogicalPlan) -> Result<Option<usize>> {
    match plan {
        LogicalPlan::Limit(l) => Ok(match l.get_fetch_type()? {
            datafusion::logical_expr::FetchType::Literal(n) => n,
            _ => None,
        }),
        LogicalPlan::Projection(p) => result_limit(&p.input),
        LogicalPlan::SubqueryAlias(a) => result_limit(&a.input),
        _ => Ok(None),
    }
}
