//! The Nexmark queries of `examples/nexmark/`, run by the real `weir -f` binary on a bounded
//! event count, checked against DataFusion batch SQL over the same events.
//!
//! The reference side generates the events itself with the `nexmark` crate (the generator
//! weir's source wraps, same configuration) and computes windows by integer arithmetic on the
//! timestamps, joins and maxima with plain batch SQL: nothing of weir's planner, window
//! functions or operators is involved. Nexmark event times rise with the event number, so no
//! row is late and the streaming result must equal the batch result as a multiset.

mod common;

use common::reference::{datafusion_csv_lines, workspace};

use std::process::Command;

/// Events per run: about 30 s of event time at the default 10,000 events/s, so three
/// 10-second windows and a dozen 2-second hops, with every kind of row.
const EVENTS: u64 = 300_000;

/// Runs `examples/nexmark/<query>.sql` with `events` events through `weir -f` at
/// `parallelism` (and as many source partitions); returns the header and the sorted rows.
fn run_weir(query: &str, events: u64, parallelism: usize) -> (String, Vec<String>) {
    run_weir_with(query, "", events, parallelism)
}

/// [`run_weir`] with `settings` (statements) before the script.
fn run_weir_with(
    query: &str,
    settings: &str,
    events: u64,
    parallelism: usize,
) -> (String, Vec<String>) {
    let path = workspace().join(format!("examples/nexmark/{query}.sql"));
    let script = format!("{settings}{}", std::fs::read_to_string(&path).unwrap());
    assert!(
        script.contains("events = '1000000'"),
        "{query}: events option"
    );
    // As many generator partitions as instances: partition i makes events i, i + n, ...
    let script = script.replace(
        "events = '1000000'",
        &format!("events = '{events}', partitions = '{parallelism}'"),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{query}.sql"));
    std::fs::write(&file, script).unwrap();
    let out = Command::new(common::process::weir_binary())
        .args(["-f", file.to_str().unwrap(), "--format", "csv"])
        .args(["--parallelism", &parallelism.to_string()])
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{query}: {stderr}");
    assert!(!stderr.contains("late rows"), "{query}: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let mut rows: Vec<String> = lines.map(str::to_string).collect();
    rows.sort();
    (header, rows)
}

fn check(query: &str, header: &str, reference_sql: &str, min_rows: usize) {
    let ctx = weir_tests::nexmark::context(EVENTS).expect("reference tables");
    let expected = datafusion_csv_lines(&ctx, reference_sql);
    assert!(
        expected.len() >= min_rows,
        "{query}: reference has only {} rows",
        expected.len()
    );
    for parallelism in [1, 2] {
        let (got_header, got) = run_weir(query, EVENTS, parallelism);
        assert_eq!(got_header, header, "{query}");
        if got != expected {
            let missing: Vec<_> = expected
                .iter()
                .filter(|r| !got.contains(r))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .iter()
                .filter(|r| !expected.contains(r))
                .take(5)
                .collect();
            panic!(
                "{query} at parallelism {parallelism}: {} rows, reference {}; missing {missing:?}, extra {extra:?}",
                got.len(),
                expected.len()
            );
        }
    }
}

/// An updating query in `runtime_mode = 'streaming'`: its changelog (`op` first), applied in
/// order as a multiset of lines, must end in the reference.
fn check_changelog(query: &str, header: &str, reference_sql: &str) {
    let ctx = weir_tests::nexmark::context(EVENTS).expect("reference tables");
    let expected = datafusion_csv_lines(&ctx, reference_sql);
    for parallelism in [1, 2] {
        let (got_header, log) = run_weir_with(
            query,
            "SET runtime_mode = 'streaming';\n",
            EVENTS,
            parallelism,
        );
        if !got_header.starts_with("op,") {
            // An append-only result (an inner join of append-only streams): its rows as
            // they came, which must be the reference.
            assert_eq!(got_header, header, "{query}");
            assert!(log == expected, "{query} at parallelism {parallelism}: streamed rows differ ({} rows, reference {})", log.len(), expected.len());
            continue;
        }
        assert_eq!(got_header, format!("op,{header}"), "{query}");
        // Sorting the changelog lost its order; a retraction of a row is matched with its
        // addition as a count, which the order does not change.
        let mut rows: std::collections::BTreeMap<&str, i64> = Default::default();
        let mut retractions = 0;
        for line in &log {
            let (op, row) = line.split_once(',').unwrap();
            let n = rows.entry(row).or_default();
            match op {
                "+I" | "+U" => *n += 1,
                "-U" | "-D" => {
                    *n -= 1;
                    retractions += 1;
                }
                other => panic!("{query}: change kind {other}"),
            }
        }
        assert!(retractions > 0, "{query}: results changed as bids came");
        let mut got: Vec<String> = Vec::new();
        for (row, n) in rows {
            assert!(n >= 0, "{query}: {row} retracted more often than added");
            got.extend(std::iter::repeat_n(row.to_string(), n as usize));
        }
        got.sort();
        assert!(
            got == expected,
            "{query} at parallelism {parallelism}: applied changelog has {} rows, reference {}",
            got.len(),
            expected.len()
        );
    }
}

const RANKS: &str = "count(*) FILTER (WHERE price < 10000),
    count(*) FILTER (WHERE price >= 10000 AND price < 1000000),
    count(*) FILTER (WHERE price >= 1000000)";

fn q15_reference() -> String {
    let distinct = |c: &str| {
        format!(
            "count(DISTINCT {c}), count(DISTINCT {c}) FILTER (WHERE price < 10000),
             count(DISTINCT {c}) FILTER (WHERE price >= 10000 AND price < 1000000),
             count(DISTINCT {c}) FILTER (WHERE price >= 1000000)"
        )
    };
    format!(
        "SELECT to_char(date_time, '%Y-%m-%d'), count(*), {RANKS}, {}, {} FROM bid
         GROUP BY to_char(date_time, '%Y-%m-%d')",
        distinct("bidder"),
        distinct("auction")
    )
}

const Q15_HEADER: &str = "day,total_bids,rank1_bids,rank2_bids,rank3_bids,total_bidders,rank1_bidders,rank2_bidders,rank3_bidders,total_auctions,rank1_auctions,rank2_auctions,rank3_auctions";

fn q17_reference() -> String {
    format!(
        "SELECT auction, to_char(date_time, '%Y-%m-%d'), count(*), {RANKS},
                min(price), max(price), avg(price), sum(price)
         FROM bid GROUP BY auction, to_char(date_time, '%Y-%m-%d')"
    )
}

const Q17_HEADER: &str = "auction,day,total_bids,rank1_bids,rank2_bids,rank3_bids,min_price,max_price,avg_price,sum_price";

/// q15 and q17 (GROUP BY without windows, with FILTER, COUNT(DISTINCT), MIN/MAX/AVG/SUM):
/// the final result over bounded input, and the changelog of the updating query.
#[test]
fn q15_q17_daily_statistics_final_and_as_changelogs() {
    check("q15", Q15_HEADER, &q15_reference(), 1);
    check("q17", Q17_HEADER, &q17_reference(), 100);
    check_changelog("q15", Q15_HEADER, &q15_reference());
    check_changelog("q17", Q17_HEADER, &q17_reference());
}

/// q3 and q20: regular inner joins of persons / bids with auctions (no window): the final
/// result over bounded input, and in streaming mode an append-only stream of pairs.
#[test]
fn q3_q20_regular_joins() {
    let q3 = "SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id
              WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca')";
    check("q3", "name,city,state,id", q3, 10);
    check_changelog("q3", "name,city,state,id", q3);
    let q20 = "SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra,
                 A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, A.expires,
                 A.seller, A.category, A.extra
               FROM bid B JOIN auction A ON B.auction = A.id WHERE A.category = 10";
    let header = "auction,bidder,price,channel,url,bid_date_time,bid_extra,item_name,description,initial_bid,reserve,date_time,expires,seller,category,extra";
    check("q20", header, q20, 100);
    check_changelog("q20", header, q20);
}

/// q4 (join, MAX per auction, AVG per category over the updating MAX) and q9 (join, Top-1
/// per auction): final results and applied changelogs.
#[test]
fn q4_q9_joins_with_aggregates_and_top_n() {
    let q4 = "SELECT Q.category, AVG(Q.final) FROM (
                SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                GROUP BY A.id, A.category) Q
              GROUP BY Q.category";
    check("q4", "category,avg_final", q4, 3);
    check_changelog("q4", "category,avg_final", q4);
    // Equal prices at equal times broken by the rest of the ranked row, as weir does.
    let q9 = "SELECT id, item_name, description, initial_bid, reserve, date_time, expires,
                seller, category, extra, auction, bidder, price, bid_date_time, bid_extra
              FROM (SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
                  B.extra AS bid_extra,
                  ROW_NUMBER() OVER (PARTITION BY A.id
                    ORDER BY B.price DESC, B.date_time ASC, B.bidder ASC, B.extra ASC) AS rownum
                FROM auction A, bid B
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires)
              WHERE rownum <= 1";
    let header = "id,item_name,description,initial_bid,reserve,date_time,expires,seller,category,extra,auction,bidder,price,bid_date_time,bid_extra";
    check("q9", header, q9, 100);
    check_changelog("q9", header, q9);
}

/// q18 (last bid per bidder and auction) and q19 (top ten bids per auction), Top-N without
/// windows; ties broken by the row's columns in order, as weir does.
#[test]
fn q18_q19_top_n_without_windows() {
    let q18 = "SELECT auction, bidder, price, channel, url, date_time, extra FROM (
                 SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction
                   ORDER BY date_time DESC, price, channel, url, extra) AS rn FROM bid)
               WHERE rn <= 1";
    let header = "auction,bidder,price,channel,url,date_time,extra";
    check("q18", header, q18, 1000);
    check_changelog("q18", header, q18);
    let q19 = "SELECT * FROM (
                 SELECT *, ROW_NUMBER() OVER (PARTITION BY auction
                   ORDER BY price DESC, bidder, channel, url, date_time, extra) AS rank_number
                 FROM bid)
               WHERE rank_number <= 10";
    let header = "auction,bidder,price,channel,url,date_time,extra,rank_number";
    check("q19", header, q19, 1000);
    check_changelog("q19", header, q19);
}

