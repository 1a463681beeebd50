//! The PostgreSQL sink into a real server, measured (`cargo bench --workspace --bench
//! postgres_sink`), against the limit: plain binary `COPY` of the same rows.
//!
//! The job: Nexmark bids (`WEIR_BENCH_EVENTS` events, default 1,090,000: about 1,000,000
//! bids), every column, into a table the sink creates, exactly-once with 1 s checkpoints at
//! parallelism `WEIR_BENCH_PARALLELISM` (default 2). Rows/s = rows in the table after the job
//! ended / wall clock from CREATE SINK to the job's end (generation included: the generator
//! alone is far faster than any sink).
//!
//! The limit: the same rows, read back from the table (`COPY ... TO STDOUT (FORMAT binary)`,
//! not timed), written by one client into a fresh table of the same columns with
//! `COPY ... FROM STDIN (FORMAT binary)` in one transaction (timed).
//!
//! Each figure is the median of `WEIR_BENCH_RUNS` runs (default 3), each on a fresh table.
//! The server is the tests' (`tests/common/pg.rs`: fsync off, in a temporary directory).

#[allow(dead_code)]
#[path = "../tests/common/pg.rs"]
mod pg;
mod util;

use std::io::{Read, Write};
use std::time::Instant;

use pg::PgServer;
use util::{env_usize, median, run};
use weir_planner::{Session, SessionConfig};

const COLUMNS: &str = "auction, bidder, price, channel, url, date_time, extra";

/// Rows/s of one sink job into table `table`.
fn sink_run(pg: &PgServer, table: &str, events: usize, parallelism: usize) -> (f64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::open(SessionConfig {
        parallelism,
        data_dir: Some(dir.path().join("data")),
        ..SessionConfig::default()
    })
    .unwrap()
    .0;
    run(
        &mut s,
        &format!(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
               url VARCHAR, date_time TIMESTAMP, extra VARCHAR,
               WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
             WITH (connector = 'nexmark', stream = 'bid', events = '{events}',
                   partitions = '{parallelism}')"
        ),
    );
    run(&mut s, "SET checkpoint_interval = '1s'");
    run(&mut s, "SET delivery = 'exactly_once'");
    let started = Instant::now();
    run(
        &mut s,
        &format!(
            "CREATE SINK {table} WITH (connector = 'postgres', url = '{}', table = '{table}',
               create_table = 'true') AS SELECT {COLUMNS} FROM bid",
            pg.url()
        ),
    );
    let jobs = s.wait_for_jobs(&crossbeam_channel::never()).unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    let rows: u64 = pg.psql(&format!("SELECT count(*) FROM {table}"))[0]
        .parse()
        .unwrap();
    (rows as f64 / secs, rows)
}

/// Rows/s of plain binary COPY of the rows of `from` into a new table `to`.
fn copy_run(pg: &PgServer, from: &str, to: &str) -> f64 {
    let mut client = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut data = Vec::new();
    client
        .copy_out(&format!(
            "COPY {from} ({COLUMNS}) TO STDOUT (FORMAT binary)"
        ))
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    client
        .batch_execute(&format!("CREATE TABLE {to} (LIKE {from}); "))
        .unwrap();
    let started = Instant::now();
    let mut tx = client.transaction().unwrap();
    let mut writer = tx
        .copy_in(&format!("COPY {to} ({COLUMNS}) FROM STDIN (FORMAT binary)"))
        .unwrap();
    writer.write_all(&data).unwrap();
    let rows = writer.finish().unwrap();
    tx.commit().unwrap();
    rows as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let events = env_usize("WEIR_BENCH_EVENTS", 1_090_000);
    let parallelism = env_usize("WEIR_BENCH_PARALLELISM", 2);
    let runs = env_usize("WEIR_BENCH_RUNS", 3);
    let pg = PgServer::start();
    let mut sink = Vec::new();
    let mut copy = Vec::new();
    let mut rows = 0;
    for i in 0..runs {
        let (rate, n) = sink_run(&pg, &format!("bids_{i}"), events, parallelism);
        rows = n;
        let limit = copy_run(&pg, &format!("bids_{i}"), &format!("copied_{i}"));
        eprintln!("run {i}: sink {rate:.0} rows/s, COPY {limit:.0} rows/s");
        sink.push(rate);
        copy.push(limit);
    }
    let (sink, copy) = (median(sink), median(copy));
    println!(
        "PostgreSQL sink: {rows} Nexmark bids, exactly-once, 1 s checkpoints, parallelism \
         {parallelism}, median of {runs} runs"
    );
    println!("{:<34} {:>12} {:>10}", "path", "rows/s", "of COPY");
    println!(
        "{:<34} {:>12.0} {:>9.2}x",
        "sink (exactly-once, 1 s)",
        sink,
        sink / copy
    );
    println!(
        "{:<34} {:>12.0} {:>9.2}x",
        "plain binary COPY, one client", copy, 1.0
    );
}
