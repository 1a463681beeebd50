//! The stored rows of recently probed join keys, per side, kept in memory in front of the
//! store (RisingWave's join-side cache, Flink's heap state in front of RocksDB).
//!
//! A batch of one side reads the other side's rows of each of its keys. Read from the store,
//! that is one range scan per key, and a RocksDB iterator costs about as much to open as the
//! rest of the join's work on a row (profiled on Nexmark q20: opening iterators was a quarter
//! of the join's CPU). A probed side is typically read far more often than it changes
//! (q20's auctions, q3's persons: written once, probed by every bid or auction of theirs), so
//! each key's rows, or that it has none, are kept once read.
//!
//! The store stays the truth: the join writes every change through, and the cache holds a
//! key only while it is exact. The operator puts the exact rows of the keys a batch read
//! (after the batch's changes to them) and forgets the keys whose rows it changed without
//! reading them all (its own side's rows, which it reads row by row or not at all). Past its
//! budget, the least recently read half is dropped; nothing has to be written back.

use datafusion::common::HashMap;

use super::state::Entry;

/// Bytes a cached key costs besides its rows (map slot, allocations), roughly.
const KEY_OVERHEAD: usize = 64;

fn entry_bytes(e: &Entry) -> usize {
    std::mem::size_of::<Entry>() + e.bytes()
}

/// One key's stored rows (all of them; none is a valid answer).
struct Cached {
    entries: Vec<Entry>,
    /// When it was last read (the cache's clock).
    used: u64,
    bytes: usize,
}

/// One side's cached keys, by key row.
#[derive(Default)]
pub(super) struct SideCache {
    keys: HashMap<Vec<u8>, Cached>,
    bytes: usize,
    budget: usize,
    clock: u64,
}

impl SideCache {
    /// A cache that keeps at most about `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// Keeps at most about `budget` bytes from now on (dropping keys if past it).
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
        if self.bytes > self.budget {
            self.evict();
        }
    }

    /// The rows of `key`, if cached.
    pub fn get(&mut self, key: &[u8]) -> Option<&[Entry]> {
        self.clock += 1;
        let clock = self.clock;
        self.keys.get_mut(key).map(|c| {
            c.used = clock;
            c.entries.as_slice()
        })
    }

    /// Keeps `entries` as all of `key`'s rows: the live ones (count above zero), clean.
    pub fn put<'a>(&mut self, key: &[u8], entries: impl Iterator<Item = &'a Entry>) {
        if self.budget == 0 {
            return;
        }
        let entries: Vec<Entry> = entries
            .filter(|e| e.count > 0)
            .map(|e| {
                let mut e = e.clone();
                e.dirty = false;
                e
            })
            .collect();
        let bytes = KEY_OVERHEAD + key.len() + entries.iter().map(entry_bytes).sum::<usize>();
        self.clock += 1;
        let cached = Cached {
            entries,
            used: self.clock,
            bytes,
        };
        self.bytes += bytes;
        if let Some(old) = self.keys.insert(key.to_vec(), cached) {
            self.bytes -= old.bytes;
        }
        if self.bytes > self.budget {
            self.evict();
        }
    }

    /// Drops `key` (its rows changed in the store in a way the cache did not see).
    pub fn forget(&mut self, key: &[u8]) {
        if let Some(old) = self.keys.remove(key) {
            self.bytes -= old.bytes;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Drops the least recently read keys until at most half the budget is used.
    fn evict(&mut self) {
        let mut stamps: Vec<(u64, usize)> = self.keys.values().map(|c| (c.used, c.bytes)).collect();
        stamps.sort_unstable();
        let mut freed = 0;
        let mut cutoff = 0;
        for (used, bytes) in stamps {
            if self.bytes - freed <= self.budget / 2 {
                break;
            }
            freed += bytes;
            cutoff = used;
        }
        self.keys.retain(|_, c| c.used > cutoff);
        self.bytes = self.keys.values().map(|c| c.bytes).sum();
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[u8], count: i64) -> Entry {
        let mut e = Entry::inserted(key.to_vec(), b"row");
        e.count = count;
        e.dirty = true;
        e
    }

    #[test]
    fn keeps_live_rows_clean_and_forgets_on_request() {
        let mut c = SideCache::new(1 << 20);
        assert!(c.get(b"k").is_none());
        c.put(b"k", [entry(b"a", 2), entry(b"b", 0)].iter());
        let got = c.get(b"k").unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].key.as_slice(), got[0].count), (&b"a"[..], 2));
        assert_eq!(got[0].row(), b"row");
        assert!(!got[0].dirty);
        // No rows is an answer too.
        c.put(b"none", std::iter::empty());
        assert_eq!(c.get(b"none").map(<[Entry]>::len), Some(0));
        // Put again: replaced, bytes counted once.
        let before = c.bytes();
        c.put(b"k", [entry(b"a", 3)].iter());
        assert_eq!(c.bytes(), before);
        assert_eq!(c.get(b"k").unwrap()[0].count, 3);
        c.forget(b"k");
        assert!(c.get(b"k").is_none());
        c.forget(b"none");
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn past_its_budget_it_drops_the_least_recently_read_keys() {
        let one = KEY_OVERHEAD + 2 + entry_bytes(&entry(b"row", 1));
        let mut c = SideCache::new(10 * one);
        for i in 0..10u8 {
            c.put(&[b'k', i], [entry(b"row", 1)].iter());
        }
        assert_eq!(c.bytes(), 10 * one);
        // Read the first three: they are the recent ones now.
        for i in 0..3u8 {
            assert!(c.get(&[b'k', i]).is_some());
        }
        c.put(b"kx", [entry(b"row", 1)].iter());
        assert!(c.bytes() <= 5 * one, "{} > {}", c.bytes(), 5 * one);
        for i in 0..3u8 {
            assert!(c.get(&[b'k', i]).is_some(), "recently read key {i} dropped");
        }
        assert!(c.get(b"kx").is_some());
        assert!(c.get(&[b'k', 3]).is_none());
        // A smaller budget (the side's filter grew) drops the least recent keys at once.
        c.set_budget(4 * one);
        assert!(c.bytes() <= 2 * one, "{} > {}", c.bytes(), 2 * one);
        assert!(c.get(b"kx").is_some() && c.get(&[b'k', 0]).is_none());
        // A budget of zero keeps nothing.
        let mut none = SideCache::new(0);
        none.put(b"k", [entry(b"row", 1)].iter());
        assert!(none.get(b"k").is_none());
    }
}
