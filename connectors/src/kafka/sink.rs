//! The Kafka sink: `CREATE SINK s WITH (connector = 'kafka', topic = '...',
//! bootstrap_servers = '...', format = 'json' | 'csv' | 'debezium-json', key = 'a, b') AS
//! SELECT ...`.
//!
//! Options: `topic`, `bootstrap_servers`, `format` (json default, csv, debezium-json: one
//! `{"before", "after", "op"}` event per change, which an updating query needs; DESIGN.md
//! §8), `delimiter` (csv),
//! `key` (columns whose values make the record key: one column's text, or a JSON object of
//! several; records with a key go to Kafka's default partition for it, murmur2, so a consumer
//! sees a key's results in order; without a key, instances spread rows round-robin),
//! `compression` (`none` default, `gzip`, `snappy`, `lz4`, `zstd`), `transaction_timeout`
//! (default 15 min), `transactional_id_prefix`, `request_timeout`.
//!
//! Exactly-once (DESIGN.md §6). Each instance writes one transaction per epoch through a small
//! pool of transactional producers with ids `<prefix>-<instance>-<slot>`: at barrier n the
//! instance flushes and hands the transaction over (its id, producer id and epoch are the
//! pre-commit payload, kept in manifest n); once manifest n is written the committer sends
//! EndTxn(commit) for exactly that producer id and epoch. Meanwhile epoch n + 1 writes
//! through another slot. A slot is reused only after its transaction committed, and with a new
//! producer epoch (InitProducerId again), so an EndTxn for an old payload can never commit a
//! newer transaction: it is fenced instead, which means the old one was committed before.
//!
//! Recovery commits the restored manifest's transactions (with their saved producer ids and
//! epochs: the dead process never could), then fences every transactional id this sink ever
//! used (they are listed in `<job dir>/kafka-<sink>.ids`), which aborts whatever else it left
//! open, so read_committed consumers never wait on it.
//!
//! At-least-once: an idempotent producer that sends each batch of results as it arrives (so
//! results are visible within milliseconds, not a checkpoint interval later), and waits for
//! the broker's acknowledgement of everything before a barrier passes; a replay after a crash
//! writes the results since the restored checkpoint again.
//!
//! The transaction timeout must outlast a checkpoint that fails and is retried and a restart,
//! or the broker could abort a pre-committed transaction: CREATE SINK refuses a
//! `transaction_timeout` below 11 checkpoint intervals plus 60 s.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use kafka_protocol::records::Compression;
use weir_engine::checkpoint::Committer;
use weir_engine::{
    EngineError, Operator, OperatorFactory, Output, Result as EngineResult, TaskInfo,
};

use super::client::Cluster;
use super::producer::{self, EndOutcome, OutRecord, Producer, TxnHandle};
use super::{engine_error, topic_list, KafkaConfig};
use crate::display::{column_strings, csv_records, json_records};
use crate::error::{ConnectorError, Result};
use crate::options::Options;

pub(crate) const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "bootstrap_servers",
    "format",
    "delimiter",
    "key",
    "compression",
    "transaction_timeout",
    "transactional_id_prefix",
    "request_timeout",
];

/// Buffered bytes that make an exactly-once instance send before the barrier.
const FLUSH_BYTES: usize = 1 << 20;
/// Checkpoints that may fail in a row before a job stops (the coordinator's limit), plus the
/// one that then succeeds: how many intervals a pre-committed transaction may wait.
const INTERVALS_A_TRANSACTION_MAY_WAIT: u32 = 11;
/// Time allowed for a restart before a pre-committed transaction is committed by recovery.
const RESTART_ALLOWANCE: Duration = Duration::from_secs(60);

/// Where a sink runs: what [`crate::create_sink`] needs besides the options.
#[derive(Debug, Clone)]
pub struct SinkContext {
    pub job: String,
    /// This creation of the job (empty for jobs recorded before it existed). File sinks name
    /// their parts with it, so a sink created again under the same name and path (after DROP
    /// SINK, or from another data directory) never renames over, or deletes, this one's files.
    pub run_id: String,
    /// The job's directory (durable jobs).
    pub job_dir: Option<PathBuf>,
    pub exactly_once: bool,
    pub checkpoint_interval: Duration,
    /// Why the query's result is updating (DESIGN.md §8), `None` when it is append-only:
    /// only sinks that apply changes take an updating result.
    pub updating: Option<String>,
}

