//! What checkpoints cost, in one run (`cargo bench --workspace --bench checkpoints`):
//!
//! 1. Throughput of an exactly-once sink job (Nexmark bids, TUMBLE 10 s COUNT/MAX by auction,
//!    into a file sink) at checkpoint intervals 100 ms, 1 s and 10 s, as a ratio to the same
//!    job without checkpoints (interval 1 h: none is taken before the job ends), with the
//!    mean and maximum checkpoint duration and the size of the last checkpoint. Also
//!    at-least-once at 1 s. `WEIR_BENCH_EVENTS` events per run (default 10,000,000),
//!    `WEIR_BENCH_RUNS` runs (default 3), medians.
//! 2. Restart with large window state: a job whose open windows hold about
//!    about 14,400,000 distinct groups (`WEIR_BENCH_STATE_ROWS` rows, default 20,000,000, 4 per
//!    millisecond; a 1-hour lateness bound keeps an hour of them open while windows fire) is stopped hard right after a checkpoint (tasks cancelled, no final
//!    checkpoint, as in a crash), then resumed: time to restore (job running again) and to the
//!    first new committed output, and the size of the checkpoint.

mod util;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use util::{env_usize, median, run};
use weir_planner::{Session, SessionConfig};

fn open(data: &Path, parallelism: usize) -> Session {
    Session::open(SessionConfig {
        parallelism,
        data_dir: Some(data.to_path_buf()),
        ..SessionConfig::default()
    })
    .unwrap()
    .0
}

struct Outcome {
    events_per_sec: f64,
    checkpoints: u64,
    mean_ms: f64,
    max_ms: f64,
    last_mb: f64,
}

fn overhead_run(events: usize, interval: &str, delivery: &str) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&dir.path().join("data"), 2);
    run(
        &mut s,
        &format!(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
               WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
             WITH (connector = 'nexmark', stream = 'bid', events = '{events}')"
        ),
    );
    run(&mut s, &format!("SET checkpoint_interval = '{interval}'"));
    run(&mut s, &format!("SET delivery = '{delivery}'"));
    let started = Instant::now();
    run(
        &mut s,
        &format!(
            "CREATE SINK q WITH (connector = 'file', path = '{}', format = 'csv') AS
             SELECT window_start, window_end, auction, count(*) AS n, max(price) AS top
             FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
             GROUP BY window_start, window_end, auction",
            dir.path().join("out").display()
        ),
    );
    let jobs = s.wait_for_jobs(&crossbeam_channel::never()).unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    let m = s.job_metrics("q").unwrap();
    let c = s.job_checkpoints("q").unwrap();
    Outcome {
        events_per_sec: m.rows_in as f64 / secs,
        // The final checkpoint at the end of input is not an interval checkpoint.
        checkpoints: c.completed.saturating_sub(1),
        mean_ms: c.mean_duration.as_secs_f64() * 1e3,
        max_ms: c.max_duration.as_secs_f64() * 1e3,
        last_mb: c.last_bytes as f64 / 1e6,
    }
}

fn overhead(events: usize, runs: usize) {
    println!(
        "1. Checkpoint overhead: Nexmark bids, TUMBLE 10 s COUNT/MAX by auction into a file sink, \
         {events} events, parallelism 2, median of {runs} runs\n"
    );
    let configs = [
        ("none (1 h)", "1h", "exactly_once"),
        ("10 s", "10s", "exactly_once"),
        ("1 s", "1s", "exactly_once"),
        ("100 ms", "100ms", "exactly_once"),
        ("1 s, at-least-once", "1s", "at_least_once"),
    ];
    let mut results: Vec<Vec<Outcome>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (i, (_, interval, delivery)) in configs.iter().enumerate() {
            results[i].push(overhead_run(events, interval, delivery));
        }
    }
    let base = median(results[0].iter().map(|o| o.events_per_sec).collect());
    println!(
        "{:<20} {:>12} {:>9} {:>12} {:>13} {:>12} {:>14}",
        "interval", "events/s", "ratio", "checkpoints", "mean ms", "max ms", "last size MB"
    );
    for (i, (name, _, _)) in configs.iter().enumerate() {
        let r = &results[i];
        let eps = median(r.iter().map(|o| o.events_per_sec).collect());
        // Ratio per run (each run's configs ran back to back), then the median.
        let ratio = median(
            r.iter()
                .zip(&results[0])
                .map(|(o, b)| o.events_per_sec / b.events_per_sec)
                .collect(),
        );
        println!(
            "{:<20} {:>12.0} {:>8.2}x {:>12} {:>13.1} {:>12.1} {:>14.2}",
            name,
            eps,
            ratio,
            median(r.iter().map(|o| o.checkpoints as f64).collect()),
            median(r.iter().map(|o| o.mean_ms).collect()),
            median(r.iter().map(|o| o.max_ms).collect()),
            median(r.iter().map(|o| o.last_mb).collect()),
        );
    }
    println!("(baseline {base:.0} events/s)\n");
}

