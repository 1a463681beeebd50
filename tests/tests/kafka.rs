//! Kafka end to end, against a real broker (tansu) started by the test: a windowed job from an
//! input topic (3 partitions, disorder, late rows) into an output topic, killed with SIGKILL
//! many times and resumed at other parallelisms; crashes injected before the manifest, between
//! the manifest and the Kafka commit, and between the commits of two sink instances. The
//! output a read_committed consumer sees (decoded here from the raw batches, see
//! `common::kafka::read_committed`) must equal DataFusion batch SQL over the same rows.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use common::kafka::{read_committed, read_uncommitted, Broker};
use common::process::{finish, kill_and_resume, spawn};
use common::reference::{
    closed_reference_rows, partitioned_input, ts_text, workspace, BASE_MS, BOUND_MS,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_planner::display::batch_rows;

const PARTITIONS: i32 = 3;

fn script(broker: &Broker, output: &str, delivery: &str, rate: u64) -> String {
    job_script(
        broker,
        output,
        delivery,
        &format!("stop_at = 'end', rate = '{rate}'"),
        "",
    )
}

/// The windowed job from `events` into `output`; `source` and `sink` are more WITH options.
fn job_script(broker: &Broker, output: &str, delivery: &str, source: &str, sink: &str) -> String {
    format!(
        "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH (connector = 'kafka', topic = 'events', bootstrap_servers = '{b}', format = 'json',
               batch_size = '500', {source});
         SET checkpoint_interval = '100ms';
         SET delivery = '{delivery}';
         CREATE SINK big WITH (connector = 'kafka', topic = '{output}', bootstrap_servers = '{b}',
               format = 'csv', key = 'k' {sink}) AS
         SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total
         FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k;",
        b = broker.bootstrap()
    )
}

fn all_values(by_partition: BTreeMap<i32, Vec<String>>) -> Vec<String> {
    let mut v: Vec<String> = by_partition.into_values().flatten().collect();
    v.sort();
    v
}

fn describe_difference(got: &[String], expected: &[String]) -> String {
    let count = |rows: &[String]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for r in rows {
            *m.entry(r.clone()).or_insert(0) += 1;
        }
        m
    };
    let (g, e) = (count(got), count(expected));
    let missing: Vec<_> = e.keys().filter(|k| !g.contains_key(*k)).take(5).collect();
    let extra: Vec<_> = g
        .iter()
        .filter(|(k, n)| e.get(*k).is_none_or(|m| *n > m))
        .take(5)
        .collect();
    format!(
        "{} rows vs {} expected; missing {missing:?}; extra or duplicated {extra:?}",
        got.len(),
        expected.len()
    )
}

struct Setup {
    work: tempfile::TempDir,
    broker: Broker,
    expected: Vec<String>,
}

fn setup(rows: usize, seed: u64) -> Setup {
    let work = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let (parts, reference, _) = partitioned_input(rows, seed, work.path(), PARTITIONS);
    for (p, values) in &parts {
        for chunk in values.chunks(5000) {
            broker.produce("events", *p, chunk);
        }
    }
    let expected = closed_reference_rows(&reference, None);
    assert!(expected.len() > 100, "{} reference rows", expected.len());
    Setup {
        work,
        broker,
        expected,
    }
}

/// A job from `events` into a new topic `topic` (2 partitions) in its own folder under the
/// setup's: returns the folder and the script's path.
fn new_job(
    s: &Setup,
    name: &str,
    topic: &str,
    script_text: String,
) -> (std::path::PathBuf, std::path::PathBuf) {
    s.broker.create_topic(topic, 2);
    let dir = s.work.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.sql");
    std::fs::write(&path, script_text).unwrap();
    (dir, path)
}

/// Runs the job, killing it with SIGKILL and resuming it `times` times at parallelism 1-3;
/// returns how many kills hit a running job.
fn kill_and_resume_at_random(dir: &Path, path: &Path, seed: u64, times: usize) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let resumes: Vec<usize> = (0..times).map(|_| rng.gen_range(1..=3)).collect();
    kill_and_resume(
        path,
        &dir.join("data"),
        "big",
        dir,
        &mut rng,
        (300, 900),
        &resumes,
        (300, 900),
        None,
    )
}

