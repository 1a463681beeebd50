//! Kafka -> weir -> Kafka, measured (`cargo bench --workspace --bench kafka`), against the
//! tests' broker (tansu, started here on a free port; `scripts/setup.sh --tests` builds it).
//!
//! The job: JSON rows `{k, v, ts}` from a 3-partition topic, TUMBLE 1 s count and sum by `k`
//! (20 keys), into a 2-partition topic, at parallelism 2, watermark without slack.
//!
//! Latency: a producer writes rows stamped with the wall clock (`WEIR_BENCH_RATE` rows/s,
//! default 3,000, spread over the partitions every 20 ms); a consumer reads the output topic
//! with `isolation.level = read_committed` (the last stable offset holds it back while a
//! transaction is open). A result's latency is the moment the consumer first sees it minus its
//! `window_end`, the earliest moment the window could be complete. p50 and p99 over the
//! results after a 3 s warm-up, for exactly-once at checkpoint intervals of 100 ms, 1 s and
//! 10 s, and at-least-once at 1 s.
//!
//! Throughput: `WEIR_BENCH_ROWS` rows (default 300,000) already in the topic, read to the end
//! (`stop_at = 'end'`): rows/s of each setting as a ratio to at-least-once at 1 s (medians
//! of 3).
//!
//! Duplicates: the same bounded job as a `weir` process (build it first: `cargo build
//! --release`), SIGKILLed `WEIR_BENCH_KILLS` times (default 5) at random moments and resumed,
//! at-least-once and exactly-once: how many rows read_uncommitted and read_committed
//! consumers see for how many distinct results.
//!
//! Prints a table and writes `docs/kafka.svg`.

#[allow(dead_code)]
#[path = "../tests/common/kafka.rs"]
mod broker;
#[allow(dead_code)]
#[path = "../tests/common/process.rs"]
mod process;
mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use broker::Broker;
use chrono::DateTime;
use rand::rngs::StdRng;
use rand::SeedableRng;
use util::{env_usize, latency_chart, median, parse_ms, print_chart_rows, run, ChartRow};
use weir_connectors::kafka::consumer;
use weir_planner::{Session, SessionConfig};

const PARTITIONS: i32 = 3;
const KEYS: usize = 20;
const WARM_UP: Duration = Duration::from_secs(3);

fn ts_text(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn row(i: usize, ts: i64) -> String {
    format!(
        "{{\"k\": \"k{}\", \"v\": {}, \"ts\": \"{}\"}}",
        i % KEYS,
        i % 1000,
        ts_text(ts)
    )
}

/// The job's statements; `source` is more WITH options of the table.
fn statements(
    broker: &Broker,
    out: &str,
    interval: &str,
    delivery: &str,
    source: &str,
) -> [String; 4] {
    let b = broker.bootstrap();
    [
        format!(
            "CREATE TABLE events (k VARCHAR, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
             WITH (connector = 'kafka', topic = 'events', bootstrap_servers = '{b}',
                   format = 'json'{source})"
        ),
        format!("SET checkpoint_interval = '{interval}'"),
        format!("SET delivery = '{delivery}'"),
        format!(
            "CREATE SINK agg WITH (connector = 'kafka', topic = '{out}', bootstrap_servers = '{b}',
                   format = 'csv', key = 'k') AS
             SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total
             FROM TUMBLE(events, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end, k"
        ),
    ]
}

/// Starts the job in a new session.
fn start(
    broker: &Broker,
    dir: &Path,
    out: &str,
    interval: &str,
    delivery: &str,
    source: &str,
) -> Session {
    let (mut s, _) = Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(dir.join("data")),
        ..SessionConfig::default()
    })
    .unwrap();
    for statement in statements(broker, out, interval, delivery, source) {
        run(&mut s, &statement);
    }
    s
}

/// Window ends of the values newly committed in `topic` since `offsets`.
fn poll_committed(
    cluster: &mut weir_connectors::kafka::Cluster,
    topic: &str,
    offsets: &mut BTreeMap<i32, i64>,
) -> Vec<i64> {
    let parts: Vec<(i32, i64)> = offsets.iter().map(|(p, o)| (*p, *o)).collect();
    let data = consumer::fetch(cluster, topic, &parts, Duration::from_millis(5), 1 << 20)
        .expect("fetch the output topic");
    let mut ends = Vec::new();
    for d in data {
        offsets.insert(d.partition, d.next_offset);
        for r in d.records {
            let text = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            if let Some(end) = text.split(',').nth(1).and_then(parse_ms) {
                ends.push(end);
            }
        }
    }
    ends
}

