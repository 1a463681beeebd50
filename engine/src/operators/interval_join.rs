//! `IntervalJoinOperator`: joins two streams on equality keys and an interval of event time,
//! `a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL x AND a.ts + INTERVAL y`.
//!
//! - input 0 (left, `a`) and input 1 (right, `b`): rows with an event-time column each,
//!   routed by the keyed exchange on the equality keys (all to one instance without keys).
//!   Each side's time column has a lag `d`: a row that arrives after the watermark `W` has a
//!   time `>= W - d`. It is 0 for a source's WATERMARK column (the source drops the rows below
//!   their own watermark, see the planner) and for `window_end`, the window size for
//!   `window_start`.
//! - output: the pairs with equal, non-NULL keys, `tb - ta` in `[lower, upper]` and the whole
//!   ON condition true, each emitted when its second row arrives: arriving rows probe the
//!   other side's buffered rows, then are buffered themselves. LEFT / RIGHT / FULL also emit
//!   the rows of their outer side that matched nothing, padded with NULLs, when they expire.
//! - state: each side's rows as `keys ++ row ++ matched`, kept only while the other side can
//!   still send a match: an `a` row matches only `b` rows with `tb <= ta + upper`, and once
//!   `W - d_b > ta + upper` none can come; a `b` row likewise once `W - d_a > tb - lower`.
//!   A side may instead (or also) be bounded by a column of its own rows ([`Until`]: `b.ts
//!   BETWEEN a.ts AND a.expires`, Nexmark q4 and q9): an `a` row then expires once `W - d_b >
//!   a.expires`, whatever its own time, and a `b` row as above by the constant bound.
//!   Rows are bucketed by that expiry, rounded up to a granularity of a quarter of the
//!   interval (at least 1 ms; with a column bound, a power of two near a quarter of the row's
//!   distance from the watermark), in one [`OpenWindows`] lane per side: memory up to the task's
//!   budget, the task's store past it, re-routed by the keys after a rescale. A probe reads
//!   only the other side's buckets that can hold matches.
//! - on watermark W (the minimum of both inputs, taken by the runtime): the buckets ending at
//!   or before W are dropped, their unmatched outer rows emitted. The watermark passed on is
//!   held back to `W - H`, `H = max(d_a, d_b) + max(0, upper, -lower) + granularity`: every
//!   row emitted after it has both time columns `>= W - H` (a pair found by a row at `W - d`
//!   can hold an older row up to the interval's reach; an expiring row is at most that far
//!   below the watermark). With a column bound no such `H` exists (a row stays as long as its
//!   column says): the output watermark stays at its minimum until the end of input (nothing
//!   downstream reads it: no event-time column survives a join).
//! - rows that can never match (a NULL key or time) are emitted padded at once by an outer
//!   side, dropped by an inner one.
//! - at barrier: every bucket is written to the store. At end: the watermark +infinity drops
//!   every bucket (emitting the unmatched outer rows).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, filter, filter_record_batch, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX, WATERMARK_MIN};
use crate::operator::{Operator, Output};
use crate::operators::window_join::JoinKind;
use crate::operators::windowed::{
    equal_key_pairs, keys_valid, split_by_window, BufferedRows, KeyedRows, LaneState, OpenWindows,
    PartRoute,
};

mod timing;

use timing::Timing;

/// A bucket read by a probe with more parts than this is merged into one part.
const MAX_PARTS: usize = 8;

/// One input of an interval join.
#[derive(Debug, Clone)]
pub struct IntervalSide {
    pub schema: SchemaRef,
    /// Equality keys, evaluated on this side; the i-th keys of both sides are compared.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Index of the event-time column.
    pub time: usize,
    /// A row arriving after watermark W has a time `>= W - lag` (nanoseconds).
    pub lag: i64,
    /// A bound of the other side's time by a column of this side's row
    /// (`b.ts <= a.expires`), which then ends the row's reach (see the module doc).
    pub until: Option<Until>,
}

/// `other.time <= row[column] + offset` for every pair of a row (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until {
    pub column: usize,
    pub offset: i64,
}

/// The plan node of an interval join.
#[derive(Debug, Clone)]
pub struct IntervalJoinSpec {
    /// INNER, LEFT, RIGHT or FULL.
    pub kind: JoinKind,
    pub left: IntervalSide,
    pub right: IntervalSide,
    /// `right.time - left.time` of a pair lies in `[lower, upper]` (nanoseconds, inclusive);
    /// `None`: not bounded by a constant. A left row needs `upper` or its `until`, a right
    /// row `lower` or its `until`, or its rows would never expire.
    pub lower: Option<i64>,
    pub upper: Option<i64>,
    /// The whole ON condition beyond the equality keys (the interval included), over
    /// `joined_schema`.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns then right columns (nullable where an outer join pads).
    pub joined_schema: SchemaRef,
    pub description: String,
}

