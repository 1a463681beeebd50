//! The job graph: stages, their operators and the edges between them. This is the plan the
//! planner hands to the runtime; it holds factories, not running operators.

use std::fmt;
use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;

use crate::checkpoint::Committer;
use crate::error::Result;
use crate::event_time::EventTimeSpec;
use crate::metrics::JobMetrics;
use crate::operator::Operator;
use crate::source::SourceReader;
use crate::state::StateHandle;

/// What an operator or source instance learns about where it runs.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    pub job: String,
    pub stage: String,
    pub instance: usize,
    pub parallelism: usize,
    pub metrics: Arc<JobMetrics>,
    /// The operator's state: its task's store under the operator's own key prefix.
    pub state: StateHandle,
    /// The checkpoint the job resumed from (0: a fresh start). Epochs of this run follow it,
    /// so what an operator labels with an epoch never collides with an earlier run's.
    pub restored_epoch: u64,
}

/// Builds one operator instance per task. Also describes itself for EXPLAIN.
pub trait OperatorFactory: Send + Sync {
    /// One line for EXPLAIN, e.g. `Filter: price > 10`.
    fn describe(&self) -> String;
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>>;
    /// The commit side of a transactional sink; `None` for every other operator.
    fn committer(&self) -> Option<Arc<dyn Committer>> {
        None
    }
    /// Whether the operator holds working state within the job's `memory_budget` (windows,
    /// join sides, groups). The budget is shared by the tasks whose chain has one; an operator
    /// that keeps nothing between batches (a projection, a sink) says `false`.
    fn uses_memory_budget(&self) -> bool {
        true
    }
}

/// Builds the reader of one source partition.
pub trait SourceFactory: Send + Sync {
    /// One line for EXPLAIN, e.g. `FileSource: bids.csv (csv)`.
    fn describe(&self) -> String;
    /// Whether the source ends by itself.
    fn is_bounded(&self) -> bool;
    /// Schema of the rows it produces.
    fn schema(&self) -> datafusion::arrow::datatypes::SchemaRef;
    /// How many partitions the source has; each is read in order by its own instance
    /// (instance i reads partition i).
    fn partitions(&self) -> Result<usize> {
        Ok(1)
    }
    /// A reader of partition `task.instance`, from the start or from `position` (what
    /// [`SourceReader::position`] returned at a checkpoint).
    fn create(&self, task: &TaskInfo, position: Option<&[u8]>) -> Result<Box<dyn SourceReader>>;

    /// Whether positions are kept per split and any instance can take over any split (Kafka
    /// partitions), so a checkpoint restores at another number of instances: each instance
    /// is then handed every old instance's position by [`SourceFactory::create_rescaled`].
    fn splits_movable(&self) -> bool {
        false
    }

    /// A reader of the splits `task.instance` owns, restored from the positions of all the
    /// instances of the checkpoint (their number differed). Only for
    /// [`SourceFactory::splits_movable`] sources.
    fn create_rescaled(
        &self,
        task: &TaskInfo,
        positions: &[&[u8]],
    ) -> Result<Box<dyn SourceReader>> {
        let _ = (task, positions);
        Err(crate::EngineError::Internal(format!(
            "{} cannot restore at another parallelism",
            self.describe()
        )))
    }

    /// How long a split may stay silent before it leaves the watermark minimum (the source's
    /// `idle_timeout`; `None`: it never does).
    fn idle_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// The same source leaving the columns `unread` (indexes in [`Self::schema`], all
    /// nullable) as nulls because no query of the job reads them: a source that can skip
    /// producing them (generating, decoding) returns itself so narrowed, the schema unchanged.
    /// `None`: it produces every column.
    fn without_columns(&self, unread: &[usize]) -> Option<Arc<dyn SourceFactory>> {
        let _ = unread;
        None
    }

    /// A checkpoint that includes `positions` (this source's, by instance) completed. Sources
    /// that report progress elsewhere (Kafka group offsets) do it here; failures are the
    /// source's to log, never the checkpoint's.
    fn checkpoint_completed(&self, positions: &[&[u8]]) {
        let _ = positions;
    }
}

/// How rows travel from an upstream stage to the instances of a downstream stage.
#[derive(Debug, Clone)]
pub enum Partitioning {
    /// Instance i sends to instance i (both stages have the same parallelism).
    Forward,
    /// Rows go to the instance chosen by the hash of these expressions (the keyed exchange).
    Hash(Vec<Arc<dyn PhysicalExpr>>),
    /// Every upstream instance sends to the single downstream instance (a merge).
    Single,
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioning::Forward => write!(f, "forward"),
            Partitioning::Hash(keys) => {
                let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                write!(f, "hash({})", keys.join(", "))
            }
            Partitioning::Single => write!(f, "single"),
        }
    }
}

/// An edge into a stage.
#[derive(Clone)]
pub struct StageInput {
    pub from: usize,
    pub partitioning: Partitioning,
}

/// The reader and event-time handling of a source stage.
#[derive(Clone)]
pub struct SourceStage {
    pub factory: Arc<dyn SourceFactory>,
    pub event_time: EventTimeSpec,
    /// Text of the event-time handling for EXPLAIN (watermark, window function).
    pub event_time_text: Vec<String>,
}

/// A stage: a chain of operators run as `parallelism` instances.
#[derive(Clone)]
pub struct Stage {
    pub name: String,
    pub parallelism: usize,
    /// Set for source stages, which have no inputs.
    pub source: Option<SourceStage>,
    pub inputs: Vec<StageInput>,
    pub chain: Vec<Arc<dyn OperatorFactory>>,
    /// Where the rows this stage drops as late are written (`late_rows = 'name'`); `None`:
    /// they are only counted. Checkpointed as the operator after the last of `chain`.
    pub late_rows: Option<Arc<dyn OperatorFactory>>,
}

/// A whole job: stages in an order where every input comes before its consumer. The last stage
/// holds the sink.
#[derive(Clone, Default)]
pub struct JobGraph {
    pub name: String,
    pub stages: Vec<Stage>,
}

impl JobGraph {
    /// Whether every source of the job is bounded.
    pub fn is_bounded(&self) -> bool {
        self.stages
            .iter()
            .filter_map(|s| s.source.as_ref())
            .all(|s| s.factory.is_bounded())
    }

    /// The dataflow as text, sink first, for EXPLAIN.
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (i, stage) in self.stages.iter().enumerate().rev() {
            let mut head = format!(
                "Stage {i} \"{}\" parallelism={}",
                stage.name, stage.parallelism
            );
            for input in &stage.inputs {
                head.push_str(&format!(
                    " <- stage {} [{}]",
                    input.from, input.partitioning
                ));
            }
            lines.push(head);
            if let Some(late) = &stage.late_rows {
                lines.push(format!("  (late rows) {}", late.describe()));
            }
            for op in stage.chain.iter().rev() {
                lines.push(format!("  {}", op.describe()));
            }
            if let Some(src) = &stage.source {
                for t in src.event_time_text.iter().rev() {
                    lines.push(format!("  {t}"));
                }
                lines.push(format!("  {}", src.factory.describe()));
            }
        }
        lines
    }
}
