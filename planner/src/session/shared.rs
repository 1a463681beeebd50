//! What the sessions of one process share: the catalog and the durable jobs.
//!
//! Every wire connection has a session of its own (its settings, its DataFusion state, its
//! constant-query runtime), forked from the one the server opened. No lock is held while a
//! statement plans, connects to a sink's target or runs: a statement reads the catalog as a
//! snapshot (an `Arc` taken under a short lock), and a change copies the catalog, applies
//! itself and its file write to the copy, then publishes it; a change that fails leaves the
//! published catalog as it was. Job operations (start, stop, SHOW JOBS) take the job
//! manager's lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::invalid;
use crate::jobs::{JobManager, JobRegistry};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) struct Shared {
    catalog: Mutex<Arc<Catalog>>,
    /// Sink and view jobs; `None` without a data directory (there are none then).
    jobs: Option<Mutex<JobManager>>,
    /// The jobs as other threads read them, without the manager's lock.
    registry: Option<JobRegistry>,
    /// Ad-hoc queries started by every session (they are named `query-<n>`).
    queries_started: AtomicU64,
    /// Jobs that could not resume at start, with why.
    resume_failures: Mutex<Vec<String>>,
}

impl Shared {
    pub(super) fn new(catalog: Catalog, jobs: Option<JobManager>) -> Self {
        Self {
            catalog: Mutex::new(Arc::new(catalog)),
            registry: jobs.as_ref().map(JobManager::registry),
            jobs: jobs.map(Mutex::new),
            queries_started: AtomicU64::new(0),
            resume_failures: Mutex::new(Vec::new()),
        }
    }

    /// The catalog as it is now; later changes do not show in it.
    pub(super) fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&lock(&self.catalog))
    }

    /// Applies a change to the catalog: all of it, or (when `change` fails) none. Changes are
    /// serialized; `change` sees every change published before it, so the checks it makes
    /// (a name is free) hold when it is published.
    pub(super) fn change_catalog<R>(
        &self,
        change: impl FnOnce(&mut Catalog) -> Result<R>,
    ) -> Result<R> {
        let mut published = lock(&self.catalog);
        let mut copy = Catalog::clone(&published);
        let result = change(&mut copy)?;
        *published = Arc::new(copy);
        Ok(result)
    }

    /// Runs `f` on the job manager under its lock.
    pub(super) fn with_jobs<R>(&self, f: impl FnOnce(&mut JobManager) -> Result<R>) -> Result<R> {
        match &self.jobs {
            Some(jobs) => f(&mut lock(jobs)),
            None => Err(invalid!(
                "sinks keep their checkpoints in the data directory: start weir with --data-dir DIR"
            )),
        }
    }

    /// Like [`Self::with_jobs`], but `None` without a data directory.
    pub(super) fn jobs_if_any<R>(&self, f: impl FnOnce(&mut JobManager) -> R) -> Option<R> {
        self.jobs.as_ref().map(|jobs| f(&mut lock(jobs)))
    }

    /// The jobs' registry (`None` without a data directory).
    pub(super) fn registry(&self) -> Option<&JobRegistry> {
        self.registry.as_ref()
    }

    pub(super) fn next_query_number(&self) -> u64 {
        self.queries_started.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(super) fn add_resume_failure(&self, message: String) {
        lock(&self.resume_failures).push(message);
    }

    pub(super) fn resume_failures(&self) -> Vec<String> {
        lock(&self.resume_failures).clone()
    }
}

impl Drop for Shared {
    /// The last session of the process is gone: every running job stops with a final
    /// checkpoint.
    fn drop(&mut self) {
        if let Some(jobs) = &self.jobs {
            let _ = lock(jobs).stop_all();
        }
    }
}
