//! Small helpers for operators' store keys: ranges of a prefix or of one key, and counts.

/// The first key after every key starting with `prefix`: `[prefix, prefix_end(prefix))` holds
/// exactly the keys with that prefix.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: nothing sorts after them but longer runs of 0xff.
    vec![u8::MAX; prefix.len() + 1]
}

/// The end of the range holding exactly `key`: the smallest longer key.
pub fn just_after(key: &[u8]) -> Vec<u8> {
    let mut end = Vec::with_capacity(key.len() + 1);
    end.extend_from_slice(key);
    end.push(0);
    end
}

/// A stored count (an i64, little-endian); 0 for anything else.
pub fn count_of(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    if bytes.len() == 8 {
        b.copy_from_slice(bytes);
    }
    i64::from_le_bytes(b)
}

/// `value` with `add` added: both read as little-endian i64s, added one by one (the longer
/// one sets the length; a missing value is zeros). The merge of [`super::WriteBatch::adds`].
pub fn add_counters(value: Option<&[u8]>, add: &[u8]) -> Vec<u8> {
    let value = value.unwrap_or_default();
    let counters = value.len().max(add.len()) / 8;
    let at = |bytes: &[u8], i: usize| {
        bytes
            .get(8 * i..8 * i + 8)
            .map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    (0..counters)
        .flat_map(|i| at(value, i).wrapping_add(at(add, i)).to_le_bytes())
        .collect()
}

/// Whether two byte strings are equal, without `memcmp` when they are empty.
///
/// Rust compares byte slices with `memcmp` even when both are empty, through their
/// pointers, and an empty slice's or `Vec`'s pointer dangles (address 1). glibc's AVX-512
/// `memcmp` loads both under an all-zero mask, and a masked load from an unmapped page costs
/// a microcode assist: about 80 ns per comparison on this machine's CPUs instead of 2. The
/// operators without keys (a global Top-N or session window, a window's MAX without group
/// keys) hold one empty key and compare it once or more per row (profiled on Nexmark q7, more
/// than half of the job's CPU).
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// How two byte strings sort, without `memcmp` when one is empty (see [`same_bytes`]).
#[inline]
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.is_empty() || b.is_empty() {
        a.len().cmp(&b.len())
    } else {
        a.cmp(b)
    }
}

/// A key looked up in a hash map of `Vec<u8>` keys with [`same_bytes`] (hashed as the
/// `Vec` is, so lookups by it find what was inserted by `Vec`).
#[derive(Debug, Clone, Copy, Hash)]
pub struct KeyBytes<'a>(pub &'a [u8]);

impl hashbrown::Equivalent<Vec<u8>> for KeyBytes<'_> {
    fn equivalent(&self, key: &Vec<u8>) -> bool {
        same_bytes(self.0, key)
    }
}

/// The value under `key` in `map`, made by `make` if there is none. A non-empty key takes one
/// lookup; the empty key is looked up as [`KeyBytes`] (two lookups when made).
pub fn value_of<'m, V, S: std::hash::BuildHasher>(
    map: &'m mut hashbrown::HashMap<Vec<u8>, V, S>,
    key: &[u8],
    make: impl FnOnce() -> V,
) -> crate::error::Result<&'m mut V> {
    if !key.is_empty() {
        return Ok(map.entry_ref(key).or_insert_with(make));
    }
    if !map.contains_key(&KeyBytes(key)) {
        map.insert(Vec::new(), make());
    }
    map.get_mut(&KeyBytes(key))
        .ok_or_else(|| crate::error::EngineError::Internal("a key's value was lost".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_one_by_one_from_zeros() {
        let pair = |a: i64, b: i64| [a.to_le_bytes(), b.to_le_bytes()].concat();
        assert_eq!(add_counters(None, &pair(1, 0)), pair(1, 0));
        assert_eq!(add_counters(Some(&pair(2, 5)), &pair(3, -1)), pair(5, 4));
        assert_eq!(
            add_counters(Some(&7i64.to_le_bytes()), &pair(1, 2)),
            pair(8, 2)
        );
    }

    #[test]
    fn key_bytes_find_what_vecs_inserted() {
        assert!(same_bytes(&[], &Vec::new()));
        assert!(same_bytes(&[1, 2], &[1, 2]));
        assert!(!same_bytes(&[1, 2], &[1, 3]));
        assert!(!same_bytes(&[], &[0]));
        use std::cmp::Ordering::*;
        for (a, b, o) in [
            (&[][..], &[][..], Equal),
            (&[], &[0], Less),
            (&[1], &[], Greater),
        ] {
            assert_eq!((cmp_bytes(a, b), a.cmp(b)), (o, o));
        }
        assert_eq!(cmp_bytes(&[1, 2], &[1, 3]), Less);
        let mut map: hashbrown::HashMap<Vec<u8>, u32> = hashbrown::HashMap::new();
        map.insert(Vec::new(), 1);
        map.insert(vec![0], 2);
        map.insert(vec![7, 8], 3);
        assert_eq!(map.get(&KeyBytes(&[])), Some(&1));
        assert_eq!(map.get(&KeyBytes(&[0])), Some(&2));
        assert_eq!(map.get(&KeyBytes(&[7, 8])), Some(&3));
        assert_eq!(map.get(&KeyBytes(&[7])), None);
        *value_of(&mut map, &[], || 0).unwrap() += 10;
        *value_of(&mut map, &[9], || 4).unwrap() += 10;
        assert_eq!(map.get(&KeyBytes(&[])), Some(&11));
        assert_eq!(map.get(&KeyBytes(&[9])), Some(&14));
        map.insert(Vec::new(), 1);
        assert_eq!(map.remove(&KeyBytes(&[])), Some(1));
        assert_eq!(map.get(&KeyBytes(&[])), None);
    }

    #[test]
    fn ranges_hold_exactly_their_prefix_or_key() {
        assert_eq!(prefix_end(&[3, 0xff, 0xff]), vec![4]);
        assert_eq!(prefix_end(&[1, 2]), vec![1, 3]);
        assert_eq!(prefix_end(&[0xff]), vec![0xff, 0xff]);
        let k = [1u8, 2];
        assert!(k.as_slice() < just_after(&k).as_slice());
        assert!(just_after(&k).as_slice() < [1u8, 2, 0, 0].as_slice());
        assert_eq!(count_of(&7i64.to_le_bytes()), 7);
        assert_eq!(count_of(b"x"), 0);
    }
}
