//! The REPL's line-editor helper: tab completion ([`crate::complete`]), hints from history,
//! matching-bracket highlighting, and multi-line input that is sent when the statement ends
//! with `;` outside brackets and literals.

use std::borrow::Cow;

use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::highlight::{CmdKind, Highlighter, MatchingBracketHighlighter};
use rustyline::hint::{Hinter, HistoryHinter};
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Helper};
use weir_planner::Vocabulary;

use crate::complete::{complete, completes_file_name, input_is_complete};

pub struct WeirHelper {
    /// The session's names as of the last statement (refreshed after each one).
    pub vocabulary: Vocabulary,
    hints: HistoryHinter,
    brackets: MatchingBracketHighlighter,
    files: FilenameCompleter,
}

impl WeirHelper {
    pub fn new(vocabulary: Vocabulary) -> Self {
        Self {
            vocabulary,
            hints: HistoryHinter::new(),
            brackets: MatchingBracketHighlighter::new(),
            files: FilenameCompleter::new(),
        }
    }
}

impl Completer for WeirHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        if completes_file_name(line, pos) {
            return self.files.complete(line, pos, ctx);
        }
        let (start, candidates) = complete(line, pos, &self.vocabulary);
        Ok((
            start,
            candidates
                .into_iter()
                .map(|c| Pair {
                    display: c.display,
                    replacement: c.replacement,
                })
                .collect(),
        ))
    }
}

impl Hinter for WeirHelper {
    type Hint = String;

    fn hint(&self, line: &str, pos: usize, ctx: &Context<'_>) -> Option<String> {
        self.hints.hint(line, pos, ctx)
    }
}

impl Highlighter for WeirHelper {
    fn highlight<'l>(&self, line: &'l str, pos: usize) -> Cow<'l, str> {
        self.brackets.highlight(line, pos)
    }

    /// Hints in grey, so they do not look typed.
    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        Cow::Owned(format!("\x1b[90m{hint}\x1b[0m"))
    }

    fn highlight_char(&self, line: &str, pos: usize, kind: CmdKind) -> bool {
        self.brackets.highlight_char(line, pos, kind)
    }
}

impl Validator for WeirHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if input_is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Helper for WeirHelper {}
