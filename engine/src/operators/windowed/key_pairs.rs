//! The pairs of rows with equal, non-NULL keys between two sets of rows: the hash join at the
//! heart of the window and interval joins.
//!
//! A probe of buffered rows is lopsided: a few arriving rows against a bucket of thousands
//! (Nexmark q4: a batch of auctions against every bid of the last seconds). The hash table is
//! built over the smaller side and the larger one only looks its keys up, and a key of one
//! fixed-width column (an id, a timestamp) is hashed as its value, without converting it to
//! a row first. The pairs come out in the same order either way: by left row, and for one
//! left row by right row from the last to the first.

use std::hash::Hash;

use ahash::AHashMap;
use datafusion::arrow::array::{
    Array, ArrayBuilder, ArrayData, ArrayRef, UInt32Array, UInt32Builder,
};
use datafusion::arrow::datatypes::ArrowNativeType;
use datafusion::arrow::row::RowConverter;

use crate::error::Result;

/// No row / no group.
const NONE: u32 = u32::MAX;

/// Whether each row's keys are all non-NULL; `None` when no key column has a NULL.
pub(crate) fn keys_valid(keys: &[ArrayRef]) -> Option<Vec<bool>> {
    let nulls: Vec<_> = keys.iter().filter_map(|k| k.logical_nulls()).collect();
    if nulls.is_empty() {
        return None;
    }
    let n = keys.first().map_or(0, |k| k.len());
    Some(
        (0..n)
            .map(|i| nulls.iter().all(|b| b.is_valid(i)))
            .collect(),
    )
}

/// Pairs `(left row, right row)` with equal, non-null keys, in the order of
/// [`for_each_key_pair`].
pub(crate) fn equal_key_pairs(
    converter: &RowConverter,
    lkeys: &[ArrayRef],
    rkeys: &[ArrayRef],
) -> Result<(UInt32Array, UInt32Array)> {
    let mut all = (
        UInt32Array::from(Vec::<u32>::new()),
        UInt32Array::from(Vec::<u32>::new()),
    );
    for_each_key_pair(converter, lkeys, rkeys, usize::MAX, |li, ri| {
        all = (li, ri);
        Ok(())
    })?;
    Ok(all)
}

/// Calls `each` with the pairs `(left row, right row)` with equal, non-null keys, at most
/// `chunk` pairs at a time: by left row, and for one left row by right row from the last to
/// the first. A join whose output is far larger than its inputs never holds it whole.
pub(crate) fn for_each_key_pair(
    converter: &RowConverter,
    lkeys: &[ArrayRef],
    rkeys: &[ArrayRef],
    chunk: usize,
    mut each: impl FnMut(UInt32Array, UInt32Array) -> Result<()>,
) -> Result<()> {
    let (ln, rn) = (
        lkeys.first().map_or(0, |k| k.len()),
        rkeys.first().map_or(0, |k| k.len()),
    );
    if ln == 0 || rn == 0 {
        return Ok(());
    }
    let groups = KeyGroups::of(converter, lkeys, rkeys)?;
    // Each group's right rows, chained from the last: head[group], next[row].
    let mut head = vec![NONE; groups.count];
    let mut next = vec![NONE; rn];
    for (j, &g) in groups.right.iter().enumerate() {
        if g != NONE {
            next[j] = head[g as usize];
            head[g as usize] = j as u32;
        }
    }
    let (mut li, mut ri) = (UInt32Builder::new(), UInt32Builder::new());
    for (i, &g) in groups.left.iter().enumerate() {
        if g == NONE {
            continue;
        }
        let mut j = head[g as usize];
        while j != NONE {
            li.append_value(i as u32);
            ri.append_value(j);
            if li.len() >= chunk {
                each(li.finish(), ri.finish())?;
            }
            j = next[j as usize];
        }
    }
    if !li.is_empty() {
        each(li.finish(), ri.finish())?;
    }
    Ok(())
}

/// A fixed-width array's values as `T`s of its width: its own buffer (aligned for its type),
/// from its offset, as long as the array (the buffer may run past it).
fn values<T: ArrowNativeType>(data: &ArrayData) -> &[T] {
    &data.buffer::<T>(0)[..data.len()]
}

