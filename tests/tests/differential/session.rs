//! SESSION windows against DataFusion batch SQL. Which session a row joins depends on the
//! sessions that fired before it (a fired session is final), so the reference replays the
//! rule of DESIGN.md §3 naively over all rows, in the order it judges them (increasing
//! watermark before the row, then decreasing event time), and DataFusion aggregates the rows
//! that were not late per session. With a watermark bound wider than the whole input nothing
//! fires early, and the sessions are plain gaps and islands, computed by DataFusion alone.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::*;

/// One open session of the reference: `[start, end)` and the ids of its rows.
struct Open {
    start: i64,
    end: i64,
    ids: Vec<usize>,
}

/// The reference's session of each row that is not late (a number per session), and the late
/// rows (id, the watermark they missed). Rows are judged at their partition's watermark before them; a row joins the open
/// sessions of its key it overlaps or touches, or opens one unless its own window has ended.
fn assign_sessions(
    partitions: &[Vec<Row>],
    bound_ms: i64,
    gap_ms: i64,
    keyed: bool,
) -> (HashMap<usize, usize>, Vec<(usize, i64)>) {
    let mut judged: Vec<(i64, i64, &Row)> = Vec::new();
    for rows in partitions {
        let mut watermark = i64::MIN;
        for r in rows {
            judged.push((watermark, r.ts_ms, r));
            watermark = watermark.max(r.ts_ms - bound_ms);
        }
    }
    judged.sort_by_key(|&(w, t, r)| (w, std::cmp::Reverse(t), r.id));
    let mut open: HashMap<String, Vec<Open>> = HashMap::new();
    let mut fired: Vec<Vec<usize>> = Vec::new();
    let mut late = Vec::new();
    let mut fire = |open: &mut HashMap<String, Vec<Open>>, watermark: i64| {
        for sessions in open.values_mut() {
            let (done, kept): (Vec<Open>, Vec<Open>) =
                sessions.drain(..).partition(|s| s.end <= watermark);
            fired.extend(done.into_iter().map(|s| s.ids));
            *sessions = kept;
        }
    };
    for &(watermark, t, row) in &judged {
        fire(&mut open, watermark);
        let key = if keyed { row.k.clone() } else { String::new() };
        let sessions = open.entry(key).or_default();
        let (touched, rest): (Vec<Open>, Vec<Open>) = sessions
            .drain(..)
            .partition(|s| s.start <= t + gap_ms && s.end >= t);
        *sessions = rest;
        if touched.is_empty() && t + gap_ms <= watermark {
            late.push((row.id, watermark));
            continue;
        }
        let mut merged = Open {
            start: t,
            end: t + gap_ms,
            ids: vec![row.id],
        };
        for s in touched {
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
            merged.ids.extend(s.ids);
        }
        sessions.push(merged);
    }
    fire(&mut open, i64::MAX);
    let mut of_row = HashMap::new();
    for (n, ids) in fired.iter().enumerate() {
        for &id in ids {
            of_row.insert(id, n);
        }
    }
    (of_row, late)
}

/// The aggregates a session keeps as running states (weir fuses the window and the
/// aggregation, [`weir_engine::operators::SessionAggregateSpec`]); with COUNT(DISTINCT) in
/// [`AGGREGATES`] the session window holds the rows for a window aggregate instead.
const MERGEABLE: &str = "count(*), count(v), sum(v), min(v), max(v), avg(v)";

/// The aggregates of a seed's query: both plans, in turns of four seeds (each gap gets both).
fn aggregates_of(seed: u64) -> &'static str {
    if (seed / 4).is_multiple_of(2) {
        AGGREGATES
    } else {
        MERGEABLE
    }
}

