//! GroupAggregate through the harness: random inserts, updates and deletes; after every
//! batch the changelog emitted so far, applied by key, must equal a direct computation over
//! the rows live at that point, also across restores at other parallelisms.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, Int8Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{lit, BinaryExpr};

use super::col;
use crate::changelog::{self, Op};
use crate::graph::Partitioning;
use crate::operators::group_aggregate::{GroupAggregateSpec, UpdatingAggKind, UpdatingAggregate};
use crate::operators::harness::{Harness, OperatorUnderTest, Rng};

/// `(k, v, name)`.
type Row = (i64, Option<i64>, String);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// ```sql
/// SELECT k, count(*), count(v), sum(v), avg(v), min(v), max(name), count(DISTINCT v),
///        sum(v) FILTER (WHERE v > 50)
/// FROM input GROUP BY k
/// ```
/// (without `k` in the GROUP BY when `keyed` is false).
/// `updating`: whether the input is an updating stream (otherwise append-only: MIN and MAX
/// keep only their extreme). `mini_batch`: input rows are held until the timer.
fn aggregate_with(
    keyed: bool,
    state_ttl: Option<std::time::Duration>,
    updating: bool,
    mini_batch: bool,
) -> OperatorUnderTest {
    let schema = input_schema();
    let v = || col("v", 1);
    let agg = |kind, arg, output| UpdatingAggregate {
        kind,
        arg,
        filter: None,
        output,
    };
    let big = Arc::new(BinaryExpr::new(v(), BinaryOp::Gt, lit(50i64)));
    let aggregates = vec![
        agg(UpdatingAggKind::Count, lit(1i64), DataType::Int64),
        agg(UpdatingAggKind::Count, v(), DataType::Int64),
        agg(UpdatingAggKind::Sum, v(), DataType::Int64),
        agg(UpdatingAggKind::Avg, v(), DataType::Float64),
        agg(UpdatingAggKind::Min, v(), DataType::Int64),
        agg(UpdatingAggKind::Max, col("name", 2), DataType::Utf8),
        agg(UpdatingAggKind::CountDistinct, v(), DataType::Int64),
        UpdatingAggregate {
            filter: Some(big),
            ..agg(UpdatingAggKind::Sum, v(), DataType::Int64)
        },
    ];
    let mut out = Vec::new();
    if keyed {
        out.push(Field::new("k", DataType::Int64, true));
    }
    for (name, t) in [
        ("n", DataType::Int64),
        ("nv", DataType::Int64),
        ("s", DataType::Int64),
        ("a", DataType::Float64),
        ("lo", DataType::Int64),
        ("hi", DataType::Utf8),
        ("d", DataType::Int64),
        ("sf", DataType::Int64),
    ] {
        out.push(Field::new(name, t, true));
    }
    let keys = if keyed { vec![col("k", 0)] } else { vec![] };
    let spec = GroupAggregateSpec {
        input_schema: Arc::clone(&schema),
        input_updating: updating,
        keys: keys.clone(),
        aggregates,
        output_schema: Arc::new(Schema::new(out)),
        state_ttl,
        window: None,
        mini_batch: mini_batch.then(|| std::time::Duration::from_secs(3600)),
        description: String::new(),
    };
    let routing = if keyed {
        Partitioning::Hash(keys)
    } else {
        Partitioning::Single
    };
    OperatorUnderTest::new(spec, vec![routing])
}

fn batch(changes: &[(Row, Op)]) -> RecordBatch {
    batch_of(changes, true)
}

/// The changes as a batch of an updating input, or of an append-only one (inserts only, no
/// change kinds).
fn batch_of(changes: &[(Row, Op)], updating: bool) -> RecordBatch {
    let rel = RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0 .0))),
            Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.0 .1))),
            Arc::new(StringArray::from_iter_values(
                changes.iter().map(|c| c.0 .2.clone()),
            )),
        ],
    )
    .unwrap();
    if !updating {
        assert!(changes.iter().all(|c| c.1 == Op::Insert));
        return rel;
    }
    let mut columns: Vec<ArrayRef> = rel.columns().to_vec();
    columns.push(Arc::new(Int8Array::from_iter_values(
        changes.iter().map(|c| c.1.code()),
    )));
    RecordBatch::try_new(changelog::with_op_field(&input_schema()), columns).unwrap()
}

