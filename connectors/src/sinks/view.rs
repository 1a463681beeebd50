//! Materialized views: `CREATE MATERIALIZED VIEW name AS SELECT ...` runs a job whose rows
//! weir keeps in a RocksDB store of its own (`DATA/jobs/<name>/view`), and `SELECT ... FROM
//! name` reads them as a bounded table.
//!
//! Read committed: the view sink stages each epoch's rows under `s | epoch | run | seq` at the
//! barrier (pre-commit); after the checkpoint's manifest the committer moves them to
//! `c | epoch | run | seq` in one atomic write batch. Readers scan only `c`, through one
//! RocksDB iterator (a consistent snapshot), so they see whole checkpoints and never a part
//! of one. Recovery commits the restored checkpoint's epochs and drops every other staged
//! row. At-least-once writes straight to `c` (a replay may then add rows again).
//!
//! A view of an updating query (DESIGN.md §8) holds its current result instead: staged epochs
//! are changelog batches, and the commit applies them, in the same atomic write batch that
//! drops them, to `t | row -> count` (the result as a multiset of rows, each in arrow's row
//! encoding). Readers scan `t`. Applying changes to a multiset is not idempotent, so such a
//! view is exactly-once only, unless its rows have a key (a GROUP BY's keys, a Top-N's
//! partition and number, DESIGN.md §8): then changes are upserts and deletes by key into
//! `k | key row -> row`, which a replay repeats harmlessly, and an at-least-once view applies
//! them as they arrive.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use weir_engine::changelog;
use weir_engine::checkpoint::Committer;
use weir_engine::operator::MAX_BATCH_ROWS;
use weir_engine::state::{
    decode_batch, encode_batch, RocksDbStateBackend, StateBackend, WriteBatch,
};
use weir_engine::{
    EngineError, Operator, OperatorFactory, Output, Result as EngineResult, SourceFactory,
    SourcePoll, SourceReader, TaskInfo,
};

const STAGED: u8 = b's';
const COMMITTED: u8 = b'c';
/// The current result of an updating view: `t | row -> count`.
const TABLE: u8 = b't';
/// The current result of an updating view whose rows have a key: `k | key row -> row`.
const KEYED: u8 = b'k';

fn key(area: u8, epoch: u64, run: u64, seq: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(21);
    k.push(area);
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(&run.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn epoch_range(area: u8, epoch: u64) -> (Vec<u8>, Vec<u8>) {
    let mut lo = vec![area];
    lo.extend_from_slice(&epoch.to_be_bytes());
    let hi = match epoch.checked_add(1) {
        Some(next) => {
            let mut hi = vec![area];
            hi.extend_from_slice(&next.to_be_bytes());
            hi
        }
        None => vec![area + 1],
    };
    (lo, hi)
}

fn open_store(dir: &Path) -> EngineResult<Arc<RocksDbStateBackend>> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| EngineError::io(format!("cannot create '{}'", parent.display()), e))?;
    }
    RocksDbStateBackend::open_shared(dir)
}

/// The committed rows of a view, in commit order.
pub fn committed_batches(dir: &Path) -> EngineResult<Vec<RecordBatch>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let store = open_store(dir)?;
    store
        .scan(&[COMMITTED], &[COMMITTED + 1])?
        .into_iter()
        .map(|(_, v)| decode_batch(&v))
        .collect()
}

