//! The checkpoint coordinator of one job: injects barriers, collects acknowledgements, writes
//! manifests, tells committers to commit, prunes old checkpoints. One checkpoint is in flight
//! at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::manifest::{JobDir, Manifest, PendingCommit, SourceCheckpoint, TaskId};
use super::{CheckpointConfig, Committer, TaskReport};
use crate::error::{EngineError, Result};
use crate::graph::SourceFactory;
use crate::message::{Barrier, BarrierKind};

/// Checkpoints failing in a row before the job stops with the last error.
const MAX_CONSECUTIVE_FAILURES: u64 = 10;

/// How long the coordinator waits for a report before it checks for a stop or cancel.
const POLL: Duration = Duration::from_millis(20);

/// Counters of a job's checkpoints, readable while it runs.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    completed: AtomicU64,
    failed: AtomicU64,
    last_epoch: AtomicU64,
    last_duration_us: AtomicU64,
    total_duration_us: AtomicU64,
    max_duration_us: AtomicU64,
    last_bytes: AtomicU64,
    /// Wall clock (ms since the epoch) when the newest checkpoint completed.
    last_completed_ms: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Completed checkpoints per duration bucket ([`DURATION_BUCKETS`], then the rest).
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    /// The newest completed checkpoints, oldest first.
    history: Mutex<std::collections::VecDeque<CheckpointRecord>>,
}

/// Upper bounds (seconds) of the checkpoint-duration histogram.
pub const DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Completed checkpoints kept in [`CheckpointStats::history`].
const HISTORY: usize = 120;

/// One completed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub epoch: u64,
    /// Wall clock, ms since the epoch, when it completed.
    pub completed_ms: u64,
    pub duration: Duration,
    pub bytes: u64,
}

/// A copy of [`CheckpointStats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    pub completed: u64,
    pub failed: u64,
    /// Epoch of the newest complete checkpoint (0: none yet).
    pub last_epoch: u64,
    /// From barrier injection to manifest written.
    pub last_duration: Duration,
    /// Mean and maximum of that over the completed checkpoints.
    pub mean_duration: Duration,
    pub max_duration: Duration,
    /// Bytes of state written by the newest checkpoint (state files are hard links, so most
    /// of it is shared with the working stores and older checkpoints).
    pub last_bytes: u64,
    /// Wall clock (ms since the epoch) when the newest checkpoint completed (0: none yet).
    pub last_completed_ms: u64,
    pub last_error: Option<String>,
    /// Completed checkpoints with a duration up to each of [`DURATION_BUCKETS`]
    /// (cumulative, as Prometheus histograms count), and the sum of all durations.
    pub duration_buckets: Vec<(f64, u64)>,
    pub total_duration: Duration,
}

impl CheckpointStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            last_epoch: self.last_epoch.load(Ordering::Relaxed),
            last_duration: Duration::from_micros(self.last_duration_us.load(Ordering::Relaxed)),
            mean_duration: Duration::from_micros(
                self.total_duration_us.load(Ordering::Relaxed)
                    / self.completed.load(Ordering::Relaxed).max(1),
            ),
            max_duration: Duration::from_micros(self.max_duration_us.load(Ordering::Relaxed)),
            last_bytes: self.last_bytes.load(Ordering::Relaxed),
            last_completed_ms: self.last_completed_ms.load(Ordering::Relaxed),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            duration_buckets: DURATION_BUCKETS
                .iter()
                .zip(&self.buckets)
                .scan(0, |sum, (&le, n)| {
                    *sum += n.load(Ordering::Relaxed);
                    Some((le, *sum))
                })
                .collect(),
            total_duration: Duration::from_micros(self.total_duration_us.load(Ordering::Relaxed)),
        }
    }

    /// The newest completed checkpoints, oldest first.
    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history
            .lock()
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Counts a completed checkpoint.
    fn completed(&self, epoch: u64, took: Duration, bytes: u64) {
        let us = took.as_micros() as u64;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.last_epoch.store(epoch, Ordering::Relaxed);
        self.last_duration_us.store(us, Ordering::Relaxed);
        self.total_duration_us.fetch_add(us, Ordering::Relaxed);
        self.max_duration_us.fetch_max(us, Ordering::Relaxed);
        self.last_bytes.store(bytes, Ordering::Relaxed);
        self.last_completed_ms.store(now_ms, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.history.lock() {
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back(CheckpointRecord {
                epoch,
                completed_ms: now_ms,
                duration: took,
                bytes,
            });
        }
    }
}

