//! SET, SHOW and RESET: weir's settings and the PostgreSQL session parameters drivers use.

use std::time::Duration;

use super::{text_rows, Session, StatementResult};
use crate::error::Result;
use crate::invalid;
use crate::sql::ShowTarget;

/// `'1s'`, `'100ms'`, `'10 seconds'`, `'2 min'`: a positive duration; `off` (or `none`,
/// `0`): `None`. Errors name the setting (`name`).
fn parse_optional_duration(name: &str, value: &str) -> Result<Option<Duration>> {
    let v = value.trim().trim_matches('\'').trim();
    if ["off", "none", "0"].contains(&v.to_ascii_lowercase().as_str()) {
        return Ok(None);
    }
    let d = parse_duration(v).map_err(|e| invalid!("{name}: {e}"))?;
    Ok((!d.is_zero()).then_some(d))
}

/// `off`: no TTL; otherwise a positive duration.
pub(super) fn parse_state_ttl(value: &str) -> Result<Option<Duration>> {
    parse_optional_duration("state_ttl", value)
}

/// `off`: early results after every input batch; otherwise a positive duration between two
/// emissions.
pub(super) fn parse_early_fire_interval(value: &str) -> Result<Option<Duration>> {
    parse_optional_duration("early_fire_interval", value)
}

/// `off`: an updating GROUP BY applies each input batch as it comes; otherwise a positive
/// duration its input rows may wait to be applied together.
pub(super) fn parse_mini_batch(value: &str) -> Result<Option<Duration>> {
    parse_optional_duration("mini_batch", value)
}

