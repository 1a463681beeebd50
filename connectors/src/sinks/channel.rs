//! `ChannelSink`: hands result batches to the front end (REPL, script runner, tests) as they
//! are produced, through a bounded channel, so a slow reader slows the job instead of
//! buffering without bound.
//!
//! - input: result rows; output: none. An updating result's rows go out with their change
//!   kind as text in a first column `op` (`+I`, `-U`, `+U`, `-D`; DESIGN.md §8).
//! - on watermark: records the job's output watermark in its metrics.
//! - at end: the channel closes, which tells the reader the query is complete.

use std::sync::Arc;

use crossbeam_channel::Sender;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::changelog;
use weir_engine::{EngineError, JobMetrics, Operator, OperatorFactory, Output, Result, TaskInfo};

/// What the front end receives.
#[derive(Debug)]
pub enum SinkEvent {
    Batch(RecordBatch),
    /// The job's output watermark advanced (windows up to here are final).
    Watermark(i64),
}

/// Plan node of the channel sink.
pub struct ChannelSink {
    sender: Sender<SinkEvent>,
}

impl ChannelSink {
    pub fn new(sender: Sender<SinkEvent>) -> Self {
        Self { sender }
    }
}

impl OperatorFactory for ChannelSink {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "ResultSink: to client".into()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ChannelSinkOperator {
            sender: Some(self.sender.clone()),
            metrics: Arc::clone(&task.metrics),
        }))
    }
}

struct ChannelSinkOperator {
    sender: Option<Sender<SinkEvent>>,
    metrics: Arc<JobMetrics>,
}

impl ChannelSinkOperator {
    fn send(&self, event: SinkEvent) -> Result<()> {
        match &self.sender {
            Some(s) => s.send(event).map_err(|_| EngineError::Cancelled),
            None => Err(EngineError::Internal("result sink used after end".into())),
        }
    }
}

impl Operator for ChannelSinkOperator {
    fn name(&self) -> &str {
        "ResultSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> Result<()> {
        self.metrics.add_rows_out(batch.num_rows() as u64);
        let batch = if changelog::has_op_field(batch.schema_ref()) {
            changelog::to_text(&batch)?
        } else {
            batch
        };
        self.send(SinkEvent::Batch(batch))
    }

    fn on_watermark(&mut self, watermark: i64, _out: &mut Output) -> Result<i64> {
        self.metrics.set_watermark(watermark);
        self.send(SinkEvent::Watermark(watermark))?;
        Ok(watermark)
    }

    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        self.sender = None;
        Ok(())
    }
}
