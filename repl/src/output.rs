//! Rendering results: aligned tables for people (comfy-table, through arrow's pretty printer
//! for whole results), CSV (arrow's writer) and JSON lines (weir's) for programs. Values take their
//! text form from `weir_planner::display`, the same for every front end.

use std::io::Write;

use anyhow::Result;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use unicode_width::UnicodeWidthStr;
use weir_planner::display::{batch_rows, csv_lines, json_lines};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// Writes results as they arrive, in one format.
pub struct ResultWriter<W: Write> {
    out: Output<W>,
    schema: SchemaRef,
    wrote: bool,
}

enum Output<W: Write> {
    /// CSV, the header with the first batch.
    Csv(W),
    Json(W),
    /// Tables are rendered by [`render_table`] and [`StreamingTable`].
    Table,
}

impl<W: Write> ResultWriter<W> {
    pub fn new(out: W, format: Format, schema: SchemaRef) -> Self {
        let out = match format {
            Format::Csv => Output::Csv(out),
            Format::Json => Output::Json(out),
            Format::Table => Output::Table,
        };
        Self {
            out,
            schema,
            wrote: false,
        }
    }

    /// Writes a batch (CSV and JSON); table output goes through [`render_table`].
    pub fn write_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        match &mut self.out {
            Output::Csv(w) => {
                w.write_all(&csv_lines(batch, !self.wrote, b',')?)?;
                w.flush()?;
            }
            Output::Json(w) => {
                w.write_all(&json_lines(batch)?)?;
                w.flush()?;
            }
            Output::Table => {}
        }
        self.wrote = true;
        Ok(())
    }

    /// Ends a result: CSV prints its header even when there were no rows.
    pub fn finish(&mut self) -> Result<()> {
        if !self.wrote {
            if let Output::Csv(w) = &mut self.out {
                w.write_all(&csv_lines(
                    &RecordBatch::new_empty(self.schema.clone()),
                    true,
                    b',',
                )?)?;
                w.flush()?;
            }
            self.wrote = true;
        }
        Ok(())
    }
}

/// Text as a terminal may show it: control characters (a line break, a tab, the ESC that
/// starts an ANSI sequence) written as escapes (`\n`, `\t`, `\x1b`), so no value can break
/// a table's layout or drive the terminal.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// How tables look: the REPL's `\null` and `\x`, and the width they fit in.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// How a NULL is shown (a text equal to it is quoted, so the two never look alike).
    pub null: String,
    /// One line per column and row (psql's `\x`).
    pub expanded: bool,
    /// Columns on the screen the table fits in (long values truncated with `…`); `None`:
    /// as wide as its values.
    pub width: Option<usize>,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            null: "NULL".into(),
            expanded: false,
            width: None,
        }
    }
}

/// The narrowest a column is cut to when a table does not fit.
const MIN_FITTED_WIDTH: usize = 6;

/// Whether a column of this type is right-aligned (numbers are).
fn right_aligned(t: &DataType) -> bool {
    t.is_numeric()
}

/// A batch's rows as cells: weir's text forms, control characters escaped, NULL as
/// `options.null`, a text equal to that quoted.
fn cells(batch: &RecordBatch, options: &TableOptions) -> Result<Vec<Vec<String>>> {
    let texty: Vec<bool> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| {
            matches!(
                f.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        })
        .collect();
    Ok(batch_rows(batch)?
        .into_iter()
        .map(|row| {
            row.into_iter()
                .zip(&texty)
                .map(|(v, texty)| match v {
                    None => options.null.clone(),
                    Some(v) if *texty && v == options.null => format!("'{v}'"),
                    Some(v) => escape_controls(&v).into_owned(),
                })
                .collect()
        })
        .collect())
}

/// Whether a column of this type is cut before the others when a table does not fit: text
/// (names, URLs, JSON) reads well with its end cut; numbers and times do not.
fn cut_first(t: &DataType) -> bool {
    !(t.is_numeric() || t.is_temporal() || matches!(t, DataType::Boolean))
}

