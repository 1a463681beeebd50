//! Job-wide counters, shared by every task of a job and readable while it runs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::message::WATERMARK_MIN;

/// Counters of one job. Tasks add to them; front ends read a [`MetricsSnapshot`].
#[derive(Debug)]
pub struct JobMetrics {
    rows_in: AtomicU64,
    rows_out: AtomicU64,
    late_rows: AtomicU64,
    skipped_rows: AtomicU64,
    watermark: AtomicI64,
    newest_event_time: AtomicI64,
    /// Per stage of the dataflow (empty for a job that is not one, e.g. a batch query).
    stages: Vec<StageMetrics>,
}

impl Default for JobMetrics {
    fn default() -> Self {
        Self::for_stages(&[])
    }
}

/// Counters of one stage, per instance.
#[derive(Debug)]
pub struct StageMetrics {
    name: String,
    instances: Vec<InstanceMetrics>,
    /// Capacity of each input channel (0: a source).
    queue_capacity: usize,
}

#[derive(Debug)]
struct InstanceMetrics {
    rows_in: AtomicU64,
    rows_out: AtomicU64,
    /// The instance's output watermark.
    watermark: AtomicI64,
    /// Messages waiting in the instance's input channels when it last took one.
    queued: AtomicU64,
    /// Of a bounded source: bytes read and in all (0 when it does not say).
    progress_read: AtomicU64,
    progress_total: AtomicU64,
}

impl Default for InstanceMetrics {
    fn default() -> Self {
        Self {
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            watermark: AtomicI64::new(WATERMARK_MIN),
            queued: AtomicU64::new(0),
            progress_read: AtomicU64::new(0),
            progress_total: AtomicU64::new(0),
        }
    }
}

/// A copy of one stage's counters, summed over its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSnapshot {
    pub name: String,
    pub parallelism: usize,
    /// Rows the stage's tasks took in (read, for a source stage).
    pub rows_in: u64,
    /// Rows they sent downstream.
    pub rows_out: u64,
    /// The lowest output watermark over the instances (`i64::MIN` before any).
    pub watermark: i64,
    /// Messages waiting in the stage's input channels (backpressure: near `queue_capacity`
    /// times inputs, the stage is the bottleneck).
    pub queued: u64,
    pub queue_capacity: usize,
}

/// A task's handle on its own counters in its stage.
#[derive(Debug, Clone)]
pub struct TaskMetrics {
    job: std::sync::Arc<JobMetrics>,
    stage: usize,
    instance: usize,
}

impl TaskMetrics {
    pub fn new(job: std::sync::Arc<JobMetrics>, stage: usize, instance: usize) -> Self {
        Self {
            job,
            stage,
            instance,
        }
    }

    fn get(&self) -> Option<&InstanceMetrics> {
        self.job
            .stages
            .get(self.stage)?
            .instances
            .get(self.instance)
    }