/// Batches of random changes: inserts, updates (`-U` old, `+U` new) and deletes of live
/// rows, over 6 keys; values with NULLs and repeats (for DISTINCT), names for MAX. Only
/// inserts with `inserts_only`.
fn changes(seed: u64, steps: usize, inserts_only: bool) -> Vec<Vec<(Row, Op)>> {
    let mut rng = Rng::new(seed);
    let mut live: Vec<Row> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..steps {
        let mut step = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let new_row = |rng: &mut Rng| -> Row {
                let v = (rng.below(8) > 0).then(|| rng.below(100) as i64);
                (rng.below(6) as i64, v, format!("n{}", rng.below(40)))
            };
            match if inserts_only { 0 } else { rng.below(4) } {
                2 if !live.is_empty() => {
                    let old = live.swap_remove(rng.below(live.len() as u64) as usize);
                    let new = new_row(&mut rng);
                    live.push(new.clone());
                    step.push((old, Op::UpdateBefore));
                    step.push((new, Op::UpdateAfter));
                }
                3 if !live.is_empty() => {
                    let old = live.swap_remove(rng.below(live.len() as u64) as usize);
                    step.push((old, Op::Delete));
                }
                _ => {
                    let r = new_row(&mut rng);
                    live.push(r.clone());
                    step.push((r, Op::Insert));
                }
            }
        }
        out.push(step);
    }
    out
}

fn text(v: ScalarValue) -> String {
    if v.is_null() {
        "NULL".into()
    } else {
        v.to_string()
    }
}

/// The result rows over the live rows, by group key, as text.
fn direct(live: &[Row], keyed: bool) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
    for r in live {
        groups
            .entry(if keyed { r.0 } else { 0 })
            .or_default()
            .push(r);
    }
    let mut out = BTreeMap::new();
    for (k, rows) in groups {
        let vs: Vec<i64> = rows.iter().filter_map(|r| r.1).collect();
        let some = |x: i64| (!vs.is_empty()).then_some(x);
        let distinct: std::collections::BTreeSet<i64> = vs.iter().copied().collect();
        let big: Vec<i64> = vs.iter().copied().filter(|&v| v > 50).collect();
        let mut row = Vec::new();
        if keyed {
            row.push(text(ScalarValue::Int64(Some(k))));
        }
        row.extend([
            text(ScalarValue::Int64(Some(rows.len() as i64))),
            text(ScalarValue::Int64(Some(vs.len() as i64))),
            text(ScalarValue::Int64(some(vs.iter().sum()))),
            text(ScalarValue::Float64(
                (!vs.is_empty()).then(|| vs.iter().sum::<i64>() as f64 / vs.len() as f64),
            )),
            text(ScalarValue::Int64(vs.iter().min().copied())),
            text(ScalarValue::Utf8(rows.iter().map(|r| r.2.clone()).max())),
            text(ScalarValue::Int64(Some(distinct.len() as i64))),
            text(ScalarValue::Int64(
                (!big.is_empty()).then(|| big.iter().sum()),
            )),
        ]);
        out.insert(row[0].clone(), row);
    }
    out
}

/// Applies an emitted changelog to `table` (result rows by their first column: the key, or
/// the one global row), checking that every retraction removes the row it names.
fn apply(table: &mut BTreeMap<String, Vec<String>>, batches: &[RecordBatch]) {
    for b in batches {
        let ops = changelog::ops(b).unwrap();
        let rel = changelog::relation(b).unwrap();
        for i in 0..b.num_rows() {
            let row: Vec<String> = rel
                .columns()
                .iter()
                .map(|c| text(ScalarValue::try_from_array(c, i).unwrap()))
                .collect();
            let op = Op::from_code(ops.value(i)).unwrap();
            if op.is_add() {
                let before = table.insert(row[0].clone(), row.clone());
                assert!(
                    before.is_none(),
                    "{op:?} of {row:?} over {before:?}: an add must follow a retraction"
                );
            } else {
                assert_eq!(table.remove(&row[0]).as_ref(), Some(&row), "{op:?}");
            }
        }
    }
}

/// Runs the changes at `parallelism`, restoring before each step of `restarts` at the
/// parallelism given, and checks the applied changelog after every step.
fn check(keyed: bool, seed: u64, parallelism: usize, restarts: &[(usize, usize)]) {
    check_with(Setup::default(), keyed, seed, parallelism, restarts);
}

/// How [`check_with`] runs the operator.
#[derive(Clone, Copy)]
struct Setup {
    /// An updating input (random inserts, updates, deletes) or an append-only one.
    updating: bool,
    /// The task's memory budget (the group cache's share).
    budget: Option<usize>,
    /// Mini-batches: rows are held and applied on every third step's timer (or a restore's
    /// barrier); nothing is emitted in between.
    mini_batch: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            updating: true,
            budget: None,
            mini_batch: false,
        }
    }
}

