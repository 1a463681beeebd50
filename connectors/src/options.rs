//! `WITH (...)` options: taken one by one by the connector that understands them, so that
//! whatever is left over is reported as unknown.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{ConnectorError, Result};

/// Option names are case-insensitive; values are kept as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    map: BTreeMap<String, String>,
}

impl Options {
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            map: pairs
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.map.iter()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(|s| s.as_str())
    }

    pub fn take(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    pub fn take_required(&mut self, key: &str) -> Result<String> {
        self.take(key)
            .ok_or_else(|| ConnectorError::MissingOption(key.to_string()))
    }

    /// Takes an option and parses it.
    pub fn take_parsed<T: FromStr>(&mut self, key: &str, what: &str) -> Result<Option<T>> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<T>()
                .map(Some)
                .map_err(|_| ConnectorError::InvalidOption {
                    option: key.to_string(),
                    value: v,
                    reason: format!("expected {what}"),
                }),
        }
    }

    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => Ok(Some(true)),
                "false" | "no" | "0" => Ok(Some(false)),
                _ => Err(ConnectorError::InvalidOption {
                    option: key.to_string(),
                    value: v,
                    reason: "expected true or false".into(),
                }),
            },
        }
    }

    /// Takes a CSV `delimiter`: one ASCII character, or `\\t` for a tab.
    pub fn take_delimiter(&mut self) -> Result<Option<u8>> {
        match self.take("delimiter") {
            None => Ok(None),
            Some(d) if d == "\\t" => Ok(Some(b'\t')),
            Some(d) if d.len() == 1 && d.is_ascii() => Ok(Some(d.as_bytes()[0])),
            Some(d) => Err(ConnectorError::InvalidOption {
                option: "delimiter".into(),
                value: d,
                reason: "expected one ASCII character".into(),
            }),
        }
    }

    /// Takes a duration option (`'500ms'`, `'30s'`, `'5 min'`, `'1h'`).
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => {
                parse_duration(&v)
                    .map(Some)
                    .map_err(|reason| ConnectorError::InvalidOption {
                        option: key.to_string(),
                        value: v,
                        reason,
                    })
            }
        }
    }

    /// Fails if any option was not taken.
    pub fn finish(&self, connector: &str, allowed: &[&str]) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(ConnectorError::UnknownOption {
                connector: connector.to_string(),
                option: k.clone(),
                suggestion: crate::suggest::did_you_mean(k, allowed.iter().copied()),
                allowed: allowed.join(", "),
            }),
        }
    }
}

/// `'1s'`, `'100ms'`, `'10 seconds'`, `'2 min'`, `'1h'`: a duration of at least 1 ms.
pub fn parse_duration(value: &str) -> std::result::Result<Duration, String> {
    let v = value.trim().trim_matches('\'').trim().to_ascii_lowercase();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("expected a duration such as '1s' or '100ms', got '{value}'"))?;
    let scale = match unit.trim() {
        "ms" | "millisecond" | "milliseconds" => 1e-3,
        "s" | "sec" | "second" | "seconds" => 1.0,
        "m" | "min" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        _ => {
            return Err(format!(
                "unknown unit in duration '{value}' (use ms, s, min or h)"
            ))
        }
    };
    let d = Duration::from_secs_f64(number * scale);
    if d < Duration::from_millis(1) {
        return Err(format!("duration '{value}' is shorter than 1 ms"));
    }
    Ok(d)
}
