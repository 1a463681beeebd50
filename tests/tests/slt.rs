//! Runs every `slt/*.slt` file in-process, at parallelism 1 and 3: the results must not depend
//! on parallelism.

mod common;

use std::path::PathBuf;

use common::{session, WeirDb};

fn slt_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("slt")
        .expect("slt directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files found");
    files
}

fn run_all(parallelism: usize) {
    let mut failures = Vec::new();
    for file in slt_files() {
        let mut runner = sqllogictest::Runner::new(move || async move {
            Ok::<_, weir_planner::PlanError>(WeirDb {
                session: session(parallelism),
            })
        });
        if let Err(e) = runner.run_file(&file) {
            failures.push(format!("{}: {e}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "parallelism {parallelism}:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn slt_at_parallelism_1() {
    run_all(1);
}

#[test]
fn slt_at_parallelism_3() {
    run_all(3);
}
