//! `/metrics`: the jobs' counters in Prometheus' text format, built per scrape from the
//! jobs' own counters (the `prometheus` crate's data model and text encoder).
//!
//! Per job (label `job`): rows in / out / late / skipped, the watermark, how far it trails the
//! newest event time and the wall clock, checkpoints (completed, failed, a duration
//! histogram, size, epoch), restarts, state on disk. Per stage (labels `job`, `stage`,
//! `index`): rows in / out, watermark, parallelism, and queued messages next to the queues'
//! capacity (a stage whose queues stay full is the bottleneck, the rest are backpressured).

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};
use weir_engine::checkpoint::disk_usage;
use weir_planner::jobs::{JobState, JobView};

const NANOS: f64 = 1e9;

/// One metric family being filled.
struct Family {
    inner: MetricFamily,
}

impl Family {
    fn new(name: &str, help: &str, kind: MetricType) -> Self {
        let mut inner = MetricFamily::default();
        inner.set_name(name.to_string());
        inner.set_help(help.to_string());
        inner.set_field_type(kind);
        Self { inner }
    }

    fn push(&mut self, labels: &[(&str, &str)], fill: impl FnOnce(&mut Metric)) {
        let mut m = Metric::default();
        m.set_label(
            labels
                .iter()
                .map(|(k, v)| {
                    let mut p = LabelPair::default();
                    p.set_name(k.to_string());
                    p.set_value(v.to_string());
                    p
                })
                .collect(),
        );
        fill(&mut m);
        self.inner.mut_metric().push(m);
    }

    fn value(&mut self, labels: &[(&str, &str)], v: f64) {
        let kind = self.inner.get_field_type();
        self.push(labels, |m| {
            if kind == MetricType::COUNTER {
                let mut c = Counter::default();
                c.set_value(v);
                m.set_counter(c);
            } else {
                let mut g = Gauge::default();
                g.set_value(v);
                m.set_gauge(g);
            }
        });
    }
}

fn counter(name: &str, help: &str) -> Family {
    Family::new(name, help, MetricType::COUNTER)
}

fn gauge(name: &str, help: &str) -> Family {
    Family::new(name, help, MetricType::GAUGE)
}

