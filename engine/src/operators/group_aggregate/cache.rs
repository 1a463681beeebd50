//! The groups a [`super::GroupAggregateOperator`] worked on lately, kept in memory between
//! barriers (RisingWave's managed state cache, Flink's heap state in front of RocksDB).
//!
//! A group's state is read from the store once, then changed in memory; changed groups are
//! written back at the next barrier ([`GroupCache::flush`], before the runtime checkpoints the
//! store) or when the cache outgrows its share of `memory_budget` ([`GroupCache::trim`]: every
//! change written, then the cache emptied). COUNT(DISTINCT) multiset entries ride with their
//! group. Deleting a group is written to the store at once by the operator (a range delete
//! that also covers the MIN / MAX multisets, which stay in the store because their current
//! extreme is read with a range scan); [`GroupCache::deleted`] then records that nothing of
//! the group is left.
//!
//! A group the store did not have when it was read (or whose state was deleted since) has no
//! COUNT(DISTINCT) entry in the store either (they are written and deleted with the group's
//! state): while it stays in memory, every entry it has is in memory, so a value not found
//! there is new and is not looked up in the store. Streams of new groups and new values
//! (unique visitors per page and day) then never read the store.

use ahash::RandomState;
use datafusion::common::HashMap;

use crate::error::{EngineError, Result};
use crate::state::{just_after, ChunkedWrites, StateBackend};

use super::distinct::decode_counts;
use super::distinct_entries::DistinctEntries;
use super::state::GroupState;

/// Bytes a cached group costs besides its keys, state and distinct entries: its map slot
/// (the table 1.5x its length on average) and the rounding of its two key allocations.
const SLOT_OVERHEAD: usize = std::mem::size_of::<(Vec<u8>, Slot)>() * 3 / 2 + 32;

fn state_bytes(state: &Option<GroupState>) -> usize {
    state.as_ref().map_or(0, GroupState::size)
}

/// What a cached group costs: its entry, group row, store key, state and distinct entries.
fn slot_bytes(group: &[u8], slot: &Slot) -> usize {
    SLOT_OVERHEAD
        + group.len()
        + slot.key.len()
        + slot.multisets.len()
        + state_bytes(&slot.state)
        + slot.distinct.bytes()
}

/// One cached group.
#[derive(Default)]
struct Slot {
    /// The stored group key.
    key: Vec<u8>,
    /// `None`: the group has no state.
    state: Option<GroupState>,
    dirty: bool,
    /// Every COUNT(DISTINCT) entry of the group the store holds is in `distinct` (the group
    /// was not in the store when read, or was deleted since): a missing entry is zero.
    complete: bool,
    /// The store key of the group's multisets, which its entries' keys follow (empty until
    /// the group has an entry).
    multisets: Vec<u8>,
    /// COUNT(DISTINCT) multiset entries read or changed.
    distinct: DistinctEntries,
}

/// The store key of `slot`'s multisets, made the first time (its bytes counted in `bytes`).
fn multisets<'s>(
    slot: &'s mut Slot,
    group: &[u8],
    prefix: impl Fn(&[u8]) -> Vec<u8>,
    bytes: &mut usize,
) -> &'s [u8] {
    if slot.multisets.is_empty() {
        slot.multisets = prefix(group);
        *bytes += slot.multisets.len();
    }
    &slot.multisets
}

/// One COUNT(DISTINCT) multiset's changes in a batch ([`GroupCache::apply_distinct`]).
pub(super) struct DistinctBatch<'a> {
    /// The multiset's byte in its entries' keys.
    pub set: u8,
    /// Counts per entry (one per member aggregate).
    pub width: usize,
    /// Append-only input: the counts are 0 or 1, kept and stored as bits.
    pub seen: bool,
    /// Per group (its row), its changed entries.
    pub groups: Vec<(&'a [u8], Vec<ChangedEntry<'a>>)>,
}

/// A changed COUNT(DISTINCT) entry: its value row and the caller's index of it.
pub(super) type ChangedEntry<'a> = (&'a [u8], usize);

/// Cached groups by group row (see the module doc).
pub(super) struct GroupCache {
    groups: HashMap<Vec<u8>, Slot>,
    aggregates: usize,
    bytes: usize,
    budget: usize,
    /// Hashes distinct entries' keys.
    hasher: RandomState,
    /// Counts of a distinct entry being changed.
    scratch: Vec<i64>,
}

