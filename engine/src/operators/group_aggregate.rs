//! `GroupAggregateOperator`: GROUP BY without windows over an unbounded or updating input,
//! whose result changes as rows arrive (DESIGN.md §8; Flink's `GroupAggregate`, RisingWave's
//! `HashAgg`).
//!
//! - input: rows routed by the keyed exchange on the group keys, append-only or updating
//!   (`+I`/`+U` add a row to its group, `-U`/`-D` take it away).
//! - output: an updating stream. After each input batch, each group the batch touched emits
//!   what changed: `+I` of its first result row, `-U` of the old row then `+U` of the new one,
//!   or `-D` of the old row when its last row was retracted. A group whose result did not
//!   change emits nothing.
//! - with `mini_batch` (`SET mini_batch`), input batches are held and applied together: on
//!   the timer, before each barrier, when a window closes, at the end of input, or when
//!   [`mini_batch::MAX_ROWS`] rows are held; each group then emits its net change over the
//!   mini-batch ([`mini_batch`]).
//! - aggregates: COUNT(*), COUNT(x), SUM, AVG, MIN, MAX, COUNT(DISTINCT x), each with an
//!   optional FILTER. MIN, MAX and COUNT(DISTINCT) keep the multiset of their values in the
//!   store, so retracting the current extreme finds the next one (see [`state`]); over an
//!   append-only input (nothing is retracted) MIN and MAX keep only their extreme, in the
//!   group's state (Flink's `MaxAggFunction` vs `MaxWithRetractAggFunction`). The
//!   COUNT(DISTINCT)s over one argument share one multiset ([`distinct`]).
//! - state: every group's state lives in the task's store ([`state`] has the layout). The
//!   groups worked on lately stay in memory ([`cache`]): read once, changed in memory, written
//!   back at each barrier (before the runtime checkpoints the store) or when the cache
//!   outgrows the task's share of `memory_budget`. Restored in place, or, at another
//!   parallelism, by copying the groups that route to this instance.
//! - with `state_ttl`, a group not touched for that long (processing time) is dropped, without
//!   a retraction ([`crate::state::ttl`]).
//! - early-fire windows (`window_emit = 'on_update'`): with `window`, the group keys include
//!   a window column; a group's changes come as its window fills, and its state is dropped
//!   when the watermark passes the window's end (its last change was the final row).
//! - watermarks pass through; at end of input nothing is left to emit.

mod cache;
mod distinct;
mod distinct_entries;
mod mini_batch;
pub(crate) mod partials;
pub(crate) mod state;
pub(crate) mod values;

use datafusion::common::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, Int8Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::compute::{cast, filter_record_batch, interleave};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampNanosecondType};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::changelog::{self, Op};
use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MIN};
use crate::metrics::JobMetrics;
use crate::operator::{cast_columns, Operator, Output};
use crate::operators::windowed::WindowColumn;
use crate::state::ttl::now_ms;
use crate::state::{
    count_of, just_after, prefix_end, KeyExpiry, StateBackend, StateHandle, WriteBatch,
};
use cache::GroupCache;
pub(crate) use distinct::distinct_sets;
use mini_batch::MiniBatch;
use state::{restore_repartitioned, AggState, GroupState, Keys};
use values::{add_sums, result_column, takes};

/// Keys a batch expires at most (the rest wait for the next batches).
pub(crate) const EXPIRE_PER_BATCH: usize = 1024;

/// What an updating aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdatingAggKind {
    /// COUNT(*) and COUNT(x): values that are not NULL.
    Count,
    Sum,
    Avg,
    Min,
    Max,
    CountDistinct,
}

/// One aggregate of a [`GroupAggregateSpec`].
#[derive(Debug, Clone)]
pub struct UpdatingAggregate {
    pub kind: UpdatingAggKind,
    /// The argument, evaluated on the input (COUNT(*) counts a constant).
    pub arg: Arc<dyn PhysicalExpr>,
    /// `FILTER (WHERE ...)`.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// The result type (the plan's).
    pub output: DataType,
}