pub(super) fn parse_duration(value: &str) -> Result<Duration> {
    weir_connectors::options::parse_duration(value).map_err(|e| invalid!("{e}"))
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
    /// `SHOW name` (a weir setting or a PostgreSQL session parameter), `SHOW ALL`.
    pub(super) fn show(&self, target: ShowTarget) -> Result<StatementResult> {
        match target {
            ShowTarget::All => self.show_settings(None),
            ShowTarget::Name(name) if client_param(&name).is_some() => {
                let value = self.client_param_value(&name);
                Ok(text_rows(&[name.as_str()], vec![vec![value]]))
            }
            ShowTarget::Name(name) => self.show_settings(Some(&name)),
        }
    }

    /// `SET name = value`.
    pub(super) fn set_statement(&mut self, name: &str, value: &str) -> Result<StatementResult> {
        if client_param(name).is_some() {
            self.set_client_param(name, value)?;
        } else {
            self.set(name, value)?;
        }
        Ok(StatementResult::Command("SET".into()))
    }

    /// `RESET name` of a PostgreSQL session parameter, `RESET ALL`.
    pub(super) fn reset(&mut self, name: Option<&str>) -> Result<StatementResult> {
        match name {
            None => self.config.client_params.clear(),
            Some(name) if client_param(name).is_some() => {
                self.config.client_params.remove(name);
            }
            Some(name) => {
                return Err(invalid!(
                    "RESET {name}: weir's settings are changed with SET {name} = value"
                ))
            }
        }
        Ok(StatementResult::Command("RESET".into()))
    }

    fn client_param_value(&self, name: &str) -> String {
        self.config
            .client_params
            .get(name)
            .cloned()
            .or_else(|| client_param(name).map(|p| p.default.to_string()))
            .unwrap_or_default()
    }

    /// SET of a PostgreSQL session parameter: kept for SHOW when weir can honour the value.
    fn set_client_param(&mut self, name: &str, value: &str) -> Result<()> {
        let Some(param) = client_param(name) else {
            return Err(invalid!("unknown setting '{name}'"));
        };
        let value = value.trim().trim_matches('\'').to_string();
        if value.eq_ignore_ascii_case("default") {
            self.config.client_params.remove(param.name);
            return Ok(());
        }
        if let Some(check) = param.check {
            check(&value)?;
        }
        self.config
            .client_params
            .insert(param.name.to_string(), value);
        Ok(())
    }

    /// The names of weir's own settings (SET / SHOW), in SHOW ALL's order.
    pub fn setting_names(&self) -> Vec<&'static str> {
        self.settings().iter().map(|s| s.0).collect()
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
            (
                "idle_timeout",
                self.config
                    .idle_timeout
                    .map_or_else(|| "off".to_string(), format_duration),
                "default idle_timeout of sources whose table sets none: a partition silent that long stops holding the watermark back (liveness over determinism); off: never",
            ),
            (
                "runtime_mode",
                if self.config.modes.streaming { "streaming" } else { "auto" }.to_string(),
                "auto: a GROUP BY, join or Top-N without windows over bounded input gives its result once, at the end of input; streaming: it keeps the result up to date as rows arrive (an updating result with an op column: +I, -U, +U, -D), as over unbounded input",
            ),
            (
                "window_emit",
                if self.config.modes.early_fire { "on_update" } else { "on_close" }.to_string(),
                "on_close: a window aggregate emits each window's row once, when the watermark passes its end; on_update: it emits partial results as rows arrive and replaces them (-U/+U) until the window closes (an updating result)",
            ),
            (
                "early_fire_interval",
                self.config
                    .modes
                    .early_fire_interval
                    .map_or_else(|| "off".to_string(), format_duration),
                "with window_emit = 'on_update': off emits each window's changed rows after every input batch; a duration emits each row's net change that often (processing time), and a window's final row when it closes; a sink's WITH (early_fire_interval = ...) sets its own",
            ),
            (
                "mini_batch",
                self.config
                    .modes
                    .mini_batch
                    .map_or_else(|| "off".to_string(), format_duration),
                "off: an updating GROUP BY applies each input batch as it comes and emits its changed rows after every batch; a duration: it holds its input rows up to that long (processing time; also until each checkpoint, at most 100,000 rows) and applies them together, each group emitting its net change once (fewer changes, less state traffic; Flink's mini-batch); a sink's WITH (mini_batch = ...) sets its own",
            ),
            (
                "state_ttl",
                self.config
                    .modes
                    .state_ttl
                    .map_or_else(|| "off".to_string(), format_duration),
                "off: state of updating aggregates, regular joins and Top-N without windows is kept for ever (in RocksDB, beyond memory); a duration: a key not touched for that long (processing time) is dropped, which changes results (a key that comes back starts afresh); a sink's WITH (state_ttl = ...) sets its own",
            ),
            (
                "late_rows",
                self.config
                    .late_rows
                    .clone()
                    .unwrap_or_else(|| "off".to_string()),
                "late_rows of tables with a WATERMARK created from now on that set none ({table} stands for the table's name, e.g. '{table}_late'): their late rows are kept as that table; off: only counted",
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
            "idle_timeout" => {
                let off =
                    ["off", "none", "0"].contains(&value.trim().to_ascii_lowercase().as_str());
                self.config.idle_timeout = if off {
                    None
                } else {
                    Some(parse_duration(value)?)
                };
                Ok(())
            }
            "runtime_mode" => {
                let v = value.trim().trim_matches('\'').trim().to_ascii_lowercase();
                self.config.modes.streaming = match v.as_str() {
                    "streaming" => true,
                    "auto" | "default" => false,
                    _ => {
                        return Err(invalid!(
                            "runtime_mode must be 'auto' or 'streaming', got '{value}'"
                        ))
                    }
                };
                Ok(())
            }
            "window_emit" => {
                let v = value.trim().trim_matches('\'').trim().to_ascii_lowercase();
                self.config.modes.early_fire = match v.as_str() {
                    "on_update" => true,
                    "on_close" | "default" => false,
                    _ => {
                        return Err(invalid!(
                            "window_emit must be 'on_close' or 'on_update', got '{value}'"
                        ))
                    }
                };
                Ok(())
            }
            "state_ttl" => {
                self.config.modes.state_ttl = parse_state_ttl(value)?;
                Ok(())
            }
            "early_fire_interval" => {
                self.config.modes.early_fire_interval = parse_early_fire_interval(value)?;
                Ok(())
            }
            "mini_batch" => {
                self.config.modes.mini_batch = parse_mini_batch(value)?;
                Ok(())
            }
            "late_rows" => {
                let v = value.trim().trim_matches('\'').trim();
                self.config.late_rows =
                    if v.is_empty() || ["off", "none"].contains(&v.to_ascii_lowercase().as_str()) {
                        None
                    } else {
                        let example = super::ddl::late_rows_name(v, "t");
                        super::ddl::check_late_rows_name(&example)
                            .map_err(|e| invalid!("SET late_rows = '{v}': {e}"))?;
                        Some(v.to_string())
                    };
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
            other => {
                let names = self.setting_names();
                Err(invalid!(
                    "unknown setting '{other}'{} (settings: {})",
                    weir_connectors::suggest::did_you_mean(other, names.iter().copied()),
                    names.join(", ")
                ))
            }
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
            let name = name.unwrap_or_default();
            let names = self.setting_names();
            return Err(invalid!(
                "unknown setting '{name}'{} (settings: {})",
                weir_connectors::suggest::did_you_mean(name, names.iter().copied()),
                names.join(", ")
            ));
        }
        Ok(text_rows(&["name", "setting", "description"], rows))
    }
}

