//! `WindowAggregateOperator`: grouped aggregation per event-time window, vectorized through
//! DataFusion's `GroupValues` and `GroupsAccumulator`s.
//!
//! - input: rows carrying `window_start` / `window_end` (added at the source by the window
//!   table function), already routed by the keyed exchange so that each group key lives in one
//!   instance.
//! - state: for each open window (keyed by its end), the interned group keys and one
//!   accumulator per aggregate.
//! - on watermark W: every window with `end <= W` emits one row per group, in order of `end`,
//!   and its state is dropped. A row for a window that already fired is late: dropped and counted
//!   (the source drops late rows first, so this only guards the invariant).
//! - without a window (a plain GROUP BY over a bounded source) there is one window that fires
//!   when the watermark reaches +infinity, i.e. at end of input.
//! - memory: open windows live in memory up to the task's budget; past it, the windows that
//!   fire last are spilled to the task's store as partial states ([`WindowStore`]) and merged
//!   back when they fire.
//! - at barrier: every window in memory is written to the store as a partial state, so the
//!   store holds the whole state of the epoch; the runtime then checkpoints the store.
//! - restore: the stored parts are the state; with a changed parallelism only the groups
//!   whose key routes to this instance are kept.

use std::collections::BTreeMap;

use ahash::AHashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, TimestampNanosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output};
use crate::operators::window_state::{PartRoute, WindowStore};

/// Which window column the input carries and groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowColumn {
    /// Input column `column` is `window_start`; the window ends `size` later.
    Start { column: usize, size: i64 },
    /// Input column `column` is `window_end`.
    End { column: usize, size: i64 },
}

/// One column of the GROUP BY list, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupColumn {
    /// The i-th non-window key expression.
    Key(usize),
    WindowStart,
    WindowEnd,
}

/// The plan node of a window aggregation.
#[derive(Debug, Clone)]
pub struct WindowAggregateSpec {
    pub input_schema: SchemaRef,
    /// Group keys other than the window columns, evaluated on the input.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// `None`: one window over the whole (bounded) input.
    pub window: Option<WindowColumn>,
    /// The GROUP BY list in output order.
    pub group_columns: Vec<GroupColumn>,
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each aggregate.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Group columns then aggregates.
    pub output_schema: SchemaRef,
    pub description: String,
}

impl OperatorFactory for WindowAggregateSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let key_fields = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(Field::new(
                    format!("k{i}"),
                    k.data_type(&self.input_schema)?,
                    true,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut state_fields = key_fields.clone();
        let mut state_widths = Vec::with_capacity(self.aggregates.len());
        for agg in &self.aggregates {
            let fields = agg.state_fields()?;
            state_widths.push(fields.len());
            state_fields.extend(fields.iter().map(|f| f.as_ref().clone()));
        }
        let mut windows = BTreeMap::new();
        if self.window.is_none() && self.keys.is_empty() {
            // A global aggregate yields one row even over no input, as in batch SQL.
            windows.insert(
                WATERMARK_MAX,
                WindowGroups::new(self, &Arc::new(Schema::new(key_fields.clone())))?,
            );
        }
        let route = match (self.keys.len(), self.window) {
            (0, Some(WindowColumn::Start { size, .. })) => PartRoute::Window { shift: size },
            (0, Some(WindowColumn::End { .. })) => PartRoute::Window { shift: 0 },
            (n, _) => PartRoute::Keys(n),
        };
        Ok(Box::new(WindowAggregateOperator {
            spec: self.clone(),
            key_schema: Arc::new(Schema::new(key_fields)),
            state_schema: Arc::new(Schema::new(state_fields)),
            state_widths,
            windows,
            watermark: i64::MIN,
            metrics: Arc::clone(&task.metrics),
            group_ids: Vec::new(),
            budget: task.state.memory_budget(),
            store: WindowStore::open(task.state.clone(), route, task.restored_epoch)?,
        }))
    }
}

