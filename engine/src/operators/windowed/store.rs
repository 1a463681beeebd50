//! How the state of windowed operators lives in the task's store.
//!
//! A window's state may be split over several *parts*, each one Arrow IPC batch written when
//! the window was spilled for memory or snapshotted at a barrier: partial aggregates (group
//! keys plus each accumulator's `state()` arrays) for an aggregation, buffered rows for a join
//! or the emit-order step. The operator merges them back when the window fires. Keys are
//! `prefix | end | epoch | counter`, big-endian, so the parts of a window are one key range:
//! firing reads it, dropping it is one range delete, and windows come out of a scan in order
//! of end. A part's bytes are in the store's part files ([`crate::state::PartFiles`]); its
//! entry holds a [`PartRef`] (stores written before part files hold the bytes themselves).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{create_hashes, RandomState};

use super::WindowBound;
use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::runtime::partition_of_rows;
use crate::state::{
    decode_batches, encode_batches_to, ChunkedWrites, PartRef, StateBackend, StateHandle,
    WriteBatch,
};

const END_LEN: usize = 8;
const KEY_LEN: usize = 1 + END_LEN + 8 + 4;

/// The most buckets a window is spread over when it fires ([`WindowStore::spread`]).
pub const MAX_BUCKETS: usize = 1 << 16;
/// Epoch label of bucket 0 of a spread window: above every real epoch, so a window's spread
/// parts follow its own in its key range (bucket `b` is labelled `SPREAD_EPOCH + b`).
const SPREAD_EPOCH: u64 = u64::MAX - MAX_BUCKETS as u64;
/// Seed of the hash that spreads keys over buckets: not the exchange's, so the keys of one
/// instance (which share their exchange hash modulo the parallelism) spread evenly.
const SPREAD_SEED: u64 = 0x7370_7265_6164_6b65;

/// Pieces to take state of `bytes` (in memory and stored) apart in, when it fires, so that
/// each piece fits in `budget` once worked on, which takes up to `factor` times its stored
/// bytes. State too small to be worth it (pieces under 64 KiB) stays whole (1).
pub fn buckets_for(bytes: u64, budget: usize, factor: u64) -> usize {
    if budget == usize::MAX || bytes.saturating_mul(factor) <= budget as u64 {
        return 1;
    }
    let wanted = bytes.saturating_mul(factor).div_ceil(budget.max(1) as u64);
    let most = (bytes / (64 << 10)).max(1);
    wanted.min(most).min(MAX_BUCKETS as u64) as usize
}

/// Buckets of `part`'s rows by a hash of its first `keys` columns, out of `buckets`: rows of
/// one key share a bucket.
pub fn hash_buckets(part: &RecordBatch, keys: usize, buckets: usize) -> Result<Vec<usize>> {
    let mut hashes = vec![0u64; part.num_rows()];
    create_hashes(
        &part.columns()[..keys.min(part.num_columns())],
        &RandomState::with_seed(SPREAD_SEED),
        &mut hashes,
    )?;
    let buckets = buckets.clamp(1, MAX_BUCKETS) as u64;
    Ok(hashes.iter().map(|h| (h % buckets) as usize).collect())
}

/// Order-preserving encoding of an event time.
fn encode_end(end: EventTime) -> [u8; END_LEN] {
    ((end as u64) ^ (1 << 63)).to_be_bytes()
}

