//! `SortOperator`: ORDER BY (with an optional LIMIT) over a bounded stream.
//!
//! - input: rows; output: all rows, sorted, at end of input.
//! - state: every row seen (the planner only uses it over bounded sources).
//! - on watermark: nothing; at end: sort and emit.

use std::sync::Arc;

use datafusion::arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::PhysicalSortExpr;

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::operator::{Operator, Output};

/// Plan node of a sort.
#[derive(Debug, Clone)]
pub struct SortSpec {
    pub schema: SchemaRef,
    pub order: Vec<PhysicalSortExpr>,
    /// Keep only the first `fetch` rows.
    pub fetch: Option<usize>,
    pub description: String,
}

impl OperatorFactory for SortSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(SortOperator {
            spec: self.clone(),
            rows: Vec::new(),
        }))
    }
}

/// A running sort.
pub struct SortOperator {
    spec: SortSpec,
    rows: Vec<RecordBatch>,
}

impl Operator for SortOperator {
    fn name(&self) -> &str {
        "Sort"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> Result<()> {
        self.rows.push(batch);
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        let all = concat_batches(
            &Arc::clone(&self.spec.schema),
            &std::mem::take(&mut self.rows),
        )?;
        if all.num_rows() == 0 {
            return Ok(());
        }
        let columns = self
            .spec
            .order
            .iter()
            .map(|e| e.evaluate_to_sort_column(&all))
            .collect::<Result<Vec<_>, _>>()?;
        let indices = lexsort_to_indices(&columns, self.spec.fetch)?;
        out.emit(take_record_batch(&all, &indices)?);
        Ok(())
    }
}
