//! Updating queries (DESIGN.md §8): a GROUP BY without a window emits a changelog (`op`
//! first: `+I`, `-U`, `+U`, `-D`). The oracle is batch: once bounded input ends, the changelog
//! applied in order must equal DataFusion batch SQL over the same rows, at any parallelism and
//! batch size (which change the changelog, never its end state). Also: the refusals of
//! append-only consumers, a changelog file sink and a materialized view holding the current
//! result.

mod common;

use std::fmt::Write as _;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{apply_changelog, execute, session, text_rows, Collected};
use weir_planner::{Session, SessionConfig};

/// Random rows `id, k, v`: a few dozen keys, NULLs and repeated values.
fn write_rows(dir: &std::path::Path, seed: u64, n: usize) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = rng.gen_range(1..40);
    let mut text = String::from("id,k,v\n");
    for id in 0..n {
        let v = if rng.gen::<f64>() < 0.07 {
            String::new()
        } else {
            rng.gen_range(-50..500).to_string()
        };
        writeln!(text, "{id},k{},{v}", rng.gen_range(0..keys)).unwrap();
    }
    let path = dir.join(format!("rows-{seed}.csv"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The queries, each run by weir (streaming) and by DataFusion (batch) as written.
const QUERIES: &[&str] = &[
    // COUNT(DISTINCT) over one argument with and without FILTER share one multiset.
    "SELECT k, count(*), count(v), sum(v), min(v), max(v), avg(v), count(DISTINCT v), count(DISTINCT v) FILTER (WHERE id % 2 = 0) FROM t GROUP BY k",
    "SELECT k, count(*) AS n, sum(v) FILTER (WHERE v > 100) AS big FROM t WHERE v IS NOT NULL OR id % 3 = 0 GROUP BY k HAVING count(*) > 3",
    // The outer aggregate reads an updating stream: each change of n retracts a row.
    "SELECT n % 5 AS b, count(*), sum(n), min(n), max(n), count(DISTINCT k), count(DISTINCT k) FILTER (WHERE n > 20), count(DISTINCT n) FILTER (WHERE k < 'k9') FROM (SELECT k, count(*) AS n FROM t GROUP BY k) GROUP BY n % 5",
    "SELECT count(*), sum(v), max(v), min(k) FROM t",
    "SELECT v % 10 AS d, max(k), min(id) FROM t WHERE v IS NOT NULL GROUP BY v % 10",
];

/// DataFusion batch SQL over the rows' CSV file, as text rows, sorted.
fn batch_reference(path: &str, sql: &str) -> Vec<Vec<String>> {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
    ]);
    common::batch_csv_sql(&[("t", path)], &schema, sql)
}

fn create_table(s: &mut Session, path: &str, batch_size: usize) {
    let ddl = format!(
        "CREATE TABLE t (id BIGINT, k VARCHAR, v BIGINT)
         WITH (connector = 'file', path = '{path}', header = 'true', batch_size = '{batch_size}')"
    );
    assert!(matches!(execute(s, &ddl).unwrap(), Collected::Command));
}

/// Runs `sql` in streaming mode (within `budget`, with `mini_batch`, if given); returns the
/// changelog rows in arrival order.
fn changelog(
    path: &str,
    batch_size: usize,
    parallelism: usize,
    (budget, mini_batch): (Option<&str>, Option<&str>),
    sql: &str,
) -> Vec<Vec<String>> {
    let mut s = session(parallelism);
    if let Some(b) = budget {
        execute(&mut s, &format!("SET memory_budget = '{b}'")).unwrap();
    }
    if let Some(m) = mini_batch {
        execute(&mut s, &format!("SET mini_batch = '{m}'")).unwrap();
    }
    create_table(&mut s, path, batch_size);
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    let Collected::Rows(types, batches) = execute(&mut s, sql).unwrap() else {
        panic!("{sql}: no rows")
    };
    assert_eq!(types[0], DataType::Utf8, "{sql}: the op column comes first");
    text_rows(&batches)
}

