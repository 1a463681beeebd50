//! `WindowJoinOperator`: joins two windowed streams on their window and equality keys.
//!
//! - input 0 (left) and input 1 (right): rows carrying their window (`window_start` or
//!   `window_end`), routed by the keyed exchange on the equality keys, so rows that can match
//!   meet in one instance.
//! - state: for each side and each open window (keyed by its end), the rows that arrived, as
//!   batches of `keys ++ row` (the evaluated equality keys first, so a stored part can be
//!   re-routed by them after a rescale).
//! - on watermark W (the minimum of both inputs, taken by the runtime): every window with
//!   `end <= W` is joined (hash join: right side built, left side probed, the residual ON
//!   condition applied to candidate pairs), its rows emitted in order of `end`, and both
//!   sides' state of that window dropped. Both inputs are complete below W, so a window joins
//!   exactly once: an aggregate upstream emits a window's rows before it forwards the
//!   watermark that closes it.
//! - join types: INNER, LEFT / RIGHT / FULL (rows without a match padded with NULLs), and
//!   LEFT / RIGHT SEMI and ANTI (from IN / EXISTS). Keys holding NULL never match.
//! - without a window (both inputs bounded) there is one window that fires when the
//!   watermark reaches +infinity, i.e. at end of input.
//! - memory: buffered rows live in memory up to the task's budget; past it, the windows that
//!   fire last are written to the task's store (one lane per side of [`OpenWindows`]) and
//!   read back when they fire.
//! - at barrier: every buffered window is written to the store, so the store holds the whole
//!   state of the epoch; the runtime then checkpoints it.
//! - restore: the stored parts are the state; with a changed parallelism only the rows whose
//!   keys route to this instance are kept.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, filter, filter_record_batch, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output, MAX_BATCH_ROWS};
use crate::operators::windowed::{
    buckets_for, for_each_key_pair, hash_buckets, BufferedRows, KeyedRows, LaneState, OpenWindows,
    PartRoute, WindowColumn,
};

/// Which rows a join emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    LeftSemi,
    LeftAnti,
    RightSemi,
    RightAnti,
}

impl JoinKind {
    /// Every kind (for tests that run them all).
    #[cfg(test)]
    pub(crate) const ALL: [JoinKind; 8] = [
        JoinKind::Inner,
        JoinKind::Left,
        JoinKind::Right,
        JoinKind::Full,
        JoinKind::LeftSemi,
        JoinKind::LeftAnti,
        JoinKind::RightSemi,
        JoinKind::RightAnti,
    ];

    /// Output holds both sides' columns (otherwise only the semi / anti side's).
    pub fn pairs(self) -> bool {
        matches!(
            self,
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full
        )
    }
}

/// One input of a window join.
#[derive(Debug, Clone)]
pub struct JoinSide {
    pub schema: SchemaRef,
    /// Equality keys, evaluated on this side; the i-th key of each side are compared.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The column holding each row's window; `None`: one window over the bounded input.
    pub window: Option<WindowColumn>,
}

/// The plan node of a window join.
#[derive(Debug, Clone)]
pub struct WindowJoinSpec {
    pub kind: JoinKind,
    pub left: JoinSide,
    pub right: JoinSide,
    /// The ON condition beyond the equality keys, over `joined_schema`.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns then right columns (nullable where an outer join pads).
    pub joined_schema: SchemaRef,
    pub output_schema: SchemaRef,
    pub description: String,
}

impl WindowJoinSpec {
    /// How equality keys compare: one row format for both sides' keys.
    fn key_converter(&self) -> Result<RowConverter> {
        if self.left.keys.len() != self.right.keys.len() || self.left.keys.is_empty() {
            return Err(EngineError::Internal(format!(
                "window join needs the same number of keys on both sides, at least one (got {} and {})",
                self.left.keys.len(),
                self.right.keys.len()
            )));
        }
        let mut sort_fields = Vec::new();
        for (l, r) in self.left.keys.iter().zip(&self.right.keys) {
            let (lt, rt) = (
                l.data_type(&self.left.schema)?,
                r.data_type(&self.right.schema)?,
            );
            if lt != rt {
                return Err(EngineError::Internal(format!(
                    "window join key types differ: {l} is {lt}, {r} is {rt}"
                )));
            }
            sort_fields.push(SortField::new(lt));
        }
        Ok(RowConverter::new(sort_fields)?)
    }
}

