//! Window table functions in FROM: `TUMBLE(t, col, size [, offset])`,
//! `HOP(t, col, slide, size [, offset])`, `CUMULATE(t, col, step, size [, offset])` and
//! `SESSION(t, col, gap [, key, ...])`, with arguments by position or by Flink's names
//! (`DATA =>`, `TIMECOL =>`, `SIZE =>`, `SLIDE =>`, `STEP =>`, `GAP =>`, `OFFSET =>`; the
//! parser turns Flink's `TABLE t PARTITION BY k` into `PARTITION => k` arguments).
//!
//! [`WindowFunctions`] is a DataFusion relation planner: it plans each call into a scan of a
//! [`StreamTableSource`] whose columns are the table's plus `window_start`, `window_end` and
//! `window_time`, and which carries its window ([`ScanKind::Window`]). The scan is named by the
//! table, and the call's alias applies as for any table, so `t.col` resolves and EXPLAIN shows
//! the table's name.
//! The stream planner reads the window back from the scan and assigns windows at the source.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{DFSchema, ScalarValue, TableReference};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::planner::{
    PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning,
};
use datafusion::logical_expr::{ColumnarValue, LogicalPlanBuilder, TableSource};
use datafusion::physical_expr::create_physical_expr;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, FunctionArg, FunctionArgExpr, TableFactor};
use weir_engine::WindowSpec;

use crate::context::{ScanKind, StreamTableSource, WindowTvf};
use crate::error::{PlanError, Result};
use crate::sql::normalize;
use crate::{invalid, not_supported};

const NANOS_PER_DAY: i64 = 86_400_000_000_000;
/// The columns a window table function adds to its table's, in this order.
pub const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];
/// HOP and CUMULATE copy each row into size / slide (step) windows; beyond this a query is a
/// mistake.
const MAX_WINDOWS_PER_ROW: i128 = 10_000;

/// Plans the window table functions (and refuses other table functions).
#[derive(Debug)]
pub struct WindowFunctions;

impl RelationPlanner for WindowFunctions {
    fn plan_relation(
        &self,
        relation: TableFactor,
        context: &mut dyn RelationPlannerContext,
    ) -> DFResult<RelationPlanning> {
        let TableFactor::Table {
            name,
            alias,
            args: Some(args),
            ..
        } = &relation
        else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let call = Call {
            function: name.to_string().to_ascii_uppercase(),
            args: &args.args,
            text: format!(
                "{name}({})",
                args.args
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let (table, source) = call.plan(context).map_err(external)?;
        let plan = LogicalPlanBuilder::scan(
            TableReference::bare(table),
            Arc::new(source) as Arc<dyn TableSource>,
            None,
        )?
        .build()?;
        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
            plan,
            alias.clone(),
        ))))
    }
}

/// Carries weir's error through DataFusion's planner (`PlanError: From<DataFusionError>` takes
/// it back out).
fn external(e: PlanError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// One table function call as written.
struct Call<'a> {
    function: String,
    args: &'a [FunctionArg],
    /// The call as written, for errors and EXPLAIN.
    text: String,
}

