//! Every Nexmark query weir runs (`examples/nexmark/*.sql`, as a user runs them) into a
//! blackhole sink, in one run (`cargo bench --workspace --bench nexmark`):
//!
//! - each query over `WEIR_BENCH_EVENTS` events (default 10,000,000; events count persons,
//!   auctions and bids together, as Flink's `nexmark.events.num`), exactly-once with 1 s
//!   checkpoints (`WEIR_BENCH_CHECKPOINT=100ms` for another interval;
//!   `WEIR_BENCH_DELIVERY=at_least_once` or `both` for the other delivery), at
//!   parallelism `WEIR_BENCH_PARALLELISM` (default 2), with as many source partitions, and
//!   the session's `memory_budget` (`WEIR_BENCH_BUDGET=64MB` for another) and `mini_batch`
//!   (`WEIR_BENCH_MINI_BATCH=1s` to apply the updating GROUP BYs' input in mini-batches);
//! - from three sources (`WEIR_BENCH_SOURCE=mem`, `file`, `generator`, or a list such as
//!   `mem,generator`; all three by default): "mem" reads the events files the bench writes
//!   once (Arrow IPC) into memory before the clock starts (`preload_events_file`: decoded and
//!   checked), so the query is timed alone, over events in memory as DataFusion's are (its
//!   peak resident set leaves the events out); "file" reads the same files as the job runs
//!   (the source's `events_file` option, decoded in place from the mapped file, each batch
//!   checked); "gen" generates the events as it goes (the source's Arrow generator), as a
//!   user's job does;
//! - every run in its own process, so its figures are its own: events/s (wall clock),
//!   events per CPU-second ("per core": CPU time of every thread of the job, so a job that
//!   keeps two cores busy counts twice), cores used, peak RSS (with "file", the mapped file's
//!   pages the query touched count too);
//! - every query runs with `runtime_mode = 'streaming'`: the bounded source is treated as
//!   the unbounded stream it stands for, so joins, GROUP BY and Top-N without windows run as
//!   the updating operators (their changelog counted in "rows out"), not as one batch
//!   computation at the end;
//! - the same computation by DataFusion batch SQL over the same events (the events files read
//!   into memory, in one partition and dealt over `parallelism` partitions: the faster counts;
//!   reading not timed) and the
//!   ratio of weir's events/s to DataFusion's: the windowed queries (q5, q7, q8, q11) by
//!   window arithmetic, the others by the query's own SQL;
//! - medians of `WEIR_BENCH_RUNS` runs (default 3). `WEIR_BENCH_QUERIES=q5,q7` picks queries;
//!   `WEIR_BENCH_FILES=dir` writes the events files there and keeps them (for a profiler:
//!   `WEIR_BENCH_CHILD=q7,exactly_once,EVENTS,2,dir` runs one query from them, `mem:dir`
//!   from them in memory).
//!
//! A run of every query writes its table to `docs/nexmark-bench.md` (or to
//! `WEIR_BENCH_TABLE`, which also makes a run of some queries write it).

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use datafusion::prelude::SessionContext;
use util::{env_usize, median, run};
use weir_planner::sql::split_statements;
use weir_planner::{Session, SessionConfig};

const QUERIES: &[&str] = &[
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q10", "q11", "q12", "q14", "q15", "q16",
    "q17", "q18", "q19", "q20", "q21", "q22",
];

/// DataFusion batch SQL computing what each query computes: windows by arithmetic, the other
/// queries as written in their example (the query text DataFusion runs as is). None for q12,
/// whose windows are of the wall clock.
fn batch_sql(query: &str) -> Option<String> {
    if query == "q12" {
        return None;
    }
    windowed_batch_sql(query).map(str::to_string).or_else(|| {
        let script =
            std::fs::read_to_string(workspace().join(format!("examples/nexmark/{query}.sql")))
                .ok()?;
        let (statements, _) = split_statements(&script);
        statements.last().map(|s| s.text.clone())
    })
}

