//! A Kafka producer: idempotent (at-least-once sinks) or transactional (exactly-once sinks).
//!
//! Records are buffered per partition and sent by [`Producer::flush`], one Produce request per
//! leader, with `acks = all`, the producer id and epoch, and per-partition sequence numbers, so
//! a retried request is never written twice. A transactional producer adds each partition to
//! its transaction before the first write to it, and ends the transaction with EndTxn.
//!
//! What a transaction needs to be finished by another process (the producer id and epoch, see
//! [`TxnHandle`]) is public: the sink puts it in the checkpoint's manifest, and recovery calls
//! [`end_transaction`] with it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, ProduceRequest, ProducerId,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, TimestampType};

use super::client::{check, Cluster, CoordinatorKind, KafkaError, KafkaResult};

/// One record to write.
#[derive(Debug, Clone)]
pub struct OutRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
}

/// What another process needs to finish a transaction: EndTxn takes exactly these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnHandle {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
}

impl TxnHandle {
    /// `id|producer_id|epoch`, as stored in a manifest.
    pub fn encode(&self) -> String {
        format!(
            "{}|{}|{}",
            self.transactional_id, self.producer_id, self.epoch
        )
    }

    pub fn decode(s: &str) -> Option<Self> {
        let mut parts = s.rsplitn(3, '|');
        let epoch = parts.next()?.parse().ok()?;
        let producer_id = parts.next()?.parse().ok()?;
        let transactional_id = parts.next()?.to_string();
        Some(Self {
            transactional_id,
            producer_id,
            epoch,
        })
    }
}

/// How long retriable errors (a coordinator loading, a transaction still being completed) are
/// retried before an operation fails.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// Runs `op` until it succeeds, fails for good, or [`RETRY_FOR`] passed.
fn retrying<T>(mut op: impl FnMut() -> KafkaResult<T>) -> KafkaResult<T> {
    let deadline = Instant::now() + RETRY_FOR;
    let mut pause = Duration::from_millis(10);
    loop {
        match op() {
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Gets a producer id and epoch. With a transactional id this also fences every earlier
/// producer with that id and aborts its open transaction.
pub fn init_producer_id(
    cluster: &mut Cluster,
    transactional_id: Option<&str>,
    transaction_timeout: Duration,
) -> KafkaResult<(i64, i16)> {
    retrying(|| {
        let address = match transactional_id {
            Some(id) => cluster.coordinator(CoordinatorKind::Transaction, id)?,
            None => cluster.any_connection()?.address().to_string(),
        };
        let request = InitProducerIdRequest::default()
            .with_transactional_id(
                transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_string()))),
            )
            .with_transaction_timeout_ms(
                transaction_timeout.as_millis().min(i32::MAX as u128) as i32
            )
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let resp = cluster.on(&address, |c| c.call(&request))?;
        let result = check(
            || {
                format!(
                    "InitProducerId for {}",
                    transactional_id.unwrap_or("an idempotent producer")
                )
            },
            resp.error_code,
        );
        if let (Err(e), Some(id)) = (&result, transactional_id) {
            if e.code() == Some(ResponseError::NotCoordinator) {
                cluster.forget_coordinator(CoordinatorKind::Transaction, id);
            }
        }
        result.map(|()| (resp.producer_id.0, resp.producer_epoch))
    })
}

/// How [`end_transaction`] found the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    /// It is committed (or aborted) now, as asked.
    Done,
    /// The producer epoch has moved on: a newer producer with this transactional id exists,
    /// which weir starts only after the transaction was committed (or, when recovering, after
    /// deciding to abort it).
    Fenced,
    /// The coordinator knows no open transaction for this producer (it ended before).
    NotOpen,
}

