//! Visibility latency against throughput: the trade-off `checkpoint_interval` and `delivery`
//! tune (`cargo bench -p weir-tests --bench latency`).
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

use util::{env_usize, median, run};
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

/// Event time of a `YYYY-MM-DD HH:MM:SS[.ffffff]` value, in ms.
fn parse_ms(text: &str) -> Option<i64> {
    let dt = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(dt.and_utc().timestamp_millis())
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
    let jobs = s
        .wait_for_jobs(&std::sync::atomic::AtomicBool::new(false))
        .unwrap();
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    s.job_metrics("lat").unwrap().rows_in as f64 / started.elapsed().as_secs_f64()
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

struct Row {
    label: &'static str,
    p50: f64,
    p99: f64,
    samples: usize,
    ratio: f64,
}

/// A small SVG chart: latency p50 and p99 (log scale, left) and throughput ratio (right)
/// per setting.
fn svg(rows: &[Row]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 80.0, 80.0, 40.0, 70.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let max_ms = rows.iter().map(|r| r.p99).fold(10.0, f64::max) * 1.5;
    let y_ms = |ms: f64| top + plot_h * (1.0 - (ms.max(1.0).log10() / max_ms.log10()));
    let y_ratio = |r: f64| top + plot_h * (1.0 - (r - 0.8) / 0.4);
    let x = |i: usize| left + plot_w * (i as f64 + 0.5) / rows.len() as f64;
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='{}' y='20' text-anchor='middle' font-size='14'>weir: visibility latency vs throughput (Nexmark bids, TUMBLE 100 ms)</text>\n\
         <line x1='{left}' y1='{top}' x2='{left}' y2='{}' stroke='black'/>\n\
         <line x1='{left}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n\
         <line x1='{}' y1='{top}' x2='{}' y2='{}' stroke='black'/>\n",
        w / 2.0,
        top + plot_h,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        left + plot_w,
        left + plot_w,
        top + plot_h
    );
    let mut ms = 1.0;
    while ms <= max_ms {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='end'>{ms} ms</text>\n<line x1='{left}' y1='{1}' x2='{}' y2='{1}' stroke='#ddd'/>\n",
            left - 6.0,
            y_ms(ms),
            left + plot_w
        ));
        ms *= 10.0;
    }
    for r in [0.8, 0.9, 1.0, 1.1, 1.2] {
        out.push_str(&format!(
            "<text x='{}' y='{}'>{r:.1}x</text>\n",
            left + plot_w + 6.0,
            y_ratio(r)
        ));
    }
    for (series, color, f) in [
        (
            "latency p50",
            "#1f77b4",
            (|r: &Row| r.p50) as fn(&Row) -> f64,
        ),
        ("latency p99", "#d62728", |r: &Row| r.p99),
    ] {
        let points: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{:.1},{:.1}", x(i), y_ms(f(r))))
            .collect();
        out.push_str(&format!(
            "<polyline points='{}' fill='none' stroke='{color}' stroke-width='2'/>\n",
            points.join(" ")
        ));
        for p in &points {
            let (px, py) = p.split_once(',').unwrap();
            out.push_str(&format!(
                "<circle cx='{px}' cy='{py}' r='4' fill='{color}'/>\n"
            ));
        }
        let ly = if series.ends_with("p50") {
            h - 30.0
        } else {
            h - 14.0
        };
        out.push_str(&format!(
            "<line x1='{left}' y1='{ly}' x2='{}' y2='{ly}' stroke='{color}' stroke-width='2'/><text x='{}' y='{}'>{series} (left)</text>\n",
            left + 24.0,
            left + 30.0,
            ly + 4.0
        ));
    }
    let points: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{:.1},{:.1}", x(i), y_ratio(r.ratio)))
        .collect();
    out.push_str(&format!(
        "<polyline points='{}' fill='none' stroke='#2ca02c' stroke-width='2' stroke-dasharray='6 4'/>\n\
         <line x1='{}' y1='{}' x2='{}' y2='{1}' stroke='#2ca02c' stroke-width='2' stroke-dasharray='6 4'/><text x='{}' y='{}'>throughput vs no checkpoints (right)</text>\n",
        points.join(" "),
        left + 260.0,
        h - 30.0,
        left + 284.0,
        left + 290.0,
        h - 26.0
    ));
    for (i, r) in rows.iter().enumerate() {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
            x(i),
            top + plot_h + 18.0,
            r.label
        ));
    }
    out.push_str("</svg>\n");
    out
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
        rows.push(Row {
            label,
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            samples: lat.len(),
            ratio,
        });
    }
    println!(
        "Visibility latency (row ingested -> its window's result visible in the sink) and \
         throughput ratio to no checkpoints ({events} events, medians of 3); parallelism 2\n"
    );
    println!(
        "{:<12} {:>10} {:>10} {:>9} {:>18}",
        "setting", "p50 ms", "p99 ms", "windows", "throughput ratio"
    );
    for r in &rows {
        println!(
            "{:<12} {:>10.0} {:>10.0} {:>9} {:>17.2}x",
            r.label, r.p50, r.p99, r.samples, r.ratio
        );
    }
    println!("(no-checkpoint baseline {base:.0} events/s)");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/latency.svg");
    std::fs::write(&path, svg(&rows)).unwrap();
    println!("chart: {}", path.display());
}
