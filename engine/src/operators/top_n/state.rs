//! How a [`super::TopNOperator`] keeps its partitions in the task's store.
//!
//! ```text
//! r | len(partition row): u32 | partition row | rank row -> count: i64
//! n | len(partition row): u32 | partition row             -> rows kept so far: i64
//! ```
//!
//! The partition row is the arrow row encoding of the PARTITION BY keys (empty without keys);
//! the rank row encodes the ORDER BY values then the whole input row, so a partition's
//! entries are in rank order and each decodes back to its row. `count` is how many copies of
//! the row are live. `n` entries count the rows of a partition kept in arrival order.

use crate::error::{EngineError, Result};
#[cfg(test)]
use crate::state::prefix_end;
use crate::state::StateHandle;

const ROWS_TAG: u8 = b'r';
const COUNTER_TAG: u8 = b'n';

/// Store keys of one operator instance.
pub(super) struct Keys<'a> {
    pub handle: &'a StateHandle,
}

impl Keys<'_> {
    fn key(&self, tag: u8, partition: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(5 + partition.len());
        suffix.push(tag);
        suffix.extend_from_slice(&(partition.len() as u32).to_be_bytes());
        suffix.extend_from_slice(partition);
        self.handle.key(&suffix)
    }

    /// The prefix of a partition's rows.
    pub fn rows(&self, partition: &[u8]) -> Vec<u8> {
        self.key(ROWS_TAG, partition)
    }

    /// The count of a partition's rows kept in arrival order.
    pub fn counter(&self, partition: &[u8]) -> Vec<u8> {
        self.key(COUNTER_TAG, partition)
    }

    /// The range of every partition's rows.
    pub fn all_rows(&self) -> (Vec<u8>, Vec<u8>) {
        (
            self.handle.key(&[ROWS_TAG]),
            self.handle.key(&[ROWS_TAG + 1]),
        )
    }
}

/// The partition row and what follows it in a stored key without the handle's prefix.
pub(super) fn partition_of(suffix: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || EngineError::State("Top-N state key is malformed".into());
    if !matches!(suffix.first(), Some(&ROWS_TAG) | Some(&COUNTER_TAG)) {
        return Err(bad());
    }
    let len: [u8; 4] = suffix
        .get(1..5)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = u32::from_be_bytes(len) as usize;
    let partition = suffix.get(5..5 + len).ok_or_else(bad)?;
    Ok((partition, &suffix[5 + len..]))
}

/// The partition row of a stored key (for restores at another parallelism).
pub(super) fn key_of(suffix: &[u8]) -> Result<&[u8]> {
    Ok(partition_of(suffix)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_keys_name_their_partition() {
        let handle = StateHandle::in_memory();
        let keys = Keys { handle: &handle };
        let skip = handle.prefix_len();
        let mut k = keys.rows(b"p\xff");
        k.extend_from_slice(b"rank");
        assert_eq!(
            partition_of(&k[skip..]).unwrap(),
            (&b"p\xff"[..], &b"rank"[..])
        );
        assert_eq!(key_of(&keys.counter(b"q")[skip..]).unwrap(), b"q");
        let (lo, hi) = keys.all_rows();
        assert!(lo <= k && k < hi);
        assert!(k < prefix_end(&keys.rows(b"p\xff")));
        assert!(partition_of(b"x").is_err());
    }
}
