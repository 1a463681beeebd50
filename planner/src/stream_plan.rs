//! Turns an optimized DataFusion logical plan into a weir job graph.
//!
//! ```text
//! SELECT window_start, window_end, auction, count(*) FROM TUMBLE(bids, date_time, ...) GROUP BY 1, 2, 3
//!
//! Stage 2 "result" parallelism=1 <- stage 1 [single]        ResultSink
//! Stage 1 "aggregate" parallelism=N <- stage 0 [hash(auction)]  Project, WindowAggregate
//! Stage 0 "source bids" parallelism=1                         Project; window TUMBLE; watermark; FileSource
//! ```
//!
//! Stateless operators (filter, projection) are chained into the stage that produces their
//! input. An aggregation starts a new stage behind a keyed exchange on its group keys, unless
//! the job runs at parallelism 1, where it is chained too. Window columns are traced through
//! projections so the aggregation knows which group column is the window.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchemaRef;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, LogicalPlan, SortExpr};
use datafusion::physical_expr::{create_physical_expr, create_physical_sort_exprs, PhysicalExpr};
use weir_engine::operators::{
    CalcOperator, EmitOrderSpec, LimitSpec, SortSpec, WindowBound, WindowColumn, WindowEdge,
};
use weir_engine::panes::Panes;
use weir_engine::{JobGraph, OperatorFactory, Partitioning, Stage, StageInput};

use weir_connectors::sinks::LateRowsTable;

use crate::catalog::Catalog;
use crate::context::StreamTableSource;
use crate::error::{PlanError, Result};
use crate::not_supported;

mod aggregate;
mod extreme_filter;
mod interval;
mod interval_join;
mod join;
mod panes;
mod session;
mod source;
mod stream_join;
mod top_n;
mod union;

use source::source_key;

/// A planned stream: the stage that produces it, its schema and where its window columns are.
struct Stream {
    stage: usize,
    schema: DFSchemaRef,
    /// For each column, the bound of the rows' window it holds, if any.
    windows: Vec<Option<WindowBound>>,
    /// For each column, whether it holds the event time of a scan feeding an interval join:
    /// its source dropped the rows below their own watermark, so every row that comes after
    /// watermark W has a time `>= W` (see [`interval::judged_scans`]).
    rowtime: Vec<bool>,
    bounded: bool,
    /// Rows come from an aggregation, in hash-table and thread-timing order.
    unordered: bool,
    /// An updating stream (DESIGN.md §8): rows change as input arrives, and batches end in
    /// the change-kind column ([`weir_engine::changelog`]). Append-only streams pay nothing.
    updating: Option<&'static str>,
    /// For an updating stream, columns whose values identify a row of the result (each key
    /// has at most one row at a time), when the planner knows them: GROUP BY keys, Top-N
    /// partition keys and row number. Consumers may then apply changes by key (upserts).
    unique_key: Option<Vec<usize>>,
    /// The stream's rows are a HOP source's in panes ([`panes`]): its window columns hold
    /// pane codes and bounds, for the aggregation above to combine into windows.
    panes: Option<Panes>,
}

/// Why a GROUP BY's result is updating, for error messages.
const UPDATING_AGGREGATE: &str = "a GROUP BY without a window over an unbounded or updating input";

/// Builds job graphs.
pub struct StreamPlanner<'a> {
    catalog: &'a Catalog,
    props: &'a ExecutionProps,
    parallelism: usize,
    stages: Vec<Stage>,
    /// Keep the stages the same at every parallelism (no chaining that depends on it), so a
    /// checkpoint taken at one parallelism restores at another. Durable jobs need this.
    fixed_shape: bool,
    /// How many scans of the plan read each source (see [`source_key`]).
    scans: HashMap<String, usize>,
    /// Window aggregations that can run in panes ([`panes::pane_aggregate`]), by source key.
    pane_aggregates: HashMap<String, usize>,
    /// HOP sources whose every scan feeds such an aggregation: they run in panes.
    paned: HashMap<String, Panes>,
    /// Source stages read by several scans, by source key.
    shared: HashMap<String, usize>,
    /// Scans feeding an interval join ([`interval::judged_scans`]).
    judged: std::collections::HashSet<usize>,
    /// Columns some scan of each source reads (`None`: all of them).
    read: HashMap<String, Option<std::collections::BTreeSet<usize>>>,
    /// Stages that drop late rows of a table with `late_rows`, and where they go.
    late: std::collections::BTreeMap<usize, LateRowsTable>,
    /// Late rows wait for the checkpoint that covers them (exactly-once jobs); otherwise
    /// they are visible at once.
    late_staged: bool,
    /// Settings that change what the query computes.
    modes: QueryModes,
    /// The Top-N filter (its address) whose row number the projection above it drops: the
    /// Top-N then emits the rows entering and leaving the top, not every changed rank.
    rank_unused: Option<usize>,
    /// SESSION scans an aggregation may fuse with ([`session`]), by stage.
    sessions: HashMap<usize, session::SessionScan>,
}