fn decode_end(bytes: &[u8]) -> Result<EventTime> {
    let b: [u8; END_LEN] = bytes
        .get(..END_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| EngineError::State("window state key too short".into()))?;
    Ok((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// How a restore at another parallelism finds the parts' rows that belong to an instance: by
/// the same columns the keyed exchange routes rows by, hashed by [`partition_of_rows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartRoute {
    /// The first `n` columns of a part are the exchange's keys.
    Keys(usize),
    /// No keys: the exchange routes by the window column, which holds this bound of the
    /// part's window.
    Window(WindowBound),
    /// The stage runs as one instance fed by a merge: every part is instance 0's.
    Single,
}

impl PartRoute {
    /// Rows of `part` (stored under the window ending at `end`) that route to `instance`.
    fn rows_of(
        self,
        part: &RecordBatch,
        end: EventTime,
        instance: usize,
        parallelism: usize,
    ) -> Result<Vec<u32>> {
        let columns: Vec<ArrayRef> = match self {
            PartRoute::Keys(n) => part.columns()[..n].to_vec(),
            PartRoute::Window(bound) => vec![Arc::new(TimestampNanosecondArray::from_value(
                bound.value_of(end),
                part.num_rows(),
            ))],
            PartRoute::Single => {
                let all = if instance == 0 { part.num_rows() } else { 0 };
                return Ok((0..all as u32).collect());
            }
        };
        Ok(partition_of_rows(&columns, parallelism)?
            .into_iter()
            .enumerate()
            .filter(|(_, to)| *to as usize == instance)
            .map(|(row, _)| row as u32)
            .collect())
    }
}

/// The stored parts of one windowed operator instance (one side of a join).
pub struct WindowStore {
    handle: StateHandle,
    /// Ends of windows with parts in the store, with the bytes of their parts (`None`: not
    /// known, for windows found in a restored store).
    stored: BTreeMap<EventTime, Option<u64>>,
    /// Label of parts written now: the epoch they belong to.
    epoch: u64,
    counter: u32,
}

impl WindowStore {
    /// Opens the parts of a restored instance, or starts empty. With a repartitioned
    /// restore, copies the parts' rows that route to this instance into the working store.
    pub fn open(handle: StateHandle, route: PartRoute, restored_epoch: u64) -> Result<Self> {
        let mut me = Self {
            handle,
            stored: BTreeMap::new(),
            epoch: restored_epoch + 1,
            counter: 0,
        };
        let Some(restore) = me.handle.restore() else {
            return Ok(me);
        };
        match restore.repartition {
            None => me.find_stored()?,
            Some((instance, parallelism)) => {
                let sources: Vec<Arc<dyn StateBackend>> = restore.stores.clone();
                for old in sources {
                    me.copy_mine(old.as_ref(), route, instance, parallelism)?;
                }
            }
        }
        Ok(me)
    }

    /// Restored in place: finds the windows and their bytes, and holds the part files
    /// their entries refer to.
    fn find_stored(&mut self) -> Result<()> {
        let (lo, hi) = self.handle.all();
        let store = self.handle.store()?;
        for (key, value) in store.scan(&lo, &hi)? {
            let end = decode_end(&key[self.handle.prefix_len()..])?;
            let bytes = match PartRef::decode(&value) {
                Some(part) => {
                    store.parts().retain(&part)?;
                    part.len
                }
                None => value.len() as u64,
            };
            self.add_bytes(end, bytes as usize);
        }
        Ok(())
    }

    /// Copies the rows of `old`'s parts that route to `instance` into the working store.
    fn copy_mine(
        &mut self,
        old: &dyn StateBackend,
        route: PartRoute,
        instance: usize,
        parallelism: usize,
    ) -> Result<()> {
        let (lo, hi) = self.handle.all();
        let store = self.handle.store()?;
        for (key, value) in old.scan(&lo, &hi)? {
            let end = decode_end(&key[self.handle.prefix_len()..])?;
            for part in decode_batches(&part_bytes(old, value)?)? {
                let mine = route.rows_of(&part, end, instance, parallelism)?;
                if mine.is_empty() {
                    continue;
                }
                let kept = take_record_batch(&part, &UInt32Array::from(mine))?;
                let key = self.next_key(end, 0);
                let value = self.put_part(store.as_ref(), end, &[kept])?;
                store.write(WriteBatch {
                    puts: vec![(key, value)],
                    delete_ranges: vec![],
                    adds: vec![],
                })?;
            }
        }
        Ok(())
    }

    fn next_key(&mut self, end: EventTime, epoch: u64) -> Vec<u8> {
        self.counter += 1;
        let mut suffix = Vec::with_capacity(KEY_LEN - 1);
        suffix.extend_from_slice(&encode_end(end));
        suffix.extend_from_slice(&epoch.to_be_bytes());
        suffix.extend_from_slice(&self.counter.to_be_bytes());
        self.handle.key(&suffix)
    }

    /// Writes partial states of windows (one part each) in writes of a few megabytes
    /// ([`ChunkedWrites`]): the parts of all windows together sat in RocksDB's write batch and
    /// then in one oversized memtable. No atomicity is needed: the store is read back by this
    /// operator or through a checkpoint taken after the last write. (Cutting large parts
    /// into 1 MB pieces as well made q7 at parallelism 1 from files, which spills, take
    /// minutes instead of 4 s; why, in the firing of many-part windows, is not known yet.)
    pub fn write_parts(&mut self, parts: Vec<(EventTime, Vec<RecordBatch>)>) -> Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        let store = self.handle.store()?;
        let mut writes = ChunkedWrites::new(store.as_ref());
        for (end, part) in parts {
            if part.is_empty() {
                continue;
            }
            let key = self.next_key(end, self.epoch);
            let value = self.put_part(store.as_ref(), end, &part)?;
            writes.put(key, value)?;
        }
        writes.finish()
    }

    /// Writes a part of the window ending at `end` (batches of one layout, written as they
    /// are: not concatenated) to the part files; returns its entry's value.
    fn put_part(
        &mut self,
        store: &dyn StateBackend,
        end: EventTime,
        part: &[RecordBatch],
    ) -> Result<Vec<u8>> {
        let part = write_part(store, part)?;
        self.add_bytes(end, part.len as usize);
        Ok(part.encode())
    }

    fn add_bytes(&mut self, end: EventTime, bytes: usize) {
        let known = self.stored.entry(end).or_insert(Some(0));
        if let Some(known) = known {
            *known += bytes as u64;
        }
    }

    /// Bytes of the stored parts of the window ending at `end` (read from the store when not
    /// known: a window of a restored store).
    pub fn stored_bytes(&mut self, end: EventTime) -> Result<u64> {
        match self.stored.get(&end) {
            None => Ok(0),
            Some(Some(bytes)) => Ok(*bytes),
            Some(None) => {
                let (lo, hi) = self.window_range(end);
                let store = self.handle.store()?;
                let mut bytes = 0u64;
                for (_, value) in store.scan(&lo, &hi)? {
                    bytes += PartRef::decode(&value).map_or(value.len() as u64, |p| p.len);
                }
                self.stored.insert(end, Some(bytes));
                Ok(bytes)
            }
        }
    }

    /// The key range of every part of the window ending at `end`.
    fn window_range(&self, end: EventTime) -> (Vec<u8>, Vec<u8>) {
        let lo = self.handle.key(&encode_end(end));
        let hi = match end.checked_add(1) {
            Some(next) => self.handle.key(&encode_end(next)),
            None => self.handle.all().1,
        };
        (lo, hi)
    }

    /// The key range of bucket `bucket` of the window ending at `end`, once spread.
    fn bucket_range(&self, end: EventTime, bucket: usize) -> (Vec<u8>, Vec<u8>) {
        let at = |epoch: u64| {
            let mut suffix = Vec::with_capacity(KEY_LEN - 1);
            suffix.extend_from_slice(&encode_end(end));
            suffix.extend_from_slice(&epoch.to_be_bytes());
            self.handle.key(&suffix)
        };
        let label = SPREAD_EPOCH + bucket as u64;
        (at(label), at(label + 1))
    }

    /// Calls `visit` with each stored part of the window ending at `end`, one at a time.
    pub fn for_each_part(
        &self,
        end: EventTime,
        schema: &SchemaRef,
        mut visit: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let store = self.handle.store()?;
        let (lo, _) = self.window_range(end);
        let (spread_lo, _) = self.bucket_range(end, 0);
        for key in part_keys(store.as_ref(), &lo, &spread_lo)? {
            if let Some(value) = store.get(&key)? {
                for part in checked_part(&part_bytes(store.as_ref(), value)?, schema)? {
                    visit(part)?;
                }
            }
        }
        Ok(())
    }

    /// Rewrites the stored parts of the window ending at `end`, and `extra` (what it holds in
    /// memory), spread over buckets: `assign` gives each row of a part its bucket (below
    /// [`MAX_BUCKETS`]). Each bucket can then be taken on its own ([`Self::take_bucket`]).
    /// Reads and rewrites one part at a time. A spread window is only ever taken, bucket by
    /// bucket, then dropped ([`Self::drop_window`]), between two barriers: no checkpoint
    /// sees the spread parts.
    pub fn spread(
        &mut self,
        end: EventTime,
        extra: Option<RecordBatch>,
        assign: &mut dyn FnMut(&RecordBatch) -> Result<Vec<usize>>,
    ) -> Result<()> {
        let store = self.handle.store()?;
        let (lo, _) = self.window_range(end);
        let (spread_lo, _) = self.bucket_range(end, 0);
        let mut counter = 0u32;
        let mut rewrite = |part: &RecordBatch, me: &Self| -> Result<WriteBatch> {
            let mut rows: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
            for (row, bucket) in assign(part)?.into_iter().enumerate() {
                rows.entry(bucket.min(MAX_BUCKETS - 1))
                    .or_default()
                    .push(row as u32);
            }
            let mut batch = WriteBatch::default();
            for (bucket, rows) in rows {
                let piece = take_record_batch(part, &UInt32Array::from(rows))?;
                counter += 1;
                let mut key = me.bucket_range(end, bucket).0;
                key.extend_from_slice(&counter.to_be_bytes());
                batch
                    .puts
                    .push((key, write_part(store.as_ref(), &[piece])?.encode()));
            }
            Ok(batch)
        };
        for key in part_keys(store.as_ref(), &lo, &spread_lo)? {
            let Some(value) = store.get(&key)? else {
                continue;
            };
            for part in decode_batches(&part_bytes(store.as_ref(), value.clone())?)? {
                for slice in slices(&part) {
                    store.write(rewrite(&slice, self)?)?;
                }
            }
            let mut after = key.clone();
            after.push(0);
            store.write(WriteBatch {
                puts: vec![],
                delete_ranges: vec![(key, after)],
                adds: vec![],
            })?;
            release(store.as_ref(), &value)?;
        }
        if let Some(part) = extra {
            for slice in slices(&part) {
                store.write(rewrite(&slice, self)?)?;
            }
        }
        self.stored.insert(end, None);
        Ok(())
    }

    /// Reads and deletes bucket `bucket` of a window [`Self::spread`] before.
    pub fn take_bucket(
        &mut self,
        end: EventTime,
        bucket: usize,
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>> {
        let (lo, hi) = self.bucket_range(end, bucket);
        self.take_range(lo, hi, schema)
    }

    /// Reads and deletes the parts in `lo..hi`.
    fn take_range(&self, lo: Vec<u8>, hi: Vec<u8>, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
        let store = self.handle.store()?;
        let entries = store.scan(&lo, &hi)?;
        let mut parts = Vec::with_capacity(entries.len());
        for (_, value) in &entries {
            parts.extend(checked_part(
                &part_bytes(store.as_ref(), value.clone())?,
                schema,
            )?);
        }
        store.write(WriteBatch {
            puts: vec![],
            delete_ranges: vec![(lo, hi)],
            adds: vec![],
        })?;
        for (_, value) in &entries {
            release(store.as_ref(), value)?;
        }
        Ok(parts)
    }

    /// Drops whatever is left of the window ending at `end`.
    pub fn drop_window(&mut self, end: EventTime) -> Result<()> {
        if self.stored.remove(&end).is_none() {
            return Ok(());
        }
        let (lo, hi) = self.window_range(end);
        let store = self.handle.store()?;
        let entries = store.scan(&lo, &hi)?;
        store.write(WriteBatch {
            puts: vec![],
            delete_ranges: vec![(lo, hi)],
            adds: vec![],
        })?;
        for (_, value) in &entries {
            release(store.as_ref(), value)?;
        }
        Ok(())
    }

    /// A barrier of `epoch` passed: later parts belong to the next epoch.
    pub fn next_epoch(&mut self, epoch: u64) {
        self.epoch = epoch + 1;
        self.counter = 0;
    }

    /// Ends of stored windows at or before `watermark`, in order.
    pub fn ready(&self, watermark: EventTime) -> Vec<EventTime> {
        self.stored
            .range(..=watermark)
            .map(|(end, _)| *end)
            .collect()
    }

    /// Ends of stored windows in `from..=to`, in order.
    pub fn between(&self, from: EventTime, to: EventTime) -> impl Iterator<Item = EventTime> + '_ {
        self.stored.range(from..=to.max(from)).map(|(end, _)| *end)
    }

    /// The end of the first stored window, if any.
    pub fn first(&self) -> Option<EventTime> {
        self.stored.first_key_value().map(|(end, _)| *end)
    }

    /// Whether a window has parts in the store.
    pub fn has(&self, end: EventTime) -> bool {
        self.stored.contains_key(&end)
    }

    /// Reads and deletes the parts of the window ending at `end`.
    pub fn take(&mut self, end: EventTime, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
        if self.stored.remove(&end).is_none() {
            return Ok(Vec::new());
        }
        let (lo, hi) = self.window_range(end);
        self.take_range(lo, hi, schema)
    }
}

/// A part's bytes, from its entry's value: read from the part files it refers to, or the
/// value itself (a store written before part files).
fn part_bytes(store: &dyn StateBackend, value: Vec<u8>) -> Result<Vec<u8>> {
    match PartRef::decode(&value) {
        Some(part) => store.parts().read(&part),
        None => Ok(value),
    }
}

/// A part's entry was deleted: its part file may go.
fn release(store: &dyn StateBackend, value: &[u8]) -> Result<()> {
    match PartRef::decode(value) {
        Some(part) => store.parts().release(&part),
        None => Ok(()),
    }
}

/// Rows of `part` in slices small enough that spreading one copies little at a time.
fn slices(part: &RecordBatch) -> impl Iterator<Item = RecordBatch> + '_ {
    const ROWS: usize = 1 << 16;
    (0..part.num_rows())
        .step_by(ROWS)
        .map(move |at| part.slice(at, ROWS.min(part.num_rows() - at)))
}

