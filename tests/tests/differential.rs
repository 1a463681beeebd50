//! Differential tests: random rows with disorder and late arrivals, split over one to three
//! files (source partitions, each with its own watermark), aggregated by weir over TUMBLE, HOP,
//! CUMULATE and SESSION windows (and a window Top-N, and a UNION ALL of two sources) at random
//! batch sizes and parallelism, compared row by row with
//! DataFusion batch SQL over the same rows. Late rows are removed from the reference by a plain
//! replay that computes, for each row, the watermark just before it (running maximum of
//! `ts - bound` over earlier rows); the window arithmetic of the reference is DataFusion's
//! `date_bin`, independent of weir's.

mod common;

use std::fmt::Write as _;

use chrono::DateTime;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{execute, session, text_rows, Collected};
use weir_planner::sql::StatementText;
use weir_planner::StatementResult;

#[path = "differential/session.rs"]
mod session;

const BASE_MS: i64 = 1_704_067_200_000; // 2024-01-01 00:00:00 UTC

#[derive(Clone)]
struct Row {
    id: usize,
    k: String,
    v: Option<i64>,
    ts_ms: i64,
}

fn ts_text(ms: i64) -> String {
    let dt = DateTime::from_timestamp_millis(ms).expect("valid time");
    dt.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// Rows in arrival order: mostly increasing time, some out of order within `bound_ms`, a few
/// far behind it. With `coarse`, times are whole seconds, so rows land exactly on window
/// bounds and watermarks equal window ends (the edge cases of `[start, end)` and lateness).
fn generate(rng: &mut StdRng, n: usize, bound_ms: i64, coarse: bool) -> Vec<Row> {
    let keys = rng.gen_range(1..12);
    let mut t = BASE_MS + rng.gen_range(0..10_000);
    (0..n)
        .map(|id| {
            t += rng.gen_range(0..60);
            let mut ts = t;
            let r: f64 = rng.gen();
            if r < 0.2 {
                ts -= rng.gen_range(0..bound_ms.max(1));
            } else if r < 0.25 {
                ts -= bound_ms + rng.gen_range(0..20_000);
            }
            Row {
                id,
                k: format!("k{}", rng.gen_range(0..keys)),
                v: (rng.gen::<f64>() > 0.05).then(|| rng.gen_range(-50..1000)),
                ts_ms: if coarse { ts - ts.rem_euclid(1000) } else { ts },
            }
        })
        .collect()
}

/// Writes the rows of each partition into its own file, for weir (`data/`) and, with each
/// row's prior watermark in its partition, for the reference (`ref/`). Returns both folders.
fn write_partitions(
    dir: &std::path::Path,
    partitions: &[Vec<Row>],
    bound_ms: i64,
) -> (String, String) {
    let data_dir = dir.join("data");
    let ref_dir = dir.join("ref");
    std::fs::create_dir_all(&data_dir).unwrap();
    std::fs::create_dir_all(&ref_dir).unwrap();
    for (i, rows) in partitions.iter().enumerate() {
        let mut data = String::from("id,k,v,ts\n");
        let mut reference = String::from("id,k,v,ts,wprev\n");
        let mut running = i64::MIN;
        for r in rows {
            let v = r.v.map(|v| v.to_string()).unwrap_or_default();
            let wprev = if running == i64::MIN {
                "1900-01-01 00:00:00.000".to_string()
            } else {
                ts_text(running)
            };
            writeln!(data, "{},{},{},{}", r.id, r.k, v, ts_text(r.ts_ms)).unwrap();
            writeln!(
                reference,
                "{},{},{},{},{}",
                r.id,
                r.k,
                v,
                ts_text(r.ts_ms),
                wprev
            )
            .unwrap();
            running = running.max(r.ts_ms - bound_ms);
        }
        std::fs::write(data_dir.join(format!("part-{i}.csv")), data).unwrap();
        std::fs::write(ref_dir.join(format!("part-{i}.csv")), reference).unwrap();
    }
    (
        data_dir.display().to_string(),
        ref_dir.display().to_string(),
    )
}

/// One partition.
fn write_files(dir: &std::path::Path, rows: &[Row], bound_ms: i64) -> (String, String) {
    write_partitions(dir, &[rows.to_vec()], bound_ms)
}

const AGGREGATES: &str = "count(*), count(v), sum(v), min(v), max(v), avg(v), count(DISTINCT v)";

enum Windows {
    Tumble { size: i64 },
    Hop { slide: i64, size: i64 },
    Cumulate { step: i64, size: i64, offset: i64 },
}

/// The reference's HOP windows over `ref`: each row once per window holding it that was
/// still open when it arrived (`wprev`, the watermark before it), with `window_start`,
/// `window_end` and `window_time`; and the reference's late rows (their latest window had
/// closed), as `id, watermark in ms`.
fn hop_reference(slide: i64, size: i64) -> (String, String) {
    let bin = format!("date_bin(INTERVAL '{slide} seconds', ts, TIMESTAMP '1970-01-01 00:00:00')");
    let copies = (size + slide - 1) / slide;
    let expanded: Vec<String> = (0..copies)
        .map(|i| {
            format!(
                "SELECT *, {bin} - INTERVAL '{} seconds' AS window_start FROM ref",
                i * slide
            )
        })
        .collect();
    (
        format!(
            "(SELECT *, window_end - INTERVAL '1 millisecond' AS window_time FROM (
                SELECT *, window_start + INTERVAL '{size} seconds' AS window_end FROM ({}))
              WHERE ts < window_end AND window_end > wprev)",
            expanded.join(" UNION ALL ")
        ),
        format!(
            "SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref WHERE {bin} + INTERVAL '{size} seconds' <= wprev"
        ),
    )
}

