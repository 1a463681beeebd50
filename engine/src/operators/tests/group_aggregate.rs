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
use crate::operators::local_group_aggregate::{Holding, PROBE_ROWS};

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
///        sum(v) FILTER (WHERE v > 50), count(DISTINCT v) FILTER (WHERE v > 50)
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
    let spec = aggregate_spec(keyed, state_ttl, updating, mini_batch);
    OperatorUnderTest::new(spec, vec![routing(keyed, "k")])
}

/// Routing on the first column (`name`) when keyed.
fn routing(keyed: bool, name: &str) -> Partitioning {
    if keyed {
        Partitioning::Hash(vec![col(name, 0)])
    } else {
        Partitioning::Single
    }
}

/// The plan node of [`aggregate_with`].
fn aggregate_spec(
    keyed: bool,
    state_ttl: Option<std::time::Duration>,
    updating: bool,
    mini_batch: bool,
) -> GroupAggregateSpec {
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
            filter: Some(big.clone()),
            ..agg(UpdatingAggKind::Sum, v(), DataType::Int64)
        },
        UpdatingAggregate {
            filter: Some(big),
            ..agg(UpdatingAggKind::CountDistinct, v(), DataType::Int64)
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
        ("df", DataType::Int64),
    ] {
        out.push(Field::new(name, t, true));
    }
    let keys = if keyed { vec![col("k", 0)] } else { vec![] };
    GroupAggregateSpec {
        input_schema: Arc::clone(&schema),
        input_updating: updating,
        keys: keys.clone(),
        aggregates,
        output_schema: Arc::new(Schema::new(out)),
        state_ttl,
        window: None,
        mini_batch: mini_batch.then(|| std::time::Duration::from_secs(3600)),
        partials_of: None,
        description: String::new(),
    }
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
            text(ScalarValue::Int64(Some(
                big.iter().collect::<std::collections::BTreeSet<_>>().len() as i64,
            ))),
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
    /// Two phases ([`GroupAggregateSpec::split`]): each step's rows go to two local phases
    /// in turn, whose partial states feed the final phase.
    two_phase: bool,
    /// With two phases: the local phases pass each row on as its own partial row.
    row_by_row: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            updating: true,
            budget: None,
            mini_batch: false,
            two_phase: false,
            row_by_row: false,
        }
    }
}

/// The operator under test: one phase, or the final phase fed by two local phases (each
/// one instance, as two source tasks would chain them).
struct Phases {
    locals: Vec<Harness>,
    last: Harness,
}

impl Phases {
    /// What the local phases emitted, through the final phase.
    fn forward(&mut self) {
        for local in &mut self.locals {
            for partial in local.take_output() {
                self.last.batch(0, partial).unwrap();
            }
        }
    }

    fn batch(&mut self, rel: RecordBatch) {
        if self.locals.is_empty() {
            return self.last.batch(0, rel).unwrap();
        }
        // Rows in turn to each local phase.
        let n = self.locals.len();
        for (i, local) in self.locals.iter_mut().enumerate() {
            let rows: Vec<u32> = (i as u32..rel.num_rows() as u32).step_by(n).collect();
            let rows = datafusion::arrow::array::UInt32Array::from(rows);
            let part = datafusion::arrow::compute::take_record_batch(&rel, &rows).unwrap();
            local.batch(0, part).unwrap();
        }
        self.forward();
    }

    fn timer(&mut self) {
        for local in &mut self.locals {
            local.timer().unwrap();
        }
        self.forward();
        self.last.timer().unwrap();
    }

    /// A barrier passes the local phases (they flush), then the final one.
    fn barrier(&mut self) -> crate::operators::harness::Checkpoint {
        for local in &mut self.locals {
            local.barrier().unwrap();
        }
        self.forward();
        self.last.barrier().unwrap()
    }

    fn end(&mut self) {
        for local in &mut self.locals {
            local.end().unwrap();
        }
        self.forward();
        self.last.end().unwrap();
    }
}

