//! The `nexmark` crate's random generator, with its state in reach: rand 0.8's `SmallRng`
//! (xoshiro256++, seeded by rand_core 0.6's PCG32 fill) drawn the same way, so every `Rng` method gives the
//! crate's values, plus the letters of several events drawn side by side ([`Lanes`]).
//!
//! Most of the generator's time is letters: a bid's `extra` is about 68 of them, one
//! xoshiro step each, and a step depends on the one before. The events' generators are
//! independent, so the letters of [`LANES`] events are drawn in lock step, in AVX-512 or AVX2
//! vector registers when the processor has them.

use rand::RngCore;

use super::columns::TextColumn;

/// Events whose letters are drawn side by side.
pub(super) const LANES: usize = 8;

/// `gen_range(b'a'..=b'z')`'s range and rejection zone, as rand 0.8 computes them for 8-bit
/// ranges (`u32` draws): a draw is kept when the low half of its product with the range is
/// at most the zone; the letter is the high half.
const LETTERS: u32 = 26;
const ZONE: u32 = u32::MAX - (u32::MAX - LETTERS + 1) % LETTERS;

/// rand 0.8's `SmallRng` on 64-bit targets: xoshiro256++.
#[derive(Debug, Clone)]
pub(super) struct EventRng {
    s: [u64; 4],
}

impl EventRng {
    /// `SmallRng::seed_from_u64`: rand_core 0.6's default, eight PCG32 outputs as the seed's
    /// little-endian words.
    #[inline]
    pub(super) fn seed_from_u64(mut state: u64) -> Self {
        let mut pcg32 = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(11_634_580_027_462_260_723);
            let xorshifted = (((state >> 18) ^ state) >> 27) as u32;
            u64::from(xorshifted.rotate_right((state >> 59) as u32))
        };
        let s: [u64; 4] = std::array::from_fn(|_| {
            let low = pcg32();
            low | (pcg32() << 32)
        });
        if s == [0; 4] {
            // xoshiro's `from_seed` maps an all-zero seed to its SplitMix64 seeding of 0.
            return Self::split_mix(0);
        }
        Self { s }
    }

    /// xoshiro256++'s own `seed_from_u64`: four SplitMix64 outputs.
    fn split_mix(mut state: u64) -> Self {
        const PHI: u64 = 0x9e37_79b9_7f4a_7c15;
        let s = std::array::from_fn(|_| {
            state = state.wrapping_add(PHI);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        });
        Self { s }
    }

    /// `rng.gen_range(0..n)` for `usize`, drawn as rand 0.8's `UniformInt::sample_single`
    /// draws it (a 64-bit draw kept when the low half of its product with `n` is within the
    /// zone, the high half the value), inlined: the generator's events make five or six of
    /// these draws, and rand's out-of-line call keeps the state in memory, where the next
    /// step reloads it.
    #[inline(always)]
    pub(super) fn below(&mut self, n: usize) -> usize {
        let range = n as u64;
        if range == 0 {
            // What rand's wrapped `high - 1` gives in a release build (it asserts `n > 0`).
            return self.next_u64() as usize;
        }
        let zone = (range << range.leading_zeros()).wrapping_sub(1);
        loop {
            let product = u128::from(self.next_u64()) * u128::from(range);
            if product as u64 <= zone {
                return (product >> 64) as usize;
            }
        }
    }

    /// `slice.choose(rng)`'s index for a slice of `n` (`0 < n <= u32::MAX`) elements: rand
    /// 0.8's `gen_index`, a `u32` range, inlined. (For `n == 0`, where `choose` gives `None`
    /// without a draw, this draws once and gives 0.)
    #[inline(always)]
    pub(super) fn index(&mut self, n: usize) -> usize {
        let range = n as u32;
        let zone = range.wrapping_shl(range.leading_zeros()).wrapping_sub(1);
        loop {
            let product = u64::from(self.next_u32()) * u64::from(range);
            if product as u32 <= zone {
                return (product >> 32) as usize;
            }
        }
    }

    /// `rng.gen::<f32>()`: rand 0.8's 24 random bits scaled into `[0, 1)`.
    #[inline(always)]
    pub(super) fn unit_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// `rng.gen_range(b'a'..=b'z')`, without the division rand makes on every call.
    #[inline]
    pub(super) fn letter(&mut self) -> u8 {
        loop {
            let product = u64::from(self.next_u32()) * u64::from(LETTERS);
            if product as u32 <= ZONE {
                return b'a' + (product >> 32) as u8;
            }
        }
    }
}

