//! IntervalJoin through the harness: inner and outer joins of random streams against a
//! nested-loop join, across restores at other parallelisms and spills; and the held-back
//! output watermark against the rows emitted after it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimestampNanosecondType};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as Op;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;

use super::{col, run, ts, Steps};
use crate::graph::{OperatorFactory, Partitioning, TaskInfo};
use crate::message::{EventTime, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::Output;
use crate::operators::harness::{int_rows, Harness, OperatorUnderTest, Rng};
use crate::operators::{IntervalJoinSpec, IntervalSide, JoinKind};
use crate::state::StateHandle;

const MS: i64 = 1_000_000;
/// `r.t - l.t` in `[LOWER, UPPER]` milliseconds.
const LOWER: i64 = -40;
const UPPER: i64 = 70;

/// `(side, key, value, time in ms)`: side 0 is the left input.
type Row = (usize, Option<i64>, i64, i64);

fn side_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
        Field::new("t", DataType::Int64, false),
        Field::new("ts", ts(), true),
    ]))
}

fn batch(rows: &[&Row]) -> RecordBatch {
    RecordBatch::try_new(
        side_schema(),
        vec![
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.3 * MS),
            )),
        ],
    )
    .unwrap()
}

fn binary(l: Arc<dyn PhysicalExpr>, op: Op, r: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    Arc::new(BinaryExpr::new(l, op, r))
}

fn lit(v: i64) -> Arc<dyn PhysicalExpr> {
    Arc::new(Literal::new(ScalarValue::Int64(Some(v))))
}

/// `l JOIN r ON l.k = r.k AND r.t - l.t BETWEEN LOWER AND UPPER` (`keyed`), or the interval
/// alone; routed by `k`, or to one instance.
fn spec(kind: JoinKind, keyed: bool) -> IntervalJoinSpec {
    let keys = if keyed { vec![col("k", 0)] } else { vec![] };
    let side = IntervalSide {
        schema: side_schema(),
        keys,
        time: 3,
        lag: 0,
        until: None,
    };
    let both: Vec<Field> = side_schema()
        .fields()
        .iter()
        .chain(side_schema().fields().iter())
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let diff = || binary(col("t", 6), Op::Minus, col("t", 2));
    let filter = binary(
        binary(diff(), Op::GtEq, lit(LOWER)),
        Op::And,
        binary(diff(), Op::LtEq, lit(UPPER)),
    );
    IntervalJoinSpec {
        kind,
        left: side.clone(),
        right: side,
        lower: Some(LOWER * MS),
        upper: Some(UPPER * MS),
        filter: Some(filter),
        joined_schema: Arc::new(Schema::new(both)),
        description: String::new(),
    }
}

fn join(kind: JoinKind, keyed: bool) -> OperatorUnderTest {
    let route = if keyed {
        Partitioning::Hash(vec![col("k", 0)])
    } else {
        Partitioning::Single
    };
    OperatorUnderTest::new(spec(kind, keyed), vec![route.clone(), route])
}

fn feed(h: &mut Harness, rows: &[Row]) {
    for side in [0, 1] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == side).collect();
        if !mine.is_empty() {
            h.batch(side, batch(&mine)).unwrap();
        }
    }
}

/// Both sides out of order over ~3 s and 6 keys (a few NULL). Rows below the watermark
/// standing when they arrive are left out, as the source drops them.
fn events(seed: u64) -> Steps<Row> {
    let mut rng = Rng::new(seed);
    let (mut t, mut watermark) = (0, EventTime::MIN);
    let mut steps = Vec::new();
    while t < 3_000 {
        let rows: Vec<Row> = (0..1 + rng.below(10))
            .map(|_| {
                t += rng.below(4) as i64;
                let at = t - rng.below(60) as i64;
                let key = (rng.below(20) > 0).then(|| rng.below(6) as i64);
                (rng.below(2) as usize, key, rng.below(1000) as i64, at)
            })
            .filter(|r| r.3 * MS >= watermark)
            .collect();
        let w = (t - rng.below(80) as i64) * MS;
        watermark = watermark.max(w);
        steps.push((rows, w));
    }
    Steps { steps }
}

