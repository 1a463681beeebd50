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
//!   add their states together. Each session's end is a timer.
//! - on watermark: rows are placed and sessions fire in order of time (the rows at `W_r`
//!   before the sessions ending at `W_r + 1`); a fired session emits one row, the GROUP BY
//!   list then the aggregates, and is dropped. The watermark passes on.
//! - at barrier: the sessions changed since the last barrier are written to the store
//!   (`s | len(key) | key | start -> end | state`) and those gone since are deleted; the
//!   waiting rows are written as the session window's. A restore scans the sessions back; at
//!   another parallelism each instance first copies the sessions whose key routes to it.
//! - memory: every open session's state stays in memory (a few dozen bytes per aggregate, not
//!   its rows); waiting rows follow the task's budget.
//! - at end: the watermark +infinity places every waiting row and fires every session.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take_record_batch, SortOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::HashMap;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::late_rows::{LateRows, SESSION_CLOSED};
use crate::message::EventTime;
use crate::metrics::JobMetrics;
use crate::operator::{output_batch, Operator, Output};
use crate::operators::group_aggregate::state::{ordered, AggState, GroupState};
use crate::operators::group_aggregate::values::{add_value, result_column, takes};
use crate::operators::group_aggregate::{UpdatingAggKind, UpdatingAggregate};
use crate::operators::session_window::{
    judging_order, read_part, report_late, take_rows, SessionWindowSpec, PENDING,
};
use crate::operators::window_aggregate::GroupColumn;
use crate::operators::windowed::{BufferedRows, KeyedRows, OpenWindows};
use crate::state::{copy_routed, just_after, ChunkedWrites, StateHandle};
use crate::window::WINDOW_TIME_BEFORE_END;

/// The store's sub-range holding the open sessions (lane `PENDING` is 0).
const SESSIONS: u8 = 1;
/// First byte of a stored session's key.
const SESSION_TAG: u8 = b's';

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
                    key_of_stored,
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
        let mut op = SessionAggregateOperator {
            windows: window.open_lanes(task, &part, &[PENDING])?,
            part,
            keys,
            values,
            floats: self
                .aggregates
                .iter()
                .map(|a| a.sum_type() == Some(DataType::Float64))
                .collect(),
            sessions: HashMap::default(),
            timers: BTreeMap::new(),
            gone: Vec::new(),
            handle,
            metrics: Arc::clone(&task.metrics),
            spec: self.clone(),
        };
        op.restore_sessions()?;
        Ok(Box::new(op))
    }
}

/// One open session of a key (its start is its key in the key's map).
#[derive(Debug)]
struct Session {
    end: EventTime,
    /// The end its last timer was set for (a session whose end moved has stale timers,
    /// skipped when they come due).
    timer: EventTime,
    /// Changed since the last barrier.
    dirty: bool,
    /// Has an entry in the store.
    stored: bool,
    state: GroupState,
}

impl Session {
    fn new(end: EventTime, aggregates: usize) -> Self {
        Self {
            end,
            timer: EventTime::MIN,
            dirty: true,
            stored: false,
            state: GroupState::new(aggregates),
        }
    }
}

/// A key's open sessions by start, never overlapping or touching.
type Sessions = BTreeMap<EventTime, Session>;

