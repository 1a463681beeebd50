//! Planning the dynamic filter in front of a window join of rows with their own window's MAX
//! or MIN (Nexmark q7: bids joined with the top price of their window on `price = maxprice`).
//!
//! The filter ([`ExtremeFilterSpec`]) keeps only the rows that can still carry the extreme of
//! their window and group, so the other rows never cross the exchange nor wait in the join.
//! It is planned only where dropping those rows cannot change the result:
//! - an inner join, or a semi join keeping the filtered side;
//! - the other side is a GROUP BY (through projections and aliases only) whose group columns
//!   are all matched with `=` by columns of the filtered side, and one pair matches the
//!   filtered side's value column with the group's MAX (MIN) of a column;
//! - the filtered side's rows are the aggregate's input rows: both trace, through
//!   projections, aliases and filters, to scans of the same table (and window) under the same
//!   filters, and each matched pair traces to the same column of it. So the aggregate's
//!   extreme is at least (most) every value the filter compares against, and a row below it
//!   never matches.

use std::sync::Arc;

use datafusion::common::Column;
use datafusion::logical_expr::{Expr, Join, LogicalPlan};
use weir_engine::operators::{Extreme, ExtremeFilterSpec, JoinKind};

use super::join::JoinKeys;
use super::{arrow_schema, Stream, StreamPlanner};
use crate::context::{ScanKind, StreamTableSource};

/// Where a column comes from: a scan's column under the filters above the scan.
struct Lineage<'a> {
    scan: &'a datafusion::logical_expr::TableScan,
    column: String,
    filters: Vec<&'a Expr>,
}

/// One step down from `plan` through an alias or a projection (a plain column reference):
/// its input and the input's column that `column` is. `None` for other nodes.
fn step<'a>(plan: &'a LogicalPlan, column: &Column) -> Option<Option<(&'a LogicalPlan, Column)>> {
    Some(match plan {
        LogicalPlan::SubqueryAlias(a) => {
            let i = a.schema.index_of_column(column).ok()?;
            Some((&a.input, Column::from(a.input.schema().qualified_field(i))))
        }
        LogicalPlan::Projection(p) => {
            let i = p.schema.index_of_column(column).ok()?;
            let Expr::Column(c) = p.expr.get(i)?.clone().unalias() else {
                return None;
            };
            Some((&p.input, c))
        }
        _ => None,
    })
}

/// Traces `column` of `plan`'s output through aliases, projections (plain column references)
/// and filters down to a scan.
fn lineage<'a>(plan: &'a LogicalPlan, column: &Column) -> Option<Lineage<'a>> {
    let mut plan = plan;
    let mut column = column.clone();
    let mut filters = Vec::new();
    loop {
        if let Some((input, c)) = step(plan, &column)? {
            (plan, column) = (input, c);
            continue;
        }
        match plan {
            LogicalPlan::Filter(f) => {
                filters.push(&f.predicate);
                plan = &f.input;
            }
            LogicalPlan::TableScan(scan) => {
                if !scan.filters.is_empty() || scan.fetch.is_some() {
                    return None;
                }
                let i = scan.projected_schema.index_of_column(&column).ok()?;
                let name = scan.projected_schema.field(i).name().clone();
                return Some(Lineage {
                    scan,
                    column: name,
                    filters,
                });
            }
            _ => return None,
        }
    }
}

/// The aggregate `column` of `plan` comes from, with the column's index in its output.
fn aggregate_of<'a>(
    plan: &'a LogicalPlan,
    column: &Column,
) -> Option<(&'a datafusion::logical_expr::Aggregate, usize)> {
    let mut plan = plan;
    let mut column = column.clone();
    loop {
        if let Some((input, c)) = step(plan, &column)? {
            (plan, column) = (input, c);
            continue;
        }
        let LogicalPlan::Aggregate(agg) = plan else {
            return None;
        };
        return Some((agg, agg.schema.index_of_column(&column).ok()?));
    }
}

/// The two lineages reach the same rows (same table or window of it, same filters) and the
/// same column.
fn same(a: &Lineage, b: &Lineage) -> bool {
    let kind = |l: &Lineage| {
        l.scan
            .source
            .as_ref()
            .downcast_ref::<StreamTableSource>()
            .map(|s| match &s.kind {
                ScanKind::Table(t) => (t.clone(), None),
                ScanKind::Window(w) => (
                    w.table.clone(),
                    Some((w.time_column, w.spec, w.partition.clone())),
                ),
            })
    };
    let (ka, kb) = (kind(a), kind(b));
    ka.is_some()
        && ka == kb
        && a.scan.table_name == b.scan.table_name
        && a.column == b.column
        && a.filters == b.filters
}