fn reference_sql(w: &Windows) -> (String, String) {
    let origin = "TIMESTAMP '1970-01-01 00:00:00'";
    match *w {
        Windows::Tumble { size } => {
            let bin = format!("date_bin(INTERVAL '{size} seconds', ts, {origin})");
            (
                format!(
                    "SELECT window_start, window_end, k, {AGGREGATES} FROM (
                       SELECT *, {bin} AS window_start, {bin} + INTERVAL '{size} seconds' AS window_end FROM ref)
                     WHERE window_end > wprev GROUP BY window_start, window_end, k"
                ),
                format!("SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref WHERE {bin} + INTERVAL '{size} seconds' <= wprev"),
            )
        }
        Windows::Hop { slide, size } => {
            let (windowed, late) = hop_reference(slide, size);
            (
                format!(
                    "SELECT window_start, window_end, k, {AGGREGATES} FROM {windowed}
                     GROUP BY window_start, window_end, k"
                ),
                late,
            )
        }
        Windows::Cumulate { step, size, offset } => {
            // The period starts at date_bin over periods aligned to the offset; its windows end
            // step, 2 step, ... size later.
            let origin = format!("TIMESTAMP '1970-01-01 00:00:{offset:02}'");
            let bin = format!("date_bin(INTERVAL '{size} seconds', ts, {origin})");
            let expanded: Vec<String> = (1..=size / step)
                .map(|k| {
                    format!(
                        "SELECT *, {bin} AS window_start, {bin} + INTERVAL '{} seconds' AS window_end FROM ref",
                        k * step
                    )
                })
                .collect();
            (
                format!(
                    "SELECT window_start, window_end, k, {AGGREGATES} FROM ({})
                     WHERE ts < window_end AND window_end > wprev GROUP BY window_start, window_end, k",
                    expanded.join(" UNION ALL ")
                ),
                // late: the period's last window had closed
                format!("SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref WHERE {bin} + INTERVAL '{size} seconds' <= wprev"),
            )
        }
    }
}

fn weir_sql(w: &Windows) -> String {
    let tvf = match *w {
        Windows::Tumble { size } => format!("TUMBLE(t, ts, INTERVAL '{size}' SECOND)"),
        Windows::Hop { slide, size } => {
            format!("HOP(t, ts, INTERVAL '{slide}' SECOND, INTERVAL '{size}' SECOND)")
        }
        Windows::Cumulate { step, size, offset } => format!(
            "CUMULATE(t, ts, INTERVAL '{step}' SECOND, INTERVAL '{size}' SECOND, INTERVAL '{offset}' SECOND)"
        ),
    };
    format!("SELECT window_start, window_end, k, {AGGREGATES} FROM {tvf} GROUP BY window_start, window_end, k")
}

