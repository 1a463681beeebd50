//! weir's statements: sqlparser's SQL plus the streaming statements, parsed into one
//! [`WeirStatement`] the way DataFusion's `DFParser` extends sqlparser. Everything a front end
//! (REPL, script runner, wire server) runs goes through [`parse_statement`]; nothing looks at
//! statement text before it.
//!
//! Added to sqlparser's grammar:
//! - `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t [(columns, WATERMARK FOR col AS expr)] WITH (...)`
//! - `CREATE SINK [IF NOT EXISTS] s WITH (...) AS query`,
//!   `CREATE MATERIALIZED VIEW [IF NOT EXISTS] v [WITH (...)] AS query`; `INSERT INTO t
//!   [(columns)] query` is the same job-creating statement
//! - `DROP SINK | MATERIALIZED VIEW [IF EXISTS] name`, `CANCEL JOB name`, `SHOW JOBS`,
//!   `SHOW TABLES`
//! - `SET [SESSION | LOCAL] name {= | TO} value`, `SET TIME ZONE value`, `SHOW name | ALL`,
//!   `RESET name | ALL`
//! - transaction statements (`BEGIN`, `COMMIT`, ...), accepted and ignored: weir has no
//!   transactions, but drivers wrap statements in them; `DISCARD`, `DEALLOCATE`
//!
//! Names are normalized one way everywhere ([`normalize`]): unquoted names are lowercased,
//! quoted names keep their case.

use std::fmt;

use datafusion::sql::sqlparser::ast::{
    ColumnDef, Expr, Ident, ObjectName, Query, SqlOption, Statement, TableObject, Value,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{PlanError, Result};
use crate::{invalid, not_supported};

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkClause {
    pub column: Ident,
    pub expr: Expr,
}

/// `CREATE TABLE`: a source (or, with connector `postgres`, a table INSERT INTO writes).
#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: String,
    pub or_replace: bool,
    pub if_not_exists: bool,
    /// Empty when the connector knows the columns (nexmark).
    pub columns: Vec<ColumnDef>,
    pub watermark: Option<WatermarkClause>,
    /// `name AS PROCTIME()`: the column's name and how many declared columns precede it.
    pub proctime: Option<(Ident, usize)>,
    pub options: Vec<(String, String)>,
}

/// Where a job's rows go.
#[derive(Debug, Clone, PartialEq)]
pub enum JobTarget {
    /// `CREATE SINK name WITH (connector = ...)`.
    Sink(String),
    /// `CREATE MATERIALIZED VIEW name`.
    View(String),
    /// `INSERT INTO table [(columns)]`: into a table declared with connector `postgres`;
    /// empty `columns` means all of the table's, in order.
    Insert { table: String, columns: Vec<String> },
}

/// A statement that starts a job: CREATE SINK, CREATE MATERIALIZED VIEW, INSERT INTO.
#[derive(Debug, Clone)]
pub struct CreateJob {
    pub target: JobTarget,
    pub if_not_exists: bool,
    pub options: Vec<(String, String)>,
    pub query: Box<Query>,
}

/// What DROP and similar statements name: a sink or a materialized view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Sink,
    View,
}

/// `SHOW` of a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShowTarget {
    All,
    Name(String),
}

/// A transaction statement; weir accepts and ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transaction {
    Begin,
    Commit,
    Rollback,
}

impl Transaction {
    /// The command tag PostgreSQL answers with.
    pub fn tag(self) -> &'static str {
        match self {
            Transaction::Begin => "BEGIN",
            Transaction::Commit => "COMMIT",
            Transaction::Rollback => "ROLLBACK",
        }
    }
}

