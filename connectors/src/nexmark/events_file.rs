//! Pre-generated Nexmark events: one stream's rows in an Arrow IPC file, written once by
//! [`write_events_file`] and read back by the source (`events_file = 'path'`) without
//! generating anything, so a benchmark can time a query apart from the generator.
//!
//! The file holds the stream's full schema in batches of `batch_size` rows, in stream order;
//! its schema metadata names the stream and the generator options it was written with. The
//! reader maps the file into memory and decodes each batch in place (Arrow's `FileDecoder`
//! over the mapped bytes): only the columns the table reads are touched, nothing is copied.
//! A batch's arrays own its bytes through a guard that, when the last of them is dropped,
//! hands the batch's pages back to the kernel, so the process keeps resident only the
//! batches the job still holds, not every page of the file it has read.
//! Partition `i` of `n` reads batches `i`, `i + n`, ...; each partition is in time order, as
//! with the generator (the watermark is their minimum).
//!
//! [`preload_events_file`] reads a file into the process's memory ahead of a job, decoded and
//! checked once: a source opening it then reads its batches from memory (no page of the file
//! mapped, nothing checked again), as DataFusion batch SQL reads events already in memory. A
//! benchmark uses it to time the query alone, apart from reading the file.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::array::{Array, ArrayData};
use datafusion::arrow::buffer::{Buffer, MutableBuffer};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{read_footer_length, FileDecoder};
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::ipc::{root_as_footer, Block};
use nexmark::config::NexmarkConfig;

use super::generate::{ArrowGenerator, EventConfig};
use super::Stream;
use weir_engine::EngineError;

use crate::error::{ConnectorError, Result};

fn arrow(e: datafusion::arrow::error::ArrowError) -> ConnectorError {
    ConnectorError::Engine(e.into())
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> ConnectorError {
    move |e| ConnectorError::Engine(EngineError::io(what, e))
}

/// Schema metadata keys.
const META_STREAM: &str = "weir.nexmark.stream";
const META_EVENTS: &str = "weir.nexmark.events";
const META_EVENT_RATE: &str = "weir.nexmark.event_rate";
const META_BASE_TIME: &str = "weir.nexmark.base_time";

/// Writes the rows of `stream` among the first `events` events (over all three streams) of
/// the generator configured by `config` (the source's `event_rate` and `base_time`) to
/// `path`, in batches of `batch_size` rows. Returns the number of rows written.
pub fn write_events_file(
    path: &Path,
    stream: Stream,
    events: u64,
    config: NexmarkConfig,
    batch_size: usize,
) -> Result<u64> {
    let event_rate = config.first_rate;
    let base_time = config.base_time;
    let events_config = EventConfig::new(config).ok_or_else(|| ConnectorError::InvalidOption {
        option: "event_rate".into(),
        value: event_rate.to_string(),
        reason: "expected one positive rate".into(),
    })?;
    let full = stream.schema();
    let metadata = HashMap::from([
        (META_STREAM.to_string(), stream.name().to_string()),
        (META_EVENTS.to_string(), events.to_string()),
        (META_EVENT_RATE.to_string(), event_rate.to_string()),
        (META_BASE_TIME.to_string(), base_time.to_string()),
    ]);
    let schema = Arc::new(Schema::new_with_metadata(full.fields().clone(), metadata));
    let all: Vec<usize> = (0..full.fields().len()).collect();
    let generator = ArrowGenerator::new(Arc::new(events_config), stream, &all);
    let cannot_write = || io(format!("cannot write '{}'", path.display()));
    let file = File::create(path).map_err(cannot_write())?;
    let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), &schema).map_err(arrow)?;
    let (mut offset, mut rows) = (0u64, 0u64);
    loop {
        let (columns, taken) = generator.batch(&mut offset, 1, batch_size.max(1), Some(events));
        if taken == 0 {
            break;
        }
        let batch = RecordBatch::try_new(schema.clone(), columns).map_err(arrow)?;
        writer.write(&batch).map_err(arrow)?;
        rows += taken as u64;
    }
    writer.finish().map_err(arrow)?;
    let file = writer.into_inner().map_err(arrow)?;
    file.into_inner()
        .map_err(|e| cannot_write()(e.into_error()))?
        .sync_all()
        .map_err(cannot_write())?;
    Ok(rows)
}

