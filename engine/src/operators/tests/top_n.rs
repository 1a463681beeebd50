//! TopN (without windows) through the harness: random inserts, updates and deletes; after
//! every batch the changelog emitted so far, applied as a multiset, must equal a direct
//! ranking of the rows live at that point (ties broken by the row's columns), also across
//! restores at other parallelisms; arrival order and the at-end mode over append-only input.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, Int8Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalSortExpr;

use super::{apply_multiset, col};
use crate::changelog::{self, Op};
use crate::graph::Partitioning;
use crate::operators::harness::{OperatorUnderTest, Rng};
use crate::operators::TopNSpec;

/// `(p, v, w)`: partition, ranked value (NULLs rank last), a tie-breaking column.
type Row = (Option<i64>, Option<i64>, i64);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("p", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Int64, false),
    ]))
}

/// How the test's Top-N ranks and emits.
#[derive(Clone, Copy, Debug)]
struct Mode {
    keyed: bool,
    ordered: bool,
    updating: bool,
    at_end: bool,
    first: u64,
    last: u64,
    /// The row number is left out of the output: rows entering and leaving are emitted.
    rows: bool,
    /// The task's memory budget (an append-only input's cache of partitions).
    budget: Option<usize>,
}

/// `ROW_NUMBER() OVER ([PARTITION BY p] [ORDER BY v DESC NULLS LAST]) BETWEEN first AND last`.
fn top_n(m: Mode) -> OperatorUnderTest {
    let schema = input_schema();
    let mut out: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    out.push(Field::new("rn", DataType::UInt64, false));
    let order = if m.ordered {
        vec![PhysicalSortExpr {
            expr: col("v", 1),
            options: SortOptions {
                descending: true,
                nulls_first: false,
            },
        }]
    } else {
        vec![]
    };
    let keys = if m.keyed { vec![col("p", 0)] } else { vec![] };
    let spec = TopNSpec {
        input_schema: schema,
        input_updating: m.updating,
        keys: keys.clone(),
        order,
        first: m.first,
        last: m.last,
        at_end: m.at_end,
        emit_rows: m.rows,
        output_schema: Arc::new(Schema::new(out)),
        state_ttl: None,
        description: format!("{m:?}"),
    };
    let routing = if m.keyed {
        Partitioning::Hash(keys)
    } else {
        Partitioning::Single
    };
    let op = OperatorUnderTest::new(spec, vec![routing]);
    match m.budget {
        Some(bytes) => op.with_memory_budget(bytes),
        None => op,
    }
}

fn batch(changes: &[(Row, Op)], updating: bool) -> RecordBatch {
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.0 .0))),
        Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.0 .1))),
        Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0 .2))),
    ];
    if !updating {
        return RecordBatch::try_new(input_schema(), columns).unwrap();
    }
    columns.push(Arc::new(Int8Array::from_iter_values(
        changes.iter().map(|c| c.1.code()),
    )));
    RecordBatch::try_new(changelog::with_op_field(&input_schema()), columns).unwrap()
}