impl GroupCache {
    /// A cache for groups of `aggregates` aggregates, emptied past `budget` bytes.
    pub fn new(aggregates: usize, budget: usize) -> Self {
        Self {
            groups: HashMap::default(),
            aggregates,
            bytes: 0,
            budget,
            hasher: RandomState::new(),
            scratch: Vec::new(),
        }
    }

    /// The state of `group` (stored under `key`), from memory or read from the store.
    pub fn state(
        &mut self,
        store: &dyn StateBackend,
        group: &[u8],
        key: impl FnOnce() -> Vec<u8>,
    ) -> Result<Option<GroupState>> {
        if let Some(slot) = self.groups.get(group) {
            return Ok(slot.state.clone());
        }
        let key = key();
        let state = store
            .get(&key)?
            .map(|b| GroupState::decode(&b, self.aggregates))
            .transpose()?;
        let slot = Slot {
            key,
            complete: state.is_none(),
            state: state.clone(),
            ..Slot::default()
        };
        self.bytes += slot_bytes(group, &slot);
        self.groups.insert(group.to_vec(), slot);
        Ok(state)
    }

    /// Reads the states of those of `groups` not in memory from the store together (one
    /// batched read), so that [`Self::state`] finds every one of them in memory.
    pub fn read_states(
        &mut self,
        store: &dyn StateBackend,
        groups: &[Vec<u8>],
        key: impl Fn(&[u8]) -> Vec<u8>,
    ) -> Result<()> {
        let missing: Vec<&Vec<u8>> = groups
            .iter()
            .filter(|g| !self.groups.contains_key(g.as_slice()))
            .collect();
        if missing.len() < 2 {
            return Ok(());
        }
        let keys: Vec<Vec<u8>> = missing.iter().map(|g| key(g)).collect();
        let values = store.get_each(&keys)?;
        for ((group, key), value) in missing.into_iter().zip(keys).zip(values) {
            let state = value
                .map(|b| GroupState::decode(&b, self.aggregates))
                .transpose()?;
            let slot = Slot {
                key,
                complete: state.is_none(),
                state,
                ..Slot::default()
            };
            self.bytes += slot_bytes(group, &slot);
            self.groups.insert(group.clone(), slot);
        }
        Ok(())
    }

    /// The group's new state, written back later. The group was read first.
    pub fn set_state(&mut self, group: &[u8], state: GroupState) {
        if let Some(slot) = self.groups.get_mut(group) {
            let old = state_bytes(&slot.state);
            slot.state = Some(state);
            slot.dirty = true;
            self.bytes = (self.bytes + state_bytes(&slot.state)).saturating_sub(old);
        }
    }

    /// The operator deleted everything stored of `group`.
    pub fn deleted(&mut self, group: &[u8]) {
        if let Some(slot) = self.groups.get_mut(group) {
            let old = slot_bytes(group, slot);
            slot.state = None;
            slot.dirty = false;
            slot.complete = true;
            slot.distinct = DistinctEntries::default();
            self.bytes = (self.bytes + slot_bytes(group, slot)).saturating_sub(old);
        }
    }

    /// Drops `group` from memory without writing it (its stored state is being deleted).
    pub fn forget(&mut self, group: &[u8]) {
        if let Some(slot) = self.groups.remove(group) {
            self.bytes = self.bytes.saturating_sub(slot_bytes(group, &slot));
        }
    }