/// Runs the job on a live topic for `secs` and returns the latencies (ms) of the results.
fn latencies(interval: &str, delivery: &str, secs: u64, rate: usize) -> Vec<f64> {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    broker.create_topic("out", 2);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut session = start(&broker, dir.path(), "out", interval, delivery, "");
    let producing = AtomicBool::new(true);
    let mut result = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let per_tick = (rate / 50).max(1);
            let mut i = 0;
            let mut tick = Instant::now();
            while started.elapsed() < Duration::from_secs(secs) {
                let ts = now_ms();
                for p in 0..PARTITIONS {
                    let values: Vec<String> = (0..per_tick / PARTITIONS as usize + 1)
                        .map(|j| row(i + j, ts))
                        .collect();
                    i += values.len();
                    broker.produce("events", p, &values);
                }
                tick += Duration::from_millis(20);
                std::thread::sleep(tick.saturating_duration_since(Instant::now()));
            }
            producing.store(false, Ordering::SeqCst);
        });
        let mut cluster = broker.cluster();
        let mut offsets: BTreeMap<i32, i64> = (0..2).map(|p| (p, 0)).collect();
        let warm = now_ms() + WARM_UP.as_millis() as i64;
        while producing.load(Ordering::SeqCst) {
            let ends = poll_committed(&mut cluster, "out", &mut offsets);
            let now = now_ms();
            for end in ends {
                if end > warm {
                    result.push((now - end) as f64);
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    session.stop_jobs().unwrap();
    result
}

/// Rows/s of the job reading `rows` rows already in the topic to its end.
fn throughput(broker: &Broker, out: &str, interval: &str, delivery: &str, rows: usize) -> f64 {
    broker.create_topic(out, 2);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut s = start(
        broker,
        dir.path(),
        out,
        interval,
        delivery,
        ", stop_at = 'end'",
    );
    let jobs = s.wait_for_jobs(&crossbeam_channel::never()).unwrap();
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    let secs = started.elapsed().as_secs_f64();
    let read = s.job_metrics("agg").unwrap().rows_in as f64;
    assert_eq!(read as usize, rows, "{out}: rows read");
    read / secs
}

/// The bounded job as a `weir` process, SIGKILLed `kills` times at random moments and resumed
/// each time: (rows a read_uncommitted consumer sees, rows a read_committed one sees, distinct
/// results).
fn after_kills(
    broker: &Broker,
    out: &str,
    delivery: &str,
    kills: usize,
    seed: u64,
) -> (usize, usize, usize) {
    broker.create_topic(out, 2);
    let dir = tempfile::tempdir().unwrap();
    // Slowed down so that the job runs for several seconds and the kills land inside it.
    let script = statements(
        broker,
        out,
        "1s",
        delivery,
        ", stop_at = 'end', rate = '20000'",
    )
    .join(";\n")
        + ";\n";
    let path = dir.path().join("job.sql");
    std::fs::write(&path, script).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let resumes = vec![2; kills - 1];
    process::kill_and_resume(
        &path,
        &dir.path().join("data"),
        "agg",
        dir.path(),
        &mut rng,
        (1_000, 3_000),
        &resumes,
        (1_000, 3_000),
        None,
    );
    let values = |by_partition: BTreeMap<i32, Vec<String>>| -> Vec<String> {
        by_partition.into_values().flatten().collect()
    };
    let uncommitted = values(broker::read_uncommitted(broker, out));
    let committed = values(broker::read_committed(broker, out));
    let distinct: BTreeSet<String> = uncommitted
        .iter()
        .map(|r| r.split(',').take(3).collect::<Vec<_>>().join(","))
        .collect();
    (uncommitted.len(), committed.len(), distinct.len())
}

fn main() {
    let rate = env_usize("WEIR_BENCH_RATE", 3_000);
    let rows = env_usize("WEIR_BENCH_ROWS", 300_000);
    let configs: [(&str, &str, &str, u64); 4] = [
        ("EO 100 ms", "100ms", "exactly_once", 15),
        ("EO 1 s", "1s", "exactly_once", 15),
        ("EO 10 s", "10s", "exactly_once", 45),
        ("ALO 1 s", "1s", "at_least_once", 15),
    ];
    // Throughput: one broker, one input topic, a new output topic per run.
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let base = now_ms() - 3_600_000;
    for p in 0..PARTITIONS {
        let n = rows / PARTITIONS as usize;
        let values: Vec<String> = (0..n).map(|i| row(i, base + (i as i64) * 3)).collect();
        for chunk in values.chunks(5_000) {
            broker.produce("events", p, chunk);
        }
    }
    let rows = rows / PARTITIONS as usize * PARTITIONS as usize;
    let mut runs = 0;
    let mut rate_of = |interval: &str, delivery: &str| {
        median(
            (0..3)
                .map(|_| {
                    runs += 1;
                    throughput(&broker, &format!("t{runs}"), interval, delivery, rows)
                })
                .collect(),
        )
    };
    let alo = rate_of("1s", "at_least_once");
    let mut table = Vec::new();
    for (label, interval, delivery, secs) in configs {
        let lat = latencies(interval, delivery, secs, rate);
        assert!(lat.len() >= 10, "{label}: only {} results seen", lat.len());
        let ratio = if delivery == "at_least_once" && interval == "1s" {
            1.0
        } else {
            rate_of(interval, delivery) / alo
        };
        table.push(ChartRow::new(label, &lat, ratio));
    }
    println!(
        "Kafka -> weir (TUMBLE 1 s by key, parallelism 2) -> Kafka, tansu broker on loopback.\n\
         Latency: window end -> result visible to a read_committed consumer, {rate} rows/s live.\n\
         Throughput: {rows} rows read to the end, ratio to at-least-once at 1 s ({alo:.0} rows/s), \
         medians of 3.\n"
    );
    print_chart_rows(&table, "results");
    let kills = env_usize("WEIR_BENCH_KILLS", 5);
    println!(
        "\nDuplicates after {kills} SIGKILLs and resumes (checkpoints every 1 s, the {rows} rows \
         read at 40,000 rows/s):\n"
    );
    println!("| delivery | results | read_uncommitted sees | read_committed sees |");
    println!("|---|---|---|---|");
    for (i, delivery) in ["at_least_once", "exactly_once"].iter().enumerate() {
        let (uncommitted, committed, distinct) =
            after_kills(&broker, &format!("k{i}"), delivery, kills, 7 + i as u64);
        println!(
            "| {delivery} | {distinct} | {uncommitted} ({:+}) | {committed} ({:+}) |",
            uncommitted as i64 - distinct as i64,
            committed as i64 - distinct as i64
        );
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/kafka.svg");
    let chart = latency_chart(
        "weir: Kafka -> Kafka, result visible to read_committed vs throughput",
        "throughput vs at-least-once 1 s",
        &table,
    );
    std::fs::write(&path, chart).unwrap();
    println!("chart: {}", path.display());
}
