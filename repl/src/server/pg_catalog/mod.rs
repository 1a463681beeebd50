//! The PostgreSQL catalog as clients query it: `pg_catalog` tables (what psql's `\dt` and `\d`
//! read) and `information_schema` views, filled from weir's catalog and queried with
//! DataFusion. psql's spellings DataFusion lacks (`OPERATOR(pg_catalog.~)`, `COLLATE
//! pg_catalog.default`, casts to `regclass`) are rewritten first. Catalogs weir has no
//! counterpart of (indexes, policies, publications, inheritance) are empty tables; a query over
//! one of them that DataFusion cannot plan answers no rows, which is what such a query would
//! return anyway.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::MemorySchemaProvider;
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use weir_planner::session::{bind_params, parameter_list};
use weir_planner::Catalog;

use super::handler::WireError;

mod sql;
mod tables;

pub use sql::is_catalog_query;
use sql::{reads_empty_table, rewrite};
use tables::format_type;

fn catalog_context(catalog: &Catalog) -> DFResult<SessionContext> {
    let ctx = SessionContext::new();
    let info = Arc::new(MemorySchemaProvider::new());
    ctx.catalog("datafusion")
        .ok_or_else(|| DataFusionError::Internal("no catalog".into()))?
        .register_schema("information_schema", info)?;
    for (name, batch) in tables::catalog_tables(catalog)? {
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        ctx.register_table(name, Arc::new(table))?;
    }
    for f in PgFunction::all() {
        ctx.register_udf(ScalarUDF::new_from_impl(f));
    }
    Ok(ctx)
}

/// Runs `f` to completion on the current runtime, or on a new one outside any.
fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, WireError> {
    Ok(match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(f),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| WireError::new("XX000", e.to_string()))?
            .block_on(f),
    })
}

fn unsupported(e: DataFusionError) -> WireError {
    WireError::new(
        "0A000",
        format!(
            "catalog query not supported by weir: {}",
            e.strip_backtrace()
        ),
    )
}

/// Plans a catalog query: its columns and the types DataFusion infers for its parameters.
pub fn prepare(
    sql: &str,
    catalog: &Catalog,
) -> Result<(SchemaRef, Vec<Option<DataType>>), WireError> {
    let ctx = catalog_context(catalog).map_err(|e| WireError::new("XX000", e.to_string()))?;
    let text = rewrite(sql);
    let planned = block_on(async {
        let df = ctx.sql(&text).await?;
        let types = df.logical_plan().get_parameter_types()?;
        Ok::<_, DataFusionError>((Arc::new(df.schema().as_arrow().clone()), types))
    })?;
    match planned {
        Ok((schema, types)) => Ok((schema, parameter_list(&types))),
        Err(_) if reads_empty_table(sql) => Ok((Arc::new(Schema::empty()), Vec::new())),
        Err(e) => Err(unsupported(e)),
    }
}

/// Answers a catalog query, `params` in place of its `$1`, `$2`, ...
pub fn answer(
    sql: &str,
    catalog: &Catalog,
    params: &[ScalarValue],
) -> Result<(SchemaRef, Vec<RecordBatch>), WireError> {
    let ctx = catalog_context(catalog).map_err(|e| WireError::new("XX000", e.to_string()))?;
    let text = rewrite(sql);
    let result = block_on(async {
        let mut df = ctx.sql(&text).await?;
        if !params.is_empty() {
            let plan = bind_params(df.logical_plan().clone(), params)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            df = ctx.execute_logical_plan(plan).await?;
        }
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        Ok::<_, DataFusionError>((schema, batches))
    })?;
    match result {
        Ok(r) => Ok(r),
        Err(_) if reads_empty_table(sql) => Ok((Arc::new(Schema::empty()), Vec::new())),
        Err(e) => Err(unsupported(e)),
    }
}

/// The catalog functions psql and drivers call.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgFunction {
    name: &'static str,
    signature: Signature,
    value: Value,
}

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Value {
    True,
    False,
    Null,
    Text(&'static str),
    /// format_type(type oid, typmod)
    FormatType,
}

impl PgFunction {
    fn all() -> Vec<PgFunction> {
        let f = |name, value| PgFunction {
            name,
            signature: Signature::one_of(
                vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
                Volatility::Stable,
            ),
            value,
        };
        vec![
            f("pg_table_is_visible", Value::True),
            f("pg_type_is_visible", Value::True),
            f("has_table_privilege", Value::True),
            f("has_schema_privilege", Value::True),
            f("has_database_privilege", Value::True),
            f("pg_relation_is_publishable", Value::False),
            f("pg_get_userbyid", Value::Text("weir")),
            f("pg_encoding_to_char", Value::Text("UTF8")),
            f("current_database", Value::Text("weir")),
            f("current_schema", Value::Text("public")),
            f("current_user", Value::Text("weir")),
            f("session_user", Value::Text("weir")),
            f("pg_get_expr", Value::Null),
            f("pg_get_statisticsobjdef_columns", Value::Null),
            f("obj_description", Value::Null),
            f("col_description", Value::Null),
            f("shobj_description", Value::Null),
            f("pg_get_partkeydef", Value::Null),
            f("pg_get_indexdef", Value::Null),
            f("pg_get_constraintdef", Value::Null),
            f("pg_get_viewdef", Value::Null),
            f("format_type", Value::FormatType),
        ]
    }
}

impl ScalarUDFImpl for PgFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(match self.value {
            Value::True | Value::False => DataType::Boolean,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        Ok(match self.value {
            Value::True => ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))),
            Value::False => ColumnarValue::Scalar(ScalarValue::Boolean(Some(false))),
            Value::Null => ColumnarValue::Scalar(ScalarValue::Utf8(None)),
            Value::Text(s) => ColumnarValue::Scalar(ScalarValue::Utf8(Some(s.into()))),
            Value::FormatType => {
                let arrays = ColumnarValue::values_to_arrays(&args.args)?;
                let Some(first) = arrays.first() else {
                    return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)));
                };
                let oids = cast(first, &DataType::Int64)?;
                let oids = oids
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| datafusion::error::DataFusionError::Internal("oid".into()))?;
                let names: StringArray = (0..oids.len())
                    .map(|i| {
                        if oids.is_null(i) {
                            None
                        } else {
                            Some(format_type(oids.value(i)).unwrap_or("unknown"))
                        }
                    })
                    .collect();
                ColumnarValue::Array(Arc::new(names))
            }
        })
    }
}
