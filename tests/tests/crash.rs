//! Crash tests: a real `weir` child process writing a file sink is killed with SIGKILL at
//! random moments and resumed with `weir resume` (at other parallelisms too); the committed
//! output is then compared row by row with the golden results.
//!
//! - every windowed query of the .slt files (and every interval join and every query in
//!   streaming mode: they keep state too), as a sink job with checkpoints every few rows,
//!   killed and resumed at parallelism 2, 3 and 1: output equal to the .slt golden (an
//!   updating query's changelog ending in the same rows as the golden changelog).
//! - 1,000,000 out-of-order rows with late ones, at least 20 kills: exactly-once output equals
//!   DataFusion batch SQL over the same rows (late rows removed by a plain replay) as a
//!   multiset; at-least-once output counts every row in some result of its window. The table
//!   keeps its late rows (`late_rows`): exactly-once, each late row is in the late table once,
//!   with the watermark it missed; at-least-once, each is there at least once.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::process::{committed_lines, kill_and_resume, weir_binary};
use common::reference::{late_reference, reference_rows, write_input};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// A stateful query of an .slt file (windowed, or updating in streaming mode) with its golden
/// rows and the tables (and settings) it needs.
struct Golden {
    file: String,
    tables: Vec<String>,
    query: String,
    expected: Vec<String>,
}

