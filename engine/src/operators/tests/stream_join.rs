//! StreamJoin through the harness: random inserts, updates and deletes on both sides, for
//! every join kind, with and without a non-equality ON condition; after every batch the
//! changelog emitted so far, applied as a multiset, must equal a direct nested-loop join of
//! the rows live at that point, also across restores at other parallelisms.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, Int8Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::BinaryExpr;

use super::{apply_multiset, col};
use crate::changelog::{self, Op};
use crate::graph::Partitioning;
use crate::operators::harness::{OperatorUnderTest, Rng};
use crate::operators::{JoinKind, StreamJoinSide, StreamJoinSpec};

/// `(k, v)`: a NULL key never matches.
type Row = (Option<i64>, i64);

const KINDS: [JoinKind; 8] = JoinKind::ALL;

fn side_schema(prefix: &str, nullable: bool) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(format!("{prefix}k"), DataType::Int64, true),
        Field::new(format!("{prefix}v"), DataType::Int64, nullable),
    ]))
}

fn fields(schema: &SchemaRef) -> Vec<Field> {
    schema.fields().iter().map(|f| f.as_ref().clone()).collect()
}

/// `SELECT ... FROM l <kind> JOIN r ON l.k = r.k [AND l.v < r.v]`.
fn join(kind: JoinKind, filtered: bool, updating: bool) -> OperatorUnderTest {
    join_with_ttl(kind, filtered, updating, None)
}

fn join_with_ttl(
    kind: JoinKind,
    filtered: bool,
    updating: bool,
    state_ttl: Option<std::time::Duration>,
) -> OperatorUnderTest {
    let (l, r) = (side_schema("l", false), side_schema("r", false));
    let joined = Arc::new(Schema::new([fields(&l), fields(&r)].concat()));
    let pad = |s: &SchemaRef, yes: bool| {
        fields(s)
            .into_iter()
            .map(|f| {
                let nullable = f.is_nullable() || yes;
                f.with_nullable(nullable)
            })
            .collect::<Vec<_>>()
    };
    let output = match kind {
        JoinKind::LeftSemi | JoinKind::LeftAnti => Arc::clone(&l),
        JoinKind::RightSemi | JoinKind::RightAnti => Arc::clone(&r),
        _ => {
            let left_pads = matches!(kind, JoinKind::Right | JoinKind::Full);
            let right_pads = matches!(kind, JoinKind::Left | JoinKind::Full);
            Arc::new(Schema::new(
                [pad(&l, left_pads), pad(&r, right_pads)].concat(),
            ))
        }
    };
    let filter =
        filtered.then(|| Arc::new(BinaryExpr::new(col("lv", 1), BinaryOp::Lt, col("rv", 3))) as _);
    let spec = StreamJoinSpec {
        kind,
        left: StreamJoinSide {
            schema: l,
            updating,
            keys: vec![col("lk", 0)],
        },
        right: StreamJoinSide {
            schema: r,
            updating,
            keys: vec![col("rk", 0)],
        },
        filter,
        joined_schema: joined,
        output_schema: output,
        state_ttl,
        description: format!("{kind:?}"),
    };
    OperatorUnderTest::new(
        spec,
        vec![
            Partitioning::Hash(vec![col("lk", 0)]),
            Partitioning::Hash(vec![col("rk", 0)]),
        ],
    )
}

fn batch(side: usize, changes: &[(Row, Op)], updating: bool) -> RecordBatch {
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.0 .0))),
        Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0 .1))),
    ];
    let schema = side_schema(["l", "r"][side], false);
    if !updating {
        return RecordBatch::try_new(schema, columns).unwrap();
    }
    columns.push(Arc::new(Int8Array::from_iter_values(
        changes.iter().map(|c| c.1.code()),
    )));
    RecordBatch::try_new(changelog::with_op_field(&schema), columns).unwrap()
}

