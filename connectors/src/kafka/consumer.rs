//! Reading partitions: Fetch with Kafka's read_committed rule applied by weir itself, offsets
//! by time or position (ListOffsets), and a consumer group's committed offsets (OffsetFetch,
//! OffsetCommit) without joining the group: partitions are assigned by weir, as Flink's source
//! does, and the group is used only to show progress to lag tools.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    BrokerId, FetchRequest, GroupId, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::client::{check, whole_batches, Cluster, CoordinatorKind, KafkaError, KafkaResult};

/// One record as read.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedRecord {
    pub offset: i64,
    /// The first offset of the record batch this record came in: fetching from there gets
    /// this record again (a broker need not serve a fetch that starts inside a batch; tansu
    /// does not).
    pub batch_base: i64,
    /// Milliseconds since the epoch (create or log-append time, as the topic says).
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// What one fetch returned for one partition.
#[derive(Debug, Clone, Default)]
pub struct PartitionData {
    pub partition: i32,
    /// Records at or after the requested offset, in offset order, committed data only.
    pub records: Vec<FetchedRecord>,
    /// Where the next fetch starts: past every batch returned, including skipped ones
    /// (control records, aborted transactions).
    pub next_offset: i64,
    /// The end of the readable log: the last stable offset (read_committed).
    pub end_offset: i64,
    /// The requested offset is gone (retention) or beyond the end.
    pub out_of_range: bool,
}

/// Fields of a record batch header (v2), read directly from its bytes.
struct BatchHeader {
    base_offset: i64,
    last_offset: i64,
    transactional: bool,
    control: bool,
    producer_id: i64,
}

fn batch_header(b: &Bytes) -> Option<BatchHeader> {
    if b.len() < 61 || b[16] != 2 {
        return None;
    }
    let base_offset = (&b[0..8]).get_i64();
    let attributes = (&b[21..23]).get_i16();
    let last_delta = (&b[23..27]).get_i32();
    Some(BatchHeader {
        base_offset,
        last_offset: base_offset + last_delta as i64,
        transactional: attributes & (1 << 4) != 0,
        control: attributes & (1 << 5) != 0,
        producer_id: (&b[43..51]).get_i64(),
    })
}

