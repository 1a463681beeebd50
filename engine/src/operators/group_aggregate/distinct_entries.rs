//! The COUNT(DISTINCT) multiset entries a [`super::cache::GroupCache`] holds for one group.
//!
//! q16 keeps millions of them in memory (one per group and distinct bidder or auction), so
//! each is one allocation: a dirty byte, the number of counts (u32), the counts (i64,
//! little-endian, as stored) and then the entry's key within its group (its multiset's byte
//! and the value row: the store key without the group's prefix, which the cache holds once);
//! the table holds only that allocation's pointer and is searched by hashing the key part. A
//! map of store key -> `Vec` of counts cost twice the memory and hid a third of it from the
//! cache's byte count.

use ahash::RandomState;
use hashbrown::HashTable;

use super::distinct::stored_counts;
use crate::error::{EngineError, Result};

/// Bytes before the counts: the dirty flag and the number of counts.
const HEADER: usize = 5;

/// What one entry costs in memory: its allocation (rounded up to the allocator's 16-byte
/// size classes) and its share of the table (a 16-byte slot and a control byte, the table
/// between 7/16 and 7/8 full: 1.5x on average).
fn entry_bytes(len: usize) -> usize {
    len.next_multiple_of(16) + 26
}

fn width(entry: &[u8]) -> usize {
    let mut w = [0u8; 4];
    w.copy_from_slice(&entry[1..HEADER]);
    u32::from_le_bytes(w) as usize
}

/// The entry's key within its group: its multiset's byte, then the value row.
fn key(entry: &[u8]) -> &[u8] {
    &entry[HEADER + 8 * width(entry)..]
}

/// The hash of an entry of multiset `set` and value row `value`.
fn hash(hasher: &RandomState, set: u8, value: &[u8]) -> u64 {
    hasher.hash_one((set, value))
}

/// Whether an entry's key is (`set`, `value`).
fn is(key: &[u8], set: u8, value: &[u8]) -> bool {
    key.split_first() == Some((&set, value))
}

/// The hash of a held entry (as [`hash`] gives it).
fn rehash(hasher: &RandomState, entry: &[u8]) -> u64 {
    let key = key(entry);
    hash(hasher, key[0], &key[1..])
}

/// The entry's counts, as stored.
fn counts(entry: &[u8]) -> &[u8] {
    &entry[HEADER..HEADER + 8 * width(entry)]
}

/// Copies the entry's counts into `scratch` for `apply` and back; the entry is dirty when
/// `apply` says they changed.
fn apply_to(entry: &mut [u8], scratch: &mut Vec<i64>, apply: impl FnOnce(&mut [i64]) -> bool) {
    scratch.clear();
    scratch.extend(stored_counts(counts(entry)));
    let changed = apply(scratch);
    for (to, c) in entry[HEADER..].chunks_exact_mut(8).zip(scratch.iter()) {
        to.copy_from_slice(&c.to_le_bytes());
    }
    if changed {
        entry[0] = 1;
    }
}

/// A group's entries (see the module doc).
#[derive(Default)]
pub(super) struct DistinctEntries {
    table: HashTable<Box<[u8]>>,
    /// What the entries take, as [`entry_bytes`] counts them.
    bytes: usize,
}

impl DistinctEntries {
    /// Changes the entry of multiset `set` for value row `value` (its counts read by `read`
    /// when it is not held) with `apply`; returns the bytes a new entry added.
    pub fn update(
        &mut self,
        hasher: &RandomState,
        (set, value): (u8, &[u8]),
        read: impl FnOnce() -> Result<Vec<i64>>,
        scratch: &mut Vec<i64>,
        apply: impl FnOnce(&mut [i64]) -> bool,
    ) -> Result<usize> {
        let hash = hash(hasher, set, value);
        if let Some(entry) = self.table.find_mut(hash, |e| is(key(e), set, value)) {
            apply_to(entry, scratch, apply);
            return Ok(0);
        }
        let mut counts = read()?;
        let dirty = apply(&mut counts);
        let width = u32::try_from(counts.len()).map_err(|_| {
            EngineError::Internal(format!("{} COUNT(DISTINCT)s in one entry", counts.len()))
        })?;
        let mut entry = Vec::with_capacity(HEADER + 8 * counts.len() + 1 + value.len());
        entry.push(u8::from(dirty));
        entry.extend_from_slice(&width.to_le_bytes());
        entry.extend(counts.iter().flat_map(|c| c.to_le_bytes()));
        entry.push(set);
        entry.extend_from_slice(value);
        let bytes = entry_bytes(entry.len());
        self.bytes += bytes;
        self.table
            .insert_unique(hash, entry.into_boxed_slice(), |e| rehash(hasher, e));
        Ok(bytes)
    }