/// Reads the `statement ok` CREATE TABLEs and VIEWs and the windowed `query` blocks of an .slt file
/// (every query of `interval_join.slt`: each is an interval join, stateful without windows).
fn windowed_queries(path: &Path) -> Vec<Golden> {
    let text = std::fs::read_to_string(path).unwrap();
    let stateful_file = path.file_name().is_some_and(|n| n == "interval_join.slt");
    let mut tables = Vec::new();
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    // Records meant for other engines (`onlyif postgres-extended`, `skipif weir`) are not
    // the in-process golden.
    let mut other_engine = false;
    while let Some(line) = lines.next() {
        let head = line.trim();
        if let Some(engine) = head.strip_prefix("onlyif ") {
            other_engine = engine.trim() != "weir";
            continue;
        }
        if let Some(engine) = head.strip_prefix("skipif ") {
            other_engine = engine.trim() == "weir";
            continue;
        }
        let is_statement = head == "statement ok";
        let is_query = head.starts_with("query ");
        if !is_statement && !is_query {
            continue;
        }
        if std::mem::take(&mut other_engine) {
            continue;
        }
        let mut sql = Vec::new();
        while let Some(l) = lines.peek() {
            if l.trim().is_empty() || l.trim() == "----" {
                break;
            }
            sql.push(lines.next().unwrap().to_string());
        }
        let sql = sql.join("\n");
        if is_statement {
            let upper = sql.trim_start().to_ascii_uppercase();
            if upper.starts_with("CREATE TABLE")
                || upper.starts_with("CREATE VIEW")
                || upper.starts_with("CREATE OR REPLACE VIEW")
                || upper.starts_with("SET RUNTIME_MODE")
                || upper.starts_with("SET WINDOW_EMIT")
            {
                tables.push(sql);
            }
            continue;
        }
        let mut expected = Vec::new();
        if lines.peek().is_some_and(|l| l.trim() == "----") {
            lines.next();
            for l in lines.by_ref() {
                if l.trim().is_empty() {
                    break;
                }
                expected.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        let upper = sql.to_ascii_uppercase();
        // Processing time is not reproducible under replay: no golden to compare with.
        if tables
            .iter()
            .any(|t| t.to_ascii_uppercase().contains("PROCTIME()"))
        {
            continue;
        }
        // A window table function call (not a word in a string, like 'session closed').
        let windowed = ["TUMBLE(", "HOP(", "CUMULATE(", "SESSION("]
            .iter()
            .any(|w| upper.contains(w))
            || stateful_file;
        // Updating queries (streaming mode) keep state too: their changelog is checked.
        let streaming = tables.iter().rev().find_map(|t| {
            let t = t.to_ascii_uppercase();
            t.starts_with("SET RUNTIME_MODE")
                .then(|| t.contains("'STREAMING'"))
        }) == Some(true);
        let select = upper.trim_start().starts_with("SELECT");
        if select
            && (windowed || streaming)
            && !upper.contains("LIMIT")
            && !upper.contains("ORDER BY")
        {
            out.push(Golden {
                file: path.file_name().unwrap().to_string_lossy().into_owned(),
                tables: tables.clone(),
                query: sql,
                expected,
            });
        }
    }
    out
}

/// Slows a table down so that a kill lands mid-stream: one row per batch at 20 rows/s for
/// files, 1,000 events/s for the generator.
fn throttled(ddl: &str) -> String {
    if !ddl
        .trim_start()
        .to_ascii_uppercase()
        .starts_with("CREATE TABLE")
    {
        return ddl.to_string();
    }
    let extra = if ddl.contains("'nexmark'") {
        ", rate = '1000', batch_size = '10'"
    } else {
        ", rate = '20', batch_size = '1'"
    };
    let close = ddl.rfind(')').expect("WITH (...)");
    format!("{}{extra}{}", &ddl[..close], &ddl[close..])
}

/// A sink CSV line in the .slt text form (values separated by spaces, NULL for empty).
fn as_slt_row(line: &str) -> String {
    line.split(',')
        .map(|v| if v.is_empty() { "NULL" } else { v })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether an .slt row is a change (`+I`, `-U`, `+U`, `-D` first).
fn is_change(row: &str) -> bool {
    ["+I ", "-U ", "+U ", "-D "]
        .iter()
        .any(|op| row.starts_with(op))
}

/// The rows a changelog ends in (as a multiset; each change's op first, then the row).
fn applied(changes: &[String]) -> Vec<String> {
    let mut table: BTreeMap<String, i64> = BTreeMap::new();
    for c in changes {
        let (op, row) = c.split_once(' ').unwrap_or((c, ""));
        *table.entry(row.to_string()).or_default() += if op.starts_with('+') { 1 } else { -1 };
    }
    assert!(
        table.values().all(|n| *n >= 0),
        "a retraction of a row never added: {table:?}"
    );
    table
        .into_iter()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n as usize))
        .collect()
}

#[test]
fn every_windowed_slt_query_survives_kills_and_rescaling() {
    let mut goldens = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(tests_dir().join("slt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        goldens.extend(windowed_queries(&f));
    }
    assert!(
        goldens.len() >= 8,
        "found only {} windowed queries",
        goldens.len()
    );
    let mut rng = StdRng::seed_from_u64(7);
    for (i, g) in goldens.iter().enumerate() {
        eprintln!("{} query {i}: {}", g.file, g.query);
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        let out = work.path().join("out");
        let mut script = String::new();
        for t in &g.tables {
            writeln!(script, "{};", throttled(t)).unwrap();
        }
        // An updating golden is a changelog (`+I a 1`, ...): the sink writes the op column.
        let changelog = g.expected.first().is_some_and(|r| is_change(r));
        writeln!(
            script,
            "CREATE SINK golden WITH (connector = 'file', path = '{}', format = 'csv', \
             checkpoint_interval = '30ms'{}) AS {};",
            out.display(),
            if changelog { ", changelog = 'op'" } else { "" },
            g.query
        )
        .unwrap();
        let script_path = work.path().join("job.sql");
        std::fs::write(&script_path, &script).unwrap();
        kill_and_resume(
            &script_path,
            &data,
            "golden",
            &tests_dir(),
            &mut rng,
            (50, 400),
            &[3, 1],
            (50, 400),
            Some(2),
        );
        let mut got: Vec<String> = committed_lines(&out)
            .iter()
            .map(|l| as_slt_row(l))
            .collect();
        let mut expected = g.expected.clone();
        // A changelog's rows depend on how rows came in batches (one at a time here, four in
        // the .slt file); what it ends in does not.
        if changelog {
            got = applied(&got);
            expected = applied(&expected);
        }
        got.sort();
        expected.sort();
        assert_eq!(
            got, expected,
            "query {i} of {}:\n{}\n(script {script})",
            g.file, g.query
        );
    }
}

const ROWS: usize = 1_000_000;

/// What a run of the big job left: its committed output and late rows, each sorted.
struct Run {
    lines: Vec<String>,
    /// `id,<watermark missed in ms>` of every row in the late table.
    late: Vec<String>,
    killed: usize,
}

/// Runs the sink job over the big input with `kills` SIGKILLs at random moments, resuming at
/// random parallelism; returns the committed lines, the late table's rows and how many kills
/// hit a running job.
fn run_with_kills(work: &Path, events: &Path, delivery: &str, kills: usize) -> Run {
    let data = work.join("data");
    let out = work.join("out");
    let script = format!(
        "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv', header = 'true',
               batch_size = '2000', rate = '100000', late_rows = 'events_late');
         SET checkpoint_interval = '100ms';
         SET delivery = '{delivery}';
         CREATE SINK big WITH (connector = 'file', path = '{}', format = 'csv') AS
         SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total
         FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k;",
        events.display(),
        out.display()
    );
    let script_path = work.join("job.sql");
    std::fs::write(&script_path, script).unwrap();
    let mut rng = StdRng::seed_from_u64(if delivery == "exactly_once" { 1 } else { 2 });
    let resumes: Vec<usize> = (1..kills).map(|_| rng.gen_range(1..=3)).collect();
    let killed = kill_and_resume(
        &script_path,
        &data,
        "big",
        work,
        &mut rng,
        (100, 600),
        &resumes,
        (150, 700),
        None,
    );
    let staged: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        staged.is_empty(),
        "staged files left after the job finished: {staged:?}"
    );
    let mut lines = committed_lines(&out);
    lines.sort();
    // The late table, read by a new process over the same data directory.
    let read = work.join("late.sql");
    std::fs::write(
        &read,
        "SELECT id, CAST(late_watermark AS BIGINT) / 1000000 FROM events_late;",
    )
    .unwrap();
    let out = std::process::Command::new(weir_binary())
        .arg("--data-dir")
        .arg(&data)
        .arg("-f")
        .arg(&read)
        .args(["--format", "csv"])
        .current_dir(work)
        .output()
        .expect("read the late table");
    assert!(
        out.status.success(),
        "reading the late table: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut late: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    late.sort();
    Run {
        lines,
        late,
        killed,
    }
}

/// `got` equals `expected` as a multiset (both sorted); else names a few missing and extra
/// (or duplicated) lines.
fn assert_same_rows(what: &str, got: &[String], expected: &[String]) {
    if got == expected {
        return;
    }
    let (g, e) = (counts(got), counts(expected));
    let missing: Vec<_> = e.keys().filter(|k| !g.contains_key(*k)).take(5).collect();
    let extra: Vec<_> = g
        .iter()
        .filter(|(k, n)| e.get(*k).is_none_or(|m| *n > m))
        .take(5)
        .collect();
    panic!(
        "{what} differ: {} rows vs {} expected; missing {missing:?}; extra or duplicated {extra:?}",
        got.len(),
        expected.len()
    );
}

fn counts(lines: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_str()).or_insert(0) += 1;
    }
    m
}

