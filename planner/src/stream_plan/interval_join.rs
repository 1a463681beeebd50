//! Planning interval joins: `a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL x AND
//! a.ts + INTERVAL y`, both inputs behind a keyed exchange on the equality keys (one instance
//! without keys), joined by [`IntervalJoinSpec`].
//!
//! Each side's time column must be an event-time column the watermark vouches for: a
//! table's WATERMARK column read through projections and filters (its source then drops the
//! rows below their own watermark, so lateness is decided per row, as for windows; see
//! `interval.rs`), or `window_start` / `window_end` of a windowed relation (a window TVF, a
//! windowed aggregate), whose rows never come after the watermark that passed their window.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, DFSchemaRef};
use datafusion::logical_expr::Join;
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{IntervalJoinSpec, IntervalSide, JoinKind, Until};

use super::interval::{interval_condition, reach_condition, IntervalCondition, ReachCondition};
use super::join::JoinKeys;
use super::{arrow_schema, Stream, StreamPlanner};
use crate::error::Result;
use crate::{invalid, not_supported};

/// Where a side's event time is and how far below the watermark its rows may come.
#[derive(Debug, Clone, Copy)]
struct EventTimeColumn {
    index: usize,
    lag: i64,
}

/// The event-time column `column` of `stream`, if it is one.
fn event_time(stream: &Stream, column: &Column) -> Option<EventTimeColumn> {
    let index = stream.schema.index_of_column(column).ok()?;
    if stream.rowtime[index] {
        return Some(EventTimeColumn { index, lag: 0 });
    }
    stream.windows[index].map(|w| EventTimeColumn {
        index,
        lag: w.shift(),
    })
}

fn not_event_time(column: &Column) -> crate::error::PlanError {
    invalid!(
        "interval join: {column} has no watermark; each side's time must be a table's WATERMARK FOR column or the window_start / window_end of a windowed relation"
    )
}