/// One statement of weir's SQL.
#[derive(Debug, Clone)]
pub enum WeirStatement {
    /// A statement of standard SQL for DataFusion's planner: queries, EXPLAIN, DESCRIBE,
    /// DROP TABLE (and statements weir refuses by name).
    Sql(Box<Statement>),
    CreateTable(Box<CreateTable>),
    CreateJob(Box<CreateJob>),
    DropJob {
        kind: JobKind,
        name: String,
        if_exists: bool,
    },
    CancelJob(String),
    ShowJobs,
    ShowTables,
    Show(ShowTarget),
    /// `SET name = value`; the value as written, quotes removed.
    Set {
        name: String,
        value: String,
    },
    /// `RESET name`; `None` for `RESET ALL`.
    Reset(Option<String>),
    Transaction(Transaction),
    /// `DISCARD ...`, `DEALLOCATE ...`: session housekeeping of drivers; the tag to answer.
    SessionCommand(&'static str),
}

/// A name as weir keeps it: unquoted names lowercased, quoted names as written.
pub fn normalize(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// A one-part object name, normalized; qualified names are refused.
pub fn object_name(name: &ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [one] => one
            .as_ident()
            .map(normalize)
            .ok_or_else(|| invalid!("invalid name {name}")),
        _ => Err(not_supported!("qualified names ({name})")),
    }
}

/// The text of an option value: strings unquoted, numbers and words as written.
fn option_value(value: &Expr) -> String {
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => b.to_string(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

/// `WITH (key = 'value', ...)` as pairs.
fn option_pairs(options: Vec<SqlOption>) -> Result<Vec<(String, String)>> {
    options
        .into_iter()
        .map(|o| match o {
            SqlOption::KeyValue { key, value } => Ok((key.value, option_value(&value))),
            other => Err(invalid!("expected option = 'value', got {other}")),
        })
        .collect()
}

pub use weir_connectors::quote::{quote_ident, quote_literal};

impl fmt::Display for CreateJob {
    /// The statement as weir records it: INSERT INTO becomes the CREATE SINK it runs as.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, name) = match &self.target {
            JobTarget::Sink(name) => ("SINK", name),
            JobTarget::View(name) => ("MATERIALIZED VIEW", name),
            JobTarget::Insert { table, .. } => ("SINK", table),
        };
        write!(f, "CREATE {what} ")?;
        if self.if_not_exists {
            write!(f, "IF NOT EXISTS ")?;
        }
        write!(f, "{}", quote_ident(name))?;
        if !self.options.is_empty() {
            let options: Vec<String> = self
                .options
                .iter()
                .map(|(k, v)| format!("{} = {}", quote_ident(k), quote_literal(v)))
                .collect();
            write!(f, " WITH ({})", options.join(", "))?;
        }
        write!(f, " AS {}", self.query)
    }
}

/// Why a statement did not parse: a syntax error (positioned by the caller, who knows where
/// the statement starts in the script) or a mistake explained in words.
pub(super) enum Failure {
    Syntax(ParserError),
    Plan(PlanError),
}

impl From<ParserError> for Failure {
    fn from(e: ParserError) -> Self {
        Failure::Syntax(e)
    }
}

impl From<PlanError> for Failure {
    fn from(e: PlanError) -> Self {
        Failure::Plan(e)
    }
}

type PResult<T> = std::result::Result<T, Failure>;

/// The parser of one statement, over tokens whose positions are the user's text.
pub(super) struct WeirParser<'a> {
    parser: Parser<'a>,
}

impl<'a> WeirParser<'a> {
    pub(super) fn new(parser: Parser<'a>) -> Self {
        Self { parser }
    }

    /// Whether the next token is the unquoted word `word`; consumes it if so.
    fn parse_word(&mut self, word: &str) -> bool {
        if is_word(&self.parser.peek_token().token, word) {
            self.parser.next_token();
            true
        } else {
            false
        }
    }

    fn parse_words(&mut self, words: &[&str]) -> bool {
        let all = words
            .iter()
            .enumerate()
            .all(|(i, w)| is_word(&self.parser.peek_nth_token(i).token, w));
        if all {
            words.iter().for_each(|_| {
                self.parser.next_token();
            });
        }
        all
    }

    fn expect_word(&mut self, word: &str) -> PResult<()> {
        if self.parse_word(word) {
            Ok(())
        } else {
            Ok(self.parser.expected(word, self.parser.peek_token())?)
        }
    }

    /// A one-part name, normalized.
    fn parse_name(&mut self) -> PResult<String> {
        let name = self.parser.parse_object_name(false)?;
        Ok(object_name(&name)?)
    }

