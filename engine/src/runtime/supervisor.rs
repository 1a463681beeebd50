//! Restarting a durable job after failures that may pass (a sink's server went away, an I/O
//! error): a supervisor thread runs the job, and when it fails that way spawns it again from
//! its last checkpoint after a backoff. The job graph is reusable (factories build fresh
//! operators), so a restart is the same as a resume.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{spawn_job, JobConfig, JobHandle};
use crate::checkpoint::StatsSnapshot;
use crate::error::{EngineError, Result};
use crate::graph::JobGraph;
use crate::metrics::MetricsSnapshot;

/// How often and how patiently a failed job is restarted.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
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
            self,
            EngineError::External(_) | EngineError::Io { .. } | EngineError::State(_)
        )
    }
}

#[derive(Default)]
struct Shared {
    /// The attempt running now.
    current: Mutex<Option<JobHandle>>,
    stop: AtomicBool,
    cancel: AtomicBool,
    restarts: AtomicU32,
    last_metrics: Mutex<Option<MetricsSnapshot>>,
    last_checkpoints: Mutex<Option<StatsSnapshot>>,
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
pub fn spawn_supervised(
    graph: JobGraph,
    config: JobConfig,
    policy: RestartPolicy,
) -> Result<SupervisedJob> {
    let first = spawn_job(graph.clone(), config.clone())?;
    let name = first.name().to_string();
    let restored = first.restored_epoch();
    let notes = first.notes().to_vec();
    let shared = Arc::new(Shared::default());
    *lock(&shared.current)? = Some(first);
    let s = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name(format!("weir-{name}-supervisor"))
        .spawn(move || supervise(&s, graph, config, policy))
        .map_err(|e| EngineError::io("starting a job supervisor", e))?;
    Ok(SupervisedJob {
        name,
        shared,
        thread,
        restored,
        notes,
    })
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| EngineError::Internal("job supervisor poisoned".into()))
}

fn supervise(
    shared: &Shared,
    graph: JobGraph,
    config: JobConfig,
    policy: RestartPolicy,
) -> Result<MetricsSnapshot> {
    let stopping = || shared.stop.load(Ordering::Relaxed) || shared.cancel.load(Ordering::Relaxed);
    loop {
        // Wait for the attempt to end, then take it out to collect its result.
        let attempt = loop {
            {
                let mut current = lock(&shared.current)?;
                if current.as_ref().is_none_or(|h| h.is_finished()) {
                    break current.take();
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let Some(attempt) = attempt else {
            return Err(EngineError::Internal("job supervisor lost its job".into()));
        };
        *lock(&shared.last_metrics)? = Some(attempt.metrics());
        *lock(&shared.last_checkpoints)? = attempt.checkpoints();
        let mut error = match attempt.wait() {
            Ok(m) => return Ok(m),
            Err(e) => e,
        };
        // Restart from the last checkpoint, after a backoff; a restart that fails to start
        // (the server is still away) counts as one.
        loop {
            let restarts = shared.restarts.load(Ordering::Relaxed);
            if stopping() || !error.is_transient() || restarts >= policy.max_restarts {
                return Err(error);
            }
            let wait = policy.backoff * 2u32.pow(restarts);
            let mut waited = Duration::ZERO;
            while waited < wait {
                if stopping() {
                    return Err(error);
                }
                std::thread::sleep(Duration::from_millis(10));
                waited += Duration::from_millis(10);
            }
            shared.restarts.store(restarts + 1, Ordering::Relaxed);
            match spawn_job(graph.clone(), config.clone()) {
                Ok(h) => {
                    *lock(&shared.current)? = Some(h);
                    break;
                }
                Err(e) => error = e,
            }
        }
    }
}

impl SupervisedJob {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counters of the attempt running now (or of the last one).
    pub fn metrics(&self) -> MetricsSnapshot {
        if let Ok(current) = self.shared.current.lock() {
            if let Some(h) = current.as_ref() {
                return h.metrics();
            }
        }
        self.shared
            .last_metrics
            .lock()
            .ok()
            .and_then(|m| *m)
            .unwrap_or_default()
    }

    /// Checkpoint counters of the attempt running now (or of the last one).
    pub fn checkpoints(&self) -> Option<StatsSnapshot> {
        if let Ok(current) = self.shared.current.lock() {
            if let Some(h) = current.as_ref() {
                return h.checkpoints();
            }
        }
        self.shared
            .last_checkpoints
            .lock()
            .ok()
            .and_then(|c| c.clone())
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

    /// Stops with a final checkpoint (see [`JobHandle::stop`]); no restart follows.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Ok(current) = self.shared.current.lock() {
            if let Some(h) = current.as_ref() {
                h.stop();
            }
        }
    }

    /// Cancels without a checkpoint (see [`JobHandle::cancel`]); no restart follows.
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        if let Ok(current) = self.shared.current.lock() {
            if let Some(h) = current.as_ref() {
                h.cancel();
            }
        }
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
