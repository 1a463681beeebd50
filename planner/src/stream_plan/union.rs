//! `UNION ALL`: the inputs' streams merged into one stage. The stage's watermark is the
//! minimum of its inputs' (the runtime's input gate takes it), so a window downstream fires
//! only when every input has passed its end.

use std::sync::Arc;

use datafusion::logical_expr::Union;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::{Partitioning, Stage, StageInput};

use super::{Stream, StreamPlanner};
use crate::error::{PlanError, Result};

impl StreamPlanner<'_> {
    /// A stage reading every input of the union. Inputs of one parallelism are forwarded
    /// instance to instance; otherwise rows are spread by the hash of all their columns.
    pub(super) fn plan_union(&mut self, union: &Union) -> Result<Stream> {
        let inputs = union
            .inputs
            .iter()
            .map(|input| self.plan(input))
            .collect::<Result<Vec<_>>>()?;
        for input in &inputs {
            self.append_only(input, "UNION")?;
        }
        let fields = union.schema.fields();
        for (n, input) in inputs.iter().enumerate() {
            let types = input.schema.fields().iter().map(|f| f.data_type());
            if input.schema.fields().len() != fields.len()
                || !types.eq(fields.iter().map(|f| f.data_type()))
            {
                return Err(PlanError::Internal(format!(
                    "UNION input {n} has columns {}, the union {}",
                    input.schema, union.schema
                )));
            }
        }
        // A column is a window column of the union when it is the same one in every input.
        let windows = (0..fields.len())
            .map(|i| {
                let first = inputs.first().and_then(|s| s.windows[i]);
                inputs
                    .iter()
                    .all(|s| s.windows[i] == first)
                    .then_some(first)
                    .flatten()
            })
            .collect();
        let parallelisms: Vec<usize> = inputs
            .iter()
            .map(|s| self.stages[s.stage].parallelism)
            .collect();
        let (parallelism, stage_inputs) = match parallelisms.first() {
            Some(&p) if parallelisms.iter().all(|&q| q == p) => (
                p,
                inputs
                    .iter()
                    .map(|s| StageInput {
                        from: s.stage,
                        partitioning: Partitioning::Forward,
                    })
                    .collect(),
            ),
            _ => (
                self.parallelism,
                inputs
                    .iter()
                    .map(|s| StageInput {
                        from: s.stage,
                        partitioning: self.spread(s),
                    })
                    .collect(),
            ),
        };
        self.stages.push(Stage {
            name: "union".into(),
            parallelism,
            source: None,
            inputs: stage_inputs,
            chain: Vec::new(),
            late_rows: None,
        });
        Ok(Stream {
            stage: self.stages.len() - 1,
            schema: union.schema.clone(),
            rowtime: vec![false; union.schema.fields().len()],
            windows,
            bounded: inputs.iter().all(|s| s.bounded),
            // Rows of the inputs interleave as they arrive.
            unordered: true,
            updating: None,
            unique_key: None,
        })
    }

    /// Rows of `stream` spread over the instances by the hash of all their columns.
    fn spread(&self, stream: &Stream) -> Partitioning {
        if self.parallelism == 1 {
            return Partitioning::Single;
        }
        let columns = stream
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| Arc::new(PhysicalColumn::new(f.name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        Partitioning::Hash(columns)
    }
}