/// Settings that change what a query computes (SET, or a sink's WITH); each job records the
/// ones it was planned with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryModes {
    /// `runtime_mode = 'streaming'`: a GROUP BY, join or Top-N without windows maintains its
    /// result as rows arrive even over bounded input (an updating stream), instead of
    /// computing it once at the end of input.
    pub streaming: bool,
    /// `window_emit = 'on_update'`: a window aggregate emits its partial results as rows
    /// arrive (an updating stream), each replaced as its window fills, instead of one final
    /// row per window when the watermark closes it.
    pub early_fire: bool,
    /// `state_ttl`: operators whose state grows with their keys drop a key's state when it is
    /// not touched for this long (processing time). Changes results.
    pub state_ttl: Option<std::time::Duration>,
    /// `early_fire_interval`: an early-fire window aggregate emits each group's net change
    /// this often (processing time) instead of after every input batch.
    pub early_fire_interval: Option<std::time::Duration>,
    /// `mini_batch`: an updating GROUP BY holds its input rows up to this long (processing
    /// time) and applies them together, each group emitting its net change once.
    pub mini_batch: Option<std::time::Duration>,
}

/// A query planned up to its result stream, before its sink is attached: whether the result
/// is updating decides which sinks may take it and what columns readers see.
pub struct PlannedQuery<'a> {
    planner: StreamPlanner<'a>,
    stream: Stream,
}

impl PlannedQuery<'_> {
    /// Why the result is updating (its rows change as input arrives), `None` when it is
    /// append-only.
    pub fn updating(&self) -> Option<String> {
        self.stream.updating.map(str::to_string)
    }

    /// For an updating result, the columns that identify its rows, when known (a consumer
    /// may then apply changes as upserts by them).
    pub fn unique_key(&self) -> Option<Vec<usize>> {
        self.stream.updating.and(self.stream.unique_key.clone())
    }

    /// The job with `sink` consuming the results in a single instance (for an append-only
    /// result in a deterministic order; an updating one keeps each key's changes in order).
    pub fn into_job(mut self, name: &str, sink: Arc<dyn OperatorFactory>) -> JobGraph {
        let single = self.planner.single(self.stream, "result");
        let stream = self.planner.ordered(single);
        self.planner.with_sink(name, stream.stage, sink)
    }

    /// The job with `sink` in every instance of the stage producing the results: no merge
    /// and no ordering, for sinks whose instances write independently (each instance
    /// pre-commits and commits its own part).
    pub fn into_parallel_job(self, name: &str, sink: Arc<dyn OperatorFactory>) -> JobGraph {
        let stage = self.stream.stage;
        self.planner.with_sink(name, stage, sink)
    }
}

fn arrow_schema(schema: &DFSchemaRef) -> SchemaRef {
    Arc::new(Schema::new(schema.as_arrow().fields().clone()))
}

/// The schema of a stream's batches: the relation's, with the change-kind column when the
/// stream is updating.
fn batch_schema(schema: &DFSchemaRef, updating: bool) -> SchemaRef {
    let relation = arrow_schema(schema);
    if updating {
        weir_engine::changelog::with_op_field(&relation)
    } else {
        relation
    }
}

