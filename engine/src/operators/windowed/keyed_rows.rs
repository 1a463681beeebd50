//! [`KeyedRows`]: rows held with their routing keys in front (`keys ++ row`), so that a
//! stored part can be re-routed by the keys after a rescale ([`super::PartRoute::Keys`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::Result;

/// The layout of held rows: the evaluated keys, then the row's columns.
#[derive(Debug, Clone)]
pub struct KeyedRows {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl KeyedRows {
    /// Rows of `rows` with `keys` (evaluated on them) in front.
    pub fn new(keys: &[Arc<dyn PhysicalExpr>], rows: &Schema) -> Result<Self> {
        let mut fields = Vec::with_capacity(keys.len() + rows.fields().len());
        for (i, k) in keys.iter().enumerate() {
            fields.push(Field::new(format!("k{i}"), k.data_type(rows)?, true));
        }
        fields.extend(rows.fields().iter().map(|f| f.as_ref().clone()));
        Ok(Self {
            keys: keys.to_vec(),
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// `keys ++ row`.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// How many key columns come first.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The rows of `batch` with their keys in front.
    pub fn of(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for k in &self.keys {
            columns.push(k.evaluate(batch)?.into_array(n)?);
        }
        columns.extend(batch.columns().iter().cloned());
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}