impl OperatorFactory for WindowJoinSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let converter = self.key_converter()?;
        let parts = [
            KeyedRows::new(&self.left.keys, &self.left.schema)?,
            KeyedRows::new(&self.right.keys, &self.right.schema)?,
        ];
        let lanes = parts
            .iter()
            .enumerate()
            .map(|(tag, part)| LaneState {
                handle: task.state.sub(tag as u8),
                route: PartRoute::Keys(part.key_count()),
                part_schema: Arc::clone(part.schema()),
            })
            .collect();
        Ok(Box::new(WindowJoinOperator {
            spec: self.clone(),
            converter,
            parts,
            windows: OpenWindows::open(lanes, task.state.memory_budget(), task.restored_epoch)?,
            metrics: Arc::clone(&task.metrics),
        }))
    }
}

/// A running window join.
pub struct WindowJoinOperator {
    spec: WindowJoinSpec,
    converter: RowConverter,
    /// Layout of each side's parts: `keys ++ row`.
    parts: [KeyedRows; 2],
    /// Each side's buffered rows by window (lane 0 left, lane 1 right).
    windows: OpenWindows<BufferedRows>,
    metrics: Arc<JobMetrics>,
}

/// Rows of `columns` at `idx`, as a batch of `schema` (whose layout they have).
fn take_rows(schema: &SchemaRef, columns: &[ArrayRef], idx: &UInt32Array) -> Result<RecordBatch> {
    let columns = columns
        .iter()
        .map(|c| take(c.as_ref(), idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(idx.len()));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &options,
    )?)
}

/// The rows whose flag is `want`.
fn select(flags: &[bool], want: bool) -> UInt32Array {
    flags
        .iter()
        .enumerate()
        .filter(|(_, &f)| f == want)
        .map(|(i, _)| i as u32)
        .collect()
}

/// One window's rows of both sides (`row` columns only, keys stripped), being joined.
struct WindowRows<'a> {
    spec: &'a WindowJoinSpec,
    left: Vec<ArrayRef>,
    right: Vec<ArrayRef>,
}

