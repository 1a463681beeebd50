//! What an operator sees of state: its task's store (opened on first use), its own key prefix,
//! the memory budget of its working set, and after a restart the checkpoint to restore from.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{RocksDbStateBackend, StateBackend};
use crate::error::{EngineError, Result};

/// The checkpointed state a task restores from.
pub struct RestoreSet {
    /// Stores holding the stage's checkpointed state. With the parallelism unchanged this is
    /// the task's own working store (restored in place from its instance's checkpoint); else
    /// every old instance's checkpoint, opened read-only.
    pub stores: Vec<Arc<dyn StateBackend>>,
    /// `Some((instance, parallelism))` when the parallelism changed: keep only the entries
    /// whose key routes to this instance, and copy them into the working store.
    pub repartition: Option<(usize, usize)>,
}

/// The state of one task, shared by the operators of its chain.
pub struct TaskState {
    /// The working store's directory; `None`: a temporary directory, made on first use and
    /// removed when the task ends (jobs that keep no checkpoints).
    dir: Option<PathBuf>,
    store: Mutex<Option<(Arc<dyn StateBackend>, PathBuf)>>,
    restore: Option<RestoreSet>,
    memory_budget: usize,
}

static TEMP_STORES: AtomicU64 = AtomicU64::new(0);

impl TaskState {
    /// State of a task of a durable job: the working store lives in `dir`.
    pub fn durable(dir: PathBuf, restore: Option<RestoreSet>, memory_budget: usize) -> Self {
        Self {
            dir: Some(dir),
            store: Mutex::new(None),
            restore,
            memory_budget,
        }
    }

    /// State of a task that keeps no checkpoints: spills go to a temporary store.
    pub fn temporary(memory_budget: usize) -> Self {
        Self {
            dir: None,
            store: Mutex::new(None),
            restore: None,
            memory_budget,
        }
    }

    /// A durable task whose working store was restored in place and is open already.
    pub fn durable_open(
        store: Arc<dyn StateBackend>,
        restore: RestoreSet,
        memory_budget: usize,
    ) -> Self {
        Self {
            dir: None,
            store: Mutex::new(Some((store, PathBuf::new()))),
            restore: Some(restore),
            memory_budget,
        }
    }

    /// A task whose working store is already open (a unit test).
    pub fn with_store(store: Arc<dyn StateBackend>, restore: Option<RestoreSet>) -> Self {
        Self {
            dir: None,
            store: Mutex::new(Some((store, PathBuf::new()))),
            restore,
            memory_budget: usize::MAX,
        }
    }

    /// The same task with `bytes` of memory budget for its operators' working sets.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// The working store, opened (and created) on first use.
    pub fn store(&self) -> Result<Arc<dyn StateBackend>> {
        let mut slot = self
            .store
            .lock()
            .map_err(|_| EngineError::Internal("task state poisoned".into()))?;
        if let Some((store, _)) = slot.as_ref() {
            return Ok(Arc::clone(store));
        }
        let (dir, temporary) = match &self.dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let n = TEMP_STORES.fetch_add(1, Ordering::Relaxed);
                let dir =
                    std::env::temp_dir().join(format!("weir-spill-{}-{n}", std::process::id()));
                (dir, true)
            }
        };
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| EngineError::io(format!("cannot create '{}'", parent.display()), e))?;
        }
        let store: Arc<dyn StateBackend> = Arc::new(RocksDbStateBackend::open_working(&dir)?);
        *slot = Some((
            Arc::clone(&store),
            if temporary { dir } else { PathBuf::new() },
        ));
        Ok(store)
    }

    /// Whether the working store was opened: only then has the task state to checkpoint.
    pub fn is_open(&self) -> bool {
        self.store.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    /// Writes the working store to `dir` when the task has one; returns whether it did.
    pub fn checkpoint_to(&self, dir: &Path) -> Result<bool> {
        if !self.is_open() {
            return Ok(false);
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| EngineError::io(format!("cannot create '{}'", parent.display()), e))?;
        }
        // A directory here is what an attempt at this epoch left before it completed (a
        // completed checkpoint's epoch is never used again): replace it.
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|e| EngineError::io(format!("cannot replace '{}'", dir.display()), e))?;
        }
        self.store()?.checkpoint_to(dir)?;
        Ok(true)
    }
}

impl Drop for TaskState {
    fn drop(&mut self) {
        if let Ok(slot) = self.store.get_mut() {
            if let Some((store, temp_dir)) = slot.take() {
                drop(store);
                if !temp_dir.as_os_str().is_empty() {
                    let _ = std::fs::remove_dir_all(temp_dir);
                }
            }
        }
    }
}

/// One operator's view of its task's state: every key it writes starts with its prefix (its
/// position in the chain), so operators of one task never collide.
#[derive(Clone)]
pub struct StateHandle {
    task: Arc<TaskState>,
    /// The operator's position in the chain, then any sub-tags (e.g. the side of a join).
    prefix: Vec<u8>,
}

impl std::fmt::Debug for StateHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateHandle(prefix {:?})", self.prefix)
    }
}

impl StateHandle {
    pub fn new(task: Arc<TaskState>, prefix: u8) -> Self {
        Self {
            task,
            prefix: vec![prefix],
        }
    }

    /// A handle on a part of this operator's key range (`prefix | tag`), for operators that
    /// keep several independent stores (the two sides of a join).
    pub fn sub(&self, tag: u8) -> Self {
        let mut prefix = self.prefix.clone();
        prefix.push(tag);
        Self {
            task: Arc::clone(&self.task),
            prefix,
        }
    }

    /// Length of the prefix every key of this handle starts with.
    pub fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    /// A handle on a fresh in-memory store, for unit tests.
    pub fn in_memory() -> Self {
        Self::new(
            Arc::new(TaskState::with_store(
                Arc::new(super::MemoryStateBackend::default()),
                None,
            )),
            0,
        )
    }

    /// The task's working store.
    pub fn store(&self) -> Result<Arc<dyn StateBackend>> {
        self.task.store()
    }

    /// `prefix | suffix`: a key of this operator.
    pub fn key(&self, suffix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + suffix.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(suffix);
        k
    }

    /// `prefix | parts...`: a key of this operator built in one allocation.
    pub fn key_of_parts(&self, parts: &[&[u8]]) -> Vec<u8> {
        let len = self.prefix.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut k = Vec::with_capacity(len);
        k.extend_from_slice(&self.prefix);
        for p in parts {
            k.extend_from_slice(p);
        }
        k
    }

    /// The key range holding all of this operator's entries.
    pub fn all(&self) -> (Vec<u8>, Vec<u8>) {
        // Prefixes are chain positions and small tags: the last byte never overflows.
        let mut hi = self.prefix.clone();
        if let Some(last) = hi.last_mut() {
            *last = last.saturating_add(1);
        }
        (self.prefix.clone(), hi)
    }

    /// Bytes the operator may keep in memory before it spills to the store.
    pub fn memory_budget(&self) -> usize {
        self.task.memory_budget
    }

    /// The checkpoint to restore from, on a restart.
    pub fn restore(&self) -> Option<&RestoreSet> {
        self.task.restore.as_ref()
    }
}
