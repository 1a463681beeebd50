//! Restarting a durable job after failures that may pass (a sink's server went away, an I/O
//! error): a supervisor thread waits for the job, and when it fails that way spawns it again
//! from its last checkpoint after a backoff. The job graph is reusable (factories build fresh
//! operators), so a restart is the same as a resume. Nothing polls: the supervisor blocks on
//! the attempt's threads, a backoff on a condition variable that stop and cancel signal.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use super::{spawn_job, JobConfig, JobControl, JobHandle};
use crate::checkpoint::StatsSnapshot;
use crate::error::{EngineError, Result};
use crate::graph::JobGraph;
use crate::metrics::MetricsSnapshot;

/// How often and how patiently a failed job is restarted.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    /// Restarts in a row: an attempt that completed a checkpoint before failing made
    /// progress, and the count starts again after it.
    pub max_restarts: u32,
    /// The n-th restart waits `backoff * 2^(n-1)`.
    pub backoff: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            backoff: Duration::from_millis(500),
        }
    }
}

impl EngineError {
    /// Whether a job that failed with this may succeed when restarted from its last
    /// checkpoint: an external system or I/O failed, not the data or weir itself.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.root(),
            EngineError::External(_) | EngineError::Io { .. } | EngineError::State(_)
        )
    }
}

/// What stop / cancel requests and the supervisor share. Guarded by one mutex so that a
/// request and the start of a new attempt cannot miss each other: the supervisor publishes
/// the new attempt and reads the flags under the lock; a request sets its flag and reaches
/// the published attempt under the same lock.
struct Control {
    /// The attempt running now, or the last one.
    current: JobControl,
    stop: bool,
    cancel: bool,
}

struct Shared {
    control: Mutex<Control>,
    /// Signalled when a stop or cancel is requested (ends a backoff early).
    requested: Condvar,
    restarts: AtomicU32,
    /// Why the job was last restarted (the failure the restart followed).
    last_failure: Mutex<Option<String>>,
}

/// A job run under a restart policy. Same surface as [`JobHandle`].
pub struct SupervisedJob {
    name: String,
    shared: Arc<Shared>,
    thread: JoinHandle<Result<MetricsSnapshot>>,
    restored: Option<u64>,
    notes: Vec<String>,
}

