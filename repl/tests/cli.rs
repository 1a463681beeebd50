//! The `weir` binary as a user runs it: scripts, output formats, errors, every example.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run weir")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_example_runs() {
    let mut examples: Vec<PathBuf> = std::fs::read_dir(workspace().join("examples"))
        .expect("examples dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3);
    for example in examples {
        let out = weir(&["-f", example.to_str().unwrap(), "--format", "csv"]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            example.display(),
            text(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(
            lines.len() >= 2,
            "{}: expected a header and rows, got {stdout}",
            example.display()
        );
        assert!(
            lines[0].starts_with("window_start,window_end"),
            "{}: {}",
            example.display(),
            lines[0]
        );
    }
}

#[test]
fn csv_output_holds_only_results_and_reports_late_rows_on_stderr() {
    let out = weir(&["-f", "examples/quickstart.sql", "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("window_start,window_end,auction,bids,top_price")
    );
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 5, "{line}");
        // timestamps: YYYY-MM-DD HH:MM:SS, windows aligned to 10 s
        assert_eq!(fields[0].len(), 19, "{line}");
        assert!(fields[0].ends_with("0"), "{line}");
    }
    assert!(stderr.contains("CREATE TABLE"), "{stderr}");
    assert!(stderr.contains("3 late rows dropped"), "{stderr}");
}

#[test]
fn json_output_is_one_object_per_row() {
    let out = weir(&["-f", "examples/quickstart.sql", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.is_empty());
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        assert!(v["auction"].is_i64(), "{line}");
        assert!(v["window_start"].is_string(), "{line}");
    }
}

#[test]
fn syntax_error_names_line_and_column_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.sql");
    std::fs::write(
        &script,
        "SELECT 1;\n\nSELECT *\n  FROM t WHERE ) x;\nSELECT 2;\n",
    )
    .unwrap();
    let out = weir(&["-f", script.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("syntax error at line 4, column 16"),
        "{stderr}"
    );
    // stops at the failing statement
    assert!(!text(&out.stdout).contains("| 2 "), "{}", text(&out.stdout));
}

#[test]
fn table_output_shows_rows_and_count() {
    let out = weir(&["-f", "examples/quickstart.sql"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("| window_start"), "{stdout}");
    assert!(stdout.contains("late rows dropped"), "{stdout}");
}

#[test]
fn data_dir_keeps_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let create = dir.path().join("create.sql");
    let ddl = format!(
        "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP) WITH (connector = 'file', path = '{}', header = 'true');",
        workspace().join("examples/data/bids.csv").display()
    );
    std::fs::write(&create, ddl).unwrap();
    let out = weir(&[
        "-f",
        create.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let query = dir.path().join("query.sql");
    std::fs::write(&query, "SELECT count(*) AS n FROM bids;").unwrap();
    let out = weir(&[
        "-f",
        query.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "n\n600\n");
}

#[test]
fn unknown_flag_is_an_error() {
    let out = weir(&["--bogus"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--bogus"));
}

#[test]
fn output_is_identical_at_every_parallelism() {
    let reference = weir(&[
        "-f",
        "examples/quickstart.sql",
        "--format",
        "csv",
        "--parallelism",
        "1",
    ]);
    assert!(reference.status.success());
    for p in ["2", "3", "4"] {
        let out = weir(&[
            "-f",
            "examples/quickstart.sql",
            "--format",
            "csv",
            "--parallelism",
            p,
        ]);
        assert!(out.status.success());
        assert_eq!(
            text(&out.stdout),
            text(&reference.stdout),
            "parallelism {p}"
        );
    }
}

/// The sink example as a user runs it: `weir -f` runs the job to completion; its committed
/// part files hold exactly the rows the same query prints.
#[test]
fn sink_example_commits_every_result_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let script = std::fs::read_to_string(workspace().join("examples/sinks/top_bids.sql"))
        .unwrap()
        .replace("'out/top_bids'", &format!("'{}'", out_dir.display()))
        .replace("rate = '200'", "rate = '2000'");
    let script_path = tmp.path().join("top_bids.sql");
    std::fs::write(&script_path, script).unwrap();
    let data_dir = tmp.path().join("data");
    let out = weir(&[
        "-f",
        script_path.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("job top_bids: finished"),
        "{}",
        text(&out.stderr)
    );
    let mut parts: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    parts.sort();
    let mut got = Vec::new();
    for p in &parts {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("part-top_bids-"), "{name}");
        let body = std::fs::read_to_string(p).unwrap();
        let mut lines = body.lines();
        assert_eq!(
            lines.next(),
            Some("window_start,window_end,auction,bids,top_price"),
            "{name}: header"
        );
        got.extend(lines.map(str::to_string));
    }
    // The same query printed by a plain SELECT (the quickstart without its HAVING).
    let select = tmp.path().join("select.sql");
    let quickstart = std::fs::read_to_string(workspace().join("examples/quickstart.sql")).unwrap();
    std::fs::write(&select, quickstart.replace("HAVING count(*) >= 3", "")).unwrap();
    let out = weir(&["-f", select.to_str().unwrap(), "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut expected: Vec<String> = text(&out.stdout)
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    got.sort();
    expected.sort();
    assert!(expected.len() > 50);
    assert_eq!(got, expected);
}

/// A LIMIT under the select list (`SELECT ..., count(*) AS n ... LIMIT 3` plans as a
/// projection over the limit) ends a query over an endless source once it has its rows; the
/// script then goes on. Also over processing-time windows, fired by the wall clock.
#[test]
fn a_limit_ends_a_query_over_an_endless_source() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("endless.sql");
    std::fs::write(
        &script,
        "CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP, pt AS PROCTIME(),
           WATERMARK FOR date_time AS date_time)
         WITH (connector = 'nexmark', stream = 'bid', rate = '2000');
         SELECT window_end, count(*) AS n FROM TUMBLE(bid, date_time, INTERVAL '5' MILLISECOND)
         GROUP BY window_start, window_end LIMIT 3;
         SELECT window_end, count(*) AS n FROM TUMBLE(bid, pt, INTERVAL '200' MILLISECOND)
         GROUP BY window_end LIMIT 2;",
    )
    .unwrap();
    let out = weir(&["-f", script.to_str().unwrap(), "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // Two results: a header and 3 rows, a header and 2 rows.
    assert_eq!(lines.len(), 7, "{stdout}");
    assert_eq!(lines[4], "window_end,n", "{stdout}");
    // Processing-time windows of 200 ms each hold a positive count.
    for l in &lines[5..] {
        let n: u64 = l.rsplit(',').next().unwrap().parse().unwrap();
        assert!(n > 0, "{l}");
    }
}

/// `weir -f q.sql | head -1`: when the reader of stdout goes away, an endless query is stopped
/// and weir ends quietly (it used to panic on the next line, or run on forever).
#[test]
fn a_closed_stdout_stops_the_query_and_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("endless.sql");
    std::fs::write(
        &script,
        "CREATE TABLE bid (auction BIGINT, price BIGINT) WITH (connector = 'nexmark', stream = 'bid', rate = '5000');
         SELECT auction, price FROM bid;",
    )
    .unwrap();
    for format in ["table", "csv", "json"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["-f", script.to_str().unwrap(), "--format", format])
            .current_dir(workspace())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty(), "{format}: no output");
        // The reader is dropped here: the pipe closes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{format}: weir still runs after its stdout closed"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{format}: {status}: {stderr}");
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
}

/// The REPL: `\d "my table"` describes a table whose quoted name has a space, and history is
/// on disk as soon as a line is entered, so a SIGKILL loses none of it.
#[test]
fn repl_describes_quoted_names_and_keeps_history_through_a_kill() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(workspace().join("tests"))
        .env("HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "CREATE TABLE \"my table\" (id BIGINT, ts TIMESTAMP) WITH (connector = 'file', path = 'data/events.csv', format = 'csv');\n\\d \"my table\"\nSELECT 40 + 2 AS answer;"
    )
    .unwrap();
    stdin.flush().unwrap();
    let mut out = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line.contains(" 42 |");
        out.push(line);
        if done {
            break;
        }
    }
    let out = out.join("\n");
    assert!(
        out.contains("| id ") && out.contains("Timestamp(ns)"),
        "\\d \"my table\" did not describe it:\n{out}"
    );
    // Killed while waiting for more input (stdin still open): no clean exit.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    let history = std::fs::read_to_string(home.path().join(".weir_history")).unwrap();
    for want in [
        "CREATE TABLE \"my table\"",
        "\\d \"my table\"",
        "SELECT 40 + 2",
    ] {
        assert!(
            history.contains(want),
            "{want} missing from history:\n{history}"
        );
    }
}

/// A sink created again under the same name and path (after DROP SINK, and from another data
/// directory) writes parts of its own: the earlier runs' committed files stay as they were.
#[test]
fn a_sink_created_again_over_the_same_path_leaves_earlier_parts_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let data = workspace().join("tests/data/events.csv");
    let script = |threshold: i64| {
        format!(
            "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
             WITH (connector = 'file', path = '{}', format = 'csv', header = 'true');
             CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') AS
             SELECT id FROM events WHERE v > {threshold};",
            data.display(),
            out_dir.display()
        )
    };
    let parts = || -> std::collections::BTreeMap<String, String> {
        std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
    };
    let run = |data_dir: &Path, sql: &str| {
        let path = tmp.path().join("job.sql");
        std::fs::write(&path, sql).unwrap();
        let out = weir(&[
            "-f",
            path.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let first_dir = tmp.path().join("first");
    run(&first_dir, &script(100));
    let first = parts();
    let rows = |files: &std::collections::BTreeMap<String, String>| -> Vec<String> {
        let mut r: Vec<String> = files
            .values()
            .flat_map(|b| b.lines().map(str::to_string))
            .collect();
        r.sort();
        r
    };
    assert_eq!(rows(&first), vec!["11", "12", "13"]);
    // Again in the same data directory after DROP SINK, then from another one.
    run(
        &first_dir,
        &format!(
            "DROP SINK s; {}",
            script(0).replace("CREATE TABLE", "CREATE OR REPLACE TABLE")
        ),
    );
    run(&tmp.path().join("second"), &script(120));
    let all = parts();
    for (name, body) in &first {
        assert_eq!(all.get(name), Some(body), "{name} of the first run changed");
    }
    let mut expected: Vec<String> = ["11", "12", "13", "13"]
        .iter()
        .map(|s| s.to_string())
        .chain((1..=13).filter(|&i| i != 4).map(|i| i.to_string()))
        .collect();
    expected.sort();
    assert_eq!(rows(&all), expected, "every run's rows, each once: {all:?}");
}

fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Waits (at most `limit`) for the child to exit; its status and stderr.
fn wait_exit(
    mut child: std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: weir still runs after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
    }
    (status, stderr)
}

fn spawn_script(script: &Path, extra: &[&str]) -> std::process::Child {
    use std::process::Stdio;
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("-f")
        .arg(script)
        .args(extra)
        .current_dir(workspace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir")
}

const ENDLESS_BIDS: &str = "CREATE TABLE bid (auction BIGINT, price BIGINT) \
     WITH (connector = 'nexmark', stream = 'bid', rate = '2000');";

/// Ctrl-C in `weir -f` cancels the running query and ends the script (the next statement
/// used to run); SIGTERM stops the jobs with a final checkpoint (it used to kill them
/// without one); a second signal ends the process at once, even in a statement that cannot
/// be cancelled (a connect to a server that never answers).
#[test]
fn signals_end_a_script_and_stop_its_jobs_with_a_checkpoint() {
    use std::io::{BufRead, BufReader, Read};
    let dir = tempfile::tempdir().unwrap();
    // 1. Ctrl-C during a query: cancelled, the script stops there, exit 130.
    let script = dir.path().join("query.sql");
    std::fs::write(
        &script,
        format!("{ENDLESS_BIDS}\nSELECT auction FROM bid;\nSELECT 'went on' AS marker;\n"),
    )
    .unwrap();
    let mut child = spawn_script(&script, &["--format", "csv"]);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "auction");
    signal(&child, "-INT");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let (status, stderr) = wait_exit(child, std::time::Duration::from_secs(30), "Ctrl-C");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!rest.contains("went on"), "the script went on after Ctrl-C");
    assert!(stderr.contains("interrupted"), "{stderr}");

    // 2. SIGTERM while the script waits for its endless sink job: a final checkpoint.
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let script = dir.path().join("sink.sql");
    std::fs::write(
        &script,
        format!(
            "{ENDLESS_BIDS}\nSET checkpoint_interval = '200ms';\n\
             CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') \
             AS SELECT auction, price FROM bid;\n",
            out.display()
        ),
    )
    .unwrap();
    let child = spawn_script(&script, &["--data-dir", data.to_str().unwrap()]);
    let manifests = data.join("jobs/s/checkpoints");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(&manifests).map_or(0, |d| d.count()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    signal(&child, "-TERM");
    let (status, stderr) = wait_exit(child, std::time::Duration::from_secs(30), "SIGTERM");
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("job s: stopped"), "{stderr}");
    let record = std::fs::read_to_string(data.join("jobs/s/job.json")).unwrap();
    assert!(record.contains("\"stopped\""), "{record}");
    // The stop checkpoint committed what it pre-committed: nothing is left staged.
    let staged: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(staged.is_empty(), "{staged:?}");

    // 3. `weir -f` on that data directory runs its own script and does not resume the
    //    stopped endless job (it used to, and then waited for it forever).
    let small = dir.path().join("small.sql");
    std::fs::write(&small, "SELECT 1 AS one;\n").unwrap();
    let child = spawn_script(
        &small,
        &["--data-dir", data.to_str().unwrap(), "--format", "csv"],
    );
    let (status, stderr) = wait_exit(child, std::time::Duration::from_secs(30), "-f over jobs");
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("job s is not resumed by weir -f"),
        "{stderr}"
    );

    // 4. A second Ctrl-C ends the process at once, here while the first one's stop waits
    //    for a job whose restart the fault hook holds for 20 s.
    let data2 = dir.path().join("data2");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("-f")
        .arg(&script)
        .args(["--data-dir", data2.to_str().unwrap()])
        .env("WEIR_FAULT", "fail_commit:2,pause_restart:20000")
        .current_dir(workspace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("pausing the restart"))
    {
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the job did not fail and pause: {seen:?}"),
        }
    }
    signal(&child, "-INT");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C ended it: {seen:?}"
    );
    let started = std::time::Instant::now();
    signal(&child, "-INT");
    let (status, _) = wait_exit(child, std::time::Duration::from_secs(15), "second Ctrl-C");
    let took = started.elapsed();
    // The reader thread may still hold the last lines when the process has exited: read
    // until it ends at the pipe's end (it used to be `try_iter`, which missed them).
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(10)) {
        seen.push(line);
    }
    assert_eq!(status.code(), Some(130), "{seen:?}");
    assert!(
        seen.iter().any(|l| l.contains("interrupted again")),
        "{seen:?}"
    );
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

