//! The PostgreSQL catalog as clients query it: `pg_catalog` tables (what psql's `\dt` and `\d`
//! read) and `information_schema` views, filled from weir's catalog and queried with
//! DataFusion. psql's spellings DataFusion lacks (`OPERATOR(pg_catalog.~)`, `COLLATE
//! pg_catalog.default`, casts to `regclass`) are rewritten first. Catalogs weir has no
//! counterpart of (indexes, policies, publications, inheritance) are empty tables; a query over
//! one of them that DataFusion cannot plan answers no rows, which is what such a query would
//! return anyway.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_empty_array, Array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
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

pub use sql::is_catalog_query;
use sql::{reads_empty_table, rewrite};

/// Catalog tables weir has nothing in.
const EMPTY_TABLES: &[(&str, &[&str])] = &[
    ("pg_attrdef", &["oid", "adrelid", "adnum", "adbin"]),
    ("pg_collation", &["oid", "collname", "collnamespace"]),
    (
        "pg_policy",
        &[
            "oid",
            "polname",
            "polrelid",
            "polcmd",
            "polpermissive",
            "polroles",
            "polqual",
            "polwithcheck",
        ],
    ),
    (
        "pg_statistic_ext",
        &[
            "oid",
            "stxrelid",
            "stxname",
            "stxnamespace",
            "stxkind",
            "stxstattarget",
        ],
    ),
    ("pg_publication", &["oid", "pubname", "puballtables"]),
    ("pg_publication_namespace", &["oid", "pnpubid", "pnnspid"]),
    (
        "pg_publication_rel",
        &["oid", "prpubid", "prrelid", "prqual", "prattrs"],
    ),
    (
        "pg_inherits",
        &["inhrelid", "inhparent", "inhseqno", "inhdetachpending"],
    ),
    (
        "pg_index",
        &[
            "indexrelid",
            "indrelid",
            "indisprimary",
            "indisunique",
            "indisclustered",
            "indisvalid",
            "indkey",
        ],
    ),
    (
        "pg_constraint",
        &[
            "oid",
            "conname",
            "conrelid",
            "contype",
            "conindid",
            "confrelid",
            "conkey",
        ],
    ),
    (
        "pg_trigger",
        &["oid", "tgrelid", "tgname", "tgisinternal", "tgenabled"],
    ),
    ("pg_rewrite", &["oid", "rulename", "ev_class"]),
    (
        "pg_description",
        &["objoid", "classoid", "objsubid", "description"],
    ),
    (
        "pg_proc",
        &["oid", "proname", "pronamespace", "prokind", "prorettype"],
    ),
    ("pg_foreign_table", &["ftrelid", "ftserver"]),
    ("pg_sequence", &["seqrelid"]),
    ("pg_extension", &["oid", "extname", "extversion"]),
];

/// The table names that make a statement a catalog query.
const CATALOG_TABLES: &[&str] = &[
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_type",
    "pg_am",
    "pg_database",
    "pg_roles",
    "pg_user",
    "pg_settings",
];

const PUBLIC_OID: i64 = 2200;
const CATALOG_OID: i64 = 11;
const FIRST_TABLE_OID: i64 = 16384;
const OWNER_OID: i64 = 10;

/// PostgreSQL type oid, name for format_type, and information_schema's data_type.
fn pg_type_of(dt: &DataType) -> (i64, &'static str) {
    let ty = super::rows::pg_type(dt);
    (
        i64::from(ty.oid()),
        weir_connectors::pg_types::type_name(&ty),
    )
}

/// Types listed in pg_type.
const TYPES: &[(i64, &str, &str, i64)] = &[
    (16, "bool", "boolean", 1),
    (17, "bytea", "bytea", -1),
    (18, "char", "\"char\"", 1),
    (19, "name", "name", 64),
    (20, "int8", "bigint", 8),
    (21, "int2", "smallint", 2),
    (23, "int4", "integer", 4),
    (25, "text", "text", -1),
    (26, "oid", "oid", 4),
    (700, "float4", "real", 4),
    (701, "float8", "double precision", 8),
    (1043, "varchar", "character varying", -1),
    (1082, "date", "date", 4),
    (1114, "timestamp", "timestamp without time zone", 8),
    (1184, "timestamptz", "timestamp with time zone", 8),
    (1700, "numeric", "numeric", -1),
];

fn format_type(oid: i64) -> Option<&'static str> {
    TYPES.iter().find(|t| t.0 == oid).map(|t| t.2)
}

