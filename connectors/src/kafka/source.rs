//! The Kafka source: `CREATE TABLE t (...) WITH (connector = 'kafka', topic = '...',
//! bootstrap_servers = '...', format = 'json' | 'csv' | 'raw', ...)`.
//!
//! Options: `topic` (a name or a comma-separated list) or `topic_pattern` (a regular
//! expression that must match a topic's whole name; internal `__` topics never match; topics
//! created later join at the next discovery and are read from their start), `bootstrap_servers`, `format`
//! (default json), `delimiter` (csv), `startup` (`earliest` default, `latest`, `group`,
//! `timestamp:<ms>`), `group_id` (offsets are committed there after each completed checkpoint,
//! for lag tools only; `startup = 'group'` starts from them), `include` (record metadata as
//! columns: `key, topic, partition, offset, timestamp, headers`, each `[AS column]`, default
//! column `kafka_<field>`), `bad_rows` (`fail` default, `skip`), `batch_size`, `idle_timeout`,
//! `partition_discovery` (default 30 s), `stop_at` (`end`: read up to the ends the partitions
//! had when the job started, then finish, so the table is bounded), `rate` (at most that many
//! rows per second per instance, for demos and tests), `request_timeout`.
//!
//! Partitions are assigned by weir, never by a consumer group: partition `p` of topic `t` goes
//! to instance `(hash(t) + p) % instances` (as Flink's source does), new partitions are picked
//! up every `partition_discovery` and read from their start. Each partition is a split with
//! its own watermark (the runtime takes the minimum). The position at a checkpoint is the next
//! offset of every partition the instance reads; on a restart at another parallelism every
//! instance gets every old position and takes its own partitions'.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use weir_engine::{EngineError, Result as EngineResult, SourceFactory, SourceReader, TaskInfo};

use super::client::Cluster;
use super::consumer;
use super::reader::{KafkaReader, Position, Spec, Subscription};
use super::values::{RowLayout, ValueFormat};
use super::{engine_error, topic_list, KafkaConfig};
use crate::error::{ConnectorError, Result};
use crate::file::BadRows;
use crate::options::Options;
use crate::rate::RateLimit;

pub(crate) const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "topic_pattern",
    "bootstrap_servers",
    "format",
    "delimiter",
    "startup",
    "group_id",
    "include",
    "bad_rows",
    "batch_size",
    "idle_timeout",
    "partition_discovery",
    "stop_at",
    "request_timeout",
    "rate",
];

/// Where a partition seen for the first time starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    Earliest,
    Latest,
    Group,
    Timestamp(i64),
}

/// Plan node of a Kafka source.
#[derive(Debug)]
pub struct KafkaSourceFactory {
    pub table: String,
    pub config: KafkaConfig,
    pub subscription: Arc<Subscription>,
    pub layout: RowLayout,
    pub startup: Startup,
    pub group_id: Option<String>,
    pub bad_rows: BadRows,
    pub batch_size: usize,
    pub idle_timeout: Option<Duration>,
    pub discovery: Duration,
    pub stop_at_end: bool,
    pub rate: Option<u64>,
    /// Connection for committing group offsets after checkpoints.
    group_client: Mutex<Option<Cluster>>,
}

