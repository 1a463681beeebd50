//! The COUNT(DISTINCT) multiset entries a [`super::cache::GroupCache`] holds for one group.
//!
//! q16 keeps millions of them in memory (one per group and distinct bidder or auction), so
//! each is one allocation: a flags byte (dirty; counts as bits), the number of counts (a
//! byte), the counts as stored ([`super::distinct::encode_counts`]: i64s, or one bit each
//! over an append-only input) and then the entry's key within its group (its multiset's byte
//! and the value row: the store key without the group's prefix, which the cache holds once);
//! the table holds only that allocation's pointer and is searched by hashing the key part. A
//! map of store key -> `Vec` of counts cost twice the memory and hid a third of it from the
//! cache's byte count.

use ahash::RandomState;
use hashbrown::HashTable;

use super::distinct::{counts_len, decode_counts_into, encode_counts, write_counts};
use crate::error::{EngineError, Result};

/// Bytes before the counts: the flags and the number of counts.
const HEADER: usize = 2;
/// Flag: changed since last written.
const DIRTY: u8 = 1;
/// Flag: the counts are bits (seen or not).
const SEEN: u8 = 2;

/// What one entry's allocation costs (rounded up to the allocator's 16-byte size classes).
fn entry_bytes(len: usize) -> usize {
    len.next_multiple_of(16)
}

/// What a table able to hold `capacity` entries costs: per bucket a 16-byte slot and a
/// control byte (hashbrown keeps a table at most 7/8 full, in a power of two of buckets).
fn table_bytes(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        _ => (capacity * 8 / 7).next_power_of_two() * (std::mem::size_of::<Box<[u8]>>() + 1),
    }
}

/// The entry's number of counts and whether they are bits.
fn format(entry: &[u8]) -> (usize, bool) {
    (entry[1] as usize, entry[0] & SEEN != 0)
}

/// The length of the entry's counts.
fn counts_end(entry: &[u8]) -> usize {
    let (width, seen) = format(entry);
    HEADER + counts_len(width, seen)
}

/// The entry's key within its group: its multiset's byte, then the value row.
fn key(entry: &[u8]) -> &[u8] {
    &entry[counts_end(entry)..]
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
    &entry[HEADER..counts_end(entry)]
}

/// Copies the entry's counts into `scratch` for `apply` and back; the entry is dirty when
/// `apply` says they changed. Returns whether it just became dirty.
fn apply_to(
    entry: &mut [u8],
    scratch: &mut Vec<i64>,
    apply: impl FnOnce(&mut [i64]) -> bool,
) -> bool {
    let (width, seen) = format(entry);
    let end = counts_end(entry);
    decode_counts_into(&entry[HEADER..end], width, seen, scratch);
    let became_dirty = apply(scratch) && entry[0] & DIRTY == 0;
    if became_dirty {
        entry[0] |= DIRTY;
    }
    write_counts(scratch, seen, &mut entry[HEADER..end]);
    became_dirty
}

/// A group's entries (see the module doc).
#[derive(Default)]
pub(super) struct DistinctEntries {
    table: HashTable<Box<[u8]>>,
    /// What the entries and the table take, as [`entry_bytes`] and [`table_bytes`] count
    /// them.
    bytes: usize,
    /// The hash of each entry that became dirty since the last [`Self::take_dirty`], so that
    /// writing them back visits them alone, not every entry held (8 bytes per changed entry,
    /// beside its own 42 or more).
    dirty: Vec<u64>,
}

