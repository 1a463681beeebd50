//! Starting a job: recover its sinks and find the checkpoint to resume from, connect the
//! stages with channels, start one thread per task instance (sources rewound, state
//! restored) and, for a durable job, the checkpoint coordinator.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender};

use super::outlet::Outlet;
use super::split_clock::SplitClock;
use super::task::{
    run_operator_task, run_source_task, JobShared, Outlets, SourceControl, TaskCheckpoint,
};
use super::{Chain, InputGate, JobConfig, JobControl, JobHandle, Restore, TaskInputs};
use crate::checkpoint::{
    commit, CheckpointStats, Committer, Coordinator, JobDir, TaskId, TaskLinks, TaskReport,
};
use crate::error::{EngineError, Result};
use crate::graph::{JobGraph, Partitioning, Stage, TaskInfo};
use crate::message::{Barrier, Message, WATERMARK_MIN};
use crate::metrics::{JobMetrics, TaskMetrics};
use crate::source::SourceReader;
use crate::state::{StateHandle, TaskState};

type Committers = BTreeMap<(usize, usize), Arc<dyn Committer>>;

/// Stack of a task thread (reserved, not committed, until used).
const TASK_STACK: usize = 16 << 20;

/// Starts every task of `graph` and returns at once. A durable job (`config.checkpoint`)
/// whose directory holds a complete checkpoint resumes from it: sinks recover (commit what
/// that checkpoint pre-committed, abort the rest), sources rewind, state is restored.
pub fn spawn_job(graph: JobGraph, config: JobConfig) -> Result<JobHandle> {
    let metrics = Arc::new(JobMetrics::for_stages(
        &graph
            .stages
            .iter()
            .map(|s| {
                let capacity = if s.source.is_some() {
                    0
                } else {
                    config.channel_capacity
                };
                (s.name.clone(), s.parallelism, capacity)
            })
            .collect::<Vec<_>>(),
    ));
    let shared = Arc::new(JobShared::default());
    let committers = committers(&graph);
    let mut notes = Vec::new();
    let restore = recover(&graph, &config, &committers, &mut notes)?;
    if let Some(r) = restore.as_ref().filter(|r| r.manifest.finished) {
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
    let (receivers, outlets) = connect(&graph, config.channel_capacity)?;
    let (report_tx, report_rx) = crossbeam_channel::unbounded();
    let mut launch = Launch {
        job: graph.name.clone(),
        config: &config,
        job_dir: job_dir.as_ref(),
        restore: restore.as_ref(),
        restored_epoch: restore.as_ref().map_or(0, |r| r.manifest.epoch),
        shared: &shared,
        metrics: &metrics,
        reports: report_tx,
        barriers: Vec::new(),
        threads: Vec::new(),
        task_budget: task_budget(config.memory_budget, &graph),
    };
    let started = launch.stages(&graph, receivers, outlets);
    let Launch {
        barriers,
        mut threads,
        restored_epoch,
        reports,
        ..
    } = launch;
    started.map_err(|e| abort(&shared, e))?;
    drop(reports);
    let checkpoints = match config.checkpoint {
        Some(c) => {
            let coordinator = Coordinator::new(
                graph.name.clone(),
                c,
                graph
                    .stages
                    .iter()
                    .map(|s| (s.name.clone(), s.parallelism))
                    .collect(),
                TaskLinks {
                    barriers,
                    reports: report_rx,
                },
                committers,
                restored_epoch,
            )
            .with_source_hooks(source_hooks(&graph));
            let stats = coordinator.stats();
            threads.push(spawn_coordinator(&graph.name, coordinator, &shared)?);
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

/// Cancels the tasks already started and passes the error on.
fn abort(shared: &JobShared, e: EngineError) -> EngineError {
    shared.cancel.store(true, Ordering::Relaxed);
    e
}

/// The committer of every sink in the graph, by (stage, operator).
fn committers(graph: &JobGraph) -> Committers {
    graph
        .stages
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            s.chain
                .iter()
                .chain(s.late_rows.as_ref())
                .enumerate()
                .filter_map(move |(oi, f)| f.committer().map(|c| ((si, oi), c)))
        })
        .collect()
}

/// The checkpoint a durable job resumes from, with its sinks recovered: what it
/// pre-committed is committed, the rest aborted (everything, on a fresh start).
fn recover(
    graph: &JobGraph,
    config: &JobConfig,
    committers: &Committers,
    notes: &mut Vec<String>,
) -> Result<Option<Restore>> {
    let Some(c) = &config.checkpoint else {
        return Ok(None);
    };
    let dir = JobDir::new(c.dir.clone());
    let (manifest, skipped) = dir.latest_manifest()?;
    notes.extend(skipped);
    // What a crash left of later checkpoints goes: the next ones are numbered from here.
    dir.discard_after(manifest.as_ref().map_or(0, |m| m.epoch))?;
    let restore = manifest.map(|manifest| Restore { manifest, dir });
    match &restore {
        Some(r) => {
            r.check(graph)?;
            commit(committers, &r.manifest.commits, true)?;
        }
        None => commit(committers, &[], true)?,
    }
    Ok(restore)
}

/// Sources told when a checkpoint with their positions completed (group offsets).
fn source_hooks(graph: &JobGraph) -> Vec<(usize, Arc<dyn crate::graph::SourceFactory>)> {
    graph
        .stages
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.source.as_ref().map(|src| (i, Arc::clone(&src.factory))))
        .collect()
}

/// Input channels (`[stage][instance]`, each with its logical input) and outlets
/// (`[stage][instance]`, one per consumer edge) for every edge of the graph.
#[allow(clippy::type_complexity)]
fn connect(
    graph: &JobGraph,
    capacity: usize,
) -> Result<(Vec<Vec<TaskInputs>>, Vec<Vec<Vec<Outlet>>>)> {
    let mut receivers: Vec<Vec<TaskInputs>> = graph
        .stages
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();
    let mut outlets: Vec<Vec<Vec<Outlet>>> = graph
        .stages
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for (consumer, stage) in graph.stages.iter().enumerate() {
        for (logical, input) in stage.inputs.iter().enumerate() {
            check_edge(graph, consumer, input.from, &input.partitioning)?;
            let downstream = stage.parallelism;
            for (up, up_outlets) in outlets[input.from].iter_mut().enumerate() {
                let targets: Vec<usize> = match &input.partitioning {
                    Partitioning::Forward => vec![up],
                    _ => (0..downstream).collect(),
                };
                let mut senders: Vec<Sender<Message>> = Vec::with_capacity(targets.len());
                for down in targets {
                    let (tx, rx) = bounded(capacity);
                    senders.push(tx);
                    receivers[consumer][down].push((rx, logical));
                }
                up_outlets.push(Outlet::new(input.partitioning.clone(), senders));
            }
        }
    }
    Ok((receivers, outlets))
}

/// An edge the runtime can build: upstream first, forward edges between equal
/// parallelisms, merges into a single instance.
fn check_edge(
    graph: &JobGraph,
    consumer: usize,
    from: usize,
    partitioning: &Partitioning,
) -> Result<()> {
    if from >= consumer {
        return Err(EngineError::Internal(format!(
            "stage {consumer} reads stage {from} which does not come before it"
        )));
    }
    let upstream = graph.stages[from].parallelism;
    let downstream = graph.stages[consumer].parallelism;
    match partitioning {
        Partitioning::Forward if upstream != downstream => Err(EngineError::Internal(format!(
            "forward edge between parallelism {upstream} and {downstream}"
        ))),
        Partitioning::Single if downstream != 1 => {
            Err(EngineError::Internal("merge into a parallel stage".into()))
        }
        _ => Ok(()),
    }
}

fn spawn_coordinator(
    job: &str,
    coordinator: Coordinator,
    shared: &Arc<JobShared>,
) -> Result<JoinHandle<()>> {
    let shared_c = Arc::clone(shared);
    std::thread::Builder::new()
        .name(format!("weir-{job}-checkpoints"))
        .spawn(move || {
            let r = coordinator.run(
                || shared_c.cancel.load(Ordering::Relaxed),
                || shared_c.stop.load(Ordering::Relaxed),
            );
            shared_c.task_ended(
                "checkpoints",
                r.map(|_| ()).map_err(super::TaskExit::Failed),
            );
        })
        .map_err(|e| {
            abort(
                shared,
                EngineError::io("starting the checkpoint coordinator", e),
            )
        })
}

/// What starting the tasks of a job shares.
struct Launch<'a> {
    job: String,
    config: &'a JobConfig,
    job_dir: Option<&'a JobDir>,
    restore: Option<&'a Restore>,
    restored_epoch: u64,
    shared: &'a Arc<JobShared>,
    metrics: &'a Arc<JobMetrics>,
    reports: Sender<TaskReport>,
    /// The barrier channel of each source task (durable jobs).
    barriers: Vec<(TaskId, Sender<Barrier>)>,
    threads: Vec<JoinHandle<()>>,
    /// The memory budget of each task that holds state: the job's, shared evenly.
    task_budget: usize,
}