/// The mapped file and the batches whose arrays are all gone, waiting to be released.
struct Mapping {
    map: memmap2::Mmap,
    released: std::sync::Mutex<Released>,
    /// [`RELEASE_EVERY`] (smaller in tests).
    release_every: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Released {
    /// Byte ranges of dropped batches, not yet handed back.
    ranges: Vec<(usize, usize)>,
    bytes: usize,
}

/// How many bytes of dropped batches [`Mapping`] gathers before handing their pages back in
/// one go: fewer, larger `madvise` calls (each one interrupts the other cores to flush their
/// page tables), and adjacent batches merged so no page between them stays behind.
const RELEASE_EVERY: usize = 64 << 20;

/// What released ranges are rounded inwards to: a multiple of every page size Linux uses
/// (4 KiB to 64 KiB), so a page shared with a batch still in use is kept.
const RELEASE_ALIGN: usize = 64 * 1024;

impl Mapping {
    fn dropped(&self, start: usize, len: usize) {
        let ranges = {
            let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
            released.ranges.push((start, start + len));
            released.bytes += len;
            let every = self
                .release_every
                .load(std::sync::atomic::Ordering::Relaxed);
            if released.bytes < every {
                return;
            }
            released.bytes = 0;
            std::mem::take(&mut released.ranges)
        };
        for (start, end) in merged(ranges) {
            let start = start.div_ceil(RELEASE_ALIGN) * RELEASE_ALIGN;
            let end = end.min(self.map.len()) / RELEASE_ALIGN * RELEASE_ALIGN;
            if end > start {
                // SAFETY: the mapping is a read-only view of a file nobody writes while it is
                // read (see `EventsFile::open`), and no array points into these pages any more
                // (their batches' guards are gone); even if one did, the kernel refills dropped
                // pages of a file mapping from the file on the next access. An error only
                // leaves them resident.
                let _ = unsafe {
                    self.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
    }
}

/// What Arrow's full validation checks ([`ArrayData::validate_full`]), on every column of
/// `batch`: buffer sizes, null counts, offsets and, for text, UTF-8. A text column whose
/// offsets rise within its values and whose values are all ASCII is valid without checking
/// each string's bounds for character boundaries (every byte of ASCII is one); others get
/// Arrow's own check.
/// With what `RecordBatch::try_new` checks: each column as long as the batch, and no NULL in
/// a column that cannot hold one. (Each column's type is its field's: it was decoded as it.)
pub(super) fn validate(batch: &RecordBatch) -> std::result::Result<(), ArrowError> {
    let schema = batch.schema();
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .try_for_each(|(column, field)| {
            if column.len() != batch.num_rows() {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "column '{}' has {} rows, the batch {}",
                    field.name(),
                    column.len(),
                    batch.num_rows()
                )));
            }
            let data = column.to_data();
            validate_array(&data)?;
            if !field.is_nullable() && data.null_count() > 0 {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "column '{}' cannot hold NULL but has {}",
                    field.name(),
                    data.null_count()
                )));
            }
            Ok(())
        })
}

fn validate_array(data: &ArrayData) -> std::result::Result<(), ArrowError> {
    data.validate()?;
    data.validate_nulls()?;
    if !(data.data_type() == &DataType::Utf8 && ascii_text(data)) {
        data.validate_values()?;
    }
    data.child_data().iter().try_for_each(validate_array)
}

/// Whether the `Utf8` array `data` (already checked by [`ArrayData::validate`]) has offsets
/// that never fall, all within its values, and only ASCII bytes between its first and last.
fn ascii_text(data: &ArrayData) -> bool {
    let (Some(offsets), Some(values)) = (data.buffers().first(), data.buffers().get(1)) else {
        return false;
    };
    let offsets: &[i32] = offsets.typed_data();
    let Some(offsets) = offsets.get(data.offset()..data.offset() + data.len() + 1) else {
        return false;
    };
    let rising = offsets.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
    let (Ok(first), Ok(last)) = (
        usize::try_from(offsets[0]),
        usize::try_from(offsets[offsets.len() - 1]),
    ) else {
        return false;
    };
    rising && last <= values.len() && first <= last && is_ascii(&values.as_slice()[first..last])
}

