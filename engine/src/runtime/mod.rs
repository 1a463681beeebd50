//! Starting and supervising a job: channels between stage instances, one thread per instance.

mod chain;
mod input_gate;
mod outlet;
mod spawn;
mod split_clock;
mod supervisor;
mod task;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use crate::checkpoint::{
    CheckpointConfig, CheckpointStats, JobDir, Manifest, SourceCheckpoint, StatsSnapshot, TaskId,
};
use crate::error::{EngineError, Result};
use crate::graph::JobGraph;
use crate::message::Message;
use crate::metrics::{JobMetrics, MetricsSnapshot};
use crate::state::{
    is_part_file, open_checkpoint, RestoreSet, RocksDbStateBackend, StateBackend, TaskState,
};

pub use chain::Chain;
pub use input_gate::{GateEvent, InputGate};
pub use outlet::{partition_of_rows, Outlet, TaskExit};
pub use spawn::{spawn_job, spawn_thread_job, ThreadJob};
pub use supervisor::{spawn_supervised, RestartPolicy, SupervisedJob, SupervisedWatch};
use task::JobShared;

/// The input channels of one task, each with the logical input it belongs to.
type TaskInputs = Vec<(Receiver<Message>, usize)>;

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Messages buffered per channel before the sender blocks (backpressure).
    pub channel_capacity: usize,
    /// Exactly-once: align barriers at every task with several inputs. At-least-once: don't
    /// (a replay after a failure may then duplicate output, never lose it).
    pub align_barriers: bool,
    /// Bytes of state the job keeps in memory before spilling to its stores, shared evenly by
    /// its tasks.
    pub memory_budget: usize,
    /// `idle_timeout` of sources whose table sets none (`SET idle_timeout`); `None`: a silent
    /// partition holds the watermark back, as without the setting.
    pub idle_timeout: Option<std::time::Duration>,
    /// Checkpoints of a durable job; `None`: the job keeps none (ad-hoc queries). A durable
    /// job whose directory holds a manifest resumes from the newest complete one.
    pub checkpoint: Option<CheckpointConfig>,
}

/// Default working-set budget per task: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            channel_capacity: 16,
            align_barriers: true,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            idle_timeout: None,
            checkpoint: None,
        }
    }
}

/// A running job.
pub struct JobHandle {
    name: String,
    threads: Vec<JoinHandle<()>>,
    control: JobControl,
    restored: Option<u64>,
    notes: Vec<String>,
}

/// Stops a running job and reads its counters; cloned freely, so one thread can stop a job
/// another waits for.
#[derive(Clone)]
pub struct JobControl {
    shared: Arc<JobShared>,
    metrics: Arc<JobMetrics>,
    checkpoints: Option<Arc<CheckpointStats>>,
}

impl JobControl {
    /// The job's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Checkpoint counters of a durable job.
    pub fn checkpoints(&self) -> Option<StatsSnapshot> {
        self.checkpoints.as_ref().map(|c| c.snapshot())
    }

    /// Each stage's counters now.
    pub fn stages(&self) -> Vec<crate::metrics::StageSnapshot> {
        self.metrics.stages()
    }

    /// The newest completed checkpoints of a durable job, oldest first.
    pub fn checkpoint_history(&self) -> Vec<crate::checkpoint::CheckpointRecord> {
        self.checkpoints
            .as_ref()
            .map(|c| c.history())
            .unwrap_or_default()
    }

    /// See [`JobHandle::cancel`].
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::SeqCst);
    }

    /// See [`JobHandle::stop`].
    pub fn stop(&self) {
        if self.checkpoints.is_some() {
            self.shared.stop.store(true, Ordering::SeqCst);
        } else {
            self.cancel();
        }
    }
}

impl JobHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle that stops the job and reads its counters while this one waits for it.
    pub fn control(&self) -> JobControl {
        self.control.clone()
    }

    /// The job's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.control.metrics()
    }

    /// Checkpoint counters of a durable job.
    pub fn checkpoints(&self) -> Option<StatsSnapshot> {
        self.control.checkpoints()
    }

    /// The epoch the job resumed from, if it restored a checkpoint.
    pub fn restored_epoch(&self) -> Option<u64> {
        self.restored
    }

    /// What the restore met that a user should know (torn manifests skipped).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Asks every task to stop. [`JobHandle::wait`] then returns [`EngineError::Cancelled`].
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Stops a durable job with a final checkpoint, so that resuming it loses nothing; a job
    /// without checkpoints is cancelled. [`JobHandle::wait`] returns when it stopped.
    pub fn stop(&self) {
        self.control.stop();
    }

    /// Whether all tasks have exited.
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stops a job whose reader has all it wanted (`done`, e.g. a LIMIT was reached), or waits
    /// for it to end. A job stopped this way counts as finished, not cancelled.
    pub fn finish_early_or_wait(self, done: bool) -> Result<MetricsSnapshot> {
        if !done {
            return self.wait();
        }
        self.cancel();
        let metrics = Arc::clone(&self.control.metrics);
        match self.wait() {
            Ok(m) => Ok(m),
            Err(e) if matches!(e.root(), EngineError::Cancelled) => Ok(metrics.snapshot()),
            Err(e) => Err(e),
        }
    }

    /// Waits for every task and returns the first error, if any.
    pub fn wait(self) -> Result<MetricsSnapshot> {
        for t in self.threads {
            if t.join().is_err() {
                return Err(EngineError::Internal("a task thread panicked".into()));
            }
        }
        let shared = &self.control.shared;
        let err = shared.error.lock().ok().and_then(|mut e| e.take());
        match err {
            Some(e) => Err(e),
            None if shared.cancel.load(Ordering::Relaxed) => Err(EngineError::Cancelled),
            None => Ok(self.control.metrics()),
        }
    }
}

