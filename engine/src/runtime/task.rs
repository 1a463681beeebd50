//! The two task loops: a source task (reader, event-time assigner, chain) and an operator task
//! (input gate, chain). Both send what their chain emits through their outlets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use datafusion::arrow::record_batch::RecordBatch;

use crate::checkpoint::{JobDir, SourceCheckpoint, TaskId, TaskReport};
use crate::graph::TaskInfo;
use crate::message::{Barrier, BarrierKind, EventTime, Message, WATERMARK_MAX, WATERMARK_MIN};
use crate::metrics::TaskMetrics;
use crate::runtime::chain::Chain;
use crate::runtime::input_gate::{GateEvent, InputGate};
use crate::runtime::outlet::{Outlet, TaskExit};
use crate::runtime::split_clock::SplitClock;
use crate::source::{SourcePoll, SourceReader};
use crate::state::TaskState;

/// How long an idle source sleeps before polling again.
const IDLE_POLL: Duration = Duration::from_millis(2);
/// How often a finished source waiting for barriers checks for cancellation.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// What a task sends downstream: every output edge gets everything. Counts the rows and
/// the watermark it sends in the task's metrics.
pub struct Outlets {
    edges: Vec<Outlet>,
    metrics: TaskMetrics,
}

impl Outlets {
    pub fn new(edges: Vec<Outlet>, metrics: TaskMetrics) -> Self {
        Self { edges, metrics }
    }

    fn batches(&mut self, batches: Vec<RecordBatch>) -> Result<(), TaskExit> {
        for b in batches {
            self.metrics.rows_out(b.num_rows());
            match self.edges.as_mut_slice() {
                [] => {}
                [only] => only.send_batch(b)?,
                many => many.iter_mut().try_for_each(|o| o.send_batch(b.clone()))?,
            }
        }
        Ok(())
    }

    fn control(&self, msg: Message) -> Result<(), TaskExit> {
        self.edges.iter().try_for_each(|o| o.broadcast(&msg))
    }

    fn watermark(&mut self, chain: &mut Chain, w: EventTime) -> Result<(), TaskExit> {
        let out_wm = self.streaming(|emit| chain.on_watermark(w, emit))?;
        self.metrics.watermark(out_wm);
        self.control(Message::Watermark(out_wm))
    }

    /// The chain's timer is due: what its operators emit goes downstream.
    fn timer(&mut self, chain: &mut Chain) -> Result<(), TaskExit> {
        self.streaming(|emit| chain.on_timer(emit))
    }

    /// A barrier comes: what the chain's operators hold in memory goes downstream first.
    fn prepare_barrier(&mut self, chain: &mut Chain) -> Result<(), TaskExit> {
        self.streaming(|emit| chain.prepare_barrier(emit))
    }

    fn end(&mut self, chain: &mut Chain) -> Result<(), TaskExit> {
        self.streaming(|emit| chain.finish(emit))?;
        self.control(Message::End)
    }

    /// Runs `call` with an emitter that sends each batch downstream at once. A send that
    /// fails ends the call; its reason (a neighbour gone, or an error) is what comes back.
    fn streaming<R>(
        &mut self,
        call: impl FnOnce(
            &mut dyn FnMut(RecordBatch) -> crate::error::Result<()>,
        ) -> crate::error::Result<R>,
    ) -> Result<R, TaskExit> {
        let mut failed = None;
        let result = call(&mut |b| match self.batches(vec![b]) {
            Ok(()) => Ok(()),
            Err(exit) => {
                failed = Some(exit);
                Err(crate::error::EngineError::Internal(
                    "the task's output was closed".into(),
                ))
            }
        });
        match (failed, result) {
            (Some(exit), _) => Err(exit),
            (None, result) => Ok(result?),
        }
    }
}

/// A task's part in checkpoints (durable jobs only).
pub struct TaskCheckpoint {
    pub task: TaskId,
    pub reports: Sender<TaskReport>,
    pub state: Arc<TaskState>,
    pub dir: JobDir,
    /// The last barrier this task passed (or the restored epoch).
    pub last_epoch: u64,
}

