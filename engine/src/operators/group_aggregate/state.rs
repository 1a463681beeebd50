//! How a [`super::GroupAggregateOperator`] keeps its state in the task's store.
//!
//! ```text
//! g | group row                                  -> rows: i64, then per aggregate n: i64, v: i128
//! m | len(group row): u32 | group row | agg: u8 | value row -> count: i64 (per member)
//! e | window end: 8 bytes, ordered | group row     -> ()      (early-fire windows)
//! ```
//!
//! A group row is the arrow row encoding of the group keys (bytes that compare like the
//! keys). `rows` counts the group's rows net of retractions: at zero the group leaves the
//! result. Per aggregate, `n` counts the values it took (non-null, passing its FILTER) net of
//! retractions, and `v` is its running sum (integers and decimals as i128, floats as the bits
//! of an f64). MIN, MAX and COUNT(DISTINCT) keep the multiset of their values (`m` entries,
//! count per value; MAX's rows are encoded descending) so a retracted extreme is replaced by
//! the next one: the first entry of the group's range is the current MIN or MAX. The
//! COUNT(DISTINCT) aggregates over one argument share one multiset, named by the first of
//! them, with a count per member ([`super::distinct`]).

use std::sync::Arc;

use datafusion::arrow::row::RowConverter;

use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::state::{copy_routed, StateBackend, StateHandle};

pub(super) const GROUP_TAG: u8 = b'g';
pub(super) const MULTISET_TAG: u8 = b'm';
pub(super) const WINDOW_TAG: u8 = b'e';

/// One aggregate's running state.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct AggState {
    /// Values taken, net of retractions (COUNT(DISTINCT): distinct values).
    pub n: i64,
    /// Running sum: an i128, or the bits of an f64.
    pub v: i128,
}

impl AggState {
    pub fn float(&self) -> f64 {
        f64::from_bits(self.v as u64)
    }

    pub fn add_float(&mut self, x: f64) {
        self.v = (self.float() + x).to_bits() as i128;
    }
}

/// A group's running state.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct GroupState {
    /// Rows of the group, net of retractions.
    pub rows: i64,
    pub aggs: Vec<AggState>,
    /// Per aggregate: MIN / MAX over an append-only input keep only their current extreme
    /// (its value row) here, no multiset; `None` for the other aggregates.
    pub extremes: Vec<Option<Vec<u8>>>,
}

impl GroupState {
    pub fn new(aggregates: usize) -> Self {
        Self {
            rows: 0,
            aggs: vec![AggState::default(); aggregates],
            extremes: vec![None; aggregates],
        }
    }

    /// Adds `other`'s rows and values to this state (two SESSION windows merging): counts and
    /// sums add (`floats[i]`: aggregate `i`'s sum is an f64), kept extremes keep the smaller
    /// value row (MAX's rows sort descending).
    pub fn merge(&mut self, other: GroupState, floats: &[bool]) {
        self.rows += other.rows;
        for (i, (a, b)) in self.aggs.iter_mut().zip(other.aggs).enumerate() {
            a.n += b.n;
            if floats[i] {
                a.add_float(b.float());
            } else {
                a.v = a.v.wrapping_add(b.v);
            }
        }
        for (mine, theirs) in self.extremes.iter_mut().zip(other.extremes) {
            if let Some(e) = theirs {
                if mine.as_deref().is_none_or(|m| e.as_slice() < m) {
                    *mine = Some(e);
                }
            }
        }
    }

    /// `rows`, then `n` and `v` per aggregate, then per kept extreme: its aggregate (u8),
    /// its length (u32) and its value row.
    pub fn encode(&self) -> Vec<u8> {
        let extremes: usize = self.extremes.iter().flatten().map(|e| 5 + e.len()).sum();
        let mut out = Vec::with_capacity(8 + 24 * self.aggs.len() + extremes);
        out.extend_from_slice(&self.rows.to_le_bytes());
        for a in &self.aggs {
            out.extend_from_slice(&a.n.to_le_bytes());
            out.extend_from_slice(&a.v.to_le_bytes());
        }
        for (i, e) in self.extremes.iter().enumerate() {
            if let Some(e) = e {
                out.push(i as u8);
                out.extend_from_slice(&(e.len() as u32).to_le_bytes());
                out.extend_from_slice(e);
            }
        }
        out
    }

    /// Bytes the state takes in memory, roughly.
    pub fn size(&self) -> usize {
        let extremes: usize = self.extremes.iter().flatten().map(|e| 24 + e.len()).sum();
        56 + 32 * self.aggs.len() + 24 * self.extremes.len() + extremes
    }

    pub fn decode(bytes: &[u8], aggregates: usize) -> Result<Self> {
        let fixed = 8 + 24 * aggregates;
        if bytes.len() < fixed {
            return Err(EngineError::State(format!(
                "group state of {} bytes, expected at least {fixed} for {aggregates} aggregates",
                bytes.len(),
            )));
        }
        let i64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            i64::from_le_bytes(b)
        };
        let aggs = (0..aggregates)
            .map(|i| {
                let at = 8 + 24 * i;
                let mut v = [0u8; 16];
                v.copy_from_slice(&bytes[at + 8..at + 24]);
                AggState {
                    n: i64_at(at),
                    v: i128::from_le_bytes(v),
                }
            })
            .collect();
        let mut extremes = vec![None; aggregates];
        let mut tail = &bytes[fixed..];
        while let Some((&agg, rest)) = tail.split_first() {
            let malformed = || EngineError::State("group state's extremes are malformed".into());
            let len: [u8; 4] = rest
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(malformed)?;
            let len = u32::from_le_bytes(len) as usize;
            let value = rest.get(4..4 + len).ok_or_else(malformed)?;
            *extremes.get_mut(agg as usize).ok_or_else(malformed)? = Some(value.to_vec());
            tail = &rest[4 + len..];
        }
        Ok(Self {
            rows: i64_at(0),
            aggs,
            extremes,
        })
    }
}

