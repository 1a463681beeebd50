//! The live status line on stderr while a query runs: rows/s in and out, the watermark and
//! how far it trails the newest event and the wall clock, late rows so far, and the newest
//! checkpoint; over bounded files a progress bar with percent of bytes read and an ETA.
//! Drawn by indicatif, in place, only when stderr is a terminal; rows printed meanwhile go
//! through [`LiveStatus::suspend`], so the line never lands in the middle of a table.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use weir_engine::checkpoint::StatsSnapshot;
use weir_engine::MetricsSnapshot;
use weir_planner::display::format_timestamp;

/// How often the line is redrawn.
pub const REFRESH: Duration = Duration::from_millis(250);
/// Rates are measured over at least this long, so they do not jump with each batch.
const RATE_WINDOW: Duration = Duration::from_millis(900);

pub struct LiveStatus {
    bar: ProgressBar,
    /// Counters at the start of the current rate window, and the rates of the last one.
    window: (Instant, u64, u64),
    rates: Option<(f64, f64)>,
    has_length: bool,
}

impl LiveStatus {
    /// A status line on stderr; `None` when it is off (stderr not a terminal, or not asked).
    pub fn start(enabled: bool) -> Option<Self> {
        if !enabled {
            return None;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        if bar.is_hidden() {
            return None;
        }
        bar.set_style(spinner_style());
        Some(Self {
            bar,
            window: (Instant::now(), 0, 0),
            rates: None,
            has_length: false,
        })
    }

    /// Redraws with the job's counters now.
    pub fn update(&mut self, m: &MetricsSnapshot, checkpoints: Option<&StatsSnapshot>) {
        let now = Instant::now();
        let (since, rows_in, rows_out) = self.window;
        let elapsed = now.duration_since(since);
        if elapsed >= RATE_WINDOW {
            let secs = elapsed.as_secs_f64();
            self.rates = Some((
                m.rows_in.saturating_sub(rows_in) as f64 / secs,
                m.rows_out.saturating_sub(rows_out) as f64 / secs,
            ));
            self.window = (now, m.rows_in, m.rows_out);
        }
        if m.bytes_total > 0 {
            if !self.has_length {
                self.has_length = true;
                self.bar.set_style(bar_style());
            }
            self.bar.set_length(m.bytes_total);
            self.bar.set_position(m.bytes_read.min(m.bytes_total));
        }
        self.bar
            .set_message(describe(m, self.rates, checkpoints, wall_ms()));
    }

    /// Runs `print` with the line taken off the screen, then draws it again.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        self.bar.suspend(print)
    }

    /// Takes the line off the screen for good.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{bar:24} {percent:>3}% eta {eta:<4} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `12.3k` for 12 345.
fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// `850ms`, `4.2s`, `3.0min`, `5.1h`, `2.0d`.
fn span(ms: i64) -> String {
    let ms = ms.max(0) as f64;
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 120_000.0 {
        format!("{:.1}s", ms / 1e3)
    } else if ms < 7_200_000.0 {
        format!("{:.1}min", ms / 6e4)
    } else if ms < 172_800_000.0 {
        format!("{:.1}h", ms / 3.6e6)
    } else {
        format!("{:.1}d", ms / 8.64e7)
    }
}

/// The line's text (also what the tests check).
pub fn describe(
    m: &MetricsSnapshot,
    rates: Option<(f64, f64)>,
    checkpoints: Option<&StatsSnapshot>,
    now_ms: i64,
) -> String {
    let mut parts = Vec::new();
    parts.push(match rates {
        Some((i, o)) => format!("in {} rows/s, out {} rows/s", count(i), count(o)),
        None => format!("in {} rows, out {} rows", m.rows_in, m.rows_out),
    });
    if m.watermark != i64::MIN && m.watermark != i64::MAX {
        let wm_ms = m.watermark / 1_000_000;
        let mut text = format!("watermark {}", format_timestamp(m.watermark));
        let mut lags = Vec::new();
        if m.newest_event_time != i64::MIN {
            lags.push(format!(
                "{} behind events",
                span(m.newest_event_time / 1_000_000 - wm_ms)
            ));
        }
        lags.push(format!("{} behind now", span(now_ms - wm_ms)));
        text.push_str(&format!(" ({})", lags.join(", ")));
        parts.push(text);
    }
    if m.late_rows > 0 {
        parts.push(format!("{} late", m.late_rows));
    }
    if m.skipped_rows > 0 {
        parts.push(format!("{} skipped", m.skipped_rows));
    }
    if let Some(c) = checkpoints.filter(|c| c.last_epoch > 0) {
        let age = if c.last_completed_ms > 0 {
            format!(" {} ago", span(now_ms - c.last_completed_ms as i64))
        } else {
            String::new()
        };
        parts.push(format!(
            "checkpoint {}{age} ({})",
            c.last_epoch,
            span(c.last_duration.as_millis() as i64)
        ));
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_rates_watermark_lags_late_rows_and_checkpoint() {
        let m = MetricsSnapshot {
            rows_in: 10_000,
            rows_out: 40,
            late_rows: 3,
            skipped_rows: 0,
            // 2024-01-01 00:00:05 UTC
            watermark: 1_704_067_205_000_000_000,
            newest_event_time: 1_704_067_210_000_000_000,
            bytes_read: 0,
            bytes_total: 0,
        };
        let c = StatsSnapshot {
            last_epoch: 7,
            last_duration: Duration::from_millis(42),
            last_completed_ms: 1_704_067_300_000,
            ..StatsSnapshot::default()
        };
        let line = describe(&m, Some((12_345.0, 40.0)), Some(&c), 1_704_067_302_000);
        assert_eq!(
            line,
            "in 12.3k rows/s, out 40 rows/s · watermark 2024-01-01 00:00:05 (5.0s behind events, \
             97.0s behind now) · 3 late · checkpoint 7 2.0s ago (42ms)"
        );
    }

    #[test]
    fn before_any_watermark_or_rate_the_line_counts_rows() {
        let m = MetricsSnapshot::default();
        assert_eq!(describe(&m, None, None, 0), "in 0 rows, out 0 rows");
    }
}