    pub fn rows_in(&self, n: usize) {
        if let Some(m) = self.get() {
            m.rows_in.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub fn rows_out(&self, n: usize) {
        if let Some(m) = self.get() {
            m.rows_out.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub fn watermark(&self, w: i64) {
        if let Some(m) = self.get() {
            m.watermark.fetch_max(w, Ordering::Relaxed);
        }
    }

    pub fn queued(&self, n: usize) {
        if let Some(m) = self.get() {
            m.queued.store(n as u64, Ordering::Relaxed);
        }
    }

    /// A bounded source's bytes read so far, of `total`.
    pub fn progress(&self, read: u64, total: u64) {
        if let Some(m) = self.get() {
            m.progress_read.store(read, Ordering::Relaxed);
            m.progress_total.store(total, Ordering::Relaxed);
        }
    }

    /// The job's counters.
    pub fn job(&self) -> &JobMetrics {
        &self.job
    }
}

/// A copy of a job's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Rows read by the sources (malformed rows that were skipped not included).
    pub rows_in: u64,
    /// Rows delivered to the sink.
    pub rows_out: u64,
    /// Rows that arrived after every window they belong to had closed, and were dropped.
    pub late_rows: u64,
    /// Malformed input rows skipped because the table has `bad_rows = 'skip'`.
    pub skipped_rows: u64,
    /// The sources' lowest watermark (nanoseconds since the epoch; `i64::MIN` before any).
    pub watermark: i64,
    /// The newest event time the sources read (`i64::MIN` before any, or without one).
    pub newest_event_time: i64,
    /// Bounded sources that report it: bytes read and in all (0 and 0 when none does).
    pub bytes_read: u64,
    pub bytes_total: u64,
}

impl Default for MetricsSnapshot {
    fn default() -> Self {
        JobMetrics::default().snapshot()
    }
}

impl JobMetrics {
    /// Counters for a dataflow of these stages: name, parallelism, and the capacity of each
    /// input channel (0 for a source).
    pub fn for_stages(stages: &[(String, usize, usize)]) -> Self {
        Self {
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            late_rows: AtomicU64::new(0),
            skipped_rows: AtomicU64::new(0),
            watermark: AtomicI64::new(WATERMARK_MIN),
            newest_event_time: AtomicI64::new(WATERMARK_MIN),
            stages: stages
                .iter()
                .map(|(name, parallelism, queue_capacity)| StageMetrics {
                    name: name.clone(),
                    instances: (0..*parallelism)
                        .map(|_| InstanceMetrics::default())
                        .collect(),
                    queue_capacity: *queue_capacity,
                })
                .collect(),
        }
    }

    /// A source read rows up to this event time.
    pub fn saw_event_time(&self, t: i64) {
        self.newest_event_time.fetch_max(t, Ordering::Relaxed);
    }

    /// Each stage's counters now.
    pub fn stages(&self) -> Vec<StageSnapshot> {
        self.stages
            .iter()
            .map(|s| {
                let sum = |f: fn(&InstanceMetrics) -> &AtomicU64| {
                    s.instances
                        .iter()
                        .map(|i| f(i).load(Ordering::Relaxed))
                        .sum::<u64>()
                };
                StageSnapshot {
                    name: s.name.clone(),
                    parallelism: s.instances.len(),
                    rows_in: sum(|i| &i.rows_in),
                    rows_out: sum(|i| &i.rows_out),
                    watermark: s
                        .instances
                        .iter()
                        .map(|i| i.watermark.load(Ordering::Relaxed))
                        .min()
                        .unwrap_or(WATERMARK_MIN),
                    queued: sum(|i| &i.queued),
                    queue_capacity: s.queue_capacity,
                }
            })
            .collect()
    }

    pub fn add_rows_in(&self, n: u64) {
        self.rows_in.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_rows_out(&self, n: u64) {
        self.rows_out.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_late_rows(&self, n: u64) {
        self.late_rows.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_skipped_rows(&self, n: u64) {
        self.skipped_rows.fetch_add(n, Ordering::Relaxed);
    }
    /// Record the watermark seen at the sink (the job's output watermark).
    pub fn set_watermark(&self, w: i64) {
        self.watermark.fetch_max(w, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            rows_in: self.rows_in.load(Ordering::Relaxed),
            rows_out: self.rows_out.load(Ordering::Relaxed),
            late_rows: self.late_rows.load(Ordering::Relaxed),
            skipped_rows: self.skipped_rows.load(Ordering::Relaxed),
            // What a sink recorded, or the last stage's (the sink's) output watermark.
            watermark: self.watermark.load(Ordering::Relaxed).max(
                self.stages
                    .last()
                    .and_then(|s| {
                        s.instances
                            .iter()
                            .map(|i| i.watermark.load(Ordering::Relaxed))
                            .min()
                    })
                    .unwrap_or(WATERMARK_MIN),
            ),
            newest_event_time: self.newest_event_time.load(Ordering::Relaxed),
            bytes_read: self.progress(|i| &i.progress_read),
            bytes_total: self.progress(|i| &i.progress_total),
        }
    }

    fn progress(&self, f: fn(&InstanceMetrics) -> &AtomicU64) -> u64 {
        self.stages
            .iter()
            .flat_map(|s| &s.instances)
            .map(|i| f(i).load(Ordering::Relaxed))
            .sum()
    }
}
