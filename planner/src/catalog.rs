//! The catalog: tables a session can read. With a data directory, the DDL of every table is
//! kept in `catalog.sql` there (written atomically) and replayed when weir starts again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::{Expr, LogicalPlan};
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

/// A (logical) view: `CREATE VIEW name AS query`. A query over it reads the view's plan in
/// its place; a window table function over it windows the view's rows (a cascading window).
#[derive(Clone)]
pub struct ViewDef {
    pub name: String,
    pub schema: SchemaRef,
    /// The query as planned when the view was created (DataFusion inlines it).
    pub plan: LogicalPlan,
    /// The same, optimized: what the stream planner plans under a window over the view.
    pub optimized: LogicalPlan,
    pub ddl: String,
}

/// Tables and views by name (names are case-insensitive unless quoted, as in SQL; stored
/// lowercased). Views are kept in the order they were created: one may read another.
#[derive(Default, Clone)]
pub struct Catalog {
    tables: BTreeMap<String, TableDef>,
    views: Vec<ViewDef>,
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
                .map(|s| crate::secrets::unseal(dir, &s.text))
                .collect::<Result<Vec<_>>>()?,
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
                views: Vec::new(),
                file: Some(file),
            },
            ddl,
        ))
    }

    pub fn view(&self, name: &str) -> Option<&ViewDef> {
        self.views.iter().find(|v| v.name == name)
    }

    pub fn views(&self) -> impl Iterator<Item = &ViewDef> {
        self.views.iter()
    }

    /// Adds a view (or replaces the one of that name, keeping its place).
    pub fn insert_view(&mut self, view: ViewDef) -> Result<()> {
        match self.views.iter_mut().find(|v| v.name == view.name) {
            Some(old) => *old = view,
            None => self.views.push(view),
        }
        self.save()
    }

    pub fn remove_view(&mut self, name: &str) -> Result<bool> {
        let before = self.views.len();
        self.views.retain(|v| v.name != name);
        let removed = self.views.len() != before;
        if removed {
            self.save()?;
        }
        Ok(removed)
    }

    /// The DDL that makes this catalog again, in an order that replays: tables, then views in
    /// the order they were created. Views of materialized views and late-rows tables have no
    /// DDL of their own (their job or table registers them).
    pub fn ddl_statements(&self) -> Vec<String> {
        self.tables
            .values()
            .map(|t| t.ddl.clone())
            .chain(self.views.iter().map(|v| v.ddl.clone()))
            .filter(|d| !d.is_empty())
            .collect()
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
        let dir = file.parent().unwrap_or(Path::new("."));
        let mut text = String::new();
        for ddl in self.ddl_statements() {
            // Passwords are kept apart, in the data directory's private secrets file.
            text.push_str(&crate::secrets::seal(dir, &ddl)?);
            text.push_str(";\n");
        }
        weir_engine::atomic_file::atomic_write(file, text.as_bytes())
            .map_err(|e| PlanError::io(format!("cannot write '{}'", file.display()), e))
    }
}
