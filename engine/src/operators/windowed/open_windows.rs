//! [`OpenWindows`]: the open windows of one windowed operator instance, in memory up to the
//! task's budget and in the task's store past it.
//!
//! It owns what every windowed operator does the same way: which windows are open (in memory,
//! in the store, or declared), dropping and counting rows of windows that already fired,
//! keeping memory within the budget by spilling the windows that fire last, firing in order of
//! end, and writing everything held to the store at a barrier. What a window holds and how it
//! turns into parts and back is the operator's: a [`WindowContents`].
//!
//! Rows buffered as they arrived ([`BufferedRows`]) are written through at a barrier: the rows
//! added since the last barrier go to the store and stay in memory too (the window is
//! "mirrored"), so a window that fires reads memory and only drops its stored copy, instead of
//! reading every row back. Contents that change in place (an aggregate's accumulators) move
//! to the store at a barrier, as do rows of a window that was spilled before.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::runs::{split_by_window, Run};
use super::store::{PartRoute, WindowStore};
use crate::error::Result;
use crate::message::{EventTime, WATERMARK_MIN};
use crate::metrics::JobMetrics;
use crate::state::StateHandle;

/// What an operator keeps in memory for one open window.
pub trait WindowContents {
    /// Bytes held in memory.
    fn bytes(&self) -> usize;

    /// For contents that only grow: the batches added since the last call (empty when none
    /// were), the contents kept as they are. `None`: these contents move to the store at a
    /// barrier instead.
    fn unsaved_part(&mut self) -> Option<Vec<RecordBatch>> {
        None
    }
}

/// Rows held for a window as they arrived (a join's side, the emit-order step).
#[derive(Debug, Default)]
pub struct BufferedRows {
    batches: Vec<RecordBatch>,
    bytes: usize,
    /// How many of `batches` are in the store already (written through at barriers).
    saved: usize,
}

impl BufferedRows {
    pub fn push(&mut self, batch: RecordBatch) {
        self.bytes += batch.get_array_memory_size();
        self.batches.push(batch);
    }

    /// The rows as one part, in arrival order (`None` when there are none).
    pub fn into_part(self, schema: &SchemaRef) -> Result<Option<RecordBatch>> {
        match self.batches.len() {
            0 => Ok(None),
            1 => Ok(self.batches.into_iter().next()),
            _ => Ok(Some(concat_batches(schema, &self.batches)?)),
        }
    }

    /// The rows as one part, copied (`None` when there are none).
    pub fn to_part(&self, schema: &SchemaRef) -> Result<Option<RecordBatch>> {
        match self.batches.len() {
            0 => Ok(None),
            1 => Ok(self.batches.first().cloned()),
            _ => Ok(Some(concat_batches(schema, &self.batches)?)),
        }
    }

    pub fn into_batches(self) -> Vec<RecordBatch> {
        self.batches
    }
}

impl WindowContents for BufferedRows {
    fn bytes(&self) -> usize {
        self.bytes
    }

    fn unsaved_part(&mut self) -> Option<Vec<RecordBatch>> {
        let unsaved = self.batches[self.saved..].to_vec();
        self.saved = self.batches.len();
        Some(unsaved)
    }
}

/// The windows of one input of an operator (a join has two, kept apart).
struct Lane<T> {
    memory: BTreeMap<EventTime, T>,
    /// Windows whose stored parts are all copies of rows memory still holds (written through
    /// at barriers): memory alone is the window.
    mirrored: BTreeSet<EventTime>,
    store: WindowStore,
    /// The layout of this lane's stored parts.
    part_schema: SchemaRef,
}

/// Where a lane keeps its state and how its parts look.
pub struct LaneState {
    pub handle: StateHandle,
    /// How a restore at another parallelism picks this instance's rows of a part.
    pub route: PartRoute,
    /// The layout of a stored part.
    pub part_schema: SchemaRef,
}

/// A window's state as [`OpenWindows::take`] hands it back when the window fires.
pub struct Taken<T> {
    /// What was still in memory.
    pub memory: Option<T>,
    /// Parts written to the store (spilled, or snapshotted at barriers), in the order written.
    pub parts: Vec<RecordBatch>,
}

