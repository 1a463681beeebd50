//! Starting and supervising a job: channels between stage instances, one thread per instance.

mod chain;
mod input_gate;
mod outlet;
mod split_clock;
mod supervisor;
mod task;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::checkpoint::{
    commit, CheckpointConfig, CheckpointStats, Committer, Coordinator, JobDir, Manifest,
    SourceCheckpoint, StatsSnapshot, TaskId, TaskLinks,
};
use crate::error::{EngineError, Result};
use crate::graph::{JobGraph, Partitioning, TaskInfo};
use crate::message::{Message, WATERMARK_MIN};
use crate::metrics::{JobMetrics, MetricsSnapshot};
use crate::runtime::split_clock::SplitClock;
use crate::state::{RestoreSet, RocksDbStateBackend, StateBackend, StateHandle, TaskState};

pub use chain::Chain;
pub use input_gate::{GateEvent, InputGate};
pub use outlet::{partition_of_rows, Outlet, TaskExit};
pub use supervisor::{spawn_supervised, RestartPolicy, SupervisedJob};
use task::{run_operator_task, run_source_task, JobShared, Outlets, SourceControl, TaskCheckpoint};

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
    /// Bytes of window state a task keeps in memory before spilling to its store.
    pub memory_budget: usize,
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
            let store: Arc<dyn StateBackend> = Arc::new(RocksDbStateBackend::open(working)?);
            let restore = RestoreSet {
                stores: vec![Arc::clone(&store)],
                repartition: None,
            };
            return Ok(TaskState::durable_open(store, restore, budget));
        }
        let stores = old
            .iter()
            .map(|(_, dir)| {
                RocksDbStateBackend::open_read_only(&self.dir.checkpoints().join(dir))
                    .map(|s| Arc::new(s) as Arc<dyn StateBackend>)
            })
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

