//! Event-time window arithmetic for `TUMBLE`, `HOP`, `CUMULATE` and `SESSION` (DESIGN.md §2, §3).
//!
//! Windows are `[start, end)` in nanoseconds, aligned to the epoch plus an optional offset.
//! A SESSION window depends on the other rows of its key, so here a session row only has its
//! own window `[t, t + gap)`; the session operator merges them.

use crate::error::{EngineError, Result};
use crate::message::EventTime;

/// How far a window's `window_time` column lies before its `window_end`: one millisecond, as
/// Flink's `window_time` (the window's last instant at millisecond precision).
pub const WINDOW_TIME_BEFORE_END: i64 = 1_000_000;

/// A window table function's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// `TUMBLE(t, col, size [, offset])`: back-to-back windows of `size`.
    Tumble { size: i64, offset: i64 },
    /// `HOP(t, col, slide, size [, offset])`: windows of `size` starting every `slide`.
    Hop { slide: i64, size: i64, offset: i64 },
    /// `CUMULATE(t, col, step, size [, offset])`: back-to-back periods of `size`; each period
    /// has the windows `[p, p + step)`, `[p, p + 2 step)`, ... `[p, p + size)`, all starting
    /// at the period's start `p`.
    Cumulate { step: i64, size: i64, offset: i64 },
    /// `SESSION(t, col, gap [, keys])`: a row's own window is `[t, t + gap)`; the session
    /// operator merges the windows of a key that overlap or touch.
    Session { gap: i64 },
}

impl WindowSpec {
    /// A tumbling window; `size` must be positive.
    pub fn tumble(size: i64, offset: i64) -> Result<Self> {
        if size <= 0 {
            return Err(EngineError::BadInput(format!(
                "TUMBLE window size must be positive, got {size} ns"
            )));
        }
        Ok(WindowSpec::Tumble { size, offset })
    }

    /// A hopping window; `slide` and `size` must be positive.
    pub fn hop(slide: i64, size: i64, offset: i64) -> Result<Self> {
        if slide <= 0 || size <= 0 {
            return Err(EngineError::BadInput(format!(
                "HOP slide and size must be positive, got slide {slide} ns, size {size} ns"
            )));
        }
        Ok(WindowSpec::Hop {
            slide,
            size,
            offset,
        })
    }

    /// A cumulating window; `step` and `size` must be positive and `size` a multiple of `step`.
    pub fn cumulate(step: i64, size: i64, offset: i64) -> Result<Self> {
        if step <= 0 || size <= 0 {
            return Err(EngineError::BadInput(format!(
                "CUMULATE step and size must be positive, got step {step} ns, size {size} ns"
            )));
        }
        if size % step != 0 {
            return Err(EngineError::BadInput(format!(
                "CUMULATE size must be a multiple of step, got step {step} ns, size {size} ns"
            )));
        }
        Ok(WindowSpec::Cumulate { step, size, offset })
    }

    /// A session window; `gap` must be positive.
    pub fn session(gap: i64) -> Result<Self> {
        if gap <= 0 {
            return Err(EngineError::BadInput(format!(
                "SESSION gap must be positive, got {gap} ns"
            )));
        }
        Ok(WindowSpec::Session { gap })
    }

    /// Length of the longest window (of every window for TUMBLE and HOP); a session row's own
    /// window for SESSION.
    pub fn size(&self) -> i64 {
        match *self {
            WindowSpec::Tumble { size, .. }
            | WindowSpec::Hop { size, .. }
            | WindowSpec::Cumulate { size, .. } => size,
            WindowSpec::Session { gap } => gap,
        }
    }

    /// Whether every window has the same length (then `window_start` + size is the end).
    pub fn fixed_size(&self) -> bool {
        !matches!(
            self,
            WindowSpec::Cumulate { .. } | WindowSpec::Session { .. }
        )
    }

    /// How many windows a row can belong to.
    pub fn windows_per_row(&self) -> i128 {
        let per = |size: i64, step: i64| (size as i128 + step as i128 - 1) / step as i128;
        match *self {
            WindowSpec::Tumble { .. } | WindowSpec::Session { .. } => 1,
            WindowSpec::Hop { slide, size, .. } => per(size, slide),
            WindowSpec::Cumulate { step, size, .. } => per(size, step),
        }
    }

