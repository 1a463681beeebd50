//! The PostgreSQL sink (DESIGN.md §6): `CREATE SINK s WITH (connector = 'postgres',
//! url = 'postgresql://user@host:port/db', table = 'name' [, primary_key = 'a, b']
//! [, create_table = 'true']) AS SELECT ...`.
//!
//! Exactly-once: each sink instance keeps one connection. The rows of epoch n go into one
//! transaction (`BEGIN`, then `COPY ... FROM STDIN`: see [`encode`]); at barrier n it is prepared
//! (`PREPARE TRANSACTION 'weir:<job>:<instance>:<n>'`: durable, invisible) and the gid is the
//! pre-commit payload. After the checkpoint's manifest is written the committer runs
//! `COMMIT PREPARED`; a gid that no longer exists was committed before and counts as done.
//! On restart the committer commits the restored checkpoint's gids and rolls back every other
//! prepared transaction of the job (`pg_prepared_xacts`).
//!
//! At-least-once: rows are copied in autocommit transactions as they come.
//!
//! With `primary_key`, rows are upserted (`ON CONFLICT (key) DO UPDATE`), so a replay after a
//! crash overwrites instead of duplicating even at least once. COPY cannot upsert, and the
//! usual way round it (COPY into a temporary table, then `INSERT ... SELECT ... ON CONFLICT`)
//! is refused by `PREPARE TRANSACTION` (a transaction that touched a temporary table cannot be
//! prepared), so upserts are prepared multi-row `INSERT ... VALUES ($1, ...), ... ON CONFLICT`
//! statements whose parameters are the same encoded cells as COPY's (binary values; text
//! values cast by the server). The rows of one flush are first reduced to the last row of
//! each key, since one statement may not update a row twice.
//!
//! An updating query (DESIGN.md §8) needs `primary_key` (its group keys): the sink applies
//! its changes by key. Per flush each key's last change wins: an add (`+I`, `+U`) upserts the
//! row as above, a retraction (`-U`, `-D`) upserts the retracted row, then deletes the key (the
//! upsert waits for an uncommitted earlier epoch that inserted it, which a DELETE alone would
//! not see; prepared
//! `DELETE FROM t WHERE (k1, ...) IN (($1, ...), ...)` with the same parameters). Deletes and
//! upserts go into the epoch's transaction (exactly-once) or run in autocommit
//! (at-least-once: a replay applies the same changes by key again, which is idempotent).
//! Without `primary_key` an updating query is refused when the sink is created.

mod connect;
mod encode;
mod write;

pub use connect::Timeouts;

use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use postgres::error::SqlState;
use postgres::Client;
use weir_engine::changelog;
use weir_engine::checkpoint::Committer;
use weir_engine::{
    EngineError, Operator, OperatorFactory, Output, Result as EngineResult, TaskInfo,
};

use crate::error::{ConnectorError, Result};
use crate::options::Options;
use crate::pg_types::{column_type, compatible};
use write::Target;

pub(crate) const OPTIONS: &[&str] = &[
    "connector",
    "url",
    "table",
    "primary_key",
    "create_table",
    "target_columns",
    "connect_timeout",
    "statement_timeout",
];
/// Rows buffered before they are sent.
const ROWS_PER_FLUSH: usize = 16_384;

/// Plan node of a PostgreSQL sink.
#[derive(Debug, Clone)]
pub struct PostgresSinkFactory {
    pub sink: String,
    pub job: String,
    pub url: String,
    pub table: String,
    pub schema: SchemaRef,
    pub primary_key: Vec<String>,
    pub exactly_once: bool,
    pub timeouts: Timeouts,
    /// The query's result is updating: batches carry each row's change kind last
    /// ([`changelog::OP_COLUMN`]), applied by `primary_key`.
    pub updating: bool,
}

/// The sink's error. Rows the server refuses (constraint violations, bad values, a table or
/// column that does not fit: SQLSTATE classes 22, 23, 42) are the data's fault and fail the
/// job for good; anything else (a dropped connection, a server restart) may pass, and the
/// job restarts from its last checkpoint.
fn pg_error(sink: &str, what: &str, e: postgres::Error) -> EngineError {
    let (detail, permanent) = match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            (
                format!("{} (SQLSTATE {code})", db.message()),
                ["22", "23", "42"].iter().any(|c| code.starts_with(c)),
            )
        }
        None => (e.to_string(), false),
    };
    let message = format!("sink {sink}: {what}: {detail}");
    if permanent {
        EngineError::BadInput(message)
    } else {
        EngineError::External(message)
    }
}

use crate::quote::{quote_ident as ident, quote_literal as literal};

