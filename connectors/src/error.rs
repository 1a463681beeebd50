//! Connector errors: mostly the user's (bad options, unreadable files), kept apart from the
//! engine's runtime errors.

use weir_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error("unknown connector '{name}' (known: {known})")]
    UnknownConnector { name: String, known: String },
    #[error(
        "unknown option '{option}' for connector '{connector}'{suggestion} (allowed: {allowed})"
    )]
    UnknownOption {
        connector: String,
        option: String,
        /// `" (did you mean 'x'?)"` or empty.
        suggestion: String,
        allowed: String,
    },
    #[error("missing option '{0}'")]
    MissingOption(String),
    #[error("invalid value '{value}' for option '{option}': {reason}")]
    InvalidOption {
        option: String,
        value: String,
        reason: String,
    },
    #[error("{0}")]
    Schema(String),
    /// The query's result is updating (DESIGN.md §8) and the sink, as configured, can only
    /// append.
    #[error("sink {sink}: the query's result is updating (its rows change as input arrives: {why}), {fix}")]
    AppendOnly {
        sink: String,
        why: String,
        fix: String,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;