/// The layout of one side's stored rows: `keys ++ row ++ matched`.
#[derive(Debug, Clone)]
struct SideRows {
    keyed: KeyedRows,
    schema: SchemaRef,
    keys: usize,
    columns: usize,
}

impl SideRows {
    fn new(side: &IntervalSide) -> Result<Self> {
        let keyed = KeyedRows::new(&side.keys, &side.schema)?;
        let mut fields: Vec<Field> = keyed
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("matched", DataType::Boolean, false));
        Ok(Self {
            keys: side.keys.len(),
            columns: side.schema.fields().len(),
            schema: Arc::new(Schema::new(fields)),
            keyed,
        })
    }

    /// The key columns of a stored part.
    fn keys<'a>(&self, part: &'a RecordBatch) -> &'a [ArrayRef] {
        &part.columns()[..self.keys]
    }

    /// The row's own columns of a stored part.
    fn row<'a>(&self, part: &'a RecordBatch) -> &'a [ArrayRef] {
        &part.columns()[self.keys..self.keys + self.columns]
    }

    fn matched(&self, part: &RecordBatch) -> Result<BooleanArray> {
        part.column(self.keys + self.columns)
            .as_boolean_opt()
            .cloned()
            .ok_or_else(|| EngineError::Internal("interval join state: no matched flags".into()))
    }

    /// `part` with its matched flags replaced.
    fn with_matched(&self, part: &RecordBatch, matched: BooleanArray) -> Result<RecordBatch> {
        let mut columns = part.columns().to_vec();
        columns[self.keys + self.columns] = Arc::new(matched);
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(part.num_rows())),
        )?)
    }
}

impl OperatorFactory for IntervalJoinSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if !self.kind.pairs() {
            return Err(EngineError::Internal(format!(
                "interval join of kind {:?}",
                self.kind
            )));
        }
        let ends = [
            self.upper.is_some() || self.left.until.is_some(),
            self.lower.is_some() || self.right.until.is_some(),
        ];
        if ends.contains(&false) {
            return Err(EngineError::Internal(format!(
                "interval join whose {} rows never expire: {}",
                if ends[0] { "right" } else { "left" },
                self.description
            )));
        }
        let sides = [SideRows::new(&self.left)?, SideRows::new(&self.right)?];
        let lanes = sides
            .iter()
            .enumerate()
            .map(|(tag, side)| LaneState {
                handle: task.state.sub(tag as u8),
                route: match side.keys {
                    0 => PartRoute::Single,
                    n => PartRoute::Keys(n),
                },
                part_schema: Arc::clone(&side.schema),
            })
            .collect();
        let buckets = OpenWindows::open(lanes, task.state.memory_budget(), task.restored_epoch)?;
        let spans = (self.lower.is_none() || self.upper.is_none()).then(|| {
            // Restored buckets' times are not known: any time.
            [0, 1].map(|side| {
                buckets
                    .ends_between(side, EventTime::MIN, EventTime::MAX)
                    .into_iter()
                    .map(|end| (end, (EventTime::MIN, EventTime::MAX)))
                    .collect()
            })
        });
        Ok(Box::new(IntervalJoinOperator {
            converter: key_converter(self)?,
            timing: Timing::new(self),
            spec: self.clone(),
            sides,
            buckets,
            spans,
        }))
    }
}

/// One row format for both sides' keys (`None` without keys).
fn key_converter(spec: &IntervalJoinSpec) -> Result<Option<RowConverter>> {
    let (l, r) = (&spec.left, &spec.right);
    if l.keys.len() != r.keys.len() {
        return Err(EngineError::Internal(format!(
            "interval join needs the same number of keys on both sides (got {} and {})",
            l.keys.len(),
            r.keys.len()
        )));
    }
    if l.keys.is_empty() {
        return Ok(None);
    }
    let mut fields = Vec::with_capacity(l.keys.len());
    for (a, b) in l.keys.iter().zip(&r.keys) {
        let (at, bt) = (a.data_type(&l.schema)?, b.data_type(&r.schema)?);
        if at != bt {
            return Err(EngineError::Internal(format!(
                "interval join key types differ: {a} is {at}, {b} is {bt}"
            )));
        }
        fields.push(SortField::new(at));
    }
    Ok(Some(RowConverter::new(fields)?))
}

