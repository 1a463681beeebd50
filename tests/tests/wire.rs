//! The PostgreSQL-wire endpoint (`weir serve`) driven by real clients: the `postgres` crate
//! (simple and extended protocols, text and binary results, cancel requests), psql, raw sockets
//! sending garbage, 100 concurrent connections. Window results are compared with DataFusion
//! batch SQL over the same rows. Access control, secrets and isolation between clients are in
//! `wire_security.rs`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use common::reference::{reference_rows, write_input};
use common::wire::{code, simple_rows, WireServer, CREATE_EVENTS, NEXMARK_BIDS};
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rust_decimal::Decimal;

const WINDOWS: &str = "SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total \
     FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, k";

/// A server whose file root holds `events.csv` (`rows` rows), and the DataFusion reference of
/// WINDOWS over it (`|`-joined rows, sorted).
fn server_with_events(rows: usize, extra: &[&str]) -> (tempfile::TempDir, WireServer, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (_, reference) = write_input(dir.path(), rows, 40, 7);
    let expected = reference_rows(&reference, "|");
    let server = WireServer::start(dir.path(), extra);
    (dir, server, expected)
}

fn joined(rows: Vec<Vec<Option<String>>>) -> Vec<String> {
    let mut out: Vec<String> = rows
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_default())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}

fn ts(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// WINDOWS rows received in binary, typed, as `|`-joined text, sorted.
fn window_rows(rows: &[postgres::Row]) -> Vec<String> {
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{}|{}|{}|{}|{}",
                ts(r.get(0)),
                ts(r.get(1)),
                r.get::<_, String>(2),
                r.get::<_, i64>(3),
                r.get::<_, i64>(4)
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn window_query_over_simple_and_extended_protocols_matches_datafusion() {
    let (_dir, server, expected) = server_with_events(3_000, &[]);
    let mut client = server.connect();
    client.batch_execute(CREATE_EVENTS).unwrap();

    // Simple protocol: text values.
    assert_eq!(joined(simple_rows(&mut client, WINDOWS)), expected);

    // Extended protocol: binary values, typed.
    let rows = client.query(WINDOWS, &[]).unwrap();
    let cols: Vec<&str> = rows[0].columns().iter().map(|c| c.type_().name()).collect();
    assert_eq!(cols, ["timestamp", "timestamp", "text", "int8", "int8"]);
    assert_eq!(window_rows(&rows), expected);

    // A parameter, bound as text and as a typed value.
    let sql = format!("SELECT * FROM ({WINDOWS}) WHERE k = $1");
    let only_k3: Vec<String> = expected
        .iter()
        .filter(|r| r.split('|').nth(2) == Some("k3"))
        .cloned()
        .collect();
    assert!(!only_k3.is_empty());
    let rows = client.query(sql.as_str(), &[&"k3"]).unwrap();
    assert_eq!(rows.len(), only_k3.len());
    let stmt = client
        .prepare_typed(
            "SELECT count(*) FROM events WHERE v > $1 AND k = $2",
            &[postgres::types::Type::INT8, postgres::types::Type::TEXT],
        )
        .unwrap();
    let n: i64 = client.query_one(&stmt, &[&500i64, &"k1"]).unwrap().get(0);
    let csv = std::fs::read_to_string(server.data_dir.join("events.csv")).unwrap();
    let want = csv
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f[1] == "k1" && f[2].parse::<i64>().unwrap() > 500
        })
        .count() as i64;
    assert_eq!(n, want);

    // Undeclared parameters take the types DataFusion infers from where they stand.
    let stmt = client
        .prepare("SELECT count(*) FROM events WHERE v > $1 AND k = $2")
        .unwrap();
    assert_eq!(
        stmt.params(),
        &[postgres::types::Type::INT8, postgres::types::Type::TEXT]
    );
    let inferred: i64 = client.query_one(&stmt, &[&500i64, &"k1"]).unwrap().get(0);
    assert_eq!(inferred, want);
    // A value that is not of its parameter's type is refused, naming the parameter.
    let stmt = client
        .prepare_typed(
            "SELECT count(*) FROM events WHERE v > $1",
            &[postgres::types::Type::TEXT],
        )
        .unwrap();
    let err = client.query_one(&stmt, &[&"many"]).unwrap_err();
    let message = err.as_db_error().map(|e| e.message().to_string());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("parameter $1")),
        "{err:?}"
    );
    // The text form of a number is cast to the column's type.
    let as_text: i64 = client.query_one(&stmt, &[&"500"]).unwrap().get(0);
    assert!(as_text >= want, "{as_text} < {want}");
}

