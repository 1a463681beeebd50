//! Nexmark events written straight into Arrow columns: the events of the `nexmark` crate (the
//! same seeds, the same random draws in the same order, so the same values), without an event
//! struct, a `String` per field or a `format!` per row.
//!
//! Each event draws its fields from a generator seeded with its id, in a fixed order (a bid:
//! auction, bidder, price, channel and url, extra). A field the table does not read is still
//! drawn when a field it reads comes after it (the draws must stay in step), but not written;
//! the draws after the last field read are not made at all. A query over `auction` and
//! `date_time` of bids (q5) makes one or two draws per bid instead of about ninety.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::ArrayRef;
use nexmark::config::NexmarkConfig;
use rand::seq::SliceRandom;
use rand::Rng;

use super::columns::{Recyclers, TextColumn};
use super::rng::{EventRng, Lanes};
use super::Stream;

/// Fraction of people / auctions that are hot sellers, bidders, auctions: one in these.
const HOT_SELLER_RATIO: usize = 100;
const HOT_AUCTION_RATIO: usize = 100;
const HOT_BIDDER_RATIO: usize = 100;
/// Channels besides the hot ones.
const CHANNELS: usize = 10_000;

/// The `nexmark` crate's configuration and what it derives from it.
#[derive(Debug, Clone)]
pub struct EventConfig {
    cfg: NexmarkConfig,
    proportion_denominator: usize,
    /// Dividing by `proportion_denominator` and by each stream's proportion.
    by_denominator: Divisor,
    by_proportion: [Divisor; 3],
    /// Microseconds between events (one rate: weir sets `first_rate == next_rate`).
    inter_event_delay: f32,
}

impl EventConfig {
    /// `None` when the rate changes over time (`first_rate != next_rate`), which this
    /// generator does not reproduce.
    pub fn new(cfg: NexmarkConfig) -> Option<Self> {
        if cfg.first_rate != cfg.next_rate || cfg.num_event_generators == 0 {
            return None;
        }
        let proportion_denominator =
            cfg.person_proportion + cfg.auction_proportion + cfg.bid_proportion;
        let inter_event_delay =
            cfg.us_per_unit as f32 / cfg.first_rate as f32 * cfg.num_event_generators as f32;
        Some(Self {
            by_denominator: Divisor::new(proportion_denominator),
            by_proportion: [
                cfg.person_proportion,
                cfg.auction_proportion,
                cfg.bid_proportion,
            ]
            .map(Divisor::new),
            cfg,
            proportion_denominator,
            inter_event_delay,
        })
    }

    /// Event time (ms) of the `event_number`-th event.
    fn timestamp(&self, event_number: usize) -> u64 {
        self.cfg.base_time + round((to_f32(event_number) * self.inter_event_delay) / 1000.0)
    }

    /// The event number of the `offset`-th event of `stream` (the crate's `global_offset`).
    pub fn event_number(&self, stream: Stream, offset: u64) -> usize {
        let c = &self.cfg;
        let offset = offset as usize;
        let (before, stream) = match stream {
            Stream::Person => (0, 0),
            Stream::Auction => (c.person_proportion, 1),
            Stream::Bid => (c.person_proportion + c.auction_proportion, 2),
        };
        let (epoch, within) = self.by_proportion[stream].div_rem(offset);
        let global = epoch * self.proportion_denominator + before + within;
        c.first_event_number + global
    }

    fn person_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let (epoch, offset) = self.by_denominator.div_rem(event_id);
        let offset = offset.min(c.person_proportion - 1);
        epoch * c.person_proportion + offset
    }

    fn person_next_id(&self, event_id: usize, rng: &mut EventRng) -> usize {
        let people = self.person_last_id(event_id) + 1;
        let active = people.min(self.cfg.active_people);
        people - active + rng.below(active + self.cfg.person_id_lead)
    }

    fn auction_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let (mut epoch, mut offset) = self.by_denominator.div_rem(event_id);
        if offset < c.person_proportion {
            epoch = epoch.saturating_sub(1);
            offset = c.auction_proportion - 1;
        } else if c.person_proportion + c.auction_proportion <= offset {
            offset = c.auction_proportion - 1;
        } else {
            offset -= c.person_proportion;
        }
        epoch * c.auction_proportion + offset
    }

    fn auction_next_id(&self, event_id: usize, rng: &mut EventRng) -> usize {
        let max = self.auction_last_id(event_id);
        let min = max.saturating_sub(self.cfg.in_flight_auctions);
        min + rng.below(max - min + 1 + self.cfg.auction_id_lead)
    }
}

