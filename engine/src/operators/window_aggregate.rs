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
//!   fire last are spilled to the task's store as partial states and merged back when they
//!   fire ([`OpenWindows`] decides when and what).
//! - at barrier: every window in memory is written to the store as a partial state, so the
//!   store holds the whole state of the epoch; the runtime then checkpoints the store.
//! - restore: the stored parts are the state; with a changed parallelism only the groups
//!   whose key routes to this instance are kept.
//! - two phases ([`WindowAggregateSpec::split`]): behind an exchange, the input may be the
//!   partial states a [`LocalAggregateSpec`] made before it (keys, window, each aggregate's
//!   state columns, as Flink's local-global aggregation and DataFusion's partial/final);
//!   they are merged into the window's groups instead of accumulated.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::{output_batch, Operator, Output};
use crate::operators::local_aggregate::LocalAggregateSpec;
use crate::operators::windowed::{buckets_for, hash_buckets};
use crate::operators::windowed::{
    LaneState, OpenWindows, PartRoute, Run, WindowColumn, WindowContents,
};
use crate::window::WINDOW_TIME_BEFORE_END;

/// One column of the GROUP BY list, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupColumn {
    /// The i-th non-window key expression.
    Key(usize),
    WindowStart,
    WindowEnd,
    /// `window_time`: the end less a millisecond.
    WindowTime,
}

/// What a window aggregation's input rows hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AggregateInput {
    /// Rows: the aggregates' arguments and filters are evaluated on them.
    #[default]
    Rows,
    /// Partial states from a [`LocalAggregateSpec`]: the group keys, then the window column
    /// (when there is a window), then each aggregate's state columns. They are merged.
    Partials,
}

/// The plan node of a window aggregation.
#[derive(Debug, Clone)]
pub struct WindowAggregateSpec {
    pub input_schema: SchemaRef,
    /// Group keys other than the window columns, evaluated on the input.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The window column the input carries and groups by; `None`: one window over the whole
    /// (bounded) input.
    pub window: Option<WindowColumn>,
    /// The GROUP BY list in output order.
    pub group_columns: Vec<GroupColumn>,
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each aggregate.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Group columns then aggregates.
    pub output_schema: SchemaRef,
    pub description: String,
    /// Rows, or partial states to merge (the final phase of [`Self::split`]).
    pub input: AggregateInput,
}

