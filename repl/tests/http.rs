//! `--http`: Prometheus metrics scraped while a job runs (parsed with a Prometheus text-format
//! parser), the JSON API, the password, and the dashboard driven by headless Chromium through
//! chromedriver (WebDriver).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// One HTTP/1.1 exchange: status and body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    auth: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    if let Some(user_password) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(user_password);
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    // Read the head, then the body by its length: chromedriver keeps the connection open
    // whatever the request asks, so reading to the end would wait for its timeout.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let body = if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        let mut buf = vec![0; n];
        reader.read_exact(&mut buf).unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = String::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        body
    } else {
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        rest
    };
    (status, body)
}

/// A `weir` process with `--http` on a free port, running `script` (its jobs run until the
/// process is stopped). Returns it and the HTTP address.
fn start_weir(dir: &Path, script: &str, extra: &[&str]) -> (Child, String) {
    let path = dir.join("script.sql");
    std::fs::write(&path, script).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--http", "127.0.0.1:0", "-f"])
        .arg(&path)
        .args(extra)
        .current_dir(workspace())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let addr = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("weir ended before serving HTTP: {seen}");
        }
        seen.push_str(&line);
        if let Some(rest) = line.trim().strip_prefix("dashboard and metrics at http://") {
            break rest.trim_end_matches('/').to_string();
        }
    };
    // Keep draining stderr, so the process never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stderr.read_to_string(&mut sink);
    });
    (child, addr)
}

fn stop(mut child: Child) {
    // SIGTERM: the jobs stop with a final checkpoint and the process ends.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("weir did not end after SIGTERM");
}

/// Bids from the generator at a steady rate, windowed per second, into a CSV sink: a job with
/// a source, a keyed exchange, an aggregation and a sink, checkpointed every 200 ms.
fn job_script(out: &Path) -> String {
    format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, \
         url VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
         WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) \
         WITH (connector = 'nexmark', stream = 'bid', rate = '5000');\n\
         SET checkpoint_interval = '200ms';\n\
         CREATE SINK per_second WITH (connector = 'file', path = '{}', format = 'csv') AS \
         SELECT window_start, auction, count(*) AS bids FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) \
         GROUP BY window_start, auction;\n",
        out.display()
    )
}

fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let (status, body) = http(addr, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("not Prometheus text format: {e}\n{body}"))
}

fn value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(*v),
            _ => None,
        })
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn metrics_are_scraped_while_a_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = start_weir(dir.path(), &job_script(&dir.path().join("out")), &[]);
    let job = [("job", "per_second")];
    // Checkpoints complete and the watermark moves.
    wait_for("two checkpoints", Duration::from_secs(60), || {
        value(&scrape(&addr), "weir_checkpoints_completed_total", &job).unwrap_or(0.0) >= 2.0
    });
    let first = scrape(&addr);
    let rows_before = value(&first, "weir_job_rows_in_total", &job).expect("rows in");
    let wm_before = value(&first, "weir_job_watermark_seconds", &job).expect("watermark");
    wait_for(
        "more rows and a later watermark",
        Duration::from_secs(60),
        || {
            let s = scrape(&addr);
            value(&s, "weir_job_rows_in_total", &job).unwrap_or(0.0) > rows_before
                && value(&s, "weir_job_watermark_seconds", &job).unwrap_or(0.0) > wm_before
        },
    );
    let s = scrape(&addr);
    assert_eq!(value(&s, "weir_job_running", &job), Some(1.0));
    // The checkpoint-duration histogram: buckets, a count, a sum.
    let histogram = s
        .samples
        .iter()
        .find(|x| x.metric == "weir_checkpoint_duration_seconds")
        .expect("checkpoint histogram");
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert!(buckets.len() >= 10, "{buckets:?}");
            assert!(buckets.iter().any(|b| b.count >= 1.0), "{buckets:?}");
            assert!(
                buckets.windows(2).all(|w| w[0].count <= w[1].count),
                "buckets are cumulative: {buckets:?}"
            );
        }
        other => panic!("not a histogram: {other:?}"),
    }
    let count = value(&s, "weir_checkpoint_duration_seconds_count", &job).expect("_count");
    assert!(count >= 2.0, "{count}");
    assert!(value(&s, "weir_checkpoint_duration_seconds_sum", &job).expect("_sum") > 0.0);
    // Lags: the watermark trails the newest event by about the declared second.
    let lag = value(
        &s,
        "weir_job_watermark_lag_seconds",
        &[("job", "per_second"), ("behind", "event_time")],
    )
    .expect("lag behind events");
    assert!((0.0..30.0).contains(&lag), "{lag}");
    assert!(value(&s, "weir_job_state_bytes", &job).expect("state bytes") > 0.0);
    // Per stage: every stage of the job, the source's rows counted as it read them.
    let stages: Vec<&prometheus_parse::Sample> = s
        .samples
        .iter()
        .filter(|x| {
            x.metric == "weir_stage_rows_in_total" && x.labels.get("job") == Some("per_second")
        })
        .collect();
    assert!(stages.len() >= 2, "{stages:?}");
    assert!(
        stages
            .iter()
            .all(|x| matches!(x.value, prometheus_parse::Value::Counter(v) if v > 0.0)),
        "every stage took rows in: {stages:?}"
    );
    assert!(value(&s, "weir_stage_queue_capacity", &job).is_some());

    // The JSON API says the same.
    let (status, body) = http(&addr, "GET", "/api/jobs", None, None);
    assert_eq!(status, 200);
    let jobs: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(jobs["jobs"][0]["name"], "per_second");
    assert_eq!(jobs["jobs"][0]["state"], "running");
    let (status, body) = http(&addr, "GET", "/api/jobs/per_second", None, None);
    assert_eq!(status, 200);
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["stages"].as_array().unwrap().len(), stages.len());
    assert!(detail["statement"]
        .as_str()
        .unwrap()
        .contains("CREATE SINK per_second"));
    assert!(!detail["checkpoints"].as_array().unwrap().is_empty());
    assert_eq!(http(&addr, "GET", "/api/jobs/nope", None, None).0, 404);
    assert_eq!(http(&addr, "GET", "/nothing", None, None).0, 404);
    let (status, page) = http(&addr, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/app.js\">"), "{page}");
    stop(child);
}

