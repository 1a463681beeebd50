//! Soak: an unbounded Nexmark sink job with 1 s checkpoints, SIGKILLed every minute and
//! resumed, for 30 minutes (`WEIR_SOAK_MINUTES`, `WEIR_SOAK_KILL_SECONDS` to change); the
//! process's RSS sampled every second.
//!
//! The job: `TUMBLE 10 s, count(*) and max(price) by auction` over the bid stream, generated
//! at `WEIR_SOAK_RATE` bids per second of wall-clock time (default 5,000), into an
//! exactly-once file sink. At the end the last process is stopped with SIGTERM (a final
//! checkpoint). The committed output must then equal, row for row, the windows an
//! uninterrupted run over the same (deterministic) events commits up to the same window: no
//! window lost, none duplicated. RSS: the median and peak of each run between kills, and the
//! ratio of the last runs' median to the first's.
//!
//! Run with `cargo build --release --workspace && cargo bench --workspace --bench soak`.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use util::{env_usize, median, weir_binary};

fn spawn(args: &[&str], cwd: &Path) -> Child {
    Command::new(weir_binary())
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir")
}

/// Resident set of `pid` in MiB (`None` once it is gone).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Lets `child` run for `run`, sampling its RSS every second; then stops it with `signal`.
/// Returns the samples. Panics if it exits by itself.
fn run_for(mut child: Child, run: Duration, signal: i32) -> Vec<f64> {
    let deadline = Instant::now() + run;
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("poll weir") {
            panic!("weir exited by itself: {status}");
        }
        if let Some(rss) = rss_mib(child.id()) {
            samples.push(rss);
        }
        std::thread::sleep(Duration::from_secs(1).min(deadline - Instant::now()));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let status = child.wait().expect("wait for weir");
    if signal == libc::SIGTERM {
        assert!(
            status.success() || status.code() == Some(143),
            "weir did not stop cleanly on SIGTERM: {status}"
        );
    }
    samples
}

/// Every line of every committed part file of a file sink directory.
fn committed_lines(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("dir entry").path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut lines: Vec<String> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read part file")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines
}

fn job_sql(events: Option<usize>, rate: usize, out: &Path) -> String {
    let events = events.map_or(String::new(), |n| format!(", events = '{n}'"));
    let rate = match rate {
        0 => String::new(),
        r => format!(", rate = '{r}'"),
    };
    format!(
        "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', stream = 'bid'{events}{rate});
         SET checkpoint_interval = '1s';
         CREATE SINK soak WITH (connector = 'file', path = '{}', format = 'csv') AS
         SELECT window_start, window_end, auction, count(*) AS n, max(price) AS top
         FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
         GROUP BY window_start, window_end, auction;",
        out.display()
    )
}

/// How often each line occurs.
fn count(lines: &[String]) -> BTreeMap<&str, usize> {
    let mut m: BTreeMap<&str, usize> = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_str()).or_default() += 1;
    }
    m
}

/// The window end of a committed line (`window_start,window_end,...`).
fn window_end(line: &str) -> &str {
    line.split(',').nth(1).unwrap_or("")
}

fn main() {
    let minutes = env_usize("WEIR_SOAK_MINUTES", 30);
    let kill_every = Duration::from_secs(env_usize("WEIR_SOAK_KILL_SECONDS", 60) as u64);
    let rate = env_usize("WEIR_SOAK_RATE", 5_000);
    let total = Duration::from_secs(minutes as u64 * 60);
    let work = tempfile::tempdir().unwrap();
    let (data, out) = (work.path().join("data"), work.path().join("out"));
    let script = work.path().join("job.sql");
    std::fs::write(&script, job_sql(None, rate, &out)).unwrap();
    println!(
        "soak: {minutes} min of an unbounded Nexmark TUMBLE job ({rate} bids/s), 1 s \
         checkpoints, SIGKILL every {} s\n",
        kill_every.as_secs()
    );
    println!(
        "{:>4} {:>8} {:>12} {:>12}",
        "run", "seconds", "median MiB", "peak MiB"
    );

    let started = Instant::now();
    let mut runs: Vec<Vec<f64>> = Vec::new();
    let data_arg = data.to_str().unwrap();
    let mut first = true;
    loop {
        let left = total.saturating_sub(started.elapsed());
        let last = left <= kill_every;
        let child = if first {
            spawn(
                &["-f", script.to_str().unwrap(), "--data-dir", data_arg],
                work.path(),
            )
        } else {
            spawn(&["resume", "--data-dir", data_arg], work.path())
        };
        first = false;
        let run = if last { left } else { kill_every };
        let signal = if last { libc::SIGTERM } else { libc::SIGKILL };
        let samples = run_for(child, run, signal);
        println!(
            "{:>4} {:>8} {:>12.0} {:>12.0}",
            runs.len() + 1,
            run.as_secs(),
            median(samples.clone()),
            samples.iter().cloned().fold(0.0, f64::max)
        );
        runs.push(samples);
        if last {
            break;
        }
    }

    let got = committed_lines(&out);
    assert!(!got.is_empty(), "the soak committed nothing");
    let last_end = got.iter().map(|l| window_end(l)).max().unwrap().to_string();
    let windows = got
        .iter()
        .map(|l| window_end(l))
        .collect::<std::collections::BTreeSet<_>>()
        .len();

    // The uninterrupted reference: the same deterministic events, bounded well past the last
    // committed window (10,000 events per second of event time by default), unthrottled.
    let seconds_of_event_time = (windows as u64 + 3) * 10;
    let events = (seconds_of_event_time * 10_000) as usize;
    let ref_dir = work.path().join("reference");
    std::fs::create_dir_all(&ref_dir).unwrap();
    let ref_out = ref_dir.join("out");
    let ref_script = ref_dir.join("job.sql");
    std::fs::write(&ref_script, job_sql(Some(events), 0, &ref_out)).unwrap();
    let status = Command::new(weir_binary())
        .args([
            "-f",
            ref_script.to_str().unwrap(),
            "--data-dir",
            ref_dir.join("data").to_str().unwrap(),
        ])
        .current_dir(&ref_dir)
        .stdout(Stdio::null())
        .status()
        .expect("run the reference");
    assert!(status.success(), "the reference run failed");
    let want: Vec<String> = committed_lines(&ref_out)
        .into_iter()
        .filter(|l| window_end(l) <= last_end.as_str())
        .collect();

    let (g, w) = (count(&got), count(&want));
    let missing = w.keys().filter(|k| !g.contains_key(*k)).count();
    let extra = g
        .iter()
        .filter(|(k, n)| w.get(*k).is_none_or(|m| *n > m))
        .count();
    println!(
        "\ncommitted {} rows in {windows} windows (up to {last_end}); reference {} rows: \
         {missing} missing, {extra} extra or duplicated",
        got.len(),
        want.len()
    );
    let medians: Vec<f64> = runs
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| median(s.clone()))
        .collect();
    let k = (medians.len() / 3).max(1);
    let early = median(medians[..k].to_vec());
    let late = median(medians[medians.len() - k..].to_vec());
    println!(
        "RSS: median of the first {k} runs {early:.0} MiB, of the last {k} {late:.0} MiB \
         (ratio {:.2}); peak {:.0} MiB",
        late / early,
        runs.iter().flatten().cloned().fold(0.0, f64::max)
    );
    assert!(
        missing == 0 && extra == 0,
        "the soak's output differs from the reference"
    );
}
