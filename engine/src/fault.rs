//! Fault injection for crash and recovery tests: `WEIR_FAULT` holds a comma-separated list
//! of `<point>:<n>`. Never set in production; every hook is a no-op without it.
//!
//! - `before_manifest:N`, `before_commit:N`, `mid_commit:N`: the process aborts, as a crash
//!   would, the first time a checkpoint from epoch `N` on reaches that point with sink output
//!   to commit (every task pre-committed, no manifest yet / the manifest written, nothing
//!   committed / the first of several sink payloads committed).
//! - `fail_commit:N`: the first commit of a checkpoint from epoch `N` on fails once (per
//!   process) with an external (transient) error, so the job's supervisor restarts it.
//! - `pause_restart:MS`: a supervisor about to start a new attempt waits `MS` milliseconds
//!   first (to stop a job while it restarts).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{EngineError, Result};

/// The number given for `point`, if `WEIR_FAULT` names it.
fn setting(point: &str) -> Option<u64> {
    let faults = std::env::var("WEIR_FAULT").ok()?;
    faults.split(',').find_map(|f| {
        f.trim()
            .strip_prefix(point)
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|n| n.parse().ok())
    })
}

/// Aborts the process at `point` of checkpoint `epoch` when asked to.
pub(crate) fn crash_at(point: &str, epoch: u64) {
    if setting(point).is_some_and(|n| epoch >= n) {
        eprintln!("WEIR_FAULT: aborting at {point} of checkpoint {epoch}");
        std::process::abort();
    }
}

/// Fails once per process at the commit of checkpoint `epoch` when asked to.
pub(crate) fn fail_commit_once(epoch: u64) -> Result<()> {
    static FAILED: AtomicBool = AtomicBool::new(false);
    if setting("fail_commit").is_some_and(|n| epoch >= n) && !FAILED.swap(true, Ordering::SeqCst) {
        eprintln!("WEIR_FAULT: failing the commit of checkpoint {epoch}");
        return Err(EngineError::External(format!(
            "injected failure (WEIR_FAULT) at the commit of checkpoint {epoch}"
        )));
    }
    Ok(())
}

/// Waits before a restart when asked to.
pub(crate) fn pause_restart() {
    if let Some(ms) = setting("pause_restart") {
        eprintln!("WEIR_FAULT: pausing the restart for {ms} ms");
        std::thread::sleep(Duration::from_millis(ms));
    }
}
