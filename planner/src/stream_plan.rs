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
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, SortExpr};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::{create_physical_expr, create_physical_sort_exprs, PhysicalExpr};
use weir_engine::event_time::WindowAssignment;
use weir_engine::operators::{
    CalcOperator, EmitOrderSpec, GroupColumn, LimitSpec, SortSpec, WindowAggregateSpec,
    WindowBound, WindowColumn, WindowEdge,
};
use weir_engine::{
    EventTimeSpec, JobGraph, OperatorFactory, Partitioning, SourceStage, Stage, StageInput,
};

use crate::catalog::Catalog;
use crate::context::{ScanKind, StreamTableSource};
use crate::error::{PlanError, Result};
use crate::{invalid, not_supported};

mod join;

/// A planned stream: the stage that produces it, its schema and where its window columns are.
struct Stream {
    stage: usize,
    schema: DFSchemaRef,
    /// For each column, the bound of the rows' window it holds, if any.
    windows: Vec<Option<WindowBound>>,
    bounded: bool,
    /// Rows come from an aggregation, in hash-table and thread-timing order.
    unordered: bool,
}

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
    /// Source stages read by several scans, by source key.
    shared: HashMap<String, usize>,
    /// Columns some scan of each source reads (`None`: all of them).
    read: HashMap<String, Option<std::collections::BTreeSet<usize>>>,
}

/// What makes two scans read the same stream: the table and its window function.
fn source_key(source: &StreamTableSource) -> String {
    match &source.kind {
        ScanKind::Table(t) => t.clone(),
        ScanKind::Window(w) => format!("{}|{}|{:?}", w.table, w.time_column, w.spec),
    }
}

