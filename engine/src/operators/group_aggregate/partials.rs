//! Two phases for an updating GROUP BY over an append-only input (Flink's local-global
//! aggregation): what the local phase ([`crate::operators::local_group_aggregate`]) emits
//! and how the final [`super::GroupAggregateOperator`] merges it.
//!
//! ```text
//! k0 .. k(K-1) | rows | per aggregate: COUNT          n
//!                                      SUM, AVG       n, sum
//!                                      MIN, MAX       n, extreme
//!                                      COUNT(DISTINCT) (nothing)
//!                     | per COUNT(DISTINCT) multiset: value, members
//! ```
//!
//! A flush emits each group it holds: its keys, its rows and, per aggregate, the values it
//! took (`n`) and their sum (the sum's type, NULL when it took none) or its extreme's value
//! row (Binary, as [`super::state`] encodes it: MAX's rows sort descending). A group's
//! distinct values ride along, one per row and multiset: the value row (Binary) and a
//! bitmask of the member aggregates whose FILTER took it. A group with more distinct values
//! than one row goes on in rows whose `rows`, `n`, sums and extremes are zero or NULL, so the
//! final phase adds every row alike.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BinaryArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;

use super::state::Keys;
use super::values::add_to_sum;
use super::{
    distinct, GroupAggregateOperator, GroupAggregateSpec, Touched, UpdatingAggKind,
    UpdatingAggregate,
};
use crate::error::{EngineError, Result};
use crate::operators::local_group_aggregate::{Holding, LocalGroupAggregateSpec};
use crate::operators::windowed::WindowColumn;
use crate::state::StateBackend;

/// Where each part of a group's partial state sits in a partial row.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub rows: usize,
    /// Per aggregate: its `n` column (`None` for COUNT(DISTINCT)).
    pub n: Vec<Option<usize>>,
    /// Per aggregate: its sum column (SUM, AVG).
    pub sum: Vec<Option<usize>>,
    /// Per aggregate: its extreme's value row (MIN, MAX).
    pub extreme: Vec<Option<usize>>,
    /// Per multiset ([`distinct::distinct_sets`]): its value and members columns.
    pub distinct: Vec<(usize, usize)>,
    pub width: usize,
}

impl Layout {
    pub fn new(keys: usize, aggregates: &[UpdatingAggregate], sets: usize) -> Self {
        let mut at = keys + 1;
        let mut next = || {
            at += 1;
            at - 1
        };
        let (mut n, mut sum, mut extreme) = (Vec::new(), Vec::new(), Vec::new());
        for a in aggregates {
            use UpdatingAggKind::*;
            n.push((a.kind != CountDistinct).then(&mut next));
            sum.push(matches!(a.kind, Sum | Avg).then(&mut next));
            extreme.push(matches!(a.kind, Min | Max).then(&mut next));
        }
        let distinct = (0..sets).map(|_| (next(), next())).collect();
        Self {
            rows: keys,
            n,
            sum,
            extreme,
            distinct,
            width: at,
        }
    }
}

