//! Sink jobs and their checkpoints, as a user drives them: SHOW JOBS, CANCEL JOB, DROP SINK,
//! Ctrl-C, failed checkpoints, a corrupt manifest. Each job's committed output is compared
//! with the same query run straight (the .slt tests check that one against hand-worked
//! results).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::process::{committed_lines, finish, spawn, wait_for_file};
use common::{execute, session, text_rows, wait_jobs, Collected};
use weir_planner::sql::StatementText;
use weir_planner::{Session, SessionConfig, StatementResult};

const QUERY: &str = "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total \
     FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k";

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The events table, slowed to `rate` rows per second, one row per batch.
fn events_ddl(rate: u32) -> String {
    format!(
        "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv', header = 'true',
               batch_size = '1', rate = '{rate}')",
        tests_dir().join("data/events.csv").display()
    )
}

/// The query's rows run straight (no sink, no checkpoints), as CSV lines, sorted.
fn straight_rows() -> Vec<String> {
    let mut s = session(2);
    execute(&mut s, &events_ddl(1_000_000)).unwrap();
    let Collected::Rows(_, batches) = execute(&mut s, QUERY).unwrap() else {
        panic!("expected rows")
    };
    let mut rows: Vec<String> = text_rows(&batches)
        .into_iter()
        .map(|r| r.join(","))
        .collect();
    rows.sort();
    assert!(rows.len() >= 5);
    rows
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

fn durable_session(data: &Path) -> Session {
    let (s, warnings) = Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(data.to_path_buf()),
        ..SessionConfig::default()
    })
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    s
}

fn show_jobs(s: &mut Session) -> Vec<Vec<String>> {
    match s
        .execute(&StatementText {
            text: "SHOW JOBS".into(),
            line: 1,
        })
        .unwrap()
    {
        StatementResult::Rows(_, batches) => text_rows(&batches),
        _ => panic!("SHOW JOBS gives rows"),
    }
}

#[test]
fn failed_checkpoints_fail_alone_and_the_job_goes_on() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let out = work.path().join("out");
    let mut s = durable_session(&data);
    execute(&mut s, &events_ddl(40)).unwrap();
    execute(&mut s, "SET checkpoint_interval = '20ms'").unwrap();
    let sink = format!(
        "CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') AS {QUERY}",
        out.display()
    );
    execute(&mut s, &sink).unwrap();
    // The manifests of checkpoints 1 to 3 cannot be written: a directory is in the way.
    let checkpoints = data.join("jobs/s/checkpoints");
    for epoch in 1..=3 {
        std::fs::create_dir_all(checkpoints.join(format!("manifest-{epoch:020}.json"))).unwrap();
    }
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.has_running_jobs() {
        last = s.job_checkpoints("s").or(last);
        assert!(Instant::now() < deadline, "job did not finish");
        std::thread::sleep(Duration::from_millis(5));
        let rows = show_jobs(&mut s);
        assert_eq!(rows.len(), 1, "{rows:?}");
    }
    let stats = last.expect("checkpoint counters");
    assert_eq!(stats.failed, 3, "{stats:?}");
    assert!(stats.completed >= 1, "{stats:?}");
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("cannot write checkpoint manifest")),
        "{stats:?}"
    );
    let jobs = show_jobs(&mut s);
    assert_eq!(jobs[0][0], "s");
    assert_eq!(jobs[0][1], "finished", "{jobs:?}");
    assert_eq!(sorted(committed_lines(&out)), straight_rows());
}

