//! Event time at the source: watermark generation and window assignment (DESIGN.md §3).
//!
//! The assigner sits in the source task, before any filter, and sees each partition's rows in
//! order. For every row it knows the watermark as it stood just before that row (the running
//! maximum of the watermark expression), so lateness is decided per row and never depends on
//! batch size, parallelism or timing.
//!
//! For a window table function (`TUMBLE`, `HOP`, `CUMULATE`) it also expands each row into the
//! windows it belongs to, appending `window_start`, `window_end` and `window_time` (the end
//! less a millisecond; a `Null` column when no operator reads it). A (row, window) pair whose
//! window had already closed under the row's watermark is dropped; a row all of whose windows
//! had closed is late, dropped and counted.
//!
//! A `PROCTIME()` column is stamped here with the wall clock, before the watermark; a window
//! over it takes the wall clock as its watermark (see [`ProcTime`]).
//!
//! A `SESSION` row cannot be judged here: whether it is late depends on the sessions of its key
//! (DESIGN.md §3), which the session operator keeps. Each row passes with `window_end` = its
//! own window's end (`t + gap`) and, in the `window_start` slot, the watermark just before the
//! row, which the session operator judges it by and replaces with the session's start (and
//! `window_time` with the session's end less a millisecond).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, NullArray, TimestampNanosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, filter_record_batch, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampNanosecondType};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::late_rows::{LateRows, BELOW_WATERMARK, NO_EVENT_TIME, WINDOW_CLOSED};
use crate::message::{EventTime, WATERMARK_MIN};
use crate::panes::Panes;
use crate::window::{WindowSpec, WINDOW_TIME_BEFORE_END};

/// What the planner asks of a source's event-time handling.
#[derive(Debug, Clone)]
pub struct EventTimeSpec {
    /// `WATERMARK FOR col AS expr`: evaluated on each row; its running maximum is the watermark.
    pub watermark: Option<Arc<dyn PhysicalExpr>>,
    /// A window table function applied to this source, if any.
    pub window: Option<WindowAssignment>,
    /// A `PROCTIME()` column of the table, if any.
    pub proctime: Option<ProcTime>,
    /// Without a window: drop (and count as late) each row whose value in this column is below
    /// the watermark just before it. Set for a scan feeding an interval join, which then relies
    /// on every row after watermark W having a time `>= W`, judged per row as above.
    pub out_of_bound: Option<usize>,
    /// Hand the late rows on ([`Assigned::late`]) to be kept as a table, not only counted.
    pub keep_late: bool,
    /// The column `WATERMARK FOR` names: its newest value is reported
    /// ([`EventTimeAssigner::newest`]), to show how far the watermark trails it.
    pub event_time: Option<usize>,
}

/// A processing-time column (`pt AS PROCTIME()`): the wall clock when the source read the row.
/// The reader's rows lack it; the assigner inserts it. When a window is computed over it, the
/// wall clock is also the watermark (it advances while no rows come, so windows fire by the
/// clock). Not deterministic: a replay after a failure stamps rows anew.
#[derive(Debug, Clone)]
pub struct ProcTime {
    /// Where the column goes among the table's columns.
    pub column: usize,
    /// The table's schema, with the column.
    pub schema: SchemaRef,
    /// The wall clock is the watermark (instead of `EventTimeSpec::watermark`).
    pub watermark: bool,
}

/// Now, in nanoseconds since the epoch (processing time).
pub fn wall_clock() -> EventTime {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(WATERMARK_MIN, |d| {
            i64::try_from(d.as_nanos()).unwrap_or(EventTime::MAX)
        })
}

/// A window table function: which column holds event time and the windows' shape.
#[derive(Debug, Clone)]
pub struct WindowAssignment {
    pub time_column: usize,
    pub spec: WindowSpec,
    /// The source schema plus `window_start`, `window_end` and `window_time`; columns in
    /// `unused` are of type `Null` here.
    pub output_schema: SchemaRef,
    /// Columns no operator reads after the assigner (source columns, and `window_time`): not
    /// copied into the windows a row belongs to (a `NullArray` stands in, which costs
    /// nothing), so HOP's copies carry only what the query uses.
    pub unused: Vec<usize>,
    /// HOP in panes ([`crate::panes`]): each row goes out once, its window columns holding
    /// its pane code as `window_start` and the code plus the pane as `window_end` (the bounds
    /// of a pane-long window), instead of once per window. Only for an aggregation that
    /// combines the panes into windows.
    pub panes: Option<Panes>,
}