#[test]
fn applied_changelogs_equal_batch_sql_at_any_parallelism_and_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut retractions = 0;
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed + 100);
        let path = write_rows(dir.path(), seed, rng.gen_range(200..3000));
        for sql in QUERIES {
            let want = batch_reference(&path, sql);
            // A 1-byte memory budget: whatever an operator holds in memory must spill or stream.
            // Mini-batches of 1 ms apply a timer's worth of batches at a time; of an hour, all
            // the input at its end.
            for (parallelism, batch_size, budget, mini_batch) in [
                (1, 1, None, None),
                (1, 64, None, None),
                (2, 7, Some("1"), None),
                (3, 200, None, None),
                (3, 8192, Some("1"), None),
                (2, 3, None, Some("1ms")),
                (3, 16, Some("1"), Some("1h")),
            ] {
                let log = changelog(&path, batch_size, parallelism, (budget, mini_batch), sql);
                retractions += log.iter().filter(|r| r[0] == "-U" || r[0] == "-D").count();
                assert_eq!(
                    apply_changelog(&log),
                    want,
                    "seed {seed}, parallelism {parallelism}, batch_size {batch_size}, budget {budget:?}, mini_batch {mini_batch:?}: {sql}"
                );
            }
        }
    }
    assert!(
        retractions > 1000,
        "the inputs made results change ({retractions} retractions)"
    );
}

#[test]
fn bounded_input_in_auto_mode_gives_the_final_result_without_an_op_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rows(dir.path(), 9, 500);
    let mut s = session(2);
    create_table(&mut s, &path, 16);
    let sql = QUERIES[0];
    let Collected::Rows(types, batches) = execute(&mut s, sql).unwrap() else {
        panic!("no rows")
    };
    assert_eq!(types[0], DataType::Utf8, "k");
    let mut rows = text_rows(&batches);
    rows.sort();
    assert_eq!(rows, batch_reference(&path, sql));
    assert!(rows.iter().all(|r| r[0].starts_with('k')), "no op column");
}

#[test]
fn append_only_consumers_refuse_an_updating_query_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rows(dir.path(), 3, 50);
    let (mut s, _) = Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(dir.path().join("data")),
        ..SessionConfig::default()
    })
    .unwrap();
    create_table(&mut s, &path, 8);
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    let agg = "SELECT k, count(*) AS n FROM t GROUP BY k";
    let out = dir.path().join("out");
    let cases = [
        (
            format!(
                "CREATE SINK plain WITH (connector = 'file', path = '{}') AS {agg}",
                out.display()
            ),
            "needs changelog = 'op'",
        ),
        (
            format!("CREATE MATERIALIZED VIEW mv WITH (delivery = 'at_least_once') AS SELECT a.k, t.id FROM ({agg}) a JOIN t ON a.k = t.k"),
            "would apply replayed changes again",
        ),
        (
            format!("SELECT * FROM ({agg}) ORDER BY n"),
            "ORDER BY over an updating stream",
        ),
        (
            // Joined on a value, not the key: a key's rows move between join instances.
            format!("CREATE MATERIALIZED VIEW mv2 WITH (delivery = 'at_least_once') AS SELECT a.k, b.k FROM ({agg}) a JOIN ({agg}) b ON a.n = b.n"),
            "would apply replayed changes again",
        ),
        (
            format!("SELECT * FROM ({agg}) UNION ALL SELECT k, id FROM t LIMIT 3"),
            "LIMIT over an updating stream",
        ),
        (
            "SET early_fire_interval = 'later'".to_string(),
            "early_fire_interval",
        ),
        (
            "SET runtime_mode = 'sometimes'".to_string(),
            "runtime_mode must be 'auto' or 'streaming'",
        ),
        (
            "SET window_emit = 'often'".to_string(),
            "window_emit must be 'on_close' or 'on_update'",
        ),
        ("SET state_ttl = 'soon'".to_string(), "state_ttl"),
        ("SET mini_batch = 'soon'".to_string(), "mini_batch"),
        (
            format!(
                "CREATE SINK dbz WITH (connector = 'file', path = '{}', format = 'debezium-json', changelog = 'op') AS {agg}",
                out.display()
            ),
            "carries each change's kind",
        ),
    ];
    for (sql, message) in cases {
        let err = match execute(&mut s, &sql) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{sql}: accepted"),
        };
        assert!(err.contains(message), "{sql}: {err}");
    }
}

