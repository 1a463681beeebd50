//! Text forms of values, shared by every front end (REPL, scripts, tests, the wire server)
//! and the sinks: timestamps as `YYYY-MM-DD HH:MM:SS[.ffffff]`, the fraction only when not
//! zero, nanoseconds when there are any (DESIGN.md §7); every other value as arrow's display
//! formats it. CSV is weir's own ([`csv_lines`]): fields quoted when they hold the delimiter,
//! a quote or a line break, or are empty; NULL an empty field without quotes. JSON lines
//! are weir's own ([`json_lines`]): keys in column order, numbers, booleans and decimals
//! unquoted, NULL null. Changes of an updating result can also be Debezium-style events
//! ([`debezium_events`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampNanosecondType};
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
    } else if sub % 1000 == 0 {
        format!("{base}.{:06}", sub / 1000)
    } else {
        // Nanoseconds are not cut to microseconds.
        format!("{base}.{sub:09}")
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

/// The batch as weir prints it: each timestamp column replaced by its text form (arrow's
/// own timestamp formats cannot drop a zero fraction), every other column as it is.
pub fn printable(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(..)))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if let DataType::Timestamp(..) = field.data_type() {
            fields.push(Field::new(field.name(), DataType::Utf8, true));
            columns.push(Arc::new(StringArray::from(column_strings(column)?)) as ArrayRef);
        } else {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// The rows of `batch` as CSV lines, after a header line when `header`: fields quoted when
/// they hold the delimiter, a quote or a line break, or are empty; NULL an empty field
/// without quotes. So NULL and '' stay apart, as in PostgreSQL's `COPY ... CSV`.
pub fn csv_lines(batch: &RecordBatch, header: bool, delimiter: u8) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    if header {
        let names: Vec<Option<String>> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| Some(f.name().clone()))
            .collect();
        csv_record(&mut out, &names, delimiter);
        out.push(b'\n');
    }
    let columns = batch
        .columns()
        .iter()
        .map(column_strings)
        .collect::<Result<Vec<_>, _>>()?;
    let mut row = Vec::with_capacity(columns.len());
    for r in 0..batch.num_rows() {
        row.clear();
        row.extend(columns.iter().map(|c| c[r].clone()));
        csv_record(&mut out, &row, delimiter);
        out.push(b'\n');
    }
    Ok(out)
}

/// One CSV record (no line break) of `fields` (`None`: NULL).
fn csv_record(out: &mut Vec<u8>, fields: &[Option<String>], delimiter: u8) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(delimiter);
        }
        let Some(value) = field else {
            continue;
        };
        let quote = value.is_empty()
            || value
                .bytes()
                .any(|b| b == delimiter || b == b'"' || b == b'\n' || b == b'\r');
        if !quote {
            out.extend_from_slice(value.as_bytes());
            continue;
        }
        out.push(b'"');
        for b in value.bytes() {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    }
}

/// The JSON keys of a schema's columns: the names in column order, a name used again
/// suffixed `_2`, `_3`, ... (a join's `id` and `id`, two `?column?`): a JSON object keeps one
/// value per key, and no value may be lost to a duplicate.
pub fn json_keys(schema: &Schema) -> Vec<String> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    schema
        .fields()
        .iter()
        .map(|f| {
            let n = seen.entry(f.name().as_str()).or_insert(0);
            *n += 1;
            if *n == 1 {
                f.name().clone()
            } else {
                format!("{}_{n}", f.name())
            }
        })
        .collect()
}

/// How a column's values go into JSON.
enum JsonKind {
    /// Numbers and booleans, unquoted; DECIMAL exactly as written (not through a float).
    Bare,
    /// Floats: unquoted when finite; NaN and infinities (which JSON has no number for) as
    /// strings.
    Float,
    /// Everything else as its text form, a JSON string.
    Text,
}

fn json_kind(t: &DataType) -> JsonKind {
    match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => JsonKind::Float,
        t if t.is_integer() => JsonKind::Bare,
        DataType::Boolean | DataType::Decimal128(..) | DataType::Decimal256(..) => JsonKind::Bare,
        _ => JsonKind::Text,
    }
}

