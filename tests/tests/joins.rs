//! Window joins against DataFusion batch SQL on the same rows: INNER / LEFT / RIGHT / FULL,
//! with and without a residual ON condition, semi and anti joins, at parallelism 1 and 3 and
//! with every buffered row spilled to the state store; and interval joins against the same
//! joins in batch over the rows that are not below their watermark (random inputs, every
//! kind and spelling, any batch size, parallelism and memory budget).
//!
//! Both inputs have disorder within the watermark bound and late rows (see
//! `common::reference::write_input`). A late row is in no window, so the reference drops it
//! from its side before joining; windows are computed with `date_bin`, not with weir's window
//! functions.

mod common;

use std::path::Path;

use common::{query_sorted, session, text_rows};
use datafusion::prelude::SessionContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn reference(left: &Path, right: &Path, sql: &str) -> Vec<Vec<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = SessionContext::new();
        common::reference::register_reference(&ctx, "lref", left).await;
        common::reference::register_reference(&ctx, "rref", right).await;
        let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let batches = df.collect().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut rows = text_rows(&batches);
        rows.sort();
        rows
    })
}

/// Rows of one side that are in a window: TUMBLE 10 s, not late.
fn windowed(table: &str) -> String {
    let bin = "date_bin(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01 00:00:00')";
    format!(
        "(SELECT id, k, v, ts, {bin} AS ws, {bin} + INTERVAL '10 seconds' AS we FROM {table}
          WHERE {bin} + INTERVAL '10 seconds' > wprev)"
    )
}

struct Case {
    /// Join clause as written in SQL (`JOIN`, `LEFT JOIN`, ...).
    join: &'static str,
    /// Extra ON condition over `l` and `r`.
    extra: &'static str,
}