impl Call<'_> {
    /// `TUMBLE(table, time_column, size [, offset])` and the like.
    fn usage(&self, params: &[&str]) -> String {
        if self.function == "SESSION" {
            return "SESSION(table, time_column, gap [, partition_key, ...])".into();
        }
        let middle: Vec<String> = params[2..params.len() - 1]
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect();
        format!(
            "{}(table, time_column, {} [, offset])",
            self.function,
            middle.join(", ")
        )
    }

    /// The argument given for each parameter: positional ones in order, named ones
    /// (`SIZE => ...`) by name. The last `optional` parameters (the offset) may be left out.
    /// SESSION's partition keys come back apart: positional arguments after the gap, and
    /// `PARTITION => key` arguments.
    fn bind(
        &self,
        params: &[&str],
        optional: usize,
    ) -> Result<(Vec<Option<&SqlExpr>>, Vec<&SqlExpr>)> {
        let function = &self.function;
        let session = function == "SESSION";
        let mut bound: Vec<Option<&SqlExpr>> = vec![None; params.len()];
        let mut keys = Vec::new();
        let mut next = 0;
        for a in self.args {
            let (slot, expr) = match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                    if session && next >= params.len() =>
                {
                    keys.push(e);
                    continue;
                }
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => {
                    next += 1;
                    (next - 1, e)
                }
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } if session && name.value.eq_ignore_ascii_case("PARTITION") => {
                    keys.push(e);
                    continue;
                }
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => {
                    let upper = name.value.to_ascii_uppercase();
                    let slot = params.iter().position(|p| *p == upper).ok_or_else(|| {
                        invalid!(
                            "{function}: no argument named {name} (its arguments: {})",
                            params.join(", ")
                        )
                    })?;
                    (slot, e)
                }
                _ => {
                    return Err(invalid!(
                        "{function}: unexpected argument {a} in {}",
                        self.text
                    ))
                }
            };
            match bound.get_mut(slot) {
                Some(b @ None) => *b = Some(expr),
                Some(Some(_)) => {
                    return Err(invalid!(
                        "{function}: {} is given twice in {}",
                        params[slot],
                        self.text
                    ))
                }
                None => {
                    return Err(invalid!(
                        "{function} takes {}, got {}",
                        self.usage(params),
                        self.text
                    ))
                }
            }
        }
        if let Some(i) = bound[..params.len() - optional]
            .iter()
            .position(Option::is_none)
        {
            return Err(invalid!(
                "{function} takes {}, got {} (no {})",
                self.usage(params),
                self.text,
                params[i]
            ));
        }
        Ok((bound, keys))
    }

    /// The windowed table's name and its source.
    fn plan(
        &self,
        context: &mut dyn RelationPlannerContext,
    ) -> Result<(String, StreamTableSource)> {
        let function = self.function.as_str();
        let (params, optional): (&[&str], usize) = match function {
            "TUMBLE" => (&["DATA", "TIMECOL", "SIZE", "OFFSET"], 1),
            "HOP" => (&["DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"], 1),
            "CUMULATE" => (&["DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"], 1),
            "SESSION" => (&["DATA", "TIMECOL", "GAP"], 0),
            _ => return Err(not_supported!("table function {}", self.text)),
        };
        let (bound, keys) = self.bind(params, optional)?;
        let (Some(table), Some(column)) = (bound[0], bound[1]) else {
            return Err(PlanError::Internal("window arguments unbound".into()));
        };
        let (table, time_column, schema) = self.time_column(context, table, column)?;
        let partition = self.partition_keys(&table, &schema, &keys)?;
        let mut nanos = Vec::with_capacity(params.len());
        for (i, expr) in bound.iter().enumerate().skip(2) {
            let what = params[i].to_ascii_lowercase();
            nanos.push(match expr {
                Some(e) => self.interval_nanos(context, e, &what)?,
                None => 0,
            });
        }
        let spec = match (function, nanos.as_slice()) {
            ("TUMBLE", &[size, offset]) => WindowSpec::tumble(size, offset),
            ("HOP", &[slide, size, offset]) => WindowSpec::hop(slide, size, offset),
            ("SESSION", &[gap]) => WindowSpec::session(gap),
            (_, &[step, size, offset]) => WindowSpec::cumulate(step, size, offset),
            _ => return Err(PlanError::Internal("window arguments unbound".into())),
        }
        .map_err(|e| invalid!("{e}"))?;
        let per_row = spec.windows_per_row();
        if per_row > MAX_WINDOWS_PER_ROW {
            return Err(invalid!(
                "{function}: size / {} puts each row in {per_row} windows; at most {MAX_WINDOWS_PER_ROW} are allowed",
                params[2].to_ascii_lowercase()
            ));
        }
        let source = StreamTableSource {
            schema: self.windowed_schema(&table, &schema)?,
            kind: ScanKind::Window(WindowTvf {
                table: table.clone(),
                time_column,
                spec,
                partition,
                text: self.text.clone(),
            }),
        };
        Ok((table, source))
    }

    /// The table named by the first argument, and the index of its TIMESTAMP column named by
    /// the second.
    fn time_column(
        &self,
        context: &mut dyn RelationPlannerContext,
        table: &SqlExpr,
        column: &SqlExpr,
    ) -> Result<(String, usize, Arc<Schema>)> {
        let function = &self.function;
        let table = ident_arg(table).ok_or_else(|| {
            invalid!("{function}: the first argument must be a table name, got {table}")
        })?;
        let source = context
            .context_provider()
            .get_table_source(TableReference::bare(table.clone()))?;
        let schema = source.schema();
        let column = ident_arg(column).ok_or_else(|| {
            invalid!("{function}: the second argument must be a column of {table}, got {column}")
        })?;
        let (index, field) = schema
            .column_with_name(&column)
            .ok_or_else(|| invalid!("{function}: table {table} has no column '{column}'"))?;
        if !matches!(field.data_type(), DataType::Timestamp(..)) {
            return Err(invalid!(
                "{function}: the time column {table}.{column} must be a TIMESTAMP, it is {}",
                field.data_type()
            ));
        }
        Ok((table, index, schema))
    }

    /// SESSION's partition keys: the indices of the named columns of `table`.
    fn partition_keys(
        &self,
        table: &str,
        schema: &Schema,
        keys: &[&SqlExpr],
    ) -> Result<Vec<usize>> {
        keys.iter()
            .map(|k| {
                let name = ident_arg(k).ok_or_else(|| {
                    invalid!("SESSION: a partition key must be a column of {table}, got {k}")
                })?;
                schema.index_of(&name).map_err(|_| {
                    invalid!("SESSION: table {table} has no column '{name}' to partition by")
                })
            })
            .collect()
    }

    /// The table's columns plus `window_start`, `window_end` and `window_time` (Flink's: the
    /// end less a millisecond, a time a later window can be computed from).
    fn windowed_schema(&self, table: &str, schema: &Schema) -> Result<Arc<Schema>> {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        for name in WINDOW_COLUMNS {
            if schema.column_with_name(name).is_some() {
                return Err(invalid!(
                    "{}: table {table} already has a column named {name} (over a view, alias it there, as in Flink: {name} AS inner_{name})",
                    self.function
                ));
            }
            fields.push(Field::new(
                name,
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ));
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Evaluates a constant interval argument to nanoseconds.
    fn interval_nanos(
        &self,
        context: &mut dyn RelationPlannerContext,
        expr: &SqlExpr,
        what: &str,
    ) -> Result<i64> {
        let call = &self.function;
        let value = constant(context, expr)?;
        let nanos = interval_value_nanos(&value).map(|n| {
            i64::try_from(n).map_err(|_| invalid!("{call}: the {what} {expr} is out of range"))
        });
        nanos.transpose()?.ok_or_else(|| {
            invalid!(
                "{call}: the {what} must be a fixed INTERVAL such as INTERVAL '10' SECOND, got {expr}"
            )
        })
    }
}

/// The value of a constant expression.
fn constant(context: &mut dyn RelationPlannerContext, expr: &SqlExpr) -> Result<ScalarValue> {
    let empty = DFSchema::empty();
    let logical = context.sql_to_expr(expr.clone(), &empty)?;
    let physical = create_physical_expr(
        &logical,
        &empty,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .map_err(|e| PlanError::Internal(e.to_string()))?;
    Ok(match physical.evaluate(&one_row)? {
        ColumnarValue::Scalar(s) => s,
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
    })
}

/// A fixed-length interval or duration in nanoseconds (months have no fixed length).
fn interval_value_nanos(value: &ScalarValue) -> Option<i128> {
    match *value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(v.days as i128 * NANOS_PER_DAY as i128 + v.nanoseconds as i128)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(v.days as i128 * NANOS_PER_DAY as i128 + v.milliseconds as i128 * 1_000_000)
        }
        ScalarValue::DurationSecond(Some(v)) => Some(v as i128 * 1_000_000_000),
        ScalarValue::DurationMillisecond(Some(v)) => Some(v as i128 * 1_000_000),
        ScalarValue::DurationMicrosecond(Some(v)) => Some(v as i128 * 1_000),
        ScalarValue::DurationNanosecond(Some(v)) => Some(v as i128),
        _ => None,
    }
}

fn ident_arg(arg: &SqlExpr) -> Option<String> {
    match arg {
        SqlExpr::Identifier(i) => Some(normalize(i)),
        SqlExpr::CompoundIdentifier(parts) => parts.last().map(normalize),
        _ => None,
    }
}
