//! `CalcOperator`: filter then project, through DataFusion physical expressions.
//!
//! - input: any batch; output: the rows passing `predicate`, with `projection` evaluated.
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
        }
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
        let columns = exprs
            .iter()
            .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
            .collect::<Result<Vec<_>, _>>()?;
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
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}
