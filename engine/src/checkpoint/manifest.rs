//! The manifest of a checkpoint: what a restart needs (source positions, where each task's
//! state is, what the sinks pre-committed). Writing it is the checkpoint's commit point, so it
//! is written atomically ([`atomic_write`]) and carries a CRC-32 of its JSON: a torn or corrupt
//! manifest is never loaded.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic_file::atomic_write;
use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::source::SplitId;

const FORMAT_VERSION: u64 = 1;
const CHECKSUM_PREFIX: &str = "crc32 ";

/// Identifies one task: stage index and instance. Written as `[stage, instance]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "(usize, usize)", into = "(usize, usize)")]
pub struct TaskId {
    pub stage: usize,
    pub instance: usize,
}

impl From<(usize, usize)> for TaskId {
    fn from((stage, instance): (usize, usize)) -> Self {
        Self { stage, instance }
    }
}

impl From<TaskId> for (usize, usize) {
    fn from(t: TaskId) -> Self {
        (t.stage, t.instance)
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.stage, self.instance)
    }
}

/// Where a source partition stood at the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCheckpoint {
    pub task: TaskId,
    /// Opaque to the runtime; the connector reads it back.
    #[serde(with = "hex_bytes")]
    pub position: Vec<u8>,
    /// The instance's watermark (the minimum over its splits' running maxima).
    pub watermark: EventTime,
    /// Each split's watermark (running maximum), so lateness is judged as before.
    #[serde(default)]
    pub splits: Vec<(SplitId, EventTime)>,
}

/// Output a sink made durable but not visible, to be committed with the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCommit {
    pub task: TaskId,
    /// The sink's position in its task's chain.
    pub operator: usize,
    pub epoch: u64,
    #[serde(with = "hex_bytes")]
    pub payload: Vec<u8>,
}

/// One complete checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub job: String,
    pub epoch: u64,
    /// The job ran to its end: nothing to restore, only commits to finish.
    pub finished: bool,
    /// Name and parallelism of every stage, to check that a restart plans the same job.
    pub stages: Vec<(String, usize)>,
    pub sources: Vec<SourceCheckpoint>,
    /// Tasks with state, and the directory (relative to the checkpoints directory) of each.
    #[serde(with = "state_dirs")]
    pub state: Vec<(TaskId, String)>,
    pub commits: Vec<PendingCommit>,
}

/// The files of one job: `state/` (working stores), `checkpoints/` (manifests and state
/// checkpoints).
#[derive(Debug, Clone)]
pub struct JobDir {
    root: PathBuf,
}