#[test]
fn exactly_once_kafka_to_kafka_survives_twenty_kills_and_rescaling() {
    let s = setup(120_000, 7);
    let (dir, path) = new_job(
        &s,
        "eo",
        "out",
        script(&s.broker, "out", "exactly_once", 3_000),
    );
    let killed = kill_and_resume_at_random(&dir, &path, 11, 20);
    assert!(killed >= 20, "only {killed} kills hit a running job");
    let got = all_values(read_committed(&s.broker, "out"));
    assert!(
        got == s.expected,
        "exactly-once output differs: {}",
        describe_difference(&got, &s.expected)
    );
    eprintln!(
        "exactly-once after {killed} kills: read_committed sees {} rows for {} results; \
         read_uncommitted sees {} (aborted transactions included)",
        got.len(),
        s.expected.len(),
        all_values(read_uncommitted(&s.broker, "out")).len()
    );
}

/// A crash at each point of the commit protocol: before the manifest, between the manifest and
/// the Kafka commit (the restarted job must commit the dead one's pre-committed transactions
/// with their saved producer ids and epochs), and between the commits of two instances.
#[test]
fn crashes_injected_in_the_commit_protocol_lose_and_repeat_nothing() {
    let s = setup(40_000, 8);
    for (i, fault) in ["before_manifest:3", "before_commit:3", "mid_commit:3"]
        .iter()
        .enumerate()
    {
        let topic = format!("out{i}");
        let (dir, path) = new_job(
            &s,
            &format!("fault{i}"),
            &topic,
            script(&s.broker, &topic, "exactly_once", 40_000),
        );
        let data = dir.join("data");
        let out = std::process::Command::new(common::process::weir_binary())
            .args([
                "-f",
                path.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
            ])
            .args(["--parallelism", "2"])
            .env("WEIR_FAULT", fault)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{fault}: the fault did not fire: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("WEIR_FAULT"));
        let resumed = spawn(&["resume", "--data-dir", data.to_str().unwrap()], &dir);
        finish(resumed, "resume after the fault");
        let got = all_values(read_committed(&s.broker, &topic));
        assert!(
            got == s.expected,
            "{fault}: output differs: {}",
            describe_difference(&got, &s.expected)
        );
    }
}

#[test]
fn at_least_once_loses_nothing_and_duplicates_are_counted() {
    let s = setup(60_000, 9);
    let (dir, path) = new_job(
        &s,
        "alo",
        "alo",
        script(&s.broker, "alo", "at_least_once", 20_000),
    );
    let killed = kill_and_resume_at_random(&dir, &path, 12, 5);
    assert!(killed >= 4, "only {killed} kills hit a running job");
    let got = all_values(read_uncommitted(&s.broker, "alo"));
    common::reference::assert_at_least_once(&got, &s.expected, killed);
}

