//! WindowAggregate through the harness: per-window counts and sums against a direct
//! computation, firing order, late rows, restores at other parallelisms, spills.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;

use super::{col, run, ts, Steps};
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::harness::{int_rows, OperatorUnderTest, Rng};
use crate::operators::windowed::{WindowBound, WindowColumn};
use crate::operators::{AggregateInput, GroupColumn, WindowAggregateSpec};

const SIZE: i64 = 10;

/// `(key, value, window end)`.
type Row = (i64, i64, EventTime);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("window_start", ts(), false),
        Field::new("window_end", ts(), false),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.2 - SIZE),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.2),
            )),
        ],
    )
    .unwrap()
}

/// `SELECT window_start, window_end[, k], count(v), sum(v) ... GROUP BY window_start,
/// window_end[, k]`, the window read from `window` (column 2 holds the start, 3 the end),
/// routed as the planner routes it: by `k`, or without keys by the window column.
fn aggregate(keyed: bool, window: WindowColumn) -> OperatorUnderTest {
    let spec = aggregate_spec(keyed, window);
    let route = if keyed {
        col("k", 0)
    } else {
        col(spec.input_schema.field(window.index).name(), window.index)
    };
    OperatorUnderTest::new(spec, vec![Partitioning::Hash(vec![route])])
}

/// The plan node of [`aggregate`].
fn aggregate_spec(keyed: bool, window: WindowColumn) -> WindowAggregateSpec {
    let schema = input_schema();
    let agg = |f, alias: &str| {
        Arc::new(
            AggregateExprBuilder::new(f, vec![col("v", 1)])
                .schema(Arc::clone(&schema))
                .alias(alias)
                .build()
                .unwrap(),
        )
    };
    let mut group_columns = vec![GroupColumn::WindowStart, GroupColumn::WindowEnd];
    let mut out = vec![
        Field::new("window_start", ts(), false),
        Field::new("window_end", ts(), false),
    ];
    if keyed {
        group_columns.push(GroupColumn::Key(0));
        out.push(Field::new("k", DataType::Int64, true));
    }
    out.push(Field::new("n", DataType::Int64, false));
    out.push(Field::new("s", DataType::Int64, true));
    WindowAggregateSpec {
        input_schema: Arc::clone(&schema),
        keys: if keyed { vec![col("k", 0)] } else { vec![] },
        window: Some(window),
        group_columns,
        aggregates: vec![agg(count_udaf(), "n"), agg(sum_udaf(), "s")],
        filters: vec![None, None],
        output_schema: Arc::new(Schema::new(out)),
        description: String::new(),
        input: AggregateInput::Rows,
    }
}

fn by_end() -> WindowColumn {
    WindowColumn::new(3, WindowBound::end(SIZE))
}

fn by_start() -> WindowColumn {
    WindowColumn::new(2, WindowBound::start(SIZE))
}

/// Rows a little out of order over ~20 windows and 7 keys, in batches of 1 to 30 rows, the
/// watermark trailing the largest time by up to 15: some rows arrive late.
fn events(seed: u64) -> Steps<Row> {
    let mut rng = Rng::new(seed);
    let mut t = 0;
    let mut steps = Vec::new();
    while t < 200 {
        let rows: Vec<Row> = (0..1 + rng.below(30))
            .map(|_| {
                t += rng.below(2) as i64;
                let at = t - rng.below(12) as i64;
                let end = (at.div_euclid(SIZE) + 1) * SIZE;
                (rng.below(7) as i64, rng.below(100) as i64, end)
            })
            .collect();
        steps.push((rows, t - rng.below(15) as i64));
    }
    Steps { steps }
}

/// The expected output, computed row by row: `(start, end[, k], count, sum)` of each window
/// over the rows that arrived before the watermark passed its end; and the late rows.
fn expected(steps: &Steps<Row>, keyed: bool) -> (Vec<Vec<Option<i64>>>, u64) {
    let mut groups: BTreeMap<(EventTime, i64), (i64, i64)> = BTreeMap::new();
    let mut late = 0;
    for ((k, v, end), watermark) in steps.rows_with_watermark() {
        if end <= watermark {
            late += 1;
            continue;
        }
        let g = groups.entry((end, if keyed { k } else { 0 })).or_default();
        *g = (g.0 + 1, g.1 + v);
    }
    let mut rows: Vec<Vec<Option<i64>>> = groups
        .into_iter()
        .map(|((end, k), (n, s))| {
            let mut row = vec![Some(end - SIZE), Some(end)];
            if keyed {
                row.push(Some(k));
            }
            row.extend([Some(n), Some(s)]);
            row
        })
        .collect();
    rows.sort();
    (rows, late)
}

fn feed(h: &mut crate::operators::harness::Harness, rows: &[Row]) {
    h.batch(0, batch(rows)).unwrap();
}

