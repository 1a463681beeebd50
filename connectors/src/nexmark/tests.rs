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