fn batch_reference(ref_path: &str, sql: &str) -> Vec<Vec<String>> {
    batch_reference_with(&[("ref", ref_path)], sql)
}

/// DataFusion batch SQL over reference folders (`id, k, v, ts, wprev`), each registered under
/// its name; rows sorted.
fn batch_reference_with(tables: &[(&str, &str)], sql: &str) -> Vec<Vec<String>> {
    let wprev = Field::new(
        "wprev",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        false,
    );
    batch_sql(tables, wprev, sql)
}

/// DataFusion batch SQL over CSV folders of the random rows' columns plus `last`.
fn batch_sql(tables: &[(&str, &str)], last: Field, sql: &str) -> Vec<Vec<String>> {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        last,
    ]);
    common::batch_csv_sql(tables, &schema, sql)
}

/// Runs the weir query over table `t`; returns sorted rows and the late rows (`id`, the
/// watermark they missed in ms), sorted.
fn weir_run(
    data_path: &str,
    bound_ms: i64,
    batch_size: usize,
    parallelism: usize,
    sql: &str,
    memory_budget: Option<&str>,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    weir_run_tables(
        &[("t", data_path)],
        bound_ms,
        batch_size,
        parallelism,
        sql,
        memory_budget,
    )
}

/// Runs the weir query over tables `(name, files)` of the random rows' columns, each keeping
/// its late rows in `<name>_late`. Returns the sorted rows and the late rows of every table
/// (`id`, the watermark they missed in ms), sorted; checks that they are all the late rows the
/// job counted.
fn weir_run_tables(
    tables: &[(&str, &str)],
    bound_ms: i64,
    batch_size: usize,
    parallelism: usize,
    sql: &str,
    memory_budget: Option<&str>,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let mut s = session(parallelism);
    if let Some(b) = memory_budget {
        execute(&mut s, &format!("SET memory_budget = '{b}'")).unwrap();
    }
    for (name, data_path) in tables {
        let ddl = format!(
            "CREATE TABLE {name} (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '{bound_ms}' MILLISECOND)
             WITH (connector = 'file', path = '{data_path}', header = 'true', batch_size = '{batch_size}',
                   late_rows = '{name}_late')"
        );
        assert!(matches!(execute(&mut s, &ddl).unwrap(), Collected::Command));
    }
    // Statements before the query (`CREATE VIEW ...;`) run first.
    let mut statements: Vec<&str> = sql.split(';').filter(|p| !p.trim().is_empty()).collect();
    let query = statements.pop().expect("a query");
    for statement in statements {
        assert!(matches!(
            execute(&mut s, statement).unwrap(),
            Collected::Command
        ));
    }
    let stmt = StatementText {
        text: query.to_string(),
        line: 1,
    };
    let StatementResult::Query(run) = s.execute(&stmt).unwrap() else {
        panic!("expected a streaming query")
    };
    let (batches, metrics) = run.collect().unwrap();
    let mut rows = text_rows(&batches);
    rows.sort();
    let mut late = Vec::new();
    for (name, _) in tables {
        let sql = format!("SELECT id, CAST(late_watermark AS BIGINT) / 1000000 FROM {name}_late");
        let Collected::Rows(_, batches) = execute(&mut s, &sql).unwrap() else {
            panic!("{sql}: no rows")
        };
        late.extend(text_rows(&batches));
    }
    late.sort();
    assert_eq!(
        late.len() as u64,
        metrics.late_rows,
        "every late row the job counted is in the late tables"
    );
    (rows, late)
}

/// Late rows `(id, watermark in ms)` as text rows, sorted, for comparing with weir's.
fn late_text(mut late: Vec<(usize, i64)>) -> Vec<Vec<String>> {
    late.sort();
    let mut rows: Vec<Vec<String>> = late
        .into_iter()
        .map(|(id, w)| vec![id.to_string(), w.to_string()])
        .collect();
    rows.sort();
    rows
}

fn check(seed: u64, windows: Windows) {
    let (ref_sql, late_sql) = reference_sql(&windows);
    check_sql(seed, &weir_sql(&windows), &ref_sql, &late_sql);
}

