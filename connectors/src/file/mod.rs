//! The file source: `connector = 'file'`, `format = 'csv' | 'json'`.
//!
//! `path` names a file, or a directory whose files (not starting with `.`, in name order) are
//! the source's partitions: each is read by its own instance, with its own watermark, and the
//! source's watermark is the minimum over them (taken by the runtime downstream).
//!
//! Options: `path` (required), `format` (`csv` default, or `json` for JSON lines), `header`
//! (csv, default false), `delimiter` (csv, one character, default `,`), `bad_rows` (`fail`
//! default, or `skip`), `batch_size` (rows per batch, default 8192).
//!
//! A malformed row fails the query with file, line and reason, unless `bad_rows = 'skip'`, in
//! which case it is skipped and counted. The reader can resume from a recorded byte offset.
//!
//! Columns no query of the job reads are not decoded (the planner tells the source, see
//! [`SourceFactory::without_columns`]): they come out as nulls and their values are not
//! parsed, so a value there that does not fit its column's type is not a malformed row (a
//! CSV record still needs all its fields). EXPLAIN names the columns left out.

mod decoders;
pub mod format;
pub mod records;

use std::path::PathBuf;

use datafusion::arrow::datatypes::SchemaRef;
use weir_engine::{
    EngineError, Result as EngineResult, SourceFactory, SourcePoll, SourceReader, TaskInfo,
};

use crate::error::{ConnectorError, Result};
use crate::options::Options;
use crate::rate::RateLimit;
use decoders::{Decoder, DecoderPool};
pub use format::FileFormat;
pub use records::{FilePosition, RecordReader};

/// A directory with more files than this is most likely a mistake (one thread per file).
pub const MAX_PARTITIONS: usize = 256;

pub(crate) const OPTIONS: &[&str] = &[
    "connector",
    "path",
    "format",
    "header",
    "delimiter",
    "bad_rows",
    "batch_size",
    "rate",
];

/// What to do with a row that cannot be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRows {
    Fail,
    Skip,
}

/// Plan node of a file source.
#[derive(Debug, Clone)]
pub struct FileSourceFactory {
    pub table: String,
    pub path: PathBuf,
    pub format: FileFormat,
    pub schema: SchemaRef,
    pub bad_rows: BadRows,
    pub batch_size: usize,
    /// Replay speed: at most this many rows per second per partition (`None`: as fast as
    /// possible).
    pub rate: Option<u64>,
    /// Columns left out (nulls), because no query reads them.
    pub unread: Vec<usize>,
}

impl FileSourceFactory {
    pub fn from_options(table: &str, schema: SchemaRef, options: &mut Options) -> Result<Self> {
        let path = PathBuf::from(options.take_required("path")?);
        let format = options.take("format").unwrap_or_else(|| "csv".into());
        let header = options.take_bool("header")?;
        let delimiter = options.take_delimiter()?;
        let format = match format.to_ascii_lowercase().as_str() {
            "csv" => FileFormat::Csv {
                header: header.unwrap_or(false),
                delimiter: delimiter.unwrap_or(b','),
            },
            "json" | "jsonl" | "ndjson" => {
                if header.is_some() || delimiter.is_some() {
                    return Err(ConnectorError::InvalidOption {
                        option: if header.is_some() {
                            "header"
                        } else {
                            "delimiter"
                        }
                        .into(),
                        value: "...".into(),
                        reason: "only for format 'csv'".into(),
                    });
                }
                FileFormat::Json
            }
            other => {
                return Err(ConnectorError::InvalidOption {
                    option: "format".into(),
                    value: other.into(),
                    reason: "expected 'csv' or 'json'".into(),
                })
            }
        };
        let bad_rows = match options.take("bad_rows").as_deref() {
            None | Some("fail") => BadRows::Fail,
            Some("skip") => BadRows::Skip,
            Some(other) => {
                return Err(ConnectorError::InvalidOption {
                    option: "bad_rows".into(),
                    value: other.into(),
                    reason: "expected 'fail' or 'skip'".into(),
                })
            }
        };
        let batch_size = options
            .take_parsed::<usize>("batch_size", "a positive number")?
            .unwrap_or(8192);
        if batch_size == 0 {
            return Err(ConnectorError::InvalidOption {
                option: "batch_size".into(),
                value: "0".into(),
                reason: "expected a positive number".into(),
            });
        }
        let rate = options.take_parsed::<u64>("rate", "rows per second, a positive number")?;
        if rate == Some(0) {
            return Err(ConnectorError::InvalidOption {
                option: "rate".into(),
                value: "0".into(),
                reason: "expected rows per second, a positive number".into(),
            });
        }
        options.finish("file", OPTIONS)?;
        Ok(Self {
            table: table.to_string(),
            path,
            format,
            schema,
            bad_rows,
            batch_size,
            rate,
            unread: Vec::new(),
        })
    }