/// Division by a number fixed for the run (the stream proportions): by a multiplication for
/// dividends below 2^32 (Lemire, Kaser and Kurz, "Faster remainder by direct computation",
/// exact for every 32-bit dividend and divisor), a division above. The generator divides
/// event numbers three or four times per event; a hardware division takes 25-90 cycles.
#[derive(Debug, Clone, Copy)]
struct Divisor {
    d: usize,
    /// `ceil(2^64 / d)`; 0 when the division is made as it is (`d` < 2 or above `u32::MAX`).
    c: u64,
}

impl Divisor {
    fn new(d: usize) -> Self {
        let c = match u32::try_from(d) {
            Ok(small) if small >= 2 => u64::MAX / u64::from(small) + 1,
            _ => 0,
        };
        Self { d, c }
    }

    /// `(n / d, n % d)`.
    #[inline]
    fn div_rem(self, n: usize) -> (usize, usize) {
        match u32::try_from(n) {
            Ok(small) if self.c != 0 => {
                let q = ((u128::from(self.c) * u128::from(small)) >> 64) as usize;
                (q, n - q * self.d)
            }
            _ => (n / self.d, n % self.d),
        }
    }
}

/// Letters `a..=z`, `n` draws, as the crate's `gen_exact_string`; appended to `out` if given.
fn letters(rng: &mut EventRng, n: usize, out: Option<&mut Vec<u8>>) {
    match out {
        Some(out) => out.extend((0..n).map(|_| rng.letter())),
        None => (0..n).for_each(|_| {
            rng.letter();
        }),
    }
}

/// Room for an event's strings, and its `extra` waiting to be drawn with other events'.
#[derive(Default)]
struct Scratch {
    bytes: Vec<u8>,
    extras: Lanes,
}

impl Scratch {
    /// The crate's `gen_next_extra` (letters making the event about `average` bytes), the
    /// event's last draws: queued, drawn with the next events' (see `ArrowGenerator::batch`).
    fn extra(&mut self, rng: &EventRng, current: usize, average: usize) {
        let mut rng = rng.clone();
        let n = extra_len(&mut rng, current, average);
        self.extras.push(rng, n);
    }
}

/// How many letters the crate's `gen_next_extra` draws (drawn itself).
fn extra_len(rng: &mut EventRng, current: usize, average: usize) -> usize {
    if current > average {
        return 0;
    }
    let average = average - current;
    let delta = (average + 2) / 5;
    average - delta + if delta == 0 { 0 } else { rng.below(2 * delta) }
}

/// The crate's `gen_price`.
fn price(rng: &mut EventRng) -> usize {
    round(10.0_f32.powf(rng.unit_f32() * 6.0) * 100.0) as usize
}

/// `x.round() as u64` for the generator's non-negative values (half away from zero, as
/// `f32::round`), without the libm call `round` is on x86-64 without SSE4.1: below 2^23 the
/// truncation and the fraction `x - t` are exact, above it `x` is a whole number.
/// Conversions go through `i64` where the value fits it: one instruction each, where an
/// unsigned conversion takes a sign test and a fix-up on x86-64.
#[inline(always)]
fn round(x: f32) -> u64 {
    if x >= 8_388_608.0 {
        return if x < 9.2e18 {
            x as i64 as u64
        } else {
            x as u64
        };
    }
    // NaN and values below 1 truncate to 0, as `as u64` truncates them.
    let t = (x as i64).max(0);
    t as u64 + u64::from(x - t as f32 >= 0.5)
}

/// `n as f32`, through `i64` (see [`round`]).
#[inline(always)]
fn to_f32(n: usize) -> f32 {
    match i64::try_from(n) {
        Ok(n) => n as f32,
        Err(_) => n as f32,
    }
}

