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
