//! Tab completion: what may come at the cursor, from the statement typed so far and the
//! session's names ([`Vocabulary`]). Pure functions over text, so they are tested without a
//! terminal; [`crate::helper`] hands them to rustyline.

use weir_planner::{RelationKind, Vocabulary};

/// Keywords completed anywhere a keyword may come (SQL's and weir's).
const KEYWORDS: &[&str] = &[
    "ALL",
    "AND",
    "AS",
    "ASC",
    "BETWEEN",
    "BIGINT",
    "BOOLEAN",
    "BY",
    "CANCEL",
    "CASE",
    "CAST",
    "CREATE",
    "CROSS",
    "CUMULATE",
    "DESC",
    "DESCRIBE",
    "DISTINCT",
    "DOUBLE",
    "DROP",
    "ELSE",
    "END",
    "EXISTS",
    "EXPLAIN",
    "ANALYZE",
    "FALSE",
    "FILTER",
    "FOR",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "HOP",
    "IF",
    "IN",
    "INNER",
    "INSERT",
    "INTERVAL",
    "INTO",
    "IS",
    "JOB",
    "JOBS",
    "JOIN",
    "LEFT",
    "LIKE",
    "LIMIT",
    "MATERIALIZED",
    "NOT",
    "NULL",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PROCTIME",
    "RESET",
    "RIGHT",
    "ROW_NUMBER",
    "SELECT",
    "SESSION",
    "SET",
    "SHOW",
    "SINK",
    "SINKS",
    "TABLE",
    "TABLES",
    "THEN",
    "TIMESTAMP",
    "TRUE",
    "TUMBLE",
    "UNION",
    "VARCHAR",
    "VIEW",
    "WATERMARK",
    "WHEN",
    "WHERE",
    "WITH",
];

/// Words that start a statement.
const STATEMENT_STARTS: &[&str] = &[
    "CANCEL JOB",
    "CREATE MATERIALIZED VIEW",
    "CREATE SINK",
    "CREATE TABLE",
    "CREATE VIEW",
    "DESCRIBE",
    "DROP MATERIALIZED VIEW",
    "DROP SINK",
    "DROP TABLE",
    "DROP VIEW",
    "EXPLAIN",
    "INSERT INTO",
    "RESET",
    "SELECT",
    "SET",
    "SHOW",
];

/// The REPL's backslash commands, with what they take and do (`\?` prints these).
pub const META_COMMANDS: &[(&str, &str, &str)] = &[
    ("\\d", "[NAME]", "list tables and views, or describe one"),
    ("\\dt", "", "list tables"),
    ("\\dm", "", "list materialized views"),
    ("\\dv", "", "list views"),
    (
        "\\jobs",
        "",
        "running and recorded jobs with rates and watermarks",
    ),
    ("\\timing", "[on|off]", "print how long each statement took"),
    ("\\format", "table|csv|json", "how results are printed"),
    ("\\x", "[on|off]", "expanded rows: one line per column"),
    ("\\null", "TEXT", "how NULL is shown in tables"),
    ("\\i", "FILE", "run the statements of a file"),
    (
        "\\o",
        "[FILE]",
        "send results to a file (no FILE: back to the screen)",
    ),
    ("\\e", "", "edit the last statement in $EDITOR, then run it"),
    ("\\?", "", "this help"),
    ("\\q", "", "quit"),
];

/// One completion: the text that replaces the word at the cursor, and how it is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub display: String,
    pub replacement: String,
}

/// What the word at the cursor is, judged from the text before it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// The first word of a statement.
    StatementStart,
    /// A table, view or materialized view (after FROM, JOIN, DESCRIBE, `TABLE` in a window
    /// function, INSERT INTO a table).
    Relation,
    /// A relation of one kind, or a job (DROP ..., CANCEL JOB).
    Named(NameKind),
    /// A setting (after SET, SHOW, RESET).
    Setting,
    /// A key inside `WITH (...)`.
    OptionKey(Target),
    /// The value of `connector = '...'`.
    Connector(Target),
    /// A column of `qualifier` (a relation or an alias) after `qualifier.`.
    Qualified(String),
    /// An expression: columns of the relations the statement reads, functions, keywords.
    Expression,
    /// Inside a string literal that is no connector name: nothing to complete.
    Nothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameKind {
    Table,
    View,
    MaterializedView,
    Job,
}