    /// Consumes `;`s; anything else before the end is an error.
    pub(super) fn expect_end(&mut self) -> PResult<()> {
        while self.parser.consume_token(&Token::SemiColon) {}
        let next = self.parser.peek_token();
        if next.token == Token::EOF {
            Ok(())
        } else {
            Ok(self.parser.expected("end of statement", next)?)
        }
    }

    /// The rest of the statement's tokens, as written (quotes of strings removed).
    fn rest_words(&mut self) -> Vec<String> {
        let mut words = Vec::new();
        loop {
            let t = self.parser.next_token();
            match t.token {
                Token::EOF => break,
                Token::SemiColon => continue,
                Token::Word(w) => words.push(w.value),
                Token::SingleQuotedString(s) => words.push(s),
                other => words.push(other.to_string()),
            }
        }
        words
    }

    /// Parses one whole statement.
    pub(super) fn parse(&mut self) -> PResult<WeirStatement> {
        let first = self.parser.peek_token().token;
        let statement = match first {
            Token::Word(w) if w.quote_style.is_none() => {
                match w.value.to_ascii_uppercase().as_str() {
                    "CREATE" => self.parse_create()?,
                    "DROP" => self.parse_drop()?,
                    "CANCEL" => {
                        self.parser.next_token();
                        self.expect_word("JOB")?;
                        WeirStatement::CancelJob(self.parse_name()?)
                    }
                    "SHOW" => self.parse_show()?,
                    "SET" => return self.parse_set(),
                    "RESET" => self.parse_reset()?,
                    "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" => {
                        return Ok(self.parse_transaction())
                    }
                    "DISCARD" => {
                        self.rest_words();
                        return Ok(WeirStatement::SessionCommand("DISCARD ALL"));
                    }
                    "DEALLOCATE" => {
                        self.rest_words();
                        return Ok(WeirStatement::SessionCommand("DEALLOCATE"));
                    }
                    _ => self.parse_sql()?,
                }
            }
            _ => self.parse_sql()?,
        };
        self.expect_end()?;
        Ok(statement)
    }

    /// A statement sqlparser knows; INSERT INTO becomes the job it starts.
    fn parse_sql(&mut self) -> PResult<WeirStatement> {
        let statement = self.parser.parse_statement()?;
        match statement {
            Statement::Insert(insert) => {
                let table = match &insert.table {
                    TableObject::TableName(name) => name.clone(),
                    other => {
                        return Err(not_supported!("INSERT INTO a table function ({other})").into())
                    }
                };
                let Some(query) = insert.source else {
                    return Err(invalid!("INSERT INTO {table} needs a SELECT").into());
                };
                if insert.on.is_some() || insert.returning.is_some() || insert.overwrite {
                    return Err(not_supported!(
                        "INSERT INTO ... SELECT with ON CONFLICT, RETURNING or OVERWRITE"
                    )
                    .into());
                }
                let columns = insert
                    .columns
                    .iter()
                    .map(object_name)
                    .collect::<Result<_>>()?;
                let table = object_name(&table)?;
                Ok(WeirStatement::CreateJob(Box::new(CreateJob {
                    target: JobTarget::Insert { table, columns },
                    if_not_exists: false,
                    options: Vec::new(),
                    query,
                })))
            }
            other => Ok(WeirStatement::Sql(Box::new(other))),
        }
    }

    fn parse_create(&mut self) -> PResult<WeirStatement> {
        self.parser.next_token(); // CREATE
        if self.parse_word("SINK") {
            return self.parse_create_job(JobKind::Sink);
        }
        if self.parse_words(&["MATERIALIZED", "VIEW"]) {
            return self.parse_create_job(JobKind::View);
        }
        let or_replace = self.parser.parse_keywords(&[Keyword::OR, Keyword::REPLACE]);
        if self.parser.parse_keyword(Keyword::TABLE) {
            return self.parse_create_table(or_replace);
        }
        if or_replace {
            self.parser.prev_token();
            self.parser.prev_token();
        }
        self.parser.prev_token(); // CREATE: sqlparser names what it is
        self.parse_sql()
    }

