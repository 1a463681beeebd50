//! What DataFusion's SQL planner sees: weir's tables as table sources, the window table
//! functions' relation planner, and DataFusion's functions.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::planner::{ExprPlanner, RelationPlanner};
use datafusion::logical_expr::{
    AggregateUDF, HigherOrderUDF, LogicalPlan, ScalarUDF, TableSource, TableType, WindowUDF,
};
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::prelude::SessionConfig as DFSessionConfig;
use datafusion::sql::planner::ContextProvider;
use weir_engine::WindowSpec;

use crate::catalog::Catalog;
use crate::window_tvf::WindowFunctions;

/// A window table function applied to a table.
#[derive(Debug, Clone)]
pub struct WindowTvf {
    pub table: String,
    pub time_column: usize,
    pub spec: WindowSpec,
    /// SESSION's partition keys: columns of the table.
    pub partition: Vec<usize>,
    /// As written, for EXPLAIN.
    pub text: String,
}

/// What a scan reads.
#[derive(Debug, Clone)]
pub enum ScanKind {
    Table(String),
    Window(WindowTvf),
}

/// A table source for DataFusion's planner; the stream planner reads `kind` back from the
/// plan's TableScan.
#[derive(Debug)]
pub struct StreamTableSource {
    pub schema: SchemaRef,
    pub kind: ScanKind,
}

impl TableSource for StreamTableSource {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// A view for DataFusion's planner, which reads its plan in place of a scan.
#[derive(Debug)]
pub struct ViewSource {
    pub schema: SchemaRef,
    pub plan: LogicalPlan,
}

impl TableSource for ViewSource {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn get_logical_plan(&self) -> Option<Cow<'_, LogicalPlan>> {
        Some(Cow::Borrowed(&self.plan))
    }
}

/// Builds the DataFusion session state weir plans with.
pub fn new_session_state() -> SessionState {
    let mut config = DFSessionConfig::new();
    // Plain Utf8 strings: what connectors produce and clients expect.
    config.options_mut().sql_parser.map_string_types_to_utf8view = false;
    config.options_mut().execution.time_zone = Some("+00:00".into());
    // COUNT(DISTINCT x) must stay one aggregation so it can be windowed.
    let rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> = Optimizer::new()
        .rules
        .into_iter()
        .filter(|r| r.name() != "single_distinct_aggregation_to_group_by")
        .collect();
    SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_optimizer_rules(rules)
        .with_relation_planners(vec![Arc::new(WindowFunctions)])
        .build()
}

/// The planner's view of the catalog and the session's functions.
pub struct PlanningContext<'a> {
    pub state: &'a SessionState,
    pub catalog: &'a Catalog,
}

impl<'a> PlanningContext<'a> {
    pub fn new(state: &'a SessionState, catalog: &'a Catalog) -> Self {
        Self { state, catalog }
    }
}

impl ContextProvider for PlanningContext<'_> {
    fn get_table_source(&self, name: TableReference) -> DFResult<Arc<dyn TableSource>> {
        if let Some(view) = self.catalog.view(name.table()) {
            return Ok(Arc::new(ViewSource {
                schema: Arc::clone(&view.schema),
                plan: view.plan.clone(),
            }));
        }
        match self.catalog.get(name.table()) {
            Some(def) => Ok(Arc::new(StreamTableSource {
                schema: Arc::clone(&def.schema),
                kind: ScanKind::Table(def.name.clone()),
            })),
            // Typed, so that the error comes out of DataFusion's planner as UnknownTable.
            None => Err(DataFusionError::External(Box::new(
                crate::error::PlanError::unknown_table(name.to_string()),
            ))),
        }
    }

    fn get_relation_planners(&self) -> &[Arc<dyn RelationPlanner>] {
        self.state.relation_planners()
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        self.state.expr_planners()
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.state.scalar_functions().get(name).cloned()
    }

    fn get_higher_order_meta(&self, name: &str) -> Option<Arc<HigherOrderUDF>> {
        self.state.higher_order_functions().get(name).cloned()
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.state.aggregate_functions().get(name).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.state.window_functions().get(name).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        self.state.config_options()
    }

    fn udf_names(&self) -> Vec<String> {
        self.state.scalar_functions().keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        self.state
            .higher_order_functions()
            .keys()
            .cloned()
            .collect()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.state.aggregate_functions().keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.state.window_functions().keys().cloned().collect()
    }
}
