//! `StreamJoinOperator`: a regular join (no windows, no time bounds) of two unbounded or
//! updating streams, whose result changes as either side changes (DESIGN.md §8; Flink's
//! `StreamingJoinOperator`, RisingWave's `HashJoin`).
//!
//! - input: both sides routed by the keyed exchange on their equality keys, append-only or
//!   updating (`+I`/`+U` add a row, `-U`/`-D` take one away).
//! - state: every live row of both sides, in the task's store by join key ([`state`] has the
//!   layout), written through after each batch. A batch of one side reads the other side's
//!   rows of its keys with one scan per key, or from the [`cache`] of recently probed keys;
//!   a key the side's [`filter`] rules out (never held) is neither read nor cached. Each
//!   side's cache and filter together stay within half of the task's share of
//!   `memory_budget` (the cache gets what the filter leaves). Restored in place, or at
//!   another parallelism by copying the rows whose key routes to this instance; a restored
//!   side's filter is read back from its keys when the side is first probed.
//! - output: for each row added to (taken from) one side, a `+I` (`-D`) of it joined with
//!   every matching row of the other side (passing the ON condition's non-equality part).
//!   An outer join pads a preserved row without matches with NULLs, and replaces that padded
//!   row (`-D`, then `+I` of the pairs) when its first match arrives, and back when its last
//!   match leaves. A semi (anti) join emits a row of its side while it has (has no) matches.
//!   Inner and semi joins of append-only inputs only ever insert: their output is
//!   append-only (no change-kind column); every other join's output is updating.
//! - rows whose key holds a NULL never match (SQL's `=`), but an outer join still emits them
//!   padded.
//! - with `state_ttl`, a join key not touched for that long (processing time) loses both
//!   sides' rows, without retractions ([`crate::state::ttl`]).
//! - watermarks pass through (the output has no event-time column of its own); at end of
//!   input nothing is left to emit.

mod cache;
mod filter;
mod state;

