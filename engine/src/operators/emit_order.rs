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
use datafusion::arrow::row::{OwnedRow, Row, RowConverter, SortField};

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::operator::{Operator, Output};
use crate::operators::windowed::{
    buckets_for, split_by_window, BufferedRows, LaneState, OpenWindows, PartRoute, WindowColumn,
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

    /// Emits the held rows of windows ending at or before `watermark`, sorted: in memory when
    /// they fit in the budget, else in key ranges, one range at a time.
    fn flush(&mut self, watermark: EventTime, out: &mut Output) -> Result<()> {
        let ends = self.held.advance(watermark);
        if ends.is_empty() {
            return Ok(());
        }
        let mut bytes = 0u64;
        for end in &ends {
            bytes += self.held.window_bytes(0, *end)?;
        }
        // Sorting a piece takes its rows, a copy in one batch and the sorted copy.
        let buckets = buckets_for(bytes, self.held.budget(), 3);
        if buckets > 1 {
            if let Some(rows) = self.row_converter() {
                return self.flush_in_ranges(&ends, buckets, rows, out);
            }
        }
        let mut ready = Vec::new();
        for end in ends {
            let taken = self.held.take(0, end)?;
            ready.extend(
                taken
                    .memory
                    .map(BufferedRows::into_batches)
                    .unwrap_or_default(),
            );
            ready.extend(taken.parts);
        }
        if let Some(sorted) = self.sorted(&ready)? {
            out.emit(sorted);
        }
        Ok(())
    }

    /// `batches` as one batch sorted by every column; types without an ordering (lists, maps)
    /// keep window, then arrival, order.
    fn sorted(&self, batches: &[RecordBatch]) -> Result<Option<RecordBatch>> {
        if batches.is_empty() {
            return Ok(None);
        }
        let all = concat_batches(&self.spec.schema, batches)?;
        let columns: Vec<SortColumn> = all
            .columns()
            .iter()
            .map(|c| SortColumn {
                values: Arc::clone(c),
                options: None,
            })
            .collect();
        match lexsort_to_indices(&columns, None) {
            Ok(indices) => Ok(Some(take_record_batch(&all, &indices)?)),
            Err(_) => Ok(Some(all)),
        }
    }

    /// Comparable rows of every column, in the order [`Self::sorted`] sorts by; `None` when a
    /// column's type has no ordering.
    fn row_converter(&self) -> Option<RowConverter> {
        let fields = self
            .spec
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        RowConverter::new(fields).ok()
    }

    /// Emits the rows of windows `ends`, which hold more than the budget, sorted: a sample
    /// of their rows splits the sort order into `buckets` ranges; every window is spread over
    /// the ranges (one stored part at a time); then each range is read, sorted and passed on
    /// alone, in order.
    fn flush_in_ranges(
        &mut self,
        ends: &[EventTime],
        buckets: usize,
        rows: RowConverter,
        out: &mut Output,
    ) -> Result<()> {
        let schema = Arc::clone(&self.spec.schema);
        let mut sample = Sample::new(buckets.saturating_mul(SAMPLES_PER_RANGE).min(1 << 20));
        for end in ends {
            self.held.for_each_part(
                0,
                *end,
                |held| held.to_part(&schema),
                |part| {
                    let converted = rows.convert_columns(part.columns())?;
                    for row in converted.iter() {
                        sample.offer(row);
                    }
                    Ok(())
                },
            )?;
        }
        let splitters = sample.splitters(buckets);
        let mut assign = |part: &RecordBatch| -> Result<Vec<usize>> {
            let converted = rows.convert_columns(part.columns())?;
            Ok(converted
                .iter()
                .map(|row| splitters.partition_point(|s| s.row() <= row))
                .collect())
        };
        for end in ends {
            self.held
                .spread(0, *end, |held| held.into_part(&schema), &mut assign)?;
        }
        for bucket in 0..=splitters.len() {
            let mut parts = Vec::new();
            for end in ends {
                parts.extend(self.held.take_bucket(0, *end, bucket)?);
            }
            if let Some(sorted) = self.sorted(&parts)? {
                drop(parts);
                out.emit(sorted);
                out.flush()?;
            }
        }
        for end in ends {
            self.held.drop_spread(0, *end)?;
        }
        Ok(())
    }
}

/// Sampled rows per key range of [`EmitOrderOperator::flush_in_ranges`]: enough that ranges
/// come out near their intended size.
const SAMPLES_PER_RANGE: usize = 32;

/// A uniform sample of rows seen one at a time (reservoir sampling, with a fixed seed: the
/// ranges do not change the output, only how it is cut).
struct Sample {
    rows: Vec<OwnedRow>,
    capacity: usize,
    seen: u64,
    random: u64,
}

impl Sample {
    fn new(capacity: usize) -> Self {
        Self {
            rows: Vec::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
            seen: 0,
            random: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn offer(&mut self, row: Row<'_>) {
        self.seen += 1;
        if self.rows.len() < self.capacity {
            self.rows.push(row.owned());
            return;
        }
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let at = (self.random % self.seen) as usize;
        if at < self.capacity {
            self.rows[at] = row.owned();
        }
    }

    /// Up to `buckets - 1` distinct rows cutting the sample into equal ranges, in order.
    fn splitters(mut self, buckets: usize) -> Vec<OwnedRow> {
        self.rows.sort_unstable();
        let n = self.rows.len();
        let mut cuts: Vec<OwnedRow> = (1..buckets)
            .filter_map(|i| self.rows.get(i * n / buckets).cloned())
            .collect();
        cuts.dedup();
        cuts
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
