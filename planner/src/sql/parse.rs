//! Parsing one statement, with the streaming syntax sqlparser does not know rewritten at the
//! token level first. Tokens keep their source positions through the rewrite, so syntax errors
//! still point at the user's text.
//!
//! Rewrites:
//! - `CREATE TABLE t (..., WATERMARK FOR col AS expr) WITH (...)`: the clause is taken out and
//!   returned beside the statement.
//! - Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), size))` becomes `TUMBLE(t, col, size)`
//!   (same for HOP, SESSION, CUMULATE); SESSION's `TABLE t PARTITION BY k1, k2` (or
//!   `PARTITION BY (k1, k2)`) becomes `t` with `PARTITION => k1, PARTITION => k2` at the end
//!   of the call.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::statement::{is_word, Failure, WeirParser, WeirStatement};
use crate::error::{PlanError, Result};

/// Recursion limit of the parser: deeply nested input gets an error, not a stack overflow.
const RECURSION_LIMIT: usize = 200;

const WINDOW_FUNCTIONS: &[&str] = &["TUMBLE", "HOP", "SESSION", "CUMULATE"];

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

/// Moves SESSION's `PARTITION BY k1, k2` (after its table) to `PARTITION => k1, PARTITION =>
/// k2` arguments at the end of the call. Runs before `DESCRIPTOR(...)` is unwrapped: the keys
/// end where `DESCRIPTOR` or a named argument (`TIMECOL =>`) begins.
fn rewrite_session_partition(tokens: &mut Vec<TokenWithSpan>) {
    loop {
        let sig = significant(tokens);
        let found = (0..sig.len().saturating_sub(1)).find_map(|k| {
            if !(is_word(&tokens[sig[k]].token, "SESSION")
                && matches!(tokens[sig[k + 1]].token, Token::LParen))
            {
                return None;
            }
            let close = matching_paren(tokens, &sig, k + 1)?;
            let mut depth = 0usize;
            (k + 2..close).find_map(|p| {
                match tokens[sig[p]].token {
                    Token::LParen => depth += 1,
                    Token::RParen => depth = depth.saturating_sub(1),
                    _ => {}
                }
                (depth == 0
                    && is_word(&tokens[sig[p]].token, "PARTITION")
                    && is_word(&tokens[sig[p + 1]].token, "BY"))
                .then_some((p, close))
            })
        });
        let Some((p, close)) = found else { return };
        let (groups, last) = partition_keys(tokens, &sig, p + 2, close);
        let mut added = Vec::new();
        for group in &groups {
            let span = tokens[sig[group.start]].span;
            for t in [
                Token::Comma,
                Token::make_word("PARTITION", None),
                Token::RArrow,
            ] {
                added.push(TokenWithSpan::new(t, span));
            }
            added.extend(group.clone().map(|g| tokens[sig[g]].clone()));
        }
        let at = sig[close];
        tokens.splice(at..at, added);
        tokens.drain(sig[p]..=sig[last]);
    }
}

/// The keys after `PARTITION BY` (from `sig[from]`, inside a call closing at `sig[close]`):
/// each key's tokens (as `sig` positions), and the last position they take (the comma after
/// them separates the table's argument from the next and stays).
fn partition_keys(
    tokens: &[TokenWithSpan],
    sig: &[usize],
    from: usize,
    close: usize,
) -> (Vec<std::ops::Range<usize>>, usize) {
    let comma = |j: usize| j < close && matches!(tokens[sig[j]].token, Token::Comma);
    let split = |range: std::ops::Range<usize>| -> Vec<std::ops::Range<usize>> {
        let mut groups = Vec::new();
        let mut start = range.start;
        for j in range.clone() {
            if comma(j) {
                groups.push(start..j);
                start = j + 1;
            }
        }
        groups.push(start..range.end);
        groups.retain(|g| !g.is_empty());
        groups
    };
    if from < close && matches!(tokens[sig[from]].token, Token::LParen) {
        let end = matching_paren(tokens, sig, from).unwrap_or(close);
        return (split(from + 1..end), end.min(close - 1));
    }
    let mut j = from;
    loop {
        while j < close && !comma(j) {
            j += 1;
        }
        if j >= close {
            return (split(from..close), close - 1);
        }
        let next = &tokens[sig[j + 1]].token;
        let named = j + 2 < close && matches!(tokens[sig[j + 2]].token, Token::RArrow);
        if is_word(next, "DESCRIPTOR") || named {
            return (split(from..j), j - 1);
        }
        j += 1;
    }
}

/// Parses one statement (`text` starts on script line `first_line`).
pub fn parse_statement(text: &str, first_line: u64) -> Result<WeirStatement> {
    let dialect = GenericDialect {};
    let mut tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| PlanError::Syntax {
            line: first_line + e.location.line.saturating_sub(1),
            column: e.location.column,
            message: e.message,
        })?;
    rewrite_session_partition(&mut tokens);
    rewrite_flink_window_tvf(&mut tokens);
    let parser = Parser::new(&dialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens);
    let mut statement = WeirParser::new(parser).parse().map_err(|e| match e {
        Failure::Syntax(e) => parser_error(e, text, first_line),
        Failure::Plan(e) => e,
    })?;
    super::depth::check_depth(&mut statement, first_line)?;
    Ok(statement)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
