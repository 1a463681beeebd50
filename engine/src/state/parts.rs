//! [`PartFiles`]: large, short-lived values (the parts of open windows) kept in append-only
//! files beside a store, with their index (key -> file, offset, length) in memory.
//!
//! A window's rows are written at a barrier and deleted when the window fires, often a few
//! milliseconds later. As RocksDB values they were copied into a memtable, flushed into a
//! level-0 file at the checkpoint, rewritten by compaction and finally dropped by a range
//! tombstone: profiled on Nexmark q7 with 100 ms checkpoints, about 38% of the job. Here they
//! are appended once to a file. A checkpoint hard-links the files still referenced (a file is
//! never changed before the offsets its references name, so a link taken at a barrier holds
//! what the checkpoint's references point to) and writes the index beside them
//! ([`INDEX_FILE`]); a file is unlinked once nothing in the index refers to it any more. With
//! the index out of RocksDB too, a task whose state is all windows never writes RocksDB, and
//! its checkpoint skips RocksDB's flush and the half dozen syncs that come with it.
//!
//! Nothing here syncs on the task's thread: [`sync_parts`] makes a checkpoint's files durable
//! once every task acknowledged it, before the manifest records it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{EngineError, Result};

/// Extension of a part file (`<label>.wparts`).
const SUFFIX: &str = "wparts";
/// The index of a checkpoint's parts, in the checkpoint's directory.
pub const INDEX_FILE: &str = "parts.index";
/// First bytes of [`INDEX_FILE`], with its version.
const INDEX_MAGIC: &[u8; 8] = b"WPIDX001";
/// Bytes after which appends go to a new file: a file is removed only when every part in it
/// is, so smaller files free disk sooner.
const FILE_BYTES: u64 = 64 << 20;
/// Bytes after which a checkpoint starts a new file. Below them the file goes on growing after
/// it was linked (its checkpoint's references end before the new bytes): one file per
/// checkpoint would make a window that stays open for many checkpoints (a long CUMULATE,
/// parts written at every barrier) hold a file per checkpoint, each linked into every
/// checkpoint after it.
const CHECKPOINT_FILE_BYTES: u64 = 8 << 20;

/// Where a part's bytes are: `len` bytes at `offset` of the file of `label`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartRef {
    pub label: u64,
    pub offset: u64,
    pub len: u64,
}

/// The part files of one store: in a directory (the store's own), or in memory (unit tests).
pub struct PartFiles {
    /// `None`: in memory.
    dir: Option<PathBuf>,
    /// A checkpoint opened for reading: its files are never removed.
    read_only: bool,
    /// Bytes after which a file is written no more: at any append, at a checkpoint.
    file_bytes: (u64, u64),
    files: Mutex<Files>,
}

