//! EmitOrder through the harness: held rows come out sorted, each window when the watermark
//! passes its end, across barriers, restores and spills.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::ts;
use crate::graph::Partitioning;
use crate::operators::harness::{int_rows, OperatorUnderTest};
use crate::operators::windowed::{WindowBound, WindowColumn};
use crate::operators::EmitOrderSpec;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("window_start", ts(), true),
    ]))
}

/// Rows `(k, window_start)`; `None`: a NULL window.
fn batch(rows: &[(i64, Option<i64>)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(TimestampNanosecondArray::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

/// Windows of 10 read from `window_start` (column 1), or none.
fn emit_order(windowed: bool) -> OperatorUnderTest {
    let spec = EmitOrderSpec {
        schema: schema(),
        window: windowed.then(|| WindowColumn::new(1, WindowBound::start(10))),
    };
    OperatorUnderTest::new(spec, vec![Partitioning::Single])
}

/// The rows of each emitted batch, in emitted order.
fn emitted(h: &mut crate::operators::harness::Harness) -> Vec<Vec<(i64, Option<i64>)>> {
    h.take_output()
        .iter()
        .map(|b| {
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let w = b
                .column(1)
                .as_any()
                .downcast_ref::<TimestampNanosecondArray>()
                .unwrap();
            (0..b.num_rows())
                .map(|i| (k.value(i), (!w.is_null(i)).then(|| w.value(i))))
                .collect()
        })
        .collect()
}

#[test]
fn each_watermark_emits_the_ended_windows_sorted_and_later_ones_wait() {
    let mut h = emit_order(true).start(1).unwrap();
    h.batch(0, batch(&[(3, Some(10)), (9, Some(0)), (1, Some(20))]))
        .unwrap();
    h.batch(0, batch(&[(2, Some(10)), (4, Some(0)), (5, None)]))
        .unwrap();
    h.watermark(9).unwrap();
    assert_eq!(
        emitted(&mut h),
        vec![vec![(5, None)]],
        "a NULL window is done"
    );
    // window_start 0 ends at 10.
    h.watermark(19).unwrap();
    assert_eq!(emitted(&mut h), vec![vec![(4, Some(0)), (9, Some(0))]]);
    h.watermark(25).unwrap();
    assert_eq!(emitted(&mut h), vec![vec![(2, Some(10)), (3, Some(10))]]);
    h.end().unwrap();
    assert_eq!(emitted(&mut h), vec![vec![(1, Some(20))]]);
}

#[test]
fn without_a_window_everything_held_comes_out_at_each_watermark() {
    let mut h = emit_order(false).start(1).unwrap();
    h.batch(0, batch(&[(3, Some(50)), (1, Some(90))])).unwrap();
    h.batch(0, batch(&[(2, Some(10))])).unwrap();
    h.watermark(0).unwrap();
    assert_eq!(
        emitted(&mut h),
        vec![vec![(1, Some(90)), (2, Some(10)), (3, Some(50))]]
    );
    h.watermark(1).unwrap();
    assert!(emitted(&mut h).is_empty());
}

#[test]
fn held_rows_survive_a_restore_and_a_spill() {
    let input = [
        vec![(3, Some(10)), (9, Some(0)), (1, Some(20))],
        vec![(2, Some(10)), (4, Some(0)), (8, Some(30))],
        vec![(7, Some(20)), (6, Some(0))],
    ];
    let run = |op: &OperatorUnderTest, restore: bool| {
        let mut h = op.start(1).unwrap();
        let mut out = Vec::new();
        for (i, rows) in input.iter().enumerate() {
            h.batch(0, batch(rows)).unwrap();
            if i == 1 && restore {
                let checkpoint = h.barrier().unwrap();
                out.extend(emitted(&mut h));
                h = op.restore(&checkpoint, 1).unwrap();
            }
        }
        h.watermark(10).unwrap();
        h.watermark(25).unwrap();
        h.end().unwrap();
        out.extend(emitted(&mut h));
        out
    };
    let want = vec![
        vec![(4, Some(0)), (6, Some(0)), (9, Some(0))],
        vec![(2, Some(10)), (3, Some(10))],
        vec![(1, Some(20)), (7, Some(20)), (8, Some(30))],
    ];
    assert_eq!(run(&emit_order(true), false), want);
    assert_eq!(run(&emit_order(true), true), want);
    let tiny = emit_order(true).with_memory_budget(1);
    assert_eq!(run(&tiny, false), want);
    assert_eq!(run(&tiny, true), want);
    let mut h = tiny.start(1).unwrap();
    h.batch(0, batch(&input[0])).unwrap();
    assert_eq!(
        h.stored_entries().unwrap(),
        1,
        "the batch was spilled, under its earliest window"
    );
    h.watermark(10).unwrap();
    assert_eq!(int_rows(&h.take_output()).len(), 1);
    assert_eq!(
        h.stored_entries().unwrap(),
        1,
        "the rows of later windows were spilled again, under the next end"
    );
}

#[test]
fn windows_past_the_budget_come_out_sorted_one_key_range_at_a_time() {
    let mut rng = crate::operators::harness::Rng::new(3);
    let rows: Vec<(i64, Option<i64>)> = (0..60_000)
        .map(|i| {
            (
                rng.below(50_000) as i64,
                Some(if i % 3 == 0 { 10 } else { 0 }),
            )
        })
        .collect();
    let mut want = rows.clone();
    want.sort_by_key(|r| (r.0, r.1));
    for budget in [usize::MAX, 64 << 10] {
        let mut h = emit_order(true)
            .with_memory_budget(budget)
            .start(1)
            .unwrap();
        for chunk in rows.chunks(700) {
            h.batch(0, batch(chunk)).unwrap();
        }
        h.watermark(25).unwrap();
        let batches = emitted(&mut h);
        assert!(
            batches.iter().all(|b| b.len() <= 8192),
            "batches are cut to the batch size"
        );
        let got: Vec<_> = batches.into_iter().flatten().collect();
        assert!(got == want, "sorted and complete with budget {budget}");
        assert_eq!(h.stored_entries().unwrap(), 0, "nothing is left behind");
    }
}

#[test]
fn a_window_per_row_comes_out_at_its_own_watermark_across_restores_and_spills() {
    // Instances run ahead of the merged watermark: a batch mixes rows of windows that end
    // before the next watermark and rows of windows far later, each row its own window (a
    // SESSION per key). Every watermark must emit exactly the rows whose window ended since
    // the one before, sorted.
    for budget in [usize::MAX, 1, 4 << 10] {
        for restores in [false, true] {
            let op = emit_order(true).with_memory_budget(budget);
            let mut h = op.start(1).unwrap();
            let mut rng = crate::operators::harness::Rng::new(11 + budget as u64 % 7);
            let mut waiting: Vec<(i64, Option<i64>)> = Vec::new();
            let mut watermark = 0i64;
            let mut next_key = 0i64;
            for step in 0..400 {
                if rng.below(3) > 0 {
                    let rows: Vec<(i64, Option<i64>)> = (0..1 + rng.below(40))
                        .map(|_| {
                            next_key += 1;
                            let start =
                                (rng.below(8) > 0).then(|| watermark + rng.below(200) as i64 - 9);
                            (next_key * 7919 % 100_003, start)
                        })
                        .collect();
                    // A NULL window is done at the next watermark.
                    waiting.extend(rows.iter().copied());
                    h.batch(0, batch(&rows)).unwrap();
                    continue;
                }
                if restores && step % 9 == 0 {
                    let checkpoint = h.barrier().unwrap();
                    assert!(emitted(&mut h).is_empty(), "a barrier emits nothing");
                    h = op.restore(&checkpoint, 1).unwrap();
                }
                watermark += rng.below(30) as i64;
                h.watermark(watermark).unwrap();
                let mut want: Vec<_> = waiting
                    .iter()
                    .filter(|r| r.1.is_none_or(|s| s + 10 <= watermark))
                    .copied()
                    .collect();
                waiting.retain(|r| r.1.is_some_and(|s| s + 10 > watermark));
                want.sort();
                let got: Vec<_> = emitted(&mut h).into_iter().flatten().collect();
                assert_eq!(
                    got, want,
                    "watermark {watermark}, budget {budget}, restores {restores}"
                );
            }
            h.end().unwrap();
            waiting.sort();
            let got: Vec<_> = emitted(&mut h).into_iter().flatten().collect();
            assert_eq!(got, waiting, "the rest at the end");
            assert_eq!(h.stored_entries().unwrap(), 0, "nothing is left behind");
        }
    }
}
