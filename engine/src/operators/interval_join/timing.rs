//! When an interval join's rows expire, which bucket holds each, which buckets a probe reads,
//! and how far the output watermark is held back (see the operator's doc).

use super::IntervalJoinSpec;
use crate::message::EventTime;

/// Smallest bucket granularity: 1 ms.
const MIN_GRANULARITY: i64 = 1_000_000;

/// When rows expire, which buckets hold them, how far the output watermark is held back.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    lower: i64,
    upper: i64,
    lags: [i64; 2],
    granularity: i64,
}

impl Timing {
    pub(super) fn new(spec: &IntervalJoinSpec) -> Self {
        let width = spec.upper.saturating_sub(spec.lower);
        Self {
            lower: spec.lower,
            upper: spec.upper,
            lags: [spec.left.lag, spec.right.lag],
            granularity: (width / 4).max(MIN_GRANULARITY),
        }
    }

    /// The bucket of a row of `side` at time `t`: the first watermark (rounded up to the
    /// granularity) at which no row of the other side that it could match can still come.
    pub(super) fn bucket(&self, side: usize, t: EventTime) -> EventTime {
        let expiry = match side {
            0 => t.saturating_add(self.upper).saturating_add(self.lags[1]),
            _ => t.saturating_sub(self.lower).saturating_add(self.lags[0]),
        }
        .saturating_add(1);
        let g = self.granularity;
        let down = expiry.div_euclid(g).saturating_mul(g);
        if down == expiry {
            down
        } else {
            down.saturating_add(g)
        }
    }

    /// The buckets of the other side that can hold matches of rows of `side` with times in
    /// `[from, to]`.
    pub(super) fn candidates(
        &self,
        side: usize,
        from: EventTime,
        to: EventTime,
    ) -> (EventTime, EventTime) {
        match side {
            // b in [ta + lower, ta + upper]
            0 => (
                self.bucket(1, from.saturating_add(self.lower)),
                self.bucket(1, to.saturating_add(self.upper)),
            ),
            // a in [tb - upper, tb - lower]
            _ => (
                self.bucket(0, from.saturating_sub(self.upper)),
                self.bucket(0, to.saturating_sub(self.lower)),
            ),
        }
    }

    /// How far the output watermark stays behind the input's.
    pub(super) fn holdback(&self) -> i64 {
        let reach = self.upper.max(self.lower.saturating_neg()).max(0);
        self.lags[0]
            .max(self.lags[1])
            .saturating_add(reach)
            .saturating_add(self.granularity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::physical_expr::expressions::Column;

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
        }
    }

    fn timing(lower: i64, upper: i64, lags: (i64, i64)) -> Timing {
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

    #[test]
    fn a_row_expires_once_no_match_can_come() {
        // b in [a - 10 ms, a + 20 ms]; granularity 7.5 ms.
        let t = timing(-10 * MS, 20 * MS, (0, 0));
        assert_eq!(t.granularity, 7_500_000);
        // a at 100 ms can match b up to 120 ms: it expires once W > 120 ms, in the bucket
        // rounding 120 ms + 1 ns up to the granularity.
        assert_eq!(t.bucket(0, 100 * MS), 127_500_000);
        // b at 100 ms can match a up to 110 ms.
        assert_eq!(t.bucket(1, 100 * MS), 112_500_000);
        // A lag on the other side keeps a row longer by as much.
        let lagged = timing(-10 * MS, 20 * MS, (0, 5 * MS));
        assert_eq!(lagged.bucket(0, 100 * MS), 127_500_000);
        assert_eq!(lagged.bucket(0, 103 * MS), 135_000_000);
        assert_eq!(lagged.holdback(), 5 * MS + 20 * MS + 7_500_000);
    }

    #[test]
    fn candidates_cover_every_bucket_a_match_can_be_in() {
        let t = timing(-10 * MS, 20 * MS, (0, 3 * MS));
        for ta in [0, 7 * MS, 100 * MS + 1] {
            let (lo, hi) = t.candidates(0, ta, ta);
            for tb in (ta - 10 * MS..=ta + 20 * MS).step_by(MS as usize / 2) {
                let b = t.bucket(1, tb);
                assert!(lo <= b && b <= hi, "a {ta} b {tb}: {b} not in {lo}..={hi}");
            }
            let (lo, hi) = t.candidates(1, ta, ta);
            for tl in (ta - 20 * MS..=ta + 10 * MS).step_by(MS as usize / 2) {
                let a = t.bucket(0, tl);
                assert!(lo <= a && a <= hi, "b {ta} a {tl}: {a} not in {lo}..={hi}");
            }
        }
    }
}