impl PostgresSinkFactory {
    /// Validates the options and the target: the server is reachable, it can prepare
    /// transactions (exactly-once), the table exists (or is created) with every column the
    /// query produces.
    ///
    /// `updating` is why the query's result is updating (DESIGN.md §8), `None` when it is
    /// append-only. An updating query needs `primary_key`. Its `schema` may hold a change-kind
    /// column besides the relation's (the planner gives `op` first, as people see a changelog:
    /// [`changelog::text_schema`]); the table has no such column, so it is left out.
    pub fn from_options(
        sink: &str,
        job: &str,
        schema: SchemaRef,
        options: &mut Options,
        exactly_once: bool,
        updating: Option<&str>,
    ) -> Result<Self> {
        let schema = match updating {
            Some(_) => relation_schema(schema),
            None => schema,
        };
        let url = options.take_required("url")?;
        let table = options.take_required("table")?;
        let create_table = options.take_bool("create_table")?.unwrap_or(false);
        let mut timeouts = Timeouts::default();
        if let Some(t) = options.take_duration("connect_timeout")? {
            timeouts.connect = t;
        }
        if let Some(t) = options.take_duration("statement_timeout")? {
            timeouts.statement = t;
        }
        // Target column names by position (INSERT INTO t (a, b) SELECT ...); default: the
        // query's column names.
        let schema = match options.take("target_columns") {
            None => schema,
            Some(columns) => {
                let names: Vec<&str> = columns.split(',').map(str::trim).collect();
                if names.len() != schema.fields().len() {
                    return Err(ConnectorError::Schema(format!(
                        "sink {sink}: {} target columns ({columns}) for {} query columns",
                        names.len(),
                        schema.fields().len()
                    )));
                }
                let fields: Vec<_> = schema
                    .fields()
                    .iter()
                    .zip(&names)
                    .map(|(f, n)| f.as_ref().clone().with_name(*n))
                    .collect();
                Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
            }
        };
        let primary_key: Vec<String> = options
            .take("primary_key")
            .map(|k| {
                k.split(',')
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        options.finish("postgres", OPTIONS)?;
        if let (Some(why), true) = (updating, primary_key.is_empty()) {
            return Err(ConnectorError::AppendOnly {
                sink: sink.to_string(),
                why: why.to_string(),
                fix: "so a PostgreSQL sink needs primary_key = '...' (the query's group keys) \
                      to apply them"
                    .into(),
            });
        }
        for k in &primary_key {
            if schema.field_with_name(k).is_err() {
                return Err(ConnectorError::InvalidOption {
                    option: "primary_key".into(),
                    value: k.clone(),
                    reason: "the query has no such column".into(),
                });
            }
        }
        let me = Self {
            sink: sink.to_string(),
            job: job.to_string(),
            url,
            table,
            schema,
            primary_key,
            exactly_once,
            timeouts,
            updating: updating.is_some(),
        };
        me.check_target(create_table)?;
        Ok(me)
    }

    /// A connection whose session reads timestamps in UTC, as weir writes them: a text-form
    /// `timestamptz` value must not move with the server's `TimeZone`.
    fn connect(&self) -> EngineResult<Client> {
        let what = format!("cannot connect to {}", redact(&self.url));
        let failed = |e| pg_error(&self.sink, &what, e);
        let refused = |e| EngineError::External(format!("sink {}: {what}: {e}", self.sink));
        let mut client = connect::connect(&self.url, self.timeouts, failed, refused)?;
        client
            .batch_execute("SET TIME ZONE 'UTC'")
            .map_err(|e| pg_error(&self.sink, &what, e))?;
        Ok(client)
    }

    fn check_target(&self, create_table: bool) -> Result<()> {
        let mut client = self.connect()?;
        let sink = &self.sink;
        if self.exactly_once {
            let row = client
                .query_one("SHOW max_prepared_transactions", &[])
                .map_err(|e| pg_error(sink, "cannot read max_prepared_transactions", e))?;
            let max: String = row.get(0);
            if max.trim() == "0" {
                return Err(ConnectorError::Schema(format!(
                    "sink {sink}: the server has max_prepared_transactions = 0, and exactly-once \
                     delivery needs prepared transactions: set it above 0 and restart \
                     PostgreSQL, or use delivery = 'at_least_once'"
                )));
            }
        }
        let described: Vec<(String, String)> = client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_name = $1 AND table_schema = current_schema() \
                 ORDER BY ordinal_position",
                &[&self.table],
            )
            .map_err(|e| pg_error(sink, "cannot read the table's columns", e))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let columns: Vec<String> = described.iter().map(|(c, _)| c.clone()).collect();
        if columns.is_empty() {
            if !create_table {
                return Err(ConnectorError::Schema(format!(
                    "sink {sink}: table '{}' does not exist (create it, or set create_table = 'true')",
                    self.table
                )));
            }
            let mut cols: Vec<String> = self
                .schema
                .fields()
                .iter()
                .map(|f| format!("{} {}", ident(f.name()), column_type(f.data_type())))
                .collect();
            if !self.primary_key.is_empty() {
                let keys: Vec<String> = self.primary_key.iter().map(|k| ident(k)).collect();
                cols.push(format!("PRIMARY KEY ({})", keys.join(", ")));
            }
            let ddl = format!("CREATE TABLE {} ({})", ident(&self.table), cols.join(", "));
            client
                .batch_execute(&ddl)
                .map_err(|e| pg_error(sink, "cannot create the table", e))?;
            return Ok(());
        }
        let missing: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|n| !columns.iter().any(|c| c == n))
            .collect();
        if !missing.is_empty() {
            return Err(ConnectorError::Schema(format!(
                "sink {sink}: table '{}' has no column {} (its columns: {})",
                self.table,
                missing
                    .iter()
                    .map(|m| format!("'{m}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                columns.join(", ")
            )));
        }
        for f in self.schema.fields() {
            let Some((_, pg)) = described.iter().find(|(c, _)| c == f.name()) else {
                continue;
            };
            if !compatible(f.data_type(), pg) {
                return Err(ConnectorError::Schema(format!(
                    "sink {sink}: column '{}' of table '{}' is {pg}, the query gives {}",
                    f.name(),
                    self.table,
                    f.data_type()
                )));
            }
        }
        Ok(())
    }

    fn gid_prefix(&self) -> String {
        format!("weir:{}:{}:", self.job, self.sink)
    }
}

use crate::redact::redact;

/// The relation's columns of an updating query's `schema`: without its change-kind column,
/// `op` (Utf8) first as the planner gives it ([`changelog::text_schema`]), or
/// [`changelog::OP_COLUMN`] last as the batches carry it.
fn relation_schema(schema: SchemaRef) -> SchemaRef {
    let fields = schema.fields();
    let skip = if changelog::has_op_field(&schema) {
        fields.len() - 1..fields.len()
    } else if fields
        .first()
        .is_some_and(|f| f.name() == changelog::OP_TEXT_COLUMN && f.data_type() == &DataType::Utf8)
    {
        0..1
    } else {
        return schema;
    };
    let kept: Vec<Field> = fields
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(i))
        .map(|(_, f)| f.as_ref().clone())
        .collect();
    Arc::new(Schema::new_with_metadata(kept, schema.metadata().clone()))
}

impl OperatorFactory for PostgresSinkFactory {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!(
            "PostgresSink: table {} at {} ({}{}) as {}",
            self.table,
            redact(&self.url),
            if self.exactly_once {
                "exactly once"
            } else {
                "at least once"
            },
            if self.primary_key.is_empty() {
                ", append".to_string()
            } else if self.updating {
                format!(", changes applied on {}", self.primary_key.join(", "))
            } else {
                format!(", upsert on {}", self.primary_key.join(", "))
            },
            self.sink
        )
    }