/// How rows become record values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFormat {
    Json,
    Csv {
        delimiter: u8,
    },
    /// One Debezium-style change event per record (`{"before", "after", "op"}`): what an
    /// updating result needs.
    DebeziumJson,
}

/// Plan node of a Kafka sink.
#[derive(Debug)]
pub struct KafkaSinkFactory {
    pub sink: String,
    pub config: KafkaConfig,
    pub topic: String,
    pub format: SinkFormat,
    pub schema: SchemaRef,
    /// Key column indices.
    pub key: Vec<usize>,
    pub compression: Compression,
    pub exactly_once: bool,
    pub transaction_timeout: Duration,
    pub prefix: String,
    /// The file listing every transactional id the sink used (exactly-once).
    ledger: Option<PathBuf>,
    /// Transactions handed to the committer and not yet committed, by transactional id.
    book: Arc<Mutex<BTreeSet<String>>>,
}

impl KafkaSinkFactory {
    pub fn from_options(
        sink: &str,
        schema: SchemaRef,
        options: &mut Options,
        ctx: &SinkContext,
    ) -> Result<Self> {
        let config = KafkaConfig::from_options(options)?;
        let topics = topic_list("topic", &options.take_required("topic")?)?;
        if topics.len() != 1 {
            return Err(ConnectorError::InvalidOption {
                option: "topic".into(),
                value: topics.join(","),
                reason: "a sink writes one topic".into(),
            });
        }
        let topic = topics.into_iter().next().unwrap_or_default();
        let delimiter = options.take_delimiter()?;
        let format = match options
            .take("format")
            .unwrap_or_else(|| "json".into())
            .to_ascii_lowercase()
            .as_str()
        {
            "json" => {
                if let Some(d) = delimiter {
                    return Err(ConnectorError::InvalidOption {
                        option: "delimiter".into(),
                        value: char::from(d).to_string(),
                        reason: "only for format 'csv'".into(),
                    });
                }
                SinkFormat::Json
            }
            "csv" => SinkFormat::Csv {
                delimiter: delimiter.unwrap_or(b','),
            },
            "debezium-json" => SinkFormat::DebeziumJson,
            other => {
                return Err(ConnectorError::InvalidOption {
                    option: "format".into(),
                    value: other.into(),
                    reason: "expected 'json', 'csv' or 'debezium-json'".into(),
                })
            }
        };
        if let (Some(why), false) = (&ctx.updating, format == SinkFormat::DebeziumJson) {
            return Err(ConnectorError::AppendOnly {
                sink: sink.to_string(),
                why: why.clone(),
                fix: "so a Kafka sink needs format = 'debezium-json' (one event per change, \
                      before and after), ideally with a key"
                    .into(),
            });
        }
        // The columns keys name: the relation's (an updating result's rows reach the sink
        // with their change kind, which is no column of the topic's records).
        let relation = if ctx.updating.is_some() {
            Arc::new(datafusion::arrow::datatypes::Schema::new(
                schema.fields().iter().skip(1).cloned().collect::<Vec<_>>(),
            ))
        } else {
            Arc::clone(&schema)
        };
        let key = match options.take("key") {
            None => Vec::new(),
            Some(k) => k
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| {
                    relation
                        .index_of(c)
                        .map_err(|_| ConnectorError::InvalidOption {
                            option: "key".into(),
                            value: c.into(),
                            reason: format!(
                                "the query has no such column (its columns: {})",
                                relation
                                    .fields()
                                    .iter()
                                    .map(|f| f.name().as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let compression = match options.take("compression").as_deref() {
            None | Some("none") => Compression::None,
            Some("gzip") => Compression::Gzip,
            Some("snappy") => Compression::Snappy,
            Some("lz4") => Compression::Lz4,
            Some("zstd") => Compression::Zstd,
            Some(other) => {
                return Err(ConnectorError::InvalidOption {
                    option: "compression".into(),
                    value: other.into(),
                    reason: "expected none, gzip, snappy, lz4 or zstd".into(),
                })
            }
        };
        let transaction_timeout = options
            .take_duration("transaction_timeout")?
            .unwrap_or(Duration::from_secs(15 * 60));
        let needed = ctx.checkpoint_interval * INTERVALS_A_TRANSACTION_MAY_WAIT + RESTART_ALLOWANCE;
        if ctx.exactly_once && transaction_timeout < needed {
            return Err(ConnectorError::InvalidOption {
                option: "transaction_timeout".into(),
                value: format!("{transaction_timeout:?}"),
                reason: format!(
                    "a pre-committed transaction must outlive {INTERVALS_A_TRANSACTION_MAY_WAIT} \
                     checkpoint intervals of {:?} (failed checkpoints are retried) plus {:?} for \
                     a restart, or the broker may abort it and lose its output: set \
                     transaction_timeout to at least {needed:?} (and the broker's \
                     transaction.max.timeout.ms with it), or checkpoint more often",
                    ctx.checkpoint_interval, RESTART_ALLOWANCE
                ),
            });
        }
        let prefix = match options.take("transactional_id_prefix") {
            Some(p) => p,
            // The job's directory in the prefix: the same job name in two data directories
            // never fences the other's producers.
            None => format!(
                "weir-{}-{:08x}",
                ctx.job,
                fnv(ctx
                    .job_dir
                    .as_ref()
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default()
                    .as_bytes())
            ),
        };
        options.finish("kafka", OPTIONS)?;
        if ctx.exactly_once && ctx.job_dir.is_none() {
            return Err(ConnectorError::Schema(format!(
                "sink {sink}: an exactly-once Kafka sink needs a data directory (--data-dir)"
            )));
        }
        let me = Self {
            sink: sink.to_string(),
            ledger: ctx
                .job_dir
                .as_ref()
                .map(|d| d.join(format!("kafka-{sink}.ids"))),
            config,
            topic,
            format,
            schema,
            key,
            compression,
            exactly_once: ctx.exactly_once,
            transaction_timeout,
            prefix,
            book: Arc::new(Mutex::new(BTreeSet::new())),
        };
        // Fail now if the brokers do not answer or the topic is missing.
        let mut cluster = me.config.connect(&format!("sink {sink}"))?;
        cluster.partitions(&me.topic).map_err(|e| {
            ConnectorError::Schema(format!(
                "sink {sink}: topic '{}' on '{}': {e} (create the topic first)",
                me.topic, me.config.bootstrap_servers
            ))
        })?;
        Ok(me)
    }

    fn what(&self) -> String {
        format!("sink {}", self.sink)
    }
}

fn read_ledger(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn fnv(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Kafka's default partitioner for keyed records: murmur2 of the key bytes.
pub fn murmur2(data: &[u8]) -> i32 {
    let seed: u32 = 0x9747_b28c;
    let m: u32 = 0x5bd1_e995;
    let r = 24;
    let len = data.len();
    let mut h: u32 = seed ^ len as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(m);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h as i32
}

impl OperatorFactory for KafkaSinkFactory {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!(
            "KafkaSink: topic {} at {} ({}, {}) as {}",
            self.topic,
            self.config.bootstrap_servers,
            match self.format {
                SinkFormat::Json => "json",
                SinkFormat::Csv { .. } => "csv",
                SinkFormat::DebeziumJson => "debezium-json",
            },
            if self.exactly_once {
                "exactly once"
            } else {
                "at least once"
            },
            self.sink
        )
    }

    fn create(&self, task: &TaskInfo) -> EngineResult<Box<dyn Operator>> {
        let mut cluster = self.config.connect(&self.what())?;
        let partitions = cluster
            .partitions(&self.topic)
            .map_err(|e| engine_error(&self.what(), e))?
            .len()
            .max(1) as i32;
        let idempotent = if self.exactly_once {
            None
        } else {
            Some(
                Producer::idempotent(cluster, self.compression)
                    .map_err(|e| engine_error(&self.what(), e))?,
            )
        };
        Ok(Box::new(KafkaSinkOperator {
            spec: KafkaSinkSpec {
                sink: self.sink.clone(),
                config: self.config.clone(),
                topic: self.topic.clone(),
                format: self.format.clone(),
                key: self.key.clone(),
                compression: self.compression,
                transaction_timeout: self.transaction_timeout,
                prefix: self.prefix.clone(),
                ledger: self.ledger.clone(),
                book: Arc::clone(&self.book),
            },
            info: task.clone(),
            partitions,
            next_partition: task.instance as i32,
            idempotent,
            slots: BTreeMap::new(),
            current: None,
        }))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        self.exactly_once.then(|| {
            Arc::new(KafkaCommitter {
                sink: self.sink.clone(),
                config: self.config.clone(),
                ledger: self.ledger.clone(),
                transaction_timeout: self.transaction_timeout,
                book: Arc::clone(&self.book),
                cluster: Mutex::new(None),
            }) as Arc<dyn Committer>
        })
    }
}

/// What a sink instance needs of its factory.
struct KafkaSinkSpec {
    sink: String,
    config: KafkaConfig,
    topic: String,
    format: SinkFormat,
    key: Vec<usize>,
    compression: Compression,
    transaction_timeout: Duration,
    prefix: String,
    ledger: Option<PathBuf>,
    book: Arc<Mutex<BTreeSet<String>>>,
}

struct KafkaSinkOperator {
    spec: KafkaSinkSpec,
    info: TaskInfo,
    partitions: i32,
    next_partition: i32,
    /// At-least-once.
    idempotent: Option<Producer>,
    /// Exactly-once: the producers of this instance's slots.
    slots: BTreeMap<usize, Producer>,
    /// The slot whose transaction holds this epoch's output.
    current: Option<usize>,
}

impl KafkaSinkOperator {
    fn what(&self) -> String {
        format!("sink {}", self.spec.sink)
    }

    fn transactional_id(&self, slot: usize) -> String {
        format!("{}-{}-{slot}", self.spec.prefix, self.info.instance)
    }

    /// The producer for this epoch's transaction: a slot whose previous transaction is
    /// committed, with a fresh producer epoch.
    fn producer(&mut self) -> EngineResult<&mut Producer> {
        if self.current.is_none() {
            let busy = self
                .spec
                .book
                .lock()
                .map_err(|_| EngineError::Internal("kafka sink book poisoned".into()))?
                .clone();
            let slot = (0..)
                .find(|s| !busy.contains(&self.transactional_id(*s)))
                .unwrap_or(0);
            let id = self.transactional_id(slot);
            match self.slots.get_mut(&slot) {
                Some(p) => p.renew().map_err(|e| engine_error(&self.what(), e))?,
                None => {
                    let ledger = KafkaLedger(self.spec.ledger.clone());
                    ledger.record(&id)?;
                    let cluster = self.spec.config.connect(&self.what())?;
                    let p = Producer::transactional(
                        cluster,
                        &id,
                        self.spec.transaction_timeout,
                        self.spec.compression,
                    )
                    .map_err(|e| engine_error(&self.what(), e))?;
                    self.slots.insert(slot, p);
                }
            }
            self.current = Some(slot);
        }
        let slot = self.current.unwrap_or(0);
        self.slots
            .get_mut(&slot)
            .ok_or_else(|| EngineError::Internal("kafka sink slot vanished".into()))
    }

    fn records(&mut self, batch: &RecordBatch) -> EngineResult<Vec<(i32, OutRecord)>> {
        let now = chrono::Utc::now().timestamp_millis();
        let events;
        let (rows, values, key_rows): (&RecordBatch, Vec<Vec<u8>>, Vec<usize>) =
            match self.spec.format {
                SinkFormat::Json => (batch, json_records(batch)?, (0..batch.num_rows()).collect()),
                SinkFormat::Csv { delimiter } => (
                    batch,
                    csv_records(batch, delimiter)?,
                    (0..batch.num_rows()).collect(),
                ),
                SinkFormat::DebeziumJson => {
                    let (relation, changes) = crate::sinks::change_events(batch)?;
                    events = relation;
                    let key_rows = changes.iter().map(|e| e.key_row).collect();
                    (
                        &events,
                        changes.into_iter().map(|e| e.json).collect(),
                        key_rows,
                    )
                }
            };
        let row_keys: Vec<Option<Bytes>> = match self.spec.key.as_slice() {
            [] => vec![None; rows.num_rows()],
            [one] => column_strings(rows.column(*one))?
                .into_iter()
                .map(|k| Some(Bytes::from(k.unwrap_or_default())))
                .collect(),
            many => json_records(&rows.project(many)?)?
                .into_iter()
                .map(|k| Some(Bytes::from(k)))
                .collect(),
        };
        let keys: Vec<Option<Bytes>> = key_rows.iter().map(|&r| row_keys[r].clone()).collect();
        let mut out = Vec::with_capacity(values.len());
        for (key, value) in keys.into_iter().zip(values) {
            let partition = match &key {
                Some(k) => (murmur2(k) & 0x7fff_ffff) % self.partitions,
                None => {
                    self.next_partition = (self.next_partition + 1) % self.partitions;
                    self.next_partition
                }
            };
            out.push((
                partition,
                OutRecord {
                    key,
                    value: Some(Bytes::from(value)),
                    timestamp: now,
                },
            ));
        }
        Ok(out)
    }
}

/// The list of transactional ids a sink used.
struct KafkaLedger(Option<PathBuf>);

impl KafkaLedger {
    fn record(&self, id: &str) -> EngineResult<()> {
        let Some(path) = &self.0 else {
            return Ok(());
        };
        if read_ledger(path).iter().any(|i| i == id) {
            return Ok(());
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| EngineError::io(format!("cannot create '{}'", dir.display()), e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| EngineError::io(format!("cannot open '{}'", path.display()), e))?;
        writeln!(f, "{id}")
            .and_then(|()| f.sync_all())
            .map_err(|e| EngineError::io(format!("cannot write '{}'", path.display()), e))
    }
}

impl Operator for KafkaSinkOperator {
    fn name(&self) -> &str {
        "KafkaSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> EngineResult<()> {
        let records = self.records(&batch)?;
        self.info.metrics.add_rows_out(batch.num_rows() as u64);
        let topic = self.spec.topic.clone();
        let what = self.what();
        let at_least_once = self.idempotent.is_some();
        let producer = match self.idempotent.as_mut() {
            Some(p) => p,
            None => self.producer()?,
        };
        for (partition, r) in records {
            producer.push(&topic, partition, r);
        }
        if at_least_once || producer.buffered_bytes() >= FLUSH_BYTES {
            producer.flush().map_err(|e| engine_error(&what, e))?;
        }
        Ok(())
    }

    fn snapshot(&mut self, _epoch: u64) -> EngineResult<Option<Vec<u8>>> {
        let what = self.what();
        if let Some(p) = self.idempotent.as_mut() {
            p.flush().map_err(|e| engine_error(&what, e))?;
            return Ok(None);
        }
        let Some(slot) = self.current.take() else {
            return Ok(None);
        };
        let Some(producer) = self.slots.get_mut(&slot) else {
            return Ok(None);
        };
        producer.flush().map_err(|e| engine_error(&what, e))?;
        let Some(handle) = producer.hand_over() else {
            return Ok(None);
        };
        self.spec
            .book
            .lock()
            .map_err(|_| EngineError::Internal("kafka sink book poisoned".into()))?
            .insert(handle.transactional_id.clone());
        Ok(Some(handle.encode().into_bytes()))
    }
}

/// Commits the sink's transactions after checkpoints, and recovers after a restart.
struct KafkaCommitter {
    sink: String,
    config: KafkaConfig,
    ledger: Option<PathBuf>,
    transaction_timeout: Duration,
    book: Arc<Mutex<BTreeSet<String>>>,
    cluster: Mutex<Option<Cluster>>,
}

impl KafkaCommitter {
    fn with_cluster<T>(&self, f: impl FnOnce(&mut Cluster) -> EngineResult<T>) -> EngineResult<T> {
        let mut slot = self
            .cluster
            .lock()
            .map_err(|_| EngineError::Internal("kafka committer poisoned".into()))?;
        if slot.is_none() {
            *slot = Some(self.config.connect(&format!("sink {}", self.sink))?);
        }
        let cluster = slot
            .as_mut()
            .ok_or_else(|| EngineError::Internal("kafka client vanished".into()))?;
        let result = f(cluster);
        if result.is_err() {
            *slot = None;
        }
        result
    }
}

impl Committer for KafkaCommitter {
    fn commit(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        for p in payloads {
            let text = String::from_utf8_lossy(p);
            let handle = TxnHandle::decode(&text).ok_or_else(|| {
                EngineError::State(format!(
                    "sink {}: unreadable pre-commit payload '{text}'",
                    self.sink
                ))
            })?;
            let outcome = self.with_cluster(|c| {
                producer::end_transaction(c, &handle, true)
                    .map_err(|e| engine_error(&format!("sink {}", self.sink), e))
            })?;
            // Fenced or no longer open: it was committed before (a crash came between that
            // commit and the next checkpoint), see the module docs.
            let _: EndOutcome = outcome;
            if let Ok(mut book) = self.book.lock() {
                book.remove(&handle.transactional_id);
            }
        }
        Ok(())
    }

    fn recover(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.commit(payloads)?;
        // Everything else this sink left open is aborted: a new producer epoch for each of
        // its transactional ids fences the old producer and aborts its transaction.
        let ids = self.ledger.as_deref().map(read_ledger).unwrap_or_default();
        for id in ids {
            self.with_cluster(|c| {
                producer::init_producer_id(c, Some(&id), self.transaction_timeout)
                    .map(|_| ())
                    .map_err(|e| engine_error(&format!("sink {}: fencing '{id}'", self.sink), e))
            })?;
        }
        if let Ok(mut book) = self.book.lock() {
            book.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_partitioner() {
        // Values from Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }
}