/// Steps of random changes to one side each: inserts (with repeated rows and NULL keys),
/// updates and deletes of live rows (none when `updating` is false).
fn changes(seed: u64, steps: usize, updating: bool) -> Vec<(usize, Vec<(Row, Op)>)> {
    let mut rng = Rng::new(seed);
    let mut live: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
    let mut out = Vec::new();
    for _ in 0..steps {
        let side = rng.below(2) as usize;
        let mut step = Vec::new();
        for _ in 0..1 + rng.below(8) {
            let new_row = |rng: &mut Rng| -> Row {
                let k = (rng.below(10) > 0).then(|| rng.below(4) as i64);
                (k, rng.below(6) as i64)
            };
            let live = &mut live[side];
            match if updating { rng.below(4) } else { 0 } {
                2 if !live.is_empty() => {
                    let old = live.swap_remove(rng.below(live.len() as u64) as usize);
                    let new = new_row(&mut rng);
                    live.push(new);
                    step.push((old, Op::UpdateBefore));
                    step.push((new, Op::UpdateAfter));
                }
                3 if !live.is_empty() => {
                    let old = live.swap_remove(rng.below(live.len() as u64) as usize);
                    step.push((old, Op::Delete));
                }
                _ => {
                    let r = new_row(&mut rng);
                    live.push(r);
                    step.push((r, Op::Insert));
                }
            }
        }
        out.push((side, step));
    }
    out
}

fn cell(v: Option<i64>) -> String {
    v.map_or("NULL".into(), |v| v.to_string())
}

/// The join of the live rows, directly: a multiset of output rows as text.
fn direct(kind: JoinKind, filtered: bool, l: &[Row], r: &[Row]) -> BTreeMap<Vec<String>, i64> {
    let hit = |a: &Row, b: &Row| a.0.is_some() && a.0 == b.0 && (!filtered || a.1 < b.1);
    let row = |a: Option<&Row>, b: Option<&Row>| {
        let mut out = Vec::new();
        if kind.pairs() || matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti) {
            out.extend([cell(a.and_then(|a| a.0)), cell(a.map(|a| a.1))]);
        }
        if kind.pairs() || matches!(kind, JoinKind::RightSemi | JoinKind::RightAnti) {
            out.extend([cell(b.and_then(|b| b.0)), cell(b.map(|b| b.1))]);
        }
        out
    };
    let mut out: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    let mut add = |k: Vec<String>| *out.entry(k).or_default() += 1;
    for a in l {
        let matched: Vec<&Row> = r.iter().filter(|b| hit(a, b)).collect();
        match kind {
            JoinKind::LeftSemi if !matched.is_empty() => add(row(Some(a), None)),
            JoinKind::LeftAnti if matched.is_empty() => add(row(Some(a), None)),
            k if k.pairs() => {
                for b in &matched {
                    add(row(Some(a), Some(b)));
                }
                if matched.is_empty() && matches!(k, JoinKind::Left | JoinKind::Full) {
                    add(row(Some(a), None));
                }
            }
            _ => {}
        }
    }
    for b in r {
        let matched = l.iter().any(|a| hit(a, b));
        match kind {
            JoinKind::RightSemi if matched => add(row(None, Some(b))),
            JoinKind::RightAnti if !matched => add(row(None, Some(b))),
            JoinKind::Right | JoinKind::Full if !matched => add(row(None, Some(b))),
            _ => {}
        }
    }
    out
}