impl StreamPlanner<'_> {
    /// The interval join of `join`, or `None` when its condition bounds no event times (then
    /// it is a window join or a join over bounded input). Errors say why a condition that
    /// compares event times cannot run as an interval join.
    pub(super) fn plan_interval_join(
        &mut self,
        join: &Join,
        kind: JoinKind,
        left: &Stream,
        right: &Stream,
        keys: &JoinKeys,
    ) -> Result<Option<Stream>> {
        let Some(condition) = interval_condition(join) else {
            return Ok(None);
        };
        let times = (
            event_time(left, &condition.left),
            event_time(right, &condition.right),
        );
        let judged = [(left, &condition.left), (right, &condition.right)]
            .iter()
            .any(|(s, c)| s.schema.index_of_column(c).is_ok_and(|i| s.rowtime[i]));
        // A condition that does not bound how long each side's rows can match (by a
        // constant interval, or by a column of their own: [`reach_condition`]), or a semi /
        // anti join, is not an interval join but a join with a filter: a regular join over unbounded
        // input (as in Flink and RisingWave, keeping every row), run once at the end over
        // bounded input. So is one whose times are not event times, unless a side's scan
        // was already judged against its watermark for it ([`super::interval::judged_scans`]).
        if !kind.pairs() {
            return Ok(None);
        }
        if condition.lower.is_none() || condition.upper.is_none() {
            // Event times compared by something that is not a constant interval: an interval
            // join written wrong, more likely than a join meant to keep every row.
            if let (true, Some(problem)) = (judged, &condition.problem) {
                return Err(not_supported!(
                    "interval join bounds must be constant intervals: {problem}"
                ));
            }
            // A side's reach from a column of its rows (`b.ts BETWEEN a.ts AND a.expires`).
            let streams = [left, right];
            let is_time = |side: usize, c: &Column| event_time(streams[side], c).is_some();
            return match reach_condition(join, is_time) {
                Some(reach) => self.reach_join(join, kind, (left, right), keys, &reach),
                None => Ok(None),
            };
        }
        let (ltime, rtime) = match times {
            (Some(l), Some(r)) => (l, r),
            _ if !judged => return Ok(None),
            (None, _) => return Err(not_event_time(&condition.left)),
            (_, None) => return Err(not_event_time(&condition.right)),
        };
        let (lower, upper) = bounds(&condition)?;
        let text = description(join, keys, &condition, (Some(lower), Some(upper)), &[]);
        let sides = [
            side(left, &keys.left, ltime, None),
            side(right, &keys.right, rtime, None),
        ];
        self.interval_stream(
            join,
            kind,
            (left, right),
            keys,
            sides,
            (Some(lower), Some(upper)),
            text,
        )
        .map(Some)
    }

    /// The interval join of a [`ReachCondition`]: `None` when a bound column is not a
    /// timestamp (then a regular join).
    fn reach_join(
        &mut self,
        join: &Join,
        kind: JoinKind,
        (left, right): (&Stream, &Stream),
        keys: &JoinKeys,
        reach: &ReachCondition,
    ) -> Result<Option<Stream>> {
        let c = &reach.times;
        let (Some(ltime), Some(rtime)) = (event_time(left, &c.left), event_time(right, &c.right))
        else {
            return Ok(None);
        };
        let until = |s: &Stream, bound: &Option<(Column, i64)>| -> Option<Option<Until>> {
            let Some((column, offset)) = bound else {
                return Some(None);
            };
            let index = s.schema.index_of_column(column).ok()?;
            matches!(s.schema.field(index).data_type(), DataType::Timestamp(..)).then_some(Some(
                Until {
                    column: index,
                    offset: *offset,
                },
            ))
        };
        let (Some(lu), Some(ru)) = (
            until(left, &reach.left_until),
            until(right, &reach.right_until),
        ) else {
            return Ok(None);
        };
        let untils: Vec<(String, &Column, i64)> = [
            reach
                .left_until
                .as_ref()
                .map(|(col, o)| (c.right.to_string(), col, *o)),
            reach
                .right_until
                .as_ref()
                .map(|(col, o)| (c.left.to_string(), col, *o)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let text = description(join, keys, c, (c.lower, c.upper), &untils);
        let sides = [
            side(left, &keys.left, ltime, lu),
            side(right, &keys.right, rtime, ru),
        ];
        self.interval_stream(
            join,
            kind,
            (left, right),
            keys,
            sides,
            (c.lower, c.upper),
            text,
        )
        .map(Some)
    }

    /// The interval join stage of `join` with these sides and constant bounds.
    #[allow(clippy::too_many_arguments)]
    fn interval_stream(
        &mut self,
        join: &Join,
        kind: JoinKind,
        (left, right): (&Stream, &Stream),
        keys: &JoinKeys,
        [left_side, right_side]: [IntervalSide; 2],
        (lower, upper): (Option<i64>, Option<i64>),
        description: String,
    ) -> Result<Stream> {
        let merged = DFSchemaRef::new(left.schema.join(&right.schema)?);
        let filter = match &join.filter {
            Some(f) => Some(self.physical(f, &merged)?),
            None => None,
        };
        let spec = IntervalJoinSpec {
            kind,
            left: left_side,
            right: right_side,
            lower,
            upper,
            filter,
            joined_schema: arrow_schema(&join.schema),
            description,
        };
        let stage = self.join_stage(left, right, keys, Arc::new(spec));
        let columns = join.schema.fields().len();
        Ok(Stream {
            stage,
            schema: join.schema.clone(),
            // Pairs carry times below the (held back) input watermark: no window or
            // event-time column survives the join.
            windows: vec![None; columns],
            rowtime: vec![false; columns],
            bounded: left.bounded && right.bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        })
    }
}

fn side(
    s: &Stream,
    keys: &[Arc<dyn PhysicalExpr>],
    time: EventTimeColumn,
    until: Option<Until>,
) -> IntervalSide {
    IntervalSide {
        schema: arrow_schema(&s.schema),
        keys: keys.to_vec(),
        time: time.index,
        lag: time.lag,
        until,
    }
}

/// Both bounds on `right - left`, checked.
fn bounds(c: &IntervalCondition) -> Result<(i64, i64)> {
    let (Some(lower), Some(upper)) = (c.lower, c.upper) else {
        return Err(invalid!(
            "interval join of {} and {} without both bounds",
            c.left,
            c.right
        ));
    };
    if lower > upper {
        return Err(invalid!(
            "interval join: the interval is empty ({} - {} must be at least {} and at most {}), so nothing can match",
            c.right,
            c.left,
            duration_text(lower),
            duration_text(upper)
        ));
    }
    Ok((lower, upper))
}

/// Nanoseconds in the largest unit that shows them exactly (`-1500ms`, `10s`, `1ns`).
pub(super) fn duration_text(nanos: i64) -> String {
    let units = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    match units.iter().find(|(n, _)| nanos % n == 0) {
        Some((n, unit)) => format!("{}{unit}", nanos / n),
        None => format!("{nanos}ns"),
    }
}

/// One line for EXPLAIN: the keys, the bounds on `right - left` (`-inf` / `+inf` where
/// unbounded), the column bounds (`time <= column + offset`), the filter.
fn description(
    join: &Join,
    keys: &JoinKeys,
    c: &IntervalCondition,
    (lower, upper): (Option<i64>, Option<i64>),
    untils: &[(String, &Column, i64)],
) -> String {
    let untils: String = untils
        .iter()
        .map(|(time, column, offset)| match offset {
            0 => format!(", {time} <= {column}"),
            o => format!(", {time} <= {column} + {}", duration_text(*o)),
        })
        .collect();
    format!(
        "IntervalJoin ({}): on [{}], {} - {} in [{}, {}]{untils}{}",
        join.join_type,
        keys.text.join(", "),
        c.right,
        c.left,
        lower.map_or("-inf".into(), duration_text),
        upper.map_or("+inf".into(), duration_text),
        join.filter
            .as_ref()
            .map(|f| format!(", filter {f}"))
            .unwrap_or_default()
    )
}
