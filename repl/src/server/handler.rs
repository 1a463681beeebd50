//! Statements over the wire: per-connection state, the simple and extended query protocols,
//! cancellation, and the translation of weir's results and errors into PostgreSQL's.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use futures::{stream, Sink, StreamExt};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::data::DataRow;
use pgwire::messages::PgWireBackendMessage;
use weir_connectors::sinks::SinkEvent;
use weir_planner::sql::{split_statements, StatementText, Transaction};
use weir_planner::{PlanError, QueryRun, Session, SessionConfig, StatementResult};

use super::auth::Startup;
use super::{params, pg_catalog, rows};

/// An error as the client sees it: SQLSTATE and message.
#[derive(Debug, Clone)]
pub struct WireError {
    pub code: &'static str,
    pub message: String,
}

impl WireError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn cancelled() -> Self {
        Self::new("57014", "canceling statement due to user request")
    }

    fn info(&self) -> ErrorInfo {
        ErrorInfo::new("ERROR".into(), self.code.into(), self.message.clone())
    }
}

impl From<PlanError> for WireError {
    fn from(e: PlanError) -> Self {
        Self::new(e.sqlstate(), e.to_string())
    }
}

impl From<WireError> for PgWireError {
    fn from(e: WireError) -> Self {
        PgWireError::UserError(Box::new(e.info()))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What every connection shares: the session the server opened (each connection forks a
/// session of its own from it: its settings, over the shared catalog and jobs), and the
/// connections a CancelRequest may name.
pub struct Shared {
    root: Mutex<Session>,
    /// Settings a new connection starts with.
    base: SessionConfig,
    connections: Mutex<HashMap<i32, Registered>>,
}

impl Shared {
    pub fn new(session: Session, base: SessionConfig) -> Self {
        Self {
            root: Mutex::new(session),
            base,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// Stops every running job with a final checkpoint (server shutdown).
    pub fn stop_jobs(&self) -> Result<(), PlanError> {
        lock(&self.root).stop_jobs()
    }

    fn fork(&self) -> Session {
        lock(&self.root).fork(self.base.clone())
    }
}

/// A connection a CancelRequest may name: its secret key and query slot.
struct Registered {
    secret: Vec<u8>,
    slot: Arc<QuerySlot>,
}

/// The cancel flag of a connection's current query.
#[derive(Default)]
pub struct QuerySlot {
    current: Mutex<Option<Arc<AtomicBool>>>,
}

impl QuerySlot {
    fn start(&self) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        *lock(&self.current) = Some(Arc::clone(&flag));
        flag
    }

    fn cancel(&self) {
        if let Some(flag) = lock(&self.current).as_ref() {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// One connection: its session and its query slot; unregistered when the connection ends.
pub struct ConnState {
    shared: Arc<Shared>,
    pid: i32,
    session: Mutex<Session>,
    slot: Arc<QuerySlot>,
}

impl ConnState {
    /// Runs `f` on this connection's session (statements of one connection run one at a
    /// time; other connections' run meanwhile).
    fn with_session<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        f(&mut lock(&self.session))
    }
}

impl Drop for ConnState {
    fn drop(&mut self) {
        lock(&self.shared.connections).remove(&self.pid);
    }
}

/// A statement parsed by the extended protocol: its text, parameter types and result columns.
#[derive(Clone, Debug)]
pub struct WireStatement {
    sql: String,
    params: Vec<Type>,
    schema: Option<SchemaRef>,
}

/// The handlers pgwire calls; one instance serves every connection.
pub struct WireHandlers {
    shared: Arc<Shared>,
    startup: Arc<Startup>,
    queries: Arc<WireQueries>,
}

impl WireHandlers {
    pub fn new(shared: Arc<Shared>, password: Option<String>) -> Self {
        Self {
            startup: Arc::new(Startup::new(password)),
            queries: Arc::new(WireQueries {
                shared: Arc::clone(&shared),
            }),
            shared,
        }
    }
}

impl PgWireServerHandlers for WireHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.queries)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.queries)
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        Arc::clone(&self.startup)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(WireCancel {
            shared: Arc::clone(&self.shared),
        })
    }
}

struct WireCancel {
    shared: Arc<Shared>,
}

#[async_trait]
impl CancelHandler for WireCancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let slot = lock(&self.shared.connections)
            .get(&request.pid)
            .filter(|r| r.secret == request.secret_key.to_bytes().to_vec())
            .map(|r| Arc::clone(&r.slot));
        if let Some(slot) = slot {
            slot.cancel();
        }
    }
}

