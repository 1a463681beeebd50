//! State time-to-live (`SET state_ttl`, Flink's `table.exec.state.ttl`): operators whose state
//! grows with their keys (updating aggregates, regular joins, Top-N) drop the state of a key
//! not touched for that long, by processing time. This changes results (a key that comes back
//! starts afresh, and what was emitted for it is not retracted), which is why it is off unless
//! set. The bookkeeping lives here, once, under the operator's own key range:
//!
//! ```text
//! ~ | a | len(key): u32 | key                    -> last touched: u64 ms (big-endian)
//! ~ | i | touched: u64 ms | len(key): u32 | key  -> ()
//! ```
//!
//! The key is the operator's routing key (group row, join key row, partition row), so a
//! restore at another parallelism routes these entries with the rest ([`key_of`]). A touch
//! rewrites a key's entries only when its last touch is older than a sixteenth of the TTL,
//! so hot keys cost a read per batch, not a write.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{just_after, StateBackend, StateHandle, WriteBatch};
use crate::error::{EngineError, Result};

/// The tag of the expiry entries in an operator's key range (above its own tags).
pub const TTL_TAG: u8 = b'~';
const ACCESS: u8 = b'a';
const INDEX: u8 = b'i';

/// Now, in milliseconds since the epoch (processing time).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The expiry of one operator instance's keys.
#[derive(Debug, Clone)]
pub struct KeyExpiry {
    handle: StateHandle,
    ttl_ms: u64,
}

impl KeyExpiry {
    /// Expiry after `ttl` untouched, for the operator of `handle`.
    pub fn new(handle: &StateHandle, ttl: Duration) -> Self {
        Self {
            handle: handle.clone(),
            ttl_ms: (ttl.as_millis() as u64).max(1),
        }
    }

    fn access_key(&self, key: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(6 + key.len());
        suffix.extend_from_slice(&[TTL_TAG, ACCESS]);
        suffix.extend_from_slice(&(key.len() as u32).to_be_bytes());
        suffix.extend_from_slice(key);
        self.handle.key(&suffix)
    }

    fn index_key(&self, at: u64, key: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(14 + key.len());
        suffix.extend_from_slice(&[TTL_TAG, INDEX]);
        suffix.extend_from_slice(&at.to_be_bytes());
        suffix.extend_from_slice(&(key.len() as u32).to_be_bytes());
        suffix.extend_from_slice(key);
        self.handle.key(&suffix)
    }

    /// Records that `keys` were touched at `now` (ms); the writes go to `batch`.
    pub fn touch<'a>(
        &self,
        store: &dyn StateBackend,
        keys: impl IntoIterator<Item = &'a [u8]>,
        now: u64,
        batch: &mut WriteBatch,
    ) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            if !seen.insert(key) {
                continue;
            }
            let access = self.access_key(key);
            let last = store.get(&access)?.map(|v| decode_ms(&v)).transpose()?;
            if let Some(last) = last {
                if now.saturating_sub(last) < self.ttl_ms / 16 {
                    continue;
                }
                let old = self.index_key(last, key);
                let end = just_after(&old);
                batch.delete_ranges.push((old, end));
            }
            batch.puts.push((self.index_key(now, key), Vec::new()));
            batch.puts.push((access, now.to_be_bytes().to_vec()));
        }
        Ok(())
    }

    /// Up to `limit` keys last touched more than the TTL before `now`: their expiry entries
    /// are deleted in `batch`, and the operator drops their state.
    pub fn expired(
        &self,
        store: &dyn StateBackend,
        now: u64,
        limit: usize,
        batch: &mut WriteBatch,
    ) -> Result<Vec<Vec<u8>>> {
        let Some(before) = now.checked_sub(self.ttl_ms) else {
            return Ok(Vec::new());
        };
        let start = self.handle.key(&[TTL_TAG, INDEX]);
        let end = self.index_key(before, &[]);
        let skip = self.handle.prefix_len() + 10;
        let mut keys = Vec::new();
        for (k, _) in store.scan_first(&start, &end, limit)? {
            let key = len_prefixed(&k[skip..])?.to_vec();
            let access = self.access_key(&key);
            let access_end = just_after(&access);
            batch.delete_ranges.push((access, access_end));
            let index_end = just_after(&k);
            batch.delete_ranges.push((k, index_end));
            keys.push(key);
        }
        Ok(keys)
    }
}

