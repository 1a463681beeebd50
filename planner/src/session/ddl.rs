//! Catalog statements: CREATE TABLE, SHOW TABLES, DESCRIBE.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::sql::planner::SqlToRel;
use datafusion::sql::sqlparser::ast::{CreateView, Ident, Statement};
use weir_connectors::sinks::late_rows::LATE_COLUMNS;
use weir_connectors::sinks::postgres::PostgresTable;
use weir_connectors::sinks::LateRowsTable;
use weir_connectors::{create_source, Options};
use weir_engine::SourceFactory;

use super::{text_rows, Session, StatementResult};
use crate::catalog::{TableDef, TableWatermark, ViewDef};
use crate::context::PlanningContext;
use crate::error::{PlanError, Result};
use crate::sql::{normalize, CreateTable, WatermarkClause};
use crate::{invalid, not_supported};

impl Session {
    pub(super) fn show_tables(&self) -> StatementResult {
        let catalog = self.catalog();
        let rows = catalog
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
            .chain(
                catalog
                    .views()
                    .map(|v| vec![v.name.clone(), "view".to_string(), String::new()]),
            )
            .collect();
        text_rows(&["name", "connector", "watermark"], rows)
    }

    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] name AS query`: a name for a query, planned
    /// now against the tables as they are.
    pub(super) fn create_view(&mut self, view: CreateView, text: &str) -> Result<StatementResult> {
        let name = crate::sql::object_name(&view.name)?;
        if !view.columns.is_empty() {
            return Err(not_supported!(
                "CREATE VIEW {name} (columns): name the columns with AS in the query"
            ));
        }
        // Whether the name is taken; `Ok(true)`: taken and IF NOT EXISTS says leave it.
        let taken = |catalog: &crate::catalog::Catalog| {
            if catalog.get(&name).is_none() && catalog.view(&name).is_none() {
                return Ok(false);
            }
            if view.if_not_exists {
                return Ok(true);
            }
            if view.or_replace && catalog.view(&name).is_some() {
                return Ok(false);
            }
            Err(PlanError::TableExists(name.clone()))
        };
        let catalog = self.catalog();
        if taken(&catalog)? {
            return Ok(StatementResult::Command("CREATE VIEW".into()));
        }
        let plan = {
            let ctx = PlanningContext::new(&self.state, &catalog);
            let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
            planner.sql_statement_to_plan(Statement::Query(view.query))?
        };
        let optimized = self.state.optimize(&plan)?;
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let def = ViewDef {
            name: name.clone(),
            schema,
            plan,
            optimized,
            ddl: text.trim().trim_end_matches(';').to_string(),
        };
        self.change_catalog(|catalog| {
            // Checked again: another session may have taken the name meanwhile.
            if !taken(catalog)? {
                catalog.insert_view(def)?;
            }
            Ok(())
        })?;
        Ok(StatementResult::Command("CREATE VIEW".into()))
    }

    pub(super) fn describe(&self, name: &str) -> Result<StatementResult> {
        let catalog = self.catalog();
        if let Some(view) = catalog.view(name) {
            let rows = view
                .schema
                .fields()
                .iter()
                .map(|f| {
                    vec![
                        f.name().clone(),
                        f.data_type().to_string(),
                        if f.is_nullable() { "YES" } else { "NO" }.to_string(),
                        String::new(),
                    ]
                })
                .collect();
            return Ok(text_rows(
                &["column_name", "data_type", "is_nullable", "watermark"],
                rows,
            ));
        }
        let def = catalog
            .get(name)
            .ok_or_else(|| PlanError::unknown_table(name.to_string()))?;
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
        // Whether the name is taken; `Ok(true)`: taken and IF NOT EXISTS says leave it.
        let taken = |catalog: &crate::catalog::Catalog| {
            if catalog.view(&name).is_some() {
                return Err(PlanError::TableExists(name.clone()));
            }
            if catalog.get(&name).is_none() {
                return Ok(false);
            }
            if if_not_exists {
                return Ok(true);
            }
            if !or_replace {
                return Err(PlanError::TableExists(name.clone()));
            }
            Ok(false)
        };
        let catalog = self.catalog();
        if taken(&catalog)? {
            return Ok(StatementResult::Command("CREATE TABLE".into()));
        }
        let declared = if columns.is_empty() {
            None
        } else {
            let ctx = PlanningContext::new(&self.state, &catalog);
            let planner = SqlToRel::new_with_options(&ctx, self.parser_options());
            Some(Arc::new(planner.build_schema(columns)?))
        };
        // A record without event time cannot be placed in any window: the decoders of
        // files and Kafka refuse it as malformed (`bad_rows` applies), not as late.
        let decoded = matches!(
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("connector"))
                .map(|(_, v)| v.as_str()),
            Some("file" | "kafka")
        );
        let declared = match (declared, &watermark) {
            (Some(schema), Some(w)) if decoded => {
                Some(event_time_required(schema, &normalize(&w.column)))
            }
            (declared, _) => declared,
        };
        let written_path = pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("path"))
            .map(|(_, v)| v.clone());
        // A recorded table is replayed by a later start, maybe in another directory: its
        // relative path is resolved now, against the working directory, and recorded so.
        let cwd = std::env::current_dir().ok();
        let base = match (&self.config.base_dir, &self.config.data_dir) {
            (Some(base), _) => Some(base.as_path()),
            (None, Some(_)) => cwd.as_deref(),
            (None, None) => None,
        };
        super::sinks::resolve_path(&mut pairs, base, self.file_access())?;
        let late_name = self.take_late_rows_option(&name, &mut pairs, watermark.is_some())?;
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
        let late_rows = match &late_name {
            Some((late, _)) => Some(self.late_rows_table(&name, late, &schema)?),
            None => None,
        };
        let ddl = match &late_name {
            // From the session's default: recorded in the DDL, so a restart keeps it.
            Some((late, true)) => with_option(text.trim(), "late_rows", late)?,
            _ => text.trim().to_string(),
        };
        let resolved_path = options.get("path").map(str::to_string);
        let ddl = match (&written_path, &resolved_path) {
            (Some(written), Some(resolved)) if written != resolved => {
                with_path(&ddl, resolved).unwrap_or(ddl)
            }
            _ => ddl,
        };
        let late_def = late_rows.as_ref().map(|late| TableDef {
            name: late.name.clone(),
            schema: Arc::clone(&late.schema),
            watermark: None,
            proctime: None,
            options: Options::new([("connector".to_string(), "late rows".to_string())]),
            source: Arc::new(late.source()),
            late_rows: None,
            late_rows_of: Some(name.clone()),
            ddl: String::new(),
        });
        let def = TableDef {
            name: name.clone(),
            schema,
            watermark,
            proctime,
            options,
            source,
            late_rows,
            late_rows_of: None,
            ddl,
        };
        self.change_catalog(|catalog| {
            // Checked again: another session may have taken the name meanwhile.
            if taken(catalog)? {
                return Ok(());
            }
            if let Some(old) = catalog.get(&name).and_then(|t| t.late_rows.clone()) {
                if def.late_rows.as_ref().is_none_or(|l| l.name != old.name) {
                    catalog.remove(&old.name)?;
                }
            }
            if let Some(late) = late_def {
                catalog.insert(late)?;
            }
            catalog.insert(def)
        })?;
        Ok(StatementResult::Command("CREATE TABLE".into()))
    }

    /// Takes `late_rows` out of a CREATE TABLE's options (connectors do not know it), or
    /// applies the session's default to a table with a WATERMARK. Returns the late-rows
    /// table's name and whether it came from the default.
    fn take_late_rows_option(
        &self,
        table: &str,
        pairs: &mut Vec<(String, String)>,
        has_watermark: bool,
    ) -> Result<Option<(String, bool)>> {
        let mut given = None;
        pairs.retain(|(k, v)| {
            let late = k.eq_ignore_ascii_case("late_rows");
            if late {
                given = Some(v.trim().to_string());
            }
            !late
        });
        let (name, from_default) = match given {
            Some(v) if v.is_empty() => return Ok(None),
            Some(v) => (crate::sql::normalize(&Ident::new(v)), false),
            None => match (&self.config.late_rows, has_watermark) {
                (Some(template), true) => (late_rows_name(template, table), true),
                _ => return Ok(None),
            },
        };
        check_late_rows_name(&name).map_err(|e| invalid!("table {table}: late_rows: {e}"))?;
        if name == table {
            return Err(invalid!(
                "table {table}: late_rows names the table itself; name another table"
            ));
        }
        match self.catalog().get(&name) {
            Some(t) if t.late_rows_of.as_deref() == Some(table) => {}
            Some(t) => {
                return Err(invalid!(
                    "table {table}: late_rows = '{name}', but {name} already exists{}",
                    t.late_rows_of
                        .as_ref()
                        .map(|o| format!(" (it keeps the late rows of table {o})"))
                        .unwrap_or_default()
                ))
            }
            None => {}
        }
        Ok(Some((name, from_default)))
    }

    /// The late-rows table `late` of `table`: under the data directory, in memory without one.
    fn late_rows_table(
        &self,
        table: &str,
        late: &str,
        schema: &SchemaRef,
    ) -> Result<LateRowsTable> {
        for c in LATE_COLUMNS {
            if schema.field_with_name(c).is_ok() {
                return Err(invalid!(
                    "table {table}: late_rows adds a column {c}, and the table has one already"
                ));
            }
        }
        let dir = self
            .config
            .data_dir
            .clone()
            .or_else(|| self.view_data_dir.clone())
            .map(|d| d.join("late_rows").join(late));
        // Planned again (a restart, a recorded job): the rows are where they were.
        if let Some(existing) = self
            .catalog()
            .get(table)
            .and_then(|t| t.late_rows.as_ref())
            .filter(|l| l.name == late && dir.is_none())
        {
            return Ok(existing.clone());
        }
        Ok(LateRowsTable::new(late, table, schema, dir))
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

/// `schema` with its event-time column `column` not nullable.
fn event_time_required(schema: SchemaRef, column: &str) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let f = f.as_ref().clone();
            if f.name() == column {
                f.with_nullable(false)
            } else {
                f
            }
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The late-rows table a `SET late_rows` template gives `table`.
pub(super) fn late_rows_name(template: &str, table: &str) -> String {
    template.replace("{table}", table).to_ascii_lowercase()
}

/// A late-rows table's name must be a plain identifier (it names a directory).
pub(super) fn check_late_rows_name(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a plain name (letters, digits and _; it names a directory)"
        ))
    }
}

/// `ddl` with the value of its WITH list's `path` option replaced by `path`; `None` when it
/// cannot be found.
fn with_path(ddl: &str, path: &str) -> Option<String> {
    let lower = ddl.to_ascii_lowercase();
    let with = lower.rfind("with")?;
    let mut from = with;
    while let Some(found) = lower[from..].find("path") {
        let key = from + found;
        from = key + 4;
        let before = lower.as_bytes()[key - 1];
        if before.is_ascii_alphanumeric() || before == b'_' {
            continue;
        }
        let rest = lower[from..].trim_start();
        let Some(rest) = rest.strip_prefix('=') else {
            continue;
        };
        let rest = rest.trim_start();
        if !rest.starts_with('\'') {
            continue;
        }
        let open = lower.len() - rest.len();
        // The literal ends at a quote not doubled.
        let mut i = open + 1;
        let bytes = ddl.as_bytes();
        while i < bytes.len() {
            if bytes[i] == b'\'' {
                if bytes.get(i + 1) == Some(&b'\'') {
                    i += 2;
                    continue;
                }
                return Some(format!(
                    "{}{}{}",
                    &ddl[..open],
                    weir_connectors::quote::quote_literal(path),
                    &ddl[i + 1..]
                ));
            }
            i += 1;
        }
        return None;
    }
    None
}

/// `ddl` (a CREATE TABLE ending in its WITH list) with `key = 'value'` added to that list.
fn with_option(ddl: &str, key: &str, value: &str) -> Result<String> {
    let body = ddl.trim_end().trim_end_matches(';').trim_end();
    let Some(open) = body.strip_suffix(')') else {
        return Err(PlanError::Internal(format!(
            "CREATE TABLE does not end with its WITH list: {ddl}"
        )));
    };
    Ok(format!("{open}, {key} = '{value}')"))
}