/// The open windows of an operator instance, by end, over one or more lanes.
pub struct OpenWindows<T> {
    lanes: Vec<Lane<T>>,
    /// Windows that fire even when they hold nothing (a global aggregate's one window).
    declared: BTreeSet<EventTime>,
    /// Bytes held in memory over every lane.
    held: usize,
    /// Bytes that may be held before windows are spilled.
    budget: usize,
    watermark: EventTime,
}

impl<T: WindowContents> OpenWindows<T> {
    /// Opens the lanes' stores (restoring their parts after a restart). `budget` is the
    /// memory the windows may hold; `restored_epoch` the checkpoint the job resumed from.
    pub fn open(lanes: Vec<LaneState>, budget: usize, restored_epoch: u64) -> Result<Self> {
        let lanes = lanes
            .into_iter()
            .map(|l| {
                Ok(Lane {
                    memory: BTreeMap::new(),
                    mirrored: BTreeSet::new(),
                    store: WindowStore::open(l.handle, l.route, restored_epoch)?,
                    part_schema: l.part_schema,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            lanes,
            declared: BTreeSet::new(),
            held: 0,
            budget,
            watermark: WATERMARK_MIN,
        })
    }

    /// The highest watermark seen.
    pub fn watermark(&self) -> EventTime {
        self.watermark
    }

    /// Declares the window ending at `end` open even while it holds nothing, so it fires.
    pub fn declare(&mut self, end: EventTime) {
        self.declared.insert(end);
    }

    /// Splits rows by window (`ends[row]`), dropping the runs of windows that already fired:
    /// their rows are late and counted in `metrics`.
    pub fn open_runs(&self, ends: &[EventTime], metrics: &JobMetrics) -> Vec<Run> {
        let mut runs = split_by_window(ends);
        runs.retain(|run| {
            let late = run.end <= self.watermark;
            if late {
                metrics.add_late_rows(run.len() as u64);
            }
            !late
        });
        runs
    }

    /// Changes the window ending at `end` in `lane`'s memory, made by `create` if absent.
    pub fn update<R>(
        &mut self,
        lane: usize,
        end: EventTime,
        create: impl FnOnce() -> Result<T>,
        change: impl FnOnce(&mut T) -> Result<R>,
    ) -> Result<R> {
        let memory = &mut self.lanes[lane].memory;
        let (window, before) = match memory.entry(end) {
            std::collections::btree_map::Entry::Occupied(o) => {
                let w = o.into_mut();
                let before = w.bytes();
                (w, before)
            }
            std::collections::btree_map::Entry::Vacant(v) => (v.insert(create()?), 0),
        };
        let result = change(window);
        self.held = (self.held + window.bytes()).saturating_sub(before);
        result
    }

    /// When memory holds more than half the budget, writes windows to the store, those that
    /// fire last first (every lane's part of a window together), until at most a quarter of
    /// it is held. Half: writing a window out makes a copy of it for a moment.
    /// `to_part` turns a lane's window into the part to store (`None`: nothing to store).
    pub fn enforce_budget(
        &mut self,
        to_part: impl FnMut(usize, T) -> Result<Option<RecordBatch>>,
    ) -> Result<()> {
        let limit = self.budget / 2;
        if self.budget == usize::MAX || self.held <= limit {
            return Ok(());
        }
        let mut by_end: BTreeMap<EventTime, usize> = BTreeMap::new();
        for lane in &self.lanes {
            for (end, window) in &lane.memory {
                *by_end.entry(*end).or_default() += window.bytes();
            }
        }
        let mut remaining = self.held;
        let mut from = None;
        for (end, bytes) in by_end.iter().rev() {
            if remaining <= limit / 2 {
                break;
            }
            remaining = remaining.saturating_sub(*bytes);
            from = Some(*end);
        }
        match from {
            Some(from) => self.spill_from(from, to_part),
            None => Ok(()),
        }
    }

    /// Writes every lane's windows ending at or after `from` to the store.
    fn spill_from(
        &mut self,
        from: EventTime,
        mut to_part: impl FnMut(usize, T) -> Result<Option<RecordBatch>>,
    ) -> Result<()> {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let moved = lane.memory.split_off(&from);
            let mut parts = Vec::with_capacity(moved.len());
            for (end, window) in moved {
                // Its stored copy goes; the whole window is written as one part.
                lane.unmirror(end)?;
                self.held = self.held.saturating_sub(window.bytes());
                if let Some(part) = to_part(i, window)? {
                    parts.push((end, vec![part]));
                }
            }
            lane.store.write_parts(parts)?;
        }
        Ok(())
    }

    /// The watermark advanced to `watermark`: the ends of the windows to fire now, in order,
    /// each once. The caller fires each (with [`Self::take`] on every lane).
    pub fn advance(&mut self, watermark: EventTime) -> Vec<EventTime> {
        self.watermark = self.watermark.max(watermark);
        let w = self.watermark;
        let mut ready: Vec<EventTime> = self.declared.range(..=w).copied().collect();
        for lane in &self.lanes {
            ready.extend(lane.store.ready(w));
            ready.extend(lane.memory.range(..=w).map(|(end, _)| *end));
        }
        ready.sort_unstable();
        ready.dedup();
        ready
    }

    /// Ends of `lane`'s windows (in memory or stored) in `from..=to`, in order: the windows an
    /// operator that reads state before it fires (the interval join's probe) has to look at.
    pub fn ends_between(&self, lane: usize, from: EventTime, to: EventTime) -> Vec<EventTime> {
        if from > to {
            return Vec::new();
        }
        let lane = &self.lanes[lane];
        let mut ends: Vec<EventTime> = lane.store.between(from, to).collect();
        ends.extend(lane.memory.range(from..=to).map(|(end, _)| *end));
        ends.sort_unstable();
        ends.dedup();
        ends
    }

    /// The end of the first window at or before `watermark` in any lane (declared, in memory
    /// or stored), for an operator that fires windows one at a time while firing adds windows
    /// (the session operator).
    pub fn first_ready(&self, watermark: EventTime) -> Option<EventTime> {
        let declared = self.declared.first().copied();
        let lanes = self.lanes.iter().flat_map(|l| {
            [
                l.store.first(),
                l.memory.first_key_value().map(|(end, _)| *end),
            ]
        });
        std::iter::once(declared)
            .chain(lanes)
            .flatten()
            .filter(|end| *end <= watermark)
            .min()
    }

    /// Every window of `lane`, taken out (in memory and in the store), in order of end: how an
    /// operator whose state is indexed in memory rebuilds the index after a restore.
    pub fn take_all(&mut self, lane: usize) -> Result<Vec<(EventTime, Taken<T>)>> {
        let mut ends: Vec<EventTime> = self.lanes[lane].store.ready(EventTime::MAX);
        ends.extend(self.lanes[lane].memory.keys().copied());
        ends.sort_unstable();
        ends.dedup();
        ends.into_iter()
            .map(|end| Ok((end, self.take(lane, end)?)))
            .collect()
    }

    /// Removes the window ending at `end` from `lane`: its memory and its stored parts.
    pub fn take(&mut self, lane: usize, end: EventTime) -> Result<Taken<T>> {
        self.declared.remove(&end);
        let lane = &mut self.lanes[lane];
        lane.unmirror(end)?;
        let memory = lane.memory.remove(&end);
        if let Some(w) = &memory {
            self.held = self.held.saturating_sub(w.bytes());
        }
        let parts = if lane.store.has(end) {
            lane.store.take(end, &lane.part_schema)?
        } else {
            Vec::new()
        };
        Ok(Taken { memory, parts })
    }

    /// Whether the window ending at `end` of `lane` holds rows in memory.
    pub fn in_memory(&self, lane: usize, end: EventTime) -> bool {
        self.lanes[lane].memory.contains_key(&end)
    }

    /// Bytes the memory of this instance may hold.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes the window ending at `end` of `lane` holds, in memory and in the store (encoded).
    pub fn window_bytes(&mut self, lane: usize, end: EventTime) -> Result<u64> {
        let lane = &mut self.lanes[lane];
        let memory = lane.memory.get(&end).map_or(0, |w| w.bytes() as u64);
        if lane.mirrored.contains(&end) {
            return Ok(memory);
        }
        Ok(memory + lane.store.stored_bytes(end)?)
    }

    /// Takes the window ending at `end` of `lane` apart for firing in pieces: what memory
    /// holds (made a part by `to_part`) and its stored parts are spread over buckets,
    /// `assign` giving each row of a part its bucket. Read them with [`Self::take_bucket`],
    /// then [`Self::drop_spread`].
    pub fn spread(
        &mut self,
        lane: usize,
        end: EventTime,
        to_part: impl FnOnce(T) -> Result<Option<RecordBatch>>,
        assign: &mut dyn FnMut(&RecordBatch) -> Result<Vec<usize>>,
    ) -> Result<()> {
        let lane = &mut self.lanes[lane];
        lane.unmirror(end)?;
        let memory = match lane.memory.remove(&end) {
            Some(w) => {
                self.held = self.held.saturating_sub(w.bytes());
                to_part(w)?
            }
            None => None,
        };
        lane.store.spread(end, memory, assign)
    }

    /// Calls `visit` with what the window ending at `end` of `lane` holds in memory, then with
    /// each of its stored parts, one at a time (`as_part` reads the memory as a part).
    pub fn for_each_part(
        &self,
        lane: usize,
        end: EventTime,
        as_part: impl FnOnce(&T) -> Result<Option<RecordBatch>>,
        mut visit: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let lane = &self.lanes[lane];
        if let Some(part) = lane.memory.get(&end).map(as_part).transpose()?.flatten() {
            visit(part)?;
        }
        if lane.mirrored.contains(&end) {
            return Ok(());
        }
        lane.store.for_each_part(end, &lane.part_schema, visit)
    }

    /// The parts of bucket `bucket` of a window taken apart by [`Self::spread`].
    pub fn take_bucket(
        &mut self,
        lane: usize,
        end: EventTime,
        bucket: usize,
    ) -> Result<Vec<RecordBatch>> {
        let lane = &mut self.lanes[lane];
        lane.store.take_bucket(end, bucket, &lane.part_schema)
    }

    /// The window taken apart by [`Self::spread`] fired: drops what is left of it.
    pub fn drop_spread(&mut self, lane: usize, end: EventTime) -> Result<()> {
        self.declared.remove(&end);
        self.lanes[lane].store.drop_window(end)
    }

    /// A barrier of `epoch`: writes every window held in memory to the store, so the store
    /// holds the whole state of the epoch; later parts belong to the next epoch.
    pub fn snapshot(
        &mut self,
        epoch: u64,
        mut to_part: impl FnMut(usize, T) -> Result<Option<RecordBatch>>,
    ) -> Result<()> {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let mut parts = Vec::new();
            let mut moved = Vec::new();
            for (end, window) in lane.memory.iter_mut() {
                // A window spilled before has rows only the store holds: it moves on.
                let spilled = lane.store.has(*end) && !lane.mirrored.contains(end);
                match (!spilled).then(|| window.unsaved_part()).flatten() {
                    Some(batches) => {
                        parts.push((*end, batches));
                        lane.mirrored.insert(*end);
                    }
                    None => moved.push(*end),
                }
            }
            for end in moved {
                if let Some(window) = lane.memory.remove(&end) {
                    self.held = self.held.saturating_sub(window.bytes());
                    if let Some(part) = to_part(i, window)? {
                        parts.push((end, vec![part]));
                    }
                }
            }
            lane.store.write_parts(parts)?;
            lane.store.next_epoch(epoch);
        }
        Ok(())
    }
}

