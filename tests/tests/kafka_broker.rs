//! The test broker's transactions, through weir's own Kafka client: what the sink relies on
//! (DESIGN.md §6) must hold in the broker the Kafka tests run against (tansu 0.6.0 with
//! `scripts/tansu/end-txn.patch`).

mod common;

use common::kafka::{high_watermark, read_committed, Broker};

/// Transactions overlapping on one partition and ended out of order, as a sink's slots do:
/// X writes, Y writes, X commits, X starts a new producer epoch (InitProducerId) and writes and
/// commits again, then Y commits. Every transaction must become stable: read_committed readers
/// see every record and the last stable offset (where `stop_at = 'end'` stops) reaches the high
/// watermark. Unpatched tansu 0.6.0 left X's second transaction in PrepareCommit for good here
/// (its EndTxn waited for Y's "overlapping" one), which froze the last stable offset;
/// `scripts/tansu/end-txn.patch` makes each EndTxn end its own transaction only.
#[test]
fn overlapping_transactions_all_become_stable() {
    use std::time::Duration;
    use weir_connectors::kafka::consumer::{end_offsets, fetch};
    use weir_connectors::kafka::producer::{
        end_transaction, EndOutcome, OutRecord, Producer, TxnHandle,
    };
    let broker = Broker::start();
    broker.create_topic("overlap", 1);
    let new = |id: &str| {
        let none = kafka_protocol::records::Compression::None;
        Producer::transactional(broker.cluster(), id, Duration::from_secs(60), none)
            .expect("transactional producer")
    };
    let (mut x, mut y) = (new("overlap-x"), new("overlap-y"));
    // Five records in one flush, the transaction left open and handed over, as the sink does.
    let mut written = Vec::new();
    let mut write = |p: &mut Producer, tag: &str| -> TxnHandle {
        for i in 0..5 {
            let value = format!("{tag}-{i}");
            let record = OutRecord {
                key: None,
                value: Some(bytes::Bytes::from(value.clone())),
                timestamp: 0,
            };
            p.push("overlap", 0, record);
            written.push(value);
        }
        p.flush().expect("produce");
        p.hand_over().expect("an open transaction")
    };
    let mut cluster = broker.cluster();
    let mut commit = |h: &TxnHandle| {
        let outcome = end_transaction(&mut cluster, h, true).expect("EndTxn");
        assert_eq!(outcome, EndOutcome::Done, "commit {h:?}");
    };
    let x0 = write(&mut x, "x");
    let y0 = write(&mut y, "y");
    commit(&x0);
    x.renew().expect("InitProducerId");
    let x1 = write(&mut x, "x-again");
    assert!(
        x1.epoch > x0.epoch,
        "renew must bump the epoch: {x0:?} {x1:?}"
    );
    commit(&x1);
    commit(&y0);
    let decoded = read_committed(&broker, "overlap")
        .remove(&0)
        .unwrap_or_default();
    assert_eq!(decoded, written, "committed records missing from the log");
    let stable = end_offsets(&mut cluster, "overlap", &[0]).expect("end offsets")[&0];
    let high = high_watermark(&broker, "overlap", 0);
    assert_eq!(
        stable, high,
        "the last stable offset is stuck below the high watermark"
    );
    // What weir's source reads (a read_committed fetch, which the broker cuts at the LSO).
    let fetched =
        fetch(&mut cluster, "overlap", &[(0, 0)], Duration::ZERO, 1 << 20).expect("fetch");
    let read: Vec<String> = fetched
        .iter()
        .flat_map(|d| &d.records)
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(read, written, "a read_committed fetch stops short");
}
