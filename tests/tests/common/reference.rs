//! Input with disorder and late rows, and its reference result by DataFusion batch SQL (an
//! engine independent of weir's streaming path): TUMBLE 10 s count and sum by key over the
//! rows that are not late, found by a plain replay that writes each row's prior watermark.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use chrono::DateTime;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::prelude::{CsvReadOptions, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_planner::display::batch_rows;

pub const BASE_MS: i64 = 1_704_067_200_000; // 2024-01-01 00:00:00 UTC
/// The watermark bound of the tables over this input: `ts - INTERVAL '2' SECOND`.
pub const BOUND_MS: i64 = 2_000;

pub fn ts_text(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

/// Writes `rows` rows `id,k,v,ts` (ids in order, times rising by 0..`max_step` ms, 20% out of
/// order within the bound, 1% far behind it) to `events.csv`, and the same with each row's
/// prior watermark to `reference.csv`. Returns both paths.
pub fn write_input(dir: &Path, rows: usize, max_step: i64, seed: u64) -> (PathBuf, PathBuf) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut data = String::with_capacity(rows * 40);
    let mut reference = String::with_capacity(rows * 64);
    data.push_str("id,k,v,ts\n");
    reference.push_str("id,k,v,ts,wprev\n");
    let mut t = BASE_MS;
    let mut running = i64::MIN;
    for id in 0..rows {
        t += rng.gen_range(0..max_step);
        let r: f64 = rng.gen();
        let ts = if r < 0.2 {
            t - rng.gen_range(0..BOUND_MS)
        } else if r < 0.21 {
            t - BOUND_MS - rng.gen_range(0..30_000)
        } else {
            t
        };
        let k = rng.gen_range(0..10);
        let v: i64 = rng.gen_range(-100..1000);
        let wprev = if running == i64::MIN {
            "1900-01-01 00:00:00.000".to_string()
        } else {
            ts_text(running)
        };
        writeln!(data, "{id},k{k},{v},{}", ts_text(ts)).unwrap();
        writeln!(reference, "{id},k{k},{v},{},{wprev}", ts_text(ts)).unwrap();
        running = running.max(ts - BOUND_MS);
    }
    let (d, r) = (dir.join("events.csv"), dir.join("reference.csv"));
    std::fs::write(&d, data).unwrap();
    std::fs::write(&r, reference).unwrap();
    (d, r)
}

/// Registers a `reference.csv` written by [`write_input`] (`id, k, v, ts, wprev`) as `name`.
pub async fn register_reference(ctx: &SessionContext, name: &str, reference: &Path) {
    let ts = || DataType::Timestamp(TimeUnit::Nanosecond, None);
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", ts(), false),
        Field::new("wprev", ts(), false),
    ]);
    ctx.register_csv(
        name,
        reference.to_str().unwrap(),
        CsvReadOptions::new().schema(&schema).has_header(true),
    )
    .await
    .unwrap();
}

/// `window_start, window_end, k, n, total` of TUMBLE 10 s over the reference rows that are
/// not late, by DataFusion, each row's values joined by `sep`, sorted.
pub fn reference_rows(reference: &Path, sep: &str) -> Vec<String> {
    tumble_reference(reference, None, sep)
}

/// How at-least-once output (`window_start,window_end,k,n,total` lines) compares with the
/// exact result. Without barrier alignment a checkpoint's window state may already hold rows
/// that the restored sources replay, so a window can be reported with rows counted twice, and
/// a window that fired before the crash can fire again: at-least-once promises only that every
/// row is counted in some result of its window.
#[derive(Debug, Default)]
pub struct AtLeastOnce {
    /// Expected results with no output row of the same window and key counting as many rows.
    pub lost: Vec<String>,
    /// Output rows of a window and key the exact result does not have.
    pub unknown: Vec<String>,
    /// Output rows beyond one per window and key.
    pub repeated: usize,
    /// Windows and keys whose largest count exceeds the exact one (rows counted twice).
    pub overcounted: usize,
}

/// Compares at-least-once output with the exact result, window and key by window and key.
pub fn at_least_once(got: &[String], expected: &[String]) -> AtLeastOnce {
    use std::collections::BTreeMap;
    fn split(line: &str) -> (String, u64) {
        let parts: Vec<&str> = line.split(',').collect();
        assert!(parts.len() == 5, "not a result line: {line}");
        let n = parts[3]
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line}"));
        (parts[..3].join(","), n)
    }
    let mut exact: BTreeMap<String, u64> = BTreeMap::new();
    for e in expected {
        let (key, n) = split(e);
        assert!(exact.insert(key, n).is_none(), "reference repeats {e}");
    }
    let mut seen: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    let mut report = AtLeastOnce::default();
    for g in got {
        let (key, n) = split(g);
        if !exact.contains_key(&key) {
            report.unknown.push(g.clone());
        }
        let entry = seen.entry(key).or_insert((0, 0));
        entry.0 = entry.0.max(n);
        entry.1 += 1;
    }
    for e in expected {
        let (key, n) = split(e);
        match seen.get(&key) {
            Some(&(max, rows)) if max >= n => {
                report.repeated += rows - 1;
                report.overcounted += usize::from(max > n);
            }
            _ => report.lost.push(e.clone()),
        }
    }
    report
}

