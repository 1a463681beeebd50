//! Planning aggregations: a [`WindowAggregateSpec`] per GROUP BY, behind a keyed exchange on
//! its non-window keys (or, without any, on its window column).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, Expr};
use datafusion::physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{
    AggregateInput, ChangelogBufferSpec, GroupAggregateSpec, GroupColumn, LocalGroupAggregateSpec,
    PaneWindowsSpec, UpdatingAggKind, UpdatingAggregate, WindowAggregateSpec, WindowBound,
    WindowColumn, WindowEdge,
};
use weir_engine::panes::Panes;
use weir_engine::{Partitioning, Stage, StageInput};

use super::{arrow_schema, batch_schema, exprs_text, Stream, StreamPlanner};
use crate::error::{PlanError, Result};
use crate::{invalid, not_supported};

/// Why an early-fire window aggregate's result is updating, for error messages.
const EARLY_FIRE: &str =
    "a window aggregate with window_emit = 'on_update', whose partial rows are replaced as windows fill";

/// The GROUP BY list, split into the window and the other keys.
pub(super) struct GroupBy {
    /// Keys other than the window columns, evaluated on the input.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The GROUP BY list in output order.
    pub group_columns: Vec<GroupColumn>,
    /// The window grouped by: its `window_end` if grouped by one, else its `window_time`, else
    /// its `window_start`.
    pub window: Option<WindowColumn>,
    /// The window bound each output column holds (the group columns).
    pub out_windows: Vec<Option<WindowBound>>,
}

/// The aggregate expressions lowered, with their `FILTER (WHERE ...)`.
type Lowered = (
    Vec<Arc<AggregateFunctionExpr>>,
    Vec<Option<Arc<dyn PhysicalExpr>>>,
);

