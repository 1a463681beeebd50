//! `PaneWindowsOperator`: the step of a HOP aggregation in panes ([`crate::panes`]) that turns
//! each pane's partial states into the partial states of the windows holding the pane, for
//! the final aggregation to merge.
//!
//! - input: partial states from a [`super::LocalAggregateSpec`] that grouped rows by pane:
//!   the group keys, the pane column (a pane code as a pane-long window's bound), then each
//!   aggregate's state columns.
//! - output: each row once per window it counts in (the pane's windows, less those its rows
//!   missed as late), with the pane column replaced by the window's `window_end`. Rows come
//!   grouped by the window's rank among their pane's windows, so with panes in time order a
//!   window's rows come in a few runs.
//! - watermarks pass unchanged: a pane's partials come before the watermark that closes it,
//!   and every window holding the pane ends at or after the pane.
//! - state: none.
//!
//! The copies are of partial states (a pane's groups), not of input rows: a row is
//! aggregated once however many windows hold it.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::operator::{Operator, Output};
use crate::operators::windowed::WindowColumn;
use crate::panes::Panes;

/// Plan node of the pane-to-window step.
#[derive(Debug, Clone)]
pub struct PaneWindowsSpec {
    pub panes: Panes,
    /// The pane column of the input (its bound is that of pane-long windows).
    pub column: WindowColumn,
    /// The input's, with `window_end` (nanoseconds) in place of the pane column.
    pub output_schema: SchemaRef,
    pub description: String,
}

impl OperatorFactory for PaneWindowsSpec {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(PaneWindowsOperator {
            spec: self.clone(),
            ranks: Vec::new(),
        }))
    }
}

/// A running pane-to-window step.
pub struct PaneWindowsOperator {
    spec: PaneWindowsSpec,
    /// Per rank among a pane's windows (0: the latest), the rows and their window ends;
    /// reused across batches.
    ranks: Vec<(Vec<u32>, Vec<EventTime>)>,
}

impl Operator for PaneWindowsOperator {
    fn name(&self) -> &str {
        "PaneWindows"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let panes = self.spec.panes;
        // The pane column's window "ends" are code + pane.
        let codes = self.spec.column.ends(&batch)?;
        for (rows, ends) in &mut self.ranks {
            rows.clear();
            ends.clear();
        }
        for (row, &end) in codes.iter().enumerate() {
            let mut rank = 0;
            let ranks = &mut self.ranks;
            panes.for_each_window(end.saturating_sub(panes.pane()), |_, end| {
                if ranks.len() <= rank {
                    ranks.push((Vec::new(), Vec::new()));
                }
                ranks[rank].0.push(row as u32);
                ranks[rank].1.push(end);
                rank += 1;
            });
        }
        let n: usize = self.ranks.iter().map(|(rows, _)| rows.len()).sum();
        if n == 0 {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        for (r, e) in &self.ranks {
            rows.extend_from_slice(r);
            ends.extend_from_slice(e);
        }
        let rows = UInt32Array::from(rows);
        let window = self.spec.column.index;
        let columns = batch
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == window {
                    Ok(
                        Arc::new(TimestampNanosecondArray::from(std::mem::take(&mut ends)))
                            as ArrayRef,
                    )
                } else {
                    Ok(take(c.as_ref(), &rows, None)?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        out.emit(RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.output_schema),
            columns,
            &options,
        )?);
        Ok(())
    }
}