/// Each column's width: its header and widest cell, then, when the table is wider than
/// `width`, the widest columns cut down (to [`MIN_FITTED_WIDTH`] at least) until it fits:
/// the `texty` ones first, the rest only when those are at their minimum.
fn column_widths(
    headers: &[String],
    rows: &[Vec<String>],
    width: Option<usize>,
    texty: &[bool],
) -> Vec<usize> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    if let Some(limit) = width {
        // `| a | b |`: three columns of frame per column, one more at the end.
        let total = |w: &[usize]| w.iter().map(|w| w + 3).sum::<usize>() + 1;
        for texts_only in [true, false] {
            while total(&widths) > limit {
                let Some((i, &widest)) = widths
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !texts_only || texty.get(*i).copied().unwrap_or(true))
                    .max_by_key(|(_, w)| **w)
                else {
                    break;
                };
                if widest <= MIN_FITTED_WIDTH {
                    break;
                }
                widths[i] -= 1;
            }
        }
    }
    widths
}

/// `text` in `width` columns of the screen: cut with `…` when longer, padded when shorter.
fn fit(text: &str, width: usize, right: bool) -> String {
    let mut shown = text.to_string();
    if text.width() > width {
        shown.clear();
        let mut used = 0;
        for c in text.chars() {
            let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if used + w + 1 > width {
                break;
            }
            shown.push(c);
            used += w;
        }
        shown.push('…');
    }
    let pad = " ".repeat(width.saturating_sub(shown.width()));
    if right {
        format!("{pad}{shown}")
    } else {
        format!("{shown}{pad}")
    }
}

fn rule(widths: &[usize]) -> String {
    let mut line = String::from("+");
    for w in widths {
        line.push_str(&"-".repeat(w + 2));
        line.push('+');
    }
    line
}

fn row_line(cells: &[String], widths: &[usize], right: &[bool]) -> String {
    let mut line = String::from("|");
    for ((cell, w), r) in cells.iter().zip(widths).zip(right) {
        line.push(' ');
        line.push_str(&fit(cell, *w, *r));
        line.push_str(" |");
    }
    line
}

/// Rows as psql's expanded display: a `-[ RECORD n ]-` rule, then `column | value` lines.
fn expanded_lines(
    headers: &[String],
    rows: &[Vec<String>],
    first: usize,
    width: Option<usize>,
) -> String {
    let name_width = headers.iter().map(|h| h.width()).max().unwrap_or(0);
    let value_width = width.map(|w| w.saturating_sub(name_width + 3).max(MIN_FITTED_WIDTH));
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        let title = format!("-[ RECORD {} ]", first + n);
        let rule_width = width
            .unwrap_or(0)
            .min(name_width + 3 + 20)
            .max(title.width());
        out.push_str(&title);
        out.push_str(&"-".repeat(rule_width.saturating_sub(title.width())));
        out.push('\n');
        for (h, v) in headers.iter().zip(row) {
            let v = match value_width {
                Some(w) if v.width() > w => fit(v, w, false),
                _ => v.clone(),
            };
            out.push_str(&fit(h, name_width, false));
            out.push_str(" | ");
            out.push_str(v.trim_end());
            out.push('\n');
        }
    }
    out
}

/// Renders a whole result as an aligned text table (or expanded rows).
pub fn render_table(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    options: &TableOptions,
) -> Result<String> {
    let headers: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let right: Vec<bool> = schema
        .fields()
        .iter()
        .map(|f| right_aligned(f.data_type()))
        .collect();
    let mut rows = Vec::new();
    for b in batches {
        rows.extend(cells(b, options)?);
    }
    if options.expanded {
        if rows.is_empty() {
            return Ok("(no rows)\n".into());
        }
        return Ok(expanded_lines(&headers, &rows, 1, options.width));
    }
    let texty: Vec<bool> = schema
        .fields()
        .iter()
        .map(|f| cut_first(f.data_type()))
        .collect();
    let widths = column_widths(&headers, &rows, options.width, &texty);
    let no_right = vec![false; headers.len()];
    let mut out = String::new();
    for line in [
        rule(&widths),
        row_line(&headers, &widths, &no_right),
        rule(&widths),
    ] {
        out.push_str(&line);
        out.push('\n');
    }
    for row in &rows {
        out.push_str(&row_line(row, &widths, &right));
        out.push('\n');
    }
    out.push_str(&rule(&widths));
    out.push('\n');
    Ok(out)
}