use datafusion::common::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, Int8Array, UInt32Array};
use datafusion::arrow::compute::{interleave, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::changelog::{self, Op};
use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::operator::{output_batch, Operator, Output};
use crate::operators::group_aggregate::EXPIRE_PER_BATCH;
use crate::operators::JoinKind;
use crate::state::ttl::now_ms;
use crate::state::{copy_routed, prefix_end, KeyExpiry, StateBackend, StateHandle, WriteBatch};
use cache::SideCache;
use filter::KeyFilter;
use state::{
    convert_earlier, key_of, key_prefix, numbered, row_prefix, run_entry, seq_entry, stored_seq,
    Entry, SEQ_TAG, SIDE_TAGS,
};

/// Candidate pairs whose ON condition is evaluated in one go.
const PAIRS_PER_FILTER: usize = 65_536;

/// One input of a [`StreamJoinSpec`].
#[derive(Debug, Clone)]
pub struct StreamJoinSide {
    /// The relation this side carries (without change kinds).
    pub schema: SchemaRef,
    /// Whether its batches are an updating stream's (end in the change-kind column).
    pub updating: bool,
    /// Equality keys evaluated on this side, coerced to one type per pair; the i-th keys of
    /// the two sides are compared, and the exchange routes rows by them.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
}

/// The plan node of a regular streaming join.
#[derive(Debug, Clone)]
pub struct StreamJoinSpec {
    pub kind: JoinKind,
    pub left: StreamJoinSide,
    pub right: StreamJoinSide,
    /// The ON condition beyond the equality keys, over `joined_schema`.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns then right columns (nullable where an outer join pads).
    pub joined_schema: SchemaRef,
    /// The output relation: `joined_schema`'s columns, or one side's for semi / anti joins.
    pub output_schema: SchemaRef,
    /// Drop a join key's rows (both sides) when it is not touched for this long.
    pub state_ttl: Option<Duration>,
    pub description: String,
}

impl StreamJoinSpec {
    /// Whether a `kind` join of inputs of these kinds has an updating result: every join but
    /// an inner or semi join of append-only inputs retracts rows it emitted.
    pub fn updates(kind: JoinKind, left_updating: bool, right_updating: bool) -> bool {
        left_updating
            || right_updating
            || !matches!(
                kind,
                JoinKind::Inner | JoinKind::LeftSemi | JoinKind::RightSemi
            )
    }

    fn output_updating(&self) -> bool {
        Self::updates(self.kind, self.left.updating, self.right.updating)
    }

    fn side(&self, side: usize) -> &StreamJoinSide {
        if side == 0 {
            &self.left
        } else {
            &self.right
        }
    }

    /// Whether rows of `side` are kept in the output padded with NULLs while unmatched.
    fn preserves(&self, side: usize) -> bool {
        matches!(
            (self.kind, side),
            (JoinKind::Full, _) | (JoinKind::Left, 0) | (JoinKind::Right, 1)
        )
    }

    /// Whether `side` keeps each batch's rows of a key as one run (see [`state`]): its rows
    /// are never retracted (an append-only input) nor counted (`matches` is kept only for a
    /// side an outer join preserves or a semi or anti join emits).
    fn appends_runs(&self, side: usize) -> bool {
        !self.side(side).updating
            && !self.preserves(side)
            && self.emitted().is_none_or(|(out, _)| out != side)
    }

    /// The side a semi or anti join emits, and whether it is a semi join.
    fn emitted(&self) -> Option<(usize, bool)> {
        match self.kind {
            JoinKind::LeftSemi => Some((0, true)),
            JoinKind::LeftAnti => Some((0, false)),
            JoinKind::RightSemi => Some((1, true)),
            JoinKind::RightAnti => Some((1, false)),
            _ => None,
        }
    }
}

impl OperatorFactory for StreamJoinSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if self.left.keys.is_empty() || self.left.keys.len() != self.right.keys.len() {
            return Err(EngineError::Internal(
                "a streaming join needs as many equality keys on each side, at least one".into(),
            ));
        }
        let key_fields = self
            .left
            .keys
            .iter()
            .map(|k| Ok(SortField::new(k.data_type(&self.left.schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let keys = RowConverter::new(key_fields)?;
        let rows = |schema: &SchemaRef| {
            RowConverter::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let handles = [task.state.sub(SIDE_TAGS[0]), task.state.sub(SIDE_TAGS[1])];
        let seq_key = task.state.sub(SEQ_TAG).key(&[]);
        let mut next_seq = 0;
        // A restored side's keys are read back into its filter when it is first probed.
        let mut filters = [KeyFilter::empty(), KeyFilter::empty()];
        if let Some(restore) = task.state.restore() {
            filters = [KeyFilter::unknown(), KeyFilter::unknown()];
            if let Some((instance, parallelism)) = restore.repartition {
                // Both sides' rows (and the expiry entries) route by their join key; the
                // sequence number is every instance's.
                copy_routed(
                    &task.state,
                    &restore.stores,
                    Some(&keys),
                    |suffix| match suffix.split_first() {
                        Some((&SEQ_TAG, _)) => Ok(None),
                        _ => key_of(suffix.get(1..).unwrap_or_default()).map(Some),
                    },
                    instance,
                    parallelism,
                )?;
            }
            for old in &restore.stores {
                next_seq = next_seq.max(stored_seq(old.as_ref(), &seq_key)?);
            }
            let store = task.state.store()?;
            next_seq = convert_earlier(&task.state, store.as_ref(), next_seq)?;
            // Written at once, not with the next batch that takes numbers: after a rescale
            // the copied rows are in the new store without it, and a checkpoint taken
            // before that batch would restore numbering from 0, over the copied rows'.
            if next_seq > 0 {
                let mut writes = WriteBatch::default();
                writes.puts.push(seq_entry(&seq_key, next_seq));
                store.write(writes)?;
            }
        }
        let relation = Arc::clone(&self.output_schema);
        let output_schema = if self.output_updating() {
            changelog::with_op_field(&relation)
        } else {
            relation
        };
        // Each side's cache and filter share half of the task's part of the budget.
        let side_budget = task.state.memory_budget() / 2;
        let cache = |f: &KeyFilter| SideCache::new(side_budget.saturating_sub(f.bytes()));
        Ok(Box::new(StreamJoinOperator {
            caches: [cache(&filters[0]), cache(&filters[1])],
            side_budget,
            filters,
            expiry: self.state_ttl.map(|ttl| KeyExpiry::new(&task.state, ttl)),
            spec: self.clone(),
            rows: [rows(&self.left.schema)?, rows(&self.right.schema)?],
            handles,
            seq_key,
            next_seq,
            keys,
            output_schema,
        }))
    }
}

/// A running regular join (see the module doc).
pub struct StreamJoinOperator {
    spec: StreamJoinSpec,
    /// Per side: its part of the task's store.
    handles: [StateHandle; 2],
    /// Where the next sequence number of an inserted row is stored, and that number.
    seq_key: Vec<u8>,
    next_seq: u64,
    /// Encodes join keys (both sides alike).
    keys: RowConverter,
    /// Per side: encodes its whole rows.
    rows: [RowConverter; 2],
    output_schema: SchemaRef,
    /// With `state_ttl`: when join keys were last touched.
    expiry: Option<KeyExpiry>,
    /// Per side: the rows of recently probed keys.
    caches: [SideCache; 2],
    /// Per side: which keys its store may hold.
    filters: [KeyFilter; 2],
    /// Bytes each side's cache and filter may hold together.
    side_budget: usize,
}

/// One output row: the input row (of the batch's side), the stored row of the other side
/// (an index into the batch's [`Other`] entries), either missing where padded, and its kind.
type Emit = (Option<usize>, Option<usize>, Op);

/// The other side's stored rows of the batch's keys.
struct Other {
    entries: Vec<Entry>,
    /// Their rows, decoded.
    batch: RecordBatch,
    /// For each input row, the range of `entries` with its key (empty for a NULL key).
    ranges: Vec<(usize, usize)>,
    /// Each distinct key once: an input row with it, its range of `entries`, and whether
    /// they were read from the store (not the cache).
    keys: Vec<(usize, (usize, usize), bool)>,
    /// For each input row, its key's index in `keys` (none for a NULL key).
    key_index: Vec<Option<usize>>,
}

impl StreamJoinOperator {
    /// Reads the other side's rows of every key in the batch.
    fn other_rows(
        &self,
        cache: &mut SideCache,
        filter: &KeyFilter,
        other: usize,
        key_rows: &Rows,
        null_key: &[bool],
        store: &dyn StateBackend,
    ) -> Result<Other> {
        let handle = &self.handles[other];
        // Each distinct key once (its first row), in order, asked once of the filter and the
        // cache; the keys neither rules out are read from the store together, through one
        // iterator. A key's entries are one range of `entries` (in no particular order of keys).
        let mut seen: HashMap<&[u8], usize> = HashMap::default();
        let mut of_row: Vec<Option<usize>> = Vec::with_capacity(null_key.len());
        let mut entries: Vec<Entry> = Vec::new();
        let mut keys: Vec<(usize, (usize, usize), bool)> = Vec::new();
        let mut to_read: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut unread: Vec<usize> = Vec::new();
        for (r, &null) in null_key.iter().enumerate() {
            if null {
                of_row.push(None);
                continue;
            }
            let key = key_rows.row(r).data();
            let next = keys.len();
            let d = *seen.entry(key).or_insert(next);
            if d == next {
                let start = entries.len();
                if !filter.may_hold(key) {
                    // Never held: no rows, nothing read and nothing to cache.
                    keys.push((r, (start, start), false));
                } else if let Some(cached) = cache.get(key) {
                    entries.extend_from_slice(cached);
                    keys.push((r, (start, entries.len()), false));
                } else {
                    let prefix = key_prefix(handle, key);
                    let end = prefix_end(&prefix);
                    to_read.push((prefix, end));
                    unread.push(d);
                    keys.push((r, (start, start), true));
                }
            }
            of_row.push(Some(d));
        }
        let read = store.scan_each(&to_read, usize::MAX)?;
        if read.len() != unread.len() {
            return Err(EngineError::Internal(format!(
                "join read {} key ranges of {}",
                read.len(),
                unread.len()
            )));
        }
        for (d, stored) in unread.into_iter().zip(read) {
            let start = entries.len();
            for (k, v) in stored {
                Entry::read_into(k, v, &mut entries)?;
            }
            keys[d].1 = (start, entries.len());
        }
        let ranges = of_row
            .iter()
            .map(|d| d.map_or((0, 0), |d| keys[d].1))
            .collect();
        let converter = &self.rows[other];
        let parser = converter.parser();
        let stored: Vec<_> = entries.iter().map(|e| parser.parse(e.row())).collect();
        let schema = Arc::clone(&self.spec.side(other).schema);
        let batch = if stored.is_empty() {
            RecordBatch::new_empty(schema)
        } else {
            RecordBatch::try_new(schema, converter.convert_rows(stored)?)?
        };
        Ok(Other {
            entries,
            batch,
            ranges,
            keys,
            key_index: of_row,
        })
    }

    /// For each input row, the other side's entries it joins with: offsets into the
    /// returned list (row `r`'s are `offsets[r]..offsets[r + 1]`).
    fn matches(
        &self,
        side: usize,
        rel: &RecordBatch,
        o: &Other,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        let mut offsets = Vec::with_capacity(rel.num_rows() + 1);
        offsets.push(0);
        let Some(filter) = &self.spec.filter else {
            let mut list = Vec::new();
            for &(s, e) in &o.ranges {
                list.extend(s..e);
                offsets.push(list.len());
            }
            return Ok((offsets, list));
        };
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (r, &(s, e)) in o.ranges.iter().enumerate() {
            pairs.extend((s..e).map(|j| (r as u32, j as u32)));
        }
        let mut pass = Vec::with_capacity(pairs.len());
        for chunk in pairs.chunks(PAIRS_PER_FILTER) {
            let mine = UInt32Array::from_iter_values(chunk.iter().map(|p| p.0));
            let theirs = UInt32Array::from_iter_values(chunk.iter().map(|p| p.1));
            let a = take_all(rel, &mine)?;
            let b = take_all(&o.batch, &theirs)?;
            let columns = if side == 0 { [a, b] } else { [b, a] }.concat();
            let joined = RecordBatch::try_new_with_options(
                Arc::clone(&self.spec.joined_schema),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(chunk.len())),
            )?;
            let result = filter.evaluate(&joined)?.into_array(chunk.len())?;
            let result = result
                .as_any()
                .downcast_ref::<datafusion::arrow::array::BooleanArray>()
                .ok_or_else(|| {
                    EngineError::Internal("join filter did not return booleans".into())
                })?;
            pass.extend((0..chunk.len()).map(|i| result.is_valid(i) && result.value(i)));
        }
        let mut list = Vec::new();
        let mut at = 0;
        for &(s, e) in &o.ranges {
            for j in s..e {
                if pass[at] {
                    list.push(j);
                }
                at += 1;
            }
            offsets.push(list.len());
        }
        Ok((offsets, list))
    }

    /// The output rows of the batch, in order, updating both sides' entries.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        side: usize,
        signs: &[i64],
        mine: &mut [Entry],
        row_entry: &[usize],
        o: &mut Other,
        offsets: &[usize],
        list: &[usize],
    ) -> Vec<Emit> {
        let mut emits: Vec<Emit> = Vec::new();
        let other = 1 - side;
        let emitted = self.spec.emitted();
        for (r, &s) in signs.iter().enumerate() {
            let entry = &mut mine[row_entry[r]];
            if s < 0 && entry.count <= 0 {
                // A retraction of a row that is not there: nothing to take back.
                continue;
            }
            let matched = &list[offsets[r]..offsets[r + 1]];
            let m: i64 = matched.iter().map(|&j| o.entries[j].count).sum();
            entry.count += s;
            if s > 0 {
                entry.matches = m;
            }
            entry.dirty = true;
            let op = if s > 0 { Op::Insert } else { Op::Delete };
            let copies = |e: &Entry| e.count.max(0) as usize;
            match emitted {
                None => {
                    let pads = self.spec.preserves(other);
                    for &j in matched {
                        let e = &mut o.entries[j];
                        let before = e.matches;
                        if pads {
                            e.matches += s;
                            e.dirty = true;
                        }
                        let n = copies(e);
                        if pads && s > 0 && before == 0 {
                            emits.extend(std::iter::repeat_n((None, Some(j), Op::Delete), n));
                        }
                        emits.extend(std::iter::repeat_n((Some(r), Some(j), op), n));
                        if pads && s < 0 && e.matches == 0 {
                            emits.extend(std::iter::repeat_n((None, Some(j), Op::Insert), n));
                        }
                    }
                    if self.spec.preserves(side) && m == 0 {
                        emits.push((Some(r), None, op));
                    }
                }
                Some((out, semi)) if out == side => {
                    if (m > 0) == semi {
                        emits.push((Some(r), None, op));
                    }
                }
                Some((_, semi)) => {
                    for &j in matched {
                        let e = &mut o.entries[j];
                        let before = e.matches;
                        e.matches += s;
                        e.dirty = true;
                        let (enters, leaves) = (s > 0 && before == 0, s < 0 && e.matches == 0);
                        let flip = match (enters, leaves) {
                            (true, _) => Some(if semi { Op::Insert } else { Op::Delete }),
                            (_, true) => Some(if semi { Op::Delete } else { Op::Insert }),
                            _ => None,
                        };
                        if let Some(op) = flip {
                            emits.extend(std::iter::repeat_n((None, Some(j), op), copies(e)));
                        }
                    }
                }
            }
        }
        emits
    }

    /// Writes the batch's rows of a side of runs: one run per join key (grouped as
    /// [`Self::other_rows`] found the batch's keys), the rows in batch order (rows with a
    /// NULL key never match: not kept).
    fn write_runs(
        &mut self,
        side: usize,
        key_rows: &Rows,
        rows: &Rows,
        o: &Other,
        writes: &mut WriteBatch,
    ) {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); o.keys.len()];
        for (r, d) in o.key_index.iter().enumerate() {
            if let Some(d) = d {
                groups[*d].push(r);
            }
        }
        for group in &groups {
            let key = key_rows.row(group[0]).data();
            let members = group.iter().map(|&r| rows.row(r).data());
            writes
                .puts
                .push(run_entry(&self.handles[side], key, self.next_seq, members));
            self.next_seq += 1;
        }
    }

    /// With `state_ttl`: drops both sides' rows of the keys not touched for that long
    /// (nothing is emitted).
    fn expire(&mut self, store: &dyn StateBackend, now: u64) -> Result<()> {
        let Some(expiry) = &self.expiry else {
            return Ok(());
        };
        let mut writes = WriteBatch::default();
        for key in expiry.expired(store, now, EXPIRE_PER_BATCH, &mut writes)? {
            for (handle, cache) in self.handles.iter().zip(&mut self.caches) {
                let prefix = key_prefix(handle, &key);
                let end = prefix_end(&prefix);
                writes.delete_ranges.push((prefix, end));
                cache.forget(&key);
            }
        }
        store.write(writes)
    }

    /// The output batch of `emits`.
    fn output(
        &self,
        side: usize,
        rel: &RecordBatch,
        o: &Other,
        emits: &[Emit],
    ) -> Result<RecordBatch> {
        // Columns of one side: its rows where present, NULL where padded.
        let columns_of = |source: &RecordBatch, pick: &dyn Fn(&Emit) -> Option<usize>| {
            let indices: Vec<(usize, usize)> = emits
                .iter()
                .map(|e| pick(e).map_or((1, 0), |i| (0, i)))
                .collect();
            source
                .columns()
                .iter()
                .map(|c| {
                    let null = new_null_array(c.data_type(), 1);
                    Ok(interleave(&[c.as_ref(), null.as_ref()], &indices)?)
                })
                .collect::<Result<Vec<ArrayRef>>>()
        };
        let input_side = columns_of(rel, &|e| e.0)?;
        let other_side = || columns_of(&o.batch, &|e| e.1);
        let mut columns = match self.spec.emitted() {
            None if side == 0 => [input_side, other_side()?].concat(),
            None => [other_side()?, input_side].concat(),
            Some((out, _)) if out == side => input_side,
            Some(_) => other_side()?,
        };
        if changelog::has_op_field(&self.output_schema) {
            columns.push(Arc::new(Int8Array::from_iter_values(
                emits.iter().map(|e| e.2.code()),
            )));
        } else if emits.iter().any(|e| e.2 != Op::Insert) {
            return Err(EngineError::Internal(format!(
                "{} retracted a row of an append-only result",
                self.spec.description
            )));
        }
        output_batch(&self.output_schema, columns, emits.len())
    }
}

