//! Splitting a batch's rows by window: the one splitter every windowed operator uses.
//!
//! Rows usually come in runs of one window (the window assigner groups a batch's rows by
//! window), so a batch is cut into contiguous runs, each a zero-copy slice. A batch whose rows
//! interleave windows (more than [`MAX_SLICED_RUNS`] boundaries) is instead grouped by window
//! into one list of rows per window, in order of first appearance. Either way the rows of one
//! window keep their order in the batch.

use ahash::AHashMap;
use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::{take, take_record_batch};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::message::EventTime;

/// Past this many window boundaries in one batch, rows are grouped by window instead of cut
/// into contiguous slices (which would then be many and small).
pub const MAX_SLICED_RUNS: usize = 64;

/// Which rows of a batch a run holds.
#[derive(Debug, Clone, PartialEq)]
pub enum RunRows {
    /// Rows `offset..offset + len`.
    Range { offset: usize, len: usize },
    /// These rows, in increasing order.
    Rows(UInt32Array),
}

/// Rows of one batch that belong to one window.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The window's end.
    pub end: EventTime,
    pub rows: RunRows,
}

impl Run {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match &self.rows {
            RunRows::Range { len, .. } => *len,
            RunRows::Rows(rows) => rows.len(),
        }
    }

    /// Whether the run holds no row (never, for runs made by [`split_by_window`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The run's rows of `column` (an array of the batch the run was cut from): a slice for a
    /// range (sharing the batch's buffers), a copy otherwise. For immediate use.
    pub fn array(&self, column: &ArrayRef) -> Result<ArrayRef> {
        match &self.rows {
            RunRows::Range { offset, len } => Ok(column.slice(*offset, *len)),
            RunRows::Rows(rows) => Ok(take(column.as_ref(), rows, None)?),
        }
    }

    /// [`Self::array`] of each column.
    pub fn arrays(&self, columns: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        columns.iter().map(|c| self.array(c)).collect()
    }

    /// The run's rows of `batch`, as a batch with buffers of its own (the whole batch when
    /// the run covers it): for rows an operator holds, so that they keep no other rows alive.
    pub fn owned_batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let indices = match &self.rows {
            RunRows::Range { offset: 0, len } if *len == batch.num_rows() => {
                return Ok(batch.clone())
            }
            RunRows::Range { offset, len } => {
                UInt32Array::from_iter_values(*offset as u32..(*offset + *len) as u32)
            }
            RunRows::Rows(rows) => return Ok(take_record_batch(batch, rows)?),
        };
        Ok(take_record_batch(batch, &indices)?)
    }
}

/// Splits rows by the end of their window (`ends[row]`).
pub fn split_by_window(ends: &[EventTime]) -> Vec<Run> {
    let Some(&first) = ends.first() else {
        return Vec::new();
    };
    let boundaries = ends.windows(2).filter(|w| w[0] != w[1]).count();
    if boundaries == 0 {
        return vec![Run {
            end: first,
            rows: RunRows::Range {
                offset: 0,
                len: ends.len(),
            },
        }];
    }
    if boundaries < MAX_SLICED_RUNS {
        return contiguous_runs(ends);
    }
    grouped_runs(ends)
}

/// One run per stretch of equal ends.
fn contiguous_runs(ends: &[EventTime]) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut offset = 0;
    while offset < ends.len() {
        let end = ends[offset];
        let len = ends[offset..].iter().take_while(|&&e| e == end).count();
        runs.push(Run {
            end,
            rows: RunRows::Range { offset, len },
        });
        offset += len;
    }
    runs
}

/// One run per window, in order of first appearance.
fn grouped_runs(ends: &[EventTime]) -> Vec<Run> {
    let mut runs: Vec<(EventTime, Vec<u32>)> = Vec::new();
    let mut index: AHashMap<EventTime, usize> = AHashMap::new();
    for (row, &end) in ends.iter().enumerate() {
        let slot = *index.entry(end).or_insert_with(|| {
            runs.push((end, Vec::new()));
            runs.len() - 1
        });
        runs[slot].1.push(row as u32);
    }
    runs.into_iter()
        .map(|(end, rows)| Run {
            end,
            rows: RunRows::Rows(UInt32Array::from(rows)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;
    use std::sync::Arc;

    /// The rows of each window, whatever the algorithm: what every run holds, by end.
    fn rows_by_end(ends: &[EventTime]) -> std::collections::BTreeMap<EventTime, Vec<u32>> {
        let mut by_end = std::collections::BTreeMap::<EventTime, Vec<u32>>::new();
        for run in split_by_window(ends) {
            let rows: Vec<u32> = match run.rows {
                RunRows::Range { offset, len } => (offset as u32..(offset + len) as u32).collect(),
                RunRows::Rows(r) => r.values().to_vec(),
            };
            by_end.entry(run.end).or_default().extend(rows);
        }
        by_end
    }

    #[test]
    fn few_boundaries_give_contiguous_slices() {
        let runs = split_by_window(&[5, 5, 9, 5, 9, 12]);
        let ranges: Vec<(EventTime, usize, usize)> = runs
            .iter()
            .map(|r| match r.rows {
                RunRows::Range { offset, len } => (r.end, offset, len),
                RunRows::Rows(_) => panic!("expected slices"),
            })
            .collect();
        assert_eq!(
            ranges,
            vec![(5, 0, 2), (9, 2, 1), (5, 3, 1), (9, 4, 1), (12, 5, 1)]
        );
        assert_eq!(split_by_window(&[]), vec![]);
        assert_eq!(split_by_window(&[7, 7]).len(), 1);
    }

    #[test]
    fn interleaved_rows_are_grouped_by_window_in_first_appearance_order() {
        let ends: Vec<EventTime> = (0..200).map(|i| [30, 10, 20][i % 3]).collect();
        let runs = split_by_window(&ends);
        assert_eq!(runs.iter().map(|r| r.end).collect::<Vec<_>>(), [30, 10, 20]);
        assert!(runs.iter().all(|r| matches!(r.rows, RunRows::Rows(_))));
        // Both algorithms give every row to its window exactly once, in order.
        let by_end = rows_by_end(&ends);
        for (end, rows) in &by_end {
            assert!(rows.windows(2).all(|w| w[0] < w[1]));
            assert!(rows.iter().all(|&r| ends[r as usize] == *end));
        }
        assert_eq!(by_end.values().map(Vec::len).sum::<usize>(), ends.len());
    }

    #[test]
    fn runs_select_their_rows() {
        let values: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, 2, 3, 4]));
        let batch = RecordBatch::try_from_iter([("v", Arc::clone(&values))]).unwrap();
        let ints = |a: &ArrayRef| a.as_primitive::<Int64Type>().values().to_vec();
        let range = Run {
            end: 1,
            rows: RunRows::Range { offset: 1, len: 3 },
        };
        assert_eq!(
            ints(&range.arrays(&[Arc::clone(&values)]).unwrap()[0]),
            [1, 2, 3]
        );
        assert_eq!(
            ints(range.owned_batch(&batch).unwrap().column(0)),
            [1, 2, 3]
        );
        let rows = Run {
            end: 1,
            rows: RunRows::Rows(UInt32Array::from(vec![0, 4])),
        };
        assert_eq!(ints(&rows.arrays(&[values]).unwrap()[0]), [0, 4]);
        assert_eq!(ints(rows.owned_batch(&batch).unwrap().column(0)), [0, 4]);
    }
}