/// q16 (per channel and day, like q15), q21 (channel ids, regexp) and q22 (URL parts).
#[test]
fn q16_q21_q22() {
    let distinct = |c: &str| {
        format!(
            "count(DISTINCT {c}), count(DISTINCT {c}) FILTER (WHERE price < 10000),
             count(DISTINCT {c}) FILTER (WHERE price >= 10000 AND price < 1000000),
             count(DISTINCT {c}) FILTER (WHERE price >= 1000000)"
        )
    };
    let q16 = format!(
        "SELECT channel, to_char(date_time, '%Y-%m-%d'), max(to_char(date_time, '%H:%M')),
           count(*), {RANKS}, {}, {} FROM bid
         GROUP BY channel, to_char(date_time, '%Y-%m-%d')",
        distinct("bidder"),
        distinct("auction")
    );
    let header = "channel,day,minute,total_bids,rank1_bids,rank2_bids,rank3_bids,total_bidders,rank1_bidders,rank2_bidders,rank3_bidders,total_auctions,rank1_auctions,rank2_auctions,rank3_auctions";
    check("q16", header, &q16, 2);
    check_changelog("q16", header, &q16);
    let q21 = "SELECT auction, bidder, price, channel,
                 CASE WHEN lower(channel) = 'apple' THEN '0'
                      WHEN lower(channel) = 'google' THEN '1'
                      WHEN lower(channel) = 'facebook' THEN '2'
                      WHEN lower(channel) = 'baidu' THEN '3'
                      ELSE regexp_replace(url, '^(?:|.*&)channel_id=([^&]*).*$', '\\1') END
               FROM bid
               WHERE regexp_like(url, '(&|^)channel_id=([^&]*)')
                 OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')";
    check("q21", "auction,bidder,price,channel,channel_id", q21, 1000);
    let q22 = "SELECT auction, bidder, price, channel, split_part(url, '/', 4),
                 split_part(url, '/', 5), split_part(url, '/', 6) FROM bid";
    check(
        "q22",
        "auction,bidder,price,channel,dir1,dir2,dir3",
        q22,
        1000,
    );
}

