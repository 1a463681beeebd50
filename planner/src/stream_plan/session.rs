//! SESSION windows aggregated per session: when a GROUP BY reads a SESSION scan directly
//! (through the scan's projection at most) and groups by the window's partition keys and its
//! bounds, the session window and the aggregation become one [`SessionAggregateSpec`], which
//! keeps one running state per open session instead of holding every row until its session
//! fires. It takes COUNT, SUM, AVG, MIN and MAX; other aggregates (COUNT(DISTINCT), UDAFs)
//! keep the session window followed by a window aggregate.

use std::sync::Arc;

use datafusion::logical_expr::Aggregate;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{
    GroupColumn, SessionAggregateSpec, SessionWindowSpec, UpdatingAggKind,
};

use super::aggregate::GroupBy;
use super::{arrow_schema, exprs_text, Stream, StreamPlanner};
use crate::error::Result;

/// A SESSION scan's operators in its stage's chain, as long as nothing follows them.
#[derive(Debug, Clone)]
pub(super) struct SessionScan {
    /// Where the session window sits in the chain.
    pub position: usize,
    pub spec: SessionWindowSpec,
    /// The scan's projection of the window's rows (columns of its input), when it has one.
    pub projection: Option<Vec<usize>>,
    /// The chain's length after the scan: anything pushed since rules the fusion out.
    pub chain_len: usize,
}

/// The input column an expression is, if it is a plain column.
fn column_index(e: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    e.downcast_ref::<PhysicalColumn>()
        .map(PhysicalColumn::index)
}

impl StreamPlanner<'_> {
    /// The SESSION window under `input` fused with this aggregation, when it can be (see the
    /// module doc); `None` leaves the plan as it is.
    pub(super) fn fuse_session_aggregate(
        &mut self,
        agg: &Aggregate,
        input: &Stream,
        group_by: &GroupBy,
    ) -> Result<Option<Stream>> {
        let Some(scan) = self.sessions.get(&input.stage).cloned() else {
            return Ok(None);
        };
        let columns = input.schema.fields().len();
        if self.stages[input.stage].chain.len() != scan.chain_len
            || input.panes.is_some()
            || group_by.window.is_none()
            || scan
                .projection
                .as_ref()
                .map_or(columns != scan.spec.input_schema.fields().len(), |p| {
                    p.len() != columns
                })
        {
            return Ok(None);
        }
        let full = |j: usize| scan.projection.as_ref().map_or(j, |p| p[j]);
        // The group keys other than the window's bounds (`window_start` is one of them:
        // a session's start is no function of its end): exactly the partition keys.
        let spec = &scan.spec;
        let bounds = [
            (spec.window_start, GroupColumn::WindowStart),
            (spec.window_end, GroupColumn::WindowEnd),
            (spec.window_time, GroupColumn::WindowTime),
        ];
        let partition: Option<Vec<usize>> = spec.keys.iter().map(column_index).collect();
        let Some(partition) = partition else {
            return Ok(None);
        };
        let mut key_columns = Vec::new();
        for k in &group_by.keys {
            let Some(c) = column_index(k).map(full) else {
                return Ok(None);
            };
            let column = match bounds.iter().find(|(b, _)| *b == c) {
                Some((_, bound)) => *bound,
                None => match partition.iter().position(|&p| p == c) {
                    Some(p) => GroupColumn::Key(p),
                    None => return Ok(None),
                },
            };
            key_columns.push(column);
        }
        if !(0..partition.len()).all(|p| key_columns.contains(&GroupColumn::Key(p))) {
            return Ok(None);
        }
        let groups = agg.group_expr.len();
        let mut aggregates = Vec::new();
        for (i, e) in agg.aggr_expr.iter().enumerate() {
            let output = agg.schema.field(groups + i).data_type().clone();
            // What the fused operator cannot keep falls back to the two operators, which
            // report anything they cannot do either.
            let Ok(a) = self.updating_aggregate(e, input, output) else {
                return Ok(None);
            };
            let reads_window = std::iter::once(&a.arg)
                .chain(a.filter.as_ref())
                .flat_map(collect_columns)
                .any(|c| c.index() >= columns || bounds.iter().any(|(b, _)| *b == full(c.index())));
            if a.kind == UpdatingAggKind::CountDistinct || reads_window {
                return Ok(None);
            }
            aggregates.push(a);
        }
        let group_columns = group_by
            .group_columns
            .iter()
            .map(|g| match *g {
                GroupColumn::Key(i) => key_columns[i],
                other => other,
            })
            .collect();
        let spec = SessionAggregateSpec {
            description: format!(
                "SessionAggregate: {} group by [{}], aggregates [{}]",
                scan.spec.description.trim_start_matches("SessionWindow: "),
                exprs_text(&agg.group_expr),
                exprs_text(&agg.aggr_expr)
            ),
            session: scan.spec,
            projection: scan.projection,
            group_columns,
            aggregates,
            output_schema: arrow_schema(&agg.schema),
        };
        let chain = &mut self.stages[input.stage].chain;
        chain.truncate(scan.position);
        chain.push(Arc::new(spec));
        self.sessions.remove(&input.stage);
        let mut windows = group_by.out_windows.clone();
        windows.resize(agg.schema.fields().len(), None);
        Ok(Some(Stream {
            stage: input.stage,
            schema: agg.schema.clone(),
            rowtime: vec![false; windows.len()],
            windows,
            bounded: input.bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        }))
    }
}
