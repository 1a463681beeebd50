//! Event-time window arithmetic for `TUMBLE` and `HOP` (DESIGN.md §2, §3).
//!
//! Windows are `[start, end)` in nanoseconds, aligned to the epoch plus an optional offset.

use crate::error::{EngineError, Result};
use crate::message::EventTime;

/// A window table function's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// `TUMBLE(t, col, size [, offset])`: back-to-back windows of `size`.
    Tumble { size: i64, offset: i64 },
    /// `HOP(t, col, slide, size [, offset])`: windows of `size` starting every `slide`.
    Hop { slide: i64, size: i64, offset: i64 },
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

    /// Length of every window.
    pub fn size(&self) -> i64 {
        match *self {
            WindowSpec::Tumble { size, .. } | WindowSpec::Hop { size, .. } => size,
        }
    }

    fn step_and_offset(&self) -> (i64, i64) {
        match *self {
            WindowSpec::Tumble { size, offset } => (size, offset),
            WindowSpec::Hop { slide, offset, .. } => (slide, offset),
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

    /// Calls `f(start)` for every window containing `t` whose end is above `watermark`, latest
    /// window first. Returns how many were visited.
    #[inline]
    pub fn for_each_open_window(
        &self,
        t: EventTime,
        watermark: EventTime,
        mut f: impl FnMut(EventTime),
    ) -> usize {
        let size = self.size();
        let (step, _) = self.step_and_offset();
        let mut start = self.last_start(t);
        let mut n = 0;
        // Windows containing t have start in (t - size, t]; ends decrease as we go back.
        while start > t.saturating_sub(size) && start.saturating_add(size) > watermark {
            f(start);
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
        spec.for_each_open_window(t, wm, |s| v.push(s));
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

    #[test]
    fn rejects_non_positive_sizes() {
        assert!(WindowSpec::tumble(0, 0).is_err());
        assert!(WindowSpec::hop(0, 5, 0).is_err());
    }
}
