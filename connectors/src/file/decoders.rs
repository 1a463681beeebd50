//! Decoding a file's records into Arrow batches, on the reading thread or on a few helper
//! threads behind it.
//!
//! Splitting a text file into records is cheap (a `memchr` per line); turning them into
//! columns (CSV or JSON parsing, number and timestamp conversion) is most of a file source's
//! work. A directory of several files spreads it over the source's instances, but a single
//! large file would decode on one core while the others wait. So when there are spare cores
//! for its files, a reader hands each batch of records to a pool of decoder threads and takes
//! the batches back in the order it read them: the rows, their order, the watermarks derived
//! from them and the checkpointed position (that of the last batch handed on, never of
//! records read ahead) are the same as decoding in place. This is the decode pool DataFusion
//! gets from splitting a CSV file into byte ranges, without assuming that no quoted field
//! holds a newline.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{EngineError, Result as EngineResult};

use super::records::{FilePosition, Records};
use super::{format, BadRows, FileFormat};

/// Most decoder threads one reader starts.
const MAX_THREADS: usize = 4;

/// What turns one file's records into rows of the table.
#[derive(Debug, Clone)]
pub(super) struct Decoder {
    pub table: String,
    pub file: PathBuf,
    pub format: FileFormat,
    pub schema: SchemaRef,
    pub bad_rows: BadRows,
    /// Columns not decoded (nulls).
    pub unread: Vec<usize>,
}

impl Decoder {
    /// The rows of `recs` and how many malformed records were skipped. With
    /// `bad_rows = 'fail'` a malformed record is an error naming its file and line.
    pub fn decode(&self, recs: &Records) -> (EngineResult<RecordBatch>, u64) {
        if recs.is_empty() {
            return (Ok(RecordBatch::new_empty(self.schema.clone())), 0);
        }
        match self
            .format
            .decode_columns(&self.schema, &recs.data, recs.len(), &self.unread)
        {
            Ok(batch) => (Ok(batch), 0),
            Err(_) => self.decode_slowly(recs),
        }
    }

    /// Decodes records one by one: the bad ones fail the query or are skipped.
    fn decode_slowly(&self, recs: &Records) -> (EngineResult<RecordBatch>, u64) {
        let mut good = Vec::new();
        let mut skipped = 0;
        for i in 0..recs.len() {
            match self
                .format
                .decode_columns(&self.schema, recs.record(i), 1, &self.unread)
            {
                Ok(b) => good.push(b),
                Err(e) => {
                    let (_, _, line) = recs.spans[i];
                    if self.bad_rows == BadRows::Fail {
                        let error = EngineError::BadInput(format!(
                            "table {}: file '{}' line {line}: {} (set bad_rows = 'skip' to skip such rows)",
                            self.table,
                            self.file.display(),
                            format::describe_error(&e, &self.schema)
                        ));
                        return (Err(error), skipped);
                    }
                    skipped += 1;
                }
            }
        }
        (
            concat_batches(&self.schema, &good).map_err(EngineError::from),
            skipped,
        )
    }
}

/// How many decoder threads a reader of one of `files` files starts: the cores left per
/// file, if that is at least two (one would only move the work to another thread).
pub(super) fn threads_for(files: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_file = cores / files.max(1);
    if per_file < 2 {
        0
    } else {
        per_file.min(MAX_THREADS)
    }
}

/// A decoded batch of records, with the records' buffers handed back for the next read.
pub(super) struct Decoded {
    pub batch: EngineResult<RecordBatch>,
    pub skipped: u64,
    pub records: Records,
    /// The reader's position after these records.
    pub position: FilePosition,
}

struct Worker {
    jobs: Option<Sender<Records>>,
    results: Receiver<(EngineResult<RecordBatch>, u64, Records)>,
    thread: Option<JoinHandle<()>>,
}

/// Decoder threads fed in turn, each batch of records going to the next one, and read back in
/// the same turn, so batches come out in the order they went in.
pub(super) struct DecoderPool {
    workers: Vec<Worker>,
    /// Batches in flight, oldest first: the worker decoding each and the position after it.
    in_flight: VecDeque<(usize, FilePosition)>,
    next: usize,
}

impl DecoderPool {
    pub fn start(decoder: &Decoder, threads: usize) -> EngineResult<Self> {
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let (job_tx, job_rx) = mpsc::channel::<Records>();
            let (result_tx, result_rx) = mpsc::channel();
            let decoder = decoder.clone();
            let thread = std::thread::Builder::new()
                .name(format!("weir-decode-{i}"))
                .spawn(move || {
                    while let Ok(recs) = job_rx.recv() {
                        let decoded =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                decoder.decode(&recs)
                            }))
                            .unwrap_or_else(|_| {
                                let error = EngineError::Internal(format!(
                                    "table {}: decoding records of '{}' panicked",
                                    decoder.table,
                                    decoder.file.display()
                                ));
                                (Err(error), 0)
                            });
                        if result_tx.send((decoded.0, decoded.1, recs)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| EngineError::io("cannot start a decoder thread", e))?;
            workers.push(Worker {
                jobs: Some(job_tx),
                results: result_rx,
                thread: Some(thread),
            });
        }
        Ok(Self {
            workers,
            in_flight: VecDeque::new(),
            next: 0,
        })
    }

    /// Whether another batch should be read ahead: two per thread keep each one busy while the
    /// reader takes the previous result.
    pub fn wants_more(&self) -> bool {
        self.in_flight.len() < 2 * self.workers.len()
    }

    /// Hands `recs` (ending at `position`) to the next thread.
    pub fn send(&mut self, recs: Records, position: FilePosition) -> EngineResult<()> {
        let i = self.next;
        self.next = (i + 1) % self.workers.len();
        let sent = self.workers[i]
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(recs).is_ok());
        if !sent {
            return Err(stopped());
        }
        self.in_flight.push_back((i, position));
        Ok(())
    }

    /// The oldest batch in flight, waiting for it; `None` when none is.
    pub fn receive(&mut self) -> EngineResult<Option<Decoded>> {
        let Some((i, position)) = self.in_flight.pop_front() else {
            return Ok(None);
        };
        let (batch, skipped, records) = self.workers[i].results.recv().map_err(|_| stopped())?;
        Ok(Some(Decoded {
            batch,
            skipped,
            records,
            position,
        }))
    }
}

fn stopped() -> EngineError {
    EngineError::Internal("a file decoder thread stopped".into())
}

impl Drop for DecoderPool {
    fn drop(&mut self) {
        // Closing the job channels ends the threads once their current batch is done.
        for w in &mut self.workers {
            w.jobs = None;
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}
