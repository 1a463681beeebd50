//! The Arrow generator writes the `nexmark` crate's events: every stream, every column alone
//! and together, from any offset, with any step (partitions), up to the `events` bound.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::util::display::array_value_to_string;
use nexmark::event::{Event, EventType};
use nexmark::EventGenerator;

use super::generate::{ArrowGenerator, EventConfig};
use super::{config, Stream};

/// The crate's events of `stream` at offsets `offset, offset + step, ...`: each as the text of
/// the stream's columns in schema order (times in ms, as the crate keeps them).
fn crate_rows(stream: Stream, offset: u64, step: u64, n: usize) -> Vec<Vec<String>> {
    let kind = match stream {
        Stream::Person => EventType::Person,
        Stream::Auction => EventType::Auction,
        Stream::Bid => EventType::Bid,
    };
    EventGenerator::new(config(1_436_918_400_000, 10_000))
        .with_type_filter(kind)
        .with_offset(offset)
        .with_step(step)
        .take(n)
        .map(|e| match e {
            Event::Person(p) => vec![
                p.id.to_string(),
                p.name,
                p.email_address,
                p.credit_card,
                p.city,
                p.state,
                p.date_time.to_string(),
                p.extra,
            ],
            Event::Auction(a) => vec![
                a.id.to_string(),
                a.item_name,
                a.description,
                a.initial_bid.to_string(),
                a.reserve.to_string(),
                a.date_time.to_string(),
                a.expires.to_string(),
                a.seller.to_string(),
                a.category.to_string(),
                a.extra,
            ],
            Event::Bid(b) => vec![
                b.auction.to_string(),
                b.bidder.to_string(),
                b.price.to_string(),
                b.channel,
                b.url,
                b.date_time.to_string(),
                b.extra,
            ],
        })
        .collect()
}

/// A cell of the generator's column as the crate's text (timestamps back to ms).
fn cell(column: &ArrayRef, row: usize) -> String {
    use datafusion::arrow::array::{Array, TimestampNanosecondArray};
    match column.as_any().downcast_ref::<TimestampNanosecondArray>() {
        Some(t) => (t.value(row) / 1_000_000).to_string(),
        None => array_value_to_string(column, row).expect("cell text"),
    }
}

fn check(stream: Stream, projection: &[usize], offset: u64, step: u64, n: usize) {
    let config = Arc::new(EventConfig::new(config(1_436_918_400_000, 10_000)).unwrap());
    let generator = ArrowGenerator::new(config, stream, projection);
    let want = crate_rows(stream, offset, step, n);
    let mut at = offset;
    // Two batches: the second continues where the first stopped.
    let first = n / 3;
    let (a, taken_a) = generator.batch(&mut at, step, first, None);
    let (b, taken_b) = generator.batch(&mut at, step, n - first, None);
    assert_eq!((taken_a, taken_b), (first, n - first));
    assert_eq!(at, offset + step * n as u64);
    for &c in projection {
        assert_eq!(a[c].len() + b[c].len(), n, "{stream:?} column {c}");
        for (row, expected) in want.iter().enumerate() {
            let got = if row < first {
                cell(&a[c], row)
            } else {
                cell(&b[c], row - first)
            };
            assert_eq!(
                got, expected[c],
                "{stream:?} column {c}, row {row} (offset {offset}, step {step}, projection {projection:?})"
            );
        }
    }
}

#[test]
fn every_stream_and_column_equals_the_crate_s_events() {
    for (stream, width) in [(Stream::Person, 8), (Stream::Auction, 10), (Stream::Bid, 7)] {
        let all: Vec<usize> = (0..width).collect();
        check(stream, &all, 0, 1, 3000);
        check(stream, &all, 5, 3, 1000);
        // Each column alone (later draws skipped, earlier ones made and not written).
        for c in 0..width {
            check(stream, &[c], 17, 2, 400);
        }
        // A few pairs, out of schema order.
        check(stream, &[width - 1, 0], 1, 1, 400);
        check(stream, &[width / 2, 1], 1_000_000, 1, 200);
    }
}

#[test]
fn the_events_bound_counts_events_of_all_streams() {
    let config = Arc::new(EventConfig::new(config(0, 10_000)).unwrap());
    // 1,000 events over all streams: 20 persons, 60 auctions, 920 bids.
    for (stream, expected) in [
        (Stream::Person, 20),
        (Stream::Auction, 60),
        (Stream::Bid, 920),
    ] {
        let generator = ArrowGenerator::new(Arc::clone(&config), stream, &[0]);
        let mut at = 0;
        let (_, taken) = generator.batch(&mut at, 1, 5000, Some(1000));
        assert_eq!(taken, expected, "{stream:?}");
        let (_, more) = generator.batch(&mut at, 1, 5000, Some(1000));
        assert_eq!(more, 0, "{stream:?}");
    }
}