    /// The distance between window starts, and their offset from the epoch.
    fn step_and_offset(&self) -> (i64, i64) {
        match *self {
            WindowSpec::Tumble { size, offset } => (size, offset),
            WindowSpec::Hop { slide, offset, .. } => (slide, offset),
            WindowSpec::Cumulate { size, offset, .. } => (size, offset),
            // A session row's window starts at the row itself.
            WindowSpec::Session { .. } => (1, 0),
        }
    }

    /// The start of the latest window that contains `t`.
    pub fn last_start(&self, t: EventTime) -> EventTime {
        let (step, offset) = self.step_and_offset();
        t.saturating_sub((t.wrapping_sub(offset)).rem_euclid(step))
    }

    /// The largest end over the windows containing `t`: once the watermark reaches it, every
    /// window of `t` has fired.
    pub fn max_end(&self, t: EventTime) -> EventTime {
        self.last_start(t).saturating_add(self.size())
    }

    /// Whether some window contains `t` (a HOP with slide > size leaves gaps).
    pub fn covers(&self, t: EventTime) -> bool {
        self.max_end(t) > t
    }

    /// Calls `f(start, end)` for every window containing `t` whose end is above `watermark`,
    /// latest end first. Returns how many were visited.
    #[inline]
    pub fn for_each_open_window(
        &self,
        t: EventTime,
        watermark: EventTime,
        mut f: impl FnMut(EventTime, EventTime),
    ) -> usize {
        if let WindowSpec::Session { gap } = *self {
            let end = t.saturating_add(gap);
            if end > watermark {
                f(t, end);
                return 1;
            }
            return 0;
        }
        if let WindowSpec::Cumulate { step, size, .. } = *self {
            // The windows of t's period that reach past t: ends p + size, p + size - step, ...
            let start = self.last_start(t);
            let mut end = start.saturating_add(size);
            let mut n = 0;
            while end > t && end > watermark && end > start {
                f(start, end);
                n += 1;
                end = end.saturating_sub(step);
            }
            return n;
        }
        let size = self.size();
        let (step, _) = self.step_and_offset();
        let mut start = self.last_start(t);
        let mut n = 0;
        // Windows containing t have start in (t - size, t]; ends decrease as we go back.
        while start > t.saturating_sub(size) && start.saturating_add(size) > watermark {
            f(start, start.saturating_add(size));
            n += 1;
            match start.checked_sub(step) {
                Some(s) => start = s,
                None => break,
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn windows(spec: WindowSpec, t: i64, wm: i64) -> Vec<i64> {
        let mut v = vec![];
        spec.for_each_open_window(t, wm, |s, e| {
            assert_eq!(e - s, spec.size(), "window {s}..{e}");
            v.push(s)
        });
        v.sort();
        v
    }

    #[test]
    fn tumble_assigns_one_aligned_window() {
        let w = WindowSpec::tumble(10 * S, 0).unwrap();
        assert_eq!(windows(w, 0, i64::MIN), vec![0]);
        assert_eq!(windows(w, 9 * S, i64::MIN), vec![0]);
        assert_eq!(windows(w, 10 * S, i64::MIN), vec![10 * S]);
        assert_eq!(windows(w, -1, i64::MIN), vec![-10 * S]);
        assert_eq!(w.max_end(15 * S), 20 * S);
    }

    #[test]
    fn tumble_with_offset() {
        let w = WindowSpec::tumble(10 * S, 3 * S).unwrap();
        assert_eq!(windows(w, 2 * S, i64::MIN), vec![-7 * S]);
        assert_eq!(windows(w, 3 * S, i64::MIN), vec![3 * S]);
    }

    #[test]
    fn hop_assigns_every_overlapping_window() {
        let w = WindowSpec::hop(2 * S, 10 * S, 0).unwrap();
        assert_eq!(
            windows(w, 11 * S, i64::MIN),
            vec![2 * S, 4 * S, 6 * S, 8 * S, 10 * S]
        );
        // size not a multiple of slide
        let w = WindowSpec::hop(3 * S, 7 * S, 0).unwrap();
        // windows containing t=7: starts 3 (3..10), 6 (6..13); 0..7 excludes 7.
        assert_eq!(windows(w, 7 * S, i64::MIN), vec![3 * S, 6 * S]);
        // slide larger than size: some rows belong to no window
        let w = WindowSpec::hop(10 * S, 3 * S, 0).unwrap();
        assert_eq!(windows(w, 5 * S, i64::MIN), Vec::<i64>::new());
        assert_eq!(windows(w, 12 * S, i64::MIN), vec![10 * S]);
    }

    #[test]
    fn closed_windows_are_skipped() {
        let w = WindowSpec::hop(2 * S, 10 * S, 0).unwrap();
        // watermark 14: windows ending at <= 14 (start <= 4) are closed
        assert_eq!(windows(w, 11 * S, 14 * S), vec![6 * S, 8 * S, 10 * S]);
        assert_eq!(windows(w, 11 * S, 20 * S), Vec::<i64>::new());
    }

    fn cumulate_windows(spec: WindowSpec, t: i64, wm: i64) -> Vec<(i64, i64)> {
        let mut v = vec![];
        spec.for_each_open_window(t, wm, |s, e| v.push((s / S, e / S)));
        v
    }

    #[test]
    fn cumulate_assigns_the_windows_of_the_period_that_reach_past_the_row() {
        let w = WindowSpec::cumulate(2 * S, 6 * S, 0).unwrap();
        // period [6, 12): windows ending 8, 10, 12; t = 7 is in all three.
        assert_eq!(
            cumulate_windows(w, 7 * S, i64::MIN),
            vec![(6, 12), (6, 10), (6, 8)]
        );
        // t = 8 is not in [6, 8).
        assert_eq!(cumulate_windows(w, 8 * S, i64::MIN), vec![(6, 12), (6, 10)]);
        assert_eq!(cumulate_windows(w, 11 * S, i64::MIN), vec![(6, 12)]);
        assert_eq!(
            cumulate_windows(w, 12 * S, i64::MIN),
            vec![(12, 18), (12, 16), (12, 14)]
        );
        assert_eq!(
            cumulate_windows(w, -5 * S, i64::MIN),
            vec![(-6, 0), (-6, -2), (-6, -4)]
        );
        assert_eq!(w.max_end(7 * S), 12 * S);
        assert_eq!(w.windows_per_row(), 3);
        assert!(w.covers(7 * S));
    }

    #[test]
    fn cumulate_skips_fired_windows_and_honours_the_offset() {
        let w = WindowSpec::cumulate(2 * S, 6 * S, 0).unwrap();
        // watermark 10: the windows ending at 8 and 10 have fired.
        assert_eq!(cumulate_windows(w, 7 * S, 10 * S), vec![(6, 12)]);
        assert_eq!(cumulate_windows(w, 7 * S, 12 * S), Vec::<(i64, i64)>::new());
        let w = WindowSpec::cumulate(2 * S, 6 * S, S).unwrap();
        // periods start at 1, 7, 13, ...
        assert_eq!(
            cumulate_windows(w, 7 * S, i64::MIN),
            vec![(7, 13), (7, 11), (7, 9)]
        );
        assert_eq!(cumulate_windows(w, 6 * S, i64::MIN), vec![(1, 7)]);
    }

    #[test]
    fn cumulate_needs_a_size_that_is_a_multiple_of_step() {
        assert!(WindowSpec::cumulate(0, 6, 0).is_err());
        assert!(WindowSpec::cumulate(2, 0, 0).is_err());
        let e = WindowSpec::cumulate(4, 6, 0).unwrap_err().to_string();
        assert!(e.contains("multiple of step"), "{e}");
        assert!(WindowSpec::cumulate(3, 6, 0).is_ok());
    }

    #[test]
    fn rejects_non_positive_sizes() {
        assert!(WindowSpec::tumble(0, 0).is_err());
        assert!(WindowSpec::hop(0, 5, 0).is_err());
    }
}
