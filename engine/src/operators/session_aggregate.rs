//! `SessionAggregateOperator`: a SESSION window and the aggregation grouped by its sessions,
//! in one operator (Flink's merging window set under a session window aggregate). The planner
//! uses it for `GROUP BY <the partition keys>, window_start / window_end / window_time` over
//! `SESSION(...)` when every aggregate is COUNT, SUM, AVG, MIN or MAX (without DISTINCT);
//! otherwise a [`super::session_window`] feeds a window aggregate.
//!
//! - input, lateness and the order rows are judged in: as the session window's. A batch waits
//!   whole in lane `PENDING` under its smallest `W_r`, plus one (not cut into one batch per
//!   `W_r`, which is nearly per row); the watermark that reaches it takes out the rows whose
//!   `W_r` it passed (the others wait again) and judges them together, in increasing `W_r`
//!   and decreasing event time, firing the sessions that end by a row's `W_r` before the
//!   row. So a session's rows never depend on batch sizes, parallelism or the interleaving
//!   of source partitions.
//! - state: an open session keeps one running state of its aggregates (the updating GROUP
//!   BY's [`GroupState`]), not its rows: a placed row is folded in, sessions that a row bridges
//!   add their states together. Each session's end is a timer. The open sessions are kept by
//!   [`sessions::OpenSessions`]: in memory, and in the task's store past half the budget.
//! - on watermark: rows are placed and sessions fire in order of time (the rows at `W_r`
//!   before the sessions ending at `W_r + 1`); a fired session emits one row, the GROUP BY
//!   list then the aggregates, and is dropped. The watermark passes on.
//! - at barrier: the keys whose sessions changed since the last barrier are written to the
//!   store (one entry per key, [`sessions`]); the waiting rows are written as the session
//!   window's. A restore reads the sessions back; at another parallelism each instance first
//!   copies the sessions whose key routes to it.
//! - memory: an open session keeps a running state (a few dozen bytes per aggregate, not its
//!   rows). Sessions keep to half the task's budget (all of them go to the store past it, and
//!   come back key by key as rows or their ends reach them), waiting rows to the other half.
//! - at end: the watermark +infinity places every waiting row and fires every session.

mod sessions;

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take_record_batch, SortOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::late_rows::{LateRows, SESSION_CLOSED};
use crate::message::EventTime;
use crate::metrics::JobMetrics;
use crate::operator::{output_batch, Operator, Output};
use crate::operators::group_aggregate::state::{AggState, GroupState};
use crate::operators::group_aggregate::values::{add_value, result_column, takes};
use crate::operators::group_aggregate::{UpdatingAggKind, UpdatingAggregate};
use crate::operators::session_window::{
    judging_order, read_part, report_late, take_rows, SessionWindowSpec, PENDING,
};
use crate::operators::window_aggregate::GroupColumn;
use crate::operators::windowed::{BufferedRows, KeyedRows, OpenWindows};
use crate::state::copy_routed;
use crate::window::WINDOW_TIME_BEFORE_END;

use sessions::{key_of_stored, Fired, OpenSessions};

/// The store's sub-range holding the open sessions (lane `PENDING` is 0).
const SESSIONS: u8 = 1;
/// The store's sub-range holding the timers of the sessions in the store.
const TIMERS: u8 = 2;
/// Rows judged next whose keys are read from the store together.
const LOAD_AHEAD: usize = 1024;

/// Plan node of a SESSION window fused with the aggregation grouped by its sessions.
#[derive(Debug, Clone)]
pub struct SessionAggregateSpec {
    /// The SESSION window: its input, gap, partition keys and late-row handling.
    pub session: SessionWindowSpec,
    /// The columns of the window's input rows the aggregates read, in the order their
    /// expressions index them (the scan's projection); `None`: all of them.
    pub projection: Option<Vec<usize>>,
    /// The GROUP BY list in output order; `Key(i)` is the session's i-th partition key.
    pub group_columns: Vec<GroupColumn>,
    /// The aggregates, their arguments and filters evaluated on the session's input rows
    /// as projected (never on its window columns).
    pub aggregates: Vec<UpdatingAggregate>,
    /// Group columns then aggregates.
    pub output_schema: SchemaRef,
    pub description: String,
}

