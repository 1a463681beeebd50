//! Operators, one per file. Each file's doc says what the operator takes, emits and keeps, and
//! what it does on watermark, barrier and end. The windowed ones (aggregate, window and interval join,
//! Top-N, session, emit order) stand on one layer, [`windowed`]. Operators over updating
//! streams ([`crate::changelog`]) read and write change kinds: [`group_aggregate`],
//! [`stream_join`], [`top_n`].

pub mod calc;
pub mod changelog_buffer;
pub mod emit_order;
pub mod extreme_filter;
pub mod group_aggregate;
pub mod interval_join;
pub mod limit;
pub mod local_aggregate;
pub mod local_group_aggregate;
pub mod pane_windows;
pub mod session_aggregate;
pub mod session_window;
pub mod sort;
pub mod stream_join;
pub mod top_n;
pub mod window_aggregate;
pub mod window_assign;
pub mod window_join;
pub mod window_top_n;
pub mod windowed;

#[cfg(test)]
pub(crate) mod harness;
#[cfg(test)]
mod tests;

pub use calc::CalcOperator;
pub use changelog_buffer::ChangelogBufferSpec;
pub use emit_order::EmitOrderSpec;
pub use extreme_filter::{Extreme, ExtremeFilterSpec};
pub use group_aggregate::{GroupAggregateSpec, UpdatingAggKind, UpdatingAggregate};
pub use interval_join::{IntervalJoinSpec, IntervalSide, Until};
pub use limit::LimitSpec;
pub use local_aggregate::LocalAggregateSpec;
pub use local_group_aggregate::LocalGroupAggregateSpec;
pub use pane_windows::PaneWindowsSpec;
pub use session_aggregate::SessionAggregateSpec;
pub use session_window::SessionWindowSpec;
pub use sort::SortSpec;
pub use stream_join::{StreamJoinSide, StreamJoinSpec};
pub use top_n::TopNSpec;
pub use window_aggregate::{
    AggregateInput, GroupColumn, WindowAggregateOperator, WindowAggregateSpec,
};
pub use window_assign::WindowAssignSpec;
pub use window_join::{JoinKind, JoinSide, WindowJoinSpec};
pub use window_top_n::WindowTopNSpec;
pub use windowed::{WindowBound, WindowColumn, WindowEdge};