#[test]
fn bad_kafka_options_give_clear_errors() {
    let broker = Broker::start();
    let work = tempfile::tempdir().unwrap();
    let run = |sql: &str| {
        let path = work.path().join("bad.sql");
        std::fs::write(&path, sql).unwrap();
        let data = work.path().join("data");
        let out = std::process::Command::new(common::process::weir_binary())
            .args([
                "-f",
                path.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{sql} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = run(&format!(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', topic = 'x', \
         bootstrap_servers = '127.0.0.1:{closed}', request_timeout = '2s');"
    ));
    assert!(
        err.contains("cannot reach Kafka") && err.contains(&closed.to_string()),
        "{err}"
    );
    let err = run(&format!(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', topic = 'nope', \
         bootstrap_servers = '{}');",
        broker.bootstrap()
    ));
    assert!(
        err.contains("nope") && err.contains("does not exist"),
        "{err}"
    );
    broker.create_topic("t1", 1);
    let err = run(&format!(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', topic = 't1', \
         bootstrap_servers = '{}', startup = 'sometime');",
        broker.bootstrap()
    ));
    assert!(err.contains("startup") && err.contains("sometime"), "{err}");
    // A transaction timeout the broker could hit while a failed checkpoint is retried.
    let err = run(&format!(
        "CREATE TABLE n (auction BIGINT, date_time TIMESTAMP) WITH (connector = 'nexmark', \
         stream = 'bid', events = '10');
         SET checkpoint_interval = '10s';
         CREATE SINK s WITH (connector = 'kafka', topic = 't1', bootstrap_servers = '{}', \
         transaction_timeout = '2min') AS SELECT * FROM n;",
        broker.bootstrap()
    ));
    assert!(
        err.contains("transaction_timeout") && err.contains("170s"),
        "{err}"
    );
}

/// The source alone over a bounded read of a topic: every row once, as the producer wrote it,
/// with metadata columns.
#[test]
fn a_topic_reads_back_with_its_metadata() {
    let broker = Broker::start();
    broker.create_topic("plain", 2);
    // Every 100th record's `extra` is not a number: a bad record only for a query reading it.
    let row = |i: i32| match i % 100 {
        7 => format!("{{\"n\": {i}, \"extra\": \"many\"}}"),
        _ => format!("{{\"n\": {i}, \"extra\": {i}}}"),
    };
    let rows0: Vec<String> = (0..1000).map(row).collect();
    let rows1: Vec<String> = (1000..1500).map(row).collect();
    broker.produce("plain", 0, &rows0);
    broker.produce("plain", 1, &rows1);
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("read.sql");
    let run = |query: &str| {
        std::fs::write(
            &path,
            format!(
                "CREATE TABLE plain (n BIGINT, extra BIGINT, kafka_partition INT,
                                     kafka_offset BIGINT)
                 WITH (connector = 'kafka', topic = 'plain', bootstrap_servers = '{}',
                       stop_at = 'end', include = 'partition, offset');
                 {query}",
                broker.bootstrap()
            ),
        )
        .unwrap();
        std::process::Command::new(common::process::weir_binary())
            .args(["-f", path.to_str().unwrap(), "--format", "csv"])
            .output()
            .unwrap()
    };
    let query = "SELECT count(*) AS rows, sum(n) AS total, count(DISTINCT kafka_partition) AS \
                 parts, max(kafka_offset) AS top FROM plain;";
    let out = run(query);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let total: i64 = (0..1500).sum();
    assert_eq!(
        stdout.trim(),
        format!("rows,total,parts,top\n1500,{total},2,999")
    );
    // `extra` is left out of that query's source (not parsed), so its bad values did not
    // matter; a query that reads it fails on the first, naming where it is.
    let out = run(&format!("EXPLAIN {query}"));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("as plain (not producing extra: no query reads them)"),
        "{plan}"
    );
    let out = run("SELECT sum(extra) FROM plain;");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("topic 'plain' partition") && stderr.contains("offset 7"),
        "{stderr}"
    );
}