/// q10 (day and minute as text) and q14 (a price band, the part of the day, a character
/// count): projections and filters, as DataFusion computes them.
#[test]
fn q10_q14_projections() {
    check(
        "q10",
        "auction,bidder,price,date_time,extra,dt,hm",
        "SELECT auction, bidder, price, date_time, extra, to_char(date_time, '%Y-%m-%d'),
           to_char(date_time, '%H:%M') FROM bid",
        1000,
    );
    check(
        "q14",
        "auction,bidder,price,bid_time_type,date_time,extra,c_counts",
        "SELECT auction, bidder, 0.908 * price,
           CASE WHEN date_part('hour', date_time) BETWEEN 8 AND 18 THEN 'dayTime'
                WHEN date_part('hour', date_time) <= 6 OR date_part('hour', date_time) >= 20
                  THEN 'nightTime'
                ELSE 'otherTime' END,
           date_time, extra,
           character_length(extra) - character_length(replace(extra, 'c', ''))
         FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
        1000,
    );
}

/// q11: sessions per bidder (10 s gap), computed by batch SQL as gaps and islands: a bid
/// starts a session when the bidder's previous bid is more than 10 s before it (bids exactly
/// 10 s apart share one, as weir's sessions touch); a session ends 10 s after its last bid.
#[test]
fn q11_user_sessions() {
    check(
        "q11",
        "bidder,bid_count,starttime,endtime",
        "WITH t AS (SELECT bidder, CAST(date_time AS BIGINT) AS ns FROM bid),
              o AS (SELECT bidder, ns,
                      CASE WHEN ns - lag(ns) OVER (PARTITION BY bidder ORDER BY ns) <= 10000000000
                           THEN 0 ELSE 1 END AS starts
                    FROM t),
              s AS (SELECT bidder, ns,
                      sum(starts) OVER (PARTITION BY bidder ORDER BY ns
                        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session
                    FROM o)
         SELECT bidder, count(*), to_timestamp_nanos(min(ns)),
                to_timestamp_nanos(max(ns) + 10000000000)
         FROM s GROUP BY bidder, session",
        1000,
    );
}

/// q12 counts bids per bidder in windows of the wall clock, so its rows depend on when it
/// runs; summed over the windows, each bidder's counts equal its bids.
#[test]
fn q12_processing_time_windows_count_every_bid_once() {
    let ctx = weir_tests::nexmark::context(EVENTS).expect("reference tables");
    let expected = datafusion_csv_lines(&ctx, "SELECT bidder, count(*) FROM bid GROUP BY bidder");
    for parallelism in [1, 2] {
        let (header, rows) = run_weir("q12", EVENTS, parallelism);
        assert_eq!(header, "bidder,bid_count,starttime,endtime");
        let mut per_bidder: std::collections::BTreeMap<String, u64> = Default::default();
        for row in &rows {
            let fields: Vec<&str> = row.split(',').collect();
            *per_bidder.entry(fields[0].to_string()).or_default() +=
                fields[1].parse::<u64>().unwrap();
        }
        let mut got: Vec<String> = per_bidder
            .into_iter()
            .map(|(bidder, n)| format!("{bidder},{n}"))
            .collect();
        got.sort();
        assert_eq!(got, expected, "q12 at parallelism {parallelism}");
    }
}

#[test]
fn q0_pass_through() {
    check(
        "q0",
        "auction,bidder,price,date_time,extra",
        "SELECT auction, bidder, price, date_time, extra FROM bid",
        (EVENTS as usize) * 9 / 10,
    );
}

#[test]
fn q1_currency_conversion() {
    check(
        "q1",
        "auction,bidder,price,date_time,extra",
        "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
        (EVENTS as usize) * 9 / 10,
    );
}

#[test]
fn q2_selection() {
    check(
        "q2",
        "auction,price",
        "SELECT auction, price FROM bid WHERE auction % 123 = 0",
        10,
    );
}

/// HOP 2 s / 10 s: each bid counts in the five windows starting at its 2-second slot and the
/// four slots before it.
#[test]
fn q5_hot_items() {
    check(
        "q5",
        "auction,num",
        "WITH hopped AS (
            SELECT b.auction, CAST(b.date_time AS BIGINT) / 2000000000 - k.k AS slot
            FROM bid b CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS k(k)
         ), counts AS (
            SELECT auction, slot, count(*) AS num FROM hopped GROUP BY auction, slot
         ), maxima AS (
            SELECT slot, max(num) AS maxn FROM counts GROUP BY slot
         )
         SELECT c.auction, c.num FROM counts c JOIN maxima m ON c.slot = m.slot AND c.num >= m.maxn",
        10,
    );
}

