//! An updating query into Kafka (DESIGN.md §8): `format = 'debezium-json'` writes one event
//! per change (an update's before and after in one `u` event), keyed by the group key, so
//! each key's events land in one partition in order. Applied per partition in offset order,
//! the committed events must end in the batch result.

mod common;

use std::collections::BTreeMap;

use common::kafka::{read_committed, Broker};

#[test]
fn a_grouped_count_reaches_kafka_as_debezium_events_that_apply_to_the_result() {
    let broker = Broker::start();
    broker.create_topic("clicks", 2);
    broker.create_topic("counts", 3);
    // 2000 rows over 17 keys, both partitions.
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for partition in 0..2 {
        let rows: Vec<String> = (0..1000)
            .map(|i| {
                let (k, v) = (format!("k{}", (i * 7 + partition) % 17), i % 50);
                let e = want.entry(k.clone()).or_default();
                e.0 += 1;
                e.1 += v;
                format!("{{\"k\": \"{k}\", \"v\": {v}}}")
            })
            .collect();
        broker.produce("clicks", partition as i32, &rows);
    }
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("job.sql");
    std::fs::write(
        &script,
        format!(
            "CREATE TABLE clicks (k VARCHAR, v BIGINT)
             WITH (connector = 'kafka', topic = 'clicks', bootstrap_servers = '{b}',
                   stop_at = 'end', batch_size = '64');
             SET runtime_mode = 'streaming';
             SET checkpoint_interval = '50ms';
             CREATE SINK counts WITH (connector = 'kafka', topic = 'counts',
                   bootstrap_servers = '{b}', format = 'debezium-json', key = 'k')
             AS SELECT k, count(*) AS n, sum(v) AS s FROM clicks GROUP BY k;",
            b = broker.bootstrap()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::process::weir_binary())
        .arg("--data-dir")
        .arg(work.path().join("data"))
        .args(["-f", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each key's events are in one partition: apply them in offset order.
    let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut updates = 0;
    for (_, values) in read_committed(&broker, "counts") {
        for v in values {
            let event: serde_json::Value = serde_json::from_str(&v).unwrap();
            let row = |side: &str| {
                let r = &event[side];
                let k = r["k"].as_str().unwrap().to_string();
                (k, (r["n"].as_i64().unwrap(), r["s"].as_i64().unwrap()))
            };
            match event["op"].as_str().unwrap() {
                "c" => {
                    let (k, v) = row("after");
                    assert!(
                        got.insert(k, v).is_none(),
                        "a create over a live row: {event}"
                    );
                }
                "u" => {
                    updates += 1;
                    let (k, before) = row("before");
                    assert_eq!(got.get(&k), Some(&before), "{event}");
                    let (k2, after) = row("after");
                    assert_eq!(k, k2, "an update keeps its key");
                    got.insert(k, after);
                }
                "d" => {
                    let (k, before) = row("before");
                    assert_eq!(got.remove(&k), Some(before), "{event}");
                }
                other => panic!("op {other}"),
            }
        }
    }
    assert!(updates > 0, "counts were updated");
    assert_eq!(got, want);
}
