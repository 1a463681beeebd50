//! Planner errors. Each names what is wrong and, for syntax errors, where.

use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use weir_connectors::ConnectorError;
use weir_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The SQL does not parse.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        line: u64,
        column: u64,
        message: String,
    },
    /// Valid SQL that weir does not run yet.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A relation the catalog does not hold; `suggestion`: a known name close to it.
    #[error("table '{name}' does not exist{}", suggestion.as_deref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownTable {
        name: String,
        suggestion: Option<String>,
    },
    #[error("table '{0}' already exists")]
    TableExists(String),
    /// The statement reaches for something this session may not touch (a file outside the
    /// file root).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Another mistake in the statement, explained.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    #[error("{}", datafusion_message(.0))]
    DataFusion(DataFusionError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The statement is too large or deep to plan safely.
    #[error("statement too complex: {0}")]
    TooComplex(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// DataFusion's message for the innermost error, without its category prefix ("Error during
/// planning: ") and the context wrappers that repeat it.
fn datafusion_message(e: &DataFusionError) -> String {
    let root = e.find_root();
    let text = match root {
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m) => m.clone(),
        DataFusionError::SchemaError(inner, _) => match inner.as_ref() {
            // "No field named x. Valid fields are ...": name the likeliest one first.
            SchemaError::FieldNotFound {
                field,
                valid_fields,
            } => {
                let names: Vec<&str> = valid_fields.iter().map(|c| c.name.as_str()).collect();
                match weir_connectors::suggest::closest(&field.name, names.iter().copied()) {
                    Some(near) => format!("{inner} (did you mean '{near}'?)"),
                    None => inner.to_string(),
                }
            }
            _ => inner.to_string(),
        },
        other => other.strip_backtrace(),
    };
    text.trim().to_string()
}

impl From<DataFusionError> for PlanError {
    /// An error weir raised inside DataFusion's planner (a missing table from the context
    /// provider, a bad window function call from the relation planner) comes back with its
    /// kind.
    fn from(e: DataFusionError) -> Self {
        if let DataFusionError::External(inner) = e.find_root() {
            if let Some(own) = inner
                .downcast_ref::<PlanError>()
                .and_then(PlanError::cloned)
            {
                return own;
            }
        }
        PlanError::DataFusion(e)
    }
}

impl PlanError {
    /// A copy of the errors that are only a message.
    fn cloned(&self) -> Option<PlanError> {
        Some(match self {
            PlanError::NotSupported(m) => PlanError::NotSupported(m.clone()),
            PlanError::UnknownTable { name, suggestion } => PlanError::UnknownTable {
                name: name.clone(),
                suggestion: suggestion.clone(),
            },
            PlanError::TableExists(m) => PlanError::TableExists(m.clone()),
            PlanError::PermissionDenied(m) => PlanError::PermissionDenied(m.clone()),
            PlanError::Invalid(m) => PlanError::Invalid(m.clone()),
            PlanError::Internal(m) => PlanError::Internal(m.clone()),
            PlanError::TooComplex(m) => PlanError::TooComplex(m.clone()),
            _ => return None,
        })
    }

    /// A relation that does not exist (the session adds a suggestion).
    pub fn unknown_table(name: impl Into<String>) -> Self {
        PlanError::UnknownTable {
            name: name.into(),
            suggestion: None,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        PlanError::Io {
            context: context.into(),
            source,
        }
    }

    /// The PostgreSQL SQLSTATE code that best describes this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            PlanError::Syntax { .. } => "42601",
            PlanError::NotSupported(_) => "0A000",
            PlanError::UnknownTable { .. } => "42P01",
            PlanError::TableExists(_) => "42P07",
            PlanError::PermissionDenied(_) => "42501",
            PlanError::DataFusion(e)
                if matches!(e.find_root(), DataFusionError::SchemaError(..)) =>
            {
                "42703"
            }
            PlanError::DataFusion(_) | PlanError::Invalid(_) => "42000",
            PlanError::Connector(_) => "22023",
            PlanError::Engine(e) => match e.root() {
                EngineError::DataFusion(e) => execution_sqlstate(e),
                EngineError::BadInput(_) => "22P02",
                EngineError::Cancelled => "57014",
                EngineError::External(_) => "58000",
                EngineError::Io { .. } => "58030",
                _ => "XX000",
            },
            PlanError::Io { .. } => "58030",
            PlanError::TooComplex(_) => "54001",
            PlanError::Internal(_) => "XX000",
        }
    }
}

/// The SQLSTATE of an error DataFusion met while computing a result.
fn execution_sqlstate(e: &DataFusionError) -> &'static str {
    use datafusion::arrow::error::ArrowError;
    match e.find_root() {
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            ArrowError::DivideByZero => "22012",
            ArrowError::ArithmeticOverflow(_) => "22003",
            ArrowError::CastError(_) | ArrowError::ParseError(_) => "22P02",
            _ => "22000",
        },
        DataFusionError::Execution(_) => "22000",
        _ => "XX000",
    }
}

/// Builds a [`PlanError::NotSupported`].
#[macro_export]
macro_rules! not_supported {
    ($($arg:tt)*) => { $crate::error::PlanError::NotSupported(format!($($arg)*)) };
}

/// Builds a [`PlanError::Invalid`].
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { $crate::error::PlanError::Invalid(format!($($arg)*)) };
}

pub type Result<T, E = PlanError> = std::result::Result<T, E>;
