//! Peak memory of large windowed state against `memory_budget`, over 5,000,000 distinct keys
//! (`WEIR_BENCH_KEYS` to change), one hour of event time, run by the release `weir -f` binary
//! at 16 MB, 256 MB and 1 GB budgets:
//! - `TUMBLE 1 h` grouped by the key: one window of every key;
//! - `SESSION` with a 1 h gap by the key: a session per key, all open until the end, and a
//!   result of one window per row (the result stage holds each until its watermark).
//!
//! For each run it prints the peak RSS of the process (`wait4`'s `ru_maxrss`), the same for
//! a scan of the same file (`SELECT count(*)`: the process, DataFusion, the file reader: the
//! fixed overhead), the time, and the result's digest, which must be the same at every
//! budget. State past the budget goes to the task's RocksDB store. Each figure is the median
//! of `WEIR_BENCH_RUNS` runs (default 1). Run with `cargo bench --workspace --bench memory`
//! after `cargo build --release --workspace`.

mod util;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use util::{env_usize, median, weir_binary};

/// `keys` rows, one per key (random 40-bit keys, so a few repeat), evenly over one hour.
fn write_rows(path: &Path, keys: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let base = 1_704_067_200_000i64;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    writeln!(f, "k,v,ts").unwrap();
    for i in 0..keys as i64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let ms = base + i * 3_600_000 / keys as i64;
        let dt = chrono::DateTime::from_timestamp_millis(ms).unwrap();
        writeln!(
            f,
            "{},{},{}",
            state >> 24,
            i % 1000,
            dt.format("%Y-%m-%d %H:%M:%S%.3f")
        )
        .unwrap();
    }
}

/// Runs `weir -f` on `script`, its output to `out`: (peak RSS in MiB, seconds). The child
/// is reaped by `wait4`, which also reports its peak RSS.
#[allow(clippy::zombie_processes)]
fn run_weir(script: &Path, out: &Path) -> (f64, f64) {
    let started = Instant::now();
    let child = Command::new(weir_binary())
        .args(["-f", script.to_str().unwrap(), "--format", "csv"])
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "weir -f {} failed (status {status})",
        script.display()
    );
    // ru_maxrss is in KiB on Linux.
    (usage.ru_maxrss as f64 / 1024.0, secs)
}

/// A digest of the result file and its data lines.
fn digest(path: &Path) -> (u64, usize) {
    let text = std::fs::read(path).unwrap();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in &text {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let lines = text.iter().filter(|b| **b == b'\n').count();
    (h, lines.saturating_sub(1))
}

fn main() {
    let keys = env_usize("WEIR_BENCH_KEYS", 5_000_000);
    let runs = env_usize("WEIR_BENCH_RUNS", 1).max(1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("keys.csv");
    write_rows(&data, keys);
    let table = format!(
        "CREATE TABLE t (k BIGINT, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH (connector = 'file', path = '{}', header = 'true');",
        data.display()
    );
    let script = |name: &str, budget: &str, query: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("SET memory_budget = '{budget}';\n{table}\n{query}\n"),
        )
        .unwrap();
        path
    };
    let out = dir.path().join("out.csv");
    let measure = |path: &Path| {
        let (mut rss, mut secs) = (Vec::new(), Vec::new());
        let mut result = (0, 0);
        for _ in 0..runs {
            let (r, s) = run_weir(path, &out);
            rss.push(r);
            secs.push(s);
            result = digest(&out);
        }
        (median(rss), median(secs), result)
    };

    println!(
        "{keys} rows of distinct keys over one hour; peak RSS of `weir -f`; median of {runs} \
         run(s)\n"
    );
    let scan = script("scan.sql", "16MB", "SELECT count(*) FROM t;");
    let (base_rss, base_secs, _) = measure(&scan);
    println!(
        "{:<40} {:>10} {:>14} {:>9} {:>10}",
        "run", "peak MiB", "over scan MiB", "seconds", "rows"
    );
    println!(
        "{:<40} {:>10.0} {:>14} {:>9.2} {:>10}",
        "scan only: SELECT count(*)", base_rss, "-", base_secs, 1
    );
    let queries = [
        (
            "TUMBLE 1 h by k",
            "SELECT window_start, k, count(*), sum(v)
             FROM TUMBLE(t, ts, INTERVAL '1' HOUR) GROUP BY window_start, window_end, k;",
        ),
        (
            "SESSION 1 h by k",
            "SELECT k, window_start, window_end, count(*), sum(v)
             FROM SESSION(t, ts, INTERVAL '1' HOUR, k) GROUP BY k, window_start, window_end;",
        ),
    ];
    for (i, (name, query)) in queries.into_iter().enumerate() {
        let mut results = Vec::new();
        for budget in ["16MB", "256MB", "1GB"] {
            let path = script(&format!("q{i}-{budget}.sql"), budget, query);
            let (rss, secs, result) = measure(&path);
            println!(
                "{:<40} {:>10.0} {:>14.0} {:>9.2} {:>10}",
                format!("{name}, memory_budget = {budget}"),
                rss,
                rss - base_rss,
                secs,
                result.1
            );
            results.push(result);
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "{name}: every budget gives the same result: {results:?}"
        );
        println!(
            "{name}: the result is byte-identical at every budget ({} rows)\n",
            results[0].1
        );
    }
}
