//! Columns a source leaves out because no query of the job reads them
//! ([`weir_engine::SourceFactory::without_columns`]): what every source that can skip them
//! shares (which it may leave out, and how EXPLAIN says so).

use datafusion::arrow::datatypes::Schema;

/// Of the columns the planner found unread, those a source may leave out: nullable ones (it
/// produces nulls there, so the schema and column positions do not change).
pub fn nullable_unread(schema: &Schema, unread: &[usize]) -> Vec<usize> {
    unread
        .iter()
        .copied()
        .filter(|&i| i < schema.fields().len() && schema.field(i).is_nullable())
        .collect()
}

/// EXPLAIN's note on the columns left out, empty when there are none.
pub fn describe_unread(schema: &Schema, unread: &[usize]) -> String {
    if unread.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = unread
        .iter()
        .map(|&i| schema.field(i).name().as_str())
        .collect();
    format!(" (not producing {}: no query reads them)", names.join(", "))
}
