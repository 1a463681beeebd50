//! How a [`super::StreamJoinOperator`] keeps each side's rows in the task's store.
//!
//! ```text
//! side tag | len(key row): u32 | key row | row -> count: i64, matches: i64
//! ```
//!
//! The key row is the arrow row encoding of the join keys (coerced to one type per pair, so
//! both sides encode equal keys alike); the row is the encoding of the side's whole relation
//! row. One side's rows of a key are one range, read with one scan when the other side's rows
//! of that key arrive. `count` is how many copies of the row are live (net of retractions);
//! `matches` is how many rows of the other side (with multiplicity) it joins with, kept for
//! the sides whose output depends on it (the preserved side of an outer join, the emitted side
//! of a semi or anti join).

use crate::error::{EngineError, Result};
use crate::state::StateHandle;

/// A stored row of one side.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    /// The whole store key.
    pub key: Vec<u8>,
    pub count: i64,
    pub matches: i64,
    /// Changed by the current batch: written back after it.
    pub dirty: bool,
    /// Not read from the store: `count` is the batch's change only, added to the stored
    /// count when written ([`crate::state::WriteBatch::adds`]), and `matches` is not kept.
    pub blind: bool,
}

impl Entry {
    pub fn new(key: Vec<u8>, value: Option<&[u8]>) -> Result<Self> {
        let (count, matches) = match value {
            None => (0, 0),
            Some(v) => decode_value(v)?,
        };
        Ok(Self {
            key,
            count,
            matches,
            dirty: false,
            blind: false,
        })
    }

    /// An entry of a row only inserted so far in this batch, not read from the store.
    pub fn blind(key: Vec<u8>) -> Self {
        Self {
            key,
            count: 0,
            matches: 0,
            dirty: false,
            blind: true,
        }
    }

    pub fn value(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.count.to_le_bytes());
        v.extend_from_slice(&self.matches.to_le_bytes());
        v
    }
}

fn decode_value(v: &[u8]) -> Result<(i64, i64)> {
    if v.len() != 16 {
        return Err(EngineError::State(format!(
            "join state entry of {} bytes, expected 16",
            v.len()
        )));
    }
    let at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&v[i..i + 8]);
        i64::from_le_bytes(b)
    };
    Ok((at(0), at(8)))
}

/// The store key prefix of `key`'s rows on the side of `handle`.
pub(super) fn key_prefix(handle: &StateHandle, key: &[u8]) -> Vec<u8> {
    row_key(handle, key, &[])
}

/// The store key of `row` (a whole row's encoding) with join key `key` on `handle`'s side.
pub(super) fn row_key(handle: &StateHandle, key: &[u8], row: &[u8]) -> Vec<u8> {
    handle.key_of_parts(&[&(key.len() as u32).to_be_bytes(), key, row])
}

/// The key row and the row of a stored key without the handle's prefix.
pub(super) fn split(suffix: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || EngineError::State("join state key is malformed".into());
    let len: [u8; 4] = suffix
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = u32::from_be_bytes(len) as usize;
    let key = suffix.get(4..4 + len).ok_or_else(bad)?;
    Ok((key, &suffix[4 + len..]))
}

/// The key row of a stored key without the handle's prefix (for restores at another
/// parallelism).
pub(super) fn key_of(suffix: &[u8]) -> Result<&[u8]> {
    Ok(split(suffix)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back_and_ranges_hold_exactly_their_key() {
        let handle = StateHandle::in_memory().sub(b'l');
        let prefix = key_prefix(&handle, &[1, 0xff]);
        let mut k = prefix.clone();
        k.extend_from_slice(b"row");
        let (key, row) = split(&k[handle.prefix_len()..]).unwrap();
        assert_eq!((key, row), (&[1u8, 0xff][..], &b"row"[..]));
        let end = crate::state::prefix_end(&prefix);
        assert!(prefix < end && k < end);
        // A longer key starting with the same bytes has another length: another range.
        let other = key_prefix(&handle, &[1, 0xff, 0]);
        assert!(other >= end || other < prefix);
        let e = Entry {
            key: k,
            count: 3,
            matches: -1,
            dirty: true,
            blind: false,
        };
        let back = Entry::new(e.key.clone(), Some(&e.value())).unwrap();
        assert_eq!((back.count, back.matches), (3, -1));
        assert!(Entry::new(vec![], Some(&[0u8; 3])).is_err());
        assert!(split(&[0, 0, 0, 9, 1]).is_err());
    }
}