#[test]
fn with_a_password_every_page_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--password",
            "s3cret",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir serve");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "weir serve ended");
        if let Some(rest) = line.trim().strip_prefix("dashboard and metrics at http://") {
            break rest.trim_end_matches('/').to_string();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stderr.read_to_string(&mut sink);
    });
    for path in ["/", "/metrics", "/api/jobs"] {
        assert_eq!(http(&addr, "GET", path, None, None).0, 401, "{path}");
        assert_eq!(
            http(&addr, "GET", path, None, Some("any:wrong")).0,
            401,
            "{path}"
        );
        assert_eq!(
            http(&addr, "GET", path, None, Some("any:s3cret")).0,
            200,
            "{path}"
        );
    }
    stop(child);
}

/// A free loopback port (closed again at once; chromedriver binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Driver {
    process: Child,
    addr: String,
    session: String,
}

impl Driver {
    fn start() -> Driver {
        let port = free_port();
        let process = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; scripts/setup.sh --tests installs it)");
        let addr = format!("127.0.0.1:{port}");
        wait_for("chromedriver", Duration::from_secs(30), || {
            TcpStream::connect(&addr).is_ok()
        });
        let (status, body) = http(
            &addr,
            "POST",
            "/session",
            Some(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": "/usr/bin/chromium",
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1400,1000"]
                }
            }}})),
            None,
        );
        assert_eq!(status, 200, "new WebDriver session: {body}");
        let reply: Value = serde_json::from_str(&body).unwrap();
        let session = reply["value"]["sessionId"]
            .as_str()
            .expect("session id")
            .to_string();
        Driver {
            process,
            addr,
            session,
        }
    }

    fn call(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        let (status, reply) = http(&self.addr, method, &path, body.as_ref(), None);
        assert_eq!(status, 200, "{method} {path}: {reply}");
        serde_json::from_str::<Value>(&reply).unwrap()["value"].clone()
    }

    /// Runs `script` in the page and returns what it returns.
    fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = http(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
            None,
        );
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[test]
fn the_dashboard_in_a_headless_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = start_weir(dir.path(), &job_script(&dir.path().join("out")), &[]);
    wait_for("a checkpoint", Duration::from_secs(60), || {
        value(
            &scrape(&addr),
            "weir_checkpoints_completed_total",
            &[("job", "per_second")],
        )
        .unwrap_or(0.0)
            >= 1.0
    });
    let driver = Driver::start();
    driver.call(
        "POST",
        "url",
        Some(json!({"url": format!("http://{addr}/")})),
    );
    // The job list shows the job, and the detail its dataflow.
    wait_for("the job in the list", Duration::from_secs(30), || {
        driver.eval(
            "return document.querySelectorAll('#jobs tbody tr[data-job=\"per_second\"]').length",
        ) == json!(1)
    });
    let (_, body) = http(&addr, "GET", "/api/jobs/per_second", None, None);
    let stages = serde_json::from_str::<Value>(&body).unwrap()["stages"]
        .as_array()
        .unwrap()
        .len();
    wait_for("the graph's stages", Duration::from_secs(30), || {
        driver.eval("return document.querySelectorAll('#graph g.stage').length") == json!(stages)
    });
    assert_eq!(
        driver.eval("return document.querySelector('#jobs tbody tr td.state-running') !== null"),
        json!(true)
    );
    // rows/s is a number once two polls happened, and it changes as rows keep coming.
    let rate = || driver.eval("return document.getElementById('rate-in').textContent");
    wait_for("a rate", Duration::from_secs(30), || {
        rate()
            .as_str()
            .is_some_and(|t| t != "–" && t.chars().any(|c| c.is_ascii_digit()))
    });
    let polls = || {
        driver
            .eval("return Number(document.getElementById('status').dataset.polls || 0)")
            .as_f64()
            .unwrap_or(0.0)
    };
    // A rate is the difference of the counters between two polls: still above zero two
    // polls later means the page read new, higher counters (the source's steady rate may
    // show the same text each time, so the text itself need not change).
    let positive = |text: &Value| {
        text.as_str()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .is_some_and(|n| n > 0.0)
    };
    let before = polls();
    wait_for("the rate to update", Duration::from_secs(30), || {
        polls() >= before + 2.0 && positive(&rate())
    });
    // The checkpoint chart has a bar per checkpoint.
    assert!(
        driver
            .eval("return document.querySelectorAll('#checkpoint-chart rect.bar').length")
            .as_u64()
            .unwrap()
            >= 1
    );
    let png = driver.call("GET", "screenshot", None);
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&shot, &png).unwrap();
    if std::env::var_os("WEIR_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(workspace().join("docs/dashboard.png"), &png).unwrap();
    }
    drop(driver);
    stop(child);
}
