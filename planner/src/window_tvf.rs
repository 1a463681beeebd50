//! Window table functions in FROM: `TUMBLE(t, col, size [, offset])` and
//! `HOP(t, col, slide, size [, offset])`.
//!
//! Each call is replaced in the statement by a synthetic table whose columns are the table's
//! plus `window_start` and `window_end`; the call's alias (or the table's name) stays the
//! relation's name, so `t.col` still resolves. The stream planner recognises the synthetic table
//! in the plan and assigns windows at the source.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::create_physical_expr;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, Ident, ObjectName, Statement, TableAlias,
    TableFactor, VisitMut, VisitorMut,
};
use weir_engine::WindowSpec;

use crate::catalog::Catalog;
use crate::context::{ScanKind, StreamTableSource, WindowTvf};
use crate::error::{PlanError, Result};
use crate::sql::normalize;
use crate::{invalid, not_supported};

const NANOS_PER_DAY: i64 = 86_400_000_000_000;
/// HOP copies each row into size / slide windows; beyond this a query is a mistake.
const MAX_WINDOWS_PER_ROW: i128 = 10_000;

/// Evaluates a constant interval argument to nanoseconds.
fn interval_nanos(state: &SessionState, expr: &SqlExpr, what: &str, call: &str) -> Result<i64> {
    let parsed = state.create_logical_expr(&expr.to_string(), &DFSchema::empty())?;
    let physical = create_physical_expr(
        &parsed,
        &DFSchema::empty(),
        state.execution_props(),
        &PhysicalPlanningContext::default(),
    )?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .map_err(|e| PlanError::Internal(e.to_string()))?;
    let value = match physical.evaluate(&one_row)? {
        ColumnarValue::Scalar(s) => s,
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
    };
    let nanos: Option<i128> = match value {
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
    };
    let nanos = nanos.map(|n| {
        i64::try_from(n).map_err(|_| invalid!("{call}: the {what} {expr} is out of range"))
    });
    nanos.transpose()?.ok_or_else(|| {
        invalid!(
            "{call}: the {what} must be a fixed INTERVAL such as INTERVAL '10' SECOND, got {expr}"
        )
    })
}

fn arg_expr(arg: &FunctionArg) -> Option<&SqlExpr> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
        FunctionArg::Named {
            arg: FunctionArgExpr::Expr(e),
            ..
        } => Some(e),
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

struct Rewriter<'a> {
    state: &'a SessionState,
    catalog: &'a Catalog,
    found: Vec<(String, Arc<StreamTableSource>)>,
}

impl Rewriter<'_> {
    fn window_table(
        &self,
        function: &str,
        args: &[FunctionArg],
        text: &str,
    ) -> Result<(String, Arc<StreamTableSource>)> {
        let exprs: Vec<&SqlExpr> = args
            .iter()
            .map(|a| {
                arg_expr(a).ok_or_else(|| invalid!("{function}: unexpected argument {a} in {text}"))
            })
            .collect::<Result<_>>()?;
        let usage = match function {
            "TUMBLE" => "TUMBLE(table, time_column, size [, offset])",
            _ => "HOP(table, time_column, slide, size [, offset])",
        };
        let (min, max) = if function == "TUMBLE" { (3, 4) } else { (4, 5) };
        if exprs.len() < min || exprs.len() > max {
            return Err(invalid!("{function} takes {usage}, got {text}"));
        }
        let table = ident_arg(exprs[0]).ok_or_else(|| {
            invalid!(
                "{function}: the first argument must be a table name, got {}",
                exprs[0]
            )
        })?;
        let def = self
            .catalog
            .get(&table)
            .ok_or_else(|| PlanError::UnknownTable(table.clone()))?;
        let column = ident_arg(exprs[1]).ok_or_else(|| {
            invalid!(
                "{function}: the second argument must be a column of {table}, got {}",
                exprs[1]
            )
        })?;
        let (time_column, field) = def
            .schema
            .column_with_name(&column)
            .ok_or_else(|| invalid!("{function}: table {table} has no column '{column}'"))?;
        if !matches!(field.data_type(), DataType::Timestamp(..)) {
            return Err(invalid!(
                "{function}: the time column {table}.{column} must be a TIMESTAMP, it is {}",
                field.data_type()
            ));
        }
        let n = |i: usize, what: &str| interval_nanos(self.state, exprs[i], what, function);
        let spec = if function == "TUMBLE" {
            let offset = if exprs.len() == 4 { n(3, "offset")? } else { 0 };
            WindowSpec::tumble(n(2, "size")?, offset)
        } else {
            let offset = if exprs.len() == 5 { n(4, "offset")? } else { 0 };
            WindowSpec::hop(n(2, "slide")?, n(3, "size")?, offset)
        }
        .map_err(|e| invalid!("{e}"))?;
        if let WindowSpec::Hop { slide, size, .. } = spec {
            let per_row = (size as i128 + slide as i128 - 1) / slide as i128;
            if per_row > MAX_WINDOWS_PER_ROW {
                return Err(invalid!(
                    "{function}: size / slide puts each row in {per_row} windows; at most {MAX_WINDOWS_PER_ROW} are allowed"
                ));
            }
        }
        let mut fields: Vec<Field> = def
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for name in ["window_start", "window_end"] {
            if def.schema.column_with_name(name).is_some() {
                return Err(invalid!(
                    "{function}: table {table} already has a column named {name}"
                ));
            }
            fields.push(Field::new(
                name,
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ));
        }
        let source = StreamTableSource {
            schema: Arc::new(Schema::new(fields)),
            kind: ScanKind::Window(WindowTvf {
                table: table.clone(),
                time_column,
                spec,
                text: text.to_string(),
            }),
        };
        Ok((table, Arc::new(source)))
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = PlanError;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<PlanError> {
        let TableFactor::Table {
            name,
            alias,
            args: Some(args),
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let function = name.to_string().to_ascii_uppercase();
        let text = format!(
            "{name}({})",
            args.args
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let result = match function.as_str() {
            "TUMBLE" | "HOP" => self.window_table(&function, &args.args, &text),
            "SESSION" | "CUMULATE" => Err(not_supported!(
                "{function} windows (TUMBLE and HOP are supported)"
            )),
            _ => Err(not_supported!("table function {name}")),
        };
        let (table, source) = match result {
            Ok(found) => found,
            Err(e) => return ControlFlow::Break(e),
        };
        let synthetic = format!("__weir_window_{}", self.found.len());
        *name = ObjectName::from(vec![Ident::new(synthetic.clone())]);
        // Keep the relation's name: the call's alias, or else the table's.
        alias.get_or_insert_with(|| TableAlias {
            explicit: true,
            name: Ident::new(table),
            columns: vec![],
            at: None,
        });
        if let TableFactor::Table { args, .. } = factor {
            *args = None;
        }
        self.found.push((synthetic, source));
        ControlFlow::Continue(())
    }
}

/// Replaces window table functions in `statement`; returns the synthetic tables to register.
pub fn rewrite_window_functions(
    state: &SessionState,
    catalog: &Catalog,
    statement: &mut Statement,
) -> Result<Vec<(String, Arc<StreamTableSource>)>> {
    let mut rewriter = Rewriter {
        state,
        catalog,
        found: Vec::new(),
    };
    if let ControlFlow::Break(e) = statement.visit(&mut rewriter) {
        return Err(e);
    }
    Ok(rewriter.found)
}

/// Wraps a sqlparser statement for DataFusion's planner.
pub fn df_statement(statement: Statement) -> DFStatement {
    DFStatement::Statement(Box::new(statement))
}
