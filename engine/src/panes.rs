//! Panes of HOP windows (Flink's slices): each row is aggregated once, into its pane, and a
//! window is combined from the panes it holds when it fires, so a HOP aggregation's cost per
//! row does not grow with `size / slide`.
//!
//! A HOP window `[s, s + size)` starts every `slide`; with `pane = gcd(size, slide)` every
//! window boundary is a pane boundary, so a pane lies wholly inside or wholly outside each
//! window, and all rows of a pane belong to the same windows.
//!
//! Lateness stays per row (DESIGN.md §3): a row counts in the windows of its pane that were
//! open when it arrived (`end > W`, the watermark just before it in its source partition). So
//! a row whose earliest windows had fired counts in a suffix of its pane's windows only. Such
//! rows of a pane must not merge with the others: a row carries a *pane code*,
//! `pane_start + j`, where `j` counts the pane's windows it missed (`j = 0` for a row in
//! time). Since `j < windows per row <= pane` (in nanoseconds; [`Panes::of`] declines
//! otherwise), the code names the pane and `j` at once, and the code is a valid pane start for
//! any window-bound arithmetic: `code + pane` is at most `j` nanoseconds past the pane's end
//! and, for `j > 0`, before the first window the row counts in (`pane end + j * slide`).

use crate::message::EventTime;
use crate::window::WindowSpec;

