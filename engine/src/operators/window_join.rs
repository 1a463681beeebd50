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
//!   fire last are written to the task's store ([`WindowStore`], one per side) and read back
//!   when they fire.
//! - at barrier: every buffered window is written to the store, so the store holds the whole
//!   state of the epoch; the runtime then checkpoints it.
//! - restore: the stored parts are the state; with a changed parallelism only the rows whose
//!   keys route to this instance are kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use ahash::AHashMap;
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, UInt32Array, UInt32Builder,
};
use datafusion::arrow::compute::{concat_batches, filter, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output};
use crate::operators::window_state::{PartRoute, WindowStore};

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
    /// Output holds both sides' columns (otherwise only the semi / anti side's).
    fn pairs(self) -> bool {
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
    /// The column holding each row's window and what to add to get its end (0 for
    /// `window_end`, the size for `window_start`); `None`: one window over the bounded input.
    pub window: Option<(usize, i64)>,
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

impl OperatorFactory for WindowJoinSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
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
        let sides = [
            SideState::open(&self.left, task, 0)?,
            SideState::open(&self.right, task, 1)?,
        ];
        Ok(Box::new(WindowJoinOperator {
            spec: self.clone(),
            converter: RowConverter::new(sort_fields)?,
            sides,
            watermark: i64::MIN,
            metrics: Arc::clone(&task.metrics),
            budget: task.state.memory_budget(),
        }))
    }
}

/// The buffered rows of one side.
struct SideState {
    /// `keys ++ row`: the layout of a buffered or stored part.
    part_schema: SchemaRef,
    keys: usize,
    memory: BTreeMap<EventTime, Vec<RecordBatch>>,
    bytes: usize,
    store: WindowStore,
}

impl SideState {
    fn open(side: &JoinSide, task: &TaskInfo, tag: u8) -> Result<Self> {
        let mut fields = Vec::with_capacity(side.keys.len() + side.schema.fields().len());
        for (i, k) in side.keys.iter().enumerate() {
            fields.push(Field::new(
                format!("k{i}"),
                k.data_type(&side.schema)?,
                true,
            ));
        }
        fields.extend(side.schema.fields().iter().map(|f| f.as_ref().clone()));
        Ok(Self {
            part_schema: Arc::new(Schema::new(fields)),
            keys: side.keys.len(),
            memory: BTreeMap::new(),
            bytes: 0,
            store: WindowStore::open(
                task.state.sub(tag),
                PartRoute::Keys(side.keys.len()),
                task.restored_epoch,
            )?,
        })
    }

    fn add(&mut self, end: EventTime, part: RecordBatch) {
        self.bytes += part.get_array_memory_size();
        self.memory.entry(end).or_default().push(part);
    }

    /// Every buffered and stored part of the window ending at `end`, removed.
    fn take(&mut self, end: EventTime) -> Result<Vec<RecordBatch>> {
        let mut parts = self.memory.remove(&end).unwrap_or_default();
        for p in &parts {
            self.bytes = self.bytes.saturating_sub(p.get_array_memory_size());
        }
        if self.store.has(end) {
            parts.extend(self.store.take(end, &self.part_schema)?);
        }
        Ok(parts)
    }

    /// Writes the windows in memory ending at or after `from` to the store.
    fn spill_from(&mut self, from: EventTime) -> Result<()> {
        let moved = self.memory.split_off(&from);
        let mut parts = Vec::new();
        for (end, batches) in moved {
            for b in batches {
                self.bytes = self.bytes.saturating_sub(b.get_array_memory_size());
                parts.push((end, b));
            }
        }
        self.store.write_parts(parts)
    }
}

/// A running window join.
pub struct WindowJoinOperator {
    spec: WindowJoinSpec,
    converter: RowConverter,
    sides: [SideState; 2],
    watermark: EventTime,
    metrics: Arc<JobMetrics>,
    budget: usize,
}

