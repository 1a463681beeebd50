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
fn table(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<Arc<MemTable>> {
    let schema = Arc::new(Schema::new(fields));
    let rows = columns.first().map_or(0, |c| c.len());
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
    let parts: Vec<RecordBatch> = (0..rows)
        .step_by(8192)
        .map(|o| batch.slice(o, 8192.min(rows - o)))
        .collect();
    Ok(Arc::new(MemTable::try_new(schema, vec![parts])?))
}

/// A DataFusion context with tables `bid (auction, bidder, price, date_time, extra)`,
/// `person (id, name, date_time)` and `auction (seller, date_time)` over the first `events`
/// events.
pub fn context(events: u64) -> Result<SessionContext> {
    let ctx = SessionContext::new();
    let bids: Vec<_> = generate(EventType::Bid, events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .collect();
    let bid = table(
        vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("bidder", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
            Field::new("date_time", ts(), false),
            Field::new("extra", DataType::Utf8, false),
        ],
        vec![
            Arc::new(Int64Array::from_iter_values(
                bids.iter().map(|b| b.auction as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                bids.iter().map(|b| b.bidder as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                bids.iter().map(|b| b.price as i64),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                bids.iter().map(|b| nanos(b.date_time)),
            )),
            Arc::new(StringArray::from_iter_values(bids.iter().map(|b| &b.extra))),
        ],
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
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("date_time", ts(), false),
        ],
        vec![
            Arc::new(Int64Array::from_iter_values(
                people.iter().map(|p| p.id as i64),
            )),
            Arc::new(StringArray::from_iter_values(
                people.iter().map(|p| &p.name),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                people.iter().map(|p| nanos(p.date_time)),
            )),
        ],
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
            Field::new("seller", DataType::Int64, false),
            Field::new("date_time", ts(), false),
        ],
        vec![
            Arc::new(Int64Array::from_iter_values(
                auctions.iter().map(|a| a.seller as i64),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                auctions.iter().map(|a| nanos(a.date_time)),
            )),
        ],
    )?;
    ctx.register_table("bid", bid)?;
    ctx.register_table("person", person)?;
    ctx.register_table("auction", auction)?;
    Ok(ctx)
}