fn exprs_text(exprs: &[Expr]) -> String {
    exprs
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl<'a> StreamPlanner<'a> {
    pub fn new(catalog: &'a Catalog, props: &'a ExecutionProps, parallelism: usize) -> Self {
        Self {
            catalog,
            props,
            parallelism: parallelism.max(1),
            stages: Vec::new(),
            fixed_shape: false,
            scans: HashMap::new(),
            pane_aggregates: HashMap::new(),
            paned: HashMap::new(),
            shared: HashMap::new(),
            judged: Default::default(),
            read: HashMap::new(),
            late: Default::default(),
            late_staged: false,
            modes: QueryModes::default(),
            rank_unused: None,
            sessions: HashMap::new(),
        }
    }

    /// The settings that change what the query computes.
    pub fn with_modes(mut self, modes: QueryModes) -> Self {
        self.modes = modes;
        self
    }

    /// A durable job with this delivery: with exactly-once, its late rows become visible with
    /// the checkpoint that covers them.
    pub fn with_delivery(mut self, exactly_once: bool) -> Self {
        self.late_staged = exactly_once;
        self
    }

    /// Plans stages that do not depend on the parallelism (see `fixed_shape`).
    pub fn with_fixed_shape(mut self) -> Self {
        self.fixed_shape = true;
        self
    }

    /// Plans `plan` up to its result stream.
    pub fn plan_query(mut self, plan: &LogicalPlan) -> Result<PlannedQuery<'a>> {
        self.count_scans(plan);
        let stream = self.plan(plan)?;
        Ok(PlannedQuery {
            planner: self,
            stream,
        })
    }

    /// Plans `plan` with `sink` consuming its results in a single instance.
    pub fn plan_job(
        self,
        name: &str,
        plan: &LogicalPlan,
        sink: Arc<dyn OperatorFactory>,
    ) -> Result<JobGraph> {
        Ok(self.plan_query(plan)?.into_job(name, sink))
    }

    /// The job graph with `sink` at the end of `stage`.
    fn with_sink(mut self, name: &str, stage: usize, sink: Arc<dyn OperatorFactory>) -> JobGraph {
        self.stages[stage].chain.push(sink);
        for (&si, table) in &self.late {
            if let Some(s) = self.stages.get_mut(si) {
                s.late_rows = Some(Arc::new(table.writer(name, si, self.late_staged)));
            }
        }
        JobGraph {
            name: name.to_string(),
            stages: self.stages,
        }
    }

    /// Plans `plan` with `sink` in every instance of the stage producing the results: no
    /// merge and no ordering, for sinks whose instances write independently (each instance
    /// pre-commits and commits its own part).
    pub fn plan_parallel_job(
        self,
        name: &str,
        plan: &LogicalPlan,
        sink: Arc<dyn OperatorFactory>,
    ) -> Result<JobGraph> {
        Ok(self.plan_query(plan)?.into_parallel_job(name, sink))
    }

    /// Refuses an updating stream where only an append-only one can go (`what`).
    fn append_only(&self, stream: &Stream, what: &str) -> Result<()> {
        if let Some(why) = stream.updating {
            return Err(not_supported!(
                "{what} over an updating stream ({why}, whose rows change as input arrives); window the GROUP BY (TUMBLE, HOP, CUMULATE, SESSION) or join on windows or time bounds to make results final"
            ));
        }
        Ok(())
    }

    /// Counts the scans of each source, so a source read twice (a self-join, or an aggregate
    /// joined with its own input as in Nexmark q5 and q7) is generated once and fanned out.
    /// Scans feeding an interval join get a source of their own (see `judged`).
    fn count_scans(&mut self, plan: &LogicalPlan) {
        self.judged = interval::judged_scans(plan, self.catalog);
        self.count_plan_scans(plan);
        // Early results need every window's rows as they come, not panes.
        let candidates = std::mem::take(&mut self.paned);
        if !self.modes.early_fire {
            self.paned = candidates
                .into_iter()
                .filter(|(key, _)| self.pane_aggregates.get(key) == self.scans.get(key))
                .collect();
        }
    }

    /// [`Self::count_scans`] of `plan`, and of the views windowed in it (planned in its place).
    fn count_plan_scans(&mut self, plan: &LogicalPlan) {
        let mut views = Vec::new();
        let _ = plan.apply(|node| {
            if let LogicalPlan::Aggregate(agg) = node {
                if let Some((key, panes)) = panes::pane_aggregate(agg, self.catalog) {
                    *self.pane_aggregates.entry(key.clone()).or_default() += 1;
                    self.paned.insert(key, panes);
                }
            }
            if let LogicalPlan::TableScan(scan) = node {
                if let Some(source) = scan.source.as_ref().downcast_ref::<StreamTableSource>() {
                    if let crate::context::ScanKind::Window(w) = &source.kind {
                        if let Some(v) = self.catalog.view(&w.table) {
                            views.push(v.optimized.clone());
                        }
                    }
                    let judged = self.judged.contains(&interval::scan_id(scan));
                    let key = source_key(source, judged);
                    *self.scans.entry(key.clone()).or_default() += 1;
                    let read = self
                        .read
                        .entry(key)
                        .or_insert_with(|| Some(Default::default()));
                    match (&scan.projection, read.as_mut()) {
                        (Some(cols), Some(set)) => set.extend(cols.iter().copied()),
                        _ => *read = None,
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        for view in views {
            self.count_plan_scans(&view);
        }
    }

    fn physical(&self, e: &Expr, schema: &DFSchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(create_physical_expr(
            e,
            schema,
            self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    fn push(&mut self, stream: &Stream, op: Arc<dyn OperatorFactory>) {
        self.stages[stream.stage].chain.push(op);
    }

    /// Makes sure the stream is produced by a single instance (merging if needed).
    fn single(&mut self, stream: Stream, name: &str) -> Stream {
        if self.stages[stream.stage].parallelism == 1 && !self.fixed_shape {
            return stream;
        }
        self.stages.push(Stage {
            name: name.to_string(),
            parallelism: 1,
            source: None,
            inputs: vec![StageInput {
                from: stream.stage,
                partitioning: Partitioning::Single,
            }],
            chain: Vec::new(),
            late_rows: None,
        });
        Stream {
            stage: self.stages.len() - 1,
            ..stream
        }
    }

    /// A single-instance stream whose rows come out in a deterministic order: aggregation
    /// results are sorted per watermark, so output does not depend on parallelism or timing.
    fn ordered(&mut self, stream: Stream) -> Stream {
        // An updating stream keeps each key's changes in the order they were made (rows of
        // one key come from one instance, so a merge keeps them in order).
        if stream.unordered && stream.updating.is_none() {
            let column = |edge: WindowEdge| {
                stream.windows.iter().enumerate().find_map(|(i, w)| {
                    w.filter(|b| b.edge == edge)
                        .map(|b| WindowColumn::new(i, b))
                })
            };
            let window = column(WindowEdge::End)
                .or_else(|| column(WindowEdge::Time))
                .or_else(|| column(WindowEdge::Start));
            let spec = EmitOrderSpec {
                schema: arrow_schema(&stream.schema),
                window,
            };
            self.push(&stream, Arc::new(spec));
        }
        Stream {
            unordered: false,
            ..stream
        }
    }

    fn plan(&mut self, plan: &LogicalPlan) -> Result<Stream> {
        match plan {
            LogicalPlan::TableScan(scan) => self.plan_scan(scan),
            LogicalPlan::Projection(p) => self.plan_projection(p),
            LogicalPlan::Filter(f) => {
                if let Some(top_n) = self.plan_top_n_filter(f)? {
                    return Ok(top_n);
                }
                let input = self.plan(&f.input)?;
                let predicate = self.physical(&f.predicate, &input.schema)?;
                let calc = CalcOperator::new(
                    Some(predicate),
                    None,
                    arrow_schema(&input.schema),
                    format!("Filter: {}", f.predicate),
                );
                self.push(&input, Arc::new(calc));
                Ok(input)
            }
            LogicalPlan::SubqueryAlias(a) => {
                let input = self.plan(&a.input)?;
                Ok(Stream {
                    schema: a.schema.clone(),
                    ..input
                })
            }
            LogicalPlan::Aggregate(agg) => self.plan_aggregate(agg),
            LogicalPlan::Sort(sort) => self.plan_sort(sort),
            LogicalPlan::Limit(limit) => {
                let input = self.plan(&limit.input)?;
                let skip = match limit.get_skip_type()? {
                    datafusion::logical_expr::SkipType::Literal(n) => n,
                    _ => return Err(not_supported!("OFFSET that is not a constant")),
                };
                let fetch = match limit.get_fetch_type()? {
                    datafusion::logical_expr::FetchType::Literal(n) => n,
                    _ => return Err(not_supported!("LIMIT that is not a constant")),
                };
                self.limit(input, skip, fetch)
            }
            LogicalPlan::Join(join) => self.plan_join(join),
            LogicalPlan::Union(union) => self.plan_union(union),
            LogicalPlan::Window(_) => Err(not_supported!(
                "OVER (...) window functions other than a window Top-N (ROW_NUMBER() OVER (PARTITION BY window_start, window_end ...) filtered by rownum <= N); aggregate over TUMBLE, HOP or CUMULATE with GROUP BY"
            )),
            LogicalPlan::Distinct(_) => Err(not_supported!("this form of DISTINCT")),
            LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => Err(PlanError::Internal(
                "a query without a table reached the stream planner".into(),
            )),
            other => Err(not_supported!("{} in a streaming query", other.display())),
        }
    }

    /// A projection: a `Project` step, window columns traced through plain column references.
    fn plan_projection(&mut self, p: &datafusion::logical_expr::Projection) -> Result<Stream> {
        if let LogicalPlan::Filter(f) = p.input.as_ref() {
            // A filter on a row number (a Top-N) whose number this projection leaves out.
            let filtered: std::collections::HashSet<&str> = f
                .predicate
                .column_refs()
                .into_iter()
                .map(|c| c.name.as_str())
                .collect();
            let kept = p.expr.iter().any(|e| {
                e.column_refs()
                    .into_iter()
                    .any(|c| filtered.contains(c.name.as_str()))
            });
            if !kept {
                self.rank_unused = Some(f as *const _ as usize);
            }
        }
        let input = self.plan(&p.input)?;
        self.project(input, p)
    }

    /// The projection `p` of `input` (the stream of `p`'s input).
    fn project(
        &mut self,
        input: Stream,
        p: &datafusion::logical_expr::Projection,
    ) -> Result<Stream> {
        let exprs = p
            .expr
            .iter()
            .map(|e| self.physical(e, &input.schema))
            .collect::<Result<Vec<_>>>()?;
        let sources: Vec<Option<usize>> = p
            .expr
            .iter()
            .map(|e| match e.clone().unalias() {
                Expr::Column(c) => input.schema.index_of_column(&c).ok(),
                _ => None,
            })
            .collect();
        let windows = sources
            .iter()
            .map(|i| i.and_then(|i| input.windows[i]))
            .collect();
        let rowtime = sources
            .iter()
            .map(|i| i.is_some_and(|i| input.rowtime[i]))
            .collect();
        let calc = CalcOperator::new(
            None,
            Some(exprs),
            batch_schema(&p.schema, input.updating.is_some()),
            format!("Project: {}", exprs_text(&p.expr)),
        );
        let calc = if input.updating.is_some() {
            calc.carrying_op()
        } else {
            calc
        };
        self.push(&input, Arc::new(calc));
        // A unique key survives a projection that keeps each of its columns as is.
        let unique_key = input.unique_key.as_ref().and_then(|key| {
            key.iter()
                .map(|k| sources.iter().position(|s| *s == Some(*k)))
                .collect::<Option<Vec<usize>>>()
        });
        Ok(Stream {
            schema: p.schema.clone(),
            windows,
            rowtime,
            unique_key,
            ..input
        })
    }

    /// ORDER BY over a bounded stream: one instance sorts everything at the end.
    fn plan_sort(&mut self, sort: &datafusion::logical_expr::Sort) -> Result<Stream> {
        let input = self.plan(&sort.input)?;
        self.append_only(&input, "ORDER BY")?;
        if !input.bounded {
            return Err(not_supported!(
                "ORDER BY over an unbounded stream (rows are emitted as windows close, in window order)"
            ));
        }
        let input = self.single(input, "sort");
        let order = self.sort_exprs(&sort.expr, &input.schema)?;
        let spec = SortSpec {
            schema: arrow_schema(&input.schema),
            order,
            fetch: sort.fetch,
            description: format!(
                "Sort: {}{}",
                sort.expr
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                sort.fetch
                    .map(|f| format!(", fetch={f}"))
                    .unwrap_or_default()
            ),
        };
        self.push(&input, Arc::new(spec));
        Ok(Stream {
            unordered: false,
            ..input
        })
    }

    fn sort_exprs(
        &self,
        exprs: &[SortExpr],
        schema: &DFSchemaRef,
    ) -> Result<Vec<datafusion::physical_expr::PhysicalSortExpr>> {
        let ordering = create_physical_sort_exprs(
            exprs,
            schema,
            self.props,
            &PhysicalPlanningContext::default(),
        )?;
        Ok(ordering)
    }

    fn limit(&mut self, input: Stream, skip: usize, fetch: Option<usize>) -> Result<Stream> {
        self.append_only(&input, "LIMIT")?;
        let single = self.single(input, "limit");
        let input = self.ordered(single);
        self.push(&input, Arc::new(LimitSpec { skip, fetch }));
        Ok(input)
    }
}

/// Whether the plan reads any weir table (otherwise it is a constant query DataFusion can run).
pub fn reads_tables(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::TableScan(_)) {
            found = true;
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}
