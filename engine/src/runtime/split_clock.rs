//! Event time of one source instance over its splits (DESIGN.md §3): a reader may read several
//! partitions (a Kafka source instance owns every partition `p` with `p % instances ==
//! instance`), and each keeps its own running watermark, against which its own rows are judged
//! late. The instance's watermark is the minimum over its splits, so a partition that lags holds
//! the windows back instead of seeing its rows dropped.
//!
//! - `idle_timeout` (opt-in): a split that delivered nothing for that long leaves the minimum
//!   until it delivers again. When it does, its watermark is raised to the instance's, so its
//!   rows for windows that already fired count as late instead of reaching them. Liveness over
//!   determinism: whether a row is late then depends on timing.
//! - A split that appears while running (a partition added to a topic) starts at the
//!   instance's watermark, for the same reason.
//! - When every split is idle the instance's watermark stays where it is, and the instance is
//!   idle: the source task tells the tasks downstream, which stop waiting for its watermark
//!   (otherwise one instance whose partitions are all silent would hold every window back).
//!
//! A reader with one split (files, the generator) goes through the same code with split 0.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::event_time::{wall_clock, Assigned, EventTimeAssigner, EventTimeSpec};
use crate::message::{EventTime, WATERMARK_MIN};
use crate::source::SplitId;

struct Split {
    assigner: EventTimeAssigner,
    last_active: Instant,
    idle: bool,
}

/// The event-time assigners of one source instance, one per split.
pub struct SplitClock {
    spec: EventTimeSpec,
    splits: BTreeMap<SplitId, Split>,
    idle_timeout: Option<Duration>,
    /// The instance's watermark as last computed; never goes backwards.
    watermark: EventTime,
    /// Checkpointed watermarks of splits this instance has not seen yet.
    restored: BTreeMap<SplitId, EventTime>,
    /// When any split last delivered rows (or the clock was made).
    last_rows: Instant,
}

impl SplitClock {
    pub fn new(spec: EventTimeSpec, idle_timeout: Option<Duration>) -> Self {
        Self {
            spec,
            splits: BTreeMap::new(),
            idle_timeout,
            watermark: WATERMARK_MIN,
            restored: BTreeMap::new(),
            last_rows: Instant::now(),
        }
    }

    /// With `idle_timeout`: no split delivered rows for that long (also when the instance
    /// reads no split at all).
    pub fn idle(&self, now: Instant) -> bool {
        self.idle_timeout
            .is_some_and(|t| now.duration_since(self.last_rows) >= t)
    }

    /// Continues from a checkpoint: the instance's watermark and each split's.
    pub fn restore(&mut self, watermark: EventTime, splits: &[(SplitId, EventTime)]) {
        self.watermark = self.watermark.max(watermark);
        for &(split, w) in splits {
            let e = self.restored.entry(split).or_insert(w);
            *e = (*e).max(w);
        }
        for (id, split) in self.splits.iter_mut() {
            if let Some(w) = self.restored.get(id) {
                split.assigner.restore_watermark(*w);
            }
        }
    }

    /// Makes the set of splits match what the reader reads now.
    pub fn sync(&mut self, splits: &[SplitId], now: Instant) {
        if splits.len() == self.splits.len() && splits.iter().all(|s| self.splits.contains_key(s)) {
            return;
        }
        self.splits.retain(|id, _| splits.contains(id));
        for &id in splits {
            if self.splits.contains_key(&id) {
                continue;
            }
            let mut assigner = EventTimeAssigner::new(self.spec.clone());
            // A split with a checkpointed watermark continues from it; a new one starts at the
            // instance's watermark (rows below it are late, as windows below it have fired).
            let start = self.restored.get(&id).copied().unwrap_or(self.watermark);
            assigner.restore_watermark(start.max(self.watermark));
            self.splits.insert(
                id,
                Split {
                    assigner,
                    last_active: now,
                    idle: false,
                },
            );
        }
    }

    /// Judges and assigns `batch`, read from `split`.
    pub fn assign(&mut self, split: SplitId, batch: RecordBatch, now: Instant) -> Result<Assigned> {
        if !self.splits.contains_key(&split) {
            let mut ids: Vec<SplitId> = self.splits.keys().copied().collect();
            ids.push(split);
            self.sync(&ids, now);
        }
        let instance = self.watermark;
        let s = self
            .splits
            .get_mut(&split)
            .ok_or_else(|| crate::EngineError::Internal(format!("split {split} vanished")))?;
        if s.idle {
            // Back from idle: windows up to the instance's watermark may have fired.
            s.assigner.restore_watermark(instance);
            s.idle = false;
        }
        s.last_active = now;
        self.last_rows = now;
        s.assigner.assign(batch)
    }

    /// The instance's watermark now: the minimum over splits that are not idle. A
    /// processing-time watermark moves with the wall clock first.
    pub fn watermark(&mut self, now: Instant) -> EventTime {
        if self.spec.proctime.as_ref().is_some_and(|p| p.watermark) {
            let wall = wall_clock();
            for s in self.splits.values_mut() {
                s.assigner.tick(wall);
            }
        }
        if let Some(timeout) = self.idle_timeout {
            for s in self.splits.values_mut() {
                if !s.idle && now.duration_since(s.last_active) >= timeout {
                    s.idle = true;
                }
            }
        }
        let min = self
            .splits
            .values()
            .filter(|s| !s.idle)
            .map(|s| s.assigner.watermark())
            .min();
        if let Some(min) = min {
            self.watermark = self.watermark.max(min);
        }
        self.watermark
    }