/// The crate's `gen_string_with_delimiter`.
fn delimited(rng: &mut EventRng, max: usize, delimiter: char, out: &mut String) {
    let len = rng.gen_range(3..max);
    for _ in 0..len {
        if rng.gen_range(0..13) == 0 {
            out.push(delimiter);
        } else {
            out.push(rng.letter() as char);
        }
    }
}

/// The crate's `get_base_url`.
fn base_url(seed: u64) -> String {
    let mut rng = EventRng::seed_from_u64(seed);
    let mut url = String::from("https://www.nexmark.com/");
    for i in 0..3 {
        if i > 0 {
            url.push('/');
        }
        delimited(&mut rng, 5, '_', &mut url);
    }
    url.push_str("/item.htm?query=1");
    url
}

/// The crate's channel / url table (`CHANNEL_URL_MAP`), built once.
fn channel_urls() -> &'static [(String, String)] {
    static MAP: OnceLock<Vec<(String, String)>> = OnceLock::new();
    MAP.get_or_init(|| {
        (0..CHANNELS)
            .map(|i| {
                let mut url = base_url(i as u64);
                let mut rng = EventRng::seed_from_u64(i as u64);
                if rng.gen_range(0..10) > 0 {
                    url.push_str("&channel_id=");
                    url.push_str(&((i as i32).reverse_bits() as i64).abs().to_string());
                }
                (format!("channel-{i}"), url)
            })
            .collect()
    })
}

/// One stream's columns being written; a column not wanted stays empty. Strings are checked
/// once per column ([`Recyclers::string_array`]), not once per value.
struct Columns {
    ints: Vec<Vec<i64>>,
    strings: Vec<TextColumn>,
    times: Vec<Vec<i64>>,
    /// The stream's `extra`, drawn straight into its column.
    extra: TextColumn,
}

impl Columns {
    /// Room for `n` events with `extra` letters each on average.
    fn new(
        r: &Recyclers,
        n: usize,
        ints: usize,
        strings: usize,
        times: usize,
        extra: usize,
    ) -> Self {
        Self {
            ints: (0..ints).map(|_| r.ints(n)).collect(),
            strings: (0..strings).map(|_| r.text(n, n * 16)).collect(),
            times: (0..times).map(|_| r.ints(n)).collect(),
            extra: r.text(n, n * extra),
        }
    }

    /// The columns' arrays: integers, strings, times, `extra`.
    fn finish(self, r: &Recyclers) -> (Vec<ArrayRef>, Vec<ArrayRef>, Vec<ArrayRef>, ArrayRef) {
        let ints = self.ints.into_iter().map(|v| r.int_array(v)).collect();
        let strings = self
            .strings
            .into_iter()
            .map(|c| r.string_array(c))
            .collect();
        let times = self.times.into_iter().map(|v| r.time_array(v)).collect();
        (ints, strings, times, r.string_array(self.extra))
    }
}

fn ns(ms: u64) -> i64 {
    (ms as i64).saturating_mul(1_000_000)
}

/// Writes one stream's events into Arrow columns.
#[derive(Debug, Clone)]
pub struct ArrowGenerator {
    config: Arc<EventConfig>,
    stream: Stream,
    /// By column of the stream's full schema: whether the table reads it.
    want: Vec<bool>,
    /// The last column read, in the order the fields are drawn.
    last_drawn: usize,
    /// Where the columns' memory comes back to when a batch is dropped.
    recyclers: Recyclers,
}

/// Bid columns in draw order (schema positions): auction, bidder, price, channel/url, extra.
const BID_DRAWS: [usize; 5] = [0, 1, 2, 3, 6];
/// Auction columns in draw order: item_name, description, initial_bid, reserve, expires,
/// seller, category, extra.
const AUCTION_DRAWS: [usize; 8] = [1, 2, 3, 4, 6, 7, 8, 9];
/// Person columns in draw order: name, email, credit card, city, state, extra.
const PERSON_DRAWS: [usize; 6] = [1, 2, 3, 4, 5, 7];

