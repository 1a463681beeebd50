//! A session: settings, the catalog, and statement execution. Front ends (REPL, script runner,
//! wire server, tests) hand it statement texts and render what comes back.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::planner::{ParserOptions, SqlToRel};
use datafusion::sql::sqlparser::ast::{
    CreateTable, CreateTableOptions, Expr as SqlExpr, ObjectName, ObjectType, SqlOption, Statement,
    Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use weir_connectors::sinks::{ChannelSink, SinkEvent};
use weir_connectors::{create_source, Options};
use weir_engine::{spawn_job, JobConfig, JobHandle, MetricsSnapshot};

use crate::catalog::{Catalog, TableDef, TableWatermark};
use crate::context::{new_session_state, PlanningContext};
use crate::error::{PlanError, Result};
use crate::sql::{parse_statement, ParsedStatement, StatementText, WatermarkClause};
use crate::stream_plan::{reads_tables, StreamPlanner};
use crate::window_tvf::{normalize, rewrite_window_functions};
use crate::{invalid, not_supported};

/// Session settings (`SET name = value`).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Instances of each parallel stage (the aggregation behind the keyed exchange).
    pub parallelism: usize,
    /// Where the catalog is kept; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
            data_dir: None,
        }
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
}

/// One user's session.
pub struct Session {
    config: SessionConfig,
    state: SessionState,
    catalog: Catalog,
    jobs_started: u64,
    runtime: Option<tokio::runtime::Runtime>,
}

