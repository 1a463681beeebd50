//! Interval conditions of joins, read from the logical plan: `b.ts BETWEEN a.ts - INTERVAL x
//! AND a.ts + INTERVAL y` and its other spellings (`>`, `>=`, `<`, `<=` pairs, the interval on
//! either side, `b.ts - a.ts <= INTERVAL ...`) as bounds on `right.ts - left.ts`; and the
//! scans feeding an interval join, whose rows their source must judge against their own
//! watermark (the pre-pass of the stream planner, so that those scans get a source of their
//! own, see [`judged_scans`]).

use std::collections::HashSet;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, JoinType, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    Between, BinaryExpr, Expr, ExprSchemable, Join, LogicalPlan, Operator, TableScan,
};

use crate::catalog::Catalog;
use crate::context::{ScanKind, StreamTableSource};

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// What a join's ON condition says about one pair of time columns, one of each side.
#[derive(Debug, Clone)]
pub(super) struct IntervalCondition {
    /// The time column of each side.
    pub left: Column,
    pub right: Column,
    /// Bounds on `right - left`, nanoseconds, inclusive.
    pub lower: Option<i64>,
    pub upper: Option<i64>,
    /// Why a comparison of the two sides' times could not be read as a bound.
    pub problem: Option<String>,
}

/// The pair of time columns the ON condition bounds (the first with both bounds, else the
/// first compared at all), or `None` when it compares no timestamps of the two sides.
pub(super) fn interval_condition(join: &Join) -> Option<IntervalCondition> {
    let mut found = time_comparisons(join);
    let complete = found
        .iter()
        .position(|c| c.lower.is_some() && c.upper.is_some());
    match complete {
        Some(i) => Some(found.swap_remove(i)),
        None => found.into_iter().next(),
    }
}

/// What the ON condition says about each pair of time columns it compares, one of each side.
fn time_comparisons(join: &Join) -> Vec<IntervalCondition> {
    let mut found: Vec<IntervalCondition> = Vec::new();
    let (Some(filter), Ok(schema)) = (
        join.filter.as_ref(),
        join.left.schema().join(join.right.schema()),
    ) else {
        return found;
    };
    for conjunct in split_conjunction(filter) {
        for (a, op, b) in comparisons(conjunct) {
            read_comparison(join, &schema, (a, op, b), &mut found);
        }
    }
    found
}

/// An interval condition where a side's reach is a column of its rows rather than a constant
/// past its time: `b.ts BETWEEN a.ts AND a.expires` (Nexmark q4 and q9) bounds `b.ts - a.ts`
/// below by 0, and `b.ts` above by each `a` row's `expires`. Each side's rows then still end:
/// an `a` row once `b`'s watermark passes its `expires`, a `b` row once `a`'s passes `b.ts`.
#[derive(Debug, Clone)]
pub(super) struct ReachCondition {
    /// The two sides' event times, with at most one constant bound.
    pub times: IntervalCondition,
    /// `right time <= left column + offset` (nanoseconds).
    pub left_until: Option<(Column, i64)>,
    /// `left time <= right column + offset`.
    pub right_until: Option<(Column, i64)>,
}

/// The [`ReachCondition`] of `join`, if its ON condition compares two event times (as
/// `is_time(side, column)` tells) without bounding their difference on both ends, and bounds
/// each side's reach, by a constant or by a column of its own. `None` for an ordinary
/// interval (both bounds constant) and for conditions that leave a side's rows unbounded.
pub(super) fn reach_condition(
    join: &Join,
    is_time: impl Fn(usize, &Column) -> bool,
) -> Option<ReachCondition> {
    let found = time_comparisons(join);
    let readable = |c: &&IntervalCondition| c.problem.is_none();
    let times = found
        .iter()
        .filter(readable)
        .find(|c| is_time(0, &c.left) && is_time(1, &c.right))?;
    if times.lower.is_some() && times.upper.is_some() {
        return None;
    }
    let left_until = found
        .iter()
        .filter(readable)
        .filter(|c| c.right == times.right && c.left != times.left)
        .find_map(|c| c.upper.map(|u| (c.left.clone(), u)));
    let right_until = found
        .iter()
        .filter(readable)
        .filter(|c| c.left == times.left && c.right != times.right)
        .find_map(|c| c.lower.map(|l| (c.right.clone(), l.saturating_neg())));
    let ends = (times.upper.is_some() || left_until.is_some())
        && (times.lower.is_some() || right_until.is_some());
    ends.then(|| ReachCondition {
        times: times.clone(),
        left_until,
        right_until,
    })
}

/// The comparisons a conjunct makes: `a op b`, and `x BETWEEN lo AND hi` as `x >= lo`, `x <= hi`.
fn comparisons(e: &Expr) -> Vec<(&Expr, Operator, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) =>
        {
            vec![(left.as_ref(), *op, right.as_ref())]
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => vec![
            (expr.as_ref(), Operator::GtEq, low.as_ref()),
            (expr.as_ref(), Operator::LtEq, high.as_ref()),
        ],
        _ => Vec::new(),
    }
}

