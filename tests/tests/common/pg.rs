//! A real PostgreSQL server for tests: `initdb` in a temporary directory, started with
//! `pg_ctl` on a free port with prepared transactions enabled, stopped when dropped. As root
//! (CI), the server runs as the `postgres` user, since PostgreSQL refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running server.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// Password of the `weir` role when the server requires one (SCRAM).
    password: Option<String>,
}

fn bin_dir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .filter(|d| d.join("initdb").exists())
        .expect("PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a server binary, as `postgres` when we are root.
fn run(bin: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args).output().expect("run a PostgreSQL binary")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PgServer {
    /// Starts a server with `max_prepared_transactions` set as given; with a password, the
    /// `weir` role has it and the server asks for it (SCRAM-SHA-256).
    pub fn start_with(max_prepared_transactions: u32, password: Option<&str>) -> Self {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir()
            .unwrap();
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres", dir.path().to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        let pwfile_arg = format!("--pwfile={}", pwfile.display());
        let mut args = vec!["-D", data.to_str().unwrap(), "-U", "weir", "-E", "UTF8"];
        match password {
            Some(pw) => {
                std::fs::write(&pwfile, pw).unwrap();
                args.extend(["--auth=scram-sha-256", pwfile_arg.as_str()]);
            }
            None => args.push("--auth=trust"),
        }
        let out = run(&bin.join("initdb"), &args);
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The port is free when picked but may be taken (by another test's server or
        // listener) before the postmaster binds it: pick another then.
        let log = dir.path().join("log");
        let mut attempt = 0;
        let port = loop {
            attempt += 1;
            let port = free_port();
            let options = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_prepared_transactions={max_prepared_transactions} -c fsync=off",
                dir.path().display()
            );
            let _ = std::fs::remove_file(&log);
            let out = run(
                &bin.join("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-o",
                    &options,
                    "-l",
                    log.to_str().unwrap(),
                    "-w",
                    "start",
                ],
            );
            if out.status.success() {
                break port;
            }
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                attempt < 5 && log_text.contains("Address already in use"),
                "pg_ctl start: {} {log_text}",
                String::from_utf8_lossy(&out.stderr),
            );
        };
        Self {
            dir,
            bin,
            port,
            password: password.map(str::to_string),
        }
    }

    pub fn start() -> Self {
        Self::start_with(64, None)
    }

    /// A URL weir and clients connect with (with the password when there is one).
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("postgresql://weir:{pw}@127.0.0.1:{}/postgres", self.port),
            None => format!("postgresql://weir@127.0.0.1:{}/postgres", self.port),
        }
    }

    /// Runs SQL with psql and returns its rows (unaligned, `|`-separated, no header).
    pub fn psql(&self, sql: &str) -> Vec<String> {
        let out = Command::new("psql")
            .args([
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &self.url(),
                "-c",
                sql,
            ])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = run(
            &self.bin.join("pg_ctl"),
            &["-D", data.to_str().unwrap(), "-m", "immediate", "stop"],
        );
    }
}