/// Whether every byte is below 128: ORs the bytes a block at a time (which the compiler
/// turns into wide vector operations) rather than stopping at each word, as `str`'s check
/// does.
fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let (blocks, rest) = bytes.as_chunks::<4096>();
    for block in blocks {
        let (words, _) = block.as_chunks::<8>();
        let any = words
            .iter()
            .fold(0u64, |any, &word| any | u64::from_ne_bytes(word));
        if any & HIGH != 0 {
            return false;
        }
    }
    rest.is_ascii()
}

/// `ranges` sorted, with touching or overlapping ones joined.
fn merged(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// One batch's bytes in the mapping, owned by the arrays decoded from them: when the last of
/// them is dropped, the batch is released (its pages leave the process, not the page cache).
struct BatchPages {
    mapping: Arc<Mapping>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for BatchPages {
    fn as_ref(&self) -> &[u8] {
        &self.mapping.map[self.start..self.start + self.len]
    }
}

impl Drop for BatchPages {
    fn drop(&mut self) {
        self.mapping.dropped(self.start, self.len);
    }
}

/// An events file: its batches, decoded on demand from the mapped file, or held in memory.
pub struct EventsFile {
    path: PathBuf,
    held: Held,
    /// The number of events (over all streams) the file was written for.
    pub events: u64,
}

enum Held {
    /// The whole file mapped, with its footer's batch blocks.
    Mapped {
        mapping: Arc<Mapping>,
        blocks: Vec<Block>,
        schema: SchemaRef,
        version: datafusion::arrow::ipc::MetadataVersion,
    },
    /// Every batch decoded and checked (all columns), by [`preload_events_file`].
    Loaded(Arc<Preloaded>),
}

/// A preloaded events file.
struct Preloaded {
    stream: Stream,
    batches: Vec<RecordBatch>,
    events: u64,
}

/// Events files read into memory by [`preload_events_file`], by canonical path.
static PRELOADED: LazyLock<Mutex<HashMap<PathBuf, Arc<Preloaded>>>> =
    LazyLock::new(Default::default);

/// Reads the `stream` events file at `path` into this process's memory, every batch decoded
/// and checked, so the sources that open it afterwards (`events_file = 'path'`, this path)
/// read its batches from memory: no mapping, no page faults, no checks while a job runs.
/// For benchmarks that time a query apart from its input, as DataFusion's batch SQL over
/// events already in memory. Returns the bytes held; [`unload_events_files`] frees them.
pub fn preload_events_file(path: &Path, stream: Stream) -> Result<usize> {
    let mapped = EventsFile::map(path, stream)?;
    let Held::Mapped {
        mapping,
        schema,
        version,
        ..
    } = &mapped.held
    else {
        return Err(ConnectorError::Schema(format!(
            "events_file '{}': not mapped",
            path.display()
        )));
    };
    // A copy in memory of its own (64-byte aligned, as Arrow's buffers), decoded in place.
    let mut owned = MutableBuffer::with_capacity(mapping.map.len());
    owned.extend_from_slice(&mapping.map);
    let owned: Buffer = owned.into();
    let all: Vec<usize> = (0..schema.fields().len()).collect();
    let decoder = unsafe_unchecked_decoder(schema, *version, &all);
    let batches = (0..mapped.batches())
        .map(|index| {
            let (start, len) = mapped.block_range(index)?;
            mapped.decode(&decoder, index, owned.slice_with_length(start, len))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = owned.len();
    let loaded = Arc::new(Preloaded {
        stream,
        batches,
        events: mapped.events,
    });
    PRELOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(canonical(path)?, loaded);
    Ok(bytes)
}

/// Frees every events file [`preload_events_file`] read (sources already reading one keep
/// their batches until they end).
pub fn unload_events_files() {
    PRELOADED.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

fn canonical(path: &Path) -> Result<PathBuf> {
    path.canonicalize()
        .map_err(io(format!("cannot open '{}'", path.display())))
}

/// A decoder of the columns `projection` that skips Arrow's checks (see
/// [`EventsFile::decoder`]: every batch it reads goes through [`EventsFile::decode`]).
fn unsafe_unchecked_decoder(
    schema: &SchemaRef,
    version: datafusion::arrow::ipc::MetadataVersion,
    projection: &[usize],
) -> FileDecoder {
    let decoder = FileDecoder::new(schema.clone(), version).with_projection(projection.to_vec());
    // SAFETY: every batch this decoder reads goes through `EventsFile::decode`, which checks
    // it with `validate` (what Arrow's validation checks) before any value is read; the
    // decoding itself only slices buffers (an undersized one panics there, which `decode`
    // catches).
    unsafe { decoder.with_skip_validation(true) }
}

/// Reads the batches of an [`EventsFile`]: the table's columns.
pub struct BatchDecoder {
    projection: Vec<usize>,
    /// For a mapped file.
    ipc: Option<FileDecoder>,
}

impl std::fmt::Debug for EventsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsFile")
            .field("path", &self.path)
            .field("batches", &self.batches())
            .field("preloaded", &matches!(self.held, Held::Loaded(_)))
            .finish()
    }
}

impl EventsFile {
    /// Opens `path` and checks that it holds the `stream` stream: from memory if it was
    /// preloaded ([`preload_events_file`]), else mapped. Errors name the file.
    pub fn open(path: &Path, stream: Stream) -> Result<Self> {
        let bad = |what: String| {
            ConnectorError::Schema(format!("events_file '{}': {what}", path.display()))
        };
        let preloaded = {
            let held = PRELOADED.lock().unwrap_or_else(|e| e.into_inner());
            match held.is_empty() {
                true => None,
                false => held.get(&canonical(path)?).cloned(),
            }
        };
        if let Some(loaded) = preloaded {
            if loaded.stream != stream {
                return Err(bad(format!(
                    "holds the '{}' stream, not '{}'",
                    loaded.stream.name(),
                    stream.name()
                )));
            }
            return Ok(Self {
                path: path.to_path_buf(),
                events: loaded.events,
                held: Held::Loaded(loaded),
            });
        }
        Self::map(path, stream)
    }

    /// Maps `path` (see [`Self::open`]).
    fn map(path: &Path, stream: Stream) -> Result<Self> {
        let bad = |what: String| {
            ConnectorError::Schema(format!("events_file '{}': {what}", path.display()))
        };
        let file = File::open(path).map_err(io(format!("cannot open '{}'", path.display())))?;
        // SAFETY: the mapping is read-only and private; the file is one weir wrote for reading
        // (as with any memory-mapped input, truncating it while a job reads it is not supported).
        let mapping = Arc::new(Mapping {
            map: unsafe { memmap2::Mmap::map(&file) }
                .map_err(io(format!("cannot map '{}'", path.display())))?,
            released: Default::default(),
            release_every: RELEASE_EVERY.into(),
        });
        let bytes: &[u8] = &mapping.map;
        let len = bytes.len();
        if len < 10 + 8 || &bytes[len - 6..] != b"ARROW1" {
            return Err(bad("not an Arrow IPC file".into()));
        }
        let trailer: [u8; 10] = bytes[len - 10..].try_into().expect("10 bytes");
        let footer_len = read_footer_length(trailer).map_err(arrow)?;
        if footer_len + 10 > len {
            return Err(bad("truncated Arrow IPC footer".into()));
        }
        let footer = root_as_footer(&bytes[len - 10 - footer_len..len - 10])
            .map_err(|e| bad(format!("unreadable Arrow IPC footer: {e}")))?;
        let schema = Arc::new(fb_to_schema(
            footer.schema().ok_or_else(|| bad("no schema".into()))?,
        ));
        let version = footer.version();
        let blocks: Vec<Block> = footer
            .recordBatches()
            .map(|b| b.iter().copied().collect())
            .unwrap_or_default();
        let meta = |k: &str| schema.metadata().get(k).cloned();
        let written_for = meta(META_STREAM).unwrap_or_default();
        if written_for != stream.name() {
            return Err(bad(format!(
                "holds the '{written_for}' stream, not '{}' (written by weir's write_events_file?)",
                stream.name()
            )));
        }
        let full = stream.schema();
        let same = full.fields().len() == schema.fields().len()
            && full
                .fields()
                .iter()
                .zip(schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same {
            return Err(bad(format!(
                "its columns are not the {} stream's",
                stream.name()
            )));
        }
        let events = meta(META_EVENTS)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad("no event count in its metadata".into()))?;
        Ok(Self {
            path: path.to_path_buf(),
            held: Held::Mapped {
                mapping,
                blocks,
                schema,
                version,
            },
            events,
        })
    }

    /// The mapping (tests of a mapped file).
    #[cfg(test)]
    fn mapping(&self) -> &Arc<Mapping> {
        match &self.held {
            Held::Mapped { mapping, .. } => mapping,
            Held::Loaded(_) => panic!("a preloaded events file is not mapped"),
        }
    }

    /// Gathers `bytes` of dropped batches before releasing them (tests).
    #[cfg(test)]
    pub(crate) fn release_every(&self, bytes: usize) {
        self.mapping()
            .release_every
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the file is mapped (tests find the mapping in /proc/self/smaps).
    #[cfg(test)]
    pub(crate) fn mapped_at(&self) -> usize {
        self.mapping().map.as_ptr() as usize
    }

    pub fn batches(&self) -> usize {
        match &self.held {
            Held::Mapped { blocks, .. } => blocks.len(),
            Held::Loaded(loaded) => loaded.batches.len(),
        }
    }

    /// A decoder of the columns `projection` (indexes in the stream's schema).
    ///
    /// From a mapped file, Arrow's own checks are skipped while decoding and made by
    /// [`validate`] on the decoded batch instead (the same checks, faster for ASCII text);
    /// [`Self::batch`] always runs them. A preloaded file's batches were checked as it was read.
    pub fn decoder(&self, projection: &[usize]) -> BatchDecoder {
        BatchDecoder {
            projection: projection.to_vec(),
            ipc: match &self.held {
                Held::Mapped {
                    schema, version, ..
                } => Some(unsafe_unchecked_decoder(schema, *version, projection)),
                Held::Loaded(_) => None,
            },
        }
    }

    /// The `index`-th batch's columns of `decoder`: decoded in place from a mapped file, or
    /// picked from a preloaded one's.
    pub fn batch(&self, decoder: &BatchDecoder, index: usize) -> Result<RecordBatch> {
        let missing = || {
            ConnectorError::Schema(format!(
                "events_file '{}': no batch {index}",
                self.path.display()
            ))
        };
        let mapping = match &self.held {
            Held::Loaded(loaded) => {
                let batch = loaded.batches.get(index).ok_or_else(missing)?;
                return batch.project(&decoder.projection).map_err(arrow);
            }
            Held::Mapped { mapping, .. } => mapping,
        };
        let ipc = decoder.ipc.as_ref().ok_or_else(missing)?;
        let (start, len) = self.block_range(index)?;
        let data = Buffer::from(bytes::Bytes::from_owner(BatchPages {
            mapping: mapping.clone(),
            start,
            len,
        }));
        self.decode(ipc, index, data)
    }

    /// Where the `index`-th batch lies in a mapped file: its start and length.
    fn block_range(&self, index: usize) -> Result<(usize, usize)> {
        let past = || {
            ConnectorError::Schema(format!(
                "events_file '{}': batch {index} lies past the file's end",
                self.path.display()
            ))
        };
        let Held::Mapped {
            mapping, blocks, ..
        } = &self.held
        else {
            return Err(past());
        };
        let block = blocks.get(index).ok_or_else(past)?;
        let len = block.bodyLength() as usize + block.metaDataLength() as usize;
        let start = block.offset() as usize;
        if start
            .checked_add(len)
            .is_none_or(|end| end > mapping.map.len())
        {
            return Err(past());
        }
        Ok((start, len))
    }

    /// The `index`-th batch of a mapped file decoded by `decoder` from `data` (its bytes),
    /// and checked.
    fn decode(&self, decoder: &FileDecoder, index: usize, data: Buffer) -> Result<RecordBatch> {
        let Held::Mapped { blocks, .. } = &self.held else {
            return Err(ConnectorError::Schema(format!(
                "events_file '{}': preloaded, not decoded",
                self.path.display()
            )));
        };
        let block = &blocks[index];
        let bad = |what: String| {
            ConnectorError::Schema(format!(
                "events_file '{}': batch {index} {what}",
                self.path.display()
            ))
        };
        // Decoding without Arrow's checks can meet a buffer too short for its column, which
        // panics as it is sliced: that is a corrupt file, reported as such.
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.read_record_batch(block, &data)
        }))
        .map_err(|_| bad("is corrupt (a buffer is shorter than its column)".into()))?
        .map_err(|e| bad(format!("is corrupt: {e}")))?
        .ok_or_else(|| bad("is missing".into()))?;
        validate(&decoded).map_err(|e| bad(format!("is corrupt: {e}")))?;
        Ok(decoded)
    }
}
