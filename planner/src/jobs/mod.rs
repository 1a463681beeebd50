//! Durable jobs (sinks, materialized views) and their life: start, resume, supervise, wait,
//! stop, SHOW JOBS. [`JobManager`] owns every job this process runs; a job's record on disk
//! ([`JobRecord`]) says how to plan it again and how it ended. Starting weir on the data
//! directory resumes every job whose state is not `finished`.
//!
//! Nothing here polls: each job's supervisor sends the job's name on one channel when the job
//! ends for good, and waiting for jobs is a `select` over that channel and the caller's
//! interrupt channel.

mod record;

pub use record::{job_dir, new_run_id, JobRecord, JobSettings, JobState};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crossbeam_channel::{never, select, Receiver, Sender};
use weir_engine::checkpoint::{CheckpointConfig, CheckpointRecord, JobDir, StatsSnapshot};
use weir_engine::runtime::{spawn_supervised, RestartPolicy, SupervisedJob, SupervisedWatch};
use weir_engine::{JobConfig, JobGraph, MetricsSnapshot, StageSnapshot};

use crate::display::format_timestamp;
use crate::error::Result;

/// A job this process runs (or ran).
struct ManagedJob {
    record: JobRecord,
    /// The running job (its supervisor restarts it after failures that may pass).
    handle: Option<SupervisedJob>,
    /// Counters when the job ended.
    last_metrics: Option<MetricsSnapshot>,
    /// Checkpoint counters when the job ended.
    last_checkpoints: Option<StatsSnapshot>,
    last_epoch: u64,
    /// Restarts after failures, as the job ended.
    restarts: u32,
    /// The failure the last restart followed, as the job ended.
    last_failure: Option<String>,
}

impl ManagedJob {
    /// Waits for the job's end (blocking), and records its final state.
    fn finish(&mut self, data_dir: &Path) -> Result<()> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        self.last_epoch = handle
            .checkpoints()
            .map_or(self.last_epoch, |c| c.last_epoch);
        self.last_metrics = Some(handle.metrics());
        self.last_checkpoints = handle.checkpoints();
        self.restarts = handle.restarts();
        self.last_failure = handle.last_failure();
        let (state, error) = match handle.wait() {
            // Whether it ran to its end or stopped at a checkpoint, the newest manifest says.
            Ok(_) => {
                let dir = JobDir::new(job_dir(data_dir, &self.record.name));
                match dir.latest_manifest() {
                    Ok((Some(m), _)) if m.finished => (JobState::Finished, None),
                    _ => (JobState::Stopped, None),
                }
            }
            Err(e) if matches!(e.root(), weir_engine::EngineError::Cancelled) => {
                (JobState::Stopped, None)
            }
            Err(e) => (JobState::Failed, Some(e.to_string())),
        };
        self.record.state = state;
        self.record.error = error;
        if state == JobState::Finished {
            // Nothing will resume: the working stores are garbage.
            let _ = std::fs::remove_dir_all(job_dir(data_dir, &self.record.name).join("state"));
        }
        self.record.save(data_dir)
    }

    fn stop(&self) {
        if let Some(h) = &self.handle {
            h.stop();
        }
    }

    /// The job's counters: live while it runs, else as it ended.
    fn metrics(&self) -> Option<MetricsSnapshot> {
        self.handle
            .as_ref()
            .map(|h| h.metrics())
            .or(self.last_metrics)
    }

    /// Epoch of its newest complete checkpoint.
    fn checkpoint_epoch(&self) -> u64 {
        self.handle
            .as_ref()
            .and_then(|h| h.checkpoints())
            .map_or(self.last_epoch, |c| c.last_epoch.max(self.last_epoch))
    }

    /// Its SHOW JOBS row.
    fn row(&self) -> Vec<String> {
        let m = self.metrics().unwrap_or_default();
        let state = if self.handle.is_some() {
            JobState::Running
        } else {
            self.record.state
        };
        vec![
            self.record.name.clone(),
            state.as_str().to_string(),
            self.checkpoint_epoch().to_string(),
            if m.watermark == i64::MIN {
                String::new()
            } else {
                format_timestamp(m.watermark)
            },
            m.rows_in.to_string(),
            m.rows_out.to_string(),
            m.late_rows.to_string(),
            self.record.error.clone().unwrap_or_default(),
        ]
    }
}

