//! Rows into the sink's table: appends by one `COPY ... FROM STDIN` per flush, upserts by
//! prepared multi-row `INSERT ... ON CONFLICT` statements (see the module above for why).
//! An updating query's changes (DESIGN.md §8) go the upsert way: per flush, each key's last
//! change wins; an add (`+I`, `+U`) upserts its row, a retraction (`-U`, `-D`) deletes the
//! key by prepared `DELETE ... WHERE (keys) IN ((...), ...)` statements.

use std::collections::HashMap;
use std::io::Write;

use datafusion::arrow::record_batch::RecordBatch;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, Statement};
use weir_engine::changelog::{self, Op};
use weir_engine::{EngineError, Result as EngineResult};

use super::encode::{EncodedRows, Encoding};
use super::{ident, pg_error, PostgresSinkFactory};

/// Rows per upsert statement at most (PostgreSQL takes at most 65,535 parameters).
const ROWS_PER_UPSERT: usize = 1000;

/// The table as the sink writes it.
pub(super) struct Target {
    encodings: Vec<Encoding>,
    /// COPY in binary format (every column has a binary encoding), else in text format.
    binary: bool,
    copy_sql: String,
    /// Upsert: positions of the key columns.
    keys: Vec<usize>,
    /// Upsert: the statement for [`Self::rows_per_upsert`] rows, once prepared.
    upsert: Option<Statement>,
    /// Updating query: the delete statement for [`Self::rows_per_delete`] keys, once prepared.
    delete: Option<Statement>,
    /// Upsert: each column's parameter, `$n` or `$n::text::type` for a text cell.
    casts: Vec<Option<String>>,
}

/// An encoded cell as a statement parameter (already in its type's binary format).
#[derive(Debug)]
struct Raw<'a>(Option<&'a [u8]>);

