//! `EmitOrderOperator`: makes the merged results of a parallel aggregation come out in one
//! order, whatever the parallelism and thread timing.
//!
//! - input: result rows from several instances, interleaved by timing.
//! - output: when watermark W arrives, the held rows of windows that ended at or before W,
//!   sorted by all columns (in schema order, so window columns first when selected first).
//!   Instances fire at their own pace, so rows of later windows may already be here; they wait
//!   for their own watermark. Rows without a window (no window column in the output, or a NULL
//!   one) are emitted at the next watermark.
//! - state: result rows not yet emitted, as they arrived, each batch held under the earliest
//!   window end among its rows ([`OpenWindows`], one lane): in memory up to the task's budget,
//!   written to the task's store past it and at each barrier, read back on restore. A watermark
//!   takes the batches held under ends it passed and puts back the rows of later windows under
//!   their own earliest end. Holding batches, not windows, keeps a result of one row per window
//!   (a SESSION per key) at the cost of its rows, not of a window each. Runs as one instance
//!   (its input is merged), so a restore keeps every row.
//! - at end: the rest, sorted.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::{
    concat_batches, filter_record_batch, lexsort_to_indices, not, take_record_batch, SortColumn,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, Row, RowConverter, SortField};

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::operator::{Operator, Output};
use crate::operators::windowed::{
    buckets_for, BufferedRows, LaneState, OpenWindows, PartRoute, WindowColumn,
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
        let held = OpenWindows::open(vec![lane], task.state.memory_budget(), task.restored_epoch)?;
        // Restored batches may hold rows of any later window.
        let reach = held
            .ends_between(0, EventTime::MIN, EventTime::MAX)
            .into_iter()
            .map(|end| (end, EventTime::MAX))
            .collect();
        Ok(Box::new(EmitOrderOperator {
            spec: self.clone(),
            held,
            reach,
        }))
    }
}

/// A running emit-order step.
pub struct EmitOrderOperator {
    spec: EmitOrderSpec,
    /// Rows not emitted yet, each batch under the earliest end of its rows' windows; rows
    /// without a window end at [`EventTime::MIN`].
    held: OpenWindows<BufferedRows>,
    /// For each end batches are held under, the latest end of their rows (`MAX` for batches
    /// restored from a checkpoint: not known).
    reach: BTreeMap<EventTime, EventTime>,
}

impl EmitOrderOperator {
    /// Holds `rows`, whose windows end at `ends`, under the earliest of them.
    fn hold(&mut self, rows: RecordBatch, ends: &[EventTime]) -> Result<()> {
        let (Some(first), Some(last)) = (ends.iter().min(), ends.iter().max()) else {
            return Ok(());
        };
        let reach = self.reach.entry(*first).or_insert(*last);
        *reach = (*reach).max(*last);
        self.held.push(0, *first, [rows])
    }

    /// Each row's window end (`MIN` without a window).
    fn ends(&self, rows: &RecordBatch) -> Result<Vec<EventTime>> {
        match self.spec.window {
            Some(window) => window.ends_or_min(rows),
            None => Ok(vec![EventTime::MIN; rows.num_rows()]),
        }
    }

    /// Makes the batches held under `ends` (all at or before `watermark`) hold only rows of
    /// windows ending at or before it: batches that reach past it are taken, their rows of
    /// later windows held again under their own earliest end.
    fn settle(&mut self, watermark: EventTime, ends: &[EventTime]) -> Result<()> {
        for end in ends {
            if self.reach.get(end).is_some_and(|r| *r <= watermark) {
                continue;
            }
            self.reach.remove(end);
            let taken = self.held.take(0, *end)?;
            let batches = taken
                .memory
                .map(BufferedRows::into_batches)
                .unwrap_or_default()
                .into_iter()
                .chain(taken.parts);
            for rows in batches {
                let row_ends = self.ends(&rows)?;
                if row_ends.iter().all(|e| *e <= watermark) {
                    self.hold(rows, &row_ends)?;
                    continue;
                }
                let due: BooleanArray = row_ends.iter().map(|e| Some(*e <= watermark)).collect();
                let (now, later): (Vec<_>, Vec<_>) =
                    row_ends.iter().partition(|e| **e <= watermark);
                self.hold(filter_record_batch(&rows, &due)?, &now)?;
                self.hold(filter_record_batch(&rows, &not(&due)?)?, &later)?;
            }
        }
        Ok(())
    }

    /// Emits the held rows of windows ending at or before `watermark`, sorted: in memory when
    /// they fit in the budget, else in key ranges, one range at a time.
    fn flush(&mut self, watermark: EventTime, out: &mut Output) -> Result<()> {
        let ends = self.held.advance(watermark);
        if ends.is_empty() {
            return Ok(());
        }
        self.settle(watermark, &ends)?;
        for end in &ends {
            self.reach.remove(end);
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
        self.enforce_budget()
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let schema = &self.spec.schema;
        self.held.enforce_budget(|_, rows| rows.into_part(schema))
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
        self.enforce_budget()
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
        // Rows are never late here: each instance sends a window's rows before the watermark
        // that closes it; rows of windows already closed (NULL windows) wait for the next one.
        let ends = self.ends(&batch)?;
        self.hold(batch, &ends)?;
        self.enforce_budget()
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
