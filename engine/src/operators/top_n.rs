//! `TopNOperator`: Top-N and deduplication without windows,
//! `ROW_NUMBER() OVER (PARTITION BY keys ORDER BY ...) <= N` over an unbounded or updating
//! input (DESIGN.md §8; Flink's `RetractableTopN` / `AppendOnlyTopN` / `Deduplicate`,
//! RisingWave's `GroupTopN`).
//!
//! - input: rows routed by the keyed exchange on the partition keys (one instance without
//!   any), append-only or updating.
//! - order: the ORDER BY, then every column of the row ascending with NULLs first (the tie
//!   rule of the window Top-N), so the ranking does not depend on arrival order. Without an
//!   ORDER BY over an append-only input, rows rank in order of arrival: the first N rows of
//!   each partition are kept (deduplication keeping the first row, Flink's on processing
//!   time), each emitted once as it arrives, so that output is append-only.
//! - state ([`state`] has the layout): each partition's rows in rank order in the task's
//!   store, written through after each batch. With an append-only input a row pushed below
//!   rank N can never come back, so only the top N are kept, and the partitions worked on
//!   lately stay in memory ([`cache`]), written back at barriers; an updating input keeps
//!   every live row, as a retracted top row is replaced by the next one. In arrival order, only a
//!   count of rows kept per partition. Restored in place or re-routed by the partition keys.
//! - output: after each batch, each touched partition compares its rows at ranks
//!   `first..=last` before and after: a rank whose row changed emits `-U` of the old row and
//!   `+U` of the new one, a rank that emptied `-D`, a new rank `+I`, each with its number.
//!   With `at_end` (a bounded input outside streaming mode), nothing is emitted until the end
//!   of input, when every partition's final rows are emitted once (append-only).
//! - with `state_ttl`, a partition not touched for that long (processing time) is dropped,
//!   without retractions ([`crate::state::ttl`]).
//! - watermarks pass through.

mod cache;
mod state;

