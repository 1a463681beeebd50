//! Planning regular joins: a join without matching windows or time bounds over unbounded or
//! updating inputs (or any input with `runtime_mode = 'streaming'`) keeps both sides' rows by
//! join key and updates its result as either side changes ([`StreamJoinSpec`]).

use std::sync::Arc;

use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::Join;
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
        let side = |s: &Stream, keys: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>]| {
            StreamJoinSide {
                schema: arrow_schema(&s.schema),
                updating: s.updating.is_some(),
                keys: keys.to_vec(),
            }
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
            unique_key: None,
        })
    }
}