impl ToSql for Raw<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            None => Ok(IsNull::Yes),
            Some(v) => {
                out.extend_from_slice(v);
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn columns(spec: &PostgresSinkFactory) -> String {
    let names: Vec<String> = spec
        .schema
        .fields()
        .iter()
        .map(|f| ident(f.name()))
        .collect();
    names.join(", ")
}

impl Target {
    /// Reads the table's column types and picks each column's encoding.
    pub fn read(spec: &PostgresSinkFactory, client: &mut Client) -> EngineResult<Self> {
        let probe = format!(
            "SELECT {} FROM {} LIMIT 0",
            columns(spec),
            ident(&spec.table)
        );
        let types: Vec<Type> = client
            .prepare(&probe)
            .map_err(|e| pg_error(&spec.sink, "cannot read the table's column types", e))?
            .columns()
            .iter()
            .map(|c| c.type_().clone())
            .collect();
        let binary: Vec<Option<Encoding>> = spec
            .schema
            .fields()
            .iter()
            .zip(&types)
            .map(|(f, t)| Encoding::binary(f.data_type(), t))
            .collect();
        let upsert = !spec.primary_key.is_empty();
        let all_binary = binary.iter().all(Option::is_some);
        // COPY takes one format for every column; statement parameters may mix.
        let encodings: Vec<Encoding> = binary
            .iter()
            .map(|b| match b {
                Some(e) if upsert || all_binary => *e,
                _ => Encoding::Text,
            })
            .collect();
        let casts = binary
            .iter()
            .zip(&types)
            .map(|(b, t)| {
                b.is_none()
                    .then(|| format!("{}.{}", ident(t.schema()), ident(t.name())))
            })
            .collect();
        let keys = spec
            .primary_key
            .iter()
            .filter_map(|k| spec.schema.index_of(k).ok())
            .collect();
        Ok(Self {
            encodings,
            binary: all_binary,
            copy_sql: format!(
                "COPY {} ({}) FROM STDIN (FORMAT {})",
                ident(&spec.table),
                columns(spec),
                if all_binary { "binary" } else { "text" }
            ),
            keys,
            upsert: None,
            delete: None,
            casts,
        })
    }

    /// Writes the rows of `batches` (an updating query's: its changes, the change kind in
    /// the batches' last column).
    pub fn write(
        &mut self,
        spec: &PostgresSinkFactory,
        client: &mut Client,
        batches: &[RecordBatch],
    ) -> EngineResult<()> {
        let mut rows = EncodedRows::default();
        // Updating query: whether each row enters the result (`+I`, `+U`) or leaves it
        // (`-U`, `-D`). Left empty for an append-only one (every row enters).
        let mut adds: Vec<bool> = Vec::new();
        for batch in batches {
            let relation;
            let batch = if spec.updating && changelog::has_op_field(batch.schema_ref()) {
                for code in changelog::ops(batch)?.values().iter() {
                    adds.push(Op::from_code(*code)?.is_add());
                }
                relation = changelog::relation(batch)?;
                &relation
            } else {
                if spec.updating {
                    adds.resize(adds.len() + batch.num_rows(), true);
                }
                batch
            };
            // A cast that overflows is a value the column cannot hold: the data's fault.
            rows.push(batch, &self.encodings)
                .map_err(|e| EngineError::BadInput(format!("sink {}: {e}", spec.sink)))?;
        }
        if self.keys.is_empty() {
            self.copy(spec, client, &rows)
        } else {
            self.upsert(spec, client, &rows, &adds)
        }
    }

    fn copy(
        &self,
        spec: &PostgresSinkFactory,
        client: &mut Client,
        rows: &EncodedRows,
    ) -> EngineResult<()> {
        let sink = &spec.sink;
        let data = if self.binary {
            rows.binary_copy(0..rows.rows())
        } else {
            rows.text_copy(0..rows.rows())
        };
        let mut writer = client
            .copy_in(&self.copy_sql)
            .map_err(|e| pg_error(sink, "cannot start copying rows", e))?;
        if let Err(e) = writer.write_all(&data) {
            return Err(
                match e.into_inner().map(|e| e.downcast::<postgres::Error>()) {
                    Some(Ok(e)) => pg_error(sink, "cannot copy rows", *e),
                    Some(Err(e)) => {
                        EngineError::External(format!("sink {sink}: cannot copy rows: {e}"))
                    }
                    None => EngineError::External(format!("sink {sink}: cannot copy rows")),
                },
            );
        }
        writer
            .finish()
            .map_err(|e| pg_error(sink, "cannot copy rows", e))?;
        Ok(())
    }

    fn rows_per_upsert(&self) -> usize {
        (65_535 / self.encodings.len().max(1)).clamp(1, ROWS_PER_UPSERT)
    }

    fn upsert_sql(&self, spec: &PostgresSinkFactory, rows: usize) -> String {
        let width = self.encodings.len();
        let tuples: Vec<String> = (0..rows)
            .map(|r| {
                let params: Vec<String> = self
                    .casts
                    .iter()
                    .enumerate()
                    .map(|(c, cast)| match cast {
                        None => format!("${}", r * width + c + 1),
                        Some(t) => format!("${}::text::{t}", r * width + c + 1),
                    })
                    .collect();
                format!("({})", params.join(", "))
            })
            .collect();
        let keys: Vec<String> = spec.primary_key.iter().map(|k| ident(k)).collect();
        let updates: Vec<String> = spec
            .schema
            .fields()
            .iter()
            .filter(|f| !spec.primary_key.contains(f.name()))
            .map(|f| format!("{0} = EXCLUDED.{0}", ident(f.name())))
            .collect();
        let action = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        format!(
            "INSERT INTO {} ({}) VALUES {} ON CONFLICT ({}) {action}",
            ident(&spec.table),
            columns(spec),
            tuples.join(", "),
            keys.join(", ")
        )
    }

    /// Upserts the last row of each key of `rows`; with `adds` (an updating query's rows:
    /// whether each enters the result), a key whose last change is a retraction is then
    /// deleted. Both in the open transaction (exactly-once) or in autocommit statements
    /// (at-least-once: upserting and deleting by key is idempotent).
    fn upsert(
        &mut self,
        spec: &PostgresSinkFactory,
        client: &mut Client,
        rows: &EncodedRows,
        adds: &[bool],
    ) -> EngineResult<()> {
        let sink = &spec.sink;
        // One statement may not update a row twice: the last row of each key wins.
        let mut last: HashMap<Vec<Option<&[u8]>>, usize> = HashMap::new();
        for r in 0..rows.rows() {
            last.insert(self.keys.iter().map(|k| rows.cell(r, *k)).collect(), r);
        }
        let mut keep: Vec<usize> = last.into_values().collect();
        keep.sort_unstable();
        let gone: Vec<usize> = keep
            .iter()
            .copied()
            .filter(|r| !adds.get(*r).copied().unwrap_or(true))
            .collect();
        // A key to delete is upserted first (with its retracted row): a DELETE does not see,
        // and so does not wait for, a row another transaction inserted and has not committed
        // yet (the previous epoch's, prepared until its checkpoint completes), and would
        // leave it behind; an upsert waits for that transaction and locks the row, so the
        // DELETE after it removes it.
        let full = self.rows_per_upsert();
        for chunk in keep.chunks(full) {
            let statement = match &self.upsert {
                Some(s) if chunk.len() == full => s.clone(),
                _ => {
                    let s = client
                        .prepare(&self.upsert_sql(spec, chunk.len()))
                        .map_err(|e| pg_error(sink, "cannot prepare the upsert", e))?;
                    if chunk.len() == full {
                        self.upsert = Some(s.clone());
                    }
                    s
                }
            };
            let params: Vec<Raw> = chunk
                .iter()
                .flat_map(|r| (0..rows.columns).map(move |c| Raw(rows.cell(*r, c))))
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            client
                .execute(&statement, &refs)
                .map_err(|e| pg_error(sink, "cannot upsert rows", e))?;
        }
        if !gone.is_empty() {
            self.delete(spec, client, rows, &gone)?;
        }
        Ok(())
    }

    fn rows_per_delete(&self) -> usize {
        (65_535 / self.keys.len().max(1)).clamp(1, ROWS_PER_UPSERT)
    }

    /// `DELETE FROM t WHERE (k1, k2) IN (($1, $2), ($3, $4), ...)` for `rows` keys, each
    /// parameter typed as upserts type it (the key column's type from the comparison, or
    /// `$n::text::type` for a text cell).
    fn delete_sql(&self, spec: &PostgresSinkFactory, rows: usize) -> String {
        let width = self.keys.len();
        let tuples: Vec<String> = (0..rows)
            .map(|r| {
                let params: Vec<String> = self
                    .keys
                    .iter()
                    .enumerate()
                    .map(|(i, c)| match &self.casts[*c] {
                        None => format!("${}", r * width + i + 1),
                        Some(t) => format!("${}::text::{t}", r * width + i + 1),
                    })
                    .collect();
                format!("({})", params.join(", "))
            })
            .collect();
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|c| ident(spec.schema.field(*c).name()))
            .collect();
        format!(
            "DELETE FROM {} WHERE ({}) IN ({})",
            ident(&spec.table),
            keys.join(", "),
            tuples.join(", ")
        )
    }

    /// Deletes the keys of the rows `gone` (an updating query's retractions).
    fn delete(
        &mut self,
        spec: &PostgresSinkFactory,
        client: &mut Client,
        rows: &EncodedRows,
        gone: &[usize],
    ) -> EngineResult<()> {
        let sink = &spec.sink;
        let full = self.rows_per_delete();
        for chunk in gone.chunks(full) {
            let statement = match &self.delete {
                Some(s) if chunk.len() == full => s.clone(),
                _ => {
                    let s = client
                        .prepare(&self.delete_sql(spec, chunk.len()))
                        .map_err(|e| pg_error(sink, "cannot prepare the delete", e))?;
                    if chunk.len() == full {
                        self.delete = Some(s.clone());
                    }
                    s
                }
            };
            let keys = &self.keys;
            let params: Vec<Raw> = chunk
                .iter()
                .flat_map(|r| keys.iter().map(move |c| Raw(rows.cell(*r, *c))))
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            client
                .execute(&statement, &refs)
                .map_err(|e| pg_error(sink, "cannot delete rows", e))?;
        }
        Ok(())
    }
}