fn text_rows(columns: &[&str], rows: Vec<Vec<String>>) -> StatementResult {
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

fn option_value(value: &SqlExpr) -> String {
    match value {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => b.to_string(),
            other => other.to_string(),
        },
        SqlExpr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

fn object_name(name: &ObjectName) -> Result<String> {
    let parts = &name.0;
    match parts.as_slice() {
        [one] => one
            .as_ident()
            .map(normalize)
            .ok_or_else(|| invalid!("invalid table name {name}")),
        _ => Err(not_supported!("qualified table names ({name})")),
    }
}

impl Session {
    /// Opens a session; with a data directory, tables created earlier are there again. Returns
    /// warnings about stored tables that could not be restored.
    pub fn open(config: SessionConfig) -> Result<(Self, Vec<String>)> {
        let (catalog, ddl) = Catalog::open(config.data_dir.as_deref())?;
        let mut session = Self {
            config,
            state: new_session_state(),
            catalog,
            jobs_started: 0,
            runtime: None,
        };
        let mut warnings = Vec::new();
        for text in ddl {
            let stmt = StatementText { text, line: 1 };
            if let Err(e) = session.execute(&stmt) {
                warnings.push(format!("could not restore `{}`: {e}", stmt.text));
            }
        }
        Ok((session, warnings))
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Runs one statement.
    pub fn execute(&mut self, stmt: &StatementText) -> Result<StatementResult> {
        if let Some(result) = self.execute_setting(&stmt.text)? {
            return Ok(result);
        }
        let parsed = parse_statement(&stmt.text, stmt.line)?;
        let ParsedStatement {
            statement,
            watermark,
        } = parsed;
        if watermark.is_some() && !matches!(statement, Statement::CreateTable(_)) {
            return Err(invalid!("WATERMARK FOR belongs in CREATE TABLE"));
        }
        match statement {
            Statement::CreateTable(ct) => self.create_table(ct, watermark, &stmt.text),
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => {
                for name in &names {
                    let name = object_name(name)?;
                    if !self.catalog.remove(&name)? && !if_exists {
                        return Err(PlanError::UnknownTable(name));
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

    /// SET, SHOW and RESET, handled before parsing.
    fn execute_setting(&mut self, text: &str) -> Result<Option<StatementResult>> {
        let dialect = GenericDialect {};
        let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize() else {
            return Ok(None);
        };
        let words: Vec<String> = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
            .map(|t| match t {
                Token::Word(w) => w.value.clone(),
                Token::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
        match upper
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["SHOW", "TABLES"] => Ok(Some(self.show_tables())),
            ["SHOW", "ALL"] => Ok(Some(self.show_settings(None)?)),
            ["SHOW", _] if upper[1] != "CREATE" => Ok(Some(
                self.show_settings(Some(&words[1].to_ascii_lowercase()))?,
            )),
            ["SET", _, "=" | "TO", ..] => {
                let value = words[3..].join(" ");
                self.set(&words[1].to_ascii_lowercase(), &value)?;
                Ok(Some(StatementResult::Command("SET".into())))
            }
            ["SET", ..] => Err(invalid!("expected SET name = value")),
            _ => Ok(None),
        }
    }

    fn settings(&self) -> Vec<(&'static str, String, &'static str)> {
        vec![(
            "parallelism",
            self.config.parallelism.to_string(),
            "instances of each parallel stage",
        )]
    }

    fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "parallelism" => {
                let n: usize = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid!("parallelism must be a positive whole number, got '{value}'")
                    })?;
                self.config.parallelism = n;
                Ok(())
            }
            other => Err(invalid!(
                "unknown setting '{other}' (settings: {})",
                self.settings()
                    .iter()
                    .map(|s| s.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    fn show_settings(&self, name: Option<&str>) -> Result<StatementResult> {
        let all = self.settings();
        let rows: Vec<Vec<String>> = all
            .iter()
            .filter(|s| name.is_none_or(|n| n == s.0))
            .map(|s| vec![s.0.to_string(), s.1.clone(), s.2.to_string()])
            .collect();
        if rows.is_empty() {
            return Err(invalid!(
                "unknown setting '{}' (settings: {})",
                name.unwrap_or_default(),
                all.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(text_rows(&["name", "setting", "description"], rows))
    }

    fn show_tables(&self) -> StatementResult {
        let rows = self
            .catalog
            .tables()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.options.get("connector").unwrap_or_default().to_string(),
                    t.watermark
                        .as_ref()
                        .map(|w| format!("{} AS {}", w.column, w.text))
                        .unwrap_or_default(),
                ]
            })
            .collect();
        text_rows(&["name", "connector", "watermark"], rows)
    }

    fn describe(&self, name: &str) -> Result<StatementResult> {
        let def = self
            .catalog
            .get(name)
            .ok_or_else(|| PlanError::UnknownTable(name.to_string()))?;
        let rows = def
            .schema
            .fields()
            .iter()
            .map(|f| {
                let wm = match &def.watermark {
                    Some(w) if &w.column == f.name() => format!("{} AS {}", w.column, w.text),
                    _ => String::new(),
                };
                vec![
                    f.name().clone(),
                    f.data_type().to_string(),
                    if f.is_nullable() { "YES" } else { "NO" }.to_string(),
                    wm,
                ]
            })
            .collect();
        Ok(text_rows(
            &["column_name", "data_type", "is_nullable", "watermark"],
            rows,
        ))
    }

    fn parser_options(&self) -> ParserOptions {
        ParserOptions::new().with_map_string_types_to_utf8view(false)
    }

    fn create_table(
        &mut self,
        ct: CreateTable,
        watermark: Option<WatermarkClause>,
        text: &str,
    ) -> Result<StatementResult> {
        let name = object_name(&ct.name)?;
        if self.catalog.get(&name).is_some() {
            if ct.if_not_exists {
                return Ok(StatementResult::Command("CREATE TABLE".into()));
            }
            if !ct.or_replace {
                return Err(PlanError::TableExists(name));
            }
        }
        if ct.query.is_some() {
            return Err(not_supported!("CREATE TABLE ... AS SELECT"));
        }
        let declared = if ct.columns.is_empty() {
            None
        } else {
            let ctx = PlanningContext::new(&self.state, &self.catalog);
            let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
            Some(Arc::new(planner.build_schema(ct.columns.clone())?))
        };
        let options = match &ct.table_options {
            CreateTableOptions::With(o)
            | CreateTableOptions::Options(o)
            | CreateTableOptions::Plain(o) => o.clone(),
            CreateTableOptions::None => Vec::new(),
            CreateTableOptions::TableProperties(_) => {
                return Err(not_supported!("TBLPROPERTIES; use WITH (...)"))
            }
        };
        let mut pairs = Vec::new();
        for o in &options {
            match o {
                SqlOption::KeyValue { key, value } => {
                    pairs.push((key.value.clone(), option_value(value)))
                }
                other => {
                    return Err(invalid!(
                        "table {name}: expected option = 'value', got {other}"
                    ))
                }
            }
        }
        let options = Options::new(pairs);
        if options.get("connector").is_none() {
            return Err(invalid!(
                "table {name}: WITH (connector = ...) is required (connectors: {})",
                weir_connectors::SOURCE_CONNECTORS.join(", ")
            ));
        }
        let source = create_source(&name, declared, &options)?;
        let schema = source.schema();
        let watermark = match watermark {
            None => None,
            Some(w) => {
                let column = normalize(&w.column);
                let field = schema
                    .field_with_name(&column)
                    .map_err(|_| invalid!("table {name}: WATERMARK FOR names column '{column}', which the table does not have"))?;
                if !matches!(field.data_type(), DataType::Timestamp(..)) {
                    return Err(invalid!(
                        "table {name}: WATERMARK FOR {column}: the column must be a TIMESTAMP, it is {}",
                        field.data_type()
                    ));
                }
                let df_schema = DFSchema::try_from_qualified_schema(name.as_str(), &schema)?;
                let expr = self
                    .state
                    .create_logical_expr(&w.expr.to_string(), &df_schema)?;
                let ty = datafusion::logical_expr::ExprSchemable::to_field(&expr, &df_schema)?
                    .1
                    .data_type()
                    .clone();
                if !matches!(ty, DataType::Timestamp(..)) {
                    return Err(invalid!(
                        "table {name}: the watermark expression {} must be a TIMESTAMP, it is {ty}",
                        w.expr
                    ));
                }
                Some(TableWatermark {
                    column,
                    text: w.expr.to_string(),
                    expr,
                })
            }
        };
        self.catalog.insert(TableDef {
            name,
            schema,
            watermark,
            options,
            source,
            ddl: text.trim().to_string(),
        })?;
        Ok(StatementResult::Command("CREATE TABLE".into()))
    }

    /// SQL statement -> optimized logical plan.
    /// SQL statement -> optimized logical plan, and the synthetic window tables it reads
    /// (name, table the window function was applied to).
    fn logical_plan(
        &self,
        mut statement: Statement,
    ) -> Result<(LogicalPlan, Vec<(String, String)>)> {
        let windows = rewrite_window_functions(&self.state, &self.catalog, &mut statement)?;
        let names = windows
            .iter()
            .map(|(name, source)| match &source.kind {
                crate::context::ScanKind::Window(w) => (name.clone(), w.table.clone()),
                crate::context::ScanKind::Table(t) => (name.clone(), t.clone()),
            })
            .collect();
        let mut ctx = PlanningContext::new(&self.state, &self.catalog);
        ctx.windows.extend(windows);
        let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
        let plan = planner.sql_statement_to_plan(statement)?;
        Ok((self.state.optimize(&plan)?, names))
    }

    fn next_job_name(&mut self) -> String {
        self.jobs_started += 1;
        format!("query-{}", self.jobs_started)
    }

    fn query(&mut self, statement: Statement) -> Result<StatementResult> {
        let (plan, _) = self.logical_plan(statement)?;
        if !reads_tables(&plan) {
            return self.run_constant(plan);
        }
        let name = self.next_job_name();
        let (tx, rx) = crossbeam_channel::bounded(64);
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let graph = StreamPlanner::new(
            &self.catalog,
            self.state.execution_props(),
            self.config.parallelism,
        )
        .plan_job(&name, &plan, Arc::new(ChannelSink::new(tx)))?;
        let bounded = graph.is_bounded();
        let limit = match &plan {
            LogicalPlan::Limit(l) => match l.get_fetch_type()? {
                datafusion::logical_expr::FetchType::Literal(n) => n,
                _ => None,
            },
            _ => None,
        };
        let job = spawn_job(graph, JobConfig::default())?;
        Ok(StatementResult::Query(QueryRun {
            schema,
            events: rx,
            job,
            bounded,
            limit,
        }))
    }

    /// A query that reads no table (`SELECT 1`, `SELECT now()`) runs on DataFusion directly.
    fn run_constant(&mut self, plan: LogicalPlan) -> Result<StatementResult> {
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| PlanError::io("cannot start the query runtime", e))?;
            self.runtime = Some(rt);
        }
        let ctx = SessionContext::new_with_state(self.state.clone());
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let rt = self
            .runtime
            .as_ref()
            .ok_or_else(|| PlanError::Internal("no runtime".into()))?;
        let batches =
            rt.block_on(async move { ctx.execute_logical_plan(plan).await?.collect().await })?;
        Ok(StatementResult::Rows(schema, batches))
    }

    fn explain(&mut self, statement: Statement, analyze: bool) -> Result<StatementResult> {
        let (plan, windows) = self.logical_plan(statement)?;
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
        let graph = StreamPlanner::new(
            &self.catalog,
            self.state.execution_props(),
            self.config.parallelism,
        )
        .plan_job(&name, &plan, Arc::new(ChannelSink::new(tx)))?;
        // Show the window tables under the name of the table they window.
        let mut lines: Vec<String> = graph
            .explain()
            .into_iter()
            .map(|l| {
                windows.iter().rev().fold(l, |l, (synthetic, table)| {
                    l.replace(synthetic.as_str(), table)
                })
            })
            .collect();
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
        let job = spawn_job(graph, JobConfig::default())?;
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

fn statement_kind(s: &Statement) -> String {
    let text = s.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    words.join(" ").to_ascii_uppercase()
}
