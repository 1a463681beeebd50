//! SET, SHOW and RESET: session settings, handled before SQL parsing.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::{text_rows, Session, StatementResult};
use crate::error::Result;
use crate::invalid;

impl Session {
    /// SET, SHOW and RESET, handled before parsing.
    pub(super) fn execute_setting(&mut self, text: &str) -> Result<Option<StatementResult>> {
        let dialect = GenericDialect {};
        let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize() else {
            return Ok(None);
        };
        let words: Vec<String> = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
            .map(|t| match t {
                Token::Word(w) => w.value.clone(),
                Token::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
        match upper
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["SHOW", "TABLES"] => Ok(Some(self.show_tables())),
            ["SHOW", "ALL"] => Ok(Some(self.show_settings(None)?)),
            ["SHOW", _] if upper[1] != "CREATE" => Ok(Some(
                self.show_settings(Some(&words[1].to_ascii_lowercase()))?,
            )),
            ["SET", _, "=" | "TO", ..] => {
                let value = words[3..].join(" ");
                self.set(&words[1].to_ascii_lowercase(), &value)?;
                Ok(Some(StatementResult::Command("SET".into())))
            }
            ["SET", ..] => Err(invalid!("expected SET name = value")),
            _ => Ok(None),
        }
    }

    fn settings(&self) -> Vec<(&'static str, String, &'static str)> {
        vec![(
            "parallelism",
            self.config.parallelism.to_string(),
            "instances of each parallel stage",
        )]
    }

    fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "parallelism" => {
                let n: usize = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid!("parallelism must be a positive whole number, got '{value}'")
                    })?;
                self.config.parallelism = n;
                Ok(())
            }
            other => Err(invalid!(
                "unknown setting '{other}' (settings: {})",
                self.settings()
                    .iter()
                    .map(|s| s.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    fn show_settings(&self, name: Option<&str>) -> Result<StatementResult> {
        let all = self.settings();
        let rows: Vec<Vec<String>> = all
            .iter()
            .filter(|s| name.is_none_or(|n| n == s.0))
            .map(|s| vec![s.0.to_string(), s.1.clone(), s.2.to_string()])
            .collect();
        if rows.is_empty() {
            return Err(invalid!(
                "unknown setting '{}' (settings: {})",
                name.unwrap_or_default(),
                all.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(text_rows(&["name", "setting", "description"], rows))
    }
}