#[test]
fn a_million_rows_survive_twenty_kills_exactly_once_and_at_least_once() {
    let work = tempfile::tempdir().unwrap();
    let (events, reference) = write_input(work.path(), ROWS, 10, 42);
    let expected = reference_rows(&reference, ",");
    assert!(expected.len() > 1000, "{} reference rows", expected.len());

    let eo = work.path().join("exactly_once");
    std::fs::create_dir_all(&eo).unwrap();
    let expected_late = late_reference(&reference);
    assert!(
        expected_late.len() > 1000,
        "{} late rows in the input",
        expected_late.len()
    );
    let Run {
        lines: got,
        late,
        killed,
    } = run_with_kills(&eo, &events, "exactly_once", 21);
    assert!(killed >= 20, "only {killed} kills hit a running job");
    assert_same_rows("exactly-once late rows", &late, &expected_late);
    assert_same_rows("exactly-once output", &got, &expected);

    let alo = work.path().join("at_least_once");
    std::fs::create_dir_all(&alo).unwrap();
    let Run {
        lines: got,
        late,
        killed,
    } = run_with_kills(&alo, &events, "at_least_once", 21);
    assert!(killed >= 20, "only {killed} kills hit a running job");
    common::reference::assert_at_least_once(&got, &expected, killed);
    let seen: std::collections::BTreeSet<&String> = late.iter().collect();
    let lost: Vec<&String> = expected_late.iter().filter(|l| !seen.contains(l)).collect();
    assert!(
        lost.is_empty() && late.len() >= expected_late.len(),
        "at-least-once lost {} late rows, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    let unknown = late
        .iter()
        .filter(|l| expected_late.binary_search(l).is_err())
        .count();
    assert_eq!(unknown, 0, "late rows that are not late");
}