mod events_file {
    use datafusion::arrow::compute::concat_batches;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use weir_engine::{SourceFactory, SourcePoll, SourceReader};

    use super::super::{config, write_events_file, NexmarkSourceFactory, Stream};
    use crate::error::Result;
    use crate::options::Options;

    fn source(
        table: &str,
        pairs: &[(&str, &str)],
        declared: Option<SchemaRef>,
    ) -> Result<NexmarkSourceFactory> {
        let mut options = Options::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        NexmarkSourceFactory::from_options(table, declared, &mut options)
    }

    /// Every batch partition `partition` of the source reads.
    fn drain(factory: &NexmarkSourceFactory, partition: u64) -> Vec<RecordBatch> {
        let mut reader = factory.reader_at(partition);
        let mut out = Vec::new();
        loop {
            match reader.poll_next().unwrap() {
                SourcePoll::Batch(b) => out.push(b),
                SourcePoll::Exhausted => return out,
                other => panic!(
                    "no rate was set, one split: {}",
                    matches!(other, SourcePoll::Pending)
                ),
            }
        }
    }

    fn task() -> weir_engine::TaskInfo {
        weir_engine::TaskInfo {
            job: "j".into(),
            stage: "source t".into(),
            instance: 0,
            parallelism: 1,
            metrics: std::sync::Arc::new(weir_engine::JobMetrics::default()),
            state: weir_engine::state::StateHandle::new(
                std::sync::Arc::new(weir_engine::state::TaskState::temporary(1 << 20)),
                0,
            ),
            restored_epoch: 0,
        }
    }

    fn all(factory: &NexmarkSourceFactory, batches: Vec<RecordBatch>) -> RecordBatch {
        concat_batches(&factory.schema, &batches).unwrap()
    }

    #[test]
    fn a_query_reads_the_same_rows_from_the_events_file_as_from_the_generator() {
        let dir = tempfile::tempdir().unwrap();
        let ts = || DataType::Timestamp(TimeUnit::Nanosecond, None);
        for (stream, declared) in [
            (Stream::Person, None),
            (Stream::Auction, None),
            (Stream::Bid, None),
            // Some columns, out of order, one of them cast.
            (
                Stream::Bid,
                Some(Schema::new(vec![
                    Field::new("date_time", ts(), false),
                    Field::new("price", DataType::Float64, false),
                    Field::new("auction", DataType::Int64, false),
                ])),
            ),
        ] {
            let declared = declared.map(std::sync::Arc::new);
            let path = dir.path().join(format!("{}.arrow", stream.name()));
            let rows =
                write_events_file(&path, stream, 5000, config(1_436_918_400_000, 10_000), 97)
                    .unwrap();
            let name = stream.name();
            let generated = source(
                name,
                &[("events", "5000"), ("batch_size", "97")],
                declared.clone(),
            )
            .unwrap();
            let want = all(&generated, drain(&generated, 0));
            assert_eq!(want.num_rows() as u64, rows, "{name}");
            let path = path.to_str().unwrap();
            let one = source(name, &[("events_file", path)], declared.clone()).unwrap();
            assert!(one.is_bounded(), "{name}");
            assert_eq!(all(&one, drain(&one, 0)), want, "{name}");
            // Three partitions: partition p reads batches p, p + 3, ...
            let three = source(
                name,
                &[("events_file", path), ("partitions", "3")],
                declared,
            )
            .unwrap();
            let parts: Vec<Vec<RecordBatch>> = (0..3).map(|p| drain(&three, p)).collect();
            let mut in_order = Vec::new();
            for k in 0.. {
                let round: Vec<_> = parts.iter().filter_map(|p| p.get(k).cloned()).collect();
                if round.is_empty() {
                    break;
                }
                in_order.extend(round);
            }
            assert_eq!(all(&three, in_order), want, "{name}, 3 partitions");
        }
    }