impl KafkaSourceFactory {
    /// Validates the options and checks, now, that the brokers answer and every topic exists.
    pub fn from_options(table: &str, schema: SchemaRef, options: &mut Options) -> Result<Self> {
        let config = KafkaConfig::from_options(options)?;
        let subscription = match (options.take("topic"), options.take("topic_pattern")) {
            (Some(list), None) => Subscription::Topics(topic_list("topic", &list)?),
            (None, Some(pattern)) => {
                Subscription::Pattern(regex::Regex::new(&format!("^(?:{pattern})$")).map_err(
                    |e| ConnectorError::InvalidOption {
                        option: "topic_pattern".into(),
                        value: pattern.clone(),
                        reason: format!("not a regular expression: {e}"),
                    },
                )?)
            }
            (Some(_), Some(_)) => {
                return Err(ConnectorError::InvalidOption {
                    option: "topic_pattern".into(),
                    value: "".into(),
                    reason: "give either topic or topic_pattern, not both".into(),
                })
            }
            (None, None) => {
                return Err(ConnectorError::MissingOption(
                    "topic (or topic_pattern)".into(),
                ))
            }
        };
        let format = match options
            .take("format")
            .unwrap_or_else(|| "json".into())
            .to_ascii_lowercase()
            .as_str()
        {
            "json" => ValueFormat::Json,
            "csv" => ValueFormat::Csv {
                delimiter: options.take_delimiter()?.unwrap_or(b','),
            },
            "raw" => ValueFormat::Raw,
            other => {
                return Err(ConnectorError::InvalidOption {
                    option: "format".into(),
                    value: other.into(),
                    reason: "expected 'json', 'csv' or 'raw'".into(),
                })
            }
        };
        if format != (ValueFormat::Csv { delimiter: b',' })
            && !matches!(format, ValueFormat::Csv { .. })
            && options.get("delimiter").is_some()
        {
            return Err(ConnectorError::InvalidOption {
                option: "delimiter".into(),
                value: options.get("delimiter").unwrap_or_default().into(),
                reason: "only for format 'csv'".into(),
            });
        }
        let group_id = options.take("group_id");
        let startup = match options.take("startup") {
            None => Startup::Earliest,
            Some(s) => match s.trim().to_ascii_lowercase().as_str() {
                "earliest" => Startup::Earliest,
                "latest" => Startup::Latest,
                "group" => Startup::Group,
                t if t.starts_with("timestamp:") => {
                    Startup::Timestamp(t["timestamp:".len()..].trim().parse().map_err(|_| {
                        ConnectorError::InvalidOption {
                            option: "startup".into(),
                            value: s.clone(),
                            reason: "expected timestamp:<milliseconds since 1970>".into(),
                        }
                    })?)
                }
                _ => {
                    return Err(ConnectorError::InvalidOption {
                        option: "startup".into(),
                        value: s,
                        reason: "expected earliest, latest, group or timestamp:<ms>".into(),
                    })
                }
            },
        };
        if startup == Startup::Group && group_id.is_none() {
            return Err(ConnectorError::InvalidOption {
                option: "startup".into(),
                value: "group".into(),
                reason: "starting from a group's offsets needs group_id".into(),
            });
        }
        let include = options.take("include");
        let bad_rows = match options.take("bad_rows").as_deref() {
            None | Some("fail") => BadRows::Fail,
            Some("skip") => BadRows::Skip,
            Some(other) => {
                return Err(ConnectorError::InvalidOption {
                    option: "bad_rows".into(),
                    value: other.into(),
                    reason: "expected 'fail' or 'skip'".into(),
                })
            }
        };
        let batch_size = options
            .take_parsed::<usize>("batch_size", "a positive number")?
            .unwrap_or(8192)
            .max(1);
        let idle_timeout = options.take_duration("idle_timeout")?;
        let discovery = options
            .take_duration("partition_discovery")?
            .unwrap_or(Duration::from_secs(30));
        let stop_at_end = match options.take("stop_at").as_deref() {
            None => false,
            Some("end") => true,
            Some(other) => {
                return Err(ConnectorError::InvalidOption {
                    option: "stop_at".into(),
                    value: other.into(),
                    reason: "expected 'end' (read up to the partitions' ends at the start)".into(),
                })
            }
        };
        let rate = options.take_parsed::<u64>("rate", "rows per second, a positive number")?;
        if rate == Some(0) {
            return Err(ConnectorError::InvalidOption {
                option: "rate".into(),
                value: "0".into(),
                reason: "expected rows per second, a positive number".into(),
            });
        }
        options.finish("kafka", OPTIONS)?;
        let layout = RowLayout::new(table, schema, include.as_deref(), format)?;
        let me = Self {
            table: table.to_string(),
            config,
            subscription: Arc::new(subscription),
            layout,
            startup,
            group_id,
            bad_rows,
            batch_size,
            idle_timeout,
            discovery,
            stop_at_end,
            rate,
            group_client: Mutex::new(None),
        };
        // Fail now, naming the servers or the topic, rather than when the job starts.
        let mut cluster = me.config.connect(&format!("table {table}"))?;
        me.all_partitions(&mut cluster)?;
        Ok(me)
    }

    /// The topics read now: the listed ones, or those the pattern matches.
    fn topics(&self, cluster: &mut Cluster) -> EngineResult<Vec<String>> {
        match self.subscription.as_ref() {
            Subscription::Topics(t) => Ok(t.clone()),
            Subscription::Pattern(p) => Ok(cluster
                .topic_names()
                .map_err(|e| engine_error(&format!("table {}", self.table), e))?
                .into_iter()
                .filter(|t| p.is_match(t))
                .collect()),
        }
    }