fn check_with(
    setup: Setup,
    keyed: bool,
    seed: u64,
    parallelism: usize,
    restarts: &[(usize, usize)],
) {
    let mut op = aggregate_with(keyed, None, setup.updating, setup.mini_batch);
    if let Some(budget) = setup.budget {
        op = op.with_memory_budget(budget);
    }
    let steps = changes(seed, 60, !setup.updating);
    let mut h: Harness = op.start(parallelism).unwrap();
    let mut table = BTreeMap::new();
    let mut live: Vec<Row> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if let Some(&(_, p)) = restarts.iter().find(|(at, _)| *at == i) {
            let checkpoint = h.barrier().unwrap();
            apply(&mut table, &h.take_output());
            h = op.restore(&checkpoint, p).unwrap();
        }
        h.batch(0, batch_of(step, setup.updating)).unwrap();
        for (row, op) in step {
            if op.is_add() {
                live.push(row.clone());
            } else {
                let at = live.iter().position(|r| r == row).unwrap();
                live.swap_remove(at);
            }
        }
        if setup.mini_batch {
            if i % 3 != 2 {
                let held = h.take_output();
                assert!(held.is_empty(), "emitted before the timer: {held:?}");
                continue;
            }
            h.timer().unwrap();
            let out = h.take_output();
            // One change per group and mini-batch: at most a -U/+U pair for each of 6 keys.
            let rows: usize = out.iter().map(RecordBatch::num_rows).sum();
            assert!(rows <= 12, "{rows} changes in one mini-batch");
            apply(&mut table, &out);
        } else {
            apply(&mut table, &h.take_output());
        }
        let mut want = direct(&live, keyed);
        if !keyed && live.is_empty() && !table.is_empty() {
            // The global row stays once it has existed, as in batch SQL.
            want = table.clone();
            assert_eq!(want.values().next().unwrap()[0], "0", "count(*) of nothing");
        }
        assert_eq!(table, want, "keyed {keyed}, after step {i}");
    }
    h.end().unwrap();
    assert!(h.take_output().is_empty(), "nothing is left at the end");
}

#[test]
fn the_applied_changelog_equals_a_direct_computation_after_every_batch() {
    for seed in [1, 2, 3] {
        check(true, seed, 1, &[]);
        check(true, seed, 3, &[]);
        check(false, seed, 1, &[]);
    }
}

#[test]
fn restores_at_other_parallelisms_continue_the_same_changelog() {
    check(true, 5, 1, &[(20, 3), (40, 2)]);
    check(true, 6, 3, &[(15, 1), (30, 3), (45, 3)]);
    check(false, 7, 1, &[(20, 1), (40, 1)]);
}

#[test]
fn an_append_only_input_keeps_only_the_extremes_and_gives_the_same_results() {
    let append_only = Setup {
        updating: false,
        ..Setup::default()
    };
    for seed in [11, 12] {
        check_with(append_only, true, seed, 1, &[]);
        check_with(append_only, true, seed, 3, &[(20, 2), (40, 3)]);
        check_with(append_only, false, seed, 1, &[(30, 1)]);
    }
}

#[test]
fn a_group_cache_emptied_after_every_batch_changes_nothing() {
    for updating in [true, false] {
        let tiny = Setup {
            updating,
            budget: Some(1),
            ..Setup::default()
        };
        check_with(tiny, true, 21, 2, &[(20, 3), (40, 1)]);
        check_with(tiny, false, 22, 1, &[(30, 1)]);
    }
}

#[test]
fn mini_batches_emit_each_groups_net_change_once_with_the_same_results() {
    for (updating, budget) in [
        (true, None),
        (false, None),
        (true, Some(1)),
        (false, Some(1)),
    ] {
        let setup = Setup {
            updating,
            budget,
            mini_batch: true,
        };
        check_with(setup, true, 31, 1, &[]);
        // Restores at a step the timer did not reach: the barrier applies the held rows.
        check_with(setup, true, 32, 3, &[(19, 2), (40, 1)]);
        check_with(setup, false, 33, 1, &[(25, 1)]);
    }
}

#[test]
fn a_group_not_touched_for_the_state_ttl_starts_afresh() {
    let ttl = std::time::Duration::from_millis(300);
    let op = aggregate_with(true, Some(ttl), true, false);
    let mut h = op.start(1).unwrap();
    let row = |k: i64, v: i64| ((k, Some(v), "n".to_string()), Op::Insert);
    h.batch(0, batch(&[row(1, 5), row(1, 7), row(2, 1)]))
        .unwrap();
    let mut table = BTreeMap::new();
    apply(&mut table, &h.take_output());
    assert_eq!(table["1"][1], "2", "count of group 1: {table:?}");
    std::thread::sleep(ttl + std::time::Duration::from_millis(200));
    // Group 1 expired without a retraction; its next row starts a new group (+I, count 1),
    // which a consumer applying the changelog sees on top of the old row.
    h.batch(0, batch(&[row(1, 9)])).unwrap();
    let out = h.take_output();
    let ops = changelog::ops(&out[0]).unwrap();
    assert_eq!(out[0].num_rows(), 1);
    assert_eq!(Op::from_code(ops.value(0)).unwrap(), Op::Insert);
    let rel = changelog::relation(&out[0]).unwrap();
    let count = rel
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(count, 1, "a fresh group after the state TTL");
}
