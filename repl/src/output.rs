//! Rendering results: aligned tables for people, CSV and JSON lines for programs. Values are
//! turned into text by `weir_planner::display`, the same for every front end.

use std::io::Write;

use anyhow::Result;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_planner::display::{batch_rows, csv_header, csv_line, json_line};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

fn rows(batch: &RecordBatch) -> Result<Vec<Vec<Option<String>>>> {
    Ok(batch_rows(batch)?)
}

/// Writes results as they arrive, in one format.
pub struct ResultWriter<W: Write> {
    out: W,
    format: Format,
    schema: SchemaRef,
    header_written: bool,
}

impl<W: Write> ResultWriter<W> {
    pub fn new(out: W, format: Format, schema: SchemaRef) -> Self {
        Self {
            out,
            format,
            schema,
            header_written: false,
        }
    }

    fn header(&mut self) -> Result<()> {
        if self.header_written || self.format != Format::Csv {
            return Ok(());
        }
        self.header_written = true;
        writeln!(self.out, "{}", csv_header(&self.schema, ','))?;
        Ok(())
    }

    /// Writes a batch (CSV and JSON); table output goes through [`render_table`].
    pub fn write_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.header()?;
        for row in rows(batch)? {
            match self.format {
                Format::Csv => writeln!(self.out, "{}", csv_line(&row, ','))?,
                Format::Json => writeln!(self.out, "{}", json_line(&batch.schema(), row))?,
                Format::Table => {}
            }
        }
        self.out.flush()?;
        Ok(())
    }

    /// Ends a result: CSV prints its header even when there were no rows.
    pub fn finish(&mut self) -> Result<()> {
        self.header()?;
        self.out.flush()?;
        Ok(())
    }
}

/// An endless result as a table: the header once, then rows as they arrive, in columns as
/// wide as the header and the first rows (later, wider values widen their own row only).
#[derive(Default)]
pub struct StreamingTable {
    widths: Vec<usize>,
}

impl StreamingTable {
    pub fn render(&mut self, schema: &SchemaRef, batch: &RecordBatch) -> Result<String> {
        let values: Vec<Vec<String>> = rows(batch)?
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|v| v.unwrap_or_else(|| "NULL".into()))
                    .collect()
            })
            .collect();
        let mut out = String::new();
        if self.widths.is_empty() {
            let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
            // Timestamps may gain a fraction later: leave room for it from the start.
            self.widths = schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Timestamp(..) => f.name().chars().count().max(26),
                    _ => f.name().chars().count(),
                })
                .collect();
            for r in &values {
                for (w, v) in self.widths.iter_mut().zip(r) {
                    *w = (*w).max(v.chars().count());
                }
            }
            let line = format!(
                "+{}+",
                self.widths
                    .iter()
                    .map(|w| "-".repeat(w + 2))
                    .collect::<Vec<_>>()
                    .join("+")
            );
            out.push_str(&line);
            out.push('\n');
            out.push_str(&table_row(&names, &self.widths));
            out.push('\n');
            out.push_str(&line);
            out.push('\n');
        }
        for r in &values {
            out.push_str(&table_row(r, &self.widths));
            out.push('\n');
        }
        Ok(out)
    }
}

fn table_row(values: &[String], widths: &[usize]) -> String {
    let cells: Vec<String> = values
        .iter()
        .zip(widths)
        .map(|(v, w)| format!(" {v}{} ", " ".repeat(w.saturating_sub(v.chars().count()))))
        .collect();
    format!("|{}|", cells.join("|"))
}

/// Renders batches as an aligned text table.
pub fn render_table(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<String> {
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut all: Vec<Vec<String>> = Vec::new();
    for b in batches {
        for r in rows(b)? {
            all.push(
                r.into_iter()
                    .map(|v| v.unwrap_or_else(|| "NULL".into()))
                    .collect(),
            );
        }
    }
    let mut widths: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
    for r in &all {
        for (w, v) in widths.iter_mut().zip(r) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = format!(
        "+{}+",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+")
    );
    let fmt_row = |vals: &[String]| table_row(vals, &widths);
    let mut out = String::new();
    out.push_str(&line);
    out.push('\n');
    out.push_str(&fmt_row(&names));
    out.push('\n');
    out.push_str(&line);
    out.push('\n');
    for r in &all {
        out.push_str(&fmt_row(r));
        out.push('\n');
    }
    out.push_str(&line);
    out.push('\n');
    Ok(out)
}
