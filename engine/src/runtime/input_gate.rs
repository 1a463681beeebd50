//! The receiving side of a task: merges its input channels and applies the two rules every
//! operator relies on, so no operator has to:
//!
//! - the task's watermark is the minimum over its inputs (an ended input no longer holds it
//!   back), and it never goes backwards; an idle input (its source's partitions are silent)
//!   does not hold it back either, until it is active again; when every running input is
//!   idle, the task is idle too and says so downstream;
//! - barrier alignment: in exactly-once mode an input that delivered barrier n is parked until
//!   barrier n arrived on every input; then the barrier is handed to the task once.
//!
//! It also aligns its inputs in event time (Flink aligns the watermarks of sources; here every
//! task with several inputs does): once an input's watermark is more than
//! [`ALIGNMENT_DRIFT`] ahead of another's, the inputs furthest behind are read first whenever
//! they have a message, so a fast input (a join's auctions, 15x sparser than its bids) cannot
//! run ahead and fill the operator's state with rows waiting for the other side's watermark;
//! its full channel holds its producer back instead. The gate never waits for a lagging
//! input: when none has a message, whatever comes first is read (one fed by the same source
//! as another cannot stall the task). Inputs read fairly otherwise, and always while one has
//! no watermark yet (a stream without event time is not starved by one with it, nor the
//! other way round).

use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::EngineError;
use crate::message::{Barrier, EventTime, Message, WATERMARK_MAX, WATERMARK_MIN};
use crate::runtime::outlet::TaskExit;

/// How far (nanoseconds of event time) an input's watermark may run ahead of another's before
/// the gate reads the ones behind first.
pub const ALIGNMENT_DRIFT: EventTime = 1_000_000_000;

/// What the gate hands to the task.
#[derive(Debug)]
pub enum GateEvent {
    /// Rows from logical input `input`.
    Batch(RecordBatch, usize),
    /// The minimum watermark over the inputs advanced to this value.
    Watermark(EventTime),
    /// Every running input became idle (`true`), or one of them is active again (`false`).
    Idle(bool),
    /// Every input delivered this barrier.
    Barrier(Barrier),
    /// Every input ended.
    End,
    /// The deadline the task waited until passed first (its operators' timer is due).
    Timer,
}

struct Input {
    rx: Receiver<Message>,
    logical: usize,
    watermark: EventTime,
    ended: bool,
    /// Said it is idle and has not been active since.
    idle: bool,
    /// Delivered the pending barrier (parked while aligning).
    at_barrier: bool,
}

/// The merged inputs of one task.
pub struct InputGate {
    inputs: Vec<Input>,
    watermark: EventTime,
    pending: Option<Barrier>,
    /// Exactly-once: park inputs at a barrier until all have it.
    align: bool,
    /// An event decided together with the one just returned, handed out next.
    held: Option<GateEvent>,
    /// Told the task that every running input is idle.
    idle: bool,
    /// Rotates which of the inputs at equal watermarks is tried first.
    turn: usize,
}

impl InputGate {
    /// Messages waiting in the task's input channels.
    pub fn queued(&self) -> usize {
        self.inputs.iter().map(|i| i.rx.len()).sum()
    }

    /// `inputs` pairs each channel with the logical input it belongs to.
    pub fn new(inputs: Vec<(Receiver<Message>, usize)>, align: bool) -> Self {
        Self {
            inputs: inputs
                .into_iter()
                .map(|(rx, logical)| Input {
                    rx,
                    logical,
                    watermark: WATERMARK_MIN,
                    ended: false,
                    idle: false,
                    at_barrier: false,
                })
                .collect(),
            watermark: WATERMARK_MIN,
            pending: None,
            align,
            held: None,
            idle: false,
            turn: 0,
        }
    }