impl ArrowGenerator {
    /// A generator of `stream` for a table reading the stream's columns `projection`.
    pub fn new(config: Arc<EventConfig>, stream: Stream, projection: &[usize]) -> Self {
        let width = stream.schema().fields().len();
        let mut want = vec![false; width];
        for &i in projection {
            if i < width {
                want[i] = true;
            }
        }
        // The url is drawn with the channel.
        if stream == Stream::Bid && want[4] {
            want[3] = true;
        }
        let draws: &[usize] = match stream {
            Stream::Bid => &BID_DRAWS,
            Stream::Auction => &AUCTION_DRAWS,
            Stream::Person => &PERSON_DRAWS,
        };
        let last_drawn = draws.iter().rposition(|&c| want[c]).map_or(0, |p| p + 1);
        Self {
            config,
            stream,
            want,
            last_drawn,
            recyclers: Recyclers::default(),
        }
    }

    /// Writes the events at stream offsets `*offset`, `*offset + step`, ... up to `n` of them,
    /// stopping before an event whose number (over all streams) reaches `limit`; advances
    /// `*offset`. Returns the stream's columns (full width; unread columns empty) and how many
    /// events were written.
    pub fn batch(
        &self,
        offset: &mut u64,
        step: u64,
        n: usize,
        limit: Option<u64>,
    ) -> (Vec<ArrayRef>, usize) {
        let mut scratch = Scratch::default();
        // The events' numbers (over all streams), each written by `write`; their `extra`
        // strings go to the column `extra` as lanes of them are drawn.
        let mut fill = |c: &mut Columns, write: fn(&Self, usize, &mut Columns, &mut Scratch)| {
            let mut taken = 0;
            while taken < n {
                let number = self.config.event_number(self.stream, *offset);
                if limit.is_some_and(|l| number as u64 >= l) {
                    break;
                }
                write(self, number, c, &mut scratch);
                if scratch.extras.is_full() {
                    scratch.extras.draw(&mut c.extra);
                }
                *offset += step;
                taken += 1;
            }
            scratch.extras.draw(&mut c.extra);
            taken
        };
        match self.stream {
            Stream::Bid => {
                let mut c = Columns::new(&self.recyclers, n, 3, 2, 1, self.room(6, 72));
                let taken = fill(&mut c, Self::bid);
                let (i, s, t, e) = c.finish(&self.recyclers);
                // auction, bidder, price, channel, url, date_time, extra
                let columns = owned(&[&i[0], &i[1], &i[2], &s[0], &s[1], &t[0], &e]);
                (columns, taken)
            }
            Stream::Auction => {
                let mut c = Columns::new(&self.recyclers, n, 5, 2, 2, self.room(9, 340));
                let taken = fill(&mut c, Self::auction);
                let (i, s, t, e) = c.finish(&self.recyclers);
                // id, item_name, description, initial_bid, reserve, date_time, expires,
                // seller, category, extra
                let columns = owned(&[
                    &i[0], &s[0], &s[1], &i[1], &i[2], &t[0], &t[1], &i[3], &i[4], &e,
                ]);
                (columns, taken)
            }
            Stream::Person => {
                let mut c = Columns::new(&self.recyclers, n, 1, 5, 1, self.room(7, 120));
                let taken = fill(&mut c, Self::person);
                let (i, s, t, e) = c.finish(&self.recyclers);
                // id, name, email_address, credit_card, city, state, date_time, extra
                let columns = owned(&[&i[0], &s[0], &s[1], &s[2], &s[3], &s[4], &t[0], &e]);
                (columns, taken)
            }
        }
    }

    /// Bytes to set aside per event for column `column` of about `average` bytes: none when the
    /// table does not read it.
    fn room(&self, column: usize, average: usize) -> usize {
        if self.want[column] {
            average
        } else {
            0
        }
    }

    /// Whether the `k`-th draw of the event (in draw order) is made at all.
    fn draws(&self, k: usize) -> bool {
        k < self.last_drawn
    }