    /// After `CREATE SINK` / `CREATE MATERIALIZED VIEW`.
    fn parse_create_job(&mut self, kind: JobKind) -> PResult<WeirStatement> {
        let if_not_exists =
            self.parser
                .parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = self.parse_name()?;
        let what = match kind {
            JobKind::Sink => "SINK",
            JobKind::View => "MATERIALIZED VIEW",
        };
        if self.parser.peek_token().token == Token::LParen {
            return Err(invalid!(
                "CREATE {what} {name}: the columns come from the query; do not list them"
            )
            .into());
        }
        let options = self.parser.parse_options(Keyword::WITH)?;
        let options = option_pairs(options)?;
        if !self.parser.parse_keyword(Keyword::AS) {
            let found = self.parser.peek_token();
            return Ok(self.parser.expected(
                &format!("AS SELECT ... (CREATE {what} {name} needs a query)"),
                found,
            )?);
        }
        let query = self.parser.parse_query()?;
        let target = match kind {
            JobKind::Sink => JobTarget::Sink(name),
            JobKind::View => JobTarget::View(name),
        };
        Ok(WeirStatement::CreateJob(Box::new(CreateJob {
            target,
            if_not_exists,
            options,
            query,
        })))
    }

    /// After `CREATE [OR REPLACE] TABLE`.
    fn parse_create_table(&mut self, or_replace: bool) -> PResult<WeirStatement> {
        let if_not_exists =
            self.parser
                .parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = self.parse_name()?;
        let mut columns = Vec::new();
        let mut watermark = None;
        let mut proctime = None;
        if self.parser.consume_token(&Token::LParen) {
            loop {
                if matches!(self.parser.peek_token().token, Token::Word(_))
                    && matches!(self.parser.peek_nth_token(1).token,
                        Token::Word(w) if w.keyword == Keyword::AS)
                {
                    if proctime.is_some() {
                        return Err(invalid!("table {name}: one PROCTIME() column only").into());
                    }
                    proctime = Some((self.parse_proctime_column(&name)?, columns.len()));
                } else if self.parse_words(&["WATERMARK", "FOR"]) {
                    if watermark.is_some() {
                        return Err(invalid!("table {name}: one WATERMARK FOR clause only").into());
                    }
                    let column = self.parser.parse_identifier()?;
                    self.parser.expect_keyword_is(Keyword::AS)?;
                    let expr = self.parser.parse_expr()?;
                    watermark = Some(WatermarkClause { column, expr });
                } else if let Some(constraint) = self.parser.parse_optional_table_constraint()? {
                    return Err(not_supported!("table {name}: constraints ({constraint})").into());
                } else {
                    columns.push(self.parser.parse_column_def()?);
                }
                if !self.parser.consume_token(&Token::Comma) {
                    self.parser.expect_token(&Token::RParen)?;
                    break;
                }
            }
        }
        let options = self.parser.parse_options(Keyword::WITH)?;
        let options = option_pairs(options)?;
        if self.parser.parse_keyword(Keyword::AS) {
            return Err(not_supported!(
                "CREATE TABLE ... AS SELECT (use CREATE MATERIALIZED VIEW or CREATE SINK)"
            )
            .into());
        }
        Ok(WeirStatement::CreateTable(Box::new(CreateTable {
            name,
            or_replace,
            if_not_exists,
            columns,
            watermark,
            proctime,
            options,
        })))
    }

    /// `name AS PROCTIME()` in a column list: the one computed column weir has.
    fn parse_proctime_column(&mut self, table: &str) -> PResult<Ident> {
        let column = self.parser.parse_identifier()?;
        self.parser.expect_keyword_is(Keyword::AS)?;
        let expr = self.parser.parse_expr()?;
        let is_proctime = matches!(&expr, Expr::Function(f)
            if f.name.to_string().eq_ignore_ascii_case("PROCTIME")
                && f.args.to_string().trim_matches(|c| c == '(' || c == ')').trim().is_empty());
        if !is_proctime {
            return Err(not_supported!(
                "table {table}: computed column {column} AS {expr} (the one computed column is `name AS PROCTIME()`)"
            )
            .into());
        }
        Ok(column)
    }