    fn create(&self, task: &TaskInfo) -> EngineResult<Box<dyn Operator>> {
        Ok(Box::new(PostgresSinkOperator {
            spec: self.clone(),
            info: task.clone(),
            client: None,
            target: None,
            in_transaction: false,
            pending: Vec::new(),
            pending_rows: 0,
        }))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        self.exactly_once.then(|| {
            Arc::new(PostgresCommitter {
                spec: self.clone(),
                client: Mutex::new(None),
            }) as Arc<dyn Committer>
        })
    }
}

struct PostgresSinkOperator {
    spec: PostgresSinkFactory,
    info: TaskInfo,
    client: Option<Client>,
    /// The table's column types and the statements for them, read at the first flush.
    target: Option<Target>,
    /// Exactly-once: a transaction for the current epoch is open.
    in_transaction: bool,
    /// Rows not yet sent.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
}

impl PostgresSinkOperator {
    fn client(&mut self) -> EngineResult<&mut Client> {
        if self.client.is_none() {
            self.client = Some(self.spec.connect()?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| EngineError::Internal("postgres client vanished".into()))
    }

    /// Sends the pending rows (inside the epoch's transaction when exactly-once).
    fn flush(&mut self) -> EngineResult<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let sink = self.spec.sink.clone();
        if self.target.is_none() {
            self.client()?;
            let client = self.client.as_mut();
            let target = client.map(|c| Target::read(&self.spec, c)).transpose()?;
            self.target = target;
        }
        if self.spec.exactly_once && !self.in_transaction {
            self.client()?
                .batch_execute("BEGIN")
                .map_err(|e| pg_error(&sink, "cannot begin a transaction", e))?;
            self.in_transaction = true;
        }
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let (Some(client), Some(target)) = (self.client.as_mut(), self.target.as_mut()) else {
            return Err(EngineError::Internal("postgres client vanished".into()));
        };
        target.write(&self.spec, client, &batches)
    }
}

