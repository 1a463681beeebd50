//! Bad input never panics: random token soup, truncated statements and odd values all come
//! back as errors (or results), and the session keeps working afterwards.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{execute, session, Collected};

const WORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "LIMIT",
    "HAVING",
    "CREATE",
    "TABLE",
    "DROP",
    "WITH",
    "WATERMARK",
    "FOR",
    "AS",
    "TUMBLE",
    "HOP",
    "TABLE(",
    "DESCRIPTOR(",
    "INTERVAL",
    "'10'",
    "SECOND",
    "'1'",
    "DAY",
    "events",
    "ts",
    "k",
    "v",
    "id",
    "window_start",
    "window_end",
    "count(*)",
    "sum(v)",
    "(",
    ")",
    ",",
    "*",
    "-",
    "+",
    "/",
    "0",
    "-1",
    "9223372036854775807",
    "NULL",
    "'x'",
    "=",
    "<",
    "AND",
    "OR",
    "NOT",
    "EXPLAIN",
    "ANALYZE",
    "SET",
    "SHOW",
    "parallelism",
    "TO",
    "DISTINCT",
    "CAST(",
    "BIGINT",
    "TIMESTAMP",
    "connector",
    "'file'",
    "path",
    "'/nonexistent'",
    ";",
    "\"",
    "'",
    "--",
    "/*",
    "UNION",
    "JOIN",
    "ON",
];

#[test]
fn random_token_soup_gives_errors_not_panics() {
    let mut s = session(2);
    let ddl = "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
        WITH (connector = 'file', path = 'data/events.csv', header = 'true')";
    assert!(matches!(execute(&mut s, ddl).unwrap(), Collected::Command));
    let mut rng = StdRng::seed_from_u64(7);
    let mut errors = 0;
    for _ in 0..3_000 {
        let n = rng.gen_range(1..25);
        let sql: Vec<&str> = (0..n)
            .map(|_| WORDS[rng.gen_range(0..WORDS.len())])
            .collect();
        let sql = sql.join(" ");
        if sql.contains("SET") || sql.contains("DROP") {
            continue; // keep the session's table and settings for the next statements
        }
        if execute(&mut s, &sql).is_err() {
            errors += 1;
        }
    }
    assert!(
        errors > 2_000,
        "most token soup is invalid, got {errors} errors"
    );
    // the session still works
    let Collected::Rows(_, batches) = execute(&mut s, "SELECT count(*) FROM events").unwrap()
    else {
        panic!("expected rows")
    };
    assert_eq!(common::text_rows(&batches), vec![vec!["13".to_string()]]);
}

#[test]
fn truncated_statements_give_errors_not_panics() {
    let mut s = session(1);
    let full = "CREATE TABLE t (a BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (connector = 'file', path = 'data/events.csv'); SELECT window_start, count(*) FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) GROUP BY window_start, window_end";
    for end in 0..full.len() {
        if !full.is_char_boundary(end) {
            continue;
        }
        let _ = execute(&mut s, &full[..end]);
    }
}

/// A file table decodes only the columns the queries read: a value that does not fit an
/// unread column's type is not a malformed row there (EXPLAIN names the columns left out),
/// and fails the query that reads it with file and line, or is skipped and counted.
#[test]
fn a_bad_value_in_a_column_nobody_reads_is_not_a_bad_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bids.csv");
    let mut text = String::from("auction,price,note,ts\n");
    for i in 0..100 {
        // Row 40 (line 42) has a price that is not a number.
        let price = if i == 40 {
            "lots".to_string()
        } else {
            i.to_string()
        };
        text.push_str(&format!(
            "{},{price},n{i},2024-01-01 00:00:{:02}\n",
            i % 7,
            i % 60
        ));
    }
    std::fs::write(&path, text).unwrap();
    let mut s = session(2);
    let ddl = format!(
        "CREATE TABLE bids (auction BIGINT, price BIGINT, note VARCHAR, ts TIMESTAMP,
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH (connector = 'file', path = '{}', header = 'true')",
        path.display()
    );
    execute(&mut s, &ddl).unwrap();
    let counts = "SELECT auction, count(*) FROM bids GROUP BY auction";
    let plan = common::query_sorted(&mut s, &format!("EXPLAIN {counts}")).concat();
    assert!(
        plan.iter()
            .any(|l| l.contains("(not producing price, note: no query reads them)")),
        "{plan:?}"
    );
    let rows = common::query_sorted(&mut s, counts);
    let total: i64 = rows.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
    assert_eq!((rows.len(), total), (7, 100), "{rows:?}");
    let err = match execute(&mut s, "SELECT sum(price) FROM bids") {
        Ok(_) => panic!("price is read: row 40 is bad"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("bids.csv' line 42") && err.contains("price"),
        "{err}"
    );
    // Skipped where read, kept where not.
    execute(&mut s, "DROP TABLE bids").unwrap();
    execute(
        &mut s,
        &ddl.replace("header = 'true'", "header = 'true', bad_rows = 'skip'"),
    )
    .unwrap();
    let sum = common::query_sorted(&mut s, "SELECT sum(price), count(*) FROM bids");
    assert_eq!(sum, vec![vec![(4950 - 40).to_string(), "99".to_string()]]);
    let rows = common::query_sorted(&mut s, "SELECT count(*) FROM bids");
    assert_eq!(rows, vec![vec!["100".to_string()]]);
}