/// Runs `sql` over the rows at `path` (read `batch_size` at a time) in streaming mode into a
/// file sink at `dir/out` with `format` options, at parallelism 2 with 50 ms checkpoints, and
/// waits for it to finish.
fn run_file_sink(dir: &std::path::Path, path: &str, batch_size: usize, format: &str, sql: &str) {
    let (mut s, _) = Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(dir.join("data")),
        ..SessionConfig::default()
    })
    .unwrap();
    create_table(&mut s, path, batch_size);
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    execute(&mut s, "SET checkpoint_interval = '50ms'").unwrap();
    let out = dir.join("out");
    execute(
        &mut s,
        &format!(
            "CREATE SINK log WITH (connector = 'file', path = '{}', {format}) AS {sql}",
            out.display()
        ),
    )
    .unwrap();
    for (name, state, error) in common::wait_jobs(&mut s) {
        assert_eq!(error, None, "job {name} ({state:?})");
    }
}

#[test]
fn a_changelog_file_sink_commits_a_changelog_that_applies_to_the_batch_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rows(dir.path(), 21, 2000);
    let out = dir.path().join("out");
    let sql = QUERIES[1];
    run_file_sink(
        dir.path(),
        &path,
        50,
        "format = 'csv', changelog = 'op'",
        sql,
    );
    let rows = changelog_parts(&out);
    assert!(
        rows.iter().any(|r| r[0] == "-U"),
        "the changelog updates rows"
    );
    assert_eq!(apply_changelog(&rows), batch_reference(&path, sql));
}

/// A debezium-json file sink: one event per change (an update's two rows in one), which
/// applied in commit order gives the batch result.
#[test]
fn a_debezium_json_file_sink_writes_events_that_apply_to_the_batch_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rows(dir.path(), 23, 1500);
    let out = dir.path().join("out");
    let sql = QUERIES[1];
    run_file_sink(dir.path(), &path, 30, "format = 'debezium-json'", sql);
    // Parts in commit order (epoch, then instance), as for the changelog sink.
    let parts = committed_parts(&out);
    let row = |v: &serde_json::Value| -> Vec<String> {
        ["k", "n", "big"]
            .iter()
            .map(|c| match &v[*c] {
                serde_json::Value::Null => "NULL".to_string(),
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    };
    let mut log: Vec<Vec<String>> = Vec::new();
    let mut updates = 0;
    for part in &parts {
        for line in std::fs::read_to_string(part).unwrap().lines() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            match event["op"].as_str().unwrap() {
                "c" => log.push([vec!["+I".to_string()], row(&event["after"])].concat()),
                "d" => log.push([vec!["-D".to_string()], row(&event["before"])].concat()),
                "u" => {
                    updates += 1;
                    log.push([vec!["-U".to_string()], row(&event["before"])].concat());
                    log.push([vec!["+U".to_string()], row(&event["after"])].concat());
                }
                other => panic!("op {other}"),
            }
        }
    }
    assert!(updates > 0, "updates come as one event");
    assert_eq!(apply_changelog(&log), batch_reference(&path, sql));
}

