//! The `weir` binary: interactive REPL, script runner (`-f`).

mod complete;
mod diagnose;
mod helper;
mod http;
mod output;
mod repl;
mod runner;
mod server;
mod status;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use weir_planner::{Session, SessionConfig};

use crate::output::Format;

/// mimalloc instead of the system allocator: Arrow buffers of a batch are large and short-lived,
/// and glibc returned them to the kernel and faulted them in again for every batch (about a
/// tenth of Nexmark q0's time in page faults and copies).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's `mi_option_set` (linked through the `mimalloc` crate).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (include/mimalloc.h), the version
/// the `mimalloc` crate builds by default.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Freed memory goes back to the kernel at once instead of after mimalloc's default 10 ms:
/// a window firing or spilling frees hundreds of megabytes in bursts, and with the delay
/// they stayed resident next to the next burst's (peak RSS of a 5 M-key window 1.4x higher).
/// It costs CPU: every batch's buffers are fresh pages, faulted in, and each free is a
/// `madvise` (7-23% of the CPU of Nexmark q5, q9, q19 and q20, docs/status.md, Session 47).
/// Whoever sets mimalloc's own `MIMALLOC_PURGE_DELAY` (e.g. 10, with
/// `MIMALLOC_ARENA_PURGE_MULT=1`) chooses that trade instead.
fn return_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets a plain integer option; mimalloc reads options atomically.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// No transparent huge pages for weir's memory. With freed memory going back at once (above),
/// a 2 MiB huge page is zeroed whole each time a few small allocations fault into a range
/// just purged; with 4 KiB pages only what is touched is zeroed. Measured (Nexmark from
/// files, p=2, alternated runs, docs/status.md, Session 49): q3 1.62-1.66 -> 1.54 CPU-s,
/// q4 and q20 5-6% less CPU, q9's peak RSS 608-638 -> 549-559 MB, q5 and q7 unchanged
/// within noise. Whoever sets mimalloc's `MIMALLOC_ALLOW_THP` chooses instead.
fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: a plain flag of this process (PR_SET_THP_DISABLE takes no pointer); an error
    // (an old kernel) leaves huge pages on, which changes only speed.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// weir: a streaming SQL engine with event-time windows.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Run the statements of this SQL script, then exit.
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// How query results are printed.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Directory for the catalog, sink jobs, their state and checkpoints.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Instances of each parallel stage (default: number of cores). With `resume`, the
    /// parallelism the jobs resume at (default: as they were created).
    #[arg(long, global = true)]
    parallelism: Option<usize>,
    /// Serve Prometheus metrics (/metrics), a JSON API (/api/) and a dashboard (/) of the
    /// jobs on this address, e.g. 127.0.0.1:9187 (port 0: any free port, printed at start).
    #[arg(long, global = true, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// With -f: show the live status line (rates, watermark, checkpoint, progress) on stderr
    /// also with --format csv or json (it is on for tables; only ever on a terminal).
    #[arg(long)]
    status: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Resume every unfinished sink job of --data-dir from its newest checkpoint, wait until
    /// the bounded ones finish (Ctrl-C stops the rest with a final checkpoint), then exit.
    Resume,
    /// Serve the PostgreSQL wire protocol (psql, psycopg, JDBC, sqllogictest). Connections share
    /// one catalog and job manager; jobs outlive the connection that created them.
    Serve {
        /// Address to listen on (port 0: any free port, printed at start).
        #[arg(long, default_value = "127.0.0.1:6875")]
        listen: std::net::SocketAddr,
        /// Wire sessions read and write files only under this directory (default: the
        /// working directory); relative paths resolve against it. The data directory's own
        /// files (job records, catalog, secrets, checkpoints) are never reachable, and the
        /// rest of the data directory only when the file root lies inside it.
        #[arg(long)]
        file_root: Option<PathBuf>,
        /// Require this password (SCRAM-SHA-256) from clients. Also read from WEIR_PASSWORD.
        #[arg(long, env = "WEIR_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Listen on a non-loopback address without a password (anyone who reaches it can
        /// read files under the file root and create sinks).
        #[arg(long)]
        allow_insecure: bool,
    },
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    no_transparent_huge_pages();
    let code = run(Cli::parse());
    // The session and its jobs are gone: close the views' stores before the process's
    // statics are torn down.
    weir_engine::state::RocksDbStateBackend::close_all_shared();
    code
}

