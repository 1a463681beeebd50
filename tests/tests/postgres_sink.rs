//! The PostgreSQL sink against a real server (started by the test in a temporary directory):
//! exactly-once through SIGKILLs and crashes injected between pre-commit, manifest and commit;
//! the table then holds exactly the rows DataFusion batch SQL computes over the same input
//! (late rows removed by a plain replay), and no prepared transaction is left. Plus the errors a user meets at CREATE SINK.
//! Updating queries into PostgreSQL are in `postgres_updating.rs`.

mod common;

use std::path::Path;

use common::pg::PgServer;
use common::process::{finish, kill_at_random, spawn, wait_for_file};
use common::reference::{reference_rows, write_input};
use common::{durable_session, execute, text_rows, wait_jobs, Collected};
use rand::rngs::StdRng;
use rand::SeedableRng;

const QUERY: &str = "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total \
     FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k";

/// 20,000 rows with disorder within the 2 s bound and some late rows; returns the reference
/// result by DataFusion batch SQL (independent of weir) as psql prints it.
fn write_events(dir: &Path) -> (std::path::PathBuf, Vec<String>) {
    let (events, reference) = write_input(dir, 20_000, 20, 9);
    (events, reference_rows(&reference, "|"))
}

fn events_ddl(path: &Path, rate: u32) -> String {
    format!(
        "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH (connector = 'file', path = '{}', header = 'true', batch_size = '100', rate = '{rate}')",
        path.display()
    )
}

fn table_rows(pg: &PgServer, table: &str) -> Vec<String> {
    let mut rows = pg.psql(&format!(
        "SELECT to_char(window_start, 'YYYY-MM-DD HH24:MI:SS'), \
                to_char(window_end, 'YYYY-MM-DD HH24:MI:SS'), k, n, total FROM {table}"
    ));
    rows.sort();
    rows
}

fn sink_script(dir: &Path, events: &Path, url: &str, table: &str, extra: &str) -> String {
    let script = format!(
        "{};\nSET checkpoint_interval = '50ms';\n\
         CREATE SINK {table} WITH (connector = 'postgres', url = '{url}', table = '{table}', \
         create_table = 'true'{extra}) AS {QUERY};\n",
        events_ddl(events, 20_000)
    );
    let path = dir.join(format!("{table}.sql"));
    std::fs::write(&path, script).unwrap();
    path.display().to_string()
}

#[test]
fn exactly_once_into_postgres_through_kills_and_injected_crashes() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let (events, expected) = write_events(work.path());

    // Random SIGKILLs, resumed at other parallelisms.
    let data = work.path().join("data_kills");
    let script = sink_script(work.path(), &events, &pg.url(), "kills", "");
    let data_arg = data.to_str().unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut first = spawn(
        &["-f", &script, "--data-dir", data_arg, "--parallelism", "2"],
        work.path(),
    );
    wait_for_file(&mut first, &data.join("jobs/kills/job.json"));
    kill_at_random(first, &mut rng, (100, 400));
    for p in ["1", "3", "2", "1"] {
        let child = spawn(
            &["resume", "--data-dir", data_arg, "--parallelism", p],
            work.path(),
        );
        kill_at_random(child, &mut rng, (100, 400));
    }
    finish(
        spawn(&["resume", "--data-dir", data_arg], work.path()),
        "final resume",
    );
    assert_eq!(table_rows(&pg, "kills"), expected);
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());

    // Crashes at the points of the protocol: after every pre-commit (transactions prepared,
    // no manifest), after the manifest (nothing committed yet), between the commits of two
    // sink instances.
    // With parallelism 2 the sink runs as two instances, so a checkpoint commits two
    // prepared transactions and `mid_commit` crashes between them.
    for point in ["before_manifest", "before_commit", "mid_commit"] {
        let table = format!("crash_{point}");
        let data = work.path().join(format!("data_{point}"));
        let script = sink_script(work.path(), &events, &pg.url(), &table, "");
        let data_arg = data.to_str().unwrap();
        let out = std::process::Command::new(common::process::weir_binary())
            .args(["-f", &script, "--data-dir", data_arg, "--parallelism", "2"])
            .current_dir(work.path())
            .env("WEIR_FAULT", format!("{point}:3"))
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{point}: the injected crash did not happen"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("WEIR_FAULT: aborting"), "{stderr}");
        // The crash left a prepared transaction behind.
        assert!(
            !pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(),
            "{point}"
        );
        finish(
            spawn(&["resume", "--data-dir", data_arg], work.path()),
            "resume",
        );
        assert_eq!(table_rows(&pg, &table), expected, "{point}");
        assert!(
            pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(),
            "{point}"
        );
    }
}