#[test]
fn types_in_text_and_binary_formats() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("types.csv"),
        "b,i,d,n,s,f,t\n\
         9000000000,-7,2.5,12.34,héllo,true,2024-01-01 00:00:01.5\n\
         ,,,,,,\n",
    )
    .unwrap();
    let server = WireServer::start(dir.path(), &[]);
    let mut client = server.connect();
    client
        .batch_execute(
            "CREATE TABLE types (b BIGINT, i INT, d DOUBLE, n DECIMAL(10, 2), s VARCHAR, f BOOLEAN, t TIMESTAMP) \
             WITH (connector = 'file', path = 'types.csv', format = 'csv', header = 'true')",
        )
        .unwrap();
    let sql = "SELECT b, i, d, n, s, f, t FROM types ORDER BY b NULLS LAST";
    let text = simple_rows(&mut client, sql);
    assert_eq!(
        text[0],
        [
            "9000000000",
            "-7",
            "2.5",
            "12.34",
            "héllo",
            "t",
            "2024-01-01 00:00:01.500000"
        ]
        .map(|s| Some(s.to_string()))
    );
    assert_eq!(text[1], vec![None; 7]);

    let rows = client.query(sql, &[]).unwrap();
    let types: Vec<&str> = rows[0].columns().iter().map(|c| c.type_().name()).collect();
    assert_eq!(
        types,
        [
            "int8",
            "int4",
            "float8",
            "numeric",
            "text",
            "bool",
            "timestamp"
        ]
    );
    let r = &rows[0];
    assert_eq!(r.get::<_, i64>(0), 9_000_000_000);
    assert_eq!(r.get::<_, i32>(1), -7);
    assert_eq!(r.get::<_, f64>(2), 2.5);
    assert_eq!(r.get::<_, Decimal>(3), Decimal::new(1234, 2));
    assert_eq!(r.get::<_, String>(4), "héllo");
    assert!(r.get::<_, bool>(5));
    assert_eq!(
        r.get::<_, NaiveDateTime>(6),
        NaiveDateTime::parse_from_str("2024-01-01 00:00:01.5", "%Y-%m-%d %H:%M:%S%.f").unwrap()
    );
    let r = &rows[1];
    assert_eq!(r.get::<_, Option<i64>>(0), None);
    assert_eq!(r.get::<_, Option<bool>>(5), None);
    assert_eq!(r.get::<_, Option<NaiveDateTime>>(6), None);
}

#[test]
fn errors_carry_sqlstate_codes_and_the_session_goes_on() {
    let (_dir, server, _) = server_with_events(100, &[]);
    let mut client = server.connect();
    client.batch_execute(CREATE_EVENTS).unwrap();
    let cases = [
        ("SELEC 1", SqlState::SYNTAX_ERROR),
        ("SELECT * FROM nope", SqlState::UNDEFINED_TABLE),
        ("SELECT nope FROM events", SqlState::UNDEFINED_COLUMN),
        (
            "CREATE TABLE events (a BIGINT) WITH (connector = 'file', path = 'x.csv')",
            SqlState::DUPLICATE_TABLE,
        ),
        (
            "SET nope = 1",
            SqlState::SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION,
        ),
    ];
    for (sql, want) in cases {
        for extended in [false, true] {
            let err = if extended {
                client.query(sql, &[]).map(|_| ()).unwrap_err()
            } else {
                client.simple_query(sql).map(|_| ()).unwrap_err()
            };
            assert_eq!(
                code(&err),
                want.code(),
                "{sql} (extended: {extended}): {err}"
            );
        }
    }
    assert_eq!(
        simple_rows(&mut client, "SELECT 1 + 1"),
        vec![vec![Some("2".to_string())]]
    );
}

