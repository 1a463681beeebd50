//! Finding passwords in text: connection URLs (`postgresql://user:PASSWORD@host`, a
//! `?password=` parameter), key=value conninfo strings (`host=h password=PASSWORD`), and
//! `password = '...'` options, wherever they are written (an option's value, a whole
//! statement, an error message). Messages show them as `***`; the data directory keeps them
//! apart from job records and the catalog (`weir_planner`'s secrets store).

use std::ops::Range;

/// What a password is shown as.
pub const HIDDEN: &str = "***";

/// The byte ranges of the passwords in `text`, in order, not overlapping.
pub fn secret_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = url_passwords(text);
    spans.extend(password_values(text));
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for s in spans.into_iter().filter(|s| !s.is_empty()) {
        match merged.last_mut() {
            Some(last) if s.start < last.end => last.end = last.end.max(s.end),
            _ => merged.push(s),
        }
    }
    merged
}

/// `text` with every password replaced by [`HIDDEN`].
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in secret_spans(text) {
        out.push_str(&text[at..span.start]);
        out.push_str(HIDDEN);
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// `scheme://user:PASSWORD@host...`: the part between the first `:` and the last `@` of the
/// authority.
fn url_passwords(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let end = text[start..]
            .find(|c: char| matches!(c, '/' | '?' | '#' | '\'' | '"') || c.is_whitespace())
            .map_or(text.len(), |e| start + e);
        let authority = &text[start..end];
        if let Some(at) = authority.rfind('@') {
            if let Some(colon) = authority[..at].find(':') {
                spans.push(start + colon + 1..start + at);
            }
        }
        from = end.max(start);
    }
    spans
}

/// `password=VALUE` (conninfo, URL parameter) and `password = 'VALUE'` (an option), the key
/// in any case.
fn password_values(text: &str) -> Vec<Range<usize>> {
    const KEY: &str = "password";
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find(KEY) {
        let key = from + found;
        from = key + KEY.len();
        // A whole word: not `sasl_password_file` nor `mypassword`.
        let before_ok = key == 0 || !is_word(bytes[key - 1]);
        let mut i = key + KEY.len();
        if !before_ok || (i < bytes.len() && is_word(bytes[i])) {
            continue;
        }
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != b'=' {
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let (start, end) = if i < bytes.len() && bytes[i] == b'\'' {
            // Quoted: up to the closing quote (a doubled quote is one quote in SQL).
            let start = i + 1;
            let mut j = start;
            while j < bytes.len() {
                if bytes[j] == b'\'' {
                    if bytes.get(j + 1) == Some(&b'\'') {
                        j += 2;
                        continue;
                    }
                    break;
                }
                if bytes[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            (start, j.min(bytes.len()))
        } else {
            let end = text[i..]
                .find(|c: char| matches!(c, '&' | '\'' | '"' | ',' | ')') || c.is_whitespace())
                .map_or(text.len(), |e| i + e);
            (i, end)
        };
        if end > start {
            spans.push(start..end);
            from = end;
        }
    }
    spans
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_conninfo_and_options_are_hidden() {
        let cases = [
            (
                "postgresql://weir:s3cret@localhost:5432/db",
                "postgresql://weir:***@localhost:5432/db",
            ),
            ("postgresql://weir@localhost/db", "postgresql://weir@localhost/db"),
            (
                "postgres://u:p%40ss@h/db?sslmode=disable&password=two",
                "postgres://u:***@h/db?sslmode=disable&password=***",
            ),
            (
                "host=127.0.0.1 port=5432 user=weir password=s3cret dbname=x",
                "host=127.0.0.1 port=5432 user=weir password=*** dbname=x",
            ),
            ("host=h PASSWORD = 'a b' user=u", "host=h PASSWORD = '***' user=u"),
            (
                "CREATE SINK s WITH (connector = 'postgres', url = 'host=h password=pw', table = 't')",
                "CREATE SINK s WITH (connector = 'postgres', url = 'host=h password=***', table = 't')",
            ),
            (
                "WITH (url = 'postgresql://a:b@c/d', password = 'it''s')",
                "WITH (url = 'postgresql://a:***@c/d', password = '***')",
            ),
            ("sasl_password_file=/x mypassword=y", "sasl_password_file=/x mypassword=y"),
            ("no secrets here: ://, password", "no secrets here: ://, password"),
        ];
        for (text, want) in cases {
            assert_eq!(redact(text), want, "{text}");
        }
    }
}
