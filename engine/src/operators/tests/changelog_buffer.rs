//! ChangelogBuffer through the harness: a random keyed changelog of early-fire windows (rows
//! inserted, updated and deleted in windows the watermark has not closed); nothing comes out
//! between emissions, and after every timer, barrier and end the emitted changes, applied by
//! key, equal the input's; a window's rows are final as soon as the watermark closes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::TimestampNanosecondArray;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, Int8Array};
use datafusion::arrow::datatypes::TimestampNanosecondType;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::ts;
use crate::changelog::{self, Op};
use crate::graph::Partitioning;
use crate::operators::harness::{OperatorUnderTest, Rng};
use crate::operators::{ChangelogBufferSpec, WindowBound, WindowColumn};

/// Windows are `SIZE` nanoseconds long.
const SIZE: i64 = 10;

/// `(k, window_start)` -> `v`.
type Table = BTreeMap<(i64, i64), Option<i64>>;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("window_start", ts(), false),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn batch(changes: &[(Op, i64, i64, Option<i64>)]) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.1))),
        Arc::new(TimestampNanosecondArray::from_iter_values(
            changes.iter().map(|c| c.2),
        )),
        Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.3))),
        Arc::new(Int8Array::from_iter_values(
            changes.iter().map(|c| c.0.code()),
        )),
    ];
    RecordBatch::try_new(changelog::with_op_field(&schema()), columns).unwrap()
}

/// Applies emitted changes by key: an addition to a key without a row, a retraction of
/// exactly the row the key has. Returns how many changes there were.
fn apply(table: &mut Table, batches: &[RecordBatch]) -> usize {
    let mut n = 0;
    for b in batches {
        let ops = changelog::ops(b).unwrap();
        let k = b.column(0).as_primitive::<Int64Type>();
        let w = b.column(1).as_primitive::<TimestampNanosecondType>();
        let v = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let key = (k.value(i), w.value(i));
            let value = v.is_valid(i).then(|| v.value(i));
            if Op::from_code(ops.value(i)).unwrap().is_add() {
                assert_eq!(table.insert(key, value), None, "{key:?} added twice");
            } else {
                assert_eq!(table.remove(&key), Some(value), "{key:?} retracted wrongly");
            }
            n += 1;
        }
    }
    n
}

#[test]
fn emitted_net_changes_apply_to_the_input_changes_and_closed_windows_come_at_once() {
    for seed in 1..=6 {
        let spec = ChangelogBufferSpec {
            schema: schema(),
            key: vec![0, 1],
            interval: std::time::Duration::from_millis(100),
            window: Some(WindowColumn::new(1, WindowBound::start(SIZE))),
        };
        let mut h = OperatorUnderTest::new(spec, vec![Partitioning::Forward])
            .start(1)
            .unwrap();
        let mut rng = Rng::new(seed);
        let (mut input, mut output) = (Table::new(), Table::new());
        let (mut changes_in, mut changes_out) = (0, 0);
        let mut watermark = 0;
        for _ in 0..400 {
            // Changes of open windows only (the aggregate drops rows of closed ones).
            let mut changes = Vec::new();
            for _ in 0..rng.below(12) + 1 {
                let k = rng.below(6) as i64;
                let w = (watermark / SIZE + rng.below(3) as i64) * SIZE;
                let v = (rng.below(8) > 0).then(|| rng.below(5) as i64);
                match input.get(&(k, w)).copied() {
                    None => {
                        changes.push((Op::Insert, k, w, v));
                        input.insert((k, w), v);
                    }
                    Some(old) if rng.below(4) > 0 => {
                        changes.push((Op::UpdateBefore, k, w, old));
                        changes.push((Op::UpdateAfter, k, w, v));
                        input.insert((k, w), v);
                    }
                    Some(old) => {
                        changes.push((Op::Delete, k, w, old));
                        input.remove(&(k, w));
                    }
                }
            }
            changes_in += changes.len();
            h.batch(0, batch(&changes)).unwrap();
            assert!(
                h.take_output().is_empty(),
                "changes came out between emissions"
            );
            match rng.below(10) {
                0 | 1 => {
                    h.timer().unwrap();
                    changes_out += apply(&mut output, &h.take_output());
                    assert_eq!(output, input, "seed {seed}: after a timer");
                }
                2 => {
                    h.barrier().unwrap();
                    changes_out += apply(&mut output, &h.take_output());
                    assert_eq!(output, input, "seed {seed}: after a barrier");
                }
                3 | 4 => {
                    watermark += rng.below(2 * SIZE as u64) as i64;
                    h.watermark(watermark).unwrap();
                    changes_out += apply(&mut output, &h.take_output());
                    let closed = |t: &Table| -> Table {
                        t.iter()
                            .filter(|((_, w), _)| w + SIZE <= watermark)
                            .map(|(k, v)| (*k, *v))
                            .collect()
                    };
                    assert_eq!(
                        closed(&output),
                        closed(&input),
                        "seed {seed}: closed windows"
                    );
                }
                _ => {}
            }
        }
        h.end().unwrap();
        changes_out += apply(&mut output, &h.take_output());
        assert_eq!(output, input, "seed {seed}: at the end");
        assert!(
            changes_out < changes_in,
            "seed {seed}: {changes_out} changes out of {changes_in}"
        );
    }
}