/// Ten thousand terms in one expression used to overflow the stack of the thread planning
/// it and abort the server for every client; now the statement is refused (54001), and one
/// at the limit runs.
#[test]
fn a_deeply_nested_expression_is_refused_and_the_server_stays_up() {
    let (_dir, mut server, _) = server_with_events(10, &[]);
    let mut client = server.connect();
    let deep = format!("SELECT {}", vec!["1"; 10_000].join(" + "));
    let long_or = format!(
        "SELECT count(*) FROM events WHERE {}",
        vec!["v = 1"; 5_000].join(" OR ")
    );
    for sql in [&deep, &long_or] {
        for extended in [false, true] {
            let err = if extended {
                client.query(sql.as_str(), &[]).map(|_| ()).unwrap_err()
            } else {
                client.simple_query(sql).map(|_| ()).unwrap_err()
            };
            let message = err.as_db_error().map(|d| d.message().to_string());
            assert_eq!(code(&err), "54001", "{message:?}");
            assert!(
                message.as_deref().is_some_and(|m| m.contains("1000 deep")),
                "{message:?}"
            );
        }
    }
    assert!(server.alive(), "the server died");
    let at_limit = format!("SELECT {}", vec!["1"; 1_000].join(" + "));
    assert_eq!(
        simple_rows(&mut client, &at_limit),
        vec![vec![Some("1000".to_string())]]
    );
    let mut other = server.connect();
    assert_eq!(
        simple_rows(&mut other, "SELECT 1"),
        vec![vec![Some("1".to_string())]]
    );
}

#[test]
fn settings_are_per_connection_and_driver_parameters_are_accepted() {
    let (_dir, server, _) = server_with_events(10, &[]);
    let mut a = server.connect();
    let mut b = server.connect();
    a.batch_execute(
        "SET extra_float_digits = 3; SET application_name = 'weir-test'; SET DateStyle = 'ISO, MDY'; \
         SET parallelism = 3; SET checkpoint_interval = '250ms'; SET TIME ZONE 'UTC'",
    )
    .unwrap();
    let show = |c: &mut Client, what: &str| simple_rows(c, &format!("SHOW {what}"))[0].clone();
    assert_eq!(show(&mut a, "extra_float_digits"), [Some("3".into())]);
    assert_eq!(show(&mut a, "application_name"), [Some("weir-test".into())]);
    assert_eq!(show(&mut a, "parallelism")[1], Some("3".into()));
    assert_eq!(show(&mut a, "checkpoint_interval")[1], Some("250ms".into()));
    assert_eq!(show(&mut b, "extra_float_digits"), [Some("1".into())]);
    assert_ne!(show(&mut b, "parallelism")[1], Some("3".into()));
    assert_eq!(show(&mut b, "checkpoint_interval")[1], Some("1s".into()));
    assert!(show(&mut b, "server_version")[0]
        .as_deref()
        .unwrap()
        .starts_with("15"));
    let err = a
        .batch_execute("SET TimeZone = 'Europe/Paris'")
        .unwrap_err();
    let message = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(message.contains("UTC"), "{err:?}");
    // Transactions are accepted (drivers wrap statements in them) and change nothing.
    a.batch_execute("BEGIN; SELECT 1; COMMIT").unwrap();
    let mut t = a.transaction().unwrap();
    t.simple_query("SELECT 1").unwrap();
    t.commit().unwrap();
}

