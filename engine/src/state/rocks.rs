//! The RocksDB state backend: one database per job under its data directory.
//!
//! Writes go through RocksDB write batches (atomic); range deletes are RocksDB range
//! tombstones, so dropping a fired window's state costs the same whatever its size. A
//! checkpoint is a RocksDB checkpoint (hard links to immutable SST files), cheap to take.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{IteratorMode, Options, ReadOptions, WriteBatch as RocksBatch, WriteOptions, DB};

use super::{Entries, PartFiles, StateBackend, WriteBatch};
use crate::error::{EngineError, Result};

/// The merge operator of [`WriteBatch::adds`] (its name is recorded in the store's options).
const ADD_COUNTERS: &str = "weir.add_counters";

fn merge_counters(
    _key: &[u8],
    value: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let mut sum = value.map(<[u8]>::to_vec);
    for add in operands {
        sum = Some(super::add_counters(sum.as_deref(), add));
    }
    sum
}

fn state_error(what: &str, path: &Path, e: rocksdb::Error) -> EngineError {
    EngineError::State(format!("{what} '{}': {e}", path.display()))
}

/// Stores opened by [`RocksDbStateBackend::open_shared`], by path. They stay open until
/// [`RocksDbStateBackend::close_shared`]: closing when the last user lets go would race with
/// the next opener, which RocksDB refuses while the old handle still holds the lock.
static SHARED: Mutex<BTreeMap<PathBuf, Arc<RocksDbStateBackend>>> = Mutex::new(BTreeMap::new());

/// Memtable size of one store (RocksDB's default is 64 MiB per store). Join sides and
/// groups write every row; with 4 MiB memtables (and 32 MiB for the process) a store flushed
/// a level-0 file every 4 MiB, compaction rewrote each 3.4 times and writes stalled a fifth
/// of the time (Nexmark q20, p=2: 288 flushes per store, 7.1 s stalled of 35 s). At 16 MiB
/// (64 MiB for the process): 86 flushes, 2.2 times rewritten, q20 34 -> 22 s, q18 34 -> 26 s,
/// q19 19 -> 15 s, q16 52 -> 45 s (docs/status.md, Session 33).
const WRITE_BUFFER_BYTES: usize = 16 << 20;
/// Memtables of all stores of the process together (part of the memory outside the budget).
const ALL_WRITE_BUFFERS_BYTES: usize = 64 << 20;
/// Values this large or larger go to blob files (see [`RocksDbStateBackend::open_with`]).
/// Nexmark q20's bid runs: at 256 bytes 2.6 GB written (4.9 without blob files), at 1 KiB
/// 3.9 GB, at 4 KiB 4.5 GB.
const BLOB_MIN_BYTES: u64 = 256;
/// The oldest fraction of blob files whose live blobs compaction relocates.
const BLOB_GC_AGE_CUTOFF: f64 = 0.05;
/// Garbage share of those oldest files above which RocksDB compacts them on purpose.
const BLOB_GC_FORCE_THRESHOLD: f64 = 0.5;
/// Block cache shared by all stores of the process.
const BLOCK_CACHE_BYTES: usize = 16 << 20;

/// The block cache and memtable budget every store of the process shares.
fn shared_memory() -> &'static (rocksdb::Cache, rocksdb::WriteBufferManager) {
    static MEMORY: std::sync::OnceLock<(rocksdb::Cache, rocksdb::WriteBufferManager)> =
        std::sync::OnceLock::new();
    MEMORY.get_or_init(|| {
        (
            rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES),
            rocksdb::WriteBufferManager::new_write_buffer_manager(ALL_WRITE_BUFFERS_BYTES, false),
        )
    })
}

/// State kept in a RocksDB database.
pub struct RocksDbStateBackend {
    db: DB,
    path: PathBuf,
    /// Writes skip the write-ahead log (a task's working store: see [`Self::open_working`]).
    writes: WriteOptions,
    /// Window parts, in files in the store's directory.
    parts: PartFiles,
    /// Whether the store holds anything: a checkpoint of a store never written skips
    /// RocksDB's (a flush and about six syncs) and holds the part files alone.
    written: AtomicBool,
}

