//! [`ChunkedWrites`]: a long run of changes written a few megabytes at a time.
//!
//! A cache written back at a barrier can hold hundreds of megabytes of changes. Collected
//! into one [`WriteBatch`] they would sit in memory twice more at the peak (the batch, then
//! RocksDB's own copy of it, then one oversized memtable); in chunks the extra memory is a
//! chunk. The chunks are separate writes: fine where the store is only read back through a
//! checkpoint taken after the last one, or by the operator that writes it.

use crate::error::Result;

use super::{StateBackend, WriteBatch};

/// Bytes of keys and values after which a chunk is written (a memtable holds 16 MiB).
const CHUNK_BYTES: usize = 2 << 20;

/// Changes written in chunks of about [`CHUNK_BYTES`]; [`ChunkedWrites::finish`] writes the
/// rest. Within a chunk range deletes go first (as in [`StateBackend::write`]), so a range
/// deleted must not cover a key put earlier through the same writer.
pub struct ChunkedWrites<'a> {
    store: &'a dyn StateBackend,
    batch: WriteBatch,
    bytes: usize,
}

impl<'a> ChunkedWrites<'a> {
    pub fn new(store: &'a dyn StateBackend) -> Self {
        Self {
            store,
            batch: WriteBatch::default(),
            bytes: 0,
        }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.bytes += key.len() + value.len();
        self.batch.puts.push((key, value));
        self.write_when_full()
    }

    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) -> Result<()> {
        self.bytes += start.len() + end.len();
        self.batch.delete_ranges.push((start, end));
        self.write_when_full()
    }

    fn write_when_full(&mut self) -> Result<()> {
        if self.bytes < CHUNK_BYTES {
            return Ok(());
        }
        self.bytes = 0;
        self.store.write(std::mem::take(&mut self.batch))
    }

    /// Writes what is left.
    pub fn finish(self) -> Result<()> {
        if self.batch.puts.is_empty() && self.batch.delete_ranges.is_empty() {
            return Ok(());
        }
        self.store.write(self.batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStateBackend;

    #[test]
    fn every_change_lands_whatever_the_chunking() {
        let store = MemoryStateBackend::default();
        store
            .write(WriteBatch {
                puts: vec![(b"old/1".to_vec(), b"x".to_vec())],
                ..WriteBatch::default()
            })
            .unwrap();
        let mut writes = ChunkedWrites::new(&store);
        writes
            .delete_range(b"old/".to_vec(), b"old0".to_vec())
            .unwrap();
        // Enough values of 64 KiB to fill several chunks.
        let value = vec![7u8; 64 << 10];
        let n = 3 * CHUNK_BYTES / value.len() + 5;
        for i in 0..n {
            writes
                .put(format!("k{i:05}").into_bytes(), value.clone())
                .unwrap();
        }
        // Chunks went out before the end.
        assert!(store.scan(b"k", b"l").unwrap().len() >= 2 * CHUNK_BYTES / value.len());
        writes.finish().unwrap();
        let stored = store.scan(b"k", b"l").unwrap();
        assert_eq!(stored.len(), n);
        assert!(stored.iter().all(|(_, v)| *v == value));
        assert!(store.scan(b"old/", b"old0").unwrap().is_empty());
    }
}
