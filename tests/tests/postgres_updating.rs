//! Updating queries (DESIGN.md §8) into PostgreSQL, against a real server started by the test:
//! applied by their primary key, the table ends equal to DataFusion batch SQL over the same
//! rows, also through failed checkpoints, SIGKILLs and resumes at other parallelisms, with no
//! prepared transaction left behind.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use common::pg::PgServer;
use common::{durable_session, execute, text_rows, wait_jobs, Collected};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// An updating query whose keys enter and leave the result as rows arrive: HAVING turns
/// false for a key (`-U` with no `+U` after it), so the sink deletes as well as upserts.
const CHANGING: &str = "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS hi FROM t WHERE v < 400 \
     GROUP BY k HAVING count(*) > 2 AND sum(v) % 3 <> 0";

/// Random rows `id, k, v` over 30 keys, v NULL now and then; the CSV file's path.
fn write_changing_rows(dir: &Path, seed: u64, n: usize) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut text = String::from("id,k,v\n");
    for id in 0..n {
        let v = if rng.gen::<f64>() < 0.05 {
            String::new()
        } else {
            rng.gen_range(-50..500).to_string()
        };
        writeln!(text, "{id},k{},{v}", rng.gen_range(0..30)).unwrap();
    }
    let path = dir.join(format!("changing-{seed}.csv"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Table `t` over the file; `rate` rows per second at most (`None`: as fast as it reads).
fn changing_ddl(path: &str, batch_size: usize, rate: Option<u32>) -> String {
    let rate = rate.map(|r| format!(", rate = '{r}'")).unwrap_or_default();
    format!(
        "CREATE TABLE t (id BIGINT, k VARCHAR, v BIGINT)
         WITH (connector = 'file', path = '{path}', header = 'true', batch_size = '{batch_size}'{rate})"
    )
}

/// `sql` by DataFusion batch SQL over the CSV file, rows as psql prints them (`|` between
/// values, NULL empty), sorted.
fn batch_reference(path: &str, sql: &str) -> Vec<String> {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
    ]);
    common::batch_csv_sql(&[("t", path)], &schema, sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| if v == "NULL" { String::new() } else { v })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

fn changing_rows(pg: &PgServer, table: &str) -> Vec<String> {
    let mut rows = pg.psql(&format!("SELECT k, n, s, hi FROM {table}"));
    rows.sort();
    rows
}

#[test]
fn an_updating_query_is_applied_by_its_primary_key_once_and_at_least_once() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let path = write_changing_rows(work.path(), 41, 4000);
    let expected = batch_reference(&path, CHANGING);
    assert!(expected.len() > 3, "{expected:?}");

    // Keys leave the result as the query runs (a retraction not directly followed by the
    // key's new row): the sink has deletes to apply, not only upserts.
    let mut s = common::session(1);
    execute(&mut s, &changing_ddl(&path, 20, None)).unwrap();
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    let Collected::Rows(_, batches) = execute(&mut s, CHANGING).unwrap() else {
        panic!("{CHANGING}: no rows")
    };
    let log = text_rows(&batches);
    let leaves = log
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            (r[0] == "-U" || r[0] == "-D")
                && log
                    .get(i + 1)
                    .is_none_or(|next| next[0] != "+U" || next[1] != r[1])
        })
        .count();
    assert!(leaves > 10, "only {leaves} keys left the result");
    // The changelog itself, applied by key, ends in the batch result.
    let mut by_key: std::collections::BTreeMap<String, String> = Default::default();
    for r in &log {
        let row = r[1..]
            .iter()
            .map(|v| {
                if v == "NULL" {
                    String::new()
                } else {
                    v.clone()
                }
            })
            .collect::<Vec<_>>()
            .join("|");
        if r[0] == "+I" || r[0] == "+U" {
            by_key.insert(r[1].clone(), row);
        } else {
            assert_eq!(by_key.remove(&r[1]), Some(row), "{r:?}");
        }
    }
    assert_eq!(
        by_key.into_values().collect::<Vec<_>>(),
        expected,
        "the changelog"
    );

    let mut s = durable_session(work.path(), 2);
    execute(&mut s, &changing_ddl(&path, 20, Some(10_000))).unwrap();
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    execute(&mut s, "SET checkpoint_interval = '20ms'").unwrap();
    let tables = [
        ("applied_once", "exactly_once"),
        ("applied_at_least_once", "at_least_once"),
    ];
    for (table, delivery) in tables {
        execute(
            &mut s,
            &format!(
                "CREATE SINK {table} WITH (connector = 'postgres', url = '{}', table = '{table}', \
                 primary_key = 'k', create_table = 'true', delivery = '{delivery}') AS {CHANGING}",
                pg.url()
            ),
        )
        .unwrap();
    }
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    for (table, _) in tables {
        assert_eq!(changing_rows(&pg, table), expected, "{table}");
    }
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());
}

