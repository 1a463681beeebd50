//! How a [`super::StreamJoinOperator`] keeps each side's rows in the task's store.
//!
//! ```text
//! side tag | len(key row): u32 | key row | crc32(row): u32 | seq: u64 -> count: i64, matches: i64, row
//! ```
//!
//! The key row is the arrow row encoding of the join keys (coerced to one type per pair, so
//! both sides encode equal keys alike); the row is the encoding of the side's whole relation
//! row, kept in the value. One side's rows of a key are one range, read with one scan when the
//! other side's rows of that key arrive. Every inserted row is a new entry under a sequence
//! number of its own (RisingWave keeps a row under its join key and stream key alike), so an
//! insert is one put, never a read or a merge, and the store's keys stay short whatever the
//! rows' size: the memtable compares and compaction rewrites keys of a few dozen bytes, not
//! whole rows (profiled on Nexmark q20, rows in the key and counts merged into them: the
//! memtable inserts were most of the join's own CPU, flush and compaction half the job's).
//! A retraction finds a stored copy of its row by the row's hash: one short range, compared
//! row by row. `count` is how many copies of the row the entry holds (1 unless restored from
//! the earlier format, where equal rows shared an entry); `matches` is how many rows of the
//! other side (with multiplicity) it joins with, kept for the sides whose output depends on it
//! (the preserved side of an outer join, the emitted side of a semi or anti join).
//!
//! A side whose rows are never retracted nor counted (an append-only input that is neither
//! preserved by an outer join nor emitted by a semi or anti join: q20's bids) keeps each
//! batch's rows of one key together, as one run:
//!
//! ```text
//! side tag | len(key row): u32 | key row | ff ff ff ff | seq: u64 -> -n: i64, 0: i64, (len: u32, row)*n
//! ```
//!
//! one store entry per key and batch instead of one per row (q20's bids go to a few hot
//! auctions: a batch's thousands of rows make a few dozen entries, so the memtable inserts,
//! and flush's and compaction's work per key, are that much fewer). Read back, a run is one
//! entry per row, each with one copy and no matches, as a row stored on its own; such an
//! entry is never changed (nothing retracts or counts it), and writing it back is refused.
//!
//! The next sequence number is stored beside the sides ([`SEQ_TAG`]), written with every
//! batch that takes numbers: a restore goes on from it (from the largest of the old
//! instances' after a rescale; a key's rows all come from one old instance, so numbers
//! stay unique within a key). Entries of the earlier format (the row in the key, counts in
//! the value: tags `l` / `r`) are converted when restored ([`convert_earlier`]).

use crate::error::{EngineError, Result};
use crate::state::{just_after, StateBackend, StateHandle, WriteBatch};

/// The tags of the two sides' parts of the operator's key range.
pub(super) const SIDE_TAGS: [u8; 2] = [b'L', b'R'];
/// The sides' tags in the earlier format (the row in the key).
const EARLIER_TAGS: [u8; 2] = [b'l', b'r'];
/// The tag of the next sequence number's entry.
pub(super) const SEQ_TAG: u8 = b'n';

/// Entries converted per write when restoring the earlier format.
const CONVERT_CHUNK: usize = 4096;

/// A stored row of one side.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    /// The whole store key.
    pub key: Vec<u8>,
    /// The stored value: a header (`count` and `matches` as last written) and the row's
    /// encoding. Kept whole so that a read entry is not copied and a write moves it.
    value: Vec<u8>,
    pub count: i64,
    pub matches: i64,
    /// Changed by the current batch: written back after it.
    pub dirty: bool,
    /// In the store (else made by the current batch: nothing to delete if it ends empty).
    pub stored: bool,
    /// One row of a stored run (shares its key with the run's other rows).
    pub run: bool,
}

/// Bytes of a value before its row.
const HEADER: usize = 16;

/// What stands in a run's key where a row's hash stands in a row's.
const RUN_MARK: [u8; 4] = [0xff; 4];

