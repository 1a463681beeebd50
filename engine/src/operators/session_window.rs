//! `SessionWindowOperator`: SESSION windows (DESIGN.md §3), `SESSION(t, ts, gap [, keys])`.
//!
//! - input: the rows of the window table function, routed by the keyed exchange on the
//!   partition keys (all to one instance without keys). Each row comes with `window_end` =
//!   its own window's end `t + gap` and, in the `window_start` slot, the watermark of its
//!   source partition just before it (`W_r`, set by the source's window assigner).
//! - sessions: a row's window `[t, t + gap)` merges with the open sessions of its key that it
//!   overlaps or touches (rows exactly `gap` apart share a session); a session
//!   `[first, last + gap)` fires when the watermark reaches its end, emitting its rows with
//!   `window_start` / `window_end` set to the session's bounds (`window_time` to its end less
//!   a millisecond), and is never reopened.
//! - lateness, deterministically: a row is judged against its own `W_r`, never against the
//!   operator's (timing-dependent) watermark. Rows wait (state lane `PENDING`, under `W_r + 1`)
//!   until the operator's watermark passes their `W_r`, so every row that could be judged at
//!   the same watermark is there. Then, level by level in increasing `W_r`: the sessions
//!   ending at or before `W_r` fire, and the level's rows are placed in decreasing event time
//!   (each row then sees the sessions the later rows of its level reach back with). A row whose
//!   own window has ended (`t + gap <= W_r`) and that touches no open session is late: dropped
//!   and counted. So a session's rows never depend on batch sizes, parallelism or the
//!   interleaving of source partitions, and an out-of-order row may still bridge two open
//!   sessions.
//! - state: placed rows (lane `HELD`) are kept under the end their session had when they were
//!   put there; a session's extent per key is indexed in memory. When the watermark reaches a
//!   row's bucket and its session has grown past it, the row moves to the session's new end.
//!   Both lanes are [`OpenWindows`]: memory up to the task's budget, the task's store past it
//!   and at every barrier, re-routed by the keys after a rescale. The index is not stored: the
//!   sessions of a key are the islands of its held rows (no two sessions of a key touch), so a
//!   restore rebuilds it from the rows.
//! - at end: the watermark +infinity places every waiting row and fires every session.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::HashMap;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::late_rows::{LateRows, SESSION_CLOSED};
use crate::message::EventTime;
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output};
use crate::operators::windowed::{
    split_by_window, BufferedRows, KeyedRows, LaneState, OpenWindows, PartRoute,
};
use crate::state::{cmp_bytes, value_of, KeyBytes};
use crate::window::WINDOW_TIME_BEFORE_END;

/// Rows waiting for the watermark to pass their own watermark, under `W_r + 1`.
pub(super) const PENDING: usize = 0;
/// Rows placed in a session, under the end their session had when they were put there.
const HELD: usize = 1;

/// Plan node of a SESSION window.
#[derive(Debug, Clone)]
pub struct SessionWindowSpec {
    /// The window table function's rows as the source emits them (its unused columns `Null`).
    pub input_schema: SchemaRef,
    pub gap: i64,
    /// The partition keys, evaluated on the input; the keyed exchange routes by them.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Indices of `window_start`, `window_end` and `window_time` in the input (`window_time`
    /// of type `Null` when nobody reads it).
    pub window_start: usize,
    pub window_end: usize,
    pub window_time: usize,
    /// Emit the late rows (the table's columns, before `window_start`) to be kept as a table.
    pub keep_late: bool,
    pub description: String,
}

impl OperatorFactory for SessionWindowSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let part = KeyedRows::new(&self.keys, &self.input_schema)?;
        let mut op = SessionWindowOperator {
            spec: self.clone(),
            output_schema: Arc::clone(&self.input_schema),
            windows: self.open_lanes(task, &part, &[PENDING, HELD])?,
            keys: self.key_converter(&part)?,
            part,
            sessions: HashMap::new(),
            metrics: Arc::clone(&task.metrics),
        };
        op.rebuild_sessions()?;
        Ok(Box::new(op))
    }
}

/// The sessions of one key: start -> end, never overlapping or touching.
type Sessions = BTreeMap<EventTime, EventTime>;

/// A running SESSION window.
pub struct SessionWindowOperator {
    spec: SessionWindowSpec,
    output_schema: SchemaRef,
    /// `keys ++ row`: the layout of held and stored rows.
    part: KeyedRows,
    windows: OpenWindows<BufferedRows>,
    keys: RowConverter,
    /// The open sessions, by the row-encoded partition key.
    sessions: HashMap<Vec<u8>, Sessions>,
    metrics: Arc<JobMetrics>,
}

