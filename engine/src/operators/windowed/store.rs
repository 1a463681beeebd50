//! How the state of windowed operators lives in the task's store.
//!
//! A window's state may be split over several *parts*, each an Arrow IPC stream of one or
//! more batches written when the window was spilled for memory or snapshotted at a barrier: partial aggregates (group
//! keys plus each accumulator's `state()` arrays) for an aggregation, buffered rows for a join
//! or the emit-order step. The operator merges them back when the window fires. Keys are
//! `prefix | end | epoch | counter`, big-endian, so the parts of a window are one key range:
//! firing reads it, dropping it is one range delete, and windows come out of a scan in order
//! of end. Parts live in the task's part files ([`crate::state::PartFiles`]), not in RocksDB:
//! they are large, written once and dropped soon (stores written before part files held them
//! as entries; a restore moves those over).

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
    decode_batches, encode_batches_to, PartRef, StateBackend, StateHandle, WriteBatch,
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
    /// known, for a window spread over buckets).
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

    /// Restored in place: finds the windows and their bytes. Parts a store written before
    /// part files holds as entries move to the part files.
    fn find_stored(&mut self) -> Result<()> {
        let (lo, hi) = self.handle.all();
        let store = self.handle.store()?;
        let old = store.scan(&lo, &hi)?;
        if !old.is_empty() {
            for (key, value) in &old {
                store.parts().put(key.clone(), value)?;
            }
            store.write(WriteBatch {
                puts: vec![],
                delete_ranges: vec![(lo.clone(), hi.clone())],
                adds: vec![],
            })?;
        }
        for (key, part) in store.parts().scan(&lo, &hi)? {
            let end = decode_end(&key[self.handle.prefix_len()..])?;
            self.add_bytes(end, part.len as usize);
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
        // Parts of a store written before part files are entries of the store.
        let mut parts: Vec<(Vec<u8>, Vec<u8>)> = old.scan(&lo, &hi)?;
        for (key, part) in old.parts().scan(&lo, &hi)? {
            parts.push((key, old.parts().read(&part)?));
        }
        for (key, bytes) in parts {
            let end = decode_end(&key[self.handle.prefix_len()..])?;
            for part in decode_batches(&bytes)? {
                let mine = route.rows_of(&part, end, instance, parallelism)?;
                if mine.is_empty() {
                    continue;
                }
                let kept = take_record_batch(&part, &UInt32Array::from(mine))?;
                let key = self.next_key(end, 0);
                self.put_part(store.as_ref(), key, end, &[kept])?;
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

    /// Writes partial states of windows (one part each: batches of one layout, written as
    /// they are, not concatenated) to the task's part files.
    pub fn write_parts(&mut self, parts: Vec<(EventTime, Vec<RecordBatch>)>) -> Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        let store = self.handle.store()?;
        for (end, part) in parts {
            if part.is_empty() {
                continue;
            }
            let key = self.next_key(end, self.epoch);
            self.put_part(store.as_ref(), key, end, &part)?;
        }
        Ok(())
    }

    /// Writes a part of the window ending at `end` under `key`.
    fn put_part(
        &mut self,
        store: &dyn StateBackend,
        key: Vec<u8>,
        end: EventTime,
        part: &[RecordBatch],
    ) -> Result<()> {
        let part = write_part(store, key, part)?;
        self.add_bytes(end, part.len as usize);
        Ok(())
    }

    fn add_bytes(&mut self, end: EventTime, bytes: usize) {
        let known = self.stored.entry(end).or_insert(Some(0));
        if let Some(known) = known {
            *known += bytes as u64;
        }
    }

    /// Bytes of the stored parts of the window ending at `end`.
    pub fn stored_bytes(&mut self, end: EventTime) -> Result<u64> {
        match self.stored.get(&end) {
            None => Ok(0),
            Some(Some(bytes)) => Ok(*bytes),
            Some(None) => {
                let (lo, hi) = self.window_range(end);
                let store = self.handle.store()?;
                let bytes = store
                    .parts()
                    .scan(&lo, &hi)?
                    .iter()
                    .map(|(_, p)| p.len)
                    .sum();
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

    /// Calls `visit` with each stored batch of the window ending at `end`, one part at a
    /// time.
    pub fn for_each_part(
        &self,
        end: EventTime,
        schema: &SchemaRef,
        mut visit: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let store = self.handle.store()?;
        let (lo, _) = self.window_range(end);
        let (spread_lo, _) = self.bucket_range(end, 0);
        for (_, part) in store.parts().scan(&lo, &spread_lo)? {
            for batch in checked_part(&store.parts().read(&part)?, schema)? {
                visit(batch)?;
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
        let mut rewrite = |part: &RecordBatch, me: &Self| -> Result<()> {
            let mut rows: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
            for (row, bucket) in assign(part)?.into_iter().enumerate() {
                rows.entry(bucket.min(MAX_BUCKETS - 1))
                    .or_default()
                    .push(row as u32);
            }
            for (bucket, rows) in rows {
                let piece = take_record_batch(part, &UInt32Array::from(rows))?;
                counter += 1;
                let mut key = me.bucket_range(end, bucket).0;
                key.extend_from_slice(&counter.to_be_bytes());
                write_part(store.as_ref(), key, &[piece])?;
            }
            Ok(())
        };
        for (key, part) in store.parts().scan(&lo, &spread_lo)? {
            for batch in decode_batches(&store.parts().read(&part)?)? {
                for slice in slices(&batch) {
                    rewrite(&slice, self)?;
                }
            }
            let mut after = key.clone();
            after.push(0);
            store.parts().delete_range(&key, &after)?;
        }
        if let Some(part) = extra {
            for slice in slices(&part) {
                rewrite(&slice, self)?;
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
        let parts = store.parts();
        let mut batches = Vec::new();
        for (_, part) in parts.scan(&lo, &hi)? {
            batches.extend(checked_part(&parts.read(&part)?, schema)?);
        }
        parts.delete_range(&lo, &hi)?;
        Ok(batches)
    }

    /// Drops whatever is left of the window ending at `end`.
    pub fn drop_window(&mut self, end: EventTime) -> Result<()> {
        if self.stored.remove(&end).is_none() {
            return Ok(());
        }
        let (lo, hi) = self.window_range(end);
        self.handle.store()?.parts().delete_range(&lo, &hi)
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

/// Writes batches of one layout to the store's part files as one part, under `key`.
fn write_part(store: &dyn StateBackend, key: Vec<u8>, batches: &[RecordBatch]) -> Result<PartRef> {
    let schema = match batches.first() {
        Some(b) => b.schema(),
        None => return Err(EngineError::Internal("an empty window part".into())),
    };
    store
        .parts()
        .put_with(key, &mut |out| encode_batches_to(out, &schema, batches))
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
        let left = handle.store().unwrap().parts().scan(&lo, &hi).unwrap();
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
        // Nothing was written to RocksDB: its checkpoint was skipped.
        assert!(!checkpoint.join("CURRENT").exists());
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
            let old = crate::state::open_checkpoint(&checkpoint).unwrap();
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

    #[test]
    fn parts_a_store_held_as_entries_are_read_in_place_and_at_another_parallelism() {
        use crate::state::{encode_batch, MemoryStateBackend, RestoreSet, TaskState};
        // A store written before part files: the part is an entry of the store.
        let legacy = || {
            let store = Arc::new(MemoryStateBackend::default());
            let mut key = vec![0u8];
            key.extend_from_slice(&encode_end(10));
            key.extend_from_slice(&1u64.to_be_bytes());
            key.extend_from_slice(&1u32.to_be_bytes());
            store
                .write(WriteBatch {
                    puts: vec![(key, encode_batch(&part(&[7, 8])).unwrap())],
                    ..WriteBatch::default()
                })
                .unwrap();
            store
        };
        let schema = part(&[]).schema();
        let open = |working: Arc<MemoryStateBackend>, restore: RestoreSet| {
            let task = TaskState::with_store(working, Some(restore));
            WindowStore::open(StateHandle::new(Arc::new(task), 0), PartRoute::Keys(1), 1).unwrap()
        };
        let old = legacy();
        let restore = RestoreSet {
            stores: vec![old.clone() as Arc<dyn StateBackend>],
            repartition: None,
        };
        let mut store = open(Arc::clone(&old), restore);
        // Moved over: the entry went, the part files hold it.
        assert!(old.scan(&[0], &[1]).unwrap().is_empty());
        assert_eq!(old.parts().scan(&[0], &[1]).unwrap().len(), 1);
        assert_eq!(values(&store.take(10, &schema).unwrap()), vec![7, 8]);
        let restore = RestoreSet {
            stores: vec![legacy() as Arc<dyn StateBackend>],
            repartition: Some((0, 1)),
        };
        let mut store = open(Arc::new(MemoryStateBackend::default()), restore);
        assert_eq!(values(&store.take(10, &schema).unwrap()), vec![7, 8]);
    }
}