/// The rows of `batch` as JSON lines: one object per row, keys in column order
/// ([`json_keys`]), NULL as `null`.
pub fn json_lines(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let schema = batch.schema();
    let keys: Vec<String> = json_keys(&schema)
        .iter()
        .map(|k| serde_json::to_string(k).unwrap_or_else(|_| "\"\"".into()))
        .collect();
    let columns = batch
        .columns()
        .iter()
        .map(|c| Ok((json_kind(c.data_type()), column_strings(c)?)))
        .collect::<Result<Vec<_>, ArrowError>>()?;
    let mut out = Vec::with_capacity(batch.num_rows() * 16 * columns.len().max(1));
    for row in 0..batch.num_rows() {
        out.push(b'{');
        for (i, (kind, values)) in columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(keys[i].as_bytes());
            out.push(b':');
            match (&values[row], kind) {
                (None, _) => out.extend_from_slice(b"null"),
                (Some(v), JsonKind::Bare) => out.extend_from_slice(v.as_bytes()),
                (Some(v), JsonKind::Float) if v.parse::<f64>().is_ok_and(f64::is_finite) => {
                    out.extend_from_slice(v.as_bytes())
                }
                (Some(v), _) => out.extend_from_slice(
                    serde_json::to_string(v)
                        .map_err(|e| ArrowError::JsonError(e.to_string()))?
                        .as_bytes(),
                ),
            }
        }
        out.extend_from_slice(b"}\n");
    }
    Ok(out)
}

/// Each row of `batch` as one CSV record without its line break (one message per row).
pub fn csv_records(batch: &RecordBatch, delimiter: u8) -> Result<Vec<Vec<u8>>, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .map(column_strings)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|r| {
            let row: Vec<Option<String>> = columns.iter().map(|c| c[r].clone()).collect();
            let mut line = Vec::new();
            csv_record(&mut line, &row, delimiter);
            line
        })
        .collect())
}

/// Each row of `batch` as one JSON object (one message per row). A JSON line holds no raw
/// line break, so the lines of [`json_lines`] are the rows.
pub fn json_records(batch: &RecordBatch) -> Result<Vec<Vec<u8>>, ArrowError> {
    let lines = json_lines(batch)?;
    Ok(lines
        .split(|b| *b == b'\n')
        .take(batch.num_rows())
        .map(<[u8]>::to_vec)
        .collect())
}

/// One Debezium-style change event (`format = 'debezium-json'`): its JSON, and the row
/// (of the batch) whose values key it (the row after the change, the row before for a
/// delete).
pub struct ChangeEvent {
    pub json: Vec<u8>,
    pub key_row: usize,
}

