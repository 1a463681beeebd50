//! Planning Top-N and deduplication: a filter on `ROW_NUMBER() OVER (PARTITION BY
//! window_start, window_end [, keys] ORDER BY ...)` becomes a [`WindowTopNSpec`] behind a
//! keyed exchange on the partition keys (or, without any, on the window column); without the
//! window columns, a [`TopNSpec`] keyed by the partition keys.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Filter, LogicalPlan, Operator, Projection, Window,
};
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{TopNSpec, WindowColumn, WindowEdge, WindowTopNSpec};

use super::{arrow_schema, exprs_text, Stream, StreamPlanner};
use crate::error::Result;
use crate::{invalid, not_supported};

const USAGE: &str = "a Top-N is ROW_NUMBER() OVER ([PARTITION BY [window_start, window_end,] keys] ORDER BY ...) filtered by rownum <= N (or < N, = N, BETWEEN a AND b)";

/// The row numbers a filter keeps: `first..=last`.
struct Kept {
    first: i128,
    last: i128,
}

impl StreamPlanner<'_> {
    /// A filter over a window function, directly or through a projection of its result (as
    /// the optimizer leaves it when columns are dropped or renamed): a window Top-N.
    /// `None`: the filter is not over a window function.
    pub(super) fn plan_top_n_filter(&mut self, filter: &Filter) -> Result<Option<Stream>> {
        let rank_unused = self
            .rank_unused
            .take_if(|f| *f == filter as *const _ as usize)
            .is_some();
        match filter.input.as_ref() {
            LogicalPlan::Window(w) => self.plan_top_n(&filter.predicate, w, rank_unused).map(Some),
            LogicalPlan::Projection(p) => {
                let LogicalPlan::Window(w) = p.input.as_ref() else {
                    return Ok(None);
                };
                let predicate = below_projection(&filter.predicate, p)?;
                let stream = self.plan_top_n(&predicate, w, rank_unused)?;
                self.project(stream, p).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// `predicate` (over `window`'s output) on the row number of `window`: a window Top-N.
    /// `rank_unused`: the query's output leaves the row number out.
    fn plan_top_n(
        &mut self,
        predicate: &Expr,
        window: &Window,
        rank_unused: bool,
    ) -> Result<Stream> {
        let [expr] = window.window_expr.as_slice() else {
            return Err(not_supported!(
                "several OVER (...) functions at once; {USAGE}"
            ));
        };
        let Expr::WindowFunction(function) = unalias(expr) else {
            return Err(not_supported!("{expr}; {USAGE}"));
        };
        let params = &function.params;
        if !function.fun.name().eq_ignore_ascii_case("row_number") || !params.args.is_empty() {
            return Err(not_supported!(
                "{expr}: only ROW_NUMBER() ranks rows; {USAGE}"
            ));
        }
        let fields = window.schema.fields().len();
        let number = Column::from(window.schema.qualified_field(fields - 1));
        let kept = kept_rows(predicate, &number)?;
        let input = self.plan(&window.input)?;
        let mut keys: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut windows: Vec<WindowColumn> = Vec::new();
        for e in &params.partition_by {
            let lineage = match e {
                Expr::Column(c) => input
                    .schema
                    .index_of_column(c)
                    .ok()
                    .and_then(|i| input.windows[i].map(|b| WindowColumn::new(i, b))),
                _ => None,
            };
            match lineage {
                Some(w) => windows.push(w),
                None => keys.push(self.physical(e, &input.schema)?),
            }
        }
        let window_column = windows
            .iter()
            .find(|w| w.bound.edge == WindowEdge::End)
            .or_else(|| windows.first())
            .copied();
        let Some(window_column) = window_column else {
            return self.plan_group_top_n(input, keys, window, &kept, rank_unused);
        };
        self.append_only(&input, "a window Top-N")?;
        let input_arrow = arrow_schema(&input.schema);
        let spec = WindowTopNSpec {
            input_schema: Arc::clone(&input_arrow),
            window: window_column,
            keys: keys.clone(),
            order: self.sort_exprs(&params.order_by, &input.schema)?,
            first: kept.first.clamp(1, u64::MAX as i128) as u64,
            last: kept.last.clamp(0, u64::MAX as i128) as u64,
            output_schema: arrow_schema(&window.schema),
            description: format!("WindowTopN: {}", ranking_text(params, &kept)),
        };
        let stage = self.keyed_stage(&input, keys, Some(window_column), &input_arrow, "top-n");
        self.stages[stage].chain.push(Arc::new(spec));
        let mut out_windows = input.windows.clone();
        out_windows.push(None);
        Ok(Stream {
            stage,
            schema: window.schema.clone(),
            rowtime: vec![false; out_windows.len()],
            windows: out_windows,
            bounded: input.bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        })
    }
}

impl StreamPlanner<'_> {
    /// A Top-N without windows: over unbounded or updating input (or in streaming mode) an
    /// updating result, kept as rows come and go; over bounded input, the final rows once, at
    /// the end. Without ORDER BY over an append-only input, the first rows to arrive.
    fn plan_group_top_n(
        &mut self,
        input: Stream,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        window: &Window,
        kept: &Kept,
        rank_unused: bool,
    ) -> Result<Stream> {
        let Expr::WindowFunction(function) = unalias(&window.window_expr[0]) else {
            return Err(invalid!("a Top-N without its ROW_NUMBER()"));
        };
        let params = &function.params;
        let input_updating = input.updating.is_some();
        let at_end = input.bounded && !input_updating && !self.modes.streaming;
        let ordered = !params.order_by.is_empty();
        let updating = TopNSpec::updates(input_updating, ordered, at_end);
        let input_arrow = arrow_schema(&input.schema);
        let spec = TopNSpec {
            input_schema: Arc::clone(&input_arrow),
            input_updating,
            keys: keys.clone(),
            order: self.sort_exprs(&params.order_by, &input.schema)?,
            first: kept.first.clamp(1, u64::MAX as i128) as u64,
            last: kept.last.clamp(0, u64::MAX as i128) as u64,
            at_end,
            emit_rows: rank_unused,
            output_schema: arrow_schema(&window.schema),
            state_ttl: self.modes.state_ttl.filter(|_| !at_end),
            description: format!(
                "TopN ({}): {}",
                if updating && rank_unused {
                    "updating, rows entering and leaving"
                } else if updating {
                    "updating"
                } else if at_end {
                    "at end of input"
                } else {
                    "first rows to arrive"
                },
                ranking_text(params, kept)
            ),
        };
        if spec.last < spec.first {
            return Err(invalid!(
                "the filter on the row number keeps no rows ({}..={}); {USAGE}",
                kept.first,
                kept.last
            ));
        }
        // One row per partition and number (per partition alone when only the first is
        // kept), when the partition keys are columns.
        let partition_columns = params
            .partition_by
            .iter()
            .map(|e| match e.clone().unalias() {
                Expr::Column(c) => input.schema.index_of_column(&c).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>();
        let unique_key = partition_columns.map(|mut key| {
            if spec.last > 1 {
                key.push(columns_of(window) - 1);
            }
            key
        });
        let input_stage_schema = super::batch_schema(&input.schema, input_updating);
        let stage = self.keyed_stage(&input, keys, None, &input_stage_schema, "top-n");
        self.stages[stage].chain.push(Arc::new(spec));
        let columns = window.schema.fields().len();
        Ok(Stream {
            stage,
            schema: window.schema.clone(),
            rowtime: vec![false; columns],
            windows: vec![None; columns],
            bounded: input.bounded,
            unordered: true,
            updating: updating.then_some(input.updating.unwrap_or(UPDATING_TOP_N)),
            unique_key,
            panes: None,
        })
    }
}

/// The ranking of a Top-N, for EXPLAIN.
fn ranking_text(
    params: &datafusion::logical_expr::expr::WindowFunctionParams,
    kept: &Kept,
) -> String {
    format!(
        "row_number() partition by [{}] order by [{}], rows {}..={}",
        exprs_text(&params.partition_by),
        params
            .order_by
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        kept.first.max(1),
        kept.last
    )
}

fn columns_of(window: &Window) -> usize {
    window.schema.fields().len()
}

/// Why a Top-N's result is updating, for error messages.
const UPDATING_TOP_N: &str =
    "a Top-N without windows over an unbounded input, whose top rows change";

/// `predicate` over the output of projection `p`, rewritten over `p`'s input.
fn below_projection(predicate: &Expr, p: &Projection) -> Result<Expr> {
    let by_column: HashMap<Column, Expr> = p
        .schema
        .columns()
        .into_iter()
        .zip(p.expr.iter().map(|e| e.clone().unalias()))
        .collect();
    let rewritten = predicate.clone().transform(|e| {
        Ok(match e {
            Expr::Column(c) => match by_column.get(&c) {
                Some(below) => Transformed::yes(below.clone()),
                None => Transformed::no(Expr::Column(c)),
            },
            other => Transformed::no(other),
        })
    })?;
    Ok(rewritten.data)
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// Whether `e` is the row number column (possibly cast).
fn is_number(e: &Expr, number: &Column) -> bool {
    match e {
        Expr::Column(c) => c == number,
        Expr::Cast(c) => is_number(&c.expr, number),
        Expr::TryCast(c) => is_number(&c.expr, number),
        _ => false,
    }
}

/// An integer constant.
fn constant(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(Some(n)) => Some(n as i128),
            _ => None,
        },
        Expr::Cast(c) => constant(&c.expr),
        _ => None,
    }
}

/// The row numbers kept by `predicate`, a conjunction of comparisons of the row number with
/// constants.
fn kept_rows(predicate: &Expr, number: &Column) -> Result<Kept> {
    let mut kept = Kept {
        first: 1,
        last: i128::MAX,
    };
    for conjunct in split_conjunction(predicate) {
        if !narrow(&mut kept, conjunct, number) {
            return Err(not_supported!(
                "the filter {conjunct} on a row number; {USAGE}"
            ));
        }
    }
    if kept.last == i128::MAX {
        return Err(not_supported!(
            "a row number without an upper bound; {USAGE}"
        ));
    }
    Ok(kept)
}

/// Narrows `kept` by one comparison; false when it is not one `narrow` understands.
fn narrow(kept: &mut Kept, e: &Expr, number: &Column) -> bool {
    let (op, n) = match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            match (is_number(left, number), constant(right), constant(left)) {
                (true, Some(n), _) => (*op, n),
                (false, _, Some(n)) if is_number(right, number) => match op.swap() {
                    Some(op) => (op, n),
                    None => return false,
                },
                _ => return false,
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_number(expr, number) => {
            let (Some(low), Some(high)) = (constant(low), constant(high)) else {
                return false;
            };
            kept.first = kept.first.max(low);
            kept.last = kept.last.min(high);
            return true;
        }
        _ => return false,
    };
    match op {
        Operator::Lt => kept.last = kept.last.min(n - 1),
        Operator::LtEq => kept.last = kept.last.min(n),
        Operator::Eq => {
            kept.first = kept.first.max(n);
            kept.last = kept.last.min(n);
        }
        Operator::Gt => kept.first = kept.first.max(n + 1),
        Operator::GtEq => kept.first = kept.first.max(n),
        _ => return false,
    }
    true
}
