//! The interactive REPL: statements edited over several lines and sent at their `;`, tab
//! completion of names, keywords, settings and connector options ([`crate::helper`]), hints
//! from a persistent history, and psql's backslash commands ([`META_COMMANDS`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor};
use weir_planner::sql::{split_statements, StatementText};
use weir_planner::{RelationKind, Session};

use crate::complete::META_COMMANDS;
use crate::diagnose::error_context;
use crate::helper::WeirHelper;
use crate::output::Format;
use crate::runner::{describe_error, install_interrupt_handler, terminated, Runner, SignalMode};
use weir_planner::jobs::JobState;

const HELP: &str = r#"Statements end with ';' and may span several lines (Tab completes names).
  CREATE TABLE t (col TYPE, ..., WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'data.csv', format = 'csv');
  SELECT window_start, window_end, count(*) FROM TUMBLE(t, ts, INTERVAL '10' SECOND)
      GROUP BY window_start, window_end;
  SHOW TABLES;  DESCRIBE t;  EXPLAIN SELECT ...;  EXPLAIN ANALYZE SELECT ...;
  SET parallelism = 4;  SHOW ALL;  SHOW JOBS;
Ctrl-C cancels a running query; Ctrl-D quits."#;

type WeirEditor = Editor<WeirHelper, DefaultHistory>;