/// CANCEL JOB is final: the job stops at a checkpoint (what it committed is a part of the
/// straight result, each row once) and the next start does not resume it.
#[test]
fn cancel_job_stops_at_a_checkpoint_for_good() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let out = work.path().join("out");
    let committed = {
        let mut s = durable_session(&data);
        execute(&mut s, &events_ddl(20)).unwrap();
        execute(&mut s, "SET checkpoint_interval = '30ms'").unwrap();
        let sink = format!(
            "CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') AS {QUERY}",
            out.display()
        );
        execute(&mut s, &sink).unwrap();
        let err = execute(&mut s, &sink).err().unwrap();
        assert!(err.to_string().contains("sink s already exists"), "{err}");
        std::thread::sleep(Duration::from_millis(250));
        execute(&mut s, "CANCEL JOB s").unwrap();
        let jobs = show_jobs(&mut s);
        assert_eq!(jobs[0][1], "cancelled", "{jobs:?}");
        assert!(jobs[0][2].parse::<u64>().unwrap() >= 1, "{jobs:?}");
        let err = execute(&mut s, "CANCEL JOB s").err().unwrap();
        assert!(err.to_string().contains("no running job named s"), "{err}");
        sorted(committed_lines(&out))
    };
    let all = straight_rows();
    assert!(
        committed.len() < all.len(),
        "the job ran to its end before the cancel"
    );
    let mut rest = all.clone();
    for row in &committed {
        let at = rest
            .iter()
            .position(|r| r == row)
            .unwrap_or_else(|| panic!("{row} committed but not in the result, or twice"));
        rest.remove(at);
    }
    // A new session on the same data directory does not resume it.
    let mut s = durable_session(&data);
    assert!(!s.has_running_jobs());
    assert_eq!(show_jobs(&mut s)[0][1], "cancelled");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sorted(committed_lines(&out)), committed);
    execute(&mut s, "DROP SINK s").unwrap();
    assert!(!data.join("jobs/s").exists());
    assert!(show_jobs(&mut s).is_empty());
    execute(&mut s, "DROP SINK IF EXISTS s").unwrap();
    let err = execute(&mut s, "DROP SINK s").err().unwrap();
    assert!(err.to_string().contains("no sink named s"), "{err}");
}

#[test]
fn a_quoted_sink_name_keeps_its_case_in_every_statement() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let mut s = durable_session(&work.path().join("data"));
    execute(&mut s, &events_ddl(20)).unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE SINK \"Top\" WITH (connector = 'file', path = '{}', format = 'csv') AS {QUERY}",
            out.display()
        ),
    )
    .unwrap();
    assert_eq!(show_jobs(&mut s)[0][0], "Top");
    let err = execute(&mut s, "CANCEL JOB Top").err().unwrap();
    assert!(
        err.to_string().contains("no running job named top"),
        "{err}"
    );
    execute(&mut s, "CANCEL JOB \"Top\"").unwrap();
    assert_eq!(show_jobs(&mut s)[0][1], "cancelled");
    let err = execute(&mut s, "DROP SINK top").err().unwrap();
    assert!(err.to_string().contains("no sink named top"), "{err}");
    execute(&mut s, "DROP SINK \"Top\"").unwrap();
    assert!(show_jobs(&mut s).is_empty());
}