impl WindowRows<'_> {
    /// Pairs of rows, left columns then right columns, in the joined layout.
    fn pairs(&self, li: &UInt32Array, ri: &UInt32Array) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.left.len() + self.right.len());
        for c in &self.left {
            columns.push(take(c.as_ref(), li, None)?);
        }
        for c in &self.right {
            columns.push(take(c.as_ref(), ri, None)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(li.len()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.joined_schema),
            columns,
            &options,
        )?)
    }

    /// Keeps the candidate pairs that meet the residual ON condition (NULL counts as false):
    /// the pairs as rows, and the kept indices.
    fn apply_condition(
        &self,
        condition: &Arc<dyn PhysicalExpr>,
        li: &UInt32Array,
        ri: &UInt32Array,
    ) -> Result<(RecordBatch, UInt32Array, UInt32Array)> {
        let candidates = self.pairs(li, ri)?;
        let mask = condition
            .evaluate(&candidates)?
            .into_array(candidates.num_rows())?;
        let mask = mask
            .as_boolean_opt()
            .ok_or_else(|| EngineError::Internal("join condition is not boolean".into()))?;
        let mask = match mask.nulls() {
            Some(n) => BooleanArray::new(mask.values() & n.inner(), None),
            None => mask.clone(),
        };
        Ok((
            filter_record_batch(&candidates, &mask)?,
            filter(li, &mask)?.as_primitive().clone(),
            filter(ri, &mask)?.as_primitive().clone(),
        ))
    }

    /// Rows of one side at `idx`, the other side's columns NULL (outer joins).
    fn padded(&self, idx: &UInt32Array, left_rows: bool) -> Result<RecordBatch> {
        let output = &self.spec.output_schema;
        let n = idx.len();
        let lcount = self.left.len();
        let mut columns = Vec::with_capacity(output.fields().len());
        for (at, field) in output.fields().iter().enumerate() {
            let from_left = at < lcount;
            if from_left == left_rows {
                let c = if left_rows {
                    &self.left[at]
                } else {
                    &self.right[at - lcount]
                };
                columns.push(take(c.as_ref(), idx, None)?);
            } else {
                columns.push(new_null_array(field.data_type(), n));
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(output),
            columns,
            &options,
        )?)
    }

    /// Emits the matching pairs `li`, `ri` of one chunk if the join kind outputs pairs (`pairs`:
    /// the pairs as rows, when the ON condition made them), and marks their rows matched.
    fn emit_pairs(
        &self,
        li: &UInt32Array,
        ri: &UInt32Array,
        pairs: Option<RecordBatch>,
        matched: (&mut [bool], &mut [bool]),
        out: &mut Output,
    ) -> Result<()> {
        for &i in li.values() {
            matched.0[i as usize] = true;
        }
        for &j in ri.values() {
            matched.1[j as usize] = true;
        }
        if self.spec.kind.pairs() && !li.is_empty() {
            let batch = match pairs {
                Some(p) => p,
                None => self.pairs(li, ri)?,
            };
            // The joined layout is the output layout; only the schema object may differ.
            out.emit(RecordBatch::try_new_with_options(
                Arc::clone(&self.spec.output_schema),
                batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )?);
        }
        Ok(())
    }

    /// After every pair: what the join kind asks for of the rows that matched (`matched`) or
    /// did not: padded unmatched rows of an outer join, the rows of a semi or anti join.
    fn emit_unmatched(&self, lm: &[bool], rm: &[bool], out: &mut Output) -> Result<()> {
        let kind = self.spec.kind;
        let output = &self.spec.output_schema;
        let (ln, rn) = (lm.len(), rm.len());
        if matches!(kind, JoinKind::Left | JoinKind::Full) && ln > 0 {
            out.emit(self.padded(&select(lm, false), true)?);
        }
        if matches!(kind, JoinKind::Right | JoinKind::Full) && rn > 0 {
            out.emit(self.padded(&select(rm, false), false)?);
        }
        match kind {
            JoinKind::LeftSemi | JoinKind::LeftAnti if ln > 0 => {
                let idx = select(lm, kind == JoinKind::LeftSemi);
                out.emit(take_rows(output, &self.left, &idx)?);
            }
            JoinKind::RightSemi | JoinKind::RightAnti if rn > 0 => {
                let idx = select(rm, kind == JoinKind::RightSemi);
                out.emit(take_rows(output, &self.right, &idx)?);
            }
            _ => {}
        }
        Ok(())
    }
}

impl WindowJoinOperator {
    fn side_spec(&self, input: usize) -> &JoinSide {
        if input == 0 {
            &self.spec.left
        } else {
            &self.spec.right
        }
    }

    /// Every buffered and stored part of one side's window ending at `end`, removed: batches
    /// of `keys ++ row`.
    fn take_parts(&mut self, side: usize, end: EventTime) -> Result<Vec<RecordBatch>> {
        let taken = self.windows.take(side, end)?;
        let mut parts = taken
            .memory
            .map(BufferedRows::into_batches)
            .unwrap_or_default();
        parts.extend(taken.parts);
        Ok(parts)
    }