fn run(cli: Cli) -> ExitCode {
    let mut config = SessionConfig {
        data_dir: cli.data_dir.clone(),
        ..SessionConfig::default()
    };
    if let Some(p) = cli.parallelism {
        if p == 0 {
            eprintln!("error: --parallelism must be at least 1");
            return ExitCode::from(2);
        }
        config.parallelism = p;
    }
    if let Some(Command::Serve {
        listen,
        file_root,
        password,
        allow_insecure,
    }) = cli.command
    {
        if cli.data_dir.is_none() {
            eprintln!("error: weir serve needs --data-dir DIR");
            return ExitCode::from(2);
        }
        if !listen.ip().is_loopback() && password.is_none() && !allow_insecure {
            eprintln!(
                "error: --listen {listen} accepts clients from other machines, and without a password \
                 any of them can read files under the file root and create sinks: set --password \
                 (or WEIR_PASSWORD), listen on 127.0.0.1, or pass --allow-insecure"
            );
            return ExitCode::from(2);
        }
        if let Some(addr) = cli.http {
            if !addr.ip().is_loopback() && password.is_none() && !allow_insecure {
                eprintln!(
                    "error: --http {addr} accepts clients from other machines: set --password \
                     (or WEIR_PASSWORD), listen on 127.0.0.1, or pass --allow-insecure"
                );
                return ExitCode::from(2);
            }
        }
        let options = server::ServeOptions {
            listen,
            file_root: file_root.unwrap_or_else(|| PathBuf::from(".")),
            config,
            password,
            http: cli.http,
        };
        return match server::serve(options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let resume = matches!(cli.command, Some(Command::Resume));
    if resume {
        if cli.data_dir.is_none() {
            eprintln!("error: weir resume needs --data-dir DIR");
            return ExitCode::from(2);
        }
        config.resume_parallelism = cli.parallelism;
    }
    // A script runs its own jobs; the data directory's others wait for weir resume.
    config.resume_jobs = cli.file.is_none() || resume;
    // Installed before jobs resume, so Ctrl-C stops them with a checkpoint.
    let interrupted = (resume || cli.file.is_some())
        .then(|| runner::install_interrupt_handler(runner::SignalMode::Batch, None));
    let (mut session, warnings) = match Session::open(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for w in warnings {
        eprintln!("warning: {w}");
    }
    if let Some(addr) = cli.http {
        if !addr.ip().is_loopback() {
            eprintln!(
                "error: --http {addr} would show the jobs to other machines without a password: \
                 listen on 127.0.0.1, or use weir serve --password"
            );
            return ExitCode::from(2);
        }
        match http::start(addr, session.job_observer(), None) {
            Ok(server) => eprintln!("dashboard and metrics at http://{}/", server.addr),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let (true, Some(interrupted)) = (resume, interrupted.clone()) {
        let resumed_all = session.resume_failures().is_empty();
        let mut runner = runner::Runner::new(&mut session, cli.format, interrupted);
        return if runner.wait_for_jobs() && resumed_all {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    match cli.file {
        Some(path) => {
            let script = match std::fs::read_to_string(&path) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot read '{}': {e}", path.display());
                    return ExitCode::FAILURE;
                }
            };
            let interrupted = interrupted.unwrap_or_else(|| {
                runner::install_interrupt_handler(runner::SignalMode::Batch, None)
            });
            let mut runner = runner::Runner::new(&mut session, cli.format, interrupted);
            runner.status_line =
                std::io::stderr().is_terminal() && (cli.format == Format::Table || cli.status);
            match runner.run_script(&script, &path.display().to_string()) {
                runner::ScriptEnd::Done => ExitCode::SUCCESS,
                runner::ScriptEnd::Failed => ExitCode::FAILURE,
                runner::ScriptEnd::Interrupted => ExitCode::from(130),
            }
        }
        None => {
            let history = cli
                .data_dir
                .as_ref()
                .map(|d| d.join("history"))
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".weir_history"))
                });
            repl::run(&mut session, cli.format, history);
            ExitCode::SUCCESS
        }
    }
}
