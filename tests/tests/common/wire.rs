//! A real `weir serve` process for wire tests: started on a free port in a temp data directory,
//! killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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