fn setup(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let ldir = dir.join("left");
    let rdir = dir.join("right");
    std::fs::create_dir_all(&ldir).unwrap();
    std::fs::create_dir_all(&rdir).unwrap();
    let (ldata, lref) = common::reference::write_input(&ldir, 2_000, 300, 11);
    let (rdata, rref) = common::reference::write_input(&rdir, 2_000, 300, 12);
    let ddl = format!(
        "CREATE TABLE lt (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv', header = 'true');
         CREATE TABLE rt (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv', header = 'true')",
        ldata.display(),
        rdata.display()
    );
    (lref, rref, ddl)
}

fn run_ddl(s: &mut weir_planner::Session, ddl: &str) {
    for stmt in ddl.split(';') {
        common::execute(s, stmt).unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
}

#[test]
fn window_joins_match_batch_sql() {
    let dir = tempfile::tempdir().unwrap();
    let (lref, rref, ddl) = setup(dir.path());
    let cases = [
        Case {
            join: "JOIN",
            extra: "",
        },
        Case {
            join: "LEFT JOIN",
            extra: "",
        },
        Case {
            join: "RIGHT JOIN",
            extra: "",
        },
        Case {
            join: "FULL JOIN",
            extra: "",
        },
        Case {
            join: "JOIN",
            extra: " AND l.v < r.v",
        },
        Case {
            join: "LEFT JOIN",
            extra: " AND l.v < r.v",
        },
        Case {
            join: "FULL JOIN",
            extra: " AND l.v + r.v > 900",
        },
    ];
    // At parallelism 2 with a one-byte memory budget every buffered batch goes to the store
    // at once and each window is read back from it when it fires.
    for (parallelism, budget) in [(1, None), (3, None), (2, Some("1"))] {
        let mut s = session(parallelism);
        run_ddl(&mut s, &ddl);
        if let Some(b) = budget {
            common::execute(&mut s, &format!("SET memory_budget = '{b}'")).unwrap();
        }
        for case in &cases {
            let weir_sql = format!(
                "SELECT l.id, l.k, l.v, r.id AS rid, r.v AS rv, l.window_start, r.window_end
                 FROM TUMBLE(lt, ts, INTERVAL '10' SECOND) AS l
                 {} TUMBLE(rt, ts, INTERVAL '10' SECOND) AS r
                 ON l.window_start = r.window_start AND l.window_end = r.window_end
                    AND l.k = r.k{}",
                case.join, case.extra
            );
            let ref_sql = format!(
                "SELECT l.id, l.k, l.v, r.id AS rid, r.v AS rv, l.ws, r.we
                 FROM {} AS l {} {} AS r ON l.ws = r.ws AND l.we = r.we AND l.k = r.k{}",
                windowed("lref"),
                case.join,
                windowed("rref"),
                case.extra
            );
            let expected = reference(&lref, &rref, &ref_sql);
            assert!(expected.len() > 1_000, "{}: {}", case.join, expected.len());
            let got = query_sorted(&mut s, &weir_sql);
            assert_eq!(
                got.len(),
                expected.len(),
                "{}{} at parallelism {parallelism}, budget {budget:?}",
                case.join,
                case.extra
            );
            assert!(
                got == expected,
                "{}{} at parallelism {parallelism}, budget {budget:?}: rows differ",
                case.join,
                case.extra
            );
        }
    }
}

#[test]
fn semi_and_anti_joins_and_aggregates_over_a_join() {
    let dir = tempfile::tempdir().unwrap();
    let (lref, rref, ddl) = setup(dir.path());
    let mut s = session(2);
    run_ddl(&mut s, &ddl);
    let pairs = [
        (
            // EXISTS: a semi join on the window and key.
            "SELECT l.id, l.window_end FROM TUMBLE(lt, ts, INTERVAL '10' SECOND) AS l
             WHERE EXISTS (SELECT 1 FROM TUMBLE(rt, ts, INTERVAL '10' SECOND) AS r
               WHERE r.window_start = l.window_start AND r.window_end = l.window_end
                 AND r.k = l.k AND r.v > l.v + 500)",
            format!(
                "SELECT l.id, l.we FROM {} AS l WHERE EXISTS (SELECT 1 FROM {} AS r
                   WHERE r.ws = l.ws AND r.we = l.we AND r.k = l.k AND r.v > l.v + 500)",
                windowed("lref"),
                windowed("rref")
            ),
        ),
        (
            "SELECT l.id, l.window_end FROM TUMBLE(lt, ts, INTERVAL '10' SECOND) AS l
             WHERE NOT EXISTS (SELECT 1 FROM TUMBLE(rt, ts, INTERVAL '10' SECOND) AS r
               WHERE r.window_start = l.window_start AND r.window_end = l.window_end
                 AND r.k = l.k AND r.v > l.v + 500)",
            format!(
                "SELECT l.id, l.we FROM {} AS l WHERE NOT EXISTS (SELECT 1 FROM {} AS r
                   WHERE r.ws = l.ws AND r.we = l.we AND r.k = l.k AND r.v > l.v + 500)",
                windowed("lref"),
                windowed("rref")
            ),
        ),
        (
            // A windowed aggregate over the join's output: the join emits a window's rows
            // before the watermark that closes it, so the aggregate sees all of them.
            "SELECT l.window_start, l.window_end, l.k, count(*) AS n, sum(r.v) AS total
             FROM TUMBLE(lt, ts, INTERVAL '10' SECOND) AS l
             JOIN TUMBLE(rt, ts, INTERVAL '10' SECOND) AS r
               ON l.window_start = r.window_start AND l.window_end = r.window_end AND l.k = r.k
             GROUP BY l.window_start, l.window_end, l.k",
            format!(
                "SELECT l.ws, l.we, l.k, count(*) AS n, sum(r.v) AS total
                 FROM {} AS l JOIN {} AS r ON l.ws = r.ws AND l.we = r.we AND l.k = r.k
                 GROUP BY l.ws, l.we, l.k",
                windowed("lref"),
                windowed("rref")
            ),
        ),
        (
            // Bounded inputs joined without windows: one join over the whole input.
            "SELECT lt.id, lt.v, rt.v AS rv FROM lt JOIN rt ON lt.id = rt.id AND lt.k = rt.k",
            "SELECT lref.id, lref.v, rref.v AS rv FROM lref JOIN rref
               ON lref.id = rref.id AND lref.k = rref.k"
                .to_string(),
        ),
    ];
    for (weir_sql, ref_sql) in pairs {
        let expected = reference(&lref, &rref, &ref_sql);
        assert!(expected.len() > 20, "{ref_sql}: {}", expected.len());
        let got = query_sorted(&mut s, weir_sql);
        assert_eq!(got.len(), expected.len(), "{weir_sql}");
        assert!(got == expected, "{weir_sql}: rows differ");
    }
}