/// A PostgreSQL session parameter that drivers and tools set or read (`SET extra_float_digits
/// = 3`, `SHOW server_version`). weir keeps the value for SHOW; a `check` refuses values weir
/// cannot honour (it computes in UTC and speaks UTF-8).
pub(super) struct ClientParam {
    pub name: &'static str,
    pub default: &'static str,
    check: Option<fn(&str) -> Result<()>>,
}

fn read_only(_: &str) -> Result<()> {
    Err(invalid!("this parameter cannot be changed"))
}

fn utc_only(v: &str) -> Result<()> {
    match v.to_ascii_uppercase().as_str() {
        "UTC" | "GMT" | "ETC/UTC" | "Z" | "0" | "+00:00" | "+00" | "LOCAL" => Ok(()),
        _ => Err(invalid!(
            "weir computes timestamps in UTC; TimeZone '{v}' is not supported"
        )),
    }
}

fn utf8_only(v: &str) -> Result<()> {
    match v.to_ascii_uppercase().replace('-', "").as_str() {
        "UTF8" | "UNICODE" => Ok(()),
        _ => Err(invalid!(
            "weir speaks UTF8 only; client_encoding '{v}' is not supported"
        )),
    }
}

fn iso_dates(v: &str) -> Result<()> {
    if v.to_ascii_uppercase().contains("ISO") || v.eq_ignore_ascii_case("mdy") {
        Ok(())
    } else {
        Err(invalid!(
            "weir writes dates in ISO style only; DateStyle '{v}' is not supported"
        ))
    }
}

fn integer(v: &str) -> Result<()> {
    v.parse::<i64>()
        .map(|_| ())
        .map_err(|_| invalid!("expected a whole number, got '{v}'"))
}

const CLIENT_PARAMS: &[ClientParam] = &[
    ClientParam {
        name: "application_name",
        default: "",
        check: None,
    },
    ClientParam {
        name: "client_encoding",
        default: "UTF8",
        check: Some(utf8_only),
    },
    ClientParam {
        name: "datestyle",
        default: "ISO, MDY",
        check: Some(iso_dates),
    },
    ClientParam {
        name: "extra_float_digits",
        default: "1",
        check: Some(integer),
    },
    ClientParam {
        name: "intervalstyle",
        default: "postgres",
        check: None,
    },
    ClientParam {
        name: "search_path",
        default: "public",
        check: None,
    },
    ClientParam {
        name: "standard_conforming_strings",
        default: "on",
        check: None,
    },
    ClientParam {
        name: "timezone",
        default: "UTC",
        check: Some(utc_only),
    },
    ClientParam {
        name: "statement_timeout",
        default: "0",
        check: None,
    },
    ClientParam {
        name: "lock_timeout",
        default: "0",
        check: None,
    },
    ClientParam {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        check: None,
    },
    ClientParam {
        name: "client_min_messages",
        default: "notice",
        check: None,
    },
    ClientParam {
        name: "bytea_output",
        default: "hex",
        check: None,
    },
    ClientParam {
        name: "lc_messages",
        default: "C",
        check: None,
    },
    ClientParam {
        name: "lc_monetary",
        default: "C",
        check: None,
    },
    ClientParam {
        name: "lc_numeric",
        default: "C",
        check: None,
    },
    ClientParam {
        name: "lc_time",
        default: "C",
        check: None,
    },
    ClientParam {
        name: "default_transaction_isolation",
        default: "read committed",
        check: None,
    },
    ClientParam {
        name: "transaction_isolation",
        default: "read committed",
        check: None,
    },
    ClientParam {
        name: "default_transaction_read_only",
        default: "off",
        check: None,
    },
    ClientParam {
        name: "server_version",
        default: SERVER_VERSION,
        check: Some(read_only),
    },
    ClientParam {
        name: "server_version_num",
        default: "150000",
        check: Some(read_only),
    },
    ClientParam {
        name: "server_encoding",
        default: "UTF8",
        check: Some(read_only),
    },
    ClientParam {
        name: "integer_datetimes",
        default: "on",
        check: Some(read_only),
    },
    ClientParam {
        name: "max_identifier_length",
        default: "63",
        check: Some(read_only),
    },
    ClientParam {
        name: "is_superuser",
        default: "on",
        check: Some(read_only),
    },
];

/// What weir reports as `server_version`: the PostgreSQL version whose catalog queries and
/// protocol it answers (clients pick their queries by it).
pub const SERVER_VERSION: &str = "15.0 (weir)";

pub(super) fn client_param(name: &str) -> Option<&'static ClientParam> {
    CLIENT_PARAMS.iter().find(|p| p.name == name)
}