#[test]
fn jobs_outlive_the_connection_that_created_them() {
    let (_dir, server, expected) = server_with_events(2_000, &[]);
    {
        let mut a = server.connect();
        a.batch_execute(CREATE_EVENTS).unwrap();
        a.batch_execute(&format!("CREATE MATERIALIZED VIEW w AS {WINDOWS}"))
            .unwrap();
    }
    let mut b = server.connect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = simple_rows(&mut b, "SHOW JOBS");
        let w = jobs
            .iter()
            .find(|r| r[0].as_deref() == Some("w"))
            .expect("job w listed");
        if w[1].as_deref() == Some("finished") {
            break;
        }
        assert!(Instant::now() < deadline, "job w did not finish: {jobs:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(joined(simple_rows(&mut b, "SELECT * FROM w")), expected);
}

#[test]
fn cancel_request_stops_a_streaming_query() {
    let dir = tempfile::tempdir().unwrap();
    let server = WireServer::start(dir.path(), &[]);
    let mut client = server.connect();
    client.batch_execute(NEXMARK_BIDS).unwrap();
    let token = client.cancel_token();
    // Over the extended protocol an endless query without LIMIT is refused, clearly.
    let refused = client
        .query("SELECT auction, price FROM bid", &[])
        .unwrap_err();
    assert_eq!(
        code(&refused),
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "{refused:?}"
    );
    // Over the simple protocol it streams rows until it is cancelled.
    let reader = std::thread::spawn(move || {
        let result = client.simple_query("SELECT auction, price FROM bid");
        (client, result)
    });
    std::thread::sleep(Duration::from_secs(2));
    token.cancel_query(NoTls).unwrap();
    let (mut client, result) = reader.join().unwrap();
    let err = result.expect_err("the query ends only by cancelling");
    assert_eq!(code(&err), SqlState::QUERY_CANCELED.code(), "{err}");
    // The connection is usable afterwards.
    assert_eq!(
        simple_rows(&mut client, "SELECT 2"),
        vec![vec![Some("2".to_string())]]
    );
    // LIMIT ends an unbounded query by itself.
    let limited = client
        .query("SELECT auction FROM bid LIMIT 5", &[])
        .unwrap();
    assert_eq!(limited.len(), 5);
}

#[test]
fn psql_lists_and_describes_tables_and_runs_queries() {
    let (_dir, server, expected) = server_with_events(1_000, &[]);
    let (ok, _, err) = server.psql(&["-c", CREATE_EVENTS]);
    assert!(ok, "{err}");
    let (ok, out, err) = server.psql(&["-c", "\\dt"]);
    assert!(ok, "\\dt: {err}");
    assert!(out.contains("events") && out.contains("table"), "{out}");
    let (ok, out, err) = server.psql(&["-c", "\\d events"]);
    assert!(ok, "\\d events: {err}");
    for want in [
        "Table \"public.events\"",
        "bigint",
        "text",
        "timestamp without time zone",
    ] {
        assert!(out.contains(want), "missing {want} in:\n{out}");
    }
    let (ok, out, err) = server.psql(&["-A", "-t", "-F", "|", "-c", WINDOWS]);
    assert!(ok, "{err}");
    let mut got: Vec<String> = out.lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got, expected);
    let (ok, _, err) = server.psql(&["-c", "SELECT * FROM nope"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
}

fn send_raw(port: u16, bytes: &[u8]) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 256];
    let _ = s.read(&mut buf);
}

fn startup_packet() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608i32.to_be_bytes());
    for s in ["user", "weir", "database", "weir", ""] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    let mut p = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    p.extend(body);
    p
}

#[test]
fn malformed_messages_and_vanishing_clients_leave_the_server_up() {
    let (_dir, mut server, expected) = server_with_events(500, &[]);
    let mut keeper = server.connect();
    keeper.batch_execute(CREATE_EVENTS).unwrap();
    keeper.batch_execute(NEXMARK_BIDS).unwrap();

    // Garbage instead of a startup packet; a startup packet cut short; a length of 2 GB.
    send_raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    send_raw(server.port, &startup_packet()[..7]);
    send_raw(server.port, &[0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0]);
    let mut random = vec![0u8; 4096];
    for (i, b) in random.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
    }
    send_raw(server.port, &random);
    // A good startup, then a Query message whose length runs past its end, then gone.
    let mut bytes = startup_packet();
    bytes.extend_from_slice(b"Q\x00\x00\x10\x00SELECT");
    send_raw(server.port, &bytes);
    // A good startup, then an unknown message type.
    let mut bytes = startup_packet();
    bytes.extend_from_slice(b"\x01\x00\x00\x00\x04");
    send_raw(server.port, &bytes);

    // A client that goes away while its unbounded query streams rows to it (simple protocol).
    {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&startup_packet()).unwrap();
        let sql = b"SELECT * FROM bid\0";
        let mut q = vec![b'Q'];
        q.extend_from_slice(&((sql.len() + 4) as i32).to_be_bytes());
        q.extend_from_slice(sql);
        s.write_all(&q).unwrap();
        // Read until 50 DataRow messages have arrived, proving the rows stream.
        let (mut rows, mut pending) = (0, Vec::new());
        let mut buf = [0u8; 8192];
        while rows < 50 {
            let n = s.read(&mut buf).expect("rows before the read timeout");
            assert!(n > 0, "server closed the connection");
            pending.extend_from_slice(&buf[..n]);
            while pending.len() >= 5 {
                let len = i32::from_be_bytes(pending[1..5].try_into().unwrap()) as usize;
                if pending.len() < 1 + len {
                    break;
                }
                rows += usize::from(pending[0] == b'D');
                assert_ne!(pending[0], b'E', "error instead of rows");
                pending.drain(..1 + len);
            }
        }
        // Gone without a Terminate message.
    }
    std::thread::sleep(Duration::from_millis(500));

    assert!(server.alive(), "weir serve died");
    assert_eq!(joined(simple_rows(&mut keeper, WINDOWS)), expected);
    let mut fresh = server.connect();
    assert_eq!(joined(simple_rows(&mut fresh, WINDOWS)), expected);
}

