//! Operator chaining: the operators of one task, fed synchronously one into the next.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::operator::{Operator, Output};
use crate::runtime::task::JobShared;

/// An operator's error, saying which operator it was.
fn at_operator(op: &dyn Operator, e: EngineError) -> EngineError {
    e.at(format!("operator {}", op.name()))
}

/// The operators of one task, in order, and the task's late-rows writer (if the job keeps late
/// rows): every late batch an operator emits goes there. The writer counts as the operator
/// after the last for checkpoints (its pre-commits carry that position).
pub struct Chain {
    ops: Vec<Box<dyn Operator>>,
    late: Option<Box<dyn Operator>>,
    /// Set when the job is cancelled: an operator streaming a long output (a large window
    /// fired in pieces, a huge join) stops at its next batch.
    cancel: Option<Arc<JobShared>>,
}

impl Chain {
    pub fn new(ops: Vec<Box<dyn Operator>>) -> Self {
        Self {
            ops,
            late: None,
            cancel: None,
        }
    }

    /// Long calls stop when `shared` says the job was cancelled.
    pub fn with_cancel(mut self, shared: Arc<JobShared>) -> Self {
        self.cancel = Some(shared);
        self
    }

    /// Late rows go to `writer`.
    pub fn with_late_rows(mut self, writer: Option<Box<dyn Operator>>) -> Self {
        self.late = writer;
        self
    }

    /// Hands late rows to the writer (dropped without one: they were counted already).
    pub fn late(&mut self, batches: Vec<RecordBatch>) -> Result<()> {
        write_late(&mut self.late, batches)
    }

    /// Feeds a batch from logical input `input` into the first operator.
    pub fn process(&mut self, batch: RecordBatch, input: usize) -> Result<Vec<RecordBatch>> {
        let Some((first, rest)) = self.ops.split_first_mut() else {
            return Ok(vec![batch]);
        };
        let mut out = Output::default();
        first
            .process_batch(batch, input, &mut out)
            .map_err(|e| at_operator(first.as_ref(), e))?;
        write_late(&mut self.late, out.take_late())?;
        push_through(rest, &mut self.late, out.take())
    }

    /// Advances the watermark through the chain; what comes out goes to `emit` as it comes
    /// (a fired window that is merged in parts is passed on part by part). Returns the
    /// watermark to forward.
    pub fn on_watermark(
        &mut self,
        mut watermark: EventTime,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<EventTime> {
        for i in 0..self.ops.len() {
            watermark = self.each_streaming(i, emit, |op, out| op.on_watermark(watermark, out))?;
        }
        Ok(watermark)
    }

    /// The shortest timer interval of the chain's operators, if any has a timer.
    pub fn timer_interval(&self) -> Option<std::time::Duration> {
        self.ops.iter().filter_map(|op| op.timer_interval()).min()
    }

    /// The chain's timer is due: calls each operator that has one, in order; what comes out
    /// goes through the operators after it and on to `emit`.
    pub fn on_timer(&mut self, emit: &mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()> {
        for i in 0..self.ops.len() {
            if self.ops[i].timer_interval().is_some() {
                self.each_streaming(i, emit, |op, out| op.on_timer(out))?;
            }
        }
        Ok(())
    }

    /// A barrier comes: lets each operator, in order, emit what it holds in memory only, so
    /// it reaches the operators after it (and the output) before any of them snapshots.
    pub fn prepare_barrier(
        &mut self,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        for i in 0..self.ops.len() {
            self.each_streaming(i, emit, |op, out| op.prepare_barrier(out))?;
        }
        Ok(())
    }

    /// All inputs ended: lets each operator flush, in order; what comes out goes to `emit` as
    /// it comes.
    pub fn finish(&mut self, emit: &mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()> {
        for i in 0..self.ops.len() {
            self.each_streaming(i, emit, |op, out| op.finish(out))?;
        }
        Ok(())
    }

    /// Calls operator `i` with an output that passes what it flushes through the operators
    /// after it and on to `emit`.
    fn each_streaming<R>(
        &mut self,
        i: usize,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
        call: impl FnOnce(&mut dyn Operator, &mut Output) -> Result<R>,
    ) -> Result<R> {
        let cancelled = || {
            self.cancel
                .as_deref()
                .is_some_and(|c| c.cancel.load(Ordering::Relaxed))
        };
        // A cancelled job fires nothing more (its inputs end when it is torn down).
        if cancelled() {
            return Err(EngineError::Cancelled);
        }
        let (head, rest) = self.ops.split_at_mut(i + 1);
        let op = &mut head[i];
        let late = &mut self.late;
        let cancel = self.cancel.as_deref();
        let mut late_rows = Vec::new();
        let result = {
            let mut pass_on = |b: RecordBatch| -> Result<()> {
                if cancel.is_some_and(|c| c.cancel.load(Ordering::Relaxed)) {
                    return Err(EngineError::Cancelled);
                }
                for b in push_through(rest, late, vec![b])? {
                    emit(b)?;
                }
                Ok(())
            };
            let mut out = Output::streaming(&mut pass_on);
            let result = call(op.as_mut(), &mut out).map_err(|e| at_operator(op.as_ref(), e))?;
            late_rows.extend(out.take_late());
            out.flush()?;
            result
        };
        write_late(late, late_rows)?;
        Ok(result)
    }

    /// Snapshots every operator for `epoch`, in order, then the late-rows writer. Returns the
    /// sinks' pre-commit payloads with each sink's position in the chain.
    pub fn snapshot(&mut self, epoch: u64) -> Result<Vec<(usize, Vec<u8>)>> {
        let mut commits = Vec::new();
        for (i, op) in self.ops.iter_mut().chain(self.late.as_mut()).enumerate() {
            let payload = op
                .snapshot(epoch)
                .map_err(|e| at_operator(op.as_ref(), e))?;
            if let Some(payload) = payload {
                commits.push((i, payload));
            }
        }
        Ok(commits)
    }
}

/// Hands late rows to the writer (dropped without one: they were counted already).
fn write_late(writer: &mut Option<Box<dyn Operator>>, batches: Vec<RecordBatch>) -> Result<()> {
    let Some(writer) = writer.as_mut() else {
        return Ok(());
    };
    let mut unused = Output::default();
    for b in batches {
        writer
            .process_batch(b, 0, &mut unused)
            .map_err(|e| at_operator(writer.as_ref(), e))?;
    }
    Ok(())
}

/// Pushes `batches` through `ops`, in order; their late rows go to `late`.
fn push_through(
    ops: &mut [Box<dyn Operator>],
    late: &mut Option<Box<dyn Operator>>,
    mut batches: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
    let mut out = Output::default();
    let mut late_rows = Vec::new();
    for op in ops.iter_mut() {
        if batches.is_empty() {
            break;
        }
        for b in batches {
            op.process_batch(b, 0, &mut out)
                .map_err(|e| at_operator(op.as_ref(), e))?;
        }
        batches = out.take();
        late_rows.extend(out.take_late());
    }
    write_late(late, late_rows)?;
    Ok(batches)
}