/// What [`EventTimeAssigner::assign`] returns for one batch.
#[derive(Debug)]
pub struct Assigned {
    /// The rows to pass on (with window columns when windowed); `None` when nothing is left.
    pub batch: Option<RecordBatch>,
    /// Rows dropped as late.
    pub late_rows: u64,
    /// With [`EventTimeSpec::keep_late`]: those rows (the table's columns), with the watermark
    /// each missed and why ([`crate::late_rows::late_schema`]).
    pub late: Option<RecordBatch>,
}

/// Running event-time state of one source partition.
#[derive(Debug)]
pub struct EventTimeAssigner {
    spec: EventTimeSpec,
    watermark: EventTime,
    /// The newest event time seen (the `event_time` column's maximum).
    newest: EventTime,
    /// Reused per batch: the watermark just before each row.
    row_watermarks: Vec<EventTime>,
    /// The column the watermark expression rises with, when it is one that never falls as
    /// the column rises (`t`, `t - INTERVAL ...`, a cast of those): with nothing to judge per
    /// row, the batch's watermark is the expression at the row where that column is largest.
    monotone_in: Option<usize>,
}

/// Casts a timestamp array of any unit to nanoseconds and returns it.
pub fn timestamps_as_nanos(array: &ArrayRef) -> Result<TimestampNanosecondArray> {
    let tz = match array.data_type() {
        DataType::Timestamp(_, tz) => tz.clone(),
        other => {
            return Err(EngineError::BadInput(format!(
                "event time must be a TIMESTAMP, got {other}"
            )))
        }
    };
    let casted = cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, tz))?;
    Ok(casted.as_primitive::<TimestampNanosecondType>().clone())
}

/// The row holding the largest value of `times` (the first such), none if all are NULL.
fn newest_row(times: &TimestampNanosecondArray) -> Option<usize> {
    let values = times.values();
    if times.null_count() == 0 {
        // The max first (a vectorised pass), then where it is.
        let max = values.iter().copied().max()?;
        return values.iter().position(|&t| t == max);
    }
    (0..times.len())
        .filter(|&i| times.is_valid(i))
        .max_by_key(|&i| (values[i], std::cmp::Reverse(i)))
}

/// The column a watermark expression rises with, if it never falls as that column rises: the
/// column itself, plus or minus a constant (an interval), or a cast to another timestamp
/// unit of those. Anything else: none (the expression is evaluated on every row).
fn monotone_column(expr: &dyn PhysicalExpr) -> Option<usize> {
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
    if let Some(column) = expr.downcast_ref::<Column>() {
        return Some(column.index());
    }
    if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        return match cast.cast_type() {
            DataType::Timestamp(..) => monotone_column(cast.expr().as_ref()),
            _ => None,
        };
    }
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    let constant = |e: &Arc<dyn PhysicalExpr>| e.is::<Literal>();
    match binary.op() {
        Operator::Minus if constant(binary.right()) => monotone_column(binary.left().as_ref()),
        Operator::Plus if constant(binary.right()) => monotone_column(binary.left().as_ref()),
        Operator::Plus if constant(binary.left()) => monotone_column(binary.right().as_ref()),
        _ => None,
    }
}

impl EventTimeAssigner {
    pub fn new(spec: EventTimeSpec) -> Self {
        let monotone_in = spec.watermark.as_deref().and_then(monotone_column);
        Self {
            spec,
            watermark: WATERMARK_MIN,
            newest: WATERMARK_MIN,
            row_watermarks: Vec::new(),
            monotone_in,
        }
    }

    /// The newest event time among the rows assigned so far (`WATERMARK_MIN` before any, or
    /// without an event-time column).
    pub fn newest(&self) -> EventTime {
        self.newest
    }

    /// Continues from a checkpointed watermark (the running maximum), so that rows replayed
    /// after a restart are judged late exactly as before.
    pub fn restore_watermark(&mut self, watermark: EventTime) {
        self.watermark = self.watermark.max(watermark);
    }

    /// The partition's watermark after the rows assigned so far.
    pub fn watermark(&self) -> EventTime {
        self.watermark
    }

    /// With a processing-time watermark: moves it to the wall clock `now` (never back).
    pub fn tick(&mut self, now: EventTime) {
        if self.spec.proctime.as_ref().is_some_and(|p| p.watermark) {
            self.watermark = self.watermark.max(now);
        }
    }

