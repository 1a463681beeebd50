//! Rendering results: aligned tables for people (comfy-table, through arrow's pretty printer
//! for whole results), CSV (arrow's writer) and JSON lines (weir's) for programs. Values take their
//! text form from `weir_planner::display`, the same for every front end.

use std::io::Write;

use anyhow::Result;
use comfy_table::{ColumnConstraint, Table, Width};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::FormatOptions;
use datafusion::arrow::util::pretty::pretty_format_batches_with_options;
use unicode_width::UnicodeWidthStr;
use weir_planner::display::{batch_rows, csv_lines, json_lines, printable};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// The borders arrow's pretty printer draws (`+---+`, `| a |`), so whole and streaming
/// tables look alike.
const TABLE_STYLE: &str = "||--+-++|    ++++++";

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

/// A text value as a table cell: control characters escaped ([`escape_controls`]), and the
/// text `NULL` quoted (`'NULL'`), since a NULL is spelled `NULL`: the two never look alike.
pub fn table_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s == "NULL" {
        return std::borrow::Cow::Borrowed("'NULL'");
    }
    escape_controls(s)
}

/// `batch` with its text columns as table cells ([`table_text`]).
fn terminal_safe(batch: &RecordBatch) -> Result<RecordBatch> {
    use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{Field, Schema};
    let texty =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    if !batch.schema().fields().iter().any(|f| texty(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if texty(f.data_type()) {
            let strings = cast(c, &DataType::Utf8)?;
            let escaped: StringArray = strings
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(|v| table_text(v).into_owned()))
                .collect();
            fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
            columns.push(std::sync::Arc::new(escaped) as ArrayRef);
        } else {
            fields.push(f.as_ref().clone());
            columns.push(c.clone());
        }
    }
    Ok(RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// Renders batches as an aligned text table (NULL spelled out).
pub fn render_table(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<String> {
    let mut printable_batches = batches
        .iter()
        .map(|b| terminal_safe(&printable(b)?))
        .collect::<Result<Vec<_>>>()?;
    if printable_batches.is_empty() {
        printable_batches.push(printable(&RecordBatch::new_empty(schema.clone()))?);
    }
    let options = FormatOptions::default()
        .with_null("NULL")
        .with_display_error(true);
    Ok(format!(
        "{}\n",
        pretty_format_batches_with_options(&printable_batches, &options)?
    ))
}

/// An endless result as a table: the header once, then rows as they arrive, in columns as
/// wide as the header and the first rows (later, wider values widen their own row only).
#[derive(Default)]
pub struct StreamingTable {
    /// Each column's width, padding included, fixed by the first batch.
    widths: Vec<u16>,
}

impl StreamingTable {
    pub fn render(&mut self, schema: &SchemaRef, batch: &RecordBatch) -> Result<String> {
        let rows: Vec<Vec<String>> = batch_rows(batch)?
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|v| v.map_or_else(|| "NULL".into(), |v| table_text(&v).into_owned()))
                    .collect()
            })
            .collect();
        let first = self.widths.is_empty();
        if first {
            // Timestamps may gain a fraction later: leave room for it from the start.
            self.widths = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(c, f)| {
                    let floor = match f.data_type() {
                        DataType::Timestamp(..) => 26,
                        _ => 0,
                    };
                    // Columns on the screen, not characters: a wide (CJK, emoji) one takes two.
                    let widest = rows.iter().map(|r| r[c].width()).max();
                    let width = f.name().width().max(floor).max(widest.unwrap_or(0));
                    u16::try_from(width + 2).unwrap_or(u16::MAX)
                })
                .collect();
        }
        let mut table = Table::new();
        table.load_preset(TABLE_STYLE);
        table.set_header(schema.fields().iter().map(|f| f.name().clone()));
        table.add_rows(rows);
        table.set_constraints(
            self.widths
                .iter()
                .map(|w| ColumnConstraint::LowerBoundary(Width::Fixed(*w))),
        );
        // The first batch prints the header and its rule; every batch its rows. The bottom
        // rule waits for the end, which an endless result never reaches.
        let lines: Vec<String> = table.lines().collect();
        let skip = if first { 0 } else { 3 };
        let mut out = String::new();
        for line in &lines[skip.min(lines.len())..lines.len().saturating_sub(1)] {
            out.push_str(line);
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
        let text = render_table(&b.schema(), &[b]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(lines[1], "| id   | name | ts                  |");
        assert_eq!(lines[4], "| NULL | bb   | 1970-01-01 00:00:01 |");
        let empty = render_table(&b_schema(), &[]).unwrap();
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
        let whole = render_table(&schema, std::slice::from_ref(&b)).unwrap();
        let lines: Vec<&str> = whole.lines().collect();
        assert_eq!(&lines[3..6], &["| NULL   |", "| 'NULL' |", "|        |"]);
        let streamed = StreamingTable::default().render(&schema, &b).unwrap();
        let lines: Vec<&str> = streamed.lines().collect();
        assert!(
            lines[3].contains(" NULL ") && lines[4].contains(" 'NULL' "),
            "{streamed}"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_wide_ones_align() {
        let b = batch(vec![Some(1), Some(2)], vec!["two\nlines", "\u{1b}[31mred"]);
        let text = render_table(&b.schema(), std::slice::from_ref(&b)).unwrap();
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
        let mut out = streaming.render(&wide.schema(), &wide).unwrap();
        let later = batch(vec![Some(2)], vec!["ab"]);
        out.push_str(&streaming.render(&later.schema(), &later).unwrap());
        let widths: Vec<usize> = out.lines().map(UnicodeWidthStr::width).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{out}");
    }

    fn b_schema() -> SchemaRef {
        batch(vec![], vec![]).schema()
    }

    #[test]
    fn streaming_tables_keep_the_first_widths() {
        let mut t = StreamingTable::default();
        let first = t
            .render(&b_schema(), &batch(vec![Some(1)], vec!["a"]))
            .unwrap();
        let later = t
            .render(&b_schema(), &batch(vec![Some(22), Some(3)], vec!["b", "c"]))
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