    /// The next message of an input that may deliver, waiting until `deadline` at most
    /// (`None`: when it passed first).
    fn receive(&mut self, deadline: Option<Instant>) -> Result<Option<(usize, Message)>, TaskExit> {
        let mut ready: Vec<usize> = (0..self.inputs.len())
            .filter(|&i| {
                let input = &self.inputs[i];
                !(input.ended || (self.align && input.at_barrier))
            })
            .collect();
        let watermarks = ready.iter().map(|&i| self.inputs[i].watermark);
        let (lowest, highest) = (watermarks.clone().min(), watermarks.max());
        let drift = match (lowest, highest) {
            (Some(l), Some(h)) if l > WATERMARK_MIN => h.saturating_sub(l),
            _ => 0,
        };
        if ready.len() > 1 && drift > ALIGNMENT_DRIFT {
            // The inputs furthest behind in event time first (see the module doc).
            let n = self.inputs.len();
            let turn = self.turn % n;
            self.turn = self.turn.wrapping_add(1);
            ready.sort_by_key(|&i| (self.inputs[i].watermark, (i + n - turn) % n));
            for &i in &ready {
                if let Ok(m) = self.inputs[i].rx.try_recv() {
                    return Ok(Some((i, m)));
                }
            }
        }
        match ready.as_slice() {
            [] => Err(TaskExit::Failed(EngineError::Internal(
                "input gate has no input to read".into(),
            ))),
            [only] => {
                let rx = &self.inputs[*only].rx;
                match deadline {
                    None => rx
                        .recv()
                        .map(|m| Some((*only, m)))
                        .map_err(|_| TaskExit::Disconnected),
                    Some(d) => match rx.recv_deadline(d) {
                        Ok(m) => Ok(Some((*only, m))),
                        Err(RecvTimeoutError::Timeout) => Ok(None),
                        Err(RecvTimeoutError::Disconnected) => Err(TaskExit::Disconnected),
                    },
                }
            }
            _ => {
                let mut select = Select::new();
                for &i in &ready {
                    select.recv(&self.inputs[i].rx);
                }
                let op = match deadline {
                    None => select.select(),
                    Some(d) => match select.select_deadline(d) {
                        Ok(op) => op,
                        Err(_) => return Ok(None),
                    },
                };
                let i = ready[op.index()];
                op.recv(&self.inputs[i].rx)
                    .map(|m| Some((i, m)))
                    .map_err(|_| TaskExit::Disconnected)
            }
        }
    }

    /// The minimum watermark over the inputs still running and not idle; `None` when every
    /// running input is idle (nothing to wait for, nothing that moves time on).
    fn min_watermark(&self) -> Option<EventTime> {
        if self.inputs.iter().all(|i| i.ended) {
            return Some(WATERMARK_MAX);
        }
        self.inputs
            .iter()
            .filter(|i| !i.ended && !i.idle)
            .map(|i| i.watermark)
            .min()
    }

    /// A watermark event if the minimum advanced.
    fn advance(&mut self) -> Option<GateEvent> {
        let m = self.min_watermark()?;
        (m > self.watermark).then(|| {
            self.watermark = m;
            GateEvent::Watermark(m)
        })
    }

    /// Input `i` delivered rows or a watermark: it is active.
    fn activate(&mut self, i: usize) -> Option<GateEvent> {
        self.inputs[i].idle = false;
        self.idle_changed()
    }

    /// An idle event when "every running input is idle" changed.
    fn idle_changed(&mut self) -> Option<GateEvent> {
        let running: Vec<&Input> = self.inputs.iter().filter(|i| !i.ended).collect();
        let all_idle = !running.is_empty() && running.iter().all(|i| i.idle);
        (all_idle != self.idle).then(|| {
            self.idle = all_idle;
            GateEvent::Idle(all_idle)
        })
    }

