//! When an interval join's rows expire, which bucket holds each, which buckets a probe reads,
//! and how far the output watermark is held back (see the operator's doc).
//!
//! A row's reach is the latest time of the other side it can match: `ta + upper` for a left
//! row, `tb - lower` for a right row, or the row's own bound column (`b.ts <= a.expires`:
//! `a.expires`), the smaller where both exist. A row expires once the other side's watermark
//! passes its reach (plus that side's lag): no row it could match can still come.

use super::IntervalJoinSpec;
use crate::message::EventTime;

/// Smallest bucket granularity: 1 ms.
const MIN_GRANULARITY: i64 = 1_000_000;

/// Largest bucket granularity of rows whose reach is a column of theirs: 2^31 ns (~2.1 s).
const MAX_GRANULARITY: i64 = 1 << 31;

/// When rows expire, which buckets hold them, how far the output watermark is held back.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// Constant bounds on `right.time - left.time`.
    lower: Option<i64>,
    upper: Option<i64>,
    lags: [i64; 2],
    /// With both bounds constant, a quarter of the interval (at least 1 ms); otherwise
    /// (reaches from columns, unbounded above) each row's bucket is rounded to a power of two
    /// near a quarter of its distance from the watermark, so rows far ahead share few buckets.
    granularity: Option<i64>,
}

impl Timing {
    pub(super) fn new(spec: &IntervalJoinSpec) -> Self {
        let granularity = match (spec.lower, spec.upper) {
            (Some(lower), Some(upper)) => {
                Some((upper.saturating_sub(lower) / 4).max(MIN_GRANULARITY))
            }
            _ => None,
        };
        Self {
            lower: spec.lower,
            upper: spec.upper,
            lags: [spec.left.lag, spec.right.lag],
            granularity,
        }
    }

    /// The latest time of the other side a row of `side` at time `t` can match, given its
    /// bound column's value `until` (see the module doc); `None` when nothing bounds it.
    pub(super) fn reach(&self, side: usize, t: EventTime, until: Option<i64>) -> Option<EventTime> {
        let constant = match side {
            0 => self.upper.map(|u| t.saturating_add(u)),
            _ => self.lower.map(|l| t.saturating_sub(l)),
        };
        match (constant, until) {
            (Some(c), Some(u)) => Some(c.min(u)),
            (c, u) => c.or(u),
        }
    }

    /// The bucket of a row of `side` with reach `reach`: the first watermark (rounded up to
    /// the granularity) at which no row of the other side that it could match can still
    /// come. The granularity of a reach from a column depends on its distance from `from`
    /// (the join's watermark).
    pub(super) fn bucket(&self, side: usize, reach: EventTime, from: EventTime) -> EventTime {
        let expiry = reach.saturating_add(self.lags[1 - side]).saturating_add(1);
        let g = self.granularity.unwrap_or_else(|| {
            let quarter = (expiry.saturating_sub(from) / 4).clamp(MIN_GRANULARITY, MAX_GRANULARITY);
            // The largest power of two not above it: buckets of nearer rows nest in farther ones.
            1i64 << (63 - quarter.leading_zeros())
        });
        let down = expiry.div_euclid(g).saturating_mul(g);
        if down == expiry {
            down
        } else {
            down.saturating_add(g)
        }
    }

    /// The buckets of the other side that can hold matches of rows of `side` with times in
    /// `[from, to]`. A matching row's reach is at least the arriving row's time, so its bucket
    /// ends after that plus the arriving side's lag; with both bounds constant it also ends by
    /// the bucket of the farthest match.
    pub(super) fn candidates(
        &self,
        side: usize,
        from: EventTime,
        to: EventTime,
    ) -> (EventTime, EventTime) {
        let lo = from.saturating_add(self.lags[side]).saturating_add(1);
        let (Some(lower), Some(upper)) = (self.lower, self.upper) else {
            return (lo, EventTime::MAX);
        };
        let hi = match side {
            // b in [ta + lower, ta + upper], b's reach tb - lower
            0 => to.saturating_add(upper).saturating_sub(lower),
            // a in [tb - upper, tb - lower], a's reach ta + upper
            _ => to.saturating_sub(lower).saturating_add(upper),
        };
        (lo, self.bucket(1 - side, hi, EventTime::MIN))
    }

    /// The times of the other side's rows that can match rows of `side` with times in
    /// `[from, to]` and reaches up to `farthest`: `b` in `[ta + lower, max reach]`, `a` in
    /// `[tb - upper, tb - lower]`, unbounded where a constant bound is missing.
    pub(super) fn partner_times(
        &self,
        side: usize,
        from: EventTime,
        to: EventTime,
        farthest: EventTime,
    ) -> (EventTime, EventTime) {
        match side {
            0 => (
                self.lower
                    .map_or(EventTime::MIN, |l| from.saturating_add(l)),
                farthest,
            ),
            _ => (
                self.upper
                    .map_or(EventTime::MIN, |u| from.saturating_sub(u)),
                self.lower.map_or(EventTime::MAX, |l| to.saturating_sub(l)),
            ),
        }
    }

