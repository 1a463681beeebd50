//! Regular joins, Top-N without windows and early-fire windows (DESIGN.md §8), in streaming
//! mode over random rows: the changelog, applied in order, must equal DataFusion batch SQL over
//! the same rows once the input ends, at several parallelisms and batch sizes. Joins read
//! append-only tables and updating aggregates (whose rows are retracted as they change); the
//! Top-N ties are broken by the row's columns, which the reference spells out.

mod common;

use std::fmt::Write as _;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{apply_changelog, execute, session, text_rows, Collected};

/// Random rows `id, k, v, ts` for table `name`: a few keys, NULLs, repeated values, times
/// rising by up to 3 s, each up to 4 s behind (never late for a 5 s watermark bound).
fn write_rows(dir: &std::path::Path, name: &str, seed: u64, n: usize) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = rng.gen_range(2..12);
    let mut text = String::from("id,k,v,ts\n");
    let mut t = 0i64;
    for id in 0..n {
        let v = if rng.gen::<f64>() < 0.08 {
            String::new()
        } else {
            rng.gen_range(0..40).to_string()
        };
        t += rng.gen_range(0..3000);
        let ts = (t - rng.gen_range(0..4000)).max(0);
        let at = chrono_text(ts);
        writeln!(text, "{id},k{},{v},{at}", rng.gen_range(0..keys)).unwrap();
    }
    let path = dir.join(format!("{name}-{seed}.csv"));
    std::fs::write(&path, &text).unwrap();
    path.display().to_string()
}

/// The rows of the CSV file `path` dealt in turn into two files of a directory beside it,
/// read as two partitions (source instances, each with its own watermark).
fn two_partitions(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let mut parts = [format!("{header}\n"), format!("{header}\n")];
    for (i, line) in lines.enumerate() {
        writeln!(parts[i % 2], "{line}").unwrap();
    }
    let dir = format!("{path}.parts");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, part) in parts.iter().enumerate() {
        std::fs::write(format!("{dir}/{i}.csv"), part).unwrap();
    }
    dir
}

/// 2024-01-01 plus `ms` milliseconds, as CSV timestamp text.
fn chrono_text(ms: i64) -> String {
    let (s, ms) = (ms / 1000, ms % 1000);
    format!(
        "2024-01-01 {:02}:{:02}:{:02}.{ms:03}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
    ])
}

/// Tables `t` and `u` in a session at `parallelism`, read `batch_size` rows at a time.
fn tables(paths: &[String; 2], batch_size: usize, parallelism: usize) -> weir_planner::Session {
    let mut s = session(parallelism);
    for (name, path) in ["t", "u"].iter().zip(paths) {
        let ddl = format!(
            "CREATE TABLE {name} (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
             WITH (connector = 'file', path = '{path}', header = 'true', batch_size = '{batch_size}')"
        );
        assert!(matches!(execute(&mut s, &ddl).unwrap(), Collected::Command));
    }
    s
}

