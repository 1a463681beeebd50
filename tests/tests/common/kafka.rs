//! A real Kafka-compatible broker for tests (`tansu`, installed by `scripts/setup.sh --tests`),
//! started on a free loopback port with in-memory storage and killed when dropped; and a
//! reader of a topic's raw record batches that applies Kafka's read_committed rule itself, so
//! the tests judge exactly-once output without trusting the broker's list of aborted
//! transactions (tansu never sends one) or weir's own consumer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use weir_connectors::kafka::client::{create_topic, whole_batches, Cluster};
use weir_connectors::kafka::producer::{OutRecord, Producer};

/// The tansu binary: `$WEIR_TANSU`, else where `scripts/setup.sh --tests` builds it (tansu
/// 0.6.0 with `scripts/tansu/*.patch`: an unpatched tansu cannot end transactions, and its
/// ListOffsets(earliest) can answer past a partition's first batch).
pub fn tansu_binary() -> PathBuf {
    let path = std::env::var_os("WEIR_TANSU")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/weir-tools/tansu-0.6.0-weir3/bin/tansu"));
    assert!(
        path.is_file(),
        "the tansu broker is not at {}: run scripts/setup.sh --tests",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running broker.
pub struct Broker {
    child: Child,
    pub port: u16,
}

impl Broker {
    pub fn start() -> Self {
        // The port is free when picked but may be taken before tansu binds it; tansu then
        // exits, and another port is tried.
        for _ in 0..5 {
            let port = free_port();
            let url = format!("tcp://127.0.0.1:{port}");
            let child = Command::new(tansu_binary())
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &url,
                    "--storage-engine",
                    "memory://tansu/",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start tansu");
            let mut broker = Broker { child, port };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = broker.child.try_wait() {
                    break;
                }
                if Cluster::connect(&broker.bootstrap(), "weir-test", Duration::from_secs(2))
                    .is_ok()
                {
                    return broker;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if broker.child.try_wait().ok().flatten().is_none() {
                panic!("tansu did not answer on port {port} within 20 s");
            }
        }
        panic!("tansu exited at start on 5 ports in a row");
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn cluster(&self) -> Cluster {
        Cluster::connect(&self.bootstrap(), "weir-test", Duration::from_secs(10)).expect("connect")
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        create_topic(&mut self.cluster(), topic, partitions).expect("create topic");
    }

    /// Writes `values` to `partition` of `topic` (idempotent producer, one flush).
    pub fn produce(&self, topic: &str, partition: i32, values: &[String]) {
        let mut p =
            Producer::idempotent(self.cluster(), kafka_protocol::records::Compression::None)
                .expect("producer");
        for v in values {
            p.push(
                topic,
                partition,
                OutRecord {
                    key: None,
                    value: Some(Bytes::from(v.clone())),
                    timestamp: 0,
                },
            );
        }
        p.flush().expect("produce");
    }

    /// Freezes the broker (SIGSTOP) or lets it go on (SIGCONT).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One record batch's header fields and records, decoded by hand.
struct RawBatch {
    producer_id: i64,
    transactional: bool,
    control: bool,
    records: Vec<kafka_protocol::records::Record>,
}

fn raw_batches(data: Bytes) -> Vec<RawBatch> {
    whole_batches(data)
        .into_iter()
        .map(|b| {
            let attributes = (&b[21..23]).get_i16();
            let producer_id = (&b[43..51]).get_i64();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut b.clone())
                .expect("decode a record batch");
            RawBatch {
                producer_id,
                transactional: attributes & (1 << 4) != 0,
                control: attributes & (1 << 5) != 0,
                records: set.records,
            }
        })
        .collect()
}

/// The values a read_committed consumer may see in `topic`, per partition in offset order:
/// non-transactional records, and records of transactions that ended with a COMMIT marker.
/// Transactions that aborted, or have no marker yet (open, past the last stable offset), are
/// left out. Reads with read_uncommitted fetches, so nothing is hidden by the broker.
pub fn read_committed(broker: &Broker, topic: &str) -> BTreeMap<i32, Vec<String>> {
    let everything = read_raw(broker, topic);
    let mut out = BTreeMap::new();
    for (partition, batches) in everything {
        // The fate of each transaction, in order: a transaction is the run of a producer's
        // transactional batches up to its next marker.
        let mut open: HashMap<i64, Vec<usize>> = HashMap::new();
        let mut keep = vec![false; batches.len()];
        for (i, b) in batches.iter().enumerate() {
            if b.control {
                let commit = b.records.iter().any(|r| {
                    r.key
                        .as_ref()
                        .is_some_and(|k| k.len() >= 4 && (&k[2..4]).get_i16() == 1)
                });
                for j in open.remove(&b.producer_id).unwrap_or_default() {
                    keep[j] = commit;
                }
            } else if b.transactional {
                open.entry(b.producer_id).or_default().push(i);
            } else {
                keep[i] = true;
            }
        }
        let values: Vec<String> = batches
            .iter()
            .zip(keep)
            .filter(|(_, k)| *k)
            .flat_map(|(b, _)| b.records.iter())
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
        out.insert(partition, values);
    }
    out
}

/// Every value in `topic` whatever its transaction's fate (what read_uncommitted sees).
pub fn read_uncommitted(broker: &Broker, topic: &str) -> BTreeMap<i32, Vec<String>> {
    read_raw(broker, topic)
        .into_iter()
        .map(|(p, batches)| {
            let values = batches
                .iter()
                .filter(|b| !b.control)
                .flat_map(|b| b.records.iter())
                .map(|r| {
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
                })
                .collect();
            (p, values)
        })
        .collect()
}

/// The high watermark (the end of the log, open transactions and markers included) of
/// `partition` of `topic`, as the broker reports it in a fetch's answer.
pub fn high_watermark(broker: &Broker, topic: &str, partition: i32) -> i64 {
    let resp = fetch_uncommitted(&mut broker.cluster(), topic, partition, 0);
    resp.responses[0].partitions[0].high_watermark
}

/// One read_uncommitted fetch of `partition` of `topic` from `offset`, from its leader.
fn fetch_uncommitted(
    cluster: &mut Cluster,
    topic: &str,
    partition: i32,
    offset: i64,
) -> kafka_protocol::messages::FetchResponse {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(16 << 20)
        .with_isolation_level(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(4 << 20)])]);
    let leader = cluster.leader(topic, partition).expect("leader");
    cluster.on(&leader, |c| c.call(&request)).expect("fetch")
}

fn read_raw(broker: &Broker, topic: &str) -> BTreeMap<i32, Vec<RawBatch>> {
    let mut cluster = broker.cluster();
    let partitions = cluster.partitions(topic).expect("topic metadata");
    let mut out = BTreeMap::new();
    for p in partitions {
        let mut offset = 0i64;
        let mut batches = Vec::new();
        loop {
            let resp = fetch_uncommitted(&mut cluster, topic, p.partition, offset);
            let data = resp.responses[0].partitions[0]
                .records
                .clone()
                .unwrap_or_default();
            let got = raw_batches(data);
            let before = offset;
            for b in &got {
                if let Some(last) = b.records.iter().map(|r| r.offset).max() {
                    offset = offset.max(last + 1);
                }
            }
            if got.is_empty() || offset == before {
                break;
            }
            batches.extend(got);
        }
        out.insert(p.partition, batches);
    }
    out
}
