//! Late rows as data (DESIGN.md §3, `late_rows = 'name'`): the rows an event-time step drops as
//! late, kept with the watermark they missed and why, instead of only being counted.
//!
//! Whoever judges a row late (the source's window assigner, the session operator) builds a
//! batch of those rows with [`late_batch`] and hands it to [`crate::Output::emit_late`] (or,
//! in a source task, to the chain directly). The runtime passes late batches to the stage's
//! late-rows writer ([`crate::Stage::late_rows`]), which is snapshotted and committed with the
//! job's checkpoints like a sink; without one, late rows are only counted.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::Result;
use crate::message::EventTime;

/// The column holding the watermark a late row missed (the watermark just before it).
pub const LATE_WATERMARK: &str = "late_watermark";
/// The column saying why a row was late.
pub const LATE_REASON: &str = "late_reason";

/// Every window of the row (TUMBLE, HOP, CUMULATE) had fired.
pub const WINDOW_CLOSED: &str = "window closed";
/// The row's time column is NULL: it belongs to no window.
pub const NO_EVENT_TIME: &str = "no event time";
/// An interval join's input row with a time below its partition's watermark.
pub const BELOW_WATERMARK: &str = "below watermark";
/// A SESSION row whose own window had ended and that touched no open session.
pub const SESSION_CLOSED: &str = "session closed";

/// The columns of late rows: the row's own, then [`LATE_WATERMARK`] and [`LATE_REASON`].
pub fn late_schema(rows: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = rows.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        LATE_WATERMARK,
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    ));
    fields.push(Field::new(LATE_REASON, DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// Late rows found while judging a batch, row by row.
#[derive(Debug, Default)]
pub struct LateRows {
    indices: Vec<u32>,
    watermarks: Vec<Option<EventTime>>,
    reasons: Vec<&'static str>,
}

impl LateRows {
    /// Row `row` is late: it missed `watermark` (`None`: no watermark yet) for `reason`.
    pub fn push(&mut self, row: usize, watermark: EventTime, reason: &'static str) {
        self.indices.push(row as u32);
        self.watermarks
            .push((watermark != crate::message::WATERMARK_MIN).then_some(watermark));
        self.reasons.push(reason);
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The late rows of `rows` (their first `columns` columns), with the watermark and reason.
    pub fn batch(self, rows: &RecordBatch, columns: usize) -> Result<Option<RecordBatch>> {
        if self.indices.is_empty() {
            return Ok(None);
        }
        let n = self.indices.len();
        let idx = UInt32Array::from(self.indices);
        let mut out: Vec<ArrayRef> = rows.columns()[..columns]
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        out.push(Arc::new(TimestampNanosecondArray::from(self.watermarks)));
        out.push(Arc::new(StringArray::from(self.reasons)));
        let own = Schema::new(rows.schema().fields()[..columns].to_vec());
        Ok(Some(RecordBatch::try_new_with_options(
            late_schema(&own),
            out,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;

    #[test]
    fn late_rows_keep_their_columns_watermark_and_reason() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("extra", DataType::Int64, false),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![10, 11, 12])),
                Arc::new(Int64Array::from(vec![0, 0, 0])),
            ],
        )
        .unwrap();
        let mut late = LateRows::default();
        late.push(2, 7, WINDOW_CLOSED);
        late.push(0, crate::message::WATERMARK_MIN, NO_EVENT_TIME);
        let b = late.batch(&rows, 1).unwrap().unwrap();
        assert_eq!(b.num_columns(), 3);
        assert_eq!(b.schema().field(1).name(), LATE_WATERMARK);
        assert_eq!(b.column(0).as_primitive::<Int64Type>().values(), &[12, 10]);
        let wm = b
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        assert_eq!((wm.value(0), wm.is_null(1)), (7, true));
        let why = b.column(2).as_string::<i32>();
        assert_eq!((why.value(0), why.value(1)), (WINDOW_CLOSED, NO_EVENT_TIME));
    }
}
