//! The generator's columns, written into buffers that come back to it when the batch is
//! dropped ([`crate::recycle`]): its batches' memory is reused, not faulted in anew.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::buffer::OffsetBuffer;

use crate::recycle::Recycler;

/// Buffers of dropped batches kept per generator, by kind: about 16 batches of 8,192 bids'
/// integer columns, a dozen of their `extra` strings. A fixed part of memory outside the
/// budget, per source partition.
const KEEP_INTS: usize = 4 << 20;
const KEEP_OFFSETS: usize = 1 << 20;
const KEEP_BYTES: usize = 8 << 20;

/// The recyclers of one generator's columns.
#[derive(Debug, Clone)]
pub(super) struct Recyclers {
    ints: Arc<Recycler<i64>>,
    offsets: Arc<Recycler<i32>>,
    bytes: Arc<Recycler<u8>>,
}

impl Default for Recyclers {
    fn default() -> Self {
        Self {
            ints: Recycler::new(KEEP_INTS),
            offsets: Recycler::new(KEEP_OFFSETS),
            bytes: Recycler::new(KEEP_BYTES),
        }
    }
}

impl Recyclers {
    /// Room for `n` integers (or times).
    pub fn ints(&self, n: usize) -> Vec<i64> {
        self.ints.take(n)
    }

    /// Room for `n` strings of `bytes` bytes in all.
    pub fn text(&self, n: usize, bytes: usize) -> TextColumn {
        let mut offsets = self.offsets.take(n + 1);
        offsets.push(0);
        TextColumn {
            values: self.bytes.take(bytes),
            offsets,
        }
    }

    pub fn int_array(&self, values: Vec<i64>) -> ArrayRef {
        Arc::new(Int64Array::new(self.ints.buffer(values), None))
    }

    pub fn time_array(&self, values: Vec<i64>) -> ArrayRef {
        Arc::new(TimestampNanosecondArray::new(
            self.ints.buffer(values),
            None,
        ))
    }

    /// The strings of `column`. They are letters, digits and the `nexmark` crate's fixed ASCII
    /// text, checked as such in one pass over the column; were a value ever not ASCII, the
    /// column is converted value by value, lossily, not refused.
    pub fn string_array(&self, column: TextColumn) -> ArrayRef {
        let TextColumn { values, offsets } = column;
        let well_formed = offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets
                .last()
                .is_some_and(|&end| end as usize == values.len());
        if !well_formed || !values.is_ascii() {
            let strings: StringArray = offsets
                .windows(2)
                .map(|w| {
                    let value = values.get(w[0] as usize..w[1] as usize).unwrap_or_default();
                    Some(String::from_utf8_lossy(value))
                })
                .collect();
            return Arc::new(strings);
        }
        let offsets = OffsetBuffer::new(self.offsets.buffer(offsets));
        let values = self.bytes.buffer(values).into_inner();
        // SAFETY: the offsets start at 0, never fall and end at the values' length (checked
        // above, and `OffsetBuffer::new` refuses negative or falling ones); every byte is
        // ASCII, so every value is UTF-8 and every offset a character boundary.
        Arc::new(unsafe { StringArray::new_unchecked(offsets, values, None) })
    }
}

/// A string column being written: the values back to back and where each ends.
#[derive(Debug)]
pub(super) struct TextColumn {
    pub values: Vec<u8>,
    offsets: Vec<i32>,
}

impl TextColumn {
    /// An empty column in memory of its own (tests).
    #[cfg(test)]
    pub fn new() -> Self {
        Self {
            values: Vec::new(),
            offsets: vec![0],
        }
    }

    /// Appends a value.
    pub fn push(&mut self, value: impl AsRef<[u8]>) {
        self.values.extend_from_slice(value.as_ref());
        self.end_value(self.values.len());
    }

    /// The value written last ends at `end` of the values. A batch holds at most
    /// [`super::MAX_BATCH_SIZE`] events of at most a few hundred bytes each, far below
    /// `i32::MAX` bytes.
    pub fn end_value(&mut self, end: usize) {
        self.offsets.push(end as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};

    #[test]
    fn string_columns_that_are_not_ascii_are_converted_not_refused() {
        let recyclers = Recyclers::default();
        let mut column = recyclers.text(2, 8);
        column.push(b"abc");
        column.push([0xff, b'x']);
        column.push("é");
        let array = recyclers.string_array(column);
        let strings = array.as_string::<i32>();
        assert_eq!(strings.len(), 3);
        assert_eq!(strings.value(0), "abc");
        assert_eq!(strings.value(1), "\u{fffd}x");
        assert_eq!(strings.value(2), "é");
    }

    #[test]
    fn columns_reuse_the_memory_of_dropped_batches() {
        let recyclers = Recyclers::default();
        let mut column = recyclers.text(2, 64);
        column.push("channel-1");
        column.push("");
        let at = column.values.as_ptr();
        let strings = recyclers.string_array(column);
        assert_eq!(strings.as_string::<i32>().value(0), "channel-1");
        assert_eq!(strings.as_string::<i32>().value(1), "");
        drop(strings);
        let again = recyclers.text(2, 8);
        assert_eq!(again.values.as_ptr(), at);
        assert!(again.values.is_empty());

        let mut ints = recyclers.ints(4);
        ints.extend([1, 2, 3]);
        let at = ints.as_ptr();
        let times = recyclers.time_array(ints);
        assert_eq!(
            times
                .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>()
                .value(2),
            3
        );
        drop(times);
        let again = recyclers.ints(4);
        assert_eq!(again.as_ptr(), at);
    }
}
