//! Runs statements and prints what they return; shared by the script runner and the REPL.
//!
//! In csv and json formats stdout carries only results; status lines, counts and warnings go
//! to stderr.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::sync::Arc;

use anyhow::Result;
use crossbeam_channel::{select, Receiver};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_connectors::sinks::SinkEvent;
use weir_planner::sql::{split_statements, StatementText};
use weir_planner::{QueryRun, Session, StatementResult};

use crate::output::{render_table, Format, ResultWriter, StreamingTable, TableOptions};
use crate::status::{self, LiveStatus};

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

/// Runs `print` with the status line (if any) off the screen.
fn quietly<R>(live: &Option<LiveStatus>, print: impl FnOnce() -> R) -> R {
    match live {
        Some(l) => l.suspend(print),
        None => print(),
    }
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

/// Where results go: stdout, noting when its reader has gone (a broken pipe) so the
/// script can end quietly instead of failing on every later line; or a file (`\o`).
#[derive(Clone)]
pub enum Out {
    Stdout,
    File(Arc<std::sync::Mutex<std::fs::File>>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::Stdout => noting_closed(std::io::stdout().lock().write(buf)),
            Out::File(f) => f
                .lock()
                .map_err(|_| std::io::Error::other("output file poisoned"))?
                .write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stdout => noting_closed(std::io::stdout().lock().flush()),
            Out::File(f) => f
                .lock()
                .map_err(|_| std::io::Error::other("output file poisoned"))?
                .flush(),
        }
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
    /// Where results go (`\o FILE` sends them to a file).
    out: Out,
    /// NULL's text and expanded rows (`\null`, `\x`); the width is the terminal's, taken
    /// for each statement.
    table: TableOptions,
    /// Print how long each statement took (`\timing`).
    pub timing: bool,
    /// Show the live status line on stderr while a query runs (when it is a terminal).
    pub status_line: bool,
}

impl<'a> Runner<'a> {
    pub fn new(session: &'a mut Session, format: Format, interrupt: Receiver<()>) -> Self {
        Self {
            session,
            format,
            interrupt,
            interrupted: false,
            out: Out::Stdout,
            table: TableOptions::default(),
            timing: false,
            status_line: false,
        }
    }

    pub fn session(&mut self) -> &mut Session {
        self.session
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn set_format(&mut self, format: Format) {
        self.format = format;
    }

    /// Expanded rows (`\x`).
    pub fn expanded(&self) -> bool {
        self.table.expanded
    }

    pub fn set_expanded(&mut self, on: bool) {
        self.table.expanded = on;
    }

    /// How NULL is shown in tables (`\null`).
    pub fn set_null(&mut self, text: &str) {
        self.table.null = text.to_string();
    }

    /// Sends results to a file (`\o FILE`), or back to stdout (`None`).
    pub fn set_output(&mut self, file: Option<&std::path::Path>) -> Result<()> {
        self.out = match file {
            None => Out::Stdout,
            Some(path) => {
                let f = std::fs::File::create(path)
                    .map_err(|e| anyhow::anyhow!("cannot write '{}': {e}", path.display()))?;
                Out::File(Arc::new(std::sync::Mutex::new(f)))
            }
        };
        Ok(())
    }

    /// Table options for the statement about to run: fitted to the terminal when results
    /// go to one.
    fn table_options(&self) -> TableOptions {
        let mut options = self.table.clone();
        options.width = match self.out {
            Out::Stdout if std::io::stdout().is_terminal() => {
                terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
            }
            _ => None,
        };
        options
    }

    /// Prints rows computed by the REPL itself (`\dt`) as results are printed.
    pub fn print_rows(&mut self, headers: &[&str], rows: Vec<Vec<String>>) -> Result<()> {
        use datafusion::arrow::array::{ArrayRef, StringArray};
        use datafusion::arrow::datatypes::DataType;
        let schema = Arc::new(Schema::new(
            headers
                .iter()
                .map(|h| Field::new(*h, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let columns: Vec<ArrayRef> = (0..headers.len())
            .map(|i| {
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r[i].clone()).collect::<Vec<_>>(),
                )) as ArrayRef
            })
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        self.print_whole(&schema, &[batch])
    }

    /// A whole result, in the chosen format.
    fn print_whole(&mut self, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<()> {
        if self.format == Format::Table {
            let text = render_table(schema, batches, &self.table_options())?;
            write!(self.out, "{text}")?;
            self.out.flush()?;
        } else {
            let mut w = ResultWriter::new(self.out.clone(), self.format, Arc::clone(schema));
            for b in batches {
                w.write_batch(b)?;
            }
            w.finish()?;
        }
        Ok(())
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
            let mut out = self.out.clone();
            writeln!(out, "{text}")?;
            out.flush()?;
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
                if let Some(context) = crate::diagnose::error_context(&e, stmt) {
                    eprintln!("{context}");
                }
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
        let started = std::time::Instant::now();
        let result = self.run_statement_inner(stmt);
        STATEMENT_RUNNING.store(false, Ordering::SeqCst);
        if self.timing {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            self.status(&format!("Time: {ms:.3} ms"))?;
        }
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
            StatementResult::Rows(schema, batches) => self.print_whole(&schema, &batches)?,
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
        let mut writer = ResultWriter::new(self.out.clone(), self.format, schema.clone());
        let mut out = self.out.clone();
        let table = self.table_options();
        let mut table_rows = Vec::new();
        let mut rows = 0usize;
        // A bounded result (or one with a LIMIT) prints as one table, aligned over all its
        // rows, while it is small; a larger one (and an endless one) as it comes, in columns
        // sized by its first rows, so nothing waits for the end or is held in memory.
        let mut whole_table = bounded || limit.is_some();
        let mut held_rows = 0usize;
        let mut done = false;
        let mut streaming_table = StreamingTable::default();
        let control = job.control();
        let mut live = LiveStatus::start(self.status_line);
        let ticks = match live {
            Some(_) => crossbeam_channel::tick(status::REFRESH),
            None => crossbeam_channel::never(),
        };
        while !done {
            let event = select! {
                recv(events) -> event => event,
                recv(ticks) -> _ => {
                    if let Some(l) = live.as_mut() {
                        l.update(&control.metrics(), control.checkpoints().as_ref());
                    }
                    continue;
                }
                recv(self.interrupt) -> _ => {
                    if let Some(l) = live.take() {
                        l.finish();
                    }
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
                    let printed = quietly(&live, || -> Result<()> {
                        match self.format {
                            Format::Table if whole_table => {
                                held_rows += b.num_rows();
                                table_rows.push(b);
                                if held_rows > WHOLE_TABLE_ROWS {
                                    whole_table = false;
                                    for b in table_rows.drain(..) {
                                        write!(
                                            out,
                                            "{}",
                                            streaming_table.render(&schema, &b, &table)?
                                        )?;
                                    }
                                    out.flush()?;
                                }
                            }
                            Format::Table => {
                                write!(out, "{}", streaming_table.render(&schema, &b, &table)?)?;
                                out.flush()?;
                            }
                            _ => writer.write_batch(&b)?,
                        }
                        Ok(())
                    });
                    printed?;
                }
                Ok(SinkEvent::Watermark(_)) => {}
                Err(_) => break,
            }
        }
        if let Some(l) = live.take() {
            l.finish();
        }
        drop(events);
        if self.format == Format::Table && whole_table {
            write!(out, "{}", render_table(&schema, &table_rows, &table)?)?;
            out.flush()?;
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