fn take_all(batch: &RecordBatch, indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    batch
        .columns()
        .iter()
        .map(|c| Ok(take(c.as_ref(), indices, None)?))
        .collect()
}

impl Operator for StreamJoinOperator {
    fn name(&self) -> &str {
        "StreamJoin"
    }

    fn process_batch(&mut self, batch: RecordBatch, input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let side = input.min(1);
        let other = 1 - side;
        let store = self.handles[side].store()?;
        let now = now_ms();
        self.expire(store.as_ref(), now)?;
        let (rel, signs) = changelog::signed(&batch, self.spec.side(side).updating)?;
        let n = rel.num_rows();
        let key_columns = self
            .spec
            .side(side)
            .keys
            .iter()
            .map(|k| k.evaluate(&rel).and_then(|v| v.into_array(n)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let key_rows = self.keys.convert_columns(&key_columns)?;
        let null_key: Vec<bool> = (0..n)
            .map(|r| key_columns.iter().any(|c| c.is_null(r)))
            .collect();
        if self.filters[other].needs_rebuild() {
            self.filters[other].rebuild(&self.handles[other], store.as_ref())?;
            let left = self.side_budget.saturating_sub(self.filters[other].bytes());
            self.caches[other].set_budget(left);
        }
        let mut cache = std::mem::take(&mut self.caches[other]);
        let mut o = self.other_rows(
            &mut cache,
            &self.filters[other],
            other,
            &key_rows,
            &null_key,
            store.as_ref(),
        )?;
        let (offsets, list) = self.matches(side, &rel, &o)?;

        // This side's entries of the batch's rows. An inserted row is a new entry under a
        // sequence number of its own: nothing is read (a read that nearly always misses was
        // the join's largest cost, profiled on Nexmark q4). A retraction takes a live copy of
        // its row: one inserted earlier in the batch, or a stored one, read by the row's hash.
        let rows = self.rows[side].convert_columns(rel.columns())?;
        let handle = &self.handles[side];
        let runs = self.spec.appends_runs(side);
        // Each row's key prefix (its join key and hash), computed once (a side of runs
        // writes its rows by key after the batch).
        let mut prefixes: Vec<Vec<u8>> = if runs {
            Vec::new()
        } else {
            (0..n)
                .map(|r| row_prefix(handle, key_rows.row(r).data(), rows.row(r).data()))
                .collect()
        };
        let mut mine: Vec<Entry> = Vec::with_capacity(n);
        // Per row hash prefix (only when the batch retracts): the entries with it, and how
        // many copies each has left as the rows before are applied.
        let mut candidates: HashMap<Vec<u8>, Vec<usize>> = HashMap::default();
        let mut left: Vec<i64> = Vec::new();
        let retracts = signs.iter().any(|&s| s < 0);
        if retracts {
            let mut ranges = Vec::new();
            for r in (0..n).filter(|&r| signs[r] < 0) {
                let prefix = prefixes[r].clone();
                if let datafusion::common::hash_map::Entry::Vacant(v) = candidates.entry(prefix) {
                    ranges.push((v.key().clone(), prefix_end(v.key())));
                    v.insert(Vec::new());
                }
            }
            let read = store.scan_each(&ranges, usize::MAX)?;
            for ((prefix, _), stored) in ranges.iter().zip(read) {
                let list = candidates.get_mut(prefix).ok_or_else(|| {
                    EngineError::Internal("join retraction prefix not listed".into())
                })?;
                for (k, v) in stored {
                    let e = Entry::stored(k, v)?;
                    left.push(e.count);
                    list.push(mine.len());
                    mine.push(e);
                }
            }
        }
        let mut row_entry = Vec::with_capacity(n);
        let first_seq = self.next_seq;
        for (r, &sign) in signs.iter().enumerate() {
            let row = rows.row(r).data();
            if runs {
                row_entry.push(mine.len());
                mine.push(Entry::absent());
                continue;
            }
            if sign > 0 {
                let prefix = std::mem::take(&mut prefixes[r]);
                if retracts {
                    candidates
                        .entry(prefix.clone())
                        .or_default()
                        .push(mine.len());
                    left.push(1);
                }
                row_entry.push(mine.len());
                mine.push(Entry::inserted(numbered(prefix, self.next_seq), row));
                self.next_seq += 1;
                continue;
            }
            let copy = candidates.get(&prefixes[r]).and_then(|list| {
                list.iter()
                    .copied()
                    .find(|&i| left[i] > 0 && mine[i].row() == row)
            });
            match copy {
                Some(i) => {
                    left[i] -= 1;
                    row_entry.push(i);
                }
                None => {
                    // Nothing to take back: the entry has no copies (apply skips it).
                    left.push(0);
                    row_entry.push(mine.len());
                    mine.push(Entry::absent());
                }
            }
        }
        let emits = self.apply(side, &signs, &mut mine, &row_entry, &mut o, &offsets, &list);

        let mut writes = WriteBatch::default();
        if runs {
            self.write_runs(side, &key_rows, &rows, &o, &mut writes);
        } else {
            for e in mine.into_iter().filter(|e| e.dirty) {
                e.into_write(&mut writes)?;
            }
        }
        for e in o.entries.iter().filter(|e| e.dirty) {
            e.clone().into_write(&mut writes)?;
        }
        if self.next_seq != first_seq {
            writes.puts.push(seq_entry(&self.seq_key, self.next_seq));
        }
        if let Some(expiry) = &self.expiry {
            let touched = (0..n)
                .filter(|&r| !null_key[r])
                .map(|r| key_rows.row(r).data());
            expiry.touch(store.as_ref(), touched, now, &mut writes)?;
        }
        store.write(writes)?;
        let filter = &mut self.filters[side];
        for r in (0..n).filter(|&r| !null_key[r] && signs[r] > 0) {
            filter.insert(key_rows.row(r).data());
        }
        // The other side's keys read by this batch are exact in `o` (after the batch's
        // changes); this side's keys changed without being read whole are not.
        for &(r, (start, end), fresh) in &o.keys {
            let entries = &o.entries[start..end];
            if fresh || entries.iter().any(|e| e.dirty) {
                cache.put(key_rows.row(r).data(), entries.iter());
            }
        }
        self.caches[other] = cache;
        let mine_cache = &mut self.caches[side];
        if !mine_cache.is_empty() {
            for r in (0..n).filter(|&r| !null_key[r]) {
                mine_cache.forget(key_rows.row(r).data());
            }
        }
        if !emits.is_empty() {
            out.emit(self.output(side, &rel, &o, &emits)?);
        }
        Ok(())
    }
}
