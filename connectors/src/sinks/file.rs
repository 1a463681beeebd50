//! The file sink (DESIGN.md §6): `CREATE SINK s WITH (connector = 'file', path = 'DIR',
//! format = 'csv' | 'json' | 'debezium-json') AS SELECT ...`. An updating query (DESIGN.md §8)
//! needs its changes shown: `changelog = 'op'` starts every row with its change kind (`op`:
//! `+I`, `-U`, `+U`, `-D`); `format = 'debezium-json'` writes one event per change
//! (`{"before", "after", "op": "c" | "u" | "d"}`, an update's two rows in one event). Without
//! either the sink only appends and refuses an updating query.
//!
//! Exactly-once: rows of epoch n go to a staged part file `DIR/.part-<job>-<instance>-<n>.<ext>`.
//! At barrier n it is synced and closed (pre-commit) and its name goes into the checkpoint's
//! manifest; once the manifest is written the committer renames it to
//! `part-<job>-<instance>-<n>.<ext>` (and syncs the directory). A reader that ignores names
//! starting with `.` sees only committed files, each row once. On restart the committer
//! renames what the restored checkpoint pre-committed (a rename already done is skipped) and
//! deletes every other staged file of the job. `<job>` is the sink's name and the run id of its
//! creation, so a sink created again under the same name and path (after DROP SINK, or from
//! another data directory) writes parts of its own and never renames over, or deletes, the
//! earlier one's.
//!
//! At-least-once: rows are written straight to visible part files (one per epoch and run),
//! each batch with one write, so a crash never leaves half a row; a replay may repeat rows.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::changelog;
use weir_engine::checkpoint::Committer;
use weir_engine::{
    EngineError, Operator, OperatorFactory, Output, Result as EngineResult, TaskInfo,
};

use crate::display::{csv_lines, json_lines};
use crate::error::{ConnectorError, Result};
use crate::options::Options;

/// How rows are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFormat {
    Csv {
        header: bool,
        delimiter: u8,
    },
    Json,
    /// One Debezium-style change event per line (`{"before", "after", "op"}`).
    DebeziumJson,
}

impl SinkFormat {
    fn extension(&self) -> &'static str {
        match self {
            SinkFormat::Csv { .. } => "csv",
            SinkFormat::Json | SinkFormat::DebeziumJson => "json",
        }
    }
}

/// Plan node of a file sink.
#[derive(Debug, Clone)]
pub struct FileSinkFactory {
    pub sink: String,
    /// The job's name: part files carry it, so jobs sharing a directory never touch each
    /// other's files.
    pub job: String,
    pub dir: PathBuf,
    pub format: SinkFormat,
    pub schema: SchemaRef,
    pub exactly_once: bool,
    /// Rows start with their change kind (`changelog = 'op'`).
    pub op_column: bool,
}

pub(crate) const OPTIONS: &[&str] = &[
    "connector",
    "path",
    "format",
    "header",
    "delimiter",
    "changelog",
];

