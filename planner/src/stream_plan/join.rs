//! Planning window joins: both inputs behind a keyed exchange on the equality keys, joined per
//! window by [`WindowJoinSpec`] when the watermark of both passes the window's end. A join
//! without matching windows whose ON condition bounds the two sides' event times is an
//! interval join (`interval_join.rs`); one without either over unbounded or updating inputs is
//! a regular join (`stream_join.rs`).

use std::sync::Arc;

use datafusion::common::{DFSchemaRef, JoinType, NullEquality};
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{Expr, ExprSchemable, Join};
use datafusion::physical_expr::PhysicalExpr;
use weir_engine::operators::{
    JoinKind, JoinSide, WindowBound, WindowColumn, WindowEdge, WindowJoinSpec,
};
use weir_engine::{OperatorFactory, Partitioning, Stage, StageInput};

use super::{arrow_schema, Stream, StreamPlanner};
use crate::error::Result;
use crate::{invalid, not_supported};

/// The equality keys of a join, as each side evaluates them.
pub(super) struct JoinKeys {
    pub left: Vec<Arc<dyn PhysicalExpr>>,
    pub right: Vec<Arc<dyn PhysicalExpr>>,
    /// The window column of each side, when the keys pair windows of one size.
    pub windows: Option<(WindowColumn, WindowColumn)>,
    /// `l = r` of each pair, for EXPLAIN.
    pub text: Vec<String>,
}

impl StreamPlanner<'_> {
    /// A window join: both inputs behind a keyed exchange on the equality keys (window columns
    /// included), joined per window when the watermark passes its end.
    pub(super) fn plan_join(&mut self, join: &Join) -> Result<Stream> {
        let kind = join_kind(join)?;
        let left = self.plan(&join.left)?;
        let right = self.plan(&join.right)?;
        let keys = self.join_keys(join, &left, &right)?;
        let bounded = left.bounded && right.bounded;
        let updating = left.updating.is_some() || right.updating.is_some();
        if keys.windows.is_none() {
            if !updating {
                if let Some(stream) = self.plan_interval_join(join, kind, &left, &right, &keys)? {
                    return Ok(stream);
                }
            }
            if !bounded || updating || self.modes.streaming {
                return self.plan_stream_join(join, kind, &left, &right, &keys);
            }
        }
        self.append_only(&left, "JOIN")?;
        self.append_only(&right, "JOIN")?;
        if join.on.is_empty() {
            return Err(not_supported!(
                "JOIN without an equality condition between the two sides (a window join matches window_start / window_end and keys with =; an interval join bounds both sides' event times, e.g. b.ts BETWEEN a.ts - INTERVAL '5' SECOND AND a.ts)"
            ));
        }
        let out_windows = output_windows(kind, &left, &right);
        if out_windows.len() != join.schema.fields().len() {
            return Err(invalid!(
                "join output has {} columns, expected {}",
                join.schema.fields().len(),
                out_windows.len()
            ));
        }
        let merged = DFSchemaRef::new(left.schema.join(&right.schema)?);
        let filter = match &join.filter {
            Some(f) => Some(self.physical(f, &merged)?),
            None => None,
        };
        let spec = WindowJoinSpec {
            kind,
            left: JoinSide {
                schema: arrow_schema(&left.schema),
                keys: keys.left.clone(),
                window: keys.windows.map(|w| w.0),
            },
            right: JoinSide {
                schema: arrow_schema(&right.schema),
                keys: keys.right.clone(),
                window: keys.windows.map(|w| w.1),
            },
            filter,
            joined_schema: arrow_schema(if kind.pairs() { &join.schema } else { &merged }),
            output_schema: arrow_schema(&join.schema),
            description: description(join, &keys),
        };
        if let Some((side, filter)) = self.extreme_filter(join, kind, &left, &right, &keys) {
            self.push(if side == 0 { &left } else { &right }, Arc::new(filter));
        }
        let stage = self.join_stage(&left, &right, &keys, Arc::new(spec));
        Ok(Stream {
            stage,
            schema: join.schema.clone(),
            rowtime: vec![false; out_windows.len()],
            windows: out_windows,
            bounded,
            unordered: true,
            updating: None,
            unique_key: None,
            panes: None,
        })
    }

    /// The equality keys, coerced to a common type per pair, and the pair of window columns
    /// they match (a `window_end` pair wins over a `window_start` pair).
    fn join_keys(&self, join: &Join, left: &Stream, right: &Stream) -> Result<JoinKeys> {
        let lineage = |e: &Expr, s: &Stream| match e {
            Expr::Column(c) => s
                .schema
                .index_of_column(c)
                .ok()
                .and_then(|i| s.windows[i].map(|w| (i, w))),
            _ => None,
        };
        let mut keys = JoinKeys {
            left: Vec::new(),
            right: Vec::new(),
            windows: None,
            text: Vec::new(),
        };
        for (l, r) in &join.on {
            if let (Some((li, a)), Some((ri, b))) = (lineage(l, left), lineage(r, right)) {
                if a == b && (a.edge == WindowEdge::End || keys.windows.is_none()) {
                    keys.windows = Some((WindowColumn::new(li, a), WindowColumn::new(ri, b)));
                }
            }
            let lt = l.get_type(&left.schema)?;
            let rt = r.get_type(&right.schema)?;
            let (l, r) = if lt == rt {
                (l.clone(), r.clone())
            } else {
                let common = comparison_coercion(&lt, &rt).ok_or_else(|| {
                    invalid!("JOIN compares {l} ({lt}) with {r} ({rt}): no common type")
                })?;
                (
                    l.clone().cast_to(&common, &left.schema)?,
                    r.clone().cast_to(&common, &right.schema)?,
                )
            };
            keys.text.push(format!("{l} = {r}"));
            keys.left.push(self.physical(&l, &left.schema)?);
            keys.right.push(self.physical(&r, &right.schema)?);
        }
        Ok(keys)
    }

    /// A stage running the join, each input routed by its side's keys (one instance without
    /// keys).
    pub(super) fn join_stage(
        &mut self,
        left: &Stream,
        right: &Stream,
        keys: &JoinKeys,
        spec: Arc<dyn OperatorFactory>,
    ) -> usize {
        let parallelism = if keys.left.is_empty() {
            1
        } else {
            self.parallelism
        };
        let partitioning = |keys: &[Arc<dyn PhysicalExpr>]| {
            if parallelism == 1 {
                Partitioning::Single
            } else {
                Partitioning::Hash(keys.to_vec())
            }
        };
        let inputs = vec![
            StageInput {
                from: left.stage,
                partitioning: partitioning(&keys.left),
            },
            StageInput {
                from: right.stage,
                partitioning: partitioning(&keys.right),
            },
        ];
        self.stages.push(Stage {
            name: "join".into(),
            parallelism,
            source: None,
            inputs,
            chain: vec![spec],
            late_rows: None,
        });
        self.stages.len() - 1
    }
}

