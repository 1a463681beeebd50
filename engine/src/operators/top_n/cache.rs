//! The top rows of the partitions a [`super::TopNOperator`] over an append-only input worked
//! on lately, kept in memory between barriers (Flink's `AppendOnlyTopNFunction` keeps its
//! top-N buffer in a heap cache the same way).
//!
//! With an append-only input a partition's stored rows are exactly its top N (a row pushed
//! below rank N never comes back), so the cached list is the partition's whole state. A
//! changed partition is written back at the next barrier ([`TopCache::flush`]) or when the
//! cache outgrows its share of `memory_budget` ([`TopCache::trim`]).
//!
//! A write carries the partition's changes, not the partition: each cached partition knows
//! which of its rows the store holds (one bit per row, for up to [`TRACKED`] rows) and keeps
//! the stored rows that left its top since, so a write deletes those (point deletes) and
//! puts the rows the store lacks. A partition with more rows is replaced whole (its range
//! deleted, every row put). Range tombstones, one per changed partition, slowed every later
//! read and compaction that crossed them (Nexmark q18 writes millions of partitions).

use datafusion::common::HashMap;

use crate::error::Result;
use crate::state::{just_after, prefix_end, ChunkedWrites, StateBackend};

/// A partition's top rows: (store key, count), in rank order.
pub(super) type Top = Vec<(Vec<u8>, i64)>;

/// Rows per partition whose presence in the store is tracked (bits of a `u64`).
const TRACKED: usize = 64;

/// Bytes the map spends on a partition's entry (key and [`Part`], at hashbrown's load
/// factor) and an allocation besides its bytes (mimalloc's size classes), roughly.
const ENTRY: usize = 112;
const ALLOCATION: usize = 16;

/// A partition's rows and what the store holds of them.
pub(super) struct Taken {
    pub top: Top,
    /// The store must get the partition's changes.
    pub dirty: bool,
    /// Bit `i`: the store holds row `i` of `top` with its count (when `tracked`).
    stored: u64,
    /// Bit `i`: the store holds row `i`'s key, with its count or another (when `tracked`).
    keyed: u64,
    /// Rows the store holds that are no longer in `top` (when `tracked`).
    gone: Vec<Vec<u8>>,
    /// Whether `stored` and `gone` tell the store's rows; if not, a write replaces the
    /// partition's whole range.
    tracked: bool,
}

