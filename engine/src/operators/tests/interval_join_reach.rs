//! IntervalJoin whose rows reach as far as a column of theirs (`r.ts BETWEEN l.ts AND
//! l.expires`, Nexmark q4 and q9), against a nested-loop join: every kind, restores at other
//! parallelisms, spills, and rows whose bound column is NULL.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as Op;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;

use super::{col, run, ts, Steps};
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::harness::{int_rows, Harness, OperatorUnderTest, Rng};
use crate::operators::{IntervalJoinSpec, IntervalSide, JoinKind, Until};

const MS: i64 = 1_000_000;

/// `(side, key, value, time in ms, bound in ms)`: side 0 is the left input.
type Row = (usize, Option<i64>, i64, i64, Option<i64>);

/// `k, v, t, ts, e`: `e` is the row's bound column.
fn side_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", datafusion::arrow::datatypes::DataType::Int64, true),
        Field::new("v", datafusion::arrow::datatypes::DataType::Int64, false),
        Field::new("t", datafusion::arrow::datatypes::DataType::Int64, false),
        Field::new("ts", ts(), true),
        Field::new("e", ts(), true),
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
            Arc::new(TimestampNanosecondArray::from_iter(
                rows.iter().map(|r| r.4.map(|e| e * MS)),
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

/// Which side's column bounds the pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// `r.ts >= l.ts AND r.ts <= l.e` (Nexmark q4's `b.date_time BETWEEN a.date_time AND
    /// a.expires`): the left rows reach to their `e`, the right ones to their own time.
    LeftUntil,
    /// `r.t - l.t <= 40 AND l.ts <= r.e`: the right rows reach to their `e`, the left ones
    /// 40 ms past their time.
    RightUntil,
}

/// Whether rows `l` and `r` pair (keys aside).
fn pairs(shape: Shape, l: &Row, r: &Row) -> bool {
    match shape {
        Shape::LeftUntil => r.3 >= l.3 && l.4.is_some_and(|e| r.3 <= e),
        Shape::RightUntil => r.3 - l.3 <= 40 && r.4.is_some_and(|e| l.3 <= e),
    }
}

fn spec(kind: JoinKind, shape: Shape) -> IntervalJoinSpec {
    let side = |until| IntervalSide {
        schema: side_schema(),
        keys: vec![col("k", 0)],
        time: 3,
        lag: 0,
        until,
    };
    let both: Vec<Field> = side_schema()
        .fields()
        .iter()
        .chain(side_schema().fields().iter())
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let until = Some(Until {
        column: 4,
        offset: 0,
    });
    let diff = || binary(col("t", 7), Op::Minus, col("t", 2));
    let (left, right, lower, upper, filter) = match shape {
        Shape::LeftUntil => (
            side(until),
            side(None),
            Some(0),
            None,
            binary(
                binary(diff(), Op::GtEq, lit(0)),
                Op::And,
                binary(col("ts", 8), Op::LtEq, col("e", 4)),
            ),
        ),
        Shape::RightUntil => (
            side(None),
            side(until),
            None,
            Some(40 * MS),
            binary(
                binary(diff(), Op::LtEq, lit(40)),
                Op::And,
                binary(col("ts", 3), Op::LtEq, col("e", 9)),
            ),
        ),
    };
    IntervalJoinSpec {
        kind,
        left,
        right,
        lower,
        upper,
        filter: Some(filter),
        joined_schema: Arc::new(Schema::new(both)),
        description: format!("{shape:?}"),
    }
}

fn join(kind: JoinKind, shape: Shape) -> OperatorUnderTest {
    let route = Partitioning::Hash(vec![col("k", 0)]);
    OperatorUnderTest::new(spec(kind, shape), vec![route.clone(), route])
}

fn feed(h: &mut Harness, rows: &[Row]) {
    for side in [0, 1] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == side).collect();
        if !mine.is_empty() {
            h.batch(side, batch(&mine)).unwrap();
        }
    }
}