    /// Joins a window's left parts with its right rows. When every left row's output is
    /// decided by the right rows alone (an inner, left semi or left anti join) and the right
    /// side is small beside the left one, each left part is joined on its own: the left
    /// rows are not copied into one batch first (Nexmark q7: a window's bids against its one
    /// maximum, the copy the most of the join's page faults), and the pairs come out in the
    /// same order. Otherwise the parts are joined as one batch.
    fn join_parts(&self, left: &[RecordBatch], r: &RecordBatch, out: &mut Output) -> Result<()> {
        let by_part = matches!(
            self.spec.kind,
            JoinKind::Inner | JoinKind::LeftSemi | JoinKind::LeftAnti
        );
        let rows: usize = left.iter().map(RecordBatch::num_rows).sum();
        // Each part meets all the right rows: at most as much work again as the left rows.
        if by_part && left.len() > 1 && r.num_rows() * left.len() <= rows {
            for part in left {
                self.join(part, r, out)?;
            }
            return Ok(());
        }
        let l = concat_batches(self.parts[0].schema(), left)?;
        self.join(&l, r, out)
    }

    /// Joins the window ending at `end` and drops its state. When both sides hold more than
    /// the memory budget allows at once, they are spread over buckets by a hash of their keys
    /// and joined bucket by bucket (a grace hash join): rows with equal keys share a bucket.
    fn fire(&mut self, end: EventTime, out: &mut Output) -> Result<()> {
        let bytes = self.windows.window_bytes(0, end)? + self.windows.window_bytes(1, end)?;
        // Joining a bucket holds both sides, their key rows and hash table, and a batch out.
        let buckets = buckets_for(bytes, self.windows.budget(), 3);
        if buckets == 1 {
            let l = self.take_parts(0, end)?;
            let r = self.take_parts(1, end)?;
            let r = concat_batches(self.parts[1].schema(), &r)?;
            return self.join_parts(&l, &r, out);
        }
        let keys = [self.spec.left.keys.len(), self.spec.right.keys.len()];
        for (side, keys) in keys.into_iter().enumerate() {
            let schema = self.parts[side].schema();
            self.windows
                .spread(side, end, |rows| rows.into_part(schema), &mut |part| {
                    hash_buckets(part, keys, buckets)
                })?;
        }
        for bucket in 0..buckets {
            let l = self.windows.take_bucket(0, end, bucket)?;
            let r = self.windows.take_bucket(1, end, bucket)?;
            let r = concat_batches(self.parts[1].schema(), &r)?;
            self.join_parts(&l, &r, out)?;
            out.flush()?;
        }
        self.windows.drop_spread(0, end)?;
        self.windows.drop_spread(1, end)
    }

    /// Joins rows of both sides (`keys ++ row`). Pairs are made and passed on a batch at a
    /// time, so a join whose output is far larger than its inputs streams it out (and stops
    /// when the job is cancelled).
    fn join(&self, l: &RecordBatch, r: &RecordBatch, out: &mut Output) -> Result<()> {
        let (lk, rk) = (self.spec.left.keys.len(), self.spec.right.keys.len());
        let rows = WindowRows {
            spec: &self.spec,
            left: l.columns()[lk..].to_vec(),
            right: r.columns()[rk..].to_vec(),
        };
        let mut lm = vec![false; l.num_rows()];
        let mut rm = vec![false; r.num_rows()];
        for_each_key_pair(
            &self.converter,
            &l.columns()[..lk],
            &r.columns()[..rk],
            MAX_BATCH_ROWS,
            |li, ri| {
                let (pairs, li, ri) = match &self.spec.filter {
                    Some(condition) => {
                        let (p, l, r) = rows.apply_condition(condition, &li, &ri)?;
                        (Some(p), l, r)
                    }
                    None => (None, li, ri),
                };
                rows.emit_pairs(&li, &ri, pairs, (&mut lm, &mut rm), out)?;
                out.flush()
            },
        )?;
        rows.emit_unmatched(&lm, &rm, out)
    }

    /// `keys ++ row` of a batch of input `input`.
    fn buffer(&mut self, input: usize, end: EventTime, rows: RecordBatch) -> Result<()> {
        self.windows.push(input, end, [rows])
    }

    fn enforce_budget(&mut self) -> Result<()> {
        let parts = &self.parts;
        self.windows
            .enforce_budget(|side, rows| rows.into_part(parts[side].schema()))
    }
}