#[test]
fn a_materialized_view_of_an_updating_query_holds_the_batch_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rows(dir.path(), 33, 3000);
    let (mut s, _) = Session::open(SessionConfig {
        parallelism: 3,
        data_dir: Some(dir.path().join("data")),
        ..SessionConfig::default()
    })
    .unwrap();
    create_table(&mut s, &path, 40);
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    execute(&mut s, "SET checkpoint_interval = '20ms'").unwrap();
    for (i, sql) in QUERIES.iter().enumerate() {
        execute(&mut s, &format!("CREATE MATERIALIZED VIEW mv{i} AS {sql}")).unwrap();
    }
    // A join of two aggregates on their group keys has a key (the joined group key), so an
    // at-least-once view of it applies upserts by that key.
    execute(
        &mut s,
        &format!(
            "CREATE MATERIALIZED VIEW mv_join WITH (delivery = 'at_least_once') AS {JOIN_SQL}"
        ),
    )
    .unwrap();
    for (name, state, error) in common::wait_jobs(&mut s) {
        assert_eq!(error, None, "job {name} ({state:?})");
    }
    assert_eq!(
        common::query_sorted(&mut s, "SELECT * FROM mv_join"),
        batch_reference(&path, JOIN_SQL),
        "{JOIN_SQL}"
    );
    for (i, sql) in QUERIES.iter().enumerate() {
        assert_eq!(
            common::query_sorted(&mut s, &format!("SELECT * FROM mv{i}")),
            batch_reference(&path, sql),
            "{sql}"
        );
    }
}

/// The committed rows of a changelog file sink, in commit order: by epoch, then instance
/// (within an epoch each key's changes come from one instance; across a rescale its instance
/// changes, so ordering by instance first would reorder them). The values (op, k1, whole
/// numbers, empty for NULL) need no CSV quoting.
fn changelog_parts(dir: &std::path::Path) -> Vec<Vec<String>> {
    committed_parts(dir)
        .iter()
        .flat_map(|part| csv_rows(&std::fs::read_to_string(part).unwrap(), false))
        .collect()
}