impl RngCore for EventRng {
    #[inline]
    fn next_u32(&mut self) -> u32 {
        // xoshiro's lowest bits are its weakest; rand takes the upper half.
        (self.next_u64() >> 32) as u32
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // rand_core's `fill_bytes_via_next`, as xoshiro256++ fills bytes.
        let mut chunks = dest.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if rest.len() > 4 {
            let bytes = self.next_u64().to_le_bytes();
            rest.copy_from_slice(&bytes[..rest.len()]);
        } else if !rest.is_empty() {
            let bytes = self.next_u32().to_le_bytes();
            rest.copy_from_slice(&bytes[..rest.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// Events' letters, drawn [`LANES`] at a time: `push` each event's generator (its last draws
/// are these letters) and how many; `draw` writes each event's letters into a column, in order.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    pending: Vec<(EventRng, usize)>,
}

impl Lanes {
    /// Queues `n` letters drawn from `rng`.
    pub(super) fn push(&mut self, rng: EventRng, n: usize) {
        self.pending.push((rng, n));
    }

    /// Whether [`LANES`] events wait (time to [`Lanes::draw`]).
    pub(super) fn is_full(&self) -> bool {
        self.pending.len() >= LANES
    }

    /// Draws the waiting events' letters into `column`, one value per event, in order.
    pub(super) fn draw(&mut self, column: &mut TextColumn) {
        #[cfg(target_arch = "x86_64")]
        if self.pending.len() == LANES {
            if let Some(draw) = vector_draw() {
                let lengths: [usize; LANES] = std::array::from_fn(|lane| self.pending[lane].1);
                let state: [[u64; LANES]; 4] = std::array::from_fn(|word| {
                    std::array::from_fn(|lane| self.pending[lane].0.s[word])
                });
                let start = column.values.len();
                let total = lengths.iter().sum::<usize>();
                column.values.resize(start + total + SLACK, 0);
                let drawn = draw(&state, &lengths, &mut column.values[start..]);
                column.values.truncate(start + total);
                if drawn {
                    let mut end = start;
                    for n in lengths {
                        end += n;
                        column.end_value(end);
                    }
                    self.pending.clear();
                    return;
                }
                // A draw fell outside rand's zone (22 in 2^32 draws, about one group in
                // 300,000; rand draws again, so that lane's letters after it shift): every
                // lane is drawn on its own below.
                column.values.truncate(start);
            }
        }
        for (rng, n) in &mut self.pending {
            column.values.extend((0..*n).map(|_| rng.letter()));
            column.end_value(column.values.len());
        }
        self.pending.clear();
    }
}

/// Draws `lengths[lane]` letters per lane from the lanes' state (by word, then lane) into
/// `out`, lane after lane (`out` holds all of them and [`SLACK`] bytes more, which are
/// written over); false if any draw fell outside the zone (then `out` does not hold the
/// lanes' letters).
#[cfg(target_arch = "x86_64")]
type VectorDraw = fn(&[[u64; LANES]; 4], &[usize; LANES], &mut [u8]) -> bool;

/// The widest vector draw this processor runs, if any.
#[cfg(target_arch = "x86_64")]
fn vector_draw() -> Option<VectorDraw> {
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the processor has AVX-512F, checked just above.
        Some(|state, lengths, out| unsafe { avx512::draw(state, lengths, out) })
    } else if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, checked just above.
        Some(|state, lengths, out| unsafe { avx2::draw(state, lengths, out) })
    } else {
        None
    }
}

/// Bytes past the lanes' letters that the vector draws may write over (their last 8-byte
/// store of a lane can reach past it); the caller's buffer has them and drops them after.
#[cfg(target_arch = "x86_64")]
const SLACK: usize = 8;

/// Where the vector draws put each lane's letters: lane after lane, back to back, each block
/// of 8 letters with one 8-byte store. A lane's last store may reach up to 7 bytes into the
/// lanes after it, which only ever covers their first 8 bytes (a lane's stores end before
/// its own end + 8, at or before the next lane's start + 8); so [`Placement::finish`] stores
/// every lane's first 8 letters again, in lane order, each over what the lanes before it
/// spilled. Stores past a lane's length go to the slack, with no branch.
#[cfg(target_arch = "x86_64")]
struct Placement {
    starts: [usize; LANES],
    ends: [usize; LANES],
    /// Each lane's first 8 letters.
    first: [u64; LANES],
    /// Where the stores past a lane's end go: the slack.
    spill: usize,
    /// Blocks of 8 letters to draw: enough for the longest lane.
    blocks: usize,
}

#[cfg(target_arch = "x86_64")]
impl Placement {
    fn new(lengths: &[usize; LANES]) -> Self {
        let mut starts = [0; LANES];
        let mut ends = [0; LANES];
        let mut at = 0;
        for lane in 0..LANES {
            starts[lane] = at;
            at += lengths[lane];
            ends[lane] = at;
        }
        let longest = lengths.iter().copied().max().unwrap_or(0);
        Self {
            starts,
            ends,
            first: [0; LANES],
            spill: at,
            blocks: longest.div_ceil(8),
        }
    }

    /// Stores a lane's letters `8 * block ..` (the first in the lowest byte of `word`) into
    /// `out` (all lanes' letters and [`SLACK`] bytes).
    #[inline(always)]
    fn store(&mut self, out: &mut [u8], lane: usize, block: usize, word: u64) {
        if block == 0 {
            self.first[lane] = word;
        }
        let at = self.starts[lane] + block * 8;
        let at = if at < self.ends[lane] { at } else { self.spill };
        out[at..at + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// Mends what the lanes' last stores spilled into the lanes after them.
    fn finish(&self, out: &mut [u8]) {
        for lane in 0..LANES {
            if self.starts[lane] < self.ends[lane] {
                let at = self.starts[lane];
                out[at..at + 8].copy_from_slice(&self.first[lane].to_le_bytes());
            }
        }
    }
}

/// [`LANES`] xoshiro256++ generators stepped together in one AVX-512 register.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Placement, LANES, LETTERS, ZONE};

    /// As [`super::VectorDraw`].
    #[target_feature(enable = "avx512f")]
    pub(super) fn draw(
        state: &[[u64; LANES]; 4],
        lengths: &[usize; LANES],
        out: &mut [u8],
    ) -> bool {
        let load = |w: &[u64; LANES]| {
            _mm512_set_epi64(
                w[7] as i64,
                w[6] as i64,
                w[5] as i64,
                w[4] as i64,
                w[3] as i64,
                w[2] as i64,
                w[1] as i64,
                w[0] as i64,
            )
        };
        let [mut s0, mut s1, mut s2, mut s3] = state.map(|word| load(&word));
        let range = _mm512_set1_epi64(i64::from(LETTERS));
        let zone = _mm512_set1_epi32(ZONE as i32);
        let top_byte = _mm512_set1_epi64(0xff << 56);
        let a = _mm512_set1_epi64(0x6161_6161_6161_6161);
        // The largest low half of any product so far, in the even 32-bit lanes (the odd ones
        // hold letter indices, below 26, never above the zone): compared once at the end.
        let mut highest = _mm512_setzero_si512();
        let mut place = Placement::new(lengths);
        for block in 0..place.blocks {
            let mut eight = _mm512_setzero_si512();
            for _ in 0..8 {
                let result = _mm512_add_epi64(_mm512_rol_epi64::<23>(_mm512_add_epi64(s0, s3)), s0);
                let t = _mm512_slli_epi64::<17>(s1);
                s2 = _mm512_xor_si512(s2, s0);
                s3 = _mm512_xor_si512(s3, s1);
                s1 = _mm512_xor_si512(s1, s2);
                s0 = _mm512_xor_si512(s0, s3);
                s2 = _mm512_xor_si512(s2, t);
                s3 = _mm512_rol_epi64::<45>(s3);
                // The upper half as rand's `u32` draw, times the range: the letter's index
                // in bits 32..37, the low half below.
                let product = _mm512_mul_epu32(_mm512_srli_epi64::<32>(result), range);
                highest = _mm512_max_epu32(highest, product);
                // Eight letter indices per lane, the first in the lowest byte: the index
                // shifted into the top byte (`0xf8`: the shifted letters OR the index AND
                // the byte's mask, one instruction).
                eight = _mm512_ternarylogic_epi64::<0xf8>(
                    _mm512_srli_epi64::<8>(eight),
                    _mm512_slli_epi64::<24>(product),
                    top_byte,
                );
            }
            // Indices to letters: 'a' (0x61) added to each byte, each at most 25 + 'a', so
            // no carry crosses a byte.
            let eight = _mm512_add_epi64(eight, a);
            let halves = [
                _mm512_extracti64x4_epi64::<0>(eight),
                _mm512_extracti64x4_epi64::<1>(eight),
            ];
            for (h, half) in halves.into_iter().enumerate() {
                let words = [
                    _mm256_extract_epi64::<0>(half),
                    _mm256_extract_epi64::<1>(half),
                    _mm256_extract_epi64::<2>(half),
                    _mm256_extract_epi64::<3>(half),
                ];
                for (i, word) in words.into_iter().enumerate() {
                    place.store(out, h * 4 + i, block, word as u64);
                }
            }
        }
        place.finish(out);
        _mm512_cmpgt_epu32_mask(highest, zone) == 0
    }
}

/// [`LANES`] xoshiro256++ generators stepped together in two AVX2 registers of four lanes.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Placement, LANES, LETTERS, ZONE};

    /// As [`super::VectorDraw`].
    #[target_feature(enable = "avx2")]
    pub(super) fn draw(
        state: &[[u64; LANES]; 4],
        lengths: &[usize; LANES],
        out: &mut [u8],
    ) -> bool {
        let half = |word: &[u64; LANES], h: usize| {
            let w = &word[h * 4..h * 4 + 4];
            _mm256_set_epi64x(w[3] as i64, w[2] as i64, w[1] as i64, w[0] as i64)
        };
        let mut s = [0, 1].map(|h| state.map(|word| half(&word, h)));
        let range = _mm256_set1_epi64x(i64::from(LETTERS));
        let zone = _mm256_set1_epi32(ZONE as i32);
        let top_byte = _mm256_set1_epi64x(0xff << 56);
        let a = _mm256_set1_epi8(b'a' as i8);
        // As in the AVX-512 draw: the largest low half, compared once at the end.
        let mut highest = _mm256_setzero_si256();
        let mut place = Placement::new(lengths);
        for block in 0..place.blocks {
            let mut eight = [_mm256_setzero_si256(); 2];
            for _ in 0..8 {
                for (h, [s0, s1, s2, s3]) in s.iter_mut().enumerate() {
                    let sum = _mm256_add_epi64(*s0, *s3);
                    let rotated =
                        _mm256_or_si256(_mm256_slli_epi64::<23>(sum), _mm256_srli_epi64::<41>(sum));
                    let result = _mm256_add_epi64(rotated, *s0);
                    let t = _mm256_slli_epi64::<17>(*s1);
                    *s2 = _mm256_xor_si256(*s2, *s0);
                    *s3 = _mm256_xor_si256(*s3, *s1);
                    *s1 = _mm256_xor_si256(*s1, *s2);
                    *s0 = _mm256_xor_si256(*s0, *s3);
                    *s2 = _mm256_xor_si256(*s2, t);
                    *s3 =
                        _mm256_or_si256(_mm256_slli_epi64::<45>(*s3), _mm256_srli_epi64::<19>(*s3));
                    // The upper half as rand's `u32` draw, times the range.
                    let product = _mm256_mul_epu32(_mm256_srli_epi64::<32>(result), range);
                    highest = _mm256_max_epu32(highest, product);
                    // Eight letter indices per lane, the first in the lowest byte.
                    eight[h] = _mm256_or_si256(
                        _mm256_srli_epi64::<8>(eight[h]),
                        _mm256_and_si256(_mm256_slli_epi64::<24>(product), top_byte),
                    );
                }
            }
            let eight = eight.map(|e| _mm256_add_epi8(e, a));
            let words = [
                _mm256_extract_epi64::<0>(eight[0]),
                _mm256_extract_epi64::<1>(eight[0]),
                _mm256_extract_epi64::<2>(eight[0]),
                _mm256_extract_epi64::<3>(eight[0]),
                _mm256_extract_epi64::<0>(eight[1]),
                _mm256_extract_epi64::<1>(eight[1]),
                _mm256_extract_epi64::<2>(eight[1]),
                _mm256_extract_epi64::<3>(eight[1]),
            ];
            for (lane, word) in words.into_iter().enumerate() {
                place.store(out, lane, block, word as u64);
            }
        }
        place.finish(out);
        // Every 32-bit lane at most the zone: its minimum with the zone is itself.
        let within = _mm256_cmpeq_epi32(_mm256_min_epu32(highest, zone), highest);
        _mm256_movemask_epi8(within) == -1
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    use datafusion::arrow::array::AsArray;

    use super::*;

    #[test]
    fn draws_are_small_rngs_draws() {
        for seed in (0..300u64).chain([u64::MAX, 1 << 63]) {
            let (mut ours, mut rands) =
                (EventRng::seed_from_u64(seed), SmallRng::seed_from_u64(seed));
            for i in 0..2_000usize {
                match i % 6 {
                    0 => assert_eq!(ours.letter(), rands.gen_range(b'a'..=b'z')),
                    1 => {
                        assert_eq!(ours.gen_range(0..i + 1), rands.gen_range(0..i + 1));
                        // Ranges near powers of two and far from them (where the zone
                        // rejects most often), and the largest.
                        let n =
                            [i + 1, 1 << (i % 64), (1 << (i % 63)) + 1, usize::MAX - i][i / 6 % 4];
                        assert_eq!(ours.below(n), rands.gen_range(0..n), "below({n})");
                    }
                    2 => {
                        assert_eq!(ours.gen::<f32>(), rands.gen::<f32>());
                        assert_eq!(ours.unit_f32(), rands.gen::<f32>());
                    }
                    3 => {
                        assert_eq!(
                            [1, 2, 3, 4, 5].choose(&mut ours),
                            [1, 2, 3, 4, 5].choose(&mut rands)
                        );
                        // rand's `choose` draws `gen_range(0..n as u32)` (its `gen_index`).
                        let n = [i + 1, 3, 1 << (i % 32), u32::MAX as usize - i][i / 6 % 4];
                        assert_eq!(ours.index(n), rands.gen_range(0..n as u32) as usize);
                        let slice: Vec<usize> = (0..i % 50 + 1).collect();
                        let ours = Some(&slice[ours.index(slice.len())]);
                        assert_eq!(ours, slice.choose(&mut rands));
                    }
                    4 => {
                        // A remainder of more than 4 bytes, then of 4.
                        let (mut a, mut b) = ([0u8; 13], [0u8; 13]);
                        ours.fill_bytes(&mut a);
                        rands.fill_bytes(&mut b);
                        assert_eq!(a, b);
                        let (mut a, mut b) = ([0u8; 12], [0u8; 12]);
                        ours.fill_bytes(&mut a);
                        rands.fill_bytes(&mut b);
                        assert_eq!(a, b);
                    }
                    _ => assert_eq!(ours.next_u64(), rands.next_u64()),
                }
            }
        }
    }

    #[test]
    fn an_all_zero_seed_is_seeded_as_xoshiro_seeds_it() {
        let (mut ours, mut rands) = (EventRng::split_mix(0), SmallRng::from_seed([0; 32]));
        for _ in 0..100 {
            assert_eq!(ours.next_u64(), rands.next_u64());
        }
    }

    #[test]
    fn lanes_draw_each_events_letters() {
        // 8 full lanes, then a partial group; lengths from 0 to 90.
        let events: Vec<(u64, usize)> = (0..13u64)
            .map(|e| (e * 7919, (e as usize * 37) % 91))
            .collect();
        let mut lanes = Lanes::default();
        let mut column = TextColumn::new();
        for &(seed, n) in &events {
            let mut rng = EventRng::seed_from_u64(seed);
            rng.next_u64(); // earlier draws of the event
            lanes.push(rng, n);
            if lanes.is_full() {
                lanes.draw(&mut column);
            }
        }
        lanes.draw(&mut column);
        let got = values(column);
        let want: Vec<Vec<u8>> = events
            .iter()
            .map(|&(seed, n)| {
                let mut rng = SmallRng::seed_from_u64(seed);
                rng.next_u64();
                (0..n).map(|_| rng.gen_range(b'a'..=b'z')).collect()
            })
            .collect();
        assert_eq!(got, want);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_vector_draws_give_the_lanes_letters() {
        let state: [[u64; LANES]; 4] = std::array::from_fn(|word| {
            std::array::from_fn(|lane| EventRng::seed_from_u64((word * LANES + lane) as u64).s[0])
        });
        // Whole blocks, partial ones, empty lanes, the longest lane not first, lanes shorter
        // than a block one after another (a last store reaching over several lanes).
        let short = [1, 2, 0, 3, 7, 1, 0, 5];
        for lengths in [[48; LANES], [7, 0, 48, 8, 9, 33, 47, 1], short, [0; LANES]] {
            let want: Vec<u8> = (0..LANES)
                .flat_map(|lane| {
                    let mut rng = EventRng {
                        s: state.map(|word| word[lane]),
                    };
                    (0..lengths[lane]).map(move |_| rng.letter())
                })
                .collect();
            let total = lengths.iter().sum::<usize>();
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut out = vec![0; total + SLACK];
                // SAFETY: the processor has AVX2.
                assert!(unsafe { avx2::draw(&state, &lengths, &mut out) });
                out.truncate(total);
                assert_eq!(out, want, "{lengths:?}");
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                let mut out = vec![0; total + SLACK];
                // SAFETY: the processor has AVX-512F.
                assert!(unsafe { avx512::draw(&state, &lengths, &mut out) });
                out.truncate(total);
                assert_eq!(out, want, "{lengths:?}");
            }
        }
        // One lane's first draw falls outside the zone: both draws report it, whichever lane.
        for lane in [0, 3, LANES - 1] {
            let mut state = state;
            let (rejects, _) = rejecting(lane as u64);
            for (word, value) in state.iter_mut().zip(rejects.s) {
                word[lane] = value;
            }
            let mut out = vec![0; 16 * LANES + SLACK];
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the processor has AVX2.
                assert!(!unsafe { avx2::draw(&state, &[16; LANES], &mut out) });
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the processor has AVX-512F.
                assert!(!unsafe { avx512::draw(&state, &[16; LANES], &mut out) });
            }
        }
    }

    /// Each value of a finished letters column.
    fn values(column: TextColumn) -> Vec<Vec<u8>> {
        super::super::columns::Recyclers::default()
            .string_array(column)
            .as_string::<i32>()
            .iter()
            .map(|v| v.expect("no nulls").as_bytes().to_vec())
            .collect()
    }

    /// A generator whose first draw falls outside rand's zone (rejected: a second is drawn).
    fn rejecting(lane: u64) -> (EventRng, SmallRng) {
        // 165191049 * 26 = 2^32 - 22, above the zone; with s0 = 0 the output is rotl(s3, 23).
        let s = [0, lane, 2, (165_191_049u64 << 32).rotate_right(23)];
        let mut seed = [0u8; 32];
        for (chunk, word) in seed.chunks_mut(8).zip(s) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        (EventRng { s }, SmallRng::from_seed(seed))
    }

    #[test]
    fn a_rejected_draw_gives_rands_letters() {
        let (mut ours, mut rands) = rejecting(1);
        let first = ours.clone().next_u32();
        assert!(u64::from(first) * 26 % (1 << 32) > u64::from(ZONE));
        for _ in 0..20 {
            assert_eq!(ours.letter(), rands.gen_range(b'a'..=b'z'));
        }
        // In lanes: one lane rejects, every lane still gets rand's letters.
        let mut lanes = Lanes::default();
        let mut want = Vec::new();
        for lane in 0..LANES as u64 {
            let (ours, mut rands) = if lane == 5 {
                rejecting(lane)
            } else {
                let seed = [lane as u8 + 1; 32];
                (
                    EventRng {
                        s: [u64::from_le_bytes([lane as u8 + 1; 8]); 4],
                    },
                    SmallRng::from_seed(seed),
                )
            };
            want.push(
                (0..30)
                    .map(|_| rands.gen_range(b'a'..=b'z'))
                    .collect::<Vec<u8>>(),
            );
            lanes.push(ours, 30);
        }
        let mut column = TextColumn::new();
        lanes.draw(&mut column);
        assert_eq!(values(column), want);
    }
}