impl DistinctEntries {
    /// Changes the entry of multiset `set` for value row `value` (its counts read by `read`
    /// when it is not held; kept as bits when `seen`) with `apply`; returns the bytes a new
    /// entry added.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        hasher: &RandomState,
        (set, value): (u8, &[u8]),
        seen: bool,
        read: impl FnOnce() -> Result<Vec<i64>>,
        scratch: &mut Vec<i64>,
        apply: impl FnOnce(&mut [i64]) -> bool,
    ) -> Result<usize> {
        let hash = hash(hasher, set, value);
        if let Some(entry) = self.table.find_mut(hash, |e| is(key(e), set, value)) {
            if apply_to(entry, scratch, apply) {
                self.dirty.push(hash);
            }
            return Ok(0);
        }
        let mut counts = read()?;
        let dirty = apply(&mut counts);
        let width = u8::try_from(counts.len()).map_err(|_| {
            EngineError::BadInput(format!(
                "{} COUNT(DISTINCT)s of one argument (at most 255)",
                counts.len()
            ))
        })?;
        let len = HEADER + counts_len(counts.len(), seen) + 1 + value.len();
        let mut entry = Vec::with_capacity(len);
        entry.push(if dirty { DIRTY } else { 0 } | if seen { SEEN } else { 0 });
        entry.push(width);
        encode_counts(&counts, seen, &mut entry);
        entry.push(set);
        entry.extend_from_slice(value);
        let table_before = table_bytes(self.table.capacity());
        let entry_len = entry.len();
        if dirty {
            self.dirty.push(hash);
        }
        self.table
            .insert_unique(hash, entry.into_boxed_slice(), |e| rehash(hasher, e));
        // A table that grew counts its new size at once.
        let bytes = entry_bytes(entry_len) + table_bytes(self.table.capacity()) - table_before;
        self.bytes += bytes;
        Ok(bytes)
    }

    /// Whether the entry of multiset `set` for value row `value` is held.
    pub fn contains(&self, hasher: &RandomState, set: u8, value: &[u8]) -> bool {
        self.table
            .find(hash(hasher, set, value), |e| is(key(e), set, value))
            .is_some()
    }

    /// Hands each changed entry to `write` (key within the group, counts as stored, whether
    /// any count is above zero) and marks it clean.
    pub fn take_dirty(
        &mut self,
        hasher: &RandomState,
        mut write: impl FnMut(&[u8], &[u8], bool) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = Vec::new();
        for hash in std::mem::take(&mut self.dirty) {
            // The dirty entry this hash was noted for (entries never leave the table; two
            // entries of one hash were noted twice).
            let Some(e) = self
                .table
                .find_mut(hash, |e| e[0] & DIRTY != 0 && rehash(hasher, e) == hash)
            else {
                continue;
            };
            e[0] &= !DIRTY;
            let (width, seen) = format(e);
            decode_counts_into(counts(e), width, seen, &mut scratch);
            write(key(e), counts(e), scratch.iter().any(|c| *c > 0))?;
        }
        Ok(())
    }

    /// Bytes the entries and their table take.
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
        counts
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
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
                .update(&hasher, parts(key), false, read, &mut scratch, |c| {
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
                    false,
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
        let mut dirty: Vec<(Vec<u8>, Vec<i64>)> = Vec::new();
        entries
            .take_dirty(&hasher, |k, c, live| {
                assert!(live);
                dirty.push((k.to_vec(), decode(c)));
                Ok(())
            })
            .unwrap();
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
        entries
            .take_dirty(&hasher, |_, _, _| panic!("nothing changed since"))
            .unwrap();
    }

    #[test]
    fn seen_entries_keep_one_bit_per_count() {
        let hasher = RandomState::new();
        let mut entries = DistinctEntries::default();
        let mut scratch = Vec::new();
        for width in 1..=17usize {
            let value = width.to_string().into_bytes();
            // Every other member seen on insert; then the last one too, then none.
            let first: Vec<i64> = (0..width as i64).map(|m| (m + 1) % 2).collect();
            let table_before = table_bytes(entries.table.capacity());
            let added = entries
                .update(
                    &hasher,
                    (1, &value),
                    true,
                    || Ok(vec![0; width]),
                    &mut scratch,
                    |c| {
                        c.copy_from_slice(&first);
                        true
                    },
                )
                .unwrap();
            // The entry, and the table when it grew.
            let grew = table_bytes(entries.table.capacity()) - table_before;
            assert!(grew == 0 || [1, 4, 8, 15].contains(&width), "{width}");
            assert_eq!(
                added,
                entry_bytes(HEADER + width.div_ceil(8) + 1 + value.len()) + grew
            );
            let mut seen_then = Vec::new();
            for set_to in [Some(width - 1), None] {
                entries
                    .update(
                        &hasher,
                        (1, &value),
                        true,
                        || unreachable!(),
                        &mut scratch,
                        |c| {
                            seen_then = c.to_vec();
                            match set_to {
                                Some(m) => c[m] = 1,
                                None => c.fill(0),
                            }
                            true
                        },
                    )
                    .unwrap();
            }
            let mut after_first = first.clone();
            after_first[width - 1] = 1;
            assert_eq!(seen_then, after_first);
        }
        // Every entry is dirty and all counts are zero now: each is to be deleted.
        let mut dirty: Vec<(Vec<u8>, Vec<u8>, bool)> = Vec::new();
        entries
            .take_dirty(&hasher, |k, c, live| {
                dirty.push((k.to_vec(), c.to_vec(), live));
                Ok(())
            })
            .unwrap();
        assert_eq!(dirty.len(), 17);
        for (key, counts, live) in dirty {
            let width: usize = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
            assert_eq!((counts, live), (vec![0; width.div_ceil(8)], false));
        }
    }
}
