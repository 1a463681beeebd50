//! Sink jobs: CREATE SINK, SHOW JOBS, CANCEL JOB, DROP SINK, resuming at start, waiting for
//! jobs to end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::{Query, Statement};
use weir_connectors::sinks::{ViewSinkFactory, ViewSourceFactory};
use weir_connectors::{create_sink, Options, SinkContext};
use weir_engine::JobGraph;
use weir_engine::OperatorFactory;

use super::settings::{
    parse_delivery, parse_duration, parse_early_fire_interval, parse_mini_batch, parse_state_ttl,
};
use super::{text_rows, Session, SessionConfig, StatementResult};
use crate::catalog::TableDef;
use crate::error::{PlanError, Result};
use crate::jobs::{
    job_dir, JobManager, JobOutcome, JobRecord, JobSettings, JobState, SHOW_JOBS_COLUMNS,
};
use crate::sql::statement::parse_recorded_job;
use crate::sql::{CreateJob, JobKind, JobTarget, StatementText};
use crate::stream_plan::{reads_tables, StreamPlanner};
use crate::{invalid, not_supported};

fn valid_job_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a session's `path` options may lead: under `root`, and (when the session has a
/// data directory) never to the data directory's own files.
#[derive(Clone, Copy)]
pub(super) struct FileAccess<'a> {
    pub root: &'a Path,
    pub data_dir: Option<&'a Path>,
}

/// The entries of a data directory that are weir's own: job records (with their
/// checkpoints), the catalog, the secrets, late rows. Names starting with `.` (temporary
/// files of atomic writes) are too.
const DATA_DIR_OWN: &[&str] = &[
    "jobs",
    "catalog.sql",
    "secrets.json",
    "late_rows",
    "history",
];

/// The WITH options of CREATE SINK and CREATE MATERIALIZED VIEW that set the job's own
/// settings rather than the connector's ([`Session::job_settings`] takes them out).
pub const JOB_OPTIONS: &[&str] = &[
    "checkpoint_interval",
    "delivery",
    "state_ttl",
    "early_fire_interval",
    "mini_batch",
];

/// Makes a relative `path` option absolute against `base` (when set: a job planned again
/// resolves paths against the directory it was created in; otherwise paths stay as written
/// and are relative to the working directory), and checks it against `access` (wire
/// sessions).
pub(super) fn resolve_path(
    options: &mut [(String, String)],
    base: Option<&Path>,
    access: Option<FileAccess<'_>>,
) -> Result<()> {
    for (k, v) in options.iter_mut() {
        if !k.eq_ignore_ascii_case("path") {
            continue;
        }
        let path = Path::new(v.as_str());
        let resolved = match base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        };
        if let Some(access) = access {
            check_access(&resolved, access, v)?;
        }
        *v = resolved.to_string_lossy().into_owned();
    }
    Ok(())
}

/// Refuses a path that leads outside the file root, lexically (`..`) or through symbolic
/// links, or into the data directory: to weir's own files there always, and anywhere in it
/// unless the file root itself lies inside the data directory (the user chose that).
fn check_access(path: &Path, access: FileAccess<'_>, written: &str) -> Result<()> {
    let root = canonical_dir(access.root, "file root")?;
    let full = real_path(path).ok_or_else(|| outside(written, &root))?;
    if !full.starts_with(&root) {
        return Err(outside(written, &root));
    }
    let Some(data) = access.data_dir else {
        return Ok(());
    };
    let data = canonical_dir(data, "data directory")?;
    let Ok(inside) = full.strip_prefix(&data) else {
        return Ok(());
    };
    let own = inside.components().next().is_none_or(|c| {
        let name = c.as_os_str().to_string_lossy();
        name.starts_with('.') || DATA_DIR_OWN.contains(&name.as_ref())
    });
    if own || !root.starts_with(&data) {
        return Err(PlanError::PermissionDenied(format!(
            "path '{written}' leads into the data directory '{}', which holds job records, \
             checkpoints and secrets; files are read and written elsewhere under the file root",
            data.display()
        )));
    }
    Ok(())
}