/// The current result of an updating view, in batches of up to [`MAX_BATCH_ROWS`] rows.
pub fn committed_table(dir: &Path, schema: &SchemaRef) -> EngineResult<Vec<RecordBatch>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let store = open_store(dir)?;
    let mut rows = store.scan(&[TABLE], &[TABLE + 1])?;
    // Rows kept by key hold the row as their value, once.
    rows.extend(
        store
            .scan(&[KEYED], &[KEYED + 1])?
            .into_iter()
            .map(|(_, row)| {
                let mut k = vec![KEYED];
                k.extend(row);
                (k, 1i64.to_le_bytes().to_vec())
            }),
    );
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let converter = row_converter(schema)?;
    let parser = converter.parser();
    let mut batches = Vec::new();
    for chunk in rows.chunks(MAX_BATCH_ROWS) {
        let mut parsed = Vec::with_capacity(chunk.len());
        for (k, v) in chunk {
            let count = v
                .as_slice()
                .try_into()
                .map(i64::from_le_bytes)
                .map_err(|_| EngineError::State("view row count is malformed".into()))?;
            for _ in 0..count.max(0) {
                parsed.push(parser.parse(&k[1..]));
            }
        }
        let columns = converter.convert_rows(parsed)?;
        let options =
            RecordBatchOptions::new().with_row_count(Some(columns.first().map_or(0, |c| c.len())));
        batches.push(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &options,
        )?);
    }
    Ok(batches)
}