#[test]
fn a_hundred_concurrent_connections() {
    let (_dir, mut server, expected) = server_with_events(300, &["--parallelism", "1"]);
    server.connect().batch_execute(CREATE_EVENTS).unwrap();
    let url = server.url();
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, NoTls).expect("connect");
                if i % 2 == 0 {
                    joined(simple_rows(&mut c, WINDOWS))
                } else {
                    window_rows(&c.query(WINDOWS, &[]).unwrap())
                }
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("client thread"), expected);
    }
    assert!(server.alive());
}

/// The sqllogictest runner (installed by scripts/setup.sh) runs every .slt file against a fresh
/// server, with the postgres (simple) and postgres-extended engines.
#[test]
fn slt_files_pass_over_the_wire_with_sqllogictest_bin() {
    let bin = which("sqllogictest").expect(
        "sqllogictest-bin is not installed: run scripts/setup.sh --tests (cargo install sqllogictest-bin)",
    );
    let tests_dir = std::env::current_dir().unwrap();
    let mut files: Vec<_> = std::fs::read_dir("slt")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    for file in &files {
        for engine in ["postgres", "postgres-extended"] {
            let data = tempfile::tempdir().unwrap();
            let server = WireServer::start(
                data.path(),
                &[
                    "--file-root",
                    tests_dir.to_str().unwrap(),
                    "--parallelism",
                    "2",
                ],
            );
            let out = std::process::Command::new(&bin)
                .args(["--engine", engine, "--host", "127.0.0.1", "--port"])
                .arg(server.port.to_string())
                .args(["--db", "weir", "--user", "weir"])
                .arg(file)
                .output()
                .unwrap();
            if !out.status.success() {
                failures.push(format!(
                    "{} with {engine}:\n{}{}",
                    file.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin"));
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(home)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// psycopg 3 and psycopg2 (in the virtualenv scripts/setup.sh makes) run
/// `tests/python/wire_clients.py`, which checks window results against its own computation.
#[test]
fn python_drivers_psycopg3_and_psycopg2() {
    let venv = std::env::var("WEIR_VENV").unwrap_or_else(|_| "/var/tmp/weir-venv".into());
    let python = Path::new(&venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh --tests (it makes a virtualenv with psycopg and psycopg2)",
        python.display()
    );
    let (dir, server, _) = server_with_events(2_000, &[]);
    let out = std::process::Command::new(python)
        .arg("python/wire_clients.py")
        .arg(server.port.to_string())
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// DROP SINK while the job's supervisor is between a failed attempt and the next one (the
/// fault hook fails one commit, then holds the restart): the stop must reach the attempt that
/// starts after it. It used to be lost there, the endless job ran on and DROP SINK hung.
#[test]
fn drop_sink_returns_while_the_job_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let server = WireServer::start_with_env(
        dir.path(),
        &[],
        &[("WEIR_FAULT", "fail_commit:2,pause_restart:2000")],
    );
    let mut client = server.connect();
    client.batch_execute(NEXMARK_BIDS).unwrap();
    client
        .batch_execute("SET checkpoint_interval = '100ms'")
        .unwrap();
    client
        .batch_execute(
            "CREATE SINK s WITH (connector = 'file', path = 'out', format = 'csv') \
             AS SELECT auction, price FROM bid",
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("pausing the restart"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match server.stderr.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the job did not fail once and restart: {seen:?}"),
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("failing the commit")),
        "{seen:?}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dropped = client.batch_execute("DROP SINK s");
        let _ = tx.send((client, dropped.map_err(|e| e.to_string())));
    });
    let (mut client, dropped) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("DROP SINK did not return: the stop was lost while the job restarted");
    dropped.unwrap();
    assert!(simple_rows(&mut client, "SHOW JOBS").is_empty());
    assert!(!dir.path().join("jobs/s").exists());
}
