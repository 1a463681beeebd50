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
}

impl Default for JobMetrics {
    fn default() -> Self {
        Self {
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            late_rows: AtomicU64::new(0),
            skipped_rows: AtomicU64::new(0),
            watermark: AtomicI64::new(WATERMARK_MIN),
        }
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
}

impl Default for MetricsSnapshot {
    fn default() -> Self {
        JobMetrics::default().snapshot()
    }
}

impl JobMetrics {
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
            watermark: self.watermark.load(Ordering::Relaxed),
        }
    }
}
