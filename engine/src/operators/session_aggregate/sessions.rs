//! The open sessions of a [`super::SessionAggregateOperator`]: in memory within a share of
//! `memory_budget`, in the task's store past it (Flink keeps a merging window set and its
//! timers in RocksDB; here memory is a cache in front of the store, like the updating GROUP
//! BY's groups).
//!
//! ```text
//! sessions range:  k | key                  -> (start: i64, end: i64, len: u32, state)*
//! timers range:    ordered(end) | key       -> ()          (keys whose sessions are stored)
//! ```
//!
//! - A key's open sessions (by start, never overlapping or touching) move as one: in memory
//!   with one timer per session at its end, or in the store as one entry plus one stored
//!   timer per session. A key in memory has no stored timers.
//! - Past the budget every key in memory goes to the store (its entry written if it changed,
//!   its timers written) and memory starts empty ([`OpenSessions::spill`]). From then on a row
//!   of a key not in memory reads the key's entry first ([`OpenSessions::load`], several keys
//!   in one batched read), and firing reads the keys whose stored timers are due, a chunk at a
//!   time, in order of end, so the sessions fire in the order they would from memory.
//! - At a barrier the changed keys in memory are written ([`OpenSessions::flush`]), not their
//!   timers: a restore rebuilds every timer from the sessions, loading them into memory up to
//!   the budget and writing timers for the rest. Entries of the earlier format (one per
//!   session, `s | len(key): u32 | key | ordered(start) -> end, state`) are converted then.

use std::collections::BTreeMap;

use datafusion::common::{HashMap, HashSet};

use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::operators::group_aggregate::state::{ordered, GroupState};
use crate::state::{
    just_after, same_bytes, value_of, ChunkedWrites, KeyBytes, StateHandle, WriteBatch,
};

/// First byte of a key's stored sessions.
const KEY_TAG: u8 = b'k';
/// First byte of one stored session in the format before [`KEY_TAG`] entries.
const OLD_TAG: u8 = b's';

/// Fired sessions handed out at a time ([`OpenSessions::fire_until`]).
pub(super) const FIRE_CHUNK: usize = 8192;
/// Stored timers read at a time when they come due.
const PROMOTE_CHUNK: usize = 1024;
/// Stored entries read at a time on a restore.
const RESTORE_CHUNK: usize = 4096;

/// What a key in memory costs besides its bytes: its map slot (the table 1.5x its length on
/// average) and the rounding of its allocation.
const KEY_BYTES: usize = std::mem::size_of::<(Vec<u8>, KeySessions)>() * 3 / 2 + 32;
/// What a session costs besides its state's own size: its slot in the key's tree (nodes about
/// half full).
const SESSION_BYTES: usize = std::mem::size_of::<(EventTime, Session)>() * 2;
/// What a timer costs besides its copy of the key: its slot in the end's list (grown by
/// doubling) and the copy's rounding.
const TIMER_BYTES: usize = std::mem::size_of::<(Vec<u8>, EventTime)>() * 2 + 16;

/// One open session of a key (its start is its key in the key's tree).
#[derive(Debug)]
struct Session {
    end: EventTime,
    state: GroupState,
    /// What it was counted as in [`OpenSessions::bytes`].
    bytes: usize,
}

impl Session {
    fn new(end: EventTime, state: GroupState) -> Self {
        let bytes = SESSION_BYTES + state.size();
        Self { end, state, bytes }
    }
}

/// A key's open sessions by start.
type Sessions = BTreeMap<EventTime, Session>;

/// A key in memory.
#[derive(Debug, Default)]
struct KeySessions {
    open: Sessions,
    /// Changed since it was last written.
    dirty: bool,
    /// Has an entry in the store.
    stored: bool,
}

/// A session that fired.
pub(super) struct Fired {
    pub key: Vec<u8>,
    pub start: EventTime,
    pub end: EventTime,
    pub state: GroupState,
}

/// The open sessions (see the module doc).
pub(super) struct OpenSessions {
    keys: HashMap<Vec<u8>, KeySessions>,
    /// Session ends: `(key, start)` of each session in memory, under its end.
    timers: BTreeMap<EventTime, Vec<(Vec<u8>, EventTime)>>,
    /// Estimated bytes of `keys` and `timers`.
    bytes: usize,
    budget: usize,
    /// The store may hold keys that are not in memory.
    spilled: bool,
    /// The earliest stored timer's end; `None`: no stored timers.
    stored_from: Option<EventTime>,
    sessions: StateHandle,
    stored_timers: StateHandle,
    aggregates: usize,
    /// Per aggregate: its running sum is an f64.
    floats: Vec<bool>,
    /// Scratch: `(start, end)` of the sessions the last placement moved or merged away.
    moved: Vec<(EventTime, EventTime)>,
}