#[test]
fn upsert_on_a_primary_key_and_at_least_once_replays_overwrite() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let (events, expected) = write_events(work.path());
    let data = work.path().join("data");
    let script = sink_script(
        work.path(),
        &events,
        &pg.url(),
        "upserted",
        ", primary_key = 'window_start, k', delivery = 'at_least_once'",
    );
    let data_arg = data.to_str().unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let mut first = spawn(&["-f", &script, "--data-dir", data_arg], work.path());
    wait_for_file(&mut first, &data.join("jobs/upserted/job.json"));
    kill_at_random(first, &mut rng, (150, 400));
    finish(
        spawn(&["resume", "--data-dir", data_arg], work.path()),
        "resume",
    );
    // Replayed rows overwrote their first copies: exactly the expected rows.
    assert_eq!(table_rows(&pg, "upserted"), expected);
}

#[test]
fn create_sink_checks_the_server_and_the_table() {
    let pg = PgServer::start();
    pg.psql("CREATE TABLE narrow (window_start TIMESTAMP, n BIGINT)");
    pg.psql(
        "CREATE TABLE wrong_type (window_start TIMESTAMP, window_end TIMESTAMP, k TEXT, \
         n BOOLEAN, total BIGINT)",
    );
    let work = tempfile::tempdir().unwrap();
    let (events, _) = write_events(work.path());
    let mut s = durable_session(work.path(), 1);
    execute(&mut s, &events_ddl(&events, 1000)).unwrap();
    let url = pg.url();
    let closed = format!("postgresql://weir@127.0.0.1:{}/postgres", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let cases = [
        (
            format!("url = '{url}', table = 'missing'"),
            "table 'missing' does not exist",
        ),
        (
            format!("url = '{url}', table = 'narrow'"),
            "has no column 'window_end'",
        ),
        (
            format!("url = '{closed}', table = 't'"),
            "cannot connect to",
        ),
        (
            format!(
                "url = 'postgresql://nobody@127.0.0.1:{}/postgres', table = 't'",
                pg.port
            ),
            "cannot connect to",
        ),
        (
            format!("url = '{url}', table = 't', primary_key = 'nope'"),
            "no such column",
        ),
        ("table = 't'".to_string(), "missing option 'url'"),
    ];
    for (options, expected) in cases {
        let sql = format!("CREATE SINK bad WITH (connector = 'postgres', {options}) AS {QUERY}");
        let err = execute(&mut s, &sql)
            .err()
            .unwrap_or_else(|| panic!("{sql} passed"));
        assert!(err.to_string().contains(expected), "{options}: {err}");
    }
    drop(pg);
    // A server without prepared transactions cannot take exactly-once output.
    let no_2pc = PgServer::start_with(0, None);
    let sql = format!(
        "CREATE SINK bad WITH (connector = 'postgres', url = '{}', table = 't', create_table = 'true') AS {QUERY}",
        no_2pc.url()
    );
    let err = execute(&mut s, &sql).err().unwrap();
    assert!(
        err.to_string().contains("max_prepared_transactions = 0"),
        "{err}"
    );
}

#[test]
fn rows_land_with_postgres_types() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let mut s = durable_session(work.path(), 1);
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/events.csv");
    execute(
        &mut s,
        &format!(
            "CREATE TABLE ev (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP,
               WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
             WITH (connector = 'file', path = '{}', header = 'true')",
            events.display()
        ),
    )
    .unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE SINK typed WITH (connector = 'postgres', url = '{}', table = 'typed', create_table = 'true') AS
             SELECT window_start, k, count(*) AS n, avg(v) AS mean, max(v) > 100 AS big, 'it''s' AS note
             FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k",
            pg.url()
        ),
    )
    .unwrap();
    let jobs = wait_jobs(&mut s);
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    let types = pg.psql(
        "SELECT column_name || ' ' || data_type FROM information_schema.columns \
         WHERE table_name = 'typed' ORDER BY ordinal_position",
    );
    assert_eq!(
        types,
        vec![
            "window_start timestamp without time zone",
            "k text",
            "n bigint",
            "mean double precision",
            "big boolean",
            "note text",
        ]
    );
    let rows = pg.psql("SELECT k, n, big, note FROM typed ORDER BY window_start, k");
    assert_eq!(rows[0], "a|4|f|it's");
    let Collected::Rows(_, batches) = execute(
        &mut s,
        "SELECT count(*) FROM (SELECT window_start, k FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k)",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(rows.len().to_string(), text_rows(&batches)[0][0]);
}