impl Entry {
    /// An entry as stored under `key`.
    pub fn stored(key: Vec<u8>, value: Vec<u8>) -> Result<Self> {
        if run_len(&value)?.is_some() {
            return Err(EngineError::State(
                "join state holds a run of rows where one row was expected".into(),
            ));
        }
        let at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&value[i..i + 8]);
            i64::from_le_bytes(b)
        };
        Ok(Self {
            key,
            count: at(0),
            matches: at(8),
            value,
            dirty: false,
            stored: true,
            run: false,
        })
    }

    /// The rows stored under `key`: one entry, or one per row of a run.
    pub fn read_into(key: Vec<u8>, value: Vec<u8>, out: &mut Vec<Entry>) -> Result<()> {
        let Some(n) = run_len(&value)? else {
            out.push(Self::stored(key, value)?);
            return Ok(());
        };
        let bad = || EngineError::State(format!("join state run of {n} rows is malformed"));
        let mut at = HEADER;
        for _ in 0..n {
            let len: [u8; 4] = value
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(bad)?;
            let len = u32::from_le_bytes(len) as usize;
            let row = value.get(at + 4..at + 4 + len).ok_or_else(bad)?;
            let mut e = Self::inserted(key.clone(), row);
            (e.count, e.stored, e.run) = (1, true, true);
            out.push(e);
            at += 4 + len;
        }
        if at != value.len() {
            return Err(bad());
        }
        Ok(())
    }

    /// A row inserted by the current batch, under a key of its own: no copies yet.
    pub fn inserted(key: Vec<u8>, row: &[u8]) -> Self {
        let mut value = Vec::with_capacity(HEADER + row.len());
        value.resize(HEADER, 0);
        value.extend_from_slice(row);
        Self {
            key,
            value,
            count: 0,
            matches: 0,
            dirty: false,
            stored: false,
            run: false,
        }
    }

    /// What a retraction of a row that is not there takes: nothing.
    pub fn absent() -> Self {
        Self::inserted(Vec::new(), &[])
    }

    /// The row's encoding.
    pub fn row(&self) -> &[u8] {
        &self.value[HEADER..]
    }

    /// Bytes the entry holds.
    pub fn bytes(&self) -> usize {
        self.key.len() + self.value.len()
    }

    /// Adds the entry's write (after the batch changed it) to `writes`, moving its bytes. A
    /// row of a run cannot be written alone (it would replace the run).
    pub fn into_write(mut self, writes: &mut WriteBatch) -> Result<()> {
        if self.run {
            return Err(EngineError::Internal(
                "a row of a stored join run was changed".into(),
            ));
        }
        if self.count > 0 {
            self.value[..8].copy_from_slice(&self.count.to_le_bytes());
            self.value[8..HEADER].copy_from_slice(&self.matches.to_le_bytes());
            writes.puts.push((self.key, self.value));
        } else if self.stored {
            let end = just_after(&self.key);
            writes.delete_ranges.push((self.key, end));
        }
        Ok(())
    }
}

/// The number of rows of a stored value that is a run, `None` if it is one row's.
fn run_len(value: &[u8]) -> Result<Option<usize>> {
    let count: [u8; 8] = value
        .get(..8)
        .filter(|_| value.len() >= HEADER)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            EngineError::State(format!(
                "join state entry of {} bytes, expected at least 16",
                value.len()
            ))
        })?;
    let count = i64::from_le_bytes(count);
    Ok((count < 0).then(|| count.unsigned_abs() as usize))
}

/// The store entry of `rows`, the batch's rows of join key `key` on `handle`'s side, as one
/// run numbered `seq`.
pub(super) fn run_entry<'a>(
    handle: &StateHandle,
    key: &[u8],
    seq: u64,
    rows: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
) -> (Vec<u8>, Vec<u8>) {
    let k = handle.key_of_parts(&[
        &(key.len() as u32).to_be_bytes(),
        key,
        &RUN_MARK,
        &seq.to_be_bytes(),
    ]);
    let n = rows.len();
    let bytes: usize = rows.clone().map(|r| 4 + r.len()).sum();
    let mut v = Vec::with_capacity(HEADER + bytes);
    v.extend_from_slice(&(-(n as i64)).to_le_bytes());
    v.extend_from_slice(&0i64.to_le_bytes());
    for r in rows {
        v.extend_from_slice(&(r.len() as u32).to_le_bytes());
        v.extend_from_slice(r);
    }
    (k, v)
}

/// The store key prefix of `key`'s rows on the side of `handle`.
pub(super) fn key_prefix(handle: &StateHandle, key: &[u8]) -> Vec<u8> {
    handle.key_of_parts(&[&(key.len() as u32).to_be_bytes(), key])
}

/// The store key prefix of the copies of `row` with join key `key` on `handle`'s side (and
/// of the rows whose hash it shares).
pub(super) fn row_prefix(handle: &StateHandle, key: &[u8], row: &[u8]) -> Vec<u8> {
    handle.key_of_parts(&[
        &(key.len() as u32).to_be_bytes(),
        key,
        &crc32fast::hash(row).to_be_bytes(),
    ])
}

/// The store key of the copy of `row` numbered `seq`.
pub(super) fn entry_key(handle: &StateHandle, key: &[u8], row: &[u8], seq: u64) -> Vec<u8> {
    numbered(row_prefix(handle, key, row), seq)
}