/// What a WITH clause configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Table,
    Sink,
    MaterializedView,
}

/// A token of the text before the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    /// A complete string literal's contents.
    Str(String),
    Punct(char),
}

/// Splits SQL into words, string literals and punctuation; comments and `"` quotes are
/// dropped (a quoted identifier is a word). Returns the tokens and, when the text ends
/// inside a string literal, that literal's text so far.
fn tokenize(text: &str) -> (Vec<Token>, Option<String>) {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return (tokens, Some(s)),
                    Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                        s.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&ch) => {
                        s.push(ch);
                        i += 1;
                    }
                }
            }
            tokens.push(Token::Str(s));
        } else if c == '"' {
            let mut s = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            tokens.push(Token::Word(s));
        } else if is_word_char(c) {
            let start = i;
            while i < chars.len() && is_word_char(chars[i]) {
                i += 1;
            }
            tokens.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    (tokens, None)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl Token {
    fn is_keyword(&self, k: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(k))
    }
}

/// The statement the cursor is in: the text after the last `;` outside literals and
/// comments.
fn current_statement(text: &str) -> &str {
    let mut start = 0;
    let mut in_str = false;
    let mut in_line_comment = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_line_comment {
            in_line_comment = b != b'\n';
        } else if in_str {
            in_str = b != b'\'';
        } else if b == b'\'' {
            in_str = true;
        } else if b == b'-' && bytes.get(i + 1) == Some(&b'-') {
            in_line_comment = true;
        } else if b == b';' {
            start = i + 1;
        }
        i += 1;
    }
    &text[start..]
}

/// The whole statement the cursor is in, also what follows the cursor up to its `;`.
fn current_statement_at(line: &str, pos: usize) -> &str {
    let start = pos - current_statement(&line[..pos]).len();
    let rest = &line[start..];
    let end = rest.find(';').unwrap_or(rest.len());
    &rest[..end]
}

/// Where the word at `pos` starts (identifier characters back from the cursor).
fn word_start(line: &str, pos: usize) -> usize {
    line[..pos]
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word_char(*c))
        .last()
        .map_or(pos, |(i, _)| i)
}

