//! Reading the partitions one source instance owns: discovery and assignment, where each
//! partition starts (checkpoint, `startup`, group offsets), fetches, decoding into rows, and
//! the position recorded at every barrier.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{
    EngineError, Result as EngineResult, SourcePoll, SourceReader, SplitId, TaskInfo,
};

use super::client::Cluster;
use super::consumer::{self, OffsetSpec};
use super::engine_error;
use super::source::Startup;
use super::values::RowLayout;
use crate::file::BadRows;
use crate::rate::RateLimit;

/// How long a fetch waits on the broker for data. Barriers are taken between polls, so this
/// bounds how long a checkpoint waits on an idle source.
const FETCH_WAIT: Duration = Duration::from_millis(50);
/// Bytes per partition per fetch.
const FETCH_BYTES: i32 = 1 << 20;
/// What a table reads: named topics, or every topic whose whole name matches a pattern
/// (looked for again at every discovery, so topics created later join).
#[derive(Debug)]
pub enum Subscription {
    Topics(Vec<String>),
    Pattern(regex::Regex),
}

/// What a reader needs of its factory.
pub(super) struct Spec {
    pub(super) table: String,
    pub(super) subscription: Arc<Subscription>,
    pub(super) layout: RowLayout,
    pub(super) startup: Startup,
    pub(super) group_id: Option<String>,
    pub(super) bad_rows: BadRows,
    pub(super) batch_size: usize,
    pub(super) discovery: Duration,
    pub(super) stop_at_end: bool,
}

/// FNV-1a, 64 bits: the same in every run (checkpoints rely on it).
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Which instance reads a partition: `(hash(topic) + partition) % instances`, with a hash that
/// is the same in every run (checkpoints rely on it).
pub(super) fn owner(topic: &str, partition: i32, instances: usize) -> usize {
    // FNV-1a, 32 bits.
    let mut h: u32 = 0x811c_9dc5;
    for b in topic.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    ((h as usize & 0x7fff_ffff) + partition.max(0) as usize) % instances.max(1)
}

/// Bits of a split id that number the partition; the others come from the topic's name.
const PARTITION_BITS: u32 = 24;

/// The topic part of a split id.
fn topic_bits(topic: &str) -> SplitId {
    fnv1a(topic) >> PARTITION_BITS
}

/// A partition's split id, from the topic's name, so that it is the same in every run and
/// every instance whatever order topics are found in.
fn split_id(topic: &str, partition: i32) -> SplitId {
    (topic_bits(topic) << PARTITION_BITS)
        | (partition.max(0) as SplitId & ((1 << PARTITION_BITS) - 1))
}

/// A checkpointed position: next offset (and, with `stop_at = 'end'`, the end) of every
/// partition, keyed `topic/partition`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) offsets: BTreeMap<String, i64>,
    pub(super) stops: BTreeMap<String, i64>,
    /// Where to fetch from to get the record at `offsets` again, when that record sits inside
    /// a record batch (the batch's first offset).
    pub(super) batches: BTreeMap<String, i64>,
}

impl Position {
    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::json!({"offsets": self.offsets, "stops": self.stops, "batches": self.batches})
            .to_string()
            .into_bytes()
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let map = |name: &str| -> Option<BTreeMap<String, i64>> {
            v.get(name)?
                .as_object()?
                .iter()
                .map(|(k, o)| Some((k.clone(), o.as_i64()?)))
                .collect()
        };
        Some(Self {
            offsets: map("offsets")?,
            stops: map("stops").unwrap_or_default(),
            batches: map("batches").unwrap_or_default(),
        })
    }
}