impl RocksDbStateBackend {
    /// Opens (creating if needed) the database in `path`; every write goes to its write-ahead
    /// log first, so the store survives a crash as it is.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, WriteOptions::default())
    }

    /// Opens (creating if needed) a task's working store: writes skip the write-ahead log.
    /// A working store is never reopened after a crash (a job starts from an empty one or
    /// from a copy of its last checkpoint), and a checkpoint flushes the memtables into the
    /// files it links, so the log would be written and never read: with it, every state
    /// write went to disk twice (profiled on Nexmark q7: the log's copies and checksums were
    /// a fifth of the job's CPU).
    pub fn open_working(path: &Path) -> Result<Self> {
        let mut writes = WriteOptions::default();
        writes.disable_wal(true);
        Self::open_with(path, writes)
    }

    fn open_with(path: &Path, writes: WriteOptions) -> Result<Self> {
        let mut options = Options::default();
        options.create_if_missing(true);
        // Window state is short-lived: written at a barrier, read once when the window fires,
        // then range-deleted. The first two levels stay uncompressed (profiled on Nexmark q7,
        // compressing each flush and decompressing each read was a seventh of the job's CPU);
        // what lives long enough to sink deeper is compressed.
        use rocksdb::DBCompressionType::{Lz4, None as Plain};
        options.set_compression_per_level(&[Plain, Plain, Lz4, Lz4, Lz4, Lz4, Lz4]);
        // Every stateful task has its own store; their memory is bounded together: one
        // block cache and one memtable budget for the process.
        let (cache, buffers) = shared_memory();
        options.set_write_buffer_size(WRITE_BUFFER_BYTES);
        options.set_write_buffer_manager(buffers);
        options.set_merge_operator_associative(ADD_COUNTERS, merge_counters);
        // Values of at least BLOB_MIN_BYTES are written to blob files at flush, once, and
        // compaction moves only their keys and references (RocksDB's integrated BlobDB).
        // Join sides keep their rows in values; a compaction rewrote them with the keys
        // (profiled on Nexmark q20, 10 M events: 4.9 GB written for ~1.7 GB of state, flush
        // and compaction 44% of the job, a quarter of it the kernel copying SST bytes).
        // Garbage collection relocates the live blobs of the oldest BLOB_GC_AGE_CUTOFF of
        // the blob files when a compaction reaches them, so the space of deleted and
        // overwritten values comes back; RocksDB's default quarter relocated so much of
        // q20's never-deleted bids that it cost what the blob files saved.
        options.set_enable_blob_files(true);
        options.set_min_blob_size(BLOB_MIN_BYTES);
        options.set_blob_file_size(WRITE_BUFFER_BYTES as u64);
        options.set_enable_blob_gc(true);
        options.set_blob_gc_age_cutoff(BLOB_GC_AGE_CUTOFF);
        options.set_blob_gc_force_threshold(BLOB_GC_FORCE_THRESHOLD);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(cache);
        // Most point reads miss (a join row or a group seen for the first time): a bloom
        // filter per file answers them without reading the file's index and blocks (profiled
        // on Nexmark q4, the join's misses searched every level).
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
        // The default column family named, so that batched reads can take its handle.
        let default = rocksdb::ColumnFamilyDescriptor::new(
            rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
            options.clone(),
        );
        let db = DB::open_cf_descriptors(&options, path, [default])
            .map_err(|e| state_error("cannot open state store", path, e))?;
        let written = db.iterator(IteratorMode::Start).next().is_some();
        Ok(Self {
            db,
            path: path.to_path_buf(),
            writes,
            parts: PartFiles::in_dir(path)?,
            written: AtomicBool::new(written),
        })
    }

    /// Opens the store at `path` once per process: every caller gets the same instance
    /// (RocksDB allows one opener per directory). A materialized view's store is written by
    /// its sink and committer and read by queries.
    pub fn open_shared(path: &Path) -> Result<Arc<Self>> {
        let mut open = SHARED
            .lock()
            .map_err(|_| EngineError::Internal("shared stores poisoned".into()))?;
        if let Some(store) = open.get(path) {
            return Ok(Arc::clone(store));
        }
        let store = Arc::new(Self::open(path)?);
        open.insert(path.to_path_buf(), Arc::clone(&store));
        Ok(store)
    }

    /// Closes every store opened with [`RocksDbStateBackend::open_shared`] that nobody else
    /// holds: called when the process is about to exit. A static is never dropped, and a
    /// store left open at exit had its background flushes and compactions running while
    /// RocksDB's own statics were torn down (a reader of a view crashed with SIGSEGV after
    /// printing its rows, about once in a few hundred runs on a loaded machine).
    pub fn close_all_shared() {
        let stores = match SHARED.lock() {
            Ok(mut open) => std::mem::take(&mut *open),
            Err(_) => return,
        };
        // Dropped outside the lock: closing waits for the store's background work.
        drop(stores);
    }

    /// Lets go of a store opened with [`RocksDbStateBackend::open_shared`] (it closes when
    /// its last user is done), before its directory is deleted.
    pub fn close_shared(path: &Path) {
        if let Ok(mut open) = SHARED.lock() {
            open.remove(path);
        }
    }

    /// Opens a checkpoint written by [`StateBackend::checkpoint_to`] for reading only (several
    /// tasks may read one checkpoint at once when restoring at a different parallelism).
    pub fn open_read_only(path: &Path) -> Result<Self> {
        let mut options = Options::default();
        options.set_merge_operator_associative(ADD_COUNTERS, merge_counters);
        let db = DB::open_for_read_only(&options, path, false)
            .map_err(|e| state_error("cannot open state checkpoint", path, e))?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
            writes: WriteOptions::default(),
            parts: PartFiles::read_only(path)?,
            written: AtomicBool::new(true),
        })
    }
}