/// The schema of the partial states of `spec` (its one-phase form, over input rows).
pub(crate) fn schema(spec: &GroupAggregateSpec) -> Result<SchemaRef> {
    let sets = distinct::distinct_sets(&spec.aggregates).len();
    let layout = Layout::new(spec.keys.len(), &spec.aggregates, sets);
    let mut fields = vec![Field::new("", DataType::Null, true); layout.width];
    for (i, k) in spec.keys.iter().enumerate() {
        fields[i] = Field::new(format!("k{i}"), k.data_type(&spec.input_schema)?, true);
    }
    fields[layout.rows] = Field::new("rows", DataType::Int64, false);
    for (i, a) in spec.aggregates.iter().enumerate() {
        if let Some(at) = layout.n[i] {
            fields[at] = Field::new(format!("n{i}"), DataType::Int64, false);
        }
        if let (Some(at), Some(t)) = (layout.sum[i], a.sum_type()) {
            fields[at] = Field::new(format!("sum{i}"), t, true);
        }
        if let Some(at) = layout.extreme[i] {
            fields[at] = Field::new(format!("extreme{i}"), DataType::Binary, true);
        }
    }
    for (s, &(value, members)) in layout.distinct.iter().enumerate() {
        fields[value] = Field::new(format!("distinct{s}"), DataType::Binary, true);
        fields[members] = Field::new(format!("members{s}"), DataType::Int64, false);
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Column `at` of a partial batch as i64s.
pub(super) fn int64s(rel: &RecordBatch, at: usize) -> Result<&Int64Array> {
    rel.column(at)
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| EngineError::Internal(format!("partial state column {at} is not Int64")))
}

/// Column `at` of a partial batch as value rows.
pub(super) fn value_rows(rel: &RecordBatch, at: usize) -> Result<&BinaryArray> {
    rel.column(at)
        .as_binary_opt::<i32>()
        .ok_or_else(|| EngineError::Internal(format!("partial state column {at} is not Binary")))
}

/// For each member of a multiset (at most 64), which rows' values it took.
pub(super) fn members_taking(members: &Int64Array, width: usize) -> Vec<Vec<bool>> {
    (0..width)
        .map(|m| {
            members
                .values()
                .iter()
                .map(|bits| (bits >> m) & 1 == 1)
                .collect()
        })
        .collect()
}

/// Whether a multiset of `members` aggregates fits a partial row's bitmask.
pub(crate) fn fits(members: usize) -> bool {
    members <= 64
}

impl GroupAggregateSpec {
    /// The two phases of this aggregation (Flink's local-global aggregation): a local phase
    /// for the input's tasks, emitting partial states per group (this module), and the
    /// final phase merging them behind the keyed exchange on their key columns. `None` when
    /// it cannot be split: an updating input (a local phase would have to retract), a
    /// multiset of more than 64 COUNT(DISTINCT)s, or an early-fire window column that is not
    /// a plain group key.
    pub fn split(&self) -> Result<Option<(LocalGroupAggregateSpec, GroupAggregateSpec)>> {
        if self.input_updating || self.partials_of.is_some() {
            return Ok(None);
        }
        if !distinct::distinct_sets(&self.aggregates)
            .iter()
            .all(|s| fits(s.len()))
        {
            return Ok(None);
        }
        let window = match self.window {
            None => None,
            Some(w) => {
                let key = self.keys.iter().position(|k| {
                    k.downcast_ref::<Column>()
                        .is_some_and(|c| c.index() == w.index)
                });
                match key {
                    Some(index) => Some(WindowColumn { index, ..w }),
                    None => return Ok(None),
                }
            }
        };
        let schema = schema(self)?;
        let keys = (0..self.keys.len())
            .map(|i| Arc::new(Column::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        let local = LocalGroupAggregateSpec {
            aggregate: self.clone(),
            output_schema: Arc::clone(&schema),
            holding: Holding::Adaptive,
            description: String::new(),
        };
        let merged = GroupAggregateSpec {
            input_schema: schema,
            keys,
            window,
            partials_of: Some(Arc::clone(&self.input_schema)),
            ..self.clone()
        };
        Ok(Some((local, merged)))
    }
}

impl GroupAggregateOperator {
    /// Two phases: merges a batch of partial states (this module) into the groups' states.
    pub(super) fn merge_partials(
        &mut self,
        rel: &RecordBatch,
        t: &mut Touched,
        store: &dyn StateBackend,
    ) -> Result<()> {
        let layout = Layout::new(
            self.spec.keys.len(),
            &self.spec.aggregates,
            self.distinct_sets.len(),
        );
        let rows = int64s(rel, layout.rows)?;
        for (row, &g) in t.row_group.iter().enumerate() {
            t.after[g].rows += rows.value(row);
        }
        for i in 0..self.spec.aggregates.len() {
            if let Some(at) = layout.n[i] {
                let n = int64s(rel, at)?;
                for (row, &g) in t.row_group.iter().enumerate() {
                    t.after[g].aggs[i].n += n.value(row);
                }
            }
            if let Some(at) = layout.sum[i] {
                let sums = rel.column(at);
                for (row, &g) in t.row_group.iter().enumerate() {
                    if sums.is_valid(row) {
                        add_to_sum(&mut t.after[g].aggs[i], sums, row, 1)?;
                    }
                }
            }
            if let Some(at) = layout.extreme[i] {
                let values = value_rows(rel, at)?;
                for (row, &g) in t.row_group.iter().enumerate() {
                    if !values.is_valid(row) {
                        continue;
                    }
                    let value = values.value(row);
                    let extreme = &mut t.after[g].extremes[i];
                    if extreme.as_deref().is_none_or(|e| value < e) {
                        *extreme = Some(value.to_vec());
                    }
                }
            }
        }
        let keys = Keys {
            handle: &self.handle,
        };
        let signs = vec![1; rel.num_rows()];
        for (members, &(value, member_bits)) in self.distinct_sets.iter().zip(&layout.distinct) {
            let values = value_rows(rel, value)?;
            let taken = members_taking(int64s(rel, member_bits)?, members.len());
            let input = distinct::DistinctInput {
                members,
                append_only: true,
            };
            distinct::accumulate(
                &input,
                |r| values.value(r),
                &taken,
                &signs,
                t,
                &keys,
                &mut self.cache,
                store,
            )?;
        }
        Ok(())
    }
}