/// Rows joined with their own window's MAX or MIN: where the planner chains the extreme filter
/// (only rows that can carry the extreme cross the exchange) and where it must not (the other
/// side aggregates other rows, or the join keeps unmatched rows), the result equals batch SQL,
/// late rows included, at several parallelisms.
#[test]
fn joins_with_their_windows_extreme_match_batch_sql() {
    let dir = tempfile::tempdir().unwrap();
    let (lref, rref, ddl) = setup(dir.path());
    let tumble = "TUMBLE(lt, ts, INTERVAL '10' SECOND)";
    // (weir's query, the reference, whether the filter is planned)
    let cases = [
        (
            // Nexmark q7's shape: the rows carrying their window's maximum.
            format!(
                "SELECT l.id, l.k, l.v, l.window_start FROM {tumble} AS l
                 JOIN (SELECT max(v) AS m, window_start, window_end FROM {tumble}
                       GROUP BY window_start, window_end) AS x
                 ON l.window_start = x.window_start AND l.window_end = x.window_end
                    AND l.v = x.m"
            ),
            format!(
                "WITH w AS {}, x AS (SELECT ws, we, max(v) AS m FROM w GROUP BY ws, we)
                 SELECT w.id, w.k, w.v, w.ws FROM w JOIN x
                 ON w.ws = x.ws AND w.we = x.we AND w.v = x.m",
                windowed("lref")
            ),
            true,
        ),
        (
            // Per key, the minimum, as a semi join (EXISTS).
            format!(
                "SELECT l.id, l.v, l.window_end FROM {tumble} AS l
                 WHERE EXISTS (SELECT 1 FROM (SELECT k, min(v) AS m, window_start, window_end
                                              FROM {tumble} GROUP BY k, window_start, window_end) x
                   WHERE x.window_start = l.window_start AND x.window_end = l.window_end
                     AND x.k = l.k AND x.m = l.v)"
            ),
            format!(
                "WITH w AS {}, x AS (SELECT k, ws, we, min(v) AS m FROM w GROUP BY k, ws, we)
                 SELECT w.id, w.v, w.we FROM w
                 WHERE EXISTS (SELECT 1 FROM x WHERE x.ws = w.ws AND x.we = w.we AND x.k = w.k
                               AND x.m = w.v)",
                windowed("lref")
            ),
            true,
        ),
        (
            // The maximum of other rows (v < 250 only): the filter would drop rows that match.
            format!(
                "SELECT l.id, l.k, l.v FROM {tumble} AS l
                 JOIN (SELECT k, max(v) AS m, window_start, window_end FROM {tumble}
                       WHERE v < 250 GROUP BY k, window_start, window_end) AS x
                 ON l.window_start = x.window_start AND l.window_end = x.window_end
                    AND l.k = x.k AND l.v = x.m"
            ),
            format!(
                "WITH w AS {}, x AS (SELECT k, ws, we, max(v) AS m FROM w WHERE v < 250
                                     GROUP BY k, ws, we)
                 SELECT w.id, w.k, w.v FROM w JOIN x
                 ON w.ws = x.ws AND w.we = x.we AND w.k = x.k AND w.v = x.m",
                windowed("lref")
            ),
            false,
        ),
        (
            // Grouped by key but matched on the window only: a row may carry any key's maximum.
            format!(
                "SELECT l.id, l.v, x.k FROM {tumble} AS l
                 JOIN (SELECT k, max(v) AS m, window_start, window_end FROM {tumble}
                       GROUP BY k, window_start, window_end) AS x
                 ON l.window_start = x.window_start AND l.window_end = x.window_end
                    AND l.v = x.m"
            ),
            format!(
                "WITH w AS {}, x AS (SELECT k, ws, we, max(v) AS m FROM w GROUP BY k, ws, we)
                 SELECT w.id, w.v, x.k FROM w JOIN x ON w.ws = x.ws AND w.we = x.we AND w.v = x.m",
                windowed("lref")
            ),
            false,
        ),
        (
            // A left join keeps the rows without a match.
            format!(
                "SELECT l.id, l.v, x.m FROM {tumble} AS l
                 LEFT JOIN (SELECT max(v) AS m, window_start, window_end FROM {tumble}
                            GROUP BY window_start, window_end) AS x
                 ON l.window_start = x.window_start AND l.window_end = x.window_end
                    AND l.v = x.m"
            ),
            format!(
                "WITH w AS {}, x AS (SELECT ws, we, max(v) AS m FROM w GROUP BY ws, we)
                 SELECT w.id, w.v, x.m FROM w LEFT JOIN x
                 ON w.ws = x.ws AND w.we = x.we AND w.v = x.m",
                windowed("lref")
            ),
            false,
        ),
    ];
    for parallelism in [1, 3] {
        let mut s = session(parallelism);
        run_ddl(&mut s, &ddl);
        for (weir_sql, ref_sql, filtered) in &cases {
            let plan = query_sorted(&mut s, &format!("EXPLAIN {weir_sql}"))
                .concat()
                .join("\n");
            assert_eq!(
                plan.contains("ExtremeFilter"),
                *filtered,
                "{weir_sql}: {plan}"
            );
            let expected = reference(&lref, &rref, ref_sql);
            assert!(expected.len() > 20, "{ref_sql}: {}", expected.len());
            let got = query_sorted(&mut s, weir_sql);
            assert_eq!(
                got.len(),
                expected.len(),
                "{weir_sql} at parallelism {parallelism}"
            );
            assert!(
                got == expected,
                "{weir_sql} at parallelism {parallelism}: rows differ"
            );
        }
    }
}

