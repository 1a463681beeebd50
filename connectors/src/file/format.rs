//! Turning records into Arrow batches: CSV and JSON lines, through arrow's own decoders. When a
//! batch fails to decode, its records are decoded one by one to find which line is bad.

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
        let batch_size = rows.max(1);
        let batch = match self {
            FileFormat::Csv { delimiter, .. } => {
                let mut decoder = csv::ReaderBuilder::new(schema.clone())
                    .with_header(false)
                    .with_delimiter(*delimiter)
                    .with_batch_size(batch_size)
                    .build_decoder();
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
                let mut decoder = json::ReaderBuilder::new(schema.clone())
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
        let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
        if batch.num_rows() != rows {
            return Err(ArrowError::ParseError(format!(
                "expected {rows} rows, decoded {}",
                batch.num_rows()
            )));
        }
        Ok(batch)
    }
}

/// Shortens arrow's message for one bad record: drop the batch-relative line and row dump.
pub fn describe_error(e: &ArrowError) -> String {
    let msg = match e {
        ArrowError::ParseError(m) | ArrowError::CsvError(m) | ArrowError::JsonError(m) => m.clone(),
        other => other.to_string(),
    };
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}