const Q7_REFERENCE: &str = "
    WITH w AS (SELECT *, CAST(date_time AS BIGINT) / 10000000000 AS win FROM bid),
         m AS (SELECT win, max(price) AS maxprice FROM w GROUP BY win)
    SELECT w.auction, w.price, w.bidder, w.date_time, w.extra
    FROM w JOIN m ON w.win = m.win AND w.price = m.maxprice";

/// Flink's q7: each bid with the maximum of every window whose `[end - 10 s, end]` holds its
/// time (a bid exactly at a window's end meets the window before it too).
const Q7_INTERVAL_REFERENCE: &str = "
    WITH m AS (SELECT CAST(date_time AS BIGINT) / 10000000000 AS win, max(price) AS maxprice
               FROM bid GROUP BY win)
    SELECT b.auction, b.price, b.bidder, b.date_time, b.extra
    FROM bid b JOIN m ON b.price = m.maxprice
      AND CAST(b.date_time AS BIGINT) BETWEEN m.win * 10000000000 AND (m.win + 1) * 10000000000";

const Q8_REFERENCE: &str = "
    WITH p AS (SELECT DISTINCT id, name, CAST(date_time AS BIGINT) / 10000000000 AS win
               FROM person),
         a AS (SELECT DISTINCT seller, CAST(date_time AS BIGINT) / 10000000000 AS win
               FROM auction)
    SELECT p.id, p.name, to_timestamp_nanos(p.win * 10000000000) AS starttime
    FROM p JOIN a ON p.id = a.seller AND p.win = a.win";

