//! Running the real `weir` binary as a child process, killing it with SIGKILL at random
//! moments and resuming it: the crash tests' harness.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

/// The `weir` binary cargo built next to this test (`target/<profile>/weir`).
pub fn weir_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let bin = dir.join("weir");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --release --workspace` so the weir binary is built",
        bin.display()
    );
    bin
}

/// Starts `weir` with `args` in `cwd`.
pub fn spawn(args: &[&str], cwd: &Path) -> Child {
    Command::new(weir_binary())
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir")
}

/// Waits for the child and returns its stderr; panics when it failed.
pub fn finish(child: Child, what: &str) -> String {
    let out = child.wait_with_output().expect("wait for weir");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed: {stderr}");
    stderr
}

/// Lets the child run for a random time in `window`, then kills it with SIGKILL. Returns
/// whether it was killed (false: it had already exited; its stderr is then checked).
pub fn kill_at_random(mut child: Child, rng: &mut impl Rng, window: (u64, u64)) -> bool {
    let deadline = Instant::now() + Duration::from_millis(rng.gen_range(window.0..window.1));
    while Instant::now() < deadline {
        if child.try_wait().expect("poll weir").is_some() {
            finish(child, "weir (exited before its kill)");
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Child::kill sends SIGKILL on Unix: no handler runs, nothing is flushed.
    child.kill().expect("SIGKILL weir");
    let _ = child.wait();
    true
}

/// Waits until `path` exists (the job was recorded) or the child exited.
pub fn wait_for_file(child: &mut Child, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if let Some(status) = child.try_wait().expect("poll weir") {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
            }
            panic!(
                "weir exited ({status}) before creating {}: {stderr}",
                path.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The committed rows of a file sink directory: every line of every visible part file.
pub fn committed_lines(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("dir entry").path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read part file")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Runs `script` with `weir -f --data-dir data --parallelism 2` in `cwd` until it recorded
/// `job`, kills it at a random moment in `first`; then resumes it at each parallelism of
/// `resumes` and kills it at a random moment in `window`; finally resumes it (at
/// `final_parallelism`, or as recorded) and lets it finish. Returns how many kills hit a
/// running job.
#[allow(clippy::too_many_arguments)]
pub fn kill_and_resume(
    script: &Path,
    data: &Path,
    job: &str,
    cwd: &Path,
    rng: &mut impl Rng,
    first: (u64, u64),
    resumes: &[usize],
    window: (u64, u64),
    final_parallelism: Option<usize>,
) -> usize {
    let data_arg = data.to_str().expect("data dir path");
    let mut child = spawn(
        &[
            "-f",
            script.to_str().expect("script path"),
            "--data-dir",
            data_arg,
            "--parallelism",
            "2",
        ],
        cwd,
    );
    wait_for_file(&mut child, &data.join(format!("jobs/{job}/job.json")));
    let mut killed = usize::from(kill_at_random(child, rng, first));
    for p in resumes {
        let p = p.to_string();
        let child = spawn(
            &["resume", "--data-dir", data_arg, "--parallelism", &p],
            cwd,
        );
        killed += usize::from(kill_at_random(child, rng, window));
    }
    let last = match final_parallelism {
        Some(p) => spawn(
            &[
                "resume",
                "--data-dir",
                data_arg,
                "--parallelism",
                &p.to_string(),
            ],
            cwd,
        ),
        None => spawn(&["resume", "--data-dir", data_arg], cwd),
    };
    finish(last, "final resume");
    killed
}
