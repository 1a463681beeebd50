//! Text forms of values, shared by every front end (REPL, scripts, tests, the wire server)
//! and the file sink: timestamps as `YYYY-MM-DD HH:MM:SS[.ffffff]`, the fraction only when
//! not zero; CSV fields quoted when needed; JSON lines with numbers and booleans unquoted.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit, TimestampNanosecondType};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

/// Formats one timestamp given in nanoseconds since the epoch.
pub fn format_timestamp(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let sub = nanos.rem_euclid(1_000_000_000);
    let Some(dt) = chrono::DateTime::from_timestamp(secs, sub as u32) else {
        return nanos.to_string();
    };
    let base = dt.format("%Y-%m-%d %H:%M:%S").to_string();
    if sub == 0 {
        base
    } else {
        format!("{base}.{:06}", sub / 1000)
    }
}

/// A column's values as text (`None` for NULL).
pub fn column_strings(array: &ArrayRef) -> Result<Vec<Option<String>>, ArrowError> {
    if let DataType::Timestamp(_, _) = array.data_type() {
        let ns = cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
        let ns = ns.as_primitive::<TimestampNanosecondType>();
        return Ok((0..ns.len())
            .map(|i| ns.is_valid(i).then(|| format_timestamp(ns.value(i))))
            .collect());
    }
    let options = FormatOptions::default();
    let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
    Ok((0..array.len())
        .map(|i| array.is_valid(i).then(|| formatter.value(i).to_string()))
        .collect())
}

/// The rows of a batch as text (`None` for NULL).
pub fn batch_rows(batch: &RecordBatch) -> Result<Vec<Vec<Option<String>>>, ArrowError> {
    let cols = batch
        .columns()
        .iter()
        .map(column_strings)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|r| cols.iter().map(|c| c[r].clone()).collect())
        .collect())
}

/// A CSV field, quoted when it holds the delimiter, a quote or a line break.
pub fn csv_field(s: &str, delimiter: char) -> String {
    if s.contains([delimiter, '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One CSV line (without the line break); NULL is an empty field.
pub fn csv_line(values: &[Option<String>], delimiter: char) -> String {
    let fields: Vec<String> = values
        .iter()
        .map(|v| {
            v.as_deref()
                .map(|s| csv_field(s, delimiter))
                .unwrap_or_default()
        })
        .collect();
    fields.join(&delimiter.to_string())
}

/// The CSV header line of a schema.
pub fn csv_header(schema: &Schema, delimiter: char) -> String {
    let names: Vec<Option<String>> = schema
        .fields()
        .iter()
        .map(|f| Some(f.name().clone()))
        .collect();
    csv_line(&names, delimiter)
}

/// One JSON object (one line) for a row: numbers and booleans as JSON values, the rest as
/// strings, NULL as null.
pub fn json_line(schema: &Schema, values: Vec<Option<String>>) -> String {
    let mut obj = serde_json::Map::new();
    for (field, value) in schema.fields().iter().zip(values) {
        let v = match value {
            None => serde_json::Value::Null,
            Some(s) if field.data_type().is_numeric() => {
                serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s))
            }
            Some(s) if *field.data_type() == DataType::Boolean => {
                serde_json::Value::Bool(s == "true")
            }
            Some(s) => serde_json::Value::String(s),
        };
        obj.insert(field.name().clone(), v);
    }
    serde_json::Value::Object(obj).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("a,b", ','), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"", ','), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain", ','), "plain");
        assert_eq!(csv_field("a,b", '|'), "a,b");
    }

    #[test]
    fn timestamps_print_fraction_only_when_not_zero() {
        assert_eq!(format_timestamp(0), "1970-01-01 00:00:00");
        assert_eq!(
            format_timestamp(1_500_000_000),
            "1970-01-01 00:00:01.500000"
        );
        assert_eq!(format_timestamp(-1), "1969-12-31 23:59:59.999999");
    }
}