#[test]
fn counts_and_sums_match_a_direct_computation() {
    for (keyed, window) in [(true, by_end()), (false, by_end()), (true, by_start())] {
        let steps = events(7);
        let (want, want_late) = expected(&steps, keyed);
        assert!(want_late > 0, "the input has late rows");
        let (out, late) = run(&aggregate(keyed, window), &steps, 1, &[], feed);
        assert_eq!(int_rows(&out), want, "keyed {keyed}, {window:?}");
        assert_eq!(late, want_late);
    }
}

#[test]
fn restores_at_other_parallelisms_give_the_output_of_an_uninterrupted_run() {
    for (keyed, window) in [(true, by_end()), (false, by_end()), (false, by_start())] {
        let op = aggregate(keyed, window);
        let steps = events(11);
        let (straight, straight_late) = run(&op, &steps, 1, &[], feed);
        let straight = int_rows(&straight);
        assert_eq!(straight, expected(&steps, keyed).0);
        let third = steps.len() / 3;
        for restarts in [
            vec![(third, 3)],
            vec![(third, 3), (2 * third, 2)],
            vec![(third, 1)],
        ] {
            let (out, late) = run(&op, &steps, 1, &restarts, feed);
            assert_eq!(
                int_rows(&out),
                straight,
                "keyed {keyed}, restarts {restarts:?}"
            );
            assert_eq!(late, straight_late);
        }
        // Started at 3, restored at 2 then at 3 again.
        let (out, _) = run(&op, &steps, 3, &[(third, 2), (2 * third, 3)], feed);
        assert_eq!(int_rows(&out), straight, "keyed {keyed}, 3 -> 2 -> 3");
    }
}

#[test]
fn spilling_past_the_memory_budget_changes_nothing() {
    let steps = events(5);
    let unlimited = aggregate(true, by_end());
    let tiny = aggregate(true, by_end()).with_memory_budget(1);
    let (want, _) = run(&unlimited, &steps, 2, &[], feed);
    let (got, _) = run(&tiny, &steps, 2, &[], feed);
    assert_eq!(int_rows(&got), int_rows(&want));
    // Spilled parts are restored too.
    let (got, _) = run(&tiny, &steps, 2, &[(steps.len() / 2, 3)], feed);
    assert_eq!(int_rows(&got), int_rows(&want));

    let mut h = tiny.start(1).unwrap();
    h.batch(0, batch(&[(1, 1, 10), (2, 2, 20)])).unwrap();
    assert_eq!(
        h.stored_entries().unwrap(),
        2,
        "both windows went to the store"
    );
    h.watermark(10).unwrap();
    assert_eq!(
        h.stored_entries().unwrap(),
        1,
        "firing drops the window's parts"
    );
}

#[test]
fn windows_fire_once_in_order_of_end_when_the_watermark_passes_it() {
    let mut h = aggregate(true, by_end()).start(1).unwrap();
    h.batch(0, batch(&[(1, 5, 30), (1, 1, 10), (2, 2, 20), (1, 3, 10)]))
        .unwrap();
    assert!(
        h.take_output().is_empty(),
        "nothing fires before its watermark"
    );
    h.watermark(9).unwrap();
    assert!(h.take_output().is_empty());
    h.watermark(10).unwrap();
    assert_eq!(
        int_rows(&h.take_output()),
        vec![vec![Some(0), Some(10), Some(1), Some(2), Some(4)]]
    );
    h.watermark(10).unwrap();
    assert!(h.take_output().is_empty(), "a window fires once");
    // A row of a fired window is late: counted, never in a result.
    h.batch(0, batch(&[(1, 100, 10), (2, 1, 20)])).unwrap();
    assert_eq!(h.late_rows(), 1);
    h.watermark(35).unwrap();
    let out = h.take_output();
    let ends: Vec<i64> = out
        .iter()
        .flat_map(|b| int_rows(std::slice::from_ref(b)))
        .map(|r| r[1].unwrap())
        .collect();
    assert_eq!(ends, vec![20, 30], "in order of end");
    assert_eq!(
        int_rows(&out),
        vec![
            vec![Some(10), Some(20), Some(2), Some(2), Some(3)],
            vec![Some(20), Some(30), Some(1), Some(1), Some(5)],
        ]
    );
    h.end().unwrap();
    assert!(h.take_output().is_empty());
}

#[test]
fn a_global_aggregate_yields_its_row_over_no_input_across_a_restore() {
    let schema = input_schema();
    let count = AggregateExprBuilder::new(count_udaf(), vec![col("v", 1)])
        .schema(Arc::clone(&schema))
        .alias("n")
        .build()
        .unwrap();
    let spec = WindowAggregateSpec {
        input_schema: schema,
        keys: vec![],
        window: None,
        group_columns: vec![],
        aggregates: vec![Arc::new(count)],
        filters: vec![None],
        output_schema: Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)])),
        description: String::new(),
        input: AggregateInput::Rows,
    };
    let op = OperatorUnderTest::new(spec, vec![Partitioning::Single]);
    let mut h = op.start(1).unwrap();
    h.watermark(100).unwrap();
    assert!(h.take_output().is_empty(), "fires only at the end of input");
    let checkpoint = h.barrier().unwrap();
    let mut h = op.restore(&checkpoint, 1).unwrap();
    h.end().unwrap();
    assert_eq!(int_rows(&h.take_output()), vec![vec![Some(0)]]);

    let mut h = op.start(1).unwrap();
    h.batch(0, batch(&[(1, 1, 10), (1, 2, 20)])).unwrap();
    let checkpoint = h.barrier().unwrap();
    let mut h = op.restore(&checkpoint, 1).unwrap();
    h.batch(0, batch(&[(1, 3, 10)])).unwrap();
    h.end().unwrap();
    assert_eq!(int_rows(&h.take_output()), vec![vec![Some(3)]]);
}