impl OperatorFactory for SessionAggregateSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let window = &self.session;
        let part = KeyedRows::new(&window.keys, &window.input_schema)?;
        let keys = window.key_converter(&part)?;
        let handle = task.state.sub(SESSIONS);
        if let Some(restore) = task.state.restore() {
            if let Some((instance, parallelism)) = restore.repartition {
                let converter = (!window.keys.is_empty()).then_some(&keys);
                copy_routed(
                    &handle,
                    &restore.stores,
                    converter,
                    |suffix| key_of_stored(suffix).map(Some),
                    instance,
                    parallelism,
                )?;
            }
        }
        // What the aggregates' expressions read: the window's input rows as projected.
        let read = match &self.projection {
            Some(columns) => Arc::new(window.input_schema.project(columns)?),
            None => Arc::clone(&window.input_schema),
        };
        let values = self
            .aggregates
            .iter()
            .map(|a| {
                if !matches!(a.kind, UpdatingAggKind::Min | UpdatingAggKind::Max) {
                    return Ok(None);
                }
                let options = SortOptions {
                    descending: a.kind == UpdatingAggKind::Max,
                    nulls_first: false,
                };
                let field = SortField::new_with_options(a.arg.data_type(&read)?, options);
                Ok(Some(RowConverter::new(vec![field])?))
            })
            .collect::<Result<Vec<_>>>()?;
        let floats = self
            .aggregates
            .iter()
            .map(|a| a.sum_type() == Some(DataType::Float64))
            .collect();
        // The waiting rows' windows keep to half the budget, the sessions to the other half.
        let budget = task.state.memory_budget() / 2;
        let mut sessions = OpenSessions::new(handle, task.state.sub(TIMERS), budget, floats);
        if task.state.restore().is_some() {
            sessions.restore()?;
        }
        Ok(Box::new(SessionAggregateOperator {
            windows: window.open_lanes(task, &part, &[PENDING])?,
            part,
            keys,
            values,
            sessions,
            metrics: Arc::clone(&task.metrics),
            spec: self.clone(),
        }))
    }
}

/// A level's aggregate inputs, per aggregate: which rows it takes, the values summed (SUM,
/// AVG) and the value rows compared (MIN, MAX).
struct LevelValues {
    taken: Vec<Vec<bool>>,
    sums: Vec<Option<ArrayRef>>,
    extremes: Vec<Option<Rows>>,
}

/// A running SESSION window aggregation (see the module doc).
pub struct SessionAggregateOperator {
    spec: SessionAggregateSpec,
    /// `keys ++ row`: the layout of waiting rows.
    part: KeyedRows,
    windows: OpenWindows<BufferedRows>,
    keys: RowConverter,
    /// Per MIN / MAX aggregate: encodes its values (descending for MAX).
    values: Vec<Option<RowConverter>>,
    /// The open sessions, by the row-encoded partition key.
    sessions: OpenSessions,
    metrics: Arc<JobMetrics>,
}

impl SessionAggregateOperator {
    /// The aggregates' inputs over a level's rows (`keys ++ row`).
    fn level_values(&self, rows: &RecordBatch) -> Result<LevelValues> {
        let n = self.spec.session.keys.len();
        let own: Vec<usize> = match &self.spec.projection {
            Some(columns) => columns.iter().map(|c| n + c).collect(),
            None => (n..rows.num_columns()).collect(),
        };
        let rel = rows.project(&own)?;
        let mut v = LevelValues {
            taken: Vec::new(),
            sums: Vec::new(),
            extremes: Vec::new(),
        };
        for (agg, converter) in self.spec.aggregates.iter().zip(&self.values) {
            let arg = agg.arg.evaluate(&rel)?.into_array(rel.num_rows())?;
            v.taken.push(takes(agg, &arg, &rel)?);
            v.sums.push(match agg.sum_type() {
                Some(t) => Some(cast(&arg, &t)?),
                None => None,
            });
            v.extremes.push(match converter {
                Some(c) => Some(c.convert_columns(&[arg])?),
                None => None,
            });
        }
        Ok(v)
    }