impl StreamPlanner<'_> {
    /// A windowed (or, over bounded input, whole-input) aggregation in its own stage, unless
    /// it can be chained into its input's.
    pub(super) fn plan_aggregate(&mut self, agg: &Aggregate) -> Result<Stream> {
        let input = self.plan(&agg.input)?;
        if agg
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Err(not_supported!("GROUPING SETS, CUBE and ROLLUP"));
        }
        let input_arrow = arrow_schema(&input.schema);
        let mut group_by = self.group_by(agg, &input)?;
        if input.panes.is_some() && (group_by.window.is_none() || self.modes.early_fire) {
            return Err(PlanError::Internal(format!(
                "HOP rows in panes reached an aggregation that does not combine them: {}",
                exprs_text(&agg.group_expr)
            )));
        }
        if group_by.window.is_none()
            && (!input.bounded || input.updating.is_some() || self.modes.streaming)
        {
            return self.plan_updating_aggregate(agg, input, group_by.keys, None);
        }
        if let (Some(window), true) = (group_by.window, self.modes.early_fire) {
            // Early results: the window columns are group keys like the others, and the
            // group's state goes when the watermark closes its window.
            self.append_only(&input, "a window aggregate")?;
            let keys = agg
                .group_expr
                .iter()
                .map(|e| self.physical(e, &input.schema))
                .collect::<Result<Vec<_>>>()?;
            return self.plan_updating_aggregate(agg, input, keys, Some(window));
        }
        self.append_only(&input, "a window aggregate")?;
        if let Some(fused) = self.fuse_session_aggregate(agg, &input, &group_by)? {
            return Ok(fused);
        }
        let (aggregates, filters) = self.lower_aggregates(agg, &input, &input_arrow)?;
        group_by
            .out_windows
            .extend(std::iter::repeat_n(None, agg.aggr_expr.len()));
        if group_by.out_windows.len() != agg.schema.fields().len() {
            return Err(invalid!(
                "aggregate output has {} columns, expected {}",
                agg.schema.fields().len(),
                group_by.out_windows.len()
            ));
        }
        let window_text = match group_by.window {
            Some(_) => "per window",
            None => "over the whole input",
        };
        let spec = WindowAggregateSpec {
            input_schema: Arc::clone(&input_arrow),
            keys: group_by.keys.clone(),
            window: group_by.window,
            group_columns: group_by.group_columns,
            aggregates,
            filters,
            output_schema: arrow_schema(&agg.schema),
            description: format!(
                "WindowAggregate ({window_text}): group by [{}], aggregates [{}]",
                exprs_text(&agg.group_expr),
                exprs_text(&agg.aggr_expr)
            ),
            input: AggregateInput::Rows,
        };
        if let Some(panes) = input.panes {
            return self.plan_pane_aggregate(agg, spec, input, panes, group_by.out_windows);
        }
        let spec = if self.two_phase_pays(&input) {
            // The local phase runs in the input's tasks; only partial states cross the
            // exchange, keyed as the final phase reads them.
            let (local, merged) = spec.split()?;
            self.push(&input, Arc::new(local));
            merged
        } else {
            spec
        };
        let stage = self.keyed_stage(
            &input,
            spec.keys.clone(),
            spec.window,
            &spec.input_schema,
            "aggregate",
        );
        self.stages[stage].chain.push(Arc::new(spec));
        Ok(Stream {
            stage,
            schema: agg.schema.clone(),
            windows: group_by.out_windows,
            rowtime: vec![false; agg.schema.fields().len()],
            bounded: input.bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        })
    }

    /// A HOP aggregation over rows in panes ([`weir_engine::panes`]): `spec` aggregates the
    /// rows per pane in the input's tasks (its local phase), a [`PaneWindowsSpec`] turns each
    /// pane's partial states into those of the windows holding it, and the final phase merges
    /// them per window. With group keys, pane partials cross the keyed exchange (one copy per
    /// pane, not per window); without, windows are spread over instances, so the panes turn
    /// into windows before the exchange.
    fn plan_pane_aggregate(
        &mut self,
        agg: &Aggregate,
        spec: WindowAggregateSpec,
        input: Stream,
        panes: Panes,
        out_windows: Vec<Option<WindowBound>>,
    ) -> Result<Stream> {
        let (local, merged) = spec.split()?;
        let keys = merged.keys.len();
        let pane_column = merged
            .window
            .ok_or_else(|| PlanError::Internal("a pane aggregation without a window".into()))?;
        let mut fields: Vec<Field> = local
            .output_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields[keys] = Field::new(
            "window_end",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        );
        let windows_schema: SchemaRef = Arc::new(Schema::new(fields));
        let to_windows = Arc::new(PaneWindowsSpec {
            panes,
            column: pane_column,
            output_schema: Arc::clone(&windows_schema),
            description: format!(
                "PaneWindows: each pane's partial states into the {} windows holding it",
                panes.size() / panes.pane()
            ),
        });
        let merged = WindowAggregateSpec {
            input_schema: Arc::clone(&windows_schema),
            window: Some(WindowColumn::new(keys, WindowBound::end(panes.size()))),
            ..merged
        };
        self.push(&input, Arc::new(local));
        let stage = if keys > 0 {
            let stage = self.keyed_stage(
                &input,
                merged.keys.clone(),
                None,
                &windows_schema,
                "aggregate",
            );
            self.stages[stage].chain.push(to_windows);
            stage
        } else {
            self.push(&input, to_windows);
            self.keyed_stage(&input, vec![], merged.window, &windows_schema, "aggregate")
        };
        self.stages[stage].chain.push(Arc::new(merged));
        let columns = out_windows.len();
        Ok(Stream {
            stage,
            schema: agg.schema.clone(),
            // The result's window columns are the HOP windows', not the panes'.
            windows: out_windows
                .into_iter()
                .map(|w| {
                    w.map(|b| WindowBound {
                        size: panes.size(),
                        ..b
                    })
                })
                .collect(),
            rowtime: vec![false; columns],
            bounded: input.bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        })
    }

    /// A GROUP BY without a window whose result changes as rows arrive: a
    /// [`GroupAggregateSpec`] behind a keyed exchange on the group keys, emitting an updating
    /// stream (DESIGN.md §8).
    fn plan_updating_aggregate(
        &mut self,
        agg: &Aggregate,
        input: Stream,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        window: Option<WindowColumn>,
    ) -> Result<Stream> {
        let groups = agg.group_expr.len();
        let aggregates = agg
            .aggr_expr
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let output = agg.schema.field(groups + i).data_type().clone();
                self.updating_aggregate(e, &input, output)
            })
            .collect::<Result<Vec<_>>>()?;
        let input_arrow = batch_schema(&input.schema, input.updating.is_some());
        let what = format!(
            "group by [{}], aggregates [{}]",
            exprs_text(&agg.group_expr),
            exprs_text(&agg.aggr_expr)
        );
        let mode = format!(
            "{}{}",
            if window.is_some() {
                "updating, early results per window"
            } else {
                "updating"
            },
            self.modes
                .mini_batch
                .map_or_else(String::new, |d| format!(", mini-batches of {d:?}")),
        );
        let spec = GroupAggregateSpec {
            input_schema: arrow_schema(&input.schema),
            input_updating: input.updating.is_some(),
            keys: keys.clone(),
            aggregates,
            output_schema: arrow_schema(&agg.schema),
            state_ttl: self.modes.state_ttl,
            window,
            mini_batch: self.modes.mini_batch,
            partials_of: None,
            description: format!("GroupAggregate ({mode}): {what}"),
        };
        let split = if self.two_phase_pays(&input) {
            spec.split()?
        } else {
            None
        };
        let stage = match split {
            Some((local, merged)) => {
                // The local phase runs in the input's tasks; only partial states per group
                // cross the exchange, keyed by their key columns.
                let local = LocalGroupAggregateSpec {
                    description: format!("LocalGroupAggregate (partial states per group): {what}"),
                    ..local
                };
                self.push(&input, Arc::new(local));
                let merged = GroupAggregateSpec {
                    description: format!("GroupAggregate ({mode}, merging partial states): {what}"),
                    ..merged
                };
                let stage = self.keyed_stage(
                    &input,
                    merged.keys.clone(),
                    None,
                    &merged.input_schema,
                    "aggregate",
                );
                self.stages[stage].chain.push(Arc::new(merged));
                stage
            }
            None => {
                let stage = self.keyed_stage(&input, keys, None, &input_arrow, "aggregate");
                self.stages[stage].chain.push(Arc::new(spec));
                stage
            }
        };
        if let (Some(window), Some(interval)) = (window, self.modes.early_fire_interval) {
            // Early results every interval: each group's net change since the last time.
            let output_window = agg
                .group_expr
                .iter()
                .position(|e| match e.clone().unalias() {
                    Expr::Column(c) => input.schema.index_of_column(&c).ok() == Some(window.index),
                    _ => false,
                });
            self.stages[stage].chain.push(Arc::new(ChangelogBufferSpec {
                schema: arrow_schema(&agg.schema),
                key: (0..groups).collect(),
                interval,
                window: output_window.map(|i| WindowColumn::new(i, window.bound)),
            }));
        }
        Ok(Stream {
            stage,
            schema: agg.schema.clone(),
            windows: vec![None; agg.schema.fields().len()],
            rowtime: vec![false; agg.schema.fields().len()],
            bounded: input.bounded,
            unordered: false,
            updating: Some(if window.is_some() {
                EARLY_FIRE
            } else {
                super::UPDATING_AGGREGATE
            }),
            // One row per group: the group columns come first.
            unique_key: Some((0..groups).collect()),
            panes: None,
        })
    }

    /// One aggregate expression as an [`UpdatingAggregate`], or why it cannot be maintained
    /// under retractions.
    pub(super) fn updating_aggregate(
        &self,
        e: &Expr,
        input: &Stream,
        output: DataType,
    ) -> Result<UpdatingAggregate> {
        const SUPPORTED: &str = "count, sum, avg, min, max and count(DISTINCT ...)";
        let Expr::AggregateFunction(f) = e.clone().unalias() else {
            return Err(not_supported!("{e} in a GROUP BY over an unbounded input"));
        };
        let name = f.func.name().to_ascii_lowercase();
        let p = &f.params;
        if !p.order_by.is_empty() {
            return Err(not_supported!("ORDER BY inside an aggregate ({e})"));
        }
        let kind = match (name.as_str(), p.distinct) {
            ("count", false) => UpdatingAggKind::Count,
            ("count", true) => UpdatingAggKind::CountDistinct,
            ("sum", false) => UpdatingAggKind::Sum,
            ("avg" | "mean", false) => UpdatingAggKind::Avg,
            ("min", _) => UpdatingAggKind::Min,
            ("max", _) => UpdatingAggKind::Max,
            _ => {
                return Err(not_supported!(
                    "{e} over an unbounded or updating input: weir keeps {SUPPORTED} up to date as rows come and go; window the GROUP BY for other aggregates"
                ))
            }
        };
        let arg = match p.args.as_slice() {
            [] => Arc::new(datafusion::physical_expr::expressions::Literal::new(
                datafusion::common::ScalarValue::Int64(Some(1)),
            )) as Arc<dyn PhysicalExpr>,
            [arg] => self.physical(arg, &input.schema)?,
            _ => return Err(not_supported!("{e}: an aggregate of several arguments")),
        };
        let filter = p
            .filter
            .as_ref()
            .map(|f| self.physical(f, &input.schema))
            .transpose()?;
        let aggregate = UpdatingAggregate {
            kind,
            arg,
            filter,
            output,
        };
        aggregate
            .check()
            .map_err(|what| not_supported!("{e} ({what}) over an unbounded or updating input"))?;
        Ok(aggregate)
    }

    /// Splits the GROUP BY list: window columns (traced through the input) and other keys.
    fn group_by(&self, agg: &Aggregate, input: &Stream) -> Result<GroupBy> {
        let mut g = GroupBy {
            keys: Vec::new(),
            group_columns: Vec::new(),
            window: None,
            out_windows: Vec::new(),
        };
        for e in &agg.group_expr {
            let lineage = match e.clone().unalias() {
                Expr::Column(c) => input
                    .schema
                    .index_of_column(&c)
                    .ok()
                    .and_then(|i| input.windows[i].map(|w| (i, w))),
                _ => None,
            };
            match lineage {
                Some((column, bound)) if bound.edge == WindowEdge::Start => {
                    g.group_columns.push(GroupColumn::WindowStart);
                    if g.window.is_none() {
                        g.window = Some(WindowColumn::new(column, bound));
                    }
                    g.out_windows.push(Some(bound));
                }
                Some((column, bound)) if bound.edge == WindowEdge::Time => {
                    g.group_columns.push(GroupColumn::WindowTime);
                    if g.window.is_none_or(|w| w.bound.edge == WindowEdge::Start) {
                        g.window = Some(WindowColumn::new(column, bound));
                    }
                    g.out_windows.push(Some(bound));
                }
                Some((column, bound)) => {
                    g.group_columns.push(GroupColumn::WindowEnd);
                    g.window = Some(WindowColumn::new(column, bound));
                    g.out_windows.push(Some(bound));
                }
                None => {
                    g.group_columns.push(GroupColumn::Key(g.keys.len()));
                    g.keys.push(self.physical(e, &input.schema)?);
                    g.out_windows.push(None);
                }
            }
        }
        Ok(g)
    }

    /// The aggregate expressions as physical aggregates over the input.
    fn lower_aggregates(
        &self,
        agg: &Aggregate,
        input: &Stream,
        input_arrow: &SchemaRef,
    ) -> Result<Lowered> {
        let planning = PhysicalPlanningContext::default();
        let mut aggregates = Vec::new();
        let mut filters = Vec::new();
        for e in &agg.aggr_expr {
            let lowered =
                LoweredAggregateBuilder::new(e, &input.schema, input_arrow, self.props, &planning)
                    .build()?;
            if !lowered.order_bys.is_empty() {
                return Err(not_supported!("ORDER BY inside an aggregate ({e})"));
            }
            aggregates.push(lowered.aggregate);
            filters.push(lowered.filter);
        }
        Ok((aggregates, filters))
    }

    /// Whether an aggregation over `input` runs in two phases (a local one in the
    /// input's tasks, merged behind the exchange): when the input runs as several instances,
    /// or when the plan's shape must not depend on the parallelism (a durable job, which may
    /// be restored at another). Where its keys rarely repeat, the local phase notices and
    /// passes each batch's partial states on at once.
    fn two_phase_pays(&self, input: &Stream) -> bool {
        self.fixed_shape || self.stages[input.stage].parallelism > 1
    }

    /// The stage of a keyed operator (an aggregate, a Top-N): behind a keyed exchange on
    /// `keys` (without keys, on the window column, so windows spread over instances), or
    /// chained into its input's stage when both run as one instance.
    pub(super) fn keyed_stage(
        &mut self,
        input: &Stream,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        window: Option<WindowColumn>,
        input_arrow: &SchemaRef,
        name: &str,
    ) -> usize {
        let route: Vec<Arc<dyn PhysicalExpr>> = match (keys.is_empty(), window) {
            (false, _) => keys,
            (true, Some(WindowColumn { index, .. })) => {
                vec![Arc::new(PhysicalColumn::new(
                    input_arrow.field(index).name(),
                    index,
                ))]
            }
            (true, None) => vec![],
        };
        let parallelism = if route.is_empty() {
            1
        } else {
            self.parallelism
        };
        let chain = !self.fixed_shape && parallelism == 1;
        if chain && self.stages[input.stage].parallelism == 1 {
            return input.stage;
        }
        self.stages.push(Stage {
            name: name.into(),
            parallelism,
            source: None,
            inputs: vec![StageInput {
                from: input.stage,
                partitioning: if parallelism == 1 {
                    Partitioning::Single
                } else {
                    Partitioning::Hash(route)
                },
            }],
            chain: vec![],
            late_rows: None,
        });
        self.stages.len() - 1
    }
}