    /// The pending barrier, once every running input delivered it.
    fn barrier_complete(&mut self) -> Option<GateEvent> {
        let barrier = self.pending?;
        if self.inputs.iter().all(|i| i.ended || i.at_barrier) {
            self.pending = None;
            self.inputs.iter_mut().for_each(|i| i.at_barrier = false);
            Some(GateEvent::Barrier(barrier))
        } else {
            None
        }
    }

    /// Waits for the next event for the task; [`GateEvent::Timer`] when `deadline` passes
    /// first.
    pub fn next_event(&mut self, deadline: Option<Instant>) -> Result<GateEvent, TaskExit> {
        loop {
            if let Some(ev) = self.held.take() {
                return Ok(ev);
            }
            if self.inputs.iter().all(|i| i.ended) {
                return Ok(GateEvent::End);
            }
            let Some((i, msg)) = self.receive(deadline)? else {
                return Ok(GateEvent::Timer);
            };
            match msg {
                Message::Batch(batch) => {
                    let ev = GateEvent::Batch(batch, self.inputs[i].logical);
                    // The task hears that it is active again before the rows.
                    if let Some(active) = self.activate(i) {
                        self.held = Some(ev);
                        return Ok(active);
                    }
                    return Ok(ev);
                }
                Message::Watermark(w) => {
                    let input = &mut self.inputs[i];
                    input.watermark = input.watermark.max(w);
                    let active = self.activate(i);
                    let advanced = self.advance();
                    if let Some(ev) = self.first_of(active, advanced) {
                        return Ok(ev);
                    }
                }
                Message::Idle(idle) => {
                    self.inputs[i].idle = idle;
                    // Leaving the minimum may move it on; after that the task may be idle.
                    let advanced = self.advance();
                    let changed = self.idle_changed();
                    if let Some(ev) = self.first_of(advanced, changed) {
                        return Ok(ev);
                    }
                }
                Message::Barrier(b) => {
                    match self.pending {
                        Some(p) if p.epoch != b.epoch => {
                            return Err(TaskExit::Failed(EngineError::Internal(format!(
                                "barrier {} arrived while aligning barrier {}",
                                b.epoch, p.epoch
                            ))))
                        }
                        _ => self.pending = Some(b),
                    }
                    self.inputs[i].at_barrier = true;
                    if let Some(ev) = self.barrier_complete() {
                        return Ok(ev);
                    }
                }
                Message::End => {
                    self.inputs[i].ended = true;
                    // An input that ended may have been the one holding back a barrier or the
                    // watermark. The barrier goes first: it belongs before anything newer.
                    if let Some(ev) = self.barrier_complete() {
                        // the watermark advance, if any, is picked up on the next call
                        return Ok(ev);
                    }
                    let advanced = self.advance();
                    let changed = self.idle_changed();
                    if let Some(ev) = self.first_of(advanced, changed) {
                        return Ok(ev);
                    }
                }
            }
        }
    }

    /// `first` now and `second` on the next call, whichever exist.
    fn first_of(
        &mut self,
        first: Option<GateEvent>,
        second: Option<GateEvent>,
    ) -> Option<GateEvent> {
        match (first, second) {
            (Some(a), Some(b)) => {
                self.held = Some(b);
                Some(a)
            }
            (a, b) => a.or(b),
        }
    }

