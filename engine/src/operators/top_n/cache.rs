//! The top rows of the partitions a [`super::TopNOperator`] over an append-only input worked
//! on lately, kept in memory between barriers (Flink's `AppendOnlyTopNFunction` keeps its
//! top-N buffer in a heap cache the same way).
//!
//! With an append-only input a partition's stored rows are exactly its top N (a row pushed
//! below rank N never comes back), so the cached list is the partition's whole state. A
//! changed partition is written back at the next barrier ([`TopCache::flush`]: its range
//! deleted, its rows put) or when the cache outgrows its share of `memory_budget`
//! ([`TopCache::trim`]). A partition the store has no row of (read as empty and not written
//! since) is written without deleting its range first: a range tombstone per new partition
//! would slow every later read and compaction that crosses it.

use datafusion::common::HashMap;

use crate::error::Result;
use crate::state::{prefix_end, ChunkedWrites, StateBackend};

/// A partition's top rows: (store key, count), in rank order.
pub(super) type Top = Vec<(Vec<u8>, i64)>;

/// Bytes the map spends on a partition's entry (key, list and flag, at hashbrown's load
/// factor) and an allocation besides its bytes (mimalloc's size classes), roughly.
const ENTRY: usize = 72;
const ALLOCATION: usize = 16;

/// A cached partition: its rows, whether the store must get them, whether the store has
/// no row of it.
struct Part {
    top: Top,
    dirty: bool,
    absent: bool,
}

/// A partition taken out of the cache or read from the store (see [`TopCache::take`]).
pub(super) struct Taken {
    pub top: Top,
    pub dirty: bool,
    /// The store holds no row of the partition.
    pub absent: bool,
}

/// Cached partitions by their rows' key prefix (see the module doc).
pub(super) struct TopCache {
    parts: HashMap<Vec<u8>, Part>,
    bytes: usize,
    budget: usize,
}