/// Each task's share of the job's memory budget (`usize::MAX`: no budget).
fn task_budget(budget: usize, graph: &JobGraph) -> usize {
    if budget == usize::MAX {
        return budget;
    }
    // Shared by the tasks that hold working state; a source, a projection or a sink keeps
    // nothing between batches.
    let tasks: usize = graph
        .stages
        .iter()
        .filter(|s| s.chain.iter().any(|op| op.uses_memory_budget()))
        .map(|s| s.parallelism.max(1))
        .sum();
    (budget / tasks.max(1)).max(1)
}

impl Launch<'_> {
    /// Starts every instance of every stage, consumers before their producers.
    fn stages(
        &mut self,
        graph: &JobGraph,
        mut receivers: Vec<Vec<TaskInputs>>,
        mut outlets: Vec<Vec<Vec<Outlet>>>,
    ) -> Result<()> {
        for (si, stage) in graph.stages.iter().enumerate().rev() {
            let stage_outlets = std::mem::take(&mut outlets[si]);
            let stage_inputs = std::mem::take(&mut receivers[si]);
            for (instance, (outs, ins)) in stage_outlets.into_iter().zip(stage_inputs).enumerate() {
                let task = TaskId {
                    stage: si,
                    instance,
                };
                let metrics = TaskMetrics::new(Arc::clone(self.metrics), si, instance);
                let thread = self.task(task, stage, Outlets::new(outs, metrics), ins)?;
                self.threads.push(thread);
            }
        }
        Ok(())
    }

    /// The task's state: restored from the checkpoint, fresh on disk, or in memory.
    fn task_state(&self, task: TaskId, stage: &Stage) -> Result<Arc<TaskState>> {
        let budget = self.task_budget;
        let state = match (self.job_dir, self.restore) {
            (Some(dir), Some(r)) => {
                r.task_state(task, stage.parallelism, &dir.working_state(task), budget)
            }
            (Some(dir), None) => Ok(TaskState::durable(dir.working_state(task), None, budget)),
            _ => Ok(TaskState::temporary(budget)),
        };
        Ok(Arc::new(state?))
    }

    /// Starts one task instance on its own thread.
    fn task(
        &mut self,
        task: TaskId,
        stage: &Stage,
        outs: Outlets,
        ins: TaskInputs,
    ) -> Result<JoinHandle<()>> {
        let (si, instance) = (task.stage, task.instance);
        let task_state = self.task_state(task, stage)?;
        let info = TaskInfo {
            job: self.job.clone(),
            stage: stage.name.clone(),
            instance,
            parallelism: stage.parallelism,
            metrics: Arc::clone(self.metrics),
            state: StateHandle::new(Arc::clone(&task_state), 0),
            restored_epoch: self.restored_epoch,
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
            .collect::<Result<Vec<_>>>()?;
        let late = stage
            .late_rows
            .as_ref()
            .map(|f| {
                let mut op_info = info.clone();
                op_info.state = StateHandle::new(Arc::clone(&task_state), ops.len() as u8);
                f.create(&op_info)
            })
            .transpose()?;
        let chain = Chain::new(ops)
            .with_late_rows(late)
            .with_cancel(Arc::clone(self.shared));
        let shared = Arc::clone(self.shared);
        let location = format!("stage {si} ({}), instance {instance}", stage.name);
        let checkpoint = self.job_dir.map(|dir| TaskCheckpoint {
            task,
            reports: self.reports.clone(),
            state: Arc::clone(&task_state),
            dir: dir.clone(),
            last_epoch: self.restored_epoch,
        });
        // Evaluating an expression recurses over it (the front end allows 1000 levels).
        let builder = std::thread::Builder::new()
            .name(format!("weir-{si}-{}-{instance}", stage.name))
            .stack_size(TASK_STACK);
        let spawned = match &stage.source {
            Some(src) => {
                let idle_timeout = src.factory.idle_timeout().or(self.config.idle_timeout);
                let mut clock = SplitClock::new(src.event_time.clone(), idle_timeout);
                let reader = self.source_reader(task, stage, &info, &mut clock)?;
                let control = checkpoint.map(|checkpoint| {
                    let (tx, rx) = bounded(4);
                    self.barriers.push((task, tx));
                    SourceControl {
                        barriers: rx,
                        checkpoint,
                    }
                });
                builder.spawn(move || {
                    let r =
                        run_source_task(&info, reader, clock, chain, outs, &shared.cancel, control);
                    shared.task_ended(&location, r);
                })
            }
            None => {
                let gate = InputGate::new(ins, self.config.align_barriers);
                builder.spawn(move || {
                    let r = run_operator_task(gate, chain, outs, checkpoint);
                    shared.task_ended(&location, r);
                })
            }
        };
        spawned.map_err(|e| EngineError::io("starting a task thread", e))
    }

    /// A source task's reader, rewound to the checkpoint's positions, and its clock set to
    /// the watermarks that went with them.
    fn source_reader(
        &self,
        task: TaskId,
        stage: &Stage,
        info: &TaskInfo,
        clock: &mut SplitClock,
    ) -> Result<Box<dyn SourceReader>> {
        let Some(src) = &stage.source else {
            return Err(EngineError::Internal("not a source stage".into()));
        };
        let old = self
            .restore
            .map(|r| r.source_positions(task.stage))
            .unwrap_or_default();
        if !old.is_empty() && old.len() != stage.parallelism {
            // Rescaled: every instance sees every old position and split watermark, and
            // takes its own splits' (a split's watermark only rises, so the maximum is the
            // right merge).
            let positions: Vec<&[u8]> = old.iter().map(|p| p.position.as_slice()).collect();
            let watermark = old
                .iter()
                .map(|p| p.watermark)
                .min()
                .unwrap_or(WATERMARK_MIN);
            let splits: Vec<(crate::source::SplitId, i64)> =
                old.iter().flat_map(|p| p.splits.iter().copied()).collect();
            clock.restore(watermark, &splits);
            return src.factory.create_rescaled(info, &positions);
        }
        let restored = self.restore.and_then(|r| r.source_position(task));
        if let Some(p) = restored {
            clock.restore(p.watermark, &p.splits);
        }
        src.factory
            .create(info, restored.map(|p| p.position.as_slice()))
    }
}