impl FileSinkFactory {
    /// Validates the WITH options of a file sink and creates its directory.
    pub fn from_options(
        sink: &str,
        job: &str,
        schema: SchemaRef,
        options: &mut Options,
        exactly_once: bool,
        updating: Option<&str>,
    ) -> Result<Self> {
        let dir = PathBuf::from(options.take_required("path")?);
        let op_column = match options.take("changelog") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("op") => true,
            Some(v) => {
                return Err(ConnectorError::InvalidOption {
                    option: "changelog".into(),
                    value: v,
                    reason: "expected 'op' (an op column of +I, -U, +U, -D first in every row)"
                        .into(),
                })
            }
        };
        let format = options.take("format").unwrap_or_else(|| "csv".into());
        let header = options.take_bool("header")?.unwrap_or(false);
        let delimiter = options.take_delimiter()?.unwrap_or(b',');
        let format =
            match format.to_ascii_lowercase().as_str() {
                "csv" => SinkFormat::Csv { header, delimiter },
                "json" => SinkFormat::Json,
                "debezium-json" if op_column => return Err(ConnectorError::InvalidOption {
                    option: "changelog".into(),
                    value: "op".into(),
                    reason:
                        "format 'debezium-json' carries each change's kind in its events already"
                            .into(),
                }),
                "debezium-json" => SinkFormat::DebeziumJson,
                other => {
                    return Err(ConnectorError::InvalidOption {
                        option: "format".into(),
                        value: other.into(),
                        reason: "expected csv, json or debezium-json".into(),
                    })
                }
            };
        let changes_shown = op_column || format == SinkFormat::DebeziumJson;
        if let (Some(why), false) = (updating, changes_shown) {
            return Err(ConnectorError::AppendOnly {
                sink: sink.to_string(),
                why: why.to_string(),
                fix: "so a file sink needs changelog = 'op' (every row starts with +I, -U, +U or -D) or format = 'debezium-json'"
                    .into(),
            });
        }
        options.finish("file", OPTIONS)?;
        std::fs::create_dir_all(&dir).map_err(|e| {
            EngineError::io(
                format!("sink {sink}: cannot create directory '{}'", dir.display()),
                e,
            )
        })?;
        Ok(Self {
            sink: sink.to_string(),
            job: job.to_string(),
            dir,
            format,
            schema,
            exactly_once,
            op_column,
        })
    }

    fn part_name(&self, instance: usize, epoch: u64) -> String {
        format!(
            "part-{}-{instance}-{epoch:020}.{}",
            self.job,
            self.format.extension()
        )
    }
}

impl OperatorFactory for FileSinkFactory {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!(
            "FileSink: {} ({}, {}) as {}",
            self.dir.display(),
            self.format.extension(),
            if self.exactly_once {
                "exactly once"
            } else {
                "at least once"
            },
            self.sink
        )
    }

    fn create(&self, task: &TaskInfo) -> EngineResult<Box<dyn Operator>> {
        Ok(Box::new(FileSinkOperator {
            spec: self.clone(),
            info: task.clone(),
            epoch: task.restored_epoch + 1,
            file: None,
            run: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        }))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        Some(Arc::new(FileCommitter {
            dir: self.dir.clone(),
            staged_prefix: format!(".part-{}-", self.job),
        }))
    }
}

/// The part file being written.
struct OpenPart {
    file: File,
    /// Its name in the directory (staged names start with `.`).
    name: String,
}

struct FileSinkOperator {
    spec: FileSinkFactory,
    info: TaskInfo,
    /// The epoch the rows now arriving belong to.
    epoch: u64,
    file: Option<OpenPart>,
    /// Tells apart the at-least-once files of different runs.
    run: u128,
}

fn io_error(sink: &str, what: &str, path: &Path, e: std::io::Error) -> EngineError {
    EngineError::io(
        format!("sink {sink}: cannot {what} '{}'", path.display()),
        e,
    )
}

impl FileSinkOperator {
    fn encode(&self, batch: &RecordBatch, header: bool) -> EngineResult<Vec<u8>> {
        if self.spec.format == SinkFormat::DebeziumJson {
            let (_, events) = super::change_events(batch)?;
            let mut out = Vec::new();
            for e in events {
                out.extend_from_slice(&e.json);
                out.push(b'\n');
            }
            return Ok(out);
        }
        let text;
        let batch = if self.spec.op_column {
            text = if changelog::has_op_field(batch.schema_ref()) {
                changelog::to_text(batch)?
            } else {
                changelog::to_text(&changelog::as_inserts(batch)?)?
            };
            &text
        } else {
            batch
        };
        Ok(match &self.spec.format {
            SinkFormat::Csv {
                header: with_header,
                delimiter,
            } => csv_lines(batch, header && *with_header, *delimiter)?,
            SinkFormat::Json => json_lines(batch)?,
            SinkFormat::DebeziumJson => {
                return Err(EngineError::Internal(
                    "debezium-json is encoded above".into(),
                ))
            }
        })
    }

