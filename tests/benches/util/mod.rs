//! Helpers shared by the benchmarks.

#![allow(dead_code)]

/// The allocator of the `weir` binary, so benchmarks measure what users run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A number from the environment, or the default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median (upper middle for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs one statement; a failure ends the benchmark with the statement and the error.
pub fn run(session: &mut weir_planner::Session, sql: &str) {
    session
        .execute(&weir_planner::sql::StatementText {
            text: sql.to_string(),
            line: 1,
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}
