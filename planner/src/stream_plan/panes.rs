//! Which HOP sources run in panes ([`weir_engine::panes`]): each row goes out of the source
//! once, in its pane, instead of once per window, and the aggregation over it combines panes
//! into windows after its local phase.
//!
//! A source runs in panes when every scan of it feeds a window aggregation directly: through
//! projections that pass the window columns on as plain columns, filters that do not read
//! them, and an aggregate that groups by one of them and reads none in its aggregates. Then
//! nothing sees a pane's window columns but the aggregation, which knows them for panes.

use std::collections::HashSet;

use datafusion::common::Column;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};
use weir_engine::panes::Panes;

use super::source::source_key;
use crate::catalog::Catalog;
use crate::context::{ScanKind, StreamTableSource};
use crate::window_tvf::WINDOW_COLUMNS;

/// The source (its [`source_key`]) and panes of an aggregation that can run in panes.
pub(super) fn pane_aggregate(agg: &Aggregate, catalog: &Catalog) -> Option<(String, Panes)> {
    let (key, panes, windows) = window_columns(&agg.input, catalog)?;
    let reads_window = |e: &Expr| {
        e.column_refs()
            .into_iter()
            .any(|c| is_window(&agg.input, &windows, c))
    };
    let mut grouped = false;
    for e in &agg.group_expr {
        match e.clone().unalias() {
            Expr::Column(c) if is_window(&agg.input, &windows, &c) => grouped = true,
            e if reads_window(&e) => return None,
            _ => {}
        }
    }
    (grouped && !agg.aggr_expr.iter().any(reads_window)).then_some((key, panes))
}

fn is_window(plan: &LogicalPlan, windows: &HashSet<usize>, c: &Column) -> bool {
    plan.schema()
        .index_of_column(c)
        .is_ok_and(|i| windows.contains(&i))
}

/// For a plan that passes a HOP source's rows on unchanged but for projections and filters:
/// the source, its panes, and which output columns hold its window columns as they are.
fn window_columns(
    plan: &LogicalPlan,
    catalog: &Catalog,
) -> Option<(String, Panes, HashSet<usize>)> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let source = scan.source.as_ref().downcast_ref::<StreamTableSource>()?;
            let ScanKind::Window(w) = &source.kind else {
                return None;
            };
            if catalog.view(&w.table).is_some() || scan.fetch.is_some() || !scan.filters.is_empty()
            {
                return None;
            }
            let panes = Panes::of(&w.spec)?;
            let first = source
                .schema
                .fields()
                .len()
                .checked_sub(WINDOW_COLUMNS.len())?;
            let windows = match &scan.projection {
                Some(cols) => cols
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c >= first)
                    .map(|(i, _)| i)
                    .collect(),
                None => (first..source.schema.fields().len()).collect(),
            };
            Some((source_key(source, false), panes, windows))
        }
        LogicalPlan::Projection(p) => {
            let (key, panes, inner) = window_columns(&p.input, catalog)?;
            let mut windows = HashSet::new();
            for (i, e) in p.expr.iter().enumerate() {
                match e.clone().unalias() {
                    Expr::Column(c) if is_window(&p.input, &inner, &c) => {
                        windows.insert(i);
                    }
                    e => {
                        if e.column_refs()
                            .into_iter()
                            .any(|c| is_window(&p.input, &inner, c))
                        {
                            return None;
                        }
                    }
                }
            }
            Some((key, panes, windows))
        }
        LogicalPlan::Filter(f) => {
            let found = window_columns(&f.input, catalog)?;
            let reads = f
                .predicate
                .column_refs()
                .into_iter()
                .any(|c| is_window(&f.input, &found.2, c));
            (!reads).then_some(found)
        }
        LogicalPlan::SubqueryAlias(a) => window_columns(&a.input, catalog),
        _ => None,
    }
}
