//! SQL text handling before DataFusion sees it: splitting scripts into statements, token-level
//! rewrites for streaming syntax, and parsing with positions kept for error messages.

pub mod parse;
pub mod split;

pub use parse::{parse_statement, ParsedStatement, WatermarkClause};
pub use split::{split_statements, StatementText};
