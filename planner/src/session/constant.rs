//! Queries that read no table (`SELECT 1`, `SELECT now()`, a join of VALUES lists) run on
//! DataFusion at once, as a job of one thread that streams its batches as any query does: the
//! front end shows them as they come and cancels the query (Ctrl-C, a CancelRequest, a client
//! gone), no session lock is held meanwhile, and DataFusion's memory pool holds what its
//! operators keep (sorts, aggregates, joins) to the session's `memory_budget`.

use std::time::Duration;

use crossbeam_channel::{SendTimeoutError, Sender};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execute_stream;
use futures::StreamExt;
use weir_connectors::sinks::SinkEvent;
use weir_engine::runtime::{spawn_thread_job, ThreadJob};
use weir_engine::{EngineError, JobHandle};

use crate::error::{PlanError, Result};

/// How often a running constant query looks at its cancel flag.
const CANCEL_CHECK: Duration = Duration::from_millis(50);

/// Plans `plan` physically (errors come back here, before any row) and starts it; its rows
/// arrive on `tx`.
pub(super) fn spawn_constant(
    name: &str,
    state: &SessionState,
    plan: LogicalPlan,
    memory_budget: usize,
    tx: Sender<SinkEvent>,
) -> Result<JobHandle> {
    let env = RuntimeEnvBuilder::new()
        .with_memory_limit(memory_budget, 1.0)
        .build_arc()?;
    let state = SessionStateBuilder::new_from_existing(state.clone())
        .with_runtime_env(env)
        .build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| PlanError::io("cannot start the query runtime", e))?;
    let physical = rt.block_on(state.create_physical_plan(&plan))?;
    let task = state.task_ctx();
    Ok(spawn_thread_job(name, move |job| {
        rt.block_on(async move {
            let failed = |e| df_error(e, memory_budget);
            let mut stream = execute_stream(physical, task).map_err(failed)?;
            let mut tick = tokio::time::interval(CANCEL_CHECK);
            loop {
                // DataFusion's operators yield to the runtime now and then (tokio's
                // cooperative budget), so the tick runs even while one computes for long.
                tokio::select! {
                    next = stream.next() => match next {
                        None => return Ok(()),
                        Some(batch) => {
                            let batch = batch.map_err(failed)?;
                            job.metrics().add_rows_out(batch.num_rows() as u64);
                            if !send(&tx, batch, job) {
                                return Ok(());
                            }
                        }
                    },
                    _ = tick.tick() => {
                        if job.is_cancelled() {
                            return Ok(());
                        }
                    }
                }
            }
        })
    })?)
}

/// Hands a batch to the reader; `false` when the reader went away or the query was
/// cancelled meanwhile.
fn send(tx: &Sender<SinkEvent>, batch: RecordBatch, job: &ThreadJob) -> bool {
    let mut event = SinkEvent::Batch(batch);
    loop {
        match tx.send_timeout(event, CANCEL_CHECK) {
            Ok(()) => return true,
            Err(SendTimeoutError::Disconnected(_)) => return false,
            Err(SendTimeoutError::Timeout(back)) => {
                if job.is_cancelled() {
                    return false;
                }
                event = back;
            }
        }
    }
}

/// DataFusion's error; running out of the memory pool says which setting bounds it.
fn df_error(e: DataFusionError, memory_budget: usize) -> EngineError {
    if let DataFusionError::ResourcesExhausted(detail) = e.find_root() {
        let first = detail.lines().next().unwrap_or_default();
        return EngineError::DataFusion(DataFusionError::ResourcesExhausted(format!(
            "the query needs more memory than memory_budget ({} MB) allows; SET memory_budget \
             to allow more ({first})",
            memory_budget >> 20
        )));
    }
    EngineError::DataFusion(e)
}
