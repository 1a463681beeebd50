//! Parsing one statement, with the streaming syntax sqlparser does not know rewritten at the
//! token level first. Tokens keep their source positions through the rewrite, so syntax errors
//! still point at the user's text.
//!
//! Rewrites:
//! - `CREATE TABLE t (..., WATERMARK FOR col AS expr) WITH (...)`: the clause is taken out and
//!   returned beside the statement.
//! - Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), size))` becomes `TUMBLE(t, col, size)`
//!   (same for HOP, SESSION, CUMULATE).

use datafusion::sql::sqlparser::ast::{Expr, Ident, Statement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::error::{PlanError, Result};

/// Recursion limit of the parser: deeply nested input gets an error, not a stack overflow.
const RECURSION_LIMIT: usize = 200;

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkClause {
    pub column: Ident,
    pub expr: Expr,
}

/// A parsed statement and the streaming clauses taken out of it.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    pub statement: Statement,
    pub watermark: Option<WatermarkClause>,
    /// `CREATE SINK name WITH (...) AS query`: parsed as the `CREATE TABLE ... AS` it
    /// resembles, and flagged here.
    pub sink: bool,
    /// `CREATE MATERIALIZED VIEW name AS query`: parsed as `CREATE TABLE name AS query`.
    pub view: bool,
}

/// `CREATE MATERIALIZED VIEW` becomes `CREATE TABLE`; returns whether it did.
fn rewrite_create_view(tokens: &mut Vec<TokenWithSpan>) -> bool {
    let sig = significant(tokens);
    let is_view = sig.len() >= 3
        && is_word(&tokens[sig[0]].token, "CREATE")
        && is_word(&tokens[sig[1]].token, "MATERIALIZED")
        && is_word(&tokens[sig[2]].token, "VIEW");
    if is_view {
        tokens[sig[2]].token = Token::make_keyword("TABLE");
        tokens.remove(sig[1]);
    }
    is_view
}

/// `CREATE SINK` becomes `CREATE TABLE` (same token positions); returns whether it did.
fn rewrite_create_sink(tokens: &mut [TokenWithSpan]) -> bool {
    let sig = significant(tokens);
    let is_sink = sig.len() >= 2
        && is_word(&tokens[sig[0]].token, "CREATE")
        && is_word(&tokens[sig[1]].token, "SINK");
    if is_sink {
        tokens[sig[1]].token = Token::make_keyword("TABLE");
    }
    is_sink
}

const WINDOW_FUNCTIONS: &[&str] = &["TUMBLE", "HOP", "SESSION", "CUMULATE"];

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Turns a sqlparser error message "... at Line: L, Column: C" into a positioned error, with
/// the line counted from the start of the script.
fn syntax_error(message: &str, text: &str, first_line: u64) -> PlanError {
    let message = message
        .trim_start_matches("sql parser error: ")
        .trim_start_matches("sql tokenizer error: ");
    if let Some(at) = message.rfind(" at Line: ") {
        let pos = &message[at + " at Line: ".len()..];
        if let Some((l, c)) = pos.split_once(", Column: ") {
            if let (Ok(l), Ok(c)) = (l.trim().parse::<u64>(), c.trim().parse::<u64>()) {
                // Line 0 is sqlparser's position of the end of input: point after the last token.
                let (l, c) = if l == 0 { end_position(text) } else { (l, c) };
                return PlanError::Syntax {
                    line: first_line + l.saturating_sub(1),
                    column: c,
                    message: message[..at].to_string(),
                };
            }
        }
    }
    // Without a position the parser ran out of input: point after the last token.
    let (line, column) = if message.contains("EOF") {
        end_position(text)
    } else {
        (1, 1)
    };
    PlanError::Syntax {
        line: first_line + line - 1,
        column,
        message: message.to_string(),
    }
}

/// Line and column just after the last character of `text`.
fn end_position(text: &str) -> (u64, u64) {
    let text = text.trim_end();
    let line = text.lines().count().max(1) as u64;
    let column = text.lines().last().map_or(0, |l| l.chars().count()) as u64 + 1;
    (line, column)
}