    /// Applies one COUNT(DISTINCT) multiset's changes of a batch: each entry's `width` counts,
    /// from memory or else from the store (the entries the store must answer are read
    /// together, in one batched read), go to `apply` with the entry's index, which changes them
    /// and says whether they changed (then they are written back later; all zero: the entry
    /// goes). `prefix(group)` is the store key of a group's multisets, which the entry's key
    /// within the group (multiset byte, value row) follows. Every group was read first.
    pub fn apply_distinct(
        &mut self,
        store: &dyn StateBackend,
        batch: &DistinctBatch<'_>,
        prefix: impl Fn(&[u8]) -> Vec<u8>,
        mut apply: impl FnMut(usize, &mut [i64]) -> bool,
    ) -> Result<()> {
        let DistinctBatch {
            set, width, seen, ..
        } = *batch;
        let not_read = || {
            EngineError::Internal(
                "a COUNT(DISTINCT) entry of a group that was not read first".into(),
            )
        };
        // The entries the store must answer: of groups it may hold entries of, not in memory.
        let mut missing: Vec<usize> = Vec::new();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for (group, entries) in &batch.groups {
            let slot = self.groups.get_mut(*group).ok_or_else(not_read)?;
            if slot.complete {
                continue;
            }
            for &(value, e) in entries {
                if slot.distinct.contains(&self.hasher, set, value) {
                    continue;
                }
                let prefix = multisets(slot, group, &prefix, &mut self.bytes);
                let mut key = Vec::with_capacity(prefix.len() + 1 + value.len());
                key.extend_from_slice(prefix);
                key.push(set);
                key.extend_from_slice(value);
                missing.push(e);
                keys.push(key);
            }
        }
        let stored = match keys.is_empty() {
            true => Vec::new(),
            false => store.get_each(&keys)?,
        };
        let mut stored = missing.into_iter().zip(stored).peekable();
        for (group, entries) in &batch.groups {
            let slot = self.groups.get_mut(*group).ok_or_else(not_read)?;
            multisets(slot, group, &prefix, &mut self.bytes);
            for &(value, e) in entries {
                let read = match stored.next_if(|(m, _)| *m == e) {
                    Some((_, Some(bytes))) => Some(bytes),
                    _ => None,
                };
                let read = || match read {
                    Some(bytes) => decode_counts(&bytes, width),
                    None => Ok(vec![0; width]),
                };
                self.bytes += slot.distinct.update(
                    &self.hasher,
                    (set, value),
                    seen,
                    read,
                    &mut self.scratch,
                    |counts| apply(e, counts),
                )?;
            }
        }
        Ok(())
    }

    /// Writes every change to the store (at a barrier, before the store is checkpointed), a
    /// chunk at a time.
    pub fn flush(&mut self, store: &dyn StateBackend) -> Result<()> {
        let mut writes = ChunkedWrites::new(store);
        for slot in self.groups.values_mut() {
            if std::mem::take(&mut slot.dirty) {
                if let Some(state) = &slot.state {
                    writes.put(slot.key.clone(), state.encode())?;
                }
            }
            let multisets = &slot.multisets;
            slot.distinct
                .take_dirty(&self.hasher, |key, counts, live| {
                    write_distinct(&mut writes, multisets, key, counts, live)
                })?;
        }
        writes.finish()
    }

    /// Past the budget: writes every change and empties the cache (moving keys into the
    /// writes instead of copying them, and freeing the map's table too).
    pub fn trim(&mut self, store: &dyn StateBackend) -> Result<()> {
        if self.bytes <= self.budget {
            return Ok(());
        }
        self.bytes = 0;
        let mut writes = ChunkedWrites::new(store);
        for mut slot in std::mem::take(&mut self.groups).into_values() {
            if let (true, Some(state)) = (slot.dirty, &slot.state) {
                writes.put(slot.key, state.encode())?;
            }
            let multisets = &slot.multisets;
            slot.distinct
                .take_dirty(&self.hasher, |key, counts, live| {
                    write_distinct(&mut writes, multisets, key, counts, live)
                })?;
        }
        writes.finish()
    }
}

