//! `BlackholeSink` (`connector = 'blackhole'`, as in Flink): counts rows and discards them.
//! For benchmarks and for trying a query's cost without an external system.
//!
//! - input: result rows; output: none. Every instance of the last stage discards its own rows.
//! - on watermark: records the job's output watermark in its metrics.
//! - at barrier / commit: nothing to make durable; it acknowledges like any operator, so
//!   exactly-once jobs still pay for barrier alignment and state snapshots upstream.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{JobMetrics, Operator, OperatorFactory, Output, Result, TaskInfo};

use crate::error::Result as ConnectorResult;
use crate::options::Options;

/// Plan node of the blackhole sink.
pub struct BlackholeSinkFactory;

impl BlackholeSinkFactory {
    pub fn from_options(sink: &str, options: &mut Options) -> ConnectorResult<Self> {
        options.finish(&format!("blackhole sink {sink}"), &["connector"])?;
        Ok(Self)
    }
}

impl OperatorFactory for BlackholeSinkFactory {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "BlackholeSink: rows counted and discarded".into()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(BlackholeSink {
            metrics: Arc::clone(&task.metrics),
        }))
    }
}

struct BlackholeSink {
    metrics: Arc<JobMetrics>,
}

impl Operator for BlackholeSink {
    fn name(&self) -> &str {
        "BlackholeSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> Result<()> {
        self.metrics.add_rows_out(batch.num_rows() as u64);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, _out: &mut Output) -> Result<i64> {
        self.metrics.set_watermark(watermark);
        Ok(watermark)
    }
}
