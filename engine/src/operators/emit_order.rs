//! `EmitOrderOperator`: makes the merged results of a parallel aggregation come out in one
//! order, whatever the parallelism and thread timing.
//!
//! - input: result rows from several instances, interleaved by timing.
//! - output: when watermark W arrives, the held rows of windows that ended at or before W,
//!   sorted by all columns (in schema order, so window columns first when selected first).
//!   Instances fire at their own pace, so rows of later windows may already be here; they wait
//!   for their own watermark. Rows without a window (no window column in the output, or a NULL
//!   one) are emitted at the next watermark.
//! - state: result rows not yet emitted, by window ([`OpenWindows`], one lane): in memory up
//!   to the task's budget, written to the task's store past it and at each barrier, read back
//!   on restore. Runs as one instance (its input is merged), so a restore keeps every row.
//! - at end: the rest, sorted.

use std::sync::Arc;

use datafusion::arrow::compute::{
    concat_batches, lexsort_to_indices, take_record_batch, SortColumn,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::operator::{Operator, Output};
use crate::operators::windowed::{
    split_by_window, BufferedRows, LaneState, OpenWindows, PartRoute, WindowColumn,
};

/// Plan node of the emit-order step.
#[derive(Debug, Clone)]
pub struct EmitOrderSpec {
    pub schema: SchemaRef,
    /// A column holding each row's window, if the output has one.
    pub window: Option<WindowColumn>,
}

impl OperatorFactory for EmitOrderSpec {
    fn describe(&self) -> String {
        "EmitOrder: each watermark's results sorted by all columns".into()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let lane = LaneState {
            handle: task.state.clone(),
            route: PartRoute::Single,
            part_schema: Arc::clone(&self.schema),
        };
        Ok(Box::new(EmitOrderOperator {
            spec: self.clone(),
            held: OpenWindows::open(vec![lane], task.state.memory_budget(), task.restored_epoch)?,
        }))
    }
}

/// A running emit-order step.
pub struct EmitOrderOperator {
    spec: EmitOrderSpec,
    /// Rows not emitted yet, by window; rows without a window under [`EventTime::MIN`].
    held: OpenWindows<BufferedRows>,
}

impl EmitOrderOperator {
    fn hold(&mut self, end: EventTime, rows: RecordBatch) -> Result<()> {
        self.held.update(
            0,
            end,
            || Ok(BufferedRows::default()),
            |b| {
                b.push(rows);
                Ok(())
            },
        )
    }

    /// Emits the held rows of windows ending at or before `watermark`, sorted.
    fn flush(&mut self, watermark: EventTime, out: &mut Output) -> Result<()> {
        let mut ready = Vec::new();
        for end in self.held.advance(watermark) {
            let taken = self.held.take(0, end)?;
            ready.extend(
                taken
                    .memory
                    .map(BufferedRows::into_batches)
                    .unwrap_or_default(),
            );
            ready.extend(taken.parts);
        }
        if ready.is_empty() {
            return Ok(());
        }
        let all = concat_batches(&self.spec.schema, &ready)?;
        let columns: Vec<SortColumn> = all
            .columns()
            .iter()
            .map(|c| SortColumn {
                values: Arc::clone(c),
                options: None,
            })
            .collect();
        // Types without an ordering (lists, maps) keep window, then arrival, order.
        match lexsort_to_indices(&columns, None) {
            Ok(indices) => out.emit(take_record_batch(&all, &indices)?),
            Err(_) => out.emit(all),
        }
        Ok(())
    }
}

impl Operator for EmitOrderOperator {
    fn name(&self) -> &str {
        "EmitOrder"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match self.spec.window {
            None => self.hold(EventTime::MIN, batch)?,
            Some(window) => {
                // Rows are never late here: each instance sends a window's rows before the
                // watermark that closes it; rows of windows already closed (NULL windows)
                // wait for the next one.
                let ends = window.ends_or_min(&batch)?;
                for run in split_by_window(&ends) {
                    self.hold(run.end, run.owned_batch(&batch)?)?;
                }
            }
        }
        let schema = &self.spec.schema;
        self.held.enforce_budget(|_, rows| rows.into_part(schema))
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.flush(watermark, out)?;
        Ok(watermark)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.flush(WATERMARK_MAX, out)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = &self.spec.schema;
        self.held
            .snapshot(epoch, |_, rows| rows.into_part(schema))?;
        Ok(None)
    }
}
