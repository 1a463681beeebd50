//! Column buffers that come back to the source that wrote them when Arrow drops them.
//!
//! A source writes each batch's columns into new memory, and whoever takes the batch drops it,
//! often on another thread. weir returns freed memory to the kernel at once (bounded memory,
//! `repl/src/main.rs`), so each batch's buffers were fresh pages, faulted in and zeroed by the
//! kernel: a fifth of the CPU of the Nexmark generator (q0, docs/status.md, Session 50). A
//! [`Recycler`] keeps a fixed number of bytes of dropped buffers for the next batches, whose
//! pages are already there; past that, a dropped buffer is freed as before.

use std::mem::size_of;
use std::panic::RefUnwindSafe;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};

use datafusion::arrow::buffer::{Buffer, ScalarBuffer};
use datafusion::arrow::datatypes::ArrowNativeType;

/// Dropped buffers of `T`s, up to `keep_bytes` of them, for the next batches.
#[derive(Debug)]
pub struct Recycler<T> {
    free: Mutex<Vec<Vec<T>>>,
    keep_bytes: usize,
}

impl<T: ArrowNativeType + RefUnwindSafe> Recycler<T> {
    /// A recycler keeping at most `keep_bytes` of dropped buffers (their capacity).
    pub fn new(keep_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::default(),
            keep_bytes,
        })
    }

    /// An empty vector with room for `n` values: a dropped one if one is kept.
    pub fn take(&self, n: usize) -> Vec<T> {
        let kept = self.free.lock().ok().and_then(|mut free| free.pop());
        match kept {
            Some(mut values) => {
                values.clear();
                values.reserve(n);
                values
            }
            None => Vec::with_capacity(n),
        }
    }

    /// `values` as an Arrow buffer whose memory comes back here when Arrow drops it.
    pub fn buffer(self: &Arc<Self>, values: Vec<T>) -> ScalarBuffer<T> {
        let len = values.len();
        // A vector's pointer is never null (dangling and aligned when it holds nothing).
        let ptr = NonNull::new(values.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
        let owner = Arc::new(Returned {
            values,
            to: Arc::downgrade(self),
        });
        // SAFETY: `ptr` points at `len` initialized `T`s owned by `owner`'s vector, whose heap
        // memory neither moves nor changes while `owner` lives (nothing mutates it: `Returned`
        // gives no access to it before its drop), and the buffer holds `owner` as long as it
        // reads that memory.
        let buffer = unsafe { Buffer::from_custom_allocation(ptr, len * size_of::<T>(), owner) };
        ScalarBuffer::new(buffer, 0, len)
    }

    /// Keeps `values` for a later [`Recycler::take`] if there is room.
    fn keep(&self, values: Vec<T>) {
        let bytes = |v: &Vec<T>| v.capacity() * size_of::<T>();
        if let Ok(mut free) = self.free.lock() {
            let held: usize = free.iter().map(bytes).sum();
            if held + bytes(&values) <= self.keep_bytes {
                free.push(values);
            }
        }
    }

    /// Bytes of dropped buffers kept now.
    pub fn kept_bytes(&self) -> usize {
        self.free.lock().map_or(0, |free| {
            free.iter().map(|v| v.capacity() * size_of::<T>()).sum()
        })
    }
}

/// The memory of a buffer handed to Arrow: back to its recycler when Arrow drops it (freed if
/// the recycler is gone).
struct Returned<T: ArrowNativeType + RefUnwindSafe> {
    values: Vec<T>,
    to: Weak<Recycler<T>>,
}

impl<T: ArrowNativeType + RefUnwindSafe> Drop for Returned<T> {
    fn drop(&mut self) {
        if let Some(recycler) = self.to.upgrade() {
            recycler.keep(std::mem::take(&mut self.values));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    #[test]
    fn a_dropped_buffer_comes_back_with_its_memory_and_only_within_the_limit() {
        let recycler = Recycler::<i64>::new(3 * 1024 * 8);
        let mut values = recycler.take(1024);
        values.extend(0..1000);
        let at = values.as_ptr();
        let array = Int64Array::new(recycler.buffer(values), None);
        let slice = array.slice(10, 5);
        drop(array);
        // A slice still reads the memory: nothing came back yet.
        assert_eq!(recycler.kept_bytes(), 0);
        assert_eq!(slice.values().to_vec(), vec![10, 11, 12, 13, 14]);
        drop(slice);
        assert_eq!(recycler.kept_bytes(), 1024 * 8);
        let again = recycler.take(512);
        assert_eq!(again.as_ptr(), at, "the same memory");
        assert!(again.is_empty() && again.capacity() >= 1024);
        assert_eq!(recycler.kept_bytes(), 0);

        // Past the limit a dropped buffer is freed, not kept.
        let arrays: Vec<Int64Array> = (0..5)
            .map(|i| {
                let mut v = recycler.take(1024);
                v.extend(i..i + 1024);
                Int64Array::new(recycler.buffer(v), None)
            })
            .collect();
        assert_eq!(arrays[4].value(1023), 4 + 1023);
        drop(arrays);
        assert_eq!(recycler.kept_bytes(), 3 * 1024 * 8);

        // A buffer outliving its recycler is freed.
        let mut v = recycler.take(4);
        v.push(7);
        let array = Int64Array::new(recycler.buffer(v), None);
        drop(recycler);
        assert_eq!(array.value(0), 7);
        drop(array);

        // An empty vector makes an empty buffer.
        let recycler = Recycler::<i64>::new(1024);
        let empty = Int64Array::new(recycler.buffer(Vec::new()), None);
        assert_eq!(empty.len(), 0);
    }
}
