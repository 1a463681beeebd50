//! The catalog tables' contents: `pg_catalog` tables and `information_schema` views filled
//! from weir's catalog, and the empty tables for catalogs weir has no counterpart of.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_empty_array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result as DFResult;
use weir_planner::Catalog;

/// Catalog tables weir has nothing in.
pub(super) const EMPTY_TABLES: &[(&str, &[&str])] = &[
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
pub(super) const CATALOG_TABLES: &[&str] = &[
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
    let ty = super::super::rows::pg_type(dt);
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

pub(super) fn format_type(oid: i64) -> Option<&'static str> {
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

/// Every catalog table, by name (`information_schema.` ones qualified), filled from `catalog`.
pub(super) fn catalog_tables(catalog: &Catalog) -> DFResult<Vec<(&'static str, RecordBatch)>> {
    let rel = relations(catalog);
    let columns = column_rows(&rel);
    let mut tables = vec![
        ("pg_namespace", pg_namespace()?),
        ("pg_class", pg_class(&rel)?),
        ("pg_attribute", pg_attribute(&columns)?),
        ("pg_type", pg_type()?),
        ("pg_am", pg_am()?),
        ("pg_database", pg_database()?),
        ("pg_roles", pg_roles()?),
        ("pg_user", pg_roles()?),
        (
            "information_schema.tables",
            information_schema_tables(&rel)?,
        ),
        (
            "information_schema.columns",
            information_schema_columns(&columns)?,
        ),
        (
            "information_schema.schemata",
            information_schema_schemata()?,
        ),
    ];
    for (name, columns) in EMPTY_TABLES {
        tables.push((name, empty_table(columns)?));
    }
    Ok(tables)
}

fn pg_namespace() -> DFResult<RecordBatch> {
    table(vec![
        ("oid", ints([CATALOG_OID, PUBLIC_OID, 13000])),
        (
            "nspname",
            strings(["pg_catalog", "public", "information_schema"]),
        ),
        ("nspowner", ints([OWNER_OID; 3])),
    ])
}

fn pg_class(rel: &Relations) -> DFResult<RecordBatch> {
    let n = rel.names.len();
    let none = || Arc::new(StringArray::from(vec![None::<String>; n])) as ArrayRef;
    table(vec![
        ("oid", ints((0..n as i64).map(|i| FIRST_TABLE_OID + i))),
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
        ("relpartbound", none()),
        ("reltuples", Arc::new(Float64Array::from(vec![-1.0; n]))),
        ("relpages", ints(vec![0; n])),
        ("relacl", none()),
    ])
}

/// Every column of every relation, in catalog and column order.
fn column_rows(rel: &Relations) -> Vec<ColumnRow> {
    rel.schemas
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
        .collect()
}

fn pg_attribute(columns: &[ColumnRow]) -> DFResult<RecordBatch> {
    let m = columns.len();
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
    ])
}

fn pg_type() -> DFResult<RecordBatch> {
    let n = TYPES.len();
    table(vec![
        ("oid", ints(TYPES.iter().map(|t| t.0))),
        ("typname", strings(TYPES.iter().map(|t| t.1))),
        ("typnamespace", ints(vec![CATALOG_OID; n])),
        ("typlen", ints(TYPES.iter().map(|t| t.3))),
        ("typtype", strings(vec!["b"; n])),
        ("typcollation", ints(vec![0; n])),
        ("typelem", ints(vec![0; n])),
        ("typbasetype", ints(vec![0; n])),
        ("typnotnull", bools(vec![false; n])),
    ])
}

fn pg_am() -> DFResult<RecordBatch> {
    table(vec![
        ("oid", ints([2])),
        ("amname", strings(["heap"])),
        ("amtype", strings(["t"])),
    ])
}

fn pg_database() -> DFResult<RecordBatch> {
    table(vec![
        ("oid", ints([16383])),
        ("datname", strings(["weir"])),
        ("datdba", ints([OWNER_OID])),
        ("encoding", ints([6])),
        ("datcollate", strings(["C"])),
        ("datctype", strings(["C"])),
        ("datistemplate", bools([false])),
        ("datallowconn", bools([true])),
    ])
}

/// pg_roles and pg_user: the one user.
fn pg_roles() -> DFResult<RecordBatch> {
    table(vec![
        ("oid", ints([OWNER_OID])),
        ("rolname", strings(["weir"])),
        ("usename", strings(["weir"])),
        ("rolsuper", bools([true])),
        ("rolcanlogin", bools([true])),
    ])
}

fn empty_table(columns: &[&str]) -> DFResult<RecordBatch> {
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
    Ok(RecordBatch::try_new(schema, arrays)?)
}

fn information_schema_tables(rel: &Relations) -> DFResult<RecordBatch> {
    let n = rel.names.len();
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
    ])
}

fn information_schema_columns(columns: &[ColumnRow]) -> DFResult<RecordBatch> {
    let k = columns.len();
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
    ])
}

fn information_schema_schemata() -> DFResult<RecordBatch> {
    table(vec![
        ("catalog_name", strings(["weir", "weir", "weir"])),
        (
            "schema_name",
            strings(["public", "pg_catalog", "information_schema"]),
        ),
        ("schema_owner", strings(["weir", "weir", "weir"])),
    ])
}
