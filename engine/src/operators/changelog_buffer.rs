//! `ChangelogBufferOperator`: holds an updating stream whose rows have a unique key and
//! emits, every `interval` (processing time), each key's net change since the last emission
//! (Flink's early-fire delay and mini-batch, for `early_fire_interval`).
//!
//! - input: an updating stream in which each key has at most one live row (a GROUP BY's
//!   output, keyed by its group columns), its changes in order.
//! - held: per key touched since the last emission, the row the output last carried for it
//!   (none if it had none) and its current row (none if it left). Only in memory: everything
//!   is emitted before each barrier, so no checkpoint ever depends on it.
//! - output: on the timer, before a barrier and at the end of input, per held key: `+I` of a
//!   new row, `-D` of a row that left, `-U`/`+U` of a changed one, nothing when it came back
//!   to what was last emitted. Applied to a table by key, the output ends in the same state
//!   as the input's changes would, with fewer changes in between.
//! - with `window`: when the watermark passes a held key's window end, its final change is
//!   emitted at once (the window's last row comes when it closes, not an interval later).
//! - with more than `MAX_HELD` keys held, they are emitted at once (memory stays bounded).
//! - watermarks pass through, after the closed windows' rows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, Int8Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};

use crate::changelog::{self, Op};
use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::EventTime;
use crate::operator::{Operator, Output, MAX_BATCH_ROWS};
use crate::operators::windowed::WindowColumn;

/// Keys held at most between two emissions.
const MAX_HELD: usize = 100_000;

/// The plan node of a changelog buffer.
#[derive(Debug, Clone)]
pub struct ChangelogBufferSpec {
    /// The relation of the stream (without its change kinds).
    pub schema: SchemaRef,
    /// Columns of the relation that identify a row.
    pub key: Vec<usize>,
    /// How often held changes are emitted.
    pub interval: Duration,
    /// The window column among `schema`'s, for early-fire windows.
    pub window: Option<WindowColumn>,
}

impl OperatorFactory for ChangelogBufferSpec {
    fn describe(&self) -> String {
        format!(
            "ChangelogBuffer: net change per key every {} ms",
            self.interval.as_millis()
        )
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let fields = |columns: &mut dyn Iterator<Item = usize>| {
            columns
                .map(|i| SortField::new(self.schema.field(i).data_type().clone()))
                .collect::<Vec<_>>()
        };
        Ok(Box::new(ChangelogBufferOperator {
            keys: RowConverter::new(fields(&mut self.key.iter().copied()))?,
            rows: RowConverter::new(fields(&mut (0..self.schema.fields().len())))?,
            spec: self.clone(),
            held: HashMap::new(),
            first_end: None,
        }))
    }
}

/// One key's changes since the last emission.
struct Held {
    /// The row the output last carried for the key.
    emitted: Option<OwnedRow>,
    /// Its row now.
    current: Option<OwnedRow>,
    /// Its window's end (early-fire windows).
    end: Option<EventTime>,
}

/// A running changelog buffer (see the module doc).
pub struct ChangelogBufferOperator {
    spec: ChangelogBufferSpec,
    keys: RowConverter,
    rows: RowConverter,
    held: HashMap<OwnedRow, Held>,
    /// The earliest window end among held keys.
    first_end: Option<EventTime>,
}

impl ChangelogBufferOperator {
    /// Emits the net change of the held keys that `pick` selects and forgets them.
    fn emit(&mut self, out: &mut Output, pick: impl Fn(&Held) -> bool) -> Result<()> {
        let mut olds: Vec<OwnedRow> = Vec::new();
        let mut news: Vec<OwnedRow> = Vec::new();
        let mut order: Vec<(Op, usize)> = Vec::new();
        let mut first_end: Option<EventTime> = None;
        self.held.retain(|_, h| {
            if !pick(h) {
                if let Some(e) = h.end {
                    first_end = Some(first_end.map_or(e, |f| f.min(e)));
                }
                return true;
            }
            match (h.emitted.take(), h.current.take()) {
                (None, Some(new)) => {
                    order.push((Op::Insert, news.len()));
                    news.push(new);
                }
                (Some(old), None) => {
                    order.push((Op::Delete, olds.len()));
                    olds.push(old);
                }
                (Some(old), Some(new)) if old != new => {
                    order.push((Op::UpdateBefore, olds.len()));
                    olds.push(old);
                    order.push((Op::UpdateAfter, news.len()));
                    news.push(new);
                }
                _ => {}
            }
            false
        });
        self.first_end = first_end;
        for chunk in order.chunks(MAX_BATCH_ROWS) {
            let rows = chunk.iter().map(|(op, i)| match op {
                Op::Insert | Op::UpdateAfter => news[*i].row(),
                Op::Delete | Op::UpdateBefore => olds[*i].row(),
            });
            let mut columns: Vec<ArrayRef> = self.rows.convert_rows(rows)?;
            columns.push(Arc::new(Int8Array::from_iter_values(
                chunk.iter().map(|(op, _)| op.code()),
            )));
            let options = RecordBatchOptions::new().with_row_count(Some(chunk.len()));
            out.emit(RecordBatch::try_new_with_options(
                changelog::with_op_field(&self.spec.schema),
                columns,
                &options,
            )?);
        }
        Ok(())
    }
}

impl Operator for ChangelogBufferOperator {
    fn name(&self) -> &str {
        "ChangelogBuffer"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        let ops = changelog::ops(&batch)?.clone();
        let relation = changelog::relation(&batch)?;
        let key_columns: Vec<ArrayRef> = self
            .spec
            .key
            .iter()
            .map(|&i| Arc::clone(relation.column(i)))
            .collect();
        let keys = self.keys.convert_columns(&key_columns)?;
        let rows = self.rows.convert_columns(relation.columns())?;
        let ends = match &self.spec.window {
            Some(w) => Some(w.ends(&relation)?),
            None => None,
        };
        for (r, code) in ops.values().iter().enumerate() {
            let add = Op::from_code(*code)?.is_add();
            let row = rows.row(r).owned();
            let end = ends.as_ref().map(|e| e[r]);
            match self.held.get_mut(&keys.row(r).owned()) {
                Some(h) => h.current = add.then_some(row),
                None => {
                    // The key's first change since the last emission: a retraction takes
                    // back the row the output carries; an addition comes on top of none.
                    let (emitted, current) = if add {
                        (None, Some(row))
                    } else {
                        (Some(row), None)
                    };
                    self.held.insert(
                        keys.row(r).owned(),
                        Held {
                            emitted,
                            current,
                            end,
                        },
                    );
                    if let Some(e) = end {
                        self.first_end = Some(self.first_end.map_or(e, |f| f.min(e)));
                    }
                }
            }
        }
        if self.held.len() > MAX_HELD {
            self.emit(out, |_| true)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, out: &mut Output) -> Result<EventTime> {
        if self.first_end.is_some_and(|e| e <= watermark) {
            self.emit(out, |h| h.end.is_some_and(|e| e <= watermark))?;
        }
        Ok(watermark)
    }

    fn timer_interval(&self) -> Option<Duration> {
        Some(self.spec.interval)
    }

    fn on_timer(&mut self, out: &mut Output) -> Result<()> {
        self.emit(out, |_| true)
    }

    fn prepare_barrier(&mut self, out: &mut Output) -> Result<()> {
        self.emit(out, |_| true)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.emit(out, |_| true)
    }
}
