//! Catalog statements: CREATE TABLE, SHOW TABLES, DESCRIBE.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::sql::planner::SqlToRel;
use datafusion::sql::sqlparser::ast::Ident;
use weir_connectors::sinks::postgres::PostgresTable;
use weir_connectors::{create_source, Options};
use weir_engine::SourceFactory;

use super::{text_rows, Session, StatementResult};
use crate::catalog::{TableDef, TableWatermark};
use crate::context::PlanningContext;
use crate::error::{PlanError, Result};
use crate::invalid;
use crate::sql::{normalize, CreateTable, WatermarkClause};

impl Session {
    pub(super) fn show_tables(&self) -> StatementResult {
        let rows = self
            .catalog
            .tables()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.options.get("connector").unwrap_or_default().to_string(),
                    t.watermark
                        .as_ref()
                        .map(|w| format!("{} AS {}", w.column, w.text))
                        .unwrap_or_default(),
                ]
            })
            .collect();
        text_rows(&["name", "connector", "watermark"], rows)
    }

    pub(super) fn describe(&self, name: &str) -> Result<StatementResult> {
        let def = self
            .catalog
            .get(name)
            .ok_or_else(|| PlanError::UnknownTable(name.to_string()))?;
        let rows = def
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let wm = match &def.watermark {
                    Some(w) if &w.column == f.name() => format!("{} AS {}", w.column, w.text),
                    _ if def.proctime == Some(i) => "PROCTIME()".to_string(),
                    _ => String::new(),
                };
                vec![
                    f.name().clone(),
                    f.data_type().to_string(),
                    if f.is_nullable() { "YES" } else { "NO" }.to_string(),
                    wm,
                ]
            })
            .collect();
        Ok(text_rows(
            &["column_name", "data_type", "is_nullable", "watermark"],
            rows,
        ))
    }

    pub(super) fn create_table(&mut self, ct: CreateTable, text: &str) -> Result<StatementResult> {
        let CreateTable {
            name,
            or_replace,
            if_not_exists,
            columns,
            watermark,
            proctime,
            options: mut pairs,
        } = ct;
        let declared_columns = columns.len();
        if self.catalog.get(&name).is_some() {
            if if_not_exists {
                return Ok(StatementResult::Command("CREATE TABLE".into()));
            }
            if !or_replace {
                return Err(PlanError::TableExists(name));
            }
        }
        let declared = if columns.is_empty() {
            None
        } else {
            let ctx = PlanningContext::new(&self.state, &self.catalog);
            let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
            Some(Arc::new(planner.build_schema(columns)?))
        };
        super::sinks::resolve_path(
            &mut pairs,
            self.config.base_dir.as_deref(),
            self.config.file_root.as_deref(),
        )?;
        let options = Options::new(pairs);
        if options.get("connector").is_none() {
            return Err(invalid!(
                "table {name}: WITH (connector = ...) is required (connectors: {})",
                weir_connectors::SOURCE_CONNECTORS.join(", ")
            ));
        }
        let source = table_source(&name, declared, &options, watermark.is_some())?;
        let (schema, proctime) = with_proctime(&name, source.schema(), proctime, declared_columns)?;
        let watermark = watermark
            .map(|w| self.table_watermark(&name, &schema, w))
            .transpose()?;
        if let (Some(w), Some(p)) = (&watermark, proctime) {
            if schema.field(p).name() == &w.column {
                return Err(invalid!(
                    "table {name}: {} is a PROCTIME() column; it has no WATERMARK (the wall clock is its watermark)",
                    w.column
                ));
            }
        }
        self.catalog.insert(TableDef {
            name,
            schema,
            watermark,
            proctime,
            options,
            source,
            ddl: text.trim().to_string(),
        })?;
        Ok(StatementResult::Command("CREATE TABLE".into()))
    }
    /// `WATERMARK FOR column AS expr`, checked against the table's columns.
    fn table_watermark(
        &self,
        name: &str,
        schema: &SchemaRef,
        w: WatermarkClause,
    ) -> Result<TableWatermark> {
        let column = normalize(&w.column);
        let field = schema.field_with_name(&column).map_err(|_| {
            invalid!("table {name}: WATERMARK FOR names column '{column}', which the table does not have")
        })?;
        if !matches!(field.data_type(), DataType::Timestamp(..)) {
            return Err(invalid!(
                "table {name}: WATERMARK FOR {column}: the column must be a TIMESTAMP, it is {}",
                field.data_type()
            ));
        }
        let df_schema = DFSchema::try_from_qualified_schema(name, schema)?;
        let expr = self
            .state
            .create_logical_expr(&w.expr.to_string(), &df_schema)?;
        let ty = datafusion::logical_expr::ExprSchemable::to_field(&expr, &df_schema)?
            .1
            .data_type()
            .clone();
        if !matches!(ty, DataType::Timestamp(..)) {
            return Err(invalid!(
                "table {name}: the watermark expression {} must be a TIMESTAMP, it is {ty}",
                w.expr
            ));
        }
        Ok(TableWatermark {
            column,
            text: w.expr.to_string(),
            expr,
        })
    }
}

/// The table's columns: the source's, with the `PROCTIME()` column (if any) where it was
/// declared (after the connector's columns when none are declared); and that column's index.
fn with_proctime(
    name: &str,
    schema: SchemaRef,
    proctime: Option<(Ident, usize)>,
    declared_columns: usize,
) -> Result<(SchemaRef, Option<usize>)> {
    let Some((column, position)) = proctime else {
        return Ok((schema, None));
    };
    let column = normalize(&column);
    if schema.field_with_name(&column).is_ok() {
        return Err(invalid!("table {name}: two columns named {column}"));
    }
    let at = if declared_columns == 0 {
        schema.fields().len()
    } else {
        position.min(schema.fields().len())
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.insert(
        at,
        Field::new(
            column,
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
    );
    Ok((Arc::new(Schema::new(fields)), Some(at)))
}

/// The source of a table: its connector's, or for `connector = 'postgres'` a table weir
/// writes into (which needs its columns declared and has no watermark).
fn table_source(
    name: &str,
    declared: Option<SchemaRef>,
    options: &Options,
    has_watermark: bool,
) -> Result<Arc<dyn SourceFactory>> {
    if options.get("connector") != Some("postgres") {
        return Ok(create_source(name, declared, options)?);
    }
    let schema = declared
        .ok_or_else(|| invalid!("table {name}: a PostgreSQL table needs its column list"))?;
    if has_watermark {
        return Err(invalid!(
            "table {name}: a PostgreSQL table is written, not read: no WATERMARK"
        ));
    }
    Ok(Arc::new(PostgresTable::from_options(
        name, schema, options,
    )?))
}