#[derive(Default)]
struct Files {
    /// The file being appended to, by label (a directory store).
    open: BTreeMap<u64, File>,
    /// Lengths of the files this store knows of (written or found), by label.
    lengths: BTreeMap<u64, u64>,
    /// Contents by label (an in-memory store).
    memory: BTreeMap<u64, Vec<u8>>,
    /// Entries of the index referring to each file, by label.
    live: BTreeMap<u64, u64>,
    /// Where each key's part is.
    index: BTreeMap<Vec<u8>, PartRef>,
    /// The label appended to now: its file stays while it is appended to.
    current: Option<u64>,
    /// The label the next file gets.
    next: u64,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> EngineError {
    EngineError::io(format!("{what} '{}'", path.display()), e)
}

impl PartFiles {
    /// The part files in `dir` (a store's directory), with the index a checkpoint left there
    /// (a store restored from it).
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let mut files = Files::default();
        let index = dir.join(INDEX_FILE);
        match std::fs::read(&index) {
            Ok(bytes) => {
                for (key, part) in decode_index(&bytes).ok_or_else(|| {
                    EngineError::State(format!("'{}' is damaged", index.display()))
                })? {
                    *files.live.entry(part.label).or_default() += 1;
                    files.next = files.next.max(part.label + 1);
                    files.index.insert(key, part);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("cannot read", &index, e)),
        }
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if let Some(label) = label_of(&path) {
                    let len = entry
                        .metadata()
                        .map_err(|e| io_error("cannot read", &path, e))?
                        .len();
                    files.lengths.insert(label, len);
                    files.next = files.next.max(label + 1);
                }
            }
        }
        Ok(Self {
            dir: Some(dir.to_path_buf()),
            read_only: false,
            file_bytes: (FILE_BYTES, CHECKPOINT_FILE_BYTES),
            files: Mutex::new(files),
        })
    }

    /// The part files of a checkpoint in `dir`, read by restores: never appended to nor
    /// removed.
    pub fn read_only(dir: &Path) -> Result<Self> {
        Ok(Self {
            read_only: true,
            ..Self::in_dir(dir)?
        })
    }

    /// Part files kept in memory.
    pub fn in_memory() -> Self {
        Self {
            dir: None,
            read_only: false,
            file_bytes: (FILE_BYTES, CHECKPOINT_FILE_BYTES),
            files: Mutex::new(Files::default()),
        }
    }

    /// A copy of in-memory part files and their index: what a checkpoint of an in-memory
    /// store holds.
    pub fn copy(&self) -> Result<Self> {
        let files = self.lock()?;
        Ok(Self {
            dir: self.dir.clone(),
            read_only: self.read_only,
            file_bytes: self.file_bytes,
            files: Mutex::new(Files {
                memory: files.memory.clone(),
                lengths: files.lengths.clone(),
                live: files.live.clone(),
                index: files.index.clone(),
                next: files.next,
                ..Files::default()
            }),
        })
    }

    /// The same files, written no more past `any` bytes, or `checkpoint` bytes at a checkpoint.
    #[cfg(test)]
    fn rotating_at(mut self, any: u64, checkpoint: u64) -> Self {
        self.file_bytes = (any, checkpoint);
        self
    }

    fn lock(&self) -> Result<MutexGuard<'_, Files>> {
        self.files
            .lock()
            .map_err(|_| EngineError::Internal("part files poisoned".into()))
    }

    fn path(dir: &Path, label: u64) -> PathBuf {
        dir.join(format!("{label:020}.{SUFFIX}"))
    }

    /// Puts `bytes` under `key` (replacing what was there).
    pub fn put(&self, key: Vec<u8>, bytes: &[u8]) -> Result<PartRef> {
        self.put_with(key, &mut |out| {
            out.write_all(bytes)
                .map_err(|e| EngineError::io("cannot write a state part", e))
        })
    }

    /// Puts what `write` writes under `key` (replacing what was there): appended to the file
    /// being written, which takes appends until it holds [`FILE_BYTES`], or
    /// [`CHECKPOINT_FILE_BYTES`] at a checkpoint. `write` writes straight to the file, without
    /// a copy in memory first.
    pub fn put_with(
        &self,
        key: Vec<u8>,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<PartRef> {
        if self.read_only {
            return Err(EngineError::Internal(
                "a state part written to a checkpoint".into(),
            ));
        }
        let mut files = self.lock()?;
        let label = match files.current {
            Some(label) if files.lengths.get(&label).copied().unwrap_or(0) < self.file_bytes.0 => {
                label
            }
            full => {
                let label = files.next;
                files.next += 1;
                files.current = Some(label);
                if let Some(full) = full {
                    files.open.remove(&full);
                    files.collect(self.dir.as_deref(), full);
                }
                label
            }
        };
        let offset = files.lengths.get(&label).copied().unwrap_or(0);
        let len = match &self.dir {
            None => {
                let file = files.memory.entry(label).or_default();
                let before = file.len();
                if let Err(e) = write(file) {
                    file.truncate(before);
                    return Err(e);
                }
                (file.len() - before) as u64
            }
            Some(dir) => {
                let path = Self::path(dir, label);
                let file = match files.open.entry(label) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => v.insert(
                        OpenOptions::new()
                            .create_new(true)
                            .append(true)
                            .open(&path)
                            .map_err(|e| io_error("cannot create", &path, e))?,
                    ),
                };
                let mut out = Counted {
                    out: std::io::BufWriter::with_capacity(1 << 16, file),
                    bytes: 0,
                };
                let written = write(&mut out)
                    .and_then(|()| out.flush().map_err(|e| io_error("cannot write", &path, e)));
                let bytes = out.bytes;
                drop(out);
                if let Err(e) = written {
                    // Part of the bytes may be in the file: later appends go to a new one.
                    files.open.remove(&label);
                    files.current = None;
                    files.collect(self.dir.as_deref(), label);
                    return Err(EngineError::State(format!(
                        "cannot write '{}': {e}",
                        path.display()
                    )));
                }
                bytes
            }
        };
        files.lengths.insert(label, offset + len);
        *files.live.entry(label).or_default() += 1;
        let part = PartRef { label, offset, len };
        if let Some(old) = files.index.insert(key, part) {
            files.forget(self.dir.as_deref(), &old);
        }
        Ok(part)
    }

    /// Where the part under `key` is.
    pub fn get(&self, key: &[u8]) -> Result<Option<PartRef>> {
        Ok(self.lock()?.index.get(key).copied())
    }

    /// The parts with `lo <= key < hi`, in key order.
    pub fn scan(&self, lo: &[u8], hi: &[u8]) -> Result<Vec<(Vec<u8>, PartRef)>> {
        Ok(self
            .lock()?
            .index
            .range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
            .map(|(k, p)| (k.clone(), *p))
            .collect())
    }

    /// The smallest key with `lo <= key < hi`.
    pub fn first_key(&self, lo: &[u8], hi: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .lock()?
            .index
            .range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
            .next()
            .map(|(k, _)| k.clone()))
    }

    /// Drops the parts with `lo <= key < hi`: a file left with none is removed (unless it is
    /// still being appended to).
    pub fn delete_range(&self, lo: &[u8], hi: &[u8]) -> Result<()> {
        if self.read_only {
            return Err(EngineError::Internal(
                "a state part deleted from a checkpoint".into(),
            ));
        }
        let mut files = self.lock()?;
        let doomed: Vec<Vec<u8>> = files
            .index
            .range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            if let Some(part) = files.index.remove(&key) {
                files.forget(self.dir.as_deref(), &part);
            }
        }
        Ok(())
    }

    /// The bytes `part` refers to.
    pub fn read(&self, part: &PartRef) -> Result<Vec<u8>> {
        let missing = || {
            EngineError::State(format!(
                "state part {}..{} of file {} is missing",
                part.offset,
                part.offset + part.len,
                part.label
            ))
        };
        let Some(dir) = &self.dir else {
            let files = self.lock()?;
            let file = files.memory.get(&part.label).ok_or_else(missing)?;
            let range = part.offset as usize..(part.offset + part.len) as usize;
            return file.get(range).map(<[u8]>::to_vec).ok_or_else(missing);
        };
        let path = Self::path(dir, part.label);
        let file = File::open(&path).map_err(|e| io_error("cannot open", &path, e))?;
        let mut bytes = vec![0u8; part.len as usize];
        file.read_exact_at(&mut bytes, part.offset)
            .map_err(|e| io_error("cannot read", &path, e))?;
        Ok(bytes)
    }

    /// Writes the referenced files and the index into `dir` (a checkpoint of the store,
    /// already created): hard-links the files, writes [`INDEX_FILE`] when there is anything
    /// to index, and removes the files nothing refers to any more. They are made durable by
    /// [`sync_parts`], off the task's thread.
    pub fn link_into(&self, dir: &Path) -> Result<()> {
        if self.read_only {
            return Err(EngineError::Internal(
                "a checkpoint of a checkpoint's state parts".into(),
            ));
        }
        let mut files = self.lock()?;
        // Appends after the checkpoint may go on in a file it links: its references end
        // before them.
        if let Some(current) = files.current {
            if files.lengths.get(&current).copied().unwrap_or(0) >= self.file_bytes.1 {
                files.current = None;
            }
        }
        let labels: Vec<u64> = files.lengths.keys().copied().collect();
        for label in labels {
            files.collect(self.dir.as_deref(), label);
        }
        let Some(own) = &self.dir else {
            return Ok(());
        };
        for label in files.lengths.keys() {
            let (from, to) = (Self::path(own, *label), Self::path(dir, *label));
            std::fs::hard_link(&from, &to).map_err(|e| io_error("cannot link", &from, e))?;
        }
        if !files.index.is_empty() {
            let path = dir.join(INDEX_FILE);
            std::fs::write(&path, encode_index(&files.index))
                .map_err(|e| io_error("cannot write", &path, e))?;
        }
        Ok(())
    }

    /// Labels of the files this store holds (for tests).
    pub fn labels(&self) -> Result<Vec<u64>> {
        Ok(self.lock()?.lengths.keys().copied().collect())
    }
}