/// Unnamed expressions are named as PostgreSQL names them (`?column?`), not `Int64(1)`; an
/// error's cause is printed once, not repeated.
#[test]
fn unnamed_columns_and_errors_read_as_a_person_expects() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("names.sql");
    std::fs::write(&script, "SELECT 1, 'a' || 'b', 2 AS two, upper('x');\n").unwrap();
    let out = weir(&["-f", script.to_str().unwrap(), "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.lines().next(),
        Some("?column?,?column?,two,upper"),
        "{stdout}"
    );
    std::fs::write(dir.path().join("file"), "").unwrap();
    let script = dir.path().join("sink.sql");
    std::fs::write(
        &script,
        format!(
            "CREATE TABLE e (id BIGINT) WITH (connector = 'file', path = '{}', format = 'csv');\n\
             CREATE SINK s WITH (connector = 'file', path = '{}', format = 'csv') AS SELECT id FROM e;\n",
            workspace().join("tests/data/events.csv").display(),
            dir.path().join("file/x").display()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let out = weir(&[
        "--data-dir",
        data.to_str().unwrap(),
        "-f",
        script.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.matches("Not a directory").count(), 1, "{stderr}");
}

/// A table created with a relative path is recorded with the path resolved, so a later
/// start in another directory still finds the file (it used to be resolved there again).
#[test]
fn a_relative_path_survives_a_start_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(first.join("rows.csv"), "a\n1\n2\n").unwrap();
    let data = dir.path().join("data");
    let run = |cwd: &Path, sql: &str| {
        let script = cwd.join("s.sql");
        std::fs::write(&script, sql).unwrap();
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args([
                "--data-dir",
                data.to_str().unwrap(),
                "-f",
                "s.sql",
                "--format",
                "csv",
            ])
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    let out = run(
        &first,
        "CREATE TABLE r (a BIGINT) WITH (connector = 'file', path = 'rows.csv', format = 'csv', header = 'true');\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let catalog = std::fs::read_to_string(data.join("catalog.sql")).unwrap();
    let absolute = first
        .join("rows.csv")
        .canonicalize()
        .unwrap_or(first.join("rows.csv"));
    assert!(
        catalog.contains(&*first.join("rows.csv").to_string_lossy())
            || catalog.contains(&*absolute.to_string_lossy()),
        "{catalog}"
    );
    let out = run(&other, "SELECT sum(a) AS s FROM r;\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "s\n3\n");
}

/// A join whose output is far larger than its input (a 4-way self-join over 20,000 rows of
/// 100 keys: 1.6e11 rows) spills and streams under the memory budget and stops at once on
/// Ctrl-C (it used to grow past 20 GB, and to take minutes to stop).
#[test]
fn ctrl_c_stops_a_join_that_outgrows_memory() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..20_000).map(|i| format!("{},{i}\n", i % 100)).collect();
    std::fs::write(dir.path().join("s.csv"), format!("k,v\n{rows}")).unwrap();
    let script = dir.path().join("join.sql");
    std::fs::write(
        &script,
        format!(
            "CREATE TABLE s (k BIGINT, v BIGINT) WITH (connector = 'file', path = '{}', \
             header = 'true');\n\
             SELECT a.v, b.v, c.v, d.v FROM s a JOIN s b ON a.k = b.k JOIN s c ON b.k = c.k \
             JOIN s d ON c.k = d.k;\n",
            dir.path().join("s.csv").display()
        ),
    )
    .unwrap();
    let mut child = spawn_script(&script, &["--format", "csv"]);
    let mut stdout = child.stdout.take().unwrap();
    // Keep reading, so the child never waits on a full pipe.
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // The joins buffer and spill their inputs, then fire.
    std::thread::sleep(std::time::Duration::from_secs(8));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    signal(&child, "-INT");
    let started = std::time::Instant::now();
    let (status, stderr) = wait_exit(child, std::time::Duration::from_secs(20), "Ctrl-C");
    let _ = drain.join();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?} to stop",
        started.elapsed()
    );
    // The default budget is 256 MB; the process stays within a few times that.
    assert!(rss_kib < 2 << 20, "{} MiB resident", rss_kib >> 10);
}
