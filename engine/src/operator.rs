//! The operator trait: what a dataflow operator implements. The runtime does everything else
//! (channels, watermark minimum, barrier alignment, routing).

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::Result;
use crate::message::EventTime;

/// The most rows of a batch passed between operators (DataFusion's batch size).
pub const MAX_BATCH_ROWS: usize = 8192;

/// Where an operator puts the batches it emits. The runtime passes them on to the next operator
/// in the chain, or across the stage's output edge, when the call returns; or, while it
/// fires windows (watermarks, end of input), at each [`Output::flush`], so that an operator
/// emitting more than fits in memory in one call (a large window, merged in parts) never holds
/// all of it.
#[derive(Default)]
pub struct Output<'a> {
    batches: Vec<RecordBatch>,
    late: Vec<RecordBatch>,
    /// Where flushed batches go, when the runtime streams this call's output.
    stream: Option<&'a mut dyn FnMut(RecordBatch) -> Result<()>>,
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("batches", &self.batches.len())
            .field("late", &self.late.len())
            .field("streaming", &self.stream.is_some())
            .finish()
    }
}

impl<'a> Output<'a> {
    /// An output whose flushed batches go to `stream` at once.
    pub fn streaming(stream: &'a mut dyn FnMut(RecordBatch) -> Result<()>) -> Self {
        Self {
            batches: Vec::new(),
            late: Vec::new(),
            stream: Some(stream),
        }
    }

    /// Emit a batch downstream. Empty batches are dropped; one of more than
    /// [`MAX_BATCH_ROWS`] rows goes on as copies of that many rows each, so that what waits in
    /// a channel (a number of batches) stays small whatever an operator emits at once.
    pub fn emit(&mut self, batch: RecordBatch) {
        let rows = batch.num_rows();
        if rows <= MAX_BATCH_ROWS {
            if rows > 0 {
                self.batches.push(batch);
            }
            return;
        }
        for at in (0..rows).step_by(MAX_BATCH_ROWS) {
            let slice = batch.slice(at, MAX_BATCH_ROWS.min(rows - at));
            // A copy, so that no chunk keeps the whole batch alive.
            match concat_batches(&slice.schema(), [&slice]) {
                Ok(chunk) => self.batches.push(chunk),
                Err(_) => self.batches.push(slice),
            }
        }
    }

    /// Passes on what was emitted so far, now, when the runtime streams this call's output
    /// (otherwise it waits for the call to return). Errors are those of the operators
    /// downstream.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(stream) = self.stream.as_mut() {
            for b in std::mem::take(&mut self.batches) {
                stream(b)?;
            }
        }
        Ok(())
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

    /// How often the runtime calls [`Operator::on_timer`] (processing time), `None` for
    /// never. Asked once, when the task starts.
    fn timer_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// The operator's timer is due (at least [`Operator::timer_interval`] after the last
    /// call): emit what it holds back until then.
    fn on_timer(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// A barrier is about to be snapshotted (Flink's `prepareSnapshotPreBarrier`): emit
    /// anything held in memory only, so that the output up to the barrier carries every
    /// change the state up to the barrier includes. Called before [`Operator::snapshot`] of
    /// any operator of the task; what it emits reaches the operators after it first.
    fn prepare_barrier(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }
}

/// An operator's result batch of `rows` rows: each column cast to its field's type in
/// `schema` where it differs ([`cast_columns`]).
pub fn output_batch(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    rows: usize,
) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        cast_columns(schema, columns)?,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// Each column cast to the type of its field in `schema` where it differs (a result computed
/// in a wider type, a window bound as the plan types it).
pub fn cast_columns(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<Vec<ArrayRef>> {
    Ok(columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c)
            } else {
                cast(&c, f.data_type())
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()?)
}