/// A session that fired.
struct Fired {
    key: Vec<u8>,
    start: EventTime,
    end: EventTime,
    state: GroupState,
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
    /// Per aggregate: its running sum is an f64.
    floats: Vec<bool>,
    /// The open sessions, by the row-encoded partition key.
    sessions: HashMap<Vec<u8>, Sessions>,
    /// Session ends: `(key, start)` of the sessions set to end there (some stale).
    timers: BTreeMap<EventTime, Vec<(Vec<u8>, EventTime)>>,
    /// Stored sessions that fired or merged since the last barrier: deleted at the next.
    gone: Vec<(Vec<u8>, EventTime)>,
    handle: StateHandle,
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
        let aggregates = self.spec.aggregates.len();
        let mut late = 0u64;
        let mut kept = LateRows::default();
        let mut merged_away = Vec::new();
        for i in judging_order(&r) {
            let w = r.watermarks[i];
            if w >= watermark {
                continue;
            }
            // What fired at points up to `W_r` is final before the row is judged.
            self.fire_until(w, fired);
            let key = &r.keys[i];
            let sessions = self.sessions.entry_ref(key.as_slice()).or_default();
            let placed = place_row(
                sessions,
                (r.times[i], gap, w),
                aggregates,
                &self.floats,
                &mut merged_away,
            );
            self.gone
                .extend(merged_away.drain(..).map(|start| (key.clone(), start)));
            let Some(start) = placed else {
                late += 1;
                if keep_late {
                    kept.push(i, w, SESSION_CLOSED);
                }
                if sessions.is_empty() {
                    self.sessions.remove(key.as_slice());
                }
                continue;
            };
            let session = sessions
                .get_mut(&start)
                .ok_or_else(|| EngineError::Internal("a placed row lost its session".into()))?;
            fold(&mut session.state, i, &values)?;
            session.dirty = true;
            if session.timer != session.end {
                session.timer = session.end;
                self.timers
                    .entry(session.end)
                    .or_default()
                    .push((key.clone(), start));
            }
        }
        report_late(&self.spec.session, &self.metrics, rows, late, kept, out)
    }

    /// Rows (`keys ++ row`) wait in lane `PENDING` under the smallest `W_r` among them, plus
    /// one: the watermark that passes it takes them all out, and those it did not pass yet
    /// wait again.
    fn wait(&mut self, rows: RecordBatch, first: EventTime) -> Result<()> {
        self.windows.update(
            PENDING,
            first.saturating_add(1),
            || Ok(BufferedRows::default()),
            |b| {
                b.push(rows);
                Ok(())
            },
        )
    }

    /// Fires the sessions ending at or before `point`.
    fn fire_until(&mut self, point: EventTime, fired: &mut Vec<Fired>) {
        while let Some(entry) = self.timers.first_entry() {
            if *entry.key() > point {
                break;
            }
            let (end, due) = entry.remove_entry();
            for (key, start) in due {
                let Some(sessions) = self.sessions.get_mut(key.as_slice()) else {
                    continue;
                };
                if sessions.get(&start).is_none_or(|s| s.end != end) {
                    continue; // stale: the session grew or merged
                }
                let Some(session) = sessions.remove(&start) else {
                    continue;
                };
                if sessions.is_empty() {
                    self.sessions.remove(key.as_slice());
                }
                if session.stored {
                    self.gone.push((key.clone(), start));
                }
                fired.push(Fired {
                    key,
                    start,
                    end,
                    state: session.state,
                });
            }
        }
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

    fn stored_key(&self, key: &[u8], start: EventTime) -> Vec<u8> {
        let len = (key.len() as u32).to_be_bytes();
        self.handle
            .key_of_parts(&[&[SESSION_TAG], &len, key, &ordered(start)])
    }

    /// Writes the sessions changed since the last barrier and deletes those gone since.
    fn flush(&mut self) -> Result<()> {
        let store = self.handle.store()?;
        let mut writes = ChunkedWrites::new(store.as_ref());
        // Deletes before puts: a session may come back under a start that went.
        for (key, start) in std::mem::take(&mut self.gone) {
            let k = self.stored_key(&key, start);
            let end = just_after(&k);
            writes.delete_range(k, end)?;
        }
        let mut puts = Vec::new();
        for (key, sessions) in self.sessions.iter_mut() {
            for (&start, s) in sessions.iter_mut().filter(|(_, s)| s.dirty) {
                s.dirty = false;
                s.stored = true;
                let mut value = s.end.to_le_bytes().to_vec();
                value.extend_from_slice(&s.state.encode());
                puts.push((key.clone(), start, value));
            }
        }
        for (key, start, value) in puts {
            writes.put(self.stored_key(&key, start), value)?;
        }
        writes.finish()
    }

    /// Reads the stored sessions back (after a restore) and sets their timers.
    fn restore_sessions(&mut self) -> Result<()> {
        let store = self.handle.store()?;
        let (lo, hi) = self.handle.all();
        let skip = self.handle.prefix_len();
        let aggregates = self.spec.aggregates.len();
        for (k, v) in store.scan(&lo, &hi)? {
            let (key, start) = parse_stored(&k[skip..])?;
            let malformed = || EngineError::State("stored session is malformed".into());
            let end: [u8; 8] = v
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(malformed)?;
            let end = EventTime::from_le_bytes(end);
            let state = GroupState::decode(&v[8..], aggregates)?;
            self.timers
                .entry(end)
                .or_default()
                .push((key.to_vec(), start));
            let session = Session {
                end,
                timer: end,
                dirty: false,
                stored: true,
                state,
            };
            self.sessions
                .entry_ref(key)
                .or_default()
                .insert(start, session);
        }
        Ok(())
    }
}

/// A stored session's key (without the handle's prefix): the partition key and the start.
fn parse_stored(suffix: &[u8]) -> Result<(&[u8], EventTime)> {
    let bad = || EngineError::State("stored session key is malformed".into());
    let rest = match suffix.split_first() {
        Some((&SESSION_TAG, rest)) => rest,
        _ => return Err(bad()),
    };
    let len: [u8; 4] = rest
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = u32::from_be_bytes(len) as usize;
    let key = rest.get(4..4 + len).ok_or_else(bad)?;
    let start: [u8; 8] = rest
        .get(4 + len..12 + len)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    Ok((key, (u64::from_be_bytes(start) ^ (1 << 63)) as EventTime))
}

