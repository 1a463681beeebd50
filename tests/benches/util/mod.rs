//! Helpers shared by the benchmarks.

#![allow(dead_code)]

/// The allocator of the `weir` binary, so benchmarks measure what users run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The `weir` binary: `WEIR_BIN`, or the one of this build (`target/release/weir`).
pub fn weir_binary() -> std::path::PathBuf {
    if let Some(bin) = std::env::var_os("WEIR_BIN") {
        return std::path::PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("bench executable path");
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target directory")
        .join("weir");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release --workspace` first",
        bin.display()
    );
    bin
}

/// A number from the environment, or the default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median (upper middle for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs one statement; a failure ends the benchmark with the statement and the error.
pub fn run(session: &mut weir_planner::Session, sql: &str) {
    session
        .execute(&weir_planner::sql::StatementText {
            text: sql.to_string(),
            line: 1,
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Milliseconds since the epoch of a `YYYY-MM-DD HH:MM:SS[.fff]` value (UTC).
pub fn parse_ms(text: &str) -> Option<i64> {
    let dt = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(dt.and_utc().timestamp_millis())
}

/// The `p` quantile (nearest rank) of `v`.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One setting of a latency chart.
pub struct ChartRow {
    pub label: String,
    pub p50: f64,
    pub p99: f64,
    pub samples: usize,
    /// Throughput relative to a baseline (right axis).
    pub ratio: f64,
}

impl ChartRow {
    /// A row from latency samples (ms) and a throughput ratio.
    pub fn new(label: &str, latencies: &[f64], ratio: f64) -> Self {
        Self {
            label: label.to_string(),
            p50: percentile(latencies, 0.5),
            p99: percentile(latencies, 0.99),
            samples: latencies.len(),
            ratio,
        }
    }
}

/// Prints `rows` as a table; `samples` names what was counted.
pub fn print_chart_rows(rows: &[ChartRow], samples: &str) {
    println!(
        "{:<12} {:>10} {:>10} {:>9} {:>18}",
        "setting", "p50 ms", "p99 ms", samples, "throughput ratio"
    );
    for r in rows {
        println!(
            "{:<12} {:>10.0} {:>10.0} {:>9} {:>17.2}x",
            r.label, r.p50, r.p99, r.samples, r.ratio
        );
    }
}

/// A small SVG chart: latency p50 and p99 (log scale, left) and throughput ratio (right)
/// per setting.
pub fn latency_chart(title: &str, ratio_label: &str, rows: &[ChartRow]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 80.0, 80.0, 40.0, 70.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let max_ms = rows.iter().map(|r| r.p99).fold(10.0, f64::max) * 1.5;
    let y_ms = |ms: f64| top + plot_h * (1.0 - (ms.max(1.0).log10() / max_ms.log10()));
    let lo = rows.iter().map(|r| r.ratio).fold(0.8, f64::min);
    let lo = ((lo - 0.05) * 10.0).floor() / 10.0;
    let hi = rows.iter().map(|r| r.ratio).fold(1.2, f64::max);
    let hi = ((hi + 0.05) * 10.0).ceil() / 10.0;
    let y_ratio = |r: f64| top + plot_h * (1.0 - (r - lo) / (hi - lo));
    let x = |i: usize| left + plot_w * (i as f64 + 0.5) / rows.len() as f64;
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='{}' y='20' text-anchor='middle' font-size='14'>{title}</text>\n\
         <line x1='{left}' y1='{top}' x2='{left}' y2='{}' stroke='black'/>\n\
         <line x1='{left}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n\
         <line x1='{}' y1='{top}' x2='{}' y2='{}' stroke='black'/>\n",
        w / 2.0,
        top + plot_h,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        left + plot_w,
        left + plot_w,
        top + plot_h
    );
    let mut ms = 1.0;
    while ms <= max_ms {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='end'>{ms} ms</text>\n<line x1='{left}' y1='{1}' x2='{}' y2='{1}' stroke='#ddd'/>\n",
            left - 6.0,
            y_ms(ms),
            left + plot_w
        ));
        ms *= 10.0;
    }
    let step = if hi - lo > 1.0 { 0.2 } else { 0.1 };
    let mut r = lo;
    while r <= hi + 1e-9 {
        out.push_str(&format!(
            "<text x='{}' y='{}'>{r:.1}x</text>\n",
            left + plot_w + 6.0,
            y_ratio(r)
        ));
        r += step;
    }
    for (series, color, f) in [
        (
            "latency p50",
            "#1f77b4",
            (|r: &ChartRow| r.p50) as fn(&ChartRow) -> f64,
        ),
        ("latency p99", "#d62728", |r: &ChartRow| r.p99),
    ] {
        let points: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{:.1},{:.1}", x(i), y_ms(f(r))))
            .collect();
        out.push_str(&format!(
            "<polyline points='{}' fill='none' stroke='{color}' stroke-width='2'/>\n",
            points.join(" ")
        ));
        for p in &points {
            let (px, py) = p.split_once(',').unwrap();
            out.push_str(&format!(
                "<circle cx='{px}' cy='{py}' r='4' fill='{color}'/>\n"
            ));
        }
        let ly = if series.ends_with("p50") {
            h - 30.0
        } else {
            h - 14.0
        };
        out.push_str(&format!(
            "<line x1='{left}' y1='{ly}' x2='{}' y2='{ly}' stroke='{color}' stroke-width='2'/><text x='{}' y='{}'>{series} (left)</text>\n",
            left + 24.0,
            left + 30.0,
            ly + 4.0
        ));
    }
    let points: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{:.1},{:.1}", x(i), y_ratio(r.ratio)))
        .collect();
    out.push_str(&format!(
        "<polyline points='{}' fill='none' stroke='#2ca02c' stroke-width='2' stroke-dasharray='6 4'/>\n\
         <line x1='{}' y1='{}' x2='{}' y2='{1}' stroke='#2ca02c' stroke-width='2' stroke-dasharray='6 4'/><text x='{}' y='{}'>{ratio_label} (right)</text>\n",
        points.join(" "),
        left + 260.0,
        h - 30.0,
        left + 284.0,
        left + 290.0,
        h - 26.0
    ));
    for (i, r) in rows.iter().enumerate() {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
            x(i),
            top + plot_h + 18.0,
            r.label
        ));
    }
    out.push_str("</svg>\n");
    out
}