/// A checkpoint that fails after the sink prepared its epoch (here: its manifest cannot be
/// written) cannot leave that prepared transaction waiting for the next checkpoint: it keeps
/// its row locks, and the next epoch's upserts of the same keys would wait for them until
/// the statement timeout (found as a hang after a resume, whose leftover checkpoint
/// directory failed the next checkpoint). The job restarts from its last checkpoint at once,
/// the prepared output rolled back, and the table still ends equal to batch SQL.
#[test]
fn a_failed_checkpoint_restarts_a_postgres_job_instead_of_waiting_on_its_own_locks() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let path = write_changing_rows(work.path(), 47, 4000);
    let mut expected = batch_reference(&path, CHANGING);
    expected.sort();
    let mut s = durable_session(work.path(), 2);
    execute(&mut s, &changing_ddl(&path, 20, Some(4000))).unwrap();
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    execute(&mut s, "SET checkpoint_interval = '20ms'").unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE SINK blocked WITH (connector = 'postgres', url = '{}', table = 'blocked', \
             primary_key = 'k', create_table = 'true') AS {CHANGING}",
            pg.url()
        ),
    )
    .unwrap();
    // Checkpoint 3's manifest cannot be written: a directory is in the way.
    let in_the_way = work.path().join(format!(
        "data/jobs/blocked/checkpoints/manifest-{:020}.json",
        3
    ));
    std::fs::create_dir_all(&in_the_way).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
    while s.job_restarts("blocked").unwrap_or(0) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no restart after the failed checkpoint: {:?}",
            s.job_checkpoints("blocked")
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::fs::remove_dir_all(&in_the_way).unwrap();
    let cause = s.job_last_failure("blocked").unwrap_or_default();
    assert!(
        cause.contains("checkpoint 3 failed")
            && cause.contains("cannot wait for the next checkpoint"),
        "{cause}"
    );
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs[0].1.as_str(), "finished", "{jobs:?}");
    assert_eq!(changing_rows(&pg, "blocked"), expected);
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());
}

#[test]
fn an_updating_query_without_a_primary_key_is_refused_with_the_reason() {
    let work = tempfile::tempdir().unwrap();
    let path = write_changing_rows(work.path(), 42, 50);
    let mut s = durable_session(work.path(), 1);
    execute(&mut s, &changing_ddl(&path, 20, None)).unwrap();
    execute(&mut s, "SET runtime_mode = 'streaming'").unwrap();
    // Refused before any connection: no server needed.
    let err = execute(
        &mut s,
        &format!(
            "CREATE SINK nokey WITH (connector = 'postgres', \
             url = 'postgresql://weir@127.0.0.1:1/postgres', table = 'nokey', \
             create_table = 'true') AS {CHANGING}"
        ),
    )
    .err()
    .expect("an updating query without primary_key was accepted")
    .to_string();
    assert!(err.contains("primary_key"), "{err}");
    assert!(err.contains("updating"), "{err}");
}

/// A left join of the rows with an updating aggregate (rows padded, then matched as the
/// aggregate's keys appear, replaced as its maxima grow); `id` identifies each output row.
const JOINED: &str = "SELECT t.id, t.k, t.v, m.hi FROM t LEFT JOIN \
     (SELECT k, max(v) AS hi FROM t WHERE v > 470 GROUP BY k) m ON t.k = m.k WHERE t.v > 420";

/// The three largest values per key, kept by rank: a rank's row is replaced as larger
/// values arrive (`k, rn` identifies each output row).
const TOP: &str = "SELECT k, rn, id, v FROM (SELECT id, k, v, \
     ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn FROM t WHERE v IS NOT NULL) \
     WHERE rn <= 3";

/// Each kind of updating operator (an aggregate whose keys leave the result, a left join
/// with an updating side, a Top-N) into PostgreSQL through SIGKILLs and resumes at other
/// parallelisms: every table ends equal to batch SQL over the same rows, and no prepared
/// transaction is left behind. Exactly-once for all; at-least-once (upserts by key, replays
/// repeat them harmlessly) for the aggregate and the Top-N, whose tasks read one input. A
/// join reads two, and at-least-once does not align their barriers: its restored state may
/// already hold changes one input then replays (a duplicate, as at-least-once allows).
#[test]
fn updating_queries_into_postgres_survive_kills_and_rescaling() {
    use common::process::kill_and_resume;
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let path = write_changing_rows(work.path(), 43, 20_000);
    const BOTH: &[&str] = &["exactly_once", "at_least_once"];
    let queries = [
        ("agg", CHANGING, "k", "k, n, s, hi", BOTH),
        ("joined", JOINED, "id", "id, k, v, hi", &BOTH[..1]),
        ("top", TOP, "k, rn", "k, rn, id, v", BOTH),
    ];
    let mut script = format!(
        "{};\nSET runtime_mode = 'streaming';\nSET checkpoint_interval = '50ms';\n",
        changing_ddl(&path, 100, Some(20_000))
    );
    for (name, sql, key, _, deliveries) in queries {
        for delivery in deliveries {
            writeln!(
                script,
                "CREATE SINK {name}_{delivery} WITH (connector = 'postgres', url = '{}', \
                 table = '{name}_{delivery}', primary_key = '{key}', create_table = 'true', \
                 delivery = '{delivery}') AS {sql};",
                pg.url()
            )
            .unwrap();
        }
    }
    let script_path = work.path().join("updating.sql");
    std::fs::write(&script_path, script).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let killed = kill_and_resume(
        &script_path,
        &work.path().join("data"),
        "top_at_least_once",
        work.path(),
        &mut rng,
        (150, 500),
        &[3, 1, 2],
        (150, 500),
        None,
    );
    assert!(killed >= 2, "{killed} kills hit a running job");
    for (name, sql, _, columns, deliveries) in queries {
        let mut expected = batch_reference(&path, sql);
        expected.sort();
        assert!(expected.len() > 20, "{name}: {expected:?}");
        for delivery in deliveries {
            let mut rows = pg.psql(&format!("SELECT {columns} FROM {name}_{delivery}"));
            rows.sort();
            assert_eq!(rows, expected, "{name}_{delivery} after {killed} kills");
        }
    }
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());
}