impl OpenSessions {
    /// Empty open sessions keeping at most about `budget` bytes in memory; `sessions` and
    /// `stored_timers` are the store's two ranges. [`Self::restore`] reads stored sessions.
    pub fn new(
        sessions: StateHandle,
        stored_timers: StateHandle,
        budget: usize,
        floats: Vec<bool>,
    ) -> Self {
        Self {
            keys: HashMap::default(),
            timers: BTreeMap::new(),
            bytes: 0,
            budget,
            spilled: false,
            stored_from: None,
            sessions,
            stored_timers,
            aggregates: floats.len(),
            floats,
            moved: Vec::new(),
        }
    }

    /// Estimated bytes in memory.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keys in memory.
    #[cfg(test)]
    pub fn keys_in_memory(&self) -> usize {
        self.keys.len()
    }

    /// [`Self::bytes`] counted again from what memory holds.
    #[cfg(test)]
    pub fn recount(&self) -> usize {
        let keys: usize = self
            .keys
            .iter()
            .map(|(k, s)| {
                let sessions = s.open.values();
                KEY_BYTES
                    + k.len()
                    + sessions
                        .map(|s| SESSION_BYTES + s.state.size())
                        .sum::<usize>()
            })
            .sum();
        let timers: usize = self
            .timers
            .values()
            .flatten()
            .map(|(k, _)| TIMER_BYTES + k.len())
            .sum();
        keys + timers
    }

    /// Whether `key`'s sessions are in memory (or nothing of it is stored).
    pub fn holds(&self, key: &[u8]) -> bool {
        !self.spilled || self.keys.contains_key(&KeyBytes(key))
    }

    fn entry_key(&self, key: &[u8]) -> Vec<u8> {
        self.sessions.key_of_parts(&[&[KEY_TAG], key])
    }

    fn timer_key(&self, end: EventTime, key: &[u8]) -> Vec<u8> {
        self.stored_timers.key_of_parts(&[&ordered(end), key])
    }

