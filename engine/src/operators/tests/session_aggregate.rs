//! SessionAggregateOperator through the harness: one row per session (COUNT, SUM, MIN, MAX
//! over the rows' ids) against the session window's naive replay aggregated by hand, at
//! parallelism 1 and 3, across restores at other parallelisms and with waiting rows spilled.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};

use super::session_window::{events, expected, feed, session_spec};
use super::{col, run, ts};
use crate::graph::Partitioning;
use crate::operators::harness::{int_rows, OperatorUnderTest};
use crate::operators::{GroupColumn, SessionAggregateSpec, UpdatingAggKind, UpdatingAggregate};

fn session_aggregate(keyed: bool) -> OperatorUnderTest {
    let aggregate = |kind| UpdatingAggregate {
        kind,
        arg: col("id", 0),
        filter: None,
        output: DataType::Int64,
    };
    let mut fields = Vec::new();
    let mut group_columns = Vec::new();
    if keyed {
        fields.push(Field::new("k", DataType::Int64, false));
        group_columns.push(GroupColumn::Key(0));
    }
    fields.push(Field::new("window_start", ts(), false));
    fields.push(Field::new("window_end", ts(), false));
    group_columns.extend([GroupColumn::WindowStart, GroupColumn::WindowEnd]);
    for name in ["n", "sum", "min", "max"] {
        fields.push(Field::new(name, DataType::Int64, true));
    }
    let spec = SessionAggregateSpec {
        session: session_spec(keyed),
        projection: None,
        group_columns,
        aggregates: vec![
            aggregate(UpdatingAggKind::Count),
            aggregate(UpdatingAggKind::Sum),
            aggregate(UpdatingAggKind::Min),
            aggregate(UpdatingAggKind::Max),
        ],
        output_schema: Arc::new(Schema::new(fields)),
        description: String::new(),
    };
    let routing = if keyed {
        Partitioning::Hash(vec![col("k", 1)])
    } else {
        Partitioning::Single
    };
    OperatorUnderTest::new(spec, vec![routing])
}

/// The replay's rows (`id, k, start, end, time`) aggregated per session.
fn per_session(rows: &[Vec<Option<i64>>], keyed: bool) -> Vec<Vec<Option<i64>>> {
    let mut sessions: BTreeMap<Vec<i64>, Vec<i64>> = BTreeMap::new();
    for r in rows {
        let v: Vec<i64> = r.iter().map(|c| c.expect("no NULL")).collect();
        let mut group = if keyed { vec![v[1]] } else { vec![] };
        group.extend([v[2], v[3]]);
        sessions.entry(group).or_default().push(v[0]);
    }
    let mut out: Vec<Vec<Option<i64>>> = sessions
        .into_iter()
        .map(|(group, ids)| {
            let mut row: Vec<Option<i64>> = group.into_iter().map(Some).collect();
            row.push(Some(ids.len() as i64));
            row.push(Some(ids.iter().sum()));
            row.push(ids.iter().min().copied());
            row.push(ids.iter().max().copied());
            row
        })
        .collect();
    out.sort();
    out
}

#[test]
fn one_row_per_session_as_the_replay_aggregates_them() {
    for keyed in [true, false] {
        let steps = events(5);
        let (rows, want_late) = expected(&steps, keyed);
        let want = per_session(&rows, keyed);
        assert!(
            want.len() > 1 && want_late > 0,
            "{} sessions, {want_late} late",
            want.len()
        );
        for parallelism in [1, 3] {
            let (out, late) = run(&session_aggregate(keyed), &steps, parallelism, &[], feed);
            assert_eq!(
                int_rows(&out),
                want,
                "keyed {keyed}, parallelism {parallelism}"
            );
            assert_eq!(late, want_late, "keyed {keyed}, parallelism {parallelism}");
        }
    }
}

#[test]
fn restores_and_spills_give_the_output_of_an_uninterrupted_run() {
    for keyed in [true, false] {
        let steps = events(11);
        let (rows, want_late) = expected(&steps, keyed);
        let want = per_session(&rows, keyed);
        let third = steps.len() / 3;
        for (op, restarts) in [
            (session_aggregate(keyed), vec![(third, 3), (2 * third, 1)]),
            (session_aggregate(keyed).with_memory_budget(1), vec![]),
            (
                session_aggregate(keyed).with_memory_budget(1),
                vec![(third, 1), (2 * third, 3)],
            ),
        ] {
            let (out, late) = run(&op, &steps, 2, &restarts, feed);
            assert_eq!(int_rows(&out), want, "keyed {keyed}, restarts {restarts:?}");
            assert_eq!(late, want_late, "keyed {keyed}, restarts {restarts:?}");
        }
    }
}
