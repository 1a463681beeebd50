//! Where in the statement an error is, shown as psql shows it: the statement's line and a
//! caret under the position.
//!
//! ```text
//! error: syntax error at line 1, column 10: Expected: end of statement, found: FORM
//! LINE 1: SELECT * FORM t
//!                  ^
//! ```

use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use weir_planner::sql::StatementText;
use weir_planner::PlanError;

/// The line of `stmt` an error points at, with a caret under the position: for syntax
/// errors their position, for an unknown table or column the first place the statement
/// names it. `None` when the error has no place in the statement.
pub fn error_context(e: &anyhow::Error, stmt: &StatementText) -> Option<String> {
    let plan = e.chain().find_map(|c| c.downcast_ref::<PlanError>())?;
    let (line, column) = match plan {
        PlanError::Syntax { line, column, .. } => {
            let line = line.checked_sub(stmt.line)? as usize;
            (line, (*column as usize).saturating_sub(1))
        }
        PlanError::UnknownTable { name, .. } => find_identifier(&stmt.text, name)?,
        PlanError::DataFusion(df) => match df.find_root() {
            DataFusionError::SchemaError(inner, _) => match inner.as_ref() {
                SchemaError::FieldNotFound { field, .. } => {
                    find_identifier(&stmt.text, &field.name)?
                }
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    let text = stmt.text.lines().nth(line)?;
    let prefix = format!("LINE {}: ", stmt.line + line as u64);
    // The caret goes under the character: count characters, and keep tabs as tabs so it
    // lines up however the terminal shows them.
    let pad: String = text
        .chars()
        .take(column)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    Some(format!(
        "{prefix}{text}\n{}{pad}^",
        " ".repeat(prefix.chars().count())
    ))
}

/// The line (0-based) and character column (0-based) of the first identifier in `text`
/// equal to `name` (case-insensitive unless quoted), outside literals and comments. A
/// dotted `name` matches its last part.
fn find_identifier(text: &str, name: &str) -> Option<(usize, usize)> {
    let want = name.rsplit('.').next().unwrap_or(name);
    let chars: Vec<char> = text.chars().collect();
    let (mut line, mut col) = (0usize, 0usize);
    let mut i = 0;
    // Advances over chars[from..to], keeping the line and column.
    let step = |from: usize, to: usize, line: &mut usize, col: &mut usize| {
        for &c in &chars[from..to.min(chars.len())] {
            if c == '\n' {
                *line += 1;
                *col = 0;
            } else {
                *col += 1;
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let end = if c == '\'' {
            // A literal; '' inside is a quote.
            let mut j = i + 1;
            while j < chars.len() {
                if chars[j] == '\'' {
                    if chars.get(j + 1) == Some(&'\'') {
                        j += 2;
                        continue;
                    }
                    break;
                }
                j += 1;
            }
            j + 1
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p)
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            j + 2
        } else if c == '"' {
            let close = chars[i + 1..]
                .iter()
                .position(|&c| c == '"')
                .map_or(chars.len(), |p| i + 1 + p);
            let ident: String = chars[i + 1..close].iter().collect();
            if ident == want {
                return Some((line, col));
            }
            close + 1
        } else if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            let ident: String = chars[i..j].iter().collect();
            if ident.eq_ignore_ascii_case(want) {
                return Some((line, col));
            }
            j
        } else {
            i + 1
        };
        step(i, end, &mut line, &mut col);
        i = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(text: &str, line: u64) -> StatementText {
        StatementText {
            text: text.into(),
            line,
        }
    }

    #[test]
    fn caret_under_a_syntax_error() {
        let e = anyhow::Error::new(PlanError::Syntax {
            line: 4,
            column: 10,
            message: "Expected: end of statement, found: FORM".into(),
        });
        let s = stmt("SELECT a\nFROM t WHER a > 1", 3);
        assert_eq!(
            error_context(&e, &s).unwrap(),
            "LINE 4: FROM t WHER a > 1\n                 ^"
        );
    }

    #[test]
    fn caret_under_an_unknown_table_outside_literals_and_comments() {
        let e = anyhow::Error::new(PlanError::unknown_table("bids"));
        let s = stmt("-- bids\nSELECT 'bids' FROM\n  bids", 1);
        assert_eq!(
            error_context(&e, &s).unwrap(),
            "LINE 3:   bids\n          ^"
        );
    }

    #[test]
    fn identifiers_match_whole_words_and_quoted_names_exactly() {
        assert_eq!(
            find_identifier("SELECT bidder FROM bid", "bid"),
            Some((0, 19))
        );
        assert_eq!(
            find_identifier("SELECT \"Bid\", bid FROM x", "bid"),
            Some((0, 14))
        );
        assert_eq!(
            find_identifier("SELECT \"Bid\" FROM x", "Bid"),
            Some((0, 7))
        );
        assert_eq!(
            find_identifier("SELECT t.price FROM t", "t.price"),
            Some((0, 9))
        );
        assert_eq!(find_identifier("SELECT 'it''s x' FROM y", "x"), None);
    }

    #[test]
    fn errors_without_a_place_have_no_context() {
        let e = anyhow::Error::new(PlanError::Invalid("no".into()));
        assert!(error_context(&e, &stmt("SELECT 1", 1)).is_none());
    }
}