    /// Advance the watermark over `batch` and assign windows.
    pub fn assign(&mut self, batch: RecordBatch) -> Result<Assigned> {
        let batch = self.stamp(batch)?;
        let newest = self.advance_watermark(&batch)?;
        if let Some(column) = self.spec.event_time {
            let newest = match newest {
                Some((c, t)) if c == column => t,
                _ => datafusion::arrow::compute::max(&timestamps_as_nanos(batch.column(column))?),
            };
            if let Some(t) = newest {
                self.newest = self.newest.max(t);
            }
        }
        self.judge(batch)
    }

    /// Mid-stream (a window over a derived stream): assigns windows to `batch`, judging every
    /// row against the watermark as it stands (set with [`Self::restore_watermark`] from the
    /// operator's input watermark), which the rows do not move.
    pub fn assign_behind(&mut self, batch: RecordBatch) -> Result<Assigned> {
        self.row_watermarks.clear();
        self.row_watermarks.resize(batch.num_rows(), self.watermark);
        self.judge(batch)
    }

    /// Windows (or, without a window, the out-of-bound check) for `batch`, each row judged
    /// against its entry of `row_watermarks`.
    fn judge(&mut self, batch: RecordBatch) -> Result<Assigned> {
        let Some(window) = &self.spec.window else {
            return match self.spec.out_of_bound {
                Some(column) => self.drop_out_of_bound(batch, column),
                None => Ok(Assigned {
                    batch: Some(batch),
                    late_rows: 0,
                    late: None,
                }),
            };
        };
        let (pairs, late_rows, late) = self.row_windows(window, &batch)?;
        Ok(Assigned {
            batch: windowed_batch(window, &batch, pairs)?,
            late_rows,
            late: late.batch(&batch, batch.num_columns())?,
        })
    }