/// Rows for each partition (JSON values) with disorder within the watermark bound and some
/// late rows, a reference CSV with each row's prior watermark in its own partition, and the
/// watermark the source reaches once it has read every row (the minimum over partitions).
pub fn partitioned_input(
    rows: usize,
    seed: u64,
    dir: &Path,
    partitions: i32,
) -> (BTreeMap<i32, Vec<String>>, PathBuf, i64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut parts: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut running = vec![i64::MIN; partitions as usize];
    let mut reference = String::from("id,k,v,ts,wprev\n");
    let mut t = BASE_MS;
    for id in 0..rows {
        t += rng.gen_range(0..20);
        let r: f64 = rng.gen();
        let ts = if r < 0.2 {
            t - rng.gen_range(0..BOUND_MS)
        } else if r < 0.21 {
            t - BOUND_MS - rng.gen_range(0..30_000)
        } else {
            t
        };
        let p = rng.gen_range(0..partitions);
        let k = rng.gen_range(0..10);
        let v: i64 = rng.gen_range(-100..1000);
        let wprev = match running[p as usize] {
            i64::MIN => "1900-01-01 00:00:00.000".to_string(),
            w => ts_text(w),
        };
        parts.entry(p).or_default().push(format!(
            "{{\"id\": {id}, \"k\": \"k{k}\", \"v\": {v}, \"ts\": \"{}\"}}",
            ts_text(ts)
        ));
        writeln!(reference, "{id},k{k},{v},{},{wprev}", ts_text(ts)).unwrap();
        running[p as usize] = running[p as usize].max(ts - BOUND_MS);
    }
    let path = dir.join("reference.csv");
    std::fs::write(&path, reference).unwrap();
    let watermark = running.iter().copied().min().unwrap_or(i64::MIN);
    (parts, path, watermark)
}

/// TUMBLE 10 s count and sum by key over the rows that were not late in their partition, by
/// DataFusion batch SQL, as `window_start,window_end,k,n,total` lines, sorted; with `until`,
/// only the windows a watermark of `until` has closed (window_end <= until).
pub fn closed_reference_rows(reference: &Path, until: Option<i64>) -> Vec<String> {
    tumble_reference(reference, until, ",")
}

fn tumble_reference(reference: &Path, until: Option<i64>, sep: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = SessionContext::new();
        register_reference(&ctx, "ref", reference).await;
        let bin = "date_bin(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01 00:00:00')";
        let sql = format!(
            "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total FROM (
               SELECT *, {bin} AS window_start, {bin} + INTERVAL '10 seconds' AS window_end FROM ref)
             WHERE window_end > wprev {closed} GROUP BY window_start, window_end, k",
            closed = until
                .map(|w| format!("AND window_end <= TIMESTAMP '{}'", ts_text(w)))
                .unwrap_or_default()
        );
        sorted_lines(&ctx, &sql, sep).await
    })
}

/// The rows of `sql`, each row's values joined by `sep` (NULL as empty), sorted.
async fn sorted_lines(ctx: &SessionContext, sql: &str, sep: &str) -> Vec<String> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows: Vec<String> = batches
        .iter()
        .flat_map(|b| batch_rows(b).unwrap())
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_default())
                .collect::<Vec<_>>()
                .join(sep)
        })
        .collect();
    rows.sort();
    rows
}

/// The rows of a `reference.csv` that are late for TUMBLE 10 s (their window had fired under
/// the watermark before them), as `id,<that watermark in ms>` lines, sorted.
pub fn late_reference(reference: &Path) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = SessionContext::new();
        register_reference(&ctx, "ref", reference).await;
        let bin = "date_bin(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01 00:00:00')";
        let sql = format!(
            "SELECT id, CAST(wprev AS BIGINT) / 1000000 FROM ref
             WHERE {bin} + INTERVAL '10 seconds' <= wprev"
        );
        sorted_lines(&ctx, &sql, ",").await
    })
}

/// Asserts that at-least-once output lost no result and invented no window; prints how many
/// results were repeated or counted rows twice after `killed` kills.
pub fn assert_at_least_once(got: &[String], expected: &[String], killed: usize) {
    let report = at_least_once(got, expected);
    assert!(
        report.lost.is_empty() && report.unknown.is_empty(),
        "at-least-once lost {} results, e.g. {:?}; wrote {} rows of windows that do not exist, \
         e.g. {:?}",
        report.lost.len(),
        &report.lost[..report.lost.len().min(5)],
        report.unknown.len(),
        &report.unknown[..report.unknown.len().min(5)]
    );
    eprintln!(
        "at-least-once after {killed} kills: {} rows written for {} results ({} repeated, \
         {} windows counted rows twice)",
        got.len(),
        expected.len(),
        report.repeated,
        report.overcounted
    );
}

/// The workspace's root (examples, scripts).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `sql` by DataFusion batch in `ctx`, as weir's CSV lines, sorted: the reference a query's
/// `weir -f --format csv` output is compared with.
pub fn datafusion_csv_lines(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let batches = rt
        .block_on(async { ctx.sql(sql).await?.collect().await })
        .unwrap_or_else(|e| panic!("reference query failed: {e}\n{sql}"));
    let mut lines: Vec<String> = batches
        .iter()
        .flat_map(|b| weir_planner::display::csv_records(b, b',').expect("CSV records"))
        .map(|r| String::from_utf8(r).expect("UTF-8 CSV"))
        .collect();
    lines.sort();
    lines
}