/// Decodes the batches of one partition's fetch, keeping records from `from` on and dropping
/// what a read_committed consumer must not see: control batches, and batches of transactions
/// that the broker listed as aborted (`aborted`: producer id and first offset of each), until
/// that transaction's ABORT marker.
pub fn decode_partition(
    data: Bytes,
    from: i64,
    aborted: &[(i64, i64)],
) -> KafkaResult<(Vec<FetchedRecord>, i64)> {
    let mut aborted: Vec<(i64, i64)> = aborted.to_vec();
    aborted.sort_by_key(|a| a.1);
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut records = Vec::new();
    let mut next = from;
    for batch in whole_batches(data) {
        let Some(h) = batch_header(&batch) else {
            return Err(KafkaError::Protocol(
                "a fetched record batch is not in format v2".into(),
            ));
        };
        next = next.max(h.last_offset + 1);
        // Transactions whose first offset we have reached become "aborting".
        while let Some(&(pid, first)) = aborted.first() {
            if first <= h.last_offset {
                aborting.insert(pid);
                aborted.remove(0);
            } else {
                break;
            }
        }
        if h.control {
            // The end marker of a transaction: if it aborted, stop skipping its batches.
            let set = super::codec::decode(&batch)
                .map_err(|e| KafkaError::Protocol(format!("cannot decode a control batch: {e}")))?;
            for r in set.records {
                let kind = r
                    .key
                    .as_ref()
                    .filter(|k| k.len() >= 4)
                    .map(|k| (&k[2..4]).get_i16());
                if kind == Some(0) {
                    aborting.remove(&h.producer_id);
                }
            }
            continue;
        }
        if h.transactional && aborting.contains(&h.producer_id) {
            continue;
        }
        let set = super::codec::decode(&batch).map_err(|e| {
            KafkaError::Protocol(format!(
                "cannot decode the record batch at offset {}: {e}",
                h.base_offset
            ))
        })?;
        for r in set.records {
            if r.offset < from {
                continue;
            }
            records.push(FetchedRecord {
                offset: r.offset,
                batch_base: h.base_offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
    }
    Ok((records, next))
}

/// Fetches `partitions` (partition, offset) of `topic` from their leaders. Waits up to
/// `max_wait` for data. Partitions whose leader moved are left out of the result (the caller
/// fetches them again next time).
pub fn fetch(
    cluster: &mut Cluster,
    topic: &str,
    partitions: &[(i32, i64)],
    max_wait: Duration,
    max_bytes_per_partition: i32,
) -> KafkaResult<Vec<PartitionData>> {
    let mut by_leader: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
    for &(p, offset) in partitions {
        let leader = cluster.leader(topic, p)?;
        by_leader.entry(leader).or_default().push((p, offset));
    }
    let mut out = Vec::new();
    let wait = max_wait.as_millis().min(i32::MAX as u128) as i32;
    for (leader, parts) in by_leader {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(wait)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes_per_partition.saturating_mul(parts.len() as i32))
            .with_isolation_level(1)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(
                    parts
                        .iter()
                        .map(|&(p, offset)| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(offset)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(max_bytes_per_partition)
                        })
                        .collect(),
                )]);
        let resp = cluster.on(&leader, |c| c.call(&request))?;
        check(|| format!("fetch from topic '{topic}'"), resp.error_code)?;
        for t in resp.responses {
            for pd in t.partitions {
                let from = parts
                    .iter()
                    .find(|(p, _)| *p == pd.partition_index)
                    .map_or(0, |(_, o)| *o);
                let code = ResponseError::try_from_code(pd.error_code);
                match code {
                    None => {}
                    Some(ResponseError::OffsetOutOfRange) => {
                        out.push(PartitionData {
                            partition: pd.partition_index,
                            next_offset: from,
                            end_offset: pd.high_watermark,
                            out_of_range: true,
                            ..Default::default()
                        });
                        continue;
                    }
                    Some(
                        ResponseError::NotLeaderOrFollower
                        | ResponseError::LeaderNotAvailable
                        | ResponseError::UnknownTopicOrPartition
                        | ResponseError::FencedLeaderEpoch
                        | ResponseError::UnknownLeaderEpoch,
                    ) => {
                        cluster.invalidate(topic);
                        continue;
                    }
                    Some(_) => {
                        check(
                            || format!("fetch topic '{topic}' partition {}", pd.partition_index),
                            pd.error_code,
                        )?;
                    }
                }
                let aborted: Vec<(i64, i64)> = pd
                    .aborted_transactions
                    .unwrap_or_default()
                    .iter()
                    .map(|a| (a.producer_id.0, a.first_offset))
                    .collect();
                let (records, next) =
                    decode_partition(pd.records.unwrap_or_default(), from, &aborted)?;
                let end = if pd.last_stable_offset >= 0 {
                    pd.last_stable_offset
                } else {
                    pd.high_watermark
                };
                out.push(PartitionData {
                    partition: pd.partition_index,
                    records,
                    next_offset: next,
                    end_offset: end,
                    out_of_range: false,
                });
            }
        }
    }
    Ok(out)
}

/// Where to start reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    /// The first offset whose record timestamp is at or after this (ms).
    Timestamp(i64),
}

/// Resolves `spec` for `partitions` of `topic` (ListOffsets on each leader). A timestamp past
/// every record gives the end of the partition.
pub fn list_offsets(
    cluster: &mut Cluster,
    topic: &str,
    partitions: &[i32],
    spec: OffsetSpec,
) -> KafkaResult<BTreeMap<i32, i64>> {
    let mut by_leader: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for &p in partitions {
        by_leader
            .entry(cluster.leader(topic, p)?)
            .or_default()
            .push(p);
    }
    let ts = match spec {
        OffsetSpec::Earliest => -2,
        OffsetSpec::Timestamp(t) => t,
    };
    let mut out = BTreeMap::new();
    for (leader, parts) in by_leader {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(1)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(
                    parts
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(ts)
                        })
                        .collect(),
                )]);
        let resp = cluster.on(&leader, |c| c.call(&request))?;
        for t in resp.topics {
            for p in t.partitions {
                check(
                    || {
                        format!(
                            "list offsets of topic '{topic}' partition {}",
                            p.partition_index
                        )
                    },
                    p.error_code,
                )?;
                out.insert(p.partition_index, p.offset);
            }
        }
    }
    // A timestamp after the last record: Kafka answers -1, meaning "the end".
    let unresolved: Vec<i32> = out
        .iter()
        .filter(|(_, o)| **o < 0)
        .map(|(p, _)| *p)
        .collect();
    if !unresolved.is_empty() {
        let ends = end_offsets(cluster, topic, &unresolved)?;
        out.extend(ends);
    }
    Ok(out)
}