fn key(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

struct Owned {
    /// The next offset not yet handed to the job: the checkpointed position.
    offset: i64,
    /// The next offset to fetch (ahead of `offset` while fetched rows wait in `pending`).
    fetch_offset: i64,
    /// The first offset of the record batch holding `offset` (a fetch from `offset` itself
    /// would start inside that batch).
    batch_base: i64,
    stop: Option<i64>,
}

/// Fetched rows not yet handed to the job.
struct Pending {
    part: (usize, i32),
    /// `None`: records that decoded to no row (skipped); only the offset moves.
    batch: Option<RecordBatch>,
    /// The offset after these rows.
    next: i64,
    /// The first offset of the record batch holding `next`.
    batch_base: i64,
}

/// Reads the partitions one instance owns.
pub(super) struct KafkaReader {
    spec: Arc<Spec>,
    cluster: Cluster,
    /// The topics read, in the order found; `owned` and `pending` refer to them by index.
    topics: Vec<String>,
    instance: usize,
    instances: usize,
    /// (topic index, partition) -> where it stands.
    owned: BTreeMap<(usize, i32), Owned>,
    restored: Position,
    /// No checkpoint was restored: partitions found now start where `startup` says; later
    /// ones from their beginning.
    fresh: bool,
    /// The first discovery is done.
    discovered: bool,
    pending: VecDeque<Pending>,
    next_discovery: Instant,
    skipped: u64,
    rate: RateLimit,
}

impl KafkaReader {
    /// A reader for instance `task`, starting from `restored` (the merged positions of the
    /// checkpoint; `fresh` when there was none); finds its partitions before returning.
    pub(super) fn open(
        spec: Arc<Spec>,
        cluster: Cluster,
        task: &TaskInfo,
        restored: Position,
        fresh: bool,
        rate: RateLimit,
    ) -> EngineResult<Self> {
        let topics = match spec.subscription.as_ref() {
            Subscription::Topics(t) => t.clone(),
            Subscription::Pattern(_) => Vec::new(),
        };
        let mut reader = Self {
            spec,
            cluster,
            topics,
            instance: task.instance,
            instances: task.parallelism,
            owned: BTreeMap::new(),
            restored,
            fresh,
            discovered: false,
            pending: VecDeque::new(),
            next_discovery: Instant::now(),
            skipped: 0,
            rate,
        };
        reader.discover()?;
        Ok(reader)
    }

    fn what(&self) -> String {
        format!("table {}", self.spec.table)
    }

    /// Looks for partitions this instance owns and has not seen, and decides where each
    /// starts.
    fn discover(&mut self) -> EngineResult<()> {
        self.next_discovery = Instant::now() + self.spec.discovery;
        if let Subscription::Pattern(pattern) = self.spec.subscription.as_ref() {
            let found = self
                .cluster
                .topic_names()
                .map_err(|e| engine_error(&self.what(), e))?;
            for name in found {
                if !pattern.is_match(&name) || self.topics.contains(&name) {
                    continue;
                }
                // Two topics whose split ids would be equal would share one watermark.
                if let Some(other) = self
                    .topics
                    .iter()
                    .find(|t| topic_bits(t) == topic_bits(&name))
                {
                    return Err(EngineError::BadInput(format!(
                        "table {}: topics '{other}' and '{name}' both match the pattern and \
                         hash to the same split ids; narrow the pattern or list the topics",
                        self.spec.table
                    )));
                }
                self.topics.push(name);
            }
        }
        let names: Vec<&str> = self.topics.iter().map(|s| s.as_str()).collect();
        self.cluster
            .refresh(&names)
            .map_err(|e| engine_error(&self.what(), e))?;
        let mut new: Vec<(usize, i32)> = Vec::new();
        for (ti, t) in self.topics.iter().enumerate() {
            let parts = self
                .cluster
                .partitions(t)
                .map_err(|e| engine_error(&self.what(), e))?;
            for p in parts {
                let id = (ti, p.partition);
                if !self.owned.contains_key(&id)
                    && owner(t, p.partition, self.instances) == self.instance
                {
                    new.push(id);
                }
            }
        }
        // Only the partitions found when a fresh job starts begin where `startup` says.
        let first_time = self.fresh && !self.discovered;
        self.discovered = true;
        if new.is_empty() {
            return Ok(());
        }
        for (ti, partitions) in group_by_topic(&new) {
            let topic = self.topics[ti].clone();
            let mut starts: BTreeMap<i32, i64> = BTreeMap::new();
            let mut bases: BTreeMap<i32, i64> = BTreeMap::new();
            let mut unknown = Vec::new();
            for &p in &partitions {
                match self.restored.offsets.get(&key(&topic, p)) {
                    Some(o) => {
                        starts.insert(p, *o);
                        if let Some(b) = self.restored.batches.get(&key(&topic, p)) {
                            bases.insert(p, (*b).min(*o));
                        }
                    }
                    None => unknown.push(p),
                }
            }
            if !unknown.is_empty() {
                let what = self.what();
                let err = |e| engine_error(&what, e);
                let resolved = if !first_time {
                    // Appeared after the job started (or after its checkpoint): all of it is new.
                    consumer::list_offsets(
                        &mut self.cluster,
                        &topic,
                        &unknown,
                        OffsetSpec::Earliest,
                    )
                    .map_err(err)?
                } else {
                    match self.spec.startup {
                        Startup::Earliest => consumer::list_offsets(
                            &mut self.cluster,
                            &topic,
                            &unknown,
                            OffsetSpec::Earliest,
                        )
                        .map_err(err)?,
                        Startup::Latest => {
                            consumer::end_offsets(&mut self.cluster, &topic, &unknown)
                                .map_err(err)?
                        }
                        Startup::Timestamp(ms) => consumer::list_offsets(
                            &mut self.cluster,
                            &topic,
                            &unknown,
                            OffsetSpec::Timestamp(ms),
                        )
                        .map_err(err)?,
                        Startup::Group => {
                            let group = self.spec.group_id.clone().unwrap_or_default();
                            let committed = consumer::committed_offsets(
                                &mut self.cluster,
                                &group,
                                &topic,
                                &unknown,
                            )
                            .map_err(err)?;
                            let none: Vec<i32> = committed
                                .iter()
                                .filter(|(_, o)| **o < 0)
                                .map(|(p, _)| *p)
                                .collect();
                            let mut out = committed;
                            if !none.is_empty() {
                                // A partition the group never committed starts at its beginning.
                                out.extend(
                                    consumer::list_offsets(
                                        &mut self.cluster,
                                        &topic,
                                        &none,
                                        OffsetSpec::Earliest,
                                    )
                                    .map_err(err)?,
                                );
                            }
                            out
                        }
                    }
                };
                starts.extend(resolved);
            }
            let mut stops: BTreeMap<i32, i64> = BTreeMap::new();
            if self.spec.stop_at_end {
                let need: Vec<i32> = partitions
                    .iter()
                    .copied()
                    .filter(|p| !self.restored.stops.contains_key(&key(&topic, *p)))
                    .collect();
                if !need.is_empty() {
                    stops = consumer::end_offsets(&mut self.cluster, &topic, &need)
                        .map_err(|e| engine_error(&self.what(), e))?;
                }
                for &p in &partitions {
                    if let Some(s) = self.restored.stops.get(&key(&topic, p)) {
                        stops.insert(p, *s);
                    }
                }
            }
            for p in partitions {
                let offset = starts.get(&p).copied().unwrap_or(0);
                let batch_base = bases.get(&p).copied().unwrap_or(offset);
                self.owned.insert(
                    (ti, p),
                    Owned {
                        offset,
                        fetch_offset: batch_base,
                        batch_base,
                        stop: stops.get(&p).copied(),
                    },
                );
            }
        }
        Ok(())
    }

    fn fetch(&mut self) -> EngineResult<()> {
        let by_topic: Vec<(usize, Vec<(i32, i64)>)> = {
            let mut m: BTreeMap<usize, Vec<(i32, i64)>> = BTreeMap::new();
            for (&(ti, p), o) in &self.owned {
                if o.stop.is_some_and(|s| o.fetch_offset >= s) {
                    continue;
                }
                m.entry(ti).or_default().push((p, o.fetch_offset));
            }
            m.into_iter().collect()
        };
        for (ti, parts) in by_topic {
            let topic = self.topics[ti].clone();
            let data = consumer::fetch(&mut self.cluster, &topic, &parts, FETCH_WAIT, FETCH_BYTES)
                .map_err(|e| engine_error(&self.what(), e))?;
            for d in data {
                let Some(owned) = self.owned.get_mut(&(ti, d.partition)) else {
                    continue;
                };
                if d.out_of_range {
                    return Err(EngineError::BadInput(format!(
                        "table {}: topic '{topic}' partition {}: offset {} is no longer (or not \
                         yet) in the log (retention deleted it?); the partition ends at {}",
                        self.spec.table, d.partition, owned.fetch_offset, d.end_offset
                    )));
                }
                let mut records = d.records;
                let mut next = d.next_offset.max(owned.fetch_offset);
                // After a restore the fetch starts at the batch holding the position: what
                // comes before the position was handed to the job already.
                let from = owned.offset;
                records.retain(|r| r.offset >= from);
                if let Some(stop) = owned.stop {
                    records.retain(|r| r.offset < stop);
                    next = next.min(stop);
                }
                owned.fetch_offset = next;
                let bases: Vec<i64> = records.iter().map(|r| r.batch_base).collect();
                for (i, chunk) in records.chunks(self.spec.batch_size).enumerate() {
                    let end = (i * self.spec.batch_size + chunk.len()).min(bases.len());
                    let batch = self.spec.layout.decode(
                        &self.spec.table,
                        &topic,
                        d.partition,
                        chunk,
                        self.spec.bad_rows,
                        &mut self.skipped,
                    )?;
                    let after = chunk.last().map_or(next, |r| r.offset + 1);
                    // The record at `after` comes in the next chunk; if none follows, `after`
                    // is where the next fetch starts, a batch boundary.
                    let batch_base = bases.get(end).copied().unwrap_or(after).min(after);
                    self.pending.push_back(Pending {
                        part: (ti, d.partition),
                        batch: (batch.num_rows() > 0).then_some(batch),
                        next: after,
                        batch_base,
                    });
                }
                // Control records and skipped batches after the last row move the offset too.
                self.pending.push_back(Pending {
                    part: (ti, d.partition),
                    batch: None,
                    next,
                    batch_base: next,
                });
            }
        }
        Ok(())
    }

    /// Hands the next fetched batch to the job, moving its partition's position past it.
    fn next_pending(&mut self) -> Option<(SplitId, RecordBatch)> {
        while let Some(p) = self.pending.pop_front() {
            if let Some(o) = self.owned.get_mut(&p.part) {
                if p.next >= o.offset {
                    o.offset = p.next;
                    o.batch_base = p.batch_base;
                }
            }
            if let Some(batch) = p.batch {
                self.rate.took(batch.num_rows());
                let split = split_id(&self.topics[p.part.0], p.part.1);
                return Some((split, batch));
            }
        }
        None
    }
}

fn group_by_topic(ids: &[(usize, i32)]) -> BTreeMap<usize, Vec<i32>> {
    let mut m: BTreeMap<usize, Vec<i32>> = BTreeMap::new();
    for &(t, p) in ids {
        m.entry(t).or_default().push(p);
    }
    m
}

impl SourceReader for KafkaReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.spec.layout.schema)
    }

    fn poll_next(&mut self) -> EngineResult<SourcePoll> {
        if self.rate.allowance(1) == 0 {
            return Ok(SourcePoll::Pending);
        }
        if let Some((split, batch)) = self.next_pending() {
            return Ok(SourcePoll::SplitBatch { split, batch });
        }
        if Instant::now() >= self.next_discovery {
            self.discover()?;
        }
        if self.spec.stop_at_end
            && self
                .owned
                .values()
                .all(|o| o.stop.is_some_and(|s| o.offset >= s))
        {
            return Ok(SourcePoll::Exhausted);
        }
        self.fetch()?;
        match self.next_pending() {
            Some((split, batch)) => Ok(SourcePoll::SplitBatch { split, batch }),
            None => Ok(SourcePoll::Pending),
        }
    }

    fn splits(&self) -> Vec<SplitId> {
        self.owned
            .keys()
            .map(|&(ti, p)| split_id(&self.topics[ti], p))
            .collect()
    }

    fn skipped_rows(&self) -> u64 {
        self.skipped
    }

    fn position(&self) -> Vec<u8> {
        // Rows fetched but still queued are not past the position: they are read again after
        // a restore.
        let mut pos = Position::default();
        for (&(ti, p), o) in &self.owned {
            pos.offsets.insert(key(&self.topics[ti], p), o.offset);
            if o.batch_base < o.offset {
                pos.batches.insert(key(&self.topics[ti], p), o.batch_base);
            }
            if let Some(s) = o.stop {
                pos.stops.insert(key(&self.topics[ti], p), s);
            }
        }
        pos.encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_their_encoding() {
        let mut p = Position::default();
        p.offsets.insert("bids/0".into(), 17);
        p.offsets.insert("bids/12".into(), 0);
        p.stops.insert("bids/0".into(), 99);
        assert_eq!(Position::decode(&p.encode()), Some(p));
        assert_eq!(Position::decode(b"garbage"), None);
    }

    #[test]
    fn split_ids_come_from_the_topic_name_and_the_partition() {
        // Not from the order topics were found in: a pattern finds them in any order.
        assert_eq!(split_id("bids", 3), split_id("bids", 3));
        assert_ne!(split_id("bids", 3), split_id("bids", 4));
        assert_ne!(split_id("bids", 3), split_id("asks", 3));
        assert_eq!(split_id("bids", 3) & 0xff_ffff, 3);
        assert_eq!(split_id("bids", 3) >> PARTITION_BITS, topic_bits("bids"));
    }
}
