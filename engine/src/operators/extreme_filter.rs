//! `ExtremeFilterOperator`: before a window join of rows with their own window's MAX (or
//! MIN), drops the rows that cannot carry it (a dynamic filter, as DataFusion pushes a hash
//! join's build side or a TopK's bound into the scan).
//!
//! Nexmark q7 joins every bid with the maximum price of its window on `price = maxprice`:
//! without this step every bid crosses the keyed exchange and waits in the join until its
//! window fires, though only the few carrying the maximum ever match.
//!
//! - input: the append-only rows of the join's side whose rows are also the aggregate's input
//!   (the planner proves this), with a window column, group key columns and the value column.
//! - output: the rows whose value equals the largest (smallest) value seen so far at this
//!   instance in their window and group, this batch included. A row below it cannot equal the
//!   window's maximum, which is at least as large; rows with a NULL value match nothing and
//!   are dropped. Rows of windows at or before the watermark (late) pass untouched and leave
//!   the bounds alone: the aggregate does not count them, so they must not raise a bound.
//! - state: soft. The bounds are kept in memory only and forgotten when the watermark passes
//!   their window; after a restore they start empty, which passes more rows, never fewer.
//!   Past [`MAX_GROUPS`] bounds held, rows of new groups pass unfiltered.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use crate::error::Result;
use crate::graph::{OperatorFactory, TaskInfo};
use crate::message::{EventTime, WATERMARK_MIN};
use crate::operator::{Operator, Output};
use crate::operators::windowed::WindowColumn;

/// Bounds held at most (windows x groups); rows of groups beyond pass unfiltered.
pub const MAX_GROUPS: usize = 1 << 18;

/// Which extreme the join matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    Max,
    Min,
}

impl Extreme {
    /// `a` is at least as extreme as `b`.
    fn beats(self, a: i64, b: i64) -> bool {
        match self {
            Extreme::Max => a >= b,
            Extreme::Min => a <= b,
        }
    }
}

/// The plan node.
#[derive(Debug, Clone)]
pub struct ExtremeFilterSpec {
    /// The rows' window column.
    pub window: WindowColumn,
    /// Columns of the aggregate's group keys besides the window.
    pub keys: Vec<usize>,
    /// The column the aggregate takes the extreme of: a type [`ExtremeFilterSpec::supports`].
    pub value: usize,
    pub extreme: Extreme,
    pub input_schema: SchemaRef,
    pub description: String,
}

impl ExtremeFilterSpec {
    /// Value types compared here: those that convert to `i64` without loss and keep their
    /// order (integers up to 32 bits unsigned, signed up to 64, dates, times, timestamps).
    pub fn supports(value: &DataType) -> bool {
        use DataType::*;
        matches!(
            value,
            Int8 | Int16
                | Int32
                | Int64
                | UInt8
                | UInt16
                | UInt32
                | Date32
                | Date64
                | Time32(_)
                | Time64(_)
                | Timestamp(_, _)
                | Duration(_)
        )
    }
}

impl OperatorFactory for ExtremeFilterSpec {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn create(&self, _task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let converter = if self.keys.is_empty() {
            None
        } else {
            let fields = self
                .keys
                .iter()
                .map(|&k| SortField::new(self.input_schema.field(k).data_type().clone()))
                .collect();
            Some(RowConverter::new(fields)?)
        };
        Ok(Box::new(ExtremeFilterOperator {
            spec: Arc::new(self.clone()),
            converter,
            bounds: HashMap::new(),
            watermark: WATERMARK_MIN,
        }))
    }
}

/// What pass 1 decided for a row.
const PASS: u32 = u32::MAX;
const DROP: u32 = u32::MAX - 1;

/// A window end and the group key row within it (`None` without group keys).
type Group = (EventTime, Option<Box<[u8]>>);

pub struct ExtremeFilterOperator {
    spec: Arc<ExtremeFilterSpec>,
    converter: Option<RowConverter>,
    /// The most extreme value seen per (window end, group key row); no key row without
    /// group keys.
    bounds: HashMap<Group, i64>,
    watermark: EventTime,
}

impl ExtremeFilterOperator {
    /// The rows to keep.
    fn mask(&mut self, batch: &RecordBatch) -> Result<BooleanArray> {
        let n = batch.num_rows();
        let ends = self.spec.window.ends(batch)?;
        let values = cast(batch.column(self.spec.value), &DataType::Int64)?;
        let values = values.as_primitive::<Int64Type>();
        let keys: Option<Rows> = match &self.converter {
            Some(c) => {
                let columns: Vec<_> = self
                    .spec
                    .keys
                    .iter()
                    .map(|&k| Arc::clone(batch.column(k)))
                    .collect();
                Some(c.convert_columns(&columns)?)
            }
            None => None,
        };
        // Without group keys a group is its window alone: `None`, not an empty row (comparing
        // empty rows costs a microcode assist each, see `state::same_bytes`; on Nexmark q7
        // that was more than half of the job's CPU).
        let key = |row: usize| keys.as_ref().map(|k| k.row(row).data());
        let extreme = self.spec.extreme;
        // Pass 1: each row's group (a slot of `best`), the groups' bounds raised by the batch.
        let mut slot_of: HashMap<(EventTime, Option<&[u8]>), u32> = HashMap::new();
        let mut best: Vec<(EventTime, Option<&[u8]>, i64)> = Vec::new();
        let mut slots = Vec::with_capacity(n);
        let mut last: Option<(EventTime, Option<&[u8]>, u32)> = None;
        for (row, &end) in ends.iter().enumerate() {
            if end <= self.watermark {
                slots.push(PASS);
                continue;
            }
            if values.is_null(row) {
                slots.push(DROP);
                continue;
            }
            let value = values.value(row);
            let k = key(row);
            let slot = match last {
                Some((e, lk, slot)) if e == end && lk == k => slot,
                _ => match slot_of.get(&(end, k)) {
                    Some(&slot) => slot,
                    None => {
                        let held = self.bounds.get(&(end, k.map(Box::from))).copied();
                        if held.is_none() && self.bounds.len() + best.len() >= MAX_GROUPS {
                            slots.push(PASS);
                            last = None;
                            continue;
                        }
                        let slot = best.len() as u32;
                        best.push((end, k, held.unwrap_or(value)));
                        slot_of.insert((end, k), slot);
                        slot
                    }
                },
            };
            last = Some((end, k, slot));
            let bound = &mut best[slot as usize].2;
            if extreme.beats(value, *bound) {
                *bound = value;
            }
            slots.push(slot);
        }
        // Pass 2: a row stays when it carries its group's bound (or passes untouched).
        let mask: BooleanArray = slots
            .iter()
            .enumerate()
            .map(|(row, &slot)| {
                Some(match slot {
                    PASS => true,
                    DROP => false,
                    slot => values.value(row) == best[slot as usize].2,
                })
            })
            .collect();
        for (end, k, bound) in best {
            self.bounds.insert((end, k.map(Box::from)), bound);
        }
        debug_assert_eq!(mask.len(), n);
        Ok(mask)
    }
}

impl Operator for ExtremeFilterOperator {
    fn name(&self) -> &str {
        "ExtremeFilter"
    }

    fn process_batch(&mut self, batch: RecordBatch, _input: usize, out: &mut Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let mask = self.mask(&batch)?;
        match mask.true_count() {
            0 => {}
            kept if kept == batch.num_rows() => out.emit(batch),
            _ => out.emit(filter_record_batch(&batch, &mask)?),
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: EventTime, _out: &mut Output) -> Result<EventTime> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.bounds.retain(|(end, _), _| *end > watermark);
        }
        Ok(watermark)
    }
}