    /// Each split's watermark, for a checkpoint (splits not seen yet keep their restored one).
    pub fn split_watermarks(&self) -> Vec<(SplitId, EventTime)> {
        let mut out = self.restored.clone();
        for (id, s) in &self.splits {
            out.insert(*id, s.assigner.watermark());
        }
        out.into_iter().collect()
    }

    /// The newest event time any split has read.
    pub fn newest(&self) -> EventTime {
        self.splits
            .values()
            .map(|s| s.assigner.newest())
            .max()
            .unwrap_or(WATERMARK_MIN)
    }

    /// The instance's watermark as last computed.
    pub fn current(&self) -> EventTime {
        self.watermark
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampNanosecondArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::physical_expr::expressions::Column;
    use std::sync::Arc;

    fn spec() -> EventTimeSpec {
        EventTimeSpec {
            watermark: Some(Arc::new(Column::new("ts", 0))),
            window: None,
            proctime: None,
            out_of_bound: None,
            keep_late: false,
            event_time: None,
        }
    }

    fn batch(times: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        )]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampNanosecondArray::from(times.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn the_slowest_split_holds_the_watermark() {
        let now = Instant::now();
        let mut clock = SplitClock::new(spec(), None);
        clock.sync(&[0, 1], now);
        clock.assign(0, batch(&[100, 200]), now).unwrap();
        assert_eq!(
            clock.watermark(now),
            WATERMARK_MIN,
            "split 1 has said nothing"
        );
        clock.assign(1, batch(&[50]), now).unwrap();
        assert_eq!(clock.watermark(now), 50);
        clock.assign(1, batch(&[300]), now).unwrap();
        assert_eq!(clock.watermark(now), 200);
        assert_eq!(clock.split_watermarks(), vec![(0, 200), (1, 300)]);
    }

    #[test]
    fn an_idle_split_leaves_the_minimum_and_comes_back_at_the_instance_watermark() {
        let t0 = Instant::now();
        let mut clock = SplitClock::new(spec(), Some(Duration::from_secs(5)));
        clock.sync(&[0, 1], t0);
        clock.assign(1, batch(&[10]), t0).unwrap();
        clock
            .assign(0, batch(&[100]), t0 + Duration::from_secs(6))
            .unwrap();
        assert_eq!(clock.watermark(t0 + Duration::from_secs(6)), 100);
        // Split 1 speaks again with a row below the instance's watermark: it is judged against
        // 100, not against its own 10.
        clock
            .assign(1, batch(&[20]), t0 + Duration::from_secs(7))
            .unwrap();
        assert_eq!(clock.split_watermarks(), vec![(0, 100), (1, 100)]);
        assert_eq!(clock.watermark(t0 + Duration::from_secs(7)), 100);
    }

    #[test]
    fn restored_splits_continue_from_their_watermarks() {
        let now = Instant::now();
        let mut clock = SplitClock::new(spec(), None);
        clock.restore(40, &[(0, 40), (1, 70)]);
        clock.sync(&[1], now);
        assert_eq!(clock.watermark(now), 70);
        assert_eq!(clock.split_watermarks(), vec![(0, 40), (1, 70)]);
        // A split never seen before starts at the instance's watermark.
        clock.sync(&[1, 5], now);
        assert_eq!(clock.split_watermarks(), vec![(0, 40), (1, 70), (5, 70)]);
    }

    #[test]
    fn an_instance_is_idle_when_no_split_delivered_rows_for_the_timeout() {
        let t0 = Instant::now();
        let mut clock = SplitClock::new(spec(), Some(Duration::from_secs(5)));
        // No split at all (more instances than partitions): idle after the timeout too.
        assert!(!clock.idle(t0));
        assert!(clock.idle(t0 + Duration::from_secs(6)));
        clock.sync(&[0, 1], t0);
        clock
            .assign(0, batch(&[100]), t0 + Duration::from_secs(6))
            .unwrap();
        assert!(!clock.idle(t0 + Duration::from_secs(7)));
        // split 1 silent all along, split 0 silent since 6 s: idle at 11 s
        assert!(clock.idle(t0 + Duration::from_secs(11)));
        // without a timeout never
        let never = SplitClock::new(spec(), None);
        assert!(!never.idle(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn a_processing_time_watermark_follows_the_wall_clock_without_rows() {
        // Rows of one column `v`; the table's schema puts the PROCTIME() column before it.
        let table = Arc::new(Schema::new(vec![
            Field::new("pt", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
            Field::new("v", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]));
        let spec = EventTimeSpec {
            watermark: None,
            window: None,
            proctime: Some(crate::event_time::ProcTime {
                column: 0,
                schema: Arc::clone(&table),
                watermark: true,
            }),
            out_of_bound: None,
            keep_late: false,
            event_time: None,
        };
        let now = Instant::now();
        let mut clock = SplitClock::new(spec, None);
        clock.sync(&[0], now);
        let before = wall_clock();
        let first = clock.watermark(now);
        assert!(first >= before, "{first} < {before}");
        std::thread::sleep(Duration::from_millis(20));
        // No rows came: the watermark still moved on with the clock.
        let second = clock.watermark(now);
        assert!(second >= first + 20_000_000, "{second} vs {first}");
        let out = clock.assign(0, batch(&[5]), now).unwrap();
        let rows = out.batch.unwrap();
        assert_eq!(rows.schema(), table);
        let stamped = rows
            .column(0)
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap()
            .value(0);
        assert!(stamped >= second && stamped <= wall_clock());
    }
}