/// An endless result as a table: the header once, then rows as they arrive, in columns as
/// wide as the header and the first rows (fitted to the terminal; later, longer values are
/// cut to the column), or as expanded rows numbered on.
#[derive(Default)]
pub struct StreamingTable {
    /// Each column's width, fixed by the first batch.
    widths: Vec<usize>,
    /// Rows shown so far (expanded rows are numbered on from it).
    rows: usize,
}

impl StreamingTable {
    pub fn render(
        &mut self,
        schema: &SchemaRef,
        batch: &RecordBatch,
        options: &TableOptions,
    ) -> Result<String> {
        let headers: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let rows = cells(batch, options)?;
        let first_row = self.rows + 1;
        self.rows += rows.len();
        if options.expanded {
            return Ok(expanded_lines(&headers, &rows, first_row, options.width));
        }
        let right: Vec<bool> = schema
            .fields()
            .iter()
            .map(|f| right_aligned(f.data_type()))
            .collect();
        let mut out = String::new();
        if self.widths.is_empty() {
            // Timestamps may gain a fraction later: leave room for it from the start.
            let texty: Vec<bool> = schema
                .fields()
                .iter()
                .map(|f| cut_first(f.data_type()))
                .collect();
            let mut widths = column_widths(&headers, &rows, None, &texty);
            for (w, f) in widths.iter_mut().zip(schema.fields()) {
                if matches!(f.data_type(), DataType::Timestamp(..)) {
                    *w = (*w).max(26);
                }
            }
            let fitted = column_widths(
                &headers,
                &[widths.iter().map(|w| "x".repeat(*w)).collect()],
                options.width,
                &texty,
            );
            self.widths = fitted;
            let no_right = vec![false; headers.len()];
            for line in [
                rule(&self.widths),
                row_line(&headers, &self.widths, &no_right),
                rule(&self.widths),
            ] {
                out.push_str(&line);
                out.push('\n');
            }
        }
        // Rows only: the bottom rule waits for the end, which an endless result never reaches.
        for row in &rows {
            out.push_str(&row_line(row, &self.widths, &right));
            out.push('\n');
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn batch(ids: Vec<Option<i64>>, names: Vec<&str>) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]);
        let n = ids.len() as i64;
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
                Arc::new(TimestampNanosecondArray::from(
                    (0..n).map(|i| i * 1_000_000_000).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    #[test]
    fn whole_tables_spell_null_and_timestamps_as_weir_does() {
        let b = batch(vec![Some(1), None], vec!["a", "bb"]);
        let text = render_table(&b.schema(), &[b], &TableOptions::default()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(lines[1], "| id   | name | ts                  |");
        assert_eq!(lines[4], "| NULL | bb   | 1970-01-01 00:00:01 |");
        let empty = render_table(&b_schema(), &[], &TableOptions::default()).unwrap();
        assert!(empty.contains("| id | name | ts |"), "{empty}");
    }

    #[test]
    fn a_null_and_the_text_null_never_look_alike() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(vec![
                None,
                Some("NULL"),
                Some(""),
            ]))],
        )
        .unwrap();
        let whole =
            render_table(&schema, std::slice::from_ref(&b), &TableOptions::default()).unwrap();
        let lines: Vec<&str> = whole.lines().collect();
        assert_eq!(&lines[3..6], &["| NULL   |", "| 'NULL' |", "|        |"]);
        let streamed = StreamingTable::default()
            .render(&schema, &b, &TableOptions::default())
            .unwrap();
        let lines: Vec<&str> = streamed.lines().collect();
        assert!(
            lines[3].contains(" NULL ") && lines[4].contains(" 'NULL' "),
            "{streamed}"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_wide_ones_align() {
        let b = batch(vec![Some(1), Some(2)], vec!["two\nlines", "\u{1b}[31mred"]);
        let text = render_table(
            &b.schema(),
            std::slice::from_ref(&b),
            &TableOptions::default(),
        )
        .unwrap();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains("two\\nlines") && text.contains("\\x1b[31mred"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 6, "{text}");
        let mut streaming = StreamingTable::default();
        // The first batch fixes the widths: a wide name takes two columns a character, and
        // a later, narrower batch keeps the column as wide.
        let wide = batch(vec![Some(1)], vec!["日本語"]);
        let mut out = streaming
            .render(&wide.schema(), &wide, &TableOptions::default())
            .unwrap();
        let later = batch(vec![Some(2)], vec!["ab"]);
        out.push_str(
            &streaming
                .render(&later.schema(), &later, &TableOptions::default())
                .unwrap(),
        );
        let widths: Vec<usize> = out.lines().map(UnicodeWidthStr::width).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{out}");
    }

    #[test]
    fn numbers_align_right_and_wide_tables_fit_the_terminal() {
        let b = batch(
            vec![Some(7), Some(12345)],
            vec!["short", "a rather long name that does not fit"],
        );
        let text = render_table(
            &b.schema(),
            std::slice::from_ref(&b),
            &TableOptions::default(),
        )
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[3].starts_with("|     7 | short "), "{text}");
        let fitted = TableOptions {
            width: Some(50),
            ..TableOptions::default()
        };
        let text = render_table(&b.schema(), std::slice::from_ref(&b), &fitted).unwrap();
        assert!(text.lines().all(|l| l.width() <= 50), "{text}");
        assert!(text
            .lines()
            .all(|l| l.width() == text.lines().next().unwrap().width()));
        assert!(text.contains("| a rather long n… |"), "{text}");
        assert!(text.contains("1970-01-01 00:00:01"), "{text}");
        // A terminal too narrow for the minimum: columns stop shrinking at it.
        let narrow = TableOptions {
            width: Some(5),
            ..TableOptions::default()
        };
        let text = render_table(&b.schema(), std::slice::from_ref(&b), &narrow).unwrap();
        assert!(text.contains("| 12345 |"), "{text}");
    }