    /// Brings the sessions of those of `keys` not in memory from the store (one batched
    /// read), deleting their stored timers. A key the store does not hold enters memory
    /// without sessions, so that it is not looked for again.
    pub fn load<'k>(&mut self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<()> {
        self.load_except(keys, &HashSet::default())
    }

    /// [`Self::load`], leaving the stored timers in `deleted` alone (deleted already).
    fn load_except<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        deleted: &HashSet<Vec<u8>>,
    ) -> Result<()> {
        if !self.spilled {
            return Ok(());
        }
        let mut missing: Vec<&[u8]> = keys
            .into_iter()
            .filter(|k| !self.keys.contains_key(*k))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let store = self.sessions.store()?;
        let entries: Vec<Vec<u8>> = missing.iter().map(|k| self.entry_key(k)).collect();
        let values = store.get_each(&entries)?;
        let mut deletes = WriteBatch::default();
        for (key, value) in missing.into_iter().zip(values) {
            let Some(value) = value else {
                self.insert(key.to_vec(), Sessions::new(), false, false);
                continue;
            };
            let open = decode_sessions(&value, self.aggregates)?;
            for s in open.values() {
                let timer = self.timer_key(s.end, key);
                if deleted.contains(&timer) {
                    continue;
                }
                let end = just_after(&timer);
                deletes.delete_ranges.push((timer, end));
            }
            self.insert(key.to_vec(), open, false, true);
        }
        if !deletes.delete_ranges.is_empty() {
            store.write(deletes)?;
        }
        Ok(())
    }

    /// Puts a key's sessions into memory, with their timers.
    fn insert(&mut self, key: Vec<u8>, open: Sessions, dirty: bool, stored: bool) {
        self.bytes += KEY_BYTES + key.len();
        for (&start, s) in &open {
            self.bytes += s.bytes;
            add_timer(&mut self.timers, &mut self.bytes, &key, start, s.end);
        }
        let entry = KeySessions {
            open,
            dirty,
            stored,
        };
        self.keys.insert(key, entry);
    }

    /// Places a row `(t, gap, W_r)` of `key` among the key's sessions, as the session window
    /// merges them (reading the key from the store first if needed), then folds it into its
    /// session's state with `fold`. Returns false when the row is late: it touches no session
    /// and its own window ended under `W_r`.
    pub fn place(
        &mut self,
        key: &[u8],
        row: (EventTime, i64, EventTime),
        fold: impl FnOnce(&mut GroupState) -> Result<()>,
    ) -> Result<bool> {
        if !self.holds(key) {
            self.load([key])?;
        }
        let bytes = &mut self.bytes;
        let entry = value_of(&mut self.keys, key, || {
            *bytes += KEY_BYTES + key.len();
            KeySessions::default()
        })?;
        let placed = place_row(
            &mut entry.open,
            row,
            self.aggregates,
            &self.floats,
            &mut self.bytes,
            &mut self.moved,
        );
        for (start, end) in self.moved.drain(..) {
            remove_timer(&mut self.timers, &mut self.bytes, key, start, end);
        }
        let Some((start, retimed)) = placed else {
            if entry.open.is_empty() && !entry.stored {
                self.keys.remove(&KeyBytes(key));
                self.bytes -= KEY_BYTES + key.len();
            }
            return Ok(false);
        };
        let session = entry
            .open
            .get_mut(&start)
            .ok_or_else(|| EngineError::Internal("a placed row lost its session".into()))?;
        fold(&mut session.state)?;
        let bytes = SESSION_BYTES + session.state.size();
        self.bytes = (self.bytes + bytes).saturating_sub(session.bytes);
        session.bytes = bytes;
        entry.dirty = true;
        if retimed {
            add_timer(&mut self.timers, &mut self.bytes, key, start, session.end);
        }
        Ok(true)
    }

    /// Takes out the sessions ending at or before `point`, in order of end, into `fired`
    /// (stored ones read back first). Returns true when it stopped with [`FIRE_CHUNK`] of them
    /// in `fired`: the caller hands those on and calls again.
    pub fn fire_until(&mut self, point: EventTime, fired: &mut Vec<Fired>) -> Result<bool> {
        let mut emptied = WriteBatch::default();
        let more = self.fire_into(point, fired, &mut emptied);
        if !emptied.delete_ranges.is_empty() {
            self.sessions.store()?.write(emptied)?;
        }
        more
    }

    /// [`Self::fire_until`], adding the deletion of the stored entries of keys left without
    /// sessions to `emptied`: such keys leave memory at once, so that a key is not kept for
    /// nothing after its last session fired.
    fn fire_into(
        &mut self,
        point: EventTime,
        fired: &mut Vec<Fired>,
        emptied: &mut WriteBatch,
    ) -> Result<bool> {
        loop {
            if self.stored_from.is_some_and(|s| s <= point) {
                self.promote(point)?;
            }
            while let Some(mut due) = self.timers.first_entry() {
                let end = *due.key();
                if end > point || self.stored_from.is_some_and(|s| s <= end) {
                    break;
                }
                let next = due.get_mut().pop();
                if due.get().is_empty() {
                    due.remove();
                }
                let Some((key, start)) = next else { continue };
                self.bytes = self.bytes.saturating_sub(TIMER_BYTES + key.len());
                let lost = || EngineError::Internal("a session timer outlived its session".into());
                let entry = self.keys.get_mut(&key).ok_or_else(lost)?;
                let session = entry.open.remove(&start).ok_or_else(lost)?;
                debug_assert_eq!(session.end, end);
                self.bytes = self.bytes.saturating_sub(session.bytes);
                if entry.open.is_empty() {
                    if entry.stored {
                        let stored = self.entry_key(&key);
                        let end = just_after(&stored);
                        emptied.delete_ranges.push((stored, end));
                    }
                    self.keys.remove(&key);
                    self.bytes = self.bytes.saturating_sub(KEY_BYTES + key.len());
                } else {
                    entry.dirty = true;
                }
                fired.push(Fired {
                    key,
                    start,
                    end,
                    state: session.state,
                });
                if fired.len() >= FIRE_CHUNK {
                    return Ok(true);
                }
            }
            if self.stored_from.is_none_or(|s| s > point) {
                return Ok(false);
            }
        }
    }

    /// Brings the keys of the first stored timers due by `point` into memory (their timers
    /// with them) and finds the next stored timer.
    fn promote(&mut self, point: EventTime) -> Result<()> {
        let store = self.stored_timers.store()?;
        // From the earliest stored timer, not the range's start: the timers taken out before
        // it left deletions there that a scan would step over again each time.
        let (_, all_hi) = self.stored_timers.all();
        let lo = match self.stored_from {
            Some(from) => self.stored_timers.key(&ordered(from)),
            None => return Ok(()),
        };
        let hi = match point.checked_add(1) {
            Some(next) => self.stored_timers.key(&ordered(next)),
            None => all_hi.clone(),
        };
        let due = store.scan_first(&lo, &hi, PROMOTE_CHUNK)?;
        let skip = self.stored_timers.prefix_len() + 8;
        let mut keys = Vec::with_capacity(due.len());
        let mut deletes = WriteBatch::default();
        let mut deleted = HashSet::default();
        for (timer, _) in due {
            let key = timer
                .get(skip..)
                .ok_or_else(|| EngineError::State("stored session timer is malformed".into()))?;
            keys.push(key.to_vec());
            let end = just_after(&timer);
            deletes.delete_ranges.push((timer.clone(), end));
            deleted.insert(timer);
        }
        // The timers read go even when their key's entry is missing (nothing to fire then);
        // reading the keys back deletes only their other timers.
        store.write(deletes)?;
        self.load_except(keys.iter().map(Vec::as_slice), &deleted)?;
        self.stored_from = match store.first_key(&lo, &all_hi)? {
            Some(first) => Some(end_of_timer(&first, self.stored_timers.prefix_len())?),
            None => None,
        };
        Ok(())
    }

    /// Moves every key in memory to the store when memory holds more than the budget.
    pub fn enforce_budget(&mut self) -> Result<()> {
        if self.bytes > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Moves every key in memory to the store: its entry written if it changed (deleted if
    /// it has no session left), a stored timer per session.
    pub fn spill(&mut self) -> Result<()> {
        let store = self.sessions.store()?;
        let mut writes = ChunkedWrites::new(store.as_ref());
        let mut first = self.stored_from;
        for (key, k) in std::mem::take(&mut self.keys) {
            let entry = self.entry_key(&key);
            if k.open.is_empty() {
                if k.stored {
                    let end = just_after(&entry);
                    writes.delete_range(entry, end)?;
                }
                continue;
            }
            if k.dirty || !k.stored {
                writes.put(entry, encode_sessions(&k.open))?;
            }
            for s in k.open.values() {
                writes.put(self.timer_key(s.end, &key), Vec::new())?;
                first = Some(first.map_or(s.end, |f| f.min(s.end)));
            }
        }
        writes.finish()?;
        self.timers.clear();
        self.bytes = 0;
        self.spilled = true;
        self.stored_from = first;
        Ok(())
    }

    /// Writes the keys changed since the last barrier (before the runtime checkpoints the
    /// store); keys left without sessions leave memory.
    pub fn flush(&mut self) -> Result<()> {
        let store = self.sessions.store()?;
        let mut writes = ChunkedWrites::new(store.as_ref());
        let mut emptied = Vec::new();
        for (key, k) in self.keys.iter_mut().filter(|(_, k)| k.dirty) {
            k.dirty = false;
            let entry = self.sessions.key_of_parts(&[&[KEY_TAG], key]);
            if k.open.is_empty() {
                let end = just_after(&entry);
                writes.delete_range(entry, end)?;
                emptied.push(key.clone());
                continue;
            }
            writes.put(entry, encode_sessions(&k.open))?;
            k.stored = true;
        }
        writes.finish()?;
        for key in emptied {
            self.keys.remove(&key);
            self.bytes = self.bytes.saturating_sub(KEY_BYTES + key.len());
        }
        Ok(())
    }

    /// Reads the stored sessions back after a restore (into memory up to the budget; stored
    /// timers for the rest), converting entries of the earlier format.
    pub fn restore(&mut self) -> Result<()> {
        let store = self.sessions.store()?;
        let (tlo, thi) = self.stored_timers.all();
        store.write(WriteBatch {
            delete_ranges: vec![(tlo, thi)],
            ..WriteBatch::default()
        })?;
        let (mut from, hi) = self.sessions.all();
        let skip = self.sessions.prefix_len();
        let mut writes = ChunkedWrites::new(store.as_ref());
        let mut old: Option<(Vec<u8>, Sessions)> = None;
        let mut converted = false;
        loop {
            let chunk = store.scan_first(&from, &hi, RESTORE_CHUNK)?;
            let Some((last, _)) = chunk.last() else { break };
            from = just_after(last);
            for (k, v) in chunk {
                let suffix = &k[skip..];
                match suffix.first() {
                    Some(&KEY_TAG) => {
                        let open = decode_sessions(&v, self.aggregates)?;
                        self.restored(suffix[1..].to_vec(), open, true, &mut writes)?;
                    }
                    Some(&OLD_TAG) => {
                        converted = true;
                        let (key, start) = parse_old(suffix)?;
                        let (end, state) = decode_old(&v, self.aggregates)?;
                        if old.as_ref().is_some_and(|(k, _)| k.as_slice() != key) {
                            if let Some((key, open)) = old.take() {
                                self.restored(key, open, false, &mut writes)?;
                            }
                        }
                        old.get_or_insert_with(|| (key.to_vec(), Sessions::new()))
                            .1
                            .insert(start, Session::new(end, state));
                    }
                    _ => return Err(EngineError::State("stored session key is malformed".into())),
                }
            }
        }
        if let Some((key, open)) = old.take() {
            self.restored(key, open, false, &mut writes)?;
        }
        if converted {
            let start = self.sessions.key(&[OLD_TAG]);
            let end = self.sessions.key(&[OLD_TAG + 1]);
            writes.delete_range(start, end)?;
        }
        writes.finish()
    }

    /// A key read on a restore: into memory while the budget allows, else its timers (and,
    /// when it is not `stored` in this format yet, its entry) to the store.
    fn restored(
        &mut self,
        key: Vec<u8>,
        open: Sessions,
        stored: bool,
        writes: &mut ChunkedWrites<'_>,
    ) -> Result<()> {
        let size: usize = KEY_BYTES
            + key.len()
            + open
                .values()
                .map(|s| s.bytes + TIMER_BYTES + key.len())
                .sum::<usize>();
        if self.bytes + size <= self.budget {
            self.insert(key, open, !stored, stored);
            return Ok(());
        }
        if !stored {
            writes.put(self.entry_key(&key), encode_sessions(&open))?;
        }
        for s in open.values() {
            writes.put(self.timer_key(s.end, &key), Vec::new())?;
            self.stored_from = Some(self.stored_from.map_or(s.end, |f| f.min(s.end)));
        }
        self.spilled = true;
        Ok(())
    }
}

fn add_timer(
    timers: &mut BTreeMap<EventTime, Vec<(Vec<u8>, EventTime)>>,
    bytes: &mut usize,
    key: &[u8],
    start: EventTime,
    end: EventTime,
) {
    *bytes += TIMER_BYTES + key.len();
    timers.entry(end).or_default().push((key.to_vec(), start));
}

fn remove_timer(
    timers: &mut BTreeMap<EventTime, Vec<(Vec<u8>, EventTime)>>,
    bytes: &mut usize,
    key: &[u8],
    start: EventTime,
    end: EventTime,
) {
    let Some(list) = timers.get_mut(&end) else {
        return;
    };
    if let Some(i) = list
        .iter()
        .position(|(k, s)| *s == start && same_bytes(k, key))
    {
        list.swap_remove(i);
        *bytes = bytes.saturating_sub(TIMER_BYTES + key.len());
    }
    if list.is_empty() {
        timers.remove(&end);
    }
}

/// Places a row (`(t, gap, W_r)`) among its key's sessions, as the session window merges
/// them: its window `[t, t + gap)` joins the sessions it overlaps or touches, adding their
/// states together. Returns its session's start and whether that session's end is new
/// (it needs a timer), or `None` when it touches none and its own window ended under `W_r`
/// (late). `(start, end)` of the sessions whose timer no longer holds (merged away, or
/// extended) go to `moved`; `bytes` follows the sessions made and merged away.
fn place_row(
    sessions: &mut Sessions,
    (t, gap, watermark): (EventTime, i64, EventTime),
    aggregates: usize,
    floats: &[bool],
    bytes: &mut usize,
    moved: &mut Vec<(EventTime, EventTime)>,
) -> Option<(EventTime, bool)> {
    let own_end = t.saturating_add(gap);
    // Sessions neither overlap nor touch, so by start their ends increase too: walking back
    // from the last one starting by `own_end`, they touch until one ends before `t`.
    let (first, second) = {
        let mut touched = sessions
            .range(..=own_end)
            .rev()
            .take_while(|(_, s)| s.end >= t)
            .map(|(&start, _)| start);
        (touched.next(), touched.next())
    };
    match (first, second) {
        (None, _) if own_end <= watermark => return None,
        (None, _) => {
            let session = Session::new(own_end, GroupState::new(aggregates));
            *bytes += session.bytes;
            sessions.insert(t, session);
            return Some((t, true));
        }
        (Some(start), None) if start <= t => {
            let session = sessions.get_mut(&start)?;
            if own_end <= session.end {
                return Some((start, false));
            }
            moved.push((start, session.end));
            session.end = own_end;
            return Some((start, true));
        }
        _ => {}
    }
    let starts: Vec<EventTime> = sessions
        .range(..=own_end)
        .rev()
        .take_while(|(_, s)| s.end >= t)
        .map(|(&start, _)| start)
        .collect();
    let mut start = t;
    let mut end = own_end;
    let mut state = GroupState::new(aggregates);
    for s in starts {
        if let Some(old) = sessions.remove(&s) {
            start = start.min(s);
            end = end.max(old.end);
            moved.push((s, old.end));
            *bytes = bytes.saturating_sub(old.bytes);
            state.merge(old.state, floats);
        }
    }
    let merged = Session::new(end, state);
    *bytes += merged.bytes;
    sessions.insert(start, merged);
    Some((start, true))
}

/// A key's sessions as stored: `(start, end, len(state): u32, state)` each.
fn encode_sessions(open: &Sessions) -> Vec<u8> {
    let mut out = Vec::new();
    for (&start, s) in open {
        let state = s.state.encode();
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&s.end.to_le_bytes());
        out.extend_from_slice(&(state.len() as u32).to_le_bytes());
        out.extend_from_slice(&state);
    }
    out
}