/// Runs `sql` after `settings`; returns the rows (a changelog when the first column is `op`).
fn run(s: &mut weir_planner::Session, settings: &[&str], sql: &str) -> (bool, Vec<Vec<String>>) {
    for set in settings {
        execute(s, set).unwrap();
    }
    let Collected::Rows(_, batches) = execute(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    else {
        panic!("{sql}: no rows")
    };
    let updating = batches
        .first()
        .is_some_and(|b| b.schema().field(0).name() == "op");
    (updating, text_rows(&batches))
}

/// Checks `sql` (weir, with `settings`) against `reference` (DataFusion batch) over random
/// tables; returns the retractions seen.
fn check(settings: &[&str], sql: &str, reference: &str, expect_updating: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut retractions = 0;
    for seed in 0..3u64 {
        let mut rng = StdRng::seed_from_u64(seed + 50);
        let paths = [
            write_rows(dir.path(), "t", seed, rng.gen_range(100..600)),
            write_rows(dir.path(), "u", seed + 1000, rng.gen_range(100..600)),
        ];
        let want =
            common::batch_csv_sql(&[("t", &paths[0]), ("u", &paths[1])], &schema(), reference);
        // Above one instance, each table is read as two partitions, so the stages after the
        // sources (and a local aggregation phase chained into them) run in parallel too.
        let parts = [two_partitions(&paths[0]), two_partitions(&paths[1])];
        // A 1-byte memory budget: whatever an operator holds in memory must spill or stream;
        // 24 KB: caches (the joins' probed keys, groups) fill and drop keys as they go.
        for (parallelism, batch_size, budget) in
            [(1, 1, None), (2, 13, Some("1")), (3, 256, Some("24KB"))]
        {
            let mut s = tables(
                if parallelism > 1 { &parts } else { &paths },
                batch_size,
                parallelism,
            );
            if let Some(b) = budget {
                execute(&mut s, &format!("SET memory_budget = '{b}'")).unwrap();
            }
            let (updating, rows) = run(&mut s, settings, sql);
            assert_eq!(updating, expect_updating, "{sql}: updating");
            let got = if updating {
                retractions += rows.iter().filter(|r| r[0] == "-U" || r[0] == "-D").count();
                apply_changelog(&rows)
            } else {
                let mut rows = rows;
                rows.sort();
                rows
            };
            assert!(
                got == want,
                "seed {seed}, parallelism {parallelism}, batch_size {batch_size}, budget {budget:?}: {sql}\n{} rows, reference {}",
                got.len(),
                want.len()
            );
        }
    }
    retractions
}

const STREAMING: &[&str] = &["SET runtime_mode = 'streaming'"];

#[test]
fn regular_joins_of_tables_and_updating_aggregates_equal_batch() {
    // Inner join of append-only tables with a non-equality condition: append-only.
    let inner =
        "SELECT t.id, u.id, t.v, u.v FROM t JOIN u ON t.k = u.k AND t.v < u.v AND u.id % 7 = 0";
    assert_eq!(check(STREAMING, inner, inner, false), 0);
    // Outer joins pad and replace padded rows as matches come and go.
    for kind in ["LEFT", "RIGHT", "FULL"] {
        let sql = format!(
            "SELECT t.id, u.id FROM t {kind} JOIN u ON t.k = u.k AND u.v BETWEEN t.v AND t.v + 1 AND t.id % 3 = 0"
        );
        assert!(check(STREAMING, &sql, &sql, true) > 0, "{sql}: retractions");
    }
    // Semi and anti joins (EXISTS, NOT EXISTS, IN).
    let semi =
        "SELECT id, k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.v > t.v + 30)";
    check(STREAMING, semi, semi, false);
    let anti =
        "SELECT id FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.v > t.v + 20)";
    assert!(check(STREAMING, anti, anti, true) > 0);
    // Both sides updating: per-key aggregates joined, then aggregated again.
    let updating = "SELECT a.k, a.n, b.m FROM (SELECT k, count(*) AS n FROM t GROUP BY k) a
                    JOIN (SELECT k, max(v) AS m FROM u GROUP BY k) b ON a.k = b.k";
    assert!(check(STREAMING, updating, updating, true) > 0);
    let nested =
        "SELECT b.m % 4 AS r, count(*), sum(a.n) FROM (SELECT k, count(*) AS n FROM t GROUP BY k) a
                  LEFT JOIN (SELECT k, max(v) AS m FROM u WHERE v > 10 GROUP BY k) b ON a.k = b.k
                  GROUP BY b.m % 4";
    assert!(check(STREAMING, nested, nested, true) > 0);
}

#[test]
fn top_n_and_deduplication_without_windows_equal_batch() {
    // Top 3 per key by v (NULLs first in DESC, as batch SQL), ties by the row's columns.
    let top = "SELECT k, id, v, rn FROM (SELECT k, id, v,
                 ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t) WHERE rn <= 3";
    let top_ref = "SELECT k, id, v, rn FROM (SELECT k, id, v,
                 ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC,
                   k ASC NULLS FIRST, id ASC NULLS FIRST, v ASC NULLS FIRST) AS rn FROM t)
               WHERE rn <= 3";
    let ranked_changes = check(STREAMING, top, top_ref, true);
    assert!(ranked_changes > 0);
    // Without the row number in the output, only rows entering and leaving the top 3 are
    // changes (a row entering first no longer re-emits the two below it).
    let rows = "SELECT k, id, v FROM (SELECT k, id, v,
                 ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t) WHERE rn <= 3";
    let rows_ref = "SELECT k, id, v FROM (SELECT k, id, v,
                 ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC,
                   k ASC NULLS FIRST, id ASC NULLS FIRST, v ASC NULLS FIRST) AS rn FROM t)
               WHERE rn <= 3";
    let row_changes = check(STREAMING, rows, rows_ref, true);
    assert!(
        row_changes < ranked_changes,
        "{row_changes} retractions without the row number, {ranked_changes} with it"
    );
    // Ranks 2..4 over an updating input: the keys with the most rows.
    let ranked = "SELECT k, n, rn FROM (SELECT k, n, ROW_NUMBER() OVER (ORDER BY n DESC) AS rn
                    FROM (SELECT k, count(*) AS n FROM t GROUP BY k)) WHERE rn BETWEEN 2 AND 4";
    let ranked_ref = "SELECT k, n, rn FROM (SELECT k, n,
                        ROW_NUMBER() OVER (ORDER BY n DESC, k ASC NULLS FIRST, n ASC NULLS FIRST) AS rn
                      FROM (SELECT k, count(*) AS n FROM t GROUP BY k)) WHERE rn BETWEEN 2 AND 4";
    assert!(check(STREAMING, ranked, ranked_ref, true) > 0);
    // Deduplication keeping the last row of each key by time.
    let last = "SELECT id, k FROM (SELECT id, k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, id DESC) AS rn
                FROM t) WHERE rn = 1";
    check(STREAMING, last, last, true);
    // Over bounded input in auto mode, the final rows once (append-only).
    check(&[], top, top_ref, false);
}