/// One window holding `keys` keys, each seen three times in different batches (so its
/// spilled parts overlap), the watermark closing it at the last step.
fn one_large_window(keys: i64) -> Steps<Row> {
    let mut steps = Vec::new();
    for pass in 0..3 {
        for from in (0..keys).step_by(1000) {
            let rows = (from..(from + 1000).min(keys))
                .map(|k| (k, k % 13 + pass, SIZE))
                .collect();
            steps.push((rows, 0));
        }
    }
    steps.last_mut().unwrap().1 = SIZE;
    Steps { steps }
}

#[test]
fn a_window_larger_than_the_budget_fires_bucket_by_bucket_with_the_same_result() {
    let steps = one_large_window(40_000);
    let (want, _) = run(&aggregate(true, by_end()), &steps, 1, &[], feed);
    let tight = aggregate(true, by_end()).with_memory_budget(64 << 10);
    let (got, _) = run(&tight, &steps, 1, &[], feed);
    // Merged whole, the window's 40,000 groups come out in 5 batches (of 8,192 rows); merged
    // bucket by bucket, in one or more per bucket of about 2,000 keys: the other path ran.
    let batches = got.len();
    assert!(batches >= 10, "merged in buckets: {batches} batches");
    let mut sorted_want = int_rows(&want);
    sorted_want.sort();
    assert_eq!(sorted_want.len(), 40_000);
    let mut sorted_got = int_rows(&got);
    sorted_got.sort();
    assert!(sorted_got == sorted_want, "the same groups and values");
    // The same across a restore at another parallelism, with parts restored from the store.
    let (got, _) = run(&tight, &steps, 2, &[(steps.len() / 2, 3)], feed);
    let mut got = int_rows(&got);
    got.sort();
    assert!(got == sorted_want, "the same after a restore");
}

/// Two phases: what the local phase emits for each step (after the step's rows, then at its
/// watermark, the last step also its end), merged by the final phase — at one instance and
/// across restores at other parallelisms — gives the one-phase result, from fewer rows.
#[test]
fn two_phases_give_the_one_phase_result_across_restores() {
    for (keyed, window) in [(true, by_end()), (false, by_end()), (true, by_start())] {
        let (local, merged) = aggregate_spec(keyed, window).split().unwrap();
        let route = match (keyed, merged.window) {
            (true, _) => col("k0", 0),
            (false, Some(w)) => col(merged.input_schema.field(w.index).name(), w.index),
            (false, None) => unreachable!(),
        };
        let merged = OperatorUnderTest::new(merged, vec![Partitioning::Hash(vec![route])]);
        let local = OperatorUnderTest::new(local, vec![Partitioning::Single]);
        let steps = events(13);
        let (one_phase, _) = run(&aggregate(keyed, window), &steps, 1, &[], feed);
        let one_phase = int_rows(&one_phase);
        assert_eq!(one_phase, expected(&steps, keyed).0);

        let mut h = local.start(1).unwrap();
        let (mut rows_in, mut rows_out) = (0, 0);
        let mut partials = Vec::new();
        for (rows, w) in &steps.steps {
            h.batch(0, batch(rows)).unwrap();
            rows_in += rows.len();
            let mut step = h.take_output();
            h.watermark(*w).unwrap();
            step.extend(h.take_output());
            rows_out += step.iter().map(RecordBatch::num_rows).sum::<usize>();
            partials.push((step, *w));
        }
        // Windows still open at the end of input: flushed at the end (the final phase
        // then fires them at its own end).
        h.end().unwrap();
        let last = h.take_output();
        rows_out += last.iter().map(RecordBatch::num_rows).sum::<usize>();
        partials.last_mut().unwrap().0.extend(last);
        assert!(
            rows_out < rows_in / 2,
            "keyed {keyed}: {rows_out} partial rows for {rows_in} rows"
        );
        let partials = Steps { steps: partials };
        let feed_partials = |h: &mut crate::operators::harness::Harness, b: &[RecordBatch]| {
            for b in b {
                h.batch(0, b.clone()).unwrap();
            }
        };
        let third = partials.len() / 3;
        for (p, restarts) in [(1, vec![]), (2, vec![(third, 3), (2 * third, 1)])] {
            let (out, _) = run(&merged, &partials, p, &restarts, feed_partials);
            assert_eq!(
                int_rows(&out),
                one_phase,
                "keyed {keyed}, {window:?}, p {p}"
            );
        }
    }
}