/// Commits (or aborts) the transaction of `handle`, from any process: EndTxn to the
/// transaction coordinator with the saved producer id and epoch. Retries while the
/// coordinator is busy completing it.
pub fn end_transaction(
    cluster: &mut Cluster,
    handle: &TxnHandle,
    commit: bool,
) -> KafkaResult<EndOutcome> {
    retrying(|| {
        let id = &handle.transactional_id;
        let address = cluster.coordinator(CoordinatorKind::Transaction, id)?;
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
            .with_producer_id(ProducerId(handle.producer_id))
            .with_producer_epoch(handle.epoch)
            .with_committed(commit);
        let resp = cluster.on(&address, |c| c.call(&request))?;
        let what = || {
            format!(
                "{} transaction '{id}' (producer {} epoch {})",
                if commit { "commit" } else { "abort" },
                handle.producer_id,
                handle.epoch
            )
        };
        match check(what, resp.error_code) {
            Ok(()) => Ok(EndOutcome::Done),
            Err(e) => match e.code() {
                Some(ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch) => {
                    Ok(EndOutcome::Fenced)
                }
                Some(ResponseError::InvalidTxnState) => Ok(EndOutcome::NotOpen),
                Some(ResponseError::NotCoordinator) => {
                    cluster.forget_coordinator(CoordinatorKind::Transaction, id);
                    Err(e)
                }
                _ => Err(e),
            },
        }
    })
}

/// A producer writing to one cluster from one thread.
pub struct Producer {
    cluster: Cluster,
    transactional_id: Option<String>,
    transaction_timeout: Duration,
    producer_id: i64,
    epoch: i16,
    /// Next sequence number per partition (for this producer id and epoch).
    sequences: HashMap<(String, i32), i32>,
    /// Partitions added to the open transaction.
    in_transaction: HashSet<(String, i32)>,
    /// Whether a transaction is open (transactional producers).
    open: bool,
    buffered: BTreeMap<(String, i32), Vec<OutRecord>>,
    buffered_bytes: usize,
    compression: Compression,
}

impl Producer {
    /// An idempotent producer (no transactions).
    pub fn idempotent(mut cluster: Cluster, compression: Compression) -> KafkaResult<Self> {
        let (producer_id, epoch) = init_producer_id(&mut cluster, None, Duration::ZERO)?;
        Ok(Self::with_id(
            cluster,
            None,
            Duration::ZERO,
            producer_id,
            epoch,
            compression,
        ))
    }

    /// A transactional producer; fences earlier producers of `transactional_id`.
    pub fn transactional(
        mut cluster: Cluster,
        transactional_id: &str,
        transaction_timeout: Duration,
        compression: Compression,
    ) -> KafkaResult<Self> {
        let (producer_id, epoch) =
            init_producer_id(&mut cluster, Some(transactional_id), transaction_timeout)?;
        Ok(Self::with_id(
            cluster,
            Some(transactional_id.to_string()),
            transaction_timeout,
            producer_id,
            epoch,
            compression,
        ))
    }

    fn with_id(
        cluster: Cluster,
        transactional_id: Option<String>,
        transaction_timeout: Duration,
        producer_id: i64,
        epoch: i16,
        compression: Compression,
    ) -> Self {
        Self {
            cluster,
            transactional_id,
            transaction_timeout,
            producer_id,
            epoch,
            sequences: HashMap::new(),
            in_transaction: HashSet::new(),
            open: false,
            buffered: BTreeMap::new(),
            buffered_bytes: 0,
            compression,
        }
    }