    fn bid(&self, number: usize, c: &mut Columns, scratch: &mut Scratch) {
        let cfg = &self.config;
        let nex = &cfg.cfg;
        let event_id = nex.first_event_id + number;
        let w = &self.want;
        c.times[0].push(ns(cfg.timestamp(number)));
        if !self.draws(0) {
            return;
        }
        let rng = &mut EventRng::seed_from_u64(event_id as u64);
        let auction = if 0 < rng.below(nex.hot_auction_ratio) {
            (cfg.auction_last_id(event_id) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        } else {
            cfg.auction_next_id(event_id, rng)
        };
        if w[0] {
            c.ints[0].push((auction + nex.first_auction_id) as i64);
        }
        if !self.draws(1) {
            return;
        }
        let bidder = if 0 < rng.below(nex.hot_bidder_ratio) {
            (cfg.person_last_id(event_id) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        } else {
            cfg.person_next_id(event_id, rng)
        };
        if w[1] {
            c.ints[1].push((bidder + nex.first_person_id) as i64);
        }
        if !self.draws(2) {
            return;
        }
        let p = price(rng);
        if w[2] {
            c.ints[2].push(p as i64);
        }
        if !self.draws(3) {
            return;
        }
        let (channel, url) = if rng.below(nex.hot_channel_ratio) > 0 {
            let index = rng.below(nex.hot_channels.len());
            (&nex.hot_channels[index], &nex.hot_urls[index])
        } else {
            // The crate's `choose` over the table, its draw inlined.
            let table = channel_urls();
            let (channel, url) = table
                .get(rng.index(table.len()))
                .expect("the channel table is not empty");
            (channel, url)
        };
        if w[3] {
            c.strings[0].push(channel);
        }
        if w[4] {
            c.strings[1].push(url);
        }
        if !self.draws(4) {
            return;
        }
        scratch.extra(rng, 32, nex.avg_bid_byte_size);
    }

    fn auction(&self, number: usize, c: &mut Columns, scratch: &mut Scratch) {
        let cfg = &self.config;
        let nex = &cfg.cfg;
        let event_id = nex.first_event_id + number;
        let w = &self.want;
        let time = cfg.timestamp(number);
        c.ints[0].push((cfg.auction_last_id(event_id) + nex.first_auction_id) as i64);
        c.times[0].push(ns(time));
        if !self.draws(0) {
            return;
        }
        let rng = &mut EventRng::seed_from_u64(event_id as u64);
        // item_name (20 letters), description (100).
        for (k, len, col) in [(0, 20, 1), (1, 100, 2)] {
            if k > 0 && !self.draws(k) {
                return;
            }
            if w[col] {
                scratch.bytes.clear();
                letters(rng, len, Some(&mut scratch.bytes));
                c.strings[k].push(&scratch.bytes);
            } else {
                letters(rng, len, None);
            }
        }
        if !self.draws(2) {
            return;
        }
        let initial = price(rng);
        if w[3] {
            c.ints[1].push(initial as i64);
        }
        if !self.draws(3) {
            return;
        }
        let reserve = initial + price(rng);
        if w[4] {
            c.ints[2].push(reserve as i64);
        }
        if !self.draws(4) {
            return;
        }
        let events_for_auctions =
            (nex.in_flight_auctions * cfg.proportion_denominator) / nex.auction_proportion;
        let horizon = cfg.timestamp(number + events_for_auctions) - time;
        let expires = time + 1 + rng.gen_range(0..(horizon * 2).max(1));
        if w[6] {
            c.times[1].push(ns(expires));
        }
        if !self.draws(5) {
            return;
        }
        let seller = if rng.below(nex.hot_seller_ratio) > 0 {
            (cfg.person_last_id(event_id) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            cfg.person_next_id(event_id, rng)
        };
        if w[7] {
            c.ints[3].push((seller + nex.first_person_id) as i64);
        }
        if !self.draws(6) {
            return;
        }
        let category = nex.first_category_id + rng.below(nex.num_categories);
        if w[8] {
            c.ints[4].push(category as i64);
        }
        if !self.draws(7) {
            return;
        }
        scratch.extra(rng, 8 + 20 + 100 + 40, nex.avg_auction_byte_size);
    }

    fn person(&self, number: usize, c: &mut Columns, scratch: &mut Scratch) {
        let cfg = &self.config;
        let nex = &cfg.cfg;
        let event_id = nex.first_event_id + number;
        let w = &self.want;
        c.ints[0].push((cfg.person_last_id(event_id) + nex.first_person_id) as i64);
        c.times[0].push(ns(cfg.timestamp(number)));
        if !self.draws(0) {
            return;
        }
        let rng = &mut EventRng::seed_from_u64(event_id as u64);
        let first = nex.first_names.choose(rng).expect("first names");
        let last = nex.last_names.choose(rng).expect("last names");
        let mut size = 8 + first.len() + 1 + last.len();
        if w[1] {
            let name = &mut scratch.bytes;
            name.clear();
            name.extend_from_slice(first.as_bytes());
            name.push(b' ');
            name.extend_from_slice(last.as_bytes());
            c.strings[0].push(name);
        }
        if !self.draws(1) {
            return;
        }
        // 7 letters @ 5 letters .com
        let email = &mut scratch.bytes;
        email.clear();
        letters(rng, 7, Some(email));
        email.push(b'@');
        letters(rng, 5, Some(email));
        email.extend_from_slice(b".com");
        size += email.len();
        if w[2] {
            c.strings[1].push(email);
        }
        if !self.draws(2) {
            return;
        }
        let digits: [i32; 4] = std::array::from_fn(|_| rng.gen_range(0..10000));
        size += 19;
        if w[3] {
            let [a, b, d, e] = digits;
            c.strings[2].push(format!("{a:04} {b:04} {d:04} {e:04}"));
        }
        if !self.draws(3) {
            return;
        }
        let city = nex.us_cities.choose(rng).expect("cities");
        size += city.len();
        if w[4] {
            c.strings[3].push(city);
        }
        if !self.draws(4) {
            return;
        }
        let state = nex.us_states.choose(rng).expect("states");
        size += state.len();
        if w[5] {
            c.strings[4].push(state);
        }
        if !self.draws(5) {
            return;
        }
        scratch.extra(rng, size, nex.avg_person_byte_size);
    }
}

fn owned(columns: &[&ArrayRef]) -> Vec<ArrayRef> {
    columns.iter().map(|c| Arc::clone(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn round_is_f32_round() {
        let mut values = vec![
            0.0f32,
            0.5,
            1.5,
            2.5,
            0.49999997,
            8_388_607.5,
            8_388_608.0,
            1e20,
            -0.7,
            -1.5,
            -1e20,
            9.2e18,
            9.3e18,
            1.8e19,
            1e30,
        ];
        values.extend([f32::NAN, f32::INFINITY, f32::MAX, f32::MIN_POSITIVE]);
        let mut rng = EventRng::seed_from_u64(7);
        for _ in 0..1_000_000 {
            let x: f32 = rng.gen::<f32>();
            values.extend([x, x * 100.0, 10f32.powf(x * 6.0) * 100.0, x * 1e7]);
        }
        for bits in (0..=0x4b00_0000u32).step_by(997) {
            values.push(f32::from_bits(bits));
        }
        // Every sign and exponent: negatives, 2^23 and above, 2^52 and above, NaNs.
        values.extend((0..=u32::MAX).step_by(4099).map(f32::from_bits));
        values.extend([4_503_599_627_370_496.0, 9_007_199_254_740_992.0]);
        for x in values {
            assert_eq!(round(x), x.round() as u64, "{x}");
        }
        let mut counts = vec![0usize, 1, (1 << 24) + 1, (1 << 53) + 3, usize::MAX];
        counts.extend((-3..=3).map(|d| (i64::MAX as usize).wrapping_add_signed(d)));
        counts.extend((0..100_000).map(|_| rng.next_u64() as usize >> (rng.next_u32() % 64)));
        for n in counts {
            assert_eq!(to_f32(n).to_bits(), (n as f32).to_bits(), "{n}");
        }
    }

    #[test]
    fn divisors_divide_as_division_does() {
        let mut rng = EventRng::seed_from_u64(3);
        let divisors = [
            1usize,
            2,
            3,
            7,
            46,
            50,
            64,
            1000,
            65_537,
            u32::MAX as usize,
            1 << 33,
        ];
        for d in divisors {
            let by = Divisor::new(d);
            let edges = [
                0,
                1,
                d - 1,
                d,
                d + 1,
                u32::MAX as usize,
                1 << 32,
                usize::MAX,
            ];
            let random = (0..100_000).map(|_| rng.gen_range(0..=u32::MAX as usize));
            for n in edges.into_iter().chain(random) {
                assert_eq!(by.div_rem(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }
}
