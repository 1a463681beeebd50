//! Runs statements and prints what they return; shared by the script runner and the REPL.
//!
//! In csv and json formats stdout carries only results; status lines, counts and warnings go
//! to stderr.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::sync::Arc;

use anyhow::Result;
use crossbeam_channel::{select, Receiver};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_connectors::sinks::SinkEvent;
use weir_planner::sql::{split_statements, StatementText};
use weir_planner::{QueryRun, Session, StatementResult};

use crate::output::{render_table, Format, ResultWriter, StreamingTable};

/// Rows of a bounded result held to print it as one table aligned over all of them; past
/// this it prints as it comes.
const WHOLE_TABLE_ROWS: usize = 1000;

/// `batch` with the column names of the query's result schema (which names unnamed
/// expressions as PostgreSQL does: `?column?`).
fn relabel(schema: &SchemaRef, batch: RecordBatch) -> RecordBatch {
    let same = batch
        .schema()
        .fields()
        .iter()
        .zip(schema.fields())
        .all(|(a, b)| a.name() == b.name());
    if same || batch.num_columns() != schema.fields().len() {
        return batch;
    }
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(schema.fields())
        .map(|(f, named)| f.as_ref().clone().with_name(named.name()))
        .collect();
    let columns = batch.columns().to_vec();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap_or(batch)
}

/// An error with its causes, each cause once: weir's errors already hold their causes'
/// messages, and printing the chain again repeated them ("...: Not a directory: Not a
/// directory").
pub fn describe_error(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let m = cause.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
    }
    out
}

/// Signals received (SIGINT and SIGTERM).
static SIGNALS: AtomicUsize = AtomicUsize::new(0);
/// Set once SIGTERM came.
static TERMINATED: AtomicBool = AtomicBool::new(false);

/// How the process reacts to signals.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SignalMode {
    /// `weir -f`, `weir resume`: the first Ctrl-C or SIGTERM cancels the running query,
    /// ends the script and stops the jobs with a final checkpoint; a second one ends the
    /// process at once (130), as the shells do.
    Batch,
    /// The REPL: Ctrl-C cancels the running query (at the prompt it is a key the line
    /// editor reads); SIGTERM cancels it and ends the REPL, jobs stopped with a final
    /// checkpoint.
    Interactive,
}

/// Installs the handlers; each signal is one message on the returned channel (at most one
/// waits unread). `on_terminate` runs when SIGTERM comes in the interactive mode while no
/// statement runs (the line editor blocks the main thread): it stops the jobs and exits.
pub fn install_interrupt_handler(
    mode: SignalMode,
    on_terminate: Option<Box<dyn Fn() + Send>>,
) -> Receiver<()> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let sigint = tx.clone();
    if ctrlc::set_handler(move || {
        let n = SIGNALS.fetch_add(1, Ordering::SeqCst) + 1;
        if mode == SignalMode::Batch && n >= 2 {
            eprintln!("interrupted again: exiting without a final checkpoint");
            std::process::exit(130);
        }
        let _ = sigint.try_send(());
    })
    .is_err()
    {
        eprintln!("warning: cannot install the Ctrl-C handler");
    }
    let spawned = std::thread::Builder::new()
        .name("weir-sigterm".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let Ok(mut term) = signal(SignalKind::terminate()) else {
                    return;
                };
                while term.recv().await.is_some() {
                    TERMINATED.store(true, Ordering::SeqCst);
                    let n = SIGNALS.fetch_add(1, Ordering::SeqCst) + 1;
                    if mode == SignalMode::Batch && n >= 2 {
                        eprintln!("terminated again: exiting without a final checkpoint");
                        std::process::exit(143);
                    }
                    let _ = tx.try_send(());
                    if let Some(stop) = &on_terminate {
                        // Give a running statement the moment to notice and end the REPL
                        // itself; at the prompt nothing will.
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                        if !STATEMENT_RUNNING.load(Ordering::SeqCst) {
                            stop();
                        }
                    }
                }
            });
        });
    if spawned.is_err() {
        eprintln!("warning: cannot install the SIGTERM handler");
    }
    rx
}

/// Whether SIGTERM came (the process should end once the running statement stopped).
pub fn terminated() -> bool {
    TERMINATED.load(Ordering::SeqCst)
}

/// Set while the runner runs a statement (the REPL's SIGTERM handler leaves ending the
/// process to it then).
static STATEMENT_RUNNING: AtomicBool = AtomicBool::new(false);

