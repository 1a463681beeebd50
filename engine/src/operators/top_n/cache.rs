//! The top rows of the partitions a [`super::TopNOperator`] over an append-only input worked
//! on lately, kept in memory between barriers (Flink's `AppendOnlyTopNFunction` keeps its
//! top-N buffer in a heap cache the same way).
//!
//! With an append-only input a partition's stored rows are exactly its top N (a row pushed
//! below rank N never comes back), so the cached list is the partition's whole state. A
//! changed partition is written back at the next barrier ([`TopCache::flush`]: its range
//! deleted, its rows put) or when the cache outgrows its share of `memory_budget`
//! ([`TopCache::trim`]).

use datafusion::common::HashMap;

use crate::error::Result;
use crate::state::{prefix_end, ChunkedWrites, StateBackend};

/// A partition's top rows: (store key, count), in rank order.
pub(super) type Top = Vec<(Vec<u8>, i64)>;

/// Bytes the map spends on a partition's entry (key, list and flag, at hashbrown's load
/// factor) and an allocation besides its bytes (mimalloc's size classes), roughly.
const ENTRY: usize = 72;
const ALLOCATION: usize = 16;

/// Cached partitions by their rows' key prefix (see the module doc).
pub(super) struct TopCache {
    parts: HashMap<Vec<u8>, (Top, bool)>,
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

    /// The partition's top rows taken out of the cache (or read by `read` from the store),
    /// to be changed and [`TopCache::put`] back: (rows, whether they differ from the
    /// store's). Taking instead of copying keeps one copy of a partition in memory.
    pub fn take(
        &mut self,
        prefix: &[u8],
        read: impl FnOnce() -> Result<Top>,
    ) -> Result<(Top, bool)> {
        if let Some((top, dirty)) = self.parts.remove(prefix) {
            self.bytes -= size(prefix, &top);
            return Ok((top, dirty));
        }
        Ok((read()?, false))
    }

    /// Whether the cache holds the partition under `prefix`.
    pub fn contains(&self, prefix: &[u8]) -> bool {
        self.parts.contains_key(prefix)
    }

    /// Puts a partition's rows (back) into the cache; `dirty`: the store must get them.
    pub fn put(&mut self, prefix: Vec<u8>, top: Top, dirty: bool) {
        self.bytes += size(&prefix, &top);
        if let Some((old, _)) = self.parts.get(&prefix) {
            self.bytes -= size(&prefix, old);
        }
        self.parts.insert(prefix, (top, dirty));
    }

    /// Drops a partition without writing it (its stored rows are being deleted).
    pub fn forget(&mut self, prefix: &[u8]) {
        if let Some((top, _)) = self.parts.remove(prefix) {
            self.bytes -= size(prefix, &top);
        }
    }

    /// Writes every changed partition to the store (a chunk at a time).
    pub fn flush(&mut self, store: &dyn StateBackend) -> Result<()> {
        let mut writes = ChunkedWrites::new(store);
        for (prefix, (top, dirty)) in self.parts.iter_mut() {
            if std::mem::take(dirty) {
                writes.delete_range(prefix.clone(), prefix_end(prefix))?;
                for (k, count) in top.iter() {
                    writes.put(k.clone(), count.to_le_bytes().to_vec())?;
                }
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
        for (prefix, (top, dirty)) in std::mem::take(&mut self.parts) {
            if dirty {
                let end = prefix_end(&prefix);
                writes.delete_range(prefix, end)?;
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
    use crate::state::{MemoryStateBackend, WriteBatch};

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
        let (top, dirty) = cache.take(b"p/", read).unwrap();
        assert_eq!((top.len(), dirty), (2, false));
        let next = vec![(b"p/a".to_vec(), 1), (b"p/b".to_vec(), 2)];
        cache.put(b"p/".to_vec(), next, true);
        // Memory answers until the flush; then the store holds exactly the new rows.
        let (cached, dirty) = cache.take(b"p/", || unreachable!()).unwrap();
        assert_eq!((&cached[1], dirty), (&(b"p/b".to_vec(), 2), true));
        cache.put(b"p/".to_vec(), cached, dirty);
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
        cache.put(b"p/".to_vec(), Vec::new(), true);
        cache.forget(b"p/");
        cache.flush(&store).unwrap();
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 2);
        assert_eq!(cache.bytes, 0);
        // A tiny budget writes the changes and empties the cache.
        cache.put(b"p/".to_vec(), vec![(b"p/z".to_vec(), 1)], true);
        cache.put(b"q/".to_vec(), Vec::new(), false);
        cache.budget = 1;
        cache.trim(&store).unwrap();
        assert!(cache.parts.is_empty());
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 1);
    }
}