/// The bits of rows `0..n`.
fn all_rows(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

impl Taken {
    /// A partition as the store holds it.
    fn stored(top: Top) -> Self {
        Self {
            tracked: top.len() <= TRACKED,
            stored: all_rows(top.len()),
            keyed: all_rows(top.len()),
            top,
            dirty: false,
            gone: Vec::new(),
        }
    }

    /// The partition's rows changed to `next` (in key order, as `top`): which of them the
    /// store holds, and the stored rows that left.
    fn change(self, next: Top) -> Self {
        if next == self.top {
            return self;
        }
        let Taken {
            top,
            stored,
            keyed,
            mut gone,
            tracked,
            ..
        } = self;
        let tracked = tracked && next.len() <= TRACKED;
        let (mut now_stored, mut now_keyed) = (0u64, 0u64);
        if tracked {
            let bit = |bits: u64, i: usize| bits >> i & 1 == 1;
            let mut old = top.into_iter().enumerate().peekable();
            for (j, (key, count)) in next.iter().enumerate() {
                while let Some((i, (k, _))) = old.next_if(|(_, (k, _))| k < key) {
                    if bit(keyed, i) {
                        gone.push(k);
                    }
                }
                if let Some((i, (_, c))) = old.next_if(|(_, (k, _))| k == key) {
                    // A key stored with another count is put again over it.
                    if bit(keyed, i) {
                        now_keyed |= 1 << j;
                        if bit(stored, i) && c == *count {
                            now_stored |= 1 << j;
                        }
                    }
                }
            }
            gone.extend(old.filter(|(i, _)| bit(keyed, *i)).map(|(_, (k, _))| k));
        } else {
            gone = Vec::new();
        }
        Taken {
            top: next,
            dirty: true,
            stored: now_stored,
            keyed: now_keyed,
            gone,
            tracked,
        }
    }

    /// Queues the writes that make the store hold `top` (as [`Taken::stored`] then says).
    /// `keep`: the partition stays cached (its keys are copied into the writes); otherwise
    /// they are moved there, leaving `top`'s keys empty.
    fn write(&mut self, prefix: &[u8], writes: &mut ChunkedWrites, keep: bool) -> Result<()> {
        if self.tracked {
            for key in std::mem::take(&mut self.gone) {
                let end = just_after(&key);
                writes.delete_range(key, end)?;
            }
        } else {
            writes.delete_range(prefix.to_vec(), prefix_end(prefix))?;
        }
        for (i, (k, count)) in self.top.iter_mut().enumerate() {
            if !self.tracked || i >= TRACKED || self.stored >> i & 1 == 0 {
                let key = if keep { k.clone() } else { std::mem::take(k) };
                writes.put(key, count.to_le_bytes().to_vec())?;
            }
        }
        self.dirty = false;
        self.tracked = self.top.len() <= TRACKED;
        self.stored = all_rows(self.top.len());
        self.keyed = self.stored;
        Ok(())
    }

    /// What a cached partition costs: its entry, prefix, lists and each row's key,
    /// allocations included (Nexmark q18 caches millions of one-row partitions, where the
    /// fixed costs are most of it).
    fn size(&self, prefix: &[u8]) -> usize {
        let keys = |keys: &mut dyn Iterator<Item = &Vec<u8>>| {
            keys.map(|k| ALLOCATION + k.capacity()).sum::<usize>()
        };
        ENTRY
            + ALLOCATION
            + prefix.len()
            + ALLOCATION
            + self.top.capacity() * std::mem::size_of::<(Vec<u8>, i64)>()
            + keys(&mut self.top.iter().map(|(k, _)| k))
            + self.gone.capacity() * std::mem::size_of::<Vec<u8>>()
            + keys(&mut self.gone.iter())
    }
}

/// Cached partitions by their rows' key prefix (see the module doc).
pub(super) struct TopCache {
    parts: HashMap<Vec<u8>, Taken>,
    bytes: usize,
    budget: usize,
}

impl TopCache {
    pub fn new(budget: usize) -> Self {
        Self {
            parts: HashMap::default(),
            bytes: 0,
            budget,
        }
    }

    /// The partition's top rows taken out of the cache (or read by `read` from the store:
    /// its rows there, up to its top N), to be changed and [`TopCache::put`] back. Taking
    /// instead of copying keeps one copy of a partition in memory.
    pub fn take(&mut self, prefix: &[u8], read: impl FnOnce() -> Result<Top>) -> Result<Taken> {
        if let Some(part) = self.parts.remove(prefix) {
            self.bytes -= part.size(prefix);
            return Ok(part);
        }
        Ok(Taken::stored(read()?))
    }

    /// Whether the cache holds the partition under `prefix`.
    pub fn contains(&self, prefix: &[u8]) -> bool {
        self.parts.contains_key(prefix)
    }

    /// Puts a partition taken out (back) into the cache with its rows now `next`.
    pub fn put(&mut self, prefix: Vec<u8>, taken: Taken, next: Top) {
        let part = taken.change(next);
        self.bytes += part.size(&prefix);
        if let Some(old) = self.parts.get(&prefix) {
            self.bytes -= old.size(&prefix);
        }
        self.parts.insert(prefix, part);
    }

    /// Drops a partition without writing it (its stored rows are being deleted).
    pub fn forget(&mut self, prefix: &[u8]) {
        if let Some(part) = self.parts.remove(prefix) {
            self.bytes -= part.size(prefix);
        }
    }

    /// Writes every changed partition's changes to the store (a chunk at a time).
    pub fn flush(&mut self, store: &dyn StateBackend) -> Result<()> {
        let mut writes = ChunkedWrites::new(store);
        let mut bytes = 0;
        for (prefix, part) in self.parts.iter_mut() {
            if part.dirty {
                part.write(prefix, &mut writes, true)?;
            }
            bytes += part.size(prefix);
        }
        self.bytes = bytes;
        writes.finish()
    }

    /// Past the budget: writes every change and empties the cache (moving the rows into the
    /// writes instead of copying them, and freeing the map's table too).
    pub fn trim(&mut self, store: &dyn StateBackend) -> Result<()> {
        if self.bytes <= self.budget {
            return Ok(());
        }
        self.bytes = 0;
        let mut writes = ChunkedWrites::new(store);
        for (prefix, mut part) in std::mem::take(&mut self.parts) {
            if part.dirty {
                part.write(&prefix, &mut writes, false)?;
            }
        }
        writes.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Mutex;

    use super::*;
    use crate::state::{count_of, MemoryStateBackend, PartFiles, WriteBatch};

    /// A memory store that checks each write against what it holds: every point delete
    /// removes a row it has and every put not under a range delete of the same batch
    /// changes a row (no write is wasted); counts the range tombstones.
    #[derive(Default)]
    struct Checked {
        inner: MemoryStateBackend,
        ranges: Mutex<usize>,
    }

    impl StateBackend for Checked {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.inner.get(key)
        }
        fn write(&self, batch: WriteBatch) -> Result<()> {
            let mut whole = Vec::new();
            for (start, end) in &batch.delete_ranges {
                if *end == just_after(start) {
                    assert!(
                        self.inner.get(start)?.is_some(),
                        "a delete of a row not stored"
                    );
                } else {
                    *self.ranges.lock().unwrap() += 1;
                    whole.push((start.clone(), end.clone()));
                }
            }
            for (k, v) in &batch.puts {
                let replaced = whole.iter().any(|(s, e)| s <= k && k < e);
                if !replaced {
                    assert_ne!(
                        self.inner.get(k)?.as_ref(),
                        Some(v),
                        "a put of a stored row"
                    );
                }
            }
            self.inner.write(batch)
        }
        fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            self.inner.scan(start, end)
        }
        fn scan_first(
            &self,
            start: &[u8],
            end: &[u8],
            limit: usize,
        ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            self.inner.scan_first(start, end, limit)
        }
        fn first_key(&self, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>> {
            self.inner.first_key(start, end)
        }
        fn checkpoint_to(&self, dir: &Path) -> Result<()> {
            self.inner.checkpoint_to(dir)
        }
        fn parts(&self) -> &PartFiles {
            self.inner.parts()
        }
    }

    fn rows(store: &dyn StateBackend, prefix: &[u8]) -> Top {
        store
            .scan(prefix, &prefix_end(prefix))
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, count_of(&v)))
            .collect()
    }

    /// Random changes to a few partitions (up to 80 rows, past the tracked 64), written by
    /// flushes and trims: the store always ends up holding each partition's last rows,
    /// with no wasted write and a range tombstone only for a partition that had more than
    /// [`TRACKED`] rows since its last write.
    #[test]
    fn writes_carry_each_partitions_changes_and_leave_the_store_equal_to_memory() {
        for seed in 1..=40u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = |n: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % n
            };
            let store = Checked::default();
            let mut cache = TopCache::new(usize::MAX);
            let prefixes: [&[u8]; 3] = [b"a/", b"b/", b"c/"];
            // The rows each partition has now, whether it changed since its last write, and
            // whether it had more than TRACKED rows since.
            let mut model: BTreeMap<&[u8], (Top, bool, bool)> = BTreeMap::new();
            for _ in 0..300 {
                let prefix = prefixes[next(3) as usize];
                match next(10) {
                    0 | 1 => {
                        let tombstones = *store.ranges.lock().unwrap();
                        let wide = model.values().filter(|(_, d, w)| *d && *w).count();
                        if next(2) == 0 {
                            cache.flush(&store).unwrap();
                        } else {
                            cache.budget = 0;
                            cache.trim(&store).unwrap();
                            cache.budget = usize::MAX;
                            assert!(cache.parts.is_empty());
                        }
                        assert_eq!(*store.ranges.lock().unwrap() - tombstones, wide);
                        for (p, (top, dirty, wide)) in model.iter_mut() {
                            assert_eq!(rows(&store, p), *top);
                            *dirty = false;
                            *wide = top.len() > TRACKED;
                        }
                    }
                    2 => {
                        cache.forget(prefix);
                        let mut writes = WriteBatch::default();
                        writes
                            .delete_ranges
                            .push((prefix.to_vec(), prefix_end(prefix)));
                        store.inner.write(writes).unwrap();
                        model.remove(prefix);
                    }
                    _ => {
                        let taken = cache.take(prefix, || Ok(rows(&store, prefix))).unwrap();
                        let entry = model.entry(prefix).or_default();
                        assert_eq!(taken.top, entry.0);
                        if !cache.contains(prefix) && taken.top.len() > TRACKED {
                            entry.2 = true;
                        }
                        // As the operator merges an append-only batch: rows added (new ones
                        // or copies of ones there), the first `last` kept; a partition
                        // keeps 1, 3, 10 or 70 (past the tracked 64).
                        let last = [1, 3, 10, 70][prefix[0] as usize % 4];
                        let mut all: BTreeMap<Vec<u8>, i64> = entry.0.iter().cloned().collect();
                        for _ in 0..next(40) {
                            let mut key = prefix.to_vec();
                            key.push(next(200) as u8);
                            *all.entry(key).or_default() += 1;
                        }
                        let mut top: Top = Vec::new();
                        let mut seen = 0;
                        for (key, count) in all {
                            if seen >= last {
                                break;
                            }
                            seen += count;
                            top.push((key, count));
                        }
                        entry.1 |= top != entry.0;
                        entry.2 |= top.len() > TRACKED;
                        entry.0 = top.clone();
                        cache.put(prefix.to_vec(), taken, top);
                    }
                }
            }
        }
    }

    #[test]
    fn a_forgotten_partition_writes_nothing_and_sizes_add_up() {
        let store = MemoryStateBackend::default();
        let mut cache = TopCache::new(usize::MAX);
        let taken = cache.take(b"p/", || Ok(Vec::new())).unwrap();
        cache.put(b"p/".to_vec(), taken, vec![(b"p/a".to_vec(), 1)]);
        assert!(cache.bytes > 0);
        cache.forget(b"p/");
        cache.flush(&store).unwrap();
        assert!(rows(&store, b"p/").is_empty());
        assert_eq!(cache.bytes, 0);
        let taken = cache.take(b"q/", || Ok(Vec::new())).unwrap();
        cache.put(b"q/".to_vec(), taken, vec![(b"q/a".to_vec(), 1)]);
        cache.flush(&store).unwrap();
        let size: usize = cache.parts.iter().map(|(p, part)| part.size(p)).sum();
        assert_eq!(cache.bytes, size);
    }
}