/// Completions for the word at `pos` of `line` (everything typed so far, several lines of a
/// statement included): where the replaced word starts, and the candidates.
pub fn complete(line: &str, pos: usize, vocab: &Vocabulary) -> (usize, Vec<Candidate>) {
    let pos = pos.min(line.len());
    let before = current_statement(&line[..pos]);
    if let Some(command) = before.trim_start().strip_prefix('\\') {
        return complete_meta(line, pos, command, vocab);
    }
    let start = word_start(line, pos);
    let prefix = &line[start..pos];
    let head = &before[..before.len() - prefix.len()];
    let slot = slot_of(head, line[..start].ends_with('.'));
    let lower = !prefix.is_empty() && prefix.chars().all(|c| !c.is_uppercase());
    let mut words: Vec<String> = match &slot {
        Slot::Nothing => Vec::new(),
        Slot::StatementStart => cased(STATEMENT_STARTS, lower),
        Slot::Relation => vocab.relations.iter().map(|r| r.name.clone()).collect(),
        Slot::Named(kind) => named(vocab, *kind),
        Slot::Setting => {
            let mut s: Vec<String> = vocab.settings.iter().map(|s| s.to_string()).collect();
            if head_first_word(head).is_some_and(|w| w.eq_ignore_ascii_case("show")) {
                s.extend(cased(&["ALL", "JOBS", "TABLES"], lower));
            }
            s
        }
        Slot::OptionKey(target) => option_keys(head, *target),
        Slot::Connector(target) => {
            let list = match target {
                Target::Table => weir_connectors::SOURCE_CONNECTORS,
                _ => weir_connectors::SINK_CONNECTORS,
            };
            list.iter().map(|s| s.to_string()).collect()
        }
        Slot::Qualified(q) => {
            // The alias may be declared after the cursor (`SELECT b.| FROM bids b`).
            let (tokens, _) = tokenize(current_statement_at(line, pos));
            let aliases = relations_read(&tokens);
            let relation = aliases
                .iter()
                .find(|(_, alias)| alias.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(q)))
                .map(|(r, _)| r.as_str())
                .unwrap_or(q);
            vocab
                .relation(relation)
                .map(|r| r.columns.clone())
                .unwrap_or_default()
        }
        Slot::Expression => {
            // Columns of what the statement reads first, then relation and function names,
            // then keywords: what a person most likely means comes at the top of the list.
            let (tokens, _) = tokenize(current_statement_at(line, pos));
            let read: Vec<String> = relations_read(&tokens)
                .into_iter()
                .map(|(r, _)| r)
                .collect();
            let mut columns = Vec::new();
            for r in &vocab.relations {
                if read.is_empty() || read.iter().any(|n| n.eq_ignore_ascii_case(&r.name)) {
                    columns.extend(r.columns.iter().cloned());
                }
            }
            let mut names = Vec::new();
            if !prefix.is_empty() {
                names.extend(vocab.functions.iter().cloned());
                names.extend(vocab.relations.iter().map(|r| r.name.clone()));
            }
            let groups = [columns, names, cased(KEYWORDS, lower)];
            let mut seen = std::collections::HashSet::new();
            let mut ranked = Vec::new();
            for mut group in groups {
                group.retain(|w| starts_with_ignore_case(w, prefix));
                group.sort();
                ranked.extend(group.into_iter().filter(|w| seen.insert(w.clone())));
            }
            ranked
        }
    };
    if !matches!(slot, Slot::Expression) {
        words.retain(|w| starts_with_ignore_case(w, prefix));
        words.sort();
        words.dedup();
    }
    let candidates = words
        .into_iter()
        .map(|w| {
            let replacement = match slot {
                // A keyword completes with a space; a name may be followed by `.`, `,`, `(`.
                Slot::StatementStart => format!("{w} "),
                _ => w.clone(),
            };
            Candidate {
                display: w,
                replacement,
            }
        })
        .collect();
    (start, candidates)
}

