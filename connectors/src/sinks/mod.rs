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