/// Runs `weir_sql` on random rows and compares it with `ref_sql` (and the late rows with
/// `late_sql`, which gives each late row's id and its watermark in ms) run by DataFusion over the same rows with each row's preceding watermark.
fn check_sql(seed: u64, weir_sql: &str, ref_sql: &str, late_sql: &str) {
    check_against(seed, None, weir_sql, |_, reference, _| {
        let rows = batch_reference(reference, ref_sql);
        let late = batch_reference(reference, late_sql);
        (rows, late)
    });
}

/// Runs `weir_sql` on random rows (out of order, late ones, one to three partitions) at a
/// random batch size, parallelism and memory budget, and compares its rows and late count with
/// `reference(partitions, ref_dir, bound_ms)`. The watermark bound is random unless `watermark`
/// gives it (the rows' disorder follows the random one either way).
fn check_against(
    seed: u64,
    watermark: Option<i64>,
    weir_sql: &str,
    reference: impl FnOnce(&[Vec<Row>], &str, i64) -> (Vec<Vec<String>>, Vec<Vec<String>>),
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let coarse = rng.gen_bool(0.5);
    let random_bound = if coarse {
        rng.gen_range(0..5) * 1000
    } else {
        rng.gen_range(0..5_000)
    };
    let n = rng.gen_range(200..3_000);
    let rows = generate(&mut rng, n, random_bound, coarse);
    let bound_ms = watermark.unwrap_or(random_bound);
    // Up to three partitions (files), each with its own watermark; rows keep their order
    // within a partition.
    let parts = rng.gen_range(1..=3);
    let mut partitions = vec![Vec::new(); parts];
    for r in rows {
        partitions[rng.gen_range(0..parts)].push(r);
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, ref_dir) = write_partitions(dir.path(), &partitions, bound_ms);
    let (expected, expected_late) = reference(&partitions, &ref_dir, bound_ms);
    assert!(!expected.is_empty(), "seed {seed}: empty reference");
    let batch_size = [1, 7, 64, 1000, 8192][rng.gen_range(0..5)];
    let parallelism = rng.gen_range(1..=4);
    // Half the cases spill every open window to RocksDB after each batch (a 1-byte budget),
    // so results come from partial states merged back when windows fire.
    let budget = rng.gen_bool(0.5).then_some("1");
    let (actual, late) = weir_run(&data, bound_ms, batch_size, parallelism, weir_sql, budget);
    assert_eq!(
        actual, expected,
        "seed {seed}: {parts} partitions, batch_size {batch_size}, parallelism {parallelism}, bound {bound_ms} ms, coarse {coarse}, memory budget {budget:?}"
    );
    assert_eq!(
        late, expected_late,
        "seed {seed}: late rows (id, watermark missed) in the late table ({parts} partitions)"
    );
}

#[test]
fn tumble_matches_batch_sql() {
    for seed in 0..10 {
        let size = [1, 2, 5, 10][seed as usize % 4];
        check(seed, Windows::Tumble { size });
    }
}

#[test]
fn hop_matches_batch_sql() {
    for seed in 100..110 {
        let (slide, size) = [(1, 3), (2, 10), (3, 7), (5, 5), (4, 10)][seed as usize % 5];
        check(seed, Windows::Hop { slide, size });
    }
}

/// HOP aggregations in panes (each row aggregated once into its pane, windows combined from
/// panes when they fire) in the shapes the planner allows: no group key besides the window
/// (panes turn into windows before the exchange), grouping by `window_end` or `window_time`
/// alone, a filter and a projection between the window and the GROUP BY. Partially late rows
/// (some of their windows fired) count only in their open windows, as in the reference.
#[test]
fn hop_in_panes_matches_batch_sql() {
    for seed in 700..708 {
        let (slide, size) = [(2, 10), (3, 7), (1, 3), (4, 6)][seed as usize % 4];
        let hop = format!("HOP(t, ts, INTERVAL '{slide}' SECOND, INTERVAL '{size}' SECOND)");
        let (windowed, late) = hop_reference(slide, size);
        let (weir, reference) = match seed % 3 {
            0 => (
                format!("SELECT window_end, count(*), sum(v), max(v), count(DISTINCT k) FROM {hop} GROUP BY window_end"),
                format!("SELECT window_end, count(*), sum(v), max(v), count(DISTINCT k) FROM {windowed} GROUP BY window_end"),
            ),
            1 => (
                format!("SELECT window_time, k, count(*), min(v) FROM {hop} WHERE v > 100 GROUP BY window_time, k"),
                format!("SELECT window_time, k, count(*), min(v) FROM {windowed} WHERE v > 100 GROUP BY window_time, k"),
            ),
            _ => (
                format!(
                    "SELECT ws, we, key, avg(w2), count(*) FROM (
                       SELECT window_start AS ws, window_end AS we, upper(k) AS key, v * 2 AS w2 FROM {hop})
                     GROUP BY ws, we, key"
                ),
                format!("SELECT window_start, window_end, upper(k), avg(v * 2), count(*) FROM {windowed} GROUP BY window_start, window_end, upper(k)"),
            ),
        };
        check_sql(seed, &weir, &reference, &late);
    }
}