impl Operator for PostgresSinkOperator {
    fn name(&self) -> &str {
        "PostgresSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> EngineResult<()> {
        self.info.metrics.add_rows_out(batch.num_rows() as u64);
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        if self.pending_rows >= ROWS_PER_FLUSH {
            self.flush()?;
        }
        Ok(())
    }

    fn snapshot(&mut self, epoch: u64) -> EngineResult<Option<Vec<u8>>> {
        self.flush()?;
        if !self.spec.exactly_once || !self.in_transaction {
            return Ok(None);
        }
        let gid = format!("{}{}:{epoch}", self.spec.gid_prefix(), self.info.instance);
        let sink = self.spec.sink.clone();
        self.client()?
            .batch_execute(&format!("PREPARE TRANSACTION {}", literal(&gid)))
            .map_err(|e| pg_error(&sink, "cannot prepare the epoch's transaction", e))?;
        self.in_transaction = false;
        Ok(Some(gid.into_bytes()))
    }
}

/// Commits and rolls back the sink's prepared transactions.
struct PostgresCommitter {
    spec: PostgresSinkFactory,
    client: Mutex<Option<Client>>,
}

impl PostgresCommitter {
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> EngineResult<T>) -> EngineResult<T> {
        let mut slot = self
            .client
            .lock()
            .map_err(|_| EngineError::Internal("postgres committer poisoned".into()))?;
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = Some(self.spec.connect()?);
        }
        let client = slot
            .as_mut()
            .ok_or_else(|| EngineError::Internal("postgres client vanished".into()))?;
        let result = f(client);
        if result.is_err() {
            // A broken connection is opened again next time.
            *slot = None;
        }
        result
    }

    fn finish(&self, client: &mut Client, verb: &str, gid: &str) -> EngineResult<()> {
        match client.batch_execute(&format!("{verb} PREPARED {}", literal(gid))) {
            Ok(()) => Ok(()),
            // Done before: a crash came between the commit and the next checkpoint.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_OBJECT) => Ok(()),
            Err(e) => Err(pg_error(
                &self.spec.sink,
                &format!(
                    "cannot {} prepared transaction '{gid}'",
                    verb.to_lowercase()
                ),
                e,
            )),
        }
    }
}

impl Committer for PostgresCommitter {
    fn commit(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.with_client(|client| {
            for p in payloads {
                self.finish(client, "COMMIT", &String::from_utf8_lossy(p))?;
            }
            Ok(())
        })
    }

    /// A prepared transaction keeps its row locks until COMMIT PREPARED, and the next epoch's
    /// upserts of the same keys wait for them: its commit cannot wait for a later checkpoint.
    fn may_wait_for_next_checkpoint(&self) -> bool {
        false
    }

    fn recover(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.commit(payloads)?;
        let prefix = self.spec.gid_prefix();
        self.with_client(|client| {
            let rows = client
                .query(
                    "SELECT gid FROM pg_prepared_xacts \
                     WHERE database = current_database() AND starts_with(gid, $1)",
                    &[&prefix],
                )
                .map_err(|e| pg_error(&self.spec.sink, "cannot list prepared transactions", e))?;
            for row in rows {
                let gid: String = row.get(0);
                self.finish(client, "ROLLBACK", &gid)?;
            }
            Ok(())
        })
    }
}

/// A table declared with `connector = 'postgres'`: written by `INSERT INTO t SELECT ...`,
/// never read.
#[derive(Debug)]
pub struct PostgresTable {
    pub name: String,
    pub schema: SchemaRef,
}

impl PostgresTable {
    /// Checks the options a sink will need (`url`, `table`) are there.
    pub fn from_options(name: &str, schema: SchemaRef, options: &Options) -> Result<Self> {
        for required in ["url", "table"] {
            if options.get(required).is_none() {
                return Err(ConnectorError::MissingOption(required.into()));
            }
        }
        if let Some((k, _)) = options.iter().find(|(k, _)| !OPTIONS.contains(&k.as_str())) {
            return Err(ConnectorError::UnknownOption {
                connector: "postgres".into(),
                option: k.clone(),
                suggestion: crate::suggest::did_you_mean(k, OPTIONS.iter().copied()),
                allowed: OPTIONS.join(", "),
            });
        }
        Ok(Self {
            name: name.to_string(),
            schema,
        })
    }
}

impl weir_engine::SourceFactory for PostgresTable {
    fn describe(&self) -> String {
        format!("PostgreSQL table {} (written by INSERT INTO)", self.name)
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn create(
        &self,
        _task: &TaskInfo,
        _position: Option<&[u8]>,
    ) -> EngineResult<Box<dyn weir_engine::SourceReader>> {
        Err(EngineError::BadInput(format!(
            "table {} is a PostgreSQL sink table: write it with INSERT INTO {0} SELECT ...; \
             weir does not read it",
            self.name
        )))
    }
}