impl Default for PartFiles {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl std::fmt::Debug for PartFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PartFiles({:?})", self.dir)
    }
}

impl Files {
    /// An index entry referring to `part` went.
    fn forget(&mut self, dir: Option<&Path>, part: &PartRef) {
        if let Some(n) = self.live.get_mut(&part.label) {
            *n = n.saturating_sub(1);
        }
        self.collect(dir, part.label);
    }

    /// Removes the file of `label` when nothing refers to it and it is not being appended to.
    fn collect(&mut self, dir: Option<&Path>, label: u64) {
        if self.current == Some(label) || self.live.get(&label).copied().unwrap_or(0) > 0 {
            return;
        }
        self.live.remove(&label);
        self.open.remove(&label);
        self.memory.remove(&label);
        if self.lengths.remove(&label).is_some() {
            if let Some(dir) = dir {
                // A failed unlink leaves a file the next job start wipes with the store.
                let _ = std::fs::remove_file(PartFiles::path(dir, label));
            }
        }
    }
}

fn encode_index(index: &BTreeMap<Vec<u8>, PartRef>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + index.len() * 48);
    out.extend_from_slice(INDEX_MAGIC);
    out.extend_from_slice(&(index.len() as u64).to_be_bytes());
    for (key, part) in index {
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
        for n in [part.label, part.offset, part.len] {
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
    out
}

/// The entries of an index [`encode_index`] wrote; `None` when it is damaged.
fn decode_index(bytes: &[u8]) -> Option<Vec<(Vec<u8>, PartRef)>> {
    let mut at = 0usize;
    let mut take = |n: usize| {
        let slice = bytes.get(at..at.checked_add(n)?)?;
        at += n;
        Some(slice)
    };
    if take(INDEX_MAGIC.len())? != INDEX_MAGIC {
        return None;
    }
    let u64_of = |b: &[u8]| b.try_into().ok().map(u64::from_be_bytes);
    let count = u64_of(take(8)?)?;
    let mut entries = Vec::new();
    for _ in 0..count {
        let len = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        let key = take(len)?.to_vec();
        let label = u64_of(take(8)?)?;
        let offset = u64_of(take(8)?)?;
        let len = u64_of(take(8)?)?;
        entries.push((key, PartRef { label, offset, len }));
    }
    (at == bytes.len()).then_some(entries)
}

/// A writer that counts the bytes written through it.
struct Counted<W: Write> {
    out: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The label of a part file's path, `None` for any other file.
fn label_of(path: &Path) -> Option<u64> {
    if path.extension()? != SUFFIX {
        return None;
    }
    path.file_stem()?.to_str()?.parse().ok()
}

/// Makes the part files of the checkpoint of a store in `dir` durable: their data and their
/// links. Called once every task acknowledged the checkpoint, before it is recorded: a task's
/// thread does not wait for the disk (two syncs per task and checkpoint, of about ten).
pub fn sync_parts(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("cannot read", dir, e)),
    };
    let mut any = false;
    for entry in entries {
        let path = entry.map_err(|e| io_error("cannot read", dir, e))?.path();
        if is_part_file(&path) || path.file_name().is_some_and(|n| n == INDEX_FILE) {
            File::open(&path)
                .and_then(|f| f.sync_data())
                .map_err(|e| io_error("cannot sync", &path, e))?;
            any = true;
        }
    }
    if any {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("cannot sync", dir, e))?;
    }
    Ok(())
}