impl JobDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The working store of a task.
    pub fn working_state(&self, task: TaskId) -> PathBuf {
        self.root.join("state").join(task.to_string())
    }

    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// Where a task's state for `epoch` is written, relative to [`JobDir::checkpoints`].
    pub fn state_checkpoint(epoch: u64, task: TaskId) -> String {
        format!("{epoch:020}/{task}")
    }

    fn manifest_path(&self, epoch: u64) -> PathBuf {
        self.checkpoints()
            .join(format!("manifest-{epoch:020}.json"))
    }

    /// Epochs with a manifest file, oldest first (complete or not: loading checks).
    fn manifest_epochs(&self) -> Result<Vec<u64>> {
        let dir = self.checkpoints();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(EngineError::io(
                    format!("cannot list '{}'", dir.display()),
                    e,
                ))
            }
        };
        let mut epochs: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("manifest-")?
                    .strip_suffix(".json")?
                    .parse()
                    .ok()
            })
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// The newest manifest that is complete and intact, with the problems met on the way
    /// (newer manifests that are torn or corrupt, and were skipped).
    pub fn latest_manifest(&self) -> Result<(Option<Manifest>, Vec<String>)> {
        let mut skipped = Vec::new();
        for epoch in self.manifest_epochs()?.into_iter().rev() {
            let path = self.manifest_path(epoch);
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| Manifest::decode(&bytes))
            {
                Ok(m) if m.epoch == epoch => return Ok((Some(m), skipped)),
                Ok(m) => skipped.push(format!(
                    "'{}' names epoch {}, skipped",
                    path.display(),
                    m.epoch
                )),
                Err(e) => skipped.push(format!("'{}' skipped: {e}", path.display())),
            }
        }
        Ok((None, skipped))
    }

    /// Writes the manifest atomically: after this returns, the checkpoint is complete.
    pub fn write_manifest(&self, manifest: &Manifest) -> Result<()> {
        let dir = self.checkpoints();
        let path = self.manifest_path(manifest.epoch);
        std::fs::create_dir_all(&dir)
            .and_then(|_| atomic_write(&path, &manifest.encode()))
            .map_err(|e| {
                EngineError::io(
                    format!("cannot write checkpoint manifest '{}'", path.display()),
                    e,
                )
            })
    }

    /// Deletes checkpoints older than the newest `retain` manifests, and whatever sits under
    /// the name of an epoch that never got a manifest (failed checkpoints) below the newest
    /// one. Best effort: what cannot be deleted now is tried again next time; returns the
    /// first problem.
    pub fn prune(&self, retain: usize) -> Result<()> {
        let epochs = self.manifest_epochs()?;
        let keep_from = epochs
            .len()
            .checked_sub(retain.max(1))
            .map(|i| epochs[i])
            .unwrap_or(0);
        let newest = epochs.last().copied().unwrap_or(0);
        self.delete_where(|name| {
            let is_manifest = name.starts_with("manifest-");
            let Ok(epoch) = name
                .strip_prefix("manifest-")
                .and_then(|n| n.strip_suffix(".json"))
                .unwrap_or(name)
                .parse::<u64>()
            else {
                return false;
            };
            let failed = !is_manifest && !epochs.contains(&epoch) && epoch < newest;
            epoch < keep_from || failed
        })
    }

    /// Deletes the state of checkpoints after `epoch` that never got a manifest: what a crash
    /// interrupted. A job that resumes from `epoch` numbers its next checkpoints from there.
    /// Manifests are left alone, also torn ones (one that could not be read now is evidence).
    /// Returns the first problem.
    pub fn discard_after(&self, epoch: u64) -> Result<()> {
        let manifests = self.manifest_epochs()?;
        self.delete_where(|name| {
            name.parse::<u64>()
                .is_ok_and(|e| e > epoch && !manifests.contains(&e))
        })
    }

    /// Deletes every entry of the checkpoints directory whose name `doomed` picks (best
    /// effort: goes on past a failure); returns the first problem.
    fn delete_where(&self, doomed: impl Fn(&str) -> bool) -> Result<()> {
        let Ok(entries) = std::fs::read_dir(self.checkpoints()) else {
            return Ok(());
        };
        let mut first_error = None;
        for entry in entries.filter_map(|e| e.ok()) {
            if !doomed(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = removed {
                first_error.get_or_insert_with(|| {
                    EngineError::io(format!("cannot delete '{}'", path.display()), e)
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Removes the state directory of a checkpoint that failed.
    pub fn discard(&self, epoch: u64) {
        let _ = std::fs::remove_dir_all(self.checkpoints().join(format!("{epoch:020}")));
    }
}

/// Byte strings as hex text (positions and sink payloads stay readable in the file).
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || serde::de::Error::custom(format!("bad hex string '{text}'"));
        if !text.len().is_multiple_of(2) || !text.is_ascii() {
            return Err(bad());
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| bad()))
            .collect()
    }
}

/// `state` as a list of `{"task": [stage, instance], "dir": "..."}`.
mod state_dirs {
    use super::TaskId;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Entry {
        task: TaskId,
        dir: String,
    }

    pub fn serialize<S: Serializer>(dirs: &[(TaskId, String)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(dirs.iter().map(|(task, dir)| Entry {
            task: *task,
            dir: dir.clone(),
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(TaskId, String)>, D::Error> {
        Ok(Vec::<Entry>::deserialize(d)?
            .into_iter()
            .map(|e| (e.task, e.dir))
            .collect())
    }
}

/// The file's fields around the manifest: its format version.
#[derive(Serialize)]
struct VersionedRef<'a> {
    version: u64,
    #[serde(flatten)]
    manifest: &'a Manifest,
}

#[derive(Deserialize)]
struct Version {
    version: u64,
}

impl Manifest {
    /// The manifest as bytes: JSON, then a line with the CRC-32 of the JSON.
    pub fn encode(&self) -> Vec<u8> {
        let file = VersionedRef {
            version: FORMAT_VERSION,
            manifest: self,
        };
        let text = serde_json::to_string_pretty(&file).unwrap_or_default();
        let sum = crc32fast::hash(text.as_bytes());
        format!("{text}\n{CHECKSUM_PREFIX}{sum:08x}\n").into_bytes()
    }

    /// Parses and verifies a manifest.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let text = text
            .strip_suffix('\n')
            .ok_or("truncated (no final newline)")?;
        let (body, sum) = text.rsplit_once('\n').ok_or("truncated (no checksum)")?;
        let sum = sum
            .strip_prefix(CHECKSUM_PREFIX)
            .and_then(|s| u32::from_str_radix(s, 16).ok())
            .ok_or("truncated (no checksum)")?;
        if crc32fast::hash(body.as_bytes()) != sum {
            return Err("checksum mismatch (corrupt)".into());
        }
        let Version { version } = serde_json::from_str(body).map_err(|e| e.to_string())?;
        if version != FORMAT_VERSION {
            return Err(format!("unknown format version {version}"));
        }
        serde_json::from_str(body).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(epoch: u64) -> Manifest {
        Manifest {
            job: "j".into(),
            epoch,
            finished: false,
            stages: vec![("source".into(), 2), ("aggregate".into(), 3)],
            sources: vec![SourceCheckpoint {
                task: TaskId {
                    stage: 0,
                    instance: 1,
                },
                position: vec![0, 1, 255],
                watermark: -5,
                splits: vec![(0, -5), (3, 17)],
            }],
            state: vec![(
                TaskId {
                    stage: 1,
                    instance: 2,
                },
                JobDir::state_checkpoint(
                    epoch,
                    TaskId {
                        stage: 1,
                        instance: 2,
                    },
                ),
            )],
            commits: vec![PendingCommit {
                task: TaskId {
                    stage: 1,
                    instance: 0,
                },
                operator: 2,
                epoch,
                payload: b"part".to_vec(),
            }],
        }
    }

    #[test]
    fn the_file_format_is_the_one_earlier_versions_wrote() {
        let dir = JobDir::state_checkpoint(
            7,
            TaskId {
                stage: 1,
                instance: 2,
            },
        );
        let body = format!(
            r#"{{"version":1,"job":"j","epoch":7,"finished":false,"stages":[["source",2],["aggregate",3]],"sources":[{{"task":[0,1],"position":"0001ff","watermark":-5,"splits":[[0,-5],[3,17]]}}],"state":[{{"task":[1,2],"dir":"{dir}"}}],"commits":[{{"task":[1,0],"operator":2,"epoch":7,"payload":"70617274"}}]}}"#
        );
        // The standard CRC-32 check value: the checksum line is what it always was.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        let file = format!("{body}\ncrc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
        assert_eq!(Manifest::decode(file.as_bytes()).unwrap(), sample(7));
    }

    #[test]
    fn a_manifest_survives_encoding_and_any_damage_is_detected() {
        let m = sample(7);
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        // Torn at every length: never accepted.
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // One flipped byte in the body: rejected.
        let mut bad = bytes.clone();
        let i = bad.len() / 2;
        bad[i] ^= 0x01;
        assert!(Manifest::decode(&bad).is_err());
    }

    #[test]
    fn latest_manifest_skips_torn_ones_and_prune_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let jd = JobDir::new(dir.path());
        for e in 1..=4 {
            jd.write_manifest(&sample(e)).unwrap();
            std::fs::create_dir_all(jd.checkpoints().join(format!("{e:020}"))).unwrap();
        }
        // A torn manifest 5 (a crash mid-write would leave only the temporary file; simulate
        // worse: a truncated final file) is skipped.
        let full = sample(5).encode();
        std::fs::write(jd.manifest_path(5), &full[..full.len() / 2]).unwrap();
        let (m, skipped) = jd.latest_manifest().unwrap();
        assert_eq!(m.unwrap().epoch, 4);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        std::fs::remove_file(jd.manifest_path(5)).unwrap();
        // State of a failed epoch 6 below a newer manifest 7 is garbage.
        std::fs::create_dir_all(jd.checkpoints().join(format!("{:020}", 6))).unwrap();
        jd.write_manifest(&sample(7)).unwrap();
        jd.prune(2).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(jd.checkpoints())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                format!("{:020}", 4),
                format!("manifest-{:020}.json", 4),
                format!("manifest-{:020}.json", 7),
            ]
        );
    }
}
