//! WindowTopN through the harness: the two largest values of each key in each window against
//! a direct ranking, ties broken by the row's columns, late rows, restores at other
//! parallelisms, spills.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::PhysicalSortExpr;

use super::{col, run, ts, Steps};
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::harness::{int_rows, Harness, OperatorUnderTest, Rng};
use crate::operators::windowed::{WindowBound, WindowColumn};
use crate::operators::WindowTopNSpec;

const SIZE: i64 = 10;

/// `(id, key, value, window end)`.
type Row = (i64, i64, i64, EventTime);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("window_start", ts(), false),
        Field::new("window_end", ts(), false),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    let column = |f: fn(&Row) -> i64| Int64Array::from_iter_values(rows.iter().map(f));
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(column(|r| r.0)),
            Arc::new(column(|r| r.1)),
            Arc::new(column(|r| r.2)),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.3 - SIZE),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .unwrap()
}

/// `ROW_NUMBER() OVER (PARTITION BY window_start, window_end[, k] ORDER BY v DESC) <= 2`,
/// routed as the planner routes it: by `k`, or without keys by the window column.
fn top_n(keyed: bool) -> OperatorUnderTest {
    let schema = input_schema();
    let mut out: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    out.push(Field::new("rn", DataType::UInt64, false));
    let window = WindowColumn::new(4, WindowBound::end(SIZE));
    let spec = WindowTopNSpec {
        input_schema: Arc::clone(&schema),
        window,
        keys: if keyed { vec![col("k", 1)] } else { vec![] },
        order: vec![PhysicalSortExpr {
            expr: col("v", 2),
            options: SortOptions {
                descending: true,
                nulls_first: false,
            },
        }],
        first: 1,
        last: 2,
        output_schema: Arc::new(Schema::new(out)),
        description: String::new(),
    };
    let route = if keyed {
        col("k", 1)
    } else {
        col("window_end", 4)
    };
    OperatorUnderTest::new(spec, vec![Partitioning::Hash(vec![route])])
}

/// Rows a little out of order over ~20 windows and 5 keys, values from a small range (so
/// values tie), in batches of 1 to 30 rows, the watermark trailing by up to 15.
fn events(seed: u64) -> Steps<Row> {
    let mut rng = Rng::new(seed);
    let (mut t, mut id) = (0, 0);
    let mut steps = Vec::new();
    while t < 200 {
        let rows: Vec<Row> = (0..1 + rng.below(30))
            .map(|_| {
                t += rng.below(2) as i64;
                id += 1;
                let at = t - rng.below(12) as i64;
                let end = (at.div_euclid(SIZE) + 1) * SIZE;
                (id, rng.below(5) as i64, rng.below(6) as i64, end)
            })
            .collect();
        steps.push((rows, t - rng.below(15) as i64));
    }
    Steps { steps }
}

/// The expected output, ranked directly: per window (and key), the rows that arrived before
/// the watermark passed the window's end, by v descending then id (the first column)
/// ascending; the first two with their numbers. And the late rows.
fn expected(steps: &Steps<Row>, keyed: bool) -> (Vec<Vec<Option<i64>>>, u64) {
    let mut partitions: BTreeMap<(EventTime, i64), Vec<Row>> = BTreeMap::new();
    let mut late = 0;
    for (row, watermark) in steps.rows_with_watermark() {
        if row.3 <= watermark {
            late += 1;
            continue;
        }
        let key = if keyed { row.1 } else { 0 };
        partitions.entry((row.3, key)).or_default().push(row);
    }
    let mut out = Vec::new();
    for (_, mut rows) in partitions {
        rows.sort_by_key(|r| (-r.2, r.0));
        for (i, (id, k, v, end)) in rows.into_iter().take(2).enumerate() {
            out.push(vec![
                Some(id),
                Some(k),
                Some(v),
                Some(end - SIZE),
                Some(end),
                Some(i as i64 + 1),
            ]);
        }
    }
    out.sort();
    (out, late)
}

fn feed(h: &mut Harness, rows: &[Row]) {
    h.batch(0, batch(rows)).unwrap();
}

#[test]
fn the_first_rows_of_each_window_match_a_direct_ranking() {
    for keyed in [true, false] {
        let steps = events(3);
        let (want, want_late) = expected(&steps, keyed);
        assert!(want_late > 0, "the input has late rows");
        for parallelism in [1, 3] {
            let (out, late) = run(&top_n(keyed), &steps, parallelism, &[], feed);
            assert_eq!(
                int_rows(&out),
                want,
                "keyed {keyed}, parallelism {parallelism}"
            );
            assert_eq!(late, want_late);
        }
    }
}

#[test]
fn restores_and_spills_give_the_output_of_an_uninterrupted_run() {
    for keyed in [true, false] {
        let steps = events(9);
        let (want, want_late) = expected(&steps, keyed);
        let third = steps.len() / 3;
        for (op, restarts) in [
            (top_n(keyed), vec![(third, 3), (2 * third, 2)]),
            (top_n(keyed).with_memory_budget(1), vec![]),
            (
                top_n(keyed).with_memory_budget(1),
                vec![(third, 1), (2 * third, 3)],
            ),
        ] {
            let (out, late) = run(&op, &steps, 2, &restarts, feed);
            assert_eq!(int_rows(&out), want, "keyed {keyed}, restarts {restarts:?}");
            assert_eq!(late, want_late);
        }
    }
}