/// A connection's state, made at its first statement and registered for CancelRequests.
fn conn_state<C: ClientInfo>(shared: &Arc<Shared>, client: &C) -> Arc<ConnState> {
    client.session_extensions().get_or_insert_with(|| {
        let (pid, secret) = client.pid_and_secret_key();
        let slot = Arc::new(QuerySlot::default());
        lock(&shared.connections).insert(
            pid,
            Registered {
                secret: secret.to_bytes().to_vec(),
                slot: Arc::clone(&slot),
            },
        );
        ConnState {
            shared: Arc::clone(shared),
            pid,
            session: Mutex::new(shared.fork()),
            slot,
        }
    })
}

/// What one statement produced.
enum Outcome {
    Command(String),
    Rows(SchemaRef, Vec<RecordBatch>),
    Stream(QueryRun),
    Transaction(Transaction),
}

pub struct WireQueries {
    shared: Arc<Shared>,
}

impl WireQueries {
    fn conn<C: ClientInfo>(&self, client: &C) -> Arc<ConnState> {
        conn_state(&self.shared, client)
    }

    /// Runs one statement off the async threads (planning and job start block).
    async fn run(
        &self,
        conn: Arc<ConnState>,
        stmt: StatementText,
        params: Vec<ScalarValue>,
    ) -> Result<Outcome, WireError> {
        blocking(move || execute(&conn, &stmt, params)).await
    }

    /// The response for an outcome, rows encoded in `format`.
    fn respond(
        &self,
        outcome: Outcome,
        format: &Format,
        cancel: Arc<AtomicBool>,
    ) -> PgWireResult<Response> {
        Ok(match outcome {
            Outcome::Command(tag) => Response::Execution(Tag::new(&command_tag(&tag))),
            Outcome::Transaction(t @ Transaction::Begin) => {
                Response::TransactionStart(Tag::new(t.tag()))
            }
            Outcome::Transaction(t) => Response::TransactionEnd(Tag::new(t.tag())),
            Outcome::Rows(schema, batches) => {
                let fields = Arc::new(rows::fields(&schema, format));
                let mut out = Vec::new();
                for b in &batches {
                    out.extend(rows::encode_batch(b, &fields)?.into_iter().map(Ok));
                }
                Response::Query(QueryResponse::new(fields, stream::iter(out)))
            }
            Outcome::Stream(run) => {
                let fields = Arc::new(rows::fields(&run.schema, format));
                Response::Query(QueryResponse::new(
                    Arc::clone(&fields),
                    stream_rows(run, fields, cancel),
                ))
            }
        })
    }
}

/// The PostgreSQL command tag for a weir command result (`INSERT (job j)` -> `INSERT 0 0`).
fn command_tag(text: &str) -> String {
    if text.starts_with("INSERT") {
        "INSERT 0 0".into()
    } else {
        text.to_string()
    }
}