    pub fn cluster(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// The open transaction's handle (transactional producers).
    pub fn handle(&self) -> Option<TxnHandle> {
        self.transactional_id.as_ref().map(|id| TxnHandle {
            transactional_id: id.clone(),
            producer_id: self.producer_id,
            epoch: self.epoch,
        })
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.open
    }

    /// Bumps the producer epoch (InitProducerId again). A transaction that ended keeps its old
    /// epoch, so a late EndTxn for it can never touch the next transaction of this id.
    pub fn renew(&mut self) -> KafkaResult<()> {
        let (producer_id, epoch) = init_producer_id(
            &mut self.cluster,
            self.transactional_id.as_deref(),
            self.transaction_timeout,
        )?;
        self.producer_id = producer_id;
        self.epoch = epoch;
        self.sequences.clear();
        self.in_transaction.clear();
        self.open = false;
        Ok(())
    }

    /// Buffers a record for `topic`/`partition`.
    pub fn push(&mut self, topic: &str, partition: i32, record: OutRecord) {
        self.buffered_bytes += record.key.as_ref().map_or(0, |k| k.len())
            + record.value.as_ref().map_or(0, |v| v.len())
            + 16;
        self.buffered
            .entry((topic.to_string(), partition))
            .or_default()
            .push(record);
    }

    /// Bytes buffered and not yet sent.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    /// Sends everything buffered and waits until the leaders acknowledged it.
    pub fn flush(&mut self) -> KafkaResult<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        let buffered = std::mem::take(&mut self.buffered);
        self.buffered_bytes = 0;
        if self.transactional_id.is_some() {
            let new: Vec<(String, i32)> = buffered
                .keys()
                .filter(|k| !self.in_transaction.contains(*k))
                .cloned()
                .collect();
            if !new.is_empty() {
                self.add_partitions(&new)?;
            }
            self.open = true;
        }
        // One request per leader.
        let mut by_leader: BTreeMap<String, Vec<(String, i32, Vec<OutRecord>)>> = BTreeMap::new();
        for ((topic, partition), records) in buffered {
            let leader = self.cluster.leader(&topic, partition)?;
            by_leader
                .entry(leader)
                .or_default()
                .push((topic, partition, records));
        }
        for (leader, parts) in by_leader {
            self.produce(&leader, parts)?;
        }
        Ok(())
    }