/// A COUNT(DISTINCT) entry's counts (as stored) under `prefix` and its key within the group:
/// put, or deleted when none is above zero (not `live`).
fn write_distinct(
    writes: &mut ChunkedWrites<'_>,
    prefix: &[u8],
    key: &[u8],
    counts: &[u8],
    live: bool,
) -> Result<()> {
    let key = [prefix, key].concat();
    if live {
        writes.put(key, counts.to_vec())
    } else {
        let end = just_after(&key);
        writes.delete_range(key, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryStateBackend, WriteBatch};

    fn encode_counts(counts: &[i64]) -> Vec<u8> {
        counts.iter().flat_map(|c| c.to_le_bytes()).collect()
    }

    /// The store key of group `g`'s multisets.
    fn prefix(g: &[u8]) -> Vec<u8> {
        [b"k", g, b"-"].concat()
    }

    /// The store key of value `v` in group `g`'s multiset 7.
    fn entry(g: &[u8], v: &[u8]) -> Vec<u8> {
        [prefix(g), vec![7], v.to_vec()].concat()
    }

    /// Sets the entry of `value` in `group`'s multiset 7 to `to`; returns what it was.
    fn set_in(
        cache: &mut GroupCache,
        store: &dyn StateBackend,
        group: &[u8],
        value: &[u8],
        to: &[i64],
    ) -> Result<Vec<i64>> {
        let batch = DistinctBatch {
            set: 7,
            width: to.len(),
            seen: false,
            groups: vec![(group, vec![(value, 0)])],
        };
        let mut was = Vec::new();
        cache.apply_distinct(store, &batch, prefix, |e, counts| {
            assert_eq!(e, 0);
            was = counts.to_vec();
            counts.copy_from_slice(to);
            was != to
        })?;
        Ok(was)
    }

    fn set(cache: &mut GroupCache, store: &dyn StateBackend, value: &[u8], to: &[i64]) -> Vec<i64> {
        set_in(cache, store, b"a", value, to).unwrap()
    }

    fn store_with(puts: Vec<(Vec<u8>, Vec<u8>)>) -> MemoryStateBackend {
        let store = MemoryStateBackend::default();
        store
            .write(WriteBatch {
                puts,
                ..WriteBatch::default()
            })
            .unwrap();
        store
    }

    fn stored(store: &dyn StateBackend, key: &[u8]) -> Option<GroupState> {
        store
            .get(key)
            .unwrap()
            .map(|b| GroupState::decode(&b, 1).unwrap())
    }

    #[test]
    fn changes_reach_the_store_at_a_flush_and_past_the_budget() {
        let store = MemoryStateBackend::default();
        let mut cache = GroupCache::new(1, usize::MAX);
        assert_eq!(cache.state(&store, b"a", || b"ka".to_vec()).unwrap(), None);
        let mut s = GroupState::new(1);
        s.rows = 2;
        cache.set_state(b"a", s.clone());
        assert_eq!(set(&mut cache, &store, b"x", &[3, 1]), [0, 0]);
        // Memory answers; the store has nothing yet.
        assert_eq!(
            cache.state(&store, b"a", || unreachable!()).unwrap(),
            Some(s.clone())
        );
        assert_eq!(set(&mut cache, &store, b"x", &[3, 1]), [3, 1]);
        assert_eq!(stored(&store, b"ka"), None);
        cache.flush(&store).unwrap();
        assert_eq!(stored(&store, b"ka"), Some(s.clone()));
        let x = entry(b"a", b"x");
        assert_eq!(store.get(&x).unwrap(), Some(encode_counts(&[3, 1])));

        // An entry set to what it holds is not written again.
        let mut gone = WriteBatch::default();
        gone.delete_ranges.push((x.clone(), just_after(&x)));
        store.write(gone).unwrap();
        set(&mut cache, &store, b"x", &[3, 1]);
        cache.flush(&store).unwrap();
        assert_eq!(store.get(&x).unwrap(), None);
        assert!(set_in(&mut cache, &store, b"b", b"x", &[1]).is_err());
        set(&mut cache, &store, b"x", &[2, 1]);
        cache.flush(&store).unwrap();
        assert_eq!(store.get(&x).unwrap(), Some(encode_counts(&[2, 1])));

        // A count back to zero deletes the entry; a tiny budget empties the cache after
        // writing what changed.
        set(&mut cache, &store, b"x", &[0, -1]);
        s.rows = 5;
        cache.set_state(b"a", s.clone());
        cache.budget = 1;
        cache.trim(&store).unwrap();
        assert!(cache.groups.is_empty());
        assert_eq!(stored(&store, b"ka"), Some(s));
        assert_eq!(store.get(&x).unwrap(), None);
    }

    #[test]
    fn entries_of_a_group_the_store_lacks_are_not_read_from_it() {
        // A store holding entries whose group has no state: never the case in a real store
        // (entries go with their group's state), so whether the cache reads them shows
        // whether it asked the store.
        let mut puts = vec![(b"kb".to_vec(), GroupState::new(1).encode())];
        for (i, (g, v)) in [(b"a", b"x"), (b"a", b"y"), (b"b", b"x"), (b"b", b"y")]
            .into_iter()
            .enumerate()
        {
            puts.push((entry(g, v), encode_counts(&[i as i64 + 7])));
        }
        let store = store_with(puts);
        let mut cache = GroupCache::new(1, usize::MAX);
        let groups = [b"a".to_vec(), b"b".to_vec()];
        cache
            .read_states(&store, &groups, |g| [b"k", g].concat())
            .unwrap();
        // One entry and several groups' entries in one batch: a new group's entries start at
        // zero, a stored group's are read.
        assert_eq!(set_in(&mut cache, &store, b"a", b"x", &[0]).unwrap(), [0]);
        assert_eq!(set_in(&mut cache, &store, b"b", b"x", &[9]).unwrap(), [9]);
        let batch = DistinctBatch {
            set: 7,
            width: 1,
            seen: false,
            groups: vec![(b"a", vec![(b"y", 0)]), (b"b", vec![(b"y", 1), (b"z", 2)])],
        };
        let mut seen = vec![Vec::new(); 3];
        cache
            .apply_distinct(&store, &batch, prefix, |e, counts| {
                seen[e] = counts.to_vec();
                false
            })
            .unwrap();
        assert_eq!(seen, [vec![0], vec![10], vec![0]]);
        // Emptied past the budget, the group is read again (now from the store): its entries
        // are read too.
        cache.state(&store, b"c", || b"kc".to_vec()).unwrap();
        cache.set_state(b"c", GroupState::new(1));
        cache.budget = 1;
        cache.trim(&store).unwrap();
        cache.budget = usize::MAX;
        let mut later = WriteBatch::default();
        later.puts.push((entry(b"c", b"x"), encode_counts(&[3])));
        store.write(later).unwrap();
        cache.state(&store, b"c", || b"kc".to_vec()).unwrap();
        assert_eq!(set_in(&mut cache, &store, b"c", b"x", &[3]).unwrap(), [3]);
        // A deleted group has nothing left in the store.
        cache.deleted(b"c");
        assert_eq!(set_in(&mut cache, &store, b"c", b"x", &[0]).unwrap(), [0]);
    }

    #[test]
    fn an_append_only_multiset_stores_bits_and_reads_counts_stored_before() {
        // Ten members: two bytes of bits. One entry as i64 counts (an earlier checkpoint).
        let store = store_with(vec![
            (b"ka".to_vec(), GroupState::new(1).encode()),
            (
                entry(b"a", b"old"),
                encode_counts(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            ),
        ]);
        let mut cache = GroupCache::new(1, usize::MAX);
        cache.state(&store, b"a", || b"ka".to_vec()).unwrap();
        let batch = DistinctBatch {
            set: 7,
            width: 10,
            seen: true,
            groups: vec![(b"a", vec![(b"old", 0), (b"new", 1)])],
        };
        let mut seen = vec![Vec::new(); 2];
        cache
            .apply_distinct(&store, &batch, prefix, |e, counts| {
                seen[e] = counts.to_vec();
                counts[8] = 1;
                true
            })
            .unwrap();
        assert_eq!(seen[0], [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(seen[1], [0; 10]);
        cache.flush(&store).unwrap();
        // Written back as bits (member m: bit m % 8 of byte m / 8).
        assert_eq!(store.get(&entry(b"a", b"old")).unwrap(), Some(vec![1, 3]));
        assert_eq!(store.get(&entry(b"a", b"new")).unwrap(), Some(vec![0, 1]));
        // Read back from the store, in either form.
        for (bytes, counts) in [
            (vec![1, 3], vec![1, 0, 0, 0, 0, 0, 0, 0, 1, 1]),
            (encode_counts(&[2; 10]), vec![2; 10]),
        ] {
            assert_eq!(decode_counts(&bytes, 10).unwrap(), counts);
        }
        assert!(decode_counts(&[1, 2, 3], 10).is_err());
    }

    #[test]
    fn a_deleted_or_forgotten_group_writes_nothing_back() {
        let store = MemoryStateBackend::default();
        let mut cache = GroupCache::new(1, usize::MAX);
        cache.state(&store, b"a", || b"ka".to_vec()).unwrap();
        cache.set_state(b"a", GroupState::new(1));
        set(&mut cache, &store, b"x", &[1]);
        cache.deleted(b"a");
        cache.state(&store, b"b", || b"kb".to_vec()).unwrap();
        cache.set_state(b"b", GroupState::new(1));
        cache.forget(b"b");
        cache.flush(&store).unwrap();
        assert_eq!(store.get(b"ka").unwrap(), None);
        assert_eq!(store.get(&entry(b"a", b"x")).unwrap(), None);
        assert_eq!(store.get(b"kb").unwrap(), None);
        // A deleted group is known to be empty: no read of the store.
        assert_eq!(cache.state(&store, b"a", || unreachable!()).unwrap(), None);
        // What left memory no longer counts against the budget.
        cache.forget(b"a");
        assert_eq!((cache.groups.len(), cache.bytes), (0, 0));
    }
}
