//! Fuzzing the decoders and the statement front end with mutated input: whatever the bytes,
//! the CSV and JSON decoders and their error descriptions return (rows or an error), never
//! panic, and a query over a mutated file with `bad_rows = 'skip'` never panics either; a
//! statement built from mutated SQL comes back as a result or an error.
//!
//! Bounded for `cargo test` (a fixed number of cases from a fixed seed, so a failure
//! reproduces); `WEIR_FUZZ_SECONDS=600 cargo test --release --test fuzz` runs each target
//! for that long with fresh seeds (printed), as a soak.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_connectors::file::format::describe_error;
use weir_connectors::file::FileFormat;

use common::{execute, session};

/// How long and from which seed: fixed cases by default, a timed run with
/// `WEIR_FUZZ_SECONDS`.
fn budget(default_cases: usize) -> (StdRng, Box<dyn FnMut(usize) -> bool>) {
    match std::env::var("WEIR_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(secs) => {
            let seed: u64 = rand::random();
            eprintln!("fuzzing for {secs} s from seed {seed}");
            let end = Instant::now() + Duration::from_secs(secs);
            (
                StdRng::seed_from_u64(seed),
                Box::new(move |_| Instant::now() < end),
            )
        }
        None => (
            StdRng::seed_from_u64(19),
            Box::new(move |i| i < default_cases),
        ),
    }
}

const PIECES: &[&str] = &[
    ",",
    "\"",
    "\"\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    ":",
    "\n",
    "\r\n",
    "\\",
    "\\u0000",
    "null",
    "true",
    "-",
    "+",
    "e999",
    "1e-400",
    "NaN",
    "9223372036854775808",
    "-9223372036854775809",
    "2024-02-30 25:61:61",
    "0000-00-00",
    "\u{1F600}",
    "\u{0}",
    "\u{1b}[31m",
    "   ",
    "\t",
    "99999999999999999999999999999999999999999",
    "\"id\"",
    "\"ts\":",
    "{\"id\":",
    "∞",
];

/// `base` with a few random edits: bytes flipped, pieces inserted, spans cut or repeated.
fn mutate(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        let at = if out.is_empty() {
            0
        } else {
            rng.gen_range(0..=out.len())
        };
        match rng.gen_range(0..5) {
            0 if !out.is_empty() => {
                let i = rng.gen_range(0..out.len());
                out[i] = rng.gen();
            }
            1 => {
                let piece = PIECES[rng.gen_range(0..PIECES.len())].as_bytes();
                out.splice(at..at, piece.iter().copied());
            }
            2 if at < out.len() => {
                let end = rng.gen_range(at..=out.len());
                out.drain(at..end);
            }
            3 if at < out.len() => {
                let end = rng.gen_range(at..=out.len().min(at + 40));
                let span = out[at..end].to_vec();
                out.splice(at..at, span);
            }
            _ => out.push(b'\n'),
        }
    }
    out
}

fn schemas() -> Vec<SchemaRef> {
    let fields = |ts_nullable: bool| {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                ts_nullable,
            ),
        ]))
    };
    let wide = Arc::new(Schema::new(vec![
        Field::new("d", DataType::Decimal128(38, 4), true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("day", DataType::Date32, true),
        Field::new("u", DataType::UInt8, true),
    ]));
    vec![fields(true), fields(false), wide]
}

fn tests_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn mutated_csv_and_json_records_never_panic_the_decoders() {
    let csv_base = std::fs::read(tests_dir().join("data/events.csv")).unwrap();
    let json_base = std::fs::read(tests_dir().join("data/events.jsonl")).unwrap();
    let csv_lines: Vec<&[u8]> = csv_base.split(|b| *b == b'\n').skip(1).take(20).collect();
    let json_lines: Vec<&[u8]> = json_base.split(|b| *b == b'\n').take(20).collect();
    let formats = [
        (
            FileFormat::Csv {
                header: false,
                delimiter: b',',
            },
            csv_lines,
        ),
        (FileFormat::Json, json_lines),
    ];
    let schemas = schemas();
    let (mut rng, mut more) = budget(4_000);
    let mut case = 0;
    let (mut decoded, mut refused) = (0usize, 0usize);
    while more(case) {
        case += 1;
        let (format, lines) = &formats[case % formats.len()];
        let schema = &schemas[rng.gen_range(0..schemas.len())];
        let n = rng.gen_range(1..4);
        let mut data = Vec::new();
        for _ in 0..n {
            data.extend_from_slice(lines[rng.gen_range(0..lines.len())]);
            data.push(b'\n');
        }
        let data = mutate(&mut rng, &data);
        let rows = data.iter().filter(|b| **b == b'\n').count().max(1);
        let outcome = std::panic::catch_unwind(|| match format.decode(schema, &data, rows) {
            Ok(_) => true,
            Err(e) => {
                let text = describe_error(&e, schema);
                assert!(!text.is_empty());
                assert!(text.chars().count() <= 501, "{text}");
                false
            }
        });
        match outcome {
            Ok(true) => decoded += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!(
                "case {case}: the {} decoder panicked on {:?}",
                format.name(),
                String::from_utf8_lossy(&data)
            ),
        }
    }
    // Both outcomes were reached, so the mutations neither all broke nor all kept the rows.
    assert!(
        decoded > 0 && refused > 0,
        "decoded {decoded}, refused {refused}"
    );
}

#[test]
fn mutated_files_and_statements_never_panic_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let csv_base = std::fs::read(tests_dir().join("data/events.csv")).unwrap();
    let json_base = std::fs::read(tests_dir().join("data/events.jsonl")).unwrap();
    let statements = [
        "SELECT count(*), sum(v) FROM t",
        "SELECT window_start, k, count(*) FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY window_start, k",
        "SELECT id, k FROM t WHERE v > 3 LIMIT 5",
        "SELECT k, max(v) FROM HOP(t, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k",
    ];
    let mut s = session(2);
    let (mut rng, mut more) = budget(60);
    let mut case = 0;
    let mut answered = 0;
    while more(case) {
        case += 1;
        let json = case % 2 == 0;
        let base = if json { &json_base } else { &csv_base };
        let path = dir.path().join(format!("f{case}"));
        std::fs::write(&path, mutate(&mut rng, base)).unwrap();
        let ddl = format!(
            "CREATE OR REPLACE TABLE t (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (connector = 'file', path = '{}', \
             format = '{}', {} bad_rows = 'skip')",
            path.display(),
            if json { "json" } else { "csv" },
            if json { "" } else { "header = 'true'," }
        );
        execute(&mut s, &ddl).unwrap_or_else(|e| panic!("case {case}: {ddl}: {e}"));
        let sql = statements[rng.gen_range(0..statements.len())];
        // Mutated SQL: an error or a result, never a panic (the session catches none).
        let sql = if rng.gen_bool(0.3) {
            String::from_utf8_lossy(&mutate(&mut rng, sql.as_bytes())).into_owned()
        } else {
            sql.to_string()
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(&mut s, &sql).is_ok()
        }));
        match outcome {
            Ok(ok) => answered += usize::from(ok),
            Err(_) => panic!("case {case}: `{sql}` over {} panicked", path.display()),
        }
    }
    // Some cases ran to a result (the fuzzing reached the operators, not only the parser).
    assert!(answered > case / 4, "{answered} of {case} answered");
    // The session is still whole.
    assert!(execute(&mut s, "SELECT 1").is_ok());
}
