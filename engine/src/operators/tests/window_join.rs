//! WindowJoin through the harness: inner and left joins of random windowed streams against a
//! nested-loop join, across restores at other parallelisms and spills.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::{col, run, ts, Steps};
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::harness::{int_rows, Harness, OperatorUnderTest, Rng};
use crate::operators::windowed::{WindowBound, WindowColumn};
use crate::operators::{JoinKind, JoinSide, WindowJoinSpec};

const SIZE: i64 = 10;

/// `(side, key, value, window end)`: side 0 is the left input.
type Row = (usize, i64, i64, EventTime);

fn side_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
        Field::new("window_end", ts(), false),
    ]))
}

fn batch(rows: &[&Row]) -> RecordBatch {
    RecordBatch::try_new(
        side_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .unwrap()
}

/// `l JOIN r ON l.k = r.k AND l.window_end = r.window_end`, both inputs routed by those keys.
fn join(kind: JoinKind) -> OperatorUnderTest {
    let keys = vec![col("k", 0), col("window_end", 2)];
    let side = JoinSide {
        schema: side_schema(),
        keys: keys.clone(),
        window: Some(WindowColumn::new(2, WindowBound::end(SIZE))),
    };
    let nullable = |f: &Arc<Field>| f.as_ref().clone().with_nullable(true);
    let both: Vec<Field> = side_schema()
        .fields()
        .iter()
        .chain(side_schema().fields().iter())
        .map(nullable)
        .collect();
    let both = Arc::new(Schema::new(both));
    let spec = WindowJoinSpec {
        kind,
        left: side.clone(),
        right: side,
        filter: None,
        joined_schema: Arc::clone(&both),
        output_schema: both,
        description: String::new(),
    };
    let route = Partitioning::Hash(keys);
    OperatorUnderTest::new(spec, vec![route.clone(), route])
}

fn feed(h: &mut Harness, rows: &[Row]) {
    for side in [0, 1] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == side).collect();
        if !mine.is_empty() {
            h.batch(side, batch(&mine)).unwrap();
        }
    }
}

/// Both sides a little out of order over ~15 windows and 5 keys; some rows late.
fn events(seed: u64) -> Steps<Row> {
    let mut rng = Rng::new(seed);
    let mut t = 0;
    let mut steps = Vec::new();
    while t < 150 {
        let rows: Vec<Row> = (0..1 + rng.below(12))
            .map(|_| {
                t += rng.below(2) as i64;
                let at = t - rng.below(8) as i64;
                let end = (at.div_euclid(SIZE) + 1) * SIZE;
                let side = rng.below(2) as usize;
                (side, rng.below(5) as i64, rng.below(1000) as i64, end)
            })
            .collect();
        steps.push((rows, t - rng.below(10) as i64));
    }
    Steps { steps }
}

/// The join computed by a nested loop over the rows that were not late.
fn expected(steps: &Steps<Row>, kind: JoinKind) -> Vec<Vec<Option<i64>>> {
    let rows: Vec<Row> = steps
        .rows_with_watermark()
        .into_iter()
        .filter(|(r, watermark)| r.3 > *watermark)
        .map(|(r, _)| r)
        .collect();
    let side = |s: usize| rows.iter().filter(move |r| r.0 == s);
    let fields = |r: &Row| [Some(r.1), Some(r.2), Some(r.3)];
    let mut out = Vec::new();
    for l in side(0) {
        let mut matched = false;
        for r in side(1).filter(|r| (r.1, r.3) == (l.1, l.3)) {
            matched = true;
            out.push([fields(l), fields(r)].concat());
        }
        if !matched && kind == JoinKind::Left {
            out.push([fields(l), [None; 3]].concat());
        }
    }
    out.sort();
    out
}

#[test]
fn joins_match_a_nested_loop_join() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        let steps = events(3);
        let want = expected(&steps, kind);
        assert!(want.len() > 20, "enough matches to mean something");
        let (out, late) = run(&join(kind), &steps, 1, &[], feed);
        assert_eq!(int_rows(&out), want, "{kind:?}");
        assert!(late > 0);
    }
}

#[test]
fn restores_at_other_parallelisms_give_the_output_of_an_uninterrupted_run() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        let op = join(kind);
        let steps = events(9);
        let (straight, straight_late) = run(&op, &steps, 1, &[], feed);
        let straight = int_rows(&straight);
        assert_eq!(straight, expected(&steps, kind));
        let third = steps.len() / 3;
        for (from, restarts) in [
            (1, vec![(third, 3)]),
            (3, vec![(third, 2)]),
            (2, vec![(third, 2), (2 * third, 1)]),
        ] {
            let (out, late) = run(&op, &steps, from, &restarts, feed);
            assert_eq!(
                int_rows(&out),
                straight,
                "{kind:?} from {from}, {restarts:?}"
            );
            assert_eq!(late, straight_late);
        }
    }
}

#[test]
fn spilling_past_the_memory_budget_changes_nothing() {
    let steps = events(4);
    let want = expected(&steps, JoinKind::Left);
    let tiny = join(JoinKind::Left).with_memory_budget(1);
    let (out, _) = run(&tiny, &steps, 2, &[], feed);
    assert_eq!(int_rows(&out), want);
    let (out, _) = run(&tiny, &steps, 2, &[(steps.len() / 2, 3)], feed);
    assert_eq!(int_rows(&out), want);

    let mut h = tiny.start(1).unwrap();
    feed(&mut h, &[(0, 1, 1, 10), (1, 1, 2, 10)]);
    assert_eq!(h.stored_entries().unwrap(), 2, "each side's window spilled");
    h.watermark(10).unwrap();
    assert_eq!(h.stored_entries().unwrap(), 0);
    assert_eq!(
        int_rows(&h.take_output()),
        vec![vec![Some(1), Some(1), Some(10), Some(1), Some(2), Some(10)]]
    );
}

#[test]
fn a_window_larger_than_the_budget_joins_bucket_by_bucket_with_the_same_result() {
    // One window, 4,000 rows a side over 1,500 keys (some only on one side), in batches.
    let mut rng = Rng::new(12);
    let steps = Steps {
        steps: (0..40)
            .map(|i| {
                let rows = (0..200)
                    .map(|_| {
                        let side = rng.below(2) as usize;
                        (side, rng.below(1500) as i64, rng.below(1000) as i64, SIZE)
                    })
                    .collect();
                (rows, if i == 39 { SIZE } else { 0 })
            })
            .collect(),
    };
    let want = expected(&steps, JoinKind::Left);
    assert!(want.len() > 4000, "{} rows", want.len());
    let tight = join(JoinKind::Left).with_memory_budget(32 << 10);
    let (out, _) = run(&tight, &steps, 1, &[], feed);
    // Joined whole, the window's pairs come out in two batches and its unmatched rows in a
    // third; joined bucket by bucket, in one or more per bucket: the other path ran.
    assert!(out.len() >= 6, "joined in buckets: {} batches", out.len());
    assert!(
        int_rows(&out) == want,
        "the same rows as a nested loop join"
    );
    let (out, _) = run(&tight, &steps, 2, &[(20, 3)], feed);
    assert!(int_rows(&out) == want, "the same after a restore");
}