    /// Re-checks the watermark after a barrier was handed out (an input may have ended).
    pub fn pending_watermark(&mut self) -> Option<GateEvent> {
        self.advance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::BarrierKind;
    use crossbeam_channel::bounded;

    fn barrier(epoch: u64) -> Message {
        Message::Barrier(Barrier {
            epoch,
            kind: BarrierKind::Checkpoint,
        })
    }

    #[test]
    fn watermark_is_minimum_over_inputs_and_ended_inputs_stop_holding_it() {
        let (a_tx, a_rx) = bounded(8);
        let (b_tx, b_rx) = bounded(8);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 0)], true);
        a_tx.send(Message::Watermark(10)).unwrap();
        b_tx.send(Message::Watermark(5)).unwrap();
        // a=10 alone does not advance the minimum (b is MIN); then b=5 does.
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Watermark(5)
        ));
        b_tx.send(Message::Watermark(3)).unwrap(); // going backwards is ignored
        b_tx.send(Message::End).unwrap();
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Watermark(10)
        ));
        a_tx.send(Message::End).unwrap();
        // with every input ended, nothing holds the watermark back any more
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Watermark(WATERMARK_MAX)
        ));
        assert!(matches!(gate.next_event(None).unwrap(), GateEvent::End));
    }

    #[test]
    fn an_input_at_a_barrier_is_parked_until_all_inputs_have_it() {
        let (a_tx, a_rx) = bounded(8);
        let (b_tx, b_rx) = bounded(8);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 1)], true);
        a_tx.send(barrier(1)).unwrap();
        a_tx.send(Message::Watermark(99)).unwrap(); // after the barrier: must wait
        b_tx.send(Message::Watermark(1)).unwrap();
        b_tx.send(barrier(1)).unwrap();
        // b's watermark cannot advance the min (a is MIN); then b's barrier completes alignment.
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Barrier(Barrier { epoch: 1, .. })
        ));
        b_tx.send(Message::Watermark(50)).unwrap();
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Watermark(_)
        ));
    }

    #[test]
    fn without_alignment_the_barrier_is_handed_out_when_the_last_input_has_it() {
        let (a_tx, a_rx) = bounded(8);
        let (b_tx, b_rx) = bounded(8);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 0)], false);
        a_tx.send(barrier(1)).unwrap();
        a_tx.send(Message::Batch(RecordBatch::new_empty(std::sync::Arc::new(
            datafusion::arrow::datatypes::Schema::empty(),
        ))))
        .unwrap();
        // at-least-once: a's batch after its barrier is processed before b's barrier arrives
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Batch(_, 0)
        ));
        b_tx.send(barrier(1)).unwrap();
        assert!(matches!(
            gate.next_event(None).unwrap(),
            GateEvent::Barrier(_)
        ));
    }

    fn next(gate: &mut InputGate) -> String {
        match gate.next_event(None).unwrap() {
            GateEvent::Batch(_, i) => format!("batch {i}"),
            GateEvent::Watermark(w) => format!("watermark {w}"),
            GateEvent::Barrier(b) => format!("barrier {}", b.epoch),
            GateEvent::Idle(idle) => format!("idle {idle}"),
            GateEvent::End => "end".into(),
            GateEvent::Timer => "timer".into(),
        }
    }

    #[test]
    fn a_deadline_that_passes_before_any_message_is_a_timer_event() {
        let (a_tx, a_rx) = bounded(8);
        let (_b_tx, b_rx) = bounded(8);
        for inputs in [vec![(a_rx.clone(), 0)], vec![(a_rx, 0), (b_rx, 1)]] {
            let mut gate = InputGate::new(inputs, true);
            let soon = Instant::now() + std::time::Duration::from_millis(5);
            assert!(matches!(
                gate.next_event(Some(soon)).unwrap(),
                GateEvent::Timer
            ));
            a_tx.send(rows()).unwrap();
            let later = Instant::now() + std::time::Duration::from_secs(60);
            assert_eq!(
                match gate.next_event(Some(later)).unwrap() {
                    GateEvent::Batch(_, i) => i,
                    _ => 99,
                },
                0
            );
        }
    }

    fn rows() -> Message {
        Message::Batch(RecordBatch::new_empty(std::sync::Arc::new(
            datafusion::arrow::datatypes::Schema::empty(),
        )))
    }

    /// One message at a time, so the order between inputs is fixed.
    fn step(gate: &mut InputGate, tx: &crossbeam_channel::Sender<Message>, msg: Message) -> String {
        tx.send(msg).unwrap();
        next(gate)
    }

    #[test]
    fn the_input_furthest_behind_in_event_time_is_read_first_without_waiting_for_it() {
        let (a, a_rx) = bounded(16);
        let (b, b_rx) = bounded(16);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 1)], true);
        const S: EventTime = 1_000_000_000;
        a.send(Message::Watermark(100 * S)).unwrap();
        assert_eq!(
            step(&mut gate, &b, Message::Watermark(10 * S)),
            format!("watermark {}", 10 * S)
        );
        for _ in 0..3 {
            a.send(rows()).unwrap();
            b.send(rows()).unwrap();
        }
        // b is behind: its rows first, then a's once b has none (no waiting for b).
        let order: Vec<String> = (0..6).map(|_| next(&mut gate)).collect();
        assert_eq!(
            order,
            ["batch 1", "batch 1", "batch 1", "batch 0", "batch 0", "batch 0"]
        );
        // b moves past a: now a is behind.
        b.send(Message::Watermark(200 * S)).unwrap();
        assert_eq!(next(&mut gate), format!("watermark {}", 100 * S));
        for _ in 0..2 {
            b.send(rows()).unwrap();
            a.send(rows()).unwrap();
        }
        let order: Vec<String> = (0..4).map(|_| next(&mut gate)).collect();
        assert_eq!(order, ["batch 0", "batch 0", "batch 1", "batch 1"]);
    }

    #[test]
    fn an_idle_input_stops_holding_the_watermark_until_it_is_active_again() {
        let (a, a_rx) = bounded(16);
        let (b, b_rx) = bounded(16);
        let (c, c_rx) = bounded(16);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 0), (c_rx, 1)], true);
        c.send(Message::End).unwrap();
        a.send(Message::Watermark(10)).unwrap();
        assert_eq!(step(&mut gate, &b, Message::Watermark(5)), "watermark 5");
        // b idle: a alone decides.
        assert_eq!(step(&mut gate, &b, Message::Idle(true)), "watermark 10");
        assert_eq!(step(&mut gate, &a, Message::Watermark(30)), "watermark 30");
        // b back with rows: it counts again from its old watermark, so time stands still
        // (never backwards) until b catches up.
        b.send(Message::Idle(false)).unwrap();
        assert_eq!(step(&mut gate, &b, rows()), "batch 0");
        a.send(Message::Watermark(40)).unwrap();
        assert_eq!(step(&mut gate, &b, Message::Watermark(35)), "watermark 35");
        assert_eq!(step(&mut gate, &b, Message::Watermark(50)), "watermark 40");
    }

    #[test]
    fn a_task_whose_inputs_are_all_idle_is_idle_and_wakes_up_with_the_first_rows() {
        let (a, a_rx) = bounded(16);
        let (b, b_rx) = bounded(16);
        let mut gate = InputGate::new(vec![(a_rx, 0), (b_rx, 0)], false);
        a.send(Message::Watermark(10)).unwrap();
        assert_eq!(step(&mut gate, &b, Message::Watermark(10)), "watermark 10");
        a.send(Message::Idle(true)).unwrap();
        assert_eq!(step(&mut gate, &b, Message::Idle(true)), "idle true");
        // Rows from a: the task hears it is active before it gets them.
        assert_eq!(step(&mut gate, &a, rows()), "idle false");
        assert_eq!(next(&mut gate), "batch 0");
        // b is still idle: a alone moves time on.
        assert_eq!(step(&mut gate, &a, Message::Watermark(15)), "watermark 15");
        assert_eq!(step(&mut gate, &a, Message::Idle(true)), "idle true");
        // Both end: time jumps to the end, and an ended task is no longer idle.
        a.send(Message::End).unwrap();
        assert_eq!(
            step(&mut gate, &b, Message::End),
            format!("watermark {WATERMARK_MAX}")
        );
        assert_eq!(next(&mut gate), "idle false");
        assert_eq!(next(&mut gate), "end");
    }
}