fn parser_error(e: ParserError, text: &str, first_line: u64) -> PlanError {
    match e {
        ParserError::RecursionLimitExceeded => PlanError::Syntax {
            line: first_line,
            column: 1,
            message: "statement is nested too deeply".into(),
        },
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => {
            syntax_error(&m, text, first_line)
        }
    }
}

/// Positions of tokens that are not whitespace.
fn significant(tokens: &[TokenWithSpan]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
        .collect()
}

/// Index (into `sig`) of the token closing the parenthesis opened at `sig[open]`.
fn matching_paren(tokens: &[TokenWithSpan], sig: &[usize], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &i) in sig.iter().enumerate().skip(open) {
        match tokens[i].token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// Takes `WATERMARK FOR col AS expr` out of a CREATE TABLE column list.
fn take_watermark(
    tokens: &mut Vec<TokenWithSpan>,
    first_line: u64,
) -> Result<Option<WatermarkClause>> {
    let sig = significant(tokens);
    if !sig
        .first()
        .is_some_and(|&i| is_word(&tokens[i].token, "CREATE"))
    {
        return Ok(None);
    }
    let mut depth = 0usize;
    for k in 0..sig.len() {
        let t = &tokens[sig[k]].token;
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth != 1 || !is_word(t, "WATERMARK") {
            continue;
        }
        if !sig
            .get(k + 1)
            .is_some_and(|&i| is_word(&tokens[i].token, "FOR"))
        {
            continue;
        }
        let span = tokens[sig[k]].span;
        let column = match sig.get(k + 2).map(|&i| &tokens[i].token) {
            Some(Token::Word(w)) => Ident {
                value: w.value.clone(),
                quote_style: w.quote_style,
                span,
            },
            _ => {
                return Err(PlanError::Syntax {
                    line: first_line + span.start.line.saturating_sub(1),
                    column: span.start.column,
                    message: "expected a column name after WATERMARK FOR".into(),
                })
            }
        };
        if !sig
            .get(k + 3)
            .is_some_and(|&i| is_word(&tokens[i].token, "AS"))
        {
            return Err(PlanError::Syntax {
                line: first_line + span.start.line.saturating_sub(1),
                column: span.start.column,
                message: format!("expected AS after WATERMARK FOR {column}"),
            });
        }
        // The expression runs to the next comma at this depth or the closing parenthesis.
        let mut end = k + 4;
        let mut d = 0usize;
        while end < sig.len() {
            match tokens[sig[end]].token {
                Token::LParen => d += 1,
                Token::RParen if d == 0 => break,
                Token::RParen => d -= 1,
                Token::Comma if d == 0 => break,
                _ => {}
            }
            end += 1;
        }
        let expr_tokens: Vec<TokenWithSpan> =
            (k + 4..end).map(|j| tokens[sig[j]].clone()).collect();
        let expr = Parser::new(&GenericDialect {})
            .with_recursion_limit(RECURSION_LIMIT)
            .with_tokens_with_locations(expr_tokens)
            .parse_expr()
            .map_err(|e| parser_error(e, "", first_line))?;
        // Remove the clause and the comma before it (or after it, when it comes first).
        let (from, to) = if k > 0 && matches!(tokens[sig[k - 1]].token, Token::Comma) {
            (sig[k - 1], sig[end - 1])
        } else if matches!(tokens.get(sig[end]).map(|t| &t.token), Some(Token::Comma)) {
            (sig[k], sig[end])
        } else {
            (sig[k], sig[end - 1])
        };
        tokens.drain(from..=to);
        return Ok(Some(WatermarkClause { column, expr }));
    }
    Ok(None)
}

/// Rewrites Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), ...))` spelling into `TUMBLE(t, c, ...)`.
fn rewrite_flink_window_tvf(tokens: &mut Vec<TokenWithSpan>) {
    loop {
        let sig = significant(tokens);
        let found = (0..sig.len().saturating_sub(3)).find(|&k| {
            is_word(&tokens[sig[k]].token, "TABLE")
                && matches!(tokens[sig[k + 1]].token, Token::LParen)
                && WINDOW_FUNCTIONS
                    .iter()
                    .any(|f| is_word(&tokens[sig[k + 2]].token, f))
                && matches!(tokens[sig[k + 3]].token, Token::LParen)
        });
        let Some(k) = found else { return };
        let Some(close_outer) = matching_paren(tokens, &sig, k + 1) else {
            return;
        };
        let close_inner = matching_paren(tokens, &sig, k + 3).unwrap_or(close_outer);
        let mut remove: Vec<usize> = vec![sig[k], sig[k + 1], sig[close_outer]];
        // Inside the call: `TABLE t` -> `t`, `DESCRIPTOR(c)` -> `c`.
        let mut j = k + 4;
        while j < close_inner {
            let t = &tokens[sig[j]].token;
            if is_word(t, "TABLE") {
                remove.push(sig[j]);
            } else if is_word(t, "DESCRIPTOR") && matches!(tokens[sig[j + 1]].token, Token::LParen)
            {
                if let Some(close) = matching_paren(tokens, &sig, j + 1) {
                    remove.extend([sig[j], sig[j + 1], sig[close]]);
                }
            }
            j += 1;
        }
        remove.sort_unstable();
        for i in remove.into_iter().rev() {
            tokens.remove(i);
        }
    }
}

/// Parses one statement (`text` starts on script line `first_line`).
pub fn parse_statement(text: &str, first_line: u64) -> Result<ParsedStatement> {
    let dialect = GenericDialect {};
    let mut tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| PlanError::Syntax {
            line: first_line + e.location.line.saturating_sub(1),
            column: e.location.column,
            message: e.message,
        })?;
    let watermark = take_watermark(&mut tokens, first_line)?;
    let sink = rewrite_create_sink(&mut tokens);
    let view = rewrite_create_view(&mut tokens);
    rewrite_flink_window_tvf(&mut tokens);
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens);
    let statement = parser
        .parse_statement()
        .map_err(|e| parser_error(e, text, first_line))?;
    while parser.consume_token(&Token::SemiColon) {}
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(PlanError::Syntax {
            line: first_line + next.span.start.line.saturating_sub(1),
            column: next.span.start.column,
            message: format!("expected end of statement, found {}", next.token),
        });
    }
    Ok(ParsedStatement {
        statement,
        watermark,
        sink,
        view,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_watermark_clause_out_of_create_table() {
        let p = parse_statement(
            "CREATE TABLE bids (auction BIGINT, date_time TIMESTAMP,\n WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (connector = 'file')",
            1,
        )
        .unwrap();
        let w = p.watermark.unwrap();
        assert_eq!(w.column.value, "date_time");
        assert_eq!(w.expr.to_string(), "date_time - INTERVAL '4' SECOND");
        assert!(matches!(p.statement, Statement::CreateTable(_)));
    }

    #[test]
    fn watermark_clause_may_come_first() {
        let p = parse_statement(
            "CREATE TABLE t (WATERMARK FOR ts AS ts, ts TIMESTAMP) WITH (connector = 'file')",
            1,
        )
        .unwrap();
        assert!(p.watermark.is_some());
        let Statement::CreateTable(c) = p.statement else {
            panic!()
        };
        assert_eq!(c.columns.len(), 1);
    }

    #[test]
    fn flink_window_spelling_is_rewritten() {
        let p = parse_statement(
            "SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECONDS)) AS w",
            1,
        )
        .unwrap();
        assert_eq!(
            p.statement.to_string(),
            "SELECT * FROM TUMBLE(bids, date_time, INTERVAL '10' SECONDS) AS w"
        );
    }

    #[test]
    fn syntax_errors_carry_script_line_and_column() {
        let e = parse_statement("SELECT *\nFROM bids WHERE", 7).unwrap_err();
        match e {
            PlanError::Syntax { line, column, .. } => assert_eq!((line, column), (8, 16)),
            other => panic!("{other}"),
        }
        let e = parse_statement("SELEC 1", 1).unwrap_err();
        assert!(
            matches!(
                e,
                PlanError::Syntax {
                    line: 1,
                    column: 1,
                    ..
                }
            ),
            "{e}"
        );
    }
}