/// A running interval join.
pub struct IntervalJoinOperator {
    spec: IntervalJoinSpec,
    timing: Timing,
    converter: Option<RowConverter>,
    sides: [SideRows; 2],
    /// Each side's buffered rows by expiry bucket (lane 0 left, lane 1 right).
    buckets: OpenWindows<BufferedRows>,
    /// With a reach from a column: per side, the range of times of the rows this run put in
    /// each bucket, so a probe skips the buckets whose rows are all too early or too late (a
    /// bucket of auctions by expiry also holds auctions far ahead of a bid; one restored from
    /// a checkpoint has no entry and is always probed).
    spans: Option<[HashMap<EventTime, (EventTime, EventTime)>; 2]>,
}

/// Arriving rows of one side, probing the other side's buckets.
struct Arrivals {
    side: usize,
    /// `keys ++ row ++ matched` of the rows that can match.
    rows: RecordBatch,
    times: Vec<EventTime>,
    /// Each row's reach ([`Timing::reach`]).
    reaches: Vec<EventTime>,
    matched: Vec<bool>,
}

impl IntervalJoinOperator {
    /// Whether rows of `side` that never matched are emitted padded.
    fn outer(&self, side: usize) -> bool {
        matches!(
            (self.spec.kind, side),
            (JoinKind::Left | JoinKind::Full, 0) | (JoinKind::Right | JoinKind::Full, 1)
        )
    }

    fn side_spec(&self, side: usize) -> &IntervalSide {
        if side == 0 {
            &self.spec.left
        } else {
            &self.spec.right
        }
    }

    /// The rows of a batch that can match (non-NULL keys and time), with their times and
    /// flags; the others are emitted padded by an outer side.
    fn arrivals(&self, side: usize, batch: &RecordBatch, out: &mut Output) -> Result<Arrivals> {
        let layout = &self.sides[side];
        let keyed = layout.keyed.of(batch)?;
        let n = keyed.num_rows();
        let mut columns = keyed.columns().to_vec();
        columns.push(Arc::new(BooleanArray::from(vec![false; n])));
        let rows = RecordBatch::try_new_with_options(
            Arc::clone(&layout.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let spec = self.side_spec(side);
        let times = timestamps_as_nanos(batch.column(spec.time))?;
        let untils = match spec.until {
            Some(u) => Some(timestamps_as_nanos(batch.column(u.column))?),
            None => None,
        };
        let keys_ok = keys_valid(layout.keys(&rows));
        // A row without a time, a key or a reach (its bound column NULL) matches nothing.
        let mut reaches = Vec::with_capacity(n);
        let mut usable = Vec::with_capacity(n);
        for i in 0..n {
            let until = match (&untils, spec.until) {
                (Some(u), Some(Until { offset, .. })) => {
                    u.is_valid(i).then(|| u.value(i).saturating_add(offset))
                }
                _ => None,
            };
            // A NULL bound column: the condition is never true for the row.
            let bounded = untils.is_none() || until.is_some();
            let reach = (times.is_valid(i) && bounded)
                .then(|| self.timing.reach(side, times.value(i), until))
                .flatten();
            match reach {
                Some(r) if keys_ok.as_ref().is_none_or(|k| k[i]) => {
                    reaches.push(r);
                    usable.push(true);
                }
                _ => usable.push(false),
            }
        }
        if usable.iter().all(|&u| u) {
            return Ok(Arrivals {
                side,
                rows,
                times: times.values().to_vec(),
                reaches,
                matched: vec![false; n],
            });
        }
        let mask = BooleanArray::from(usable);
        if self.outer(side) {
            let never = filter_record_batch(&rows, &datafusion::arrow::compute::not(&mask)?)?;
            out.emit(self.padded(side, &never)?);
        }
        let rows = filter_record_batch(&rows, &mask)?;
        let times = filter(&times, &mask)?;
        let times = timestamps_as_nanos(&times)?.values().to_vec();
        Ok(Arrivals {
            matched: vec![false; rows.num_rows()],
            side,
            rows,
            times,
            reaches,
        })
    }

    /// Candidate pairs of `left` and `right` rows (stored layouts): equal keys, or every pair
    /// without keys.
    fn key_pairs(
        &self,
        left: &RecordBatch,
        right: &RecordBatch,
    ) -> Result<(UInt32Array, UInt32Array)> {
        let Some(converter) = &self.converter else {
            let (ln, rn) = (left.num_rows() as u32, right.num_rows() as u32);
            let li: UInt32Array = (0..ln).flat_map(|i| (0..rn).map(move |_| i)).collect();
            let ri: UInt32Array = (0..ln).flat_map(|_| 0..rn).collect();
            return Ok((li, ri));
        };
        equal_key_pairs(
            converter,
            self.sides[0].keys(left),
            self.sides[1].keys(right),
        )
    }

    /// Pairs meeting the ON condition, emitted; their indices returned.
    fn join_pairs(
        &self,
        left: &RecordBatch,
        right: &RecordBatch,
        out: &mut Output,
    ) -> Result<(UInt32Array, UInt32Array)> {
        let (li, ri) = self.key_pairs(left, right)?;
        if li.is_empty() {
            return Ok((li, ri));
        }
        let mut columns = Vec::new();
        for c in self.sides[0].row(left) {
            columns.push(take(c.as_ref(), &li, None)?);
        }
        for c in self.sides[1].row(right) {
            columns.push(take(c.as_ref(), &ri, None)?);
        }
        let pairs = RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.joined_schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(li.len())),
        )?;
        let Some(condition) = &self.spec.filter else {
            out.emit(pairs);
            return Ok((li, ri));
        };
        let mask = condition.evaluate(&pairs)?.into_array(pairs.num_rows())?;
        let mask = mask
            .as_boolean_opt()
            .ok_or_else(|| EngineError::Internal("join condition is not boolean".into()))?;
        let mask = match mask.nulls() {
            Some(n) => BooleanArray::new(mask.values() & n.inner(), None),
            None => mask.clone(),
        };
        out.emit(filter_record_batch(&pairs, &mask)?);
        Ok((
            filter(&li, &mask)?.as_primitive().clone(),
            filter(&ri, &mask)?.as_primitive().clone(),
        ))
    }