fn starts_with_ignore_case(word: &str, prefix: &str) -> bool {
    word.len() >= prefix.len()
        && word.is_char_boundary(prefix.len())
        && word[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn cased(words: &[&str], lower: bool) -> Vec<String> {
    words
        .iter()
        .map(|w| {
            if lower {
                w.to_lowercase()
            } else {
                w.to_string()
            }
        })
        .collect()
}

fn named(vocab: &Vocabulary, kind: NameKind) -> Vec<String> {
    let relation_kind = match kind {
        NameKind::Job => return vocab.jobs.clone(),
        NameKind::Table => RelationKind::Table,
        NameKind::View => RelationKind::View,
        NameKind::MaterializedView => RelationKind::MaterializedView,
    };
    vocab
        .relations
        .iter()
        .filter(|r| r.kind == relation_kind)
        .map(|r| r.name.clone())
        .collect()
}

fn head_first_word(head: &str) -> Option<String> {
    match tokenize(head).0.into_iter().next() {
        Some(Token::Word(w)) => Some(w),
        _ => None,
    }
}

/// The relations a statement reads (after FROM, JOIN, or `TABLE` inside a window
/// function), each with its alias when it has one.
fn relations_read(tokens: &[Token]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let reads = tokens[i].is_keyword("from")
            || tokens[i].is_keyword("join")
            || (tokens[i].is_keyword("table")
                && i > 0
                && matches!(tokens[i - 1], Token::Punct('(')));
        if reads {
            if let Some(Token::Word(name)) = tokens.get(i + 1) {
                let mut alias = None;
                let mut j = i + 2;
                if tokens.get(j).is_some_and(|t| t.is_keyword("as")) {
                    j += 1;
                }
                if let Some(Token::Word(a)) = tokens.get(j) {
                    if !is_keyword(a) {
                        alias = Some(a.clone());
                    }
                }
                out.push((name.clone(), alias));
            }
        }
        i += 1;
    }
    out
}

fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// What may come after `head` (the statement's text before the word at the cursor).
fn slot_of(head: &str, after_dot: bool) -> Slot {
    let (tokens, open_string) = tokenize(head);
    if let Some(_text) = open_string {
        // Inside a literal: only `connector = '` completes.
        let n = tokens.len();
        if n >= 2
            && matches!(tokens[n - 1], Token::Punct('='))
            && tokens[n - 2].is_keyword("connector")
        {
            return Slot::Connector(with_target(&tokens));
        }
        return Slot::Nothing;
    }
    if after_dot {
        if let Some(Token::Word(q)) = tokens.iter().rev().nth(1) {
            return Slot::Qualified(q.clone());
        }
        return Slot::Nothing;
    }
    let Some(last) = tokens.last() else {
        return Slot::StatementStart;
    };
    let first = &tokens[0];
    if tokens.len() == 1
        && (first.is_keyword("set") || first.is_keyword("reset") || first.is_keyword("show"))
    {
        return Slot::Setting;
    }
    if let Some(target) = inside_with(&tokens) {
        return match last {
            Token::Punct('(') | Token::Punct(',') => Slot::OptionKey(target),
            _ => Slot::Nothing,
        };
    }
    let words: Vec<String> = tokens
        .iter()
        .rev()
        .take(3)
        .map(|t| match t {
            Token::Word(w) => w.to_ascii_lowercase(),
            Token::Str(_) => "'".to_string(),
            Token::Punct(c) => c.to_string(),
        })
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if first.is_keyword("drop") && matches!(w(0), "table" | "view" | "sink" | "exists") {
        let kind = match tokens.get(1) {
            Some(t) if t.is_keyword("table") => NameKind::Table,
            Some(t) if t.is_keyword("view") => NameKind::View,
            Some(t) if t.is_keyword("materialized") => NameKind::MaterializedView,
            _ => NameKind::Job,
        };
        return Slot::Named(kind);
    }
    match (w(2), w(1), w(0)) {
        (_, "cancel", "job") => Slot::Named(NameKind::Job),
        (_, _, "from") | (_, _, "join") | (_, _, "describe") | (_, "insert", "into") => {
            Slot::Relation
        }
        (_, "(", "table") => Slot::Relation,
        // A list of relations: `FROM a, b`.
        _ if w(0) == "," && in_from_list(&tokens) => Slot::Relation,
        _ => Slot::Expression,
    }
}

/// Whether the last `,` separates relations of a FROM clause (no other clause since).
fn in_from_list(tokens: &[Token]) -> bool {
    for t in tokens.iter().rev() {
        if let Token::Word(w) = t {
            let w = w.to_ascii_lowercase();
            match w.as_str() {
                "from" => return true,
                "select" | "where" | "group" | "order" | "having" | "on" | "by" => return false,
                _ => {}
            }
        }
    }
    false
}

/// When the tokens end inside the `WITH (...)` of CREATE TABLE / SINK / MATERIALIZED VIEW:
/// what it configures.
fn inside_with(tokens: &[Token]) -> Option<Target> {
    let with = tokens
        .windows(2)
        .rposition(|p| p[0].is_keyword("with") && p[1] == Token::Punct('('))?;
    let mut depth = 0i32;
    for t in &tokens[with + 1..] {
        match t {
            Token::Punct('(') => depth += 1,
            Token::Punct(')') => depth -= 1,
            _ => {}
        }
    }
    if depth <= 0 {
        return None;
    }
    Some(with_target(tokens))
}

fn with_target(tokens: &[Token]) -> Target {
    let create = |second: &str| {
        tokens.len() > 1 && tokens[0].is_keyword("create") && tokens[1].is_keyword(second)
    };
    if create("sink") {
        Target::Sink
    } else if create("materialized") {
        Target::MaterializedView
    } else {
        Target::Table
    }
}

/// The option keys of the WITH clause the text is in: the named connector's (with the job
/// options for a sink), every connector's when none is named yet; keys already given are
/// left out.
fn option_keys(head: &str, target: Target) -> Vec<String> {
    let (tokens, _) = tokenize(head);
    let with = tokens
        .windows(2)
        .rposition(|p| p[0].is_keyword("with") && p[1] == Token::Punct('('))
        .unwrap_or(0);
    let clause = &tokens[with..];
    let mut given = Vec::new();
    let mut connector = None;
    for w in clause.windows(3) {
        if let (Token::Word(k), Token::Punct('=')) = (&w[0], &w[1]) {
            given.push(k.to_ascii_lowercase());
            if k.eq_ignore_ascii_case("connector") {
                if let Token::Str(c) = &w[2] {
                    connector = Some(c.clone());
                }
            }
        }
    }
    let sink = target != Target::Table;
    let mut keys: Vec<&str> = match (target, &connector) {
        (Target::MaterializedView, _) => Vec::new(),
        (_, Some(c)) => weir_connectors::option_keys(c, sink).to_vec(),
        (_, None) => {
            let list = if sink {
                weir_connectors::SINK_CONNECTORS
            } else {
                weir_connectors::SOURCE_CONNECTORS
            };
            let mut all: Vec<&str> = vec!["connector"];
            for c in list {
                all.extend(weir_connectors::option_keys(c, sink));
            }
            all
        }
    };
    if sink {
        keys.extend(weir_planner::session::JOB_OPTIONS);
    } else {
        keys.push("late_rows");
    }
    keys.into_iter()
        .filter(|k| !given.iter().any(|g| g == k))
        .map(str::to_string)
        .collect()
}

/// Completions of a backslash command, or of its argument (a name for `\d`).
fn complete_meta(
    line: &str,
    pos: usize,
    command: &str,
    vocab: &Vocabulary,
) -> (usize, Vec<Candidate>) {
    let typed = &line[..pos];
    match command.split_once(char::is_whitespace) {
        None => {
            let start = typed.rfind('\\').unwrap_or(0);
            let mut commands: Vec<&str> = META_COMMANDS
                .iter()
                .map(|(c, _, _)| *c)
                .filter(|c| c.starts_with(&typed[start..]))
                .collect();
            commands.sort();
            let words = commands
                .into_iter()
                .map(|c| Candidate {
                    display: c.to_string(),
                    replacement: c.to_string(),
                })
                .collect();
            (start, words)
        }
        Some((name, _)) => {
            let start = word_start(line, pos);
            let prefix = &line[start..pos];
            let words: Vec<String> = match name {
                "d" => vocab.relations.iter().map(|r| r.name.clone()).collect(),
                "format" => vec!["table".into(), "csv".into(), "json".into()],
                "x" | "timing" => vec!["on".into(), "off".into()],
                _ => Vec::new(),
            };
            let candidates = words
                .into_iter()
                .filter(|w| starts_with_ignore_case(w, prefix))
                .map(|w| Candidate {
                    display: w.clone(),
                    replacement: w,
                })
                .collect();
            (start, candidates)
        }
    }
}

#[cfg(test)]
mod tests;

/// Whether the word at `pos` is a file name: the argument of `\i` or `\o`, or the value of a
/// `path = '...'` option.
pub fn completes_file_name(line: &str, pos: usize) -> bool {
    let pos = pos.min(line.len());
    let before = current_statement(&line[..pos]);
    let trimmed = before.trim_start();
    if trimmed.starts_with("\\i ") || trimmed.starts_with("\\o ") {
        return true;
    }
    let (tokens, open) = tokenize(before);
    let n = tokens.len();
    open.is_some()
        && n >= 2
        && tokens[n - 1] == Token::Punct('=')
        && tokens[n - 2].is_keyword("path")
}

/// Whether the text typed so far is a whole input to run: statements each ending with `;`
/// (outside literals, comments and brackets, as psql judges it), a backslash command, or
/// nothing but blanks and comments.
pub fn input_is_complete(text: &str) -> bool {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('\\') {
        return true;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut depth = 0i32;
    let mut last = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            loop {
                match chars.get(i) {
                    None => return false,
                    Some('*') if chars.get(i + 1) == Some(&'/') => break,
                    _ => i += 1,
                }
            }
            i += 2;
            continue;
        }
        if c == '\'' || c == '"' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return false,
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => i += 2,
                    Some(&q) if q == c => break,
                    _ => i += 1,
                }
            }
            last = Some(c);
            i += 1;
            continue;
        }
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            _ => {}
        }
        if !c.is_whitespace() {
            last = Some(c);
        }
        i += 1;
    }
    // Only comments: nothing to run, nothing to wait for.
    last.is_none() || (last == Some(';') && depth <= 0)
}

#[cfg(test)]
mod input_tests;
