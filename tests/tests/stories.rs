//! The runnable stories of `examples/stories/`, each checked against an answer computed
//! another way: DataFusion batch SQL over the same generated events (hot items), visits
//! computed by hand from the CSV (clickstream sessions), and windows counted by hand from the
//! CSV against the PostgreSQL table the sink filled (fraud velocity).

mod common;

use common::reference::{datafusion_csv_lines, workspace};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use chrono::NaiveDateTime;

/// Runs a story script (after `edit`) with `weir -f --format csv` at `parallelism`; the
/// header and the sorted rows.
fn run_story(
    name: &str,
    edit: impl Fn(String) -> String,
    parallelism: usize,
    data_dir: Option<&Path>,
) -> (String, Vec<String>) {
    let script = std::fs::read_to_string(workspace().join("examples/stories").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, edit(script)).unwrap();
    let mut cmd = Command::new(common::process::weir_binary());
    cmd.args(["-f", file.to_str().unwrap(), "--format", "csv"])
        .args(["--parallelism", &parallelism.to_string()])
        .current_dir(workspace());
    if let Some(d) = data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    let out = cmd.output().expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {stderr}");
    assert!(!stderr.contains("late row"), "{name}: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let mut rows: Vec<String> = lines.map(str::to_string).collect();
    rows.sort();
    (header, rows)
}

#[test]
fn hot_items_are_the_batch_answer() {
    const EVENTS: u64 = 200_000;
    let ctx = weir_tests::nexmark::context(EVENTS).expect("reference tables");
    // A bid at slot s (2 s slots) is in the windows starting at slots s-4 ..= s.
    let expected = datafusion_csv_lines(
        &ctx,
        "WITH hopped AS (
            SELECT auction, CAST(date_time AS BIGINT) / 2000000000 - k.k AS slot
            FROM bid CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS k(k)
         ), counts AS (
            SELECT slot, auction, count(*) AS bids FROM hopped GROUP BY slot, auction
         ), ranked AS (
            SELECT slot, auction, bids,
                   ROW_NUMBER() OVER (PARTITION BY slot ORDER BY bids DESC, auction) AS hot_rank
            FROM counts
         )
         SELECT to_timestamp_nanos(slot * 2000000000) AS window_start,
                to_timestamp_nanos(slot * 2000000000 + 10000000000) AS window_end,
                auction, bids, hot_rank
         FROM ranked WHERE hot_rank <= 3",
    );
    assert!(expected.len() > 30, "{}", expected.len());
    for parallelism in [1, 2] {
        let (header, got) = run_story("hot_items.sql", |s| s, parallelism, None);
        assert_eq!(header, "window_start,window_end,auction,bids,hot_rank");
        assert_eq!(got, expected, "parallelism {parallelism}");
    }
}

fn time(text: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn csv_rows(path: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(workspace().join(path)).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn clickstream_visits_are_the_hand_computed_sessions() {
    let gap = chrono::Duration::minutes(30);
    // Per user, clicks in time order; a visit ends when the next click is 30 minutes or more
    // after the last (session windows: [first, last + gap)).
    let mut by_user: BTreeMap<String, Vec<(NaiveDateTime, String, String)>> = BTreeMap::new();
    for r in csv_rows("examples/data/clicks.csv") {
        by_user
            .entry(r[0].clone())
            .or_default()
            .push((time(&r[3]), r[1].clone(), r[2].clone()));
    }
    let mut expected = Vec::new();
    for (user, mut clicks) in by_user {
        clicks.sort();
        let mut visits: Vec<Vec<(NaiveDateTime, String, String)>> = Vec::new();
        for c in clicks {
            match visits.last_mut() {
                Some(v) if c.0 < v.last().unwrap().0 + gap => v.push(c),
                _ => visits.push(vec![c]),
            }
        }
        for v in visits {
            let purchases = v.iter().filter(|c| c.2 == "purchase").count();
            if purchases == 0 {
                continue;
            }
            let pages: BTreeSet<&str> = v.iter().map(|c| c.1.as_str()).collect();
            let added = v.iter().filter(|c| c.2 == "add_to_cart").count();
            expected.push(format!(
                "{user},{},{},{},{},{added},{purchases}",
                v[0].0.format("%Y-%m-%d %H:%M:%S"),
                (v.last().unwrap().0 + gap).format("%Y-%m-%d %H:%M:%S"),
                v.len(),
                pages.len(),
            ));
        }
    }
    expected.sort();
    assert!(expected.len() > 20, "{}", expected.len());
    for parallelism in [1, 2] {
        let (header, got) = run_story("clickstream_sessions.sql", |s| s, parallelism, None);
        assert_eq!(
            header,
            "user_id,visit_start,visit_end,clicks,pages,added_to_cart,purchases"
        );
        assert_eq!(got, expected, "parallelism {parallelism}");
    }
}

#[test]
fn fraud_velocity_alerts_reach_postgres_once() {
    // Windows of 2 minutes every 30 s: a charge at t is in the windows starting at the
    // 30-second marks in (t - 2 min, t].
    let mut counts: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    for r in csv_rows("examples/data/card_transactions.csv") {
        let t = time(&r[3]).and_utc().timestamp();
        let amount: f64 = r[2].parse().unwrap();
        let last = t.div_euclid(30) * 30;
        for k in 0..4 {
            let e = counts.entry((r[0].clone(), last - 30 * k)).or_default();
            e.0 += 1;
            e.1 += amount;
        }
    }
    let expected: BTreeMap<(String, i64), (u64, i64)> = counts
        .into_iter()
        .filter(|(_, (n, _))| *n >= 5)
        .map(|(k, (n, sum))| (k, (n, (sum * 100.0).round() as i64)))
        .collect();
    assert!(expected.len() >= 6, "{expected:?}");

    let pg = common::pg::PgServer::start();
    let data = tempfile::tempdir().unwrap();
    let url = pg.url();
    let (_, stdout_rows) = run_story(
        "fraud_velocity.sql",
        |s| s.replace("postgresql://postgres@127.0.0.1:5432/postgres", &url),
        2,
        Some(data.path()),
    );
    assert!(
        stdout_rows.is_empty(),
        "a sink prints no rows: {stdout_rows:?}"
    );
    let rows = pg.psql(
        "SELECT card, extract(epoch FROM window_start)::bigint, extract(epoch FROM window_end)::bigint, \
         charges, round(total::numeric * 100)::bigint FROM velocity_alerts",
    );
    let mut got: BTreeMap<(String, i64), (u64, i64)> = BTreeMap::new();
    for row in rows {
        let f: Vec<&str> = row.split('|').collect();
        let start: i64 = f[1].parse().unwrap();
        assert_eq!(f[2].parse::<i64>().unwrap(), start + 120, "{row}");
        let previous = got.insert(
            (f[0].to_string(), start),
            (f[3].parse().unwrap(), f[4].parse().unwrap()),
        );
        assert!(previous.is_none(), "an alert written twice: {row}");
    }
    assert_eq!(got, expected);
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());
}
