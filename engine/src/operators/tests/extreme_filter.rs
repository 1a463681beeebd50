//! ExtremeFilter through the harness: against the extreme of each window and key computed
//! directly from the rows an aggregate would count (those not late), every row that carries
//! it is kept, late rows pass untouched, and most of the other rows are dropped.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::ts;
use crate::graph::Partitioning;
use crate::message::EventTime;
use crate::operators::extreme_filter::{Extreme, ExtremeFilterSpec};
use crate::operators::harness::{OperatorUnderTest, Rng};
use crate::operators::windowed::{WindowBound, WindowColumn};

const SIZE: i64 = 10;

/// `(id, key, value, window end)`; a NULL value is `None`.
type Row = (i64, i64, Option<i64>, EventTime);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("window_end", ts(), false),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .unwrap()
}

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column(0).as_primitive::<Int64Type>();
            (0..c.len()).map(|i| c.value(i)).collect::<Vec<_>>()
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn spec(keys: Vec<usize>, extreme: Extreme) -> ExtremeFilterSpec {
    ExtremeFilterSpec {
        window: WindowColumn::new(3, WindowBound::end(SIZE)),
        keys,
        value: 2,
        extreme,
        input_schema: input_schema(),
        description: "ExtremeFilter".into(),
    }
}

/// Feeds random batches with watermarks between them at `parallelism` 1 (the filter runs
/// before the exchange, one instance per upstream instance) and checks the output.
fn check(keyed: bool, extreme: Extreme, seed: u64) {
    let mut rng = Rng::new(seed);
    let op = OperatorUnderTest::new(
        spec(if keyed { vec![1] } else { vec![] }, extreme),
        vec![Partitioning::Forward],
    );
    let mut h = op.start(1).unwrap();
    let mut watermark: EventTime = 0;
    h.watermark(watermark).unwrap();
    let mut counted: Vec<Row> = Vec::new();
    let mut late: Vec<i64> = Vec::new();
    let mut id = 0;
    let mut fed = 0;
    for step in 0..60 {
        let rows: Vec<Row> = (0..rng.below(40))
            .map(|_| {
                id += 1;
                // Mostly the open windows, sometimes one the watermark passed.
                let end = (watermark / SIZE + rng.below(3) as i64) * SIZE
                    + if rng.below(8) == 0 { 0 } else { SIZE };
                let value = (rng.below(10) > 0).then(|| rng.below(1000) as i64 - 500);
                (id, rng.below(3) as i64, value, end)
            })
            .collect();
        fed += rows.len();
        for r in &rows {
            if r.3 <= watermark {
                late.push(r.0);
            } else {
                counted.push(*r);
            }
        }
        h.batch(0, batch(&rows)).unwrap();
        if step % 5 == 4 {
            watermark += SIZE / 2 + rng.below(SIZE as u64) as i64;
            h.watermark(watermark).unwrap();
        }
    }
    h.end().unwrap();
    let kept = ids(&h.take_output());
    // The extreme of each window (and key) over the rows an aggregate counts.
    let mut extremes: BTreeMap<(EventTime, i64), i64> = BTreeMap::new();
    for &(_, k, v, end) in &counted {
        let Some(v) = v else { continue };
        let group = (end, if keyed { k } else { 0 });
        let e = extremes.entry(group).or_insert(v);
        *e = match extreme {
            Extreme::Max => (*e).max(v),
            Extreme::Min => (*e).min(v),
        };
    }
    let carriers: Vec<i64> = counted
        .iter()
        .filter(|(_, k, v, end)| {
            let group = (*end, if keyed { *k } else { 0 });
            v.is_some() && extremes.get(&group) == v.as_ref()
        })
        .map(|r| r.0)
        .collect();
    for id in carriers.iter().chain(&late) {
        assert!(
            kept.binary_search(id).is_ok(),
            "row {id} was dropped (seed {seed})"
        );
    }
    let nulls: Vec<i64> = counted
        .iter()
        .filter(|r| r.2.is_none())
        .map(|r| r.0)
        .collect();
    assert!(
        nulls.iter().all(|id| kept.binary_search(id).is_err()),
        "a row with a NULL value was kept"
    );
    assert!(!late.is_empty() && !carriers.is_empty());
    assert!(
        kept.len() * 3 < fed,
        "{} of {fed} rows kept: the filter hardly filters",
        kept.len()
    );
}

#[test]
fn rows_that_can_carry_their_windows_maximum_are_kept_and_most_others_dropped() {
    for seed in 1..=20 {
        check(false, Extreme::Max, seed);
    }
}

#[test]
fn per_key_extremes_keep_every_carrier_of_each_key() {
    for seed in 1..=20 {
        check(true, Extreme::Max, seed);
        check(true, Extreme::Min, seed + 100);
    }
}