/// The column of `stream` that `e` names, if it is a plain column.
fn column_of(e: &Expr, stream: &Stream) -> Option<(usize, Column)> {
    let Expr::Column(c) = e.clone().unalias() else {
        return None;
    };
    Some((stream.schema.index_of_column(&c).ok()?, c))
}

impl StreamPlanner<'_> {
    /// The filter to chain into one side's tasks before the join's exchange, with that side
    /// (0 left, 1 right), when the join is one of rows with their window's extreme.
    pub(super) fn extreme_filter(
        &self,
        join: &Join,
        kind: JoinKind,
        left: &Stream,
        right: &Stream,
        keys: &JoinKeys,
    ) -> Option<(usize, ExtremeFilterSpec)> {
        let windows = keys.windows?;
        let sides = [
            (0, &join.left, left, &join.right, windows.0),
            (1, &join.right, right, &join.left, windows.1),
        ];
        for (side, rows_plan, rows, agg_plan, window) in sides {
            let allowed = match side {
                0 => matches!(kind, JoinKind::Inner | JoinKind::LeftSemi),
                _ => matches!(kind, JoinKind::Inner | JoinKind::RightSemi),
            };
            if !allowed {
                continue;
            }
            let pairs: Vec<(&Expr, &Expr)> = join
                .on
                .iter()
                .map(|(l, r)| if side == 0 { (l, r) } else { (r, l) })
                .collect();
            if let Some(spec) = self.extreme_side(&pairs, rows_plan, rows, agg_plan, window) {
                return Some((side, spec));
            }
        }
        None
    }

    fn extreme_side(
        &self,
        pairs: &[(&Expr, &Expr)],
        rows_plan: &LogicalPlan,
        rows: &Stream,
        agg_plan: &LogicalPlan,
        window: weir_engine::operators::WindowColumn,
    ) -> Option<ExtremeFilterSpec> {
        let mut aggregate: Option<&datafusion::logical_expr::Aggregate> = None;
        let mut value = None;
        let mut keys = Vec::new();
        let mut covered = Vec::new();
        for (row_expr, agg_expr) in pairs {
            let (row_index, row_column) = column_of(row_expr, rows)?;
            let Expr::Column(agg_column) = (*agg_expr).clone().unalias() else {
                return None;
            };
            let (agg, index) = aggregate_of(agg_plan, &agg_column)?;
            if aggregate.is_some_and(|a| !std::ptr::eq(a, agg)) {
                return None;
            }
            aggregate = Some(agg);
            let groups = agg.group_expr.len();
            // The input column the pair matches: a group column, or the extreme's argument.
            let input_column = if index < groups {
                covered.push(index);
                if rows.windows[row_index].is_none() {
                    keys.push(row_index);
                }
                let Expr::Column(c) = agg.group_expr[index].clone().unalias() else {
                    return None;
                };
                c
            } else {
                let Expr::AggregateFunction(f) = agg.aggr_expr[index - groups].clone().unalias()
                else {
                    continue;
                };
                let extreme = match f.func.name().to_ascii_lowercase().as_str() {
                    "max" => Extreme::Max,
                    "min" => Extreme::Min,
                    _ => continue,
                };
                let p = &f.params;
                if p.filter.is_some() || !p.order_by.is_empty() || p.args.len() != 1 {
                    continue;
                }
                let Expr::Column(c) = p.args[0].clone().unalias() else {
                    continue;
                };
                if value.is_some() {
                    // A second extreme pair: the first already decides.
                    continue;
                }
                value = Some((row_index, extreme, c.clone()));
                c
            };
            let from_rows = lineage(rows_plan, &row_column)?;
            let from_agg = lineage(&agg.input, &input_column)?;
            if !same(&from_rows, &from_agg) {
                return None;
            }
        }
        let aggregate = aggregate?;
        let (value, extreme, argument) = value?;
        covered.sort_unstable();
        covered.dedup();
        if covered.len() != aggregate.group_expr.len() {
            return None;
        }
        let input_schema = arrow_schema(&rows.schema);
        if !ExtremeFilterSpec::supports(input_schema.field(value).data_type()) {
            return None;
        }
        let names = |cols: &[usize]| {
            cols.iter()
                .map(|&i| rows.schema.field(i).name().clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let description = format!(
            "ExtremeFilter: rows whose {} can be the {}({argument}) of their window{}, before the exchange",
            rows.schema.field(value).name(),
            match extreme {
                Extreme::Max => "max",
                Extreme::Min => "min",
            },
            if keys.is_empty() {
                String::new()
            } else {
                format!(" and [{}]", names(&keys))
            }
        );
        Some(ExtremeFilterSpec {
            window,
            keys,
            value,
            extreme,
            input_schema: Arc::clone(&input_schema),
            description,
        })
    }
}
