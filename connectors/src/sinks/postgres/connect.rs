//! Connections to the sink's server, with time limits: none of weir's statements (CREATE
//! SINK checks the target) or jobs waits forever for a server that does not answer.
//!
//! - `connect_timeout` (default 10 s): the TCP connect, and first an answer to an SSLRequest
//!   (a server that accepts connections and never speaks, or a port held by something that
//!   is not PostgreSQL, is refused in this time instead of hanging the startup handshake,
//!   which the driver does not time out).
//! - `statement_timeout` (default 60 s): the server's `statement_timeout` for the session, and
//!   the TCP user timeout (data the server does not acknowledge for this long breaks the
//!   connection); keepalives find a vanished host while a connection idles.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use postgres::config::Host;
use postgres::{Client, Config, NoTls};
use weir_engine::{EngineError, Result as EngineResult};

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The time limits of a sink's connections.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub statement: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: DEFAULT_CONNECT_TIMEOUT,
            statement: DEFAULT_STATEMENT_TIMEOUT,
        }
    }
}

/// Connects to `url` (a URL or a key=value conninfo) within the time limits; `failed` turns
/// a driver error into the sink's error, `refused` names what did not answer.
pub fn connect(
    url: &str,
    timeouts: Timeouts,
    failed: impl Fn(postgres::Error) -> EngineError,
    refused: impl Fn(String) -> EngineError,
) -> EngineResult<Client> {
    let mut config: Config = url.parse().map_err(&failed)?;
    let statement_ms = timeouts.statement.as_millis().max(1);
    let options = format!(
        "{} -c statement_timeout={statement_ms}",
        config.get_options().unwrap_or_default()
    );
    config
        .connect_timeout(timeouts.connect)
        .tcp_user_timeout(timeouts.statement)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3)
        .options(options.trim());
    probe(&config, timeouts.connect).map_err(refused)?;
    config.connect(NoTls).map_err(failed)
}

/// Asks every TCP host of `config` whether it speaks PostgreSQL (an SSLRequest, answered at
/// once with one byte by any server); `Ok` when one did.
fn probe(config: &Config, timeout: Duration) -> Result<(), String> {
    let ports = config.get_ports();
    let mut errors = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        let Host::Tcp(name) = host else {
            return Ok(()); // a Unix socket: local, the driver's connect is enough
        };
        let port = match ports {
            [] => 5432,
            [one] => *one,
            many => many.get(i).copied().unwrap_or(5432),
        };
        match probe_one(name, port, timeout) {
            Ok(()) => return Ok(()),
            Err(e) => errors.push(format!("{name}:{port}: {e}")),
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(errors.join("; "))
}

fn probe_one(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .collect();
    let mut last = String::from("the name resolves to no address");
    for addr in addrs {
        let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let io = |e: std::io::Error| e.to_string();
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        // SSLRequest: length 8, code 1234.5679.
        stream
            .write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
            .map_err(io)?;
        let mut answer = [0u8; 1];
        return match stream.read(&mut answer) {
            Ok(1) => Ok(()),
            Ok(_) => Err("the server closed the connection without answering".into()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(format!(
                    "no answer within {} s (connect_timeout): is it a PostgreSQL server?",
                    timeout.as_secs_f64()
                ))
            }
            Err(e) => Err(e.to_string()),
        };
    }
    Err(last)
}