/// Set once a write to stdout failed because its reader went away (`weir -f q.sql | head`).
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Stdout, noting when its reader has gone (a broken pipe) so the script can end quietly
/// instead of failing on every later line.
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        noting_closed(std::io::stdout().lock().write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        noting_closed(std::io::stdout().lock().flush())
    }
}

fn noting_closed<T>(r: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(e) = &r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
    }
    r
}

/// Whether stdout's reader has gone.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// How a script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptEnd {
    Done,
    Failed,
    /// A signal stopped it (exit status 130).
    Interrupted,
}

pub struct Runner<'a> {
    session: &'a mut Session,
    format: Format,
    interrupt: Receiver<()>,
    /// A signal came while the last statement ran (it was cancelled).
    interrupted: bool,
}

impl<'a> Runner<'a> {
    pub fn new(session: &'a mut Session, format: Format, interrupt: Receiver<()>) -> Self {
        Self {
            session,
            format,
            interrupt,
            interrupted: false,
        }
    }

    /// Forgets a Ctrl-C pressed before now (e.g. at the prompt).
    pub fn clear_interrupt(&mut self) {
        while self.interrupt.try_recv().is_ok() {}
        self.interrupted = false;
    }

    /// Whether a signal came while the last statement ran, or since.
    pub fn interrupted(&mut self) -> bool {
        if self.interrupt.try_recv().is_ok() {
            self.interrupted = true;
        }
        self.interrupted
    }

    /// Prints a status line: stdout for tables, stderr otherwise.
    fn status(&self, text: &str) -> Result<()> {
        if self.format == Format::Table {
            writeln!(Stdout, "{text}")?;
        } else {
            eprintln!("{text}");
        }
        Ok(())
    }

    /// Runs a whole script; stops at the first failing statement, or at a signal (Ctrl-C,
    /// SIGTERM: the running query is cancelled, no later statement runs). Then waits for the
    /// sink jobs to end (bounded ones finish; after a signal, or at one, they stop with a
    /// final checkpoint).
    pub fn run_script(&mut self, script: &str, name: &str) -> ScriptEnd {
        let (mut statements, tail) = split_statements(script);
        statements.extend(tail);
        for stmt in &statements {
            if self.interrupted() {
                break;
            }
            if let Err(e) = self.run_statement(stmt) {
                if stdout_closed() {
                    // The reader of the output has gone (`| head`): nothing more can be shown,
                    // which is no failure. The query was stopped; jobs go on as usual.
                    break;
                }
                if self.interrupted() {
                    break;
                }
                eprintln!("error: {name}:{}: {}", stmt.line, describe_error(&e));
                return ScriptEnd::Failed;
            }
        }
        if self.interrupted() {
            eprintln!(
                "interrupted: the rest of the script does not run; jobs stop with a final checkpoint"
            );
            self.finish_jobs(true);
            return ScriptEnd::Interrupted;
        }
        if self.wait_for_jobs() {
            ScriptEnd::Done
        } else {
            ScriptEnd::Failed
        }
    }

    /// Waits for the session's sink jobs; reports how each ended. Returns whether none failed.
    pub fn wait_for_jobs(&mut self) -> bool {
        self.finish_jobs(false)
    }

    /// Waits for the jobs (`stop`: stops them at once with a final checkpoint) and reports
    /// how each ended; whether none failed.
    fn finish_jobs(&mut self, stop: bool) -> bool {
        if !self.session.has_running_jobs() {
            return true;
        }
        let interrupt = if stop {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let _ = tx.send(());
            rx
        } else {
            self.clear_interrupt();
            self.interrupt.clone()
        };
        match self.session.wait_for_jobs(&interrupt) {
            Ok(jobs) => {
                let mut ok = true;
                for (name, state, error) in jobs {
                    // Failures that passed are worth knowing about even when the job ended well.
                    let restarts = match self.session.job_restarts(&name).unwrap_or(0) {
                        0 => String::new(),
                        1 => " after 1 restart from its checkpoint".to_string(),
                        n => format!(" after {n} restarts from its checkpoints"),
                    };
                    match error {
                        Some(e) => {
                            ok = false;
                            eprintln!("error: job {name} failed{restarts}: {e}");
                        }
                        None => eprintln!("job {name}: {}{restarts}", state.as_str()),
                    }
                }
                ok
            }
            Err(e) => {
                eprintln!("error: {e}");
                false
            }
        }
    }