/// Splits rows by window end, keeping runs in order of first appearance.
fn split_by_end(ends: &[EventTime]) -> Vec<(EventTime, Vec<u32>)> {
    let mut runs: Vec<(EventTime, Vec<u32>)> = Vec::new();
    let mut last = 0usize;
    for (row, &end) in ends.iter().enumerate() {
        if runs.get(last).is_none_or(|(e, _)| *e != end) {
            last = match runs.iter().position(|(e, _)| *e == end) {
                Some(i) => i,
                None => {
                    runs.push((end, Vec::new()));
                    runs.len() - 1
                }
            };
        }
        runs[last].1.push(row as u32);
    }
    runs
}

/// Whether every key column of `row` is non-null.
fn keys_valid(keys: &[ArrayRef]) -> Option<Vec<bool>> {
    let nulls: Vec<_> = keys.iter().filter_map(|k| k.logical_nulls()).collect();
    if nulls.is_empty() {
        return None;
    }
    let n = keys.first().map_or(0, |k| k.len());
    Some(
        (0..n)
            .map(|i| nulls.iter().all(|b| b.is_valid(i)))
            .collect(),
    )
}

impl WindowJoinOperator {
    fn side_spec(&self, input: usize) -> &JoinSide {
        if input == 0 {
            &self.spec.left
        } else {
            &self.spec.right
        }
    }

