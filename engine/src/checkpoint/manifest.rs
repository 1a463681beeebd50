//! The manifest of a checkpoint: what a restart needs (source positions, where each task's
//! state is, what the sinks pre-committed). Writing it is the checkpoint's commit point, so it
//! is written atomically (temporary file, fsync, rename, fsync of the directory) and carries a
//! checksum: a torn or corrupt manifest is never loaded.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{EngineError, Result};
use crate::message::EventTime;
use crate::source::SplitId;

const FORMAT_VERSION: u64 = 1;
const CHECKSUM_PREFIX: &str = "crc32 ";

/// Identifies one task: stage index and instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    pub stage: usize,
    pub instance: usize,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.stage, self.instance)
    }
}

/// Where a source partition stood at the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCheckpoint {
    pub task: TaskId,
    /// Opaque to the runtime; the connector reads it back.
    pub position: Vec<u8>,
    /// The instance's watermark (the minimum over its splits' running maxima).
    pub watermark: EventTime,
    /// Each split's watermark (running maximum), so lateness is judged as before.
    pub splits: Vec<(SplitId, EventTime)>,
}

/// Output a sink made durable but not visible, to be committed with the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCommit {
    pub task: TaskId,
    /// The sink's position in its task's chain.
    pub operator: usize,
    pub epoch: u64,
    pub payload: Vec<u8>,
}

/// One complete checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub job: String,
    pub epoch: u64,
    /// The job ran to its end: nothing to restore, only commits to finish.
    pub finished: bool,
    /// Name and parallelism of every stage, to check that a restart plans the same job.
    pub stages: Vec<(String, usize)>,
    pub sources: Vec<SourceCheckpoint>,
    /// Tasks with state, and the directory (relative to the checkpoints directory) of each.
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
        let tmp = dir.join(format!(".manifest-{:020}.tmp", manifest.epoch));
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&manifest.encode())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
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
        let dir = self.checkpoints();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(());
        };
        let mut first_error = None;
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_manifest = name.starts_with("manifest-");
            let epoch = name
                .strip_prefix("manifest-")
                .and_then(|n| n.strip_suffix(".json"))
                .unwrap_or(&name)
                .parse::<u64>();
            let Ok(epoch) = epoch else { continue };
            let failed = !is_manifest && !epochs.contains(&epoch) && epoch < newest;
            if epoch >= keep_from && !failed {
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> std::result::Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd hex length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn task_json(t: TaskId) -> Value {
    json!([t.stage, t.instance])
}

impl Manifest {
    /// The manifest as bytes: JSON, then a line with the CRC-32 of the JSON.
    pub fn encode(&self) -> Vec<u8> {
        let body = json!({
            "version": FORMAT_VERSION,
            "job": self.job,
            "epoch": self.epoch,
            "finished": self.finished,
            "stages": self.stages.iter().map(|(n, p)| json!([n, p])).collect::<Vec<_>>(),
            "sources": self.sources.iter().map(|s| json!({
                "task": task_json(s.task),
                "position": hex(&s.position),
                "watermark": s.watermark,
                "splits": s.splits.iter().map(|(id, w)| json!([id, w])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "state": self.state.iter().map(|(t, d)| json!({"task": task_json(*t), "dir": d}))
                .collect::<Vec<_>>(),
            "commits": self.commits.iter().map(|c| json!({
                "task": task_json(c.task),
                "operator": c.operator,
                "epoch": c.epoch,
                "payload": hex(&c.payload),
            })).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&body).unwrap_or_default();
        format!("{text}\n{CHECKSUM_PREFIX}{:08x}\n", crc32(text.as_bytes())).into_bytes()
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
        if crc32(body.as_bytes()) != sum {
            return Err("checksum mismatch (corrupt)".into());
        }
        let v: Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
        if v["version"].as_u64() != Some(FORMAT_VERSION) {
            return Err(format!("unknown format version {}", v["version"]));
        }
        let bad = |what: &str| format!("bad field '{what}'");
        let task = |t: &Value| -> std::result::Result<TaskId, String> {
            Ok(TaskId {
                stage: t[0].as_u64().ok_or_else(|| bad("task"))? as usize,
                instance: t[1].as_u64().ok_or_else(|| bad("task"))? as usize,
            })
        };
        let list = |name: &str| -> std::result::Result<Vec<Value>, String> {
            v[name].as_array().cloned().ok_or_else(|| bad(name))
        };
        Ok(Self {
            job: v["job"].as_str().ok_or_else(|| bad("job"))?.to_string(),
            epoch: v["epoch"].as_u64().ok_or_else(|| bad("epoch"))?,
            finished: v["finished"].as_bool().ok_or_else(|| bad("finished"))?,
            stages: list("stages")?
                .iter()
                .map(|s| {
                    Ok((
                        s[0].as_str().ok_or_else(|| bad("stages"))?.to_string(),
                        s[1].as_u64().ok_or_else(|| bad("stages"))? as usize,
                    ))
                })
                .collect::<std::result::Result<_, String>>()?,
            sources: list("sources")?
                .iter()
                .map(|s| {
                    Ok(SourceCheckpoint {
                        task: task(&s["task"])?,
                        position: unhex(s["position"].as_str().ok_or_else(|| bad("position"))?)?,
                        watermark: s["watermark"].as_i64().ok_or_else(|| bad("watermark"))?,
                        splits: match s["splits"].as_array() {
                            None => Vec::new(),
                            Some(list) => list
                                .iter()
                                .map(|p| {
                                    Ok((
                                        p[0].as_u64().ok_or_else(|| bad("splits"))?,
                                        p[1].as_i64().ok_or_else(|| bad("splits"))?,
                                    ))
                                })
                                .collect::<std::result::Result<_, String>>()?,
                        },
                    })
                })
                .collect::<std::result::Result<_, String>>()?,
            state: list("state")?
                .iter()
                .map(|s| {
                    Ok((
                        task(&s["task"])?,
                        s["dir"].as_str().ok_or_else(|| bad("dir"))?.to_string(),
                    ))
                })
                .collect::<std::result::Result<_, String>>()?,
            commits: list("commits")?
                .iter()
                .map(|c| {
                    Ok(PendingCommit {
                        task: task(&c["task"])?,
                        operator: c["operator"].as_u64().ok_or_else(|| bad("operator"))? as usize,
                        epoch: c["epoch"].as_u64().ok_or_else(|| bad("epoch"))?,
                        payload: unhex(c["payload"].as_str().ok_or_else(|| bad("payload"))?)?,
                    })
                })
                .collect::<std::result::Result<_, String>>()?,
        })
    }
}

/// CRC-32 (IEEE), bitwise: manifests are small.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
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
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
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
