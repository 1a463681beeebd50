//! Splits a script into statements at `;`, outside quotes and comments, remembering where each
//! statement starts so errors can point at the script's own lines.

/// One statement of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementText {
    /// The statement without its terminating `;`.
    pub text: String,
    /// 1-based line of the statement's first character in the script.
    pub line: u64,
}

/// Whether `text` holds something besides whitespace and comments.
fn has_content(text: &str) -> bool {
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, r)| r);
        } else {
            return !rest.is_empty();
        }
    }
}

/// Splits `script` into statements. The second value is the unfinished tail (text after the
/// last `;`, when it holds anything): the REPL keeps reading; a script runs it as a statement.
pub fn split_statements(script: &str) -> (Vec<StatementText>, Option<StatementText>) {
    let mut out = Vec::new();
    let bytes = script.as_bytes();
    let mut start = 0usize;
    let mut line = 1u64;
    let mut start_line = 1u64;
    let mut i = 0usize;
    let push = |from: usize, to: usize, first_line: u64, out: &mut Vec<StatementText>| {
        let text = &script[from..to];
        if has_content(text) {
            // Report the line where the statement's first token is.
            let lead = &text[..text.len() - text.trim_start().len()];
            let first = first_line + lead.matches('\n').count() as u64;
            out.push(StatementText {
                text: text.trim().to_string(),
                line: first,
            });
        }
    };
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => line += 1,
            b'\'' | b'"' => {
                let q = bytes[i];
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    if bytes[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    if bytes[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            b';' => {
                push(start, i, start_line, &mut out);
                start = i + 1;
                start_line = line;
            }
            _ => {}
        }
        i += 1;
    }
    let mut tail = Vec::new();
    push(start, script.len(), start_line, &mut tail);
    (out, tail.pop())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_outside_quotes_and_comments() {
        let script = "SELECT 1;\n-- a comment; still a comment\nSELECT ';' AS x\n  FROM t; /* ; */\nSELECT 3";
        let (stmts, tail) = split_statements(script);
        assert_eq!(stmts.len(), 2);
        assert_eq!(
            stmts[0],
            StatementText {
                text: "SELECT 1".into(),
                line: 1
            }
        );
        assert!(stmts[1].text.ends_with("FROM t"));
        assert_eq!(
            stmts[1].line, 2,
            "the comment line starts the statement text"
        );
        // comments belong to the statement that follows them
        assert_eq!(tail.unwrap().text, "/* ; */\nSELECT 3");
    }

    #[test]
    fn comment_only_tail_is_not_a_statement() {
        let (stmts, tail) = split_statements("SELECT 1; -- done\n");
        assert_eq!(stmts.len(), 1);
        assert!(tail.is_none());
    }
}