/// The routing key of a stored session (for a restore at another parallelism).
fn key_of_stored(suffix: &[u8]) -> Result<&[u8]> {
    parse_stored(suffix).map(|(key, _)| key)
}

/// Places a row (`(t, gap, W_r)`) among its key's sessions, as the session window merges
/// them: its window `[t, t + gap)` joins the sessions it overlaps or touches, adding their
/// states together. Returns its session's start, or `None` when it touches none and its own
/// window ended under `W_r` (late). Stored sessions merged away go to `gone`.
fn place_row(
    sessions: &mut Sessions,
    (t, gap, watermark): (EventTime, i64, EventTime),
    aggregates: usize,
    floats: &[bool],
    gone: &mut Vec<EventTime>,
) -> Option<EventTime> {
    let own_end = t.saturating_add(gap);
    // Sessions neither overlap nor touch, so by start their ends increase too: walking back
    // from the last one starting by `own_end`, they touch until one ends before `t`.
    let (first, second) = {
        let mut touched = sessions
            .range(..=own_end)
            .rev()
            .take_while(|(_, s)| s.end >= t)
            .map(|(&start, _)| start);
        (touched.next(), touched.next())
    };
    match (first, second) {
        (None, _) if own_end <= watermark => return None,
        (None, _) => {
            sessions.insert(t, Session::new(own_end, aggregates));
            return Some(t);
        }
        (Some(start), None) if start <= t => {
            let session = sessions.get_mut(&start)?;
            if own_end > session.end {
                session.end = own_end;
            }
            return Some(start);
        }
        _ => {}
    }
    let starts: Vec<EventTime> = sessions
        .range(..=own_end)
        .rev()
        .take_while(|(_, s)| s.end >= t)
        .map(|(&start, _)| start)
        .collect();
    let mut start = t;
    let mut merged = Session::new(own_end, aggregates);
    for s in starts {
        if let Some(old) = sessions.remove(&s) {
            start = start.min(s);
            merged.end = merged.end.max(old.end);
            merged.state.merge(old.state, floats);
            if old.stored {
                gone.push(s);
            }
        }
    }
    sessions.insert(start, merged);
    Some(start)
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
        self.fire_until(watermark, &mut fired);
        self.emit(fired, out)?;
        self.enforce_budget()?;
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = self.part.schema();
        self.windows
            .snapshot(epoch, |_, rows| rows.into_part(schema))?;
        self.flush()?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &Sessions) -> Vec<(EventTime, EventTime, i64)> {
        s.iter().map(|(&st, x)| (st, x.end, x.state.rows)).collect()
    }

    #[test]
    fn rows_bridge_sessions_and_their_states_add() {
        let mut s = Sessions::new();
        let mut gone = Vec::new();
        let mut put = |s: &mut Sessions, t, w| {
            let start = place_row(s, (t, 10, w), 1, &[false], &mut gone)?;
            s.get_mut(&start)?.state.rows += 1;
            Some(start)
        };
        assert_eq!(put(&mut s, 0, EventTime::MIN), Some(0));
        assert_eq!(put(&mut s, 25, EventTime::MIN), Some(25));
        assert_eq!(put(&mut s, 5, EventTime::MIN), Some(0));
        assert_eq!(keys(&s), vec![(0, 15, 2), (25, 35, 1)]);
        // 15 touches [0, 15) and [25, 35): one session of all four rows.
        s.get_mut(&25).unwrap().stored = true;
        assert_eq!(put(&mut s, 15, EventTime::MIN), Some(0));
        assert_eq!(keys(&s), vec![(0, 35, 4)]);
        // Late: its own window [50, 60) ended under 70 and it touches nothing.
        assert_eq!(put(&mut s, 50, 70), None);
        // Earlier than the session it touches: the start moves.
        assert_eq!(put(&mut s, -8, 0), Some(-8));
        assert_eq!(keys(&s), vec![(-8, 35, 5)]);
        assert_eq!(gone, vec![25]);
    }

    #[test]
    fn stored_keys_round_trip() {
        let handle = StateHandle::in_memory();
        let key = handle.key_of_parts(&[&[SESSION_TAG], &3u32.to_be_bytes(), b"abc", &ordered(-5)]);
        let (k, start) = parse_stored(&key[handle.prefix_len()..]).unwrap();
        assert_eq!((k, start), (&b"abc"[..], -5));
        assert!(parse_stored(&key[handle.prefix_len()..key.len() - 1]).is_err());
    }
}
