//! A real `weir serve` process for wire tests: started on a free port in a temp data directory,
//! killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use postgres::{Client, SimpleQueryMessage};

use super::process::weir_binary;

pub struct WireServer {
    child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
    /// Lines the server wrote to stderr after its start line.
    pub stderr: mpsc::Receiver<String>,
}

impl WireServer {
    /// `weir serve` with `extra` arguments, data directory `data_dir`, started in
    /// `data_dir` (so the default file root is the data directory: tests put their input
    /// files there).
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_env(data_dir, extra, &[])
    }

    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(data_dir, data_dir, extra, env)
    }

    /// `weir serve` started in directory `cwd`.
    pub fn start_in(cwd: &Path, data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(data_dir).expect("create the data directory");
        let mut cmd = Command::new(weir_binary());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .current_dir(cwd)
            .args(extra)
            .env_remove("WEIR_PASSWORD")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start weir serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let port = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("weir serve did not start");
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().expect("address");
                break addr
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("port");
            }
        };
        Self {
            child,
            port,
            data_dir: data_dir.to_path_buf(),
            stderr: rx,
        }
    }

    /// A libpq-style connection string for user `weir`.
    pub fn url(&self) -> String {
        format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port)
    }

    pub fn connect(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("connect to weir serve")
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("poll weir serve").is_none()
    }

    /// Runs psql with `args` against the server; returns (success, stdout, stderr).
    pub fn psql(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "weir",
                "-d",
                "weir",
            ])
            .args(["-X", "-v", "ON_ERROR_STOP=1"])
            .args(args)
            .env_remove("PGPASSWORD")
            .output()
            .expect("run psql (is the postgresql client installed?)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Stops the server with SIGTERM (jobs stop with a checkpoint) and waits.
    pub fn terminate(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for WireServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `events.csv` (from `reference::write_input`) with a 2 s watermark.
pub const CREATE_EVENTS: &str =
    "CREATE TABLE events (id BIGINT, k VARCHAR, v BIGINT, ts TIMESTAMP, \
     WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) \
     WITH (connector = 'file', path = 'events.csv', format = 'csv', header = 'true')";

/// Nexmark bids at 2,000 a second, endless.
pub const NEXMARK_BIDS: &str =
    "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, \
     url VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
     WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
     WITH (connector = 'nexmark', stream = 'bid', rate = '2000')";

/// The rows of a simple-protocol query as text.
pub fn simple_rows(client: &mut Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// An error's SQLSTATE (or why there is none).
pub fn code(e: &postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE in {e}"))
}
