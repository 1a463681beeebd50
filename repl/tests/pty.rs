//! The REPL driven through a pseudo-terminal, as a person types: multi-line input, Tab
//! completion of a table and a column, the live status line while an unbounded query runs,
//! Ctrl-C back to the prompt, history across a restart, `\i`, `\o`, and errors with a caret.

use std::path::{Path, PathBuf};
use std::process::Command;

use rexpect::reader::Options;
use rexpect::session::{spawn_with_options, PtySession};

/// Seconds any one expectation may take (a debug build on a busy machine is slow).
const TIMEOUT_MS: u64 = 60_000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn start(data_dir: &Path) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .current_dir(workspace())
        // A wide terminal, so that tables are not cut and the prompt is predictable.
        .env("COLUMNS", "200")
        .env("LINES", "50")
        .env("TERM", "xterm")
        .env_remove("VISUAL")
        .env_remove("EDITOR");
    let mut p = spawn_with_options(
        cmd,
        Options::new()
            .timeout_ms(Some(TIMEOUT_MS))
            .strip_ansi_escape_codes(true),
    )
    .expect("start weir in a pty");
    p.exp_string("Type \\? for help").expect("banner");
    prompt(&mut p);
    p
}

/// Waits for the prompt, and a moment more, as a person looks before typing (keys sent
/// while the line editor sets the terminal up can be lost).
fn prompt(p: &mut PtySession) {
    p.exp_string("weir> ").expect("the prompt");
    std::thread::sleep(std::time::Duration::from_millis(300));
}

const CREATE_BIDS: &str = "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, \
    date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
    WITH (connector = 'file', path = 'examples/data/bids.csv', format = 'csv', header = 'true');";

#[test]
fn a_person_at_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(dir.path());
    p.send_line(CREATE_BIDS).unwrap();
    p.exp_string("CREATE TABLE").unwrap();
    prompt(&mut p);

    // A statement over two lines: the first line has no `;`, so Enter starts a second line
    // instead of running it.
    p.send_line("SELECT count(*) AS n").unwrap();
    p.send_line("FROM bids;").unwrap();
    p.exp_regex(r"\| +\d+ \|").unwrap();
    p.exp_string("(1 row)").unwrap();
    prompt(&mut p);

    // Tab completes the table after FROM, and a column of it after WHERE.
    p.send("SELECT count(*) AS big FROM bi").unwrap();
    p.flush().unwrap();
    p.send("\t").unwrap();
    p.flush().unwrap();
    p.exp_string("bids").unwrap();
    p.send(" WHERE pri").unwrap();
    p.flush().unwrap();
    p.send("\t").unwrap();
    p.flush().unwrap();
    p.exp_string("price").unwrap();
    p.send_line(" > 100;").unwrap();
    p.exp_string("big").unwrap();
    p.exp_string("(1 row)").unwrap();
    prompt(&mut p);

    // A misspelled table: a caret under it, and the name it probably meant.
    p.send_line("SELECT * FROM bidz;").unwrap();
    p.exp_string("did you mean 'bids'?").unwrap();
    p.exp_string("LINE 1: SELECT * FROM bidz").unwrap();
    p.exp_regex(r"\n {22}\^").unwrap();
    prompt(&mut p);

    // An unbounded query: the status line shows rates while it runs; Ctrl-C cancels it and
    // the prompt comes back.
    p.send_line(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, \
         url VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
         WITH (connector = 'nexmark', stream = 'bid', rate = '2000');",
    )
    .unwrap();
    p.exp_string("CREATE TABLE").unwrap();
    prompt(&mut p);
    p.send_line(
        "SELECT window_start, count(*) AS bids FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) \
         GROUP BY window_start;",
    )
    .unwrap();
    p.exp_regex(r"in [0-9.]+k? rows/s, out [0-9.]+k? rows/s")
        .expect("the status line with rates");
    p.exp_string("watermark")
        .expect("the status line's watermark");
    p.send_control('c').unwrap();
    p.exp_string("query cancelled").unwrap();
    prompt(&mut p);

    // \o sends results to a file, \o alone back to the terminal; \i runs a file.
    let out = dir.path().join("out.txt");
    p.send_line(&format!("\\o {}", out.display())).unwrap();
    prompt(&mut p);
    p.send_line("SELECT 40 + 2 AS answer;").unwrap();
    prompt(&mut p);
    p.send_line("\\o").unwrap();
    prompt(&mut p);
    let written = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        written.contains("answer") && written.contains("42"),
        "{written}"
    );
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "SELECT 'from a file' AS source;\nSELECT 7 * 6 AS product;\n",
    )
    .unwrap();
    p.send_line(&format!("\\i {}", script.display())).unwrap();
    p.exp_string("from a file").unwrap();
    p.exp_regex(r"\| +42 \|").unwrap();
    prompt(&mut p);

    // \q, then a new REPL on the same data directory: the up arrow brings back what was
    // typed (\q, then the statement before it), and Enter runs it again.
    p.send_line("SELECT 6 * 7 AS again;").unwrap();
    p.exp_string("again").unwrap();
    prompt(&mut p);
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
    let mut p = start(dir.path());
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("\\q").unwrap();
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("SELECT 6 * 7 AS again;").unwrap();
    p.send_line("").unwrap();
    p.exp_regex(r"\| +42 \|").unwrap();
    prompt(&mut p);
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
}
