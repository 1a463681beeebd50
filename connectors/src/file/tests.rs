//! The file reader with decoder threads against the same reader decoding in place.

use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use super::*;

fn factory(path: &std::path::Path, format: FileFormat, bad_rows: BadRows) -> FileSourceFactory {
    FileSourceFactory {
        table: "t".into(),
        path: path.to_path_buf(),
        format,
        schema: Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ])),
        bad_rows,
        batch_size: 7,
        rate: None,
    }
}

/// The batches a reader gave, each with the position recorded after it.
type Batches = Vec<(RecordBatch, Vec<u8>)>;

/// Every batch a reader gives from `position` on, each with the position recorded after it,
/// and the rows skipped; or the error that ended the read.
fn read_from(
    f: &FileSourceFactory,
    position: FilePosition,
    threads: usize,
) -> EngineResult<(Batches, u64)> {
    let mut reader = f.reader_at(&f.path, position, threads)?;
    let mut out = Vec::new();
    loop {
        match reader.poll_next()? {
            SourcePoll::Batch(b) => out.push((b, reader.position())),
            SourcePoll::Exhausted => return Ok((out, reader.skipped_rows())),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn rows(f: &FileSourceFactory, batches: &Batches) -> RecordBatch {
    let batches: Vec<RecordBatch> = batches.iter().map(|(b, _)| b.clone()).collect();
    concat_batches(&f.schema, &batches).unwrap()
}

/// A CSV with a header, quoted fields holding newlines and delimiters, and every 13th row
/// malformed (a word where the id is).
fn write_csv(path: &std::path::Path, n: usize) {
    let mut text = String::from("id,name\n");
    for i in 0..n {
        if i % 13 == 5 {
            text.push_str(&format!("x{i},bad\n"));
        } else if i % 4 == 0 {
            text.push_str(&format!("{i},\"line\nbreak, {i}\"\n"));
        } else {
            text.push_str(&format!("{i},n{i}\n"));
        }
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn decoder_threads_give_the_rows_positions_and_skips_of_decoding_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    write_csv(&path, 500);
    let csv = FileFormat::Csv {
        header: true,
        delimiter: b',',
    };
    let f = factory(&path, csv, BadRows::Skip);
    let (alone, skipped) = read_from(&f, FilePosition::START, 0).unwrap();
    assert_eq!(skipped, 39, "rows 5, 18, ... of 500 are malformed");
    assert_eq!(rows(&f, &alone).num_rows(), 500 - 39);
    for threads in [1, 2, 3] {
        let (pooled, skipped_pooled) = read_from(&f, FilePosition::START, threads).unwrap();
        assert_eq!(skipped_pooled, skipped, "{threads} threads");
        // The same batches (the same cuts) and the same position after each.
        assert_eq!(pooled, alone, "{threads} threads");
    }
    // A reader resumed at any recorded position gives the rows after it, either way.
    let all = rows(&f, &alone);
    let mut done = 0;
    for (batch, position) in &alone {
        done += batch.num_rows();
        let (name, at) = decode_position(position).unwrap();
        assert_eq!(name, "t.csv");
        let (rest, _) = read_from(&f, at, 2).unwrap();
        assert_eq!(rows(&f, &rest), all.slice(done, all.num_rows() - done));
        let (rest_alone, _) = read_from(&f, at, 0).unwrap();
        assert_eq!(rest, rest_alone);
    }
}

#[test]
fn decoder_threads_fail_on_the_first_bad_row_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    write_csv(&path, 300);
    let csv = FileFormat::Csv {
        header: true,
        delimiter: b',',
    };
    let f = factory(&path, csv, BadRows::Fail);
    let alone = read_from(&f, FilePosition::START, 0)
        .unwrap_err()
        .to_string();
    // Row 5 is on line 9: the header, rows 0 and 4 on two lines each, rows 1-3 on one.
    assert!(
        alone.contains("file '") && alone.contains("line 9:"),
        "{alone}"
    );
    for threads in [1, 2] {
        let pooled = read_from(&f, FilePosition::START, threads)
            .unwrap_err()
            .to_string();
        assert_eq!(pooled, alone);
    }
}

#[test]
fn decoder_threads_read_json_lines_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let text: String = (0..100)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"n{i}\"}}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    let f = factory(&path, FileFormat::Json, BadRows::Fail);
    let (alone, _) = read_from(&f, FilePosition::START, 0).unwrap();
    let (pooled, _) = read_from(&f, FilePosition::START, 2).unwrap();
    assert_eq!(rows(&f, &alone).num_rows(), 100);
    assert_eq!(pooled, alone);
}