    /// Joins the arriving rows with one stored part of the other side; returns the part with
    /// its flags updated.
    fn probe_part(
        &self,
        arrivals: &mut Arrivals,
        part: RecordBatch,
        out: &mut Output,
    ) -> Result<RecordBatch> {
        let (mine, theirs) = if arrivals.side == 0 {
            let (li, ri) = self.join_pairs(&arrivals.rows, &part, out)?;
            (li, ri)
        } else {
            let (li, ri) = self.join_pairs(&part, &arrivals.rows, out)?;
            (ri, li)
        };
        for &i in mine.values() {
            arrivals.matched[i as usize] = true;
        }
        let other = 1 - arrivals.side;
        if theirs.is_empty() || !self.outer(other) {
            return Ok(part);
        }
        let layout = &self.sides[other];
        let mut flags: Vec<bool> = layout.matched(&part)?.values().iter().collect();
        for &j in theirs.values() {
            flags[j as usize] = true;
        }
        layout.with_matched(&part, BooleanArray::from(flags))
    }

    /// Probes the other side's buckets that can hold matches of the arriving rows.
    fn probe(&mut self, arrivals: &mut Arrivals, out: &mut Output) -> Result<()> {
        let (Some(&from), Some(&to)) = (arrivals.times.iter().min(), arrivals.times.iter().max())
        else {
            return Ok(());
        };
        let other = 1 - arrivals.side;
        let (lo, hi) = self.timing.candidates(arrivals.side, from, to);
        let farthest = arrivals.reaches.iter().copied().max().unwrap_or(to);
        let (first, last) = self.timing.partner_times(arrivals.side, from, to, farthest);
        for end in self.buckets.ends_between(other, lo, hi) {
            let span = self.spans.as_ref().and_then(|s| s[other].get(&end));
            if span.is_some_and(|&(min, max)| max < first || min > last) {
                continue;
            }
            if !self.outer(other) && !self.buckets.in_memory(other, end) {
                // A spilled bucket whose flags do not change is read where it is: taking it
                // back into memory would spill it again (probed by every batch, it would be
                // rewritten each time).
                let schema = &self.sides[other].schema;
                let mut parts = Vec::new();
                self.buckets.for_each_part(
                    other,
                    end,
                    |b| b.to_part(schema),
                    |p| {
                        parts.push(p);
                        Ok(())
                    },
                )?;
                for part in parts {
                    self.probe_part(arrivals, part, out)?;
                }
                continue;
            }
            let taken = self.buckets.take(other, end)?;
            let mut parts = taken
                .memory
                .map(BufferedRows::into_batches)
                .unwrap_or_default();
            parts.extend(taken.parts);
            if parts.len() > MAX_PARTS {
                parts = vec![concat_batches(&self.sides[other].schema, &parts)?];
            }
            let mut back = Vec::with_capacity(parts.len());
            for part in parts {
                back.push(self.probe_part(arrivals, part, out)?);
            }
            self.buckets.push(other, end, back)?;
        }
        Ok(())
    }