/// Aggregates per session over `sessions.csv` (the rows that were not late, with their
/// session number), as weir groups a SESSION window: bounds `[min(ts), max(ts) + gap)`.
fn session_reference_sql(gap_ms: i64, keyed: bool, aggregates: &str) -> String {
    let key = if keyed { "k" } else { "'' AS k" };
    format!(
        "SELECT min(ts), max(ts) + INTERVAL '{gap_ms} milliseconds', {key}, {aggregates}
         FROM ref GROUP BY sid{}",
        if keyed { ", k" } else { "" }
    )
}

fn session_weir_sql(gap_ms: i64, keyed: bool, aggregates: &str) -> String {
    let (key, tvf_key) = if keyed { ("k", ", k") } else { ("'' AS k", "") };
    format!(
        "SELECT window_start, window_end, {key}, {aggregates}
         FROM SESSION(t, ts, INTERVAL '{gap_ms}' MILLISECOND{tvf_key})
         GROUP BY window_start, window_end{}",
        if keyed { ", k" } else { "" }
    )
}

/// Writes the rows that were not late with their session number, read as `ref` by
/// [`batch_reference`] (with `sid` in the `wprev` column's place: a number, not a time).
fn write_sessions(dir: &str, partitions: &[Vec<Row>], of_row: &HashMap<usize, usize>) -> String {
    let mut text = String::from("id,k,v,ts,sid\n");
    for r in partitions.iter().flatten() {
        if let Some(sid) = of_row.get(&r.id) {
            let v = r.v.map(|v| v.to_string()).unwrap_or_default();
            writeln!(text, "{},{},{},{},{sid}", r.id, r.k, v, ts_text(r.ts_ms)).unwrap();
        }
    }
    let path = format!("{dir}/../sessions.csv");
    std::fs::write(&path, text).unwrap();
    path
}

/// DataFusion over `path` (the rows' columns and `sid`), rows sorted.
fn session_batch(path: &str, sql: &str) -> Vec<Vec<String>> {
    batch_sql(
        &[("ref", path)],
        Field::new("sid", DataType::Int64, false),
        sql,
    )
}

#[test]
fn session_matches_replayed_sessions_aggregated_by_batch_sql() {
    for seed in 400..412 {
        let gap_ms = [20, 150, 400, 1500][seed as usize % 4];
        let keyed = seed % 3 != 0;
        check_against(
            seed,
            None,
            &session_weir_sql(gap_ms, keyed, aggregates_of(seed)),
            |partitions, ref_dir, bound_ms| {
                let (of_row, late) = assign_sessions(partitions, bound_ms, gap_ms, keyed);
                let path = write_sessions(ref_dir, partitions, &of_row);
                (
                    session_batch(
                        &path,
                        &session_reference_sql(gap_ms, keyed, aggregates_of(seed)),
                    ),
                    late_text(late),
                )
            },
        );
    }
}

/// With a watermark bound wider than the input, no session fires before the end and nothing
/// is late: the sessions are the gaps and islands of each key's rows, by DataFusion alone.
#[test]
fn session_without_early_firing_is_gaps_and_islands() {
    for seed in 420..426 {
        let gap_ms = [30, 200, 700][seed as usize % 3];
        let gap_ns = gap_ms * 1_000_000;
        let islands = format!(
            "SELECT min(ts), max(ts) + INTERVAL '{gap_ms} milliseconds', k, {} FROM (
               SELECT *, sum(CASE WHEN prev IS NULL OR CAST(ts AS BIGINT) - CAST(prev AS BIGINT) > {gap_ns}
                                  THEN 1 ELSE 0 END)
                 OVER (PARTITION BY k ORDER BY ts, id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid
               FROM (SELECT *, lag(ts) OVER (PARTITION BY k ORDER BY ts, id) AS prev FROM ref) r) s
             GROUP BY k, sid",
            aggregates_of(seed)
        );
        // A day: wider than any input (a few minutes of event time).
        let day_ms = 86_400_000;
        check_against(
            seed,
            Some(day_ms),
            &session_weir_sql(gap_ms, true, aggregates_of(seed)),
            |_, ref_dir, _| (batch_reference(ref_dir, &islands), Vec::new()),
        );
    }
}
