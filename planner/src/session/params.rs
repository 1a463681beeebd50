//! Bind parameters (`$1`, `$2`, ...), as the PostgreSQL extended protocol sends them.
//! DataFusion plans them as placeholders: it infers each one's type from where it stands
//! (`v > $1` makes `$1` the type of `v`), and the values replace the placeholders in the
//! logical plan, never in the SQL text. Parameters belong to queries (and EXPLAIN of one):
//! a statement that is recorded and replayed later, such as CREATE SINK, could not replay
//! its values.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{visit_expressions, Expr, Statement, Value};

use super::{Session, StatementResult};
use crate::error::{PlanError, Result};
use crate::sql::{parse_statement, StatementText, WeirStatement};

/// The highest `$n` a statement names (0 without placeholders).
fn placeholder_count(statement: &WeirStatement) -> usize {
    let mut count = 0;
    let mut note = |expr: &Expr| {
        if let Expr::Value(v) = expr {
            if let Value::Placeholder(p) = &v.value {
                if let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                    count = count.max(n);
                }
            }
        }
        ControlFlow::<()>::Continue(())
    };
    match statement {
        WeirStatement::Sql(s) => {
            let _ = visit_expressions(s.as_ref(), &mut note);
        }
        WeirStatement::CreateJob(job) => {
            let _ = visit_expressions(job.query.as_ref(), &mut note);
        }
        _ => {}
    }
    count
}

fn only_in_queries() -> PlanError {
    PlanError::NotSupported(
        "parameters ($1, $2, ...) outside a query; write the values into the statement".into(),
    )
}

impl Session {
    /// The parameters a statement takes: one entry per `$n` up to the highest, with the
    /// type DataFusion infers for it (`None` where nothing in the statement says, or when
    /// the statement cannot be planned without the values).
    pub fn parameter_types(&mut self, stmt: &StatementText) -> Result<Vec<Option<DataType>>> {
        let statement = parse_statement(&stmt.text, stmt.line)?;
        let count = placeholder_count(&statement);
        if count == 0 {
            return Ok(Vec::new());
        }
        let WeirStatement::Sql(statement) = statement else {
            return Err(only_in_queries());
        };
        let query = match *statement {
            Statement::Explain { statement, .. } => *statement,
            other => other,
        };
        if !matches!(query, Statement::Query(_)) {
            return Err(only_in_queries());
        }
        let inferred = match self.logical_plan(query) {
            Ok(plan) => parameter_list(&plan.get_parameter_types()?),
            Err(_) => Vec::new(),
        };
        Ok((0..count)
            .map(|i| inferred.get(i).cloned().flatten())
            .collect())
    }

    /// Runs a statement with `values` for its `$1`, `$2`, ...
    pub fn execute_with_params(
        &mut self,
        stmt: &StatementText,
        values: Vec<ScalarValue>,
    ) -> Result<StatementResult> {
        self.with_params(stmt, values, |s| s.execute(stmt))
    }

    /// The columns a statement returns with `values` for its parameters.
    pub fn describe_with_params(
        &mut self,
        stmt: &StatementText,
        values: Vec<ScalarValue>,
    ) -> Result<Option<SchemaRef>> {
        self.with_params(stmt, values, |s| s.describe_statement(stmt))
    }

    fn with_params<T>(
        &mut self,
        stmt: &StatementText,
        values: Vec<ScalarValue>,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        if values.is_empty() {
            return f(self);
        }
        if !matches!(
            parse_statement(&stmt.text, stmt.line)?,
            WeirStatement::Sql(_)
        ) {
            return Err(only_in_queries());
        }
        self.params = Some(values);
        let result = f(self);
        self.params = None;
        result
    }

    /// The plan with this statement's bound values in place of its placeholders.
    pub(super) fn bind_params(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        match &self.params {
            Some(values) => bind_params(plan, values),
            None => Ok(plan),
        }
    }
}

/// Inferred parameter types by `$n` as a list from `$1` to the highest `$n`.
pub fn parameter_list(types: &HashMap<String, Option<DataType>>) -> Vec<Option<DataType>> {
    let count = types
        .keys()
        .filter_map(|k| k.strip_prefix('$')?.parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    (1..=count)
        .map(|n| types.get(&format!("${n}")).cloned().flatten())
        .collect()
}

/// The plan with `values` in place of its placeholders `$1`, `$2`, ..., each value cast to
/// the type DataFusion inferred for it (a text `'10'` compared with a BIGINT becomes 10).
pub fn bind_params(plan: LogicalPlan, values: &[ScalarValue]) -> Result<LogicalPlan> {
    let types = plan.get_parameter_types()?;
    let values = values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let cast = match types.get(&format!("${}", i + 1)) {
                Some(Some(t)) if *t != value.data_type() => value.cast_to(t).map_err(|e| {
                    PlanError::Invalid(format!(
                        "parameter ${}: {value} is not a valid {t}: {e}",
                        i + 1
                    ))
                })?,
                _ => value.clone(),
            };
            Ok(cast)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(plan.with_param_values(ParamValues::from(values))?)
}
