//! The operator trait: what a dataflow operator implements. The runtime does everything else
//! (channels, watermark minimum, barrier alignment, routing).

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::message::EventTime;

/// Where an operator puts the batches it emits. The runtime passes them on to the next operator
/// in the chain, or across the stage's output edge.
#[derive(Debug, Default)]
pub struct Output {
    batches: Vec<RecordBatch>,
    late: Vec<RecordBatch>,
}

impl Output {
    /// Emit a batch downstream. Empty batches are dropped.
    pub fn emit(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.batches.push(batch);
        }
    }

    /// Take what was emitted so far.
    pub fn take(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.batches)
    }

    /// Hand on rows dropped as late (built with [`crate::late_rows::LateRows`]): the runtime
    /// writes them to the stage's late-rows table, if the job keeps one.
    pub fn emit_late(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.late.push(batch);
        }
    }

    /// Take the late rows emitted so far.
    pub fn take_late(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.late)
    }
}

/// A running dataflow operator (one instance of one stage).
///
/// Only [`Operator::process_batch`] is required; stateless operators implement nothing else.
/// Calls are never concurrent: an instance is owned by one task.
pub trait Operator: Send {
    /// A short name for plans and error messages.
    fn name(&self) -> &str;

    /// Handle a batch that arrived on logical input `input` (0 for single-input operators).
    fn process_batch(&mut self, batch: RecordBatch, input: usize, out: &mut Output) -> Result<()>;

    /// The operator's input watermark advanced to `watermark` (the minimum over all its inputs,
    /// computed by the runtime). Emit what became final and return the watermark to pass on.
    fn on_watermark(&mut self, watermark: EventTime, _out: &mut Output) -> Result<EventTime> {
        Ok(watermark)
    }

    /// All inputs delivered the barrier of `epoch` (aligned by the runtime): write this
    /// epoch's state through the operator's [`crate::state::StateHandle`]; the runtime then
    /// checkpoints the task's store. A sink pre-commits here (its output up to the barrier
    /// becomes durable, not yet visible) and returns what its
    /// [`crate::checkpoint::Committer`] needs to commit it once the checkpoint is complete.
    /// At the end of input this is called once more, with the next epoch, for what the sink
    /// received after the last barrier.
    fn snapshot(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    /// Every input ended. Emit anything still held.
    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }
}
