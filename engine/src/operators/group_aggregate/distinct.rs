//! COUNT(DISTINCT) in a [`super::GroupAggregateOperator`].
//!
//! The COUNT(DISTINCT) aggregates over the same argument share one multiset (Flink's
//! `DistinctInfo`): `count(DISTINCT bidder)` and `count(DISTINCT bidder) FILTER (WHERE
//! price < 10000)` keep one entry per (group, bidder), holding one count per member aggregate
//! (`n` i64s, little-endian, in the members' order; a multiset of one member is one count).
//! A batch reads and writes each entry once, not once per aggregate.
//!
//! Over an append-only input nothing is ever retracted, so a count only says whether the
//! value was seen: it stays at 1, and a value seen again leaves its entry unchanged (not
//! written back).

use datafusion::common::HashMap;

use super::cache::{DistinctBatch, GroupCache};
use super::state::Keys;
use super::{Touched, UpdatingAggKind, UpdatingAggregate};
use crate::error::{EngineError, Result};
use crate::state::StateBackend;

/// The COUNT(DISTINCT) aggregates of `aggregates` grouped by argument: each set's members in
/// order; the first names the set's multiset and encodes its values.
pub(crate) fn distinct_sets(aggregates: &[UpdatingAggregate]) -> Vec<Vec<usize>> {
    let mut sets: Vec<Vec<usize>> = Vec::new();
    for (i, a) in aggregates.iter().enumerate() {
        if a.kind != UpdatingAggKind::CountDistinct {
            continue;
        }
        match sets.iter_mut().find(|s| *aggregates[s[0]].arg == *a.arg) {
            Some(set) => set.push(i),
            None => sets.push(vec![i]),
        }
    }
    sets
}

/// Bytes of `width` counts as stored: little-endian i64s, or over an append-only input, where a
/// count is only ever 0 or 1 (seen or not), one bit each (`seen`).
pub(super) fn counts_len(width: usize, seen: bool) -> usize {
    match seen {
        true => width.div_ceil(8),
        false => 8 * width,
    }
}

/// Appends `counts` to `out` as stored ([`write_counts`]).
pub(super) fn encode_counts(counts: &[i64], seen: bool, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + counts_len(counts.len(), seen), 0);
    write_counts(counts, seen, &mut out[start..]);
}

/// Writes `counts` over `out` ([`counts_len`] bytes) as stored: i64s, or as bits, a count
/// above zero set.
pub(super) fn write_counts(counts: &[i64], seen: bool, out: &mut [u8]) {
    if !seen {
        for (to, c) in out.chunks_exact_mut(8).zip(counts) {
            to.copy_from_slice(&c.to_le_bytes());
        }
        return;
    }
    out.fill(0);
    for (m, c) in counts.iter().enumerate() {
        if *c > 0 {
            out[m / 8] |= 1 << (m % 8);
        }
    }
}

/// Replaces `out` with the `width` counts of `bytes`, stored as [`encode_counts`] wrote them.
pub(super) fn decode_counts_into(bytes: &[u8], width: usize, seen: bool, out: &mut Vec<i64>) {
    out.clear();
    match seen {
        true => out.extend((0..width).map(|m| i64::from((bytes[m / 8] >> (m % 8)) & 1))),
        false => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())),
        ),
    }
}

/// A stored entry's `width` counts, in either form (their lengths differ for every width).
pub(super) fn decode_counts(bytes: &[u8], width: usize) -> Result<Vec<i64>> {
    let seen = match bytes.len() {
        n if n == counts_len(width, false) => false,
        n if n == counts_len(width, true) => true,
        n => {
            return Err(EngineError::State(format!(
                "COUNT(DISTINCT) entry of {n} bytes, expected {} or {} for {width} aggregates",
                counts_len(width, false),
                counts_len(width, true)
            )))
        }
    };
    let mut counts = Vec::with_capacity(width);
    decode_counts_into(bytes, width, seen, &mut counts);
    Ok(counts)
}

/// What one shared multiset needs to take a batch.
pub(super) struct DistinctInput<'a> {
    /// The set's member aggregates (indices into the spec's aggregates).
    pub members: &'a [usize],
    /// Append-only input: counts stay at 1 (seen or not).
    pub append_only: bool,
}

/// Applies a batch to one shared multiset: `value(row)` is a row's value row, `taken[m][row]`
/// whether member `m` takes it. The net change per (group, value) and member, then one read
/// (of the entries neither in memory nor known to be new) and at most one write per entry;
/// each member's distinct count in `t.after` moves when its count of a value leaves or
/// reaches zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn accumulate<'v>(
    input: &DistinctInput<'_>,
    value: impl Fn(usize) -> &'v [u8],
    taken: &[Vec<bool>],
    signs: &[i64],
    t: &mut Touched,
    keys: &Keys<'_>,
    cache: &mut GroupCache,
    store: &dyn StateBackend,
) -> Result<()> {
    let n = signs.len();
    let first = input.members[0];
    let width = input.members.len();
    // (group, value) -> its entry; per entry its group and `width` deltas.
    let mut index: HashMap<(usize, &'v [u8]), usize> = HashMap::default();
    let mut entry_group: Vec<usize> = Vec::new();
    let mut deltas: Vec<i64> = Vec::new();
    for row in 0..n {
        if !taken.iter().any(|t| t[row]) {
            continue;
        }
        let g = t.row_group[row];
        let v = value(row);
        let next = entry_group.len();
        let e = *index.entry((g, v)).or_insert(next);
        if e == next {
            entry_group.push(g);
            deltas.resize(deltas.len() + width, 0);
        }
        for (m, took) in taken.iter().enumerate() {
            if took[row] {
                deltas[e * width + m] += signs[row];
            }
        }
    }
    // The changed entries by group.
    let mut by_group: Vec<Vec<(&'v [u8], usize)>> = vec![Vec::new(); t.groups.len()];
    for ((g, v), e) in index {
        if deltas[e * width..(e + 1) * width].iter().any(|d| *d != 0) {
            by_group[g].push((v, e));
        }
    }
    let set = u8::try_from(first).map_err(|_| {
        EngineError::Internal(format!(
            "COUNT(DISTINCT) of aggregate {first} (at most 255)"
        ))
    })?;
    let batch = DistinctBatch {
        set,
        width,
        seen: input.append_only,
        groups: by_group
            .into_iter()
            .enumerate()
            .filter(|(_, entries)| !entries.is_empty())
            .map(|(g, entries)| (t.groups[g].as_slice(), entries))
            .collect(),
    };
    let after = &mut t.after;
    cache.apply_distinct(
        store,
        &batch,
        |group| keys.multisets(group),
        |e, counts| {
            let delta = &deltas[e * width..(e + 1) * width];
            let after = &mut after[entry_group[e]];
            let mut changed = false;
            for ((count, d), &m) in counts.iter_mut().zip(delta).zip(input.members) {
                let had = *count;
                let mut has = had + d;
                if input.append_only {
                    has = has.min(1);
                }
                after.aggs[m].n += i64::from(has > 0) - i64::from(had > 0);
                changed |= has != had;
                *count = has;
            }
            changed
        },
    )
}
