//! Replay speed of a source: at most `rate` rows per second of wall clock since the reader
//! started (the `rate` option of the file and nexmark connectors).

use std::time::Instant;

/// Counts rows against a rate.
#[derive(Debug, Clone)]
pub struct RateLimit {
    rate: Option<u64>,
    started: Instant,
    taken: u64,
}

impl RateLimit {
    /// `None`: no limit.
    pub fn new(rate: Option<u64>) -> Self {
        Self {
            rate,
            started: Instant::now(),
            taken: 0,
        }
    }

    /// How many of `want` rows may be read now (0: wait and poll again).
    pub fn allowance(&self, want: usize) -> usize {
        let Some(rate) = self.rate else {
            return want;
        };
        let allowed = (self.started.elapsed().as_secs_f64() * rate as f64) as u64;
        want.min(allowed.saturating_sub(self.taken) as usize)
    }

    /// Records rows read.
    pub fn took(&mut self, n: usize) {
        self.taken += n as u64;
    }
}