pub fn run(session: &mut Session, format: Format, history: Option<PathBuf>) {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .max_history_size(10_000)
        .map(|b| b.build());
    let editor = config
        .map_err(|e| e.to_string())
        .and_then(|c| WeirEditor::with_config(c).map_err(|e| e.to_string()));
    let mut editor = match editor {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot start the line editor: {e}");
            return;
        }
    };
    editor.set_helper(Some(WeirHelper::new(session.vocabulary())));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    // After the editor: it installs its own SIGINT handler when created. While a line is read
    // the terminal is raw and Ctrl-C is a key; while a query runs it is a signal for us.
    let stopper = session.fork(session.config().clone());
    let stopper = std::sync::Mutex::new(stopper);
    let interrupted = install_interrupt_handler(
        SignalMode::Interactive,
        Some(Box::new(move || {
            eprintln!("terminated: stopping the jobs with a final checkpoint");
            if let Ok(mut s) = stopper.lock() {
                let _ = s.stop_jobs();
            }
            std::process::exit(143);
        })),
    );
    println!(
        "weir {} — streaming SQL. Type \\? for help, \\q to quit.",
        env!("CARGO_PKG_VERSION")
    );
    let mut runner = Runner::new(session, format, interrupted);
    runner.status_line = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut repl = Repl {
        editor,
        history,
        buffer: String::new(),
        last: None,
    };
    loop {
        let prompt = if repl.buffer.trim().is_empty() {
            "weir> "
        } else {
            "  -> "
        };
        match repl.editor.readline(prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if repl.buffer.trim().is_empty() && trimmed.starts_with('\\') {
                    repl.remember(trimmed);
                    if repl.meta(&mut runner, trimmed) == Flow::Quit {
                        break;
                    }
                    repl.refresh(&mut runner);
                    continue;
                }
                if !repl.buffer.is_empty() {
                    repl.buffer.push('\n');
                }
                repl.buffer.push_str(&line);
                let (statements, tail) = split_statements(&repl.buffer);
                if statements.is_empty() {
                    continue;
                }
                let entry = repl.buffer.trim().to_string();
                repl.remember(&entry);
                repl.last = Some(entry);
                run_statements(&mut runner, &statements);
                repl.refresh(&mut runner);
                if terminated() {
                    break;
                }
                repl.buffer = tail.map(|t| t.text).unwrap_or_default();
            }
            Err(ReadlineError::Interrupted) => {
                repl.buffer.clear();
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        }
    }
    if let Some(h) = &repl.history {
        let _ = repl.editor.save_history(h);
    }
    drop(runner);
    // Leaving the REPL stops the jobs with a final checkpoint (the next start resumes them).
    if session.has_running_jobs() {
        eprintln!("stopping the jobs with a final checkpoint");
        if let Err(e) = session.stop_jobs() {
            eprintln!("error: {e}");
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

struct Repl {
    editor: WeirEditor,
    history: Option<PathBuf>,
    /// Lines of a statement not ended yet (input that is not a terminal comes line by line).
    buffer: String,
    /// The last statement run (what `\e` edits).
    last: Option<String>,
}

impl Repl {
    /// Adds an entry to the history and writes the history file at once, so a crash or a
    /// kill does not lose the session's lines.
    fn remember(&mut self, entry: &str) {
        let _ = self.editor.add_history_entry(entry);
        if let Some(h) = &self.history {
            let _ = self.editor.save_history(h);
        }
    }

    /// Names for completion, as the last statement left them.
    fn refresh(&mut self, runner: &mut Runner) {
        let vocabulary = runner.session().vocabulary();
        if let Some(helper) = self.editor.helper_mut() {
            helper.vocabulary = vocabulary;
        }
    }

    /// Runs a backslash command.
    fn meta(&mut self, runner: &mut Runner, line: &str) -> Flow {
        // The command, then its argument as written (a quoted name may hold spaces).
        let (command, argument) = match line.split_once(char::is_whitespace) {
            Some((c, rest)) => (c, rest.trim()),
            None => (line, ""),
        };
        let result = match (command, argument) {
            ("\\q", _) => return Flow::Quit,
            ("\\?", _) | ("\\h", _) => {
                println!("{HELP}");
                println!("Commands:");
                for (c, args, what) in META_COMMANDS {
                    println!("  {:<22} {what}", format!("{c} {args}"));
                }
                Ok(())
            }
            ("\\d", "") => run_text(runner, "SHOW TABLES"),
            ("\\d", name) => run_text(runner, &format!("DESCRIBE {name}")),
            ("\\dt", _) => list_relations(runner, RelationKind::Table),
            ("\\dv", _) => list_relations(runner, RelationKind::View),
            ("\\dm", _) => list_relations(runner, RelationKind::MaterializedView),
            ("\\jobs", _) => list_jobs(runner),
            ("\\timing", arg) => toggle(arg, runner.timing).map(|on| {
                runner.timing = on;
                println!("Timing is {}.", if on { "on" } else { "off" });
            }),
            ("\\x", arg) => toggle(arg, runner.expanded()).map(|on| {
                runner.set_expanded(on);
                println!("Expanded display is {}.", if on { "on" } else { "off" });
            }),
            ("\\format", arg) => match arg.to_ascii_lowercase().as_str() {
                "table" => Ok(Format::Table),
                "csv" => Ok(Format::Csv),
                "json" => Ok(Format::Json),
                "" => {
                    println!("Output format is {:?}.", runner.format());
                    return Flow::Continue;
                }
                other => Err(anyhow::anyhow!(
                    "\\format takes table, csv or json, not '{other}'"
                )),
            }
            .map(|f| runner.set_format(f)),
            ("\\null", arg) => {
                runner.set_null(arg.trim_matches('\''));
                Ok(())
            }
            ("\\o", "") => runner.set_output(None),
            ("\\o", file) => runner.set_output(Some(Path::new(file))),
            ("\\i", "") => Err(anyhow::anyhow!("\\i needs a file name")),
            ("\\i", file) => include(runner, Path::new(file)),
            ("\\e", _) => self.edit(runner),
            (other, _) => {
                let names = META_COMMANDS.iter().map(|(c, _, _)| *c);
                Err(anyhow::anyhow!(
                    "unknown command {other}{}; \\? lists the commands",
                    weir_connectors::suggest::did_you_mean(other, names)
                ))
            }
        };
        if let Err(e) = result {
            eprintln!("error: {}", describe_error(&e));
        }
        Flow::Continue
    }

    /// `\e`: the last statement in $EDITOR (or $VISUAL, else vi); what the editor saved runs.
    fn edit(&mut self, runner: &mut Runner) -> anyhow::Result<()> {
        let dir = tempfile_dir()?;
        let path = dir.join("statement.sql");
        std::fs::write(&path, self.last.as_deref().unwrap_or(""))?;
        let editor = std::env::var("VISUAL")
            .or_else(|_| std::env::var("EDITOR"))
            .unwrap_or_else(|_| "vi".into());
        // The editor may take arguments (`code --wait`): run it through the shell.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{editor} \"$1\""))
            .arg("sh")
            .arg(&path)
            .status()
            .map_err(|e| anyhow::anyhow!("cannot start the editor '{editor}': {e}"))?;
        let text = std::fs::read_to_string(&path)?;
        let _ = std::fs::remove_dir_all(&dir);
        if !status.success() {
            anyhow::bail!("the editor '{editor}' failed ({status}); nothing runs");
        }
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        println!("{text}");
        self.remember(text);
        self.last = Some(text.to_string());
        let (mut statements, tail) = split_statements(text);
        statements.extend(tail);
        run_statements(runner, &statements);
        Ok(())
    }
}

/// A fresh private directory for `\e`'s file.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let dir = base.join(format!("weir-edit-{}-{attempt}", std::process::id()));
        if std::fs::create_dir(&dir).is_ok() {
            return Ok(dir);
        }
    }
    anyhow::bail!("cannot make a directory under '{}'", base.display())
}