    /// Buffers the arriving rows in their buckets; rows whose bucket has already expired
    /// are done (emitted padded if unmatched on an outer side).
    fn buffer(&mut self, arrivals: Arrivals, out: &mut Output) -> Result<()> {
        let side = arrivals.side;
        let layout = &self.sides[side];
        let rows = layout.with_matched(&arrivals.rows, BooleanArray::from(arrivals.matched))?;
        // Granularities of reaches from a column are measured from the watermark, or from
        // the row's time before the first.
        let watermark = self.buckets.watermark();
        let ends: Vec<EventTime> = arrivals
            .reaches
            .iter()
            .zip(&arrivals.times)
            .map(|(&reach, &t)| {
                let from = if watermark == WATERMARK_MIN {
                    t
                } else {
                    watermark
                };
                self.timing.bucket(side, reach, from)
            })
            .collect();
        if let Some(spans) = &mut self.spans {
            // Rows of one bucket mostly come in runs: the map is updated once per run.
            let spans = &mut spans[side];
            let mut widen = |(end, lo, hi): (EventTime, EventTime, EventTime)| {
                let span = spans.entry(end).or_insert((lo, hi));
                *span = (span.0.min(lo), span.1.max(hi));
            };
            let mut run: Option<(EventTime, EventTime, EventTime)> = None;
            for (&end, &t) in ends.iter().zip(&arrivals.times) {
                match &mut run {
                    _ if end <= watermark => {}
                    Some((e, lo, hi)) if *e == end => (*lo, *hi) = ((*lo).min(t), (*hi).max(t)),
                    _ => {
                        if let Some(done) = run.replace((end, t, t)) {
                            widen(done);
                        }
                    }
                }
            }
            if let Some(done) = run {
                widen(done);
            }
        }
        for run in split_by_window(&ends) {
            let held = run.owned_batch(&rows)?;
            if run.end <= self.buckets.watermark() {
                self.expire(side, &held, out)?;
                continue;
            }
            self.buckets.push(side, run.end, [held])?;
        }
        Ok(())
    }

    /// Rows of `side` that can match nothing more: an outer side emits those never matched.
    fn expire(&self, side: usize, part: &RecordBatch, out: &mut Output) -> Result<()> {
        if !self.outer(side) {
            return Ok(());
        }
        let matched = self.sides[side].matched(part)?;
        let unmatched = datafusion::arrow::compute::not(&matched)?;
        out.emit(self.padded(side, &filter_record_batch(part, &unmatched)?)?);
        Ok(())
    }

    /// Rows of `side` (stored layout), the other side's columns NULL.
    fn padded(&self, side: usize, part: &RecordBatch) -> Result<RecordBatch> {
        let n = part.num_rows();
        let own = self.sides[side].row(part);
        let schema = &self.spec.joined_schema;
        let left_columns = self.sides[0].columns;
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(at, field)| match (side, at < left_columns) {
                (0, true) => Arc::clone(&own[at]),
                (1, false) => Arc::clone(&own[at - left_columns]),
                _ => new_null_array(field.data_type(), n),
            })
            .collect();
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let sides = &self.sides;
        self.buckets
            .enforce_budget(|side, rows| rows.into_part(&sides[side].schema))
    }
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> &str {
        "IntervalJoin"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input > 1 {
            return Err(EngineError::Internal(format!(
                "interval join has two inputs, got a batch on input {input}"
            )));
        }
        let mut arrivals = self.arrivals(input, &batch, out)?;
        if arrivals.rows.num_rows() == 0 {
            return Ok(());
        }
        self.probe(&mut arrivals, out)?;
        self.buffer(arrivals, out)?;
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        for end in self.buckets.advance(watermark) {
            if let Some(spans) = &mut self.spans {
                spans.iter_mut().for_each(|s| _ = s.remove(&end));
            }
            for side in [0, 1] {
                let taken = self.buckets.take(side, end)?;
                let mut parts = taken
                    .memory
                    .map(BufferedRows::into_batches)
                    .unwrap_or_default();
                parts.extend(taken.parts);
                for part in &parts {
                    self.expire(side, part, out)?;
                }
            }
        }
        let highest = self.buckets.watermark();
        Ok(match self.timing.holdback() {
            _ if highest == WATERMARK_MAX => highest,
            Some(holdback) => highest.saturating_sub(holdback),
            None => WATERMARK_MIN,
        })
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let sides = &self.sides;
        self.buckets
            .snapshot(epoch, |side, rows| rows.into_part(&sides[side].schema))?;
        Ok(None)
    }
}