/// Whether `path` is a part file (a restore may hard-link it: a restored store never appends
/// to the files it found, it writes new ones).
pub fn is_part_file(path: &Path) -> bool {
    label_of(path).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts_in(files: &PartFiles) -> Vec<u64> {
        files.labels().unwrap()
    }

    fn key(k: &str) -> Vec<u8> {
        k.as_bytes().to_vec()
    }

    fn checkpoint(dir: &Path, name: &str) -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn an_index_reads_back_and_a_damaged_one_is_refused() {
        let r = PartRef {
            label: 7,
            offset: 1 << 40,
            len: 12,
        };
        let mut index = BTreeMap::new();
        index.insert(key("a"), r);
        index.insert(Vec::new(), r);
        let bytes = encode_index(&index);
        assert_eq!(
            decode_index(&bytes).unwrap(),
            index.into_iter().collect::<Vec<_>>()
        );
        assert_eq!(decode_index(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_index(b"WPIDX001"), None);
    }

    #[test]
    fn a_file_goes_when_its_last_part_is_deleted_and_it_is_written_no_more() {
        for dir in [None, Some(tempfile::tempdir().unwrap())] {
            let files = match &dir {
                Some(d) => PartFiles::in_dir(d.path()).unwrap(),
                None => PartFiles::in_memory(),
            }
            .rotating_at(u64::MAX, 0);
            let a = files.put(key("a"), b"hello").unwrap();
            let b = files.put(key("b"), b"world").unwrap();
            assert_eq!((a.label, a.offset, b.label, b.offset), (0, 0, 0, 5));
            assert_eq!(
                files.read(&files.get(b"b").unwrap().unwrap()).unwrap(),
                b"world"
            );
            assert_eq!(files.first_key(b"a0", b"z").unwrap(), Some(key("b")));
            assert_eq!(files.scan(b"a", b"b").unwrap(), vec![(key("a"), a)]);
            files.delete_range(b"a", b"c").unwrap();
            assert!(files.scan(b"", b"z").unwrap().is_empty());
            // Still the file written to: it stays.
            assert_eq!(parts_in(&files), vec![0]);
            let chk = tempfile::tempdir().unwrap();
            files.link_into(chk.path()).unwrap();
            assert!(parts_in(&files).is_empty());
            let c = files.put(key("c"), b"!").unwrap();
            assert_eq!(parts_in(&files), vec![1]);
            assert_eq!(files.read(&c).unwrap(), b"!");
            // A key put again lets go of its old part.
            files.link_into(&checkpoint(chk.path(), "next")).unwrap();
            files.put(key("c"), b"?").unwrap();
            assert_eq!(parts_in(&files), vec![2]);
            if let Some(d) = &dir {
                let on_disk: Vec<_> = std::fs::read_dir(d.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                assert_eq!(on_disk.len(), 1, "{on_disk:?}");
            }
        }
    }

    #[test]
    fn a_checkpoint_links_referenced_files_with_the_index_and_a_restore_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let work = checkpoint(dir.path(), "work");
        let files = PartFiles::in_dir(&work).unwrap().rotating_at(u64::MAX, 0);
        let kept = files.put(key("kept"), b"kept").unwrap();
        files.link_into(&checkpoint(dir.path(), "chk0")).unwrap();
        files.put(key("gone"), b"gone").unwrap();
        files.link_into(&checkpoint(dir.path(), "chk1")).unwrap();
        let later = files.put(key("later"), b"later").unwrap();
        files.delete_range(b"gone", b"gone\0").unwrap();
        let chk = checkpoint(dir.path(), "chk");
        files.link_into(&chk).unwrap();
        assert_eq!((kept.label, later.label), (0, 2));
        // Written after the checkpoint: a new file.
        let more = files.put(key("more"), b"more").unwrap();
        assert_eq!(more.label, 3);
        files.delete_range(b"kept", b"kept\0").unwrap();
        // The working store lost file 0 (its last part went), not the checkpoint.
        assert!(!PartFiles::path(&work, 0).exists());
        sync_parts(&chk).unwrap();
        sync_parts(&dir.path().join("missing")).unwrap();
        let read = PartFiles::read_only(&chk).unwrap();
        assert_eq!(parts_in(&read), vec![0, 2]);
        let found = read.scan(b"", b"z").unwrap();
        assert_eq!(found, vec![(key("kept"), kept), (key("later"), later)]);
        assert_eq!(read.read(&kept).unwrap(), b"kept");
        assert_eq!(read.read(&later).unwrap(), b"later");
        assert!(read.put(key("x"), b"x").is_err());
        assert!(read.delete_range(b"", b"z").is_err());
        assert!(read.read(&more).is_err());
        // Restored in place: the checkpoint's files in a new working directory.
        let again = checkpoint(dir.path(), "again");
        for entry in std::fs::read_dir(&chk).unwrap() {
            let entry = entry.unwrap();
            std::fs::hard_link(entry.path(), again.join(entry.file_name())).unwrap();
        }
        let restored = PartFiles::in_dir(&again).unwrap().rotating_at(u64::MAX, 0);
        // New files follow the restored ones.
        assert_eq!(restored.put(key("new"), b"new").unwrap().label, 3);
        restored.delete_range(b"kept", b"kept\0").unwrap();
        let next = checkpoint(dir.path(), "chk2");
        restored.link_into(&next).unwrap();
        assert_eq!(parts_in(&restored), vec![2, 3]);
        assert!(!PartFiles::path(&again, 0).exists());
        assert!(PartFiles::path(&chk, 0).exists());
        let read = PartFiles::read_only(&next).unwrap();
        assert_eq!(
            read.read(&read.get(b"later").unwrap().unwrap()).unwrap(),
            b"later"
        );
        assert_eq!(read.get(b"kept").unwrap(), None);
    }

    #[test]
    fn a_small_file_goes_on_after_a_checkpoint_and_a_full_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = PartFiles::in_dir(dir.path()).unwrap().rotating_at(8, 4);
        let a = files.put(key("a"), b"abc").unwrap();
        let chk = checkpoint(dir.path(), "chk");
        files.link_into(&chk).unwrap();
        // Three bytes: the file goes on, past what the checkpoint refers to.
        let b = files.put(key("b"), b"defgh").unwrap();
        assert_eq!((b.label, b.offset), (0, 3));
        let read = PartFiles::read_only(&chk).unwrap();
        assert_eq!(read.read(&a).unwrap(), b"abc");
        assert_eq!(read.get(b"b").unwrap(), None);
        // Eight bytes: full.
        let c = files.put(key("c"), b"i").unwrap();
        assert_eq!((c.label, c.offset), (1, 0));
        files.link_into(&checkpoint(dir.path(), "chk2")).unwrap();
        assert_eq!(files.put(key("d"), b"j").unwrap().label, 1);
        files.put(key("e"), b"klm").unwrap();
        let chk3 = checkpoint(dir.path(), "chk3");
        files.link_into(&chk3).unwrap();
        assert_eq!(files.put(key("f"), b"n").unwrap().label, 2);
        let read = PartFiles::read_only(&chk3).unwrap();
        assert_eq!(
            read.read(&read.get(b"b").unwrap().unwrap()).unwrap(),
            b"defgh"
        );
    }
}