    /// The files to read: `path` itself, or the files of the directory `path`, in name order.
    pub fn files(&self) -> EngineResult<Vec<PathBuf>> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| EngineError::io(format!("cannot open '{}'", self.path.display()), e))?;
        if !meta.is_dir() {
            return Ok(vec![self.path.clone()]);
        }
        let entries = std::fs::read_dir(&self.path)
            .map_err(|e| EngineError::io(format!("cannot list '{}'", self.path.display()), e))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| {
                EngineError::io(format!("cannot list '{}'", self.path.display()), e)
            })?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && entry.path().is_file() {
                files.push(entry.path());
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(EngineError::BadInput(format!(
                "table {}: directory '{}' has no files",
                self.table,
                self.path.display()
            )));
        }
        if files.len() > MAX_PARTITIONS {
            return Err(EngineError::BadInput(format!(
                "table {}: directory '{}' has {} files; at most {MAX_PARTITIONS} are read as partitions",
                self.table,
                self.path.display(),
                files.len()
            )));
        }
        Ok(files)
    }

    /// A reader of partition `file` starting at `position`, decoding on `threads` helper
    /// threads (0: on its own).
    pub fn reader_at(
        &self,
        file: &std::path::Path,
        position: FilePosition,
        threads: usize,
    ) -> EngineResult<FileReader> {
        let quote_aware = matches!(self.format, FileFormat::Csv { .. });
        let records = RecordReader::open(file, position, quote_aware)?;
        let size = std::fs::metadata(file).map(|m| m.len()).ok();
        let decoder = Decoder {
            table: self.table.clone(),
            file: file.to_path_buf(),
            format: self.format.clone(),
            schema: self.schema.clone(),
            bad_rows: self.bad_rows,
            unread: self.unread.clone(),
        };
        // A replay at a set rate is not bound by decoding.
        let pool = if threads > 0 && self.rate.is_none() {
            Some(DecoderPool::start(&decoder, threads)?)
        } else {
            None
        };
        Ok(FileReader {
            file: file.to_path_buf(),
            size,
            spec: self.clone(),
            skip_header: position.offset == 0
                && matches!(self.format, FileFormat::Csv { header: true, .. }),
            records,
            decoder,
            pool,
            read_all: false,
            delivered: position,
            spare: Vec::new(),
            skipped: 0,
            rate: RateLimit::new(self.rate),
        })
    }
}

impl SourceFactory for FileSourceFactory {
    fn describe(&self) -> String {
        format!(
            "FileSource: {} ({}) as {}{}",
            self.path.display(),
            self.format.name(),
            self.table,
            crate::projection::describe_unread(&self.schema, &self.unread)
        )
    }

