//! Record batches as bytes (Arrow IPC stream format), for state entries and view rows.

use std::io::{Cursor, Write};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};

/// One batch, with its schema, as bytes.
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(buf)
}

/// Reads back what [`encode_batch`] wrote.
pub fn decode_batch(bytes: &[u8]) -> Result<RecordBatch> {
    let mut r = StreamReader::try_new(Cursor::new(bytes), None)?;
    r.next()
        .transpose()?
        .ok_or_else(|| EngineError::State("empty state entry".into()))
}

/// Batches of one layout as one stream to `out`, without concatenating them first.
pub fn encode_batches_to(
    out: &mut dyn Write,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    let mut w = StreamWriter::try_new(out, schema)?;
    for batch in batches {
        w.write(batch)?;
    }
    w.finish()?;
    Ok(())
}

/// Every batch of a stream [`encode_batches_to`] or [`encode_batch`] wrote.
pub fn decode_batches(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    StreamReader::try_new(Cursor::new(bytes), None)?
        .map(|b| b.map_err(Into::into))
        .collect()
}