fn row_converter(schema: &SchemaRef) -> EngineResult<RowConverter> {
    Ok(RowConverter::new(
        schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

/// Applies the changelog `batches` (change kinds last) to the current result: by key (the
/// `k` area, each key's last change wins) when the rows have one, else to the `t` multiset,
/// where `writes` gets the new count of every row they touch.
fn apply_changes(
    store: &dyn StateBackend,
    relation: &SchemaRef,
    unique_key: Option<&[usize]>,
    batches: &[RecordBatch],
    writes: &mut WriteBatch,
) -> EngineResult<()> {
    let converter = row_converter(relation)?;
    if let Some(key_columns) = unique_key {
        let key_schema = Arc::new(relation.project(key_columns)?);
        let keys = row_converter(&key_schema)?;
        let mut last: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>> =
            std::collections::HashMap::new();
        for batch in batches {
            let ops = changelog::ops(batch)?;
            let rel = changelog::relation(batch)?;
            let rows = converter.convert_columns(rel.columns())?;
            // No key columns (a global aggregate): one row, under the empty key.
            let key_rows = (!key_columns.is_empty())
                .then(|| keys.convert_columns(rel.project(key_columns)?.columns()))
                .transpose()?;
            for i in 0..rel.num_rows() {
                let key_row = key_rows.as_ref().map_or(&[][..], |k| k.row(i).data());
                let mut key = Vec::with_capacity(1 + key_row.len());
                key.push(KEYED);
                key.extend_from_slice(key_row);
                let add = changelog::Op::from_code(ops.value(i))?.is_add();
                last.insert(key, add.then(|| rows.row(i).data().to_vec()));
            }
        }
        for (key, row) in last {
            match row {
                Some(row) => writes.puts.push((key, row)),
                None => {
                    let mut end = key.clone();
                    end.push(0);
                    writes.delete_ranges.push((key, end));
                }
            }
        }
        return Ok(());
    }
    let mut deltas: std::collections::HashMap<Vec<u8>, i64> = std::collections::HashMap::new();
    for batch in batches {
        let ops = changelog::ops(batch)?;
        let rows = converter.convert_columns(changelog::relation(batch)?.columns())?;
        for (i, row) in rows.iter().enumerate() {
            let sign = if changelog::Op::from_code(ops.value(i))?.is_add() {
                1
            } else {
                -1
            };
            let mut key = Vec::with_capacity(1 + row.data().len());
            key.push(TABLE);
            key.extend_from_slice(row.data());
            *deltas.entry(key).or_default() += sign;
        }
    }
    for (key, delta) in deltas {
        if delta == 0 {
            continue;
        }
        let had = store
            .get(&key)?
            .map_or(0, |v| v.as_slice().try_into().map_or(0, i64::from_le_bytes));
        let has = had + delta;
        if has > 0 {
            writes.puts.push((key, has.to_le_bytes().to_vec()));
        } else {
            let mut end = key.clone();
            end.push(0);
            writes.delete_ranges.push((key, end));
        }
    }
    Ok(())
}

/// Plan node of a view's sink.
#[derive(Debug, Clone)]
pub struct ViewSinkFactory {
    pub view: String,
    pub dir: PathBuf,
    /// The rows the sink receives (an updating view's end in their change kinds).
    pub schema: SchemaRef,
    pub exactly_once: bool,
    /// For a view of an updating query: the relation it holds (`schema` without the change
    /// kinds). Its commits apply changes to the current result.
    pub updating: Option<SchemaRef>,
    /// For an updating query whose rows have a key: its columns. Changes are then applied as
    /// upserts and deletes by key (`k | key row -> row`), which a replay repeats harmlessly,
    /// so the view may be at-least-once.
    pub unique_key: Option<Vec<usize>>,
}

impl OperatorFactory for ViewSinkFactory {
    fn describe(&self) -> String {
        format!("ViewSink: materialized view {}", self.view)
    }

    fn create(&self, task: &TaskInfo) -> EngineResult<Box<dyn Operator>> {
        Ok(Box::new(ViewSinkOperator {
            spec: self.clone(),
            info: task.clone(),
            store: open_store(&self.dir)?,
            pending: Vec::new(),
            run: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            seq: 0,
            epoch: task.restored_epoch + 1,
        }))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        Some(Arc::new(ViewCommitter {
            dir: self.dir.clone(),
            updating: self.updating.clone(),
            unique_key: self.unique_key.clone(),
        }))
    }
}

struct ViewSinkOperator {
    spec: ViewSinkFactory,
    info: TaskInfo,
    store: Arc<RocksDbStateBackend>,
    pending: Vec<RecordBatch>,
    /// Keeps the rows of different runs apart (at-least-once replays).
    run: u64,
    seq: u32,
    epoch: u64,
}

impl ViewSinkOperator {
    fn write(&mut self, area: u8) -> EngineResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = concat_batches(&self.spec.schema, &std::mem::take(&mut self.pending))?;
        self.seq += 1;
        self.store.write(WriteBatch {
            puts: vec![(
                key(area, self.epoch, self.run, self.seq),
                encode_batch(&rows)?,
            )],
            delete_ranges: vec![],
            adds: vec![],
        })
    }
}

impl Operator for ViewSinkOperator {
    fn name(&self) -> &str {
        "ViewSink"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> EngineResult<()> {
        self.info.metrics.add_rows_out(batch.num_rows() as u64);
        if let (false, Some(relation)) = (self.spec.exactly_once, &self.spec.updating) {
            // At-least-once (keyed only): changes go straight into the current result.
            let mut writes = WriteBatch::default();
            apply_changes(
                self.store.as_ref(),
                relation,
                self.spec.unique_key.as_deref(),
                &[batch],
                &mut writes,
            )?;
            return self.store.write(writes);
        }
        self.pending.push(batch);
        if !self.spec.exactly_once {
            self.write(COMMITTED)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, epoch: u64) -> EngineResult<Option<Vec<u8>>> {
        let staged = !self.pending.is_empty();
        if self.spec.exactly_once {
            self.write(STAGED)?;
        }
        self.epoch = epoch + 1;
        self.seq = 0;
        Ok((staged && self.spec.exactly_once).then(|| epoch.to_be_bytes().to_vec()))
    }
}

/// Moves staged epochs to the committed area (an updating view: applies them to its
/// current result).
struct ViewCommitter {
    dir: PathBuf,
    updating: Option<SchemaRef>,
    unique_key: Option<Vec<usize>>,
}

impl Committer for ViewCommitter {
    fn commit(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        let store = open_store(&self.dir)?;
        for p in payloads {
            let epoch =
                u64::from_be_bytes(p.as_slice().try_into().map_err(|_| {
                    EngineError::State("view commit payload is not an epoch".into())
                })?);
            let (lo, hi) = epoch_range(STAGED, epoch);
            match &self.updating {
                None => commit_staged(store.as_ref(), lo, hi, COMMITTED)?,
                Some(relation) => {
                    // Changes and the removal of what they were staged as go in one atomic
                    // write: a commit repeated after a crash finds nothing staged.
                    let staged = store.scan(&lo, &hi)?;
                    if staged.is_empty() {
                        continue;
                    }
                    let batches = staged
                        .iter()
                        .map(|(_, v)| decode_batch(v))
                        .collect::<EngineResult<Vec<_>>>()?;
                    let mut writes = WriteBatch::default();
                    apply_changes(
                        store.as_ref(),
                        relation,
                        self.unique_key.as_deref(),
                        &batches,
                        &mut writes,
                    )?;
                    writes.delete_ranges.push((lo, hi));
                    store.write(writes)?;
                }
            }
        }
        Ok(())
    }

    fn recover(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.commit(payloads)?;
        let store = open_store(&self.dir)?;
        store.write(WriteBatch {
            puts: vec![],
            delete_ranges: vec![(vec![STAGED], vec![STAGED + 1])],
            adds: vec![],
        })
    }
}

/// Moves the staged entries in `lo..hi` to area `committed` (the key's first byte) in one
/// atomic write; nothing when there are none (committed before: commits are idempotent).
pub(crate) fn commit_staged(
    store: &dyn StateBackend,
    lo: Vec<u8>,
    hi: Vec<u8>,
    committed: u8,
) -> EngineResult<()> {
    let staged = store.scan(&lo, &hi)?;
    if staged.is_empty() {
        return Ok(());
    }
    let puts = staged
        .into_iter()
        .map(|(mut k, v)| {
            k[0] = committed;
            (k, v)
        })
        .collect();
    store.write(WriteBatch {
        puts,
        delete_ranges: vec![(lo, hi)],
        adds: vec![],
    })
}

/// Reads a view's committed rows as a bounded source.
#[derive(Debug, Clone)]
pub struct ViewSourceFactory {
    pub view: String,
    pub dir: PathBuf,
    pub schema: SchemaRef,
}

impl SourceFactory for ViewSourceFactory {
    fn describe(&self) -> String {
        format!(
            "ViewSource: committed rows of materialized view {}",
            self.view
        )
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn create(
        &self,
        _task: &TaskInfo,
        position: Option<&[u8]>,
    ) -> EngineResult<Box<dyn SourceReader>> {
        // A view holds appended rows (`c`) or, for an updating query, its current result
        // (`t`); the other area is empty.
        let mut batches = committed_batches(&self.dir)?;
        batches.extend(committed_table(&self.dir, &self.schema)?);
        Ok(Box::new(BatchReader::new(
            Arc::clone(&self.schema),
            batches,
            position,
        )))
    }
}

/// Reads batches read from a store as a bounded source; its position is how many it read.
pub(crate) struct BatchReader {
    schema: SchemaRef,
    batches: std::vec::IntoIter<RecordBatch>,
    read: u64,
}

impl BatchReader {
    /// Reads `batches`, from `position` (a count of batches already read) on.
    pub(crate) fn new(
        schema: SchemaRef,
        mut batches: Vec<RecordBatch>,
        position: Option<&[u8]>,
    ) -> Self {
        let skip = position
            .and_then(|p| p.try_into().ok())
            .map_or(0, u64::from_be_bytes) as usize;
        batches.drain(..skip.min(batches.len()));
        Self {
            schema,
            batches: batches.into_iter(),
            read: skip as u64,
        }
    }
}

impl SourceReader for BatchReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn poll_next(&mut self) -> EngineResult<SourcePoll> {
        match self.batches.next() {
            Some(b) => {
                self.read += 1;
                Ok(SourcePoll::Batch(b))
            }
            None => Ok(SourcePoll::Exhausted),
        }
    }

    fn position(&self) -> Vec<u8> {
        self.read.to_be_bytes().to_vec()
    }
}