impl UpdatingAggregate {
    /// Whether weir can maintain this aggregate under retractions, or why not.
    pub fn check(&self) -> std::result::Result<(), String> {
        use UpdatingAggKind::*;
        let ok = match self.kind {
            Count | CountDistinct => self.output == DataType::Int64,
            Sum => matches!(
                self.output,
                DataType::Int64 | DataType::UInt64 | DataType::Float64 | DataType::Decimal128(_, _)
            ),
            Avg => self.output == DataType::Float64,
            Min | Max => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{:?} returning {}", self.kind, self.output))
        }
    }

    /// What the running sum adds up, for SUM and AVG.
    pub(crate) fn sum_type(&self) -> Option<DataType> {
        match self.kind {
            UpdatingAggKind::Sum => Some(self.output.clone()),
            UpdatingAggKind::Avg => Some(DataType::Float64),
            _ => None,
        }
    }

    fn keeps_multiset(&self) -> bool {
        matches!(
            self.kind,
            UpdatingAggKind::Min | UpdatingAggKind::Max | UpdatingAggKind::CountDistinct
        )
    }
}

/// The plan node of an updating GROUP BY.
#[derive(Debug, Clone)]
pub struct GroupAggregateSpec {
    /// The relation the input carries (without its change kinds).
    pub input_schema: SchemaRef,
    /// Whether the input is an updating stream (its batches end in the change-kind column).
    pub input_updating: bool,
    /// The group keys, evaluated on the input: the same expressions the keyed exchange routes
    /// rows by.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    pub aggregates: Vec<UpdatingAggregate>,
    /// Group keys then aggregates, without the change kinds (the operator appends them).
    pub output_schema: SchemaRef,
    /// Drop a group's state when it is not touched for this long (`SET state_ttl`).
    pub state_ttl: Option<Duration>,
    /// A window aggregate emitting early (`window_emit = 'on_update'`): the input column
    /// holding each row's window (one of the group keys). A group's state is dropped when
    /// the watermark passes its window's end; rows of windows already closed are late.
    pub window: Option<WindowColumn>,
    /// `SET mini_batch`: input rows wait up to this long (processing time) and are applied
    /// together; `None` applies each input batch as it comes.
    pub mini_batch: Option<Duration>,
    /// Two phases: the input carries the partial states ([`partials`]) a
    /// [`crate::operators::LocalGroupAggregateSpec`] computed over rows of this schema (the
    /// aggregates' arguments and filters refer to it), keyed by the partial rows' key
    /// columns; `None`: the input carries the rows themselves.
    pub partials_of: Option<SchemaRef>,
    pub description: String,
}

impl GroupAggregateSpec {
    pub(crate) fn key_converter(&self) -> Result<Option<RowConverter>> {
        if self.keys.is_empty() {
            return Ok(None);
        }
        let fields = self
            .keys
            .iter()
            .map(|k| Ok(SortField::new(k.data_type(&self.input_schema)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RowConverter::new(fields)?))
    }

    /// The schema the aggregates' arguments and filters are evaluated on.
    pub(crate) fn rows_schema(&self) -> &SchemaRef {
        self.partials_of.as_ref().unwrap_or(&self.input_schema)
    }

    /// Per aggregate keeping a multiset (or, over an append-only input, a MIN / MAX extreme):
    /// the encoder of its values (descending for MAX).
    pub(crate) fn value_converters(&self) -> Result<Vec<Option<RowConverter>>> {
        self.aggregates
            .iter()
            .map(|a| {
                if !a.keeps_multiset() {
                    return Ok(None);
                }
                let options = SortOptions {
                    descending: a.kind == UpdatingAggKind::Max,
                    nulls_first: false,
                };
                let field =
                    SortField::new_with_options(a.arg.data_type(self.rows_schema())?, options);
                Ok(Some(RowConverter::new(vec![field])?))
            })
            .collect()
    }
}

impl OperatorFactory for GroupAggregateSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if self.aggregates.len() >= u8::MAX as usize {
            return Err(EngineError::Internal(
                "more than 254 aggregates in one GROUP BY".into(),
            ));
        }
        let keys = self.key_converter()?;
        let values = self.value_converters()?;
        if let Some(restore) = task.state.restore() {
            if let Some((instance, parallelism)) = restore.repartition {
                restore_repartitioned(
                    &task.state,
                    &restore.stores,
                    keys.as_ref(),
                    instance,
                    parallelism,
                )?;
            }
        }
        let output_schema = changelog::with_op_field(&self.output_schema);
        Ok(Box::new(GroupAggregateOperator {
            cache: GroupCache::new(self.aggregates.len(), task.state.memory_budget()),
            watermark: WATERMARK_MIN,
            metrics: Arc::clone(&task.metrics),
            expiry: self.state_ttl.map(|ttl| KeyExpiry::new(&task.state, ttl)),
            spec: self.clone(),
            handle: task.state.clone(),
            distinct_sets: distinct::distinct_sets(&self.aggregates),
            held: MiniBatch::default(),
            keys,
            values,
            output_schema,
        }))
    }
}

