//! Checkpoints (DESIGN.md §5): the coordinator, the manifest, and the protocol between them
//! and the tasks.
//!
//! - Every `interval` the coordinator asks each source task for barrier n. A source records
//!   its position and watermark, snapshots its chain and forwards the barrier.
//! - A task with several inputs aligns the barrier (exactly-once; the input gate does it),
//!   snapshots its chain (operators write their state to the task's store; sinks pre-commit),
//!   writes a checkpoint of its store, acknowledges n and forwards the barrier.
//! - When every task acknowledged n, the coordinator writes manifest n atomically: the commit
//!   point. Then it tells the sinks' committers to commit n, and prunes old checkpoints.
//! - A task that ends reports it, with what its sinks pre-committed at the end; when every task
//!   has ended, a final manifest marks the job finished and everything left is committed.
//! - A stop (`Barrier { kind: Stop }`) is a checkpoint after which every task exits.

mod coordinator;
mod manifest;

pub(crate) use coordinator::{commit, Coordinator, TaskLinks};
pub use coordinator::{
    disk_usage, CheckpointRecord, CheckpointStats, CoordinatorExit, StatsSnapshot, DURATION_BUCKETS,
};
pub use manifest::{JobDir, Manifest, PendingCommit, SourceCheckpoint, TaskId};

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{EngineError, Result};

/// How a durable job checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// The job's directory (working state, checkpoints, manifests).
    pub dir: PathBuf,
    pub interval: Duration,
    /// Complete checkpoints kept; older ones are deleted.
    pub retain: usize,
}

/// The commit side of a transactional sink (DESIGN.md §6). The sink operator pre-commits at
/// each barrier and returns a payload describing what it made durable but invisible; the
/// coordinator keeps payloads in the manifest and hands them back here.
pub trait Committer: Send + Sync {
    /// Makes pre-committed output visible. Must be idempotent: after a crash the same payload
    /// may be committed again.
    fn commit(&self, payloads: &[Vec<u8>]) -> Result<()>;

    /// On restart: commit `payloads` (pre-committed by the restored checkpoint, maybe already
    /// committed) and abort everything else the sink left behind (output of epochs after it).
    fn recover(&self, payloads: &[Vec<u8>]) -> Result<()>;

    /// Whether pre-committed output may stay uncommitted while the job goes on after its
    /// checkpoint failed (it is then committed with the next checkpoint that completes).
    /// A sink whose pending output holds up its next epoch says no (PostgreSQL: a prepared
    /// transaction keeps its row locks, and the next epoch's upserts of the same keys wait
    /// for them): a failed checkpoint then restarts the job from the last complete one,
    /// which aborts that output, as Flink does for any failed checkpoint by default.
    fn may_wait_for_next_checkpoint(&self) -> bool {
        true
    }
}

/// What a task tells the coordinator.
#[derive(Debug)]
pub enum TaskReport {
    /// The task passed barrier `epoch`.
    Ack {
        task: TaskId,
        epoch: u64,
        source: Option<SourceCheckpoint>,
        /// The task's state checkpoint, relative to the checkpoints directory.
        state: Option<String>,
        /// Sink payloads, by operator position in the chain.
        commits: Vec<(usize, Vec<u8>)>,
        /// The task could not write its part of the checkpoint: the checkpoint fails, the
        /// job goes on.
        error: Option<EngineError>,
    },
    /// The task's inputs ended and it flushed everything.
    Finished {
        task: TaskId,
        /// A source's final position.
        source: Option<SourceCheckpoint>,
        /// The sinks' pre-commits of the output after the last barrier.
        commits: Vec<(usize, Vec<u8>)>,
        /// The epoch those pre-commits were labelled with.
        epoch: u64,
    },
}