impl StateBackend for RocksDbStateBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db
            .get(key)
            .map_err(|e| state_error("cannot read state store", &self.path, e))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.written.store(true, Ordering::Relaxed);
        let mut rocks = RocksBatch::default();
        for (start, end) in &batch.delete_ranges {
            // The range of one key (`just_after`): a point delete, not a range tombstone
            // (many tombstones slow every read that crosses them).
            if end.len() == start.len() + 1 && end.last() == Some(&0) && end.starts_with(start) {
                rocks.delete(start);
            } else {
                rocks.delete_range(start, end);
            }
        }
        for (k, v) in &batch.puts {
            rocks.put(k, v);
        }
        for (k, v) in &batch.adds {
            rocks.merge(k, v);
        }
        self.db
            .write_opt(rocks, &self.writes)
            .map_err(|e| state_error("cannot write state store", &self.path, e))
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_first(start, end, usize::MAX)
    }

    fn scan_first(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(start.to_vec());
        read.set_iterate_upper_bound(end.to_vec());
        self.db
            .iterator_opt(IteratorMode::Start, read)
            .take(limit)
            .map(|item| {
                item.map(|(k, v)| (k.into_vec(), v.into_vec()))
                    .map_err(|e| state_error("cannot read state store", &self.path, e))
            })
            .collect()
    }

    /// One batched MultiGet: RocksDB sorts the keys and looks them up file by file (profiled
    /// on Nexmark q16, point reads of COUNT(DISTINCT) entries one by one were a fifth of the
    /// job's CPU).
    fn get_each(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let Some(default) = self.db.cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME) else {
            // Opened without naming it (a checkpoint read for a restore): one read per key.
            return keys.iter().map(|k| self.get(k)).collect();
        };
        self.db
            .batched_multi_get_cf(default, keys, false)
            .into_iter()
            .map(|v| {
                v.map(|v| v.map(|v| v.to_vec()))
                    .map_err(|e| state_error("cannot read state store", &self.path, e))
            })
            .collect()
    }

    /// One iterator for every range, bounded by their union, seeking them in key order.
    /// Profiled on Nexmark q18 (a Top-N reading each new partition of a batch): creating an
    /// iterator per partition was two thirds of the reads' cost.
    fn scan_each(&self, ranges: &[(Vec<u8>, Vec<u8>)], limit: usize) -> Result<Vec<Entries>> {
        let mut out = vec![Vec::new(); ranges.len()];
        let (Some(lo), Some(hi)) = (
            ranges.iter().map(|(s, _)| s).min(),
            ranges.iter().map(|(_, e)| e).max(),
        ) else {
            return Ok(out);
        };
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(lo.clone());
        read.set_iterate_upper_bound(hi.clone());
        let mut it = self.db.raw_iterator_opt(read);
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_unstable_by(|&a, &b| ranges[a].0.cmp(&ranges[b].0));
        for i in order {
            let (start, end) = &ranges[i];
            it.seek(start);
            while out[i].len() < limit {
                match (it.key(), it.value()) {
                    (Some(k), Some(v)) if k < end.as_slice() => {
                        out[i].push((k.to_vec(), v.to_vec()))
                    }
                    _ => break,
                }
                it.next();
            }
            if !it.valid() {
                it.status()
                    .map_err(|e| state_error("cannot read state store", &self.path, e))?;
            }
        }
        Ok(out)
    }

    fn first_key(&self, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(start.to_vec());
        read.set_iterate_upper_bound(end.to_vec());
        let mut it = self.db.raw_iterator_opt(read);
        it.seek_to_first();
        if !it.valid() {
            it.status()
                .map_err(|e| state_error("cannot read state store", &self.path, e))?;
            return Ok(None);
        }
        Ok(it.key().map(|k| k.to_vec()))
    }

    fn checkpoint_to(&self, dir: &Path) -> Result<()> {
        if !self.written.load(Ordering::Relaxed) {
            std::fs::create_dir(dir)
                .map_err(|e| EngineError::io(format!("cannot create '{}'", dir.display()), e))?;
            return self.parts.link_into(dir);
        }
        let checkpoint = Checkpoint::new(&self.db)
            .map_err(|e| state_error("cannot checkpoint state store", &self.path, e))?;
        checkpoint
            .create_checkpoint(dir)
            .map_err(|e| state_error("cannot write state checkpoint", dir, e))?;
        self.parts.link_into(dir)
    }

    fn parts(&self) -> &PartFiles {
        &self.parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::range_delete_drops_one_window_and_keeps_the_rest;

    #[test]
    fn rocksdb_backend_meets_the_backend_contract() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksDbStateBackend::open(&dir.path().join("state")).unwrap();
        range_delete_drops_one_window_and_keeps_the_rest(&s);
    }

    #[test]
    fn state_survives_reopening_and_checkpoints_are_consistent_copies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        {
            let s = RocksDbStateBackend::open(&path).unwrap();
            s.write(WriteBatch {
                puts: vec![(b"w1/a".to_vec(), b"1".to_vec())],
                delete_ranges: vec![],
                adds: vec![],
            })
            .unwrap();
            s.checkpoint_to(&dir.path().join("chk-1")).unwrap();
            s.write(WriteBatch {
                puts: vec![(b"w1/b".to_vec(), b"2".to_vec())],
                delete_ranges: vec![],
                adds: vec![],
            })
            .unwrap();
        }
        let reopened = RocksDbStateBackend::open(&path).unwrap();
        assert_eq!(reopened.scan(b"w1/", b"w2/").unwrap().len(), 2);
        let checkpoint = RocksDbStateBackend::open_read_only(&dir.path().join("chk-1")).unwrap();
        assert_eq!(
            checkpoint.scan(b"w1/", b"w2/").unwrap(),
            vec![(b"w1/a".to_vec(), b"1".to_vec())]
        );
    }

    #[test]
    fn a_working_store_without_its_log_checkpoints_everything_written() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksDbStateBackend::open_working(&dir.path().join("state")).unwrap();
        let puts: Vec<(Vec<u8>, Vec<u8>)> = (0..1000u32)
            .map(|i| (format!("w1/{i:04}").into_bytes(), i.to_be_bytes().to_vec()))
            .collect();
        s.write(WriteBatch {
            puts: puts.clone(),
            delete_ranges: vec![],
            adds: vec![],
        })
        .unwrap();
        s.checkpoint_to(&dir.path().join("chk-1")).unwrap();
        // Nothing of the store's memtable is left behind: the checkpoint alone has it all.
        drop(s);
        let checkpoint = RocksDbStateBackend::open_read_only(&dir.path().join("chk-1")).unwrap();
        assert_eq!(checkpoint.scan(b"w1/", b"w2/").unwrap(), puts);
    }

    #[test]
    fn large_values_live_in_blob_files_through_checkpoints_deletes_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksDbStateBackend::open_working(&dir.path().join("state")).unwrap();
        let value = |i: u32| {
            let n = BLOB_MIN_BYTES as usize + (i as usize % 300);
            (0..n)
                .map(|j| (i as usize * 7 + j) as u8)
                .collect::<Vec<u8>>()
        };
        let puts: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32)
            .map(|i| (format!("j/{i:05}").into_bytes(), value(i)))
            .collect();
        s.write(WriteBatch {
            puts: puts.clone(),
            ..WriteBatch::default()
        })
        .unwrap();
        s.checkpoint_to(&dir.path().join("chk-1")).unwrap();
        let blobs = |d: &Path| {
            std::fs::read_dir(d)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "blob")
                })
                .count()
        };
        // The values went to blob files, and the checkpoint holds them.
        assert!(blobs(&dir.path().join("chk-1")) > 0);
        // Deleting half after the checkpoint changes the store, not the checkpoint.
        s.write(WriteBatch {
            delete_ranges: vec![(b"j/00000".to_vec(), b"j/01000".to_vec())],
            ..WriteBatch::default()
        })
        .unwrap();
        assert_eq!(s.scan(b"j/", b"k/").unwrap(), puts[1000..].to_vec());
        assert_eq!(s.get(b"j/01500").unwrap(), Some(value(1500)));
        s.checkpoint_to(&dir.path().join("chk-2")).unwrap();
        drop(s);
        let first = RocksDbStateBackend::open_read_only(&dir.path().join("chk-1")).unwrap();
        assert_eq!(first.scan(b"j/", b"k/").unwrap(), puts);
        let second = RocksDbStateBackend::open_read_only(&dir.path().join("chk-2")).unwrap();
        assert_eq!(second.scan(b"j/", b"k/").unwrap(), puts[1000..].to_vec());
        // A store restored from a copy of the first checkpoint reads and writes on.
        drop(first);
        let restored_dir = dir.path().join("restored");
        crate::runtime::link_copy(&dir.path().join("chk-1"), &restored_dir).unwrap();
        let restored = RocksDbStateBackend::open_working(&restored_dir).unwrap();
        assert_eq!(restored.get(b"j/00007").unwrap(), Some(value(7)));
        restored
            .write(WriteBatch {
                puts: vec![(b"j/00007".to_vec(), value(8))],
                ..WriteBatch::default()
            })
            .unwrap();
        assert_eq!(restored.get(b"j/00007").unwrap(), Some(value(8)));
        assert_eq!(restored.scan(b"j/", b"k/").unwrap().len(), 2000);
    }

    #[test]
    fn added_counters_reach_checkpoints_merged_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksDbStateBackend::open_working(&dir.path().join("state")).unwrap();
        let one = 1i64.to_le_bytes().to_vec();
        for _ in 0..3 {
            s.write(WriteBatch {
                adds: vec![(b"n".to_vec(), one.clone())],
                ..WriteBatch::default()
            })
            .unwrap();
        }
        s.checkpoint_to(&dir.path().join("chk-1")).unwrap();
        s.write(WriteBatch {
            adds: vec![(b"n".to_vec(), one)],
            ..WriteBatch::default()
        })
        .unwrap();
        assert_eq!(s.get(b"n").unwrap(), Some(4i64.to_le_bytes().to_vec()));
        // A checkpoint opened elsewhere merges what it holds the same way.
        drop(s);
        let checkpoint = RocksDbStateBackend::open_read_only(&dir.path().join("chk-1")).unwrap();
        assert_eq!(
            checkpoint.get(b"n").unwrap(),
            Some(3i64.to_le_bytes().to_vec())
        );
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let err = RocksDbStateBackend::open(&file.join("state"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("cannot open state store"), "{err}");
    }
}
