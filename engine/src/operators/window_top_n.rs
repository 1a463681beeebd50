//! `WindowTopNOperator`: window Top-N and deduplication,
//! `ROW_NUMBER() OVER (PARTITION BY window_start, window_end [, keys] ORDER BY ...) <= N`.
//!
//! - input: rows carrying their window (`window_start` or `window_end`), routed by the keyed
//!   exchange on the partition keys other than the window (on the window column without any),
//!   so every row of one partition meets in one instance.
//! - state: for each open window (keyed by its end), the rows that arrived, as batches of
//!   `keys ++ row` (the evaluated partition keys first, so a stored part can be re-routed by
//!   them after a rescale). Rows of windows that already fired are late: dropped, counted.
//! - on watermark W: every window with `end <= W` fires once, in order of end: its rows are
//!   sorted by partition, then by the ORDER BY, then by every column of the row in schema
//!   order (ascending, NULLs first), and each partition's rows numbered from 1; the rows whose
//!   number is in `first..=last` are emitted with their number appended, and the window's
//!   state dropped. The tie rule makes the ranking independent of arrival order, so the same
//!   rows are emitted at every parallelism. Output is append-only: a window's rows come once.
//! - memory, barrier, restore: as every windowed operator ([`OpenWindows`]): held in memory up
//!   to the task's budget, written to the task's store past it and at each barrier, restored
//!   (re-routed by the keys at another parallelism).
//! - at end: the source's end sends the watermark +infinity, which fires every window.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{
    concat_batches, lexsort_to_indices, partition, take, take_record_batch, SortColumn, SortOptions,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::metrics::JobMetrics;
use crate::operator::{output_batch, Operator, Output};
use crate::operators::windowed::{
    BufferedRows, KeyedRows, LaneState, OpenWindows, PartRoute, WindowColumn,
};

/// Plan node of a window Top-N.
#[derive(Debug, Clone)]
pub struct WindowTopNSpec {
    pub input_schema: SchemaRef,
    /// The window of each row (one of the PARTITION BY columns).
    pub window: WindowColumn,
    /// The PARTITION BY expressions other than the window columns, evaluated on the input;
    /// the keyed exchange routes by them.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    pub order: Vec<PhysicalSortExpr>,
    /// Row numbers emitted: `first..=last` (1-based).
    pub first: u64,
    pub last: u64,
    /// The input's columns and the row number.
    pub output_schema: SchemaRef,
    pub description: String,
}

impl OperatorFactory for WindowTopNSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let part = KeyedRows::new(&self.keys, &self.input_schema)?;
        let route = match self.keys.len() {
            0 => PartRoute::Window(self.window.bound),
            n => PartRoute::Keys(n),
        };
        let lane = LaneState {
            handle: task.state.clone(),
            route,
            part_schema: Arc::clone(part.schema()),
        };
        Ok(Box::new(WindowTopNOperator {
            spec: self.clone(),
            part,
            windows: OpenWindows::open(
                vec![lane],
                task.state.memory_budget(),
                task.restored_epoch,
            )?,
            metrics: Arc::clone(&task.metrics),
        }))
    }
}

/// A running window Top-N.
pub struct WindowTopNOperator {
    spec: WindowTopNSpec,
    /// `keys ++ row`: the layout of held and stored rows.
    part: KeyedRows,
    windows: OpenWindows<BufferedRows>,
    metrics: Arc<JobMetrics>,
}

impl WindowTopNOperator {
    /// Ranks the rows of the window ending at `end` and emits the kept ones.
    fn fire(&mut self, end: EventTime, out: &mut Output) -> Result<()> {
        let taken = self.windows.take(0, end)?;
        let mut parts = taken
            .memory
            .map(BufferedRows::into_batches)
            .unwrap_or_default();
        parts.extend(taken.parts);
        if parts.is_empty() {
            return Ok(());
        }
        let all = concat_batches(self.part.schema(), &parts)?;
        if all.num_rows() == 0 {
            return Ok(());
        }
        let n_keys = self.spec.keys.len();
        let rows = RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.input_schema),
            all.columns()[n_keys..].to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(all.num_rows())),
        )?;
        let order = self.ranking_order(&all, &rows)?;
        let keys: Vec<ArrayRef> = all.columns()[..n_keys]
            .iter()
            .map(|k| take(k.as_ref(), &order, None))
            .collect::<Result<_, _>>()?;
        let (kept, numbers) = self.kept_rows(&keys, &order)?;
        if kept.is_empty() {
            return Ok(());
        }
        let selected = take_record_batch(&rows, &UInt32Array::from(kept))?;
        let mut columns = selected.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from(numbers)));
        out.emit(output_batch(
            &self.spec.output_schema,
            columns,
            selected.num_rows(),
        )?);
        Ok(())
    }

    /// The rows in ranking order: by partition keys, the ORDER BY, then every orderable
    /// column of the row (the tie rule).
    fn ranking_order(&self, all: &RecordBatch, rows: &RecordBatch) -> Result<UInt32Array> {
        let first = SortOptions {
            descending: false,
            nulls_first: true,
        };
        let mut columns: Vec<SortColumn> = all.columns()[..self.spec.keys.len()]
            .iter()
            .map(|k| SortColumn {
                values: Arc::clone(k),
                options: Some(first),
            })
            .collect();
        for o in &self.spec.order {
            columns.push(o.evaluate_to_sort_column(rows)?);
        }
        columns.extend(
            rows.columns()
                .iter()
                .filter(|c| orderable(c.data_type()))
                .map(|c| SortColumn {
                    values: Arc::clone(c),
                    options: Some(first),
                }),
        );
        Ok(lexsort_to_indices(&columns, None)?)
    }

    /// The rows to emit (indices into the window's rows) and their row numbers, from the
    /// rows in ranking order and their keys (in the same order).
    fn kept_rows(&self, keys: &[ArrayRef], order: &UInt32Array) -> Result<(Vec<u32>, Vec<u64>)> {
        let partitions: Vec<Range<usize>> = if keys.is_empty() {
            std::iter::once(0..order.len()).collect()
        } else {
            partition(keys)?.ranges()
        };
        let mut kept = Vec::new();
        let mut numbers = Vec::new();
        for range in partitions {
            for (i, position) in range.enumerate() {
                let number = i as u64 + 1;
                if number > self.spec.last {
                    break;
                }
                if number >= self.spec.first {
                    kept.push(order.value(position));
                    numbers.push(number);
                }
            }
        }
        Ok((kept, numbers))
    }
}

/// Types the tie rule can order by (nested types cannot be compared).
fn orderable(data_type: &DataType) -> bool {
    data_type.is_primitive()
        || matches!(
            data_type,
            DataType::Boolean
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        )
}

impl Operator for WindowTopNOperator {
    fn name(&self) -> &str {
        "WindowTopN"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, _out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input > 0 {
            return Err(EngineError::Internal(format!(
                "window Top-N has one input, got a batch on input {input}"
            )));
        }
        let part = self.part.of(&batch)?;
        let ends = self.spec.window.ends(&batch)?;
        for run in self.windows.open_runs(&ends, &self.metrics) {
            // Held until the window fires: a copy, so it keeps no other window's rows alive.
            let rows = run.owned_batch(&part)?;
            self.windows.push(0, run.end, [rows])?;
        }
        let schema = self.part.schema();
        self.windows
            .enforce_budget(|_, rows| rows.into_part(schema))
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        for end in self.windows.advance(watermark) {
            self.fire(end, out)?;
        }
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = self.part.schema();
        self.windows
            .snapshot(epoch, |_, rows| rows.into_part(schema))?;
        Ok(None)
    }
}