    /// A preloaded events file reads back the generator's rows (all columns, or some, in one
    /// or three partitions) from memory, refuses another stream's table, and is read from the
    /// file again once unloaded.
    #[test]
    fn a_preloaded_events_file_reads_the_generators_rows_from_memory() {
        use super::super::{preload_events_file, unload_events_files, EventsFile};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bid.arrow");
        write_events_file(
            &path,
            Stream::Bid,
            4000,
            config(1_436_918_400_000, 10_000),
            89,
        )
        .unwrap();
        let bytes = preload_events_file(&path, Stream::Bid).unwrap();
        assert_eq!(bytes as u64, std::fs::metadata(&path).unwrap().len());
        let file = EventsFile::open(&path, Stream::Bid).unwrap();
        assert!(format!("{file:?}").contains("preloaded: true"), "{file:?}");
        // Removing the file shows the batches come from memory.
        let moved = dir.path().join("moved.arrow");
        std::fs::rename(&path, &moved).unwrap();
        std::fs::write(&path, b"not arrow").unwrap();
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        for declared in [
            None,
            Some(std::sync::Arc::new(Schema::new(vec![
                Field::new("date_time", ts, false),
                Field::new("price", DataType::Float64, false),
                Field::new("auction", DataType::Int64, false),
            ]))),
        ] {
            let generated = source(
                "bid",
                &[("events", "4000"), ("batch_size", "89")],
                declared.clone(),
            )
            .unwrap();
            let want = all(&generated, drain(&generated, 0));
            let p = path.to_str().unwrap();
            let one = source("bid", &[("events_file", p)], declared.clone()).unwrap();
            assert_eq!(all(&one, drain(&one, 0)), want);
            let three =
                source("bid", &[("events_file", p), ("partitions", "3")], declared).unwrap();
            let rows: usize = (0..3)
                .map(|i| drain(&three, i).iter().map(|b| b.num_rows()).sum::<usize>())
                .sum();
            assert_eq!(rows, want.num_rows());
        }
        let e = match source("auction", &[("events_file", path.to_str().unwrap())], None) {
            Ok(_) => panic!("a bid file is not an auction stream"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("holds the 'bid' stream, not 'auction'"), "{e}");
        unload_events_files();
        let e = EventsFile::open(&path, Stream::Bid)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an Arrow IPC file"), "{e}");
    }

    /// Resident kilobytes of the mapping that starts at `address` (/proc/self/smaps).
    fn resident_kb(address: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        let start = format!("{address:x}-");
        lines
            .by_ref()
            .find(|l| l.starts_with(&start))
            .expect("the mapping is listed");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("an Rss line")
    }

    /// Batches whose arrays are all dropped leave the process's resident pages; batches still
    /// held (whole or a slice) read the same bytes after the pages around them were released.
    #[test]
    fn dropped_batches_leave_memory_and_held_ones_read_the_same() {
        use super::super::EventsFile;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bid.arrow");
        write_events_file(
            &path,
            Stream::Bid,
            40_000,
            config(1_436_918_400_000, 10_000),
            1000,
        )
        .unwrap();
        let size_kb = std::fs::metadata(&path).unwrap().len() / 1024;
        let released = EventsFile::open(&path, Stream::Bid).unwrap();
        released.release_every(256 << 10);
        let kept = EventsFile::open(&path, Stream::Bid).unwrap();
        let all: Vec<usize> = (0..Stream::Bid.schema().fields().len()).collect();
        let (d1, d2) = (released.decoder(&all), kept.decoder(&all));
        let n = released.batches();
        assert!(n > 20, "{n} batches");
        let first = released.batch(&d1, 0).unwrap();
        let slice = released.batch(&d1, n / 2).unwrap().slice(10, 20);
        for i in 0..n {
            let batch = released.batch(&d1, i).unwrap();
            assert_eq!(batch, kept.batch(&d2, i).unwrap(), "batch {i}");
        }
        // Every page of both mappings was read; the released file keeps about the two held
        // batches (and what waits to be released), the other all of them.
        let (low, high) = (
            resident_kb(released.mapped_at()),
            resident_kb(kept.mapped_at()),
        );
        assert!(high > size_kb * 9 / 10, "{high} of {size_kb} KB");
        assert!(low < size_kb / 3, "{low} of {size_kb} KB still resident");
        assert_eq!(first, kept.batch(&d2, 0).unwrap());
        assert_eq!(slice, kept.batch(&d2, n / 2).unwrap().slice(10, 20));
    }

    /// A source told that some columns go unread produces nulls there and the same values in
    /// every other column, generated or from the events file.
    #[test]
    fn columns_nobody_reads_come_as_nulls_and_the_rest_unchanged() {
        use datafusion::arrow::array::Array;
        let dir = tempfile::tempdir().unwrap();
        for stream in [Stream::Person, Stream::Auction, Stream::Bid] {
            let name = stream.name();
            let path = dir.path().join(format!("{name}.arrow"));
            write_events_file(&path, stream, 3000, config(1_436_918_400_000, 10_000), 97).unwrap();
            // As CREATE TABLE declares them: nullable.
            let declared: SchemaRef = std::sync::Arc::new(Schema::new(
                stream
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            ));
            let generated = source(
                name,
                &[("events", "3000"), ("batch_size", "97")],
                Some(declared.clone()),
            );
            let from_file = source(
                name,
                &[("events_file", path.to_str().unwrap())],
                Some(declared),
            );
            for full in [generated.unwrap(), from_file.unwrap()] {
                let want = all(&full, drain(&full, 0));
                let width = full.schema.fields().len();
                // Every other column, then all but the first, then the last alone.
                let cases: [Vec<usize>; 3] = [
                    (0..width).step_by(2).collect(),
                    (1..width).collect(),
                    vec![width - 1],
                ];
                for unread in cases {
                    let narrowed = full.without_columns(&unread).unwrap();
                    let mut reader = narrowed.create(&task(), None).unwrap();
                    let mut batches = Vec::new();
                    while let SourcePoll::Batch(b) = reader.poll_next().unwrap() {
                        batches.push(b);
                    }
                    let got = all(&full, batches);
                    assert_eq!(got.schema(), want.schema(), "{name} {unread:?}");
                    assert_eq!(got.num_rows(), want.num_rows(), "{name} {unread:?}");
                    for c in 0..width {
                        if unread.contains(&c) {
                            assert_eq!(got.column(c).null_count(), got.num_rows(), "{name} {c}");
                        } else {
                            assert_eq!(got.column(c), want.column(c), "{name} {unread:?} {c}");
                        }
                    }
                }
            }
        }
    }

    /// Batches are decoded without Arrow's checks and checked by `validate` instead: a
    /// corrupt file is an error naming it (never a panic, never a bad string read), and text
    /// that is valid but not ASCII takes Arrow's full check and reads back unchanged.
    #[test]
    fn a_corrupt_events_file_is_an_error_naming_it_and_valid_text_reads_back() {
        use super::super::EventsFile;
        use datafusion::arrow::array::{Array, AsArray};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bids.arrow");
        write_events_file(&path, Stream::Bid, 400, config(0, 10_000), 50).unwrap();
        let original = std::fs::read(&path).unwrap();
        let read_all = |bytes: &[u8]| -> std::result::Result<Vec<RecordBatch>, String> {
            std::fs::write(&path, bytes).unwrap();
            let file = EventsFile::open(&path, Stream::Bid).map_err(|e| e.to_string())?;
            let all: Vec<usize> = (0..Stream::Bid.schema().fields().len()).collect();
            let decoder = file.decoder(&all);
            (0..file.batches())
                .map(|i| file.batch(&decoder, i).map_err(|e| e.to_string()))
                .collect()
        };
        let channel = Stream::Bid.schema().index_of("channel").unwrap();
        let channels = |batches: &[RecordBatch]| -> Vec<String> {
            batches
                .iter()
                .flat_map(|b| {
                    let c = b.column(channel).as_string::<i32>();
                    (0..c.len())
                        .map(|i| c.value(i).to_string())
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let clean = channels(&read_all(&original).unwrap());
        let at = original
            .windows(6)
            .position(|w| w == b"Google")
            .expect("a bid on the Google channel");
        // A two-byte character in place of "Go": valid UTF-8, same length.
        let mut accented = original.clone();
        accented[at..at + 2].copy_from_slice("é".as_bytes());
        let read = channels(&read_all(&accented).unwrap());
        assert_eq!(read.len(), clean.len());
        let changed: Vec<(&String, &String)> =
            clean.iter().zip(&read).filter(|(a, b)| a != b).collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].1, &changed[0].0.replacen("Go", "é", 1));
        // Half a character, then a byte that never starts one.
        for bad in [&[0xC3u8][..], &[0xFF][..]] {
            let mut corrupt = original.clone();
            corrupt[at..at + bad.len()].copy_from_slice(bad);
            let e = read_all(&corrupt).expect_err("invalid UTF-8 refused");
            assert!(
                e.contains(path.to_str().unwrap()) && e.contains("is corrupt") && e.contains("utf"),
                "{e}"
            );
        }
    }

    /// `validate` refuses what Arrow's own checks refuse.
    #[test]
    fn validation_refuses_bad_offsets_nulls_and_lengths() {
        use datafusion::arrow::array::{make_array, ArrayData, ArrayRef, Int64Array};
        use datafusion::arrow::buffer::Buffer;
        use std::sync::Arc;
        let text = |offsets: &[i32], values: &[u8]| -> ArrayRef {
            let data = ArrayData::builder(DataType::Utf8)
                .len(offsets.len() - 1)
                .add_buffer(Buffer::from_slice_ref(offsets))
                .add_buffer(Buffer::from_slice_ref(values));
            // SAFETY: only the check under test reads these arrays' values.
            make_array(unsafe { data.build_unchecked() })
        };
        let schema = |nullable: bool| {
            Arc::new(Schema::new(vec![
                Field::new("s", DataType::Utf8, nullable),
                Field::new("n", DataType::Int64, nullable),
            ]))
        };
        let batch = |s: ArrayRef, n: ArrayRef, nullable: bool| {
            // SAFETY: as above; the lengths may differ on purpose.
            let rows = n.len();
            unsafe { RecordBatch::new_unchecked(schema(nullable), vec![s, n], rows) }
        };
        let check = |s, n: Vec<Option<i64>>, nullable| {
            super::super::events_file::validate(&batch(s, Arc::new(Int64Array::from(n)), nullable))
                .map_err(|e| e.to_string())
        };
        let ok = check(text(&[0, 2, 5], b"abcde"), vec![Some(1), Some(2)], false);
        assert_eq!(ok, Ok(()));
        let ok = check(
            text(&[0, 3, 4], "aéb".as_bytes()),
            vec![Some(1), Some(2)],
            false,
        );
        assert_eq!(ok, Ok(()));
        for (what, s) in [
            ("falling offsets", text(&[0, 4, 2], b"abcde")),
            ("an offset past the values", text(&[0, 2, 9], b"abcde")),
            ("a negative offset", text(&[-1, 2, 3], b"abcde")),
            (
                "a string ending mid-character",
                text(&[0, 2, 3], "aéb".as_bytes()),
            ),
        ] {
            let e = check(s, vec![Some(1), Some(2)], false).expect_err(what);
            assert!(e.contains("ffset") || e.contains("utf-8"), "{what}: {e}");
        }
        let e = check(text(&[0, 1, 2], b"ab"), vec![Some(1), None], false)
            .expect_err("NULL in a NOT NULL column");
        assert!(e.contains("'n'") && e.contains("NULL"), "{e}");
        assert_eq!(
            check(text(&[0, 1, 2], b"ab"), vec![Some(1), None], true),
            Ok(())
        );
        let e = check(
            text(&[0, 1, 2], b"ab"),
            vec![Some(1), Some(2), Some(3)],
            true,
        )
        .expect_err("a short column");
        assert!(e.contains("'s' has 2 rows, the batch 3"), "{e}");
    }

    #[test]
    fn a_wrong_events_file_or_option_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let bids = dir.path().join("bids.arrow");
        write_events_file(&bids, Stream::Bid, 100, config(0, 10_000), 10).unwrap();
        let bids = bids.to_str().unwrap();
        let err = |r: Result<NexmarkSourceFactory>| r.expect_err("refused").to_string();
        let e = err(source("person", &[("events_file", bids)], None));
        assert!(e.contains(bids) && e.contains("'bid' stream"), "{e}");
        let e = err(source(
            "bid",
            &[("events_file", bids), ("events", "5")],
            None,
        ));
        assert!(
            e.contains("'events'") && e.contains("events_file fixes"),
            "{e}"
        );
        let text = dir.path().join("text.arrow");
        std::fs::write(&text, "auction,price\n1,2\n").unwrap();
        let e = err(source(
            "bid",
            &[("events_file", text.to_str().unwrap())],
            None,
        ));
        assert!(e.contains("not an Arrow IPC file"), "{e}");
        let e = err(source(
            "bid",
            &[("events_file", "/nonexistent/bids.arrow")],
            None,
        ));
        assert!(e.contains("/nonexistent/bids.arrow"), "{e}");
        // A batch too large for a column's 32-bit offsets; the largest one is taken.
        let e = err(source("bid", &[("batch_size", "1048577")], None));
        assert!(
            e.contains("batch_size") && e.contains("at most 1048576"),
            "{e}"
        );
        assert!(source("bid", &[("batch_size", "1048576")], None).is_ok());
    }
}