    fn open(&mut self) -> EngineResult<&mut OpenPart> {
        if self.file.is_none() {
            let final_name = self.spec.part_name(self.info.instance, self.epoch);
            let name = if self.spec.exactly_once {
                format!(".{final_name}")
            } else {
                let (stem, ext) = final_name.rsplit_once('.').unwrap_or((&final_name, ""));
                format!("{stem}-{}.{ext}", self.run)
            };
            let path = self.spec.dir.join(&name);
            let file =
                File::create(&path).map_err(|e| io_error(&self.spec.sink, "create", &path, e))?;
            self.file = Some(OpenPart { file, name });
        }
        self.file
            .as_mut()
            .ok_or_else(|| EngineError::Internal("part file vanished".into()))
    }

    /// Syncs and closes the part file; returns its name.
    fn close(&mut self) -> EngineResult<Option<String>> {
        let Some(part) = self.file.take() else {
            return Ok(None);
        };
        let path = self.spec.dir.join(&part.name);
        part.file
            .sync_all()
            .map_err(|e| io_error(&self.spec.sink, "sync", &path, e))?;
        Ok(Some(part.name))
    }
}

impl Operator for FileSinkOperator {
    fn name(&self) -> &str {
        "FileSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> EngineResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let first = self.file.is_none();
        let bytes = self.encode(&batch, first)?;
        let sink = self.spec.sink.clone();
        let dir = self.spec.dir.clone();
        let part = self.open()?;
        // One write per batch: a crash never leaves part of a row behind.
        part.file
            .write_all(&bytes)
            .map_err(|e| io_error(&sink, "write", &dir.join(&part.name), e))?;
        self.info.metrics.add_rows_out(batch.num_rows() as u64);
        Ok(())
    }

    fn snapshot(&mut self, epoch: u64) -> EngineResult<Option<Vec<u8>>> {
        let closed = self.close()?;
        self.epoch = epoch + 1;
        if !self.spec.exactly_once {
            return Ok(None);
        }
        Ok(closed.map(|name| name.into_bytes()))
    }
}

/// Renames staged part files into place.
struct FileCommitter {
    dir: PathBuf,
    /// Staged files of this job start with this.
    staged_prefix: String,
}

impl FileCommitter {
    fn sync_dir(&self) -> EngineResult<()> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| EngineError::io(format!("cannot sync '{}'", self.dir.display()), e))
    }
}

impl Committer for FileCommitter {
    fn commit(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        for p in payloads {
            let staged = String::from_utf8_lossy(p).into_owned();
            let Some(visible) = staged.strip_prefix('.') else {
                return Err(EngineError::State(format!(
                    "'{staged}' is not a staged part file"
                )));
            };
            let from = self.dir.join(&staged);
            let to = self.dir.join(visible);
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                // Committed before (a crash came between rename and manifest cleanup).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && to.exists() => {}
                Err(e) => {
                    return Err(EngineError::io(
                        format!("cannot commit part file '{}'", from.display()),
                        e,
                    ))
                }
            }
        }
        self.sync_dir()
    }

    fn recover(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.commit(payloads)?;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(EngineError::io(
                    format!("cannot list '{}'", self.dir.display()),
                    e,
                ))
            }
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&self.staged_prefix) {
                std::fs::remove_file(entry.path())
                    .map_err(|e| EngineError::io(format!("cannot abort part file '{name}'"), e))?;
            }
        }
        self.sync_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_is_idempotent_and_recover_aborts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let c = FileCommitter {
            dir: dir.path().to_path_buf(),
            staged_prefix: ".part-j-".into(),
        };
        for n in ["a", "b", "c"] {
            std::fs::write(dir.path().join(format!(".part-j-{n}.csv")), n).unwrap();
        }
        std::fs::write(dir.path().join(".part-other-x.csv"), "x").unwrap();
        let a = b".part-j-a.csv".to_vec();
        c.commit(std::slice::from_ref(&a)).unwrap();
        c.commit(std::slice::from_ref(&a)).unwrap();
        c.recover(&[a, b".part-j-b.csv".to_vec()]).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![".part-other-x.csv", "part-j-a.csv", "part-j-b.csv"]
        );
        // A payload whose file is gone and never arrived is an error, not silent loss.
        assert!(c.commit(&[b".part-j-zzz.csv".to_vec()]).is_err());
    }
}