    fn without_columns(&self, unread: &[usize]) -> Option<std::sync::Arc<dyn SourceFactory>> {
        Some(std::sync::Arc::new(Self {
            unread: crate::projection::nullable_unread(&self.schema, unread),
            ..self.clone()
        }))
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn partitions(&self) -> EngineResult<usize> {
        Ok(self.files()?.len())
    }

    fn create(
        &self,
        task: &TaskInfo,
        position: Option<&[u8]>,
    ) -> EngineResult<Box<dyn SourceReader>> {
        let files = self.files()?;
        let file = files.get(task.instance).ok_or_else(|| {
            EngineError::Internal(format!(
                "file source instance {} of {} files",
                task.instance,
                files.len()
            ))
        })?;
        let start = match position {
            None => FilePosition::START,
            Some(bytes) => {
                let (name, at) = decode_position(bytes).ok_or_else(|| {
                    EngineError::State(format!(
                        "table {}: unreadable checkpointed position of '{}'",
                        self.table,
                        file.display()
                    ))
                })?;
                if name != file_name(file) {
                    return Err(EngineError::BadInput(format!(
                        "table {}: partition {} was file '{name}' at the checkpoint, now it is \
                         '{}'; the files of '{}' changed, so the job cannot resume",
                        self.table,
                        task.instance,
                        file.display(),
                        self.path.display()
                    )));
                }
                at
            }
        };
        let threads = decoders::threads_for(files.len());
        Ok(Box::new(self.reader_at(file, start, threads)?))
    }
}

/// Reads one file in order.
pub struct FileReader {
    file: PathBuf,
    /// The file's length when opened.
    size: Option<u64>,
    spec: FileSourceFactory,
    skip_header: bool,
    records: RecordReader,
    decoder: Decoder,
    /// Decoder threads, when the reader has cores to spare (see `decoders`).
    pool: Option<DecoderPool>,
    /// Every record has been read (some may still be decoding).
    read_all: bool,
    /// The position after the last batch handed on: what a checkpoint records.
    delivered: FilePosition,
    /// Record buffers kept from batch to batch.
    spare: Vec<records::Records>,
    skipped: u64,
    rate: RateLimit,
}

impl FileReader {
    /// Reads the next records (at most `want` rows) into a kept buffer, the header line
    /// taken out; `None` at the end of the file.
    fn read(&mut self, want: usize) -> EngineResult<Option<records::Records>> {
        // The header line is not a row: read one record more for the first batch.
        let header = usize::from(self.skip_header);
        let mut recs = self.spare.pop().unwrap_or_default();
        if !self.records.next_records(want + header, &mut recs)? {
            self.read_all = true;
            self.spare.push(recs);
            return Ok(None);
        }
        self.rate.took(recs.len());
        if self.skip_header && !recs.is_empty() {
            self.skip_header = false;
            let (_, end, _) = recs.spans.remove(0);
            recs.data.drain(..end);
            for span in recs.spans.iter_mut() {
                span.0 -= end;
                span.1 -= end;
            }
        }
        Ok(Some(recs))
    }

    /// Decodes on this thread (and keeps to the `rate`).
    fn poll_in_place(&mut self) -> EngineResult<SourcePoll> {
        loop {
            let want = self.rate.allowance(self.spec.batch_size);
            if want == 0 {
                return Ok(SourcePoll::Pending);
            }
            let Some(recs) = self.read(want)? else {
                return Ok(SourcePoll::Exhausted);
            };
            let (batch, skipped) = self.decoder.decode(&recs);
            self.spare.push(recs);
            self.skipped += skipped;
            self.delivered = self.records.position();
            let batch = batch?;
            if batch.num_rows() > 0 {
                return Ok(SourcePoll::Batch(batch));
            }
        }
    }

    /// Decodes on the pool's threads, reading ahead while they have room.
    fn poll_pooled(&mut self) -> EngineResult<SourcePoll> {
        loop {
            while !self.read_all && self.pool.as_ref().is_some_and(|p| p.wants_more()) {
                let Some(recs) = self.read(self.spec.batch_size)? else {
                    break;
                };
                let position = self.records.position();
                if let Some(pool) = self.pool.as_mut() {
                    pool.send(recs, position)?;
                }
            }
            let Some(decoded) = self
                .pool
                .as_mut()
                .map(|p| p.receive())
                .transpose()?
                .flatten()
            else {
                return Ok(SourcePoll::Exhausted);
            };
            self.spare.push(decoded.records);
            self.skipped += decoded.skipped;
            self.delivered = decoded.position;
            let batch = decoded.batch?;
            if batch.num_rows() > 0 {
                return Ok(SourcePoll::Batch(batch));
            }
        }
    }
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A checkpointed position: offset and line (big-endian), then the file's name.
fn encode_position(file: &std::path::Path, at: FilePosition) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&at.offset.to_be_bytes());
    out.extend_from_slice(&at.line.to_be_bytes());
    out.extend_from_slice(file_name(file).as_bytes());
    out
}

fn decode_position(bytes: &[u8]) -> Option<(String, FilePosition)> {
    let offset = u64::from_be_bytes(bytes.get(0..8)?.try_into().ok()?);
    let line = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    let name = String::from_utf8(bytes.get(16..)?.to_vec()).ok()?;
    Some((name, FilePosition { offset, line }))
}

impl SourceReader for FileReader {
    fn schema(&self) -> SchemaRef {
        self.spec.schema.clone()
    }

    fn position(&self) -> Vec<u8> {
        encode_position(&self.file, self.delivered)
    }

    fn poll_next(&mut self) -> EngineResult<SourcePoll> {
        if self.pool.is_some() {
            self.poll_pooled()
        } else {
            self.poll_in_place()
        }
    }

    fn skipped_rows(&self) -> u64 {
        self.skipped
    }

    fn progress(&self) -> Option<(u64, u64)> {
        let size = self.size?;
        Some((self.delivered.offset.min(size), size))
    }
}

#[cfg(test)]
mod tests;