/// The store key of the copy numbered `seq` of the row whose [`row_prefix`] is `prefix`.
pub(super) fn numbered(mut prefix: Vec<u8>, seq: u64) -> Vec<u8> {
    prefix.extend_from_slice(&seq.to_be_bytes());
    prefix
}

/// The write of the next sequence number `next` under `key`.
pub(super) fn seq_entry(key: &[u8], next: u64) -> (Vec<u8>, Vec<u8>) {
    (key.to_vec(), next.to_le_bytes().to_vec())
}

/// The key row of a stored key without the handle's prefix (in this format and the earlier
/// one alike: both start with the key row's length and the key row).
pub(super) fn key_of(suffix: &[u8]) -> Result<&[u8]> {
    let bad = || EngineError::State("join state key is malformed".into());
    let len: [u8; 4] = suffix
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = u32::from_be_bytes(len) as usize;
    suffix.get(4..4 + len).ok_or_else(bad)
}

/// The stored next sequence number (0 if none).
pub(super) fn stored_seq(store: &dyn StateBackend, key: &[u8]) -> Result<u64> {
    Ok(match store.get(key)? {
        None => 0,
        Some(v) => u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| EngineError::State("join sequence entry is malformed".into()))?,
        ),
    })
}

/// Rewrites the entries of the earlier format under `operator` (each side's rows in the key,
/// counts in the value) as entries of this one, numbered from `next_seq`; returns the next
/// number.
pub(super) fn convert_earlier(
    operator: &StateHandle,
    store: &dyn StateBackend,
    mut next_seq: u64,
) -> Result<u64> {
    for side in 0..2 {
        let earlier = operator.sub(EARLIER_TAGS[side]);
        let handle = operator.sub(SIDE_TAGS[side]);
        let skip = earlier.prefix_len();
        let (mut start, end) = earlier.all();
        loop {
            let chunk = store
                .scan_each(&[(start.clone(), end.clone())], CONVERT_CHUNK)?
                .pop()
                .unwrap_or_default();
            let Some((last, _)) = chunk.last() else {
                break;
            };
            let next = just_after(last);
            let mut writes = WriteBatch::default();
            for (k, v) in &chunk {
                let suffix = &k[skip..];
                let key = key_of(suffix)?;
                let row = &suffix[4 + key.len()..];
                if v.len() != 16 {
                    return Err(EngineError::State(format!(
                        "join state entry of {} bytes in the earlier format, expected 16",
                        v.len()
                    )));
                }
                let mut value = v.clone();
                value.extend_from_slice(row);
                let mut e = Entry::stored(entry_key(&handle, key, row, next_seq), value)?;
                next_seq += 1;
                e.stored = false;
                e.into_write(&mut writes)?;
            }
            writes.delete_ranges.push((start, next.clone()));
            store.write(writes)?;
            start = next;
        }
    }
    Ok(next_seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::prefix_end;

    #[test]
    fn keys_split_back_and_ranges_hold_exactly_their_key() {
        let handle = StateHandle::in_memory().sub(b'L');
        let prefix = key_prefix(&handle, &[1, 0xff]);
        let k = entry_key(&handle, &[1, 0xff], b"row", 7);
        assert!(k.starts_with(&row_prefix(&handle, &[1, 0xff], b"row")));
        assert_eq!(key_of(&k[handle.prefix_len()..]).unwrap(), &[1u8, 0xff][..]);
        let end = prefix_end(&prefix);
        assert!(prefix < k && k < end);
        // A longer key starting with the same bytes has another length: another range.
        let other = key_prefix(&handle, &[1, 0xff, 0]);
        assert!(other >= end || other < prefix);
        // Copies of one row differ by their numbers only.
        let again = entry_key(&handle, &[1, 0xff], b"row", 8);
        assert_eq!(k[..k.len() - 8], again[..again.len() - 8]);
        assert!(k < again);
        let mut e = Entry::inserted(k.clone(), b"row");
        (e.count, e.matches) = (3, -1);
        let mut writes = WriteBatch::default();
        e.into_write(&mut writes).unwrap();
        let (key, value) = writes.puts.pop().unwrap();
        let back = Entry::stored(key, value).unwrap();
        assert_eq!((back.count, back.matches, back.row()), (3, -1, &b"row"[..]));
        assert!(back.stored && back.key == k);
        assert!(Entry::stored(vec![], vec![0u8; 15]).is_err());
        // An entry that ends empty is deleted if stored, else not written at all.
        let mut writes = WriteBatch::default();
        Entry::inserted(k.clone(), b"row")
            .into_write(&mut writes)
            .unwrap();
        assert!(writes.puts.is_empty() && writes.delete_ranges.is_empty());
        let mut gone = back.clone();
        gone.count = 0;
        gone.into_write(&mut writes).unwrap();
        assert_eq!(writes.delete_ranges, vec![(k.clone(), just_after(&k))]);
        assert!(key_of(&[0, 0, 0, 9, 1]).is_err());
    }

    #[test]
    fn a_run_reads_back_as_its_rows_and_is_never_written_alone() {
        let handle = StateHandle::in_memory().sub(b'R');
        let rows: [&[u8]; 3] = [b"first", b"", b"third row"];
        let (k, v) = run_entry(&handle, &[7, 7], 42, rows.iter().copied());
        let prefix = key_prefix(&handle, &[7, 7]);
        assert!(
            prefix < k && k < prefix_end(&prefix),
            "the run is in its key's range"
        );
        assert_eq!(key_of(&k[handle.prefix_len()..]).unwrap(), &[7u8, 7][..]);
        let mut out = Vec::new();
        // A row stored alone before it: both forms read in one list.
        let single = Entry::inserted(entry_key(&handle, &[7, 7], b"alone", 1), b"alone");
        let mut single = single;
        single.count = 2;
        let mut writes = WriteBatch::default();
        single.into_write(&mut writes).unwrap();
        let (sk, sv) = writes.puts.pop().unwrap();
        Entry::read_into(sk, sv, &mut out).unwrap();
        Entry::read_into(k.clone(), v.clone(), &mut out).unwrap();
        let got: Vec<_> = out
            .iter()
            .map(|e| (e.row().to_vec(), e.count, e.matches, e.run, e.stored))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"alone".to_vec(), 2, 0, false, true),
                (b"first".to_vec(), 1, 0, true, true),
                (b"".to_vec(), 1, 0, true, true),
                (b"third row".to_vec(), 1, 0, true, true),
            ]
        );
        assert!(out[1..].iter().all(|e| e.key == k));
        // Where one row is expected, a run is refused, and so is writing one of its rows.
        assert!(Entry::stored(k.clone(), v.clone()).is_err());
        let mut writes = WriteBatch::default();
        let mut changed = out.pop().unwrap();
        changed.matches = 1;
        assert!(changed.into_write(&mut writes).is_err());
        assert!(writes.puts.is_empty() && writes.delete_ranges.is_empty());
        // Truncated or overlong runs are errors, not fewer rows.
        for bad in [&v[..v.len() - 1], &[v.as_slice(), &[0]].concat()[..]] {
            assert!(Entry::read_into(k.clone(), bad.to_vec(), &mut out).is_err());
        }
    }

    #[test]
    fn entries_of_the_earlier_format_are_converted() {
        let operator = StateHandle::in_memory();
        let store = operator.store().unwrap();
        let earlier = |side: usize, key: &[u8], row: &[u8], count: i64, matches: i64| {
            let k = operator.sub(EARLIER_TAGS[side]).key_of_parts(&[
                &(key.len() as u32).to_be_bytes(),
                key,
                row,
            ]);
            let mut v = count.to_le_bytes().to_vec();
            v.extend_from_slice(&matches.to_le_bytes());
            (k, v)
        };
        let mut writes = WriteBatch::default();
        writes.puts.push(earlier(0, b"k1", b"a", 2, 1));
        writes.puts.push(earlier(0, b"k2", b"b", 1, 0));
        writes.puts.push(earlier(1, b"k1", b"c", 1, 2));
        store.write(writes).unwrap();
        let next = convert_earlier(&operator, store.as_ref(), 5).unwrap();
        assert_eq!(next, 8);
        let (start, end) = operator.all();
        let all = store.scan(&start, &end).unwrap();
        assert_eq!(all.len(), 3, "the earlier entries are gone");
        let side = |s: usize, key: &[u8]| {
            let h = operator.sub(SIDE_TAGS[s]);
            let p = key_prefix(&h, key);
            store
                .scan(&p, &prefix_end(&p))
                .unwrap()
                .into_iter()
                .map(|(k, v)| {
                    let e = Entry::stored(k, v).unwrap();
                    (e.row().to_vec(), e.count, e.matches)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(side(0, b"k1"), vec![(b"a".to_vec(), 2, 1)]);
        assert_eq!(side(0, b"k2"), vec![(b"b".to_vec(), 1, 0)]);
        assert_eq!(side(1, b"k1"), vec![(b"c".to_vec(), 1, 2)]);
        // Nothing left to convert: converting again changes nothing.
        assert_eq!(convert_earlier(&operator, store.as_ref(), 8).unwrap(), 8);
    }
}