/// Store keys of one operator instance.
pub(super) struct Keys<'a> {
    pub handle: &'a StateHandle,
}

impl Keys<'_> {
    pub fn group(&self, group: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(1 + group.len());
        suffix.push(GROUP_TAG);
        suffix.extend_from_slice(group);
        self.handle.key(&suffix)
    }

    /// The start of the multiset of aggregate `agg` of `group`; its range ends at the same
    /// key with the last byte one higher.
    pub fn multiset(&self, group: &[u8], agg: usize) -> Vec<u8> {
        let mut key = self.multisets(group);
        key.push(agg as u8);
        key
    }

    /// The start of `group`'s multisets: each one's key goes on with its aggregate's byte.
    pub fn multisets(&self, group: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(5 + group.len());
        suffix.push(MULTISET_TAG);
        suffix.extend_from_slice(&(group.len() as u32).to_be_bytes());
        suffix.extend_from_slice(group);
        self.handle.key(&suffix)
    }

    /// The entry that closes `group` when the watermark passes `end` (early-fire windows).
    pub fn window(&self, end: EventTime, group: &[u8]) -> Vec<u8> {
        let mut suffix = Vec::with_capacity(9 + group.len());
        suffix.push(WINDOW_TAG);
        suffix.extend_from_slice(&ordered(end));
        suffix.extend_from_slice(group);
        self.handle.key(&suffix)
    }

    /// The entries of the windows ending at or before `watermark`.
    pub fn windows_until(&self, watermark: EventTime) -> (Vec<u8>, Vec<u8>) {
        let start = self.handle.key(&[WINDOW_TAG]);
        let end = match watermark.checked_add(1) {
            Some(next) => {
                let mut suffix = vec![WINDOW_TAG];
                suffix.extend_from_slice(&ordered(next));
                self.handle.key(&suffix)
            }
            None => self.handle.key(&[WINDOW_TAG + 1]),
        };
        (start, end)
    }

    /// Every multiset entry of `group`: `[start, end)`.
    pub fn group_multisets(&self, group: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let start = self.multiset(group, 0);
        let mut end = start.clone();
        end.pop();
        end.push(u8::MAX);
        (start, end)
    }
}

/// An event time as bytes that sort like it.
pub(crate) fn ordered(t: EventTime) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// The group row a stored key (without the handle's prefix) belongs to.
pub(super) fn group_of(suffix: &[u8]) -> Result<&[u8]> {
    let bad = || EngineError::State("aggregate state key is malformed".into());
    match suffix.first() {
        Some(&GROUP_TAG) => Ok(&suffix[1..]),
        Some(&WINDOW_TAG) => suffix.get(9..).ok_or_else(bad),
        Some(&MULTISET_TAG) => {
            let len: [u8; 4] = suffix
                .get(1..5)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(bad)?;
            let len = u32::from_be_bytes(len) as usize;
            suffix.get(5..5 + len).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

/// After a restart at another parallelism: copies the entries of every old instance's store
/// whose group routes to `instance` (by the keyed exchange's hash of the group keys) into the
/// working store.
pub(super) fn restore_repartitioned(
    handle: &StateHandle,
    old: &[Arc<dyn StateBackend>],
    converter: Option<&RowConverter>,
    instance: usize,
    parallelism: usize,
) -> Result<()> {
    copy_routed(
        handle,
        old,
        converter,
        |suffix| group_of(suffix).map(Some),
        instance,
        parallelism,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_state_round_trips_and_rejects_a_wrong_size() {
        let mut s = GroupState::new(2);
        s.rows = 5;
        s.aggs[0] = AggState { n: 3, v: -7 };
        s.aggs[1].add_float(2.5);
        let back = GroupState::decode(&s.encode(), 2).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.aggs[1].float(), 2.5);
        assert!(GroupState::decode(&s.encode(), 3).is_err());
        // Merging adds counts and sums (the second one a float) and keeps the smaller extreme.
        let mut other = GroupState::new(2);
        other.rows = 2;
        other.aggs[0] = AggState { n: 1, v: 10 };
        other.aggs[1].add_float(0.25);
        other.extremes[0] = Some(b"\x01a".to_vec());
        let mut merged = s.clone();
        merged.extremes[0] = Some(b"\x01b".to_vec());
        merged.merge(other, &[false, true]);
        assert_eq!((merged.rows, merged.aggs[0]), (7, AggState { n: 4, v: 3 }));
        assert_eq!(merged.aggs[1].float(), 2.75);
        assert_eq!(merged.extremes[0].as_deref(), Some(&b"\x01a"[..]));
        // Kept extremes ride after the sums.
        s.extremes[1] = Some(b"\x01max".to_vec());
        let back = GroupState::decode(&s.encode(), 2).unwrap();
        assert_eq!(back, s);
        let mut cut = s.encode();
        cut.pop();
        assert!(GroupState::decode(&cut, 2).is_err());
    }

    #[test]
    fn stored_keys_name_their_group() {
        let handle = StateHandle::in_memory();
        let keys = Keys { handle: &handle };
        let skip = handle.prefix_len();
        assert_eq!(group_of(&keys.group(b"abc")[skip..]).unwrap(), b"abc");
        let mut m = keys.multiset(b"abc", 2);
        m.extend_from_slice(b"value");
        assert_eq!(group_of(&m[skip..]).unwrap(), b"abc");
        let (lo, hi) = keys.group_multisets(b"abc");
        assert!(lo <= m && m < hi);
    }
}