fn strings<I: IntoIterator<Item = S>, S: Into<String>>(v: I) -> ArrayRef {
    Arc::new(StringArray::from(
        v.into_iter().map(|s| Some(s.into())).collect::<Vec<_>>(),
    ))
}

fn ints<I: IntoIterator<Item = i64>>(v: I) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(v))
}

fn bools<I: IntoIterator<Item = bool>>(v: I) -> ArrayRef {
    Arc::new(BooleanArray::from(v.into_iter().collect::<Vec<_>>()))
}

/// A table from named columns.
fn table(columns: Vec<(&str, ArrayRef)>) -> DFResult<RecordBatch> {
    let schema = Schema::new(
        columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )?)
}

fn register(ctx: &SessionContext, name: &str, batch: RecordBatch) -> DFResult<()> {
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    ctx.register_table(name, Arc::new(table))?;
    Ok(())
}

/// One column per relation, in catalog order.
struct Relations {
    names: Vec<String>,
    kinds: Vec<&'static str>,
    schemas: Vec<SchemaRef>,
}

fn relations(catalog: &Catalog) -> Relations {
    let mut r = Relations {
        names: Vec::new(),
        kinds: Vec::new(),
        schemas: Vec::new(),
    };
    for t in catalog.tables() {
        r.names.push(t.name.clone());
        // Materialized views are registered by their jobs and have no DDL of their own.
        r.kinds.push(if t.ddl.is_empty() { "m" } else { "r" });
        r.schemas.push(Arc::clone(&t.schema));
    }
    r
}

/// One column of a relation, as pg_attribute and information_schema.columns list it.
struct ColumnRow {
    table_oid: i64,
    table: String,
    name: String,
    position: i64,
    type_oid: i64,
    type_name: &'static str,
    nullable: bool,
}

