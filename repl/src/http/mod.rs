//! The HTTP side of a weir process (`weir serve --http ADDR`, the REPL's `--http ADDR`):
//! Prometheus metrics at `/metrics`, a JSON API under `/api/`, and a dashboard at `/` whose
//! assets are compiled into the binary (no CDN: it works on a machine without internet).
//!
//! Everything is read from the jobs on each request ([`JobObserver`]); nothing is counted
//! twice. With a password (the wire endpoint's), every request needs HTTP Basic
//! authentication with it (any user name).

mod api;
mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};
use weir_planner::JobObserver;

/// Threads answering requests (a scrape and a dashboard poll at once).
const WORKERS: usize = 2;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// A running HTTP endpoint; it serves until the process ends.
pub struct HttpServer {
    pub addr: SocketAddr,
}

/// Starts serving on `listen` (port 0: any free port; the bound address comes back).
pub fn start(
    listen: SocketAddr,
    observer: JobObserver,
    password: Option<String>,
) -> anyhow::Result<HttpServer> {
    let server =
        Server::http(listen).map_err(|e| anyhow::anyhow!("cannot serve HTTP on {listen}: {e}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow::anyhow!("HTTP endpoint {listen} is not an IP address"))?;
    let server = Arc::new(server);
    let site = Arc::new(Site { observer, password });
    for i in 0..WORKERS {
        let server = Arc::clone(&server);
        let site = Arc::clone(&site);
        std::thread::Builder::new()
            .name(format!("weir-http-{i}"))
            .spawn(move || {
                for request in server.incoming_requests() {
                    site.answer(request);
                }
            })
            .map_err(|e| anyhow::anyhow!("cannot start the HTTP threads: {e}"))?;
    }
    Ok(HttpServer { addr })
}

struct Site {
    observer: JobObserver,
    password: Option<String>,
}

impl Site {
    fn answer(&self, request: Request) {
        let response = if !self.authorized(&request) {
            Response::from_string("authentication required\n")
                .with_status_code(StatusCode(401))
                .with_header(header("WWW-Authenticate", "Basic realm=\"weir\""))
        } else if request.method() != &Method::Get && request.method() != &Method::Head {
            text(405, "only GET\n")
        } else {
            self.route(request.url())
        };
        // A client that went away is no error of ours.
        let _ = request.respond(response);
    }

    fn authorized(&self, request: &Request) -> bool {
        let Some(password) = &self.password else {
            return true;
        };
        request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Authorization"))
            .and_then(|h| h.value.as_str().strip_prefix("Basic "))
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .and_then(|raw| String::from_utf8(raw).ok())
            .and_then(|pair| pair.split_once(':').map(|(_, p)| p.to_string()))
            .is_some_and(|given| constant_time_eq(given.as_bytes(), password.as_bytes()))
    }

    fn route(&self, url: &str) -> Response<std::io::Cursor<Vec<u8>>> {
        let path = url.split('?').next().unwrap_or(url);
        match path {
            "/" | "/index.html" => asset(INDEX_HTML, "text/html; charset=utf-8"),
            "/app.js" => asset(APP_JS, "text/javascript; charset=utf-8"),
            "/style.css" => asset(STYLE_CSS, "text/css; charset=utf-8"),
            "/metrics" => Response::from_string(metrics::render(&self.observer.jobs()))
                .with_header(header("Content-Type", "text/plain; version=0.0.4")),
            "/api/jobs" => json(&api::jobs(&self.observer)),
            _ => match path.strip_prefix("/api/jobs/") {
                Some(name) => match api::job(&self.observer, &percent_decode(name)) {
                    Some(job) => json(&job),
                    None => text(404, "no such job\n"),
                },
                None => text(404, "not found\n"),
            },
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid static header")
}

fn asset(body: &str, content_type: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body).with_header(header("Content-Type", content_type))
}

fn text(status: u16, body: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body).with_status_code(StatusCode(status))
}

fn json(value: &serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(value.to_string())
        .with_header(header("Content-Type", "application/json"))
        .with_header(header("Cache-Control", "no-store"))
}

/// `%xx` escapes of a path segment (job names are identifiers, but a browser may escape).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Compares without an early exit, so the time taken does not tell how much matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_are_decoded() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("plain_name"), "plain_name");
        assert_eq!(percent_decode("bad%2"), "bad%2");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn passwords_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
    }
}
