//! The source reader trait: how connectors feed rows into a job.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;

/// Names a split of a source (a Kafka partition): the same split must get the same id in
/// every run and in every instance, since checkpoints keep each split's watermark under it.
pub type SplitId = u64;

/// What a poll of a source returned.
#[derive(Debug)]
pub enum SourcePoll {
    /// New rows of the reader's only split, in its order.
    Batch(RecordBatch),
    /// New rows of one split (a partition) of a reader that reads several; each split keeps
    /// its own watermark (see [`SourceReader::splits`]).
    SplitBatch { split: SplitId, batch: RecordBatch },
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

    /// Of a bounded source that knows its size: bytes read so far and in all (a progress
    /// bar's percent and ETA). `None`: unknown.
    fn progress(&self) -> Option<(u64, u64)> {
        None
    }

    /// Malformed rows skipped so far (when the table asks to skip them).
    fn skipped_rows(&self) -> u64 {
        0
    }

    /// The splits this reader reads now, each with its own watermark; the instance's watermark
    /// is the minimum over them, so a split that has delivered nothing yet holds it back. May
    /// grow while running (a partition added to a topic). Readers of one split keep the
    /// default.
    fn splits(&self) -> Vec<SplitId> {
        vec![0]
    }

    /// Where the next poll reads from (file offset, generator sequence), recorded in each
    /// checkpoint and handed back to [`crate::SourceFactory::create`] on a restart.
    fn position(&self) -> Vec<u8>;
}
