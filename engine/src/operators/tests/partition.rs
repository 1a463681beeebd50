//! `partition_of_rows`: the routing a restore at another parallelism relies on agrees with
//! the keyed exchange, row by row, whatever the batch.

use std::sync::Arc;

use crossbeam_channel::unbounded;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use datafusion::arrow::record_batch::RecordBatch;

use super::col;
use crate::graph::Partitioning;
use crate::message::Message;
use crate::operators::harness::Rng;
use crate::runtime::{partition_of_rows, Outlet};

fn keys(n: usize, seed: u64) -> RecordBatch {
    let mut rng = Rng::new(seed);
    let k: Int64Array = (0..n)
        .map(|_| (rng.below(10) > 0).then(|| rng.below(500) as i64))
        .collect();
    let s: StringArray = (0..n)
        .map(|_| Some(["a", "bb", "ccc"][rng.below(3) as usize]))
        .collect();
    RecordBatch::try_from_iter([
        ("k", Arc::new(k) as ArrayRef),
        ("s", Arc::new(s) as ArrayRef),
    ])
    .unwrap()
}

#[test]
fn the_exchange_sends_each_row_where_partition_of_rows_says() {
    let batch = keys(1000, 1);
    for parallelism in [2, 3, 5] {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..parallelism).map(|_| unbounded()).unzip();
        let mut outlet = Outlet::new(Partitioning::Hash(vec![col("k", 0), col("s", 1)]), senders);
        outlet.send_batch(batch.clone()).unwrap();
        let mut seen = 0;
        for (instance, receiver) in receivers.iter().enumerate() {
            while let Ok(Message::Batch(part)) = receiver.try_recv() {
                let routed = partition_of_rows(part.columns(), parallelism).unwrap();
                assert!(routed.iter().all(|&to| to as usize == instance));
                seen += part.num_rows();
            }
        }
        assert_eq!(seen, batch.num_rows(), "every row sent once");
    }
}

#[test]
fn a_row_routes_the_same_alone_in_a_slice_or_in_a_batch() {
    let batch = keys(300, 2);
    let whole = partition_of_rows(batch.columns(), 3).unwrap();
    assert!(whole.iter().all(|&to| to < 3));
    for (offset, len) in [(0, 1), (7, 50), (299, 1), (100, 200)] {
        let slice = batch.slice(offset, len);
        assert_eq!(
            partition_of_rows(slice.columns(), 3).unwrap(),
            whole[offset..offset + len]
        );
    }
    // The same key values in another batch (another order) route the same way.
    let reversed: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            let idx: datafusion::arrow::array::UInt32Array = (0..c.len() as u32).rev().collect();
            datafusion::arrow::compute::take(c.as_ref(), &idx, None).unwrap()
        })
        .collect();
    let mut back = partition_of_rows(&reversed, 3).unwrap();
    back.reverse();
    assert_eq!(back, whole);
}

#[test]
fn keys_spread_over_instances_and_one_instance_takes_all() {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(0..3000));
    let routed = partition_of_rows(std::slice::from_ref(&k), 3).unwrap();
    for instance in 0..3 {
        let n = routed.iter().filter(|&&to| to == instance).count();
        assert!(
            (800..1200).contains(&n),
            "instance {instance} got {n} of 3000"
        );
    }
    assert!(partition_of_rows(std::slice::from_ref(&k), 1)
        .unwrap()
        .iter()
        .all(|&to| to == 0));
    assert!(partition_of_rows(&[k], 0)
        .unwrap()
        .iter()
        .all(|&to| to == 0));
    // Equal keys meet, distinct NULL rows too.
    let dup: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None, Some(7), None]));
    let r = partition_of_rows(&[dup], 4).unwrap();
    assert_eq!((r[0], r[1]), (r[2], r[3]));
}
