//! Late-rows tables: `late_rows = 'name'` on a source table keeps the rows weir drops as late
//! (DESIGN.md §3) in a store of their own (`DATA/late_rows/<name>`, in memory without a data
//! directory), readable as the bounded table `name`: the row's columns, the watermark it
//! missed, why, and the job that dropped it.
//!
//! Every stage that judges lateness (a source's window assigner, the session operator) writes
//! its late rows through a [`LateRowsWriterFactory`] in each of its instances. In an
//! exactly-once job the rows of an epoch are staged under `s | job | stage | epoch | ...` at
//! the barrier and moved to `c | ...` by the committer once the checkpoint's manifest is
//! written, in one atomic write batch, exactly like a materialized view: a reader sees the late
//! rows of whole checkpoints, each once. Recovery commits what the restored checkpoint staged
//! and drops the rest of that stage's staged rows. Ad-hoc queries and at-least-once jobs write
//! straight to `c`.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_engine::checkpoint::Committer;
use weir_engine::late_rows::late_schema;
use weir_engine::state::{
    decode_batch, encode_batch, prefix_end, MemoryStateBackend, RocksDbStateBackend, StateBackend,
    WriteBatch,
};
use weir_engine::{
    EngineError, Operator, OperatorFactory, Output, Result as EngineResult, SourceFactory,
    SourceReader, TaskInfo,
};

use super::view::{commit_staged, BatchReader};

/// The column naming the job that dropped a late row (`query-<n>` for an ad-hoc query).
pub const LATE_JOB: &str = "late_job";
/// The columns a late-rows table adds to its source table's.
pub const LATE_COLUMNS: [&str; 3] = [
    weir_engine::late_rows::LATE_WATERMARK,
    weir_engine::late_rows::LATE_REASON,
    LATE_JOB,
];

const STAGED: u8 = b's';
const COMMITTED: u8 = b'c';

/// Where a late-rows table keeps its rows.
#[derive(Debug, Clone)]
enum Store {
    Dir(PathBuf),
    Memory(Arc<MemoryStateBackend>),
}

/// The late-rows table of one source table.
#[derive(Debug, Clone)]
pub struct LateRowsTable {
    /// The late-rows table's name.
    pub name: String,
    /// The table whose late rows it keeps.
    pub table: String,
    /// The table's columns, then `late_watermark`, `late_reason`, `late_job`.
    pub schema: SchemaRef,
    store: Store,
}

/// The prefix of a job's (and one of its stages') keys in `area`.
fn job_prefix(area: u8, job: &str, stage: Option<u32>) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + job.len());
    k.push(area);
    k.extend_from_slice(&(job.len() as u32).to_be_bytes());
    k.extend_from_slice(job.as_bytes());
    if let Some(stage) = stage {
        k.extend_from_slice(&stage.to_be_bytes());
    }
    k
}

impl LateRowsTable {
    /// The late-rows table `name` of `table` (with columns `table_schema`), kept under `dir`
    /// (`None`: in memory, for sessions without a data directory).
    pub fn new(name: &str, table: &str, table_schema: &Schema, dir: Option<PathBuf>) -> Self {
        let mut fields: Vec<Field> = late_schema(table_schema)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(LATE_JOB, DataType::Utf8, false));
        Self {
            name: name.to_string(),
            table: table.to_string(),
            schema: Arc::new(Schema::new(fields)),
            store: match dir {
                Some(d) => Store::Dir(d),
                None => Store::Memory(Arc::default()),
            },
        }
    }

    fn store(&self) -> EngineResult<Arc<dyn StateBackend>> {
        match &self.store {
            Store::Dir(dir) => {
                if let Some(parent) = dir.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        EngineError::io(format!("cannot create '{}'", parent.display()), e)
                    })?;
                }
                Ok(RocksDbStateBackend::open_shared(dir)?)
            }
            Store::Memory(m) => Ok(Arc::clone(m) as Arc<dyn StateBackend>),
        }
    }

    /// The committed late rows, in key order (by job, stage, epoch).
    pub fn committed(&self) -> EngineResult<Vec<RecordBatch>> {
        if let Store::Dir(dir) = &self.store {
            if !dir.exists() {
                return Ok(Vec::new());
            }
        }
        self.store()?
            .scan(&[COMMITTED], &[COMMITTED + 1])?
            .into_iter()
            .map(|(_, v)| decode_batch(&v))
            .collect()
    }

    /// Deletes every row (the table was dropped) and the store's directory.
    pub fn destroy(&self) -> EngineResult<()> {
        match &self.store {
            Store::Dir(dir) => {
                RocksDbStateBackend::close_shared(dir);
                match std::fs::remove_dir_all(dir) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(EngineError::io(
                        format!("cannot delete '{}'", dir.display()),
                        e,
                    )),
                }
            }
            Store::Memory(m) => m.write(WriteBatch {
                puts: vec![],
                delete_ranges: vec![(vec![0], vec![u8::MAX])],
                adds: vec![],
            }),
        }
    }

    /// The writer of stage `stage` of `job`. `staged`: rows wait for the checkpoint that
    /// covers them (exactly-once jobs); otherwise they are visible at once.
    pub fn writer(&self, job: &str, stage: usize, staged: bool) -> LateRowsWriterFactory {
        LateRowsWriterFactory {
            table: self.clone(),
            job: job.to_string(),
            stage: stage as u32,
            staged,
        }
    }

    /// The table's committed rows as a bounded source.
    pub fn source(&self) -> LateRowsSourceFactory {
        LateRowsSourceFactory {
            table: self.clone(),
        }
    }
}