struct InFlight {
    epoch: u64,
    kind: BarrierKind,
    started: Instant,
    sources: Vec<SourceCheckpoint>,
    state: Vec<(TaskId, String)>,
    commits: Vec<PendingCommit>,
    acked: BTreeSet<TaskId>,
    error: Option<EngineError>,
}

/// How the coordinator ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorExit {
    /// Every task finished; the final manifest is written and all output committed.
    Finished,
    /// A stop checkpoint completed; every task exited after it.
    Stopped,
    /// The job was cancelled or failed.
    Aborted,
}

/// The coordinator's channels to the tasks.
pub struct TaskLinks {
    /// Barrier requests to each source task.
    pub barriers: Vec<(TaskId, Sender<Barrier>)>,
    /// Acknowledgements and end reports from every task.
    pub reports: Receiver<TaskReport>,
}

/// Drives the checkpoints of one job.
pub struct Coordinator {
    job: String,
    dir: JobDir,
    config: CheckpointConfig,
    stages: Vec<(String, usize)>,
    sources: Vec<(TaskId, Sender<Barrier>)>,
    /// Committers by (stage, operator position).
    committers: BTreeMap<(usize, usize), Arc<dyn Committer>>,
    reports: Receiver<TaskReport>,
    /// The last epoch injected (or restored from).
    epoch: u64,
    stats: Arc<CheckpointStats>,
    finished: BTreeMap<TaskId, Option<SourceCheckpoint>>,
    uncommitted: Vec<PendingCommit>,
    in_flight: Option<InFlight>,
    consecutive_failures: u64,
    /// Source factories by stage, told when a checkpoint with their positions completed.
    source_hooks: Vec<(usize, Arc<dyn SourceFactory>)>,
}

impl Coordinator {
    /// `stages`: name and parallelism of each stage; `restored_epoch`: the checkpoint the job
    /// resumed from (0 for a fresh start).
    pub(crate) fn new(
        job: String,
        config: CheckpointConfig,
        stages: Vec<(String, usize)>,
        links: TaskLinks,
        committers: BTreeMap<(usize, usize), Arc<dyn Committer>>,
        restored_epoch: u64,
    ) -> Self {
        Self {
            job,
            dir: JobDir::new(config.dir.clone()),
            config,
            stages,
            sources: links.barriers,
            committers,
            reports: links.reports,
            epoch: restored_epoch,
            stats: Arc::new(CheckpointStats::default()),
            finished: BTreeMap::new(),
            uncommitted: Vec::new(),
            in_flight: None,
            consecutive_failures: 0,
            source_hooks: Vec::new(),
        }
    }

    /// Sources to tell about completed checkpoints (by stage index).
    pub(crate) fn with_source_hooks(mut self, hooks: Vec<(usize, Arc<dyn SourceFactory>)>) -> Self {
        self.source_hooks = hooks;
        self
    }

    fn tell_sources(&self, manifest: &Manifest) {
        for (stage, factory) in &self.source_hooks {
            let positions: Vec<&[u8]> = manifest
                .sources
                .iter()
                .filter(|s| s.task.stage == *stage)
                .map(|s| s.position.as_slice())
                .collect();
            factory.checkpoint_completed(&positions);
        }
    }

