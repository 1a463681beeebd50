//! Which join keys a side's store may hold: a blocked Bloom filter, asked before the cache and
//! the store, so that a probe for a key the side never held reads nothing.
//!
//! Most probes of a regular join find nothing (Nexmark q3: an auction's seller is rarely a
//! person of the three states kept, a new person has no auction yet; q20: a new auction has
//! no bid yet), and each such probe was a seek through every level-0 file of the task's
//! store, then a key put in the cache to answer it next time (profiled on q3: the cache's
//! puts alone were a sixth of the join threads).
//!
//! The filter must never rule out a key the store holds. It takes every key the side
//! writes, and it is *complete* (consulted at all) only while it has seen every key: from the
//! start of a job with no restore, or after [`KeyFilter::rebuild`] read the side's keys
//! back from the store (after a restore, or when the filter grew past its size). Keys
//! deleted from the store (state TTL) stay in it: a wasted read, never a missed row.

use crate::error::Result;
use crate::state::{prefix_end, StateBackend, StateHandle};

use super::state::{key_of, key_prefix};

/// Bits per block: one cache line.
const BLOCK_BITS: u64 = 512;
/// Bits set per key (about 1% false positives at 10 bits per key).
const PROBES: u32 = 6;
/// Keys per block past which the filter is rebuilt at twice the size (about 10 bits a key).
const KEYS_PER_BLOCK: usize = 50;
/// Blocks of a filter that starts empty (64 KiB).
const FIRST_BLOCKS: usize = 1024;

type Block = [u64; 8];

/// The join keys one side's store may hold (see the module doc).
pub(super) struct KeyFilter {
    blocks: Vec<Block>,
    /// Keys inserted (with repeats: a key inserted twice counts twice).
    inserted: usize,
    /// Whether every key of the side's store was inserted.
    complete: bool,
    hasher: ahash::RandomState,
}

fn hasher() -> ahash::RandomState {
    ahash::RandomState::with_seeds(0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344)
}

impl KeyFilter {
    /// The filter of a side whose store holds no key yet.
    pub fn empty() -> Self {
        Self {
            blocks: vec![[0; 8]; FIRST_BLOCKS],
            inserted: 0,
            complete: true,
            hasher: hasher(),
        }
    }

    /// A filter that knows nothing yet (the side's store was restored): not consulted
    /// until [`Self::rebuild`].
    pub fn unknown() -> Self {
        Self {
            blocks: Vec::new(),
            inserted: 0,
            complete: false,
            hasher: hasher(),
        }
    }

    /// Whether the store may hold `key` (always, while the filter is not complete).
    pub fn may_hold(&self, key: &[u8]) -> bool {
        if !self.complete {
            return true;
        }
        let (block, bits) = self.place(key);
        let block = &self.blocks[block];
        bits.iter()
            .all(|&(word, bit)| block[word] & (1u64 << bit) != 0)
    }

    /// Notes that the store holds `key`.
    pub fn insert(&mut self, key: &[u8]) {
        self.insert_hash(self.hasher.hash_one(key));
    }

    /// Notes that the store holds the key whose hash is `h`.
    fn insert_hash(&mut self, h: u64) {
        if !self.complete {
            return;
        }
        let (block, bits) = self.place_hash(h);
        let block = &mut self.blocks[block];
        for (word, bit) in bits {
            block[word] |= 1u64 << bit;
        }
        self.inserted += 1;
        if self.inserted > self.blocks.len() * KEYS_PER_BLOCK {
            // Too full to answer well: not consulted until rebuilt larger.
            self.complete = false;
        }
    }

    /// Whether the filter must be rebuilt before it answers.
    pub fn needs_rebuild(&self) -> bool {
        !self.complete
    }

    /// Rebuilds the filter from the keys of `handle`'s side in `store`: one seek per
    /// distinct key (the values are not read), sized for twice as many keys as it holds.
    pub fn rebuild(&mut self, handle: &StateHandle, store: &dyn StateBackend) -> Result<()> {
        let (mut from, end) = handle.all();
        // The keys' hashes (8 bytes each, whatever the keys' size) until their number is known.
        let hasher = hasher();
        let mut keys: Vec<u64> = Vec::new();
        while let Some(stored) = store.first_key(&from, &end)? {
            let key = key_of(stored.get(handle.prefix_len()..).unwrap_or_default())?;
            from = prefix_end(&key_prefix(handle, key));
            keys.push(hasher.hash_one(key));
        }
        let blocks = (2 * keys.len())
            .div_ceil(KEYS_PER_BLOCK)
            .next_power_of_two()
            .max(FIRST_BLOCKS);
        *self = Self {
            blocks: vec![[0; 8]; blocks],
            inserted: 0,
            complete: true,
            hasher,
        };
        for h in keys {
            self.insert_hash(h);
        }
        Ok(())
    }

