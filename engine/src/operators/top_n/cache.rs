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
use crate::state::{prefix_end, StateBackend, WriteBatch};

/// A partition's top rows: (store key, count), in rank order.
pub(super) type Top = Vec<(Vec<u8>, i64)>;

/// Bytes a cached partition or row costs besides its keys, roughly.
const OVERHEAD: usize = 48;

/// Cached partitions by their rows' key prefix (see the module doc).
pub(super) struct TopCache {
    parts: HashMap<Vec<u8>, (Top, bool)>,
    bytes: usize,
    budget: usize,
}

fn size(prefix: &[u8], top: &Top) -> usize {
    OVERHEAD + prefix.len() + top.iter().map(|(k, _)| OVERHEAD + k.len()).sum::<usize>()
}

impl TopCache {
    pub fn new(budget: usize) -> Self {
        Self {
            parts: HashMap::default(),
            bytes: 0,
            budget,
        }
    }

    /// The partition's top rows, from memory or from `read` (the store).
    pub fn top(&mut self, prefix: &[u8], read: impl FnOnce() -> Result<Top>) -> Result<Top> {
        if let Some((top, _)) = self.parts.get(prefix) {
            return Ok(top.clone());
        }
        let top = read()?;
        self.bytes += size(prefix, &top);
        self.parts.insert(prefix.to_vec(), (top.clone(), false));
        Ok(top)
    }

    /// The partition's new top rows, written back later. The partition was read first.
    pub fn set(&mut self, prefix: &[u8], top: Top) {
        if let Some(slot) = self.parts.get_mut(prefix) {
            self.bytes = self.bytes + size(prefix, &top) - size(prefix, &slot.0);
            *slot = (top, true);
        }
    }

    /// Drops a partition without writing it (its stored rows are being deleted).
    pub fn forget(&mut self, prefix: &[u8]) {
        if let Some((top, _)) = self.parts.remove(prefix) {
            self.bytes -= size(prefix, &top);
        }
    }

    /// Writes every changed partition to the store.
    pub fn flush(&mut self, store: &dyn StateBackend) -> Result<()> {
        let mut writes = WriteBatch::default();
        for (prefix, (top, dirty)) in self.parts.iter_mut() {
            if !std::mem::take(dirty) {
                continue;
            }
            writes
                .delete_ranges
                .push((prefix.clone(), prefix_end(prefix)));
            writes.puts.extend(
                top.iter()
                    .map(|(k, count)| (k.clone(), count.to_le_bytes().to_vec())),
            );
        }
        if writes.delete_ranges.is_empty() {
            return Ok(());
        }
        store.write(writes)
    }

    /// Past the budget: writes every change and empties the cache.
    pub fn trim(&mut self, store: &dyn StateBackend) -> Result<()> {
        if self.bytes <= self.budget {
            return Ok(());
        }
        self.flush(store)?;
        self.parts.clear();
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStateBackend;

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
        assert_eq!(cache.top(b"p/", read).unwrap().len(), 2);
        cache.set(b"p/", vec![(b"p/a".to_vec(), 1), (b"p/b".to_vec(), 2)]);
        // Memory answers until the flush; then the store holds exactly the new rows.
        let cached = cache.top(b"p/", || unreachable!()).unwrap();
        assert_eq!(cached[1], (b"p/b".to_vec(), 2));
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 2);
        cache.flush(&store).unwrap();
        assert_eq!(
            store.scan(b"p/", b"p0").unwrap(),
            vec![
                (b"p/a".to_vec(), one),
                (b"p/b".to_vec(), 2i64.to_le_bytes().to_vec())
            ]
        );
        // A forgotten partition writes nothing; a tiny budget empties the cache.
        cache.set(b"p/", Vec::new());
        cache.forget(b"p/");
        cache.flush(&store).unwrap();
        assert_eq!(store.scan(b"p/", b"p0").unwrap().len(), 2);
        cache.top(b"q/", || Ok(Vec::new())).unwrap();
        cache.budget = 1;
        cache.trim(&store).unwrap();
        assert!(cache.parts.is_empty());
    }
}