/// Each row's key group on both sides: rows with equal non-NULL keys share a group; a row
/// with a NULL key, or (on the side not built) a key the other side lacks, has none.
struct KeyGroups {
    left: Vec<u32>,
    right: Vec<u32>,
    count: usize,
}

impl KeyGroups {
    fn of(converter: &RowConverter, lkeys: &[ArrayRef], rkeys: &[ArrayRef]) -> Result<Self> {
        let (lvalid, rvalid) = (keys_valid(lkeys), keys_valid(rkeys));
        let (lvalid, rvalid) = (lvalid.as_deref(), rvalid.as_deref());
        if let ([l], [r]) = (lkeys, rkeys) {
            if l.data_type() == r.data_type() && !l.data_type().is_floating() {
                let (ld, rd) = (l.to_data(), r.to_data());
                // Values of one type are equal exactly when their bits are: a fixed-width
                // key is its own hash key (floats are not: -0.0 = 0.0; a Boolean has no
                // width). The buffers are the arrays' own, aligned for their type.
                let args = (&ld, &rd, lvalid, rvalid);
                let groups = match l.data_type().primitive_width() {
                    Some(1) => Some(Self::build_fixed::<u8>(args)),
                    Some(2) => Some(Self::build_fixed::<u16>(args)),
                    Some(4) => Some(Self::build_fixed::<u32>(args)),
                    Some(8) => Some(Self::build_fixed::<u64>(args)),
                    _ => None,
                };
                if let Some(groups) = groups {
                    return Ok(groups);
                }
            }
        }
        let (lrows, rrows) = (
            converter.convert_columns(lkeys)?,
            converter.convert_columns(rkeys)?,
        );
        let left: Vec<&[u8]> = (0..lrows.num_rows()).map(|i| lrows.row(i).data()).collect();
        let right: Vec<&[u8]> = (0..rrows.num_rows()).map(|j| rrows.row(j).data()).collect();
        Ok(Self::build(&left, &right, lvalid, rvalid))
    }

    /// [`Self::build`] over two fixed-width arrays' values as `T`s of their width.
    fn build_fixed<T: ArrowNativeType + Hash + Eq>(
        (left, right, lvalid, rvalid): (&ArrayData, &ArrayData, Option<&[bool]>, Option<&[bool]>),
    ) -> Self {
        Self::build(values::<T>(left), values::<T>(right), lvalid, rvalid)
    }

    /// Groups over the smaller side's keys (a hash table of them), looked up by the other's.
    fn build<K: Hash + Eq + Copy>(
        left: &[K],
        right: &[K],
        lvalid: Option<&[bool]>,
        rvalid: Option<&[bool]>,
    ) -> Self {
        let valid = |v: Option<&[bool]>, i: usize| v.is_none_or(|v| v[i]);
        let mut table: AHashMap<K, u32> = AHashMap::new();
        let mut grouped = |keys: &[K], v: Option<&[bool]>| -> Vec<u32> {
            table.reserve(keys.len());
            keys.iter()
                .enumerate()
                .map(|(i, k)| {
                    if !valid(v, i) {
                        return NONE;
                    }
                    let next = table.len() as u32;
                    *table.entry(*k).or_insert(next)
                })
                .collect()
        };
        let (left_groups, right_groups) = if right.len() <= left.len() {
            let r = grouped(right, rvalid);
            (Self::look_up(&table, left, lvalid), r)
        } else {
            let l = grouped(left, lvalid);
            (l, Self::look_up(&table, right, rvalid))
        };
        Self {
            left: left_groups,
            right: right_groups,
            count: table.len(),
        }
    }

    fn look_up<K: Hash + Eq>(
        table: &AHashMap<K, u32>,
        keys: &[K],
        valid: Option<&[bool]>,
    ) -> Vec<u32> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| {
                if valid.is_some_and(|v| !v[i]) {
                    return NONE;
                }
                table.get(k).copied().unwrap_or(NONE)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Decimal128Array, Int32Array, Int64Array, StringArray, TimestampNanosecondArray,
    };
    use datafusion::arrow::row::SortField;

    use super::*;

