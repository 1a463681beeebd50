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
        unread: Vec::new(),
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

/// `batch` with the columns `unread` replaced by nulls.
fn nulled(batch: &RecordBatch, unread: &[usize]) -> RecordBatch {
    let columns = (0..batch.num_columns())
        .map(|i| match unread.contains(&i) {
            true => datafusion::arrow::array::new_null_array(
                batch.schema().field(i).data_type(),
                batch.num_rows(),
            ),
            false => batch.column(i).clone(),
        })
        .collect();
    RecordBatch::try_new(batch.schema(), columns).unwrap()
}

/// A source told which columns no query reads decodes the others exactly as before and gives
/// nulls there, for every subset of columns, CSV and JSON, in place and on decoder threads;
/// a bad value in a column left out is no longer a bad row, one in a read column still is.
#[test]
fn columns_nobody_reads_are_not_decoded_and_come_as_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Millisecond, None),
            true,
        ),
    ]));
    let (mut csv, mut json) = (String::from("id,name,price,ts\n"), String::new());
    for i in 0..200 {
        let ts = format!("2024-01-01T00:00:{:02}", i % 60);
        csv.push_str(&format!("{i},\"n,{i}\",{}.5,{ts}\n", i * 3));
        json.push_str(&format!(
            "{{\"id\": {i}, \"name\": \"n{i}\", \"price\": {}.5, \"ts\": \"{ts}\"}}\n",
            i * 3
        ));
    }
    let formats = [
        (
            "t.csv",
            csv,
            FileFormat::Csv {
                header: true,
                delimiter: b',',
            },
        ),
        ("t.json", json, FileFormat::Json),
    ];
    for (name, text, format) in formats {
        let path = dir.path().join(name);
        std::fs::write(&path, &text).unwrap();
        let mut full = factory(&path, format.clone(), BadRows::Fail);
        full.schema = schema.clone();
        let (all, _) = read_from(&full, FilePosition::START, 0).unwrap();
        let all = rows(&full, &all);
        assert_eq!(all.num_rows(), 200, "{name}");
        for mask in 1..16u32 {
            let unread: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
            let narrowed = full.without_columns(&unread).unwrap();
            assert!(
                narrowed.describe().contains("(not producing "),
                "{}",
                narrowed.describe()
            );
            let f = FileSourceFactory {
                unread: unread.clone(),
                ..full.clone()
            };
            for threads in [0, 2] {
                let (got, _) = read_from(&f, FilePosition::START, threads).unwrap();
                assert_eq!(
                    rows(&f, &got),
                    nulled(&all, &unread),
                    "{name}, unread {unread:?}, {threads} threads"
                );
            }
        }
        // Row 3's price is not a number: a bad row only where price is read.
        let bad = match format {
            FileFormat::Csv { .. } => text.replacen("3,\"n,3\",9.5", "3,\"n,3\",nine", 1),
            FileFormat::Json => text.replacen("\"price\": 9.5", "\"price\": \"nine\"", 1),
        };
        assert_ne!(bad, text, "{name}");
        std::fs::write(&path, &bad).unwrap();
        let e = read_from(&full, FilePosition::START, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("price"), "{name}: {e}");
        let without_price = FileSourceFactory {
            unread: vec![2],
            ..full.clone()
        };
        let (got, skipped) = read_from(&without_price, FilePosition::START, 0).unwrap();
        assert_eq!((rows(&without_price, &got).num_rows(), skipped), (200, 0));
        let without_name = FileSourceFactory {
            unread: vec![1],
            ..full.clone()
        };
        let e = read_from(&without_name, FilePosition::START, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("price") && e.contains("line "), "{name}: {e}");
    }
    // A CSV record still needs all its fields, whichever are read.
    let path = dir.path().join("short.csv");
    std::fs::write(&path, "1,a,2.5,2024-01-01T00:00:00\n2,b\n").unwrap();
    let mut f = factory(
        &path,
        FileFormat::Csv {
            header: false,
            delimiter: b',',
        },
        BadRows::Fail,
    );
    f.schema = schema;
    f.unread = vec![2, 3];
    let e = read_from(&f, FilePosition::START, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("fields"), "{e}");
}