/// The join by a nested loop over every row.
fn expected(steps: &Steps<Row>, kind: JoinKind, keyed: bool) -> Vec<Vec<Option<i64>>> {
    let rows: Vec<Row> = steps.steps.iter().flat_map(|(r, _)| r.clone()).collect();
    let side = |s: usize| rows.iter().filter(move |r| r.0 == s);
    let fields = |r: &Row| vec![r.1, Some(r.2), Some(r.3), Some(r.3 * MS)];
    let matches = |l: &Row, r: &Row| {
        (!keyed || (l.1.is_some() && l.1 == r.1)) && (LOWER..=UPPER).contains(&(r.3 - l.3))
    };
    let mut out = Vec::new();
    for l in side(0) {
        let pairs: Vec<_> = side(1).filter(|r| matches(l, r)).collect();
        for r in &pairs {
            out.push([fields(l), fields(r)].concat());
        }
        if pairs.is_empty() && matches!(kind, JoinKind::Left | JoinKind::Full) {
            out.push([fields(l), vec![None; 4]].concat());
        }
    }
    if matches!(kind, JoinKind::Right | JoinKind::Full) {
        for r in side(1).filter(|r| !side(0).any(|l| matches(l, r))) {
            out.push([vec![None; 4], fields(r)].concat());
        }
    }
    out.sort();
    out
}

const KINDS: [JoinKind; 4] = [
    JoinKind::Inner,
    JoinKind::Left,
    JoinKind::Right,
    JoinKind::Full,
];

#[test]
fn joins_match_a_nested_loop_join() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        let steps = events(3 + i as u64);
        let want = expected(&steps, kind, true);
        assert!(want.len() > 500, "{kind:?}: {} rows", want.len());
        for parallelism in [1, 3] {
            let (out, _) = run(&join(kind, true), &steps, parallelism, &[], feed);
            assert_eq!(
                int_rows(&out),
                want,
                "{kind:?} at parallelism {parallelism}"
            );
        }
    }
}

#[test]
fn without_keys_every_pair_in_the_interval_matches() {
    let steps = events(5);
    for kind in [JoinKind::Inner, JoinKind::Full] {
        let (out, _) = run(&join(kind, false), &steps, 2, &[(steps.len() / 2, 3)], feed);
        assert_eq!(int_rows(&out), expected(&steps, kind, false), "{kind:?}");
    }
}

#[test]
fn restores_at_other_parallelisms_give_the_output_of_an_uninterrupted_run() {
    for kind in KINDS {
        let op = join(kind, true);
        let steps = events(9);
        let want = expected(&steps, kind, true);
        let third = steps.len() / 3;
        for (from, restarts) in [
            (1, vec![(third, 3)]),
            (3, vec![(third, 2)]),
            (2, vec![(third, 2), (2 * third, 1)]),
        ] {
            let (out, _) = run(&op, &steps, from, &restarts, feed);
            assert_eq!(int_rows(&out), want, "{kind:?} from {from}, {restarts:?}");
        }
    }
}

/// Budgets that spill some buckets and keep others: buckets probed in place through their
/// key index, spilled, read back and probed again give the nested loop's pairs.
#[test]
fn buckets_spilled_now_and_then_join_as_a_nested_loop_does() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        let steps = events(21 + i as u64);
        let want = expected(&steps, kind, true);
        for budget in [3 << 10, 12 << 10] {
            let op = join(kind, true).with_memory_budget(budget);
            let (out, _) = run(&op, &steps, 2, &[], feed);
            assert_eq!(int_rows(&out), want, "{kind:?}, budget {budget}");
            let (out, _) = run(&op, &steps, 1, &[(steps.len() / 2, 2)], feed);
            assert_eq!(int_rows(&out), want, "{kind:?}, budget {budget}, restored");
        }
    }
}

#[test]
fn spilling_past_the_memory_budget_changes_nothing() {
    let steps = events(4);
    for kind in [JoinKind::Inner, JoinKind::Full] {
        let tiny = join(kind, true).with_memory_budget(1);
        let want = expected(&steps, kind, true);
        let (out, _) = run(&tiny, &steps, 2, &[], feed);
        assert_eq!(int_rows(&out), want, "{kind:?}");
        let (out, _) = run(&tiny, &steps, 2, &[(steps.len() / 2, 3)], feed);
        assert_eq!(int_rows(&out), want, "{kind:?} restored");
    }
    let mut h = join(JoinKind::Left, true)
        .with_memory_budget(1)
        .start(1)
        .unwrap();
    feed(&mut h, &[(0, Some(1), 1, 100), (1, Some(2), 2, 100)]);
    assert_eq!(h.stored_entries().unwrap(), 2, "each side's bucket spilled");
    // The right row matches a left row 30 ms before it: read back from the store, matched,
    // and written back with its flag set.
    feed(&mut h, &[(1, Some(1), 3, 130)]);
    assert_eq!(int_rows(&h.take_output()).len(), 1);
    h.end().unwrap();
    assert_eq!(
        h.stored_entries().unwrap(),
        0,
        "every bucket dropped at the end"
    );
    assert!(
        h.take_output().is_empty(),
        "the left row matched: no padded row"
    );
}

