//! The one message type that flows along every edge of a dataflow (DESIGN.md §4).

use datafusion::arrow::record_batch::RecordBatch;

/// Event time and watermarks are nanoseconds since 1970-01-01 00:00:00 UTC.
pub type EventTime = i64;

/// The watermark before any event has been seen.
pub const WATERMARK_MIN: EventTime = i64::MIN;
/// The watermark of a finished bounded stream: every window fires.
pub const WATERMARK_MAX: EventTime = i64::MAX;

/// What a checkpoint barrier asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// Snapshot state for this epoch and go on.
    Checkpoint,
    /// Snapshot state for this epoch, then stop the job.
    Stop,
}

/// A checkpoint barrier: everything before it belongs to `epoch`, everything after to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
    pub kind: BarrierKind,
}

/// A message on a dataflow edge.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows.
    Batch(RecordBatch),
    /// No row with event time below this will follow on this edge.
    Watermark(EventTime),
    /// A checkpoint barrier.
    Barrier(Barrier),
    /// `Idle(true)`: nothing will come on this edge for a while (its source's partitions are
    /// silent past `idle_timeout`), so the receiver stops waiting for its watermark;
    /// `Idle(false)`: it is active again and its watermark counts from the next message on.
    Idle(bool),
    /// The stream on this edge is finished.
    End,
}