impl WindowAggregateSpec {
    /// The fields of the group keys other than the window (`k0`, `k1`, ...).
    fn key_fields(&self) -> Result<Vec<Field>> {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(Field::new(
                    format!("k{i}"),
                    k.data_type(&self.input_schema)?,
                    true,
                ))
            })
            .collect()
    }

    /// Splits the aggregation into two phases: a [`LocalAggregateSpec`] that runs before the
    /// keyed exchange, in the input's tasks, and emits partial states (keys, window column,
    /// each aggregate's state columns); and a final aggregation behind the exchange that
    /// merges them (its keys are the partial rows' first columns, its window the column after
    /// them). Results are those of the one-phase aggregation; what crosses the exchange is
    /// one row per group and window per flush of the local phase instead of every input row.
    pub fn split(&self) -> Result<(LocalAggregateSpec, WindowAggregateSpec)> {
        if self.input == AggregateInput::Partials {
            return Err(EngineError::Internal(
                "a final aggregation cannot be split again".into(),
            ));
        }
        let mut fields = self.key_fields()?;
        let keys = fields.len();
        if let Some(window) = self.window {
            fields.push(self.input_schema.field(window.index).clone());
        }
        for agg in &self.aggregates {
            fields.extend(agg.state_fields()?.iter().map(|f| f.as_ref().clone()));
        }
        let partial_schema: SchemaRef = Arc::new(Schema::new(fields));
        let aggregates = self
            .aggregates
            .iter()
            .map(|a| a.name().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let local = LocalAggregateSpec {
            aggregate: self.clone(),
            output_schema: Arc::clone(&partial_schema),
            description: format!(
                "LocalAggregate: partial [{aggregates}] per window and key, before the exchange"
            ),
        };
        let merged = WindowAggregateSpec {
            input_schema: partial_schema,
            keys: (0..keys)
                .map(|i| Arc::new(Column::new(&format!("k{i}"), i)) as Arc<dyn PhysicalExpr>)
                .collect(),
            window: self.window.map(|w| WindowColumn::new(keys, w.bound)),
            filters: vec![None; self.aggregates.len()],
            description: format!("{} (merging partial states)", self.description),
            input: AggregateInput::Partials,
            ..self.clone()
        };
        Ok((local, merged))
    }

    /// The keys, the aggregates' arguments and their filters, evaluated on `batch`; for
    /// partial states, the key columns and each aggregate's `state_widths` state columns.
    pub(crate) fn evaluate(
        &self,
        batch: &RecordBatch,
        state_widths: &[usize],
    ) -> Result<Evaluated> {
        let n = batch.num_rows();
        if self.input == AggregateInput::Partials {
            let keys = self.keys.len();
            let mut at = keys + usize::from(self.window.is_some());
            let columns = batch.columns();
            if columns.len() != at + state_widths.iter().sum::<usize>() {
                return Err(EngineError::Internal(format!(
                    "partial states with {} columns, expected {}",
                    columns.len(),
                    at + state_widths.iter().sum::<usize>()
                )));
            }
            let args = state_widths
                .iter()
                .map(|w| {
                    at += w;
                    columns[at - w..at].to_vec()
                })
                .collect();
            return Ok(Evaluated {
                rows: n,
                keys: columns[..keys].to_vec(),
                args,
                filters: vec![None; self.aggregates.len()],
            });
        }
        let eval = |e: &Arc<dyn PhysicalExpr>| e.evaluate(batch).and_then(|v| v.into_array(n));
        Ok(Evaluated {
            rows: n,
            keys: self.keys.iter().map(eval).collect::<Result<_, _>>()?,
            args: self
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
                .filters
                .iter()
                .map(|f| f.as_ref().map(eval).transpose())
                .collect::<Result<_, _>>()?,
        })
    }

    /// Group keys then each aggregate's state columns (the layout of a stored part), and the
    /// number of state columns of each aggregate.
    pub(crate) fn state_layout(&self) -> Result<(SchemaRef, Vec<usize>)> {
        let mut state_fields = self.key_fields()?;
        let mut state_widths = Vec::with_capacity(self.aggregates.len());
        for agg in &self.aggregates {
            let fields = agg.state_fields()?;
            state_widths.push(fields.len());
            state_fields.extend(fields.iter().map(|f| f.as_ref().clone()));
        }
        Ok((Arc::new(Schema::new(state_fields)), state_widths))
    }
}

impl OperatorFactory for WindowAggregateSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let key_fields = self.key_fields()?;
        let (state_schema, state_widths) = self.state_layout()?;
        let route = match (self.keys.len(), self.window) {
            (0, Some(window)) => PartRoute::Window(window.bound),
            (n, _) => PartRoute::Keys(n),
        };
        let lane = LaneState {
            handle: task.state.clone(),
            route,
            part_schema: Arc::clone(&state_schema),
        };
        let mut windows =
            OpenWindows::open(vec![lane], task.state.memory_budget(), task.restored_epoch)?;
        if self.window.is_none() && self.keys.is_empty() {
            // A global aggregate yields one row even over no input, as in batch SQL.
            windows.declare(WATERMARK_MAX);
        }
        Ok(Box::new(WindowAggregateOperator {
            spec: self.clone(),
            key_schema: Arc::new(Schema::new(key_fields)),
            state_schema,
            state_widths,
            windows,
            metrics: Arc::clone(&task.metrics),
            group_ids: Vec::new(),
        }))
    }
}

/// The groups and accumulators of one window.
pub(crate) struct WindowGroups {
    /// `None` when there are no keys besides the window: every row is group 0.
    groups: Option<Box<dyn GroupValues>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// No row reached the accumulators yet.
    accumulators_unused: bool,
    /// Updates merge partial states instead of accumulating rows.
    merges: bool,
}

impl WindowContents for WindowGroups {
    fn bytes(&self) -> usize {
        self.groups.as_ref().map_or(0, |g| g.size())
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }
}