/// A running updating GROUP BY (see the module doc).
pub struct GroupAggregateOperator {
    spec: GroupAggregateSpec,
    handle: StateHandle,
    /// Encodes group keys; `None` without keys (one group, the empty row).
    keys: Option<RowConverter>,
    /// The groups worked on lately.
    cache: GroupCache,
    /// Per aggregate keeping a multiset: encodes its values (descending for MAX).
    values: Vec<Option<RowConverter>>,
    /// The COUNT(DISTINCT) aggregates sharing a multiset ([`distinct`]).
    distinct_sets: Vec<Vec<usize>>,
    output_schema: SchemaRef,
    /// With `state_ttl`: when groups were last touched.
    expiry: Option<KeyExpiry>,
    /// The input watermark (early-fire windows close at it).
    watermark: EventTime,
    /// With `mini_batch`: input rows not applied yet.
    held: MiniBatch,
    metrics: Arc<JobMetrics>,
}

/// A batch's groups: their rows, their states before and after the batch.
struct Touched {
    /// Group rows in order of first appearance.
    groups: Vec<Vec<u8>>,
    /// For each input row, its group.
    row_group: Vec<usize>,
    before: Vec<Option<GroupState>>,
    after: Vec<GroupState>,
    /// Per group and aggregate keeping a multiset: the value row of its MIN / MAX before and
    /// after the batch.
    extreme_before: Vec<Vec<Option<Vec<u8>>>>,
    extreme_after: Vec<Vec<Option<Vec<u8>>>>,
    /// Early-fire windows: each group's window end.
    window_end: Option<Vec<EventTime>>,
}

impl GroupAggregateOperator {
    /// Groups the batch's rows and reads their states.
    fn touch(&mut self, rel: &RecordBatch, store: &dyn StateBackend) -> Result<Touched> {
        let n = rel.num_rows();
        let mut groups: Vec<Vec<u8>> = Vec::new();
        let mut row_group = Vec::with_capacity(n);
        match &self.keys {
            None => {
                groups.push(Vec::new());
                row_group.resize(n, 0);
            }
            Some(converter) => {
                let columns = self
                    .spec
                    .keys
                    .iter()
                    .map(|k| k.evaluate(rel).and_then(|v| v.into_array(n)))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let rows = converter.convert_columns(&columns)?;
                let mut index: HashMap<&[u8], usize> = HashMap::default();
                for row in rows.iter() {
                    let next = groups.len();
                    let g = *index.entry(row.data()).or_insert(next);
                    if g == next {
                        groups.push(row.data().to_vec());
                    }
                    row_group.push(g);
                }
            }
        }
        let keys = Keys {
            handle: &self.handle,
        };
        let aggs = self.spec.aggregates.len();
        self.cache.read_states(store, &groups, |g| keys.group(g))?;
        let before = groups
            .iter()
            .map(|g| self.cache.state(store, g, || keys.group(g)))
            .collect::<Result<Vec<_>>>()?;
        let after: Vec<GroupState> = before
            .iter()
            .map(|s| s.clone().unwrap_or_else(|| GroupState::new(aggs)))
            .collect();
        let extreme_before = self.extremes(&groups, &after, store)?;
        let window_end = self.window_ends(rel)?.map(|ends| {
            let mut per_group = vec![WATERMARK_MIN; groups.len()];
            for (row, &g) in row_group.iter().enumerate() {
                per_group[g] = ends[row];
            }
            per_group
        });
        Ok(Touched {
            window_end,
            groups,
            row_group,
            before,
            after,
            extreme_before,
            extreme_after: Vec::new(),
        })
    }

