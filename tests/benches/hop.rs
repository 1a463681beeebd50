//! What a HOP aggregation costs as its windows per row (`size / slide`) grow, with panes (each
//! bid aggregated once into its 2-second pane, windows combined from panes when they fire)
//! and without (each bid copied into every window holding it), in one run:
//!
//! `SELECT auction, count(*), max(price) FROM HOP(bid, date_time, 2 s, size) GROUP BY
//! auction, window_start, window_end` over `WEIR_BENCH_EVENTS` Nexmark events (default
//! 5,000,000) read from an events file the bench writes once (so the generator is not timed),
//! at parallelism `WEIR_BENCH_PARALLELISM` (default 1), sizes 4, 10, 20 and 60 s. The
//! per-window form is the same query with a filter on `window_start` that holds for every
//! window (`window_start > TIMESTAMP '1970-01-01'`), which keeps the planner from using panes.
//!
//! Each figure is the median of `WEIR_BENCH_RUNS` runs (default 3). Run with
//! `cargo bench --workspace --bench hop`.

mod util;

use std::time::Instant;

use util::{env_usize, median, run};
use weir_planner::sql::StatementText;
use weir_planner::{Session, SessionConfig, StatementResult};

/// Runs `query` once; returns seconds and result rows.
fn run_query(ddl: &str, query: &str, parallelism: usize) -> (f64, usize) {
    let (mut session, _) = Session::open(SessionConfig {
        parallelism,
        data_dir: None,
        ..SessionConfig::default()
    })
    .unwrap();
    run(&mut session, ddl);
    let started = Instant::now();
    let stmt = StatementText {
        text: query.to_string(),
        line: 1,
    };
    let StatementResult::Query(q) = session.execute(&stmt).unwrap() else {
        panic!("{query}: not a query")
    };
    let (batches, _) = q.collect().unwrap();
    (
        started.elapsed().as_secs_f64(),
        batches.iter().map(|b| b.num_rows()).sum(),
    )
}

fn main() {
    let events = env_usize("WEIR_BENCH_EVENTS", 5_000_000);
    let runs = env_usize("WEIR_BENCH_RUNS", 3);
    let parallelism = env_usize("WEIR_BENCH_PARALLELISM", 1);
    let dir = tempfile::tempdir().unwrap();
    weir_tests::nexmark::write_files(dir.path(), events as u64).expect("events files");
    let file = dir.path().join("bid.arrow");
    let ddl = format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
           date_time TIMESTAMP, extra VARCHAR,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', stream = 'bid', events_file = '{}', partitions = '{parallelism}')",
        file.display()
    );
    println!(
        "HOP(bid, 2 s, size): count(*), max(price) by auction; {events} events, parallelism \
         {parallelism}; median of {runs} runs\n"
    );
    println!(
        "{:>8} {:>9} {:>14} {:>14} {:>10} {:>12}",
        "size", "windows", "panes ev/s", "per-window", "speedup", "result rows"
    );
    for size in [4, 10, 20, 60] {
        let hop = format!("HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '{size}' SECOND)");
        let panes = format!(
            "SELECT auction, count(*), max(price) FROM {hop}
             GROUP BY auction, window_start, window_end"
        );
        let per_window = format!(
            "SELECT auction, count(*), max(price) FROM {hop}
             WHERE window_start > TIMESTAMP '1970-01-01 00:00:00'
             GROUP BY auction, window_start, window_end"
        );
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut rows = (0, 0);
        for _ in 0..runs {
            let (t, n) = run_query(&ddl, &panes, parallelism);
            a.push(t);
            rows.0 = n;
            let (t, n) = run_query(&ddl, &per_window, parallelism);
            b.push(t);
            rows.1 = n;
        }
        assert_eq!(
            rows.0, rows.1,
            "HOP {size} s: panes and per-window rows differ"
        );
        let (a, b) = (median(a), median(b));
        println!(
            "{:>7}s {:>9} {:>14.0} {:>14.0} {:>9.2}x {:>12}",
            size,
            size / 2,
            events as f64 / a,
            events as f64 / b,
            b / a,
            rows.0
        );
    }
}
