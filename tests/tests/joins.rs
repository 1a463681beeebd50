//! Window joins against DataFusion batch SQL on the same rows: INNER / LEFT / RIGHT / FULL,
//! with and without a residual ON condition, semi and anti joins, at parallelism 1 and 3 and
//! with every buffered row spilled to the state store.
//!
//! Both inputs have disorder within the watermark bound and late rows (see
//! `common::reference::write_input`). A late row is in no window, so the reference drops it
//! from its side before joining; windows are computed with `date_bin`, not with weir's window
//! functions.

mod common;

use std::path::Path;

use common::{query_sorted, session, text_rows};
use datafusion::prelude::SessionContext;

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

#[test]
fn joins_weir_cannot_run_are_refused_with_a_reason() {
    let mut s = session(1);
    run_ddl(
        &mut s,
        "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', stream = 'bid')",
    );
    let refused = [
        (
            "SELECT * FROM bid a JOIN bid b ON a.auction = b.auction",
            "without matching windows",
        ),
        (
            "SELECT * FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) a
             JOIN TUMBLE(bid, date_time, INTERVAL '5' SECOND) b
             ON a.window_start = b.window_start AND a.auction = b.auction",
            "windows of the same size",
        ),
        (
            "SELECT * FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) a,
               TUMBLE(bid, date_time, INTERVAL '10' SECOND) b WHERE a.price > b.price",
            "equality condition",
        ),
    ];
    for (sql, reason) in refused {
        match common::execute(&mut s, sql) {
            Ok(_) => panic!("{sql}: accepted"),
            Err(e) => assert!(e.to_string().contains(reason), "{sql}: {e}"),
        }
    }
}