#[test]
fn joins_weir_cannot_run_are_refused_with_a_reason() {
    let mut s = session(1);
    run_ddl(
        &mut s,
        "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', stream = 'bid');
         CREATE TABLE bare (auction BIGINT, price BIGINT, date_time TIMESTAMP)
         WITH (connector = 'nexmark', stream = 'bid');
         CREATE TABLE auction (id BIGINT, date_time TIMESTAMP, expires TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', stream = 'auction')",
    );
    let refused = [
        (
            "SELECT * FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) a,
               TUMBLE(bid, date_time, INTERVAL '10' SECOND) b WHERE a.price > b.price",
            "equality condition",
        ),
        (
            "SELECT * FROM bid a JOIN bare b ON a.auction = b.auction
             AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '1' SECOND",
            "b.date_time has no watermark",
        ),
    ];
    for (sql, reason) in refused {
        match common::execute(&mut s, sql) {
            Ok(_) => panic!("{sql}: accepted"),
            Err(e) => assert!(e.to_string().contains(reason), "{sql}: {e}"),
        }
    }
    // Joins of unbounded streams without windows or bounds on both sides' rows are regular
    // joins, updating where a side's rows can be retracted (outer and anti joins).
    let regular = [
        (
            "SELECT * FROM bid a JOIN bid b ON a.auction = b.auction",
            "StreamJoin (Inner): on",
        ),
        (
            "SELECT * FROM bid a JOIN bid b
             ON a.auction = b.auction AND b.date_time >= a.date_time",
            "StreamJoin (Inner): on [a.auction = b.auction], filter",
        ),
        (
            "SELECT * FROM bare a JOIN bare b ON a.auction = b.auction
             AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '1' SECOND",
            "StreamJoin (Inner): on",
        ),
        (
            // Each auction's matches end at its expiry, but bids have no watermark.
            "SELECT * FROM auction a JOIN bare b ON a.id = b.auction
             AND b.date_time BETWEEN a.date_time AND a.expires",
            "StreamJoin (Inner): on",
        ),
        (
            // Each auction's matches end at its expiry, a bid's never do.
            "SELECT * FROM auction a JOIN bid b ON a.id = b.auction AND b.date_time <= a.expires",
            "StreamJoin (Inner): on",
        ),
        (
            // Both: an interval join (Nexmark q4 and q9).
            "SELECT * FROM auction a JOIN bid b ON a.id = b.auction
             AND b.date_time BETWEEN a.date_time AND a.expires",
            "IntervalJoin (Inner): on [a.id = b.auction], b.date_time - a.date_time in [0s, +inf], b.date_time <= a.expires,",
        ),
        (
            // Windows of different sizes do not pair windows: a regular join of the rows.
            "SELECT * FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) a
             JOIN TUMBLE(bid, date_time, INTERVAL '5' SECOND) b
             ON a.window_start = b.window_start AND a.auction = b.auction",
            "StreamJoin (Inner): on",
        ),
        (
            "SELECT * FROM bid a LEFT JOIN bare b ON a.auction = b.auction",
            "StreamJoin (Left, updating)",
        ),
        (
            "SELECT * FROM bid a WHERE NOT EXISTS (SELECT 1 FROM bare b WHERE b.price = a.price)",
            "StreamJoin (LeftAnti, updating)",
        ),
    ];
    for (sql, plan) in regular {
        let text = common::query_sorted(&mut s, &format!("EXPLAIN {sql}"))
            .concat()
            .join("\n");
        assert!(text.contains(plan), "{sql}: {text}");
    }
}

/// One table's rows for the interval-join differential test: `(id, k, v, ts in ms)`, mostly
/// rising in time, 20% out of order within the watermark bound, 4% far behind it (late).
fn interval_rows(rng: &mut StdRng, n: usize, bound_ms: i64, coarse: bool) -> Vec<IntervalRow> {
    let keys = rng.gen_range(2..12);
    let mut t = common::reference::BASE_MS;
    (0..n)
        .map(|id| {
            t += rng.gen_range(0..60);
            let r: f64 = rng.gen();
            let mut ts = t;
            if r < 0.2 {
                ts -= rng.gen_range(0..bound_ms.max(1));
            } else if r < 0.24 {
                ts -= bound_ms + rng.gen_range(1..10_000);
            }
            IntervalRow {
                id,
                k: rng.gen_range(0..keys),
                v: (rng.gen::<f64>() > 0.05).then(|| rng.gen_range(0..1000)),
                ts: if coarse { ts - ts.rem_euclid(1000) } else { ts },
            }
        })
        .collect()
}

#[derive(Clone)]
struct IntervalRow {
    id: usize,
    k: i64,
    v: Option<i64>,
    ts: i64,
}

/// Splits `rows` over `parts` files (each keeping the rows' order) under `dir/data`, and
/// writes them with each row's prior watermark in its partition to `dir/reference.csv`.
/// Returns the data folder, the reference file and how many rows are out of bound.
fn write_interval_table(
    dir: &Path,
    rows: &[IntervalRow],
    parts: usize,
    bound_ms: i64,
    rng: &mut StdRng,
) -> (std::path::PathBuf, std::path::PathBuf, u64) {
    use std::fmt::Write as _;
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut files = vec![String::from("id,k,v,ts\n"); parts];
    let mut running = vec![i64::MIN; parts];
    let mut reference = String::from("id,k,v,ts,wprev\n");
    let mut late = 0;
    for r in rows {
        let p = rng.gen_range(0..parts);
        let v = r.v.map(|v| v.to_string()).unwrap_or_default();
        let ts = common::reference::ts_text(r.ts);
        writeln!(files[p], "{},k{},{v},{ts}", r.id, r.k).unwrap();
        let wprev = match running[p] {
            i64::MIN => "1900-01-01 00:00:00.000".to_string(),
            w => common::reference::ts_text(w),
        };
        writeln!(reference, "{},k{},{v},{ts},{wprev}", r.id, r.k).unwrap();
        late += u64::from(running[p] != i64::MIN && r.ts < running[p]);
        running[p] = running[p].max(r.ts - bound_ms);
    }
    for (i, f) in files.iter().enumerate() {
        std::fs::write(data.join(format!("part-{i}.csv")), f).unwrap();
    }
    let reference_path = dir.join("reference.csv");
    std::fs::write(&reference_path, reference).unwrap();
    (data, reference_path, late)
}

/// `col + ms` as SQL.
fn shifted(col: &str, ms: i64) -> String {
    match ms {
        0 => col.to_string(),
        ms if ms < 0 => format!("{col} - INTERVAL '{}' MILLISECOND", -ms),
        ms => format!("{col} + INTERVAL '{ms}' MILLISECOND"),
    }
}

/// The interval condition in one of its spellings, bounding `r.ts - l.ts` by
/// `[lower, upper]` (strictly in spelling 1).
fn interval_sql(form: usize, lower: i64, upper: i64) -> String {
    match form {
        0 => format!(
            "r.ts BETWEEN {} AND {}",
            shifted("l.ts", lower),
            shifted("l.ts", upper)
        ),
        1 => format!(
            "r.ts > {} AND r.ts < {}",
            shifted("l.ts", lower),
            shifted("l.ts", upper)
        ),
        _ => format!(
            "l.ts >= {} AND {} >= l.ts",
            shifted("r.ts", -upper),
            shifted("r.ts", -lower)
        ),
    }
}

/// A table written by [`write_interval_table`]: its data folder, reference file and late rows.
type IntervalTable = (std::path::PathBuf, std::path::PathBuf, u64);

/// Two random tables `lt` and `rt` for the interval-join tests ([`interval_rows`] in 1 to 3
/// files each, read in batches of 1 to 8192 rows): the folder holding them, each table's data
/// folder, reference file and late rows, the DDL, and the batch size.
fn interval_tables(
    rng: &mut StdRng,
    bound_ms: i64,
    coarse: bool,
) -> (tempfile::TempDir, Vec<IntervalTable>, String, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut tables = Vec::new();
    for name in ["l", "r"] {
        let n = rng.gen_range(300..1200);
        let rows = interval_rows(rng, n, bound_ms, coarse);
        let parts = rng.gen_range(1..=3);
        let sub = dir.path().join(name);
        tables.push(write_interval_table(&sub, &rows, parts, bound_ms, rng));
    }
    let batch_size = [1, 7, 64, 1000, 8192][rng.gen_range(0..5)];
    let ddl = tables
        .iter()
        .zip(["lt", "rt"])
        .map(|((data, _, _), name)| {
            format!(
                "CREATE TABLE {name} (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
                   WATERMARK FOR ts AS ts - INTERVAL '{bound_ms}' MILLISECOND)
                 WITH (connector = 'file', path = '{}', format = 'csv', header = 'true',
                       batch_size = '{batch_size}')",
                data.display()
            )
        })
        .collect::<Vec<_>>()
        .join(";");
    (dir, tables, ddl, batch_size)
}