/// Records what `a op b` bounds, if it compares timestamps of both sides.
fn read_comparison(
    join: &Join,
    schema: &DFSchema,
    (a, op, b): (&Expr, Operator, &Expr),
    found: &mut Vec<IntervalCondition>,
) {
    let is_time = |e: &Expr| {
        matches!(
            e.get_type(schema),
            Ok(DataType::Timestamp(..) | DataType::Duration(_) | DataType::Interval(_))
        )
    };
    if !is_time(a) || !is_time(b) {
        return;
    }
    let side_of = |c: &Column| {
        if join.left.schema().has_column(c) {
            Some(0)
        } else if join.right.schema().has_column(c) {
            Some(1)
        } else {
            None
        }
    };
    let mut columns: Vec<Column> = a
        .column_refs()
        .into_iter()
        .chain(b.column_refs())
        .cloned()
        .collect();
    columns.sort_by_key(|c| c.flat_name());
    let left = columns.iter().find(|c| side_of(c) == Some(0));
    let right = columns.iter().find(|c| side_of(c) == Some(1));
    let (Some(left), Some(right)) = (left.cloned(), right.cloned()) else {
        return;
    };
    let slot = match found
        .iter()
        .position(|c| c.left == left && c.right == right)
    {
        Some(i) => i,
        None => {
            found.push(IntervalCondition {
                left: left.clone(),
                right: right.clone(),
                lower: None,
                upper: None,
                problem: None,
            });
            found.len() - 1
        }
    };
    let condition = &mut found[slot];
    match bound(a, op, b, &left, &right) {
        Ok(Some((op, c))) => condition.add(op, c),
        Ok(None) => {
            condition.problem.get_or_insert(format!(
                "{a} {op} {b} does not bound {right} - {left} by a constant interval"
            ));
        }
        Err(why) => {
            condition
                .problem
                .get_or_insert(format!("{a} {op} {b}: {why}"));
        }
    }
}

impl IntervalCondition {
    /// `right - left op c`.
    fn add(&mut self, op: Operator, c: i64) {
        let (lower, upper) = match op {
            Operator::GtEq => (Some(c), None),
            Operator::Gt => (Some(c.saturating_add(1)), None),
            Operator::LtEq => (None, Some(c)),
            Operator::Lt => (None, Some(c.saturating_sub(1))),
            _ => (None, None),
        };
        if let Some(l) = lower {
            self.lower = Some(self.lower.map_or(l, |x| x.max(l)));
        }
        if let Some(u) = upper {
            self.upper = Some(self.upper.map_or(u, |x| x.min(u)));
        }
    }
}

/// `a op b` as `right - left op' c`: `Ok(None)` when it is not of that form.
fn bound(
    a: &Expr,
    op: Operator,
    b: &Expr,
    left: &Column,
    right: &Column,
) -> Result<Option<(Operator, i64)>, String> {
    let (Some(mut diff), Some(lb)) = (linear(a)?, linear(b)?) else {
        return Ok(None);
    };
    // a - b op 0
    for (c, s) in lb.terms {
        diff.add_term(c, -s);
    }
    diff.constant = diff.constant.saturating_sub(lb.constant);
    diff.terms.retain(|(_, s)| *s != 0);
    let coefficient = |col: &Column| {
        diff.terms
            .iter()
            .find(|(c, _)| c == col)
            .map_or(0, |(_, s)| *s)
    };
    let (r, l) = (coefficient(right), coefficient(left));
    if diff.terms.len() != 2 || r.abs() != 1 || l != -r {
        return Ok(None);
    }
    // r * (right - left) + k op 0
    let k = diff.constant;
    Ok(Some(if r == 1 {
        (op, k.saturating_neg())
    } else {
        (flip(op), k)
    }))
}

/// `x op y` as `y flip(op) x`.
fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// A sum of columns (each counted with a sign) and a constant in nanoseconds.
#[derive(Debug, Default)]
struct Linear {
    terms: Vec<(Column, i64)>,
    constant: i64,
}

impl Linear {
    fn add_term(&mut self, column: Column, sign: i64) {
        match self.terms.iter_mut().find(|(c, _)| *c == column) {
            Some((_, s)) => *s += sign,
            None => self.terms.push((column, sign)),
        }
    }
}

/// `e` as columns plus and minus constant intervals (`Ok(None)`: it is something else; `Err`:
/// an interval without a fixed length).
fn linear(e: &Expr) -> Result<Option<Linear>, String> {
    match e {
        Expr::Column(c) => Ok(Some(Linear {
            terms: vec![(c.clone(), 1)],
            constant: 0,
        })),
        Expr::Alias(a) => linear(&a.expr),
        Expr::Cast(c) if time_type(c.field.data_type()) => linear(&c.expr),
        Expr::TryCast(c) if time_type(c.field.data_type()) => linear(&c.expr),
        Expr::Literal(v, _) => Ok(interval_nanos(v)?.map(|constant| Linear {
            terms: Vec::new(),
            constant,
        })),
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus) =>
        {
            let (Some(mut l), Some(r)) = (linear(left)?, linear(right)?) else {
                return Ok(None);
            };
            let sign = if *op == Operator::Plus { 1 } else { -1 };
            for (c, s) in r.terms {
                l.add_term(c, sign * s);
            }
            l.constant = l.constant.saturating_add(sign * r.constant);
            Ok(Some(l))
        }
        _ => Ok(None),
    }
}