fn decode_sessions(mut bytes: &[u8], aggregates: usize) -> Result<Sessions> {
    let malformed = || EngineError::State("stored sessions are malformed".into());
    let mut open = Sessions::new();
    while !bytes.is_empty() {
        let start = EventTime::from_le_bytes(take(&mut bytes).ok_or_else(malformed)?);
        let end = EventTime::from_le_bytes(take(&mut bytes).ok_or_else(malformed)?);
        let len = u32::from_le_bytes(take(&mut bytes).ok_or_else(malformed)?) as usize;
        let state = bytes.get(..len).ok_or_else(malformed)?;
        open.insert(
            start,
            Session::new(end, GroupState::decode(state, aggregates)?),
        );
        bytes = &bytes[len..];
    }
    Ok(open)
}

/// The first `N` bytes of `bytes` as an array, advancing it.
fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let head: [u8; N] = bytes.get(..N)?.try_into().ok()?;
    *bytes = &bytes[N..];
    Some(head)
}

/// The time `ordered` encoded.
fn from_ordered(bytes: [u8; 8]) -> EventTime {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as EventTime
}

/// The end a stored timer's key (with the handle's `prefix` bytes) holds.
fn end_of_timer(timer: &[u8], prefix: usize) -> Result<EventTime> {
    let end: [u8; 8] = timer
        .get(prefix..prefix + 8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| EngineError::State("stored session timer is malformed".into()))?;
    Ok(from_ordered(end))
}