/// Runs `weir_sql` on the tables of `ddl` and checks its rows and late rows against the
/// reference's.
fn check_interval_run(
    what: &str,
    ddl: &str,
    weir_sql: &str,
    expected: &[Vec<String>],
    late: u64,
    parallelism: usize,
    budget: Option<&str>,
) {
    let (got, got_late) = weir_interval_run(ddl, weir_sql, parallelism, budget);
    assert_eq!(got.len(), expected.len(), "{what}");
    assert!(got == expected, "{what}: rows differ");
    assert_eq!(got_late, late, "{what}: late rows");
}

/// Runs `sql` on a fresh session; sorted rows and the late-row count.
fn weir_interval_run(
    ddl: &str,
    sql: &str,
    parallelism: usize,
    budget: Option<&str>,
) -> (Vec<Vec<String>>, u64) {
    let mut s = session(parallelism);
    run_ddl(&mut s, ddl);
    if let Some(b) = budget {
        common::execute(&mut s, &format!("SET memory_budget = '{b}'")).unwrap();
    }
    let stmt = weir_planner::sql::StatementText {
        text: sql.to_string(),
        line: 1,
    };
    let weir_planner::StatementResult::Query(run) =
        s.execute(&stmt).unwrap_or_else(|e| panic!("{sql}: {e}"))
    else {
        panic!("{sql}: expected a streaming query")
    };
    let (batches, metrics) = run.collect().unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut rows = text_rows(&batches);
    rows.sort();
    (rows, metrics.late_rows)
}