#[test]
fn bad_sink_statements_get_clear_errors() {
    let work = tempfile::tempdir().unwrap();
    let mut s = durable_session(&work.path().join("data"));
    execute(&mut s, &events_ddl(100)).unwrap();
    let cases = [
        (
            "CREATE SINK s WITH (connector = 'file', path = 'o', bogus = '1') AS SELECT * FROM events",
            "unknown option 'bogus' for connector 'file'",
        ),
        (
            "CREATE SINK s WITH (connector = 'kafkaa') AS SELECT * FROM events",
            "unknown connector 'kafkaa'",
        ),
        (
            "CREATE SINK s WITH (path = 'o') AS SELECT * FROM events",
            "WITH (connector = ...) is required",
        ),
        (
            "CREATE SINK s WITH (connector = 'file', path = 'o', delivery = 'twice') AS SELECT * FROM events",
            "delivery must be exactly_once or at_least_once",
        ),
        (
            "CREATE SINK s WITH (connector = 'file', path = 'o', checkpoint_interval = 'soon') AS SELECT * FROM events",
            "expected a duration",
        ),
        (
            "CREATE SINK \"a-b\" WITH (connector = 'file', path = 'o') AS SELECT * FROM events",
            "use letters, digits and _",
        ),
        ("SET checkpoint_interval = '5 fortnights'", "unknown unit"),
        ("SET memory_budget = '-1'", "expected a size"),
    ];
    for (sql, expected) in cases {
        let err = execute(&mut s, sql)
            .err()
            .unwrap_or_else(|| panic!("{sql} passed"));
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
    // Without a data directory there is nowhere to keep checkpoints.
    let mut plain = session(1);
    execute(&mut plain, &events_ddl(100)).unwrap();
    let err = execute(
        &mut plain,
        "CREATE SINK s WITH (connector = 'file', path = 'o') AS SELECT * FROM events",
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("--data-dir"), "{err}");
}

/// Runs the job in a child process until a few checkpoints exist, then stops it with `stop`.
fn start_job(work: &Path, checkpoints_wanted: usize) -> (std::process::Child, PathBuf, PathBuf) {
    let data = work.join("data");
    let out = work.join("out");
    let script = format!(
        "{};\nSET checkpoint_interval = '30ms';\n\
         CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') AS {QUERY};\n",
        events_ddl(20),
        out.display()
    );
    let script_path = work.join("job.sql");
    std::fs::write(&script_path, script).unwrap();
    let mut child = spawn(
        &[
            "-f",
            script_path.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
        work,
    );
    wait_for_file(&mut child, &data.join("jobs/s/job.json"));
    let checkpoints = data.join("jobs/s/checkpoints");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let manifests = std::fs::read_dir(&checkpoints)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("manifest-"))
                })
                .count()
            })
            .unwrap_or(0);
        if manifests >= checkpoints_wanted {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoints appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
    (child, data, out)
}

#[test]
fn ctrl_c_stops_with_a_final_checkpoint_and_resume_loses_nothing() {
    let work = tempfile::tempdir().unwrap();
    let (child, data, out) = start_job(work.path(), 2);
    let pid = child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let stderr = finish(child, "weir after Ctrl-C");
    assert!(stderr.contains("job s: stopped"), "{stderr}");
    let record = std::fs::read_to_string(data.join("jobs/s/job.json")).unwrap();
    assert!(record.contains("\"stopped\""), "{record}");
    // Nothing pre-committed is left staged: the stop checkpoint committed it.
    let staged = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count();
    assert_eq!(staged, 0);
    let stderr = finish(
        spawn(
            &["resume", "--data-dir", data.to_str().unwrap()],
            work.path(),
        ),
        "weir resume",
    );
    assert!(stderr.contains("job s: finished"), "{stderr}");
    assert_eq!(sorted(committed_lines(&out)), straight_rows());
}

#[test]
fn a_torn_newest_manifest_is_never_loaded() {
    let work = tempfile::tempdir().unwrap();
    let (mut child, data, out) = start_job(work.path(), 3);
    child.kill().unwrap();
    let _ = child.wait();
    let checkpoints = data.join("jobs/s/checkpoints");
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("manifest-")
        })
        .collect();
    manifests.sort();
    let newest = manifests.last().unwrap();
    let epoch: u64 = newest.file_name().unwrap().to_string_lossy()["manifest-".len()..][..20]
        .parse()
        .unwrap();
    // What a disk could leave of a newer manifest: half of it, and a temporary file from a
    // write that never finished. Neither may be loaded, and nothing they name was committed.
    let bytes = std::fs::read(newest).unwrap();
    let torn = checkpoints.join(format!("manifest-{:020}.json", epoch + 1));
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(
        checkpoints.join(format!(".manifest-{:020}.tmp", epoch + 2)),
        &bytes[..10],
    )
    .unwrap();
    let stderr = finish(
        spawn(
            &["resume", "--data-dir", data.to_str().unwrap()],
            work.path(),
        ),
        "weir resume",
    );
    assert!(stderr.contains("skipped"), "{stderr}");
    assert!(stderr.contains("job s: finished"), "{stderr}");
    assert_eq!(sorted(committed_lines(&out)), straight_rows());
}