    /// Whether the entry of multiset `set` for value row `value` is held.
    pub fn contains(&self, hasher: &RandomState, set: u8, value: &[u8]) -> bool {
        self.table
            .find(hash(hasher, set, value), |e| is(key(e), set, value))
            .is_some()
    }

    /// The changed entries (key within the group, counts as stored), marked clean.
    pub fn take_dirty(&mut self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter_mut().filter_map(|e| {
            if e[0] == 0 {
                return None;
            }
            e[0] = 0;
            let e: &[u8] = e;
            Some((key(e), counts(e)))
        })
    }

    /// Bytes the entries take (as [`entry_bytes`] counts them).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(key: &[u8]) -> (u8, &[u8]) {
        (key[0], &key[1..])
    }

    fn decode(counts: &[u8]) -> Vec<i64> {
        stored_counts(counts).collect()
    }

    #[test]
    fn entries_keep_their_counts_and_say_which_changed() {
        let hasher = RandomState::new();
        let mut entries = DistinctEntries::default();
        let mut scratch = Vec::new();
        let mut bytes = 0;
        // Keys of several lengths and widths, one a prefix of another, in two multisets (the
        // same value in both is two entries).
        let keys: Vec<(Vec<u8>, usize)> = (0..600u32)
            .map(|i| {
                let mut key = vec![(i % 2) as u8];
                key.extend((i / 2).to_string().into_bytes());
                (key, 1 + (i as usize % 4))
            })
            .collect();
        for (key, width) in &keys {
            let read = || Ok((0..*width as i64).collect());
            bytes += entries
                .update(&hasher, parts(key), read, &mut scratch, |c| {
                    c[0] += 10;
                    key.len() == 3
                })
                .unwrap();
        }
        assert_eq!(bytes, entries.bytes());
        // Read once: a held entry is not read again and adds no bytes.
        for (key, width) in &keys {
            let added = entries
                .update(
                    &hasher,
                    parts(key),
                    || unreachable!(),
                    &mut scratch,
                    |c| {
                        assert_eq!(c.len(), *width);
                        assert_eq!(c[0], 10);
                        c[width - 1] += 100;
                        key.len() == 4
                    },
                )
                .unwrap();
            assert_eq!(added, 0);
        }
        assert!(keys
            .iter()
            .all(|(k, _)| entries.contains(&hasher, k[0], &k[1..])));
        assert!(!entries.contains(&hasher, 2, b"1"));
        assert!(!entries.contains(&hasher, 0, b"1000"));
        // Dirty: the two-digit values (first pass) and the three-digit ones (second pass).
        let mut dirty: Vec<(Vec<u8>, Vec<i64>)> = entries
            .take_dirty()
            .map(|(k, c)| (k.to_vec(), decode(c)))
            .collect();
        dirty.sort();
        let mut expected: Vec<(Vec<u8>, Vec<i64>)> = keys
            .iter()
            .filter(|(k, _)| k.len() >= 3)
            .map(|(k, w)| {
                let mut c: Vec<i64> = (0..*w as i64).collect();
                c[0] += 10;
                c[w - 1] += 100;
                (k.clone(), c)
            })
            .collect();
        expected.sort();
        assert_eq!(dirty, expected);
        assert_eq!(entries.take_dirty().count(), 0);
    }
}