/// The columns of a part the operator reads, row by row.
pub(super) struct PartRows {
    pub keys: Vec<Vec<u8>>,
    /// Event time of each row (`window_end - gap`).
    pub times: Vec<EventTime>,
    /// Each row's `W_r` (the `window_start` slot while the row has no session).
    pub watermarks: Vec<EventTime>,
}

impl SessionWindowOperator {
    fn n_keys(&self) -> usize {
        self.spec.keys.len()
    }

    fn read(&self, rows: &RecordBatch) -> Result<PartRows> {
        read_part(&self.spec, &self.keys, rows)
    }

    fn take_rows(&mut self, lane: usize, end: EventTime) -> Result<Option<RecordBatch>> {
        take_rows(&mut self.windows, self.part.schema(), lane, end)
    }

    /// Puts `rows` (indices `rows_of[end]`) into lane `HELD` under each `end`.
    fn hold(&mut self, rows: &RecordBatch, by_end: BTreeMap<EventTime, Vec<u32>>) -> Result<()> {
        for (end, indices) in by_end {
            let held = if indices.len() == rows.num_rows() {
                rows.clone()
            } else {
                take_record_batch(rows, &UInt32Array::from(indices))?
            };
            self.windows.push(HELD, end, [held])?;
        }
        Ok(())
    }

    /// Places waiting rows into sessions (or drops them as late), in increasing `W_r`, then
    /// decreasing event time.
    fn place(&mut self, rows: &RecordBatch, out: &mut Output) -> Result<()> {
        let r = self.read(rows)?;
        let order = judging_order(&r);
        let gap = self.spec.gap;
        let mut late = 0u64;
        let mut kept = LateRows::default();
        let mut placed = Vec::with_capacity(order.len());
        for i in order {
            let sessions = value_of(&mut self.sessions, &r.keys[i], Sessions::default)?;
            if merge(sessions, r.times[i], gap, r.watermarks[i]) {
                placed.push(i);
            } else {
                late += 1;
                if self.spec.keep_late {
                    kept.push(i, r.watermarks[i], SESSION_CLOSED);
                }
                if sessions.is_empty() {
                    self.sessions.remove(&KeyBytes(&r.keys[i]));
                }
            }
        }
        report_late(&self.spec, &self.metrics, rows, late, kept, out)?;
        let mut by_end: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
        placed.sort_unstable();
        for i in placed {
            let (_, end) = self.session_of(&r.keys[i], r.times[i])?;
            by_end.entry(end).or_default().push(i as u32);
        }
        self.hold(rows, by_end)
    }

    /// The session holding a placed row.
    fn session_of(&self, key: &[u8], t: EventTime) -> Result<(EventTime, EventTime)> {
        self.sessions
            .get(&KeyBytes(key))
            .and_then(|s| s.range(..=t).next_back())
            .filter(|(_, &end)| t < end)
            .map(|(&start, &end)| (start, end))
            .ok_or_else(|| EngineError::Internal(format!("session row at {t} has no session")))
    }

    /// The held rows of bucket `end`: those whose session ends by `end` are emitted with the
    /// session's bounds (and the session closed), the others move to their session's end.
    fn fire(&mut self, end: EventTime, rows: &RecordBatch, out: &mut Output) -> Result<()> {
        let r = self.read(rows)?;
        let mut fired = Vec::new();
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        let mut closed = Vec::new();
        let mut by_end: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
        for i in 0..rows.num_rows() {
            let (s, e) = self.session_of(&r.keys[i], r.times[i])?;
            if e <= end {
                fired.push(i as u32);
                starts.push(s);
                ends.push(e);
                closed.push((i, s));
            } else {
                by_end.entry(e).or_default().push(i as u32);
            }
        }
        for (i, s) in closed {
            if let Some(sessions) = self.sessions.get_mut(&KeyBytes(&r.keys[i])) {
                sessions.remove(&s);
                if sessions.is_empty() {
                    self.sessions.remove(&KeyBytes(&r.keys[i]));
                }
            }
        }
        self.hold(rows, by_end)?;
        if fired.is_empty() {
            return Ok(());
        }
        let selected = take_record_batch(rows, &UInt32Array::from(fired))?;
        let mut columns: Vec<ArrayRef> = selected.columns()[self.n_keys()..].to_vec();
        columns[self.spec.window_start] = Arc::new(TimestampNanosecondArray::from(starts));
        if columns[self.spec.window_time].data_type() != &DataType::Null {
            columns[self.spec.window_time] = Arc::new(TimestampNanosecondArray::from_iter_values(
                ends.iter()
                    .map(|e| e.saturating_sub(WINDOW_TIME_BEFORE_END)),
            ));
        }
        columns[self.spec.window_end] = Arc::new(TimestampNanosecondArray::from(ends));
        out.emit(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(selected.num_rows())),
        )?);
        Ok(())
    }

    /// After a restore: takes the held rows out, finds their sessions (the islands of each
    /// key's rows) and holds them again under their sessions' ends.
    fn rebuild_sessions(&mut self) -> Result<()> {
        let taken = self.windows.take_all(HELD)?;
        let mut parts: Vec<RecordBatch> = Vec::new();
        for (_, t) in taken {
            parts.extend(t.memory.map(BufferedRows::into_batches).unwrap_or_default());
            parts.extend(t.parts);
        }
        parts.retain(|p| p.num_rows() > 0);
        if parts.is_empty() {
            return Ok(());
        }
        let rows = concat_batches(self.part.schema(), &parts)?;
        let r = self.read(&rows)?;
        let mut order: Vec<usize> = (0..rows.num_rows()).collect();
        order.sort_by(|&a, &b| cmp_bytes(&r.keys[a], &r.keys[b]).then(r.times[a].cmp(&r.times[b])));
        for i in order {
            let sessions = value_of(&mut self.sessions, &r.keys[i], Sessions::default)?;
            // In time order, a row extends the key's last session or starts one.
            merge(sessions, r.times[i], self.spec.gap, EventTime::MIN);
        }
        let mut by_end: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
        for i in 0..rows.num_rows() {
            let (_, end) = self.session_of(&r.keys[i], r.times[i])?;
            by_end.entry(end).or_default().push(i as u32);
        }
        self.hold(&rows, by_end)?;
        self.enforce_budget()
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let schema = self.part.schema();
        self.windows
            .enforce_budget(|_, rows| rows.into_part(schema))
    }
}