    fn parse_drop(&mut self) -> PResult<WeirStatement> {
        self.parser.next_token(); // DROP
        let kind = if self.parse_word("SINK") {
            JobKind::Sink
        } else if self.parse_words(&["MATERIALIZED", "VIEW"]) {
            JobKind::View
        } else {
            self.parser.prev_token();
            return self.parse_sql();
        };
        let if_exists = self.parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = self.parse_name()?;
        Ok(WeirStatement::DropJob {
            kind,
            name,
            if_exists,
        })
    }

    fn parse_show(&mut self) -> PResult<WeirStatement> {
        self.parser.next_token(); // SHOW
        let statement = if self.parse_word("JOBS") {
            WeirStatement::ShowJobs
        } else if self.parse_word("TABLES") {
            WeirStatement::ShowTables
        } else if self.parse_word("ALL") {
            WeirStatement::Show(ShowTarget::All)
        } else if self.parse_words(&["TRANSACTION", "ISOLATION", "LEVEL"]) {
            WeirStatement::Show(ShowTarget::Name("transaction_isolation".into()))
        } else if self.parse_words(&["TIME", "ZONE"]) {
            WeirStatement::Show(ShowTarget::Name("timezone".into()))
        } else {
            // `SHOW name` alone names a setting; longer SHOW statements are sqlparser's.
            let one_word = matches!(self.parser.peek_token().token, Token::Word(_))
                && matches!(
                    self.parser.peek_nth_token(1).token,
                    Token::EOF | Token::SemiColon
                );
            if !one_word {
                self.parser.prev_token();
                return self.parse_sql();
            }
            match self.parser.next_token().token {
                Token::Word(w) => {
                    WeirStatement::Show(ShowTarget::Name(w.value.to_ascii_lowercase()))
                }
                _ => unreachable!("peeked a word"),
            }
        };
        Ok(statement)
    }

    fn parse_set(&mut self) -> PResult<WeirStatement> {
        self.parser.next_token(); // SET
        if !self.parse_word("SESSION") {
            self.parse_word("LOCAL");
        }
        let name = if self.parse_words(&["TIME", "ZONE"]) {
            "timezone".to_string()
        } else {
            let name = match self.parser.next_token() {
                TokenWithSpan {
                    token: Token::Word(w),
                    ..
                } => w.value.to_ascii_lowercase(),
                other => return Ok(self.parser.expected("SET name = value", other)?),
            };
            if !self.parser.consume_token(&Token::Eq) && !self.parser.parse_keyword(Keyword::TO) {
                let found = self.parser.peek_token();
                return Ok(self.parser.expected("= or TO (SET name = value)", found)?);
            }
            name
        };
        let value = self.rest_words().join(" ");
        if value.is_empty() {
            let found = self.parser.peek_token();
            return Ok(self
                .parser
                .expected(&format!("a value for {name}"), found)?);
        }
        Ok(WeirStatement::Set { name, value })
    }

    fn parse_reset(&mut self) -> PResult<WeirStatement> {
        self.parser.next_token(); // RESET
        if self.parse_word("ALL") {
            return Ok(WeirStatement::Reset(None));
        }
        match self.parser.next_token() {
            TokenWithSpan {
                token: Token::Word(w),
                ..
            } => Ok(WeirStatement::Reset(Some(w.value.to_ascii_lowercase()))),
            other => Ok(self.parser.expected("RESET name or RESET ALL", other)?),
        }
    }

    /// `BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT`, with whatever modes
    /// follow (they change nothing: weir has no transactions).
    fn parse_transaction(&mut self) -> WeirStatement {
        let words = self.rest_words();
        let kind = match words[0].to_ascii_uppercase().as_str() {
            "BEGIN" | "START" => Transaction::Begin,
            "COMMIT" | "END" => Transaction::Commit,
            _ => Transaction::Rollback,
        };
        WeirStatement::Transaction(kind)
    }
}

pub(super) fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// A job's statement as recorded, parsed back; an error when it is not CREATE SINK or
/// CREATE MATERIALIZED VIEW.
pub fn parse_recorded_job(text: &str) -> Result<CreateJob> {
    match super::parse_statement(text, 1)? {
        WeirStatement::CreateJob(job) => Ok(*job),
        _ => Err(PlanError::Internal(format!(
            "recorded job statement is not CREATE SINK or CREATE MATERIALIZED VIEW: {text}"
        ))),
    }
}
