//! A job's record: `DATA_DIR/jobs/<name>/job.json` holds everything needed to plan the job
//! again (the DDL of the tables it reads, its statement, the settings it was created with, the
//! directory relative paths were resolved against) and its state. Its checkpoints live beside
//! the record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_engine::atomic_file::atomic_write;

use crate::error::{PlanError, Result};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    /// Stopped with a final checkpoint (Ctrl-C, SIGTERM); resumed at the next start.
    Stopped,
    /// Stopped for good by CANCEL JOB (after a final checkpoint: what it committed stays);
    /// never resumed.
    Cancelled,
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
            JobState::Cancelled => "cancelled",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
        }
    }
}

/// Settings a job keeps for its whole life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSettings {
    pub parallelism: usize,
    #[serde(rename = "checkpoint_interval_ms", with = "millis")]
    pub checkpoint_interval: Duration,
    #[serde(rename = "delivery", with = "delivery")]
    pub exactly_once: bool,
    pub checkpoints_retained: usize,
    #[serde(default = "default_memory_budget")]
    pub memory_budget: usize,
    /// `SET idle_timeout` when the job was created (tables' own `idle_timeout` win).
    #[serde(
        default,
        rename = "idle_timeout_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    /// `runtime_mode = 'streaming'` when the job was created: a GROUP BY without a window
    /// keeps its result up to date even over bounded input.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
    /// `window_emit = 'on_update'` when the job was created: window aggregates emit early.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early_fire: bool,
    /// `state_ttl` of the job (its WITH, else the session's when it was created).
    #[serde(
        default,
        rename = "state_ttl_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub state_ttl: Option<Duration>,
    /// `early_fire_interval` of the job (its WITH, else the session's when it was created).
    #[serde(
        default,
        rename = "early_fire_interval_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub early_fire_interval: Option<Duration>,
    /// `mini_batch` of the job (its WITH, else the session's when it was created).
    #[serde(
        default,
        rename = "mini_batch_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub mini_batch: Option<Duration>,
}

impl JobSettings {
    /// The settings that change what the job's query computes.
    pub fn modes(&self) -> crate::stream_plan::QueryModes {
        crate::stream_plan::QueryModes {
            streaming: self.streaming,
            early_fire: self.early_fire,
            state_ttl: self.state_ttl,
            early_fire_interval: self.early_fire_interval,
            mini_batch: self.mini_batch,
        }
    }
}

fn default_memory_budget() -> usize {
    weir_engine::runtime::DEFAULT_MEMORY_BUDGET
}

/// A duration as whole milliseconds.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// An optional duration as whole milliseconds.
mod optional_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// Exactly-once as `"exactly_once"`, at-least-once as `"at_least_once"`.
mod delivery {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(exactly_once: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *exactly_once {
            "exactly_once"
        } else {
            "at_least_once"
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match String::deserialize(d)?.as_str() {
            "exactly_once" => Ok(true),
            "at_least_once" => Ok(false),
            other => Err(serde::de::Error::custom(format!(
                "unknown delivery '{other}'"
            ))),
        }
    }
}

/// What is stored about a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Identifies this creation of the job (see `SinkContext::run_id`); empty in records
    /// written before it existed.
    #[serde(default)]
    pub run_id: String,
}

/// A new run id: the creation time in nanoseconds, in hex.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}", nanos as u64 ^ ((std::process::id() as u64) << 48))
}

/// A directory of a job under the data directory.
pub fn job_dir(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("jobs").join(name)
}

fn io(what: &str, path: &Path, e: std::io::Error) -> PlanError {
    PlanError::io(format!("cannot {what} '{}'", path.display()), e)
}

impl JobRecord {
    /// Writes the record atomically ([`atomic_write`]).
    pub fn save(&self, data_dir: &Path) -> Result<()> {
        let dir = job_dir(data_dir, &self.name);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        let path = dir.join("job.json");
        // Passwords are kept apart, in the data directory's private secrets file.
        let seal = |t: &String| crate::secrets::seal(data_dir, t);
        let sealed = JobRecord {
            statement: seal(&self.statement)?,
            tables: self.tables.iter().map(seal).collect::<Result<_>>()?,
            ..self.clone()
        };
        let text = serde_json::to_string_pretty(&sealed)
            .map_err(|e| PlanError::Internal(e.to_string()))?;
        atomic_write(&path, text.as_bytes()).map_err(|e| io("write", &path, e))
    }

    /// The record with the passwords its statements refer to put back.
    fn unsealed(mut self, data_dir: &Path) -> Result<Self> {
        self.statement = crate::secrets::unseal(data_dir, &self.statement)?;
        for t in &mut self.tables {
            *t = crate::secrets::unseal(data_dir, t)?;
        }
        Ok(self)
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
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<JobRecord>(&t).map_err(|e| e.to_string()))
                .and_then(|r| r.unsealed(data_dir).map_err(|e| e.to_string()));
            match parsed {
                Ok(r) => jobs.push(r),
                Err(e) => problems.push(format!("'{}' is unreadable: {e}", path.display())),
            }
        }
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((jobs, problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_keeps_the_earlier_file_format() {
        let dir = tempfile::tempdir().unwrap();
        let record = JobRecord {
            name: "s".into(),
            statement: "CREATE SINK s WITH (connector = 'blackhole') AS SELECT 1".into(),
            tables: vec!["CREATE TABLE t (a INT) WITH (connector = 'file')".into()],
            settings: JobSettings {
                parallelism: 3,
                checkpoint_interval: Duration::from_millis(250),
                exactly_once: false,
                checkpoints_retained: 2,
                memory_budget: 1 << 20,
                idle_timeout: Some(Duration::from_secs(10)),
                streaming: false,
                early_fire: false,
                state_ttl: None,
                early_fire_interval: None,
                mini_batch: Some(Duration::from_millis(500)),
            },
            base_dir: PathBuf::from("/work"),
            state: JobState::Stopped,
            error: None,
            run_id: "1a2b".into(),
        };
        record.save(dir.path()).unwrap();
        let (loaded, problems) = JobRecord::load_all(dir.path()).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].settings, record.settings);
        assert_eq!(loaded[0].state, JobState::Stopped);
        assert_eq!(loaded[0].statement, record.statement);
        assert_eq!(loaded[0].run_id, "1a2b");
        let text = std::fs::read_to_string(dir.path().join("jobs/s/job.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["settings"]["checkpoint_interval_ms"], 250);
        assert_eq!(v["settings"]["delivery"], "at_least_once");
        assert_eq!(v["settings"]["idle_timeout_ms"], 10_000);
        assert_eq!(v["state"], "stopped");
        // A record without memory_budget (written before it existed) gets the default.
        let old = text.replace("\"memory_budget\": 1048576", "\"x\": 0");
        std::fs::write(dir.path().join("jobs/s/job.json"), old).unwrap();
        let (loaded, _) = JobRecord::load_all(dir.path()).unwrap();
        assert_eq!(loaded[0].settings.memory_budget, default_memory_budget());
    }
}