/// The groups and accumulators of one window.
struct WindowGroups {
    /// `None` when there are no keys besides the window: every row is group 0.
    groups: Option<Box<dyn GroupValues>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

impl WindowGroups {
    fn new(spec: &WindowAggregateSpec, key_schema: &SchemaRef) -> Result<Self> {
        let groups = if spec.keys.is_empty() {
            None
        } else {
            Some(new_group_values(
                Arc::clone(key_schema),
                &GroupOrdering::None,
            )?)
        };
        let accumulators = spec
            .aggregates
            .iter()
            .map(|agg| -> Result<Box<dyn GroupsAccumulator>> {
                if agg.groups_accumulator_supported() {
                    Ok(agg.create_groups_accumulator()?)
                } else {
                    let agg = Arc::clone(agg);
                    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                        agg.create_accumulator()
                    })))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            groups,
            accumulators,
        })
    }

    fn num_groups(&self) -> usize {
        self.groups.as_ref().map_or(1, |g| g.len())
    }

    /// Bytes held.
    fn size(&self) -> usize {
        self.groups.as_ref().map_or(0, |g| g.size())
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }
}

/// A running window aggregation (one instance).
pub struct WindowAggregateOperator {
    spec: WindowAggregateSpec,
    key_schema: SchemaRef,
    /// Open windows by end.
    windows: BTreeMap<EventTime, WindowGroups>,
    watermark: EventTime,
    metrics: Arc<JobMetrics>,
    group_ids: Vec<usize>,
    /// Group keys then every accumulator's state columns: the layout of a stored part.
    state_schema: SchemaRef,
    /// State columns of each accumulator.
    state_widths: Vec<usize>,
    /// Bytes of window state kept in memory before spilling.
    budget: usize,
    /// Windows spilled or snapshotted to the task's store.
    store: WindowStore,
}

/// The evaluated inputs of one batch: keys, aggregate arguments and filters.
struct Evaluated {
    keys: Vec<ArrayRef>,
    args: Vec<Vec<ArrayRef>>,
    filters: Vec<Option<ArrayRef>>,
}

impl Evaluated {
    /// Rows `offset..offset + len`, without copying.
    fn slice(&self, offset: usize, len: usize) -> Self {
        let s = |a: &ArrayRef| a.slice(offset, len);
        Self {
            keys: self.keys.iter().map(s).collect(),
            args: self
                .args
                .iter()
                .map(|cols| cols.iter().map(s).collect())
                .collect(),
            filters: self.filters.iter().map(|f| f.as_ref().map(s)).collect(),
        }
    }

    fn take(&self, rows: &UInt32Array) -> Result<Self> {
        let t = |a: &ArrayRef| take(a.as_ref(), rows, None);
        Ok(Self {
            keys: self.keys.iter().map(t).collect::<Result<_, _>>()?,
            args: self
                .args
                .iter()
                .map(|cols| cols.iter().map(t).collect::<Result<_, _>>())
                .collect::<Result<_, _>>()?,
            filters: self
                .filters
                .iter()
                .map(|f| f.as_ref().map(t).transpose())
                .collect::<Result<_, _>>()?,
        })
    }
}

impl WindowAggregateOperator {
    fn evaluate(&self, batch: &RecordBatch) -> Result<Evaluated> {
        let n = batch.num_rows();
        let eval = |e: &Arc<dyn PhysicalExpr>| e.evaluate(batch).and_then(|v| v.into_array(n));
        Ok(Evaluated {
            keys: self.spec.keys.iter().map(eval).collect::<Result<_, _>>()?,
            args: self
                .spec
                .aggregates
                .iter()
                .map(|a| {
                    a.expressions()
                        .iter()
                        .map(eval)
                        .collect::<Result<Vec<_>, _>>()
                })
                .collect::<Result<_, _>>()?,
            filters: self
                .spec
                .filters
                .iter()
                .map(|f| f.as_ref().map(eval).transpose())
                .collect::<Result<_, _>>()?,
        })
    }

    /// The end of each row's window.
    fn window_ends(&self, batch: &RecordBatch) -> Result<Option<Vec<EventTime>>> {
        let Some(window) = self.spec.window else {
            return Ok(None);
        };
        let (column, shift) = match window {
            WindowColumn::Start { column, size } => (column, size),
            WindowColumn::End { column, .. } => (column, 0),
        };
        let values = timestamps_as_nanos(batch.column(column))?;
        if values.null_count() > 0 {
            return Err(EngineError::Internal("window column holds NULL".into()));
        }
        Ok(Some(
            values
                .values()
                .iter()
                .map(|v| v.saturating_add(shift))
                .collect(),
        ))
    }