impl SessionWindowSpec {
    /// The row lanes (`tags`) of a session operator: rows as `keys ++ row`, re-routed by the
    /// keys after a rescale.
    pub(super) fn open_lanes(
        &self,
        task: &TaskInfo,
        part: &KeyedRows,
        tags: &[usize],
    ) -> Result<OpenWindows<BufferedRows>> {
        let route = match self.keys.len() {
            0 => PartRoute::Single,
            n => PartRoute::Keys(n),
        };
        let lanes = tags
            .iter()
            .map(|&tag| LaneState {
                handle: task.state.sub(tag as u8),
                route,
                part_schema: Arc::clone(part.schema()),
            })
            .collect();
        OpenWindows::open(lanes, task.state.memory_budget(), task.restored_epoch)
    }

    /// Encodes the partition keys of a part (its first columns).
    pub(super) fn key_converter(&self, part: &KeyedRows) -> Result<RowConverter> {
        let fields = part.schema().fields()[..self.keys.len()]
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(RowConverter::new(fields)?)
    }
}

/// Reads the keys, event times and `W_r` of a part's rows.
pub(super) fn read_part(
    spec: &SessionWindowSpec,
    keys: &RowConverter,
    rows: &RecordBatch,
) -> Result<PartRows> {
    let n = spec.keys.len();
    let keys = if n == 0 {
        vec![Vec::new(); rows.num_rows()]
    } else {
        let converted = keys.convert_columns(&rows.columns()[..n])?;
        converted.iter().map(|r| r.as_ref().to_vec()).collect()
    };
    let nanos = |i: usize| -> Result<Vec<EventTime>> {
        let a = timestamps_as_nanos(rows.column(n + i))?;
        Ok(a.values().to_vec())
    };
    let gap = spec.gap;
    Ok(PartRows {
        keys,
        times: nanos(spec.window_end)?
            .into_iter()
            .map(|end| end.saturating_sub(gap))
            .collect(),
        watermarks: nanos(spec.window_start)?,
    })
}

/// The order rows are judged in: increasing `W_r`, then decreasing event time.
pub(super) fn judging_order(r: &PartRows) -> Vec<usize> {
    let mut order: Vec<usize> = (0..r.times.len()).collect();
    order.sort_by(|&a, &b| {
        (r.watermarks[a], std::cmp::Reverse(r.times[a]))
            .cmp(&(r.watermarks[b], std::cmp::Reverse(r.times[b])))
    });
    order
}

/// Counts the late rows of a part and emits those kept (`kept`) as late rows.
pub(super) fn report_late(
    spec: &SessionWindowSpec,
    metrics: &JobMetrics,
    rows: &RecordBatch,
    late: u64,
    kept: LateRows,
    out: &mut Output,
) -> Result<()> {
    if late > 0 {
        metrics.add_late_rows(late);
    }
    if !kept.is_empty() {
        // The part is `keys ++ row`; the table's columns come before window_start.
        let n = spec.keys.len();
        let own: Vec<usize> = (n..n + spec.window_start).collect();
        if let Some(b) = kept.batch(&rows.project(&own)?, own.len())? {
            out.emit_late(b);
        }
    }
    Ok(())
}