/// Steps of random changes: inserts (repeated rows, NULLs), and with `updating` updates and
/// deletes of live rows.
fn changes(seed: u64, steps: usize, updating: bool) -> Vec<Vec<(Row, Op)>> {
    let mut rng = Rng::new(seed);
    let mut live: Vec<Row> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..steps {
        let mut step = Vec::new();
        for _ in 0..1 + rng.below(10) {
            let new_row = |rng: &mut Rng| -> Row {
                let p = (rng.below(8) > 0).then(|| rng.below(3) as i64);
                let v = (rng.below(6) > 0).then(|| rng.below(12) as i64);
                (p, v, rng.below(3) as i64)
            };
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
        out.push(step);
    }
    out
}

type Table = BTreeMap<Vec<Option<i64>>, i64>;

/// The ranked rows of `rows` (in arrival order), directly: `(p, v, w, rn)` as a multiset.
fn direct(m: Mode, rows: &[Row]) -> Table {
    let mut parts: BTreeMap<Option<i64>, Vec<Row>> = BTreeMap::new();
    for r in rows {
        parts
            .entry(if m.keyed { r.0 } else { None })
            .or_default()
            .push(*r);
    }
    let mut out = Table::new();
    for (_, mut rows) in parts {
        if m.ordered {
            // v DESC NULLS LAST, then the row ascending with NULLs first.
            rows.sort_by_key(|r| (r.1.is_none(), Reverse(r.1), r.0, r.1, r.2));
        }
        for (i, r) in rows.iter().enumerate() {
            let rn = i as u64 + 1;
            if rn >= m.first && rn <= m.last {
                let mut row = vec![r.0, r.1, Some(r.2)];
                if !m.rows {
                    row.push(Some(rn as i64));
                }
                *out.entry(row).or_default() += 1;
            }
        }
    }
    out
}

/// Applies the output; without the row number when `m.rows` (it is the rank at the time of
/// each change, which a row keeps no longer than the next shift).
fn apply(m: Mode, table: &mut Table, batches: &[RecordBatch], updating: bool) {
    apply_multiset(table, batches, updating, |rel, i| {
        let width = rel.num_columns() - usize::from(m.rows);
        rel.columns()[..width]
            .iter()
            .map(|c| match ScalarValue::try_from_array(c, i).unwrap() {
                ScalarValue::Int64(v) => v,
                ScalarValue::UInt64(v) => v.map(|v| v as i64),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    })
}

/// Runs random changes at `parallelism`, restoring before the steps of `restarts` at the
/// parallelism given; checks the applied changelog after every step (at the end only with
/// `at_end`).
fn check(m: Mode, seed: u64, parallelism: usize, restarts: &[(usize, usize)]) {
    let op = top_n(m);
    let mut h = op.start(parallelism).unwrap();
    let mut table = Table::new();
    let mut live: Vec<Row> = Vec::new();
    let updating = TopNSpec::updates(m.updating, m.ordered, m.at_end);
    for (i, step) in changes(seed, 40, m.updating).iter().enumerate() {
        if let Some(&(_, p)) = restarts.iter().find(|(at, _)| *at == i) {
            let checkpoint = h.barrier().unwrap();
            apply(m, &mut table, &h.take_output(), updating);
            h = op.restore(&checkpoint, p).unwrap();
        }
        h.batch(0, batch(step, m.updating)).unwrap();
        for (row, op) in step {
            if op.is_add() {
                live.push(*row);
            } else {
                let at = live.iter().position(|r| r == row).unwrap();
                live.remove(at);
            }
        }
        apply(m, &mut table, &h.take_output(), updating);
        if !m.at_end {
            assert_eq!(
                table,
                direct(m, &live),
                "{m:?}, seed {seed}, after step {i}"
            );
        }
    }
    h.end().unwrap();
    apply(m, &mut table, &h.take_output(), updating);
    assert_eq!(table, direct(m, &live), "{m:?}, seed {seed}, at the end");
}

const RANKED: Mode = Mode {
    keyed: true,
    ordered: true,
    updating: true,
    at_end: false,
    first: 1,
    last: 3,
    rows: false,
    budget: None,
};

#[test]
fn the_top_rows_follow_inserts_updates_and_deletes() {
    for seed in [1, 2, 3] {
        check(RANKED, seed, 1, &[]);
        check(RANKED, seed, 3, &[]);
        check(
            Mode {
                keyed: false,
                ..RANKED
            },
            seed,
            1,
            &[],
        );
        check(
            Mode {
                first: 2,
                last: 4,
                ..RANKED
            },
            seed,
            2,
            &[],
        );
        // Deduplication keeping the row with the largest v.
        check(Mode { last: 1, ..RANKED }, seed, 2, &[]);
        // Without the row number in the output: rows entering and leaving the top.
        check(
            Mode {
                rows: true,
                ..RANKED
            },
            seed,
            2,
            &[(15, 3)],
        );
        check(
            Mode {
                rows: true,
                first: 2,
                last: 5,
                ..RANKED
            },
            seed,
            1,
            &[],
        );
        // An append-only input keeps only the top rows, and emits the same changes.
        check(
            Mode {
                updating: false,
                ..RANKED
            },
            seed,
            2,
            &[],
        );
    }
}

#[test]
fn arrival_order_keeps_the_first_rows_append_only() {
    let first = Mode {
        ordered: false,
        updating: false,
        ..RANKED
    };
    for seed in [4, 5] {
        check(first, seed, 1, &[]);
        check(Mode { last: 1, ..first }, seed, 3, &[(10, 2), (20, 1)]);
    }
}

#[test]
fn at_end_the_final_rows_come_once() {
    let at_end = Mode {
        updating: false,
        at_end: true,
        ..RANKED
    };
    for seed in [6, 7] {
        check(at_end, seed, 2, &[]);
        check(
            Mode {
                first: 2,
                last: 2,
                keyed: false,
                ..at_end
            },
            seed,
            1,
            &[(15, 1)],
        );
    }
}

#[test]
fn top_n_state_restores_at_other_parallelisms() {
    check(RANKED, 8, 1, &[(10, 3), (25, 2)]);
    check(
        Mode {
            updating: false,
            ..RANKED
        },
        9,
        3,
        &[(10, 1), (25, 3)],
    );
    // The cached partitions written back and dropped after every batch change nothing.
    check(
        Mode {
            updating: false,
            budget: Some(1),
            ..RANKED
        },
        10,
        2,
        &[(10, 3), (25, 1)],
    );
}
