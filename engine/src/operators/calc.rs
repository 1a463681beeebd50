//! `CalcOperator`: filter then project, through DataFusion physical expressions.
//!
//! - input: any batch; output: the rows passing `predicate`, with `projection` evaluated.
//!   Over an updating stream (see [`crate::changelog`]) the change-kind column goes along: a
//!   filter keeps each passing row's kind, a projection appends the column unchanged.
//! - state: none. Watermarks, barriers and end pass through untouched.

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::operator::{Operator, Output};

/// A stateless filter + projection. Being stateless, the plan node is also the operator.
#[derive(Debug, Clone)]
pub struct CalcOperator {
    predicate: Option<Arc<dyn PhysicalExpr>>,
    /// `None` passes every column through.
    projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    output_schema: SchemaRef,
    description: String,
    /// The input is an updating stream: the projection carries its change-kind column.
    carry_op: bool,
}

impl CalcOperator {
    pub fn new(
        predicate: Option<Arc<dyn PhysicalExpr>>,
        projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
        output_schema: SchemaRef,
        description: String,
    ) -> Self {
        Self {
            predicate,
            projection,
            output_schema,
            description,
            carry_op: false,
        }
    }

    /// The same step over an updating stream: the projection keeps the change kinds (the
    /// last input column) as its last output column; `output_schema` includes it.
    pub fn carrying_op(mut self) -> Self {
        self.carry_op = true;
        self
    }

    /// Filter and project one batch.
    pub fn apply(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let batch = match &self.predicate {
            Some(p) => {
                let mask = p.evaluate(&batch)?.into_array(batch.num_rows())?;
                let mask = mask.as_boolean_opt().ok_or_else(|| {
                    EngineError::Internal(format!("filter {p} did not return booleans"))
                })?;
                filter_record_batch(&batch, mask)?
            }
            None => batch,
        };
        let Some(exprs) = &self.projection else {
            return Ok(batch);
        };
        let n = batch.num_rows();
        let mut columns = exprs
            .iter()
            .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
            .collect::<Result<Vec<_>, _>>()?;
        if self.carry_op {
            columns.push(crate::changelog::op_array(&batch)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns,
            &options,
        )?)
    }
}

impl Operator for CalcOperator {
    fn name(&self) -> &str {
        "Calc"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        out.emit(self.apply(batch)?);
        Ok(())
    }
}

impl OperatorFactory for CalcOperator {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}