    fn update(&mut self, end: EventTime, input: &Evaluated) -> Result<()> {
        let window = match self.windows.entry(end) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(WindowGroups::new(&self.spec, &self.key_schema)?)
            }
        };
        let rows = input.args.first().and_then(|a| a.first()).map(|a| a.len());
        let rows = rows
            .or_else(|| input.keys.first().map(|k| k.len()))
            .unwrap_or(0);
        match &mut window.groups {
            Some(groups) => groups.intern(&input.keys, &mut self.group_ids)?,
            None => {
                self.group_ids.clear();
                self.group_ids.resize(rows, 0);
            }
        }
        let total = window.num_groups();
        for (i, acc) in window.accumulators.iter_mut().enumerate() {
            let filter: Option<&BooleanArray> =
                input.filters[i].as_ref().and_then(|f| f.as_boolean_opt());
            acc.update_batch(&input.args[i], &self.group_ids, filter, total)?;
        }
        Ok(())
    }

    /// The partial state of a window, as one batch of [`Self::state_schema`] (consumes it);
    /// `None` when the window holds nothing (a global aggregate before its first row).
    fn to_part(&self, mut window: WindowGroups) -> Result<Option<RecordBatch>> {
        let mut columns = match &mut window.groups {
            Some(g) => g.emit(EmitTo::All)?,
            None => Vec::new(),
        };
        for acc in window.accumulators.iter_mut() {
            columns.extend(acc.state(EmitTo::All)?);
        }
        let n = columns.first().map_or(0, |c| c.len());
        if n == 0 {
            return Ok(None);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(Some(RecordBatch::try_new_with_options(
            Arc::clone(&self.state_schema),
            columns,
            &options,
        )?))
    }

    /// Merges a stored partial state into a window.
    fn merge_part(&mut self, window: &mut WindowGroups, part: &RecordBatch) -> Result<()> {
        let keys = self.spec.keys.len();
        match &mut window.groups {
            Some(groups) => groups.intern(&part.columns()[..keys], &mut self.group_ids)?,
            None => {
                self.group_ids.clear();
                self.group_ids.resize(part.num_rows(), 0);
            }
        }
        let total = window.num_groups();
        let mut at = keys;
        for (acc, width) in window.accumulators.iter_mut().zip(&self.state_widths) {
            acc.merge_batch(&part.columns()[at..at + width], &self.group_ids, total)?;
            at += width;
        }
        Ok(())
    }

    /// Writes windows in memory to the store, latest end first,
    /// until at most `target` bytes are held; `target == 0` writes them all.
    fn spill(&mut self, target: usize) -> Result<()> {
        let mut held: usize = self.windows.values().map(|w| w.size()).sum();
        let mut parts = Vec::new();
        let mut empty = Vec::new();
        while held > target || (target == 0 && !self.windows.is_empty()) {
            let Some((end, window)) = self.windows.pop_last() else {
                break;
            };
            held = held.saturating_sub(window.size());
            match self.to_part(window)? {
                Some(part) => parts.push((end, part)),
                // Nothing to store, but the window must still fire (a global aggregate
                // yields its row even over no input).
                None => empty.push(end),
            }
        }
        for end in empty {
            self.windows
                .insert(end, WindowGroups::new(&self.spec, &self.key_schema)?);
        }
        self.store.write_parts(parts)
    }

    /// Fires the window ending at `end`: its memory part merged with its stored parts.
    fn fire(&mut self, end: EventTime, out: &mut Output) -> Result<()> {
        let mut window = match self.windows.remove(&end) {
            Some(w) => w,
            None => WindowGroups::new(&self.spec, &self.key_schema)?,
        };
        if self.store.has(end) {
            let schema = Arc::clone(&self.state_schema);
            for part in self.store.take(end, &schema)? {
                self.merge_part(&mut window, &part)?;
            }
        }
        if let Some(batch) = self.emit(end, window)? {
            out.emit(batch);
        }
        Ok(())
    }

    /// Emits the final rows of one window.
    fn emit(&self, end: EventTime, mut window: WindowGroups) -> Result<Option<RecordBatch>> {
        let keys = match &mut window.groups {
            Some(g) => g.emit(EmitTo::All)?,
            None => Vec::new(),
        };
        let n = keys.first().map_or(1, |k| k.len());
        if n == 0 {
            return Ok(None);
        }
        let size = match self.spec.window {
            Some(WindowColumn::Start { size, .. } | WindowColumn::End { size, .. }) => size,
            None => 0,
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.output_schema.fields().len());
        for g in &self.spec.group_columns {
            columns.push(match *g {
                GroupColumn::Key(i) => Arc::clone(&keys[i]),
                GroupColumn::WindowStart => {
                    Arc::new(TimestampNanosecondArray::from_value(end - size, n))
                }
                GroupColumn::WindowEnd => Arc::new(TimestampNanosecondArray::from_value(end, n)),
            });
        }
        for (i, acc) in window.accumulators.iter_mut().enumerate() {
            let values = acc.evaluate(EmitTo::All)?;
            if values.len() != n {
                return Err(EngineError::Internal(format!(
                    "window ending {end}: {n} groups, but aggregate {} gave {} values",
                    self.spec.aggregates[i].name(),
                    values.len()
                )));
            }
            columns.push(values);
        }
        let fields = self.spec.output_schema.fields();
        let columns = columns
            .into_iter()
            .zip(fields.iter())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    cast(&c, f.data_type())
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(Some(RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.output_schema),
            columns,
            &options,
        )?))
    }
}

