//! Sinks: operators at the end of a job that hand its results on.

pub mod blackhole;
pub mod channel;
pub mod file;
pub mod late_rows;
pub mod postgres;
pub mod view;

pub use blackhole::BlackholeSinkFactory;
pub use channel::{ChannelSink, SinkEvent};
pub use file::FileSinkFactory;
pub use late_rows::LateRowsTable;
pub use postgres::PostgresSinkFactory;
pub use view::{ViewSinkFactory, ViewSourceFactory};

use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::changelog::{self, Op};

use crate::display::{debezium_events, ChangeEvent};

/// A batch reaching a sink as Debezium-style change events (`format = 'debezium-json'`): an
/// updating stream's changes (its kinds last), or an append-only batch as creates. Returns
/// the relation (what the events' key rows index) with the events.
pub(crate) fn change_events(
    batch: &RecordBatch,
) -> weir_engine::Result<(RecordBatch, Vec<ChangeEvent>)> {
    let (relation, ops) = if changelog::has_op_field(batch.schema_ref()) {
        let ops = changelog::ops(batch)?
            .values()
            .iter()
            .map(|&c| Op::from_code(c))
            .collect::<weir_engine::Result<Vec<_>>>()?;
        (changelog::relation(batch)?, ops)
    } else {
        (batch.clone(), vec![Op::Insert; batch.num_rows()])
    };
    let adds: Vec<bool> = ops.iter().map(|o| o.is_add()).collect();
    let before_update: Vec<bool> = ops.iter().map(|o| *o == Op::UpdateBefore).collect();
    let events = debezium_events(&relation, &adds, &before_update)?;
    Ok((relation, events))
}