/// Interval joins against DataFusion batch SQL: the same join as a plain join over the rows
/// that are not below their partition's watermark, random disorder and late rows, one to
/// three partitions per table, batch sizes 1 to 8192, parallelism 1 to 4, half the runs with
/// every buffered row spilled (a 1-byte memory budget), every join kind and spelling.
#[test]
fn interval_joins_match_batch_sql() {
    let kinds = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"];
    for seed in 0..16u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let coarse = rng.gen_bool(0.3);
        let unit = if coarse { 1000 } else { 1 };
        let bound_ms = if coarse {
            rng.gen_range(0..3) * 1000
        } else {
            rng.gen_range(0..3000)
        };
        let lower = rng.gen_range(-2000..500) / unit * unit;
        let upper = (lower + rng.gen_range(200..2500)) / unit * unit;
        let (_dir, tables, ddl, batch_size) = interval_tables(&mut rng, bound_ms, coarse);
        let kind = kinds[seed as usize % 4];
        let form = rng.gen_range(0..3);
        // The strict spelling excludes its bounds: widened by a unit, it keeps the same times.
        let (lower, upper) = if form == 1 {
            (lower - unit, upper + unit)
        } else {
            (lower, upper)
        };
        let extra = if rng.gen_bool(0.4) {
            " AND l.v < r.v"
        } else {
            ""
        };
        let condition = format!("l.k = r.k AND {}{extra}", interval_sql(form, lower, upper));
        let columns = "l.id, r.id AS rid, l.k, r.v";
        // The implicit-join spelling (FROM l, r WHERE ...) for a third of the inner joins.
        let implicit = kind == "JOIN" && seed % 3 == 0;
        let (weir_sql, ref_sql) = if implicit {
            (
                format!("SELECT {columns} FROM lt l, rt r WHERE {condition}"),
                format!(
                    "SELECT {columns} FROM (SELECT * FROM lref WHERE ts >= wprev) l,
                       (SELECT * FROM rref WHERE ts >= wprev) r WHERE {condition}"
                ),
            )
        } else {
            (
                format!("SELECT {columns} FROM lt l {kind} rt r ON {condition}"),
                format!(
                    "SELECT {columns} FROM (SELECT * FROM lref WHERE ts >= wprev) l {kind}
                       (SELECT * FROM rref WHERE ts >= wprev) r ON {condition}"
                ),
            )
        };
        let expected = reference(&tables[0].1, &tables[1].1, &ref_sql);
        let late = tables[0].2 + tables[1].2;
        let parallelism = rng.gen_range(1..=4);
        let budget = rng.gen_bool(0.5).then_some("1");
        let what = format!(
            "seed {seed}: {weir_sql}\n(bound {bound_ms} ms, batch size {batch_size}, \
             parallelism {parallelism}, budget {budget:?})"
        );
        assert!(expected.len() > 50, "{what}: only {} rows", expected.len());
        assert!(late > 0, "{what}: no late rows");
        check_interval_run(&what, &ddl, &weir_sql, &expected, late, parallelism, budget);
    }
}