    /// The pairs by the definition: every (i, j) with equal non-NULL keys, by i, then by j
    /// descending.
    fn direct(l: &[Option<i64>], r: &[Option<i64>]) -> Vec<(u32, u32)> {
        let mut pairs = Vec::new();
        for (i, a) in l.iter().enumerate() {
            for (j, b) in r.iter().enumerate().rev() {
                if a.is_some() && a == b {
                    pairs.push((i as u32, j as u32));
                }
            }
        }
        pairs
    }

    fn pairs_of(lkeys: &[ArrayRef], rkeys: &[ArrayRef], chunk: usize) -> Vec<(u32, u32)> {
        let fields = lkeys
            .iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).unwrap();
        let mut pairs = Vec::new();
        for_each_key_pair(&converter, lkeys, rkeys, chunk, |li, ri| {
            assert!(li.len() <= chunk);
            pairs.extend(li.values().iter().copied().zip(ri.values().iter().copied()));
            Ok(())
        })
        .unwrap();
        pairs
    }

    /// Keys drawn from a small range with NULLs, sides of different sizes either way round.
    fn sides(seed: u64, ln: usize, rn: usize) -> (Vec<Option<i64>>, Vec<Option<i64>>) {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut draw = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut side = |n: usize| -> Vec<Option<i64>> {
            (0..n)
                .map(|_| {
                    let x = draw() % 12;
                    (x != 0).then_some(x as i64 - 6)
                })
                .collect()
        };
        let l = side(ln);
        (l, side(rn))
    }

    #[test]
    fn pairs_are_every_equal_non_null_pair_in_order_whichever_side_is_smaller() {
        for (seed, ln, rn) in [(1, 5, 40), (2, 40, 5), (3, 17, 17), (4, 1, 30), (5, 30, 1)] {
            let (l, r) = sides(seed, ln, rn);
            let want = direct(&l, &r);
            assert!(
                ln.min(rn) == 1 || !want.is_empty(),
                "seed {seed} draws some pairs"
            );
            // One fixed-width column (hashed as its value), of several types.
            let as_i64 = |v: &[Option<i64>]| -> ArrayRef { Arc::new(Int64Array::from(v.to_vec())) };
            let as_i32 = |v: &[Option<i64>]| -> ArrayRef {
                Arc::new(Int32Array::from(
                    v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>(),
                ))
            };
            let as_ts = |v: &[Option<i64>]| -> ArrayRef {
                Arc::new(TimestampNanosecondArray::from(v.to_vec()))
            };
            let as_dec = |v: &[Option<i64>]| -> ArrayRef {
                Arc::new(
                    Decimal128Array::from(v.iter().map(|x| x.map(i128::from)).collect::<Vec<_>>())
                        .with_precision_and_scale(20, 2)
                        .unwrap(),
                )
            };
            // Rows (converted): a string key, and two columns.
            let as_str = |v: &[Option<i64>]| -> ArrayRef {
                Arc::new(StringArray::from(
                    v.iter()
                        .map(|x| x.map(|x| format!("k{x}")))
                        .collect::<Vec<_>>(),
                ))
            };
            for make in [as_i64, as_i32, as_ts, as_dec, as_str] {
                for chunk in [usize::MAX, 3] {
                    let got = pairs_of(&[make(&l)], &[make(&r)], chunk);
                    assert_eq!(got, want, "seed {seed}, chunk {chunk}");
                }
            }
            let got = pairs_of(&[as_i64(&l), as_str(&l)], &[as_i64(&r), as_str(&r)], 4);
            assert_eq!(got, want, "two key columns, seed {seed}");
        }
    }

    #[test]
    fn a_sliced_key_column_pairs_its_own_rows() {
        let l: ArrayRef = Arc::new(Int64Array::from(vec![9, 9, 1, 2, 3]));
        let r: ArrayRef = Arc::new(Int64Array::from(vec![3, 9, 2, 2, 7]));
        let (l, r) = (l.slice(2, 3), r.slice(0, 4));
        assert_eq!(
            pairs_of(&[l], &[r], usize::MAX),
            vec![(1, 3), (1, 2), (2, 0)]
        );
    }
}