impl TaskCheckpoint {
    /// Barrier `barrier` passed: snapshot the chain, checkpoint the store, acknowledge.
    fn ack(
        &mut self,
        chain: &mut Chain,
        barrier: Barrier,
        source: Option<SourceCheckpoint>,
    ) -> Result<(), TaskExit> {
        let commits = chain.snapshot(barrier.epoch)?;
        let relative = JobDir::state_checkpoint(barrier.epoch, self.task);
        let (state, error) = match self
            .state
            .checkpoint_to(&self.dir.checkpoints().join(&relative))
        {
            Ok(true) => (Some(relative), None),
            Ok(false) => (None, None),
            Err(e) => (None, Some(e)),
        };
        self.last_epoch = barrier.epoch;
        self.report(TaskReport::Ack {
            task: self.task,
            epoch: barrier.epoch,
            source,
            state,
            commits,
            error,
        });
        Ok(())
    }

    /// The task's input ended and everything was flushed: the sinks pre-commit the rest.
    fn finished(
        &mut self,
        chain: &mut Chain,
        source: Option<SourceCheckpoint>,
    ) -> Result<(), TaskExit> {
        let epoch = self.last_epoch + 1;
        let commits = chain.snapshot(epoch)?;
        self.report(TaskReport::Finished {
            task: self.task,
            source,
            commits,
            epoch,
        });
        Ok(())
    }

    fn report(&self, report: TaskReport) {
        // The coordinator is gone only when the job is being torn down.
        let _ = self.reports.send(report);
    }
}

/// A source task's checkpoint side: barrier requests from the coordinator.
pub struct SourceControl {
    pub barriers: Receiver<Barrier>,
    pub checkpoint: TaskCheckpoint,
}

fn source_checkpoint(
    task: TaskId,
    reader: &dyn SourceReader,
    clock: &SplitClock,
) -> SourceCheckpoint {
    SourceCheckpoint {
        task,
        position: reader.position(),
        watermark: clock.current(),
        splits: clock.split_watermarks(),
    }
}