impl OpenWindows<BufferedRows> {
    /// Holds `rows` in the window ending at `end` in `lane`, after the rows it holds.
    pub fn push(
        &mut self,
        lane: usize,
        end: EventTime,
        rows: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<()> {
        self.update(
            lane,
            end,
            || Ok(BufferedRows::default()),
            |b| {
                rows.into_iter().for_each(|r| b.push(r));
                Ok(())
            },
        )
    }
}

impl<T> Lane<T> {
    /// Drops the stored copy of a mirrored window (memory holds all of it).
    fn unmirror(&mut self, end: EventTime) -> Result<()> {
        if self.mirrored.remove(&end) {
            self.store.drop_window(end)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;

    use super::*;

    fn rows(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(values.to_vec())) as ArrayRef)])
            .unwrap()
    }

    fn windows(handle: &StateHandle, budget: usize, epoch: u64) -> OpenWindows<BufferedRows> {
        let lane = LaneState {
            handle: handle.clone(),
            route: PartRoute::Single,
            part_schema: rows(&[]).schema(),
        };
        OpenWindows::open(vec![lane], budget, epoch).unwrap()
    }

    fn add(w: &mut OpenWindows<BufferedRows>, values: &[i64]) {
        w.push(0, 10, [rows(values)]).unwrap();
    }

    /// Every row of the window ending at 10, taken out, sorted.
    fn take(w: &mut OpenWindows<BufferedRows>) -> Vec<i64> {
        let taken = w.take(0, 10).unwrap();
        let mut batches = taken.parts;
        batches.extend(
            taken
                .memory
                .map(BufferedRows::into_batches)
                .unwrap_or_default(),
        );
        let mut out: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        out.sort_unstable();
        out
    }

    fn stored_entries(handle: &StateHandle) -> usize {
        let (lo, hi) = handle.all();
        handle
            .store()
            .unwrap()
            .parts()
            .scan(&lo, &hi)
            .unwrap()
            .len()
    }

    fn to_part(_: usize, rows: BufferedRows) -> Result<Option<RecordBatch>> {
        rows.into_part(&super::tests::rows(&[]).schema())
    }

    #[test]
    fn rows_written_through_at_barriers_fire_once_from_memory_and_restore_from_the_store() {
        use crate::state::{MemoryStateBackend, RestoreSet, TaskState};
        let store = Arc::new(MemoryStateBackend::default());
        let task = |store: Arc<MemoryStateBackend>, restore: bool| {
            let restore = restore.then(|| RestoreSet {
                stores: vec![store.clone() as Arc<dyn crate::state::StateBackend>],
                repartition: None,
            });
            StateHandle::new(Arc::new(TaskState::with_store(store, restore)), 0)
        };
        let handle = task(Arc::clone(&store), false);
        let mut w = windows(&handle, usize::MAX, 0);
        add(&mut w, &[1, 2]);
        w.snapshot(1, to_part).unwrap();
        add(&mut w, &[3]);
        w.snapshot(2, to_part).unwrap();
        // Each barrier wrote only what was new; memory kept everything.
        assert_eq!(stored_entries(&handle), 2);
        assert_eq!(w.held, w.lanes[0].memory[&10].bytes());
        assert!(w.held > 0);
        let checkpoint = Arc::new(store.copy().unwrap());
        add(&mut w, &[4]);
        // A restore from the checkpoint of epoch 2 finds the rows up to its barrier.
        let mut restored = windows(&task(checkpoint, true), usize::MAX, 2);
        assert_eq!(take(&mut restored), vec![1, 2, 3]);
        // Firing reads memory, every row once, and drops the stored copy.
        assert!(w.window_bytes(0, 10).unwrap() > 0);
        assert_eq!(take(&mut w), vec![1, 2, 3, 4]);
        assert_eq!(stored_entries(&handle), 0);
    }

    #[test]
    fn a_written_through_window_that_spills_is_stored_once() {
        let handle = StateHandle::in_memory();
        // A budget so small that any window spills.
        let mut w = windows(&handle, 2, 0);
        add(&mut w, &[1, 2]);
        w.snapshot(1, to_part).unwrap();
        add(&mut w, &[3]);
        w.enforce_budget(to_part).unwrap();
        // The stored copy went; the whole window is one part now.
        assert_eq!(stored_entries(&handle), 1);
        add(&mut w, &[4]);
        w.snapshot(2, to_part).unwrap();
        assert_eq!(stored_entries(&handle), 2);
        let mut seen = 0;
        w.for_each_part(
            0,
            10,
            |_| Ok(None),
            |p| {
                seen += p.column(0).len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, 4);
        assert_eq!(take(&mut w), vec![1, 2, 3, 4]);
    }
}