impl Operator for WindowJoinOperator {
    fn name(&self) -> &str {
        "WindowJoin"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, _out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if input > 1 {
            return Err(EngineError::Internal(format!(
                "window join has two inputs, got a batch on input {input}"
            )));
        }
        let part = self.parts[input].of(&batch)?;
        let Some(window) = self.side_spec(input).window else {
            self.buffer(input, WATERMARK_MAX, part)?;
            return self.enforce_budget();
        };
        let ends = window.ends(&batch)?;
        for run in self.windows.open_runs(&ends, &self.metrics) {
            // Held until the window fires: a copy, so it keeps no other window's rows alive.
            let rows = run.owned_batch(&part)?;
            self.buffer(input, run.end, rows)?;
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
        let parts = &self.parts;
        self.windows
            .snapshot(epoch, |side, rows| rows.into_part(parts[side].schema()))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::physical_expr::expressions::Column;

    use crate::operators::windowed::WindowBound;

    fn side_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
            Field::new(
                "window_end",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ),
        ]))
    }

    fn rows(k: &[Option<i64>], v: &[i64], end: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            side_schema(),
            vec![
                Arc::new(Int64Array::from(k.to_vec())),
                Arc::new(Int64Array::from(v.to_vec())),
                Arc::new(TimestampNanosecondArray::from(end.to_vec())),
            ],
        )
        .unwrap()
    }

    fn spec(kind: JoinKind) -> WindowJoinSpec {
        let side = JoinSide {
            schema: side_schema(),
            keys: vec![
                Arc::new(Column::new("k", 0)),
                Arc::new(Column::new("window_end", 2)),
            ],
            window: Some(WindowColumn::new(2, WindowBound::end(5))),
        };
        let nullable = |f: &Arc<Field>| f.as_ref().clone().with_nullable(true);
        let joined: Vec<Field> = side_schema()
            .fields()
            .iter()
            .chain(side_schema().fields().iter())
            .map(nullable)
            .collect();
        let joined = Arc::new(Schema::new(joined));
        let output = if kind.pairs() {
            Arc::clone(&joined)
        } else {
            side_schema()
        };
        WindowJoinSpec {
            kind,
            left: side.clone(),
            right: side,
            filter: None,
            joined_schema: joined,
            output_schema: output,
            description: String::new(),
        }
    }

    fn task() -> TaskInfo {
        TaskInfo {
            job: "t".into(),
            stage: "join".into(),
            instance: 0,
            parallelism: 1,
            metrics: Arc::new(JobMetrics::default()),
            state: crate::state::StateHandle::in_memory(),
            restored_epoch: 0,
        }
    }

    fn run(kind: JoinKind, snapshot_between: bool) -> Vec<(Option<i64>, Option<i64>)> {
        let task = task();
        let spec = spec(kind);
        let mut op = spec.create(&task).unwrap();
        let mut out = Output::default();
        op.process_batch(
            rows(
                &[Some(1), Some(2), None, Some(1)],
                &[10, 20, 30, 11],
                &[5, 5, 5, 9],
            ),
            0,
            &mut out,
        )
        .unwrap();
        if snapshot_between {
            op.snapshot(1).unwrap();
        }
        op.process_batch(
            rows(
                &[Some(1), Some(1), Some(3), None],
                &[100, 101, 300, 400],
                &[5, 5, 5, 5],
            ),
            1,
            &mut out,
        )
        .unwrap();
        assert!(out.take().is_empty());
        op.on_watermark(5, &mut out).unwrap();
        let mut got = Vec::new();
        for b in out.take() {
            let (lv, rv) = if kind.pairs() {
                (b.column(1), b.column(4))
            } else {
                (b.column(1), b.column(1))
            };
            let lv = lv.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            let rv = rv.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for i in 0..b.num_rows() {
                let l = (!lv.is_null(i)).then(|| lv.value(i));
                let r = (!rv.is_null(i)).then(|| rv.value(i));
                got.push(if kind.pairs() { (l, r) } else { (l, None) });
            }
        }
        got.sort();
        got
    }

    #[test]
    fn join_types_on_one_window() {
        for snapshot in [false, true] {
            assert_eq!(
                run(JoinKind::Inner, snapshot),
                vec![(Some(10), Some(100)), (Some(10), Some(101))]
            );
            assert_eq!(
                run(JoinKind::Left, snapshot),
                vec![
                    (Some(10), Some(100)),
                    (Some(10), Some(101)),
                    (Some(20), None),
                    (Some(30), None)
                ]
            );
            assert_eq!(
                run(JoinKind::Right, snapshot),
                vec![
                    (None, Some(300)),
                    (None, Some(400)),
                    (Some(10), Some(100)),
                    (Some(10), Some(101))
                ]
            );
            assert_eq!(run(JoinKind::Full, snapshot).len(), 6);
            assert_eq!(run(JoinKind::LeftSemi, snapshot), vec![(Some(10), None)]);
            assert_eq!(
                run(JoinKind::LeftAnti, snapshot),
                vec![(Some(20), None), (Some(30), None)]
            );
            assert_eq!(
                run(JoinKind::RightAnti, snapshot),
                vec![(Some(300), None), (Some(400), None)]
            );
        }
    }

    /// The output of `kind` for `left` batches (a snapshot after every `snapshot_every`
    /// of them) and one `right` batch, all in the window ending at 5, in output order.
    fn run_batches(
        kind: JoinKind,
        left: &[RecordBatch],
        right: RecordBatch,
        snapshot_every: usize,
    ) -> Vec<(Option<i64>, Option<i64>)> {
        let task = task();
        let mut op = spec(kind).create(&task).unwrap();
        let mut out = Output::default();
        for (i, b) in left.iter().enumerate() {
            op.process_batch(b.clone(), 0, &mut out).unwrap();
            if (i + 1) % snapshot_every == 0 {
                op.snapshot(i as u64 + 1).unwrap();
            }
        }
        op.process_batch(right, 1, &mut out).unwrap();
        op.on_watermark(5, &mut out).unwrap();
        let int = |b: &RecordBatch, c: usize, i: usize| {
            let a = b
                .column(c)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            (!a.is_null(i)).then(|| a.value(i))
        };
        let mut got = Vec::new();
        for b in out.take() {
            for i in 0..b.num_rows() {
                got.push(if kind.pairs() {
                    (int(&b, 1, i), int(&b, 4, i))
                } else {
                    (int(&b, 1, i), None)
                });
            }
        }
        got
    }

    #[test]
    fn a_window_of_many_left_parts_joins_as_one_batch_would() {
        // 40 batches of 25 rows, keys 0..9 (NULL every 13th row), against 4 right rows (one
        // key twice, one no left row has).
        let left: Vec<RecordBatch> = (0..40i64)
            .map(|b| {
                let ids: Vec<i64> = (0..25).map(|i| b * 25 + i).collect();
                let keys: Vec<Option<i64>> = ids
                    .iter()
                    .map(|&v| (v % 13 != 0).then_some(v % 10))
                    .collect();
                rows(&keys, &ids, &[5; 25])
            })
            .collect();
        let whole = concat_batches(&side_schema(), &left).unwrap();
        let right = || {
            rows(
                &[Some(3), Some(7), Some(3), Some(11)],
                &[-1, -2, -3, -4],
                &[5, 5, 5, 5],
            )
        };
        for kind in JoinKind::ALL {
            let one = run_batches(kind, std::slice::from_ref(&whole), right(), usize::MAX);
            assert!(!one.is_empty(), "{kind:?}");
            for snapshot_every in [usize::MAX, 7] {
                let mut parts = run_batches(kind, &left, right(), snapshot_every);
                let mut expected = one.clone();
                if !matches!(
                    kind,
                    JoinKind::Inner | JoinKind::LeftSemi | JoinKind::LeftAnti
                ) {
                    // Joined as one batch either way; only the order may differ.
                    parts.sort();
                    expected.sort();
                }
                assert_eq!(
                    parts, expected,
                    "{kind:?}, snapshots every {snapshot_every}"
                );
            }
        }
    }
}