fn catalog_context(catalog: &Catalog) -> DFResult<SessionContext> {
    let ctx = SessionContext::new();
    let rel = relations(catalog);
    let n = rel.names.len();
    let oids = || (0..n as i64).map(|i| FIRST_TABLE_OID + i);

    register(
        &ctx,
        "pg_namespace",
        table(vec![
            ("oid", ints([CATALOG_OID, PUBLIC_OID, 13000])),
            (
                "nspname",
                strings(["pg_catalog", "public", "information_schema"]),
            ),
            ("nspowner", ints([OWNER_OID; 3])),
        ])?,
    )?;
    register(
        &ctx,
        "pg_class",
        table(vec![
            ("oid", ints(oids())),
            ("relname", strings(rel.names.clone())),
            ("relnamespace", ints(vec![PUBLIC_OID; n])),
            ("relkind", strings(rel.kinds.clone())),
            ("relowner", ints(vec![OWNER_OID; n])),
            ("relam", ints(vec![2; n])),
            ("relchecks", ints(vec![0; n])),
            (
                "relnatts",
                ints(rel.schemas.iter().map(|s| s.fields().len() as i64)),
            ),
            ("relhasindex", bools(vec![false; n])),
            ("relhasrules", bools(vec![false; n])),
            ("relhastriggers", bools(vec![false; n])),
            ("relrowsecurity", bools(vec![false; n])),
            ("relforcerowsecurity", bools(vec![false; n])),
            ("relispartition", bools(vec![false; n])),
            ("reltablespace", ints(vec![0; n])),
            ("reloftype", ints(vec![0; n])),
            ("relpersistence", strings(vec!["p"; n])),
            ("relreplident", strings(vec!["d"; n])),
            ("reltoastrelid", ints(vec![0; n])),
            (
                "relpartbound",
                Arc::new(StringArray::from(vec![None::<String>; n])),
            ),
            ("reltuples", Arc::new(Float64Array::from(vec![-1.0; n]))),
            ("relpages", ints(vec![0; n])),
            (
                "relacl",
                Arc::new(StringArray::from(vec![None::<String>; n])),
            ),
        ])?,
    )?;
    let columns: Vec<ColumnRow> = rel
        .schemas
        .iter()
        .enumerate()
        .flat_map(|(i, schema)| {
            let table = &rel.names[i];
            schema.fields().iter().enumerate().map(move |(j, f)| {
                let (type_oid, type_name) = pg_type_of(f.data_type());
                ColumnRow {
                    table_oid: FIRST_TABLE_OID + i as i64,
                    table: table.clone(),
                    name: f.name().clone(),
                    position: j as i64 + 1,
                    type_oid,
                    type_name,
                    nullable: f.is_nullable(),
                }
            })
        })
        .collect();
    let m = columns.len();
    register(
        &ctx,
        "pg_attribute",
        table(vec![
            ("attrelid", ints(columns.iter().map(|c| c.table_oid))),
            ("attname", strings(columns.iter().map(|c| c.name.clone()))),
            ("atttypid", ints(columns.iter().map(|c| c.type_oid))),
            ("atttypmod", ints(vec![-1; m])),
            ("attnum", ints(columns.iter().map(|c| c.position))),
            ("attnotnull", bools(columns.iter().map(|c| !c.nullable))),
            ("attisdropped", bools(vec![false; m])),
            ("atthasdef", bools(vec![false; m])),
            ("attcollation", ints(vec![0; m])),
            ("attidentity", strings(vec![""; m])),
            ("attgenerated", strings(vec![""; m])),
            ("attlen", ints(vec![-1; m])),
        ])?,
    )?;
    register(
        &ctx,
        "pg_type",
        table(vec![
            ("oid", ints(TYPES.iter().map(|t| t.0))),
            ("typname", strings(TYPES.iter().map(|t| t.1))),
            ("typnamespace", ints(vec![CATALOG_OID; TYPES.len()])),
            ("typlen", ints(TYPES.iter().map(|t| t.3))),
            ("typtype", strings(vec!["b"; TYPES.len()])),
            ("typcollation", ints(vec![0; TYPES.len()])),
            ("typelem", ints(vec![0; TYPES.len()])),
            ("typbasetype", ints(vec![0; TYPES.len()])),
            ("typnotnull", bools(vec![false; TYPES.len()])),
        ])?,
    )?;
    register(
        &ctx,
        "pg_am",
        table(vec![
            ("oid", ints([2])),
            ("amname", strings(["heap"])),
            ("amtype", strings(["t"])),
        ])?,
    )?;
    register(
        &ctx,
        "pg_database",
        table(vec![
            ("oid", ints([16383])),
            ("datname", strings(["weir"])),
            ("datdba", ints([OWNER_OID])),
            ("encoding", ints([6])),
            ("datcollate", strings(["C"])),
            ("datctype", strings(["C"])),
            ("datistemplate", bools([false])),
            ("datallowconn", bools([true])),
        ])?,
    )?;
    for name in ["pg_roles", "pg_user"] {
        register(
            &ctx,
            name,
            table(vec![
                ("oid", ints([OWNER_OID])),
                ("rolname", strings(["weir"])),
                ("usename", strings(["weir"])),
                ("rolsuper", bools([true])),
                ("rolcanlogin", bools([true])),
            ])?,
        )?;
    }
    for (name, columns) in EMPTY_TABLES {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(*c, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let arrays = columns
            .iter()
            .map(|_| new_empty_array(&DataType::Utf8))
            .collect();
        register(&ctx, name, RecordBatch::try_new(schema, arrays)?)?;
    }

    // information_schema
    let info = Arc::new(MemorySchemaProvider::new());
    ctx.catalog("datafusion")
        .ok_or_else(|| datafusion::error::DataFusionError::Internal("no catalog".into()))?
        .register_schema("information_schema", info)?;
    register(
        &ctx,
        "information_schema.tables",
        table(vec![
            ("table_catalog", strings(vec!["weir"; n])),
            ("table_schema", strings(vec!["public"; n])),
            ("table_name", strings(rel.names.clone())),
            (
                "table_type",
                strings(
                    rel.kinds
                        .iter()
                        .map(|k| if *k == "m" { "VIEW" } else { "BASE TABLE" }),
                ),
            ),
        ])?,
    )?;
    let k = columns.len();
    register(
        &ctx,
        "information_schema.columns",
        table(vec![
            ("table_catalog", strings(vec!["weir"; k])),
            ("table_schema", strings(vec!["public"; k])),
            (
                "table_name",
                strings(columns.iter().map(|c| c.table.clone())),
            ),
            (
                "column_name",
                strings(columns.iter().map(|c| c.name.clone())),
            ),
            ("ordinal_position", ints(columns.iter().map(|c| c.position))),
            (
                "column_default",
                Arc::new(StringArray::from(vec![None::<String>; k])),
            ),
            (
                "is_nullable",
                strings(
                    columns
                        .iter()
                        .map(|c| if c.nullable { "YES" } else { "NO" }),
                ),
            ),
            ("data_type", strings(columns.iter().map(|c| c.type_name))),
        ])?,
    )?;
    register(
        &ctx,
        "information_schema.schemata",
        table(vec![
            ("catalog_name", strings(["weir", "weir", "weir"])),
            (
                "schema_name",
                strings(["public", "pg_catalog", "information_schema"]),
            ),
            ("schema_owner", strings(["weir", "weir", "weir"])),
        ])?,
    )?;

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
