//! The layer every windowed operator stands on (WindowAggregate, WindowJoin, EmitOrder).
//!
//! - [`WindowBound`] / [`WindowColumn`]: which column holds each row's window and how to
//!   reach the window's end; the planner traces a [`WindowBound`] for every column.
//! - [`split_by_window`] ([`Run`]): a batch's rows split by window.
//! - [`KeyedRows`]: held rows with their routing keys in front, re-routable after a rescale.
//! - [`OpenWindows`]: the open windows of an instance, by end: late rows, the memory budget,
//!   spilling to the task's store ([`WindowStore`]), firing in order of end, the snapshot at a
//!   barrier and the restore (at another parallelism through the exchange's own routing).
//!
//! An operator brings what a window holds (a [`WindowContents`]: accumulators, buffered rows)
//! and what firing a window means. A window is known by its end, so a new window shape only
//! has to say which windows a row belongs to: CUMULATE's windows are a row's windows in its
//! period, each with its own end; a window Top-N keeps [`BufferedRows`] and ranks them when the
//! window fires; SESSION windows would re-key their state as sessions merge ([`OpenWindows::take`]
//! then [`OpenWindows::update`]) and, with no size, are reached through `window_end`.

mod column;
mod key_pairs;
mod keyed_rows;
mod open_windows;
mod runs;
mod store;

pub use column::{WindowBound, WindowColumn, WindowEdge};
pub(crate) use key_pairs::{equal_key_pairs, for_each_key_pair, keys_valid};
pub use keyed_rows::KeyedRows;
pub use open_windows::{BufferedRows, LaneState, OpenWindows, Taken, WindowContents};
pub use runs::{split_by_window, Run, RunRows, MAX_SLICED_RUNS};
pub use store::{buckets_for, hash_buckets, PartRoute, WindowStore, MAX_BUCKETS};