/// Both sides out of order over ~3 s and 6 keys (a few NULL); bounds from 0 to 300 ms past
/// the row's time, sometimes before it, a few NULL. Rows below the watermark standing when
/// they arrive are left out, as the source drops them.
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
                let bound = (rng.below(25) > 0).then(|| at - 20 + rng.below(320) as i64);
                (
                    rng.below(2) as usize,
                    key,
                    rng.below(1000) as i64,
                    at,
                    bound,
                )
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
fn expected(steps: &Steps<Row>, kind: JoinKind, shape: Shape) -> Vec<Vec<Option<i64>>> {
    let rows: Vec<Row> = steps.steps.iter().flat_map(|(r, _)| r.clone()).collect();
    let side = |s: usize| rows.iter().filter(move |r| r.0 == s);
    let fields = |r: &Row| {
        vec![
            r.1,
            Some(r.2),
            Some(r.3),
            Some(r.3 * MS),
            r.4.map(|e| e * MS),
        ]
    };
    let matches = |l: &Row, r: &Row| l.1.is_some() && l.1 == r.1 && pairs(shape, l, r);
    let mut out = Vec::new();
    for l in side(0) {
        let found: Vec<_> = side(1).filter(|r| matches(l, r)).collect();
        for r in &found {
            out.push([fields(l), fields(r)].concat());
        }
        if found.is_empty() && matches!(kind, JoinKind::Left | JoinKind::Full) {
            out.push([fields(l), vec![None; 5]].concat());
        }
    }
    if matches!(kind, JoinKind::Right | JoinKind::Full) {
        for r in side(1).filter(|r| !side(0).any(|l| matches(l, r))) {
            out.push([vec![None; 5], fields(r)].concat());
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
fn rows_reaching_to_a_column_join_as_a_nested_loop_does() {
    for shape in [Shape::LeftUntil, Shape::RightUntil] {
        for (i, kind) in KINDS.into_iter().enumerate() {
            let steps = events(30 + i as u64);
            let want = expected(&steps, kind, shape);
            assert!(want.len() > 400, "{shape:?} {kind:?}: {} rows", want.len());
            for (parallelism, restarts) in [(1, vec![]), (3, vec![]), (2, vec![(100, 3)])] {
                let (out, _) = run(&join(kind, shape), &steps, parallelism, &restarts, feed);
                assert_eq!(
                    int_rows(&out),
                    want,
                    "{shape:?} {kind:?} at parallelism {parallelism}, {restarts:?}"
                );
            }
        }
    }
}

#[test]
fn rows_reaching_to_a_column_spill_and_expire() {
    let steps = events(41);
    for shape in [Shape::LeftUntil, Shape::RightUntil] {
        let tiny = join(JoinKind::Full, shape).with_memory_budget(1);
        let want = expected(&steps, JoinKind::Full, shape);
        let (out, _) = run(&tiny, &steps, 2, &[(steps.len() / 2, 1)], feed);
        assert_eq!(int_rows(&out), want, "{shape:?}");
    }
    // A left row reaching to 500 ms stays until the watermark passes that; a right row,
    // reaching to its own time, leaves (padded, never matched) once the watermark passes it.
    let mut h = join(JoinKind::Full, Shape::LeftUntil).start(1).unwrap();
    feed(
        &mut h,
        &[(0, Some(1), 1, 100, Some(500)), (1, Some(1), 2, 90, None)],
    );
    assert!(
        h.take_output().is_empty(),
        "the right row is before the left"
    );
    h.watermark(200 * MS).unwrap();
    let padded = int_rows(&h.take_output());
    assert_eq!(padded.len(), 1, "{padded:?}");
    assert_eq!(
        (padded[0][0], padded[0][7]),
        (None, Some(90)),
        "the right row, padded"
    );
    feed(&mut h, &[(1, Some(1), 3, 450, None)]);
    assert_eq!(int_rows(&h.take_output()).len(), 1, "matched at 450 ms");
    h.watermark(600 * MS).unwrap();
    assert!(h.take_output().is_empty(), "both rows matched");
    feed(&mut h, &[(1, Some(1), 4, 600, None)]);
    assert!(
        h.take_output().is_empty(),
        "past the left row's bound, and it is gone"
    );
    h.end().unwrap();
    let last = int_rows(&h.take_output());
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!((last[0][0], last[0][7]), (None, Some(600)));
}