fn arrow_schema(schema: &DFSchemaRef) -> SchemaRef {
    Arc::new(Schema::new(schema.as_arrow().fields().clone()))
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
            shared: HashMap::new(),
            read: HashMap::new(),
        }
    }

    /// Plans stages that do not depend on the parallelism (see `fixed_shape`).
    pub fn with_fixed_shape(mut self) -> Self {
        self.fixed_shape = true;
        self
    }

    /// Plans `plan` with `sink` consuming its results in a single instance.
    pub fn plan_job(
        mut self,
        name: &str,
        plan: &LogicalPlan,
        sink: Arc<dyn OperatorFactory>,
    ) -> Result<JobGraph> {
        self.count_scans(plan);
        let stream = self.plan(plan)?;
        let single = self.single(stream, "result");
        let stream = self.ordered(single);
        Ok(self.with_sink(name, stream.stage, sink))
    }

    /// The job graph with `sink` at the end of `stage`.
    fn with_sink(mut self, name: &str, stage: usize, sink: Arc<dyn OperatorFactory>) -> JobGraph {
        self.stages[stage].chain.push(sink);
        JobGraph {
            name: name.to_string(),
            stages: self.stages,
        }
    }

    /// Plans `plan` with `sink` in every instance of the stage producing the results: no
    /// merge and no ordering, for sinks whose instances write independently (each instance
    /// pre-commits and commits its own part).
    pub fn plan_parallel_job(
        mut self,
        name: &str,
        plan: &LogicalPlan,
        sink: Arc<dyn OperatorFactory>,
    ) -> Result<JobGraph> {
        self.count_scans(plan);
        let stream = self.plan(plan)?;
        Ok(self.with_sink(name, stream.stage, sink))
    }

    /// Counts the scans of each source, so a source read twice (a self-join, or an aggregate
    /// joined with its own input as in Nexmark q5 and q7) is generated once and fanned out.
    fn count_scans(&mut self, plan: &LogicalPlan) {
        let _ = plan.apply(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                if let Some(source) = scan.source.as_ref().downcast_ref::<StreamTableSource>() {
                    let key = source_key(source);
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
        });
        Stream {
            stage: self.stages.len() - 1,
            ..stream
        }
    }

    /// A single-instance stream whose rows come out in a deterministic order: aggregation
    /// results are sorted per watermark, so output does not depend on parallelism or timing.
    fn ordered(&mut self, stream: Stream) -> Stream {
        if stream.unordered {
            let column = |edge: WindowEdge| {
                stream.windows.iter().enumerate().find_map(|(i, w)| {
                    w.filter(|b| b.edge == edge)
                        .map(|b| WindowColumn::new(i, b))
                })
            };
            let window = column(WindowEdge::End).or_else(|| column(WindowEdge::Start));
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
            LogicalPlan::TableScan(scan) => {
                let source = scan
                    .source
                    .as_ref()
                    .downcast_ref::<StreamTableSource>()
                    .ok_or_else(|| {
                        PlanError::Internal(format!("scan of unknown table {}", scan.table_name))
                    })?;
                if !scan.filters.is_empty() {
                    return Err(PlanError::Internal(
                        "filter pushed into a stream scan".into(),
                    ));
                }
                let stream = self.plan_source(source)?;
                let full =
                    DFSchemaRef::new(datafusion::common::DFSchema::try_from_qualified_schema(
                        scan.table_name.clone(),
                        &source.schema,
                    )?);
                let stream = Stream {
                    schema: full,
                    ..stream
                };
                let stream = match &scan.projection {
                    Some(cols)
                        if cols.len() != source.schema.fields().len()
                            || cols.iter().enumerate().any(|(i, &c)| i != c) =>
                    {
                        let exprs: Vec<Arc<dyn PhysicalExpr>> = cols
                            .iter()
                            .map(|&i| {
                                Arc::new(PhysicalColumn::new(source.schema.field(i).name(), i))
                                    as Arc<dyn PhysicalExpr>
                            })
                            .collect();
                        let names: Vec<&str> = cols
                            .iter()
                            .map(|&i| source.schema.field(i).name().as_str())
                            .collect();
                        let calc = CalcOperator::new(
                            None,
                            Some(exprs),
                            arrow_schema(&scan.projected_schema),
                            format!("Project: {}", names.join(", ")),
                        );
                        self.push(&stream, Arc::new(calc));
                        Stream {
                            windows: cols.iter().map(|&i| stream.windows[i]).collect(),
                            schema: scan.projected_schema.clone(),
                            ..stream
                        }
                    }
                    _ => Stream {
                        schema: scan.projected_schema.clone(),
                        ..stream
                    },
                };
                match scan.fetch {
                    Some(fetch) => self.limit(stream, 0, Some(fetch)),
                    None => Ok(stream),
                }
            }
            LogicalPlan::Projection(p) => {
                let input = self.plan(&p.input)?;
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| self.physical(e, &input.schema))
                    .collect::<Result<Vec<_>>>()?;
                let windows = p
                    .expr
                    .iter()
                    .map(|e| match e.clone().unalias() {
                        Expr::Column(c) => input
                            .schema
                            .index_of_column(&c)
                            .ok()
                            .and_then(|i| input.windows[i]),
                        _ => None,
                    })
                    .collect();
                let calc = CalcOperator::new(
                    None,
                    Some(exprs),
                    arrow_schema(&p.schema),
                    format!("Project: {}", exprs_text(&p.expr)),
                );
                self.push(&input, Arc::new(calc));
                Ok(Stream {
                    schema: p.schema.clone(),
                    windows,
                    ..input
                })
            }
            LogicalPlan::Filter(f) => {
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
            LogicalPlan::Sort(sort) => {
                let input = self.plan(&sort.input)?;
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
            LogicalPlan::Union(_) => Err(not_supported!("UNION")),
            LogicalPlan::Window(_) => Err(not_supported!(
                "OVER (...) window functions; use TUMBLE or HOP with GROUP BY"
            )),
            LogicalPlan::Distinct(_) => Err(not_supported!("this form of DISTINCT")),
            LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => Err(PlanError::Internal(
                "a query without a table reached the stream planner".into(),
            )),
            other => Err(not_supported!("{} in a streaming query", other.display())),
        }
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
        let single = self.single(input, "limit");
        let input = self.ordered(single);
        self.push(&input, Arc::new(LimitSpec { skip, fetch }));
        Ok(input)
    }

    /// The stream of one scan of `source`. A source read by several scans runs once: its
    /// stage (reader, watermark, window assignment) feeds one stage per scan, in which the
    /// scan's own projection and filters are chained.
    fn plan_source(&mut self, source: &StreamTableSource) -> Result<Stream> {
        let key = source_key(source);
        if self.scans.get(&key).copied().unwrap_or(0) < 2 {
            return self.plan_source_stage(source);
        }
        let stream = match self.shared.get(&key) {
            Some(&stage) => {
                let mut stream = self.plan_source_stage(source)?;
                // Planned again only for its schema and lineage; the stage is dropped.
                self.stages.pop();
                stream.stage = stage;
                stream
            }
            None => {
                let stream = self.plan_source_stage(source)?;
                self.shared.insert(key, stream.stage);
                stream
            }
        };
        let table = match &source.kind {
            ScanKind::Table(t) => t.clone(),
            ScanKind::Window(w) => w.table.clone(),
        };
        self.stages.push(Stage {
            name: format!("scan {table}"),
            parallelism: self.stages[stream.stage].parallelism,
            source: None,
            inputs: vec![StageInput {
                from: stream.stage,
                partitioning: Partitioning::Forward,
            }],
            chain: vec![],
        });
        Ok(Stream {
            stage: self.stages.len() - 1,
            ..stream
        })
    }

    /// A new source stage reading `source`, with its event-time handling.
    fn plan_source_stage(&mut self, source: &StreamTableSource) -> Result<Stream> {
        let (table, window) = match &source.kind {
            ScanKind::Table(t) => (t.clone(), None),
            ScanKind::Window(w) => (w.table.clone(), Some(w.clone())),
        };
        let def = self
            .catalog
            .get(&table)
            .ok_or_else(|| PlanError::UnknownTable(table.clone()))?;
        let table_schema = DFSchemaRef::new(
            datafusion::common::DFSchema::try_from_qualified_schema(table.as_str(), &def.schema)?,
        );
        let mut text = Vec::new();
        let watermark = match &def.watermark {
            Some(w) => {
                text.push(format!("Watermark: {} AS {}", w.column, w.text));
                let expr = fixed_interval_as_nanos(&w.expr, &table_schema)
                    .unwrap_or_else(|| w.expr.clone());
                Some(self.physical(&expr, &table_schema)?)
            }
            None => None,
        };
        let mut windows = vec![None; def.schema.fields().len()];
        let assignment = match &window {
            Some(w) => {
                text.push(format!("WindowAssign: {}", w.text));
                windows.push(Some(WindowBound::start(w.spec.size())));
                windows.push(Some(WindowBound::end(w.spec.size())));
                // Columns no scan reads are not copied into each window of a row.
                let unused: Vec<usize> = match self.read.get(&source_key(source)) {
                    Some(Some(read)) => (0..def.schema.fields().len())
                        .filter(|i| !read.contains(i))
                        .collect(),
                    _ => Vec::new(),
                };
                let fields: Vec<datafusion::arrow::datatypes::Field> = source
                    .schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        if unused.contains(&i) {
                            datafusion::arrow::datatypes::Field::new(
                                f.name(),
                                datafusion::arrow::datatypes::DataType::Null,
                                true,
                            )
                        } else {
                            f.as_ref().clone()
                        }
                    })
                    .collect();
                Some(WindowAssignment {
                    time_column: w.time_column,
                    spec: w.spec,
                    output_schema: Arc::new(Schema::new(fields)),
                    unused,
                })
            }
            None => None,
        };
        let bounded = def.source.is_bounded();
        // A source whose splits can move between instances (Kafka partitions) runs at most at
        // the job's parallelism; one with fixed partitions (files) runs one per partition.
        let partitions = def.source.partitions()?;
        let partitions = if def.source.splits_movable() {
            partitions.clamp(1, self.parallelism)
        } else {
            partitions
        };
        self.stages.push(Stage {
            name: format!("source {table}"),
            parallelism: partitions,
            source: Some(SourceStage {
                factory: Arc::clone(&def.source),
                event_time: EventTimeSpec {
                    watermark,
                    window: assignment,
                },
                event_time_text: text,
            }),
            inputs: vec![],
            chain: vec![],
        });
        Ok(Stream {
            stage: self.stages.len() - 1,
            schema: table_schema,
            windows,
            bounded,
            unordered: false,
        })
    }

    fn plan_aggregate(&mut self, agg: &datafusion::logical_expr::Aggregate) -> Result<Stream> {
        let input = self.plan(&agg.input)?;
        if agg
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Err(not_supported!("GROUPING SETS, CUBE and ROLLUP"));
        }
        let input_arrow = arrow_schema(&input.schema);
        let mut keys: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut group_columns = Vec::new();
        let mut window: Option<WindowColumn> = None;
        let mut out_windows = Vec::new();
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
                    group_columns.push(GroupColumn::WindowStart);
                    if window.is_none() {
                        window = Some(WindowColumn::new(column, bound));
                    }
                    out_windows.push(Some(bound));
                }
                Some((column, bound)) => {
                    group_columns.push(GroupColumn::WindowEnd);
                    window = Some(WindowColumn::new(column, bound));
                    out_windows.push(Some(bound));
                }
                None => {
                    group_columns.push(GroupColumn::Key(keys.len()));
                    keys.push(self.physical(e, &input.schema)?);
                    out_windows.push(None);
                }
            }
        }
        if window.is_none() && !input.bounded {
            return Err(not_supported!(
                "GROUP BY without window_start or window_end over an unbounded source; aggregate over TUMBLE(...) or HOP(...) windows"
            ));
        }
        let planning = PhysicalPlanningContext::default();
        let mut aggregates = Vec::new();
        let mut filters = Vec::new();
        for e in &agg.aggr_expr {
            let lowered =
                LoweredAggregateBuilder::new(e, &input.schema, &input_arrow, self.props, &planning)
                    .build()?;
            if !lowered.order_bys.is_empty() {
                return Err(not_supported!("ORDER BY inside an aggregate ({e})"));
            }
            aggregates.push(lowered.aggregate);
            filters.push(lowered.filter);
        }
        out_windows.extend(std::iter::repeat_n(None, agg.aggr_expr.len()));
        let window_text = match window {
            Some(_) => "per window",
            None => "over the whole input",
        };
        let description = format!(
            "WindowAggregate ({window_text}): group by [{}], aggregates [{}]",
            exprs_text(&agg.group_expr),
            exprs_text(&agg.aggr_expr)
        );
        let spec = WindowAggregateSpec {
            input_schema: Arc::clone(&input_arrow),
            keys: keys.clone(),
            window,
            group_columns,
            aggregates,
            filters,
            output_schema: arrow_schema(&agg.schema),
            description,
        };
        // Route by the non-window keys; with none, by the window, so windows spread over instances.
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
        let stage = if chain && self.stages[input.stage].parallelism == 1 {
            input.stage
        } else {
            self.stages.push(Stage {
                name: "aggregate".into(),
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
            });
            self.stages.len() - 1
        };
        self.stages[stage].chain.push(Arc::new(spec));
        if out_windows.len() != agg.schema.fields().len() {
            return Err(invalid!(
                "aggregate output has {} columns, expected {}",
                agg.schema.fields().len(),
                out_windows.len()
            ));
        }
        Ok(Stream {
            stage,
            schema: agg.schema.clone(),
            windows: out_windows,
            bounded: input.bounded,
            unordered: true,
        })
    }
}