/// Every durable job of this process, by name.
pub struct JobManager {
    data_dir: PathBuf,
    registry: JobRegistry,
    jobs: BTreeMap<String, ManagedJob>,
    ended_tx: Sender<String>,
    ended_rx: Receiver<String>,
}

/// How a job ended, for reports: name, final state, error.
pub type JobOutcome = (String, JobState, Option<String>);

/// The columns of SHOW JOBS.
pub const SHOW_JOBS_COLUMNS: [&str; 8] = [
    "name",
    "state",
    "checkpoint",
    "watermark",
    "rows_in",
    "rows_out",
    "late_rows",
    "error",
];

impl JobManager {
    pub fn new(data_dir: PathBuf) -> Self {
        let (ended_tx, ended_rx) = crossbeam_channel::unbounded();
        Self {
            data_dir,
            registry: JobRegistry::default(),
            jobs: BTreeMap::new(),
            ended_tx,
            ended_rx,
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Whether this process knows a job of that name (running or ended).
    pub fn contains(&self, name: &str) -> bool {
        self.jobs.contains_key(name)
    }

    /// Starts (or resumes) a job under its restart policy. Returns what the restore noted.
    pub fn start(&mut self, record: JobRecord, graph: JobGraph) -> Result<Vec<String>> {
        let config = JobConfig {
            align_barriers: record.settings.exactly_once,
            memory_budget: record.settings.memory_budget,
            idle_timeout: record.settings.idle_timeout,
            checkpoint: Some(CheckpointConfig {
                dir: job_dir(&self.data_dir, &record.name),
                interval: record.settings.checkpoint_interval,
                retain: record.settings.checkpoints_retained,
            }),
            ..JobConfig::default()
        };
        let shape = StageShape::of(&graph);
        let handle = spawn_supervised(
            graph,
            config,
            RestartPolicy::default(),
            Some(self.ended_tx.clone()),
        )?;
        let notes = handle.notes().to_vec();
        let last_epoch = handle.restored_epoch().unwrap_or(0);
        self.registry.started(Observed {
            record: record.clone(),
            shape,
            dir: job_dir(&self.data_dir, &record.name),
            watch: handle.watch(),
            running: true,
        });
        self.jobs.insert(
            record.name.clone(),
            ManagedJob {
                record,
                handle: Some(handle),
                last_metrics: None,
                last_checkpoints: None,
                restarts: 0,
                last_failure: None,
                last_epoch,
            },
        );
        Ok(notes)
    }

    /// Records the end of every job whose supervisor said it ended.
    fn collect_ended(&mut self) -> Result<()> {
        while let Ok(name) = self.ended_rx.try_recv() {
            self.finished(&name)?;
        }
        Ok(())
    }

    fn finished(&mut self, name: &str) -> Result<()> {
        match self.jobs.get_mut(name) {
            Some(job) => {
                let result = job.finish(&self.data_dir);
                self.registry.ended(&job.record);
                result
            }
            None => Ok(()),
        }
    }

    /// Whether a job of that name runs now.
    pub fn is_running(&self, name: &str) -> bool {
        self.jobs.get(name).is_some_and(|j| j.handle.is_some())
    }

    /// CANCEL JOB: stops a running job with a final checkpoint, for good (its state is
    /// deleted; the next start does not resume it); `false` if no job of that name runs.
    pub fn cancel(&mut self, name: &str) -> Result<bool> {
        let Some(job) = self.jobs.get_mut(name).filter(|j| j.handle.is_some()) else {
            return Ok(false);
        };
        job.stop();
        let finished = job.finish(&self.data_dir);
        self.registry.ended(&job.record);
        finished?;
        if job.record.state == JobState::Stopped {
            job.record.state = JobState::Cancelled;
            job.record.save(&self.data_dir)?;
            let _ = std::fs::remove_dir_all(job_dir(&self.data_dir, name).join("state"));
            self.registry.ended(&job.record);
        }
        Ok(true)
    }

    /// Stops the job (if it runs) and forgets it; `false` if this process did not know it.
    pub fn remove(&mut self, name: &str) -> Result<bool> {
        let Some(mut job) = self.jobs.remove(name) else {
            return Ok(false);
        };
        self.registry.removed(name);
        job.stop();
        job.finish(&self.data_dir)?;
        Ok(true)
    }

    /// Cancels a job without a checkpoint, as a crash would stop it; it resumes from its last
    /// checkpoint at the next start. For benchmarks and tests of recovery.
    pub fn abort(&mut self, name: &str) {
        if let Some(handle) = self.jobs.get_mut(name).and_then(|j| j.handle.take()) {
            handle.cancel();
            let _ = handle.wait();
        }
        if let Some(job) = self.jobs.get(name) {
            self.registry.ended(&job.record);
        }
    }

    pub fn has_running(&self) -> bool {
        self.jobs.values().any(|j| j.handle.is_some())
    }

    /// SHOW JOBS rows: this process's jobs live, then the jobs of the data directory it does
    /// not run (finished, or failed to resume) with their recorded state and newest
    /// checkpoint; their counters are gone.
    pub fn rows(&mut self) -> Vec<Vec<String>> {
        let _ = self.collect_ended();
        let mut rows: Vec<Vec<String>> = self.jobs.values().map(ManagedJob::row).collect();
        if let Ok((records, _)) = JobRecord::load_all(&self.data_dir) {
            for r in records
                .into_iter()
                .filter(|r| !self.jobs.contains_key(&r.name))
            {
                let epoch = JobDir::new(job_dir(&self.data_dir, &r.name))
                    .latest_manifest()
                    .ok()
                    .and_then(|(m, _)| m)
                    .map_or(0, |m| m.epoch);
                let mut row = vec![String::new(); SHOW_JOBS_COLUMNS.len()];
                row[0] = r.name.clone();
                row[1] = r.state.as_str().to_string();
                row[2] = epoch.to_string();
                row[7] = r.error.clone().unwrap_or_default();
                rows.push(row);
            }
        }
        rows.sort_by(|a, b| a[0].cmp(&b[0]));
        rows
    }

    /// Waits until every job ended. A message on `interrupt` stops them all with a final
    /// checkpoint (they resume at the next start). Returns how each job ended.
    pub fn wait_all(&mut self, interrupt: &Receiver<()>) -> Result<Vec<JobOutcome>> {
        let mut interrupt = interrupt.clone();
        self.collect_ended()?;
        while self.has_running() {
            select! {
                recv(self.ended_rx) -> name => {
                    if let Ok(name) = name {
                        self.finished(&name)?;
                    }
                }
                recv(interrupt) -> _ => {
                    self.jobs.values().for_each(ManagedJob::stop);
                    // Asked once is enough (and a closed channel would answer at once).
                    interrupt = never();
                }
            }
        }
        Ok(self
            .jobs
            .values()
            .map(|j| {
                (
                    j.record.name.clone(),
                    j.record.state,
                    j.record.error.clone(),
                )
            })
            .collect())
    }

    /// Stops every running job with a final checkpoint and waits for it.
    pub fn stop_all(&mut self) -> Result<()> {
        self.jobs.values().for_each(ManagedJob::stop);
        self.wait_all(&never()).map(|_| ())
    }

    /// Checkpoint counters of a job (as it ended, once it ended).
    pub fn checkpoints(&self, name: &str) -> Option<StatsSnapshot> {
        let job = self.jobs.get(name)?;
        match &job.handle {
            Some(h) => h.checkpoints(),
            None => job.last_checkpoints.clone(),
        }
    }

    /// How often a job was restarted after failures.
    pub fn restarts(&self, name: &str) -> Option<u32> {
        let job = self.jobs.get(name)?;
        Some(job.handle.as_ref().map_or(job.restarts, |h| h.restarts()))
    }

    /// The failure a job's last restart followed.
    pub fn last_failure(&self, name: &str) -> Option<String> {
        let job = self.jobs.get(name)?;
        match &job.handle {
            Some(h) => h.last_failure(),
            None => job.last_failure.clone(),
        }
    }

    /// Counters of a job (as it ended, once it ended).
    pub fn metrics(&self, name: &str) -> Option<MetricsSnapshot> {
        self.jobs.get(name)?.metrics()
    }

    /// A handle that reads the jobs from other threads without this manager's lock (held
    /// while a caller waits for the jobs).
    pub fn registry(&self) -> JobRegistry {
        self.registry.clone()
    }
}

/// One stage of a job's dataflow.
#[derive(Debug, Clone)]
pub struct StageShape {
    pub name: String,
    pub parallelism: usize,
    /// Upstream stages and how rows reach this one (forward, hash keys, single).
    pub inputs: Vec<(usize, String)>,
    /// The source's and the chained operators' descriptions.
    pub operators: Vec<String>,
}

impl StageShape {
    fn of(graph: &JobGraph) -> Vec<StageShape> {
        graph
            .stages
            .iter()
            .map(|s| StageShape {
                name: s.name.clone(),
                parallelism: s.parallelism,
                inputs: s
                    .inputs
                    .iter()
                    .map(|i| (i.from, i.partitioning.to_string()))
                    .collect(),
                operators: s
                    .source
                    .iter()
                    .map(|src| src.factory.describe())
                    .chain(s.chain.iter().map(|f| f.describe()))
                    .collect(),
            })
            .collect()
    }
}

/// The jobs of a process as other threads read them (`/metrics`, the dashboard): what each
/// is, and a read-only handle on its counters. Updated when a job starts, ends or is removed.
#[derive(Clone, Default)]
pub struct JobRegistry(std::sync::Arc<std::sync::Mutex<BTreeMap<String, Observed>>>);

#[derive(Clone)]
struct Observed {
    record: JobRecord,
    shape: Vec<StageShape>,
    dir: PathBuf,
    watch: SupervisedWatch,
    running: bool,
}

impl JobRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Observed>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn started(&self, observed: Observed) {
        self.lock().insert(observed.record.name.clone(), observed);
    }

    fn ended(&self, record: &JobRecord) {
        if let Some(o) = self.lock().get_mut(&record.name) {
            o.running = false;
            o.record = record.clone();
        }
    }

    fn removed(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Each job this process runs or ran, by name, with its counters now (as they ended,
    /// for a job that ended).
    pub fn views(&self) -> Vec<JobView> {
        let observed: Vec<Observed> = self.lock().values().cloned().collect();
        observed
            .into_iter()
            .map(|o| {
                let w = &o.watch;
                JobView {
                    name: o.record.name.clone(),
                    state: if o.running {
                        JobState::Running
                    } else {
                        o.record.state
                    },
                    statement: o.record.statement.clone(),
                    exactly_once: o.record.settings.exactly_once,
                    checkpoint_interval_ms: o.record.settings.checkpoint_interval.as_millis()
                        as u64,
                    error: o.record.error.clone(),
                    restarts: w.restarts(),
                    last_failure: w.last_failure(),
                    metrics: w.metrics(),
                    stages: w.stages(),
                    shape: o.shape,
                    checkpoints: w.checkpoints(),
                    history: w.checkpoint_history(),
                    dir: o.dir,
                }
            })
            .collect()
    }
}

/// A job as `/metrics` and the dashboard show it.
#[derive(Debug, Clone)]
pub struct JobView {
    pub name: String,
    pub state: JobState,
    pub statement: String,
    pub exactly_once: bool,
    pub checkpoint_interval_ms: u64,
    pub error: Option<String>,
    pub restarts: u32,
    /// The failure the last restart followed.
    pub last_failure: Option<String>,
    pub metrics: MetricsSnapshot,
    /// Per stage, while it runs (empty after).
    pub stages: Vec<StageSnapshot>,
    pub shape: Vec<StageShape>,
    pub checkpoints: Option<StatsSnapshot>,
    /// The newest completed checkpoints of the running attempt, oldest first.
    pub history: Vec<CheckpointRecord>,
    /// Its directory (state and checkpoints).
    pub dir: PathBuf,
}