/// The panes of one HOP window shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Panes {
    slide: i64,
    size: i64,
    offset: i64,
    pane: i64,
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Panes {
    /// The panes of `spec`, when they pay and can be coded: a HOP whose rows belong to two
    /// windows or more, and whose pane (in nanoseconds) exceeds its windows per row.
    pub fn of(spec: &WindowSpec) -> Option<Self> {
        let WindowSpec::Hop {
            slide,
            size,
            offset,
        } = *spec
        else {
            return None;
        };
        let pane = gcd(size, slide);
        let per_row = spec.windows_per_row();
        (per_row >= 2 && (pane as i128) > per_row).then_some(Self {
            slide,
            size,
            offset,
            pane,
        })
    }

    /// The pane's length.
    pub fn pane(&self) -> i64 {
        self.pane
    }

    /// The windows' length.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The start of the pane holding `t`.
    fn pane_start(&self, t: EventTime) -> EventTime {
        t.saturating_sub(t.wrapping_sub(self.offset).rem_euclid(self.pane))
    }

    /// The start of the latest window holding `t`.
    fn last_start(&self, t: EventTime) -> EventTime {
        t.saturating_sub(t.wrapping_sub(self.offset).rem_euclid(self.slide))
    }

    /// The end of the earliest window holding `t`, `None` when none does (slide > size
    /// leaves gaps; not with panes, but kept total).
    fn first_end(&self, t: EventTime) -> Option<EventTime> {
        let last = self.last_start(t);
        if last.saturating_add(self.size) <= t {
            return None;
        }
        // Windows holding t start in (t - size, last], every slide.
        let back = (last as i128 - (t as i128 - self.size as i128) - 1) / self.slide as i128;
        let first = last as i128 - back * self.slide as i128;
        Some((first + self.size as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }

    /// The pane code of a row at `t` judged against `watermark`: its pane's start plus the
    /// number of the pane's windows that had fired (`end <= watermark`); `None` when every
    /// window of the row had (a late row).
    pub fn code(&self, t: EventTime, watermark: EventTime) -> Option<EventTime> {
        let first = self.first_end(t)?;
        let last = self.last_start(t).saturating_add(self.size);
        if last <= watermark {
            return None;
        }
        let missed = if first > watermark {
            0
        } else {
            // Ends first, first + slide, ...: those <= watermark fired.
            ((watermark as i128 - first as i128) / self.slide as i128 + 1) as i64
        };
        Some(self.pane_start(t).saturating_add(missed))
    }

    /// Calls `f(start, end)` for each window the rows of pane code `code` count in, latest
    /// end first; returns how many.
    pub fn for_each_window(
        &self,
        code: EventTime,
        mut f: impl FnMut(EventTime, EventTime),
    ) -> usize {
        let missed = code.wrapping_sub(self.offset).rem_euclid(self.pane);
        let start = code.saturating_sub(missed);
        let Some(first) = self.first_end(start) else {
            return 0;
        };
        let cutoff = (first as i128 + missed as i128 * self.slide as i128)
            .clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let mut end = self.last_start(start).saturating_add(self.size);
        let mut n = 0;
        while end >= cutoff {
            f(end.saturating_sub(self.size), end);
            n += 1;
            match end.checked_sub(self.slide) {
                Some(e) => end = e,
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

    fn direct(spec: WindowSpec, t: i64, wm: i64) -> Vec<(i64, i64)> {
        let mut v = vec![];
        spec.for_each_open_window(t, wm, |s, e| v.push((s, e)));
        v
    }

    fn through_panes(panes: Panes, t: i64, wm: i64) -> Vec<(i64, i64)> {
        let mut v = vec![];
        if let Some(code) = panes.code(t, wm) {
            assert!(
                code - panes.pane_start(t) < panes.pane(),
                "code {code} of t={t}"
            );
            panes.for_each_window(code, |s, e| v.push((s, e)));
        }
        v
    }

    #[test]
    fn a_row_counts_through_its_pane_in_the_windows_it_would_count_in_directly() {
        for (slide, size, offset) in [
            (2 * S, 10 * S, 0),
            (3 * S, 7 * S, 0),
            (2 * S, 10 * S, S / 2),
            (5 * S, 60 * S, -7 * S),
            (7_000, 70_000, 3),
        ] {
            let spec = WindowSpec::hop(slide, size, offset).unwrap();
            let panes = Panes::of(&spec).unwrap();
            let pane = panes.pane();
            let boundaries = (-3 * size / pane..3 * size / pane).map(|b| b * pane + offset);
            for t in boundaries.flat_map(|b| [b - 1, b, b + 1, b + pane / 2]) {
                let mut wms = vec![i64::MIN, t - size, t - 1, t, t + size];
                spec.for_each_open_window(t, i64::MIN, |_, e| wms.extend([e - 1, e]));
                for wm in wms {
                    assert_eq!(
                        through_panes(panes, t, wm),
                        direct(spec, t, wm),
                        "HOP({slide}, {size}, {offset}) t={t} wm={wm}"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_of_a_pane_in_time_share_a_code_and_late_rows_differ() {
        let panes = Panes::of(&WindowSpec::hop(2 * S, 10 * S, 0).unwrap()).unwrap();
        assert_eq!(panes.pane(), 2 * S);
        assert_eq!(panes.code(11 * S, 0), Some(10 * S));
        assert_eq!(panes.code(11 * S + 5, 0), Some(10 * S));
        // Windows ending 12 and 14 fired: two missed.
        assert_eq!(panes.code(11 * S, 14 * S), Some(10 * S + 2));
        assert_eq!(panes.code(11 * S, 20 * S), None);
    }

    #[test]
    fn panes_only_where_they_pay_and_can_be_coded() {
        assert!(Panes::of(&WindowSpec::tumble(S, 0).unwrap()).is_none());
        // One window per row.
        assert!(Panes::of(&WindowSpec::hop(10 * S, 10 * S, 0).unwrap()).is_none());
        assert!(Panes::of(&WindowSpec::hop(10 * S, 3 * S, 0).unwrap()).is_none());
        // A pane of 1 ns cannot code 5 windows.
        assert!(Panes::of(&WindowSpec::hop(2, 10, 0).unwrap()).is_none());
        assert_eq!(
            Panes::of(&WindowSpec::hop(4 * S, 10 * S, 0).unwrap()).map(|p| p.pane()),
            Some(2 * S)
        );
    }
}