fn time_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Timestamp(..) | DataType::Duration(_) | DataType::Interval(_)
    )
}

/// A constant interval or duration in nanoseconds.
fn interval_nanos(v: &ScalarValue) -> Result<Option<i64>, String> {
    let months = || Err("an INTERVAL in months or years has no fixed length".to_string());
    Ok(match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) => {
            if i.months != 0 {
                return months();
            }
            Some(
                (i.days as i64)
                    .saturating_mul(NANOS_PER_DAY)
                    .saturating_add(i.nanoseconds),
            )
        }
        ScalarValue::IntervalDayTime(Some(i)) => Some(
            (i.days as i64)
                .saturating_mul(NANOS_PER_DAY)
                .saturating_add((i.milliseconds as i64).saturating_mul(1_000_000)),
        ),
        ScalarValue::IntervalYearMonth(Some(_)) => return months(),
        ScalarValue::DurationSecond(Some(s)) => Some(s.saturating_mul(1_000_000_000)),
        ScalarValue::DurationMillisecond(Some(s)) => Some(s.saturating_mul(1_000_000)),
        ScalarValue::DurationMicrosecond(Some(s)) => Some(s.saturating_mul(1_000)),
        ScalarValue::DurationNanosecond(Some(s)) => Some(*s),
        _ => None,
    })
}

/// The scans whose event time is compared by an interval condition of a join (through
/// projections, filters and aliases only), known by their address in `plan`.
///
/// The source of such a scan drops the rows below their own watermark
/// ([`weir_engine::EventTimeSpec::out_of_bound`]), so the scan is planned with a source of its
/// own: another scan of the same table (read by a window or by nothing time-bound) keeps
/// every row.
pub(super) fn judged_scans(plan: &LogicalPlan, catalog: &Catalog) -> HashSet<usize> {
    let mut judged = HashSet::new();
    let _ = plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            let pairs = matches!(
                join.join_type,
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
            );
            // Both bounds, or a comparison of times that is not a constant interval (which
            // the join refuses): the scans are then judged against their watermark.
            let bounded = |c: &IntervalCondition| {
                (c.lower.is_some() && c.upper.is_some()) || c.problem.is_some()
            };
            // Or a side's reach bounded by a column of its rows (`b.ts BETWEEN a.ts AND
            // a.expires`) between two WATERMARK columns.
            let sides = [&join.left, &join.right];
            let is_time =
                |side: usize, c: &Column| watermark_scan(sides[side], c, catalog).is_some();
            let times = interval_condition(join)
                .filter(|c| pairs && bounded(c))
                .or_else(|| {
                    pairs
                        .then(|| reach_condition(join, is_time))
                        .flatten()
                        .map(|r| r.times)
                });
            if let Some(c) = times {
                for (side, column) in [(&join.left, &c.left), (&join.right, &c.right)] {
                    if let Some(scan) = watermark_scan(side, column, catalog) {
                        judged.insert(scan_id(scan));
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    judged
}

/// How [`judged_scans`] knows a scan: its address in the plan being planned.
pub(super) fn scan_id(scan: &TableScan) -> usize {
    scan as *const TableScan as usize
}

/// The scan of a table whose WATERMARK column `column` (of `plan`'s output) is.
fn watermark_scan<'a>(
    plan: &'a LogicalPlan,
    column: &Column,
    catalog: &Catalog,
) -> Option<&'a TableScan> {
    let index = plan.schema().index_of_column(column).ok()?;
    scan_of_column(plan, index, catalog)
}

fn scan_of_column<'a>(
    plan: &'a LogicalPlan,
    index: usize,
    catalog: &Catalog,
) -> Option<&'a TableScan> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => scan_of_column(&a.input, index, catalog),
        LogicalPlan::Filter(f) => scan_of_column(&f.input, index, catalog),
        LogicalPlan::Projection(p) => match p.expr.get(index)? {
            Expr::Column(c) => watermark_scan(&p.input, c, catalog),
            Expr::Alias(a) => match a.expr.as_ref() {
                Expr::Column(c) => watermark_scan(&p.input, c, catalog),
                _ => None,
            },
            _ => None,
        },
        LogicalPlan::TableScan(scan) => {
            let source = scan.source.as_ref().downcast_ref::<StreamTableSource>()?;
            let ScanKind::Table(table) = &source.kind else {
                return None;
            };
            let column = match &scan.projection {
                Some(p) => *p.get(index)?,
                None => index,
            };
            let def = catalog.get(table)?;
            let watermark = def.watermark.as_ref()?;
            (def.schema.index_of(&watermark.column).ok()? == column).then_some(scan)
        }
        _ => None,
    }
}