    /// Whether aggregate `agg` is a MIN / MAX keeping only its extreme (append-only input).
    fn keeps_extreme(&self, agg: usize) -> bool {
        !self.spec.input_updating
            && matches!(
                self.spec.aggregates[agg].kind,
                UpdatingAggKind::Min | UpdatingAggKind::Max
            )
    }

    /// The current MIN / MAX value row of each group's aggregates: from the multiset's first
    /// entry, or from the group's `states` for the aggregates keeping only their extreme.
    fn extremes(
        &self,
        groups: &[Vec<u8>],
        states: &[GroupState],
        store: &dyn StateBackend,
    ) -> Result<Vec<Vec<Option<Vec<u8>>>>> {
        let keys = Keys {
            handle: &self.handle,
        };
        groups
            .iter()
            .zip(states)
            .map(|(g, state)| {
                self.spec
                    .aggregates
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if !matches!(a.kind, UpdatingAggKind::Min | UpdatingAggKind::Max) {
                            return Ok(None);
                        }
                        if self.keeps_extreme(i) {
                            return Ok(state.extremes[i].clone());
                        }
                        let start = keys.multiset(g, i);
                        let end = prefix_end(&start);
                        Ok(store
                            .first_key(&start, &end)?
                            .map(|k| k[start.len()..].to_vec()))
                    })
                    .collect()
            })
            .collect()
    }

    /// Applies the batch to the groups' states; multiset changes go to `batch`.
    fn accumulate(
        &mut self,
        rel: &RecordBatch,
        signs: &[i64],
        t: &mut Touched,
        store: &dyn StateBackend,
        batch: &mut WriteBatch,
    ) -> Result<()> {
        let n = rel.num_rows();
        for (row, &g) in t.row_group.iter().enumerate() {
            t.after[g].rows += signs[row];
        }
        let keys = Keys {
            handle: &self.handle,
        };
        for (i, agg) in self.spec.aggregates.iter().enumerate() {
            if agg.kind == UpdatingAggKind::CountDistinct {
                continue;
            }
            let arg = agg.arg.evaluate(rel)?.into_array(n)?;
            let taken = takes(agg, &arg, rel)?;
            if let Some(sum_type) = agg.sum_type() {
                let values = cast(&arg, &sum_type)?;
                add_sums(&values, &taken, signs, &t.row_group, &mut t.after, i)?;
                continue;
            }
            let Some(converter) = &self.values[i] else {
                for row in (0..n).filter(|&r| taken[r]) {
                    t.after[t.row_group[row]].aggs[i].n += signs[row];
                }
                continue;
            };
            let rows = converter.convert_columns(&[arg])?;
            if self.keeps_extreme(i) {
                // Append-only: the smallest value row so far (MAX's rows sort descending).
                for row in (0..n).filter(|&r| taken[r]) {
                    let state = &mut t.after[t.row_group[row]];
                    state.aggs[i].n += signs[row];
                    let value = rows.row(row).data();
                    if state.extremes[i].as_deref().is_none_or(|e| value < e) {
                        state.extremes[i] = Some(value.to_vec());
                    }
                }
                continue;
            }
            // A multiset: net change per (group, value), then one read and write each.
            let mut deltas: HashMap<Vec<u8>, i64> = HashMap::default();
            for row in (0..n).filter(|&r| taken[r]) {
                let g = t.row_group[row];
                let mut key = keys.multiset(&t.groups[g], i);
                key.extend_from_slice(rows.row(row).data());
                *deltas.entry(key).or_insert(0) += signs[row];
                t.after[g].aggs[i].n += signs[row];
            }
            for (key, delta) in deltas {
                if delta == 0 {
                    continue;
                }
                let had = store.get(&key)?.map_or(0, |b| count_of(&b));
                let has = had + delta;
                if has > 0 {
                    batch.puts.push((key, has.to_le_bytes().to_vec()));
                } else {
                    // A retraction of a value never added leaves nothing behind either.
                    let end = just_after(&key);
                    batch.delete_ranges.push((key, end));
                }
            }
        }
        // COUNT(DISTINCT): cached with the group (no extreme is ever read from its multiset).
        for members in &self.distinct_sets {
            let Some(values) = &self.values[members[0]] else {
                return Err(EngineError::Internal(
                    "COUNT(DISTINCT) without a value encoder".into(),
                ));
            };
            let aggregates = &self.spec.aggregates;
            let arg = aggregates[members[0]].arg.evaluate(rel)?.into_array(n)?;
            let taken = members
                .iter()
                .map(|&m| takes(&aggregates[m], &arg, rel))
                .collect::<Result<Vec<_>>>()?;
            let rows = values.convert_columns(&[arg])?;
            let input = distinct::DistinctInput {
                members,
                append_only: !self.spec.input_updating,
            };
            distinct::accumulate(
                &input,
                |r| rows.row(r).data(),
                &taken,
                signs,
                t,
                &keys,
                &mut self.cache,
                store,
            )?;
        }
        Ok(())
    }

    /// Early-fire windows: drops the state of every group whose window ended at or before
    /// `watermark` (its last change was emitted with the batch that made it).
    fn close_windows(&mut self, watermark: EventTime) -> Result<()> {
        let store = self.handle.store()?;
        let keys = Keys {
            handle: &self.handle,
        };
        let (start, end) = keys.windows_until(watermark);
        let skip = self.handle.prefix_len();
        loop {
            let chunk = store.scan_first(&start, &end, 4096)?;
            if chunk.is_empty() {
                return Ok(());
            }
            let mut writes = WriteBatch::default();
            for (k, _) in chunk {
                let group = state::group_of(&k[skip..])?.to_vec();
                self.cache.forget(&group);
                let g = keys.group(&group);
                let g_end = just_after(&g);
                writes.delete_ranges.push((g, g_end));
                writes.delete_ranges.push(keys.group_multisets(&group));
                let k_end = just_after(&k);
                writes.delete_ranges.push((k, k_end));
            }
            store.write(writes)?;
        }
    }

    /// Early-fire windows: drops the rows of windows the watermark already closed (counted as
    /// late; the source drops late rows first, so this only guards the invariant).
    fn drop_late(&self, rel: RecordBatch, signs: Vec<i64>) -> Result<(RecordBatch, Vec<i64>)> {
        let Some(ends) = self.window_ends(&rel)? else {
            return Ok((rel, signs));
        };
        let keep: Vec<bool> = ends.iter().map(|&e| e > self.watermark).collect();
        let late = keep.iter().filter(|k| !**k).count();
        if late == 0 {
            return Ok((rel, signs));
        }
        self.metrics.add_late_rows(late as u64);
        let mask = BooleanArray::from(keep.clone());
        let signs = signs
            .into_iter()
            .zip(keep)
            .filter_map(|(s, k)| k.then_some(s))
            .collect();
        Ok((filter_record_batch(&rel, &mask)?, signs))
    }

    /// Early-fire windows: each row's window end.
    fn window_ends(&self, rel: &RecordBatch) -> Result<Option<Vec<EventTime>>> {
        let Some(window) = self.spec.window else {
            return Ok(None);
        };
        let column = cast(
            rel.column(window.index),
            &DataType::Timestamp(TimeUnit::Nanosecond, None),
        )?;
        let values = column.as_primitive::<TimestampNanosecondType>();
        Ok(Some(
            values
                .iter()
                .map(|v| window.bound.end_of(v.unwrap_or(WATERMARK_MIN)))
                .collect(),
        ))
    }

    /// With `state_ttl`: drops the state of groups not touched for that long (nothing is
    /// emitted: a group that comes back starts afresh).
    fn expire(&mut self, store: &dyn StateBackend, now: u64) -> Result<()> {
        let Some(expiry) = &self.expiry else {
            return Ok(());
        };
        let mut writes = WriteBatch::default();
        let keys = Keys {
            handle: &self.handle,
        };
        for group in expiry.expired(store, now, EXPIRE_PER_BATCH, &mut writes)? {
            self.cache.forget(&group);
            let k = keys.group(&group);
            let end = just_after(&k);
            writes.delete_ranges.push((k, end));
            writes.delete_ranges.push(keys.group_multisets(&group));
        }
        store.write(writes)
    }

    /// The result rows of `groups` (indices into `t`), from their states `before` or after.
    fn results(&self, t: &Touched, groups: &[usize], before: bool) -> Result<Vec<ArrayRef>> {
        let mut columns: Vec<ArrayRef> = Vec::new();
        if let Some(converter) = &self.keys {
            let parser = converter.parser();
            let rows = groups.iter().map(|&g| parser.parse(&t.groups[g]));
            columns.extend(converter.convert_rows(rows)?);
        }
        for (i, agg) in self.spec.aggregates.iter().enumerate() {
            let states: Vec<AggState> = groups
                .iter()
                .map(|&g| {
                    if before {
                        t.before[g]
                            .as_ref()
                            .map_or(AggState::default(), |s| s.aggs[i])
                    } else {
                        t.after[g].aggs[i]
                    }
                })
                .collect();
            let extremes = if before {
                &t.extreme_before
            } else {
                &t.extreme_after
            };
            let values: Vec<Option<&[u8]>> =
                groups.iter().map(|&g| extremes[g][i].as_deref()).collect();
            columns.push(result_column(
                agg,
                &states,
                &values,
                self.values[i].as_ref(),
            )?);
        }
        cast_columns(&self.spec.output_schema, columns)
    }
}

