//! A small blocking Kafka client on the `kafka-protocol` crate: connections, version
//! negotiation, metadata, and request routing to partition leaders and coordinators.
//!
//! weir talks the Kafka protocol itself instead of wrapping librdkafka because exactly-once
//! needs what librdkafka hides: the producer id and epoch of a transaction, so that a restarted
//! job can commit a transaction its predecessor pre-committed (DESIGN.md §6), and full control
//! over which partitions a source reads from which offset.
//!
//! Versions: for every API weir uses the highest version both it and the broker support, up to
//! a cap below the versions that switch to topic ids or to the second transaction protocol
//! (KIP-890), so one code path serves Apache Kafka 2.x to 4.x, Redpanda and tansu.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, FindCoordinatorRequest,
    MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// The highest version weir uses of each API (see the module docs).
fn version_cap(key: ApiKey) -> i16 {
    match key {
        ApiKey::Produce => 11,
        // 11, the last before tagged fields: tansu sends top-level tagged fields in v12
        // responses that only v16 defines, which a strict decoder must refuse.
        ApiKey::Fetch => 11,
        ApiKey::ListOffsets => 8,
        ApiKey::Metadata => 12,
        ApiKey::OffsetCommit => 8,
        ApiKey::OffsetFetch => 7,
        ApiKey::FindCoordinator => 3,
        ApiKey::InitProducerId => 4,
        ApiKey::AddPartitionsToTxn => 3,
        ApiKey::EndTxn => 4,
        ApiKey::CreateTopics => 7,
        ApiKey::DeleteTopics => 5,
        _ => 0,
    }
}

/// A Kafka client error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaError {
    /// The connection failed or timed out (`address`, what happened). Retriable.
    Network(String),
    /// The broker answered with an error code.
    Broker {
        what: String,
        error: ResponseError,
        message: Option<String>,
    },
    /// Something the protocol does not allow (an unparsable response, no common version).
    Protocol(String),
}

impl KafkaError {
    /// The broker's error code, if it sent one.
    pub fn code(&self) -> Option<ResponseError> {
        match self {
            KafkaError::Broker { error, .. } => Some(*error),
            _ => None,
        }
    }

    /// Whether trying again (after refreshing metadata) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaError::Network(_) => true,
            KafkaError::Broker { error, .. } => {
                error.is_retriable()
                    || matches!(
                        error,
                        ResponseError::ConcurrentTransactions
                            | ResponseError::CoordinatorLoadInProgress
                            | ResponseError::NotCoordinator
                            | ResponseError::CoordinatorNotAvailable
                    )
            }
            KafkaError::Protocol(_) => false,
        }
    }

    pub(crate) fn broker(what: impl Into<String>, code: i16, message: Option<&StrBytes>) -> Self {
        KafkaError::Broker {
            what: what.into(),
            error: ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)),
            message: message.map(|m| m.to_string()),
        }
    }
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KafkaError::Network(m) | KafkaError::Protocol(m) => f.write_str(m),
            KafkaError::Broker {
                what,
                error,
                message,
            } => {
                write!(f, "{what}: {error:?} (error {})", error.code())?;
                if let Some(m) = message.as_deref().filter(|m| !m.is_empty()) {
                    write!(f, ": {m}")?;
                }
                Ok(())
            }
        }
    }
}

pub type KafkaResult<T> = Result<T, KafkaError>;

/// Turns a non-zero error code into an error.
pub(crate) fn check(what: impl FnOnce() -> String, code: i16) -> KafkaResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(KafkaError::broker(what(), code, None))
    }
}

/// The largest response weir accepts (a fetch is bounded by its `max_bytes`).
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// One TCP connection to one broker.
pub struct Connection {
    address: String,
    stream: TcpStream,
    correlation: i32,
    client_id: StrBytes,
    /// The broker's version range per API key.
    versions: HashMap<i16, (i16, i16)>,
}

