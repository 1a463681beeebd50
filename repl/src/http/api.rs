//! `/api/jobs` (every job, with its counters) and `/api/jobs/NAME` (one job with its
//! dataflow, per-stage counters, checkpoint history and SQL): what the dashboard draws.
//! Counters are totals; rates are the client's difference between two polls.

use serde_json::{json, Value};
use weir_engine::checkpoint::disk_usage;
use weir_planner::display::format_timestamp;
use weir_planner::jobs::JobView;
use weir_planner::JobObserver;

/// Milliseconds since the epoch of a nanosecond event time (`null` before any).
fn millis(t: i64) -> Value {
    if t == i64::MIN || t == i64::MAX {
        Value::Null
    } else {
        json!(t / 1_000_000)
    }
}

fn timestamp_text(t: i64) -> Value {
    if t == i64::MIN || t == i64::MAX {
        Value::Null
    } else {
        json!(format_timestamp(t))
    }
}

fn summary(job: &JobView) -> Value {
    let m = &job.metrics;
    let c = job.checkpoints.as_ref();
    json!({
        "name": job.name,
        "state": job.state.as_str(),
        "error": job.error,
        "delivery": if job.exactly_once { "exactly_once" } else { "at_least_once" },
        "checkpoint_interval_ms": job.checkpoint_interval_ms,
        "restarts": job.restarts,
        "last_restart_cause": job.last_failure,
        "rows_in": m.rows_in,
        "rows_out": m.rows_out,
        "late_rows": m.late_rows,
        "skipped_rows": m.skipped_rows,
        "watermark_ms": millis(m.watermark),
        "watermark": timestamp_text(m.watermark),
        "newest_event_time_ms": millis(m.newest_event_time),
        "checkpoint": c.map(|c| json!({
            "completed": c.completed,
            "failed": c.failed,
            "last_epoch": c.last_epoch,
            "last_duration_ms": c.last_duration.as_secs_f64() * 1000.0,
            "mean_duration_ms": c.mean_duration.as_secs_f64() * 1000.0,
            "max_duration_ms": c.max_duration.as_secs_f64() * 1000.0,
            "last_bytes": c.last_bytes,
            "last_completed_ms": c.last_completed_ms,
            "last_error": c.last_error,
        })),
        "stages": job.shape.len(),
    })
}

/// Every job this process runs or ran, by name.
pub fn jobs(observer: &JobObserver) -> Value {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let jobs: Vec<Value> = observer.jobs().iter().map(summary).collect();
    json!({ "now_ms": now_ms, "jobs": jobs })
}

/// One job in full, `None` if this process does not know it.
pub fn job(observer: &JobObserver, name: &str) -> Option<Value> {
    let jobs = observer.jobs();
    let job = jobs.iter().find(|j| j.name == name)?;
    let mut out = summary(job);
    let stages: Vec<Value> = job
        .shape
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let live = job.stages.get(i);
            json!({
                "index": i,
                "name": shape.name,
                "parallelism": shape.parallelism,
                "inputs": shape.inputs.iter().map(|(from, how)| json!({
                    "from": from,
                    "partitioning": how,
                })).collect::<Vec<_>>(),
                "operators": shape.operators,
                "rows_in": live.map(|s| s.rows_in),
                "rows_out": live.map(|s| s.rows_out),
                "watermark_ms": live.map(|s| millis(s.watermark)),
                "queued": live.map(|s| s.queued),
                "queue_capacity": live.map(|s| s.queue_capacity),
            })
        })
        .collect();
    let history: Vec<Value> = job
        .history
        .iter()
        .map(|r| {
            json!({
                "epoch": r.epoch,
                "completed_ms": r.completed_ms,
                "duration_ms": r.duration.as_secs_f64() * 1000.0,
                "bytes": r.bytes,
            })
        })
        .collect();
    if let Some(o) = out.as_object_mut() {
        o.insert("statement".into(), json!(job.statement));
        o.insert("stages".into(), json!(stages));
        o.insert("checkpoints".into(), json!(history));
        o.insert("state_bytes".into(), json!(disk_usage(&job.dir)));
    }
    Some(out)
}