/// Plan node of a stage's late-rows writer.
#[derive(Debug, Clone)]
pub struct LateRowsWriterFactory {
    table: LateRowsTable,
    job: String,
    stage: u32,
    staged: bool,
}

impl OperatorFactory for LateRowsWriterFactory {
    fn uses_memory_budget(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!(
            "LateRows: into {} ({})",
            self.table.name,
            if self.staged {
                "committed with checkpoints"
            } else {
                "visible at once"
            }
        )
    }

    fn create(&self, task: &TaskInfo) -> EngineResult<Box<dyn Operator>> {
        Ok(Box::new(LateRowsWriter {
            spec: self.clone(),
            store: self.table.store()?,
            instance: task.instance as u32,
            run: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            epoch: task.restored_epoch + 1,
            seq: 0,
            pending: Vec::new(),
        }))
    }

    fn committer(&self) -> Option<Arc<dyn Committer>> {
        self.staged.then(|| {
            Arc::new(LateRowsCommitter {
                table: self.table.clone(),
                job: self.job.clone(),
                stage: self.stage,
            }) as Arc<dyn Committer>
        })
    }
}

struct LateRowsWriter {
    spec: LateRowsWriterFactory,
    store: Arc<dyn StateBackend>,
    instance: u32,
    /// Keeps the rows of different runs apart (a replay after a restart reuses epochs).
    run: u64,
    epoch: u64,
    seq: u32,
    pending: Vec<RecordBatch>,
}

impl LateRowsWriter {
    fn key(&self, area: u8) -> Vec<u8> {
        let mut k = job_prefix(area, &self.spec.job, Some(self.spec.stage));
        k.extend_from_slice(&self.epoch.to_be_bytes());
        k.extend_from_slice(&self.run.to_be_bytes());
        k.extend_from_slice(&self.instance.to_be_bytes());
        k.extend_from_slice(&self.seq.to_be_bytes());
        k
    }