    /// How far the output watermark stays behind the input's; `None` when a reach comes from
    /// a column (a pair may then hold a row of any age: the join holds its output watermark
    /// back entirely until the end of input).
    pub(super) fn holdback(&self) -> Option<i64> {
        let (Some(lower), Some(upper), Some(g)) = (self.lower, self.upper, self.granularity) else {
            return None;
        };
        let reach = upper.max(lower.saturating_neg()).max(0);
        Some(
            self.lags[0]
                .max(self.lags[1])
                .saturating_add(reach)
                .saturating_add(g),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::physical_expr::expressions::Column;

    use crate::message::WATERMARK_MIN;
    use crate::operators::{IntervalSide, JoinKind};

    const MS: i64 = 1_000_000;

    fn side(lag: i64) -> IntervalSide {
        IntervalSide {
            schema: Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, true),
                Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
            ])),
            keys: vec![Arc::new(Column::new("k", 0))],
            time: 1,
            lag,
            until: None,
        }
    }

    fn timing(lower: Option<i64>, upper: Option<i64>, lags: (i64, i64)) -> Timing {
        let spec = IntervalJoinSpec {
            kind: JoinKind::Inner,
            left: side(lags.0),
            right: side(lags.1),
            lower,
            upper,
            filter: None,
            joined_schema: Arc::new(Schema::empty()),
            description: String::new(),
        };
        Timing::new(&spec)
    }

    /// The bucket of a row of `side` at `t` without a bound column.
    fn at(t: &Timing, side: usize, time: EventTime) -> EventTime {
        t.bucket(side, t.reach(side, time, None).unwrap(), WATERMARK_MIN)
    }

    #[test]
    fn a_row_expires_once_no_match_can_come() {
        // b in [a - 10 ms, a + 20 ms]; granularity 7.5 ms.
        let t = timing(Some(-10 * MS), Some(20 * MS), (0, 0));
        assert_eq!(t.granularity, Some(7_500_000));
        // a at 100 ms can match b up to 120 ms: it expires once W > 120 ms, in the bucket
        // rounding 120 ms + 1 ns up to the granularity.
        assert_eq!(at(&t, 0, 100 * MS), 127_500_000);
        // b at 100 ms can match a up to 110 ms.
        assert_eq!(at(&t, 1, 100 * MS), 112_500_000);
        // A bound column below the interval's reach ends the row earlier.
        assert_eq!(t.reach(0, 100 * MS, Some(105 * MS)), Some(105 * MS));
        assert_eq!(t.reach(0, 100 * MS, Some(200 * MS)), Some(120 * MS));
        // A lag on the other side keeps a row longer by as much.
        let lagged = timing(Some(-10 * MS), Some(20 * MS), (0, 5 * MS));
        assert_eq!(at(&lagged, 0, 100 * MS), 127_500_000);
        assert_eq!(at(&lagged, 0, 103 * MS), 135_000_000);
        assert_eq!(lagged.holdback(), Some(5 * MS + 20 * MS + 7_500_000));
    }

    #[test]
    fn rows_reaching_by_a_column_share_power_of_two_buckets() {
        // b >= a, b <= a's bound column: no upper bound, no holdback.
        let t = timing(Some(0), None, (0, 4_000 * MS));
        assert_eq!(t.granularity, None);
        assert_eq!(t.holdback(), None);
        assert_eq!(t.reach(0, 100 * MS, None), None);
        assert_eq!(t.reach(1, 100 * MS, None), Some(100 * MS));
        let watermark = 1_000 * MS;
        for reach in [
            0,
            990 * MS,
            1_001 * MS,
            1_300 * MS,
            90_000 * MS,
            9_000_000 * MS,
        ] {
            let end = t.bucket(0, reach, watermark);
            let expiry = reach + 4_000 * MS + 1;
            let slack = ((expiry - watermark) / 4).clamp(MIN_GRANULARITY, MAX_GRANULARITY);
            assert!(end >= expiry, "{reach}: {end} < {expiry}");
            // Kept past its expiry by less than a quarter of its distance from the watermark
            // (within the limits).
            assert!(end - expiry < slack, "{reach}: {end} far past {expiry}");
        }
        // Before any watermark, the largest granularity.
        assert_eq!(t.bucket(0, 0, WATERMARK_MIN) % MAX_GRANULARITY, 0);
    }

    #[test]
    fn candidates_cover_every_bucket_a_match_can_be_in() {
        let t = timing(Some(-10 * MS), Some(20 * MS), (0, 3 * MS));
        for ta in [0, 7 * MS, 100 * MS + 1] {
            let (lo, hi) = t.candidates(0, ta, ta);
            for tb in (ta - 10 * MS..=ta + 20 * MS).step_by(MS as usize / 2) {
                let b = at(&t, 1, tb);
                assert!(lo <= b && b <= hi, "a {ta} b {tb}: {b} not in {lo}..={hi}");
            }
            let (lo, hi) = t.candidates(1, ta, ta);
            for tl in (ta - 20 * MS..=ta + 10 * MS).step_by(MS as usize / 2) {
                let a = at(&t, 0, tl);
                assert!(lo <= a && a <= hi, "b {ta} a {tl}: {a} not in {lo}..={hi}");
            }
        }
        // Reaches from a column: an a row matches b up to its reach; whatever the watermark
        // when the a row was bucketed, the b rows it matches find its bucket.
        let t = timing(Some(0), None, (2 * MS, 3 * MS));
        for (ta, reach, watermark) in [(0, 5 * MS, WATERMARK_MIN), (50 * MS, 900 * MS, 40 * MS)] {
            let a = t.bucket(0, reach, watermark);
            for tb in (ta..=reach).step_by(MS as usize / 2) {
                let (lo, hi) = t.candidates(1, tb, tb);
                assert!(lo <= a && a <= hi, "a {ta} b {tb}: {a} not in {lo}..={hi}");
                let b = t.bucket(1, t.reach(1, tb, None).unwrap(), watermark);
                let (lo, hi) = t.candidates(0, ta, ta);
                assert!(lo <= b && b <= hi, "a {ta} b {tb}: {b} not in {lo}..={hi}");
            }
        }
    }
}