/// Seconds since the epoch of a nanosecond event time, `None` before any.
fn seconds(t: i64) -> Option<f64> {
    (t != i64::MIN && t != i64::MAX).then(|| t as f64 / NANOS)
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The text of `/metrics` for these jobs.
pub fn render(jobs: &[JobView]) -> String {
    let mut up = gauge("weir_job_running", "1 while the job runs, 0 after it ended");
    let mut rows_in = counter("weir_job_rows_in_total", "Rows the job's sources read");
    let mut rows_out = counter("weir_job_rows_out_total", "Rows the job's sink received");
    let mut late = counter(
        "weir_job_late_rows_total",
        "Rows dropped because every window they belong to had closed",
    );
    let mut skipped = counter(
        "weir_job_skipped_rows_total",
        "Malformed rows skipped (bad_rows = 'skip')",
    );
    let mut watermark = gauge(
        "weir_job_watermark_seconds",
        "The job's output watermark (seconds since the epoch)",
    );
    let mut newest = gauge(
        "weir_job_newest_event_time_seconds",
        "The newest event time the sources read (seconds since the epoch)",
    );
    let mut lag = gauge(
        "weir_job_watermark_lag_seconds",
        "How far the watermark trails the newest event time (behind=\"event_time\") and the \
         wall clock (behind=\"wall_clock\")",
    );
    let mut restarts = counter(
        "weir_job_restarts_total",
        "Restarts from a checkpoint after failures",
    );
    let mut state_bytes = gauge(
        "weir_job_state_bytes",
        "Bytes on disk of the job's working state and retained checkpoints",
    );
    let mut cp_done = counter("weir_checkpoints_completed_total", "Completed checkpoints");
    let mut cp_failed = counter("weir_checkpoints_failed_total", "Failed checkpoints");
    let mut cp_epoch = gauge(
        "weir_checkpoint_last_epoch",
        "Epoch of the newest completed checkpoint",
    );
    let mut cp_bytes = gauge(
        "weir_checkpoint_last_size_bytes",
        "Bytes the newest checkpoint wrote",
    );
    let mut cp_age = gauge(
        "weir_checkpoint_last_age_seconds",
        "Seconds since the newest checkpoint completed",
    );
    let mut cp_duration = Family::new(
        "weir_checkpoint_duration_seconds",
        "From barrier injection to the manifest written and output committed",
        MetricType::HISTOGRAM,
    );
    let mut st_in = counter("weir_stage_rows_in_total", "Rows a stage took in");
    let mut st_out = counter("weir_stage_rows_out_total", "Rows a stage sent downstream");
    let mut st_wm = gauge(
        "weir_stage_watermark_seconds",
        "A stage's lowest output watermark over its instances",
    );
    let mut st_par = gauge("weir_stage_parallelism", "Instances of a stage");
    let mut st_queued = gauge(
        "weir_stage_queued_messages",
        "Messages waiting in a stage's input channels (backpressure)",
    );
    let mut st_capacity = gauge(
        "weir_stage_queue_capacity",
        "Capacity of each of a stage's input channels",
    );
    let now = now_seconds();
    for job in jobs {
        let name = job.name.as_str();
        let l = [("job", name)];
        let m = &job.metrics;
        up.value(&l, f64::from(u8::from(job.state == JobState::Running)));
        rows_in.value(&l, m.rows_in as f64);
        rows_out.value(&l, m.rows_out as f64);
        late.value(&l, m.late_rows as f64);
        skipped.value(&l, m.skipped_rows as f64);
        restarts.value(&l, f64::from(job.restarts));
        state_bytes.value(&l, disk_usage(&job.dir) as f64);
        if let Some(w) = seconds(m.watermark) {
            watermark.value(&l, w);
            lag.value(&[("job", name), ("behind", "wall_clock")], now - w);
            if let Some(n) = seconds(m.newest_event_time) {
                lag.value(&[("job", name), ("behind", "event_time")], (n - w).max(0.0));
            }
        }
        if let Some(n) = seconds(m.newest_event_time) {
            newest.value(&l, n);
        }
        if let Some(c) = &job.checkpoints {
            cp_done.value(&l, c.completed as f64);
            cp_failed.value(&l, c.failed as f64);
            cp_epoch.value(&l, c.last_epoch as f64);
            cp_bytes.value(&l, c.last_bytes as f64);
            if c.last_completed_ms > 0 {
                cp_age.value(&l, (now - c.last_completed_ms as f64 / 1000.0).max(0.0));
            }
            cp_duration.push(&l, |metric| {
                let mut h = Histogram::default();
                h.set_sample_count(c.completed);
                h.set_sample_sum(c.total_duration.as_secs_f64());
                h.set_bucket(
                    c.duration_buckets
                        .iter()
                        .map(|&(le, n)| {
                            let mut b = Bucket::default();
                            b.set_upper_bound(le);
                            b.set_cumulative_count(n);
                            b
                        })
                        .collect(),
                );
                metric.set_histogram(h);
            });
        }
        for (i, s) in job.stages.iter().enumerate() {
            let index = i.to_string();
            let l = [("job", name), ("stage", s.name.as_str()), ("index", &index)];
            st_in.value(&l, s.rows_in as f64);
            st_out.value(&l, s.rows_out as f64);
            st_par.value(&l, s.parallelism as f64);
            st_queued.value(&l, s.queued as f64);
            st_capacity.value(&l, s.queue_capacity as f64);
            if let Some(w) = seconds(s.watermark) {
                st_wm.value(&l, w);
            }
        }
    }
    let families: Vec<MetricFamily> = [
        up,
        rows_in,
        rows_out,
        late,
        skipped,
        watermark,
        newest,
        lag,
        restarts,
        state_bytes,
        cp_done,
        cp_failed,
        cp_epoch,
        cp_bytes,
        cp_age,
        cp_duration,
        st_in,
        st_out,
        st_wm,
        st_par,
        st_queued,
        st_capacity,
    ]
    .into_iter()
    .map(|f| f.inner)
    // The encoder refuses a family without samples.
    .filter(|f| !f.get_metric().is_empty())
    .collect();
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&families, &mut buf) {
        Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
        Err(e) => format!("# error encoding metrics: {e}\n"),
    }
}
