//! Which column of a stream holds each row's window, and how to reach the window's end.
//!
//! Windowed operators know a window by its end: windows fire in order of end, and a window's
//! state is stored under its end. A row carries its window in `window_start`, `window_end` or
//! `window_time` (added by the window table function); [`WindowBound`] says which one, and
//! [`WindowColumn`] where it is in a batch. The planner traces a [`WindowBound`] through
//! projections and joins for every column of a stream.

use datafusion::arrow::array::Array;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};
use crate::event_time::timestamps_as_nanos;
use crate::message::EventTime;
use crate::window::WINDOW_TIME_BEFORE_END;

/// Which bound of its window a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowEdge {
    /// `window_start`: the window ends `size` later.
    Start,
    /// `window_end`.
    End,
    /// `window_time`: [`WINDOW_TIME_BEFORE_END`] before the end (Flink's `window_time`, the
    /// window's last instant at millisecond precision).
    Time,
}

/// What a column holds as far as windows go: one bound of each row's window, of windows `size`
/// long (TUMBLE and HOP windows all have one size; a window shape without one, SESSION or
/// CUMULATE, is reached through its `window_end` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowBound {
    pub edge: WindowEdge,
    pub size: i64,
}

impl WindowBound {
    /// A `window_start` column of windows `size` long.
    pub fn start(size: i64) -> Self {
        Self {
            edge: WindowEdge::Start,
            size,
        }
    }

    /// A `window_end` column of windows `size` long.
    pub fn end(size: i64) -> Self {
        Self {
            edge: WindowEdge::End,
            size,
        }
    }

    /// A `window_time` column of windows `size` long.
    pub fn time(size: i64) -> Self {
        Self {
            edge: WindowEdge::Time,
            size,
        }
    }

    /// What to add to the column's value to get the window's end.
    pub fn shift(&self) -> i64 {
        match self.edge {
            WindowEdge::Start => self.size,
            WindowEdge::End => 0,
            WindowEdge::Time => WINDOW_TIME_BEFORE_END,
        }
    }

    /// The end of the window whose bound is `value`.
    pub fn end_of(&self, value: EventTime) -> EventTime {
        value.saturating_add(self.shift())
    }

    /// The column's value for the window ending at `end` (inverse of [`Self::end_of`]).
    pub fn value_of(&self, end: EventTime) -> EventTime {
        end.saturating_sub(self.shift())
    }

    /// The start of the window ending at `end`, for windows of one size (TUMBLE, HOP).
    /// CUMULATE's windows differ in size; the planner gives them no `window_start` bound, so
    /// their start travels as a plain column and this is never asked.
    pub fn start_of(&self, end: EventTime) -> EventTime {
        end.saturating_sub(self.size)
    }
}

/// The column of a batch holding each row's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowColumn {
    /// Index of the column in the operator's input.
    pub index: usize,
    pub bound: WindowBound,
}

impl WindowColumn {
    pub fn new(index: usize, bound: WindowBound) -> Self {
        Self { index, bound }
    }

    /// The end of each row's window. A NULL window is a bug upstream (the window table
    /// function never yields one): an internal error.
    pub fn ends(&self, batch: &RecordBatch) -> Result<Vec<EventTime>> {
        let values = self.values(batch)?;
        if values.null_count() > 0 {
            return Err(EngineError::Internal("window column holds NULL".into()));
        }
        Ok(values
            .values()
            .iter()
            .map(|&v| self.bound.end_of(v))
            .collect())
    }

    /// The end of each row's window, [`EventTime::MIN`] for a NULL window (an outer join's
    /// padding): such rows count as belonging to a window that has already ended.
    pub fn ends_or_min(&self, batch: &RecordBatch) -> Result<Vec<EventTime>> {
        let values = self.values(batch)?;
        Ok(values
            .iter()
            .map(|v| v.map_or(EventTime::MIN, |v| self.bound.end_of(v)))
            .collect())
    }

    fn values(
        &self,
        batch: &RecordBatch,
    ) -> Result<datafusion::arrow::array::TimestampNanosecondArray> {
        let column = batch.columns().get(self.index).ok_or_else(|| {
            EngineError::Internal(format!(
                "window column {} of a batch with {} columns",
                self.index,
                batch.num_columns()
            ))
        })?;
        timestamps_as_nanos(column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, TimestampMillisecondArray};
    use std::sync::Arc;

    #[test]
    fn ends_from_start_or_end_columns_in_any_unit() {
        let ms = |v: Vec<Option<i64>>| -> RecordBatch {
            RecordBatch::try_from_iter([(
                "w",
                Arc::new(TimestampMillisecondArray::from(v)) as ArrayRef,
            )])
            .unwrap()
        };
        let b = ms(vec![Some(10), Some(20)]);
        let start = WindowColumn::new(0, WindowBound::start(5_000_000));
        assert_eq!(start.ends(&b).unwrap(), vec![15_000_000, 25_000_000]);
        let end = WindowColumn::new(0, WindowBound::end(5_000_000));
        assert_eq!(end.ends(&b).unwrap(), vec![10_000_000, 20_000_000]);
        assert_eq!(start.bound.start_of(15_000_000), 10_000_000);
        assert_eq!(start.bound.value_of(15_000_000), 10_000_000);
        assert_eq!(end.bound.value_of(15_000_000), 15_000_000);
        // window_time: the end less one millisecond (the column is in milliseconds here).
        let time = WindowColumn::new(0, WindowBound::time(5_000_000));
        assert_eq!(time.ends(&b).unwrap(), vec![11_000_000, 21_000_000]);
        assert_eq!(time.bound.value_of(15_000_000), 14_000_000);

        let with_null = ms(vec![None, Some(1)]);
        assert!(end.ends(&with_null).is_err());
        assert_eq!(
            end.ends_or_min(&with_null).unwrap(),
            vec![EventTime::MIN, 1_000_000]
        );
        assert!(WindowColumn::new(3, WindowBound::end(1)).ends(&b).is_err());
    }
}