impl WindowAggregateOperator {
    /// Spills windows when memory holds more than the budget, down to half of it.
    fn enforce_budget(&mut self) -> Result<()> {
        if self.budget == usize::MAX {
            return Ok(());
        }
        let held: usize = self.windows.values().map(|w| w.size()).sum();
        if held > self.budget {
            self.spill(self.budget / 2)?;
        }
        Ok(())
    }
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> &str {
        "WindowAggregate"
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
        let evaluated = self.evaluate(&batch)?;
        let Some(ends) = self.window_ends(&batch)? else {
            self.update(WATERMARK_MAX, &evaluated)?;
            return self.enforce_budget();
        };
        let first = ends[0];
        if ends.iter().all(|&e| e == first) {
            if first <= self.watermark {
                self.metrics.add_late_rows(ends.len() as u64);
                return Ok(());
            }
            self.update(first, &evaluated)?;
            return self.enforce_budget();
        }
        // Several windows in one batch. Rows usually come in runs of one window (the window
        // assigner groups them): each run is a zero-copy slice.
        let boundaries = ends.windows(2).filter(|w| w[0] != w[1]).count();
        if boundaries < 64 {
            let mut from = 0;
            while from < ends.len() {
                let end = ends[from];
                let len = ends[from..].iter().take_while(|&&e| e == end).count();
                if end <= self.watermark {
                    self.metrics.add_late_rows(len as u64);
                } else {
                    let part = evaluated.slice(from, len);
                    self.update(end, &part)?;
                }
                from += len;
            }
            return self.enforce_budget();
        }
        // Interleaved: split rows by window, in order of first appearance.
        let mut runs: Vec<(EventTime, Vec<u32>)> = Vec::new();
        let mut index: AHashMap<EventTime, usize> = AHashMap::new();
        for (row, &end) in ends.iter().enumerate() {
            let slot = *index.entry(end).or_insert_with(|| {
                runs.push((end, Vec::new()));
                runs.len() - 1
            });
            runs[slot].1.push(row as u32);
        }
        for (end, rows) in runs {
            if end <= self.watermark {
                self.metrics.add_late_rows(rows.len() as u64);
                continue;
            }
            let part = evaluated.take(&UInt32Array::from(rows))?;
            self.update(end, &part)?;
        }
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.watermark = self.watermark.max(watermark);
        for end in self.store.ready_with(self.watermark, [&self.windows]) {
            self.fire(end, out)?;
        }
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        self.spill(0)?;
        self.store.next_epoch(epoch);
        Ok(None)
    }
}