#[test]
fn q7_highest_bid() {
    check(
        "q7",
        "auction,price,bidder,date_time,extra",
        Q7_REFERENCE,
        3,
    );
}

/// q7 as Flink writes it: an interval join of the bids with the windowed maxima.
#[test]
fn q7_interval_join_as_flink_writes_it() {
    check(
        "q7_interval",
        "auction,price,bidder,date_time,extra",
        Q7_INTERVAL_REFERENCE,
        3,
    );
}

#[test]
fn q8_new_users() {
    check("q8", "id,name,starttime", Q8_REFERENCE, 10);
}

/// q7 (an aggregate joined with its own input, as a window join and as Flink's interval join)
/// and q8 (two sources joined) as exactly-once file sinks, SIGKILLed at random moments and
/// resumed at other parallelisms: the committed rows equal the batch reference, none lost and
/// none repeated. The joins' buffered rows and the aggregate's windows come back from the
/// checkpoints, re-routed when the parallelism changed.
#[test]
fn window_joins_survive_kills_exactly_once() {
    use common::process::{committed_lines, kill_and_resume};
    use rand::{Rng, SeedableRng};
    let ctx = weir_tests::nexmark::context(EVENTS).expect("reference tables");
    // Generator rates (rows per second of the table's stream) that make each run last
    // seconds, so the kills land while windows are open.
    for (query, reference_sql, rate) in [
        ("q7", Q7_REFERENCE, 90_000),
        ("q7_interval", Q7_INTERVAL_REFERENCE, 90_000),
        ("q8", Q8_REFERENCE, 5_000),
    ] {
        let expected = datafusion_csv_lines(&ctx, reference_sql);
        let work = tempfile::tempdir().unwrap();
        let (data, out) = (work.path().join("data"), work.path().join("out"));
        let script =
            std::fs::read_to_string(workspace().join(format!("examples/nexmark/{query}.sql")))
                .unwrap()
                .replace(
                    "events = '1000000'",
                    &format!("events = '{EVENTS}', rate = '{rate}', batch_size = '1000'"),
                );
        let (statements, _) = weir_planner::sql::split_statements(&script);
        let (select, tables) = statements.split_last().unwrap();
        let mut job = tables
            .iter()
            .map(|t| format!("{};\n", t.text))
            .collect::<String>();
        job.push_str(&format!(
            "SET checkpoint_interval = '100ms';\nCREATE SINK {query} WITH (connector = 'file', path = '{}', format = 'csv') AS {};\n",
            out.display(),
            select.text
        ));
        let script_path = work.path().join("job.sql");
        std::fs::write(&script_path, job).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let resumes: Vec<usize> = (0..5).map(|_| rng.gen_range(1..=3)).collect();
        let killed = kill_and_resume(
            &script_path,
            &data,
            query,
            work.path(),
            &mut rng,
            (200, 700),
            &resumes,
            (300, 900),
            None,
        );
        assert!(
            killed >= 3,
            "{query}: only {killed} kills hit a running job"
        );
        let mut got = committed_lines(&out);
        got.sort();
        assert_eq!(
            got.len(),
            expected.len(),
            "{query}: committed rows after {killed} kills"
        );
        assert!(
            got == expected,
            "{query}: committed rows differ from the reference"
        );
    }
}