    #[test]
    fn expanded_rows_and_a_null_string_of_ones_own() {
        let b = batch(vec![Some(1), None], vec!["x", "(null)"]);
        let options = TableOptions {
            null: "(null)".into(),
            expanded: true,
            width: None,
        };
        let text = render_table(&b.schema(), std::slice::from_ref(&b), &options).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("-[ RECORD 1 ]"), "{text}");
        assert_eq!(
            &lines[1..4],
            &["id   | 1", "name | x", "ts   | 1970-01-01 00:00:00"]
        );
        assert!(lines[4].starts_with("-[ RECORD 2 ]"), "{text}");
        assert_eq!(&lines[5..7], &["id   | (null)", "name | '(null)'"]);
        // Streaming rows number on across batches.
        let mut streaming = StreamingTable::default();
        streaming.render(&b.schema(), &b, &options).unwrap();
        let next = streaming.render(&b.schema(), &b, &options).unwrap();
        assert!(next.starts_with("-[ RECORD 3 ]"), "{next}");
    }

    fn b_schema() -> SchemaRef {
        batch(vec![], vec![]).schema()
    }

    #[test]
    fn streaming_tables_keep_the_first_widths() {
        let mut t = StreamingTable::default();
        let first = t
            .render(
                &b_schema(),
                &batch(vec![Some(1)], vec!["a"]),
                &TableOptions::default(),
            )
            .unwrap();
        let later = t
            .render(
                &b_schema(),
                &batch(vec![Some(22), Some(3)], vec!["b", "c"]),
                &TableOptions::default(),
            )
            .unwrap();
        let first: Vec<&str> = first.lines().collect();
        let later: Vec<&str> = later.lines().collect();
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(first[0].starts_with("+----+"), "{first:?}");
        assert_eq!(later.len(), 2, "{later:?}");
        assert!(later[0].starts_with("| 22 | b "), "{later:?}");
        let width = first[0].chars().count();
        assert!(first
            .iter()
            .chain(&later)
            .all(|l| l.chars().count() == width));
        // The timestamp column leaves room for a fraction.
        assert!(
            first[1].contains("| ts                         |"),
            "{first:?}"
        );
    }
}