/// Whether a group's result row stays the same.
fn same_result(spec: &GroupAggregateSpec, t: &Touched, g: usize) -> bool {
    let Some(before) = &t.before[g] else {
        return false;
    };
    spec.aggregates.iter().enumerate().all(|(i, agg)| {
        let (b, a) = (before.aggs[i], t.after[g].aggs[i]);
        match agg.kind {
            UpdatingAggKind::Count | UpdatingAggKind::CountDistinct => b.n == a.n,
            UpdatingAggKind::Sum => (b.n > 0) == (a.n > 0) && (b.n == 0 || b.v == a.v),
            UpdatingAggKind::Avg => b == a,
            UpdatingAggKind::Min | UpdatingAggKind::Max => {
                t.extreme_before[g][i] == t.extreme_after[g][i]
            }
        }
    })
}

impl GroupAggregateOperator {
    /// With `mini_batch`: applies the held rows as one batch.
    fn apply_held(&mut self, out: &mut Output) -> Result<()> {
        match self.held.take()? {
            Some((rel, signs)) => self.apply(rel, signs, out),
            None => Ok(()),
        }
    }

    /// Applies rows (`signs`: +1 adds a row, -1 retracts it) to their groups and emits each
    /// group's change.
    fn apply(&mut self, rel: RecordBatch, signs: Vec<i64>, out: &mut Output) -> Result<()> {
        let store = self.handle.store()?;
        let now = now_ms();
        self.expire(store.as_ref(), now)?;
        let mut t = self.touch(&rel, store.as_ref())?;
        let mut writes = WriteBatch::default();
        if self.spec.partials_of.is_some() {
            self.merge_partials(&rel, &mut t, store.as_ref())?;
        } else {
            self.accumulate(&rel, &signs, &mut t, store.as_ref(), &mut writes)?;
        }
        store.write(std::mem::take(&mut writes))?;
        t.extreme_after = self.extremes(&t.groups, &t.after, store.as_ref())?;

        // What each group emits: (group, before?) in order, with its change kind.
        let keys = Keys {
            handle: &self.handle,
        };
        let mut olds: Vec<usize> = Vec::new();
        let mut news: Vec<usize> = Vec::new();
        let mut order: Vec<(usize, usize)> = Vec::new();
        let mut ops: Vec<i8> = Vec::new();
        for g in 0..t.groups.len() {
            let existed = t.before[g].is_some();
            // A group without keys stays once it has had a row (batch SQL's global aggregate
            // always has its one row).
            let exists = t.after[g].rows > 0 || (self.keys.is_none() && existed);
            if exists {
                self.cache.set_state(&t.groups[g], t.after[g].clone());
            } else if existed || t.after[g].rows != 0 {
                let k = keys.group(&t.groups[g]);
                let end = just_after(&k);
                writes.delete_ranges.push((k, end));
                let (lo, hi) = keys.group_multisets(&t.groups[g]);
                writes.delete_ranges.push((lo, hi));
                self.cache.deleted(&t.groups[g]);
            }
            if let (Some(ends), false, true) = (&t.window_end, existed, exists) {
                writes
                    .puts
                    .push((keys.window(ends[g], &t.groups[g]), Vec::new()));
            }
            match (existed, exists) {
                (false, true) => {
                    order.push((1, news.len()));
                    news.push(g);
                    ops.push(Op::Insert.code());
                }
                (true, false) => {
                    order.push((0, olds.len()));
                    olds.push(g);
                    ops.push(Op::Delete.code());
                }
                (true, true) if !same_result(&self.spec, &t, g) => {
                    order.push((0, olds.len()));
                    olds.push(g);
                    ops.push(Op::UpdateBefore.code());
                    order.push((1, news.len()));
                    news.push(g);
                    ops.push(Op::UpdateAfter.code());
                }
                _ => {}
            }
        }
        if let Some(expiry) = &self.expiry {
            expiry.touch(
                store.as_ref(),
                t.groups.iter().map(Vec::as_slice),
                now,
                &mut writes,
            )?;
        }
        store.write(writes)?;
        self.cache.trim(store.as_ref())?;
        if order.is_empty() {
            return Ok(());
        }
        let old_columns = self.results(&t, &olds, true)?;
        let new_columns = self.results(&t, &news, false)?;
        let mut columns = old_columns
            .iter()
            .zip(&new_columns)
            .map(|(o, n)| Ok(interleave(&[o.as_ref(), n.as_ref()], &order)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        columns.push(Arc::new(Int8Array::from(ops)));
        let options = RecordBatchOptions::new().with_row_count(Some(order.len()));
        out.emit(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns,
            &options,
        )?);
        Ok(())
    }
}

impl Operator for GroupAggregateOperator {
    fn name(&self) -> &str {
        "GroupAggregate"
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        if self.spec.window.is_some() && watermark > self.watermark {
            // The held rows' changes come before their windows close.
            self.apply_held(out)?;
            self.close_windows(watermark)?;
        }
        self.watermark = self.watermark.max(watermark);
        Ok(watermark)
    }

    fn snapshot(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        self.cache.flush(self.handle.store()?.as_ref())?;
        Ok(None)
    }

    fn timer_interval(&self) -> Option<Duration> {
        self.spec.mini_batch
    }

    fn on_timer(&mut self, out: &mut Output) -> Result<()> {
        self.apply_held(out)
    }

    fn prepare_barrier(&mut self, out: &mut Output) -> Result<()> {
        self.apply_held(out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.apply_held(out)
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let (rel, signs) = changelog::signed(&batch, self.spec.input_updating)?;
        let (rel, signs) = self.drop_late(rel, signs)?;
        if rel.num_rows() == 0 {
            return Ok(());
        }
        if self.spec.mini_batch.is_none() {
            return self.apply(rel, signs, out);
        }
        self.held.push(rel, signs);
        if self.held.is_full() {
            self.apply_held(out)?;
        }
        Ok(())
    }
}