/// Copies a RocksDB checkpoint: SST files are immutable, so they are hard-linked; the rest
/// (manifest, options, log) is copied.
fn link_copy(from: &Path, to: &Path) -> Result<()> {
    let io = |what: &str, p: &Path, e| EngineError::io(format!("{what} '{}'", p.display()), e);
    std::fs::create_dir_all(to).map_err(|e| io("cannot create", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| io("cannot read", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("cannot read", from, e))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let linked =
            src.extension().is_some_and(|e| e == "sst") && std::fs::hard_link(&src, &dst).is_ok();
        if !linked {
            std::fs::copy(&src, &dst).map_err(|e| io("cannot copy", &src, e))?;
        }
    }
    Ok(())
}

/// Starts every task of `graph` and returns at once. A durable job (`config.checkpoint`)
/// whose directory holds a complete checkpoint resumes from it: sinks recover (commit what
/// that checkpoint pre-committed, abort the rest), sources rewind, state is restored.
pub fn spawn_job(graph: JobGraph, config: JobConfig) -> Result<JobHandle> {
    let metrics = Arc::new(JobMetrics::default());
    let shared = Arc::new(JobShared::default());

    let committers: BTreeMap<(usize, usize), Arc<dyn Committer>> = graph
        .stages
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            s.chain
                .iter()
                .enumerate()
                .filter_map(move |(oi, f)| f.committer().map(|c| ((si, oi), c)))
        })
        .collect();
    let mut notes = Vec::new();
    let restore = match &config.checkpoint {
        Some(c) => {
            let dir = JobDir::new(c.dir.clone());
            let (manifest, skipped) = dir.latest_manifest()?;
            notes.extend(skipped);
            manifest.map(|manifest| Restore { manifest, dir })
        }
        None => None,
    };
    if let Some(r) = &restore {
        r.check(&graph)?;
        commit(&committers, &r.manifest.commits, true)?;
        if r.manifest.finished {
            // The job had run to its end: the recovery above finished its commits.
            return Ok(JobHandle {
                name: graph.name,
                threads: Vec::new(),
                control: JobControl {
                    shared,
                    metrics,
                    checkpoints: Some(Arc::new(CheckpointStats::default())),
                },
                restored: Some(r.manifest.epoch),
                notes,
            });
        }
    } else if config.checkpoint.is_some() {
        // A fresh start: sinks abort whatever an earlier run of this job left behind.
        commit(&committers, &[], true)?;
    }
    let restored_epoch = restore.as_ref().map_or(0, |r| r.manifest.epoch);
    let job_dir = config
        .checkpoint
        .as_ref()
        .map(|c| JobDir::new(c.dir.clone()));
    if let Some(dir) = &job_dir {
        let working = dir.root().join("state");
        if working.exists() {
            std::fs::remove_dir_all(&working)
                .map_err(|e| EngineError::io(format!("cannot clear '{}'", working.display()), e))?;
        }
    }
    let (report_tx, report_rx) = crossbeam_channel::unbounded();
    let mut barrier_senders = Vec::new();

    // receivers[stage][instance] (with the logical input of each channel) and
    // outlets[stage][instance] (one outlet per consumer edge).
    let mut receivers: Vec<Vec<TaskInputs>> = graph
        .stages
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();
    let mut outlets: Vec<Vec<Vec<outlet::Outlet>>> = graph
        .stages
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();

    for (consumer, stage) in graph.stages.iter().enumerate() {
        for (logical, input) in stage.inputs.iter().enumerate() {
            if input.from >= consumer {
                return Err(EngineError::Internal(format!(
                    "stage {consumer} reads stage {} which does not come before it",
                    input.from
                )));
            }
            let upstream = graph.stages[input.from].parallelism;
            let downstream = stage.parallelism;
            match &input.partitioning {
                Partitioning::Forward if upstream != downstream => {
                    return Err(EngineError::Internal(format!(
                        "forward edge between parallelism {upstream} and {downstream}"
                    )))
                }
                Partitioning::Single if downstream != 1 => {
                    return Err(EngineError::Internal("merge into a parallel stage".into()))
                }
                _ => {}
            }
            for (up, up_outlets) in outlets[input.from].iter_mut().enumerate() {
                let targets: Vec<usize> = match &input.partitioning {
                    Partitioning::Forward => vec![up],
                    _ => (0..downstream).collect(),
                };
                let mut senders: Vec<Sender<Message>> = Vec::with_capacity(targets.len());
                for down in targets {
                    let (tx, rx) = bounded(config.channel_capacity);
                    senders.push(tx);
                    receivers[consumer][down].push((rx, logical));
                }
                up_outlets.push(outlet::Outlet::new(input.partitioning.clone(), senders));
            }
        }
    }

    let stage_shapes: Vec<(String, usize)> = graph
        .stages
        .iter()
        .map(|s| (s.name.clone(), s.parallelism))
        .collect();
    let mut threads = Vec::new();
    let abort = |shared: &JobShared, e: EngineError| {
        shared.cancel.store(true, Ordering::Relaxed);
        e
    };
    // Sources told when a checkpoint with their positions completed (group offsets).
    let source_hooks: Vec<(usize, Arc<dyn crate::graph::SourceFactory>)> = graph
        .stages
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.source.as_ref().map(|src| (i, Arc::clone(&src.factory))))
        .collect();
    for (si, stage) in graph.stages.into_iter().enumerate().rev() {
        let stage_outlets = std::mem::take(&mut outlets[si]);
        let stage_inputs = std::mem::take(&mut receivers[si]);
        for (instance, (outs, ins)) in stage_outlets.into_iter().zip(stage_inputs).enumerate() {
            let task = TaskId {
                stage: si,
                instance,
            };
            let task_state = match (&job_dir, &restore) {
                (Some(dir), Some(r)) => r.task_state(
                    task,
                    stage.parallelism,
                    &dir.working_state(task),
                    config.memory_budget,
                ),
                (Some(dir), None) => Ok(TaskState::durable(
                    dir.working_state(task),
                    None,
                    config.memory_budget,
                )),
                _ => Ok(TaskState::temporary(config.memory_budget)),
            };
            let task_state = Arc::new(task_state.map_err(|e| abort(&shared, e))?);
            let info = TaskInfo {
                job: graph.name.clone(),
                stage: stage.name.clone(),
                instance,
                parallelism: stage.parallelism,
                metrics: Arc::clone(&metrics),
                state: StateHandle::new(Arc::clone(&task_state), 0),
                restored_epoch,
            };
            let ops = stage
                .chain
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let mut op_info = info.clone();
                    op_info.state = StateHandle::new(Arc::clone(&task_state), i as u8);
                    f.create(&op_info)
                })
                .collect::<Result<Vec<_>>>()
                .map_err(|e| abort(&shared, e))?;
            let chain = Chain::new(ops);
            let outs = Outlets(outs);
            let shared_t = Arc::clone(&shared);
            let thread_name = format!("weir-{}-{}-{instance}", si, stage.name);
            let location = format!("stage {si} ({}), instance {instance}", stage.name);
            let checkpoint = job_dir.as_ref().map(|dir| TaskCheckpoint {
                task,
                reports: report_tx.clone(),
                state: Arc::clone(&task_state),
                dir: dir.clone(),
                last_epoch: restored_epoch,
            });
            let spawned = if let Some(src) = &stage.source {
                let mut clock = SplitClock::new(src.event_time.clone(), src.factory.idle_timeout());
                let reader = match restore.as_ref().map(|r| r.source_positions(si)) {
                    Some(old) if !old.is_empty() && old.len() != stage.parallelism => {
                        // Rescaled: every instance sees every old position and split
                        // watermark, and takes its own splits' (a split's watermark only
                        // rises, so the maximum is the right merge).
                        let positions: Vec<&[u8]> =
                            old.iter().map(|p| p.position.as_slice()).collect();
                        let watermark = old
                            .iter()
                            .map(|p| p.watermark)
                            .min()
                            .unwrap_or(WATERMARK_MIN);
                        let splits: Vec<(crate::source::SplitId, i64)> =
                            old.iter().flat_map(|p| p.splits.iter().copied()).collect();
                        clock.restore(watermark, &splits);
                        src.factory.create_rescaled(&info, &positions)
                    }
                    _ => {
                        let restored = restore.as_ref().and_then(|r| r.source_position(task));
                        if let Some(p) = restored {
                            clock.restore(p.watermark, &p.splits);
                        }
                        src.factory
                            .create(&info, restored.map(|p| p.position.as_slice()))
                    }
                }
                .map_err(|e| abort(&shared, e))?;
                let control = checkpoint.map(|checkpoint| {
                    let (tx, rx) = bounded(4);
                    barrier_senders.push((task, tx));
                    SourceControl {
                        barriers: rx,
                        checkpoint,
                    }
                });
                std::thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || {
                        let r = run_source_task(
                            &info,
                            reader,
                            clock,
                            chain,
                            outs,
                            &shared_t.cancel,
                            control,
                        );
                        shared_t.task_ended(&location, r);
                    })
            } else {
                let gate = InputGate::new(ins, config.align_barriers);
                std::thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || {
                        let r = run_operator_task(gate, chain, outs, checkpoint);
                        shared_t.task_ended(&location, r);
                    })
            };
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => return Err(abort(&shared, EngineError::io("starting a task thread", e))),
            }
        }
    }
    drop(report_tx);
    let checkpoints = match config.checkpoint {
        Some(c) => {
            let links = TaskLinks {
                barriers: barrier_senders,
                reports: report_rx,
            };

            let coordinator = Coordinator::new(
                graph.name.clone(),
                c,
                stage_shapes,
                links,
                committers,
                restored_epoch,
            )
            .with_source_hooks(source_hooks);
            let stats = coordinator.stats();
            let shared_c = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("weir-{}-checkpoints", graph.name))
                .spawn(move || {
                    let r = coordinator.run(
                        || shared_c.cancel.load(Ordering::Relaxed),
                        || shared_c.stop.load(Ordering::Relaxed),
                    );
                    shared_c.task_ended("checkpoints", r.map(|_| ()).map_err(TaskExit::Failed));
                });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    return Err(abort(
                        &shared,
                        EngineError::io("starting the checkpoint coordinator", e),
                    ))
                }
            }
            Some(stats)
        }
        None => None,
    };
    Ok(JobHandle {
        name: graph.name,
        threads,
        control: JobControl {
            shared,
            metrics,
            checkpoints,
        },
        restored: restore.map(|r| r.manifest.epoch),
        notes,
    })
}
