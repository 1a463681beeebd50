//! Starting and supervising a job: channels between stage instances, one thread per instance.

mod chain;
mod input_gate;
mod outlet;
mod task;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::{EngineError, Result};
use crate::event_time::EventTimeAssigner;
use crate::graph::{JobGraph, Partitioning, TaskInfo};
use crate::message::Message;
use crate::metrics::{JobMetrics, MetricsSnapshot};

pub use chain::Chain;
pub use input_gate::{GateEvent, InputGate};
pub use outlet::{Outlet, TaskExit};
use task::{run_operator_task, run_source_task, JobShared, Outlets};

/// The input channels of one task, each with the logical input it belongs to.
type TaskInputs = Vec<(Receiver<Message>, usize)>;

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Messages buffered per channel before the sender blocks (backpressure).
    pub channel_capacity: usize,
    /// Exactly-once: align barriers at every task with several inputs.
    pub align_barriers: bool,
}

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            channel_capacity: 16,
            align_barriers: true,
        }
    }
}

/// A running job.
pub struct JobHandle {
    name: String,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<JobShared>,
    metrics: Arc<JobMetrics>,
}

impl JobHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Asks every task to stop. [`JobHandle::wait`] then returns [`EngineError::Cancelled`].
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
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
        let metrics = Arc::clone(&self.metrics);
        match self.wait() {
            Ok(m) => Ok(m),
            Err(EngineError::Cancelled) => Ok(metrics.snapshot()),
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
        let err = self.shared.error.lock().ok().and_then(|mut e| e.take());
        match err {
            Some(e) => Err(e),
            None if self.shared.cancel.load(Ordering::Relaxed) => Err(EngineError::Cancelled),
            None => Ok(self.metrics.snapshot()),
        }
    }
}

/// Starts every task of `graph` and returns at once.
pub fn spawn_job(graph: JobGraph, config: JobConfig) -> Result<JobHandle> {
    let metrics = Arc::new(JobMetrics::default());
    let shared = Arc::new(JobShared::default());

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

    let mut threads = Vec::new();
    for (si, stage) in graph.stages.into_iter().enumerate().rev() {
        let stage_outlets = std::mem::take(&mut outlets[si]);
        let stage_inputs = std::mem::take(&mut receivers[si]);
        for (instance, (outs, ins)) in stage_outlets.into_iter().zip(stage_inputs).enumerate() {
            let info = TaskInfo {
                job: graph.name.clone(),
                stage: stage.name.clone(),
                instance,
                parallelism: stage.parallelism,
                metrics: Arc::clone(&metrics),
            };
            let ops = stage
                .chain
                .iter()
                .map(|f| f.create(&info))
                .collect::<Result<Vec<_>>>();
            let ops = match ops {
                Ok(ops) => ops,
                Err(e) => {
                    shared.cancel.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            };
            let chain = Chain::new(ops);
            let outs = Outlets(outs);
            let shared_t = Arc::clone(&shared);
            let thread_name = format!("weir-{}-{}-{instance}", si, stage.name);
            let spawned = if let Some(src) = &stage.source {
                let reader = src.factory.create(&info)?;
                let assigner = EventTimeAssigner::new(src.event_time.clone());
                std::thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || {
                        let r =
                            run_source_task(&info, reader, assigner, chain, outs, &shared_t.cancel);
                        shared_t.task_ended(r);
                    })
            } else {
                let gate = InputGate::new(ins, config.align_barriers);
                std::thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || {
                        let r = run_operator_task(gate, chain, outs);
                        shared_t.task_ended(r);
                    })
            };
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    shared.cancel.store(true, Ordering::Relaxed);
                    return Err(EngineError::io("starting a task thread", e));
                }
            }
        }
    }
    Ok(JobHandle {
        name: graph.name,
        threads,
        shared,
        metrics,
    })
}