/// The planner uses panes only where nothing but the aggregation sees a pane's window
/// columns: not under a filter on them, and not when another scan of the same HOP reads the
/// windows' rows themselves.
#[test]
fn hop_panes_only_where_the_aggregation_alone_reads_the_windows() {
    let mut s = session(2);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "id,k,v,ts\n1,a,5,2024-01-01T00:00:01\n",
    )
    .unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE TABLE t (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH (connector = 'file', path = '{}', header = 'true')",
            dir.path().display()
        ),
    )
    .unwrap();
    let hop = "HOP(t, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)";
    let cases = [
        (format!("SELECT k, window_end, count(*) FROM {hop} GROUP BY k, window_end"), true),
        (format!("SELECT window_start, sum(v) FROM {hop} WHERE v > 3 GROUP BY window_start"), true),
        (
            format!("SELECT k, window_end, count(*) FROM {hop} WHERE window_end > TIMESTAMP '2024-01-01 00:00:00' GROUP BY k, window_end"),
            false,
        ),
        (
            format!("SELECT k, count(*), max(window_start) FROM {hop} GROUP BY k, window_end"),
            false,
        ),
        (
            format!(
                "SELECT window_end, count(*) AS n FROM {hop} GROUP BY window_end
                 UNION ALL SELECT window_end, v FROM {hop}"
            ),
            false,
        ),
    ];
    for (sql, paned) in cases {
        let text = common::query_sorted(&mut s, &format!("EXPLAIN {sql}"))
            .concat()
            .join("\n");
        assert_eq!(text.contains("in panes of 2s"), paned, "{sql}: {text}");
        assert_eq!(text.contains("PaneWindows"), paned, "{sql}: {text}");
    }
}

#[test]
fn cumulate_matches_batch_sql() {
    for seed in 200..210 {
        let (step, size) = [(1, 3), (2, 10), (5, 5), (1, 1), (3, 12)][seed as usize % 5];
        let offset = seed as i64 % 2;
        check(seed, Windows::Cumulate { step, size, offset });
    }
}

/// Window Top-N: the three largest v of each key in each TUMBLE window. The reference ranks
/// with DataFusion's ROW_NUMBER over the batch windows; weir's tie rule (the row's columns in
/// order, ascending) comes down to `id` here, which is unique.
#[test]
fn top_n_matches_batch_sql() {
    for seed in 300..306 {
        let size = [1, 2, 5][seed as usize % 3];
        let rank = |from: &str, extra: &str| {
            format!(
                "SELECT window_start, window_end, k, id, v, rn FROM (
                   SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k
                                                ORDER BY v DESC NULLS LAST{extra}) AS rn
                   FROM {from}) WHERE rn <= 3"
            )
        };
        let bin =
            format!("date_bin(INTERVAL '{size} seconds', ts, TIMESTAMP '1970-01-01 00:00:00')");
        let windows = format!(
            "(SELECT * FROM (SELECT *, {bin} AS window_start,
                 {bin} + INTERVAL '{size} seconds' AS window_end FROM ref)
              WHERE window_end > wprev)"
        );
        check_sql(
            seed,
            &rank(&format!("TUMBLE(t, ts, INTERVAL '{size}' SECOND)"), ""),
            &rank(&windows, ", id"),
            &format!("SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref WHERE {bin} + INTERVAL '{size} seconds' <= wprev"),
        );
    }
}