fn outside(written: &str, root: &Path) -> PlanError {
    PlanError::PermissionDenied(format!(
        "path '{written}' is outside the file root '{}'",
        root.display()
    ))
}

fn canonical_dir(dir: &Path, what: &str) -> Result<PathBuf> {
    dir.canonicalize()
        .map_err(|e| PlanError::io(format!("{what} '{}'", dir.display()), e))
}

/// `path` with `.` and `..` resolved without touching the file system, then links followed
/// through the longest part that exists (a sink's file may not yet); `None` when `..` climbs
/// above the root of the file system.
fn real_path(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut lexical = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !lexical.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            Err(_) => {
                rest.push(existing.file_name()?.to_os_string());
                existing = existing.parent()?;
            }
        }
    };
    Some(rest.iter().rev().fold(real, |p, n| p.join(n)))
}

impl Session {
    /// Where this session's `path` options may lead (`None`: anywhere, as the user running
    /// weir).
    pub(super) fn file_access(&self) -> Option<FileAccess<'_>> {
        self.config.file_root.as_deref().map(|root| FileAccess {
            root,
            data_dir: self.config.data_dir.as_deref(),
        })
    }

    /// The directory relative paths are resolved against.
    pub(super) fn base_dir(&self) -> PathBuf {
        self.config
            .base_dir
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default()
    }

    fn data_dir(&self) -> Result<PathBuf> {
        self.config.data_dir.clone().ok_or_else(|| {
            invalid!("sinks keep their checkpoints in the data directory: start weir with --data-dir DIR")
        })
    }

    /// The job settings of a CREATE SINK: the session's, overridden by the statement's
    /// `checkpoint_interval` and `delivery` options (taken out of `options`).
    fn job_settings(&self, options: &mut Vec<(String, String)>) -> Result<JobSettings> {
        let mut settings = JobSettings {
            parallelism: self.config.parallelism,
            checkpoint_interval: self.config.checkpoint_interval,
            exactly_once: self.config.exactly_once,
            checkpoints_retained: self.config.checkpoints_retained,
            memory_budget: self.config.memory_budget,
            idle_timeout: self.config.idle_timeout,
            streaming: self.config.modes.streaming,
            early_fire: self.config.modes.early_fire,
            state_ttl: self.config.modes.state_ttl,
            early_fire_interval: self.config.modes.early_fire_interval,
            mini_batch: self.config.modes.mini_batch,
        };
        let mut rest = Vec::new();
        for (k, v) in options.drain(..) {
            match k.to_ascii_lowercase().as_str() {
                "checkpoint_interval" => settings.checkpoint_interval = parse_duration(&v)?,
                "delivery" => settings.exactly_once = parse_delivery(&v)?,
                "state_ttl" => settings.state_ttl = parse_state_ttl(&v)?,
                "early_fire_interval" => {
                    settings.early_fire_interval = parse_early_fire_interval(&v)?
                }
                "mini_batch" => settings.mini_batch = parse_mini_batch(&v)?,
                _ => rest.push((k, v)),
            }
        }
        *options = rest;
        Ok(settings)
    }

    /// Plans a sink job (or, with `view`, a materialized view's job) from its statement.
    /// Returns the job and the schema of its rows.
    fn plan_sink(
        &mut self,
        name: &str,
        run_id: &str,
        query: Box<Query>,
        settings: &JobSettings,
        mut options: Vec<(String, String)>,
        view: bool,
    ) -> Result<(JobGraph, SchemaRef)> {
        resolve_path(
            &mut options,
            self.config.base_dir.as_deref(),
            self.file_access(),
        )?;
        let options = Options::new(options);
        if view {
            if let Some((k, _)) = options.iter().next() {
                return Err(invalid!(
                    "materialized view {name}: unknown option '{k}'{} (allowed: {})",
                    weir_connectors::suggest::did_you_mean(k, JOB_OPTIONS.iter().copied()),
                    JOB_OPTIONS.join(", ")
                ));
            }
        } else if options.get("connector").is_none() {
            return Err(invalid!(
                "sink {name}: WITH (connector = ...) is required (connectors: {})",
                weir_connectors::SINK_CONNECTORS.join(", ")
            ));
        }
        let plan = self.logical_plan(Statement::Query(query))?;
        if !reads_tables(&plan) {
            return Err(invalid!("{name}: the query reads no table"));
        }
        let relation: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let catalog = self.catalog();
        let planned =
            StreamPlanner::new(&catalog, self.state.execution_props(), settings.parallelism)
                .with_fixed_shape()
                .with_delivery(settings.exactly_once)
                .with_modes(settings.modes())
                .plan_query(&plan)?;
        let updating = planned.updating();
        let unique_key = planned.unique_key();
        if let (Some(why), true, false, None) =
            (&updating, view, settings.exactly_once, &unique_key)
        {
            return Err(not_supported!(
                "materialized view {name}: its query's result is updating ({why}) with no key that identifies its rows, so a view applies each change once: delivery = 'at_least_once' would apply replayed changes again; use exactly_once (or a query whose rows have a key: a GROUP BY's keys, a Top-N's partition and row number)"
            ));
        }
        // What the sink's rows hold: an updating result's start with their change kind.
        let schema = match updating {
            Some(_) => weir_engine::changelog::text_schema(&relation),
            None => Arc::clone(&relation),
        };
        let sink: Arc<dyn OperatorFactory> = if view {
            Arc::new(ViewSinkFactory {
                view: name.to_string(),
                dir: self.view_dir(name)?,
                schema: match updating {
                    Some(_) => weir_engine::changelog::with_op_field(&relation),
                    None => Arc::clone(&relation),
                },
                exactly_once: settings.exactly_once,
                updating: updating.is_some().then(|| Arc::clone(&relation)),
                unique_key,
            })
        } else {
            let job_dir = self
                .config
                .data_dir
                .clone()
                .or_else(|| self.view_data_dir.clone())
                .map(|data| job_dir(&data, name));
            create_sink(
                name,
                Arc::clone(&schema),
                &options,
                &SinkContext {
                    job: name.to_string(),
                    run_id: run_id.to_string(),
                    job_dir,
                    exactly_once: settings.exactly_once,
                    checkpoint_interval: settings.checkpoint_interval,
                    updating,
                },
            )?
        };
        // A view's rows go through one writer; file and PostgreSQL sinks write from every
        // instance of the last stage.
        let graph = if view {
            planned.into_job(name, sink)
        } else {
            planned.into_parallel_job(name, sink)
        };
        Ok((graph, relation))
    }

    /// Where a materialized view keeps its rows. Scratch sessions planning a recorded job
    /// have no data directory of their own; they get it from the job's record.
    fn view_dir(&self, name: &str) -> Result<PathBuf> {
        let data = self
            .config
            .data_dir
            .clone()
            .or_else(|| self.view_data_dir.clone())
            .ok_or_else(|| {
                invalid!("materialized views need a data directory: start weir with --data-dir DIR")
            })?;
        Ok(job_dir(&data, name).join("view"))
    }

    /// `INSERT INTO t [(columns)] SELECT ...` into a table declared with connector
    /// `postgres`: a sink job `<t>_insert_<n>` writing the query's rows into it (positionally
    /// into the listed columns, or the table's), recorded as the CREATE SINK it runs as.
    fn insert_into(
        &mut self,
        table: String,
        columns: Vec<String>,
        query: Box<Query>,
    ) -> Result<StatementResult> {
        let catalog = self.catalog();
        let def = catalog
            .get(&table)
            .ok_or_else(|| PlanError::unknown_table(table.clone()))?;
        if def.options.get("connector") != Some("postgres") {
            return Err(invalid!(
                "INSERT INTO {table}: only tables declared with connector = 'postgres' take rows; \
                 {table} is a source (connector '{}'), or use CREATE SINK",
                def.options.get("connector").unwrap_or_default()
            ));
        }
        let columns: Vec<String> = if columns.is_empty() {
            def.schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        } else {
            columns
        };
        for c in &columns {
            if def.schema.field_with_name(c).is_err() {
                return Err(invalid!(
                    "INSERT INTO {table}: table {table} has no column '{c}'"
                ));
            }
        }
        let mut options: Vec<(String, String)> = def
            .options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        options.push(("target_columns".into(), columns.join(",")));
        let data_dir = self.data_dir()?;
        let mut n = 1;
        let name = loop {
            let name = format!("{table}_insert_{n}");
            if !self.job_known(&name) && !job_dir(&data_dir, &name).exists() {
                break name;
            }
            n += 1;
        };
        let job = CreateJob {
            target: JobTarget::Sink(name.clone()),
            if_not_exists: false,
            options,
            query,
        };
        let text = job.to_string();
        self.create_job(job, &text)?;
        Ok(StatementResult::Command(format!("INSERT (job {name})")))
    }

    /// Makes a materialized view readable as a table.
    fn register_view(&mut self, name: &str, schema: SchemaRef) -> Result<()> {
        let source = Arc::new(ViewSourceFactory {
            view: name.to_string(),
            dir: self.view_dir(name)?,
            schema: Arc::clone(&schema),
        });
        let def = TableDef {
            name: name.to_string(),
            schema,
            watermark: None,
            proctime: None,
            options: Options::new([("connector".to_string(), "materialized view".to_string())]),
            source,
            late_rows: None,
            late_rows_of: None,
            ddl: String::new(),
        };
        self.change_catalog(|c| c.insert(def))
    }

    /// CREATE SINK, CREATE MATERIALIZED VIEW, INSERT INTO.
    pub(super) fn create_job(&mut self, job: CreateJob, text: &str) -> Result<StatementResult> {
        let CreateJob {
            target,
            if_not_exists,
            mut options,
            query,
        } = job;
        let (name, view) = match target {
            JobTarget::Sink(name) => (name, false),
            JobTarget::View(name) => (name, true),
            JobTarget::Insert { table, columns } => return self.insert_into(table, columns, query),
        };
        let (what, tag, drop) = if view {
            (
                "materialized view",
                "CREATE MATERIALIZED VIEW",
                "DROP MATERIALIZED VIEW",
            )
        } else {
            ("sink", "CREATE SINK", "DROP SINK")
        };
        let data_dir = self.data_dir()?;
        if !valid_job_name(&name) {
            return Err(invalid!(
                "{what} name '{name}': use letters, digits and _ (it names files and directories)"
            ));
        }
        if self.job_known(&name) || job_dir(&data_dir, &name).join("job.json").exists() {
            if if_not_exists {
                return Ok(StatementResult::Command(tag.into()));
            }
            return Err(invalid!(
                "{what} {name} already exists ({drop} {name} first)"
            ));
        }
        if view && self.catalog().get(&name).is_some() {
            return Err(PlanError::TableExists(name));
        }
        let settings = self.job_settings(&mut options)?;
        let run_id = crate::jobs::new_run_id();
        let (graph, schema) = self.plan_sink(&name, &run_id, query, &settings, options, view)?;
        let record = JobRecord {
            name: name.clone(),
            statement: text.trim().to_string(),
            tables: self.catalog().ddl_statements(),
            settings,
            base_dir: self.base_dir(),
            state: JobState::Running,
            error: None,
            run_id,
        };
        self.shared.with_jobs(|jobs| {
            // Checked again under the lock: another session may have created it meanwhile.
            if jobs.contains(&name) || job_dir(&data_dir, &name).join("job.json").exists() {
                return Err(invalid!(
                    "{what} {name} already exists ({drop} {name} first)"
                ));
            }
            let dir = job_dir(&data_dir, &name);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| PlanError::io(format!("cannot clear '{}'", dir.display()), e))?;
            }
            record.save(&data_dir)?;
            jobs.start(record, graph)
        })?;
        if view {
            self.register_view(&name, schema)?;
        }
        Ok(StatementResult::Command(tag.into()))
    }

    /// Whether this process runs (or ran) a job of that name.
    fn job_known(&self, name: &str) -> bool {
        self.shared
            .jobs_if_any(|j| j.contains(name))
            .unwrap_or(false)
    }

    /// Resumes every unfinished job recorded in the data directory and makes every
    /// materialized view readable. Returns warnings.
    pub(super) fn resume_jobs(&mut self) -> Result<Vec<String>> {
        let Some(data_dir) = self.config.data_dir.clone() else {
            return Ok(Vec::new());
        };
        let (records, mut warnings) = JobRecord::load_all(&data_dir)?;
        for mut record in records {
            if self.job_known(&record.name) {
                continue;
            }
            // Finished and cancelled jobs stay as they ended (a view's rows stay readable).
            let ended = matches!(record.state, JobState::Finished | JobState::Cancelled);
            if !ended && !self.config.resume_jobs {
                warnings.push(format!(
                    "job {} is not resumed by weir -f (weir resume, weir serve or the REPL \
                     resume it)",
                    record.name
                ));
            }
            let finished = ended || !self.config.resume_jobs;
            let view = parse_recorded_job(&record.statement)
                .is_ok_and(|job| matches!(job.target, JobTarget::View(_)));
            if finished && !view {
                continue;
            }
            if let Some(p) = self.config.resume_parallelism {
                record.settings.parallelism = p;
            }
            let name = record.name.clone();
            let planned = self.plan_recorded(&record, &data_dir);
            match planned.and_then(|(graph, schema)| {
                if view {
                    self.register_view(&name, schema)?;
                }
                if finished {
                    return Ok(Vec::new());
                }
                record.state = JobState::Running;
                record.error = None;
                record.save(&data_dir)?;
                self.shared.with_jobs(|jobs| jobs.start(record, graph))
            }) {
                Ok(notes) => warnings.extend(notes.into_iter().map(|n| format!("job {name}: {n}"))),
                Err(e) => {
                    let message = format!("job {name} could not resume: {e}");
                    self.shared.add_resume_failure(message.clone());
                    warnings.push(message);
                }
            }
        }
        Ok(warnings)
    }

    /// Plans a recorded job again, in a scratch session holding the tables it was created
    /// with, so later changes to the catalog do not change a running job.
    fn plan_recorded(
        &mut self,
        record: &JobRecord,
        data_dir: &Path,
    ) -> Result<(JobGraph, SchemaRef)> {
        let config = SessionConfig {
            parallelism: record.settings.parallelism,
            data_dir: None,
            base_dir: Some(record.base_dir.clone()),
            ..SessionConfig::default()
        };
        let (mut scratch, _) = Session::open_catalog_only(config)?;
        scratch.view_data_dir = Some(data_dir.to_path_buf());
        for ddl in &record.tables {
            scratch.execute(&StatementText {
                text: ddl.clone(),
                line: 1,
            })?;
        }
        let job = parse_recorded_job(&record.statement)?;
        let view = matches!(job.target, JobTarget::View(_));
        let mut options = job.options;
        scratch.job_settings(&mut options)?;
        scratch.plan_sink(
            &record.name,
            &record.run_id,
            job.query,
            &record.settings,
            options,
            view,
        )
    }

    /// CANCEL JOB name: stops the job with a final checkpoint, for good: what it committed
    /// stays, and it is not resumed (DROP SINK removes it; CREATE SINK runs it anew).
    pub(super) fn cancel_job(&mut self, name: &str) -> Result<StatementResult> {
        if !self.shared.with_jobs(|jobs| jobs.cancel(name))? {
            return Err(invalid!(
                "no running job named {name} (SHOW JOBS lists them)"
            ));
        }
        Ok(StatementResult::Command("CANCEL JOB".into()))
    }

    /// DROP SINK / DROP MATERIALIZED VIEW: stops the job and deletes its directory.
    pub(super) fn drop_job(
        &mut self,
        kind: JobKind,
        name: &str,
        if_exists: bool,
    ) -> Result<StatementResult> {
        let (what, tag) = match kind {
            JobKind::Sink => ("sink", "DROP SINK"),
            JobKind::View => ("materialized view", "DROP MATERIALIZED VIEW"),
        };
        let dir = job_dir(&self.data_dir()?, name);
        if !self.shared.with_jobs(|jobs| jobs.remove(name))? && !dir.exists() {
            if if_exists {
                return Ok(StatementResult::Command(tag.into()));
            }
            return Err(invalid!("no {what} named {name}"));
        }
        if kind == JobKind::View {
            self.change_catalog(|c| c.remove(name))?;
            weir_engine::state::RocksDbStateBackend::close_shared(&self.view_dir(name)?);
        }
        std::fs::remove_dir_all(&dir)
            .map_err(|e| PlanError::io(format!("cannot delete '{}'", dir.display()), e))?;
        Ok(StatementResult::Command(tag.into()))
    }

    pub(super) fn show_jobs(&mut self) -> StatementResult {
        let rows = self
            .shared
            .jobs_if_any(JobManager::rows)
            .unwrap_or_default();
        text_rows(&SHOW_JOBS_COLUMNS, rows)
    }

    /// Checkpoint counters of a job of this session (as it ended, once it ended).
    pub fn job_checkpoints(&self, name: &str) -> Option<weir_engine::checkpoint::StatsSnapshot> {
        self.shared.jobs_if_any(|j| j.checkpoints(name))?
    }

    /// How often a job of this session was restarted after failures.
    pub fn job_restarts(&self, name: &str) -> Option<u32> {
        self.shared.jobs_if_any(|j| j.restarts(name))?
    }

    /// The failure a job of this session was last restarted after.
    pub fn job_last_failure(&self, name: &str) -> Option<String> {
        self.shared.jobs_if_any(|j| j.last_failure(name))?
    }

    /// Counters of a job of this session (as it ended, once it ended).
    pub fn job_metrics(&self, name: &str) -> Option<weir_engine::MetricsSnapshot> {
        self.shared.jobs_if_any(|j| j.metrics(name))?
    }

    /// Cancels a job without a checkpoint, as a crash would stop it; it resumes from its last
    /// checkpoint at the next start. For benchmarks and tests of recovery.
    pub fn abort_job(&mut self, name: &str) {
        self.shared.jobs_if_any(|j| j.abort(name));
    }

    /// Jobs that could not resume when the session opened.
    pub fn resume_failures(&self) -> Vec<String> {
        self.shared.resume_failures()
    }

    /// Whether any job of this session is still running.
    pub fn has_running_jobs(&self) -> bool {
        self.shared
            .jobs_if_any(|j| j.has_running())
            .unwrap_or(false)
    }

    /// Waits until every job of this session ended. A message on `interrupt` stops them all
    /// with a final checkpoint (they resume at the next start). Returns each job's name,
    /// final state and error.
    pub fn wait_for_jobs(&mut self, interrupt: &Receiver<()>) -> Result<Vec<JobOutcome>> {
        self.shared
            .jobs_if_any(|j| j.wait_all(interrupt))
            .unwrap_or(Ok(Vec::new()))
    }

    /// Stops every running job with a final checkpoint and waits for it.
    pub fn stop_jobs(&mut self) -> Result<()> {
        self.shared.jobs_if_any(|j| j.stop_all()).unwrap_or(Ok(()))
    }
}