/// DataFusion batch SQL for the windowed queries (windows by arithmetic).
fn windowed_batch_sql(query: &str) -> Option<&'static str> {
    match query {
        "q5" => Some(
            "WITH hopped AS (
               SELECT b.auction, CAST(b.date_time AS BIGINT) / 2000000000 - k.k AS slot
               FROM bid b CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS k(k)
             ), counts AS (
               SELECT auction, slot, count(*) AS num FROM hopped GROUP BY auction, slot
             ), maxima AS (SELECT slot, max(num) AS maxn FROM counts GROUP BY slot)
             SELECT c.auction, c.num FROM counts c JOIN maxima m
               ON c.slot = m.slot AND c.num >= m.maxn",
        ),
        "q7" => Some(
            "WITH w AS (SELECT *, CAST(date_time AS BIGINT) / 10000000000 AS win FROM bid),
                  m AS (SELECT win, max(price) AS maxprice FROM w GROUP BY win)
             SELECT w.auction, w.price, w.bidder, w.date_time, w.extra
             FROM w JOIN m ON w.win = m.win AND w.price = m.maxprice",
        ),
        // Sessions as gaps and islands (tests/tests/nexmark.rs has the reasoning).
        "q11" => Some(
            "WITH t AS (SELECT bidder, CAST(date_time AS BIGINT) AS ns FROM bid),
                  o AS (SELECT bidder, ns,
                          CASE WHEN ns - lag(ns) OVER (PARTITION BY bidder ORDER BY ns)
                                 <= 10000000000 THEN 0 ELSE 1 END AS starts FROM t),
                  s AS (SELECT bidder, ns, sum(starts) OVER (PARTITION BY bidder ORDER BY ns
                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session FROM o)
             SELECT bidder, count(*), min(ns), max(ns) FROM s GROUP BY bidder, session",
        ),
        "q8" => Some(
            "WITH p AS (SELECT DISTINCT id, name, CAST(date_time AS BIGINT) / 10000000000 AS win
                        FROM person),
                  a AS (SELECT DISTINCT seller, CAST(date_time AS BIGINT) / 10000000000 AS win
                        FROM auction)
             SELECT p.id, p.name, p.win FROM p JOIN a ON p.id = a.seller AND p.win = a.win",
        ),
        _ => None,
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// CPU seconds (user + system) of this process, from /proc (clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set of this process in MB (VmHWM).
fn peak_rss_mb() -> f64 {
    rss_mb("VmHWM:")
}

/// A resident set figure of this process in MB (`VmHWM:` the peak, `VmRSS:` now).
fn rss_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The query's script with its tables reading `source`: the events files in that folder, or
/// (`gen`) the generator.
fn script(query: &str, source: &str, events: usize, parallelism: usize) -> String {
    let mut script =
        std::fs::read_to_string(workspace().join(format!("examples/nexmark/{query}.sql"))).unwrap();
    if source != "gen" {
        for stream in ["person", "auction", "bid"] {
            let file = Path::new(source).join(format!("{stream}.arrow"));
            script = script.replace(
                &format!("stream = '{stream}', events = '1000000'"),
                &format!(
                    "stream = '{stream}', events_file = '{}', partitions = '{parallelism}'",
                    file.display()
                ),
            );
        }
    }
    script.replace(
        "events = '1000000'",
        &format!("events = '{events}', partitions = '{parallelism}'"),
    )
}