/// `ts - INTERVAL '4' SECOND` (or `+`) over a `TIMESTAMP` column, with an interval of fixed
/// length (no months), as integer arithmetic on nanoseconds: the same values without the
/// per-row calendar arithmetic of interval subtraction. Evaluated for every source row (the
/// watermark), where it cost about a tenth of Nexmark q0's time. `None`: not of this shape.
fn fixed_interval_as_nanos(expr: &Expr, schema: &DFSchemaRef) -> Option<Expr> {
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::{BinaryExpr, Cast, Operator};
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    if !matches!(op, Operator::Minus | Operator::Plus) {
        return None;
    }
    let nanos: i64 = match right.as_ref() {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => (v.days
            as i64)
            .checked_mul(86_400_000_000_000)?
            .checked_add(v.nanoseconds)?,
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => (v.days as i64)
            .checked_mul(86_400_000_000_000)?
            .checked_add((v.milliseconds as i64).checked_mul(1_000_000)?)?,
        _ => return None,
    };
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    if left.get_type(schema).ok()? != ts {
        return None;
    }
    let as_int = Expr::Cast(Cast::new(left.clone(), DataType::Int64));
    let shifted = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(as_int),
        *op,
        Box::new(Expr::Literal(ScalarValue::Int64(Some(nanos)), None)),
    ));
    Some(Expr::Cast(Cast::new(Box::new(shifted), ts)))
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
