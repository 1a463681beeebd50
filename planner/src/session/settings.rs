//! SET, SHOW and RESET: session settings, handled before SQL parsing.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use std::time::Duration;

use super::{text_rows, Session, StatementResult};
use crate::error::Result;
use crate::invalid;

/// `'1s'`, `'100ms'`, `'10 seconds'`, `'2 min'`: a positive duration.
pub(super) fn parse_duration(value: &str) -> Result<Duration> {
    let v = value.trim().trim_matches('\'').trim().to_ascii_lowercase();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| invalid!("expected a duration such as '1s' or '100ms', got '{value}'"))?;
    let scale = match unit.trim() {
        "ms" | "millisecond" | "milliseconds" => 1e-3,
        "s" | "sec" | "second" | "seconds" => 1.0,
        "m" | "min" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        _ => {
            return Err(invalid!(
                "unknown unit in duration '{value}' (use ms, s, min or h)"
            ))
        }
    };
    let d = Duration::from_secs_f64(number * scale);
    if d < Duration::from_millis(1) {
        return Err(invalid!("duration '{value}' is shorter than 1 ms"));
    }
    Ok(d)
}

/// `'1048576'`, `'64KB'`, `'256MB'`, `'2GB'` (binary units): a positive size in bytes.
pub(super) fn parse_bytes(value: &str) -> Result<usize> {
    let v = value.trim().trim_matches('\'').trim().to_ascii_uppercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| invalid!("expected a size such as '64MB', got '{value}'"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KB" | "K" | "KIB" => 1 << 10,
        "MB" | "M" | "MIB" => 1 << 20,
        "GB" | "G" | "GIB" => 1 << 30,
        _ => {
            return Err(invalid!(
                "unknown unit in size '{value}' (use B, KB, MB or GB)"
            ))
        }
    };
    number
        .checked_mul(scale)
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid!("size '{value}' must be positive and fit in memory"))
}

fn format_bytes(n: usize) -> String {
    match n {
        n if n % (1 << 30) == 0 => format!("{}GB", n >> 30),
        n if n % (1 << 20) == 0 => format!("{}MB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{}KB", n >> 10),
        n => format!("{n}B"),
    }
}

fn format_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// `exactly_once` or `at_least_once`: whether it is exactly-once.
pub(super) fn parse_delivery(value: &str) -> Result<bool> {
    match value
        .trim()
        .trim_matches('\'')
        .to_ascii_lowercase()
        .as_str()
    {
        "exactly_once" | "exactly-once" => Ok(true),
        "at_least_once" | "at-least-once" => Ok(false),
        _ => Err(invalid!(
            "delivery must be exactly_once or at_least_once, got '{value}'"
        )),
    }
}

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
            ["SHOW", _] if upper[1] != "CREATE" && upper[1] != "JOBS" => Ok(Some(
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
        vec![
            (
                "parallelism",
                self.config.parallelism.to_string(),
                "instances of each parallel stage",
            ),
            (
                "checkpoint_interval",
                format_duration(self.config.checkpoint_interval),
                "time between checkpoints of sink jobs created from now on",
            ),
            (
                "delivery",
                if self.config.exactly_once {
                    "exactly_once"
                } else {
                    "at_least_once"
                }
                .to_string(),
                "exactly_once: aligned barriers, output visible at checkpoints; at_least_once: no alignment, output written through, replays may repeat it",
            ),
            (
                "memory_budget",
                format_bytes(self.config.memory_budget),
                "window state each task keeps in memory before spilling to its RocksDB store",
            ),
            (
                "checkpoints_retained",
                self.config.checkpoints_retained.to_string(),
                "complete checkpoints kept per job",
            ),
        ]
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
            "checkpoint_interval" => {
                self.config.checkpoint_interval = parse_duration(value)?;
                Ok(())
            }
            "delivery" => {
                self.config.exactly_once = parse_delivery(value)?;
                Ok(())
            }
            "memory_budget" => {
                self.config.memory_budget = parse_bytes(value)?;
                Ok(())
            }
            "checkpoints_retained" => {
                self.config.checkpoints_retained = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid!(
                            "checkpoints_retained must be a positive whole number, got '{value}'"
                        )
                    })?;
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
