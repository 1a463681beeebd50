//! The catalog: tables a session can read. With a data directory, the DDL of every table is
//! kept in `catalog.sql` there (written atomically) and replayed when weir starts again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Expr;
use weir_connectors::sinks::LateRowsTable;
use weir_connectors::Options;
use weir_engine::SourceFactory;

use crate::error::{PlanError, Result};

/// `WATERMARK FOR column AS expr` of a table.
#[derive(Debug, Clone)]
pub struct TableWatermark {
    pub column: String,
    /// The expression as written, for DESCRIBE.
    pub text: String,
    /// The expression planned against the table's schema.
    pub expr: Expr,
}

/// A table: its columns, event time and connector.
#[derive(Clone)]
pub struct TableDef {
    pub name: String,
    pub schema: SchemaRef,
    pub watermark: Option<TableWatermark>,
    /// The index of the `PROCTIME()` column: stamped by the source task, not read by the
    /// source (whose schema lacks it).
    pub proctime: Option<usize>,
    pub options: Options,
    pub source: Arc<dyn SourceFactory>,
    /// `late_rows = 'name'`: where the rows dropped as late from this table are kept.
    pub late_rows: Option<LateRowsTable>,
    /// For a late-rows table: the table whose late rows it holds.
    pub late_rows_of: Option<String>,
    /// The CREATE statement, replayed on restart (empty for a materialized view, which its
    /// job registers).
    pub ddl: String,
}

/// Tables by name (names are case-insensitive unless quoted, as in SQL; stored lowercased).
#[derive(Default)]
pub struct Catalog {
    tables: BTreeMap<String, TableDef>,
    file: Option<PathBuf>,
}

impl Catalog {
    /// A catalog persisted under `data_dir` (or in memory only when `None`). Returns the DDL
    /// statements found there, for the session to replay.
    pub fn open(data_dir: Option<&Path>) -> Result<(Self, Vec<String>)> {
        let Some(dir) = data_dir else {
            return Ok((Self::default(), Vec::new()));
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            PlanError::io(
                format!("cannot create data directory '{}'", dir.display()),
                e,
            )
        })?;
        let file = dir.join("catalog.sql");
        let ddl = match std::fs::read_to_string(&file) {
            Ok(text) => crate::sql::split_statements(&text)
                .0
                .into_iter()
                .map(|s| s.text)
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(PlanError::io(
                    format!("cannot read '{}'", file.display()),
                    e,
                ))
            }
        };
        Ok((
            Self {
                tables: BTreeMap::new(),
                file: Some(file),
            },
            ddl,
        ))
    }

    pub fn get(&self, name: &str) -> Option<&TableDef> {
        self.tables.get(name)
    }

    pub fn tables(&self) -> impl Iterator<Item = &TableDef> {
        self.tables.values()
    }

    pub fn insert(&mut self, def: TableDef) -> Result<()> {
        self.tables.insert(def.name.clone(), def);
        self.save()
    }

    pub fn remove(&mut self, name: &str) -> Result<bool> {
        let removed = self.tables.remove(name).is_some();
        if removed {
            self.save()?;
        }
        Ok(removed)
    }

    fn save(&self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut text = String::new();
        // Views have no DDL of their own: their jobs register them at start.
        for t in self.tables.values().filter(|t| !t.ddl.is_empty()) {
            text.push_str(&t.ddl);
            text.push_str(";\n");
        }
        weir_engine::atomic_file::atomic_write(file, text.as_bytes())
            .map_err(|e| PlanError::io(format!("cannot write '{}'", file.display()), e))
    }
}