    fn add_partitions(&mut self, partitions: &[(String, i32)]) -> KafkaResult<()> {
        let id = self
            .transactional_id
            .clone()
            .ok_or_else(|| KafkaError::Protocol("not a transactional producer".into()))?;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            topics.entry(t).or_default().push(*p);
        }
        let transaction = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_topics(
                topics
                    .iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps.clone())
                    })
                    .collect(),
            );
        let producer_id = self.producer_id;
        let epoch = self.epoch;
        let cluster = &mut self.cluster;
        retrying(|| {
            let address = cluster.coordinator(CoordinatorKind::Transaction, &id)?;
            // Versions up to 3 carry one transaction in the top-level fields.
            let request = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                    id.clone(),
                )))
                .with_v3_and_below_producer_id(ProducerId(producer_id))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(transaction.topics.clone());
            let resp = cluster.on(&address, |c| c.call(&request))?;
            check(|| format!("AddPartitionsToTxn for '{id}'"), resp.error_code)?;
            for t in &resp.results_by_topic_v3_and_below {
                for p in &t.results_by_partition {
                    let result = check(
                        || {
                            format!(
                                "AddPartitionsToTxn for '{id}': topic '{}' partition {}",
                                t.name.0.as_str(),
                                p.partition_index
                            )
                        },
                        p.partition_error_code,
                    );
                    if let Err(e) = &result {
                        if e.code() == Some(ResponseError::NotCoordinator) {
                            cluster.forget_coordinator(CoordinatorKind::Transaction, &id);
                        }
                    }
                    result?;
                }
            }
            Ok(())
        })?;
        self.in_transaction.extend(partitions.iter().cloned());
        Ok(())
    }

    fn produce(
        &mut self,
        leader: &str,
        parts: Vec<(String, i32, Vec<OutRecord>)>,
    ) -> KafkaResult<()> {
        let transactional = self.transactional_id.is_some();
        let mut topics: BTreeMap<String, Vec<PartitionProduceData>> = BTreeMap::new();
        let mut counts = Vec::new();
        for (topic, partition, records) in &parts {
            let first = *self
                .sequences
                .get(&(topic.clone(), *partition))
                .unwrap_or(&0);
            let encoded: Vec<Record> = records
                .iter()
                .enumerate()
                .map(|(i, r)| Record {
                    delete_horizon: false,
                    transactional,
                    control: false,
                    partition_leader_epoch: -1,
                    producer_id: self.producer_id,
                    producer_epoch: self.epoch,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    sequence: first.wrapping_add(i as i32),
                    timestamp: r.timestamp,
                    key: r.key.clone(),
                    value: r.value.clone(),
                    headers: IndexMap::new(),
                })
                .collect();
            let mut buf = BytesMut::new();
            super::codec::encode(&mut buf, &encoded, self.compression)
                .map_err(|e| KafkaError::Protocol(format!("cannot encode records: {e}")))?;
            topics.entry(topic.clone()).or_default().push(
                PartitionProduceData::default()
                    .with_index(*partition)
                    .with_records(Some(buf.freeze())),
            );
            counts.push(((topic.clone(), *partition), records.len() as i32));
        }
        let request = ProduceRequest::default()
            .with_transactional_id(
                self.transactional_id
                    .as_ref()
                    .map(|id| TransactionalId(StrBytes::from_string(id.clone()))),
            )
            .with_acks(-1)
            .with_timeout_ms(self.cluster.timeout().as_millis().min(i32::MAX as u128) as i32)
            .with_topic_data(
                topics
                    .into_iter()
                    .map(|(t, data)| {
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(t)))
                            .with_partition_data(data)
                    })
                    .collect(),
            );
        // A request that failed on the network may or may not have been written; sending the
        // same batch (same sequence numbers) again is safe, the leader drops a duplicate.
        let mut attempts = 0;
        let resp = loop {
            attempts += 1;
            match self.cluster.on(leader, |c| c.call(&request)) {
                Ok(r) => break r,
                Err(e @ KafkaError::Network(_)) if attempts < 3 => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        };
        for t in &resp.responses {
            for p in &t.partition_responses {
                let topic = t.name.0.as_str();
                let result = check(
                    || format!("produce to topic '{topic}' partition {}", p.index),
                    p.error_code,
                );
                match result {
                    Ok(()) => {}
                    Err(e) if e.code() == Some(ResponseError::DuplicateSequenceNumber) => {}
                    Err(e) => {
                        if matches!(
                            e.code(),
                            Some(
                                ResponseError::NotLeaderOrFollower
                                    | ResponseError::LeaderNotAvailable
                            )
                        ) {
                            self.cluster.invalidate(topic);
                        }
                        return Err(e);
                    }
                }
            }
        }
        for (key, n) in counts {
            let seq = self.sequences.entry(key).or_insert(0);
            *seq = seq.wrapping_add(n) & i32::MAX;
        }
        Ok(())
    }

    /// Commits the open transaction (after flushing).
    pub fn commit(&mut self) -> KafkaResult<()> {
        self.flush()?;
        self.end(true)
    }

    /// Aborts the open transaction; buffered records are dropped.
    pub fn abort(&mut self) -> KafkaResult<()> {
        self.buffered.clear();
        self.buffered_bytes = 0;
        self.end(false)
    }

    fn end(&mut self, commit: bool) -> KafkaResult<()> {
        if !self.open {
            return Ok(());
        }
        let handle = self
            .handle()
            .ok_or_else(|| KafkaError::Protocol("not a transactional producer".into()))?;
        match end_transaction(&mut self.cluster, &handle, commit)? {
            EndOutcome::Done => {}
            EndOutcome::Fenced => {
                return Err(KafkaError::broker(
                    format!("transaction '{}'", handle.transactional_id),
                    ResponseError::ProducerFenced.code(),
                    None,
                ))
            }
            EndOutcome::NotOpen => {
                return Err(KafkaError::broker(
                    format!(
                        "transaction '{}' is no longer open (did it time out?)",
                        handle.transactional_id
                    ),
                    ResponseError::InvalidTxnState.code(),
                    None,
                ))
            }
        }
        self.open = false;
        self.in_transaction.clear();
        Ok(())
    }

    /// Marks the open transaction as handed over: its commit is another object's job (the
    /// sink's committer, after the checkpoint's manifest). The producer must [`Self::renew`]
    /// before its next transaction.
    pub fn hand_over(&mut self) -> Option<TxnHandle> {
        if !self.open {
            return None;
        }
        self.open = false;
        self.in_transaction.clear();
        self.handle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_survive_their_encoding() {
        let h = TxnHandle {
            transactional_id: "weir|job|sink-0-1".into(),
            producer_id: 4001,
            epoch: 7,
        };
        assert_eq!(TxnHandle::decode(&h.encode()), Some(h));
        assert_eq!(TxnHandle::decode("nonsense"), None);
    }
}