impl WindowGroups {
    pub(crate) fn new(spec: &WindowAggregateSpec, key_schema: &SchemaRef) -> Result<Self> {
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
            accumulators_unused: true,
            merges: spec.input == AggregateInput::Partials,
        })
    }

    pub(crate) fn num_groups(&self) -> usize {
        self.groups.as_ref().map_or(1, |g| g.len())
    }

    /// Interns `keys` (`rows` of them; none without keys) into `group_ids`.
    fn intern(&mut self, keys: &[ArrayRef], rows: usize, group_ids: &mut Vec<usize>) -> Result<()> {
        match &mut self.groups {
            Some(groups) => groups.intern(keys, group_ids)?,
            None => {
                group_ids.clear();
                group_ids.resize(rows, 0);
            }
        }
        Ok(())
    }

    /// Accumulates evaluated input rows (merges them, when they are partial states).
    pub(crate) fn update(&mut self, input: &Evaluated, group_ids: &mut Vec<usize>) -> Result<()> {
        self.intern(&input.keys, input.rows, group_ids)?;
        self.accumulators_unused = false;
        let total = self.num_groups();
        for (i, acc) in self.accumulators.iter_mut().enumerate() {
            if self.merges {
                acc.merge_batch(&input.args[i], group_ids, total)?;
                continue;
            }
            let filter: Option<&BooleanArray> =
                input.filters[i].as_ref().and_then(|f| f.as_boolean_opt());
            acc.update_batch(&input.args[i], group_ids, filter, total)?;
        }
        Ok(())
    }

    /// Merges a stored partial state (`keys` key columns, then each accumulator's
    /// `widths[i]` state columns).
    fn merge(
        &mut self,
        part: &RecordBatch,
        keys: usize,
        widths: &[usize],
        group_ids: &mut Vec<usize>,
    ) -> Result<()> {
        self.intern(&part.columns()[..keys], part.num_rows(), group_ids)?;
        let total = self.num_groups();
        let mut at = keys;
        for (acc, width) in self.accumulators.iter_mut().zip(widths) {
            acc.merge_batch(&part.columns()[at..at + width], group_ids, total)?;
            at += width;
        }
        Ok(())
    }

    /// The partial state, as one batch of `state_schema` (consumes it); `None` when the window
    /// holds nothing (a global aggregate before its first row).
    pub(crate) fn into_part(mut self, state_schema: &SchemaRef) -> Result<Option<RecordBatch>> {
        let mut columns = match &mut self.groups {
            Some(g) => g.emit(EmitTo::All)?,
            None => Vec::new(),
        };
        for acc in self.accumulators.iter_mut() {
            columns.extend(acc.state(EmitTo::All)?);
        }
        let n = columns.first().map_or(0, |c| c.len());
        if n == 0 {
            return Ok(None);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(Some(RecordBatch::try_new_with_options(
            Arc::clone(state_schema),
            columns,
            &options,
        )?))
    }
}

/// A running window aggregation (one instance).
pub struct WindowAggregateOperator {
    spec: WindowAggregateSpec,
    key_schema: SchemaRef,
    /// Open windows, in memory and in the task's store.
    windows: OpenWindows<WindowGroups>,
    metrics: Arc<JobMetrics>,
    group_ids: Vec<usize>,
    /// Group keys then every accumulator's state columns: the layout of a stored part.
    state_schema: SchemaRef,
    /// State columns of each accumulator.
    state_widths: Vec<usize>,
}

/// The evaluated inputs of some rows: keys, aggregate arguments and filters.
pub(crate) struct Evaluated {
    pub(crate) rows: usize,
    keys: Vec<ArrayRef>,
    args: Vec<Vec<ArrayRef>>,
    filters: Vec<Option<ArrayRef>>,
}

impl Evaluated {
    /// The rows of one run (slices of a range, without copying).
    pub(crate) fn select(&self, run: &Run) -> Result<Self> {
        Ok(Self {
            rows: run.len(),
            keys: run.arrays(&self.keys)?,
            args: self
                .args
                .iter()
                .map(|cols| run.arrays(cols))
                .collect::<Result<_>>()?,
            filters: self
                .filters
                .iter()
                .map(|f| f.as_ref().map(|f| run.array(f)).transpose())
                .collect::<Result<_>>()?,
        })
    }
}

impl WindowAggregateOperator {
    fn evaluate(&self, batch: &RecordBatch) -> Result<Evaluated> {
        self.spec.evaluate(batch, &self.state_widths)
    }