/// A file sink's committed part files in commit order (see [`changelog_parts`]).
fn committed_parts(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut parts: Vec<((u64, usize), std::path::PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .map(|p| {
            // part-<job>-<run>-<instance>-<epoch>.csv
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let (stem, _) = name.rsplit_once('.').unwrap();
            let mut fields = stem.rsplitn(3, '-');
            let epoch = fields.next().unwrap().parse().unwrap();
            let instance = fields.next().unwrap().parse().unwrap();
            ((epoch, instance), p)
        })
        .collect();
    parts.sort();
    parts.into_iter().map(|(_, p)| p).collect()
}

/// CSV lines (after a header line, with `header`) as text rows, NULL for empty fields.
fn csv_rows(text: &str, header: bool) -> Vec<Vec<String>> {
    text.lines()
        .skip(usize::from(header))
        .map(|l| {
            l.split(',')
                .map(|f| {
                    if f.is_empty() {
                        "NULL".into()
                    } else {
                        f.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

/// A join of two updating aggregates (a view of it holds a multiset: exactly-once).
const JOIN_SQL: &str = "SELECT a.k, a.n, b.s FROM (SELECT k, count(*) AS n FROM t GROUP BY k) a \
     JOIN (SELECT k, sum(v) AS s FROM t WHERE v > 100 GROUP BY k) b ON a.k = b.k";

/// The three keys with the most rows (a Top-N kept by rank: at-least-once is possible).
const TOP_SQL: &str =
    "SELECT k, n, rn FROM (SELECT k, n, ROW_NUMBER() OVER (ORDER BY n DESC, k) AS rn \
     FROM (SELECT k, count(*) AS n FROM t GROUP BY k)) WHERE rn <= 3";

#[test]
fn an_updating_view_and_changelog_sink_survive_kills_and_rescaling() {
    use common::process::{kill_and_resume, weir_binary};
    let work = tempfile::tempdir().unwrap();
    let path = write_rows(work.path(), 77, 20_000);
    let sql = QUERIES[1];
    let out = work.path().join("out");
    let script = format!(
        "CREATE TABLE t (id BIGINT, k VARCHAR, v BIGINT)
         WITH (connector = 'file', path = '{path}', header = 'true', batch_size = '100', rate = '20000');
         SET runtime_mode = 'streaming';
         SET checkpoint_interval = '50ms';
         CREATE MATERIALIZED VIEW mv WITH (mini_batch = '30ms') AS {sql};
         CREATE MATERIALIZED VIEW mv_alo WITH (delivery = 'at_least_once') AS {sql};
         CREATE MATERIALIZED VIEW mv_join AS {JOIN_SQL};
         CREATE MATERIALIZED VIEW mv_top WITH (delivery = 'at_least_once') AS {TOP_SQL};
         CREATE SINK log WITH (connector = 'file', path = '{}', changelog = 'op') AS {sql};",
        out.display()
    );
    let script_path = work.path().join("job.sql");
    std::fs::write(&script_path, script).unwrap();
    let data = work.path().join("data");
    let mut rng = StdRng::seed_from_u64(5);
    let killed = kill_and_resume(
        &script_path,
        &data,
        "log",
        work.path(),
        &mut rng,
        (150, 500),
        &[3, 1, 2],
        (150, 500),
        None,
    );
    assert!(killed >= 2, "{killed} kills hit a running job");
    let want = batch_reference(&path, sql);
    // The views, read by a new process: exactly-once and at-least-once (upserts by the
    // group key, which replays repeat harmlessly), a join of two updating aggregates, and an
    // at-least-once Top-N kept by rank.
    for (view, sql) in [
        ("mv", sql),
        ("mv_alo", sql),
        ("mv_join", JOIN_SQL),
        ("mv_top", TOP_SQL),
    ] {
        let read = work.path().join("read.sql");
        std::fs::write(&read, format!("SELECT * FROM {view};")).unwrap();
        let got = std::process::Command::new(weir_binary())
            .arg("--data-dir")
            .arg(&data)
            .args(["-f", read.to_str().unwrap(), "--format", "csv"])
            .output()
            .unwrap();
        assert!(
            got.status.success(),
            "reading {view}: {:?}\nstderr: {}\nstdout: {}",
            got.status,
            String::from_utf8_lossy(&got.stderr),
            String::from_utf8_lossy(&got.stdout)
        );
        let mut rows = csv_rows(&String::from_utf8_lossy(&got.stdout), true);
        rows.sort();
        assert_eq!(
            rows,
            batch_reference(&path, sql),
            "{view} after {killed} kills"
        );
    }
    // The changelog file, applied in commit order (each key's changes come from one
    // instance, in epoch order).
    assert_eq!(
        apply_changelog(&changelog_parts(&out)),
        want,
        "the changelog after {killed} kills"
    );
}

/// Adds to `prefixes` the number of input rows each checkpoint of `job` now on disk had
/// read: the file source's recorded line (the header is line 1, so the next line to read is
/// rows read + 2).
fn checkpointed_prefixes(
    data: &std::path::Path,
    job: &str,
    prefixes: &mut std::collections::BTreeSet<usize>,
) {
    let dir = data.join("jobs").join(job).join("checkpoints");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("manifest-") && name.ends_with(".json")) {
            continue;
        }
        // A manifest being written is not there yet (written whole, then renamed).
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let manifest = weir_engine::checkpoint::Manifest::decode(&bytes).unwrap();
        // One file: the instance that reads it records its line; others record none.
        let line = manifest
            .sources
            .iter()
            .filter_map(|s| s.position.get(8..16))
            .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
            .max();
        if let Some(line) = line {
            prefixes.insert(line as usize - 2);
        }
    }
}

/// Read committed, checked against the input: while three updating views are maintained
/// (an aggregate whose keys leave the result, a join of two updating aggregates, a Top-N),
/// every read of each view equals DataFusion batch SQL over a prefix of the input that ends
/// where one of the view's checkpoints had read up to (every manifest is kept, and each
/// records the file source's position). A read that mixed two epochs, or half of one epoch's
/// instances, would match no prefix.
#[test]
fn every_read_of_an_updating_view_is_the_result_of_a_checkpointed_input_prefix() {
    let work = tempfile::tempdir().unwrap();
    let n = 12_000;
    let path = write_rows(work.path(), 91, n);
    let data = work.path().join("data");
    let (mut s, _) = Session::open(SessionConfig {
        parallelism: 2,
        data_dir: Some(data.clone()),
        checkpoints_retained: 100_000,
        ..SessionConfig::default()
    })
    .unwrap();
    // About 5 s of input: each view must complete more than 10 checkpoints even while this
    // file's other tests load both cores (at 6000 rows/s a loaded CI run completed 9).
    execute(
        &mut s,
        &format!(
            "CREATE TABLE t (id BIGINT, k VARCHAR, v BIGINT)
             WITH (connector = 'file', path = '{path}', header = 'true', batch_size = '50',
                   rate = '2500')"
        ),
    )
    .unwrap();
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    execute(&mut s, "SET checkpoint_interval = '40ms'").unwrap();
    // The aggregate in mini-batches that only the barriers apply: its reads must still be
    // checkpointed prefixes.
    let views = [
        ("mv_agg", QUERIES[1]),
        ("mv_join", JOIN_SQL),
        ("mv_top", TOP_SQL),
    ];
    for (name, sql) in views {
        let with = if name == "mv_agg" {
            " WITH (mini_batch = '1h')"
        } else {
            ""
        };
        execute(
            &mut s,
            &format!("CREATE MATERIALIZED VIEW {name}{with} AS {sql}"),
        )
        .unwrap();
    }
    let mut reads: Vec<std::collections::BTreeSet<Vec<Vec<String>>>> = vec![Default::default(); 3];
    let mut prefixes: Vec<std::collections::BTreeSet<usize>> = vec![[0].into(); 3];
    let mut total = 0;
    // Reads while the jobs are well before their end: a finished job keeps only its last
    // checkpoint, so every read must be matched with checkpoints still on disk. Each round
    // notes the checkpoints after its reads (a read sees a checkpoint only once its manifest
    // is written).
    let near_end = |p: &[std::collections::BTreeSet<usize>]| {
        p.iter().any(|p| p.last().is_some_and(|&r| r >= n * 9 / 10))
    };
    let started = std::time::Instant::now();
    while !near_end(&prefixes) {
        assert!(
            started.elapsed().as_secs() < 120,
            "the jobs did not get near their end"
        );
        for (i, (name, _)) in views.iter().enumerate() {
            reads[i].insert(common::query_sorted(
                &mut s,
                &format!("SELECT * FROM {name}"),
            ));
            total += 1;
        }
        for (i, (name, _)) in views.iter().enumerate() {
            checkpointed_prefixes(&data, name, &mut prefixes[i]);
        }
        std::thread::sleep(std::time::Duration::from_millis(7));
    }
    for (name, state, error) in common::wait_jobs(&mut s) {
        assert_eq!(error, None, "job {name} ({state:?})");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, (name, sql)) in views.iter().enumerate() {
        checkpointed_prefixes(&data, name, &mut prefixes[i]);
        assert!(
            prefixes[i].len() > 10,
            "{name}: checkpoints at {:?}",
            prefixes[i]
        );
        assert_eq!(
            prefixes[i].last(),
            Some(&n),
            "{name}: the last checkpoint read all"
        );
        // The result of each checkpointed prefix, by DataFusion over that many rows.
        let mut results = Vec::new();
        for &rows in &prefixes[i] {
            let prefix = work.path().join(format!("prefix-{rows}.csv"));
            std::fs::write(&prefix, lines[..=rows].join("\n") + "\n").unwrap();
            results.push(batch_reference(prefix.to_str().unwrap(), sql));
        }
        // Reads are of intermediate states too, not only the empty and the final one.
        assert!(
            reads[i].len() > 3,
            "{name}: {} distinct reads",
            reads[i].len()
        );
        for read in &reads[i] {
            assert!(
                results.contains(read),
                "{name}: a read ({} rows) equals no checkpointed prefix's result ({} reads in all)",
                read.len(),
                total
            );
        }
        assert_eq!(
            common::query_sorted(&mut s, &format!("SELECT * FROM {name}")),
            *results.last().unwrap(),
            "{name}: the final view"
        );
    }
}