/// Cascading windows: TUMBLE (or HOP) over a view of per-key TUMBLE results, timed by their
/// `window_time`. Reference: DataFusion aggregates the rows that were not late into the inner
/// windows, then those into the outer ones by `window_end - 1 ms`.
#[test]
fn cascading_windows_match_batch_sql() {
    for seed in 600..608 {
        let inner = [1, 2][seed as usize % 2];
        let (outer_slide, outer_size) = [(2, 2), (4, 4), (2, 6), (3, 6)][seed as usize % 4];
        let outer_slide = outer_slide * inner;
        let outer_size = outer_size * inner;
        let origin = "TIMESTAMP '1970-01-01 00:00:00'";
        let bin = format!("date_bin(INTERVAL '{inner} seconds', ts, {origin})");
        let inner_ref = format!(
            "SELECT k, {bin} + INTERVAL '{inner} seconds' - INTERVAL '1 millisecond' AS rowtime,
                    count(*) AS n, sum(v) AS total, max(v) AS mx
             FROM ref WHERE {bin} + INTERVAL '{inner} seconds' > wprev GROUP BY k, {bin}"
        );
        let copies = outer_size / outer_slide;
        let outer_bin = format!("date_bin(INTERVAL '{outer_slide} seconds', rowtime, {origin})");
        let expanded: Vec<String> = (0..copies)
            .map(|i| {
                format!(
                    "SELECT *, {outer_bin} - INTERVAL '{} seconds' AS window_start FROM ({inner_ref})",
                    i * outer_slide
                )
            })
            .collect();
        let reference = format!(
            "SELECT window_start, window_start + INTERVAL '{outer_size} seconds' AS window_end,
                    sum(n), sum(total), max(mx), count(*)
             FROM ({}) GROUP BY window_start",
            expanded.join(" UNION ALL ")
        );
        let late = format!(
            "SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref WHERE {bin} + INTERVAL '{inner} seconds' <= wprev"
        );
        let outer_tvf = if outer_slide == outer_size {
            format!("TUMBLE(v, rowtime, INTERVAL '{outer_size}' SECOND)")
        } else {
            format!(
                "HOP(v, rowtime, INTERVAL '{outer_slide}' SECOND, INTERVAL '{outer_size}' SECOND)"
            )
        };
        let sql = format!(
            "CREATE VIEW v AS SELECT k, window_time AS rowtime, count(*) AS n, sum(v) AS total,
                                     max(v) AS mx
             FROM TUMBLE(t, ts, INTERVAL '{inner}' SECOND) GROUP BY k, window_start, window_end, window_time;
             SELECT window_start, window_end, sum(n), sum(total), max(mx), count(*)
             FROM {outer_tvf} GROUP BY window_start, window_end"
        );
        check_sql(seed, &sql, &reference, &late);
    }
}