/// Every time column of `batches` that is not NULL (`l.ts` and `r.ts`).
fn times(batches: &[RecordBatch]) -> Vec<EventTime> {
    let mut out = Vec::new();
    for b in batches {
        for i in [3, 7] {
            let c = b.column(i).as_primitive::<TimestampNanosecondType>();
            out.extend((0..c.len()).filter(|&j| c.is_valid(j)).map(|j| c.value(j)));
        }
    }
    out
}

/// One instance outside the harness, to see what it returns on each call.
fn instance(kind: JoinKind) -> Box<dyn crate::operator::Operator> {
    let task = TaskInfo {
        job: "t".into(),
        stage: "join".into(),
        instance: 0,
        parallelism: 1,
        metrics: Arc::new(JobMetrics::default()),
        state: StateHandle::in_memory(),
        restored_epoch: 0,
    };
    spec(kind, true).create(&task).unwrap()
}

#[test]
fn rows_without_a_key_or_a_time_never_match_and_an_outer_side_emits_them_at_once() {
    let rows = |keys: &[Option<i64>], times: &[Option<i64>]| {
        RecordBatch::try_new(
            side_schema(),
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(Int64Array::from(vec![0; keys.len()])),
                Arc::new(Int64Array::from_iter(times.iter().map(|t| t.unwrap_or(0)))),
                Arc::new(TimestampNanosecondArray::from_iter(
                    times.iter().map(|t| t.map(|t| t * MS)),
                )),
            ],
        )
        .unwrap()
    };
    let mut op = instance(JoinKind::Full);
    let mut out = Output::default();
    op.process_batch(
        rows(&[None, Some(1), Some(1)], &[Some(1), None, Some(1)]),
        0,
        &mut out,
    )
    .unwrap();
    let padded =
        |k: Option<i64>, t: Option<i64>| vec![k, Some(0), Some(t.unwrap_or(0)), t.map(|t| t * MS)];
    assert_eq!(
        int_rows(&out.take()),
        vec![
            [padded(None, Some(1)), vec![None; 4]].concat(),
            [padded(Some(1), None), vec![None; 4]].concat(),
        ]
    );
    op.process_batch(rows(&[None, Some(1)], &[Some(1), Some(5)]), 1, &mut out)
        .unwrap();
    assert_eq!(
        int_rows(&out.take()),
        vec![
            [vec![None; 4], padded(None, Some(1))].concat(),
            [padded(Some(1), Some(1)), padded(Some(1), Some(5))].concat(),
        ]
    );
    // Both rows left matched: nothing more at the end.
    op.on_watermark(WATERMARK_MAX, &mut out).unwrap();
    assert!(out.take().is_empty());
}

#[test]
fn the_output_watermark_is_below_every_later_row() {
    for kind in [JoinKind::Inner, JoinKind::Full] {
        let mut op = instance(kind);
        let mut out = Output::default();
        let (mut forwarded, mut highest) = (EventTime::MIN, EventTime::MIN);
        let (mut checked, mut closest) = (0, i64::MAX);
        for (rows, w) in &events(12).steps {
            for side in [0, 1] {
                let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == side).collect();
                if !mine.is_empty() {
                    op.process_batch(batch(&mine), side, &mut out).unwrap();
                }
            }
            let before = out.take();
            let next = op.on_watermark(*w, &mut out).unwrap();
            for t in times(&before).into_iter().chain(times(&out.take())) {
                assert!(
                    t >= forwarded,
                    "{kind:?}: row at {t} after watermark {forwarded}"
                );
                closest = closest.min(t - forwarded);
                checked += 1;
            }
            highest = highest.max(*w);
            assert!(next >= forwarded && next <= highest);
            forwarded = next;
        }
        // Held back far enough, and not much further: some row comes close to it.
        assert!(
            checked > 500 && closest < 60 * MS,
            "{kind:?}: {checked}, {closest}"
        );
        assert_eq!(
            op.on_watermark(WATERMARK_MAX, &mut out).unwrap(),
            WATERMARK_MAX
        );
    }
}