fn decode_ms(v: &[u8]) -> Result<u64> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| EngineError::State("state TTL entry is malformed".into()))?;
    Ok(u64::from_be_bytes(b))
}

fn len_prefixed(bytes: &[u8]) -> Result<&[u8]> {
    let bad = || EngineError::State("state TTL key is malformed".into());
    let len: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    bytes
        .get(4..4 + u32::from_be_bytes(len) as usize)
        .ok_or_else(bad)
}

/// The routing key of an expiry entry (a stored key without the operator's prefix), or
/// `None` when the key is not one.
pub fn key_of(suffix: &[u8]) -> Option<Result<&[u8]>> {
    match suffix {
        [TTL_TAG, ACCESS, rest @ ..] => Some(len_prefixed(rest)),
        [TTL_TAG, INDEX, rest @ ..] => Some(
            rest.get(8..)
                .ok_or_else(|| EngineError::State("state TTL key is malformed".into()))
                .and_then(len_prefixed),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(store: &dyn StateBackend, batch: WriteBatch) {
        store.write(batch).unwrap();
    }

    #[test]
    fn keys_expire_after_the_ttl_unless_touched_again() {
        let handle = StateHandle::in_memory();
        let store = handle.store().unwrap();
        let ttl = KeyExpiry::new(&handle, Duration::from_millis(1000));
        let mut b = WriteBatch::default();
        ttl.touch(store.as_ref(), [&b"a"[..], b"b", b"a"], 10_000, &mut b)
            .unwrap();
        write(store.as_ref(), b);
        // b again, later: its old index entry goes.
        let mut b = WriteBatch::default();
        ttl.touch(store.as_ref(), [&b"b"[..]], 10_500, &mut b)
            .unwrap();
        write(store.as_ref(), b);
        let mut b = WriteBatch::default();
        assert!(ttl
            .expired(store.as_ref(), 10_900, 10, &mut b)
            .unwrap()
            .is_empty());
        let gone = ttl.expired(store.as_ref(), 11_200, 10, &mut b).unwrap();
        assert_eq!(gone, vec![b"a".to_vec()]);
        write(store.as_ref(), b);
        let mut b = WriteBatch::default();
        assert_eq!(
            ttl.expired(store.as_ref(), 11_600, 10, &mut b).unwrap(),
            vec![b"b".to_vec()]
        );
        write(store.as_ref(), b);
        let (lo, hi) = handle.all();
        assert!(store.scan(&lo, &hi).unwrap().is_empty(), "nothing left");
    }

    #[test]
    fn a_touch_within_a_sixteenth_of_the_ttl_writes_nothing() {
        let handle = StateHandle::in_memory();
        let store = handle.store().unwrap();
        let ttl = KeyExpiry::new(&handle, Duration::from_secs(16));
        let mut b = WriteBatch::default();
        ttl.touch(store.as_ref(), [&b"k"[..]], 1_000, &mut b)
            .unwrap();
        write(store.as_ref(), b);
        let mut b = WriteBatch::default();
        ttl.touch(store.as_ref(), [&b"k"[..]], 1_500, &mut b)
            .unwrap();
        assert!(b.puts.is_empty());
        ttl.touch(store.as_ref(), [&b"k"[..]], 2_000, &mut b)
            .unwrap();
        assert_eq!(b.puts.len(), 2);
    }

    #[test]
    fn expiry_entries_name_their_routing_key() {
        let handle = StateHandle::in_memory();
        let ttl = KeyExpiry::new(&handle, Duration::from_secs(1));
        let skip = handle.prefix_len();
        let a = ttl.access_key(b"key");
        let i = ttl.index_key(77, b"key");
        assert_eq!(key_of(&a[skip..]).unwrap().unwrap(), b"key");
        assert_eq!(key_of(&i[skip..]).unwrap().unwrap(), b"key");
        assert!(key_of(b"gxyz").is_none());
        assert!(key_of(&[TTL_TAG, INDEX, 1]).unwrap().is_err());
    }
}