#[test]
fn a_dropped_connection_fails_the_epoch_and_the_job_restarts_from_its_checkpoint() {
    let pg = PgServer::start();
    let work = tempfile::tempdir().unwrap();
    let (events, expected) = write_events(work.path());
    let mut s = durable_session(work.path(), 2);
    execute(&mut s, &events_ddl(&events, 20_000)).unwrap();
    execute(&mut s, "SET checkpoint_interval = '50ms'").unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE SINK dropped WITH (connector = 'postgres', url = '{}', table = 'dropped', create_table = 'true') AS {QUERY}",
            pg.url()
        ),
    )
    .unwrap();
    // Cut weir's connections mid-stream: the open epoch is rolled back by the server, the job
    // fails with the sink's error and restarts from its last checkpoint.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let cut = pg.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE usename = 'weir' AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    );
    assert!(!cut.is_empty(), "no connection to cut");
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs[0].1.as_str(), "finished", "{jobs:?}");
    assert!(
        s.job_restarts("dropped").unwrap() >= 1,
        "the job never failed"
    );
    assert_eq!(table_rows(&pg, "dropped"), expected);
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty());
}

#[test]
fn insert_into_a_postgres_table_runs_a_sink_job() {
    let pg = PgServer::start();
    pg.psql("CREATE TABLE totals (window_start TIMESTAMP, window_end TIMESTAMP, k TEXT, n BIGINT, total BIGINT)");
    let work = tempfile::tempdir().unwrap();
    let (events, expected) = write_events(work.path());
    let mut s = durable_session(work.path(), 2);
    execute(&mut s, &events_ddl(&events, 100_000)).unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE TABLE pg_totals (window_start TIMESTAMP, window_end TIMESTAMP, k VARCHAR, n BIGINT, total BIGINT)
             WITH (connector = 'postgres', url = '{}', table = 'totals')",
            pg.url()
        ),
    )
    .unwrap();
    let err = execute(&mut s, "SELECT * FROM pg_totals").err().unwrap();
    assert!(err.to_string().contains("PostgreSQL sink table"), "{err}");
    let err = execute(&mut s, &format!("INSERT INTO events {QUERY}"))
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("only tables declared with connector = 'postgres'"),
        "{err}"
    );
    let err = execute(&mut s, &format!("INSERT INTO pg_totals (nope) {QUERY}"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("has no column 'nope'"), "{err}");
    execute(&mut s, &format!("INSERT INTO pg_totals {QUERY}")).unwrap();
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].0, "pg_totals_insert_1");
    assert!(jobs[0].2.is_none(), "{jobs:?}");
    assert_eq!(table_rows(&pg, "totals"), expected);
}

#[test]
fn rows_the_server_refuses_fail_the_job_naming_the_sink() {
    let pg = PgServer::start();
    pg.psql(
        "CREATE TABLE checked (window_start TIMESTAMP, window_end TIMESTAMP, k TEXT, \
         n BIGINT CHECK (n < 5), total BIGINT)",
    );
    let work = tempfile::tempdir().unwrap();
    let (events, _) = write_events(work.path());
    let mut s = durable_session(work.path(), 2);
    execute(&mut s, &events_ddl(&events, 100_000)).unwrap();
    execute(
        &mut s,
        &format!(
            "CREATE SINK refused WITH (connector = 'postgres', url = '{}', table = 'checked') AS {QUERY}",
            pg.url()
        ),
    )
    .unwrap();
    let jobs = wait_jobs(&mut s);
    assert_eq!(jobs[0].1.as_str(), "failed", "{jobs:?}");
    let error = jobs[0].2.clone().unwrap();
    assert!(error.contains("sink refused"), "{error}");
    assert!(error.contains("violates check constraint"), "{error}");
    // Refused rows are the data's fault: no restart.
    assert_eq!(s.job_restarts("refused"), Some(0));
}

#[test]
fn a_wrong_password_is_refused_and_never_printed() {
    let pg = PgServer::start_with(64, Some("s3cret-pw"));
    let work = tempfile::tempdir().unwrap();
    let (events, _) = write_events(work.path());
    let mut s = durable_session(work.path(), 1);
    execute(&mut s, &events_ddl(&events, 100_000)).unwrap();
    let wrong = format!("postgresql://weir:not-it@127.0.0.1:{}/postgres", pg.port);
    let err = execute(
        &mut s,
        &format!("CREATE SINK w WITH (connector = 'postgres', url = '{wrong}', table = 't', create_table = 'true') AS {QUERY}"),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains("not-it"), "the password leaked: {err}");
    // The right password gets through (and the job runs to its end).
    execute(
        &mut s,
        &format!(
            "CREATE SINK r WITH (connector = 'postgres', url = '{}', table = 't', create_table = 'true') AS {QUERY}",
            pg.url()
        ),
    )
    .unwrap();
    let jobs = wait_jobs(&mut s);
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");
    assert!(!pg.psql("SELECT count(*) FROM t").is_empty());
}

