//! The two task loops: a source task (reader, event-time assigner, chain) and an operator task
//! (input gate, chain). Both send what their chain emits through their outlets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;

use crate::event_time::EventTimeAssigner;
use crate::graph::TaskInfo;
use crate::message::{EventTime, Message, WATERMARK_MAX, WATERMARK_MIN};
use crate::runtime::chain::Chain;
use crate::runtime::input_gate::{GateEvent, InputGate};
use crate::runtime::outlet::{Outlet, TaskExit};
use crate::source::{SourcePoll, SourceReader};

/// How long an idle source sleeps before polling again.
const IDLE_POLL: Duration = Duration::from_millis(2);

/// What a task sends downstream: every output edge gets everything.
pub struct Outlets(pub Vec<Outlet>);

impl Outlets {
    fn batches(&mut self, batches: Vec<RecordBatch>) -> Result<(), TaskExit> {
        for b in batches {
            match self.0.as_mut_slice() {
                [] => {}
                [only] => only.send_batch(b)?,
                many => many.iter_mut().try_for_each(|o| o.send_batch(b.clone()))?,
            }
        }
        Ok(())
    }

    fn control(&self, msg: Message) -> Result<(), TaskExit> {
        self.0.iter().try_for_each(|o| o.broadcast(&msg))
    }

    fn watermark(&mut self, chain: &mut Chain, w: EventTime) -> Result<(), TaskExit> {
        let (batches, out_wm) = chain.on_watermark(w)?;
        self.batches(batches)?;
        self.control(Message::Watermark(out_wm))
    }

    fn end(&mut self, chain: &mut Chain) -> Result<(), TaskExit> {
        let batches = chain.finish()?;
        self.batches(batches)?;
        self.control(Message::End)
    }
}

/// Runs a source partition until it is exhausted or the job is cancelled.
pub fn run_source_task(
    info: &TaskInfo,
    mut reader: Box<dyn SourceReader>,
    mut assigner: EventTimeAssigner,
    mut chain: Chain,
    mut outlets: Outlets,
    cancel: &AtomicBool,
) -> Result<(), TaskExit> {
    let mut sent_watermark = WATERMARK_MIN;
    let mut skipped = 0;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(TaskExit::Disconnected);
        }
        match reader.poll_next()? {
            SourcePoll::Batch(batch) => {
                info.metrics.add_rows_in(batch.num_rows() as u64);
                let assigned = assigner.assign(batch)?;
                if assigned.late_rows > 0 {
                    info.metrics.add_late_rows(assigned.late_rows);
                }
                if let Some(batch) = assigned.batch {
                    let out = chain.process(batch, 0)?;
                    outlets.batches(out)?;
                }
                let w = assigner.watermark();
                if w > sent_watermark {
                    sent_watermark = w;
                    outlets.watermark(&mut chain, w)?;
                }
            }
            SourcePoll::Pending => std::thread::sleep(IDLE_POLL),
            SourcePoll::Exhausted => break,
        }
        let now_skipped = reader.skipped_rows();
        if now_skipped > skipped {
            info.metrics.add_skipped_rows(now_skipped - skipped);
            skipped = now_skipped;
        }
    }
    // A finished bounded source: its watermark becomes +infinity, so every window fires.
    outlets.watermark(&mut chain, WATERMARK_MAX)?;
    outlets.end(&mut chain)
}

/// Runs an operator task until all its inputs ended.
pub fn run_operator_task(
    mut gate: InputGate,
    mut chain: Chain,
    mut outlets: Outlets,
) -> Result<(), TaskExit> {
    loop {
        match gate.next_event()? {
            GateEvent::Batch(batch, input) => {
                let out = chain.process(batch, input)?;
                outlets.batches(out)?;
            }
            GateEvent::Watermark(w) => outlets.watermark(&mut chain, w)?,
            GateEvent::Barrier(barrier) => {
                chain.snapshot(barrier.epoch)?;
                outlets.control(Message::Barrier(barrier))?;
                if let Some(GateEvent::Watermark(w)) = gate.pending_watermark() {
                    outlets.watermark(&mut chain, w)?;
                }
            }
            GateEvent::End => return outlets.end(&mut chain),
        }
    }
}

/// Shared between the tasks of a job: the first error and the cancel flag.
#[derive(Default)]
pub struct JobShared {
    pub cancel: AtomicBool,
    pub error: std::sync::Mutex<Option<crate::error::EngineError>>,
}

impl JobShared {
    /// Records how a task ended; a failure cancels the rest of the job.
    pub fn task_ended(self: &Arc<Self>, result: Result<(), TaskExit>) {
        if let Err(TaskExit::Failed(e)) = result {
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert(e);
            }
            self.cancel.store(true, Ordering::Relaxed);
        }
    }
}