impl Connection {
    /// Connects and asks the broker which API versions it supports.
    pub fn open(address: &str, client_id: &str, timeout: Duration) -> KafkaResult<Self> {
        let net = |e: std::io::Error| KafkaError::Network(format!("broker {address}: {e}"));
        let addrs: Vec<_> = address
            .to_socket_addrs()
            .map_err(|e| KafkaError::Network(format!("broker {address}: cannot resolve: {e}")))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(net(e)),
            (None, None) => {
                return Err(KafkaError::Network(format!(
                    "broker {address}: the name resolves to no address"
                )))
            }
        };
        stream.set_nodelay(true).map_err(net)?;
        stream.set_read_timeout(Some(timeout)).map_err(net)?;
        stream.set_write_timeout(Some(timeout)).map_err(net)?;
        let mut conn = Connection {
            address: address.to_string(),
            stream,
            correlation: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
            versions: HashMap::new(),
        };
        // Version 0 of ApiVersions is understood by every broker.
        let resp: ApiVersionsResponse = conn.call_version(&ApiVersionsRequest::default(), 0)?;
        check(|| format!("broker {address}: ApiVersions"), resp.error_code)?;
        conn.versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(conn)
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// The version weir uses for request `R` with this broker.
    pub fn version<R: Request>(&self) -> KafkaResult<i16> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|_| KafkaError::Protocol(format!("unknown api key {}", R::KEY)))?;
        let ours = R::VERSIONS.max.min(version_cap(key));
        let (min, max) = self.versions.get(&R::KEY).copied().ok_or_else(|| {
            KafkaError::Protocol(format!(
                "broker {} does not support {key:?}, which weir needs",
                self.address
            ))
        })?;
        let v = ours.min(max);
        if v < min || v < R::VERSIONS.min {
            return Err(KafkaError::Protocol(format!(
                "broker {} supports {key:?} versions {min}..{max}, weir speaks up to {ours}",
                self.address
            )));
        }
        Ok(v)
    }

    /// Sends `request` at the negotiated version and reads its response.
    pub fn call<R: Request>(&mut self, request: &R) -> KafkaResult<R::Response> {
        let version = self.version::<R>()?;
        self.call_version(request, version)
    }

    /// Sends `request` at `version` and reads its response.
    pub fn call_version<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> KafkaResult<R::Response> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|_| KafkaError::Protocol(format!("unknown api key {}", R::KEY)))?;
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(self.client_id.clone()));
        let address = self.address.clone();
        let proto = move |e: &dyn std::fmt::Display| {
            KafkaError::Protocol(format!("broker {address}: {key:?}: {e}"))
        };
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .map_err(|e| proto(&e))?;
        request.encode(&mut buf, version).map_err(|e| proto(&e))?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let net = |e: std::io::Error| {
            KafkaError::Network(format!("broker {}: {key:?}: {e}", self.address))
        };
        self.stream.write_all(&buf).map_err(net)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(net)?;
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > MAX_RESPONSE_BYTES {
            return Err(KafkaError::Protocol(format!(
                "broker {}: {key:?}: response of {size} bytes",
                self.address
            )));
        }
        let mut body = vec![0u8; size as usize];
        self.stream.read_exact(&mut body).map_err(net)?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| proto(&e))?;
        if header.correlation_id != self.correlation {
            return Err(KafkaError::Protocol(format!(
                "broker {}: {key:?}: response to request {} while waiting for {}",
                self.address, header.correlation_id, self.correlation
            )));
        }
        R::Response::decode(&mut body, version).map_err(|e| proto(&e))
    }
}

/// A partition's place in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
}

/// The coordinator kinds of FindCoordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    Group = 0,
    Transaction = 1,
}

