//! Arrow columns as PostgreSQL values: the type each Arrow type is announced as, and rows
//! encoded in text (weir's text forms, PostgreSQL's spelling of booleans) or binary format.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use pgwire::api::portal::Format;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use rust_decimal::Decimal;
use weir_planner::display::column_strings;

/// The PostgreSQL type a column of this Arrow type is sent as (the map the sink uses too).
pub use weir_connectors::pg_types::pg_type;

/// Field descriptions of a schema, in the formats the client asked for.
pub fn fields(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let format = match format {
                Format::Individual(v) if i >= v.len() => FieldFormat::Text,
                other => other.format_for(i),
            };
            FieldInfo::new(f.name().clone(), None, None, pg_type(f.data_type()), format)
        })
        .collect()
}

/// One column ready to encode.
enum Column {
    Text(Vec<Option<String>>),
    Bool(BooleanArray),
    I16(Int16Array),
    I32(Int32Array),
    I64(Int64Array),
    F32(Float32Array),
    F64(Float64Array),
    Numeric(Vec<Option<Decimal>>),
    Timestamp(TimestampMicrosecondArray),
    TimestampTz(TimestampMicrosecondArray),
    Date(Date32Array),
    Bytes(Vec<Option<Vec<u8>>>),
}

fn arrow_err(e: impl std::fmt::Display) -> PgWireError {
    PgWireError::ApiError(Box::new(std::io::Error::other(e.to_string())))
}

fn cast_to(array: &ArrayRef, to: &DataType) -> PgWireResult<ArrayRef> {
    cast(array, to).map_err(arrow_err)
}

/// Text in PostgreSQL's spelling: booleans as `t` / `f`, the rest as weir prints it.
fn text_column(array: &ArrayRef) -> PgWireResult<Vec<Option<String>>> {
    let mut values = column_strings(array).map_err(arrow_err)?;
    if *array.data_type() == DataType::Boolean {
        for v in values.iter_mut().flatten() {
            *v = if v == "true" { "t".into() } else { "f".into() };
        }
    }
    Ok(values)
}

fn binary_column(array: &ArrayRef, ty: &Type) -> PgWireResult<Column> {
    Ok(match *ty {
        Type::BOOL => Column::Bool(array.as_boolean().clone()),
        Type::INT2 => Column::I16(cast_to(array, &DataType::Int16)?.as_primitive().clone()),
        Type::INT4 => Column::I32(cast_to(array, &DataType::Int32)?.as_primitive().clone()),
        Type::INT8 => Column::I64(cast_to(array, &DataType::Int64)?.as_primitive().clone()),
        Type::FLOAT4 => Column::F32(cast_to(array, &DataType::Float32)?.as_primitive().clone()),
        Type::FLOAT8 => Column::F64(array.as_primitive().clone()),
        Type::NUMERIC => {
            let dec = cast_to(array, &DataType::Decimal128(28, decimal_scale(array)))?;
            let dec = dec.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>();
            let scale = decimal_scale(array) as u32;
            Column::Numeric(
                dec.iter()
                    .map(|v| v.map(|v| Decimal::from_i128_with_scale(v, scale)))
                    .collect(),
            )
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let tz = match array.data_type() {
                DataType::Timestamp(_, tz) => tz.clone(),
                _ => None,
            };
            let micros = cast_to(array, &DataType::Timestamp(TimeUnit::Microsecond, tz))?;
            let micros: TimestampMicrosecondArray = micros.as_primitive().clone();
            if *ty == Type::TIMESTAMP {
                Column::Timestamp(micros)
            } else {
                Column::TimestampTz(micros)
            }
        }
        Type::DATE => Column::Date(cast_to(array, &DataType::Date32)?.as_primitive().clone()),
        Type::BYTEA => {
            let bin = cast_to(array, &DataType::Binary)?;
            Column::Bytes(
                bin.as_binary::<i32>()
                    .iter()
                    .map(|b| b.map(<[u8]>::to_vec))
                    .collect(),
            )
        }
        _ => Column::Text(text_column(array)?),
    })
}

fn decimal_scale(array: &ArrayRef) -> i8 {
    match array.data_type() {
        DataType::Decimal128(_, s) => (*s).max(0),
        _ => 0,
    }
}

fn value<T: Copy>(present: bool, v: T) -> Option<T> {
    present.then_some(v)
}

fn timestamp(micros: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp_micros(micros).map(|d| d.naive_utc())
}

/// Encodes every row of `batch` for fields described by `fields`.
pub fn encode_batch(
    batch: &RecordBatch,
    fields: &Arc<Vec<FieldInfo>>,
) -> PgWireResult<Vec<DataRow>> {
    let columns: Vec<Column> = batch
        .columns()
        .iter()
        .zip(fields.iter())
        .map(|(array, field)| match field.format() {
            FieldFormat::Text => Ok(Column::Text(text_column(array)?)),
            FieldFormat::Binary => binary_column(array, field.datatype()),
        })
        .collect::<PgWireResult<_>>()?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    let mut encoder = DataRowEncoder::new(Arc::clone(fields));
    for row in 0..batch.num_rows() {
        for col in &columns {
            match col {
                Column::Text(v) => encoder.encode_field(&v[row])?,
                Column::Bool(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::I16(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::I32(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::I64(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::F32(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::F64(a) => encoder.encode_field(&value(a.is_valid(row), a.value(row)))?,
                Column::Numeric(v) => encoder.encode_field(&v[row])?,
                Column::Timestamp(a) => encoder
                    .encode_field(&a.is_valid(row).then(|| timestamp(a.value(row))).flatten())?,
                Column::TimestampTz(a) => encoder.encode_field(
                    &a.is_valid(row)
                        .then(|| DateTime::<Utc>::from_timestamp_micros(a.value(row)))
                        .flatten(),
                )?,
                Column::Date(a) => encoder.encode_field(
                    &a.is_valid(row)
                        .then(|| NaiveDate::from_num_days_from_ce_opt(a.value(row) + 719_163))
                        .flatten(),
                )?,
                Column::Bytes(v) => encoder.encode_field(&v[row])?,
            }
        }
        rows.push(encoder.take_row());
    }
    Ok(rows)
}
