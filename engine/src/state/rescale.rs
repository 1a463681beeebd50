//! Restoring keyed state at another parallelism: each new instance copies, from every old
//! instance's store, the entries whose key routes to it by the keyed exchange's hash. The
//! operators that keep one entry per key (or per key and row) share this; windowed operators,
//! whose entries are batches of many keys, split them instead ([`crate::operators::windowed`]).

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::row::{RowConverter, Rows};

use super::{StateBackend, StateHandle, WriteBatch};
use crate::error::Result;
use crate::runtime::partition_of_rows;

/// Entries copied per write.
const CHUNK: usize = 4096;

/// Copies into the working store the entries of `handle`'s range in each `old` store whose
/// key routes to `instance` of `parallelism`. `key_of` finds the encoded key (rows of
/// `converter`, the types the exchange hashes) in a stored key with the handle's prefix
/// removed, or gives none for an entry no key routes (not copied: the operator restores it
/// itself); state TTL entries are found by [`super::ttl::key_of`]. Without a converter the
/// operator runs as one instance, which takes everything.
pub fn copy_routed(
    handle: &StateHandle,
    old: &[Arc<dyn StateBackend>],
    converter: Option<&RowConverter>,
    key_of: fn(&[u8]) -> Result<Option<&[u8]>>,
    instance: usize,
    parallelism: usize,
) -> Result<()> {
    let store = handle.store()?;
    let (start, end) = handle.all();
    let skip = handle.prefix_len();
    for source in old {
        let entries = source.scan(&start, &end)?;
        for chunk in entries.chunks(CHUNK) {
            let keep: Vec<bool> = match converter {
                None => vec![instance == 0; chunk.len()],
                Some(converter) => {
                    let parser = converter.parser();
                    let mut rows: Rows = converter.empty_rows(chunk.len(), 64);
                    // Entries routed by no key (`key_of` gives none) are not copied.
                    let mut routed = Vec::with_capacity(chunk.len());
                    for (k, _) in chunk {
                        let suffix = &k[skip..];
                        let key = match super::ttl::key_of(suffix) {
                            Some(key) => Some(key?),
                            None => key_of(suffix)?,
                        };
                        if let Some(key) = key {
                            rows.push(parser.parse(key));
                        }
                        routed.push(key.is_some());
                    }
                    let columns: Vec<ArrayRef> = converter.convert_rows(rows.iter())?;
                    let mut to = partition_of_rows(&columns, parallelism)?.into_iter();
                    routed
                        .into_iter()
                        .map(|r| r && to.next().is_some_and(|to| to as usize == instance))
                        .collect()
                }
            };
            let mut batch = WriteBatch::default();
            for ((k, v), keep) in chunk.iter().zip(keep) {
                if keep {
                    batch.puts.push((k.clone(), v.clone()));
                }
            }
            store.write(batch)?;
        }
    }
    Ok(())
}
