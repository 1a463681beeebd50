use super::*;
use crate::sql::statement::{CreateJob, JobKind, JobTarget, ShowTarget, Transaction};
use datafusion::sql::sqlparser::ast::Statement;

fn parse(text: &str) -> WeirStatement {
    parse_statement(text, 1).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn takes_the_watermark_clause_out_of_create_table() {
    let WeirStatement::CreateTable(t) = parse(
        "CREATE TABLE bids (auction BIGINT, date_time TIMESTAMP,\n WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (connector = 'file')",
    ) else {
        panic!("not CREATE TABLE")
    };
    let w = t.watermark.unwrap();
    assert_eq!(w.column.value, "date_time");
    assert_eq!(w.expr.to_string(), "date_time - INTERVAL '4' SECOND");
    assert_eq!(t.columns.len(), 2);
    assert_eq!(t.options, vec![("connector".into(), "file".into())]);
}

#[test]
fn a_proctime_column_is_taken_out_with_its_position() {
    let WeirStatement::CreateTable(t) = parse(
        "CREATE TABLE t (a BIGINT, pt AS PROCTIME(), ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (connector = 'file')",
    ) else {
        panic!("not CREATE TABLE")
    };
    let (column, position) = t.proctime.unwrap();
    assert_eq!((column.value.as_str(), position), ("pt", 1));
    assert_eq!(t.columns.len(), 2);
    assert!(t.watermark.is_some());
    let err = parse_statement(
        "CREATE TABLE t (a BIGINT, b AS a + 1) WITH (connector = 'file')",
        1,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("computed column b AS a + 1"),
        "{err}"
    );
}

#[test]
fn watermark_clause_may_come_first_and_columns_may_be_absent() {
    let WeirStatement::CreateTable(t) =
        parse("CREATE TABLE t (WATERMARK FOR ts AS ts, ts TIMESTAMP) WITH (connector = 'file')")
    else {
        panic!()
    };
    assert!(t.watermark.is_some());
    assert_eq!(t.columns.len(), 1);
    let WeirStatement::CreateTable(t) =
        parse("create table IF NOT EXISTS \"Bids\" with (connector = 'nexmark')")
    else {
        panic!()
    };
    assert!(t.columns.is_empty() && t.if_not_exists);
    assert_eq!(t.name, "Bids");
}

#[test]
fn quoted_job_names_keep_their_case_everywhere() {
    let WeirStatement::CreateJob(job) =
        parse("CREATE SINK \"Top\" WITH (connector = 'blackhole') AS SELECT 1")
    else {
        panic!()
    };
    assert_eq!(job.target, JobTarget::Sink("Top".into()));
    for (text, kind) in [
        ("DROP SINK \"Top\"", JobKind::Sink),
        ("drop materialized view if exists \"Top\";", JobKind::View),
    ] {
        let WeirStatement::DropJob { kind: k, name, .. } = parse(text) else {
            panic!("{text}")
        };
        assert_eq!((k, name.as_str()), (kind, "Top"));
    }
    assert!(matches!(parse("CANCEL JOB \"Top\""), WeirStatement::CancelJob(n) if n == "Top"));
    assert!(matches!(parse("CANCEL JOB Top"), WeirStatement::CancelJob(n) if n == "top"));
}

#[test]
fn insert_into_is_a_job_and_records_as_a_sink() {
    let WeirStatement::CreateJob(job) = parse("INSERT INTO out (a, \"B\") SELECT x, y FROM t")
    else {
        panic!()
    };
    assert_eq!(
        job.target,
        JobTarget::Insert {
            table: "out".into(),
            columns: vec!["a".into(), "B".into()]
        }
    );
    let recorded = CreateJob {
        target: JobTarget::Sink("out_insert_1".into()),
        options: vec![("url".into(), "host='x'".into())],
        ..*job
    };
    let text = recorded.to_string();
    assert_eq!(
        text,
        "CREATE SINK \"out_insert_1\" WITH (\"url\" = 'host=''x''') AS SELECT x, y FROM t"
    );
    let WeirStatement::CreateJob(back) = parse(&text) else {
        panic!()
    };
    assert_eq!(back.options, recorded.options);
    assert_eq!(back.target, recorded.target);
}

#[test]
fn settings_and_session_statements() {
    assert!(
        matches!(parse("SET checkpoint_interval = '100ms'"), WeirStatement::Set { name, value } if name == "checkpoint_interval" && value == "100ms")
    );
    assert!(
        matches!(parse("SET SESSION TIME ZONE 'UTC'"), WeirStatement::Set { name, value } if name == "timezone" && value == "UTC")
    );
    assert!(matches!(
        parse("SHOW ALL"),
        WeirStatement::Show(ShowTarget::All)
    ));
    assert!(
        matches!(parse("show Parallelism;"), WeirStatement::Show(ShowTarget::Name(n)) if n == "parallelism")
    );
    assert!(matches!(parse("SHOW JOBS"), WeirStatement::ShowJobs));
    assert!(matches!(parse("RESET ALL"), WeirStatement::Reset(None)));
    assert!(matches!(
        parse("START TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        WeirStatement::Transaction(Transaction::Begin)
    ));
    assert!(matches!(
        parse("end"),
        WeirStatement::Transaction(Transaction::Commit)
    ));
    // Longer SHOW statements are sqlparser's (and refused later by name).
    assert!(matches!(
        parse("SHOW CREATE TABLE t"),
        WeirStatement::Sql(_)
    ));
    assert!(
        matches!(parse("DROP TABLE t"), WeirStatement::Sql(s) if matches!(*s, Statement::Drop { .. }))
    );
}

#[test]
fn flink_window_spelling_is_rewritten() {
    let WeirStatement::Sql(s) = parse(
        "SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECONDS)) AS w",
    ) else {
        panic!()
    };
    assert_eq!(
        s.to_string(),
        "SELECT * FROM TUMBLE(bids, date_time, INTERVAL '10' SECONDS) AS w"
    );
}

#[test]
fn session_partition_by_becomes_named_arguments() {
    let cases = [
        (
            "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY item, DESCRIPTOR(ts), INTERVAL '5' MINUTES))",
            "SELECT * FROM SESSION(bid, ts, INTERVAL '5' MINUTES, PARTITION => item)",
        ),
        (
            "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY (a, b), DESCRIPTOR(ts), INTERVAL '5' MINUTES))",
            "SELECT * FROM SESSION(bid, ts, INTERVAL '5' MINUTES, PARTITION => a, PARTITION => b)",
        ),
        (
            "SELECT * FROM TABLE(SESSION(DATA => TABLE bid PARTITION BY a, b, TIMECOL => DESCRIPTOR(ts), GAP => INTERVAL '5' MINUTES))",
            "SELECT * FROM SESSION(DATA => bid, TIMECOL => ts, GAP => INTERVAL '5' MINUTES, PARTITION => a, PARTITION => b)",
        ),
        (
            "SELECT * FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(ts), INTERVAL '5' MINUTES))",
            "SELECT * FROM SESSION(bid, ts, INTERVAL '5' MINUTES)",
        ),
    ];
    for (flink, weir) in cases {
        let WeirStatement::Sql(s) = parse(flink) else {
            panic!("{flink}")
        };
        assert_eq!(s.to_string(), weir);
    }
}

#[test]
fn syntax_errors_carry_script_line_and_column() {
    let e = parse_statement("SELECT *\nFROM bids WHERE", 7).unwrap_err();
    match e {
        PlanError::Syntax { line, column, .. } => assert_eq!((line, column), (8, 16)),
        other => panic!("{other}"),
    }
    let e = parse_statement("SELEC 1", 1).unwrap_err();
    assert!(
        matches!(
            e,
            PlanError::Syntax {
                line: 1,
                column: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = parse_statement("CANCEL JOB\n  a b", 1).unwrap_err();
    assert!(
        matches!(
            e,
            PlanError::Syntax {
                line: 2,
                column: 5,
                ..
            }
        ),
        "{e}"
    );
    let e = parse_statement("CREATE SINK s (a INT) AS SELECT 1", 1).unwrap_err();
    assert!(e.to_string().contains("do not list them"), "{e}");
}
