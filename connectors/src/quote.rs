//! Quoting names and values into SQL text, by sqlparser's own printer: the one place weir
//! writes SQL that another parser (weir's, or a PostgreSQL server's) reads back.

use datafusion::sql::sqlparser::ast::{Ident, Value};

/// `"name"`: an identifier quoted for SQL text (a `"` inside is doubled).
pub fn quote_ident(name: &str) -> String {
    Ident::with_quote('"', name).to_string()
}

/// `'text'`: a string literal for SQL text (a `'` inside is doubled).
pub fn quote_literal(value: &str) -> String {
    Value::SingleQuotedString(value.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_inside_are_doubled() {
        assert_eq!(quote_ident("Top \"N\""), "\"Top \"\"N\"\"\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "'a\\b'");
    }
}
