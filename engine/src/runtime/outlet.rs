//! The sending side of a stage's output edges, including the keyed exchange.

use crossbeam_channel::Sender;
use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{create_hashes, RandomState};

use crate::error::EngineError;
use crate::graph::Partitioning;
use crate::message::Message;

/// Fixed seeds: a key must land on the same instance in every run, so that state restored from
/// a checkpoint meets its rows again.
const EXCHANGE_SEED: u64 = 0x7765_6972_6578_6368;

/// Why a task stops early.
#[derive(Debug)]
pub enum TaskExit {
    /// A neighbouring task went away (it failed or the job was cancelled); whoever failed
    /// reports the error.
    Disconnected,
    /// This task failed.
    Failed(EngineError),
}

impl<E: Into<EngineError>> From<E> for TaskExit {
    fn from(e: E) -> Self {
        TaskExit::Failed(e.into())
    }
}

/// Hashes the key columns of each row into `hashes` and returns the instance (out of
/// `parallelism`) each row goes to. The keyed exchange routes rows with this, and operators
/// restoring state at a different parallelism use it to keep the keys that are theirs.
fn route(
    columns: &[ArrayRef],
    parallelism: usize,
    hashes: &mut Vec<u64>,
) -> Result<Vec<u32>, EngineError> {
    let rows = columns.first().map_or(0, |c| c.len());
    hashes.clear();
    hashes.resize(rows, 0);
    create_hashes(columns, &RandomState::with_seed(EXCHANGE_SEED), hashes)?;
    Ok(hashes
        .iter()
        .map(|h| (*h % parallelism as u64) as u32)
        .collect())
}

/// The instance each row of `columns` (the exchange's key columns) is routed to.
pub fn partition_of_rows(
    columns: &[ArrayRef],
    parallelism: usize,
) -> Result<Vec<u32>, EngineError> {
    route(columns, parallelism.max(1), &mut Vec::new())
}

/// One output edge of a task: senders indexed by downstream instance.
pub struct Outlet {
    partitioning: Partitioning,
    senders: Vec<Sender<Message>>,
    hashes: Vec<u64>,
}

impl Outlet {
    pub fn new(partitioning: Partitioning, senders: Vec<Sender<Message>>) -> Self {
        Self {
            partitioning,
            senders,
            hashes: Vec::new(),
        }
    }

    fn send(&self, to: usize, msg: Message) -> Result<(), TaskExit> {
        self.senders[to]
            .send(msg)
            .map_err(|_| TaskExit::Disconnected)
    }

    /// Sends a control message (watermark, barrier, end) to every downstream instance.
    pub fn broadcast(&self, msg: &Message) -> Result<(), TaskExit> {
        (0..self.senders.len()).try_for_each(|i| self.send(i, msg.clone()))
    }

    /// Routes a batch by the edge's partitioning.
    pub fn send_batch(&mut self, batch: RecordBatch) -> Result<(), TaskExit> {
        let keys = match &self.partitioning {
            Partitioning::Hash(keys) if self.senders.len() > 1 => keys,
            _ => return self.send(0, Message::Batch(batch)),
        };
        let n = self.senders.len();
        let rows = batch.num_rows();
        let columns: Vec<ArrayRef> = keys
            .iter()
            .map(|k| k.evaluate(&batch).and_then(|v| v.into_array(rows)))
            .collect::<Result<_, _>>()?;
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (row, to) in route(&columns, n, &mut self.hashes)?
            .into_iter()
            .enumerate()
        {
            parts[to as usize].push(row as u32);
        }
        for (to, rows) in parts.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                take_record_batch(&batch, &UInt32Array::from(rows))?
            };
            self.send(to, Message::Batch(part))?;
        }
        Ok(())
    }
}
