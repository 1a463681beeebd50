//! State backends. Operators keep their working set in memory and will write epoch snapshots
//! through this interface (see docs/status.md for how far that is). Keys are ordered bytes so
//! that a window's state is one key range: firing a window and dropping its state are range
//! operations.
//!
//! [`MemoryStateBackend`] serves unit tests and jobs that need no durability;
//! `RocksDbStateBackend` (feature `rocksdb-state`, in progress, see docs/status.md) is durable
//! and holds state larger than memory.

#[cfg(feature = "rocksdb-state")]
mod rocks;

#[cfg(feature = "rocksdb-state")]
pub use rocks::RocksDbStateBackend;

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::error::Result;

/// An ordered key-value store with atomic write batches.
pub trait StateBackend: Send {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies every put and every range delete of `batch` atomically.
    fn write(&mut self, batch: WriteBatch) -> Result<()>;
    /// Entries with `start <= key < end`, in key order.
    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
}

/// Changes applied together.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub puts: Vec<(Vec<u8>, Vec<u8>)>,
    pub delete_ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The in-memory backend, for tests and for jobs that do not need durability.
#[derive(Debug, Default)]
pub struct MemoryStateBackend {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl StateBackend for MemoryStateBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map.get(key).cloned())
    }

    fn write(&mut self, batch: WriteBatch) -> Result<()> {
        for (start, end) in batch.delete_ranges {
            let doomed: Vec<Vec<u8>> = self
                .map
                .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                self.map.remove(&k);
            }
        }
        self.map.extend(batch.puts);
        Ok(())
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn memory_backend_range_delete_drops_one_window_and_keeps_the_rest() {
        range_delete_drops_one_window_and_keeps_the_rest(&mut MemoryStateBackend::default());
    }

    /// The contract every backend meets.
    pub(crate) fn range_delete_drops_one_window_and_keeps_the_rest(s: &mut dyn StateBackend) {
        let mut b = WriteBatch::default();
        for w in [1u8, 2, 3] {
            for k in [b'a', b'b'] {
                b.puts.push((vec![w, k], vec![w * 10]));
            }
        }
        s.write(b).unwrap();
        s.write(WriteBatch {
            puts: vec![],
            delete_ranges: vec![(vec![2], vec![3])],
        })
        .unwrap();
        let keys: Vec<_> = s
            .scan(&[0], &[9])
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            vec![vec![1, b'a'], vec![1, b'b'], vec![3, b'a'], vec![3, b'b']]
        );
        assert_eq!(s.get(&[3, b'b']).unwrap(), Some(vec![30]));
    }
}