    /// Inserts the processing-time column, if the table has one: the wall clock, or the
    /// watermark if the clock went back (so stamped rows are never late and never go back).
    fn stamp(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(proctime) = &self.spec.proctime else {
            return Ok(batch);
        };
        let now = wall_clock().max(self.watermark);
        let mut columns = batch.columns().to_vec();
        if proctime.column > columns.len() {
            return Err(EngineError::Internal(format!(
                "PROCTIME column {} of a batch with {} columns",
                proctime.column,
                columns.len()
            )));
        }
        columns.insert(
            proctime.column,
            Arc::new(TimestampNanosecondArray::from_value(now, batch.num_rows())),
        );
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&proctime.schema),
            columns,
            &options,
        )?)
    }

    /// The rows of `batch` whose `column` is not below the watermark just before them (a NULL
    /// time is kept: it is no time at all, and matches nothing downstream).
    fn drop_out_of_bound(&self, batch: RecordBatch, column: usize) -> Result<Assigned> {
        let times = timestamps_as_nanos(batch.column(column))?;
        let mut late = LateRows::default();
        let keep: BooleanArray = (0..times.len())
            .map(|i| {
                let wm = self.row_watermarks.get(i).copied().unwrap_or(WATERMARK_MIN);
                let kept = times.is_null(i) || times.value(i) >= wm;
                if !kept && self.spec.keep_late {
                    late.push(i, wm, BELOW_WATERMARK);
                }
                Some(kept)
            })
            .collect();
        let late_rows = keep.false_count() as u64;
        if late_rows == 0 {
            return Ok(Assigned {
                batch: Some(batch),
                late_rows,
                late: None,
            });
        }
        let late = late.batch(&batch, batch.num_columns())?;
        let kept = filter_record_batch(&batch, &keep)?;
        Ok(Assigned {
            batch: (kept.num_rows() > 0).then_some(kept),
            late_rows,
            late,
        })
    }

    /// Moves the watermark over the rows of `batch`, keeping the watermark just before each.
    /// Moves the watermark over `batch`, noting the watermark before each row where rows are
    /// judged. Returns the largest time of the column the watermark rises with, when it found
    /// it on the way (`(column, max)`).
    fn advance_watermark(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<Option<(usize, Option<EventTime>)>> {
        self.row_watermarks.clear();
        if let Some(p) = self.spec.proctime.as_ref().filter(|p| p.watermark) {
            // Every row of the batch was stamped with one time: the watermark before each is
            // the one before the batch.
            let stamped = timestamps_as_nanos(batch.column(p.column))?;
            self.row_watermarks.resize(batch.num_rows(), self.watermark);
            if let Some(t) = stamped.iter().flatten().max() {
                self.watermark = self.watermark.max(t);
            }
            return Ok(None);
        }
        let Some(expr) = &self.spec.watermark else {
            return Ok(None);
        };
        let judged = self.spec.window.is_some() || self.spec.out_of_bound.is_some();
        if let (false, Some(column)) = (judged, self.monotone_in) {
            // Only the watermark after the batch is needed: the expression at the row with
            // the largest time (the expression never falls as the time rises), one row
            // evaluated instead of the batch.
            if let Ok(times) = timestamps_as_nanos(batch.column(column)) {
                let Some(row) = newest_row(&times) else {
                    return Ok(Some((column, None)));
                };
                let value = expr.evaluate(&batch.slice(row, 1))?.into_array(1)?;
                let value = timestamps_as_nanos(&value)?;
                if value.is_valid(0) {
                    self.watermark = self.watermark.max(value.value(0));
                }
                return Ok(Some((column, Some(times.value(row)))));
            }
        }
        let values = expr.evaluate(batch)?.into_array(batch.num_rows())?;
        let values = timestamps_as_nanos(&values)?;
        if !judged {
            // Nothing judges rows here: only the watermark after the batch is needed.
            if let Some(max) = datafusion::arrow::compute::max(&values) {
                self.watermark = self.watermark.max(max);
            }
            return Ok(None);
        }
        let mut running = self.watermark;
        self.row_watermarks.reserve(values.len());
        if values.null_count() == 0 {
            self.row_watermarks
                .extend(values.values().iter().map(|&value| {
                    let before = running;
                    running = running.max(value);
                    before
                }));
        } else {
            self.row_watermarks.extend(values.iter().map(|value| {
                let before = running;
                if let Some(value) = value {
                    running = running.max(value);
                }
                before
            }));
        }
        self.watermark = running;
        Ok(None)
    }

    /// The open windows of each row, as (row, window) pairs, the count of late rows and, with
    /// `keep_late`, which they are.
    ///
    /// The pairs come grouped by the window's rank among the row's windows (0: the latest).
    /// With rows in time order each rank's windows come in runs, so a hopping window's rows
    /// reach the aggregation as a few contiguous slices per window instead of interleaved
    /// (row 1 in windows a b c, row 2 in a b c, ...).
    fn row_windows(
        &self,
        window: &WindowAssignment,
        batch: &RecordBatch,
    ) -> Result<(Bucket, u64, LateRows)> {
        let times = timestamps_as_nanos(batch.column(window.time_column))?;
        let spec = window.spec;
        if let (WindowSpec::Tumble { size, offset }, None, 0) =
            (spec, window.panes, times.null_count())
        {
            if let Some(pairs) = tumble_windows(size, offset, times.values(), &self.row_watermarks)
            {
                return Ok((pairs, 0, LateRows::default()));
            }
        }
        let mut buckets: Vec<Bucket> = vec![Bucket::with_capacity(batch.num_rows())];
        let mut late_rows = 0u64;
        let mut late = LateRows::default();
        for i in 0..times.len() {
            let wm = self.row_watermarks.get(i).copied().unwrap_or(WATERMARK_MIN);
            if times.is_null(i) {
                // A row without event time belongs to no window; it is counted with the late
                // rows so that it does not vanish unseen.
                late_rows += 1;
                if self.spec.keep_late {
                    late.push(i, wm, NO_EVENT_TIME);
                }
                continue;
            }
            let t = times.value(i);
            if let WindowSpec::Session { gap } = spec {
                buckets[0].push(i as u32, wm, t.saturating_add(gap));
                continue;
            }
            if let Some(panes) = window.panes {
                match panes.code(t, wm) {
                    Some(code) => {
                        buckets[0].push(i as u32, code, code.saturating_add(panes.pane()))
                    }
                    None if spec.covers(t) => {
                        late_rows += 1;
                        if self.spec.keep_late {
                            late.push(i, wm, WINDOW_CLOSED);
                        }
                    }
                    None => {}
                }
                continue;
            }
            let mut rank = 0;
            let n = spec.for_each_open_window(t, wm, |start, end| {
                if buckets.len() <= rank {
                    buckets.push(Bucket::with_capacity(0));
                }
                buckets[rank].push(i as u32, start, end);
                rank += 1;
            });
            if n == 0 && spec.covers(t) {
                late_rows += 1;
                if self.spec.keep_late {
                    late.push(i, wm, WINDOW_CLOSED);
                }
            }
        }
        let mut buckets = buckets.into_iter();
        let mut all = buckets.next().unwrap_or_default();
        for b in buckets {
            all.indices.extend(b.indices);
            all.starts.extend(b.starts);
            all.ends.extend(b.ends);
        }
        Ok((all, late_rows, late))
    }
}

