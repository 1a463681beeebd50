//! Operator tests through the harness ([`super::harness`]): each operator's results checked
//! against an independent computation, across barriers, restores at other parallelisms and
//! spills.

mod changelog_buffer;
mod emit_order;
mod extreme_filter;
mod group_aggregate;
mod interval_join;
mod interval_join_reach;
mod partition;
mod session_aggregate;
mod session_window;
mod stream_join;
mod top_n;
mod window_aggregate;
mod window_join;
mod window_top_n;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;

use super::harness::{Harness, OperatorUnderTest};
use crate::message::EventTime;

/// Timestamps in nanoseconds.
fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

/// Applies emitted batches (a changelog when `updating`, else inserts) to a multiset of rows,
/// each made by `row` from the batch's relation; a retraction must name a row that is there.
fn apply_multiset<R: Ord + Clone + std::fmt::Debug>(
    table: &mut std::collections::BTreeMap<R, i64>,
    batches: &[RecordBatch],
    updating: bool,
    row: impl Fn(&RecordBatch, usize) -> R,
) {
    use crate::changelog::{self, Op};
    for b in batches {
        assert_eq!(changelog::has_op_field(b.schema_ref()), updating);
        let rel = if updating {
            changelog::relation(b).unwrap()
        } else {
            b.clone()
        };
        for i in 0..b.num_rows() {
            let r = row(&rel, i);
            let add = !updating
                || Op::from_code(changelog::ops(b).unwrap().value(i))
                    .unwrap()
                    .is_add();
            let n = table.entry(r.clone()).or_default();
            *n += if add { 1 } else { -1 };
            assert!(*n >= 0, "a retraction of {r:?}, which is not in the result");
            if *n == 0 {
                table.remove(&r);
            }
        }
    }
}

fn col(name: &str, index: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(Column::new(name, index))
}

/// A stream in steps: batches of rows (`T`), each followed by a watermark.
struct Steps<T> {
    steps: Vec<(Vec<T>, EventTime)>,
}

impl<T: Clone> Steps<T> {
    /// Steps `[from, to)`.
    fn range(&self, from: usize, to: usize) -> &[(Vec<T>, EventTime)] {
        &self.steps[from..to.min(self.steps.len())]
    }

    fn len(&self) -> usize {
        self.steps.len()
    }

    /// Each row with the watermark standing when it arrives.
    fn rows_with_watermark(&self) -> Vec<(T, EventTime)> {
        let mut watermark = EventTime::MIN;
        let mut out = Vec::new();
        for (rows, w) in &self.steps {
            out.extend(rows.iter().map(|r| (r.clone(), watermark)));
            watermark = watermark.max(*w);
        }
        out
    }
}

/// Runs `steps` through `op`, starting at `parallelism`. Before step `i` of each `(i, p)` in
/// `restarts`, takes a barrier and restores from it at parallelism `p` (re-sending the
/// watermark, as the restored upstream does). `feed` hands one step's rows to the harness.
/// Returns everything emitted (through the end of input) and the rows counted late.
fn run<T: Clone>(
    op: &OperatorUnderTest,
    steps: &Steps<T>,
    parallelism: usize,
    restarts: &[(usize, usize)],
    feed: impl Fn(&mut Harness, &[T]),
) -> (Vec<RecordBatch>, u64) {
    let mut h = op.start(parallelism).unwrap();
    let (mut output, mut late) = (Vec::new(), 0);
    let mut at = 0;
    let mut watermark = EventTime::MIN;
    let mut stops = restarts.to_vec();
    stops.push((steps.len(), 0));
    for (until, p) in stops {
        for (rows, w) in steps.range(at, until) {
            feed(&mut h, rows);
            h.watermark(*w).unwrap();
            watermark = watermark.max(*w);
        }
        at = until;
        if at >= steps.len() {
            break;
        }
        let checkpoint = h.barrier().unwrap();
        output.extend(h.take_output());
        late += h.late_rows();
        h = op.restore(&checkpoint, p).unwrap();
        h.watermark(watermark).unwrap();
    }
    h.end().unwrap();
    output.extend(h.take_output());
    (output, late + h.late_rows())
}
