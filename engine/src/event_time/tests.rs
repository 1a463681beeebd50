use super::*;
use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::physical_expr::expressions::Column;

const S: i64 = 1_000_000_000;

/// The one-pass TUMBLE assignment gives the pairs of the row-by-row rule, or declines
/// exactly when some row's window has closed: times mostly in order with jumps back and
/// forth, negative times, an offset, watermarks rising through the rows.
#[test]
fn tumble_in_one_pass_equals_the_row_by_row_windows() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: i64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as i64
    };
    for round in 0..300 {
        let size = [1, 7, 10 * S, 3][round % 4];
        let offset = [0, 2, -S, 1][round % 4] % size;
        let spec = WindowSpec::Tumble { size, offset };
        let mut t = next(1000) * size / 3 - 200 * size;
        let (mut times, mut watermarks) = (Vec::new(), Vec::new());
        let mut wm = t - 5 * size;
        for _ in 0..(1 + next(60)) {
            t += match next(10) {
                0 => -next(3 * size),
                1 => next(4 * size),
                _ => next(size / 2 + 1),
            };
            times.push(t);
            watermarks.push(wm);
            if next(3) == 0 {
                wm = wm.max(t - size - next(size));
            }
        }
        let watermarks = if round % 5 == 0 { vec![] } else { watermarks };
        let mut expected = Bucket::with_capacity(times.len());
        let mut all_open = true;
        for (i, &t) in times.iter().enumerate() {
            let wm = watermarks.get(i).copied().unwrap_or(WATERMARK_MIN);
            let n = spec.for_each_open_window(t, wm, |s, e| expected.push(i as u32, s, e));
            all_open &= n == 1;
        }
        match tumble_windows(size, offset, &times, &watermarks) {
            Some(got) => {
                assert!(all_open, "round {round}: a closed window was assigned");
                assert_eq!(got.indices, expected.indices, "round {round}");
                assert_eq!(got.starts, expected.starts, "round {round}");
                assert_eq!(got.ends, expected.ends, "round {round}");
            }
            None => assert!(!all_open, "round {round}: declined with every window open"),
        }
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
    ]))
}

fn batch(rows: &[(i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(TimestampNanosecondArray::from(
                rows.iter().map(|r| r.1 * S).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

fn windowed(spec: WindowSpec) -> EventTimeAssigner {
    let mut fields = schema().fields().to_vec();
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        "window_start",
        ts.clone(),
        false,
    )));
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        "window_end",
        ts.clone(),
        false,
    )));
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        "window_time",
        ts,
        false,
    )));
    EventTimeAssigner::new(EventTimeSpec {
        watermark: Some(Arc::new(Column::new("ts", 1))),
        proctime: None,
        window: Some(WindowAssignment {
            time_column: 1,
            spec,
            output_schema: Arc::new(Schema::new(fields)),
            unused: vec![],
            panes: None,
        }),
        out_of_bound: None,
        keep_late: true,
        event_time: None,
    })
}

#[test]
fn lateness_is_judged_per_row_not_per_batch() {
    let rows = [(1, 5), (2, 25), (3, 12), (4, 21)];
    // One batch of four rows, or four batches of one: same survivors, same late count.
    let mut whole = windowed(WindowSpec::tumble(10 * S, 0).unwrap());
    let out = whole.assign(batch(&rows)).unwrap();
    assert_eq!(
        out.late_rows, 1,
        "row 3 (t=12) arrives after watermark 25 closed [10,20)"
    );
    let keys = out
        .batch
        .unwrap()
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .values()
        .to_vec();
    assert_eq!(keys, vec![1, 2, 4]);
    let late = out.late.expect("the late row is handed on");
    assert_eq!(late.num_rows(), 1);
    assert_eq!(
        late.column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        3
    );
    let missed = timestamps_as_nanos(late.column(2)).unwrap();
    assert_eq!(missed.value(0), 25 * S, "the watermark just before row 3");
    assert_eq!(
        late.column(3).as_string::<i32>().value(0),
        crate::late_rows::WINDOW_CLOSED
    );

    let mut split = windowed(WindowSpec::tumble(10 * S, 0).unwrap());
    let mut late = 0;
    let mut kept = vec![];
    for r in rows {
        let out = split.assign(batch(&[r])).unwrap();
        late += out.late_rows;
        if let Some(b) = out.batch {
            kept.extend(
                b.column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .values()
                    .iter()
                    .copied(),
            );
        }
    }
    assert_eq!((late, kept), (1, vec![1, 2, 4]));
    assert_eq!(split.watermark(), 25 * S);
}

