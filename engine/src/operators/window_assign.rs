//! `WindowAssignOperator`: a window table function over a derived stream, as in Flink's
//! cascading windows: `TUMBLE(v, window_time, ...)` over a view `v` whose rows come out of
//! another window (DESIGN.md §3: `window_time` is usable as a downstream time column).
//!
//! - input: the derived stream's rows, in the task of the operator that produces them.
//! - output: each row once per window it belongs to, with `window_start`, `window_end` and
//!   `window_time` appended (as the source's window assigner does for a table).
//! - lateness: a row is judged against the operator's input watermark as it stands when the
//!   row arrives. Rows of an upstream window `[s, e)` are emitted when the watermark reaches
//!   `e`, before that watermark is passed on, so they arrive while the watermark is still
//!   below `e`; their time (`e - 1 ms`, or `e`) then lies in windows that end after it, none
//!   of which has fired. So a cascade never drops a row, and its output does not depend on
//!   timing. (The planner allows only such time columns.) Rows that are late anyway are
//!   counted as late.
//! - state: none beyond the watermark, which the sources send again after a restore.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::event_time::{EventTimeAssigner, EventTimeSpec, WindowAssignment};
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output};

/// Plan node of a window assignment over a derived stream.
#[derive(Debug, Clone)]
pub struct WindowAssignSpec {
    pub assignment: WindowAssignment,
    pub description: String,
}

impl OperatorFactory for WindowAssignSpec {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WindowAssignOperator {
            assigner: EventTimeAssigner::new(EventTimeSpec {
                watermark: None,
                window: Some(self.assignment.clone()),
                proctime: None,
                out_of_bound: None,
                keep_late: false,
                event_time: None,
            }),
            metrics: Arc::clone(&task.metrics),
        }))
    }
}

/// A running window assignment over a derived stream.
pub struct WindowAssignOperator {
    assigner: EventTimeAssigner,
    metrics: Arc<JobMetrics>,
}

impl Operator for WindowAssignOperator {
    fn name(&self) -> &str {
        "WindowAssign"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        let assigned = self.assigner.assign_behind(batch)?;
        if assigned.late_rows > 0 {
            self.metrics.add_late_rows(assigned.late_rows);
        }
        if let Some(b) = assigned.batch {
            out.emit(b);
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, _out: &mut Output) -> Result<EventTime> {
        self.assigner.restore_watermark(watermark);
        Ok(watermark)
    }
}
