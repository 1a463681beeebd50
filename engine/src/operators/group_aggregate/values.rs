//! How a [`super::GroupAggregateOperator`]'s aggregates take their values: which rows each
//! aggregate counts (its argument not NULL, its FILTER passed) and the running sums of SUM and
//! AVG, then the result columns from their states. The SESSION aggregate
//! ([`crate::operators::session_aggregate`]) keeps the same states and shares these.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array,
    Int64Array, UInt64Array,
};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::RowConverter;

use super::state::{AggState, GroupState};
use super::{UpdatingAggKind, UpdatingAggregate};
use crate::error::{EngineError, Result};

/// For each row, whether aggregate `agg` takes its value: not NULL, and passing its FILTER.
pub(crate) fn takes(
    agg: &UpdatingAggregate,
    arg: &ArrayRef,
    rel: &RecordBatch,
) -> Result<Vec<bool>> {
    let n = rel.num_rows();
    let filter: Option<BooleanArray> = match &agg.filter {
        Some(f) => Some(
            f.evaluate(rel)?
                .into_array(n)?
                .as_boolean_opt()
                .ok_or_else(|| EngineError::Internal("FILTER did not return booleans".into()))?
                .clone(),
        ),
        None => None,
    };
    Ok((0..n)
        .map(|r| arg.is_valid(r) && filter.as_ref().is_none_or(|f| f.is_valid(r) && f.value(r)))
        .collect())
}

/// Adds each taken row's value (already cast to the sum's type), signed, to its group's sum.
pub(super) fn add_sums(
    values: &ArrayRef,
    taken: &[bool],
    signs: &[i64],
    row_group: &[usize],
    after: &mut [GroupState],
    agg: usize,
) -> Result<()> {
    for (row, &g) in row_group.iter().enumerate() {
        if taken[row] {
            add_value(&mut after[g].aggs[agg], values, row, signs[row])?;
        }
    }
    Ok(())
}

/// Adds row `row` of `values` (already cast to the sum's type), times `sign`, to a running sum.
pub(crate) fn add_value(
    state: &mut AggState,
    values: &ArrayRef,
    row: usize,
    sign: i64,
) -> Result<()> {
    state.n += sign;
    add_to_sum(state, values, row, sign)
}

/// Adds row `row` of `values` (already cast to the sum's type), times `sign`, to a running
/// sum, leaving its count of values alone (a partial sum of several values).
pub(crate) fn add_to_sum(
    state: &mut AggState,
    values: &ArrayRef,
    row: usize,
    sign: i64,
) -> Result<()> {
    match values.data_type() {
        DataType::Int64 => {
            let v = values.as_primitive::<Int64Type>().value(row);
            state.v = state.v.wrapping_add(i128::from(v) * i128::from(sign));
        }
        DataType::UInt64 => {
            let v = values.as_primitive::<UInt64Type>().value(row);
            state.v = state.v.wrapping_add(i128::from(v) * i128::from(sign));
        }
        DataType::Float64 => {
            let v = values.as_primitive::<Float64Type>().value(row);
            state.add_float(v * sign as f64);
        }
        DataType::Decimal128(_, _) => {
            let v = values
                .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                .value(row);
            state.v = state.v.wrapping_add(v.wrapping_mul(i128::from(sign)));
        }
        other => {
            return Err(EngineError::Internal(format!(
                "SUM over {other} cannot be maintained"
            )))
        }
    }
    Ok(())
}

/// SUM results of type `output` (NULL where the sum took no value).
pub(crate) fn sum_column(
    output: &DataType,
    states: impl Iterator<Item = AggState>,
) -> Result<ArrayRef> {
    Ok(match output {
        DataType::Int64 => Arc::new(Int64Array::from_iter(
            states.map(|s| (s.n > 0).then_some(s.v as i64)),
        )),
        DataType::UInt64 => Arc::new(UInt64Array::from_iter(
            states.map(|s| (s.n > 0).then_some(s.v as u64)),
        )),
        DataType::Float64 => Arc::new(Float64Array::from_iter(
            states.map(|s| (s.n > 0).then(|| s.float())),
        )),
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(states.map(|st| (st.n > 0).then_some(st.v)))
                .with_precision_and_scale(*p, *s)?,
        ),
        other => {
            return Err(EngineError::Internal(format!(
                "SUM returning {other} cannot be maintained"
            )))
        }
    })
}

/// The result column of `agg` from each group's state; MIN / MAX from their value rows
/// (`extremes`, one per group, decoded by `converter`), the other kinds ignore them.
pub(crate) fn result_column(
    agg: &UpdatingAggregate,
    states: &[AggState],
    extremes: &[Option<&[u8]>],
    converter: Option<&RowConverter>,
) -> Result<ArrayRef> {
    let states = states.iter().copied();
    Ok(match agg.kind {
        UpdatingAggKind::Count | UpdatingAggKind::CountDistinct => {
            Arc::new(Int64Array::from_iter_values(states.map(|s| s.n)))
        }
        UpdatingAggKind::Avg => Arc::new(Float64Array::from_iter(
            states.map(|s| (s.n > 0).then(|| s.float() / s.n as f64)),
        )),
        UpdatingAggKind::Sum => sum_column(&agg.output, states)?,
        UpdatingAggKind::Min | UpdatingAggKind::Max => {
            let converter = converter
                .ok_or_else(|| EngineError::Internal("MIN/MAX without a value encoding".into()))?;
            extreme_column(converter, &agg.output, extremes)?
        }
    })
}

/// MIN / MAX values from their value rows (`None`: NULL).
fn extreme_column(
    converter: &RowConverter,
    output: &DataType,
    values: &[Option<&[u8]>],
) -> Result<ArrayRef> {
    let present: Vec<usize> = (0..values.len()).filter(|&i| values[i].is_some()).collect();
    if present.is_empty() {
        return Ok(new_null_array(output, values.len()));
    }
    let parser = converter.parser();
    let decoded = converter
        .convert_rows(
            present
                .iter()
                .filter_map(|&i| values[i])
                .map(|v| parser.parse(v)),
        )?
        .remove(0);
    // Spread the decoded values back over their rows, NULL elsewhere.
    let nulls = new_null_array(decoded.data_type(), 1);
    let mut next = 0;
    let indices: Vec<(usize, usize)> = values
        .iter()
        .map(|v| match v {
            Some(_) => {
                next += 1;
                (0, next - 1)
            }
            None => (1, 0),
        })
        .collect();
    Ok(interleave(&[decoded.as_ref(), nulls.as_ref()], &indices)?)
}