#[test]
fn hop_drops_only_closed_windows_of_a_row() {
    let mut a = windowed(WindowSpec::hop(2 * S, 10 * S, 0).unwrap());
    // watermark becomes 14 after the first row; t=11 then keeps windows ending after 14.
    let out = a.assign(batch(&[(1, 14), (2, 11)])).unwrap();
    assert_eq!(out.late_rows, 0);
    let b = out.batch.unwrap();
    let starts = timestamps_as_nanos(b.column(2)).unwrap();
    let row2: Vec<i64> = (0..b.num_rows())
        .filter(|&i| {
            b.column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .value(i)
                == 2
        })
        .map(|i| starts.value(i) / S)
        .collect();
    assert_eq!(row2, vec![10, 8, 6]);
    // window_time is the end less a millisecond.
    let ends = timestamps_as_nanos(b.column(3)).unwrap();
    let times = timestamps_as_nanos(b.column(4)).unwrap();
    for i in 0..b.num_rows() {
        assert_eq!(times.value(i), ends.value(i) - WINDOW_TIME_BEFORE_END);
    }
}

#[test]
fn out_of_bound_rows_are_judged_against_their_own_watermark() {
    let spec = EventTimeSpec {
        watermark: Some(Arc::new(Column::new("ts", 1))),
        window: None,
        proctime: None,
        out_of_bound: Some(1),
        keep_late: false,
        event_time: None,
    };
    // Watermarks before each row: -inf, 5, 25, 25; rows 3 (t=12 < 25) and 4 (t=21) late.
    let rows = [(1, 5), (2, 25), (3, 12), (4, 21), (5, 25)];
    let mut whole = EventTimeAssigner::new(spec.clone());
    let out = whole.assign(batch(&rows)).unwrap();
    let ids = |b: &RecordBatch| {
        b.column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    };
    assert_eq!(
        (out.late_rows, ids(&out.batch.unwrap())),
        (2, vec![1, 2, 5])
    );
    let mut split = EventTimeAssigner::new(spec);
    let (mut late, mut kept) = (0, vec![]);
    for r in rows {
        let out = split.assign(batch(&[r])).unwrap();
        late += out.late_rows;
        kept.extend(out.batch.map(|b| ids(&b)).unwrap_or_default());
    }
    assert_eq!((late, kept), (2, vec![1, 2, 5]));
}

/// With nothing judged per row, a watermark expression that rises with its column is
/// evaluated at the batch's newest row only: the watermark (and the newest time) after
/// each batch are those of evaluating it on every row. Expressions not known to rise
/// still go row by row.
#[test]
fn a_rising_watermark_expression_is_evaluated_at_the_newest_row_only() {
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Literal};
    use datafusion::scalar::ScalarValue;
    let ts = || -> Arc<dyn PhysicalExpr> { Arc::new(Column::new("ts", 1)) };
    let four = || -> Arc<dyn PhysicalExpr> {
        Arc::new(Literal::new(ScalarValue::new_interval_mdn(0, 0, 4 * S)))
    };
    let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
    let minus_four: Arc<dyn PhysicalExpr> =
        Arc::new(BinaryExpr::new(ts(), Operator::Minus, four()));
    let cases: Vec<(Arc<dyn PhysicalExpr>, bool)> = vec![
        (ts(), true),
        (Arc::clone(&minus_four), true),
        (
            Arc::new(BinaryExpr::new(four(), Operator::Plus, ts())),
            true,
        ),
        (
            Arc::new(CastExpr::new(Arc::clone(&minus_four), ms, None)),
            true,
        ),
        // Through a number: not known to rise, evaluated on every row.
        (
            Arc::new(CastExpr::new(
                Arc::new(CastExpr::new(ts(), DataType::Int64, None)),
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                None,
            )),
            false,
        ),
    ];
    let mut seed = 7u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (expr, rising) in cases {
        let spec = EventTimeSpec {
            watermark: Some(Arc::clone(&expr)),
            window: None,
            proctime: None,
            out_of_bound: None,
            keep_late: false,
            event_time: Some(1),
        };
        let mut fast = EventTimeAssigner::new(spec.clone());
        assert_eq!(fast.monotone_in.is_some(), rising, "{expr}");
        let mut every_row = EventTimeAssigner::new(spec);
        every_row.monotone_in = None;
        for round in 0..200 {
            let n = 1 + (next() % 20) as usize;
            let times: Vec<Option<i64>> = (0..n)
                .map(|_| {
                    let v = next();
                    (v % 5 != 0).then_some((v % 1000) as i64 * 1_000_000 - 300 * S)
                })
                .collect();
            let batch = RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(vec![round; n])),
                    Arc::new(TimestampNanosecondArray::from(times.clone())),
                ],
            )
            .unwrap();
            fast.assign(batch.clone()).unwrap();
            every_row.assign(batch).unwrap();
            assert_eq!(
                (fast.watermark(), fast.newest()),
                (every_row.watermark(), every_row.newest()),
                "{expr}, round {round}: {times:?}"
            );
        }
    }
}
