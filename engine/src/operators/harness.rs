//! A harness that runs one operator outside the runtime, for unit tests.
//!
//! It plays the runtime's part around a stage of one operator: rows reach the instances
//! through the real keyed exchange ([`Outlet`], so by [`crate::partition_of_rows`]), watermarks
//! and barriers reach every instance, each instance keeps its state in its own
//! [`MemoryStateBackend`], and a barrier copies every store as the runtime checkpoints it. A
//! [`Checkpoint`] restores in place at the same parallelism, or at another one, where each new
//! instance keeps the stored rows that route to it (as a restart of a rescaled job does).
//!
//! ```ignore
//! let op = OperatorUnderTest::new(spec, vec![Partitioning::Hash(keys)]);
//! let mut h = op.start(3)?;
//! h.batch(0, rows)?;
//! let checkpoint = h.barrier()?;
//! let mut h = op.restore(&checkpoint, 2)?;
//! h.watermark(10)?;
//! let emitted = h.take_output();
//! ```

use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};
use crate::graph::{OperatorFactory, Partitioning, TaskInfo};
use crate::message::{EventTime, Message, WATERMARK_MAX};
use crate::metrics::JobMetrics;
use crate::operator::{Operator, Output};
use crate::runtime::{Outlet, TaskExit};
use crate::state::{MemoryStateBackend, RestoreSet, StateBackend, StateHandle, TaskState};

/// An operator and how its stage is fed: what the harness starts and restores.
pub(crate) struct OperatorUnderTest {
    factory: Arc<dyn OperatorFactory>,
    /// How rows of each logical input reach the instances (the planner's exchange).
    routing: Vec<Partitioning>,
    memory_budget: usize,
}

/// What a barrier left: every instance's store as it stood after the snapshot.
#[derive(Clone)]
pub(crate) struct Checkpoint {
    pub epoch: u64,
    stores: Vec<Arc<MemoryStateBackend>>,
}

/// Running instances of one operator.
pub(crate) struct Harness {
    instances: Vec<Instance>,
    /// Per input: the exchange and the receiving end of each instance's channel.
    inputs: Vec<(Outlet, Vec<Receiver<Message>>)>,
    metrics: Arc<JobMetrics>,
    epoch: u64,
    output: Vec<RecordBatch>,
}

struct Instance {
    operator: Box<dyn Operator>,
    store: Arc<MemoryStateBackend>,
}

impl OperatorUnderTest {
    /// `routing[i]`: how rows of input `i` are routed; unlimited memory.
    pub fn new(factory: impl OperatorFactory + 'static, routing: Vec<Partitioning>) -> Self {
        Self {
            factory: Arc::new(factory),
            routing,
            memory_budget: usize::MAX,
        }
    }

    /// Instances may hold `bytes` in memory before they spill to their store.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// `parallelism` fresh instances.
    pub fn start(&self, parallelism: usize) -> Result<Harness> {
        let states = (0..parallelism)
            .map(|_| (Arc::new(MemoryStateBackend::default()), None))
            .collect();
        self.launch(states, 0)
    }

