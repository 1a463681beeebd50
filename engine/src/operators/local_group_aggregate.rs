//! `LocalGroupAggregateOperator`: the first phase of a two-phase updating GROUP BY (Flink's
//! local-global aggregation, `LocalGroupAggregate`), chained into the input's tasks before
//! the keyed exchange.
//!
//! - input: the append-only rows of the aggregation (as its one-phase form takes them).
//! - output: partial states ([`group_aggregate::partials`]): per group held, its rows, each
//!   aggregate's count, sum or extreme, and its distinct values (each once per flush and
//!   group, with the FILTERs that took it). Only these cross the exchange; the final
//!   [`crate::operators::GroupAggregateSpec`] merges them and emits the changes.
//! - flushes: after every input batch, or with `mini_batch` on its timer; always before a
//!   barrier, at the end of input, past [`FLUSH_GROUPS`] groups or [`FLUSH_BYTES`] held, and,
//!   for an early-fire window aggregate, before a watermark goes on (the final phase closes
//!   windows at it). Each group's partial state then reaches the final phase as one change,
//!   as the one-phase operator applies a batch or mini-batch at once.
//! - state: none across barriers (everything is flushed first), so nothing to snapshot or
//!   restore. The groups held are a bounded buffer outside the memory budget.
//! - adaptive: when, over the first [`PROBE_ROWS`] rows, the flushes give more than
//!   [`SKIP_RATIO`] of a partial row per input row (groups and distinct values rarely repeat
//!   within a flush, as q16's), holding them does not pay: each row then becomes its own
//!   partial row at once, without hashing (DataFusion's skip of partial aggregation).

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, BinaryArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::{cast, nullif};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::RowConverter;
use datafusion::common::HashMap;

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::operator::{Operator, Output};
use crate::operators::group_aggregate::partials::Layout;
use crate::operators::group_aggregate::state::GroupState;
use crate::operators::group_aggregate::values::{add_value, sum_column, takes};
use crate::operators::group_aggregate::{distinct_sets, GroupAggregateSpec, UpdatingAggKind};
pub use crate::operators::local_aggregate::{FLUSH_BYTES, FLUSH_GROUPS, PROBE_ROWS};

/// Partial rows per input row above which holding groups does not pay. Lower than the
/// window aggregate's local phase ([`crate::operators::local_aggregate::SKIP_RATIO`]): the
/// final phase's cost here is mostly its COUNT(DISTINCT) entries' reads and writes, which
/// holding does not reduce, so the hashing has to remove more rows to pay. q16 (files, 10 M
/// events, p=2) gives 0.66 partial rows per row: holding ran 8% slower than one phase,
/// row by row 3%; q15 (0.11) and q17 (0.075) ran 37% and 20% faster holding.
pub const SKIP_RATIO: f64 = 0.5;

/// The plan node of the local phase ([`GroupAggregateSpec::split`]).
#[derive(Debug, Clone)]
pub struct LocalGroupAggregateSpec {
    /// The aggregation in its one-phase form (keys, aggregates and filters over input rows).
    pub aggregate: GroupAggregateSpec,
    /// The partial states' schema ([`crate::operators::group_aggregate::partials`]).
    pub output_schema: SchemaRef,
    /// Whether groups are held between flushes.
    pub holding: Holding,
    pub description: String,
}

/// Whether a local phase holds groups between flushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Holds them, until [`PROBE_ROWS`] rows show it does not pay.
    Adaptive,
    /// Each row is its own partial row from the start.
    RowByRow,
}

impl OperatorFactory for LocalGroupAggregateSpec {
    /// Its buffer is bounded on its own ([`FLUSH_BYTES`]), as the window aggregate's local
    /// phase.
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let spec = &self.aggregate;
        let sets = distinct_sets(&spec.aggregates);
        Ok(Box::new(LocalGroupAggregateOperator {
            keys: spec.key_converter()?,
            values: spec.value_converters()?,
            layout: Layout::new(spec.keys.len(), &spec.aggregates, sets.len()),
            held: Held::new(sets.len()),
            sets,
            spec: self.clone(),
            rows_in: 0,
            rows_out: 0,
            judged: false,
            row_by_row: self.holding == Holding::RowByRow,
        }))
    }
}

/// A distinct value held (its value row) and the members that took it.
type Member<'a> = (&'a [u8], u64);

