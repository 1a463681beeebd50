//! Kafka: `connector = 'kafka'` as a source (`CREATE TABLE ... WITH (...)`) and as an
//! exactly-once sink (`CREATE SINK ... WITH (...)`), on weir's own protocol client.
//!
//! ```sql
//! CREATE TABLE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP,
//!   WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
//! WITH (connector = 'kafka', topic = 'bids', bootstrap_servers = '127.0.0.1:9092',
//!       format = 'json');
//! CREATE SINK top WITH (connector = 'kafka', topic = 'top', bootstrap_servers = '...',
//!   format = 'json', key = 'auction') AS SELECT ...;
//! ```
//!
//! - [`client`]: connections, version negotiation, metadata, coordinators.
//! - [`consumer`]: fetch with the read_committed rule, offsets, group offsets.
//! - [`producer`]: idempotent and transactional producers; EndTxn from any process.
//! - [`source`]: the source (partitions spread over instances, offsets in checkpoints).
//! - [`sink`]: the sink (one transaction per epoch and instance, committed with the
//!   checkpoint; recovery commits what the restored checkpoint pre-committed).

pub mod client;
mod codec;
pub mod consumer;
pub mod producer;
mod reader;
pub mod sink;
pub mod source;
mod values;

use std::time::Duration;

pub use client::{Cluster, KafkaError};
pub use sink::KafkaSinkFactory;
pub use source::KafkaSourceFactory;

use crate::error::{ConnectorError, Result};
use crate::options::Options;
use weir_engine::EngineError;

/// How to reach the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    /// Connect and request timeout.
    pub timeout: Duration,
}

impl KafkaConfig {
    fn from_options(options: &mut Options) -> Result<Self> {
        let bootstrap_servers = options.take_required("bootstrap_servers")?;
        let timeout = options
            .take_duration("request_timeout")?
            .unwrap_or(Duration::from_secs(30));
        Ok(Self {
            bootstrap_servers,
            timeout,
        })
    }

    /// Connects, with an error that names the servers.
    pub fn connect(&self, what: &str) -> std::result::Result<Cluster, EngineError> {
        Cluster::connect(&self.bootstrap_servers, "weir", self.timeout).map_err(|e| {
            EngineError::External(format!(
                "{what}: cannot reach Kafka at '{}': {e}",
                self.bootstrap_servers
            ))
        })
    }
}

/// A Kafka error as an engine error: network trouble and retriable broker errors may pass
/// (the job restarts from its checkpoint); the rest is reported as is.
pub(crate) fn engine_error(what: &str, e: KafkaError) -> EngineError {
    EngineError::External(format!("{what}: {e}"))
}

/// The topics of a `topic` option: one name or a comma-separated list.
fn topic_list(option: &str, value: &str) -> Result<Vec<String>> {
    let topics: Vec<String> = value
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if topics.is_empty() {
        return Err(ConnectorError::InvalidOption {
            option: option.into(),
            value: value.into(),
            reason: "expected a topic name or a comma-separated list".into(),
        });
    }
    if let Some(bad) = topics.iter().find(|t| {
        t.len() > 249
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    }) {
        return Err(ConnectorError::InvalidOption {
            option: option.into(),
            value: bad.clone(),
            reason: "a Kafka topic name has at most 249 characters out of a-z A-Z 0-9 . _ -".into(),
        });
    }
    Ok(topics)
}
