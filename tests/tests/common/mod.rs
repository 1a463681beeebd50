//! Shared test helpers: an in-process sqllogictest database over a weir session, and helpers
//! to run SQL and collect rows as text.

#![allow(dead_code)]

pub mod kafka;
pub mod pg;
pub mod process;
pub mod reference;
pub mod wire;

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use sqllogictest::{DBOutput, DefaultColumnType};
use weir_planner::display::batch_rows;
use weir_planner::sql::{split_statements, StatementText};
use weir_planner::{PlanError, Session, SessionConfig, StatementResult};

/// Applies changelog rows (`op` first) in order to a multiset of result rows; a retraction
/// must remove a row that is there. Returns the rows left, sorted.
pub fn apply_changelog(rows: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut table: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for row in rows {
        let (op, values) = row.split_first().expect("an op column");
        let n = table.entry(values.to_vec()).or_default();
        match op.as_str() {
            "+I" | "+U" => *n += 1,
            "-U" | "-D" => {
                assert!(*n > 0, "{op} of {values:?}, which is not in the result");
                *n -= 1;
            }
            other => panic!("unknown change kind {other}"),
        }
    }
    let mut out = Vec::new();
    for (row, n) in table {
        out.extend(std::iter::repeat_n(row, n as usize));
    }
    out
}

/// A fresh in-memory session at the given parallelism.
pub fn session(parallelism: usize) -> Session {
    let (session, warnings) = Session::open(SessionConfig {
        parallelism,
        data_dir: None,
        ..SessionConfig::default()
    })
    .expect("open session");
    assert!(warnings.is_empty(), "{warnings:?}");
    session
}

/// What one statement gave, collected.
pub enum Collected {
    Command,
    Rows(Vec<DataType>, Vec<RecordBatch>),
}

/// Runs one statement to completion (queries must be bounded).
pub fn execute(session: &mut Session, sql: &str) -> Result<Collected, PlanError> {
    let stmt = StatementText {
        text: sql.to_string(),
        line: 1,
    };
    match session.execute(&stmt)? {
        StatementResult::Command(_) | StatementResult::Transaction(_) => Ok(Collected::Command),
        StatementResult::Rows(schema, batches) => Ok(Collected::Rows(
            schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect(),
            batches,
        )),
        StatementResult::Query(run) => {
            let types = run
                .schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            if !run.bounded && run.limit.is_none() {
                run.job.cancel();
                return Err(PlanError::Invalid(
                    "test queries must be bounded or have a LIMIT".into(),
                ));
            }
            let (batches, _) = run.collect()?;
            Ok(Collected::Rows(types, batches))
        }
    }
}

/// Rows as text, NULL as "NULL".
pub fn text_rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    batches
        .iter()
        .flat_map(|b| batch_rows(b).expect("format rows"))
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

/// DataFusion batch SQL over CSV files with a header (`(table, path)`, each of `schema`):
/// the rows as text, sorted. The oracle of the differential tests.
pub fn batch_csv_sql(
    tables: &[(&str, &str)],
    schema: &datafusion::arrow::datatypes::Schema,
    sql: &str,
) -> Vec<Vec<String>> {
    use datafusion::prelude::{CsvReadOptions, SessionContext};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = SessionContext::new();
        for (name, path) in tables {
            ctx.register_csv(
                *name,
                *path,
                CsvReadOptions::new().schema(schema).has_header(true),
            )
            .await
            .unwrap();
        }
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut rows = text_rows(&batches);
        rows.sort();
        rows
    })
}

/// Runs a query and returns its rows as text, sorted.
pub fn query_sorted(session: &mut Session, sql: &str) -> Vec<Vec<String>> {
    match execute(session, sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
        Collected::Rows(_, batches) => {
            let mut rows = text_rows(&batches);
            rows.sort();
            rows
        }
        Collected::Command => panic!("{sql}: expected rows"),
    }
}

/// sqllogictest database running statements in a weir session.
pub struct WeirDb {
    pub session: Session,
}

impl sqllogictest::DB for WeirDb {
    type Error = PlanError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PlanError> {
        let (mut statements, tail) = split_statements(sql);
        statements.extend(tail);
        let mut last = DBOutput::StatementComplete(0);
        for stmt in statements {
            last = match execute(&mut self.session, &stmt.text)? {
                Collected::Command => DBOutput::StatementComplete(0),
                Collected::Rows(types, batches) => DBOutput::Rows {
                    types: types
                        .iter()
                        .map(|t| {
                            if t.is_integer() {
                                DefaultColumnType::Integer
                            } else if t.is_floating() || matches!(t, DataType::Decimal128(..)) {
                                DefaultColumnType::FloatingPoint
                            } else {
                                DefaultColumnType::Text
                            }
                        })
                        .collect(),
                    rows: text_rows(&batches)
                        .into_iter()
                        .map(|r| {
                            r.into_iter()
                                .map(|v| if v.is_empty() { "(empty)".into() } else { v })
                                .collect()
                        })
                        .collect(),
                },
            };
        }
        Ok(last)
    }

    fn engine_name(&self) -> &str {
        "weir"
    }
}

/// Waits for every sink job of the session; each job's name, final state and error.
pub fn wait_jobs(
    session: &mut Session,
) -> Vec<(String, weir_planner::jobs::JobState, Option<String>)> {
    session
        .wait_for_jobs(&crossbeam_channel::never())
        .expect("wait for jobs")
}

/// A session keeping its jobs under `dir/data`.
pub fn durable_session(dir: &std::path::Path, parallelism: usize) -> Session {
    Session::open(SessionConfig {
        parallelism,
        data_dir: Some(dir.join("data")),
        ..SessionConfig::default()
    })
    .expect("open a durable session")
    .0
}
