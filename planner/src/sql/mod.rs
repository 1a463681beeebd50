//! SQL text before planning: splitting scripts into statements and parsing each into a
//! [`WeirStatement`] with positions kept for error messages.

mod depth;
pub mod parse;
pub mod split;
pub mod statement;

pub use parse::parse_statement;
pub use split::{split_statements, StatementText};
pub use statement::{
    normalize, object_name, quote_ident, quote_literal, CreateJob, CreateTable, JobKind, JobTarget,
    ShowTarget, Transaction, WatermarkClause, WeirStatement,
};