/// Puts a batch's rows into lane `PENDING`, to wait under `W_r + 1`.
fn wait(
    windows: &mut OpenWindows<BufferedRows>,
    part: &KeyedRows,
    spec: &SessionWindowSpec,
    batch: &RecordBatch,
) -> Result<()> {
    let part = part.of(batch)?;
    let watermarks = timestamps_as_nanos(batch.column(spec.window_start))?;
    let waits: Vec<EventTime> = (0..watermarks.len())
        .map(|i| watermarks.value(i).saturating_add(1))
        .collect();
    for run in split_by_window(&waits) {
        let rows = run.owned_batch(&part)?;
        windows.push(PENDING, run.end, [rows])?;
    }
    Ok(())
}

/// The rows of `lane`'s window ending at `end`, taken out, as one batch.
pub(super) fn take_rows(
    windows: &mut OpenWindows<BufferedRows>,
    schema: &SchemaRef,
    lane: usize,
    end: EventTime,
) -> Result<Option<RecordBatch>> {
    let taken = windows.take(lane, end)?;
    let mut parts = taken
        .memory
        .map(BufferedRows::into_batches)
        .unwrap_or_default();
    parts.extend(taken.parts);
    parts.retain(|p| p.num_rows() > 0);
    match parts.len() {
        0 => Ok(None),
        1 => Ok(parts.pop()),
        _ => Ok(Some(concat_batches(schema, &parts)?)),
    }
}

/// Merges the row window `[t, t + gap]` with the sessions it overlaps or touches. Returns
/// false (and changes nothing) when it touches none and has itself ended under `watermark`:
/// the row is late.
fn merge(sessions: &mut Sessions, t: EventTime, gap: i64, watermark: EventTime) -> bool {
    let own_end = t.saturating_add(gap);
    // Sessions neither overlap nor touch, so by start their ends increase too: walking back
    // from the last one starting by `own_end`, they touch until one ends before `t`.
    let touched: Vec<(EventTime, EventTime)> = sessions
        .range(..=own_end)
        .rev()
        .take_while(|(_, &end)| end >= t)
        .map(|(&s, &e)| (s, e))
        .collect();
    if touched.is_empty() && own_end <= watermark {
        return false;
    }
    let mut start = t;
    let mut end = own_end;
    for (s, e) in touched {
        sessions.remove(&s);
        start = start.min(s);
        end = end.max(e);
    }
    sessions.insert(start, end);
    true
}

impl Operator for SessionWindowOperator {
    fn name(&self) -> &str {
        "SessionWindow"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, _out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input > 0 {
            return Err(EngineError::Internal(format!(
                "a session window has one input, got a batch on input {input}"
            )));
        }
        wait(&mut self.windows, &self.part, &self.spec, &batch)?;
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.windows.advance(watermark);
        // One bucket at a time, in order: placing rows and moving rows to their sessions'
        // new ends add buckets, always after the one being handled.
        while let Some(end) = self.windows.first_ready(watermark) {
            if let Some(rows) = self.take_rows(PENDING, end)? {
                self.place(&rows, out)?;
            }
            if let Some(rows) = self.take_rows(HELD, end)? {
                self.fire(end, &rows, out)?;
            }
        }
        self.enforce_budget()?;
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let schema = self.part.schema();
        self.windows
            .snapshot(epoch, |_, rows| rows.into_part(schema))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_merge_when_they_overlap_or_touch() {
        let mut s = Sessions::new();
        assert!(merge(&mut s, 0, 10, EventTime::MIN));
        assert!(merge(&mut s, 25, 10, EventTime::MIN));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(&0, &10), (&25, &35)]);
        // 15 touches [25, 35) (15 + 10 = 25) but not [0, 10): ends before 15.
        assert!(merge(&mut s, 15, 10, EventTime::MIN));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(&0, &10), (&15, &35)]);
        // 10 touches both: exactly gap apart from 0, and overlapping [15, 35).
        assert!(merge(&mut s, 10, 10, EventTime::MIN));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(&0, &35)]);
    }

    #[test]
    fn a_row_is_late_only_when_it_reaches_no_open_session() {
        let mut s = Sessions::new();
        assert!(merge(&mut s, 100, 10, 95));
        // Own window [80, 90) ended under watermark 95, touches nothing: late.
        assert!(!merge(&mut s, 80, 10, 95));
        // Own window [92, 102) is still open: joins [100, 110).
        assert!(merge(&mut s, 92, 10, 95));
        // [85, 95) ended, but it touches the open session [92, 110): not late.
        assert!(merge(&mut s, 85, 10, 95));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(&85, &110)]);
    }
}
