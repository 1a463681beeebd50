//! Nexmark events for the reference side of tests and benchmarks: generated with the `nexmark`
//! crate (the generator weir's source wraps, with the same configuration) and registered as
//! in-memory DataFusion tables, independent of weir's source and planner.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::error::Result;
use datafusion::prelude::SessionContext;
use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};
use nexmark::EventGenerator;

/// The events of one stream with global index below `events`, as weir's source reads them
/// (default base time and 10,000 events/s of event time).
pub fn generate(kind: EventType, events: u64) -> Vec<Event> {
    let config = NexmarkConfig {
        base_time: 1_436_918_400_000,
        first_rate: 10_000,
        next_rate: 10_000,
        ..NexmarkConfig::default()
    };
    let mut generator = EventGenerator::new(config).with_type_filter(kind);
    let mut out = Vec::new();
    while generator.global_offset() < events {
        match generator.next() {
            Some(e) => out.push(e),
            None => break,
        }
    }
    out
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

fn nanos(ms: u64) -> i64 {
    ms as i64 * 1_000_000
}

/// A table in batches of 8,192 rows, as weir's source makes them.
fn table(
    fields: Vec<Field>,
    rows: usize,
    columns: impl Fn(std::ops::Range<usize>) -> Vec<ArrayRef>,
) -> Result<Arc<MemTable>> {
    // Built batch by batch: one array of every row's strings would pass 2 GiB of offsets
    // (a Utf8 column's limit) at tens of millions of events.
    let schema = Arc::new(Schema::new(fields));
    let parts = (0..rows)
        .step_by(8192)
        .map(|o| RecordBatch::try_new(Arc::clone(&schema), columns(o..rows.min(o + 8192))))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Arc::new(MemTable::try_new(schema, vec![parts])?))
}

/// A DataFusion context with tables `bid`, `person` and `auction` over the first `events`
/// events, with every column of the Nexmark schema (the names of weir's source).
pub fn context(events: u64) -> Result<SessionContext> {
    let ctx = SessionContext::new();
    let int = |n: &str| Field::new(n, DataType::Int64, false);
    let text = |n: &str| Field::new(n, DataType::Utf8, false);
    let time = |n: &str| Field::new(n, ts(), false);
    let ints = |v: Vec<i64>| -> ArrayRef { Arc::new(Int64Array::from_iter_values(v)) };
    let texts = |v: Vec<&String>| -> ArrayRef { Arc::new(StringArray::from_iter_values(v)) };
    let times = |v: Vec<u64>| -> ArrayRef {
        Arc::new(TimestampNanosecondArray::from_iter_values(
            v.into_iter().map(nanos),
        ))
    };

    let bids: Vec<_> = generate(EventType::Bid, events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .collect();
    let bid = table(
        vec![
            int("auction"),
            int("bidder"),
            int("price"),
            text("channel"),
            text("url"),
            time("date_time"),
            text("extra"),
        ],
        bids.len(),
        |r| {
            let bids = &bids[r];
            vec![
                ints(bids.iter().map(|b| b.auction as i64).collect()),
                ints(bids.iter().map(|b| b.bidder as i64).collect()),
                ints(bids.iter().map(|b| b.price as i64).collect()),
                texts(bids.iter().map(|b| &b.channel).collect()),
                texts(bids.iter().map(|b| &b.url).collect()),
                times(bids.iter().map(|b| b.date_time).collect()),
                texts(bids.iter().map(|b| &b.extra).collect()),
            ]
        },
    )?;
    drop(bids);
    let people: Vec<_> = generate(EventType::Person, events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Person(p) => Some(p),
            _ => None,
        })
        .collect();
    let person = table(
        vec![
            int("id"),
            text("name"),
            text("email_address"),
            text("credit_card"),
            text("city"),
            text("state"),
            time("date_time"),
            text("extra"),
        ],
        people.len(),
        |r| {
            let people = &people[r];
            vec![
                ints(people.iter().map(|p| p.id as i64).collect()),
                texts(people.iter().map(|p| &p.name).collect()),
                texts(people.iter().map(|p| &p.email_address).collect()),
                texts(people.iter().map(|p| &p.credit_card).collect()),
                texts(people.iter().map(|p| &p.city).collect()),
                texts(people.iter().map(|p| &p.state).collect()),
                times(people.iter().map(|p| p.date_time).collect()),
                texts(people.iter().map(|p| &p.extra).collect()),
            ]
        },
    )?;
    let auctions: Vec<_> = generate(EventType::Auction, events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Auction(a) => Some(a),
            _ => None,
        })
        .collect();
    let auction = table(
        vec![
            int("id"),
            text("item_name"),
            text("description"),
            int("initial_bid"),
            int("reserve"),
            time("date_time"),
            time("expires"),
            int("seller"),
            int("category"),
            text("extra"),
        ],
        auctions.len(),
        |r| {
            let auctions = &auctions[r];
            vec![
                ints(auctions.iter().map(|a| a.id as i64).collect()),
                texts(auctions.iter().map(|a| &a.item_name).collect()),
                texts(auctions.iter().map(|a| &a.description).collect()),
                ints(auctions.iter().map(|a| a.initial_bid as i64).collect()),
                ints(auctions.iter().map(|a| a.reserve as i64).collect()),
                times(auctions.iter().map(|a| a.date_time).collect()),
                times(auctions.iter().map(|a| a.expires).collect()),
                ints(auctions.iter().map(|a| a.seller as i64).collect()),
                ints(auctions.iter().map(|a| a.category as i64).collect()),
                texts(auctions.iter().map(|a| &a.extra).collect()),
            ]
        },
    )?;
    ctx.register_table("bid", bid)?;
    ctx.register_table("person", person)?;
    ctx.register_table("auction", auction)?;
    Ok(ctx)
}

/// Writes the first `events` events of the three streams to `dir/{person,auction,bid}.arrow`
/// (weir's events files, read by the source's `events_file` option and by [`context_of_files`]).
pub fn write_files(dir: &std::path::Path, events: u64) -> weir_connectors::error::Result<()> {
    use weir_connectors::nexmark::{config, write_events_file, Stream};
    for stream in [Stream::Person, Stream::Auction, Stream::Bid] {
        let path = dir.join(format!("{}.arrow", stream.name()));
        write_events_file(
            &path,
            stream,
            events,
            config(1_436_918_400_000, 10_000),
            8192,
        )?;
    }
    Ok(())
}

/// A DataFusion context with tables `person`, `auction` and `bid` read into memory from the
/// events files [`write_files`] wrote, their batches dealt round-robin over `partitions`
/// partitions (as weir's source partitions read them).
pub fn context_of_files(dir: &std::path::Path, partitions: usize) -> Result<SessionContext> {
    use datafusion::arrow::ipc::reader::FileReader;
    let ctx = SessionContext::new();
    for name in ["person", "auction", "bid"] {
        let file = std::fs::File::open(dir.join(format!("{name}.arrow")))?;
        let reader = FileReader::try_new_buffered(file, None)?;
        let schema = Arc::new(Schema::new(reader.schema().fields().clone()));
        let mut parts = vec![Vec::new(); partitions.max(1)];
        for (i, batch) in reader.enumerate() {
            let batch = RecordBatch::try_new(Arc::clone(&schema), batch?.columns().to_vec())?;
            let n = parts.len();
            parts[i % n].push(batch);
        }
        ctx.register_table(name, Arc::new(MemTable::try_new(schema, parts)?))?;
    }
    Ok(ctx)
}
