//! weir's planner: SQL text -> statements -> catalog actions and streaming job graphs.
//!
//! SQL is parsed with sqlparser (after a few token-level rewrites for streaming syntax:
//! `WATERMARK FOR`, Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), ...))`), window table
//! functions are replaced by synthetic tables, DataFusion's SQL planner and optimizer produce a
//! logical plan, and [`stream_plan`] turns that plan into a dataflow of weir operators.

pub mod catalog;
pub mod context;
pub mod error;
pub mod jobs;
pub mod secrets;
pub mod session;
pub mod sql;
pub mod stream_plan;
pub mod window_tvf;

pub use catalog::{Catalog, TableDef};
pub use error::{PlanError, Result};
pub use session::{
    JobObserver, QueryRun, Relation, RelationKind, Session, SessionConfig, StatementResult,
    Vocabulary,
};

/// Text forms of values (kept in the connectors, which the file sink shares).
pub use weir_connectors::display;