/// Rows with distinct ids, 4 per millisecond of event time (a 1-hour bound keeps up to
/// 14,400,000 of them in open windows).
fn write_state_input(path: &Path, rows: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let base = 1_704_067_200_000i64;
    writeln!(f, "id,price,ts").unwrap();
    for i in 0..rows as i64 {
        let ms = base + i / 4;
        let dt = chrono::DateTime::from_timestamp_millis(ms).unwrap();
        writeln!(
            f,
            "{i},{},{}",
            (i * 7919) % 100_000,
            dt.format("%Y-%m-%d %H:%M:%S%.3f")
        )
        .unwrap();
    }
}

fn committed_files(out: &Path) -> usize {
    std::fs::read_dir(out)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

fn restart(rows: usize) {
    println!(
        "2. Restart with large state: {rows} rows with distinct keys, TUMBLE 10 s with a 1 h \
         lateness bound (about 14,400,000 groups open once an hour of event time passed), \
         parallelism 2, checkpoint interval 1 s, memory budget 256 MB per task\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("state.csv");
    write_state_input(&input, rows);
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE TABLE t (id BIGINT, price BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '1' HOUR)
         WITH (connector = 'file', path = '{}', header = 'true', rate = '{}')",
        input.display(),
        // About full speed here; it keeps the end of input a few seconds away from the kill.
        2_000_000
    );
    let mut s = open(&data, 2);
    run(&mut s, &ddl);
    run(&mut s, "SET checkpoint_interval = '1s'");
    run(
        &mut s,
        &format!(
            "CREATE SINK big WITH (connector = 'file', path = '{}', format = 'csv') AS
             SELECT window_start, window_end, id, count(*) AS n, sum(price) AS s, max(price) AS m
             FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, id",
            out.display()
        ),
    );
    // Past one hour of event time (14,400,000 rows) windows fire every 40,000 rows while
    // about 14,400,000 groups stay open. Kill right after a checkpoint taken there.
    let target = rows as u64 * 3 / 4;
    while s.job_metrics("big").is_some_and(|m| m.rows_in < target) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let epoch = s.job_checkpoints("big").map_or(0, |c| c.last_epoch);
    while s
        .job_checkpoints("big")
        .is_some_and(|c| c.last_epoch == epoch)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = s.job_checkpoints("big").unwrap();
    let rows_in = s.job_metrics("big").unwrap().rows_in;
    s.abort_job("big");
    drop(s);
    let state_dir = data.join("jobs/big/checkpoints");
    println!(
        "checkpoint {} at {rows_in} rows read: took {:.0} ms; {:.1} MB on disk (all kept checkpoints: {:.1} MB)",
        c.last_epoch,
        c.last_duration.as_secs_f64() * 1e3,
        c.last_bytes as f64 / 1e6,
        weir_engine::checkpoint::disk_usage(&state_dir) as f64 / 1e6
    );
    let files_before = committed_files(&out);
    let started = Instant::now();
    let mut s = open(&data, 2);
    let restored = started.elapsed();
    while committed_files(&out) == files_before {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no new output"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let first_output = started.elapsed();
    println!(
        "restart: job running again after {:.0} ms; first new committed output after {:.0} ms \
         (replay to the next window end, then up to one checkpoint interval, 1 s, before it is visible)",
        restored.as_secs_f64() * 1e3,
        first_output.as_secs_f64() * 1e3
    );
    s.stop_jobs().unwrap();
}

fn main() {
    let events = env_usize("WEIR_BENCH_EVENTS", 10_000_000);
    let runs = env_usize("WEIR_BENCH_RUNS", 3);
    let state_rows = env_usize("WEIR_BENCH_STATE_ROWS", 20_000_000);
    if std::env::var("WEIR_BENCH_SKIP_OVERHEAD").is_err() {
        overhead(events, runs);
    }
    restart(state_rows);
}