/// A Nexmark source leaves out (as nulls) the columns no scan and no event-time step reads;
/// a query reading every column, or a table that keeps its late rows whole, gets them all.
#[test]
fn sources_produce_only_the_columns_queries_read() {
    let explain = |ddl: &str, sql: &str| {
        let mut s = common::session(2);
        common::execute(&mut s, ddl).unwrap();
        common::query_sorted(&mut s, &format!("EXPLAIN {sql}"))
            .concat()
            .join("\n")
    };
    let bid = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
        url VARCHAR, date_time TIMESTAMP, extra VARCHAR,
        WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
        WITH (connector = 'nexmark', stream = 'bid', events = '1000')";
    let hop = "SELECT auction, count(*) FROM HOP(bid, date_time, INTERVAL '2' SECOND,
        INTERVAL '10' SECOND) GROUP BY auction, window_start, window_end";
    let text = explain(bid, hop);
    assert!(
        text.contains("(not producing bidder, price, channel, url, extra: no query reads them)"),
        "{text}"
    );
    // Two scans of one source: the union of what they read.
    let two = "SELECT a.auction, b.price FROM bid a JOIN bid b ON a.auction = b.bidder";
    let text = explain(bid, two);
    assert!(
        text.contains("(not producing channel, url, extra: no query reads them)"),
        "{text}"
    );
    let text = explain(bid, "SELECT * FROM bid");
    assert!(!text.contains("not producing"), "{text}");
    let keeps_late = bid.replace(
        "events = '1000'",
        "events = '1000', late_rows = 'late_bids'",
    );
    let text = explain(&keeps_late, hop);
    assert!(!text.contains("not producing"), "{text}");
}
