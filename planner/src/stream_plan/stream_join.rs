//! Planning regular joins: a join without matching windows or time bounds over unbounded or
//! updating inputs (or any input with `runtime_mode = 'streaming'`) keeps both sides' rows by
//! join key and updates its result as either side changes ([`StreamJoinSpec`]).

use std::sync::Arc;

use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::Join;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{JoinKind, StreamJoinSide, StreamJoinSpec};

use super::join::JoinKeys;
use super::{arrow_schema, Stream, StreamPlanner};
use crate::error::Result;
use crate::not_supported;

/// Why a join's result is updating, for error messages.
const UPDATING_JOIN: &str =
    "a join without windows whose result retracts rows (an outer or anti join, or a join of an updating input)";

impl StreamPlanner<'_> {
    pub(super) fn plan_stream_join(
        &mut self,
        join: &Join,
        kind: JoinKind,
        left: &Stream,
        right: &Stream,
        keys: &JoinKeys,
    ) -> Result<Stream> {
        if keys.left.is_empty() {
            return Err(not_supported!(
                "JOIN of unbounded or updating streams without an equality condition between the two sides: a regular join keeps each side's rows by join key, so it needs ON l.k = r.k (or join on windows, or bound both sides' event times for an interval join)"
            ));
        }
        let merged = DFSchemaRef::new(left.schema.join(&right.schema)?);
        let filter = match &join.filter {
            Some(f) => Some(self.physical(f, &merged)?),
            None => None,
        };
        let updating =
            StreamJoinSpec::updates(kind, left.updating.is_some(), right.updating.is_some());
        let side = |s: &Stream, keys: &[Arc<dyn PhysicalExpr>]| StreamJoinSide {
            schema: arrow_schema(&s.schema),
            updating: s.updating.is_some(),
            keys: keys.to_vec(),
        };
        let description = format!(
            "StreamJoin ({}{}): on [{}]{}",
            join.join_type,
            if updating { ", updating" } else { "" },
            keys.text.join(", "),
            join.filter
                .as_ref()
                .map(|f| format!(", filter {f}"))
                .unwrap_or_default()
        );
        let spec = StreamJoinSpec {
            kind,
            left: side(left, &keys.left),
            right: side(right, &keys.right),
            filter,
            joined_schema: arrow_schema(&merged),
            output_schema: arrow_schema(&join.schema),
            state_ttl: self.modes.state_ttl,
            description,
        };
        let stage = self.join_stage(left, right, keys, Arc::new(spec));
        let columns = join.schema.fields().len();
        let why = [left.updating, right.updating]
            .into_iter()
            .flatten()
            .next()
            .unwrap_or(UPDATING_JOIN);
        Ok(Stream {
            stage,
            schema: join.schema.clone(),
            windows: vec![None; columns],
            rowtime: vec![false; columns],
            bounded: left.bounded && right.bounded,
            unordered: true,
            updating: updating.then_some(why),
            unique_key: join_unique_key(kind, left, right, keys),
            panes: None,
        })
    }
}

/// The columns that identify a row of the join's result, from the sides' unique keys
/// (Flink's unique-key derivation for joins), when they also decide which instance joins the
/// row, so that all changes of one result row come from one instance, in order (a key whose
/// rows could move between instances would need a materializer to order them, as Flink's
/// SinkUpsertMaterializer):
/// - a semi or anti join emits rows of one side, once each: that side's key;
/// - when a side's key is among its join keys, each row of the other side matches at most
///   one of its rows, so the other side's key identifies the result's rows (for an outer
///   join, only if the other side is the preserved one: a padded row of the non-preserved
///   side has NULLs where that key would be);
/// - otherwise both sides' keys together (a padded side's key columns are NULL, which a key
///   compares as a value).
fn join_unique_key(
    kind: JoinKind,
    left: &Stream,
    right: &Stream,
    keys: &JoinKeys,
) -> Option<Vec<usize>> {
    let width = left.schema.fields().len();
    // The join keys as plain columns (`None` when one is computed or cast): `within` their
    // columns are all in `key` (the key decides the instance); `covers` all of `key` are
    // among them.
    let columns = |exprs: &[Arc<dyn PhysicalExpr>]| -> Option<Vec<usize>> {
        exprs
            .iter()
            .map(|e| e.downcast_ref::<Column>().map(Column::index))
            .collect()
    };
    let (left_join, right_join) = (columns(&keys.left), columns(&keys.right));
    let within = |cols: &Option<Vec<usize>>, key: &[usize]| {
        cols.as_ref()
            .is_some_and(|c| c.iter().all(|i| key.contains(i)))
    };
    let covers = |cols: &Option<Vec<usize>>, key: &[usize]| {
        cols.as_ref()
            .is_some_and(|c| key.iter().all(|i| c.contains(i)))
    };
    match kind {
        JoinKind::LeftSemi | JoinKind::LeftAnti => {
            let lk = left.unique_key.as_ref()?;
            return within(&left_join, lk).then(|| lk.clone());
        }
        JoinKind::RightSemi | JoinKind::RightAnti => {
            let rk = right.unique_key.as_ref()?;
            return within(&right_join, rk).then(|| rk.clone());
        }
        _ => {}
    }
    let (lk, rk) = (left.unique_key.as_ref()?, right.unique_key.as_ref()?);
    let right_key: Vec<usize> = rk.iter().map(|i| i + width).collect();
    let left_preserved = matches!(kind, JoinKind::Inner | JoinKind::Left);
    let right_preserved = matches!(kind, JoinKind::Inner | JoinKind::Right);
    if left_preserved && covers(&right_join, rk) && within(&left_join, lk) {
        return Some(lk.clone());
    }
    if right_preserved && covers(&left_join, lk) && within(&right_join, rk) {
        return Some(right_key);
    }
    (within(&left_join, lk) || within(&right_join, rk))
        .then(|| lk.iter().copied().chain(right_key).collect())
}
