//! `UNION ALL`: the inputs' streams merged into one stage. The stage's watermark is the
//! minimum of its inputs' (the runtime's input gate takes it), so a window downstream fires
//! only when every input has passed its end. With an updating input the union is updating
//! (DESIGN.md §8): the changelogs merge, append-only inputs' rows as inserts.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::Union;
use datafusion::physical_expr::expressions::{Column as PhysicalColumn, Literal};
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::changelog::{self, Op};
use weir_engine::operators::CalcOperator;
use weir_engine::{Partitioning, Stage, StageInput};

use super::{arrow_schema, Stream, StreamPlanner};
use crate::error::{PlanError, Result};
use crate::not_supported;

impl StreamPlanner<'_> {
    /// A stage reading every input of the union. Inputs of one parallelism are forwarded
    /// instance to instance; otherwise rows are spread by the hash of all their columns.
    pub(super) fn plan_union(&mut self, union: &Union) -> Result<Stream> {
        let inputs = union
            .inputs
            .iter()
            .map(|input| self.plan(input))
            .collect::<Result<Vec<_>>>()?;
        // A union with an updating input is updating: its append-only inputs' rows become
        // inserts, and each input's changes keep their order (see `route`).
        let updating = inputs.iter().find_map(|s| s.updating);
        if updating.is_some() {
            for input in inputs.iter().filter(|s| s.updating.is_none()) {
                self.as_inserts(input);
            }
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
                    .map(|s| {
                        Ok(StageInput {
                            from: s.stage,
                            partitioning: self.route(s)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
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
            updating,
            unique_key: None,
            panes: None,
        })
    }

    /// An append-only input of an updating union: each row an insert (`+I`).
    fn as_inserts(&mut self, input: &Stream) {
        let arrow = arrow_schema(&input.schema);
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = arrow
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| Arc::new(PhysicalColumn::new(f.name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        exprs.push(Arc::new(Literal::new(ScalarValue::Int8(Some(
            Op::Insert.code(),
        )))));
        let calc = CalcOperator::new(
            None,
            Some(exprs),
            changelog::with_op_field(&arrow),
            "Project: every row an insert (+I)".into(),
        );
        self.push(input, Arc::new(calc));
    }

    /// How an input reaches a union stage of another parallelism: an append-only one spread
    /// by all its columns; an updating one by its unique key, so that each key's changes stay
    /// in one channel, in order.
    fn route(&self, stream: &Stream) -> Result<Partitioning> {
        if stream.updating.is_none() || self.parallelism == 1 {
            return Ok(self.spread(stream));
        }
        let Some(key) = &stream.unique_key else {
            return Err(not_supported!(
                "UNION ALL of an updating input without a key at another parallelism than the union's ({})",
                stream.updating.unwrap_or_default()
            ));
        };
        Ok(Partitioning::Hash(
            key.iter()
                .map(|&i| {
                    Arc::new(PhysicalColumn::new(stream.schema.field(i).name(), i))
                        as Arc<dyn PhysicalExpr>
                })
                .collect(),
        ))
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