/// What a restart restores: the manifest and, per stage, how to reach the old state.
struct Restore {
    manifest: Manifest,
    dir: JobDir,
}

impl Restore {
    /// Checks that the job planned now has the shape the checkpoint was taken of.
    fn check(&self, graph: &JobGraph) -> Result<()> {
        let m = &self.manifest;
        let same = m.stages.len() == graph.stages.len()
            && m.stages.iter().zip(&graph.stages).all(|((name, p), s)| {
                name == &s.name
                    && (*p == s.parallelism
                        || s.source
                            .as_ref()
                            .is_none_or(|src| src.factory.splits_movable()))
            });
        if same {
            Ok(())
        } else {
            let now: Vec<(&str, usize)> = graph
                .stages
                .iter()
                .map(|s| (s.name.as_str(), s.parallelism))
                .collect();
            Err(EngineError::BadInput(format!(
                "job '{}' was planned differently when checkpoint {} was taken \
                 (stages then: {:?}, now: {now:?}); it cannot resume from it",
                graph.name, m.epoch, m.stages
            )))
        }
    }

    fn source_position(&self, task: TaskId) -> Option<&SourceCheckpoint> {
        self.manifest.sources.iter().find(|s| s.task == task)
    }

    /// The positions of every instance of source stage `stage`.
    fn source_positions(&self, stage: usize) -> Vec<&SourceCheckpoint> {
        self.manifest
            .sources
            .iter()
            .filter(|s| s.task.stage == stage)
            .collect()
    }

    /// The state a task restores: in place (its old instance's checkpoint copied into its
    /// working store) when the stage's parallelism is unchanged, else every old instance's
    /// checkpoint, read-only, to be filtered by key.
    fn task_state(
        &self,
        task: TaskId,
        parallelism: usize,
        working: &Path,
        budget: usize,
    ) -> Result<TaskState> {
        let old: Vec<&(TaskId, String)> = self
            .manifest
            .state
            .iter()
            .filter(|(t, _)| t.stage == task.stage)
            .collect();
        let old_parallelism = self.manifest.stages[task.stage].1;
        if old.is_empty() {
            return Ok(TaskState::durable(working.to_path_buf(), None, budget));
        }
        if old_parallelism == parallelism {
            let Some((_, dir)) = old.iter().find(|(t, _)| *t == task) else {
                return Ok(TaskState::durable(working.to_path_buf(), None, budget));
            };
            link_copy(&self.dir.checkpoints().join(dir), working)?;
            let store: Arc<dyn StateBackend> =
                Arc::new(RocksDbStateBackend::open_working(working)?);
            let restore = RestoreSet {
                stores: vec![Arc::clone(&store)],
                repartition: None,
            };
            return Ok(TaskState::durable_open(store, restore, budget));
        }
        let stores = old
            .iter()
            .map(|(_, dir)| open_checkpoint(&self.dir.checkpoints().join(dir)))
            .collect::<Result<Vec<_>>>()?;
        let restore = RestoreSet {
            stores,
            repartition: Some((task.instance, parallelism)),
        };
        Ok(TaskState::durable(
            working.to_path_buf(),
            Some(restore),
            budget,
        ))
    }
}

/// Copies a RocksDB checkpoint: SST and blob files are immutable, so they are hard-linked;
/// the rest (manifest, options, log) is copied.
pub(crate) fn link_copy(from: &Path, to: &Path) -> Result<()> {
    let io = |what: &str, p: &Path, e| EngineError::io(format!("{what} '{}'", p.display()), e);
    std::fs::create_dir_all(to).map_err(|e| io("cannot create", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| io("cannot read", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("cannot read", from, e))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        // Part files too: a restored store never appends to them (it writes new files).
        let immutable =
            src.extension().is_some_and(|e| e == "sst" || e == "blob") || is_part_file(&src);
        let linked = immutable && std::fs::hard_link(&src, &dst).is_ok();
        if !linked {
            std::fs::copy(&src, &dst).map_err(|e| io("cannot copy", &src, e))?;
        }
    }
    Ok(())
}