    fn all_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.stages
            .iter()
            .enumerate()
            .flat_map(|(stage, (_, p))| (0..*p).map(move |instance| TaskId { stage, instance }))
    }

    /// Runs until the job finishes, stops, or `aborted()` says it was cancelled or failed.
    /// `stop_requested()` asks for a final checkpoint and a stop.
    /// The counters this coordinator keeps.
    pub(crate) fn stats(&self) -> Arc<CheckpointStats> {
        Arc::clone(&self.stats)
    }

    pub(crate) fn run(
        mut self,
        aborted: impl Fn() -> bool,
        stop_requested: impl Fn() -> bool,
    ) -> Result<CoordinatorExit> {
        let mut next = Instant::now() + self.config.interval;
        loop {
            if aborted() {
                return Ok(CoordinatorExit::Aborted);
            }
            let all_finished = self.all_tasks().all(|t| self.finished.contains_key(&t));
            if let Some(done) = self.complete_in_flight(all_finished)? {
                if done == BarrierKind::Stop {
                    return Ok(CoordinatorExit::Stopped);
                }
            }
            if all_finished {
                self.finish()?;
                return Ok(CoordinatorExit::Finished);
            }
            let now = Instant::now();
            if self.in_flight.is_none() {
                let live: Vec<usize> = (0..self.sources.len())
                    .filter(|&i| !self.finished.contains_key(&self.sources[i].0))
                    .collect();
                let stop = stop_requested();
                if !live.is_empty() && (stop || now >= next) {
                    let kind = if stop {
                        BarrierKind::Stop
                    } else {
                        BarrierKind::Checkpoint
                    };
                    self.inject(kind);
                    next = now + self.config.interval;
                }
            }
            // Past `next` no barrier can go out now (one is in flight, or no source is left
            // to take it): wait for reports, not zero. Waiting zero here spun a core for as
            // long as each checkpoint took longer than the interval, and with a few jobs on
            // two cores, that starved the tasks the checkpoints waited for.
            let wait = match next.saturating_duration_since(Instant::now()) {
                d if d.is_zero() => POLL,
                d => d.min(POLL),
            };
            match self.reports.recv_timeout(wait) {
                Ok(report) => self.handle(report),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(CoordinatorExit::Aborted),
            }
        }
    }

    fn inject(&mut self, kind: BarrierKind) {
        self.epoch += 1;
        let barrier = Barrier {
            epoch: self.epoch,
            kind,
        };
        for (task, tx) in &self.sources {
            if !self.finished.contains_key(task) {
                // A source that already exited acknowledges nothing; its Finished report
                // stands in for the acknowledgement.
                let _ = tx.send(barrier);
            }
        }
        self.in_flight = Some(InFlight {
            epoch: self.epoch,
            kind,
            started: Instant::now(),
            sources: Vec::new(),
            state: Vec::new(),
            commits: Vec::new(),
            acked: BTreeSet::new(),
            error: None,
        });
    }

    fn handle(&mut self, report: TaskReport) {
        match report {
            TaskReport::Ack {
                task,
                epoch,
                source,
                state,
                commits,
                error,
            } => {
                let Some(f) = self.in_flight.as_mut().filter(|f| f.epoch == epoch) else {
                    return;
                };
                f.acked.insert(task);
                f.sources.extend(source);
                f.state.extend(state.map(|s| (task, s)));
                f.commits.extend(pending(task, epoch, commits));
                if let Some(e) = error {
                    f.error.get_or_insert(e.at(format!("task {task}")));
                }
            }
            TaskReport::Finished {
                task,
                source,
                commits,
                epoch,
            } => {
                self.uncommitted.extend(pending(task, epoch, commits));
                self.finished.insert(task, source);
            }
        }
    }

    /// Makes the tasks' checkpointed state durable where the tasks left that to the
    /// coordinator (window part files), before the manifest records the checkpoint.
    fn sync_state(&self, state: &[(TaskId, String)]) -> Result<()> {
        for (_, dir) in state {
            crate::state::sync_parts(&self.dir.checkpoints().join(dir))?;
        }
        Ok(())
    }

    /// Completes the checkpoint in flight once every task acknowledged it (or ended).
    /// Returns its kind when it completed or failed.
    fn complete_in_flight(&mut self, all_finished: bool) -> Result<Option<BarrierKind>> {
        let complete = match &self.in_flight {
            Some(f) => {
                all_finished
                    || self
                        .all_tasks()
                        .all(|t| f.acked.contains(&t) || self.finished.contains_key(&t))
            }
            None => false,
        };
        if !complete {
            return Ok(None);
        }
        let Some(mut f) = self.in_flight.take() else {
            return Ok(None);
        };
        // Pre-commits of this epoch go with it, or with the next checkpoint if this one fails.
        self.uncommitted.append(&mut f.commits);
        for (task, source) in &self.finished {
            if !f.acked.contains(task) {
                f.sources.extend(source.clone());
            }
        }
        let manifest = Manifest {
            job: self.job.clone(),
            epoch: f.epoch,
            finished: false,
            stages: self.stages.clone(),
            sources: f.sources,
            state: f.state,
            commits: self.uncommitted.clone(),
        };
        let pending_output = !self.uncommitted.is_empty();
        if pending_output {
            crate::fault::crash_at("before_manifest", f.epoch);
        }
        let written = match f.error {
            Some(e) => Err(e),
            None => self
                .sync_state(&manifest.state)
                .and_then(|()| self.dir.write_manifest(&manifest)),
        };
        if written.is_ok() && pending_output {
            crate::fault::crash_at("before_commit", f.epoch);
        }
        match written {
            Ok(()) => {
                crate::fault::fail_commit_once(f.epoch)?;
                self.commit_all()?;
                self.tell_sources(&manifest);
                self.consecutive_failures = 0;
                let bytes = disk_usage(&self.dir.checkpoints().join(format!("{:020}", f.epoch)));
                self.stats.completed(f.epoch, f.started.elapsed(), bytes);
                // Old checkpoints are garbage now; failing to delete them is not an error of
                // this checkpoint.
                let _ = self.dir.prune(self.config.retain);
                Ok(Some(f.kind))
            }
            Err(e) => {
                self.dir.discard(f.epoch);
                self.consecutive_failures += 1;
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let message = format!("checkpoint {} failed: {e}", f.epoch);
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(message.clone());
                }
                if let Some(sink) = self.held_up_by_uncommitted() {
                    return Err(EngineError::State(format!(
                        "{message}; the sink of {sink} pre-committed output that cannot wait \
                         for the next checkpoint (it holds up the sink's next epoch), so the job \
                         restarts from checkpoint {}",
                        self.stats.last_epoch.load(Ordering::Relaxed)
                    )));
                }
                if f.kind == BarrierKind::Stop {
                    return Err(EngineError::State(format!(
                        "{message}; the job stopped, a restart resumes from checkpoint {}",
                        self.stats.last_epoch.load(Ordering::Relaxed)
                    )));
                }
                if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES {
                    return Err(EngineError::State(format!(
                        "{} checkpoints in a row failed, the last one: {message}",
                        self.consecutive_failures
                    )));
                }
                Ok(Some(f.kind))
            }
        }
    }

    /// The stage name of a sink whose uncommitted output may not wait for the next
    /// checkpoint ([`Committer::may_wait_for_next_checkpoint`]), if any.
    fn held_up_by_uncommitted(&self) -> Option<String> {
        self.uncommitted.iter().find_map(|c| {
            let committer = self.committers.get(&(c.task.stage, c.operator))?;
            (!committer.may_wait_for_next_checkpoint()).then(|| format!("task {}", c.task))
        })
    }

    /// Every task ended: a final manifest marks the job finished, then all output commits.
    fn finish(&mut self) -> Result<()> {
        self.epoch += 1;
        let manifest = Manifest {
            job: self.job.clone(),
            epoch: self.epoch,
            finished: true,
            stages: self.stages.clone(),
            sources: self.finished.values().flatten().cloned().collect(),
            state: Vec::new(),
            commits: self.uncommitted.clone(),
        };
        self.dir.write_manifest(&manifest)?;
        self.commit_all()?;
        self.tell_sources(&manifest);
        self.stats.completed.fetch_add(1, Ordering::Relaxed);
        self.stats.last_epoch.store(self.epoch, Ordering::Relaxed);
        let _ = self.dir.prune(1);
        Ok(())
    }

    fn commit_all(&mut self) -> Result<()> {
        commit(&self.committers, &self.uncommitted, false)?;
        self.uncommitted.clear();
        Ok(())
    }
}