/// The rows of `batch` copied once per window, with `window_start`, `window_end` and
/// `window_time` added (columns no scan reads as NULL columns); `None` when no row has an open
/// window.
fn windowed_batch(
    window: &WindowAssignment,
    batch: &RecordBatch,
    pairs: Bucket,
) -> Result<Option<RecordBatch>> {
    let Bucket {
        indices,
        starts,
        ends,
    } = pairs;
    if indices.is_empty() {
        return Ok(None);
    }
    let rows = indices.len();
    let mut columns: Vec<ArrayRef> =
        if rows == batch.num_rows() && indices.iter().enumerate().all(|(i, &j)| i as u32 == j) {
            batch.columns().to_vec()
        } else {
            let idx = UInt32Array::from(indices);
            batch
                .columns()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if window.unused.contains(&i) {
                        Ok(Arc::new(NullArray::new(rows)) as ArrayRef)
                    } else {
                        take(c.as_ref(), &idx, None)
                    }
                })
                .collect::<Result<_, _>>()?
        };
    for &i in &window.unused {
        if let Some(c) = columns.get_mut(i) {
            if c.data_type() != &DataType::Null {
                *c = Arc::new(NullArray::new(rows));
            }
        }
    }
    columns.push(Arc::new(TimestampNanosecondArray::from(starts)));
    let time_column = columns.len() + 1;
    let times: ArrayRef = if window.unused.contains(&time_column) {
        Arc::new(NullArray::new(rows))
    } else {
        Arc::new(TimestampNanosecondArray::from_iter_values(
            ends.iter()
                .map(|e| e.saturating_sub(WINDOW_TIME_BEFORE_END)),
        ))
    };
    columns.push(Arc::new(TimestampNanosecondArray::from(ends)));
    columns.push(times);
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(Some(RecordBatch::try_new_with_options(
        window.output_schema.clone(),
        columns,
        &options,
    )?))
}

/// `TUMBLE` over times without NULLs, when every row's window is still open: each row's
/// window in one pass (the pairs `row_windows` would make, in the same order); `None` when
/// some row's window has closed under its watermark (then `row_windows` judges the batch
/// row by row). Rows come mostly in time order: a row inside the previous row's window
/// takes its start without dividing.
fn tumble_windows(
    size: i64,
    offset: i64,
    times: &[EventTime],
    watermarks: &[EventTime],
) -> Option<Bucket> {
    let spec = WindowSpec::Tumble { size, offset };
    let mut pairs = Bucket::with_capacity(times.len());
    // The window of the last row, [lo, hi), kept only if not clamped at the ends of time.
    let (mut lo, mut hi) = (0, 0);
    let mut open = true;
    for (i, &t) in times.iter().enumerate() {
        let (start, end) = if lo <= t && t < hi {
            (lo, hi)
        } else {
            let start = spec.last_start(t);
            let end = start.saturating_add(size);
            if start > EventTime::MIN.saturating_add(size) && end < EventTime::MAX {
                (lo, hi) = (start, end);
            }
            (start, end)
        };
        let wm = watermarks.get(i).copied().unwrap_or(WATERMARK_MIN);
        // As `WindowSpec::for_each_open_window`: the window holds t and ends after wm.
        open &= start > t.saturating_sub(size) && end > wm;
        pairs.starts.push(start);
        pairs.ends.push(end);
    }
    if !open {
        return None;
    }
    pairs.indices.extend(0..times.len() as u32);
    Some(pairs)
}

/// (row, window) pairs: the rows of one rank among the rows' windows, or all of them.
#[derive(Default)]
struct Bucket {
    indices: Vec<u32>,
    starts: Vec<EventTime>,
    ends: Vec<EventTime>,
}

impl Bucket {
    fn with_capacity(n: usize) -> Self {
        Self {
            indices: Vec::with_capacity(n),
            starts: Vec::with_capacity(n),
            ends: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, row: u32, start: EventTime, end: EventTime) {
        self.indices.push(row);
        self.starts.push(start);
        self.ends.push(end);
    }
}

#[cfg(test)]
mod tests;