fn check_with(
    setup: Setup,
    keyed: bool,
    seed: u64,
    parallelism: usize,
    restarts: &[(usize, usize)],
) {
    let spec = aggregate_spec(keyed, None, setup.updating, setup.mini_batch);
    let (local, last) = if setup.two_phase {
        let (mut local, merged) = spec
            .split()
            .unwrap()
            .expect("an append-only GROUP BY splits");
        if setup.row_by_row {
            local.holding = Holding::RowByRow;
        }
        let routing = routing(keyed, merged.input_schema.field(0).name());
        (
            Some(OperatorUnderTest::new(local, vec![Partitioning::Single])),
            OperatorUnderTest::new(merged, vec![routing]),
        )
    } else {
        (
            None,
            OperatorUnderTest::new(spec, vec![routing(keyed, "k")]),
        )
    };
    let mut op = last;
    if let Some(budget) = setup.budget {
        op = op.with_memory_budget(budget);
    }
    let steps = changes(seed, 60, !setup.updating);
    let mut h = Phases {
        locals: local
            .iter()
            .flat_map(|l| [l.start(1).unwrap(), l.start(1).unwrap()])
            .collect(),
        last: op.start(parallelism).unwrap(),
    };
    let mut table = BTreeMap::new();
    let mut live: Vec<Row> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if let Some(&(_, p)) = restarts.iter().find(|(at, _)| *at == i) {
            let checkpoint = h.barrier();
            apply(&mut table, &h.last.take_output());
            h.last = op.restore(&checkpoint, p).unwrap();
        }
        h.batch(batch_of(step, setup.updating));
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
                let held = h.last.take_output();
                assert!(held.is_empty(), "emitted before the timer: {held:?}");
                continue;
            }
            h.timer();
            let out = h.last.take_output();
            // One change per group and mini-batch: at most a -U/+U pair for each of 6 keys.
            let rows: usize = out.iter().map(RecordBatch::num_rows).sum();
            assert!(rows <= 12, "{rows} changes in one mini-batch");
            apply(&mut table, &out);
        } else {
            apply(&mut table, &h.last.take_output());
        }
        let mut want = direct(&live, keyed);
        if !keyed && live.is_empty() && !table.is_empty() {
            // The global row stays once it has existed, as in batch SQL.
            want = table.clone();
            assert_eq!(want.values().next().unwrap()[0], "0", "count(*) of nothing");
        }
        assert_eq!(table, want, "keyed {keyed}, after step {i}");
    }
    h.end();
    assert!(
        h.last.take_output().is_empty(),
        "nothing is left at the end"
    );
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
            ..Setup::default()
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

#[test]
fn two_phases_give_the_one_phase_results_across_restores() {
    for (mini_batch, budget, row_by_row) in [
        (false, None, false),
        (true, None, false),
        (false, Some(1), false),
        (true, Some(1), false),
        (false, None, true),
        (true, Some(1), true),
    ] {
        let setup = Setup {
            updating: false,
            budget,
            mini_batch,
            two_phase: true,
            row_by_row,
        };
        for seed in [41, 42] {
            check_with(setup, true, seed, 1, &[]);
            check_with(setup, true, seed, 3, &[(19, 2), (40, 1)]);
            check_with(setup, false, seed, 1, &[(25, 1)]);
        }
    }
    // An updating input cannot be split: a local phase would have to retract.
    assert!(aggregate_spec(true, None, true, false)
        .split()
        .unwrap()
        .is_none());
}

/// One instance of the local phase of the keyed aggregate over append-only rows.
fn local_phase() -> Harness {
    let (local, _) = aggregate_spec(true, None, false, false)
        .split()
        .unwrap()
        .expect("an append-only GROUP BY splits");
    OperatorUnderTest::new(local, vec![Partitioning::Single])
        .start(1)
        .unwrap()
}

/// Without a mini-batch the local phase flushes after every batch: one partial row per
/// group, plus one per further distinct value of a group (the two COUNT(DISTINCT)s of `v`
/// share one multiset), so repeated keys and values cross the exchange once.
#[test]
fn the_local_phase_sends_each_group_and_distinct_value_once_per_flush() {
    let mut h = local_phase();
    let step: Vec<(Row, Op)> = changes(51, 400, true).into_iter().flatten().collect();
    h.batch(0, batch_of(&step, false)).unwrap();
    let out = h.take_output();
    assert_eq!(out.len(), 1, "one flush");
    let mut distinct: BTreeMap<i64, std::collections::BTreeSet<i64>> = BTreeMap::new();
    for (row, _) in &step {
        let values = distinct.entry(row.0).or_default();
        values.extend(row.1);
    }
    let want: usize = distinct.values().map(|v| v.len().max(1)).sum();
    assert!(
        want < step.len() / 4,
        "{want} partial rows for {} rows",
        step.len()
    );
    assert_eq!(out[0].num_rows(), want);
}

/// Past [`PROBE_ROWS`] rows whose groups never repeat, the local phase stops holding groups:
/// a batch of one repeated group then gives one partial row per input row.
#[test]
fn a_local_phase_whose_groups_never_repeat_passes_rows_on_one_by_one() {
    let mut h = local_phase();
    let repeated: Vec<(Row, Op)> = (0..100)
        .map(|i| ((1, Some(i % 3), "n".to_string()), Op::Insert))
        .collect();
    h.batch(0, batch_of(&repeated, false)).unwrap();
    let held = h.take_output();
    assert_eq!(
        held.iter().map(RecordBatch::num_rows).sum::<usize>(),
        3,
        "group 1, 3 values"
    );
    let unique: Vec<(Row, Op)> = (0..PROBE_ROWS as i64)
        .map(|k| ((k + 10, None, "n".to_string()), Op::Insert))
        .collect();
    for chunk in unique.chunks(8192) {
        h.batch(0, batch_of(chunk, false)).unwrap();
    }
    h.take_output();
    h.batch(0, batch_of(&repeated, false)).unwrap();
    let out = h.take_output();
    assert_eq!(
        out.iter().map(RecordBatch::num_rows).sum::<usize>(),
        100,
        "row by row"
    );
}