    /// Bytes the filter keeps.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Block>()
    }

    /// `key`'s block and its bits in it (word, bit).
    fn place(&self, key: &[u8]) -> (usize, [(usize, u32); PROBES as usize]) {
        self.place_hash(self.hasher.hash_one(key))
    }

    /// The block and bits of the key whose hash is `h`.
    fn place_hash(&self, h: u64) -> (usize, [(usize, u32); PROBES as usize]) {
        // The block from the high bits (the number of blocks is a power of two), the bits
        // from the low 32 by double hashing.
        let block = ((h >> 32) as usize) & (self.blocks.len() - 1);
        let (h1, h2) = (h as u32, ((h >> 16) as u32) | 1);
        let mut bits = [(0, 0); PROBES as usize];
        for (i, b) in bits.iter_mut().enumerate() {
            let pos = (h1.wrapping_add((i as u32).wrapping_mul(h2)) as u64) % BLOCK_BITS;
            *b = ((pos / 64) as usize, (pos % 64) as u32);
        }
        (block, bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::WriteBatch;

    fn key(i: u64) -> Vec<u8> {
        format!("key-{i}").into_bytes()
    }

    #[test]
    fn holds_every_inserted_key_and_rules_out_most_others() {
        let mut f = KeyFilter::empty();
        for i in 0..20_000 {
            f.insert(&key(i));
        }
        assert!(!f.needs_rebuild());
        assert!((0..20_000).all(|i| f.may_hold(&key(i))));
        let false_positives = (20_000..120_000).filter(|&i| f.may_hold(&key(i))).count();
        assert!(false_positives < 3_000, "{false_positives} of 100000");
        assert!(
            false_positives > 0,
            "a filter that answers no to everything"
        );
    }

    #[test]
    fn an_unknown_filter_rules_out_nothing_until_rebuilt() {
        let handle = StateHandle::in_memory();
        let store = handle.store().unwrap();
        let mut writes = WriteBatch::default();
        for i in 0..3000 {
            let k = key(i);
            // Several entries of one key: each key is read back once.
            for seq in 0..3u8 {
                let mut stored = key_prefix(&handle, &k);
                stored.push(seq);
                writes.puts.push((stored, b"row".to_vec()));
            }
        }
        store.write(writes).unwrap();
        let mut f = KeyFilter::unknown();
        assert!(f.needs_rebuild());
        assert!(f.may_hold(b"anything"));
        f.insert(b"ignored");
        f.rebuild(&handle, store.as_ref()).unwrap();
        assert!(!f.needs_rebuild());
        assert!((0..3000).all(|i| f.may_hold(&key(i))));
        let false_positives = (3000..13_000).filter(|&i| f.may_hold(&key(i))).count();
        assert!(false_positives < 500, "{false_positives} of 10000");
        // The rebuilt filter counted each key once.
        assert_eq!(f.inserted, 3000);
    }

    #[test]
    fn past_its_size_it_asks_to_be_rebuilt_larger() {
        let handle = StateHandle::in_memory();
        let store = handle.store().unwrap();
        let mut f = KeyFilter::empty();
        let n = FIRST_BLOCKS * KEYS_PER_BLOCK + 1;
        let mut writes = WriteBatch::default();
        for i in 0..n as u64 {
            f.insert(&key(i));
            let mut stored = key_prefix(&handle, &key(i));
            stored.push(0);
            writes.puts.push((stored, b"row".to_vec()));
        }
        store.write(writes).unwrap();
        assert!(f.needs_rebuild());
        assert!(f.may_hold(b"never inserted"));
        let before = f.bytes();
        f.rebuild(&handle, store.as_ref()).unwrap();
        assert!(f.bytes() > before);
        assert!((0..n as u64).all(|i| f.may_hold(&key(i))));
    }
}