/// Starts `graph` (see [`spawn_job`]) and restarts it per `policy` after transient failures.
/// When the job ends for good, its name is sent on `ended` (if given), so an owner of many
/// jobs waits on one channel.
pub fn spawn_supervised(
    graph: JobGraph,
    config: JobConfig,
    policy: RestartPolicy,
    ended: Option<Sender<String>>,
) -> Result<SupervisedJob> {
    let first = spawn_job(graph.clone(), config.clone())?;
    let name = first.name().to_string();
    let restored = first.restored_epoch();
    let notes = first.notes().to_vec();
    let shared = Arc::new(Shared {
        control: Mutex::new(Control {
            current: first.control(),
            stop: false,
            cancel: false,
        }),
        requested: Condvar::new(),
        restarts: AtomicU32::new(0),
        last_failure: Mutex::new(None),
    });
    let s = Arc::clone(&shared);
    let job = name.clone();
    let thread = std::thread::Builder::new()
        .name(format!("weir-{name}-supervisor"))
        .spawn(move || {
            let result = supervise(&s, first, graph, config, policy);
            if let Some(ended) = ended {
                let _ = ended.send(job);
            }
            result
        })
        .map_err(|e| EngineError::io("starting a job supervisor", e))?;
    Ok(SupervisedJob {
        name,
        shared,
        thread,
        restored,
        notes,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The supervisor's state stays consistent under a panic elsewhere (flags and a handle).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs attempts until one ends well, fails for good, or is stopped.
fn supervise(
    shared: &Shared,
    mut attempt: JobHandle,
    graph: JobGraph,
    config: JobConfig,
    policy: RestartPolicy,
) -> Result<MetricsSnapshot> {
    // Restarts since the last attempt that completed a checkpoint: a job that makes progress
    // between failures is not given up on.
    let mut in_a_row = 0u32;
    loop {
        let control = attempt.control();
        let mut error = match attempt.wait() {
            Ok(m) => return Ok(m),
            Err(e) => e,
        };
        if control.checkpoints().is_some_and(|c| c.completed > 0) {
            in_a_row = 0;
        }
        attempt = loop {
            if !error.is_transient() || in_a_row >= policy.max_restarts {
                return Err(error);
            }
            let backoff = policy.backoff * 2u32.pow(in_a_row);
            let requested = shared
                .requested
                .wait_timeout_while(lock(&shared.control), backoff, |c| !c.stop && !c.cancel)
                .map(|(c, _)| c.stop || c.cancel)
                .unwrap_or(true);
            if requested {
                return Err(error);
            }
            in_a_row += 1;
            *lock(&shared.last_failure) = Some(error.to_string());
            shared.restarts.fetch_add(1, Ordering::SeqCst);
            crate::fault::pause_restart();
            // A restart that fails to start (the server is still away) counts as one.
            match spawn_job(graph.clone(), config.clone()) {
                Ok(next) => {
                    let mut c = lock(&shared.control);
                    c.current = next.control();
                    if c.cancel {
                        next.cancel();
                    } else if c.stop {
                        next.stop();
                    }
                    break next;
                }
                Err(e) => error = e,
            }
        };
    }
}

/// Reads a supervised job's counters from any thread, without owning the job; cloned freely.
#[derive(Clone)]
pub struct SupervisedWatch {
    shared: Arc<Shared>,
}

impl SupervisedWatch {
    /// Counters of the attempt running now (or of the last one).
    pub fn metrics(&self) -> MetricsSnapshot {
        lock(&self.shared.control).current.metrics()
    }

    /// Checkpoint counters of the attempt running now (or of the last one).
    pub fn checkpoints(&self) -> Option<StatsSnapshot> {
        lock(&self.shared.control).current.checkpoints()
    }

    /// Per-stage counters of the attempt running now (or of the last one).
    pub fn stages(&self) -> Vec<crate::metrics::StageSnapshot> {
        lock(&self.shared.control).current.stages()
    }

    /// Completed checkpoints of the attempt running now (or of the last one), oldest first.
    pub fn checkpoint_history(&self) -> Vec<crate::checkpoint::CheckpointRecord> {
        lock(&self.shared.control).current.checkpoint_history()
    }

    /// Restarts after failures so far.
    pub fn restarts(&self) -> u32 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// The failure the last restart followed.
    pub fn last_failure(&self) -> Option<String> {
        lock(&self.shared.last_failure).clone()
    }
}

impl SupervisedJob {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A read-only handle on the job's counters for other threads.
    pub fn watch(&self) -> SupervisedWatch {
        SupervisedWatch {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Counters of the attempt running now (or of the last one).
    pub fn metrics(&self) -> MetricsSnapshot {
        lock(&self.shared.control).current.metrics()
    }

    /// Checkpoint counters of the attempt running now (or of the last one).
    pub fn checkpoints(&self) -> Option<StatsSnapshot> {
        lock(&self.shared.control).current.checkpoints()
    }

    pub fn restored_epoch(&self) -> Option<u64> {
        self.restored
    }

    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Restarts after failures so far.
    pub fn restarts(&self) -> u32 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// The failure the last restart followed.
    pub fn last_failure(&self) -> Option<String> {
        lock(&self.shared.last_failure).clone()
    }

    /// Stops with a final checkpoint (see [`JobHandle::stop`]); no restart follows, also
    /// when the request comes while the job waits to restart.
    pub fn stop(&self) {
        let mut c = lock(&self.shared.control);
        c.stop = true;
        c.current.stop();
        self.shared.requested.notify_all();
    }

    /// Cancels without a checkpoint (see [`JobHandle::cancel`]); no restart follows.
    pub fn cancel(&self) {
        let mut c = lock(&self.shared.control);
        c.cancel = true;
        c.current.cancel();
        self.shared.requested.notify_all();
    }

    /// Whether the job ended for good (no restart pending).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the job's end; the error of its last attempt if it failed.
    pub fn wait(self) -> Result<MetricsSnapshot> {
        self.thread
            .join()
            .map_err(|_| EngineError::Internal("a job supervisor panicked".into()))?
    }
}
