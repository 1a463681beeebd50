//! weir's connectors: sources that read rows into a job and sinks that take its results.
//!
//! A table's `WITH (connector = '...', ...)` options are validated here, when the table is
//! created, so a typo is reported at once and names the option.

pub mod display;
pub mod error;
pub mod file;
pub mod kafka;
pub mod nexmark;
pub mod options;
pub mod pg_types;
pub mod projection;
pub mod quote;
pub mod rate;
pub mod recycle;
pub mod redact;
pub mod sinks;
pub mod suggest;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use weir_engine::{OperatorFactory, SourceFactory};

pub use error::{ConnectorError, Result};
pub use options::Options;

/// The connectors a table can name.
pub const SOURCE_CONNECTORS: &[&str] = &["file", "kafka", "nexmark"];
/// The connectors a sink can name.
pub const SINK_CONNECTORS: &[&str] = &["file", "kafka", "postgres", "blackhole"];

/// The WITH option keys a connector accepts in CREATE TABLE (`sink = false`) or CREATE
/// SINK: what the REPL completes and "did you mean" suggests from. Empty for an unknown
/// connector.
pub fn option_keys(connector: &str, sink: bool) -> &'static [&'static str] {
    match (connector.to_ascii_lowercase().as_str(), sink) {
        ("file", false) => file::OPTIONS,
        ("kafka", false) => kafka::source::OPTIONS,
        ("nexmark", false) => nexmark::OPTIONS,
        ("file", true) => sinks::file::OPTIONS,
        ("kafka", true) => kafka::sink::OPTIONS,
        ("postgres", true) => sinks::postgres::OPTIONS,
        ("blackhole", true) => &["connector"],
        _ => &[],
    }
}

pub use kafka::sink::SinkContext;

/// Builds a sink from its WITH options; `ctx.job` names the job (part files carry it).
pub fn create_sink(
    sink: &str,
    schema: SchemaRef,
    options: &Options,
    ctx: &SinkContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let job = ctx.job.as_str();
    let exactly_once = ctx.exactly_once;
    let mut options = options.clone();
    let connector = options.take_required("connector")?;
    match connector.as_str() {
        "file" => Ok(Arc::new(sinks::FileSinkFactory::from_options(
            sink,
            &match ctx.run_id.as_str() {
                "" => job.to_string(),
                id => format!("{job}-{id}"),
            },
            schema,
            &mut options,
            exactly_once,
            ctx.updating.as_deref(),
        )?)),
        "postgres" => Ok(Arc::new(sinks::PostgresSinkFactory::from_options(
            sink,
            job,
            schema,
            &mut options,
            exactly_once,
            ctx.updating.as_deref(),
        )?)),
        "kafka" => Ok(Arc::new(kafka::KafkaSinkFactory::from_options(
            sink,
            schema,
            &mut options,
            ctx,
        )?)),
        "blackhole" => Ok(Arc::new(sinks::BlackholeSinkFactory::from_options(
            sink,
            &mut options,
        )?)),
        other => Err(ConnectorError::UnknownConnector {
            name: other.to_string(),
            known: SINK_CONNECTORS.join(", "),
        }),
    }
}

/// Builds a source factory from a table's schema and WITH options. Every option must be
/// understood; an unknown one is an error naming it.
pub fn create_source(
    table: &str,
    schema: Option<SchemaRef>,
    options: &Options,
) -> Result<Arc<dyn SourceFactory>> {
    let mut options = options.clone();
    let connector = options.take_required("connector")?;
    match connector.as_str() {
        "file" => {
            let schema = schema.ok_or_else(|| {
                ConnectorError::Schema(format!(
                    "table {table}: connector 'file' needs a column list"
                ))
            })?;
            Ok(Arc::new(file::FileSourceFactory::from_options(
                table,
                schema,
                &mut options,
            )?))
        }
        "kafka" => {
            let schema = schema.ok_or_else(|| {
                ConnectorError::Schema(format!(
                    "table {table}: connector 'kafka' needs a column list"
                ))
            })?;
            Ok(Arc::new(kafka::KafkaSourceFactory::from_options(
                table,
                schema,
                &mut options,
            )?))
        }
        "nexmark" => Ok(Arc::new(nexmark::NexmarkSourceFactory::from_options(
            table,
            schema,
            &mut options,
        )?)),
        other => Err(ConnectorError::UnknownConnector {
            name: other.to_string(),
            known: SOURCE_CONNECTORS.join(", "),
        }),
    }
}