/// The broker frozen (SIGSTOP) for longer than the clients' timeouts while an exactly-once
/// job runs: the job fails, its supervisor restarts it from the checkpoint once the broker
/// answers again (SIGCONT), and the committed output is still exact.
#[test]
fn a_frozen_broker_fails_the_job_over_and_the_output_stays_exact() {
    let s = setup(30_000, 13);
    let timeout = ", request_timeout = '1s'";
    let (dir, path) = new_job(
        &s,
        "frozen",
        "thawed",
        job_script(
            &s.broker,
            "thawed",
            "exactly_once",
            &format!("stop_at = 'end', rate = '6000'{timeout}"),
            timeout,
        ),
    );
    let data = dir.join("data");
    let child = spawn(
        &[
            "-f",
            path.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &dir,
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    s.broker.signal("-STOP");
    std::thread::sleep(std::time::Duration::from_millis(3000));
    s.broker.signal("-CONT");
    let stderr = finish(child, "the job through a frozen broker");
    assert!(
        stderr.contains("restart"),
        "the job should have failed over while the broker was frozen: {stderr}"
    );
    let got = all_values(read_committed(&s.broker, "thawed"));
    assert!(
        got == s.expected,
        "output after the freeze differs: {}",
        describe_difference(&got, &s.expected)
    );
}

fn interrupt(child: &std::process::Child) {
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until `topic` holds `n` committed values (or `limit` passes); returns them.
fn wait_for_committed(
    broker: &Broker,
    topic: &str,
    n: usize,
    limit: std::time::Duration,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let got = all_values(read_committed(broker, topic));
        if got.len() >= n || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A topic another process keeps appending to (no `stop_at`): windows fire and commit while
/// rows still arrive; Ctrl-C stops the job with a checkpoint; `weir resume` goes on from the
/// recorded offsets over rows written meanwhile. The committed output is exactly the windows
/// the final watermark closed.
#[test]
fn an_unbounded_topic_fires_windows_as_it_grows_and_resumes_after_ctrl_c() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let work = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    broker.create_topic("live", 2);
    let (parts, reference, final_watermark) =
        partitioned_input(30_000, 14, work.path(), PARTITIONS);
    let expected = closed_reference_rows(&reference, Some(final_watermark));
    let dir = work.path().join("live");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.sql");
    std::fs::write(
        &path,
        job_script(&broker, "live", "exactly_once", "startup = 'earliest'", ""),
    )
    .unwrap();
    let data = dir.join("data");
    // The first half of every partition, written slowly while the job runs.
    let half = |p: &Vec<String>| p.len() / 2;
    let producing = AtomicBool::new(true);
    let mut seen_while_producing = 0;
    let child = spawn(
        &[
            "-f",
            path.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &dir,
    );
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let chunk = 200;
            let mut start = 0;
            while parts.values().any(|p| start < half(p)) {
                for (p, values) in &parts {
                    let end = (start + chunk).min(half(values));
                    if start < end {
                        broker.produce("events", *p, &values[start..end]);
                    }
                }
                start += chunk;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            producing.store(false, Ordering::SeqCst);
        });
        while producing.load(Ordering::SeqCst) {
            let n = all_values(read_committed(&broker, "live")).len();
            if n > 0 {
                seen_while_producing = n;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    assert!(
        seen_while_producing > 0,
        "no window was committed while the topic was still growing"
    );
    interrupt(&child);
    let stderr = finish(child, "the unbounded job, stopped with Ctrl-C");
    assert!(stderr.contains("stopped"), "{stderr}");
    // The rest arrives while the job is down.
    for (p, values) in &parts {
        for chunk in values[half(values)..].chunks(5000) {
            broker.produce("events", *p, chunk);
        }
    }
    let resumed = spawn(&["resume", "--data-dir", data.to_str().unwrap()], &dir);
    let got = wait_for_committed(
        &broker,
        "live",
        expected.len(),
        std::time::Duration::from_secs(60),
    );
    // Anything more (a duplicate, a window the watermark has not closed) would show up now.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    interrupt(&resumed);
    finish(resumed, "the resumed job, stopped with Ctrl-C");
    let after = all_values(read_committed(&broker, "live"));
    assert!(
        got == expected && after == expected,
        "unbounded output differs: {}",
        describe_difference(&after, &expected)
    );
}

/// A source instance whose partitions are all silent must not hold every window back: with
/// `idle_timeout` it tells the tasks downstream that it is idle, and they stop waiting for its
/// watermark. Two partitions at parallelism 2 (one each), rows in partition 0 only.
#[test]
fn a_source_instance_whose_partitions_are_silent_does_not_hold_windows_back() {
    let work = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    broker.create_topic("events", 2);
    let mut values = Vec::new();
    let mut reference = String::from("id,k,v,ts,wprev\n");
    let mut running = i64::MIN;
    let mut last = BASE_MS;
    for id in 0..3_000i64 {
        let ts = BASE_MS + id * 20;
        let (k, v) = (id % 5, id % 97);
        values.push(format!(
            "{{\"id\": {id}, \"k\": \"k{k}\", \"v\": {v}, \"ts\": \"{}\"}}",
            ts_text(ts)
        ));
        let wprev = match running {
            i64::MIN => "1900-01-01 00:00:00.000".to_string(),
            w => ts_text(w),
        };
        writeln!(reference, "{id},k{k},{v},{},{wprev}", ts_text(ts)).unwrap();
        running = running.max(ts - BOUND_MS);
        last = ts;
    }
    let reference_path = work.path().join("reference.csv");
    std::fs::write(&reference_path, reference).unwrap();
    let expected = closed_reference_rows(&reference_path, Some(last - BOUND_MS));
    assert!(expected.len() >= 25, "{} reference rows", expected.len());
    for chunk in values.chunks(1_000) {
        broker.produce("events", 0, chunk);
    }
    // The table's own idle_timeout, then the session default (SET idle_timeout) for a table
    // that sets none.
    let variants = [
        ("quiet", String::new(), "idle_timeout = '1s'"),
        (
            "quiet_by_setting",
            "SET idle_timeout = '1s';\n".to_string(),
            "request_timeout = '30s'",
        ),
    ];
    for (output, setting, option) in variants {
        broker.create_topic(output, 2);
        let dir = work.path().join(output);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("job.sql");
        let script = format!(
            "{setting}{}",
            job_script(&broker, output, "exactly_once", option, "")
        );
        std::fs::write(&path, script).unwrap();
        let data = dir.join("data");
        let child = spawn(
            &[
                "-f",
                path.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--parallelism",
                "2",
            ],
            &dir,
        );
        let got = wait_for_committed(
            &broker,
            output,
            expected.len(),
            std::time::Duration::from_secs(60),
        );
        interrupt(&child);
        let stderr = finish(
            child,
            "the job with a silent partition, stopped with Ctrl-C",
        );
        assert!(
            got.len() >= expected.len(),
            "{output}: windows held back by the silent partition's instance: {}",
            describe_difference(&got, &expected)
        );
        let got = all_values(read_committed(&broker, output));
        assert!(
            got == expected,
            "{output}: output differs: {}; {stderr}",
            describe_difference(&got, &expected)
        );
    }
}

/// `topic_pattern`: every topic whose whole name matches is read, also one created while the
/// job runs (found at the next discovery, read from its start); a topic that does not match is
/// not read. Output = DataFusion batch SQL over the matching topics' rows.
#[test]
fn a_topic_pattern_reads_matching_topics_and_picks_up_new_ones() {
    let work = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    broker.create_topic("ev-a", 2);
    broker.create_topic("other", 1);
    broker.create_topic("pat", 2);
    let value = |id: i64, k: &str| {
        format!(
            "{{\"id\": {id}, \"k\": \"{k}\", \"v\": {}, \"ts\": \"{}\"}}",
            id % 97,
            ts_text(BASE_MS + id * 20)
        )
    };
    // Rows in time order within every partition; the first 30 s in ev-a, the rest in ev-a
    // and ev-b (created later). The same ids with another key in `other`, which must not
    // be read.
    let mut reference = String::from("id,k,v,ts,wprev\n");
    let mut by_partition: BTreeMap<(&str, i32), Vec<(i64, String)>> = BTreeMap::new();
    let mut last: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    for id in 0..3_000i64 {
        let k = format!("k{}", id % 5);
        let part = if id >= 1_500 && id % 3 == 0 {
            ("ev-b", 0)
        } else {
            ("ev-a", (id % 2) as i32)
        };
        by_partition
            .entry(part)
            .or_default()
            .push((id, value(id, &k)));
        last.insert(part, BASE_MS + id * 20);
        writeln!(
            reference,
            "{id},{k},{},{},1900-01-01 00:00:00.000",
            id % 97,
            ts_text(BASE_MS + id * 20)
        )
        .unwrap();
    }
    let reference_path = work.path().join("reference.csv");
    std::fs::write(&reference_path, reference).unwrap();
    let until = last.values().copied().min().unwrap() - BOUND_MS;
    let expected = closed_reference_rows(&reference_path, Some(until));
    assert!(expected.len() >= 25, "{} reference rows", expected.len());
    // The first 30 s (ids below 1,500) now, the rest later.
    let values = |part: (&str, i32), first: bool| -> Vec<String> {
        by_partition[&part]
            .iter()
            .filter(|(id, _)| (*id < 1_500) == first)
            .map(|(_, v)| v.clone())
            .collect()
    };
    for p in 0..2 {
        broker.produce("ev-a", p, &values(("ev-a", p), true));
    }
    let other: Vec<String> = (0..1_500).map(|id| value(id, "zz")).collect();
    broker.produce("other", 0, &other);

    let dir = work.path().join("pattern");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.sql");
    std::fs::write(
        &path,
        format!(
            "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
             WITH (connector = 'kafka', topic_pattern = 'ev-.*', bootstrap_servers = '{b}',
                   format = 'json', partition_discovery = '200ms');
             SET checkpoint_interval = '100ms';
             CREATE SINK big WITH (connector = 'kafka', topic = 'pat', bootstrap_servers = '{b}',
                   format = 'csv', key = 'k') AS
             SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total
             FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k;",
            b = broker.bootstrap()
        ),
    )
    .unwrap();
    let data = dir.join("data");
    let child = spawn(
        &[
            "-f",
            path.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--parallelism",
            "2",
        ],
        &dir,
    );
    let early = wait_for_committed(&broker, "pat", 1, std::time::Duration::from_secs(60));
    assert!(
        !early.is_empty(),
        "no window committed from the first topic"
    );
    // ev-b appears; its rows are there before the job finds it, then ev-a goes on.
    broker.create_topic("ev-b", 1);
    broker.produce("ev-b", 0, &values(("ev-b", 0), false));
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    for p in 0..2 {
        broker.produce("ev-a", p, &values(("ev-a", p), false));
    }
    let got = wait_for_committed(
        &broker,
        "pat",
        expected.len(),
        std::time::Duration::from_secs(60),
    );
    interrupt(&child);
    let stderr = finish(child, "the job over a topic pattern, stopped with Ctrl-C");
    assert!(
        got.len() >= expected.len(),
        "not every window came: {}",
        describe_difference(&got, &expected)
    );
    let got = all_values(read_committed(&broker, "pat"));
    assert!(
        got == expected,
        "output differs: {}; {stderr}",
        describe_difference(&got, &expected)
    );
}

/// `examples/kafka/`: Nexmark bids into a topic, a windowed job from it into another topic,
/// the results read back; checked against DataFusion batch SQL over the same generated bids.
#[test]
fn the_kafka_examples_run_end_to_end() {
    let broker = Broker::start();
    broker.create_topic("bids", 3);
    broker.create_topic("top_bids", 2);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let mut last = String::new();
    for script in ["1_produce_bids.sql", "2_top_bids.sql", "3_read_results.sql"] {
        let text = std::fs::read_to_string(workspace().join("examples/kafka").join(script))
            .unwrap()
            .replace("127.0.0.1:9092", &broker.bootstrap());
        let path = work.path().join(script);
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(common::process::weir_binary())
            .args(["-f", path.to_str().unwrap(), "--format", "csv"])
            .args(["--data-dir", data.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let ctx = weir_tests::nexmark::context(100_000).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let batches = rt
        .block_on(async {
            ctx.sql(
                "SELECT count(*) AS results, count(DISTINCT auction) AS auctions, sum(n) AS bids
                 FROM (SELECT auction, CAST(date_time AS BIGINT) / 10000000000 AS w, count(*) AS n
                       FROM bid GROUP BY auction, w)",
            )
            .await?
            .collect()
            .await
        })
        .unwrap();
    let row = batch_rows(&batches[0]).unwrap().remove(0);
    let expected: Vec<String> = row.into_iter().map(|v| v.unwrap_or_default()).collect();
    assert_eq!(
        last.trim(),
        format!("results,auctions,bids,partitions\n{},2", expected.join(",")),
    );
}
