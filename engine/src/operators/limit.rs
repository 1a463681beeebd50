//! `LimitOperator`: OFFSET / LIMIT over the merged result stream (one instance).
//!
//! - input: rows; output: rows `skip..skip+fetch` in arrival order, then nothing.
//! - state: a row counter.

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::operator::{Operator, Output};

/// Plan node of a limit.
#[derive(Debug, Clone)]
pub struct LimitSpec {
    pub skip: usize,
    pub fetch: Option<usize>,
}

impl OperatorFactory for LimitSpec {
    fn describe(&self) -> String {
        match self.fetch {
            Some(f) => format!("Limit: skip={}, fetch={f}", self.skip),
            None => format!("Limit: skip={}", self.skip),
        }
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(LimitOperator {
            skip: self.skip,
            remaining: self.fetch,
        }))
    }
}

/// A running limit.
pub struct LimitOperator {
    skip: usize,
    remaining: Option<usize>,
}

impl Operator for LimitOperator {
    fn name(&self) -> &str {
        "Limit"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        let n = batch.num_rows();
        let skip = self.skip.min(n);
        self.skip -= skip;
        let mut take = n - skip;
        if let Some(r) = self.remaining.as_mut() {
            take = take.min(*r);
            *r -= take;
        }
        if take > 0 {
            out.emit(batch.slice(skip, take));
        }
        Ok(())
    }
}
