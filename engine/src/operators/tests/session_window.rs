//! SessionWindowOperator through the harness: sessions per key against a naive replay of the
//! rule (DESIGN.md §3), at parallelism 1 and 3, and restores at other parallelisms and spills
//! against an uninterrupted run.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::{col, run, ts, Steps};
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::harness::{int_rows, Harness, OperatorUnderTest, Rng};
use crate::operators::SessionWindowSpec;
use crate::window::WINDOW_TIME_BEFORE_END;

const GAP: i64 = 10;

/// `(id, key, event time, watermark before the row)`.
type Row = (i64, i64, EventTime, EventTime);

/// The reference's open sessions by key: `(start, end, rows)`.
type OpenSessions = BTreeMap<i64, Vec<(i64, i64, Vec<Row>)>>;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
        Field::new("window_start", ts(), false),
        Field::new("window_end", ts(), false),
        Field::new("window_time", ts(), false),
    ]))
}

/// Rows as the source's assigner passes them: `W_r` in `window_start`, the row's own window
/// end in `window_end`.
fn batch(rows: &[Row]) -> RecordBatch {
    let int = |f: fn(&Row) -> i64| Int64Array::from_iter_values(rows.iter().map(f));
    let time =
        |f: &dyn Fn(&Row) -> i64| TimestampNanosecondArray::from_iter_values(rows.iter().map(f));
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(int(|r| r.0)),
            Arc::new(int(|r| r.1)),
            Arc::new(time(&|r| r.3)),
            Arc::new(time(&|r| r.2 + GAP)),
            Arc::new(time(&|r| r.2 + GAP - WINDOW_TIME_BEFORE_END)),
        ],
    )
    .unwrap()
}

pub(super) fn session_spec(keyed: bool) -> SessionWindowSpec {
    SessionWindowSpec {
        input_schema: input_schema(),
        gap: GAP,
        keys: if keyed { vec![col("k", 1)] } else { vec![] },
        window_start: 2,
        window_end: 3,
        window_time: 4,
        keep_late: false,
        description: String::new(),
    }
}

fn session(keyed: bool) -> OperatorUnderTest {
    let spec = session_spec(keyed);
    let routing = if keyed {
        Partitioning::Hash(vec![col("k", 1)])
    } else {
        Partitioning::Single
    };
    OperatorUnderTest::new(spec, vec![routing])
}

/// Rows out of order (up to 45 behind the newest) over ~300 time units and 4 keys (sessions
/// both merge and split), in batches of 1 to 20, the watermark trailing the newest time by up
/// to 15.
pub(super) fn events(seed: u64) -> Steps<Row> {
    let mut rng = Rng::new(seed);
    let (mut t, mut id, mut watermark) = (0, 0, EventTime::MIN);
    let mut steps = Vec::new();
    while t < 300 {
        let rows: Vec<Row> = (0..1 + rng.below(20))
            .map(|_| {
                t += rng.below(4) as i64;
                id += 1;
                (id, rng.below(4) as i64, t - rng.below(45) as i64, watermark)
            })
            .collect();
        watermark = watermark.max(t - rng.below(15) as i64);
        steps.push((rows, watermark));
    }
    Steps { steps }
}

/// The sessions by a naive replay: rows by (watermark before them, latest first); sessions
/// ending by a row's watermark fire before it; a row joins the open sessions of its key it
/// overlaps or touches, else opens one unless its own window has ended. Rows come out with
/// their session's bounds; also the late count.
pub(super) fn expected(steps: &Steps<Row>, keyed: bool) -> (Vec<Vec<Option<i64>>>, u64) {
    let mut rows: Vec<Row> = steps.steps.iter().flat_map(|(r, _)| r.clone()).collect();
    rows.sort_by_key(|r| (r.3, std::cmp::Reverse(r.2), r.0));
    let mut open = OpenSessions::new();
    let mut out = Vec::new();
    let mut late = 0;
    let fire = |open: &mut OpenSessions, out: &mut Vec<Vec<Option<i64>>>, watermark: EventTime| {
        for sessions in open.values_mut() {
            sessions.retain(|(s, e, members)| {
                if *e > watermark {
                    return true;
                }
                for r in members {
                    let end = *e;
                    out.push(vec![
                        Some(r.0),
                        Some(r.1),
                        Some(*s),
                        Some(end),
                        Some(end - WINDOW_TIME_BEFORE_END),
                    ]);
                }
                false
            });
        }
    };
    for row in rows {
        fire(&mut open, &mut out, row.3);
        let sessions = open.entry(if keyed { row.1 } else { 0 }).or_default();
        let (touched, rest): (Vec<_>, Vec<_>) = sessions
            .drain(..)
            .partition(|(s, e, _)| *s <= row.2 + GAP && *e >= row.2);
        *sessions = rest;
        if touched.is_empty() && row.2 + GAP <= row.3 {
            late += 1;
            continue;
        }
        let mut merged = (row.2, row.2 + GAP, vec![row]);
        for (s, e, members) in touched {
            merged.0 = merged.0.min(s);
            merged.1 = merged.1.max(e);
            merged.2.extend(members);
        }
        sessions.push(merged);
    }
    fire(&mut open, &mut out, EventTime::MAX);
    out.sort();
    (out, late)
}

pub(super) fn feed(h: &mut Harness, rows: &[Row]) {
    h.batch(0, batch(rows)).unwrap();
}

#[test]
fn sessions_match_a_naive_replay_of_the_rule() {
    for keyed in [true, false] {
        let steps = events(5);
        let (want, want_late) = expected(&steps, keyed);
        assert!(want_late > 0, "the input has late rows");
        for parallelism in [1, 3] {
            let (out, late) = run(&session(keyed), &steps, parallelism, &[], feed);
            assert_eq!(
                int_rows(&out),
                want,
                "keyed {keyed}, parallelism {parallelism}"
            );
            assert_eq!(late, want_late, "keyed {keyed}, parallelism {parallelism}");
        }
    }
}

#[test]
fn restores_and_spills_give_the_output_of_an_uninterrupted_run() {
    for keyed in [true, false] {
        let steps = events(11);
        let (want, want_late) = expected(&steps, keyed);
        let third = steps.len() / 3;
        for (op, restarts) in [
            (session(keyed), vec![(third, 3), (2 * third, 1)]),
            (session(keyed).with_memory_budget(1), vec![]),
            (
                session(keyed).with_memory_budget(1),
                vec![(third, 1), (2 * third, 3)],
            ),
        ] {
            let (out, late) = run(&op, &steps, 2, &restarts, feed);
            assert_eq!(int_rows(&out), want, "keyed {keyed}, restarts {restarts:?}");
            assert_eq!(late, want_late, "keyed {keyed}, restarts {restarts:?}");
        }
    }
}