    fn write(&mut self, area: u8) -> EngineResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let schema = &self.spec.table.schema;
        let rows = concat_batches(schema, &std::mem::take(&mut self.pending))?;
        self.seq += 1;
        let key = self.key(area);
        self.store.write(WriteBatch {
            puts: vec![(key, encode_batch(&rows)?)],
            delete_ranges: vec![],
            adds: vec![],
        })
    }

    /// The late rows the engine built, with the job's name added.
    fn with_job(&self, batch: RecordBatch) -> EngineResult<RecordBatch> {
        let schema = &self.spec.table.schema;
        let n = batch.num_rows();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns.push(Arc::new(StringArray::from(vec![self.spec.job.as_str(); n])));
        if columns.len() != schema.fields().len() {
            return Err(EngineError::Internal(format!(
                "late rows of {} have {} columns, the table {} has {}",
                self.spec.table.table,
                columns.len(),
                self.spec.table.name,
                schema.fields().len()
            )));
        }
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

impl Operator for LateRowsWriter {
    fn name(&self) -> &str {
        "LateRows"
    }

    fn process_batch(
        &mut self,
        batch: RecordBatch,
        _input: usize,
        _out: &mut Output,
    ) -> EngineResult<()> {
        let batch = self.with_job(batch)?;
        self.pending.push(batch);
        if !self.spec.staged {
            self.write(COMMITTED)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, epoch: u64) -> EngineResult<Option<Vec<u8>>> {
        let staged = self.spec.staged && !self.pending.is_empty();
        self.epoch = epoch;
        if self.spec.staged {
            self.write(STAGED)?;
        }
        self.epoch = epoch + 1;
        self.seq = 0;
        Ok(staged.then(|| epoch.to_be_bytes().to_vec()))
    }
}

/// Moves a stage's staged epochs to the committed area.
struct LateRowsCommitter {
    table: LateRowsTable,
    job: String,
    stage: u32,
}

impl Committer for LateRowsCommitter {
    fn commit(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        let store = self.table.store()?;
        for p in payloads {
            let epoch = u64::from_be_bytes(p.as_slice().try_into().map_err(|_| {
                EngineError::State("late rows commit payload is not an epoch".into())
            })?);
            let mut lo = job_prefix(STAGED, &self.job, Some(self.stage));
            lo.extend_from_slice(&epoch.to_be_bytes());
            let hi = prefix_end(&lo);
            commit_staged(store.as_ref(), lo, hi, COMMITTED)?;
        }
        Ok(())
    }

    fn recover(&self, payloads: &[Vec<u8>]) -> EngineResult<()> {
        self.commit(payloads)?;
        let lo = job_prefix(STAGED, &self.job, Some(self.stage));
        let hi = prefix_end(&lo);
        self.table.store()?.write(WriteBatch {
            puts: vec![],
            delete_ranges: vec![(lo, hi)],
            adds: vec![],
        })
    }
}

/// Reads a late-rows table's committed rows.
#[derive(Debug, Clone)]
pub struct LateRowsSourceFactory {
    table: LateRowsTable,
}

impl SourceFactory for LateRowsSourceFactory {
    fn describe(&self) -> String {
        format!(
            "LateRowsSource: committed late rows of table {} ({})",
            self.table.table, self.table.name
        )
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.table.schema)
    }

    fn create(
        &self,
        _task: &TaskInfo,
        position: Option<&[u8]>,
    ) -> EngineResult<Box<dyn SourceReader>> {
        Ok(Box::new(BatchReader::new(
            Arc::clone(&self.table.schema),
            self.table.committed()?,
            position,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{Int64Type, TimeUnit};
    use weir_engine::state::StateHandle;
    use weir_engine::JobMetrics;

    fn info(instance: usize, restored_epoch: u64) -> TaskInfo {
        TaskInfo {
            job: "j".into(),
            stage: "source t".into(),
            instance,
            parallelism: 2,
            metrics: Arc::new(JobMetrics::default()),
            state: StateHandle::new(
                Arc::new(weir_engine::state::TaskState::temporary(1 << 20)),
                0,
            ),
            restored_epoch,
        }
    }

    fn late(table: &LateRowsTable, k: &[i64]) -> RecordBatch {
        let own = Schema::new(table.schema.fields()[..3].to_vec());
        RecordBatch::try_new(
            late_schema(&own),
            vec![
                Arc::new(Int64Array::from(k.to_vec())),
                Arc::new(TimestampNanosecondArray::from(vec![0; k.len()])),
                Arc::new(StringArray::from(vec!["x"; k.len()])),
                Arc::new(TimestampNanosecondArray::from(vec![Some(5); k.len()])),
                Arc::new(StringArray::from(vec!["window closed"; k.len()])),
            ],
        )
        .unwrap()
    }

    fn keys(table: &LateRowsTable) -> Vec<i64> {
        let mut out: Vec<i64> = table
            .committed()
            .unwrap()
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn staged_rows_appear_only_when_their_checkpoint_commits() {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
            Field::new("s", DataType::Utf8, false),
        ]);
        let table = LateRowsTable::new("t_late", "t", &schema, None);
        assert_eq!(
            table.schema.fields().len(),
            6,
            "table columns + watermark, reason, job"
        );
        let stage0 = table.writer("j", 0, true);
        let stage1 = table.writer("j", 1, true);
        let (c0, c1) = (stage0.committer().unwrap(), stage1.committer().unwrap());
        let mut a = stage0.create(&info(0, 0)).unwrap();
        let mut b = stage1.create(&info(1, 0)).unwrap();
        let mut out = Output::default();
        a.process_batch(late(&table, &[1, 2]), 0, &mut out).unwrap();
        b.process_batch(late(&table, &[3]), 0, &mut out).unwrap();
        let pa = a.snapshot(1).unwrap().unwrap();
        assert_eq!(b.snapshot(1).unwrap().unwrap(), 1u64.to_be_bytes());
        assert!(keys(&table).is_empty(), "staged, not committed");
        c0.commit(std::slice::from_ref(&pa)).unwrap();
        assert_eq!(keys(&table), vec![1, 2]);
        // Staged after the checkpoint: a restart from epoch 1 drops stage 1's epoch-2 rows but
        // commits what epoch 1 staged; stage 0's recovery does not touch stage 1's rows.
        b.process_batch(late(&table, &[4]), 0, &mut out).unwrap();
        let pb2 = b.snapshot(2).unwrap().unwrap();
        c0.recover(&[pa]).unwrap();
        c1.recover(&[1u64.to_be_bytes().to_vec()]).unwrap();
        assert_eq!(keys(&table), vec![1, 2, 3]);
        c1.commit(&[pb2]).unwrap();
        assert_eq!(
            keys(&table),
            vec![1, 2, 3],
            "epoch 2 was dropped at recovery"
        );
        let job = table.committed().unwrap()[0]
            .column(5)
            .as_string::<i32>()
            .value(0)
            .to_string();
        assert_eq!(job, "j");
    }

    #[test]
    fn unstaged_rows_are_visible_at_once() {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
            Field::new("s", DataType::Utf8, false),
        ]);
        let table = LateRowsTable::new("t_late", "t", &schema, None);
        let w = table.writer("query-1", 0, false);
        assert!(w.committer().is_none());
        let mut op = w.create(&info(0, 0)).unwrap();
        op.process_batch(late(&table, &[7]), 0, &mut Output::default())
            .unwrap();
        assert_eq!(keys(&table), vec![7]);
        table.destroy().unwrap();
        assert!(keys(&table).is_empty());
    }
}
