//! Visibility latency against throughput: the trade-off `checkpoint_interval` and `delivery`
//! tune (`cargo bench --workspace --bench latency`).
//!
//! Latency: Nexmark bids at 9,200 bids/s of wall clock with the generator's event time locked
//! to the wall clock (10,000 events/s of event time, bids are 46 of every 50 events), TUMBLE
//! 100 ms COUNT(*) into a file sink, watermark without slack. A window ending at event time e
//! could be complete when the source has read e, i.e. at `start + (e - base)` of wall clock;
//! its latency is the moment its row appears in a committed (visible) part file minus that.
//! p50 and p99 over the windows after a 2 s warm-up.
//!
//! Overhead: the same query over 3,000,000 unthrottled events, as a ratio to the same job
//! checkpointing every hour (none taken).
//!
//! Prints a table and writes `docs/latency.svg` (latency p50/p99 and throughput ratio per
//! setting).

mod util;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use util::{env_usize, latency_chart, median, parse_ms, print_chart_rows, run, ChartRow};
use weir_planner::{Session, SessionConfig};

const BASE_MS: i64 = 1_704_067_200_000; // 2024-01-01 00:00:00 UTC

fn open(data: &Path) -> Session {
    Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(data.to_path_buf()),
        ..SessionConfig::default()
    })
    .unwrap()
    .0
}

fn start_job(dir: &Path, interval: &str, delivery: &str, events: &str, rate: &str) -> Session {
    let mut s = open(&dir.join("data"));
    run(
        &mut s,
        &format!(
            "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
               WATERMARK FOR date_time AS date_time)
             WITH (connector = 'nexmark', stream = 'bid', event_rate = '10000',
                   base_time = '{BASE_MS}'{events}{rate})"
        ),
    );
    run(&mut s, &format!("SET checkpoint_interval = '{interval}'"));
    run(&mut s, &format!("SET delivery = '{delivery}'"));
    run(
        &mut s,
        &format!(
            "CREATE SINK lat WITH (connector = 'file', path = '{}', format = 'csv') AS
             SELECT window_end, count(*) AS n FROM TUMBLE(bid, date_time, INTERVAL '100' MILLISECOND)
             GROUP BY window_start, window_end",
            dir.join("out").display()
        ),
    );
    s
}

/// Runs the throttled job for `secs` and returns the latencies (ms) of the windows seen.
fn latencies(interval: &str, delivery: &str, secs: u64) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let started = Instant::now();
    let mut s = start_job(dir.path(), interval, delivery, "", ", rate = '9200'");
    let mut offsets: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen: HashSet<i64> = HashSet::new();
    let mut result = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        let now_ms = started.elapsed().as_secs_f64() * 1e3;
        let entries = std::fs::read_dir(&out).map(|d| d.filter_map(|e| e.ok()).collect::<Vec<_>>());
        for entry in entries.unwrap_or_default() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let from = offsets.get(&name).copied().unwrap_or(0);
            // Only whole lines: an at-least-once file may be mid-write.
            let upto = text.rfind('\n').map_or(0, |i| i + 1);
            if upto <= from {
                continue;
            }
            for line in text[from..upto].lines() {
                let Some(end) = line.split(',').next().and_then(parse_ms) else {
                    continue;
                };
                if seen.insert(end) && end - BASE_MS > 2_000 {
                    result.push(now_ms - (end - BASE_MS) as f64);
                }
            }
            offsets.insert(name, upto);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    s.stop_jobs().unwrap();
    result
}

/// Events/s of the unthrottled job.
fn throughput(interval: &str, delivery: &str, events: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut s = start_job(
        dir.path(),
        interval,
        delivery,
        &format!(", events = '{events}'"),
        "",
    );
    let jobs = s.wait_for_jobs(&crossbeam_channel::never()).unwrap();
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    s.job_metrics("lat").unwrap().rows_in as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let events = env_usize("WEIR_BENCH_EVENTS", 3_000_000);
    let configs: [(&str, &str, &str, u64); 4] = [
        ("EO 100 ms", "100ms", "exactly_once", 10),
        ("EO 1 s", "1s", "exactly_once", 14),
        ("EO 10 s", "10s", "exactly_once", 45),
        ("ALO 1 s", "1s", "at_least_once", 10),
    ];
    let base = median(
        (0..3)
            .map(|_| throughput("1h", "exactly_once", events))
            .collect(),
    );
    let mut rows = Vec::new();
    for (label, interval, delivery, secs) in configs {
        let lat = latencies(interval, delivery, secs);
        assert!(lat.len() >= 10, "{label}: only {} windows seen", lat.len());
        let ratio = median(
            (0..3)
                .map(|_| throughput(interval, delivery, events) / base)
                .collect(),
        );
        rows.push(ChartRow::new(label, &lat, ratio));
    }
    println!(
        "Visibility latency (row ingested -> its window's result visible in the sink) and \
         throughput ratio to no checkpoints ({events} events, medians of 3); parallelism 2\n"
    );
    print_chart_rows(&rows, "windows");
    println!("(no-checkpoint baseline {base:.0} events/s)");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/latency.svg");
    let chart = latency_chart(
        "weir: visibility latency vs throughput (Nexmark bids, TUMBLE 100 ms)",
        "throughput vs no checkpoints",
        &rows,
    );
    std::fs::write(&path, chart).unwrap();
    println!("chart: {}", path.display());
}
