//! Operator chaining: the operators of one task, fed synchronously one into the next.

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::operator::{Operator, Output};

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
}

impl Chain {
    pub fn new(ops: Vec<Box<dyn Operator>>) -> Self {
        Self { ops, late: None }
    }

    /// Late rows go to `writer`.
    pub fn with_late_rows(mut self, writer: Option<Box<dyn Operator>>) -> Self {
        self.late = writer;
        self
    }

    /// Hands late rows to the writer (dropped without one: they were counted already).
    pub fn late(&mut self, batches: Vec<RecordBatch>) -> Result<()> {
        let Some(writer) = self.late.as_mut() else {
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

    /// Pushes batches emitted by operator `from - 1` through operators `from..`.
    fn push_from(
        &mut self,
        from: usize,
        mut batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let mut out = Output::default();
        let mut late = Vec::new();
        for op in self.ops.iter_mut().skip(from) {
            if batches.is_empty() {
                break;
            }
            for b in batches {
                op.process_batch(b, 0, &mut out)
                    .map_err(|e| at_operator(op.as_ref(), e))?;
            }
            batches = out.take();
            late.extend(out.take_late());
        }
        self.late(late)?;
        Ok(batches)
    }

    /// What an operator emitted: its late rows to the writer, its rows on through the chain.
    fn emitted(&mut self, from: usize, mut out: Output) -> Result<Vec<RecordBatch>> {
        let late = out.take_late();
        self.late(late)?;
        self.push_from(from, out.take())
    }

    /// Feeds a batch from logical input `input` into the first operator.
    pub fn process(&mut self, batch: RecordBatch, input: usize) -> Result<Vec<RecordBatch>> {
        let Some(first) = self.ops.first_mut() else {
            return Ok(vec![batch]);
        };
        let mut out = Output::default();
        first
            .process_batch(batch, input, &mut out)
            .map_err(|e| at_operator(first.as_ref(), e))?;
        self.emitted(1, out)
    }

    /// Advances the watermark through the chain. Returns the batches that came out and the
    /// watermark to forward.
    pub fn on_watermark(
        &mut self,
        mut watermark: EventTime,
    ) -> Result<(Vec<RecordBatch>, EventTime)> {
        let mut emitted = Vec::new();
        for i in 0..self.ops.len() {
            let mut out = Output::default();
            let op = &mut self.ops[i];
            watermark = op
                .on_watermark(watermark, &mut out)
                .map_err(|e| at_operator(op.as_ref(), e))?;
            emitted.extend(self.emitted(i + 1, out)?);
        }
        Ok((emitted, watermark))
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

    /// All inputs ended: let each operator flush, in order.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let mut emitted = Vec::new();
        for i in 0..self.ops.len() {
            let mut out = Output::default();
            let op = &mut self.ops[i];
            op.finish(&mut out)
                .map_err(|e| at_operator(op.as_ref(), e))?;
            emitted.extend(self.emitted(i + 1, out)?);
        }
        Ok(emitted)
    }
}
