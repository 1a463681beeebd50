//! `WITH (...)` options: taken one by one by the connector that understands them, so that
//! whatever is left over is reported as unknown.

use std::collections::BTreeMap;
use std::str::FromStr;

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

    /// Fails if any option was not taken.
    pub fn finish(&self, connector: &str, allowed: &[&str]) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(ConnectorError::UnknownOption {
                connector: connector.to_string(),
                option: k.clone(),
                allowed: allowed.join(", "),
            }),
        }
    }
}