    /// `parallelism` instances restored from `checkpoint`: in place when the parallelism is
    /// the checkpoint's, else each from every old store, keeping the rows routed to it.
    pub fn restore(&self, checkpoint: &Checkpoint, parallelism: usize) -> Result<Harness> {
        let states = if checkpoint.stores.len() == parallelism {
            checkpoint
                .stores
                .iter()
                .map(|old| {
                    let working = Arc::new(old.copy()?);
                    let restore = RestoreSet {
                        stores: vec![Arc::clone(&working) as Arc<dyn StateBackend>],
                        repartition: None,
                    };
                    Ok((working, Some(restore)))
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            (0..parallelism)
                .map(|instance| {
                    let stores = checkpoint
                        .stores
                        .iter()
                        .map(|s| Ok(Arc::new(s.copy()?) as Arc<dyn StateBackend>))
                        .collect::<Result<Vec<_>>>()?;
                    let restore = RestoreSet {
                        stores,
                        repartition: Some((instance, parallelism)),
                    };
                    Ok((Arc::new(MemoryStateBackend::default()), Some(restore)))
                })
                .collect::<Result<Vec<_>>>()?
        };
        self.launch(states, checkpoint.epoch)
    }

    fn launch(
        &self,
        states: Vec<(Arc<MemoryStateBackend>, Option<RestoreSet>)>,
        restored_epoch: u64,
    ) -> Result<Harness> {
        let parallelism = states.len();
        let metrics = Arc::new(JobMetrics::default());
        let mut instances = Vec::with_capacity(parallelism);
        for (instance, (store, restore)) in states.into_iter().enumerate() {
            let working: Arc<dyn StateBackend> = store.clone();
            let task_state =
                TaskState::with_store(working, restore).with_memory_budget(self.memory_budget);
            let info = TaskInfo {
                job: "harness".into(),
                stage: "under test".into(),
                instance,
                parallelism,
                metrics: Arc::clone(&metrics),
                state: StateHandle::new(Arc::new(task_state), 0),
                restored_epoch,
            };
            instances.push(Instance {
                operator: self.factory.create(&info)?,
                store,
            });
        }
        let inputs = self
            .routing
            .iter()
            .map(|partitioning| {
                let (senders, receivers): (Vec<_>, Vec<_>) =
                    (0..parallelism).map(|_| unbounded()).unzip();
                (Outlet::new(partitioning.clone(), senders), receivers)
            })
            .collect();
        Ok(Harness {
            instances,
            inputs,
            metrics,
            epoch: restored_epoch,
            output: Vec::new(),
        })
    }
}

impl Harness {
    /// Routes `batch` of logical input `input` through the exchange and has every instance
    /// that received rows process them.
    pub fn batch(&mut self, input: usize, batch: RecordBatch) -> Result<()> {
        let (outlet, receivers) = self
            .inputs
            .get_mut(input)
            .ok_or_else(|| EngineError::Internal(format!("no input {input}")))?;
        outlet.send_batch(batch).map_err(|e| match e {
            TaskExit::Failed(e) => e,
            TaskExit::Disconnected => EngineError::Internal("exchange disconnected".into()),
        })?;
        for (instance, receiver) in self.instances.iter_mut().zip(receivers.iter()) {
            while let Ok(message) = receiver.try_recv() {
                let Message::Batch(rows) = message else {
                    continue;
                };
                let mut out = Output::default();
                instance.operator.process_batch(rows, input, &mut out)?;
                self.output.extend(out.take());
            }
        }
        Ok(())
    }

    /// The watermark of every input reached `watermark`.
    pub fn watermark(&mut self, watermark: EventTime) -> Result<()> {
        for instance in &mut self.instances {
            let mut out = Output::default();
            instance.operator.on_watermark(watermark, &mut out)?;
            self.output.extend(out.take());
        }
        Ok(())
    }

    /// Every instance's timer is due (as the runtime calls it, for operators with one).
    pub fn timer(&mut self) -> Result<()> {
        for instance in &mut self.instances {
            if instance.operator.timer_interval().is_some() {
                let mut out = Output::default();
                instance.operator.on_timer(&mut out)?;
                self.output.extend(out.take());
            }
        }
        Ok(())
    }

    /// A barrier of the next epoch: every instance emits what it holds in memory and
    /// snapshots (as the runtime does), then its store is copied.
    pub fn barrier(&mut self) -> Result<Checkpoint> {
        self.epoch += 1;
        let mut stores = Vec::with_capacity(self.instances.len());
        for instance in &mut self.instances {
            let mut out = Output::default();
            instance.operator.prepare_barrier(&mut out)?;
            self.output.extend(out.take());
            instance.operator.snapshot(self.epoch)?;
            stores.push(Arc::new(instance.store.copy()?));
        }
        Ok(Checkpoint {
            epoch: self.epoch,
            stores,
        })
    }

    /// Every input ended: the watermark becomes +infinity, then each instance finishes.
    pub fn end(&mut self) -> Result<()> {
        self.watermark(WATERMARK_MAX)?;
        for instance in &mut self.instances {
            let mut out = Output::default();
            instance.operator.finish(&mut out)?;
            self.output.extend(out.take());
        }
        Ok(())
    }

    /// What the instances emitted since the last call, in order (instances in turn).
    pub fn take_output(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.output)
    }

    /// Rows dropped as late so far.
    pub fn late_rows(&self) -> u64 {
        self.metrics.snapshot().late_rows
    }

    /// Entries in the instances' stores and window parts in their part files now (state
    /// spilled or snapshotted, not yet fired).
    pub fn stored_entries(&self) -> Result<usize> {
        let mut n = 0;
        for instance in &self.instances {
            let (lo, hi) = (&[][..], &[u8::MAX; 4][..]);
            n += instance.store.scan(lo, hi)?.len();
            n += instance.store.parts().scan(lo, hi)?.len();
        }
        Ok(n)
    }
}

/// Every row of `batches`, each column cast to BIGINT (timestamps as nanoseconds), sorted:
/// output compared as a multiset of rows.
pub(crate) fn int_rows(batches: &[RecordBatch]) -> Vec<Vec<Option<i64>>> {
    let mut rows = Vec::new();
    for b in batches {
        let columns: Vec<_> = b
            .columns()
            .iter()
            .map(|c| cast(c, &DataType::Int64).expect("column as BIGINT"))
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                columns
                    .iter()
                    .map(|c| {
                        let c = c.as_primitive::<Int64Type>();
                        c.is_valid(i).then(|| c.value(i))
                    })
                    .collect(),
            );
        }
    }
    rows.sort();
    rows
}

/// A small deterministic pseudo-random sequence (xorshift64*), so tests need no crate.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}
