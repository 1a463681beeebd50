//! Parameters of the extended protocol (`$1`, `$2`, ...): counted at Parse, and bound by
//! writing each value into the statement as a SQL literal of its type.

use chrono::{NaiveDate, NaiveDateTime};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use pgwire::api::portal::Portal;
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use rust_decimal::Decimal;

/// `$n` placeholders of a statement: (byte range in the text, n).
fn placeholders(sql: &str) -> Vec<(std::ops::Range<usize>, usize)> {
    let dialect = PostgreSqlDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return Vec::new();
    };
    // Line / column (1-based, in characters) to byte offsets.
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> Option<usize> {
        let start = *line_starts.get((line as usize).checked_sub(1)?)?;
        let rest = &sql[start..];
        let col = (column as usize).checked_sub(1)?;
        Some(start + rest.char_indices().nth(col).map_or(rest.len(), |(i, _)| i))
    };
    tokens
        .iter()
        .filter_map(|t| match &t.token {
            Token::Placeholder(p) => {
                let n: usize = p.strip_prefix('$')?.parse().ok()?;
                let from = offset(t.span.start.line, t.span.start.column)?;
                Some((from..from + p.len(), n))
            }
            _ => None,
        })
        .collect()
}

/// How many parameters the statement takes (the highest `$n`).
pub fn count(sql: &str) -> usize {
    placeholders(sql).iter().map(|(_, n)| *n).max().unwrap_or(0)
}

/// The statement with every `$n` replaced by `values[n - 1]`.
pub fn substitute(sql: &str, values: &[String]) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (range, n) in placeholders(sql) {
        out.push_str(&sql[at..range.start]);
        match values.get(n - 1) {
            Some(v) => out.push_str(v),
            None => out.push_str(&sql[range.clone()]),
        }
        at = range.end;
    }
    out.push_str(&sql[at..]);
    out
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The bound parameters of a portal as SQL literals, read by the types the client declared
/// (or, for undeclared ones, as text).
pub fn literals<S: Clone>(portal: &Portal<S>, types: &[Type]) -> PgWireResult<Vec<String>> {
    (0..portal.parameter_len())
        .map(|i| {
            let ty = types.get(i).cloned().unwrap_or(Type::UNKNOWN);
            let lit = match ty {
                Type::BOOL => portal.parameter::<bool>(i, &ty)?.map(|b| {
                    if b {
                        "TRUE".into()
                    } else {
                        "FALSE".into()
                    }
                }),
                Type::INT2 => portal.parameter::<i16>(i, &ty)?.map(|v| v.to_string()),
                Type::INT4 => portal.parameter::<i32>(i, &ty)?.map(|v| v.to_string()),
                Type::INT8 => portal.parameter::<i64>(i, &ty)?.map(|v| v.to_string()),
                Type::FLOAT4 => portal
                    .parameter::<f32>(i, &ty)?
                    .map(|v| float_literal(f64::from(v))),
                Type::FLOAT8 => portal.parameter::<f64>(i, &ty)?.map(float_literal),
                Type::NUMERIC => portal.parameter::<Decimal>(i, &ty)?.map(|v| v.to_string()),
                Type::TIMESTAMP => portal
                    .parameter::<NaiveDateTime>(i, &ty)?
                    .map(|v| format!("TIMESTAMP '{}'", v.format("%Y-%m-%d %H:%M:%S%.f"))),
                Type::DATE => portal
                    .parameter::<NaiveDate>(i, &ty)?
                    .map(|v| format!("DATE '{v}'")),
                _ => {
                    // Text, varchar, unknown: the value as a string literal (DataFusion
                    // coerces it where a number or timestamp is expected).
                    let raw = portal.parameters.get(i).cloned().flatten();
                    raw.map(|b| quote(&String::from_utf8_lossy(&b)))
                }
            };
            Ok(lit.unwrap_or_else(|| "NULL".into()))
        })
        .collect()
}

fn float_literal(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else {
        format!("CAST('{v}' AS DOUBLE)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_outside_strings_and_comments_are_replaced() {
        let sql = "SELECT '$1', \"$2\" -- $1\n FROM t WHERE a = $1 AND b = $2 AND é = $1";
        assert_eq!(count(sql), 2);
        let out = substitute(sql, &["10".into(), "'x'".into()]);
        assert_eq!(
            out,
            "SELECT '$1', \"$2\" -- $1\n FROM t WHERE a = 10 AND b = 'x' AND é = 10"
        );
    }

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(quote("it's"), "'it''s'");
    }
}