    /// Runs one statement and prints its result.
    pub fn run_statement(&mut self, stmt: &StatementText) -> Result<()> {
        STATEMENT_RUNNING.store(true, Ordering::SeqCst);
        let result = self.run_statement_inner(stmt);
        STATEMENT_RUNNING.store(false, Ordering::SeqCst);
        result
    }

    fn run_statement_inner(&mut self, stmt: &StatementText) -> Result<()> {
        // A bug must not take the session down with it: report it like any error.
        let session = &mut *self.session;
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session.execute(stmt)))
                .map_err(|_| {
                    anyhow::anyhow!("internal error while running the statement (a bug in weir)")
                })?;
        match result? {
            StatementResult::Command(tag) => self.status(&tag)?,
            StatementResult::Rows(schema, batches) => {
                if self.format == Format::Table {
                    write!(Stdout, "{}", render_table(&schema, &batches)?)?;
                } else {
                    let mut w = ResultWriter::new(Stdout, self.format, schema);
                    for b in &batches {
                        w.write_batch(b)?;
                    }
                    w.finish()?;
                }
            }
            StatementResult::Query(run) => self.stream(run)?,
            StatementResult::Transaction(t) => self.status(t.tag())?,
        }
        Ok(())
    }

    /// Prints a query's rows as its windows close, until it ends, Ctrl-C, or the output's
    /// reader goes away (the query is stopped then too).
    fn stream(&mut self, run: QueryRun) -> Result<()> {
        let control = run.job.control();
        let result = self.stream_rows(run);
        if result.is_err() {
            control.cancel();
        }
        result
    }

    fn stream_rows(&mut self, run: QueryRun) -> Result<()> {
        let QueryRun {
            schema,
            events,
            job,
            bounded,
            limit,
        } = run;
        let mut writer = ResultWriter::new(Stdout, self.format, schema.clone());
        let mut table_rows = Vec::new();
        let mut rows = 0usize;
        // A bounded result (or one with a LIMIT) prints as one table, aligned over all its
        // rows, while it is small; a larger one (and an endless one) as it comes, in columns
        // sized by its first rows, so nothing waits for the end or is held in memory.
        let mut whole_table = bounded || limit.is_some();
        let mut held_rows = 0usize;
        let mut done = false;
        let mut streaming_table = StreamingTable::default();
        while !done {
            let event = select! {
                recv(events) -> event => event,
                recv(self.interrupt) -> _ => {
                    self.interrupted = true;
                    job.cancel();
                    drop(events);
                    let _ = job.wait();
                    writer.finish()?;
                    self.status("query cancelled")?;
                    return Ok(());
                }
            };
            match event {
                Ok(SinkEvent::Batch(b)) => {
                    let b = relabel(&schema, b);
                    rows += b.num_rows();
                    done = limit.is_some_and(|l| rows >= l);
                    match self.format {
                        Format::Table if whole_table => {
                            held_rows += b.num_rows();
                            table_rows.push(b);
                            if held_rows > WHOLE_TABLE_ROWS {
                                whole_table = false;
                                for b in table_rows.drain(..) {
                                    write!(Stdout, "{}", streaming_table.render(&schema, &b)?)?;
                                }
                                Stdout.flush()?;
                            }
                        }
                        Format::Table => {
                            write!(Stdout, "{}", streaming_table.render(&schema, &b)?)?;
                            Stdout.flush()?;
                        }
                        _ => writer.write_batch(&b)?,
                    }
                }
                Ok(SinkEvent::Watermark(_)) => {}
                Err(_) => break,
            }
        }
        drop(events);
        if self.format == Format::Table && whole_table {
            write!(Stdout, "{}", render_table(&schema, &table_rows)?)?;
        }
        writer.finish()?;
        drop(writer);
        let metrics = job.finish_early_or_wait(done)?;
        let mut line = format!("({rows} row{})", if rows == 1 { "" } else { "s" });
        if metrics.late_rows > 0 || metrics.skipped_rows > 0 {
            line = format!(
                "({rows} row{}; {} late row{} dropped; {} malformed row{} skipped)",
                if rows == 1 { "" } else { "s" },
                metrics.late_rows,
                if metrics.late_rows == 1 { "" } else { "s" },
                metrics.skipped_rows,
                if metrics.skipped_rows == 1 { "" } else { "s" },
            );
        }
        self.status(&line)?;
        Ok(())
    }
}