    fn update(&mut self, end: EventTime, input: &Evaluated) -> Result<()> {
        let (spec, key_schema) = (&self.spec, &self.key_schema);
        let group_ids = &mut self.group_ids;
        self.windows.update(
            0,
            end,
            || WindowGroups::new(spec, key_schema),
            |w| w.update(input, group_ids),
        )
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let schema = &self.state_schema;
        self.windows
            .enforce_budget(|_, window| window.into_part(schema))
    }

    /// Fires the window ending at `end`: its memory part merged with its stored parts; in
    /// buckets of keys when that is more than the memory budget allows at once.
    fn fire(&mut self, end: EventTime, out: &mut Output) -> Result<()> {
        let buckets = match self.spec.keys.len() {
            0 => 1,
            // A piece's merged groups take up to about four times its stored bytes.
            _ => buckets_for(self.windows.window_bytes(0, end)?, self.windows.budget(), 4),
        };
        if buckets > 1 {
            return self.fire_spread(end, buckets, out);
        }
        let taken = self.windows.take(0, end)?;
        let mut window = match taken.memory {
            Some(w) => w,
            None => WindowGroups::new(&self.spec, &self.key_schema)?,
        };
        if self.spec.keys.is_empty() && window.accumulators_unused && taken.parts.is_empty() {
            // A global aggregate over no input: its one group over no rows, as in batch SQL
            // (accumulators that never saw a batch know no group).
            let none = RecordBatch::new_empty(Arc::clone(&self.spec.input_schema));
            let none = self.evaluate(&none)?;
            window.update(&none, &mut self.group_ids)?;
        }
        for part in &taken.parts {
            window.merge(
                part,
                self.spec.keys.len(),
                &self.state_widths,
                &mut self.group_ids,
            )?;
        }
        if let Some(batch) = self.emit(end, window)? {
            out.emit(batch);
        }
        Ok(())
    }

    /// Fires a window larger than the budget: its state spread over `buckets` by key, each
    /// bucket merged and emitted on its own and passed on before the next is read.
    fn fire_spread(&mut self, end: EventTime, buckets: usize, out: &mut Output) -> Result<()> {
        let schema = &self.state_schema;
        let keys = self.spec.keys.len();
        self.windows
            .spread(0, end, |w| w.into_part(schema), &mut |part| {
                hash_buckets(part, keys, buckets)
            })?;
        for bucket in 0..buckets {
            let parts = self.windows.take_bucket(0, end, bucket)?;
            if parts.is_empty() {
                continue;
            }
            let mut window = WindowGroups::new(&self.spec, &self.key_schema)?;
            for part in parts {
                window.merge(&part, keys, &self.state_widths, &mut self.group_ids)?;
            }
            if let Some(batch) = self.emit(end, window)? {
                out.emit(batch);
            }
            out.flush()?;
        }
        self.windows.drop_spread(0, end)
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
        let start = self.spec.window.map_or(end, |w| w.bound.start_of(end));
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.output_schema.fields().len());
        for g in &self.spec.group_columns {
            columns.push(match *g {
                GroupColumn::Key(i) => Arc::clone(&keys[i]),
                GroupColumn::WindowStart => {
                    Arc::new(TimestampNanosecondArray::from_value(start, n))
                }
                GroupColumn::WindowEnd => Arc::new(TimestampNanosecondArray::from_value(end, n)),
                GroupColumn::WindowTime => Arc::new(TimestampNanosecondArray::from_value(
                    end.saturating_sub(WINDOW_TIME_BEFORE_END),
                    n,
                )),
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
        Ok(Some(output_batch(&self.spec.output_schema, columns, n)?))
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
        let Some(window) = self.spec.window else {
            self.update(WATERMARK_MAX, &evaluated)?;
            return self.enforce_budget();
        };
        let ends = window.ends(&batch)?;
        for run in self.windows.open_runs(&ends, &self.metrics) {
            let rows = evaluated.select(&run)?;
            self.update(run.end, &rows)?;
        }
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        for end in self.windows.advance(watermark) {
            self.fire(end, out)?;
        }
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = &self.state_schema;
        self.windows
            .snapshot(epoch, |_, window| window.into_part(schema))?;
        Ok(None)
    }
}