/// Every type the sink encodes lands with the same value by each write path: binary COPY
/// (a table the sink creates), text COPY (a table with a column that has no exact binary
/// encoding, so the server parses weir's text form), and prepared upserts mixing binary
/// parameters with text ones cast by the server. The server's time zone is not UTC, which
/// must not move a `timestamptz` written as text. The binary path is also checked against
/// the rows weir's own query gives.
#[test]
fn every_type_lands_alike_by_binary_copy_text_copy_and_upsert() {
    let pg = PgServer::start();
    pg.psql("ALTER DATABASE postgres SET timezone = 'America/New_York'");
    let columns = "id bigint, k text, v bigint, d numeric, f {float}, ts timestamp, \
                   tz timestamptz, day date, b bytea, big boolean";
    pg.psql(&format!(
        "CREATE TABLE texted ({})",
        columns.replace("{float}", "numeric")
    ));
    pg.psql(&format!(
        "CREATE TABLE upserted ({}, PRIMARY KEY (id))",
        columns.replace("{float}", "numeric")
    ));
    let work = tempfile::tempdir().unwrap();
    let mut s = durable_session(work.path(), 2);
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/events.csv");
    execute(
        &mut s,
        &format!(
            "CREATE TABLE ev (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP)
             WITH (connector = 'file', path = '{}', header = 'true')",
            events.display()
        ),
    )
    .unwrap();
    let query = "SELECT id, k, v, CAST(v AS DECIMAL(12, 3)) / 7 AS d, CAST(v AS DOUBLE) / 3 AS f, \
                 ts, arrow_cast(ts, 'Timestamp(Microsecond, Some(\"+00:00\"))') AS tz, \
                 CAST(ts AS DATE) AS day, CAST(k AS BYTEA) AS b, v > 20 AS big FROM ev";
    for (table, extra) in [
        ("copied", ", create_table = 'true'"),
        ("texted", ""),
        ("upserted", ", primary_key = 'id'"),
    ] {
        execute(
            &mut s,
            &format!(
                "CREATE SINK {table} WITH (connector = 'postgres', url = '{}', \
                 table = '{table}'{extra}) AS {query}",
                pg.url()
            ),
        )
        .unwrap();
    }
    let jobs = wait_jobs(&mut s);
    assert!(jobs.iter().all(|j| j.2.is_none()), "{jobs:?}");

    let Collected::Rows(_, batches) = execute(&mut s, &format!("{query} ORDER BY id")).unwrap()
    else {
        panic!("rows expected")
    };
    let expected: Vec<String> = text_rows(&batches)
        .into_iter()
        .map(|r| {
            // id, k, v, d, day, b (hex), big: the columns whose text both sides spell alike.
            [0, 1, 2, 3, 7, 8, 9]
                .iter()
                .map(|c| {
                    if r[*c] == "NULL" {
                        String::new()
                    } else {
                        r[*c].clone()
                    }
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    assert_eq!(expected.len(), 13);
    let copied =
        pg.psql("SELECT id, k, v, d, day, encode(b, 'hex'), big::text FROM copied ORDER BY id");
    assert_eq!(copied, expected);
    for other in ["texted", "upserted"] {
        let differing = pg.psql(&format!(
            "SELECT count(*) FROM copied c FULL JOIN {other} o USING (id) \
             WHERE (c.k, c.v, c.d, c.ts, c.tz, c.day, c.b, c.big) \
                   IS DISTINCT FROM (o.k, o.v, o.d, o.ts, o.tz, o.day, o.b, o.big) \
                OR round(c.f::numeric, 9) IS DISTINCT FROM round(o.f, 9)"
        ));
        assert_eq!(differing, vec!["0"], "{other} differs from copied");
    }
    // The binary timestamptz is the same instant as the wall-clock timestamp read in UTC.
    let shifted = pg.psql("SELECT count(*) FROM copied WHERE tz <> ts AT TIME ZONE 'UTC'");
    assert_eq!(shifted, vec!["0"]);
    let types = pg.psql(
        "SELECT data_type FROM information_schema.columns \
         WHERE table_name = 'copied' AND column_name IN ('d', 'tz', 'b') ORDER BY column_name",
    );
    assert_eq!(types, vec!["bytea", "numeric", "timestamp with time zone"]);
}