    /// Places the waiting rows whose `W_r` the watermark passed into sessions (or drops them
    /// as late), folding each into its session's state; the sessions ending by a row's `W_r`
    /// fire before it (into `fired`). The other rows wait on.
    fn place(
        &mut self,
        rows: &RecordBatch,
        watermark: EventTime,
        fired: &mut Vec<Fired>,
        out: &mut Output,
    ) -> Result<()> {
        let r = read_part(&self.spec.session, &self.keys, rows)?;
        let waiting: Vec<u32> = (0..rows.num_rows())
            .filter(|&i| r.watermarks[i] >= watermark)
            .map(|i| i as u32)
            .collect();
        if let Some(first) = waiting.iter().map(|&i| r.watermarks[i as usize]).min() {
            let held = take_record_batch(rows, &UInt32Array::from(waiting))?;
            self.wait(held, first)?;
        }
        let values = self.level_values(rows)?;
        let (gap, keep_late) = (self.spec.session.gap, self.spec.session.keep_late);
        let mut late = 0u64;
        let mut kept = LateRows::default();
        let order: Vec<usize> = judging_order(&r)
            .into_iter()
            .filter(|&i| r.watermarks[i] < watermark)
            .collect();
        for (p, &i) in order.iter().enumerate() {
            let w = r.watermarks[i];
            // What fired at points up to `W_r` is final before the row is judged.
            self.fire_until(w, fired, out)?;
            let key = r.keys[i].as_slice();
            if !self.sessions.holds(key) {
                // Read from the store with the keys of the rows judged next.
                let ahead = order[p..].iter().take(LOAD_AHEAD);
                self.sessions.load(ahead.map(|&j| r.keys[j].as_slice()))?;
            }
            let placed = self
                .sessions
                .place(key, (r.times[i], gap, w), |state| fold(state, i, &values))?;
            if !placed {
                late += 1;
                if keep_late {
                    kept.push(i, w, SESSION_CLOSED);
                }
            }
            self.sessions.enforce_budget()?;
        }
        report_late(&self.spec.session, &self.metrics, rows, late, kept, out)
    }

    /// Rows (`keys ++ row`) wait in lane `PENDING` under the smallest `W_r` among them, plus
    /// one: the watermark that passes it takes them all out, and those it did not pass yet
    /// wait again.
    fn wait(&mut self, rows: RecordBatch, first: EventTime) -> Result<()> {
        self.windows.push(PENDING, first.saturating_add(1), [rows])
    }

    /// Fires the sessions ending at or before `point` into `fired`, emitting them a chunk at
    /// a time when there are many.
    fn fire_until(
        &mut self,
        point: EventTime,
        fired: &mut Vec<Fired>,
        out: &mut Output,
    ) -> Result<()> {
        while self.sessions.fire_until(point, fired)? {
            self.emit(std::mem::take(fired), out)?;
            // Passed on now, not when the call returns: a watermark may fire every session.
            out.flush()?;
            // Keys read back to fire may hold later sessions too.
            self.sessions.enforce_budget()?;
        }
        Ok(())
    }

