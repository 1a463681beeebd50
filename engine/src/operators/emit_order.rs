//! `EmitOrderOperator`: makes the merged results of a parallel aggregation come out in one
//! order, whatever the parallelism and thread timing.
//!
//! - input: result rows from several instances, interleaved by timing.
//! - output: when watermark W arrives, the held rows of windows that ended at or before W,
//!   sorted by all columns (in schema order, so window columns first when selected first).
//!   Instances fire at their own pace, so rows of later windows may already be here; they wait
//!   for their own watermark. Without a window column in the output, everything held is
//!   emitted at each watermark.
//! - state: result rows not yet emitted; written to the task's store at each barrier and read
//!   back on restore.
//! - at end: the rest, sorted.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::kernels::boolean::not;
use datafusion::arrow::compute::{
    concat_batches, filter_record_batch, lexsort_to_indices, take_record_batch, SortColumn,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::operator::{Operator, Output};
use crate::state::{decode_batch, encode_batch, StateHandle, WriteBatch};

/// Plan node of the emit-order step.
#[derive(Debug, Clone)]
pub struct EmitOrderSpec {
    pub schema: SchemaRef,
    /// A column holding each row's window: its index and what to add to get the window end
    /// (0 for `window_end`, the size for `window_start`).
    pub window: Option<(usize, i64)>,
}

impl OperatorFactory for EmitOrderSpec {
    fn describe(&self) -> String {
        "EmitOrder: each watermark's results sorted by all columns".into()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let mut pending = Vec::new();
        if let Some(restore) = task.state.restore() {
            let (lo, hi) = task.state.all();
            for store in &restore.stores {
                for (_, v) in store.scan(&lo, &hi)? {
                    pending.push(decode_batch(&v)?);
                }
            }
        }
        Ok(Box::new(EmitOrderOperator {
            spec: self.clone(),
            stored: !pending.is_empty(),
            pending,
            state: task.state.clone(),
        }))
    }
}

/// A running emit-order step.
pub struct EmitOrderOperator {
    spec: EmitOrderSpec,
    pending: Vec<RecordBatch>,
    state: StateHandle,
    /// Whether the store holds rows from an earlier snapshot (to be replaced).
    stored: bool,
}

impl EmitOrderOperator {
    /// Emits the held rows of windows ending at or before `watermark`, sorted.
    fn flush(&mut self, watermark: EventTime, out: &mut Output) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let all = concat_batches(&self.spec.schema, &std::mem::take(&mut self.pending))?;
        let ready = match self.spec.window {
            Some((column, shift)) if watermark < i64::MAX => {
                let ends = timestamps_as_nanos(all.column(column))?;
                let done: BooleanArray = ends
                    .iter()
                    .map(|e| Some(e.is_none_or(|e| e.saturating_add(shift) <= watermark)))
                    .collect();
                let rest = filter_record_batch(&all, &not(&done)?)?;
                if rest.num_rows() > 0 {
                    self.pending.push(rest);
                }
                filter_record_batch(&all, &done)?
            }
            _ => all,
        };
        if ready.num_rows() == 0 {
            return Ok(());
        }
        let all = ready;
        let columns: Vec<SortColumn> = all
            .columns()
            .iter()
            .map(|c| SortColumn {
                values: Arc::clone(c),
                options: None,
            })
            .collect();
        // Types without an ordering (lists, maps) keep arrival order.
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
        self.pending.push(batch);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.flush(watermark, out)?;
        Ok(watermark)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.flush(i64::MAX, out)
    }

    fn snapshot(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        if self.pending.is_empty() && !self.stored {
            return Ok(None);
        }
        let mut batch = WriteBatch {
            puts: Vec::new(),
            delete_ranges: vec![self.state.all()],
        };
        if !self.pending.is_empty() {
            let all = concat_batches(&self.spec.schema, &self.pending)?;
            batch.puts.push((self.state.key(&[0]), encode_batch(&all)?));
        }
        self.stored = !self.pending.is_empty();
        self.state.store()?.write(batch)?;
        Ok(None)
    }
}
