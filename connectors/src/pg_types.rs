//! The one map between Arrow and PostgreSQL types, shared by the PostgreSQL sink and the
//! PostgreSQL-wire endpoint: the type a column of each Arrow type is presented as
//! ([`pg_type`]), its name as `information_schema.columns.data_type` spells it
//! ([`type_name`]), the column type the sink creates ([`column_type`]), and whether an
//! existing column can take the values ([`compatible`]).

use datafusion::arrow::datatypes::DataType;
pub use postgres::types::Type;

/// The PostgreSQL type a value of this Arrow type is: what the wire endpoint announces and
/// encodes. Decimals wider than 28 digits, and every type without a PostgreSQL counterpart,
/// are text in weir's text form.
pub fn pg_type(dt: &DataType) -> Type {
    match dt {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal128(p, _) if *p <= 28 => Type::NUMERIC,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Type::BYTEA,
        _ => Type::TEXT,
    }
}

/// The name `information_schema.columns.data_type` gives a type of [`pg_type`]'s range.
pub fn type_name(ty: &Type) -> &'static str {
    match *ty {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::NUMERIC => "numeric",
        Type::TIMESTAMP => "timestamp without time zone",
        Type::TIMESTAMPTZ => "timestamp with time zone",
        Type::DATE => "date",
        Type::BYTEA => "bytea",
        _ => "text",
    }
}

/// The column type the sink gives a column of this Arrow type when it creates the table:
/// [`pg_type`], except that every decimal (the server stores any precision) and UInt64 keep
/// their precision as `numeric(p, s)`.
pub fn column_type(dt: &DataType) -> String {
    match dt {
        DataType::UInt64 => "numeric(20, 0)".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p}, {s})"),
        other => type_name(&pg_type(other)).into(),
    }
}

/// Whether values of an Arrow type can be stored in a column of PostgreSQL type `pg`
/// (`information_schema.columns.data_type`). Text columns take anything.
pub fn compatible(t: &DataType, pg: &str) -> bool {
    let numeric = [
        "smallint",
        "integer",
        "bigint",
        "numeric",
        "real",
        "double precision",
    ];
    match t {
        _ if pg == "text" || pg == "character varying" || pg == "character" => true,
        t if t.is_integer()
            || t.is_floating()
            || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) =>
        {
            numeric.contains(&pg)
        }
        DataType::Boolean => pg == "boolean",
        DataType::Timestamp(_, None) => pg.starts_with("timestamp"),
        DataType::Timestamp(_, Some(_)) => pg == "timestamp with time zone",
        DataType::Date32 | DataType::Date64 => pg == "date" || pg.starts_with("timestamp"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => false,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => pg == "bytea",
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;

    #[test]
    fn created_columns_take_the_values_of_their_arrow_type() {
        for dt in [
            DataType::Boolean,
            DataType::Int8,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float32,
            DataType::Float64,
            DataType::Decimal128(38, 4),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Date32,
            DataType::Utf8,
            DataType::Binary,
        ] {
            let name = column_type(&dt);
            let name = name.split('(').next().unwrap_or_default().trim();
            assert!(compatible(&dt, name), "{dt} as {name}");
        }
        assert_eq!(column_type(&DataType::Decimal128(10, 2)), "numeric(10, 2)");
        assert_eq!(type_name(&pg_type(&DataType::Int64)), "bigint");
    }
}