/// The groups held since the last flush.
struct Held {
    /// Group row -> its index.
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<Vec<u8>>,
    states: Vec<GroupState>,
    /// Per multiset: (group index as 4 bytes, value row) -> the members that took it.
    distinct: Vec<HashMap<Vec<u8>, u64>>,
    /// What the keys, value rows and states take, roughly.
    bytes: usize,
}

impl Held {
    fn new(sets: usize) -> Self {
        Self {
            index: HashMap::default(),
            groups: Vec::new(),
            states: Vec::new(),
            distinct: vec![HashMap::default(); sets],
            bytes: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// A running local phase (one instance).
pub struct LocalGroupAggregateOperator {
    spec: LocalGroupAggregateSpec,
    /// Encodes group keys; `None` without keys (one group, the empty row).
    keys: Option<RowConverter>,
    /// Per aggregate keeping an extreme or a multiset: encodes its values.
    values: Vec<Option<RowConverter>>,
    /// The COUNT(DISTINCT) multisets (their members).
    sets: Vec<Vec<usize>>,
    layout: Layout,
    held: Held,
    /// Rows taken and partial rows emitted (for the adaptive judgement).
    rows_in: u64,
    rows_out: u64,
    /// Whether holding groups pays was judged (after [`PROBE_ROWS`] rows).
    judged: bool,
    /// Holding groups did not pay: each row is its own partial row.
    row_by_row: bool,
}

impl LocalGroupAggregateOperator {
    /// Adds a batch of rows to the groups held.
    fn accumulate(&mut self, rel: &RecordBatch) -> Result<()> {
        let n = rel.num_rows();
        let spec = &self.spec.aggregate;
        let aggs = spec.aggregates.len();
        let held = &mut self.held;
        // Each row's group.
        let mut row_group = Vec::with_capacity(n);
        match &self.keys {
            None => {
                if held.groups.is_empty() {
                    held.groups.push(Vec::new());
                    held.states.push(GroupState::new(aggs));
                }
                row_group.resize(n, 0);
            }
            Some(converter) => {
                let columns = spec
                    .keys
                    .iter()
                    .map(|k| k.evaluate(rel).and_then(|v| v.into_array(n)))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let rows = converter.convert_columns(&columns)?;
                for row in rows.iter() {
                    let key = row.data();
                    let g = match held.index.get(key) {
                        Some(&g) => g,
                        None => {
                            let g = held.groups.len();
                            held.index.insert(key.to_vec(), g);
                            held.groups.push(key.to_vec());
                            held.states.push(GroupState::new(aggs));
                            held.bytes += 2 * key.len() + 64 + 32 * aggs;
                            g
                        }
                    };
                    row_group.push(g);
                }
            }
        }
        for &g in &row_group {
            held.states[g].rows += 1;
        }
        for (i, agg) in spec.aggregates.iter().enumerate() {
            if agg.kind == UpdatingAggKind::CountDistinct {
                continue;
            }
            let arg = agg.arg.evaluate(rel)?.into_array(n)?;
            let taken = takes(agg, &arg, rel)?;
            if let Some(sum_type) = agg.sum_type() {
                let values = cast(&arg, &sum_type)?;
                for (row, &g) in row_group.iter().enumerate() {
                    if taken[row] {
                        add_value(&mut held.states[g].aggs[i], &values, row, 1)?;
                    }
                }
                continue;
            }
            let Some(converter) = &self.values[i] else {
                for (row, &g) in row_group.iter().enumerate() {
                    held.states[g].aggs[i].n += i64::from(taken[row]);
                }
                continue;
            };
            // MIN / MAX over append-only rows: the smallest value row (MAX's sort descending).
            let rows = converter.convert_columns(&[arg])?;
            for (row, &g) in row_group.iter().enumerate() {
                if !taken[row] {
                    continue;
                }
                let state = &mut held.states[g];
                state.aggs[i].n += 1;
                let value = rows.row(row).data();
                if state.extremes[i].as_deref().is_none_or(|e| value < e) {
                    held.bytes += value.len();
                    state.extremes[i] = Some(value.to_vec());
                }
            }
        }
        for (s, members) in self.sets.iter().enumerate() {
            let (rows, masks) = self.distinct_values(rel, members)?;
            let held = &mut self.held;
            let entries = &mut held.distinct[s];
            let mut key = Vec::new();
            for (row, &g) in row_group.iter().enumerate() {
                let bits = masks[row];
                if bits == 0 {
                    continue;
                }
                key.clear();
                key.extend_from_slice(&(g as u32).to_le_bytes());
                key.extend_from_slice(rows.row(row).data());
                match entries.get_mut(key.as_slice()) {
                    Some(b) => *b |= bits,
                    None => {
                        held.bytes += 2 * key.len() + 32;
                        entries.insert(key.clone(), bits);
                    }
                }
            }
        }
        Ok(())
    }

    /// Emits the partial state of every group held and forgets them.
    fn flush(&mut self, out: &mut Output) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let held = std::mem::replace(&mut self.held, Held::new(self.sets.len()));
        let groups = held.groups.len();
        // Per multiset and group: its distinct values and their members.
        let mut per_group: Vec<Vec<Vec<Member<'_>>>> = Vec::with_capacity(self.sets.len());
        for entries in &held.distinct {
            let mut lists = vec![Vec::new(); groups];
            for (key, &bits) in entries {
                let mut g = [0u8; 4];
                g.copy_from_slice(&key[..4]);
                lists[u32::from_le_bytes(g) as usize].push((&key[4..], bits));
            }
            per_group.push(lists);
        }
        // The partial rows: each group's first carries its state, the others only values.
        let mut row_group: Vec<usize> = Vec::with_capacity(groups);
        let mut first: Vec<bool> = Vec::with_capacity(groups);
        let mut nth: Vec<usize> = Vec::with_capacity(groups);
        for g in 0..groups {
            let rows = per_group.iter().map(|l| l[g].len()).max().unwrap_or(0);
            for j in 0..rows.max(1) {
                row_group.push(g);
                first.push(j == 0);
                nth.push(j);
            }
        }
        let len = row_group.len();
        let mut columns: Vec<Option<ArrayRef>> = vec![None; self.layout.width];
        if let Some(converter) = &self.keys {
            let parser = converter.parser();
            let keys =
                converter.convert_rows(row_group.iter().map(|&g| parser.parse(&held.groups[g])))?;
            for (i, k) in keys.into_iter().enumerate() {
                columns[i] = Some(k);
            }
        }
        let zero = GroupState::new(self.spec.aggregate.aggregates.len());
        let state = |r: usize| {
            if first[r] {
                &held.states[row_group[r]]
            } else {
                &zero
            }
        };
        columns[self.layout.rows] = Some(Arc::new(Int64Array::from_iter_values(
            (0..len).map(|r| state(r).rows),
        )));
        for (i, agg) in self.spec.aggregate.aggregates.iter().enumerate() {
            if let Some(at) = self.layout.n[i] {
                columns[at] = Some(Arc::new(Int64Array::from_iter_values(
                    (0..len).map(|r| state(r).aggs[i].n),
                )));
            }
            if let (Some(at), Some(sum_type)) = (self.layout.sum[i], agg.sum_type()) {
                columns[at] = Some(sum_column(&sum_type, (0..len).map(|r| state(r).aggs[i]))?);
            }
            if let Some(at) = self.layout.extreme[i] {
                columns[at] = Some(Arc::new(BinaryArray::from_iter(
                    (0..len).map(|r| state(r).extremes[i].as_deref()),
                )));
            }
        }
        for (lists, &(value, members)) in per_group.iter().zip(&self.layout.distinct) {
            let entry = |r: usize| lists[row_group[r]].get(nth[r]);
            columns[value] = Some(Arc::new(BinaryArray::from_iter(
                (0..len).map(|r| entry(r).map(|e| e.0)),
            )));
            columns[members] = Some(Arc::new(Int64Array::from_iter_values(
                (0..len).map(|r| entry(r).map_or(0, |e| e.1 as i64)),
            )));
        }
        self.emit(columns, len, out)
    }

    /// Emits partial state columns of `len` rows.
    fn emit(&mut self, columns: Vec<Option<ArrayRef>>, len: usize, out: &mut Output) -> Result<()> {
        let columns = columns
            .into_iter()
            .map(|c| {
                c.ok_or_else(|| EngineError::Internal("a partial state column is missing".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(len));
        out.emit(RecordBatch::try_new_with_options(
            Arc::clone(&self.spec.output_schema),
            columns,
            &options,
        )?);
        self.rows_out += len as u64;
        Ok(())
    }

    /// Each row as its own partial row (holding groups does not pay).
    fn row_by_row(&mut self, rel: &RecordBatch, out: &mut Output) -> Result<()> {
        let n = rel.num_rows();
        let spec = &self.spec.aggregate;
        let mut columns: Vec<Option<ArrayRef>> = vec![None; self.layout.width];
        for (i, k) in spec.keys.iter().enumerate() {
            columns[i] = Some(k.evaluate(rel)?.into_array(n)?);
        }
        columns[self.layout.rows] = Some(Arc::new(Int64Array::from_value(1, n)));
        // Per aggregate: its value rows (MIN / MAX), or its taken values as a sum.
        for (i, agg) in spec.aggregates.iter().enumerate() {
            let Some(at) = self.layout.n[i] else {
                continue;
            };
            let arg = agg.arg.evaluate(rel)?.into_array(n)?;
            let taken = takes(agg, &arg, rel)?;
            columns[at] = Some(Arc::new(Int64Array::from_iter_values(
                taken.iter().map(|&t| i64::from(t)),
            )));
            if let (Some(at), Some(sum_type)) = (self.layout.sum[i], agg.sum_type()) {
                let skipped = BooleanArray::from_iter(taken.iter().map(|&t| Some(!t)));
                columns[at] = Some(nullif(&cast(&arg, &sum_type)?, &skipped)?);
            }
            if let (Some(at), Some(converter)) = (self.layout.extreme[i], &self.values[i]) {
                let rows = converter.convert_columns(&[arg])?;
                columns[at] = Some(Arc::new(BinaryArray::from_iter(
                    (0..n).map(|r| taken[r].then(|| rows.row(r).data())),
                )));
            }
        }
        for (members, &(value, bits)) in self.sets.iter().zip(&self.layout.distinct) {
            let (rows, masks) = self.distinct_values(rel, members)?;
            columns[value] = Some(Arc::new(BinaryArray::from_iter(
                (0..n).map(|r| (masks[r] != 0).then(|| rows.row(r).data())),
            )));
            columns[bits] = Some(Arc::new(Int64Array::from_iter_values(
                masks.iter().map(|&m| m as i64),
            )));
        }
        self.emit(columns, n, out)
    }

    /// A multiset's value rows, and per row the bitmask of the members taking it.
    fn distinct_values(
        &self,
        rel: &RecordBatch,
        members: &[usize],
    ) -> Result<(datafusion::arrow::row::Rows, Vec<u64>)> {
        let n = rel.num_rows();
        let aggregates = &self.spec.aggregate.aggregates;
        let converter = self.values[members[0]].as_ref().ok_or_else(|| {
            EngineError::Internal("COUNT(DISTINCT) without a value encoder".into())
        })?;
        let arg = aggregates[members[0]].arg.evaluate(rel)?.into_array(n)?;
        let mut masks = vec![0u64; n];
        for (m, &member) in members.iter().enumerate() {
            for (mask, took) in masks.iter_mut().zip(takes(&aggregates[member], &arg, rel)?) {
                *mask |= u64::from(took) << m;
            }
        }
        Ok((converter.convert_columns(&[arg])?, masks))
    }

    fn mini_batch(&self) -> Option<Duration> {
        self.spec.aggregate.mini_batch
    }
}

impl Operator for LocalGroupAggregateOperator {
    fn name(&self) -> &str {
        "LocalGroupAggregate"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.row_by_row {
            return self.row_by_row(&batch, out);
        }
        self.accumulate(&batch)?;
        self.rows_in += batch.num_rows() as u64;
        if self.mini_batch().is_none()
            || self.held.groups.len() >= FLUSH_GROUPS
            || self.held.bytes >= FLUSH_BYTES
        {
            self.flush(out)?;
        }
        if !self.judged && self.rows_in >= PROBE_ROWS {
            // Judged on what was flushed (what is held is not counted yet).
            self.flush(out)?;
            self.judged = true;
            self.row_by_row = self.rows_out as f64 > SKIP_RATIO * self.rows_in as f64;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        if self.spec.aggregate.window.is_some() {
            self.flush(out)?;
        }
        Ok(watermark)
    }

    fn timer_interval(&self) -> Option<Duration> {
        self.mini_batch()
    }

    fn on_timer(&mut self, out: &mut Output) -> Result<()> {
        self.flush(out)
    }

    fn prepare_barrier(&mut self, out: &mut Output) -> Result<()> {
        self.flush(out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.flush(out)
    }
}