/// One run of one query in this process; prints `RESULT wall cpu rss rows_out late_rows`.
fn child(query: &str, delivery: &str, events: usize, parallelism: usize, source: &str) {
    // "mem:DIR": the events files in DIR read into memory (decoded and checked) before the
    // clock starts, as DataFusion's tables; the peak resident set then leaves them out.
    let (source, preloaded_mb) = match source.strip_prefix("mem:") {
        Some(dir) => (dir, preload(query, Path::new(dir))),
        None => (source, 0.0),
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Session::open(SessionConfig {
        parallelism,
        data_dir: Some(dir.path().join("data")),
        ..SessionConfig::default()
    })
    .unwrap();
    let script = script(query, source, events, parallelism);
    assert_eq!(
        script.matches("connector = 'nexmark'").count(),
        script.matches("partitions = '").count(),
        "{query}: a table the bench did not size"
    );
    let (statements, _) = split_statements(&script);
    let (select, tables) = statements.split_last().unwrap();
    for t in tables {
        run(&mut s, &t.text);
    }
    run(
        &mut s,
        &format!("SET checkpoint_interval = '{}'", checkpoint_interval()),
    );
    run(&mut s, "SET runtime_mode = 'streaming'");
    run(&mut s, &format!("SET delivery = '{delivery}'"));
    if let Ok(budget) = std::env::var("WEIR_BENCH_BUDGET") {
        run(&mut s, &format!("SET memory_budget = '{budget}'"));
    }
    if let Ok(mini_batch) = std::env::var("WEIR_BENCH_MINI_BATCH") {
        run(&mut s, &format!("SET mini_batch = '{mini_batch}'"));
    }
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    run(
        &mut s,
        &format!(
            "CREATE SINK {query} WITH (connector = 'blackhole') AS {}",
            select.text
        ),
    );
    let jobs = s.wait_for_jobs(&crossbeam_channel::never()).unwrap();
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    let m = s.job_metrics(query).unwrap();
    println!(
        "RESULT {wall} {cpu} {} {} {}",
        peak_rss_mb() - preloaded_mb,
        m.rows_out,
        m.late_rows
    );
}

/// Reads the events files of the streams `query` reads from `dir` into memory
/// (`preload_events_file`) and restarts the peak resident set from there; returns the MB
/// the events hold (the resident set they added).
fn preload(query: &str, dir: &Path) -> f64 {
    use weir_connectors::nexmark::{preload_events_file, Stream};
    let script =
        std::fs::read_to_string(workspace().join(format!("examples/nexmark/{query}.sql"))).unwrap();
    let before = rss_mb("VmRSS:");
    for stream in [Stream::Person, Stream::Auction, Stream::Bid] {
        if script.contains(&format!("stream = '{}'", stream.name())) {
            preload_events_file(&dir.join(format!("{}.arrow", stream.name())), stream).unwrap();
        }
    }
    let held = rss_mb("VmRSS:") - before;
    // 5: reset the peak resident set ("high water mark") to the current one (proc(5)).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    held
}

/// The checkpoint interval of every run: `WEIR_BENCH_CHECKPOINT` (e.g. `100ms`), else 1 s.
fn checkpoint_interval() -> String {
    std::env::var("WEIR_BENCH_CHECKPOINT").unwrap_or_else(|_| "1s".into())
}

struct Figures {
    events_per_sec: f64,
    per_core: f64,
    cores: f64,
    rss_mb: f64,
    rows_out: u64,
}

fn measure(
    query: &str,
    delivery: &str,
    events: usize,
    parallelism: usize,
    source: &str,
) -> Figures {
    let out = Command::new(std::env::current_exe().unwrap())
        // As the weir binary sets mimalloc (repl/src/main.rs): freed memory goes back to the
        // kernel at once, and no transparent huge pages.
        .env("MIMALLOC_PURGE_DELAY", "0")
        .env("MIMALLOC_ALLOW_THP", "0")
        .env(
            "WEIR_BENCH_CHILD",
            format!("{query},{delivery},{events},{parallelism},{source}"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "{query} {delivery}: no result\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Vec<f64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    let (wall, cpu) = (v[0], v[1].max(0.01));
    assert_eq!(v[4], 0.0, "{query}: late rows");
    Figures {
        events_per_sec: events as f64 / wall,
        per_core: events as f64 / cpu,
        cores: cpu / wall,
        rss_mb: v[2],
        rows_out: v[3] as u64,
    }
}

/// One DataFusion batch run: seconds, or why DataFusion could not run the query.
fn datafusion_run(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    sql: &str,
) -> Result<f64, String> {
    let started = Instant::now();
    rt.block_on(async { ctx.sql(sql).await?.collect().await })
        .map_err(|e| e.to_string())?;
    Ok(started.elapsed().as_secs_f64())
}

fn main() {
    if let Ok(spec) = std::env::var("WEIR_BENCH_CHILD") {
        let p: Vec<&str> = spec.splitn(5, ',').collect();
        child(
            p[0],
            p[1],
            p[2].parse().unwrap(),
            p[3].parse().unwrap(),
            p[4],
        );
        return;
    }
    // `cargo bench` passes --bench; nothing else is taken from the command line.
    let events = env_usize("WEIR_BENCH_EVENTS", 10_000_000);
    let runs = env_usize("WEIR_BENCH_RUNS", 3).max(1);
    let parallelism = env_usize("WEIR_BENCH_PARALLELISM", 2).max(1);
    let picked = std::env::var("WEIR_BENCH_QUERIES").unwrap_or_default();
    let deliveries = match std::env::var("WEIR_BENCH_DELIVERY").as_deref() {
        Ok("both") => vec!["exactly_once", "at_least_once"],
        Ok("at_least_once") => vec!["at_least_once"],
        _ => vec!["exactly_once"],
    };
    let sources = match std::env::var("WEIR_BENCH_SOURCE").as_deref() {
        Ok("mem") => vec!["mem"],
        Ok("file") => vec!["file"],
        Ok("generator") => vec!["gen"],
        Ok(list) if list.contains(',') => list
            .split(',')
            .map(|s| match s.trim() {
                "generator" => "gen",
                "mem" => "mem",
                _ => "file",
            })
            .collect(),
        _ => vec!["mem", "file", "gen"],
    };
    let queries: Vec<&str> = QUERIES
        .iter()
        .copied()
        .filter(|q| picked.is_empty() || picked.split(',').any(|p| p.trim() == *q))
        .collect();
    let title = format!(
        "Nexmark, {events} events, parallelism {parallelism}, blackhole sink, medians of {runs} runs"
    );
    println!("{title}");
    println!(
        "(per core = events per CPU-second of the whole process; cores = CPU time / wall time)"
    );
    let files = tempfile::tempdir().unwrap();
    let files_dir = std::env::var("WEIR_BENCH_FILES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| files.path().to_path_buf());
    let started = Instant::now();
    weir_tests::nexmark::write_files(&files_dir, events as u64).expect("events files");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "Wrote the events files in {secs:.2} s ({:.0} events/s, the generator alone, one thread, \
         all columns of all three streams)",
        events as f64 / secs
    );
    // The crate's events are all held as structs at once: at most 10 M of them.
    let crate_events = events.min(10_000_000);
    let started = Instant::now();
    drop(weir_tests::nexmark::context(crate_events as u64).expect("crate events"));
    let secs = started.elapsed().as_secs_f64();
    println!(
        "(the nexmark crate's generator, event structs then Arrow, as weir's source was before \
         the Arrow generator: {crate_events} events in {secs:.2} s, {:.0} events/s)",
        crate_events as f64 / secs
    );
    // DataFusion over the events in one partition and in `parallelism` partitions (the same
    // batches, dealt differently): the faster of the two counts.
    let contexts: Vec<SessionContext> = [1, parallelism]
        .into_iter()
        .map(|p| weir_tests::nexmark::context_of_files(&files_dir, p).expect("reference tables"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(parallelism)
        .build()
        .unwrap();
    let header = [
        "q",
        "source",
        "delivery",
        "events/s",
        "per core",
        "cores",
        "peak MB",
        "rows out",
        "DF events/s",
        "vs DF",
    ];
    println!(
        "{:<4} {:<6} {:<12} {:>12} {:>12} {:>6} {:>9} {:>10} {:>12} {:>7}",
        header[0],
        header[1],
        header[2],
        header[3],
        header[4],
        header[5],
        header[6],
        header[7],
        header[8],
        header[9]
    );
    let mut table: Vec<Vec<String>> = Vec::new();
    for q in &queries {
        let df = batch_sql(q).and_then(|sql| {
            let times: Result<Vec<f64>, String> = contexts
                .iter()
                .map(|ctx| {
                    let t: Result<Vec<f64>, String> =
                        (0..runs).map(|_| datafusion_run(&rt, ctx, &sql)).collect();
                    t.map(median)
                })
                .collect();
            match times {
                Ok(times) => Some(events as f64 / times.into_iter().fold(f64::MAX, f64::min)),
                Err(e) => {
                    println!("{q}: DataFusion batch could not run it: {e}");
                    None
                }
            }
        });
        for delivery in deliveries.iter().copied() {
            for source in sources.iter().copied() {
                let from = match source {
                    "gen" => "gen".to_string(),
                    "mem" => format!("mem:{}", files_dir.display()),
                    _ => files_dir.display().to_string(),
                };
                let figures: Vec<Figures> = (0..runs)
                    .map(|_| measure(q, delivery, events, parallelism, &from))
                    .collect();
                let pick = |f: fn(&Figures) -> f64| median(figures.iter().map(f).collect());
                let eps = pick(|f| f.events_per_sec);
                let (df_text, ratio) = match df {
                    Some(d) => (format!("{d:.0}"), format!("{:.3}x", eps / d)),
                    None => ("-".into(), "-".into()),
                };
                let row = vec![
                    q.to_string(),
                    source.to_string(),
                    format!(
                        "{} {} ckpt",
                        if delivery == "exactly_once" {
                            "EO"
                        } else {
                            "ALO"
                        },
                        checkpoint_interval()
                    ),
                    format!("{eps:.0}"),
                    format!("{:.0}", pick(|f| f.per_core)),
                    format!("{:.2}", pick(|f| f.cores)),
                    format!("{:.0}", pick(|f| f.rss_mb)),
                    figures[0].rows_out.to_string(),
                    df_text,
                    ratio,
                ];
                println!(
                    "{:<4} {:<6} {:<12} {:>12} {:>12} {:>6} {:>9} {:>10} {:>12} {:>7}",
                    row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9]
                );
                table.push(row);
            }
        }
    }
    let target = std::env::var("WEIR_BENCH_TABLE")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            picked
                .is_empty()
                .then(|| workspace().join("docs/nexmark-bench.md"))
        });
    if let Some(path) = target {
        let text = markdown(&title, &header, &table);
        match std::fs::write(&path, text) {
            Ok(()) => println!("Wrote the table to {}", path.display()),
            Err(e) => println!("Could not write {}: {e}", path.display()),
        }
    }
}

/// The table as markdown, with how it was made.
fn markdown(title: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(workspace())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = format!(
        "# Nexmark figures\n\nWritten by `cargo bench --workspace --bench nexmark` (see the bench's \
         comment for what each column means) at commit {commit} on a {cores}-core machine.\n\n\
         {title}. \"mem\": events read into memory before the job starts (the query alone, as \
         DataFusion's figure; peak MB leaves the events out); \"file\": events read from Arrow IPC \
         events files as the job runs (mapped, each batch checked); \"gen\": events generated \
         by the source as it runs. \"vs DF\": weir's events/s over DataFusion \
         batch SQL's over the same events held in memory.\n\n"
    );
    out.push_str(&format!("| {} |\n", header.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(header.len())));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}