/// `on`, `off`, or nothing (flips `now`).
fn toggle(arg: &str, now: bool) -> anyhow::Result<bool> {
    match arg.to_ascii_lowercase().as_str() {
        "" => Ok(!now),
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        other => Err(anyhow::anyhow!("expected on or off, not '{other}'")),
    }
}

/// Runs statements, each error printed; Ctrl-C stops the rest.
fn run_statements(runner: &mut Runner, statements: &[StatementText]) {
    runner.clear_interrupt();
    for stmt in statements {
        if let Err(e) = runner.run_statement(stmt) {
            eprintln!("error: {}", describe_error(&e));
            if let Some(context) = error_context(&e, stmt) {
                eprintln!("{context}");
            }
        }
        // Ctrl-C cancelled it: the statements after it on the line do not run.
        if runner.interrupted() {
            break;
        }
    }
}

fn run_text(runner: &mut Runner, text: &str) -> anyhow::Result<()> {
    runner.clear_interrupt();
    runner.run_statement(&StatementText {
        text: text.to_string(),
        line: 1,
    })
}

/// `\dt`, `\dv`, `\dm`: the relations of one kind with their columns.
fn list_relations(runner: &mut Runner, kind: RelationKind) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = runner
        .session()
        .vocabulary()
        .relations
        .into_iter()
        .filter(|r| r.kind == kind)
        .map(|r| vec![r.name, r.columns.join(", ")])
        .collect();
    runner.print_rows(&["name", "columns"], rows)
}

/// `\jobs`: SHOW JOBS with rates (two samples half a second apart), the watermark's lag
/// behind the newest event, and the newest checkpoint's age.
fn list_jobs(runner: &mut Runner) -> anyhow::Result<()> {
    let observer = runner.session().job_observer();
    let before = observer.jobs();
    let started = std::time::Instant::now();
    if before.iter().any(|j| j.state == JobState::Running) {
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let after = observer.jobs();
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut rows = Vec::new();
    for row in observer.rows() {
        let name = &row[0];
        let live = after.iter().find(|j| &j.name == name);
        let was = before.iter().find(|j| &j.name == name);
        let rate = |f: fn(&weir_engine::MetricsSnapshot) -> u64| match (live, was) {
            (Some(a), Some(b)) if a.state == JobState::Running => {
                format!(
                    "{:.0}",
                    f(&a.metrics).saturating_sub(f(&b.metrics)) as f64 / secs
                )
            }
            _ => String::new(),
        };
        let lag = live
            .map(|j| &j.metrics)
            .filter(|m| m.watermark != i64::MIN && m.newest_event_time != i64::MIN)
            .map(|m| format!("{:.1}s", (m.newest_event_time - m.watermark) as f64 / 1e9))
            .unwrap_or_default();
        let age = live
            .and_then(|j| j.checkpoints.as_ref())
            .filter(|c| {
                c.last_completed_ms > 0 && live.is_some_and(|j| j.state == JobState::Running)
            })
            .map(|c| format!("{:.1}s", (now_ms - c.last_completed_ms as i64) as f64 / 1e3))
            .unwrap_or_default();
        rows.push(vec![
            name.clone(),
            row[1].clone(),
            rate(|m| m.rows_in),
            rate(|m| m.rows_out),
            row[3].clone(),
            lag,
            row[6].clone(),
            row[2].clone(),
            age,
            live.map(|j| j.restarts.to_string()).unwrap_or_default(),
            row[7].clone(),
        ]);
    }
    runner.print_rows(
        &[
            "name",
            "state",
            "rows/s in",
            "rows/s out",
            "watermark",
            "lag",
            "late_rows",
            "checkpoint",
            "checkpoint_age",
            "restarts",
            "error",
        ],
        rows,
    )
}

/// `\i FILE`: the file's statements, stopping at the first that fails (named by file and
/// line) or at Ctrl-C. Jobs it creates keep running, as if typed.
fn include(runner: &mut Runner, path: &Path) -> anyhow::Result<()> {
    let script = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read '{}': {e}", path.display()))?;
    let (mut statements, tail) = split_statements(&script);
    statements.extend(tail);
    runner.clear_interrupt();
    for stmt in &statements {
        if let Err(e) = runner.run_statement(stmt) {
            anyhow::bail!("{}:{}: {}", path.display(), stmt.line, describe_error(&e));
        }
        if runner.interrupted() {
            break;
        }
    }
    std::io::stdout().flush()?;
    Ok(())
}
