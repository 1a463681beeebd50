//! Throughput of `TUMBLE 10 s, COUNT(*) and MAX(price) by auction`, weir against DataFusion
//! batch (`date_bin` + GROUP BY) on the same data, in one run:
//!
//! - over a generated bids CSV (2,000,000 rows by default, `WEIR_BENCH_ROWS` to change);
//! - over the Nexmark generator (weir only, with a generator-only baseline).
//!
//! Each figure is the median of `WEIR_BENCH_RUNS` runs (default 3). Run with
//! `cargo bench --workspace --bench tumble`.

mod util;

use std::io::Write;
use std::time::Instant;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::prelude::{CsvReadOptions, SessionContext};
use util::{env_usize, median};
use weir_planner::sql::StatementText;
use weir_planner::{Session, SessionConfig, StatementResult};

/// Bids in time order with mild disorder: 1,000 events/s of event time, 10,000 auctions.
fn write_bids(path: &std::path::Path, rows: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let base = 1_704_067_200_000i64;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    writeln!(f, "auction,bidder,price,date_time").unwrap();
    for i in 0..rows as i64 {
        let jitter = (next() % 2000) as i64;
        let ms = base + i - jitter;
        let secs = ms.div_euclid(1000);
        let dt = chrono::DateTime::from_timestamp(secs, (ms.rem_euclid(1000) * 1_000_000) as u32)
            .unwrap();
        writeln!(
            f,
            "{},{},{},{}",
            next() % 10_000,
            next() % 100_000,
            next() % 1_000_000,
            dt.format("%Y-%m-%d %H:%M:%S%.3f")
        )
        .unwrap();
    }
}

fn run_weir(parallelism: usize, ddl: &str, query: &str) -> (f64, u64, usize) {
    let (mut session, _) = Session::open(SessionConfig {
        parallelism,
        data_dir: None,
        ..SessionConfig::default()
    })
    .unwrap();
    let stmt = |t: &str| StatementText {
        text: t.to_string(),
        line: 1,
    };
    session.execute(&stmt(ddl)).unwrap();
    let started = Instant::now();
    let StatementResult::Query(run) = session.execute(&stmt(query)).unwrap() else {
        panic!()
    };
    let (batches, metrics) = run.collect().unwrap();
    let secs = started.elapsed().as_secs_f64();
    (
        secs,
        metrics.rows_in,
        batches.iter().map(|b| b.num_rows()).sum(),
    )
}

fn run_datafusion(path: &str) -> (f64, usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = SessionContext::new();
        let schema = Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("bidder", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new("date_time", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]);
        let started = Instant::now();
        ctx.register_csv("bids", path, CsvReadOptions::new().schema(&schema).has_header(true)).await.unwrap();
        let batches = ctx
            .sql("SELECT date_bin(INTERVAL '10 seconds', date_time, TIMESTAMP '1970-01-01 00:00:00') AS w, auction, count(*), max(price) FROM bids GROUP BY 1, 2")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        (started.elapsed().as_secs_f64(), batches.iter().map(|b| b.num_rows()).sum())
    })
}

fn main() {
    let rows = env_usize("WEIR_BENCH_ROWS", 2_000_000);
    let runs = env_usize("WEIR_BENCH_RUNS", 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bids.csv");
    write_bids(&path, rows);
    let path_s = path.display().to_string();
    println!(
        "TUMBLE 10 s, COUNT(*) and MAX(price) by auction; {rows} rows; median of {runs} runs\n"
    );

    let ddl = format!(
        "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'file', path = '{path_s}', header = 'true')"
    );
    let query = "SELECT window_start, window_end, auction, count(*), max(price)
                 FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end, auction";
    let mut df_times = Vec::new();
    let mut weir_times = [Vec::new(), Vec::new()];
    let mut groups = (0, [0, 0]);
    for _ in 0..runs {
        let (t, n) = run_datafusion(&path_s);
        df_times.push(t);
        groups.0 = n;
        for (i, p) in [1usize, 2].iter().enumerate() {
            let (t, rows_in, n) = run_weir(*p, &ddl, query);
            assert_eq!(rows_in as usize, rows);
            weir_times[i].push(t);
            groups.1[i] = n;
        }
    }
    let df = median(df_times);
    println!(
        "{:<38} {:>12} {:>14} {:>10}",
        "engine", "seconds", "events/s", "vs batch"
    );
    println!(
        "{:<38} {:>12.3} {:>14.0} {:>10}",
        "DataFusion batch (2 threads)",
        df,
        rows as f64 / df,
        "1.00x"
    );
    for (i, p) in [1, 2].iter().enumerate() {
        let t = median(weir_times[i].clone());
        println!(
            "{:<38} {:>12.3} {:>14.0} {:>9.2}x",
            format!("weir streaming, parallelism {p}"),
            t,
            rows as f64 / t,
            df / t
        );
    }
    println!(
        "\nresult groups: DataFusion {}, weir p1 {}, p2 {} (weir drops late rows)",
        groups.0, groups.1[0], groups.1[1]
    );

    let events = env_usize("WEIR_BENCH_NEXMARK_EVENTS", 2_000_000);
    let nddl = format!(
        "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', events = '{events}')"
    );
    let nquery = "SELECT window_start, window_end, auction, count(*), max(price)
                  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end, auction";
    let scan = "SELECT count(*) FROM bid";
    println!("\nNexmark generator, {events} events; median of {runs} runs");
    println!("{:<38} {:>12} {:>14}", "query", "seconds", "events/s");
    for (name, q, p) in [
        ("generator only: count(*)", scan, 1),
        ("TUMBLE by auction, parallelism 1", nquery, 1),
        ("TUMBLE by auction, parallelism 2", nquery, 2),
    ] {
        let mut times = Vec::new();
        for _ in 0..runs {
            let (t, _, _) = run_weir(p, &nddl, q);
            times.push(t);
        }
        let t = median(times);
        println!("{:<38} {:>12.3} {:>14.0}", name, t, events as f64 / t);
    }
}
