//! State backends. Operators keep a bounded working set in memory and write spilled state and
//! epoch snapshots through this interface, via the [`StateHandle`] of their task. Keys are ordered bytes so
//! that a window's state is one key range: firing a window and dropping its state are range
//! operations.
//!
//! [`RocksDbStateBackend`] is what jobs use: durable, larger than memory, checkpointed by hard
//! links. [`MemoryStateBackend`] meets the same contract for unit tests.

mod rocks;

pub use rocks::RocksDbStateBackend;

mod chunked;
mod handle;
mod ipc;
mod keys;
mod parts;
mod rescale;
pub mod ttl;

pub use chunked::ChunkedWrites;
pub use handle::{RestoreSet, StateHandle, TaskState};
pub use ipc::{decode_batch, decode_batches, encode_batch, encode_batches_to};
pub use keys::{
    add_counters, cmp_bytes, count_of, just_after, prefix_end, same_bytes, value_of, KeyBytes,
};
pub use parts::{is_part_file, sync_parts, PartFiles, PartRef};
pub use rescale::copy_routed;
pub use ttl::KeyExpiry;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;

use crate::error::{EngineError, Result};

/// An ordered key-value store with atomic write batches. Shared by the operators of one task,
/// hence `&self` everywhere.
pub trait StateBackend: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies every range delete, then every put, then every add of `batch` atomically.
    fn write(&self, batch: WriteBatch) -> Result<()>;
    /// Entries with `start <= key < end`, in key order.
    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// The first `limit` entries with `start <= key < end`, in key order.
    fn scan_first(&self, start: &[u8], end: &[u8], limit: usize)
        -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// The smallest key with `start <= key < end`, without reading values.
    fn first_key(&self, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The value of each of `keys`, in their order. A store may read them together
    /// (RocksDB's batched MultiGet).
    fn get_each(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// For each `(start, end)` of `ranges`, its first `limit` entries in key order; one list
    /// per range, in the order of `ranges`. A store may read them all through one iterator
    /// (RocksDB: opening an iterator per range cost more than its seek).
    fn scan_each(&self, ranges: &[(Vec<u8>, Vec<u8>)], limit: usize) -> Result<Vec<Entries>> {
        ranges
            .iter()
            .map(|(start, end)| self.scan_first(start, end, limit))
            .collect()
    }
    /// Writes a consistent copy of the whole store to `dir` (which must not exist yet), with
    /// its part files and their index.
    fn checkpoint_to(&self, dir: &Path) -> Result<()>;
    /// Large, short-lived values kept in files beside the store, indexed in memory
    /// ([`PartFiles`]: window parts).
    fn parts(&self) -> &PartFiles;
}

/// Opens a task's checkpoint in `dir` for reading (a restore at another parallelism): its
/// RocksDB checkpoint and part files, or its part files alone when the task never wrote
/// RocksDB (its checkpoint skipped it).
pub fn open_checkpoint(dir: &Path) -> Result<std::sync::Arc<dyn StateBackend>> {
    if dir.join("CURRENT").exists() {
        return Ok(std::sync::Arc::new(RocksDbStateBackend::open_read_only(
            dir,
        )?));
    }
    Ok(std::sync::Arc::new(MemoryStateBackend::with_parts(
        PartFiles::read_only(dir)?,
    )))
}

/// Entries read from a store, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Changes applied together.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub puts: Vec<(Vec<u8>, Vec<u8>)>,
    pub delete_ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Counters added to the stored value without reading it (a RocksDB merge): both are
    /// little-endian i64s, added one by one; a missing value counts as zeros
    /// ([`add_counters`]).
    pub adds: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The in-memory backend, for unit tests.
#[derive(Debug, Default)]
pub struct MemoryStateBackend {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    parts: PartFiles,
}

impl MemoryStateBackend {
    /// An empty store with `parts` beside it (a checkpoint whose RocksDB part was empty).
    pub fn with_parts(parts: PartFiles) -> Self {
        Self {
            map: Mutex::default(),
            parts,
        }
    }

    /// A copy of the whole store as it is now: what [`StateBackend::checkpoint_to`] writes for
    /// a durable store (unit tests checkpoint and restore operators with it).
    pub fn copy(&self) -> Result<Self> {
        Ok(Self {
            map: Mutex::new(self.map()?.clone()),
            parts: self.parts.copy()?,
        })
    }

    fn map(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>>> {
        self.map
            .lock()
            .map_err(|_| EngineError::Internal("memory state store poisoned".into()))
    }
}

fn range<'a>(start: &'a [u8], end: &'a [u8]) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (Bound::Included(start), Bound::Excluded(end))
}

impl StateBackend for MemoryStateBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map()?.get(key).cloned())
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut map = self.map()?;
        for (start, end) in batch.delete_ranges {
            let doomed: Vec<Vec<u8>> = map
                .range::<[u8], _>(range(&start, &end))
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                map.remove(&k);
            }
        }
        map.extend(batch.puts);
        for (k, add) in batch.adds {
            let sum = add_counters(map.get(&k).map(Vec::as_slice), &add);
            map.insert(k, sum);
        }
        Ok(())
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_first(start, end, usize::MAX)
    }

    fn scan_first(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .map()?
            .range::<[u8], _>(range(start, end))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn first_key(&self, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .map()?
            .range::<[u8], _>(range(start, end))
            .next()
            .map(|(k, _)| k.clone()))
    }

    fn checkpoint_to(&self, dir: &Path) -> Result<()> {
        Err(EngineError::State(format!(
            "the in-memory state store cannot write a checkpoint to '{}'",
            dir.display()
        )))
    }

    fn parts(&self) -> &PartFiles {
        &self.parts
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn memory_backend_range_delete_drops_one_window_and_keeps_the_rest() {
        range_delete_drops_one_window_and_keeps_the_rest(&MemoryStateBackend::default());
    }

    /// The contract every backend meets.
    pub(crate) fn range_delete_drops_one_window_and_keeps_the_rest(s: &dyn StateBackend) {
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
            adds: vec![],
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
        assert_eq!(s.first_key(&[2], &[9]).unwrap(), Some(vec![3, b'a']));
        assert_eq!(s.first_key(&[2], &[3]).unwrap(), None);
        scan_each_reads_each_range_alone(s);
        added_counters_sum_up(s);
    }

    /// `scan_each` gives each range what `scan_first` gives it: ranges out of order,
    /// overlapping, empty, deleted, past every key, with and without a limit.
    fn scan_each_reads_each_range_alone(s: &dyn StateBackend) {
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (vec![3], vec![4]),
            (vec![1], vec![2]),
            (vec![2], vec![3]),
            (vec![1, b'b'], vec![3, b'b']),
            (vec![0], vec![1]),
            (vec![3, b'a'], vec![9]),
            (vec![7], vec![8]),
            (vec![1], vec![9]),
        ];
        for limit in [1, 3, usize::MAX] {
            let each = s.scan_each(&ranges, limit).unwrap();
            let alone: Vec<Entries> = ranges
                .iter()
                .map(|(a, b)| s.scan_first(a, b, limit).unwrap())
                .collect();
            assert_eq!(each, alone, "limit {limit}");
        }
        assert_eq!(s.scan_each(&ranges, usize::MAX).unwrap()[7].len(), 4);
        assert!(s.scan_each(&[], 1).unwrap().is_empty());
        let keys = [
            vec![3, b'b'],
            vec![2, b'a'],
            vec![1, b'a'],
            vec![3, b'b'],
            vec![9],
        ];
        let each = s.get_each(&keys).unwrap();
        let alone: Vec<_> = keys.iter().map(|k| s.get(k).unwrap()).collect();
        assert_eq!(each, alone);
        assert_eq!(each[0], Some(vec![30]));
        assert!(s.get_each(&[]).unwrap().is_empty());
    }

    /// Counters added without a read sum up with what was put before, in one batch or many.
    fn added_counters_sum_up(s: &dyn StateBackend) {
        let pair = |a: i64, b: i64| [a.to_le_bytes(), b.to_le_bytes()].concat();
        s.write(WriteBatch {
            puts: vec![(b"c/b".to_vec(), pair(5, 1))],
            adds: vec![
                (b"c/a".to_vec(), pair(1, 0)),
                (b"c/a".to_vec(), pair(1, 0)),
                (b"c/b".to_vec(), pair(2, 2)),
            ],
            ..WriteBatch::default()
        })
        .unwrap();
        s.write(WriteBatch {
            adds: vec![(b"c/a".to_vec(), pair(1, -1))],
            ..WriteBatch::default()
        })
        .unwrap();
        assert_eq!(s.get(b"c/a").unwrap(), Some(pair(3, -1)));
        assert_eq!(
            s.scan(b"c/", b"c0").unwrap(),
            vec![
                (b"c/a".to_vec(), pair(3, -1)),
                (b"c/b".to_vec(), pair(7, 3))
            ]
        );
    }
}
