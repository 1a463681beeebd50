//! Changelog streams (DESIGN.md §8): how an updating stream carries each row's change kind.
//!
//! An edge carries either an append-only stream (plain batches: every row is an insert, and
//! nothing about it changes) or an updating one. A batch of an updating stream has one more
//! column than the relation it carries, the last, named [`OP_COLUMN`]: an `Int8` holding the
//! row's [`Op`]. Every other part of the runtime (channels, exchange, spill, snapshots) moves
//! such a batch like any other; only operators that read changes look at the column, and
//! append-only edges pay nothing.
//!
//! The kinds are Flink's `RowKind` (+I, -U, +U, -D) and RisingWave's `Op`. A consumer that
//! applies changes treats `+I` and `+U` as "this row is now in the result" and `-U` and `-D`
//! as "this row is no longer in it"; an update is a `-U` of the old row directly followed by
//! a `+U` of the new one (both of the same key).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int8Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{EngineError, Result};

/// The name of the change-kind column of an updating stream's batches (always the last).
pub const OP_COLUMN: &str = "__weir_op";

/// The name of the change-kind column shown to people and written by changelog sinks.
pub const OP_TEXT_COLUMN: &str = "op";

/// The kind of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum Op {
    /// `+I`: a new row.
    Insert = 0,
    /// `-U`: the row before an update (it leaves the result).
    UpdateBefore = 1,
    /// `+U`: the row after an update (it enters the result).
    UpdateAfter = 2,
    /// `-D`: the row leaves the result.
    Delete = 3,
}

impl Op {
    /// The code stored in [`OP_COLUMN`].
    pub fn code(self) -> i8 {
        self as i8
    }

    pub fn from_code(code: i8) -> Result<Self> {
        Ok(match code {
            0 => Op::Insert,
            1 => Op::UpdateBefore,
            2 => Op::UpdateAfter,
            3 => Op::Delete,
            other => {
                return Err(EngineError::Internal(format!(
                    "change kind {other} is not one of +I, -U, +U, -D"
                )))
            }
        })
    }

    /// Whether the row enters the result (`+I`, `+U`) rather than leaves it.
    pub fn is_add(self) -> bool {
        matches!(self, Op::Insert | Op::UpdateAfter)
    }

    /// `+I`, `-U`, `+U`, `-D`.
    pub fn text(self) -> &'static str {
        match self {
            Op::Insert => "+I",
            Op::UpdateBefore => "-U",
            Op::UpdateAfter => "+U",
            Op::Delete => "-D",
        }
    }

    pub fn from_text(text: &str) -> Option<Self> {
        Some(match text {
            "+I" => Op::Insert,
            "-U" => Op::UpdateBefore,
            "+U" => Op::UpdateAfter,
            "-D" => Op::Delete,
            _ => return None,
        })
    }
}

/// The change-kind field appended to an updating stream's schema.
pub fn op_field() -> Field {
    Field::new(OP_COLUMN, DataType::Int8, false)
}

/// `schema` with the change-kind column appended: the schema of an updating stream's
/// batches that carry the relation `schema`.
pub fn with_op_field(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(op_field());
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `schema` is that of an updating stream's batches.
pub fn has_op_field(schema: &Schema) -> bool {
    schema
        .fields()
        .last()
        .is_some_and(|f| f.name() == OP_COLUMN && f.data_type() == &DataType::Int8)
}

/// The change kinds of an updating stream's batch.
pub fn ops(batch: &RecordBatch) -> Result<&Int8Array> {
    batch
        .columns()
        .last()
        .filter(|_| has_op_field(batch.schema_ref()))
        .and_then(|c| c.as_primitive_opt::<Int8Type>())
        .ok_or_else(|| {
            EngineError::Internal(format!(
                "a batch of an updating stream has no {OP_COLUMN} column"
            ))
        })
}

/// The change-kind column of an updating stream's batch.
pub fn op_array(batch: &RecordBatch) -> Result<ArrayRef> {
    ops(batch)?;
    Ok(Arc::clone(&batch.columns()[batch.num_columns() - 1]))
}

/// A column of `n` equal change kinds.
pub fn op_column(op: Op, n: usize) -> ArrayRef {
    Arc::new(Int8Array::from_value(op.code(), n))
}

/// The relation's columns of an updating stream's batch (without its change kinds).
pub fn relation(batch: &RecordBatch) -> Result<RecordBatch> {
    let n = batch.num_columns();
    if n == 0 || !has_op_field(batch.schema_ref()) {
        return Err(EngineError::Internal(format!(
            "a batch of an updating stream has no {OP_COLUMN} column"
        )));
    }
    Ok(batch.project(&(0..n - 1).collect::<Vec<_>>())?)
}

/// A batch's relation and each row's change as +1 (it enters the result) or -1 (it leaves):
/// an append-only batch (`updating` false) is all +1.
pub fn signed(batch: &RecordBatch, updating: bool) -> Result<(RecordBatch, Vec<i64>)> {
    if !updating {
        return Ok((batch.clone(), vec![1; batch.num_rows()]));
    }
    let signs = ops(batch)?
        .values()
        .iter()
        .map(|&c| Ok(if Op::from_code(c)?.is_add() { 1 } else { -1 }))
        .collect::<Result<Vec<i64>>>()?;
    Ok((relation(batch)?, signs))
}

/// An append-only batch as an updating one: every row an insert.
pub fn as_inserts(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = with_op_field(batch.schema_ref());
    let mut columns = batch.columns().to_vec();
    columns.push(op_column(Op::Insert, batch.num_rows()));
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}

/// The schema people see for an updating result: `op` first, then the relation's columns.
pub fn text_schema(relation: &Schema) -> SchemaRef {
    let mut fields = vec![Field::new(OP_TEXT_COLUMN, DataType::Utf8, false)];
    fields.extend(relation.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new_with_metadata(
        fields,
        relation.metadata().clone(),
    ))
}

/// An updating stream's batch as people see it (REPL, `weir -f`, the wire endpoint,
/// changelog files): the change kind as text (`+I`, `-U`, `+U`, `-D`) in a first column named
/// `op`, then the relation's columns.
pub fn to_text(batch: &RecordBatch) -> Result<RecordBatch> {
    let codes = ops(batch)?;
    let text: StringArray = codes
        .iter()
        .map(|c| c.and_then(|c| Op::from_code(c).ok()).map(Op::text))
        .collect();
    if text.null_count() > 0 {
        return Err(EngineError::Internal(
            "an updating stream's batch holds an unknown change kind".into(),
        ));
    }
    let relation = relation(batch)?;
    let schema = text_schema(relation.schema_ref());
    let mut columns: Vec<ArrayRef> = vec![Arc::new(text)];
    columns.extend(relation.columns().iter().cloned());
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    #[test]
    fn a_batch_goes_to_text_with_op_first_and_back() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let updating = as_inserts(&batch).unwrap();
        assert!(has_op_field(updating.schema_ref()));
        assert_eq!(relation(&updating).unwrap(), batch);
        let text = to_text(&updating).unwrap();
        assert_eq!(text.schema().field(0).name(), "op");
        assert_eq!(text.column(0).as_string::<i32>().value(1), "+I");
        assert_eq!(text.num_columns(), 2);
        for op in [Op::Insert, Op::UpdateBefore, Op::UpdateAfter, Op::Delete] {
            assert_eq!(Op::from_code(op.code()).unwrap(), op);
            assert_eq!(Op::from_text(op.text()), Some(op));
        }
        assert!(Op::from_code(7).is_err());
        assert!(relation(&batch).is_err());
    }
}
