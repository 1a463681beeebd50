//! The source reader trait: how connectors feed rows into a job.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;

/// What a poll of a source returned.
#[derive(Debug)]
pub enum SourcePoll {
    /// New rows, in the partition's order.
    Batch(RecordBatch),
    /// Nothing available right now (a rate-limited or live source); poll again later.
    Pending,
    /// A bounded source is finished.
    Exhausted,
}

/// One partition of a source, read in order. A source records its read position so that a
/// checkpoint can rewind it (file offset, generator sequence).
pub trait SourceReader: Send {
    /// Schema of the batches this reader returns.
    fn schema(&self) -> SchemaRef;

    /// Read the next rows.
    fn poll_next(&mut self) -> Result<SourcePoll>;

    /// Malformed rows skipped so far (when the table asks to skip them).
    fn skipped_rows(&self) -> u64 {
        0
    }

    /// Where the next poll reads from (file offset, generator sequence), recorded in each
    /// checkpoint and handed back to [`crate::SourceFactory::create`] on a restart.
    fn position(&self) -> Vec<u8>;
}
