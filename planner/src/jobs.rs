//! Persistent jobs: a sink job is recorded under `DATA_DIR/jobs/<name>/job.json` with
//! everything needed to plan it again (the DDL of the tables it reads, its statement, the
//! settings it was created with, the directory relative paths were resolved against) and its
//! state. Its checkpoints live beside the record. Starting weir on the data directory resumes
//! every job whose state is not `finished`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use weir_engine::checkpoint::{JobDir, StatsSnapshot};
use weir_engine::runtime::SupervisedJob;
use weir_engine::MetricsSnapshot;

use crate::error::{PlanError, Result};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    /// Stopped with a final checkpoint (Ctrl-C, CANCEL JOB); resumed at the next start.
    Stopped,
    /// Ran to its end; every result committed.
    Finished,
    /// Failed; resumed at the next start from its last checkpoint.
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Stopped => "stopped",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => JobState::Running,
            "stopped" => JobState::Stopped,
            "finished" => JobState::Finished,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

/// Settings a job keeps for its whole life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSettings {
    pub parallelism: usize,
    pub checkpoint_interval: Duration,
    pub exactly_once: bool,
    pub checkpoints_retained: usize,
    pub memory_budget: usize,
}

/// What is stored about a job.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub name: String,
    /// The CREATE SINK statement.
    pub statement: String,
    /// DDL of every table in the catalog when the job was created.
    pub tables: Vec<String>,
    pub settings: JobSettings,
    /// Relative paths in the statements are resolved against this directory.
    pub base_dir: PathBuf,
    pub state: JobState,
    pub error: Option<String>,
}

/// A directory of a job under the data directory.
pub fn job_dir(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("jobs").join(name)
}

fn io(what: &str, path: &Path, e: std::io::Error) -> PlanError {
    PlanError::io(format!("cannot {what} '{}'", path.display()), e)
}

impl JobRecord {
    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "statement": self.statement,
            "tables": self.tables,
            "settings": {
                "parallelism": self.settings.parallelism,
                "checkpoint_interval_ms": self.settings.checkpoint_interval.as_millis() as u64,
                "delivery": if self.settings.exactly_once { "exactly_once" } else { "at_least_once" },
                "checkpoints_retained": self.settings.checkpoints_retained,
                "memory_budget": self.settings.memory_budget,
            },
            "base_dir": self.base_dir.to_string_lossy(),
            "state": self.state.as_str(),
            "error": self.error,
        })
    }

    fn from_json(v: &Value) -> Option<Self> {
        let s = &v["settings"];
        Some(Self {
            name: v["name"].as_str()?.to_string(),
            statement: v["statement"].as_str()?.to_string(),
            tables: v["tables"]
                .as_array()?
                .iter()
                .map(|t| t.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
            settings: JobSettings {
                parallelism: s["parallelism"].as_u64()? as usize,
                checkpoint_interval: Duration::from_millis(s["checkpoint_interval_ms"].as_u64()?),
                exactly_once: s["delivery"].as_str()? == "exactly_once",
                checkpoints_retained: s["checkpoints_retained"].as_u64()? as usize,
                memory_budget: s["memory_budget"]
                    .as_u64()
                    .map_or(weir_engine::runtime::DEFAULT_MEMORY_BUDGET, |b| b as usize),
            },
            base_dir: PathBuf::from(v["base_dir"].as_str()?),
            state: JobState::parse(v["state"].as_str()?)?,
            error: v["error"].as_str().map(str::to_string),
        })
    }

    /// Writes the record atomically (temporary file, fsync, rename).
    pub fn save(&self, data_dir: &Path) -> Result<()> {
        let dir = job_dir(data_dir, &self.name);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        let path = dir.join("job.json");
        let tmp = dir.join(".job.json.tmp");
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| PlanError::Internal(e.to_string()))?;
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| io("write", &path, e))
    }

    /// Every job recorded under the data directory, by name; unreadable records are reported.
    pub fn load_all(data_dir: &Path) -> Result<(Vec<JobRecord>, Vec<String>)> {
        let dir = data_dir.join("jobs");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Vec::new(), Vec::new()))
            }
            Err(e) => return Err(io("list", &dir, e)),
        };
        let mut jobs = Vec::new();
        let mut problems = Vec::new();
        for entry in entries.filter_map(|e| e.ok()) {
            let path = entry.path().join("job.json");
            let parsed = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| JobRecord::from_json(&v));
            match parsed {
                Some(r) => jobs.push(r),
                None => problems.push(format!("'{}' is missing or unreadable", path.display())),
            }
        }
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((jobs, problems))
    }
}

/// A job this process runs (or ran).
pub struct ManagedJob {
    pub record: JobRecord,
    /// The running job (its supervisor restarts it after failures that may pass).
    pub handle: Option<SupervisedJob>,
    /// Counters when the job ended.
    pub last_metrics: Option<MetricsSnapshot>,
    /// Checkpoint counters when the job ended.
    pub last_checkpoints: Option<StatsSnapshot>,
    pub last_epoch: u64,
    /// Restarts after failures, as the job ended.
    pub restarts: u32,
}

impl ManagedJob {
    /// Collects the outcome of a job whose tasks all ended, and records its new state.
    pub fn reap(&mut self, data_dir: &Path) -> Result<()> {
        let done = self.handle.as_ref().is_some_and(|h| h.is_finished());
        if !done {
            return Ok(());
        }
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        self.last_epoch = handle
            .checkpoints()
            .map_or(self.last_epoch, |c| c.last_epoch);
        self.last_metrics = Some(handle.metrics());
        self.last_checkpoints = handle.checkpoints();
        self.restarts = handle.restarts();
        let (state, error) = match handle.wait() {
            // Whether it ran to its end or stopped at a checkpoint, the newest manifest says.
            Ok(_) => {
                let dir = JobDir::new(job_dir(data_dir, &self.record.name));
                match dir.latest_manifest() {
                    Ok((Some(m), _)) if m.finished => (JobState::Finished, None),
                    _ => (JobState::Stopped, None),
                }
            }
            Err(weir_engine::EngineError::Cancelled) => (JobState::Stopped, None),
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

    /// Waits until the job's tasks ended, then reaps it.
    pub fn wait(&mut self, data_dir: &Path) -> Result<()> {
        while self.handle.as_ref().is_some_and(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.reap(data_dir)
    }

    /// The job's counters: live while it runs, else as it ended.
    pub fn metrics(&self) -> Option<MetricsSnapshot> {
        self.handle
            .as_ref()
            .map(|h| h.metrics())
            .or(self.last_metrics)
    }

    /// Epoch of its newest complete checkpoint.
    pub fn checkpoint_epoch(&self) -> u64 {
        self.handle
            .as_ref()
            .and_then(|h| h.checkpoints())
            .map_or(self.last_epoch, |c| c.last_epoch.max(self.last_epoch))
    }
}
