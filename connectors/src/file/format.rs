//! Turning records into Arrow batches: CSV and JSON lines, through arrow's own decoders. When a
//! batch fails to decode, its records are decoded one by one to find which line is bad.

use std::sync::Arc;

use datafusion::arrow::array::new_null_array;
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json;
use datafusion::arrow::record_batch::RecordBatch;

/// A file format and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    Csv { header: bool, delimiter: u8 },
    Json,
}

impl FileFormat {
    pub fn name(&self) -> &'static str {
        match self {
            FileFormat::Csv { .. } => "csv",
            FileFormat::Json => "json",
        }
    }

    /// Decodes whole records (each ending with a newline) into one batch.
    pub fn decode(
        &self,
        schema: &SchemaRef,
        data: &[u8],
        rows: usize,
    ) -> Result<RecordBatch, ArrowError> {
        self.decode_columns(schema, data, rows, &[])
    }

    /// Decodes whole records into one batch of `schema`, leaving out the columns `unread`
    /// (indexes into `schema`, nullable ones): they come out as nulls, and their values are
    /// not parsed (a CSV record still needs all its fields), so a value that does not fit its
    /// type there is not an error. This is a projection pushed into the decoder, as
    /// DataFusion's and Flink's CSV and JSON readers take one.
    pub fn decode_columns(
        &self,
        schema: &SchemaRef,
        data: &[u8],
        rows: usize,
        unread: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        let batch_size = rows.max(1);
        let mut read: Vec<usize> = (0..schema.fields().len())
            .filter(|i| !unread.contains(i))
            .collect();
        // Rows of no columns (`count(*)`): one is decoded to check and count them, and left
        // out all the same.
        if read.is_empty() && !schema.fields().is_empty() {
            read.push(0);
        }
        let projected = read.len() < schema.fields().len();
        let read_schema: SchemaRef = if projected {
            Arc::new(schema.project(&read)?)
        } else {
            schema.clone()
        };
        let batch = match self {
            FileFormat::Csv { delimiter, .. } => {
                let mut builder = csv::ReaderBuilder::new(schema.clone())
                    .with_header(false)
                    .with_delimiter(*delimiter)
                    .with_batch_size(batch_size);
                if projected {
                    builder = builder.with_projection(read.clone());
                }
                let mut decoder = builder.build_decoder();
                let mut rest = data;
                while !rest.is_empty() {
                    let n = decoder.decode(rest)?;
                    if n == 0 {
                        break;
                    }
                    rest = &rest[n..];
                }
                decoder.flush()?
            }
            FileFormat::Json => {
                // Fields the schema does not name are passed over, not parsed.
                let mut decoder = json::ReaderBuilder::new(read_schema.clone())
                    .with_batch_size(batch_size)
                    .build_decoder()?;
                let mut rest = data;
                while !rest.is_empty() {
                    let n = decoder.decode(rest)?;
                    if n == 0 {
                        break;
                    }
                    rest = &rest[n..];
                }
                decoder.flush()?
            }
        };
        let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(read_schema.clone()));
        if batch.num_rows() != rows {
            return Err(ArrowError::ParseError(format!(
                "expected {rows} rows, decoded {}",
                batch.num_rows()
            )));
        }
        if !projected {
            return Ok(batch);
        }
        let mut decoded = batch.columns().iter();
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| match read.contains(&i) {
                true if !unread.contains(&i) => decoded.next().cloned(),
                true => decoded
                    .next()
                    .map(|_| new_null_array(field.data_type(), rows)),
                false => Some(new_null_array(field.data_type(), rows)),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ArrowError::SchemaError("a decoded column is missing".into()))?;
        RecordBatch::try_new(schema.clone(), columns)
    }
}

/// Arrow's message for one bad record, made to name what and where: the batch-relative line
/// numbers and row dumps dropped (the caller names the file's line), column numbers turned
/// into names, and long values cut (a 10 MB bad value is not echoed whole).
pub fn describe_error(e: &ArrowError, schema: &SchemaRef) -> String {
    let msg = match e {
        ArrowError::ParseError(m)
        | ArrowError::CsvError(m)
        | ArrowError::JsonError(m)
        | ArrowError::InvalidArgumentError(m) => m.clone(),
        other => other.to_string(),
    };
    // Arrow quotes the bad field's bytes as they were, and they need not be UTF-8 (a fuzzed
    // record found this): made valid before anything slices the text.
    let msg = String::from_utf8_lossy(msg.as_bytes()).into_owned();
    let mut msg = match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    // "incorrect number of fields for line 1, expected 4 got 2": the line is the batch's.
    if let Some(rest) = msg.strip_prefix("incorrect number of fields for line ") {
        if let Some((_, counts)) = rest.split_once(", ") {
            msg = format!("incorrect number of fields, {counts}");
        }
    }
    // "... for column 2": which column that is.
    if let Some(i) = msg.rfind(" for column ") {
        let number = &msg[i + " for column ".len()..];
        if let Some(f) = number
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(|n| schema.fields().get(n))
        {
            msg = format!("{} for column '{}'", &msg[..i], f.name());
        }
    }
    // A missing value of a column that may not be null (CSV: "Column 'ts' is declared as
    // non-nullable ...", JSON: "... non-nullable StructArray child: Field { "ts": ... }").
    let missing = if msg.contains("is declared as non-nullable but contains null values") {
        msg.split('\'').nth(1).map(str::to_string)
    } else if msg.contains("unmasked nulls in non-nullable") {
        msg.split('"').nth(1).map(str::to_string)
    } else {
        None
    };
    if let Some(name) = missing {
        msg = format!(
            "no value for column '{name}', which may not be null (a table's event-time column \
             never may)"
        );
    }
    shorten_quoted(&msg)
}

/// Quoted values in a message, cut to their first characters.
fn shorten_quoted(msg: &str) -> String {
    const KEEP: usize = 60;
    let mut out = String::with_capacity(msg.len().min(512));
    let mut rest = msg;
    while let Some(open) = rest.find('\'') {
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('\'') else {
            rest = after;
            break;
        };
        let value = &after[..close];
        if value.chars().count() > KEEP {
            let cut: String = value.chars().take(KEEP).collect();
            out.push_str(&format!("{cut}…' ({} bytes", value.len()));
            out.push(')');
            rest = &after[close + 1..];
            continue;
        }
        out.push_str(value);
        out.push('\'');
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    // Whatever else is long (an unquoted dump) is cut too.
    if out.chars().count() > 500 {
        out = out.chars().take(500).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn bad_records_are_described_by_column_name_and_without_huge_values() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let csv = FileFormat::Csv {
            header: false,
            delimiter: b',',
        };
        let huge = format!("1,{}\n", "x".repeat(100_000));
        let e = csv.decode(&schema, huge.as_bytes(), 1).unwrap_err();
        let m = describe_error(&e, &schema);
        assert!(m.contains("for column 'v'"), "{m}");
        assert!(m.contains("(100000 bytes)"), "{m}");
        assert!(m.len() < 300, "{m}");
        let e = csv.decode(&schema, b"1\n", 1).unwrap_err();
        let m = describe_error(&e, &schema);
        assert_eq!(m, "incorrect number of fields, expected 2 got 1");
        let strict: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("ts", DataType::Int64, false),
        ]));
        let e = FileFormat::Json
            .decode(&strict, b"{\"id\": 1}\n", 1)
            .unwrap_err();
        let m = describe_error(&e, &strict);
        assert!(m.contains("no value for column 'ts'"), "{m}");
    }
}