    /// Every (topic index, partition) of the topics read now.
    fn all_partitions(&self, cluster: &mut Cluster) -> EngineResult<Vec<(usize, i32)>> {
        let topics = self.topics(cluster)?;
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = topics.iter().map(|s| s.as_str()).collect();
        cluster.refresh(&names).map_err(|e| {
            if e.code() == Some(kafka_protocol::error::ResponseError::UnknownTopicOrPartition) {
                EngineError::BadInput(format!(
                    "table {}: {e}: the topic does not exist on '{}'",
                    self.table, self.config.bootstrap_servers
                ))
            } else {
                engine_error(&format!("table {}", self.table), e)
            }
        })?;
        let mut out = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            let parts = cluster
                .partitions(t)
                .map_err(|e| engine_error(&format!("table {}", self.table), e))?;
            out.extend(parts.iter().map(|p| (i, p.partition)));
        }
        Ok(out)
    }

    fn reader(&self, task: &TaskInfo, positions: &[&[u8]]) -> EngineResult<Box<dyn SourceReader>> {
        let mut restored = Position::default();
        for p in positions {
            let p = Position::decode(p).ok_or_else(|| {
                EngineError::State(format!(
                    "table {}: unreadable checkpointed Kafka position",
                    self.table
                ))
            })?;
            restored.offsets.extend(p.offsets);
            restored.stops.extend(p.stops);
            restored.batches.extend(p.batches);
        }
        let cluster = self.config.connect(&format!("table {}", self.table))?;
        let reader = KafkaReader::open(
            self.clone_spec(),
            cluster,
            task,
            restored,
            positions.is_empty(),
            RateLimit::new(self.rate),
        )?;
        Ok(Box::new(reader))
    }

    fn clone_spec(&self) -> Arc<Spec> {
        Arc::new(Spec {
            table: self.table.clone(),
            subscription: Arc::clone(&self.subscription),
            layout: self.layout.clone(),
            startup: self.startup,
            group_id: self.group_id.clone(),
            bad_rows: self.bad_rows,
            batch_size: self.batch_size,
            discovery: self.discovery,
            stop_at_end: self.stop_at_end,
        })
    }
}

impl SourceFactory for KafkaSourceFactory {
    fn describe(&self) -> String {
        let topics = match self.subscription.as_ref() {
            Subscription::Topics(t) => format!("topic {}", t.join(", ")),
            Subscription::Pattern(p) => {
                let p = p.as_str();
                format!("topics matching {}", &p[4..p.len() - 2])
            }
        };
        format!(
            "KafkaSource: {topics} at {} ({}) as {}{}",
            self.config.bootstrap_servers,
            self.layout.format.name(),
            self.table,
            crate::projection::describe_unread(&self.layout.schema, &self.layout.unread)
        )
    }

    fn without_columns(&self, unread: &[usize]) -> Option<Arc<dyn SourceFactory>> {
        Some(Arc::new(Self {
            table: self.table.clone(),
            config: self.config.clone(),
            subscription: Arc::clone(&self.subscription),
            layout: self.layout.without_columns(unread),
            startup: self.startup,
            group_id: self.group_id.clone(),
            bad_rows: self.bad_rows,
            batch_size: self.batch_size,
            idle_timeout: self.idle_timeout,
            discovery: self.discovery,
            stop_at_end: self.stop_at_end,
            rate: self.rate,
            group_client: Mutex::new(None),
        }))
    }

    fn is_bounded(&self) -> bool {
        self.stop_at_end
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.layout.schema)
    }

    fn partitions(&self) -> EngineResult<usize> {
        let mut cluster = self.config.connect(&format!("table {}", self.table))?;
        Ok(self.all_partitions(&mut cluster)?.len().max(1))
    }

    fn create(
        &self,
        task: &TaskInfo,
        position: Option<&[u8]>,
    ) -> EngineResult<Box<dyn SourceReader>> {
        let positions: Vec<&[u8]> = position.into_iter().collect();
        self.reader(task, &positions)
    }

    fn splits_movable(&self) -> bool {
        true
    }

    fn create_rescaled(
        &self,
        task: &TaskInfo,
        positions: &[&[u8]],
    ) -> EngineResult<Box<dyn SourceReader>> {
        self.reader(task, positions)
    }

    fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    fn checkpoint_completed(&self, positions: &[&[u8]]) {
        let Some(group) = &self.group_id else {
            return;
        };
        let mut merged = Position::default();
        for p in positions {
            if let Some(p) = Position::decode(p) {
                merged.offsets.extend(p.offsets);
            }
        }
        let Ok(mut slot) = self.group_client.lock() else {
            return;
        };
        if slot.is_none() {
            *slot = self.config.connect("group offsets").ok();
        }
        let Some(cluster) = slot.as_mut() else {
            return;
        };
        let mut failed = false;
        let topics: BTreeSet<&str> = merged
            .offsets
            .keys()
            .filter_map(|k| Some(k.rsplit_once('/')?.0))
            .collect();
        for t in topics {
            let offsets: BTreeMap<i32, i64> = merged
                .offsets
                .iter()
                .filter_map(|(k, o)| {
                    let (topic, p) = k.rsplit_once('/')?;
                    (topic == t).then(|| Some((p.parse().ok()?, *o)))?
                })
                .collect();
            // Monitoring only: a failure here loses nothing, the next checkpoint commits again.
            failed |= consumer::commit_offsets(cluster, group, t, &offsets).is_err();
        }
        if failed {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reader::owner;

    #[test]
    fn partitions_spread_over_instances() {
        let mut counts = [0; 3];
        for p in 0..30 {
            counts[owner("bids", p, 3)] += 1;
        }
        assert_eq!(counts, [10, 10, 10]);
        // The same answer every time (checkpoints rely on it).
        assert_eq!(owner("bids", 7, 3), owner("bids", 7, 3));
    }
}
