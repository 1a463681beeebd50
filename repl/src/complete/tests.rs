use super::*;
use weir_planner::Relation;

fn vocab() -> Vocabulary {
    Vocabulary {
        relations: vec![
            Relation {
                name: "bids".into(),
                kind: RelationKind::Table,
                columns: vec!["auction".into(), "bidder".into(), "price".into()],
            },
            Relation {
                name: "people".into(),
                kind: RelationKind::Table,
                columns: vec!["id".into(), "name".into()],
            },
            Relation {
                name: "hot".into(),
                kind: RelationKind::MaterializedView,
                columns: vec!["auction".into(), "n".into()],
            },
        ],
        jobs: vec!["hot".into(), "to_pg".into()],
        settings: vec!["parallelism", "checkpoint_interval", "state_ttl"],
        functions: vec!["count".into(), "coalesce".into(), "max".into()],
    }
}

/// Completes at the end of `line` (or at `|` when the line has one).
fn words(line: &str) -> Vec<String> {
    let pos = line.find('|').unwrap_or(line.len());
    let line = line.replacen('|', "", 1);
    complete(&line, pos, &vocab())
        .1
        .into_iter()
        .map(|c| c.display)
        .collect()
}

#[test]
fn relations_after_from_and_join() {
    assert_eq!(words("SELECT * FROM b"), ["bids"]);
    assert_eq!(words("select * from bids b join pe"), ["people"]);
    assert_eq!(words("SELECT * FROM bids, p"), ["people"]);
    assert_eq!(words("SELECT * FROM TUMBLE(TABLE b"), ["bids"]);
    assert_eq!(words("DESCRIBE h"), ["hot"]);
    assert_eq!(words("DROP SINK "), ["hot", "to_pg"]);
    assert_eq!(words("DROP MATERIALIZED VIEW "), ["hot"]);
    assert_eq!(words("DROP TABLE "), ["bids", "people"]);
}

#[test]
fn columns_of_what_the_statement_reads() {
    // Columns first, then keywords.
    assert_eq!(
        words("SELECT a| FROM bids"),
        ["auction", "all", "analyze", "and", "as", "asc"]
    );
    assert_eq!(words("SELECT b.p| FROM bids b"), ["price"]);
    assert_eq!(
        words("SELECT bids.| FROM bids"),
        ["auction", "bidder", "price"]
    );
    assert_eq!(words("SELECT * FROM bids WHERE pr")[0], "price");
    assert_eq!(
        words("SELECT * FROM bids b JOIN people p ON p."),
        ["id", "name"]
    );
    // Functions and keywords too; a lowercase prefix gets lowercase keywords.
    assert_eq!(words("SELECT co| FROM bids")[..2], ["coalesce", "count"]);
    assert_eq!(
        words("SELECT auction FROM bids GROUP BY auction HAV"),
        ["HAVING"]
    );
    assert_eq!(words("select auction from bids gr"), ["group"]);
    // No FROM yet: columns of every relation.
    assert!(words("SELECT na").contains(&"name".to_string()));
}

#[test]
fn statement_starts_settings_and_meta_commands() {
    assert_eq!(
        words("CR"),
        [
            "CREATE MATERIALIZED VIEW",
            "CREATE SINK",
            "CREATE TABLE",
            "CREATE VIEW"
        ]
    );
    assert_eq!(words("SELECT 1; sel"), ["select"]);
    assert_eq!(words("SET st"), ["state_ttl"]);
    assert_eq!(
        words("SHOW "),
        [
            "ALL",
            "JOBS",
            "TABLES",
            "checkpoint_interval",
            "parallelism",
            "state_ttl"
        ]
    );
    assert_eq!(words("\\d"), ["\\d", "\\dm", "\\dt", "\\dv"]);
    assert_eq!(words("\\d pe"), ["people"]);
    assert_eq!(words("\\format j"), ["json"]);
}

#[test]
fn option_keys_and_connectors_inside_with() {
    assert_eq!(
        words("CREATE TABLE t (a INT) WITH (connector = 'f"),
        ["file"]
    );
    assert_eq!(words("CREATE SINK s WITH (connector = 'p"), ["postgres"]);
    let keys = words("CREATE TABLE t (a INT) WITH (connector = 'file', pa");
    assert_eq!(keys, ["path"]);
    let keys = words("CREATE TABLE t (a INT) WITH (connector = 'file', ");
    assert!(keys.contains(&"batch_size".to_string()), "{keys:?}");
    assert!(!keys.contains(&"connector".to_string()), "{keys:?}");
    assert!(!keys.contains(&"topic".to_string()), "{keys:?}");
    let keys = words("CREATE SINK s WITH (connector = 'postgres', ");
    assert!(keys.contains(&"primary_key".to_string()), "{keys:?}");
    assert!(keys.contains(&"delivery".to_string()), "{keys:?}");
    assert_eq!(words("CREATE MATERIALIZED VIEW v WITH (d"), ["delivery"]);
    // A value that is no connector, and a closed WITH: nothing / expressions.
    assert!(words("CREATE TABLE t (a INT) WITH (connector = 'file', path = 'x").is_empty());
    assert_eq!(
        words("CREATE SINK s WITH (connector = 'blackhole') AS SELECT * FROM b"),
        ["bids"]
    );
}