/// What a cached partition costs: its entry, prefix, list and each row's key, allocations
/// included (Nexmark q18 caches millions of one-row partitions, where the fixed costs are
/// most of it).
fn size(prefix: &[u8], top: &Top) -> usize {
    ENTRY
        + ALLOCATION
        + prefix.len()
        + ALLOCATION
        + top.capacity() * std::mem::size_of::<(Vec<u8>, i64)>()
        + top
            .iter()
            .map(|(k, _)| ALLOCATION + k.capacity())
            .sum::<usize>()
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
    /// all of the partition's rows there, or its first `last` when it has more), to be
    /// changed and [`TopCache::put`] back. Taking instead of copying keeps one copy of a
    /// partition in memory.
    pub fn take(&mut self, prefix: &[u8], read: impl FnOnce() -> Result<Top>) -> Result<Taken> {
        if let Some(Part { top, dirty, absent }) = self.parts.remove(prefix) {
            self.bytes -= size(prefix, &top);
            return Ok(Taken { top, dirty, absent });
        }
        let top = read()?;
        let absent = top.is_empty();
        Ok(Taken {
            top,
            dirty: false,
            absent,
        })
    }

    /// Whether the cache holds the partition under `prefix`.
    pub fn contains(&self, prefix: &[u8]) -> bool {
        self.parts.contains_key(prefix)
    }

    /// Puts a partition's rows (back) into the cache; `dirty`: the store must get them;
    /// `absent`: the store has no row of the partition (as [`TopCache::take`] said).
    pub fn put(&mut self, prefix: Vec<u8>, top: Top, dirty: bool, absent: bool) {
        self.bytes += size(&prefix, &top);
        if let Some(old) = self.parts.get(&prefix) {
            self.bytes -= size(&prefix, &old.top);
        }
        self.parts.insert(prefix, Part { top, dirty, absent });
    }

    /// Drops a partition without writing it (its stored rows are being deleted).
    pub fn forget(&mut self, prefix: &[u8]) {
        if let Some(part) = self.parts.remove(prefix) {
            self.bytes -= size(prefix, &part.top);
        }
    }

    /// Writes every changed partition to the store (a chunk at a time).
    pub fn flush(&mut self, store: &dyn StateBackend) -> Result<()> {
        let mut writes = ChunkedWrites::new(store);
        for (prefix, part) in self.parts.iter_mut() {
            if std::mem::take(&mut part.dirty) {
                if !part.absent {
                    writes.delete_range(prefix.clone(), prefix_end(prefix))?;
                }
                for (k, count) in part.top.iter() {
                    writes.put(k.clone(), count.to_le_bytes().to_vec())?;
                }
                part.absent = part.top.is_empty();
            }
        }
        writes.finish()
    }

    /// Past the budget: writes every change and empties the cache (moving the rows into
    /// the writes instead of copying them, and freeing the map's table too).
    pub fn trim(&mut self, store: &dyn StateBackend) -> Result<()> {
        if self.bytes <= self.budget {
            return Ok(());
        }
        self.bytes = 0;
        let mut writes = ChunkedWrites::new(store);
        for (prefix, Part { top, dirty, absent }) in std::mem::take(&mut self.parts) {
            if dirty {
                if !absent {
                    let end = prefix_end(&prefix);
                    writes.delete_range(prefix, end)?;
                }
                for (k, count) in top {
                    writes.put(k, count.to_le_bytes().to_vec())?;
                }
            }
        }
        writes.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{count_of, MemoryStateBackend, WriteBatch};

    #[test]
    fn a_changed_partition_replaces_its_stored_rows_at_a_flush() {
        let store = MemoryStateBackend::default();
        let one = 1i64.to_le_bytes().to_vec();
        store
            .write(WriteBatch {
                puts: vec![
                    (b"p/a".to_vec(), one.clone()),
                    (b"p/c".to_vec(), one.clone()),
                ],
                ..WriteBatch::default()
            })
            .unwrap();
        let mut cache = TopCache::new(usize::MAX);
        let read = || Ok(vec![(b"p/a".to_vec(), 1), (b"p/c".to_vec(), 1)]);
        let taken = cache.take(b"p/", read).unwrap();
        assert_eq!(
            (taken.top.len(), taken.dirty, taken.absent),
            (2, false, false)
        );
        let next = vec![(b"p/a".to_vec(), 1), (b"p/b".to_vec(), 2)];
        cache.put(b"p/".to_vec(), next, true, false);
        // Memory answers until the flush; then the store holds exactly the new rows.
        let cached = cache.take(b"p/", || unreachable!()).unwrap();
        assert_eq!(
            (&cached.top[1], cached.dirty),
            (&(b"p/b".to_vec(), 2), true)
        );
        cache.put(b"p/".to_vec(), cached.top, cached.dirty, cached.absent);
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 2);
        cache.flush(&store).unwrap();
        assert_eq!(
            store.scan(b"p/", b"p0").unwrap(),
            vec![
                (b"p/a".to_vec(), one),
                (b"p/b".to_vec(), 2i64.to_le_bytes().to_vec())
            ]
        );
        // A forgotten partition writes nothing.
        cache.put(b"p/".to_vec(), Vec::new(), true, false);
        cache.forget(b"p/");
        cache.flush(&store).unwrap();
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 2);
        assert_eq!(cache.bytes, 0);
        // A tiny budget writes the changes and empties the cache.
        cache.put(b"p/".to_vec(), vec![(b"p/z".to_vec(), 1)], true, false);
        cache.put(b"q/".to_vec(), Vec::new(), false, true);
        cache.budget = 1;
        cache.trim(&store).unwrap();
        assert!(cache.parts.is_empty());
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 1);
    }

    #[test]
    fn a_partition_new_to_the_store_is_written_then_replaced_like_any_other() {
        let store = MemoryStateBackend::default();
        let mut cache = TopCache::new(usize::MAX);
        let row = |k: &[u8], n: i64| (k.to_vec(), n);
        // Read as empty: the store has no row of it.
        let taken = cache.take(b"n/", || Ok(Vec::new())).unwrap();
        assert!(taken.absent && !taken.dirty);
        cache.put(b"n/".to_vec(), vec![row(b"n/b", 1)], true, taken.absent);
        cache.flush(&store).unwrap();
        let stored = |store: &MemoryStateBackend| {
            store
                .scan(b"n/", b"n0")
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k, count_of(&v)))
                .collect::<Vec<_>>()
        };
        assert_eq!(stored(&store), vec![row(b"n/b", 1)]);
        // Written once, it is no longer absent: the next change replaces the stored rows,
        // at a flush and at a trim alike.
        let taken = cache.take(b"n/", || unreachable!()).unwrap();
        assert!(!taken.absent);
        cache.put(b"n/".to_vec(), vec![row(b"n/a", 2)], true, taken.absent);
        cache.flush(&store).unwrap();
        assert_eq!(stored(&store), vec![row(b"n/a", 2)]);
        let taken = cache.take(b"n/", || unreachable!()).unwrap();
        cache.put(b"n/".to_vec(), vec![row(b"n/c", 1)], true, taken.absent);
        cache.budget = 0;
        cache.trim(&store).unwrap();
        assert_eq!(stored(&store), vec![row(b"n/c", 1)]);
    }
}