/// The changes of an updating stream's batch (`relation` and each row's kind) as
/// Debezium-style events `{"before":...,"after":...,"op":"c"|"u"|"d"}`: `+I` is a create,
/// `-D` a delete, a `-U` directly followed by its `+U` one update (before and after); a lone
/// `-U` is a delete and a lone `+U` a create. An append-only batch is all creates.
pub fn debezium_events(
    relation: &RecordBatch,
    adds: &[bool],
    pairs_with_next: &[bool],
) -> Result<Vec<ChangeEvent>, ArrowError> {
    let rows = json_records(relation)?;
    let mut out = Vec::with_capacity(rows.len());
    let event = |before: Option<&[u8]>, after: Option<&[u8]>, op: &str| {
        let mut json =
            Vec::with_capacity(32 + before.map_or(4, <[u8]>::len) + after.map_or(4, <[u8]>::len));
        json.extend_from_slice(b"{\"before\":");
        json.extend_from_slice(before.unwrap_or(b"null"));
        json.extend_from_slice(b",\"after\":");
        json.extend_from_slice(after.unwrap_or(b"null"));
        json.extend_from_slice(format!(",\"op\":\"{op}\"}}").as_bytes());
        json
    };
    let mut i = 0;
    while i < rows.len() {
        if !adds[i] && pairs_with_next[i] && i + 1 < rows.len() && adds[i + 1] {
            out.push(ChangeEvent {
                json: event(Some(&rows[i]), Some(&rows[i + 1]), "u"),
                key_row: i + 1,
            });
            i += 2;
            continue;
        }
        out.push(ChangeEvent {
            json: if adds[i] {
                event(None, Some(&rows[i]), "c")
            } else {
                event(Some(&rows[i]), None, "d")
            },
            key_row: i,
        });
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        BooleanArray, Float64Array, Int64Array, TimestampNanosecondArray,
    };

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("x", DataType::Float64, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
                Arc::new(StringArray::from(vec![
                    Some("a,b"),
                    Some("say \"hi\""),
                    Some("line\nbreak"),
                ])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(2.0), None])),
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
                Arc::new(TimestampNanosecondArray::from(vec![
                    Some(0),
                    Some(1_500_000_000),
                    None,
                ])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn csv_quotes_when_needed_and_null_is_empty() {
        let text = String::from_utf8(csv_lines(&batch(), true, b',').unwrap()).unwrap();
        assert_eq!(
            text,
            "id,s,x,ok,ts\n\
             1,\"a,b\",1.5,true,1970-01-01 00:00:00\n\
             ,\"say \"\"hi\"\"\",2.0,,1970-01-01 00:00:01.500000\n\
             3,\"line\nbreak\",,false,\n"
        );
        // NULL and the empty string stay apart, as in PostgreSQL's COPY ... CSV.
        let texts = RecordBatch::try_from_iter([(
            "s",
            Arc::new(StringArray::from(vec![None, Some(""), Some("NULL")])) as ArrayRef,
        )])
        .unwrap();
        let text = String::from_utf8(csv_lines(&texts, false, b',').unwrap()).unwrap();
        assert_eq!(text, "\n\"\"\nNULL\n");
        let pipes = String::from_utf8(csv_lines(&batch().slice(0, 1), false, b'|').unwrap());
        assert_eq!(pipes.unwrap(), "1|a,b|1.5|true|1970-01-01 00:00:00\n");
        let records = csv_records(&batch(), b',').unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[2], b"3,\"line\nbreak\",,false,".to_vec());
    }

    #[test]
    fn json_lines_keep_types_and_nulls() {
        let records = json_records(&batch()).unwrap();
        let first: serde_json::Value = serde_json::from_slice(&records[0]).unwrap();
        assert_eq!(
            first,
            serde_json::json!({"id": 1, "s": "a,b", "x": 1.5, "ok": true, "ts": "1970-01-01 00:00:00"})
        );
        let second: serde_json::Value = serde_json::from_slice(&records[1]).unwrap();
        assert_eq!(second["id"], serde_json::Value::Null);
        assert_eq!(second["ts"], "1970-01-01 00:00:01.500000");
        assert_eq!(records.len(), 3);
        // Keys in column order, a repeated name suffixed, DECIMAL exact, NaN a string.
        use datafusion::arrow::array::Decimal128Array;
        let schema = Schema::new(vec![
            Field::new("z", DataType::Int64, true),
            Field::new("a", DataType::Decimal128(38, 0), true),
            Field::new("z", DataType::Float64, true),
        ]);
        let big = 12_345_678_901_234_567_890_123_456_789_012_345_678i128;
        let b = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1])),
                Arc::new(
                    Decimal128Array::from(vec![big])
                        .with_precision_and_scale(38, 0)
                        .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![f64::NAN])),
            ],
        )
        .unwrap();
        let line = String::from_utf8(json_lines(&b).unwrap()).unwrap();
        assert_eq!(
            line,
            "{\"z\":1,\"a\":12345678901234567890123456789012345678,\"z_2\":\"NaN\"}\n"
        );
    }

    #[test]
    fn timestamps_print_fraction_only_when_not_zero() {
        assert_eq!(format_timestamp(0), "1970-01-01 00:00:00");
        assert_eq!(
            format_timestamp(1_500_000_000),
            "1970-01-01 00:00:01.500000"
        );
        assert_eq!(format_timestamp(-1), "1969-12-31 23:59:59.999999999");
        assert_eq!(
            format_timestamp(1_000_000_001),
            "1970-01-01 00:00:01.000000001"
        );
    }

    #[test]
    fn changes_become_debezium_events_with_updates_paired() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
        ]));
        let rel = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "a", "a", "b", "c"])),
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    Some(1),
                    Some(2),
                    None,
                    Some(3),
                ])),
            ],
        )
        .unwrap();
        // +I a1, -U a1, +U a2, -D b, lone +U c.
        let adds = [true, false, true, false, true];
        let pairs = [false, true, false, false, false];
        let events = debezium_events(&rel, &adds, &pairs).unwrap();
        let text: Vec<String> = events
            .iter()
            .map(|e| String::from_utf8(e.json.clone()).unwrap())
            .collect();
        assert_eq!(
            text,
            [
                r#"{"before":null,"after":{"k":"a","n":1},"op":"c"}"#,
                r#"{"before":{"k":"a","n":1},"after":{"k":"a","n":2},"op":"u"}"#,
                r#"{"before":{"k":"b","n":null},"after":null,"op":"d"}"#,
                r#"{"before":null,"after":{"k":"c","n":3},"op":"c"}"#,
            ]
        );
        let keys: Vec<usize> = events.iter().map(|e| e.key_row).collect();
        assert_eq!(keys, [0, 2, 3, 4]);
    }
}
