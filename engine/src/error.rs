//! The engine's error type. User errors (bad input data) are kept apart from internal bugs so
//! front ends can report them differently.

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// Errors raised while building or running a dataflow job.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The input data is wrong: a malformed row, an unparsable value. The message names the
    /// source, file and line where known.
    #[error("bad input: {0}")]
    BadInput(String),
    /// An I/O failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The state store failed (RocksDB), with what was being done and where.
    #[error("state store: {0}")]
    State(String),
    /// An error from DataFusion while evaluating expressions or aggregates.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// An error from Arrow kernels.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// An external system (a sink's server) failed or refused; the message names the sink
    /// and why.
    #[error("{0}")]
    External(String),
    /// The job was cancelled before it finished.
    #[error("job cancelled")]
    Cancelled,
    /// A bug in weir: an invariant did not hold.
    #[error("internal error: {0}")]
    Internal(String),
    /// One of the above, with where it happened (the stage and instance of the task, the
    /// operator). [`EngineError::root`] is the error itself.
    /// (Not a `#[source]`: the message already holds the inner one, and error reporters
    /// that print the chain would repeat it.)
    #[error("{location}: {error}")]
    At {
        location: String,
        error: Box<EngineError>,
    },
}

impl EngineError {
    /// This error, said to have happened at `location` (a cancellation stays as it is: it
    /// is no failure of that place).
    pub fn at(self, location: impl Into<String>) -> Self {
        match self {
            EngineError::Cancelled => self,
            e => EngineError::At {
                location: location.into(),
                error: Box::new(e),
            },
        }
    }

    /// The error without the locations around it: what kind of failure it is.
    pub fn root(&self) -> &EngineError {
        match self {
            EngineError::At { error, .. } => error.root(),
            e => e,
        }
    }

    /// An I/O error with a sentence saying what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EngineError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias for the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