/// Streams a running query's rows to the client as windows close, until the query ends, the
/// client cancels it, or the client goes away (the receiver is dropped): the job is stopped in
/// the last two cases.
fn stream_rows(
    run: QueryRun,
    fields: Arc<Vec<FieldInfo>>,
    cancel: Arc<AtomicBool>,
) -> impl futures::Stream<Item = PgWireResult<DataRow>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, WireError>>(4);
    tokio::task::spawn_blocking(move || {
        let QueryRun {
            events, job, limit, ..
        } = run;
        let mut rows = 0usize;
        let mut stopped = false;
        loop {
            if cancel.load(Ordering::Relaxed) {
                job.cancel();
                let _ = tx.blocking_send(Err(WireError::cancelled()));
                let _ = job.wait();
                return;
            }
            if tx.is_closed() {
                job.cancel();
                let _ = job.wait();
                return;
            }
            match events.recv_timeout(Duration::from_millis(50)) {
                Ok(SinkEvent::Batch(b)) => {
                    rows += b.num_rows();
                    if tx.blocking_send(Ok(b)).is_err() {
                        continue; // the client went away: stopped at the top
                    }
                    if limit.is_some_and(|l| rows >= l) {
                        stopped = true;
                        break;
                    }
                }
                Ok(SinkEvent::Watermark(_)) => {}
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        drop(events);
        if let Err(e) = job.finish_early_or_wait(stopped) {
            let _ = tx.blocking_send(Err(PlanError::from(e).into()));
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .flat_map(move |item| {
        let rows: Vec<PgWireResult<DataRow>> = match item {
            Ok(batch) => match rows::encode_batch(&batch, &fields) {
                Ok(rows) => rows.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            },
            Err(e) => vec![Err(e.into())],
        };
        stream::iter(rows)
    })
}

/// Runs one statement for a connection (blocking).
fn execute(
    conn: &ConnState,
    stmt: &StatementText,
    params: Vec<ScalarValue>,
) -> Result<Outcome, WireError> {
    if pg_catalog::is_catalog_query(&stmt.text) {
        let (schema, batches) =
            conn.with_session(|s| pg_catalog::answer(&stmt.text, &s.catalog(), &params))?;
        return Ok(Outcome::Rows(schema, batches));
    }
    let result = conn.with_session(|s| s.execute_with_params(stmt, params))?;
    Ok(match result {
        StatementResult::Command(tag) => Outcome::Command(tag),
        StatementResult::Rows(schema, batches) => Outcome::Rows(schema, batches),
        StatementResult::Query(run) => Outcome::Stream(run),
        StatementResult::Transaction(t) => Outcome::Transaction(t),
    })
}

/// A statement at Parse: the types of its parameters (declared by the client, else inferred)
/// and, when they can be known before the values are, its result columns.
fn prepare(
    conn: &ConnState,
    stmt: &StatementText,
    declared: &[Option<Type>],
) -> Result<(Vec<Type>, Option<SchemaRef>), WireError> {
    if pg_catalog::is_catalog_query(&stmt.text) {
        let (schema, inferred) =
            conn.with_session(|s| pg_catalog::prepare(&stmt.text, &s.catalog()))?;
        return Ok((params::announced(declared, &inferred), Some(schema)));
    }
    let inferred = conn.with_session(|s| s.parameter_types(stmt))?;
    let described = conn.with_session(|s| s.describe_statement(stmt));
    // A placeholder whose type nothing says (`SELECT $1`) may not plan: the portal is
    // described again once its values are bound.
    let schema = match described {
        Ok(schema) => schema,
        Err(_) if !inferred.is_empty() => None,
        Err(e) => return Err(e.into()),
    };
    Ok((params::announced(declared, &inferred), schema))
}

/// The result columns of a statement with bound values, without running it.
fn describe_bound(
    conn: &ConnState,
    stmt: &StatementText,
    params: Vec<ScalarValue>,
) -> Result<Option<SchemaRef>, WireError> {
    if pg_catalog::is_catalog_query(&stmt.text) {
        let (schema, _) = conn.with_session(|s| pg_catalog::prepare(&stmt.text, &s.catalog()))?;
        return Ok(Some(schema));
    }
    Ok(conn.with_session(|s| s.describe_with_params(stmt, params))?)
}

/// Runs blocking work (planning, starting jobs) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WireError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(WireError::new("XX000", format!("internal error: {e}"))))
}

fn statement_text(sql: &str) -> StatementText {
    let (mut stmts, tail) = split_statements(sql);
    stmts.extend(tail);
    match stmts.len() {
        1 => stmts.remove(0),
        _ => StatementText {
            text: sql.to_string(),
            line: 1,
        },
    }
}

#[async_trait]
impl SimpleQueryHandler for WireQueries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let conn = self.conn(client);
        let cancel = conn.slot.start();
        let (mut stmts, tail) = split_statements(query);
        stmts.extend(tail);
        let mut responses = Vec::with_capacity(stmts.len());
        for stmt in stmts {
            match self.run(Arc::clone(&conn), stmt, Vec::new()).await {
                Ok(outcome) => responses.push(self.respond(
                    outcome,
                    &Format::UnifiedText,
                    Arc::clone(&cancel),
                )?),
                Err(e) => {
                    // As in PostgreSQL, the statements after a failed one do not run.
                    responses.push(Response::Error(Box::new(e.info())));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

/// Parses statements of the extended protocol; planned at Parse so Describe knows the columns.
pub struct WireParser {
    shared: Arc<Shared>,
}

#[async_trait]
impl QueryParser for WireParser {
    type Statement = WireStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<WireStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let conn = conn_state(&self.shared, client);
        let stmt = statement_text(sql);
        let declared = types.to_vec();
        let (params, schema) = blocking(move || prepare(&conn, &stmt, &declared)).await?;
        Ok(Some(WireStatement {
            sql: sql.to_string(),
            params,
            schema,
        }))
    }

    fn get_parameter_types(&self, stmt: &WireStatement) -> PgWireResult<Vec<Type>> {
        Ok(stmt.params.clone())
    }

    fn get_result_schema(
        &self,
        stmt: &WireStatement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(stmt
            .schema
            .as_ref()
            .map(|s| rows::fields(s, format.unwrap_or(&Format::UnifiedText)))
            .unwrap_or_default())
    }
}

#[async_trait]
impl ExtendedQueryHandler for WireQueries {
    type Statement = WireStatement;
    type QueryParser = WireParser;

    fn query_parser(&self) -> Arc<WireParser> {
        Arc::new(WireParser {
            shared: Arc::clone(&self.shared),
        })
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<WireStatement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = WireStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &target.statement;
        let types = stmt.params.clone();
        let fields = self.query_parser().get_result_schema(stmt, None)?;
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<WireStatement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = WireStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &portal.statement.statement;
        let fields = if !stmt.params.is_empty() {
            // Describe with the bound values.
            let values = params::values(portal, &stmt.params)?;
            let text = statement_text(&stmt.sql);
            let conn = self.conn(client);
            let schema = blocking(move || describe_bound(&conn, &text, values)).await?;
            schema
                .map(|s| rows::fields(&s, &portal.result_column_format))
                .unwrap_or_default()
        } else {
            self.query_parser()
                .get_result_schema(stmt, Some(&portal.result_column_format))?
        };
        if fields.is_empty() {
            return Ok(DescribePortalResponse::no_data());
        }
        Ok(DescribePortalResponse::new(fields))
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<WireStatement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = WireStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let conn = self.conn(client);
        let cancel = conn.slot.start();
        let stmt = &portal.statement.statement;
        let values = params::values(portal, &stmt.params)?;
        let outcome = self.run(conn, statement_text(&stmt.sql), values).await?;
        if let Outcome::Stream(run) = &outcome {
            // pgwire collects an Execute's rows before sending them unless the client fetches
            // in chunks (max_rows > 0): an endless query would only grow in memory.
            if !run.bounded && run.limit.is_none() && max_rows == 0 {
                run.job.cancel();
                return Err(WireError::new(
                    "0A000",
                    "a query over an unbounded source without LIMIT streams its rows only over \
                     the simple query protocol (or with a fetch size); add LIMIT, or create a \
                     materialized view or a sink",
                )
                .into());
            }
        }
        self.respond(outcome, &portal.result_column_format, cancel)
    }
}