/// Interval joins whose rows reach as far as a column of theirs (`r.ts BETWEEN l.ts AND l.e`,
/// Nexmark q4's `b.date_time BETWEEN a.date_time AND a.expires`, and the mirrored and shifted
/// spellings) against the same joins in batch over the rows that are not below their
/// watermark. The bound column is computed (`ts` plus 0 to 3 s by `v`, NULL where `v` is),
/// so the join's input is a projection; random disorder and late rows, any batch size,
/// parallelism and memory budget, every join kind.
#[test]
fn interval_joins_bounded_by_a_column_match_batch_sql() {
    let kinds = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"];
    let bound =
        "arrow_cast(arrow_cast(ts, 'Int64') + v * 3000000, 'Timestamp(Nanosecond, None)') AS e";
    for seed in 0..8u64 {
        let mut rng = StdRng::seed_from_u64(2000 + seed);
        let bound_ms = rng.gen_range(0..3000);
        let (_dir, tables, ddl, batch_size) = interval_tables(&mut rng, bound_ms, false);
        let kind = kinds[seed as usize % 4];
        let shift = rng.gen_range(-500..500);
        // Which side carries the bound column, and how the condition reads.
        let (bounded_side, condition) = match seed % 3 {
            0 => ("l", "r.ts BETWEEN l.ts AND l.e".to_string()),
            1 => (
                "l",
                format!(
                    "r.ts >= {} AND r.ts <= {}",
                    shifted("l.ts", shift),
                    shifted("l.e", shift.abs())
                ),
            ),
            _ => (
                "r",
                format!("l.ts BETWEEN {} AND r.e", shifted("r.ts", -shift.abs())),
            ),
        };
        let input = |table: &str, side: &str, reference: bool| {
            let rows = if reference {
                format!("(SELECT * FROM {table} WHERE ts >= wprev)")
            } else {
                table.to_string()
            };
            if side == bounded_side {
                format!("(SELECT id, k, v, ts, {bound} FROM {rows} t)")
            } else {
                rows
            }
        };
        let columns = "l.id, r.id AS rid, l.k, r.v";
        let sql = |l: String, r: String| {
            format!("SELECT {columns} FROM {l} l {kind} {r} r ON l.k = r.k AND {condition}")
        };
        let weir_sql = sql(input("lt", "l", false), input("rt", "r", false));
        let ref_sql = sql(input("lref", "l", true), input("rref", "r", true));
        let expected = reference(&tables[0].1, &tables[1].1, &ref_sql);
        let late = tables[0].2 + tables[1].2;
        let parallelism = rng.gen_range(1..=4);
        let budget = rng.gen_bool(0.5).then_some("1");
        let what = format!(
            "seed {seed}: {weir_sql}\n(bound {bound_ms} ms, batch size {batch_size}, \
             parallelism {parallelism}, budget {budget:?})"
        );
        assert!(expected.len() > 50, "{what}: only {} rows", expected.len());
        let mut s = session(1);
        run_ddl(&mut s, &ddl);
        let plan = query_sorted(&mut s, &format!("EXPLAIN {weir_sql}"))
            .concat()
            .join("\n");
        assert!(plan.contains("IntervalJoin"), "{what}: {plan}");
        check_interval_run(&what, &ddl, &weir_sql, &expected, late, parallelism, budget);
    }
}
