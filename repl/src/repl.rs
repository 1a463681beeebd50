//! The interactive REPL: multi-line statements ending with `;`, persistent history, `\q`,
//! `\?`, `\d [table]`.

use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use weir_planner::sql::{split_statements, StatementText};
use weir_planner::Session;

use crate::output::Format;
use crate::runner::{describe_error, install_interrupt_handler, terminated, Runner, SignalMode};

const HELP: &str = r#"Statements end with ';' and may span several lines.
  CREATE TABLE t (col TYPE, ..., WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'data.csv', format = 'csv');
  SELECT window_start, window_end, count(*) FROM TUMBLE(t, ts, INTERVAL '10' SECOND)
      GROUP BY window_start, window_end;
  SHOW TABLES;  DESCRIBE t;  EXPLAIN SELECT ...;  EXPLAIN ANALYZE SELECT ...;
  SET parallelism = 4;  SHOW ALL;
Commands:
  \d          list tables         \d NAME   describe a table
  \?          this help           \q        quit
Ctrl-C cancels a running query; Ctrl-D quits."#;

pub fn run(session: &mut Session, format: Format, history: Option<PathBuf>) {
    let mut editor = match DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot start the line editor: {e}");
            return;
        }
    };
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
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.trim().is_empty() {
            "weir> "
        } else {
            "  -> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if buffer.trim().is_empty() && trimmed.starts_with('\\') {
                    remember(&mut editor, trimmed, history.as_deref());
                    // The command, then its argument as written (a quoted name may hold spaces).
                    let (command, argument) = match trimmed.split_once(char::is_whitespace) {
                        Some((c, rest)) => (c, rest.trim()),
                        None => (trimmed, ""),
                    };
                    match (command, argument) {
                        ("\\q", _) => break,
                        ("\\?", _) | ("\\h", _) => println!("{HELP}"),
                        ("\\d", "") => run_one(&mut runner, "SHOW TABLES"),
                        ("\\d", name) => run_one(&mut runner, &format!("DESCRIBE {name}")),
                        (other, _) => {
                            eprintln!("unknown command {other}; \\? lists the commands")
                        }
                    }
                    continue;
                }
                if !buffer.is_empty() {
                    buffer.push('\n');
                }
                buffer.push_str(&line);
                let (statements, tail) = split_statements(&buffer);
                if statements.is_empty() {
                    continue;
                }
                remember(&mut editor, buffer.trim(), history.as_deref());
                runner.clear_interrupt();
                for stmt in statements {
                    if let Err(e) = runner.run_statement(&stmt) {
                        eprintln!("error: {}", describe_error(&e));
                    }
                    // Ctrl-C cancelled it: the statements after it on the line do not run.
                    if runner.interrupted() {
                        break;
                    }
                }
                if terminated() {
                    break;
                }
                buffer = tail.map(|t| t.text).unwrap_or_default();
            }
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
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

/// Adds an entry to the history and writes the history file at once, so a crash or a kill
/// does not lose the session's lines.
fn remember(editor: &mut DefaultEditor, entry: &str, history: Option<&std::path::Path>) {
    let _ = editor.add_history_entry(entry);
    if let Some(h) = history {
        let _ = editor.save_history(h);
    }
}

fn run_one(runner: &mut Runner, text: &str) {
    runner.clear_interrupt();
    let stmt = StatementText {
        text: text.to_string(),
        line: 1,
    };
    if let Err(e) = runner.run_statement(&stmt) {
        eprintln!("error: {}", describe_error(&e));
    }
}