/// The end (last stable offset) of each of `partitions`, from a fetch's answer rather than
/// ListOffsets(latest), which some Kafka-compatible brokers get wrong.
pub fn end_offsets(
    cluster: &mut Cluster,
    topic: &str,
    partitions: &[i32],
) -> KafkaResult<BTreeMap<i32, i64>> {
    let earliest = list_offsets(cluster, topic, partitions, OffsetSpec::Earliest)?;
    let request: Vec<(i32, i64)> = earliest.into_iter().collect();
    let mut out = BTreeMap::new();
    for _ in 0..3 {
        let missing: Vec<(i32, i64)> = request
            .iter()
            .filter(|(p, _)| !out.contains_key(p))
            .copied()
            .collect();
        if missing.is_empty() {
            break;
        }
        for d in fetch(cluster, topic, &missing, Duration::ZERO, 1)? {
            out.insert(d.partition, d.end_offset);
        }
    }
    if out.len() < partitions.len() {
        return Err(KafkaError::Protocol(format!(
            "topic '{topic}': could not find the end of every partition"
        )));
    }
    Ok(out)
}

/// The offsets `group` committed for `partitions` of `topic` (-1: none).
pub fn committed_offsets(
    cluster: &mut Cluster,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> KafkaResult<BTreeMap<i32, i64>> {
    let address = cluster.coordinator(CoordinatorKind::Group, group)?;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_indexes(partitions.to_vec())]));
    let resp = cluster.on(&address, |c| c.call(&request))?;
    check(
        || format!("read the offsets of group '{group}'"),
        resp.error_code,
    )?;
    let mut out: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, -1)).collect();
    for t in resp.topics {
        for p in t.partitions {
            check(
                || {
                    format!(
                        "read the offset of group '{group}' for partition {}",
                        p.partition_index
                    )
                },
                p.error_code,
            )?;
            out.insert(p.partition_index, p.committed_offset);
        }
    }
    Ok(out)
}

/// Commits `offsets` (partition, next offset to read) for `group`, as a consumer outside any
/// group generation does. Used for monitoring only: weir restores offsets from its checkpoints.
pub fn commit_offsets(
    cluster: &mut Cluster,
    group: &str,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
) -> KafkaResult<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let address = cluster.coordinator(CoordinatorKind::Group, group)?;
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                            .with_committed_leader_epoch(-1)
                    })
                    .collect(),
            )]);
    let resp = cluster.on(&address, |c| c.call(&request))?;
    for t in resp.topics {
        for p in t.partitions {
            if p.error_code == ResponseError::NotCoordinator.code() {
                cluster.forget_coordinator(CoordinatorKind::Group, group);
            }
            check(
                || {
                    format!(
                        "commit the offset of group '{group}' for partition {}",
                        p.partition_index
                    )
                },
                p.error_code,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn batch(base: i64, pid: i64, transactional: bool, control: Option<i16>, n: usize) -> Bytes {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                delete_horizon: false,
                transactional,
                control: control.is_some(),
                partition_leader_epoch: 0,
                producer_id: pid,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: base + i as i64,
                sequence: i as i32,
                timestamp: 1000 + base + i as i64,
                key: control.map(|kind| {
                    let mut k = BytesMut::new();
                    k.extend_from_slice(&0i16.to_be_bytes());
                    k.extend_from_slice(&kind.to_be_bytes());
                    k.freeze()
                }),
                value: Some(Bytes::from(format!("v{}", base + i as i64))),
                headers: IndexMap::new(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        buf.freeze()
    }

    fn offsets(records: &[FetchedRecord]) -> Vec<i64> {
        records.iter().map(|r| r.offset).collect()
    }

    #[test]
    fn aborted_transactions_and_markers_are_skipped() {
        let mut data = BytesMut::new();
        data.extend_from_slice(&batch(0, 7, true, None, 2)); // committed txn of producer 7
        data.extend_from_slice(&batch(2, 8, true, None, 2)); // aborted txn of producer 8
        data.extend_from_slice(&batch(4, 7, true, Some(1), 1)); // COMMIT marker of 7
        data.extend_from_slice(&batch(5, 8, true, Some(0), 1)); // ABORT marker of 8
        data.extend_from_slice(&batch(6, 8, true, None, 2)); // next txn of 8, not aborted
        let (records, next) = decode_partition(data.freeze(), 0, &[(8, 2)]).unwrap();
        assert_eq!(offsets(&records), vec![0, 1, 6, 7]);
        assert_eq!(next, 8);
    }

    #[test]
    fn records_before_the_requested_offset_are_dropped() {
        let (records, next) = decode_partition(batch(10, -1, false, None, 5), 12, &[]).unwrap();
        assert_eq!(offsets(&records), vec![12, 13, 14]);
        assert_eq!(next, 15);
        assert_eq!(records[0].value.as_deref(), Some(&b"v12"[..]));
        assert_eq!(records[0].timestamp, 1012);
    }
}