/// What the body of a [`spawn_thread_job`] sees: whether the job was cancelled, and its
/// counters.
pub struct ThreadJob {
    shared: Arc<JobShared>,
    metrics: Arc<JobMetrics>,
}

impl ThreadJob {
    /// Whether [`JobHandle::cancel`] was called; the body returns soon after it was.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.load(Ordering::Relaxed)
    }

    pub fn metrics(&self) -> &JobMetrics {
        &self.metrics
    }
}

/// Runs `body` on a thread of its own as a job of one task, so that what waits for, cancels
/// or reads a dataflow job does the same to it (a query DataFusion computes at once: one
/// without tables). `body` polls [`ThreadJob::is_cancelled`]; its error is the job's.
pub fn spawn_thread_job(
    name: &str,
    body: impl FnOnce(&ThreadJob) -> Result<()> + Send + 'static,
) -> Result<JobHandle> {
    let job = ThreadJob {
        shared: Arc::new(JobShared::default()),
        metrics: Arc::new(JobMetrics::default()),
    };
    let control = JobControl {
        shared: Arc::clone(&job.shared),
        metrics: Arc::clone(&job.metrics),
        checkpoints: None,
    };
    let thread = std::thread::Builder::new()
        .name(format!("{name}/0"))
        .stack_size(TASK_STACK)
        .spawn(move || {
            // One task: its error is the job's, with nothing to locate.
            if let Err(e) = body(&job) {
                if let Ok(mut slot) = job.shared.error.lock() {
                    slot.get_or_insert(e);
                }
                job.shared.cancel.store(true, Ordering::Relaxed);
            }
        })
        .map_err(|e| EngineError::Internal(format!("cannot start a thread: {e}")))?;
    Ok(JobHandle {
        name: name.to_string(),
        threads: vec![thread],
        control,
        restored: None,
        notes: Vec::new(),
    })
}
