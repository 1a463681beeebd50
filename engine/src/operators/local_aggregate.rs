//! `LocalAggregateOperator`: the first phase of a two-phase window aggregation (Flink's
//! local-global aggregation, DataFusion's partial aggregate), chained into the input's tasks
//! before the keyed exchange.
//!
//! - input: the rows of the aggregation (as its one-phase form would take them).
//! - output: partial states — the group keys, the window column, then each aggregate's state
//!   columns ([`WindowAggregateSpec::split`]) — one row per window and group per flush, which
//!   the final phase behind the exchange merges. Only these cross the exchange.
//! - state: none across barriers. Groups accumulate in memory between flushes, up to
//!   [`FLUSH_GROUPS`] groups or [`FLUSH_BYTES`] (a bounded buffer, outside the memory budget).
//! - on watermark W: the windows ending at or before W are flushed before W goes on, so the
//!   final phase has every partial of a window before it fires it.
//! - at barrier: everything is flushed before the barrier goes on (the final phase's snapshot
//!   then holds it), so this operator has nothing to snapshot or restore.
//! - adaptive: when, over the first [`PROBE_ROWS`] rows, the flushes give more than
//!   [`SKIP_RATIO`] of a row per input row (keys rarely repeat), the operator flushes after
//!   every batch instead of holding groups (DataFusion's skip of partial aggregation).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::scalar::ScalarValue;

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::operator::{Operator, Output};
use crate::operators::window_aggregate::{WindowAggregateSpec, WindowGroups};
use crate::operators::windowed::{split_by_window, Run, RunRows, WindowContents};

/// Past this many groups held (all windows together), everything is flushed.
pub const FLUSH_GROUPS: usize = 16 * 1024;
/// Past this many bytes of groups and accumulators held, everything is flushed.
pub const FLUSH_BYTES: usize = 16 << 20;
/// Input rows after which the operator judges whether holding groups pays.
pub const PROBE_ROWS: u64 = 128 * 1024;
/// Partial rows per input row above which holding groups does not pay.
pub const SKIP_RATIO: f64 = 0.8;

/// The plan node of the local phase.
#[derive(Debug, Clone)]
pub struct LocalAggregateSpec {
    /// The aggregation in its one-phase form (keys, window, aggregates and filters over the
    /// input rows).
    pub aggregate: WindowAggregateSpec,
    /// Keys, window column, state columns.
    pub output_schema: SchemaRef,
    pub description: String,
}

impl OperatorFactory for LocalAggregateSpec {
    /// Its buffer is bounded on its own ([`FLUSH_BYTES`]); a share of the budget would be
    /// taken from the stateful tasks (q7's window join spilled when the source tasks, which
    /// chain this operator, counted as stateful).
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let (state_schema, state_widths) = self.aggregate.state_layout()?;
        let keys = self.aggregate.keys.len();
        let key_schema = Arc::new(Schema::new(state_schema.fields()[..keys].to_vec()));
        Ok(Box::new(LocalAggregateOperator {
            spec: self.clone(),
            key_schema,
            state_schema,
            state_widths,
            windows: BTreeMap::new(),
            group_ids: Vec::new(),
            rows_in: 0,
            rows_out: 0,
            judged: false,
            every_batch: false,
        }))
    }
}

/// One window's groups and the value of its window column (a one-row array).
struct HeldWindow {
    groups: WindowGroups,
    window_value: Option<ArrayRef>,
}

/// A running local phase (one instance).
pub struct LocalAggregateOperator {
    spec: LocalAggregateSpec,
    key_schema: SchemaRef,
    /// Keys then state columns (what [`WindowGroups::into_part`] yields).
    state_schema: SchemaRef,
    state_widths: Vec<usize>,
    /// Windows holding groups, by end.
    windows: BTreeMap<EventTime, HeldWindow>,
    group_ids: Vec<usize>,
    /// Rows taken and partial rows emitted (for the adaptive judgement).
    rows_in: u64,
    rows_out: u64,
    /// Whether holding groups pays was judged (after [`PROBE_ROWS`] rows).
    judged: bool,
    /// Holding groups did not pay: flush after every batch.
    every_batch: bool,
}

impl LocalAggregateOperator {
    /// Accumulates `rows` into the window ending at `end`; `window_value` gives the window
    /// column's value when the window is new.
    fn update(
        &mut self,
        end: EventTime,
        rows: &crate::operators::window_aggregate::Evaluated,
        window_value: impl FnOnce() -> Option<ArrayRef>,
    ) -> Result<()> {
        let held = match self.windows.entry(end) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(HeldWindow {
                groups: WindowGroups::new(&self.spec.aggregate, &self.key_schema)?,
                window_value: window_value(),
            }),
        };
        held.groups.update(rows, &mut self.group_ids)
    }

    /// Emits the partial states of every window ending at or before `up_to`.
    fn flush(&mut self, up_to: EventTime, out: &mut Output) -> Result<()> {
        let keep = match up_to.checked_add(1) {
            Some(after) => self.windows.split_off(&after),
            None => BTreeMap::new(),
        };
        let flushed = std::mem::replace(&mut self.windows, keep);
        for (_, held) in flushed {
            let Some(part) = held.groups.into_part(&self.state_schema)? else {
                continue;
            };
            let n = part.num_rows();
            let mut columns = part.columns().to_vec();
            if let Some(value) = &held.window_value {
                let value = ScalarValue::try_from_array(value, 0)?.to_array_of_size(n)?;
                columns.insert(self.spec.aggregate.keys.len(), value);
            }
            let options = RecordBatchOptions::new().with_row_count(Some(n));
            out.emit(RecordBatch::try_new_with_options(
                Arc::clone(&self.spec.output_schema),
                columns,
                &options,
            )?);
            self.rows_out += n as u64;
        }
        Ok(())
    }

    /// The groups held (all windows) and their bytes.
    fn held(&self) -> (usize, usize) {
        self.windows.values().fold((0, 0), |(g, b), w| {
            (g + w.groups.num_groups(), b + w.groups.bytes())
        })
    }
}

/// The first row of a run.
fn first_row(run: &Run) -> usize {
    match &run.rows {
        RunRows::Range { offset, .. } => *offset,
        RunRows::Rows(rows) => rows.value(0) as usize,
    }
}

impl Operator for LocalAggregateOperator {
    fn name(&self) -> &str {
        "LocalAggregate"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let evaluated = self.spec.aggregate.evaluate(&batch, &self.state_widths)?;
        match self.spec.aggregate.window {
            None => self.update(WATERMARK_MAX, &evaluated, || None)?,
            Some(window) => {
                let ends = window.ends(&batch)?;
                let column = batch.column(window.index);
                for run in split_by_window(&ends) {
                    let rows = evaluated.select(&run)?;
                    let at = first_row(&run);
                    self.update(run.end, &rows, || Some(column.slice(at, 1)))?;
                }
            }
        }
        self.rows_in += batch.num_rows() as u64;
        let (groups, bytes) = self.held();
        if !self.judged && self.rows_in >= PROBE_ROWS {
            self.judged = true;
            let partial_rows = self.rows_out + groups as u64;
            self.every_batch = partial_rows as f64 > SKIP_RATIO * self.rows_in as f64;
        }
        if self.every_batch || groups >= FLUSH_GROUPS || bytes >= FLUSH_BYTES {
            self.flush(EventTime::MAX, out)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.flush(watermark, out)?;
        Ok(watermark)
    }

    fn prepare_barrier(&mut self, out: &mut Output) -> Result<()> {
        self.flush(EventTime::MAX, out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.flush(EventTime::MAX, out)
    }
}