/// A task's sink payloads of `epoch`, as pending commits.
fn pending(
    task: TaskId,
    epoch: u64,
    commits: Vec<(usize, Vec<u8>)>,
) -> impl Iterator<Item = PendingCommit> {
    commits
        .into_iter()
        .map(move |(operator, payload)| PendingCommit {
            task,
            operator,
            epoch,
            payload,
        })
}

/// Hands each committer its payloads (`recover`: the restart path, which also aborts
/// leftovers, so every committer is called even with none).
pub(crate) fn commit(
    committers: &BTreeMap<(usize, usize), Arc<dyn Committer>>,
    commits: &[PendingCommit],
    recover: bool,
) -> Result<()> {
    for (&(stage, operator), committer) in committers {
        let payloads: Vec<Vec<u8>> = commits
            .iter()
            .filter(|c| c.task.stage == stage && c.operator == operator)
            .map(|c| c.payload.clone())
            .collect();
        if recover {
            committer.recover(&payloads)?;
        } else {
            let epoch = commits.iter().map(|c| c.epoch).max().unwrap_or(0);
            for (i, p) in payloads.iter().enumerate() {
                if i == 1 {
                    crate::fault::crash_at("mid_commit", epoch);
                }
                committer.commit(std::slice::from_ref(p))?;
            }
        }
    }
    Ok(())
}

/// Bytes of the files under `path` (hard links count fully).
pub fn disk_usage(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_usage(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