/// Connections to the brokers of one cluster, with cached metadata. Not shared between
/// threads: each source reader and sink instance has its own.
pub struct Cluster {
    bootstrap: Vec<String>,
    client_id: String,
    timeout: Duration,
    brokers: HashMap<i32, String>,
    connections: HashMap<String, Connection>,
    topics: HashMap<String, Vec<PartitionInfo>>,
    coordinators: HashMap<(CoordinatorKind, String), String>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.bootstrap)
            .field("brokers", &self.brokers)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to the first reachable bootstrap server (`host:port[,host:port...]`).
    pub fn connect(bootstrap: &str, client_id: &str, timeout: Duration) -> KafkaResult<Self> {
        let bootstrap: Vec<String> = bootstrap
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(KafkaError::Protocol("no bootstrap server given".into()));
        }
        let mut cluster = Cluster {
            bootstrap,
            client_id: client_id.to_string(),
            timeout,
            brokers: HashMap::new(),
            connections: HashMap::new(),
            topics: HashMap::new(),
            coordinators: HashMap::new(),
        };
        cluster.any_connection()?;
        Ok(cluster)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A connection to `address`, opened on first use.
    pub fn connection(&mut self, address: &str) -> KafkaResult<&mut Connection> {
        if !self.connections.contains_key(address) {
            let conn = Connection::open(address, &self.client_id, self.timeout)?;
            self.connections.insert(address.to_string(), conn);
        }
        self.connections
            .get_mut(address)
            .ok_or_else(|| KafkaError::Protocol("connection vanished".into()))
    }

    /// Drops the connection to `address` (after an error on it).
    pub fn forget(&mut self, address: &str) {
        self.connections.remove(address);
        self.coordinators.retain(|_, a| a != address);
    }

    /// Some live connection: an open one, else a known broker, else a bootstrap server.
    pub fn any_connection(&mut self) -> KafkaResult<&mut Connection> {
        if let Some(address) = self.connections.keys().next().cloned() {
            return self.connection(&address);
        }
        let mut candidates: Vec<String> = self.brokers.values().cloned().collect();
        candidates.extend(self.bootstrap.iter().cloned());
        let mut last = None;
        for address in candidates {
            match Connection::open(&address, &self.client_id, self.timeout) {
                Ok(conn) => {
                    self.connections.insert(address.clone(), conn);
                    return self.connection(&address);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| KafkaError::Network("no broker to connect to".into())))
    }

    /// Runs `f` on a connection to `address`; an I/O failure drops the connection.
    pub fn on<T>(
        &mut self,
        address: &str,
        f: impl FnOnce(&mut Connection) -> KafkaResult<T>,
    ) -> KafkaResult<T> {
        let result = f(self.connection(address)?);
        if matches!(
            result,
            Err(KafkaError::Network(_)) | Err(KafkaError::Protocol(_))
        ) {
            self.forget(address);
        }
        result
    }

    /// Refreshes the metadata of `topics` and returns their partitions (an unknown topic is an
    /// error naming it).
    pub fn refresh(&mut self, topics: &[&str]) -> KafkaResult<()> {
        let request = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        let address = self.any_connection()?.address().to_string();
        let resp: MetadataResponse = self.on(&address, |c| c.call(&request))?;
        self.apply_metadata(&resp)
    }

    /// The names of the cluster's topics, sorted, without internal ones (flagged internal, or
    /// named `__...` as Kafka's own are).
    pub fn topic_names(&mut self) -> KafkaResult<Vec<String>> {
        let request = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let address = self.any_connection()?.address().to_string();
        let resp: MetadataResponse = self.on(&address, |c| c.call(&request))?;
        let mut names: Vec<String> = resp
            .topics
            .iter()
            .filter(|t| t.error_code == 0 && !t.is_internal)
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .filter(|n| !n.starts_with("__"))
            .collect();
        names.sort();
        Ok(names)
    }

    fn apply_metadata(&mut self, resp: &MetadataResponse) -> KafkaResult<()> {
        for b in &resp.brokers {
            self.brokers
                .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        for t in &resp.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            check(|| format!("topic '{name}'"), t.error_code)?;
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            self.topics.insert(name, partitions);
        }
        Ok(())
    }

    /// The partitions of `topic` (from the cache, else fresh metadata).
    pub fn partitions(&mut self, topic: &str) -> KafkaResult<Vec<PartitionInfo>> {
        if !self.topics.contains_key(topic) {
            self.refresh(&[topic])?;
        }
        self.topics
            .get(topic)
            .cloned()
            .ok_or_else(|| KafkaError::Protocol(format!("no metadata for topic '{topic}'")))
    }

    /// The address of the leader of `topic`/`partition`.
    pub fn leader(&mut self, topic: &str, partition: i32) -> KafkaResult<String> {
        for attempt in 0..2 {
            let parts = self.partitions(topic)?;
            let leader = parts
                .iter()
                .find(|p| p.partition == partition)
                .map(|p| p.leader);
            if let Some(address) = leader.and_then(|l| self.brokers.get(&l)) {
                return Ok(address.clone());
            }
            if attempt == 0 {
                self.refresh(&[topic])?;
            }
        }
        Err(KafkaError::broker(
            format!("topic '{topic}' partition {partition}"),
            ResponseError::LeaderNotAvailable.code(),
            None,
        ))
    }

    /// Forgets the cached leaders of `topic`, so the next call asks again.
    pub fn invalidate(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// The address of the group or transaction coordinator for `key`.
    pub fn coordinator(&mut self, kind: CoordinatorKind, key: &str) -> KafkaResult<String> {
        if let Some(address) = self.coordinators.get(&(kind, key.to_string())) {
            return Ok(address.clone());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(key.to_string()))
                .with_key_type(kind as i8);
            let address = self.any_connection()?.address().to_string();
            let resp = self.on(&address, |c| c.call(&request))?;
            let result = check(|| format!("FindCoordinator for '{key}'"), resp.error_code);
            match result {
                Ok(()) => {
                    let address = format!("{}:{}", resp.host.as_str(), resp.port);
                    self.brokers.insert(resp.node_id.0, address.clone());
                    self.coordinators
                        .insert((kind, key.to_string()), address.clone());
                    return Ok(address);
                }
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forgets the coordinator of `key` (after NOT_COORDINATOR).
    pub fn forget_coordinator(&mut self, kind: CoordinatorKind, key: &str) {
        self.coordinators.remove(&(kind, key.to_string()));
    }

    /// A known broker id's address.
    pub fn broker(&self, id: BrokerId) -> Option<&str> {
        self.brokers.get(&id.0).map(|s| s.as_str())
    }
}

/// Creates `topic` with `partitions` partitions, one replica each (tests and examples).
/// A topic that already exists is an error (`TopicAlreadyExists`).
pub fn create_topic(cluster: &mut Cluster, topic: &str, partitions: i32) -> KafkaResult<()> {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::CreateTopicsRequest;
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(cluster.timeout().as_millis().min(i32::MAX as u128) as i32);
    let address = cluster.any_connection()?.address().to_string();
    let resp = cluster.on(&address, |c| c.call(&request))?;
    for t in resp.topics {
        if t.error_code != 0 {
            return Err(KafkaError::broker(
                format!("create topic '{topic}'"),
                t.error_code,
                t.error_message.as_ref(),
            ));
        }
    }
    cluster.invalidate(topic);
    Ok(())
}

/// Splits fetched bytes into whole record batches (a fetch may end with a partial one) and
/// returns them with the offset after the last whole batch.
pub fn whole_batches(mut data: Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    while data.len() >= 12 {
        let len = (&data[8..12]).get_i32();
        if len < 0 {
            break;
        }
        let total = 12 + len as usize;
        if data.len() < total {
            break;
        }
        out.push(data.split_to(total));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_batch_at_the_end_is_left_out() {
        let mut buf = BytesMut::new();
        for len in [20i32, 30] {
            buf.put_i64(0);
            buf.put_i32(len);
            buf.put_bytes(7, len as usize);
        }
        buf.put_i64(0);
        buf.put_i32(100);
        buf.put_bytes(7, 10);
        let batches = whole_batches(buf.freeze());
        assert_eq!(
            batches.iter().map(|b| b.len()).collect::<Vec<_>>(),
            vec![32, 42]
        );
    }

    #[test]
    fn errors_say_what_failed_and_the_broker_code() {
        let e = KafkaError::broker("topic 'bids'", 3, None);
        assert_eq!(e.code(), Some(ResponseError::UnknownTopicOrPartition));
        assert!(e.to_string().contains("topic 'bids'"));
        assert!(e.to_string().contains("error 3"));
        assert!(KafkaError::broker("x", 51, None).is_retriable());
        assert!(!KafkaError::broker("x", 90, None).is_retriable());
    }
}