#[test]
fn early_fire_windows_replace_partial_rows_and_end_in_the_final_ones() {
    let sql = "SELECT window_start, k, count(*) AS n, sum(v) AS s, max(v) AS m
               FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k";
    // No row is late (each is at most 4 s behind the rows before it; the watermark lags
    // 5 s), so every window holds all its rows.
    let reference = "SELECT date_bin(INTERVAL '10' SECOND, ts, TIMESTAMP '2024-01-01 00:00:00'),
                       k, count(*), sum(v), max(v)
                     FROM t GROUP BY 1, k";
    let retractions = check(&["SET window_emit = 'on_update'"], sql, reference, true);
    assert!(retractions > 0, "partial rows were replaced");
    // Each group's net change every interval: held changes come out at the timer, before
    // each barrier, when the watermark closes their window and at the end.
    for interval in ["2ms", "1h"] {
        let every = format!("SET early_fire_interval = '{interval}'");
        let settings = ["SET window_emit = 'on_update'", every.as_str()];
        let fewer = check(&settings, sql, reference, true);
        // Never more than after every batch; an hour apart, only the final rows (and the
        // changes a barrier made visible) come out.
        assert!(
            fewer <= retractions && (interval == "2ms" || fewer < retractions),
            "{interval}: {fewer} retractions, per batch {retractions}"
        );
    }
}

#[test]
fn union_all_of_updating_and_append_only_streams_equals_batch() {
    // The changelogs merge; the table's rows are inserts.
    let union = "SELECT k, count(*) AS n FROM t GROUP BY k
                 UNION ALL SELECT k, v FROM u WHERE v IS NOT NULL";
    assert!(check(STREAMING, union, union, true) > 0);
    // Aggregated again: retractions of the aggregate's rows reach the outer GROUP BY.
    let nested = "SELECT k, count(*), sum(n), max(n) FROM (
                    SELECT k, count(*) AS n FROM t GROUP BY k
                    UNION ALL SELECT k, max(v) FROM u GROUP BY k
                    UNION ALL SELECT k, v FROM u WHERE id % 5 = 0) GROUP BY k";
    assert!(check(STREAMING, nested, nested, true) > 0);
}
