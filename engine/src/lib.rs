//! weir's dataflow runtime.
//!
//! A job is a graph of [`Stage`]s. Each stage runs as `parallelism` instances, one OS thread per
//! instance, connected by bounded channels that carry [`Message`]s: Arrow record batches,
//! watermarks, checkpoint barriers and the end-of-stream marker. Inside a task, operators are
//! chained (the output of one is fed synchronously into the next), so only stage boundaries pay
//! for a channel hop.
//!
//! What lives here and not in operators: the minimum-watermark-over-inputs rule, barrier
//! alignment, routing rows through keyed exchanges, event-time assignment at the sources, and
//! job-wide metrics. Operators implement the small [`Operator`] trait.

pub mod atomic_file;
pub mod changelog;
pub mod checkpoint;
pub mod error;
pub mod event_time;
mod fault;
pub mod graph;
pub mod late_rows;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod panes;
pub mod runtime;
pub mod source;
pub mod state;
pub mod window;

pub use changelog::Op;
pub use error::{EngineError, Result};
pub use event_time::{EventTimeAssigner, EventTimeSpec, ProcTime};
pub use graph::{
    JobGraph, OperatorFactory, Partitioning, SourceFactory, SourceStage, Stage, StageInput,
    TaskInfo,
};
pub use message::{Barrier, BarrierKind, Message, WATERMARK_MAX, WATERMARK_MIN};
pub use metrics::{JobMetrics, MetricsSnapshot, StageSnapshot, TaskMetrics};
pub use operator::{Operator, Output};
pub use runtime::{partition_of_rows, spawn_job, JobConfig, JobHandle};
pub use source::{SourcePoll, SourceReader, SplitId};
pub use window::{WindowSpec, WINDOW_TIME_BEFORE_END};