/// The join kind, or why this join cannot run on streams.
pub(super) fn join_kind(join: &Join) -> Result<JoinKind> {
    let kind = match join.join_type {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::Left,
        JoinType::Right => JoinKind::Right,
        JoinType::Full => JoinKind::Full,
        JoinType::LeftSemi => JoinKind::LeftSemi,
        JoinType::LeftAnti => JoinKind::LeftAnti,
        JoinType::RightSemi => JoinKind::RightSemi,
        JoinType::RightAnti => JoinKind::RightAnti,
        other => return Err(not_supported!("{other} JOIN in a streaming query")),
    };
    if join.null_aware {
        return Err(not_supported!(
            "NOT IN (subquery) over a stream; use NOT EXISTS"
        ));
    }
    if join.null_equality == NullEquality::NullEqualsNull {
        return Err(not_supported!(
            "IS NOT DISTINCT FROM as a join condition; use ="
        ));
    }
    Ok(kind)
}

/// The window bound each output column holds: a side's windows survive where its rows are
/// never padded with NULLs.
fn output_windows(kind: JoinKind, left: &Stream, right: &Stream) -> Vec<Option<WindowBound>> {
    let none = |s: &Stream| vec![None; s.windows.len()];
    match kind {
        JoinKind::Inner => [left.windows.clone(), right.windows.clone()].concat(),
        JoinKind::Left => [left.windows.clone(), none(right)].concat(),
        JoinKind::Right => [none(left), right.windows.clone()].concat(),
        JoinKind::Full => [none(left), none(right)].concat(),
        JoinKind::LeftSemi | JoinKind::LeftAnti => left.windows.clone(),
        JoinKind::RightSemi | JoinKind::RightAnti => right.windows.clone(),
    }
}

/// One line for EXPLAIN.
fn description(join: &Join, keys: &JoinKeys) -> String {
    format!(
        "WindowJoin ({}, {}): on [{}]{}",
        join.join_type,
        if keys.windows.is_some() {
            "per window"
        } else {
            "over the whole input"
        },
        keys.text.join(", "),
        join.filter
            .as_ref()
            .map(|f| format!(", filter {f}"))
            .unwrap_or_default()
    )
}