/// Runs a source instance until it is exhausted, stopped or cancelled.
pub fn run_source_task(
    info: &TaskInfo,
    mut reader: Box<dyn SourceReader>,
    mut clock: SplitClock,
    mut chain: Chain,
    mut outlets: Outlets,
    cancel: &AtomicBool,
    mut control: Option<SourceControl>,
) -> Result<(), TaskExit> {
    let mut sent_watermark = WATERMARK_MIN;
    clock.sync(&reader.splits(), Instant::now());
    // A restored instance starts from its checkpointed watermark.
    let restored = clock.watermark(Instant::now());
    if restored > sent_watermark {
        sent_watermark = restored;
        outlets.watermark(&mut chain, sent_watermark)?;
    }
    let mut skipped = 0;
    let mut idle = false;
    let mut timer = ChainTimer::new(&chain);
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(TaskExit::Disconnected);
        }
        timer.fire_if_due(&mut chain, &mut outlets)?;
        if let Some(c) = control.as_mut() {
            while let Ok(barrier) = c.barriers.try_recv() {
                outlets.prepare_barrier(&mut chain)?;
                let position = source_checkpoint(c.checkpoint.task, reader.as_ref(), &clock);
                c.checkpoint.ack(&mut chain, barrier, Some(position))?;
                outlets.control(Message::Barrier(barrier))?;
                if barrier.kind == BarrierKind::Stop {
                    return Ok(());
                }
            }
        }
        let polled = reader.poll_next()?;
        let now = Instant::now();
        let (split, batch) = match polled {
            SourcePoll::Batch(batch) => (0, Some(batch)),
            SourcePoll::SplitBatch { split, batch } => (split, Some(batch)),
            SourcePoll::Pending => (0, None),
            SourcePoll::Exhausted => break,
        };
        clock.sync(&reader.splits(), now);
        match batch {
            Some(batch) => {
                if idle {
                    idle = false;
                    outlets.control(Message::Idle(false))?;
                }
                info.metrics.add_rows_in(batch.num_rows() as u64);
                outlets.metrics.rows_in(batch.num_rows());
                let assigned = clock.assign(split, batch, now)?;
                info.metrics.saw_event_time(clock.newest());
                if let Some((read, total)) = reader.progress() {
                    outlets.metrics.progress(read, total);
                }
                if assigned.late_rows > 0 {
                    info.metrics.add_late_rows(assigned.late_rows);
                }
                if let Some(late) = assigned.late {
                    chain.late(vec![late])?;
                }
                if let Some(batch) = assigned.batch {
                    let out = chain.process(batch, 0)?;
                    outlets.batches(out)?;
                }
            }
            None => std::thread::sleep(IDLE_POLL),
        }
        // Also without rows: a split may just have become idle.
        let w = clock.watermark(now);
        if w > sent_watermark {
            sent_watermark = w;
            outlets.watermark(&mut chain, w)?;
        }
        if !idle && clock.idle(now) {
            idle = true;
            outlets.control(Message::Idle(true))?;
        }
        let now_skipped = reader.skipped_rows();
        if now_skipped > skipped {
            info.metrics.add_skipped_rows(now_skipped - skipped);
            skipped = now_skipped;
        }
    }
    // A finished bounded source: its watermark becomes +infinity, so every window fires.
    outlets.watermark(&mut chain, WATERMARK_MAX)?;
    outlets.end(&mut chain)?;
    let Some(mut c) = control else {
        return Ok(());
    };
    let last = source_checkpoint(c.checkpoint.task, reader.as_ref(), &clock);
    c.checkpoint.finished(&mut chain, Some(last.clone()))?;
    // Checkpoints of the rest of the job go on: acknowledge them with the final position
    // until the coordinator is done.
    loop {
        match c.barriers.recv_timeout(IDLE_WAIT) {
            Ok(barrier) => {
                c.checkpoint.ack(&mut chain, barrier, Some(last.clone()))?;
                if barrier.kind == BarrierKind::Stop {
                    return Ok(());
                }
            }
            Err(RecvTimeoutError::Timeout) if cancel.load(Ordering::Relaxed) => return Ok(()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// Runs an operator task until all its inputs ended or a stop barrier passed.
pub fn run_operator_task(
    mut gate: InputGate,
    mut chain: Chain,
    mut outlets: Outlets,
    mut checkpoint: Option<TaskCheckpoint>,
) -> Result<(), TaskExit> {
    let mut timer = ChainTimer::new(&chain);
    loop {
        // Due while events kept coming: fire before waiting for more.
        timer.fire_if_due(&mut chain, &mut outlets)?;
        match gate.next_event(timer.due)? {
            GateEvent::Timer => timer.fire_if_due(&mut chain, &mut outlets)?,
            GateEvent::Batch(batch, input) => {
                outlets.metrics.rows_in(batch.num_rows());
                outlets.metrics.queued(gate.queued());
                let out = chain.process(batch, input)?;
                outlets.batches(out)?;
            }
            GateEvent::Watermark(w) => outlets.watermark(&mut chain, w)?,
            GateEvent::Idle(idle) => outlets.control(Message::Idle(idle))?,
            GateEvent::Barrier(barrier) => {
                outlets.prepare_barrier(&mut chain)?;
                if let Some(c) = checkpoint.as_mut() {
                    c.ack(&mut chain, barrier, None)?;
                }
                outlets.control(Message::Barrier(barrier))?;
                if barrier.kind == BarrierKind::Stop {
                    return Ok(());
                }
                if let Some(GateEvent::Watermark(w)) = gate.pending_watermark() {
                    outlets.watermark(&mut chain, w)?;
                }
            }
            GateEvent::End => {
                outlets.end(&mut chain)?;
                if let Some(c) = checkpoint.as_mut() {
                    c.finished(&mut chain, None)?;
                }
                return Ok(());
            }
        }
    }
}

/// When the chain's operator timers are due next (processing time).
struct ChainTimer {
    interval: Option<Duration>,
    due: Option<Instant>,
}

impl ChainTimer {
    fn new(chain: &Chain) -> Self {
        let interval = chain.timer_interval();
        Self {
            interval,
            due: interval.map(|i| Instant::now() + i),
        }
    }

    /// Calls the chain's timers when they are due, and sets the next time.
    fn fire_if_due(&mut self, chain: &mut Chain, outlets: &mut Outlets) -> Result<(), TaskExit> {
        let (Some(due), Some(interval)) = (self.due, self.interval) else {
            return Ok(());
        };
        let now = Instant::now();
        if now < due {
            return Ok(());
        }
        outlets.timer(chain)?;
        self.due = Some(now + interval);
        Ok(())
    }
}

/// Shared between the tasks of a job: the first error, the cancel and stop flags.
#[derive(Default)]
pub struct JobShared {
    pub cancel: AtomicBool,
    /// Asks the coordinator for a stop checkpoint.
    pub stop: AtomicBool,
    pub error: std::sync::Mutex<Option<crate::error::EngineError>>,
}

impl JobShared {
    /// Records how the task at `location` ended; a failure cancels the rest of the job.
    pub fn task_ended(self: &Arc<Self>, location: &str, result: Result<(), TaskExit>) {
        if let Err(TaskExit::Failed(e)) = result {
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert(e.at(location));
            }
            self.cancel.store(true, Ordering::Relaxed);
        }
    }
}
