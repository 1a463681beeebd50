//! Input rows an updating GROUP BY holds before applying them together (Flink's mini-batch
//! aggregation, `table.exec.mini-batch.*`; RisingWave applies its aggregates per barrier).
//!
//! Applying many batches' rows at once reads and writes each group's state once per
//! mini-batch instead of once per input batch, and emits each group's net change once: a
//! group touched by every input batch emits one `-U`/`+U` pair per mini-batch, not one per
//! batch. The operator takes the rows out on its timer, before each barrier, at the end of
//! input, and when [`MiniBatch::is_full`]; nothing held here outlives a barrier, so no
//! checkpoint depends on it.

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;

/// Rows held at most before they are applied.
pub(crate) const MAX_ROWS: usize = 100_000;
/// Bytes of held rows at most before they are applied.
pub(crate) const MAX_BYTES: usize = 16 << 20;

/// Held input rows (without their change kinds) and the sign of each (+1 adds, -1 retracts).
#[derive(Default)]
pub(crate) struct MiniBatch {
    batches: Vec<RecordBatch>,
    signs: Vec<i64>,
    bytes: usize,
}

impl MiniBatch {
    pub(crate) fn push(&mut self, rel: RecordBatch, signs: Vec<i64>) {
        self.bytes += rel.get_array_memory_size();
        self.signs.extend(signs);
        self.batches.push(rel);
    }

    /// Whether the held rows should be applied now (memory stays bounded).
    pub(crate) fn is_full(&self) -> bool {
        self.signs.len() >= MAX_ROWS || self.bytes >= MAX_BYTES
    }

    /// The held rows as one batch, and their signs; `None` when nothing is held.
    pub(crate) fn take(&mut self) -> Result<Option<(RecordBatch, Vec<i64>)>> {
        let batches = std::mem::take(&mut self.batches);
        let signs = std::mem::take(&mut self.signs);
        self.bytes = 0;
        let Some(first) = batches.first() else {
            return Ok(None);
        };
        let rel = if batches.len() == 1 {
            first.clone()
        } else {
            concat_batches(&first.schema(), &batches)?
        };
        Ok(Some((rel, signs)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))])
            .expect("a batch of one column")
    }

    #[test]
    fn held_rows_come_out_in_order_with_their_signs_and_once() -> Result<()> {
        let mut held = MiniBatch::default();
        assert!(held.take()?.is_none());
        held.push(batch(&[1, 2]), vec![1, 1]);
        held.push(batch(&[3]), vec![-1]);
        held.push(batch(&[4, 5, 6]), vec![1, -1, 1]);
        assert!(!held.is_full());
        let (rel, signs) = held.take()?.expect("rows were held");
        let values: Vec<i64> = rel.column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(values, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(signs, vec![1, 1, -1, 1, -1, 1]);
        assert!(held.take()?.is_none());
        Ok(())
    }

    #[test]
    fn enough_rows_fill_a_mini_batch() {
        let mut held = MiniBatch::default();
        let rows: Vec<i64> = (0..1000).collect();
        for _ in 0..MAX_ROWS / 1000 - 1 {
            held.push(batch(&rows), vec![1; rows.len()]);
        }
        assert!(!held.is_full());
        held.push(batch(&rows), vec![1; rows.len()]);
        assert!(held.is_full());
    }
}