use datafusion::common::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, Int8Array, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{take, SortOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use crate::changelog::{self, Op};
use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::operator::{Operator, Output, MAX_BATCH_ROWS};
use crate::operators::group_aggregate::EXPIRE_PER_BATCH;
use crate::state::ttl::now_ms;
use crate::state::{
    copy_routed, count_of, just_after, prefix_end, Entries, KeyExpiry, StateBackend, StateHandle,
    WriteBatch,
};
use cache::{Top, TopCache};
use state::{key_of, partition_of, Keys};

/// Rows of partitions not cached that one append-only batch reads from the store together
/// (through one iterator: [`StateBackend::scan_each`]).
const READ_TOGETHER_ROWS: u64 = 64 * 1024;

/// The plan node of a Top-N without windows.
#[derive(Debug, Clone)]
pub struct TopNSpec {
    /// The relation the input carries (without change kinds).
    pub input_schema: SchemaRef,
    pub input_updating: bool,
    /// PARTITION BY, evaluated on the input; the keyed exchange routes rows by them.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// ORDER BY (empty: arrival order over an append-only input).
    pub order: Vec<PhysicalSortExpr>,
    /// Row numbers kept: `first..=last` (1-based).
    pub first: u64,
    pub last: u64,
    /// Emit each partition's final rows once, at the end of input.
    pub at_end: bool,
    /// The query's output leaves the row number out: after a batch, emit the rows that left
    /// the top (`-U`/`-D`) and entered it (`+U`/`+I`), not every rank whose row changed (a
    /// row entering at the top would otherwise shift, and re-emit, every rank below it). The
    /// row-number column then holds the row's rank at that time.
    pub emit_rows: bool,
    /// The input's columns and the row number.
    pub output_schema: SchemaRef,
    /// Drop a partition when it is not touched for this long.
    pub state_ttl: Option<Duration>,
    pub description: String,
}

impl TopNSpec {
    /// Whether the result is an updating stream: rows change rank unless the ranking is the
    /// arrival order of an append-only input, or the result is emitted once at the end.
    pub fn updates(input_updating: bool, ordered: bool, at_end: bool) -> bool {
        !at_end && (ordered || input_updating)
    }

    fn arrival(&self) -> bool {
        self.order.is_empty() && !self.input_updating
    }

    fn updating(&self) -> bool {
        Self::updates(self.input_updating, !self.order.is_empty(), self.at_end)
    }
}

impl OperatorFactory for TopNSpec {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if self.last < self.first || self.first == 0 {
            return Err(EngineError::Internal(format!(
                "Top-N keeps rows {}..={}",
                self.first, self.last
            )));
        }
        let keys = if self.keys.is_empty() {
            None
        } else {
            let fields = self
                .keys
                .iter()
                .map(|k| Ok(SortField::new(k.data_type(&self.input_schema)?)))
                .collect::<Result<Vec<_>>>()?;
            Some(RowConverter::new(fields)?)
        };
        let mut fields = self
            .order
            .iter()
            .map(|o| {
                Ok(SortField::new_with_options(
                    o.expr.data_type(&self.input_schema)?,
                    o.options,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let ties = SortOptions {
            descending: false,
            nulls_first: true,
        };
        fields.extend(
            self.input_schema
                .fields()
                .iter()
                .map(|f| SortField::new_with_options(f.data_type().clone(), ties)),
        );
        if let Some(restore) = task.state.restore() {
            if let Some((instance, parallelism)) = restore.repartition {
                copy_routed(
                    &task.state,
                    &restore.stores,
                    keys.as_ref(),
                    |suffix| key_of(suffix).map(Some),
                    instance,
                    parallelism,
                )?;
            }
        }
        let relation = Arc::clone(&self.output_schema);
        let output_schema = if self.updating() {
            changelog::with_op_field(&relation)
        } else {
            relation
        };
        Ok(Box::new(TopNOperator {
            cache: TopCache::new(task.state.memory_budget()),
            expiry: self.state_ttl.map(|ttl| KeyExpiry::new(&task.state, ttl)),
            spec: self.clone(),
            handle: task.state.clone(),
            keys,
            ranked: RowConverter::new(fields)?,
            output_schema,
        }))
    }
}

/// A running Top-N (see the module doc).
pub struct TopNOperator {
    spec: TopNSpec,
    handle: StateHandle,
    /// Encodes partition keys; `None` without keys (one partition).
    keys: Option<RowConverter>,
    /// Encodes a row's rank: the ORDER BY values, then the row (which decodes back).
    ranked: RowConverter,
    output_schema: SchemaRef,
    /// With `state_ttl`: when partitions were last touched.
    expiry: Option<KeyExpiry>,
    /// Append-only input: the partitions worked on lately.
    cache: TopCache,
}

/// A row of the output: its rank encoding, its number and change kind.
type Emit = (Vec<u8>, u64, Op);

/// A partition's changes in one batch: (store key, net change), in key order, each key once
/// (after [`consolidate`]).
type Delta = Vec<(Vec<u8>, i64)>;

/// Sorts a partition's changes by key and sums those of one key. Most partitions get one
/// row per batch; a map per partition cost an allocation and a hash of the whole row each
/// (Nexmark q18).
fn consolidate(delta: &mut Delta) {
    if delta.len() < 2 {
        return;
    }
    delta.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut out: Delta = Vec::with_capacity(delta.len());
    for (key, change) in delta.drain(..) {
        match out.last_mut() {
            Some((last, sum)) if *last == key => *sum += change,
            _ => out.push((key, change)),
        }
    }
    *delta = out;
}

impl TopNOperator {
    fn keys(&self) -> Keys<'_> {
        Keys {
            handle: &self.handle,
        }
    }

    /// The partition key row of each input row (empty rows without keys).
    fn partitions(&self, rel: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let n = rel.num_rows();
        let Some(converter) = &self.keys else {
            return Ok(vec![Vec::new(); n]);
        };
        let columns = self
            .spec
            .keys
            .iter()
            .map(|k| k.evaluate(rel).and_then(|v| v.into_array(n)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = converter.convert_columns(&columns)?;
        Ok(rows.iter().map(|r| r.data().to_vec()).collect())
    }

    /// The first rows of each partition under `prefixes`, read together.
    fn read_tops<'a>(
        &self,
        store: &dyn StateBackend,
        prefixes: impl Iterator<Item = &'a Vec<u8>>,
    ) -> Result<HashMap<Vec<u8>, Top>> {
        let last = self.spec.last;
        let ranges: Vec<(Vec<u8>, Vec<u8>)> =
            prefixes.map(|p| (p.clone(), prefix_end(p))).collect();
        let limit = usize::try_from(last).unwrap_or(usize::MAX);
        let read = store.scan_each(&ranges, limit)?;
        Ok(ranges
            .into_iter()
            .zip(read)
            .map(|((p, _), entries)| (p, top_of(entries, last)))
            .collect())
    }

    /// The first rows of a partition, as (rank encoding, count) up to `last` rows.
    fn top(&self, store: &dyn StateBackend, prefix: &[u8]) -> Result<Top> {
        read_top(store, prefix, self.spec.last)
    }

    /// Append-only input: a partition's top rows after the batch's rows `added` (keys and
    /// counts) joined its top rows `before`.
    fn merged(&self, before: &Top, added: &Delta) -> Top {
        use std::cmp::Ordering::{Equal, Greater, Less};
        // Both lists are in key order, each key once: one walk over both, copying only the
        // keys kept.
        let (mut b, mut a) = (before.iter().peekable(), added.iter().peekable());
        let mut rows = Vec::new();
        let mut seen = 0u64;
        loop {
            let order = match (b.peek(), a.peek()) {
                (None, None) => break,
                (Some(_), None) => Less,
                (None, Some(_)) => Greater,
                (Some((kb, _)), Some((ka, _))) => kb.cmp(ka),
            };
            let next = match order {
                Less => b.next().map(|(k, c)| (k, *c)),
                Greater => a.next().map(|(k, c)| (k, *c)),
                Equal => b
                    .next()
                    .zip(a.next())
                    .map(|((k, cb), (_, ca))| (k, cb + ca)),
            };
            let Some((key, count)) = next else { break };
            if count > 0 {
                rows.push((key.clone(), count));
                seen = seen.saturating_add(count as u64);
                if seen >= self.spec.last {
                    break;
                }
            }
        }
        rows
    }

    /// The rows at ranks `first..=last` of a partition's top entries: (key, number).
    fn ranks<'a>(&self, top: &'a [(Vec<u8>, i64)]) -> Vec<(&'a [u8], u64)> {
        let mut out = Vec::new();
        let mut rank = 0u64;
        for (k, count) in top {
            for _ in 0..(*count).max(0) {
                rank += 1;
                if rank > self.spec.last {
                    return out;
                }
                if rank >= self.spec.first {
                    out.push((k.as_slice(), rank));
                }
            }
        }
        out
    }

    /// Updating input: applies the batch's net changes to the stored rows, returning each
    /// partition's top rows before (when the output is `updating`) and after.
    fn write_through(
        &self,
        prefixes: &[Vec<u8>],
        deltas: &[Delta],
        updating: bool,
        store: &dyn StateBackend,
    ) -> Result<(Vec<Top>, Vec<Top>)> {
        let before = if updating {
            prefixes
                .iter()
                .map(|p| self.top(store, p))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let mut writes = WriteBatch::default();
        for (key, delta) in deltas.iter().flatten() {
            if *delta == 0 {
                continue;
            }
            let had = store.get(key)?.map_or(0, |v| count_of(&v));
            let has = had + delta;
            if has > 0 {
                writes.puts.push((key.clone(), has.to_le_bytes().to_vec()));
            } else if had != 0 {
                writes.delete_ranges.push((key.clone(), just_after(key)));
            }
        }
        store.write(writes)?;
        let after = prefixes
            .iter()
            .map(|p| self.top(store, p))
            .collect::<Result<Vec<_>>>()?;
        Ok((before, after))
    }

    /// Arrival order: the first rows of each partition, numbered as they come.
    fn arrive(&self, rel: &RecordBatch, parts: &[Vec<u8>], out: &mut Output) -> Result<()> {
        let store = self.handle.store()?;
        let mut kept: HashMap<Vec<u8>, (u64, bool)> = HashMap::default();
        let mut rows = Vec::new();
        let mut numbers = Vec::new();
        for (r, part) in parts.iter().enumerate() {
            let key = self.keys().counter(part);
            let entry = match kept.get_mut(&key) {
                Some(e) => e,
                None => {
                    let n = store.get(&key)?.map_or(0, |v| count_of(&v) as u64);
                    kept.entry(key).or_insert((n, false))
                }
            };
            if entry.0 < self.spec.last {
                entry.0 += 1;
                entry.1 = true;
                if entry.0 >= self.spec.first {
                    rows.push(r as u32);
                    numbers.push(entry.0);
                }
            }
        }
        let mut writes = WriteBatch::default();
        for (key, (n, changed)) in kept {
            if changed {
                writes.puts.push((key, (n as i64).to_le_bytes().to_vec()));
            }
        }
        store.write(writes)?;
        if rows.is_empty() {
            return Ok(());
        }
        let indices = UInt32Array::from(rows);
        let mut columns = rel
            .columns()
            .iter()
            .map(|c| Ok(take(c.as_ref(), &indices, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        columns.push(Arc::new(UInt64Array::from(numbers)));
        out.emit(self.batch(columns, indices.len())?);
        Ok(())
    }

    /// Output rows from their rank encodings.
    fn output(&self, emits: &[Emit]) -> Result<RecordBatch> {
        let parser = self.ranked.parser();
        let decoded = self
            .ranked
            .convert_rows(emits.iter().map(|e| parser.parse(&e.0)))?;
        let row_columns = self.spec.input_schema.fields().len();
        let mut columns: Vec<ArrayRef> = decoded[decoded.len() - row_columns..].to_vec();
        columns.push(Arc::new(UInt64Array::from_iter_values(
            emits.iter().map(|e| e.1),
        )));
        if self.spec.updating() {
            columns.push(Arc::new(Int8Array::from_iter_values(
                emits.iter().map(|e| e.2.code()),
            )));
        }
        self.batch(columns, emits.len())
    }

    fn batch(&self, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }

    /// The output's changes from a partition's top rows `before` to `after`: each rank
    /// whose row changed as `-U`/`+U`, ranks that appeared or went as `+I`/`-D` (or, with
    /// `emit_rows`, row by row).
    fn changes(&self, before: &Top, after: &Top, emits: &mut Vec<Emit>) -> Result<()> {
        let (b, a) = (self.ranks(before), self.ranks(after));
        if self.spec.emit_rows {
            return self.row_changes(&b, &a, emits);
        }
        for i in 0..b.len().max(a.len()) {
            match (b.get(i), a.get(i)) {
                (Some(old), Some(new)) if old.0 != new.0 => {
                    emits.push((self.rank_of(old.0)?.to_vec(), old.1, Op::UpdateBefore));
                    emits.push((self.rank_of(new.0)?.to_vec(), new.1, Op::UpdateAfter));
                }
                (Some(old), None) => emits.push((self.rank_of(old.0)?.to_vec(), old.1, Op::Delete)),
                (None, Some(new)) => emits.push((self.rank_of(new.0)?.to_vec(), new.1, Op::Insert)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The rows of `before` not in `after` (as a multiset) and those of `after` not in
    /// `before`: pairs of them as `-U`/`+U`, the rest as `-D` or `+I`.
    fn row_changes(
        &self,
        before: &[(&[u8], u64)],
        after: &[(&[u8], u64)],
        emits: &mut Vec<Emit>,
    ) -> Result<()> {
        let mut balance: HashMap<&[u8], i64> = HashMap::default();
        for (key, _) in after {
            *balance.entry(*key).or_default() += 1;
        }
        for (key, _) in before {
            *balance.entry(*key).or_default() -= 1;
        }
        let mut left = Vec::new();
        for (key, rank) in before {
            if let Some(n) = balance.get_mut(key).filter(|n| **n < 0) {
                *n += 1;
                left.push((*key, *rank));
            }
        }
        let mut entered = Vec::new();
        for (key, rank) in after {
            if let Some(n) = balance.get_mut(key).filter(|n| **n > 0) {
                *n -= 1;
                entered.push((*key, *rank));
            }
        }
        for i in 0..left.len().max(entered.len()) {
            match (left.get(i), entered.get(i)) {
                (Some(old), Some(new)) => {
                    emits.push((self.rank_of(old.0)?.to_vec(), old.1, Op::UpdateBefore));
                    emits.push((self.rank_of(new.0)?.to_vec(), new.1, Op::UpdateAfter));
                }
                (Some(old), None) => emits.push((self.rank_of(old.0)?.to_vec(), old.1, Op::Delete)),
                (None, Some(new)) => emits.push((self.rank_of(new.0)?.to_vec(), new.1, Op::Insert)),
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The rank encoding of a stored key (after the partition's prefix).
    fn rank_of<'a>(&self, key: &'a [u8]) -> Result<&'a [u8]> {
        Ok(partition_of(&key[self.handle.prefix_len()..])?.1)
    }
}

/// The first rows of the partition with rows under `prefix`, as (rank encoding, count), up
/// to `last` rows.
fn read_top(store: &dyn StateBackend, prefix: &[u8], last: u64) -> Result<Top> {
    let limit = usize::try_from(last).unwrap_or(usize::MAX);
    Ok(top_of(
        store.scan_first(prefix, &prefix_end(prefix), limit)?,
        last,
    ))
}

/// A partition's first entries read from the store, up to `last` rows.
fn top_of(entries: Entries, last: u64) -> Top {
    let mut rows = Vec::new();
    let mut seen = 0u64;
    for (k, v) in entries {
        let count = count_of(&v);
        rows.push((k, count));
        seen = seen.saturating_add(count.max(0) as u64);
        if seen >= last {
            break;
        }
    }
    rows
}

impl Operator for TopNOperator {
    fn name(&self) -> &str {
        "TopN"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let store = self.handle.store()?;
        let now = now_ms();
        if let Some(expiry) = &self.expiry {
            let mut writes = WriteBatch::default();
            for part in expiry.expired(store.as_ref(), now, EXPIRE_PER_BATCH, &mut writes)? {
                let prefix = self.keys().rows(&part);
                self.cache.forget(&prefix);
                let end = prefix_end(&prefix);
                writes.delete_ranges.push((prefix, end));
                let counter = self.keys().counter(&part);
                let end = just_after(&counter);
                writes.delete_ranges.push((counter, end));
            }
            store.write(writes)?;
        }
        let (rel, signs) = changelog::signed(&batch, self.spec.input_updating)?;
        let parts = self.partitions(&rel)?;
        if let Some(expiry) = &self.expiry {
            let mut writes = WriteBatch::default();
            expiry.touch(
                store.as_ref(),
                parts.iter().map(Vec::as_slice),
                now,
                &mut writes,
            )?;
            store.write(writes)?;
        }
        if self.spec.arrival() {
            return self.arrive(&rel, &parts, out);
        }
        let n = rel.num_rows();
        let mut values = self
            .spec
            .order
            .iter()
            .map(|o| o.expr.evaluate(&rel).and_then(|v| v.into_array(n)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        values.extend(rel.columns().iter().cloned());
        let ranked = self.ranked.convert_columns(&values)?;

        // Net change per stored row, by partition in order of first appearance.
        let mut prefixes: Vec<Vec<u8>> = Vec::new();
        let mut deltas: Vec<Delta> = Vec::new();
        let mut index: HashMap<&[u8], usize> = HashMap::default();
        for (r, part) in parts.iter().enumerate() {
            // Without partition keys every row is in the one partition, and its empty key is
            // not looked up (comparing empty keys costs a microcode assist each, see
            // `state::same_bytes`).
            let p = match (&self.keys, prefixes.is_empty()) {
                (None, false) => 0,
                _ => *index.entry(part.as_slice()).or_insert_with(|| {
                    prefixes.push(self.keys().rows(part));
                    deltas.push(Delta::new());
                    prefixes.len() - 1
                }),
            };
            let mut key = prefixes[p].clone();
            key.extend_from_slice(ranked.row(r).data());
            deltas[p].push((key, signs[r]));
        }
        deltas.iter_mut().for_each(consolidate);
        let updating = self.spec.updating();
        let mut emits: Vec<Emit> = Vec::new();
        if self.spec.input_updating {
            let (before, after) =
                self.write_through(&prefixes, &deltas, updating, store.as_ref())?;
            if updating {
                for (b, a) in before.iter().zip(&after) {
                    self.changes(b, a, &mut emits)?;
                }
            }
        } else {
            // One partition at a time out of the cache and back: memory holds one copy of
            // each partition's rows, not the batch's partitions before and after at once.
            // Those not cached are read from the store together, up to about
            // `READ_TOGETHER_ROWS` rows at a time.
            let last = self.spec.last;
            let together = usize::try_from(READ_TOGETHER_ROWS / last.max(1))
                .unwrap_or(usize::MAX)
                .max(1);
            let mut parts = prefixes.into_iter().zip(&deltas).peekable();
            while parts.peek().is_some() {
                let chunk: Vec<_> = parts.by_ref().take(together).collect();
                let mut read = self.read_tops(
                    store.as_ref(),
                    chunk
                        .iter()
                        .map(|(p, _)| p)
                        .filter(|p| !self.cache.contains(p)),
                )?;
                for (p, added) in chunk {
                    let taken = self.cache.take(&p, || {
                        read.remove(&p).ok_or_else(|| {
                            EngineError::Internal("Top-N partition neither cached nor read".into())
                        })
                    })?;
                    let next = self.merged(&taken.top, added);
                    if updating {
                        self.changes(&taken.top, &next, &mut emits)?;
                    }
                    self.cache.put(p, taken, next);
                }
            }
            self.cache.trim(store.as_ref())?;
        }
        if !emits.is_empty() {
            out.emit(self.output(&emits)?);
        }
        Ok(())
    }

    fn snapshot(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        self.cache.flush(self.handle.store()?.as_ref())?;
        Ok(None)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        if !self.spec.at_end || self.spec.arrival() {
            return Ok(());
        }
        // Every partition's final rows, in key order, a chunk of the store at a time.
        let store = self.handle.store()?;
        self.cache.flush(store.as_ref())?;
        let (mut from, end) = self.keys().all_rows();
        let mut partition: Option<Vec<u8>> = None;
        let mut rank = 0u64;
        loop {
            let chunk = store.scan_first(&from, &end, MAX_BATCH_ROWS)?;
            let Some((last_key, _)) = chunk.last() else {
                break;
            };
            from = just_after(last_key);
            let mut emits: Vec<Emit> = Vec::new();
            for (k, v) in &chunk {
                let (part, rest) = partition_of(&k[self.handle.prefix_len()..])?;
                if partition.as_deref() != Some(part) {
                    partition = Some(part.to_vec());
                    rank = 0;
                }
                for _ in 0..count_of(v).max(0) {
                    rank += 1;
                    if rank > self.spec.last {
                        break;
                    }
                    if rank >= self.spec.first {
                        emits.push((rest.to_vec(), rank, Op::Insert));
                    }
                }
            }
            if !emits.is_empty() {
                out.emit(self.output(&emits)?);
                out.flush()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod consolidate_tests {
    use super::*;

    #[test]
    fn changes_of_one_key_are_summed_and_keys_come_out_sorted() {
        let k = |s: &str| s.as_bytes().to_vec();
        let mut delta: Delta = vec![
            (k("b"), 1),
            (k("a"), 1),
            (k("b"), -1),
            (k("c"), 2),
            (k("a"), 1),
        ];
        consolidate(&mut delta);
        assert_eq!(delta, vec![(k("a"), 2), (k("b"), 0), (k("c"), 2)]);
        let mut one: Delta = vec![(k("z"), -1)];
        consolidate(&mut one);
        assert_eq!(one, vec![(k("z"), -1)]);
    }
}