/// A SIGKILL during a checkpoint leaves its state directories without a manifest. The job
/// resumes from the checkpoint before and numbers its next ones from there: the leftovers
/// must not be in their way ("directory exists" failed every such checkpoint, and a
/// PostgreSQL sink then waited on its own prepared epoch).
#[test]
fn what_a_crash_left_of_a_checkpoint_is_not_in_the_way_of_the_next() {
    let work = tempfile::tempdir().unwrap();
    let (mut child, data, out) = start_job(work.path(), 2);
    child.kill().unwrap();
    let _ = child.wait();
    let checkpoints = data.join("jobs/s/checkpoints");
    let newest = std::fs::read_dir(&checkpoints)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("manifest-")?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap();
    // What an interrupted checkpoint leaves: a task's state directory, half written.
    for epoch in newest + 1..=newest + 2 {
        let task = checkpoints.join(format!("{epoch:020}/1-0"));
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("CURRENT"), b"half").unwrap();
    }
    let mut s = durable_session(&data);
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs[0].1.as_str(), "finished", "{jobs:?}");
    let stats = s.job_checkpoints("s").expect("checkpoint counters");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert!(stats.completed >= 2, "{stats:?}");
    assert_eq!(sorted(committed_lines(&out)), straight_rows());
}

#[test]
fn a_materialized_view_shows_only_whole_checkpoints_and_survives_restarts() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let expected = straight_rows();
    let total: usize = expected.len();
    {
        let mut s = durable_session(&data);
        execute(&mut s, &events_ddl(20)).unwrap();
        execute(&mut s, "SET checkpoint_interval = '40ms'").unwrap();
        execute(&mut s, &format!("CREATE MATERIALIZED VIEW mv AS {QUERY}")).unwrap();
        let err = execute(&mut s, &format!("CREATE MATERIALIZED VIEW mv AS {QUERY}"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("already exists"), "{err}");
        // While the job runs, every read sees only final rows, whole windows (a window's
        // rows are committed together), and never fewer rows than the read before.
        let mut seen = Vec::new();
        while s.has_running_jobs() {
            let Collected::Rows(_, batches) = execute(
                &mut s,
                "SELECT window_start, window_end, k, n, total FROM mv ORDER BY window_start, k",
            )
            .unwrap() else {
                panic!("rows")
            };
            let rows: Vec<String> = text_rows(&batches)
                .into_iter()
                .map(|r| r.join(","))
                .collect();
            for r in &rows {
                assert!(expected.contains(r), "{r} is not a final row");
                let window = r.split(',').next().unwrap();
                let whole = expected.iter().filter(|e| e.starts_with(window)).count();
                let have = rows.iter().filter(|e| e.starts_with(window)).count();
                assert_eq!(have, whole, "window {window} is partly visible");
            }
            seen.push(rows.len());
            let jobs = show_jobs(&mut s);
            assert_eq!(jobs[0][0], "mv");
            std::thread::sleep(Duration::from_millis(15));
        }
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert!(seen.iter().any(|n| *n > 0 && *n < total), "{seen:?}");
    }
    // After a restart the view is still there, and queries see all of it.
    let mut s = durable_session(&data);
    let Collected::Rows(_, batches) = execute(
        &mut s,
        "SELECT window_start, window_end, k, n, total FROM mv WHERE n >= 1",
    )
    .unwrap() else {
        panic!("rows")
    };
    let mut rows: Vec<String> = text_rows(&batches)
        .into_iter()
        .map(|r| r.join(","))
        .collect();
    rows.sort();
    assert_eq!(rows, expected);
    let Collected::Rows(_, batches) =
        execute(&mut s, "SELECT k, n FROM mv ORDER BY n DESC, k LIMIT 1").unwrap()
    else {
        panic!("rows")
    };
    assert_eq!(text_rows(&batches).len(), 1);
    execute(&mut s, "DROP MATERIALIZED VIEW mv").unwrap();
    let err = execute(&mut s, "SELECT * FROM mv").err().unwrap();
    assert!(err.to_string().contains("mv"), "{err}");
    assert!(!data.join("jobs/mv").exists());
}