/// A stored part's batches, checked against the plan's layout (stored batches carry their
/// own schema).
fn checked_part(value: &[u8], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let batches = decode_batches(value)?;
    if let Some(b) = batches
        .iter()
        .find(|b| b.num_columns() != schema.fields().len())
    {
        return Err(EngineError::State(format!(
            "stored window state has {} columns, the plan expects {}",
            b.num_columns(),
            schema.fields().len()
        )));
    }
    Ok(batches)
}

/// Writes batches of one layout to the store's part files as one part.
fn write_part(store: &dyn StateBackend, batches: &[RecordBatch]) -> Result<PartRef> {
    let schema = match batches.first() {
        Some(b) => b.schema(),
        None => return Err(EngineError::Internal("an empty window part".into())),
    };
    store
        .parts()
        .append_with(&mut |out| encode_batches_to(out, &schema, batches))
}

/// The keys in `lo..hi`, without reading values (a window has few parts, each large).
fn part_keys(store: &dyn StateBackend, lo: &[u8], hi: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut from = lo.to_vec();
    while let Some(key) = store.first_key(&from, hi)? {
        from = key.clone();
        from.push(0);
        keys.push(key);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn part(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "k0",
            Arc::new(Int64Array::from(values.to_vec())) as ArrayRef,
        )])
        .unwrap()
    }

    #[test]
    fn a_window_is_one_key_range_read_and_dropped_whole() {
        let handle = StateHandle::in_memory();
        let mut store = WindowStore::open(handle.clone(), PartRoute::Keys(1), 0).unwrap();
        store
            .write_parts(vec![(20, vec![part(&[1, 2])]), (10, vec![part(&[3])])])
            .unwrap();
        store.next_epoch(1);
        store
            .write_parts(vec![(10, vec![part(&[4]), part(&[5])])])
            .unwrap();
        assert_eq!(store.ready(15), vec![10]);
        assert_eq!(store.ready(i64::MAX), vec![10, 20]);
        let schema = part(&[]).schema();
        let taken = store.take(10, &schema).unwrap();
        let rows: usize = taken.iter().map(|b| b.num_rows()).sum();
        assert_eq!((taken.len(), rows), (3, 3));
        assert!(!store.has(10));
        assert!(store.take(10, &schema).unwrap().is_empty());
        // Only the window ending at 20 is left in the store.
        let (lo, hi) = handle.all();
        let left = handle.store().unwrap().scan(&lo, &hi).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(decode_end(&left[0].0[1..]).unwrap(), 20);
    }

    #[test]
    fn ends_keep_their_order_when_encoded() {
        let ends = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ends.windows(2) {
            assert!(encode_end(w[0]) < encode_end(w[1]));
            assert_eq!(decode_end(&encode_end(w[0])).unwrap(), w[0]);
        }
    }

    /// The values of every batch of `parts`, sorted.
    fn values(parts: &[RecordBatch]) -> Vec<i64> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::Int64Type;
        let mut v: Vec<i64> = parts
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn parts_in_files_come_back_from_a_checkpoint_in_place_and_at_another_parallelism() {
        use crate::state::{RestoreSet, RocksDbStateBackend, TaskState};
        let dir = tempfile::tempdir().unwrap();
        let task = |store: Arc<dyn StateBackend>, restore: Option<RestoreSet>| {
            StateHandle::new(Arc::new(TaskState::with_store(store, restore)), 0)
        };
        let working = RocksDbStateBackend::open_working(&dir.path().join("work")).unwrap();
        let handle = task(Arc::new(working), None);
        let mut store = WindowStore::open(handle.clone(), PartRoute::Keys(1), 0).unwrap();
        store
            .write_parts(vec![
                (10, vec![part(&[1, 2]), part(&[3])]),
                (20, vec![part(&[4])]),
            ])
            .unwrap();
        store.next_epoch(1);
        let checkpoint = dir.path().join("chk1");
        handle.store().unwrap().checkpoint_to(&checkpoint).unwrap();
        // After the checkpoint: a window fires, another gets more rows.
        let schema = part(&[]).schema();
        assert_eq!(values(&store.take(10, &schema).unwrap()), vec![1, 2, 3]);
        store.write_parts(vec![(20, vec![part(&[5])])]).unwrap();
        assert_eq!(values(&store.take(20, &schema).unwrap()), vec![4, 5]);
        drop(store);
        drop(handle);

        // In place: the checkpoint's files in a new working directory.
        let again = dir.path().join("again");
        std::fs::create_dir(&again).unwrap();
        for entry in std::fs::read_dir(&checkpoint).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), again.join(entry.file_name())).unwrap();
        }
        let restored: Arc<dyn StateBackend> =
            Arc::new(RocksDbStateBackend::open_working(&again).unwrap());
        let restore = RestoreSet {
            stores: vec![Arc::clone(&restored)],
            repartition: None,
        };
        let mut store = WindowStore::open(
            task(Arc::clone(&restored), Some(restore)),
            PartRoute::Keys(1),
            1,
        )
        .unwrap();
        assert_eq!(store.ready(i64::MAX), vec![10, 20]);
        assert_eq!(values(&store.take(10, &schema).unwrap()), vec![1, 2, 3]);
        assert_eq!(values(&store.take(20, &schema).unwrap()), vec![4]);
        // Nothing refers to the restored files any more: the next checkpoint drops them.
        restored.checkpoint_to(&dir.path().join("chk2")).unwrap();
        assert!(restored.parts().labels().unwrap().is_empty());

        // At another parallelism: each instance keeps the rows routed to it.
        let mut all = [Vec::new(), Vec::new()];
        for instance in 0..3 {
            let old: Arc<dyn StateBackend> =
                Arc::new(RocksDbStateBackend::open_read_only(&checkpoint).unwrap());
            let restore = RestoreSet {
                stores: vec![old],
                repartition: Some((instance, 3)),
            };
            let working =
                RocksDbStateBackend::open_working(&dir.path().join(format!("rescaled-{instance}")))
                    .unwrap();
            let mut store = WindowStore::open(
                task(Arc::new(working), Some(restore)),
                PartRoute::Keys(1),
                1,
            )
            .unwrap();
            for (i, end) in [10, 20].into_iter().enumerate() {
                all[i].extend(values(&store.take(end, &schema).unwrap()));
            }
        }
        all.iter_mut().for_each(|v| v.sort_unstable());
        assert_eq!(all, [vec![1, 2, 3], vec![4]]);
    }
}