    /// One row per fired session: the GROUP BY list, then the aggregates.
    fn emit(&self, mut fired: Vec<Fired>, out: &mut Output) -> Result<()> {
        if fired.is_empty() {
            return Ok(());
        }
        fired.sort_by(|a, b| (a.end, &a.key, a.start).cmp(&(b.end, &b.key, b.start)));
        let key_columns = if self.spec.session.keys.is_empty() {
            Vec::new()
        } else {
            let parser = self.keys.parser();
            self.keys
                .convert_rows(fired.iter().map(|f| parser.parse(&f.key)))?
        };
        let time = |f: &dyn Fn(&Fired) -> EventTime| -> ArrayRef {
            Arc::new(TimestampNanosecondArray::from_iter_values(
                fired.iter().map(f),
            ))
        };
        let mut columns = Vec::new();
        for g in &self.spec.group_columns {
            columns.push(match *g {
                GroupColumn::Key(i) => key_columns.get(i).cloned().ok_or_else(|| {
                    EngineError::Internal(format!("session aggregate has no key {i}"))
                })?,
                GroupColumn::WindowStart => time(&|f| f.start),
                GroupColumn::WindowEnd => time(&|f| f.end),
                GroupColumn::WindowTime => time(&|f| f.end.saturating_sub(WINDOW_TIME_BEFORE_END)),
            });
        }
        for (i, agg) in self.spec.aggregates.iter().enumerate() {
            let states: Vec<AggState> = fired.iter().map(|f| f.state.aggs[i]).collect();
            let extremes: Vec<Option<&[u8]>> = fired
                .iter()
                .map(|f| f.state.extremes[i].as_deref())
                .collect();
            columns.push(result_column(
                agg,
                &states,
                &extremes,
                self.values[i].as_ref(),
            )?);
        }
        out.emit(output_batch(
            &self.spec.output_schema,
            columns,
            fired.len(),
        )?);
        Ok(())
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let schema = self.part.schema();
        self.windows
            .enforce_budget(|_, rows| rows.into_part(schema))
    }
}

/// Folds row `row` of a level into a session's state.
fn fold(state: &mut GroupState, row: usize, values: &LevelValues) -> Result<()> {
    state.rows += 1;
    for (i, agg) in state.aggs.iter_mut().enumerate() {
        if !values.taken[i][row] {
            continue;
        }
        if let Some(sums) = &values.sums[i] {
            add_value(agg, sums, row, 1)?;
            continue;
        }
        agg.n += 1;
        if let Some(rows) = &values.extremes[i] {
            let value = rows.row(row);
            let value = value.data();
            if state.extremes[i].as_deref().is_none_or(|e| value < e) {
                state.extremes[i] = Some(value.to_vec());
            }
        }
    }
    Ok(())
}

impl Operator for SessionAggregateOperator {
    fn name(&self) -> &str {
        "SessionAggregate"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, _out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input > 0 {
            return Err(EngineError::Internal(format!(
                "a session aggregate has one input, got a batch on input {input}"
            )));
        }
        let rows = self.part.of(&batch)?;
        let watermarks = timestamps_as_nanos(batch.column(self.spec.session.window_start))?;
        if let Some(&first) = watermarks.values().iter().min() {
            self.wait(rows, first)?;
        }
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        // The waiting rows the watermark may have passed (a source's next watermark usually
        // passes a whole batch), judged together in order of `W_r`.
        let schema = Arc::clone(self.part.schema());
        let mut parts = Vec::new();
        for end in self.windows.advance(watermark) {
            parts.extend(take_rows(&mut self.windows, &schema, PENDING, end)?);
        }
        let mut fired = Vec::new();
        let rows = match parts.len() {
            0 => None,
            1 => parts.pop(),
            _ => Some(concat_batches(&schema, &parts)?),
        };
        if let Some(rows) = rows {
            self.place(&rows, watermark, &mut fired, out)?;
        }
        self.fire_until(watermark, &mut fired, out)?;
        self.emit(fired, out)?;
        self.sessions.enforce_budget()?;
        self.enforce_budget()?;
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = self.part.schema();
        self.windows
            .snapshot(epoch, |_, rows| rows.into_part(schema))?;
        self.sessions.flush()?;
        Ok(None)
    }
}