/// A key stored in the earlier format (without the handle's prefix): the partition key and
/// the session's start.
fn parse_old(suffix: &[u8]) -> Result<(&[u8], EventTime)> {
    let bad = || EngineError::State("stored session key is malformed".into());
    let rest = match suffix.split_first() {
        Some((&OLD_TAG, rest)) => rest,
        _ => return Err(bad()),
    };
    let len: [u8; 4] = rest
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = u32::from_be_bytes(len) as usize;
    let key = rest.get(4..4 + len).ok_or_else(bad)?;
    let start: [u8; 8] = rest
        .get(4 + len..12 + len)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    Ok((key, from_ordered(start)))
}

/// A session stored in the earlier format: `end: i64 LE, state`.
fn decode_old(value: &[u8], aggregates: usize) -> Result<(EventTime, GroupState)> {
    let end: [u8; 8] = value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| EngineError::State("stored session is malformed".into()))?;
    Ok((
        EventTime::from_le_bytes(end),
        GroupState::decode(&value[8..], aggregates)?,
    ))
}

/// The routing key of a stored session entry, either format (for a restore at another
/// parallelism).
pub(super) fn key_of_stored(suffix: &[u8]) -> Result<&[u8]> {
    match suffix.split_first() {
        Some((&KEY_TAG, key)) => Ok(key),
        _ => parse_old(suffix).map(|(key, _)| key),
    }
}

#[cfg(test)]
mod tests;