/// Applies an emitted changelog to a multiset of rows; a retraction must name a row there.
fn apply(table: &mut BTreeMap<Vec<String>, i64>, batches: &[RecordBatch], updating: bool) {
    apply_multiset(table, batches, updating, |rel, i| {
        rel.columns()
            .iter()
            .map(|c| match ScalarValue::try_from_array(c, i).unwrap() {
                ScalarValue::Int64(v) => cell(v),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    })
}

/// Runs random changes through a `kind` join at `parallelism`, restoring before the steps of
/// `restarts` at the parallelism given (in turn, where a step is listed more than once), and
/// checks the applied changelog after every step.
fn check(
    kind: JoinKind,
    filtered: bool,
    updating: bool,
    seed: u64,
    parallelism: usize,
    restarts: &[(usize, usize)],
) {
    let op = join(kind, filtered, updating);
    let mut h = op.start(parallelism).unwrap();
    let mut table = BTreeMap::new();
    let mut live: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
    let out_updating = StreamJoinSpec::updates(kind, updating, updating);
    for (i, (side, step)) in changes(seed, 50, updating).iter().enumerate() {
        for &(_, p) in restarts.iter().filter(|(at, _)| *at == i) {
            let checkpoint = h.barrier().unwrap();
            apply(&mut table, &h.take_output(), out_updating);
            h = op.restore(&checkpoint, p).unwrap();
        }
        h.batch(*side, batch(*side, step, updating)).unwrap();
        for (row, op) in step {
            if op.is_add() {
                live[*side].push(*row);
            } else {
                let at = live[*side].iter().position(|r| r == row).unwrap();
                live[*side].swap_remove(at);
            }
        }
        apply(&mut table, &h.take_output(), out_updating);
        let want = direct(kind, filtered, &live[0], &live[1]);
        assert_eq!(
            table, want,
            "{kind:?} filtered {filtered}, seed {seed}, after step {i}"
        );
    }
    h.end().unwrap();
    assert!(h.take_output().is_empty(), "nothing is left at the end");
}

#[test]
fn every_join_kind_keeps_its_result_equal_to_a_direct_join_under_changes() {
    for kind in KINDS {
        for filtered in [false, true] {
            for seed in [1, 2] {
                check(kind, filtered, true, seed, 1, &[]);
                check(kind, filtered, true, seed + 10, 3, &[]);
            }
        }
    }
}

#[test]
fn inner_and_semi_joins_of_append_only_inputs_are_append_only() {
    for kind in KINDS {
        check(kind, true, false, 3, 2, &[]);
    }
    assert!(!StreamJoinSpec::updates(JoinKind::Inner, false, false));
    assert!(StreamJoinSpec::updates(JoinKind::Inner, true, false));
    assert!(StreamJoinSpec::updates(JoinKind::Left, false, false));
}

#[test]
fn join_state_restores_at_other_parallelisms() {
    for kind in [
        JoinKind::Full,
        JoinKind::LeftAnti,
        JoinKind::RightSemi,
        JoinKind::Inner,
    ] {
        check(kind, true, true, 21, 1, &[(15, 3), (30, 2)]);
        check(kind, false, true, 22, 3, &[(10, 1), (25, 3), (40, 2)]);
        // Restored in place, rows inserted after a restore are numbered after the stored
        // ones (equal rows numbered alike would overwrite each other).
        check(
            kind,
            false,
            true,
            23,
            2,
            &[(10, 2), (20, 2), (30, 1), (40, 1)],
        );
    }
    // Append-only inputs: the sides whose rows are kept as runs restore alike. Restored
    // twice before a step, the second checkpoint is taken before any row takes a number: a
    // rescaled instance must have stored the numbering it goes on from (else the rows
    // inserted next would be numbered over the copied ones and replace them).
    for kind in KINDS {
        check(
            kind,
            true,
            false,
            24,
            2,
            &[(15, 3), (15, 1), (30, 3), (30, 2)],
        );
    }
    check(JoinKind::Inner, false, true, 25, 2, &[(20, 3), (20, 2)]);
}

#[test]
fn a_key_not_touched_for_the_state_ttl_loses_its_rows() {
    let ttl = std::time::Duration::from_millis(300);
    let op = join_with_ttl(JoinKind::Inner, false, false, Some(ttl));
    let mut h = op.start(2).unwrap();
    let insert = |k: i64, v: i64| vec![((Some(k), v), Op::Insert)];
    h.batch(0, batch(0, &insert(1, 10), false)).unwrap();
    h.batch(0, batch(0, &insert(2, 20), false)).unwrap();
    h.batch(1, batch(1, &insert(1, 11), false)).unwrap();
    let mut table = BTreeMap::new();
    apply(&mut table, &h.take_output(), false);
    assert_eq!(table.len(), 1, "1 joined while fresh: {table:?}");
    std::thread::sleep(ttl + std::time::Duration::from_millis(200));
    // Key 2's left row expired: a right row finds nothing. Key 1's rows too.
    h.batch(1, batch(1, &insert(2, 21), false)).unwrap();
    h.batch(0, batch(0, &insert(1, 12), false)).unwrap();
    assert!(h.take_output().is_empty(), "expired rows join nothing");
    // Rows that came after the expiry join as usual.
    h.batch(0, batch(0, &insert(2, 22), false)).unwrap();
    let mut table = BTreeMap::new();
    apply(&mut table, &h.take_output(), false);
    let want: BTreeMap<Vec<String>, i64> =
        [(vec!["2".into(), "22".into(), "2".into(), "21".into()], 1)].into();
    assert_eq!(table, want);
}