/// UNION ALL of two sources, each with its own partitions and watermark: each judges its own
/// late rows, and the union's windows fire at the minimum of both watermarks. Reference: the
/// union of both sides' rows that were in a window, aggregated by DataFusion.
#[test]
fn union_all_matches_batch_sql() {
    for seed in 500..506 {
        let mut rng = StdRng::seed_from_u64(seed);
        let size = [1, 2, 5][seed as usize % 3];
        let bound_ms = rng.gen_range(0..3_000);
        let dir = tempfile::tempdir().unwrap();
        let mut sides = Vec::new();
        for name in ["t", "u"] {
            let n = rng.gen_range(200..1_500);
            let coarse = rng.gen_bool(0.5);
            let rows = generate(&mut rng, n, bound_ms, coarse);
            let parts = rng.gen_range(1..=3);
            let mut partitions = vec![Vec::new(); parts];
            for r in rows {
                partitions[rng.gen_range(0..parts)].push(r);
            }
            sides.push((
                name,
                write_partitions(&dir.path().join(name), &partitions, bound_ms),
            ));
        }
        let bin =
            format!("date_bin(INTERVAL '{size} seconds', ts, TIMESTAMP '1970-01-01 00:00:00')");
        let end = format!("{bin} + INTERVAL '{size} seconds'");
        let windowed = |table: &str| {
            format!("SELECT {bin} AS window_start, {end} AS window_end, k, v FROM {table} WHERE {end} > wprev")
        };
        let aggregates = "count(*), count(v), sum(v), max(v)";
        let union_reference = format!(
            "SELECT window_start, window_end, k, {aggregates} FROM ({} UNION ALL {})
             GROUP BY window_start, window_end, k",
            windowed("rt"),
            windowed("ru")
        );
        let late_reference = format!(
            "SELECT (SELECT count(*) FROM rt WHERE {end} <= wprev) + (SELECT count(*) FROM ru WHERE {end} <= wprev)"
        );
        let references = [
            ("rt", sides[0].1 .1.as_str()),
            ("ru", sides[1].1 .1.as_str()),
        ];
        let expected = batch_reference_with(&references, &union_reference);
        let expected_late = batch_reference_with(&references, &late_reference)[0][0].clone();
        let tvf = |t: &str| {
            format!("SELECT window_start, window_end, k, v FROM TUMBLE({t}, ts, INTERVAL '{size}' SECOND)")
        };
        let sql = format!(
            "SELECT window_start, window_end, k, {aggregates} FROM ({} UNION ALL {})
             GROUP BY window_start, window_end, k",
            tvf("t"),
            tvf("u")
        );
        let batch_size = [1, 64, 8192][rng.gen_range(0..3)];
        let parallelism = rng.gen_range(1..=4);
        let budget = rng.gen_bool(0.5).then_some("1");
        let tables: Vec<(&str, &str)> = sides
            .iter()
            .map(|(name, (data, _))| (*name, data.as_str()))
            .collect();
        let (actual, late) =
            weir_run_tables(&tables, bound_ms, batch_size, parallelism, &sql, budget);
        assert!(!expected.is_empty(), "seed {seed}: empty reference");
        assert_eq!(
            actual, expected,
            "seed {seed}: batch_size {batch_size}, parallelism {parallelism}, budget {budget:?}"
        );
        assert_eq!(
            late.len().to_string(),
            expected_late,
            "seed {seed}: late rows"
        );
    }
}

/// Disorder within the watermark bound gives exactly the result of the sorted input, at any
/// batch size and parallelism; nothing is late.
#[test]
fn disorder_within_bound_equals_sorted_input() {
    let mut rng = StdRng::seed_from_u64(42);
    let bound_ms = 3_000;
    let sorted: Vec<Row> = (0..2_000)
        .map(|id| Row {
            id,
            k: format!("k{}", rng.gen_range(0..5)),
            v: Some(rng.gen_range(0..100)),
            ts_ms: BASE_MS + id as i64 * 37,
        })
        .collect();
    // Arrival order: by time plus a jitter below half the bound. A row arriving after row i then
    // has ts >= ts_i - bound/2, so the watermark before it (max ts - bound) never closes its
    // windows: nothing is late.
    let mut shuffled = sorted.clone();
    let mut keyed: Vec<(i64, Row)> = shuffled
        .drain(..)
        .map(|r| (r.ts_ms + rng.gen_range(0..bound_ms / 2), r))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    let shuffled: Vec<Row> = keyed.into_iter().map(|(_, r)| r).collect();
    assert!(
        shuffled.windows(2).any(|w| w[0].ts_ms > w[1].ts_ms),
        "input must be out of order"
    );
    let sql = weir_sql(&Windows::Hop { slide: 2, size: 10 });
    let dir = tempfile::tempdir().unwrap();
    let sorted_dir = dir.path().join("sorted");
    let shuffled_dir = dir.path().join("shuffled");
    std::fs::create_dir_all(&sorted_dir).unwrap();
    std::fs::create_dir_all(&shuffled_dir).unwrap();
    let (sorted_path, _) = write_files(&sorted_dir, &sorted, bound_ms);
    let (shuffled_path, _) = write_files(&shuffled_dir, &shuffled, bound_ms);
    let (expected, late) = weir_run(&sorted_path, bound_ms, 8192, 1, &sql, None);
    assert!(late.is_empty());
    for (batch_size, parallelism) in [(1, 1), (13, 2), (500, 4), (8192, 3)] {
        let (actual, late) = weir_run(
            &shuffled_path,
            bound_ms,
            batch_size,
            parallelism,
            &sql,
            None,
        );
        assert!(
            late.is_empty(),
            "batch_size {batch_size}, parallelism {parallelism}"
        );
        assert_eq!(
            actual, expected,
            "batch_size {batch_size}, parallelism {parallelism}"
        );
    }
}