    /// The rows of one window joined; `parts` hold `keys ++ row` per side.
    fn join_window(
        &self,
        left: Vec<RecordBatch>,
        right: Vec<RecordBatch>,
        out: &mut Output,
    ) -> Result<()> {
        let kind = self.spec.kind;
        let [ls, rs] = &self.sides;
        let (lk, rk) = (ls.keys, rs.keys);
        let l = concat_batches(&ls.part_schema, &left)?;
        let r = concat_batches(&rs.part_schema, &right)?;
        let (ln, rn) = (l.num_rows(), r.num_rows());
        // Pairs with equal keys.
        let (mut li, mut ri) = (UInt32Builder::new(), UInt32Builder::new());
        if ln > 0 && rn > 0 {
            let rkeys = &r.columns()[..rk];
            let lkeys = &l.columns()[..lk];
            let rrows = self.converter.convert_columns(rkeys)?;
            let lrows = self.converter.convert_columns(lkeys)?;
            let rvalid = keys_valid(rkeys);
            let lvalid = keys_valid(lkeys);
            // Chained hash table: head[key] = last row, next[row] = previous row with the key.
            const NONE: u32 = u32::MAX;
            let mut head: AHashMap<&[u8], u32> = AHashMap::with_capacity(rn);
            let mut next = vec![NONE; rn];
            for j in 0..rn {
                if rvalid.as_ref().is_some_and(|v| !v[j]) {
                    continue;
                }
                let slot = head.entry(rrows.row(j).data()).or_insert(NONE);
                next[j] = *slot;
                *slot = j as u32;
            }
            for i in 0..ln {
                if lvalid.as_ref().is_some_and(|v| !v[i]) {
                    continue;
                }
                let mut j = head.get(lrows.row(i).data()).copied().unwrap_or(NONE);
                while j != NONE {
                    li.append_value(i as u32);
                    ri.append_value(j);
                    j = next[j as usize];
                }
            }
        }
        let (mut li, mut ri) = (li.finish(), ri.finish());
        let lrow: Vec<ArrayRef> = l.columns()[lk..].to_vec();
        let rrow: Vec<ArrayRef> = r.columns()[rk..].to_vec();
        let joined = |li: &UInt32Array, ri: &UInt32Array| -> Result<RecordBatch> {
            let mut columns = Vec::with_capacity(lrow.len() + rrow.len());
            for c in &lrow {
                columns.push(take(c.as_ref(), li, None)?);
            }
            for c in &rrow {
                columns.push(take(c.as_ref(), ri, None)?);
            }
            let options = RecordBatchOptions::new().with_row_count(Some(li.len()));
            Ok(RecordBatch::try_new_with_options(
                Arc::clone(&self.spec.joined_schema),
                columns,
                &options,
            )?)
        };
        let mut pairs = None;
        if let Some(condition) = &self.spec.filter {
            if !li.is_empty() {
                let candidates = joined(&li, &ri)?;
                let mask = condition
                    .evaluate(&candidates)?
                    .into_array(candidates.num_rows())?;
                let mask = mask
                    .as_boolean_opt()
                    .ok_or_else(|| EngineError::Internal("join condition is not boolean".into()))?;
                // NULL counts as false.
                let mask = match mask.nulls() {
                    Some(n) => BooleanArray::new(mask.values() & n.inner(), None),
                    None => mask.clone(),
                };
                li = filter(&li, &mask)?.as_primitive().clone();
                ri = filter(&ri, &mask)?.as_primitive().clone();
                pairs = Some(datafusion::arrow::compute::filter_record_batch(
                    &candidates,
                    &mask,
                )?);
            }
        }
        let matched = |n: usize, idx: &UInt32Array| {
            let mut m = vec![false; n];
            for &i in idx.values() {
                m[i as usize] = true;
            }
            m
        };
        let select = |flags: &[bool], want: bool| -> UInt32Array {
            flags
                .iter()
                .enumerate()
                .filter(|(_, &f)| f == want)
                .map(|(i, _)| i as u32)
                .collect()
        };
        let output = Arc::clone(&self.spec.output_schema);
        let padded =
            |rows: &[ArrayRef], idx: &UInt32Array, left_rows: bool| -> Result<RecordBatch> {
                let n = idx.len();
                let mut columns = Vec::with_capacity(output.fields().len());
                let (lcount, _) = (lrow.len(), rrow.len());
                for (f_at, field) in output.fields().iter().enumerate() {
                    let from_left = f_at < lcount;
                    if from_left == left_rows {
                        let c = &rows[if left_rows { f_at } else { f_at - lcount }];
                        columns.push(take(c.as_ref(), idx, None)?);
                    } else {
                        columns.push(new_null_array(field.data_type(), n));
                    }
                }
                let options = RecordBatchOptions::new().with_row_count(Some(n));
                Ok(RecordBatch::try_new_with_options(
                    Arc::clone(&output),
                    columns,
                    &options,
                )?)
            };
        let only = |rows: &[ArrayRef], idx: &UInt32Array| -> Result<RecordBatch> {
            let columns = rows
                .iter()
                .map(|c| take(c.as_ref(), idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(idx.len()));
            Ok(RecordBatch::try_new_with_options(
                Arc::clone(&output),
                columns,
                &options,
            )?)
        };
        if kind.pairs() {
            let batch = match pairs {
                Some(p) => p,
                None => joined(&li, &ri)?,
            };
            // The joined layout is the output layout; only the schema object may differ.
            out.emit(RecordBatch::try_new_with_options(
                Arc::clone(&output),
                batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )?);
        }
        if matches!(kind, JoinKind::Left | JoinKind::Full) && ln > 0 {
            let unmatched = select(&matched(ln, &li), false);
            out.emit(padded(&lrow, &unmatched, true)?);
        }
        if matches!(kind, JoinKind::Right | JoinKind::Full) && rn > 0 {
            let unmatched = select(&matched(rn, &ri), false);
            out.emit(padded(&rrow, &unmatched, false)?);
        }
        match kind {
            JoinKind::LeftSemi | JoinKind::LeftAnti if ln > 0 => {
                let idx = select(&matched(ln, &li), kind == JoinKind::LeftSemi);
                out.emit(only(&lrow, &idx)?);
            }
            JoinKind::RightSemi | JoinKind::RightAnti if rn > 0 => {
                let idx = select(&matched(rn, &ri), kind == JoinKind::RightSemi);
                out.emit(only(&rrow, &idx)?);
            }
            _ => {}
        }
        Ok(())
    }

    /// Joins the window ending at `end` and drops its state.
    fn fire(&mut self, end: EventTime, out: &mut Output) -> Result<()> {
        let left = self.sides[0].take(end)?;
        let right = self.sides[1].take(end)?;
        self.join_window(left, right, out)
    }

    /// Spills the windows that fire last when memory holds more than the budget, down to
    /// half of it.
    fn enforce_budget(&mut self) -> Result<()> {
        if self.budget == usize::MAX {
            return Ok(());
        }
        let held = self.sides[0].bytes + self.sides[1].bytes;
        if held <= self.budget {
            return Ok(());
        }
        // Window ends in memory, latest first, with their bytes.
        let mut ends: BTreeMap<EventTime, usize> = BTreeMap::new();
        for side in &self.sides {
            for (end, parts) in &side.memory {
                *ends.entry(*end).or_default() += parts
                    .iter()
                    .map(|p| p.get_array_memory_size())
                    .sum::<usize>();
            }
        }
        let mut remaining = held;
        let mut from = None;
        for (end, bytes) in ends.iter().rev() {
            if remaining <= self.budget / 2 {
                break;
            }
            remaining = remaining.saturating_sub(*bytes);
            from = Some(*end);
        }
        if let Some(from) = from {
            for side in &mut self.sides {
                side.spill_from(from)?;
            }
        }
        Ok(())
    }
}

impl Operator for WindowJoinOperator {
    fn name(&self) -> &str {
        "WindowJoin"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, _out: &mut Output) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if input > 1 {
            return Err(EngineError::Internal(format!(
                "window join has two inputs, got a batch on input {input}"
            )));
        }
        let spec = self.side_spec(input);
        let mut columns = Vec::with_capacity(spec.keys.len() + batch.num_columns());
        for k in &spec.keys {
            columns.push(k.evaluate(&batch)?.into_array(n)?);
        }
        columns.extend(batch.columns().iter().cloned());
        let part = RecordBatch::try_new_with_options(
            Arc::clone(&self.sides[input].part_schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let Some((column, shift)) = spec.window else {
            self.sides[input].add(WATERMARK_MAX, part);
            return self.enforce_budget();
        };
        let values = timestamps_as_nanos(batch.column(column))?;
        if values.null_count() > 0 {
            return Err(EngineError::Internal("window column holds NULL".into()));
        }
        let ends: Vec<EventTime> = values
            .values()
            .iter()
            .map(|v| v.saturating_add(shift))
            .collect();
        let first = ends[0];
        if ends.iter().all(|&e| e == first) {
            if first <= self.watermark {
                self.metrics.add_late_rows(n as u64);
            } else {
                self.sides[input].add(first, part);
            }
            return self.enforce_budget();
        }
        for (end, rows) in split_by_end(&ends) {
            if end <= self.watermark {
                self.metrics.add_late_rows(rows.len() as u64);
                continue;
            }
            let rows = UInt32Array::from(rows);
            let taken = datafusion::arrow::compute::take_record_batch(&part, &rows)?;
            self.sides[input].add(end, taken);
        }
        self.enforce_budget()
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        self.watermark = self.watermark.max(watermark);
        let [left, right] = &self.sides;
        let mut ready = left
            .store
            .ready_with(self.watermark, [&left.memory, &right.memory]);
        ready.extend(right.store.ready(self.watermark));
        ready.sort_unstable();
        ready.dedup();
        for end in ready {
            self.fire(end, out)?;
        }
        Ok(watermark)
    }

    fn snapshot(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        for side in &mut self.sides {
            side.spill_from(EventTime::MIN)?;
            side.store.next_epoch(epoch);
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use datafusion::physical_expr::expressions::Column;

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
            window: Some((2, 0)),
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

    fn run(kind: JoinKind, snapshot_between: bool) -> Vec<(Option<i64>, Option<i64>)> {
        let task = TaskInfo {
            job: "t".into(),
            stage: "join".into(),
            instance: 0,
            parallelism: 1,
            metrics: Arc::new(JobMetrics::default()),
            state: crate::state::StateHandle::in_memory(),
            restored_epoch: 0,
        };
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

    #[test]
    fn rows_of_later_windows_wait() {
        let ends = split_by_end(&[5, 5, 9, 5, 9, 12]);
        assert_eq!(
            ends,
            vec![(5, vec![0, 1, 3]), (9, vec![2, 4]), (12, vec![5])]
        );
    }
}
