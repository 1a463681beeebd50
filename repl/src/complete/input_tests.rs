use super::*;

#[test]
fn a_statement_is_complete_at_its_semicolon_outside_brackets_and_literals() {
    assert!(input_is_complete(""));
    assert!(input_is_complete("  -- a comment"));
    assert!(input_is_complete("\\d bids"));
    assert!(input_is_complete("SELECT 1;"));
    assert!(input_is_complete("SELECT 1;  -- done"));
    assert!(input_is_complete("SELECT 1; SELECT 2;"));
    assert!(!input_is_complete("SELECT 1"));
    assert!(!input_is_complete("SELECT 1; SELECT 2"));
    assert!(!input_is_complete("SELECT ';"));
    assert!(!input_is_complete("SELECT 'it''s;"));
    assert!(input_is_complete("SELECT 'it''s';"));
    assert!(!input_is_complete("CREATE TABLE t (a INT;"));
    assert!(input_is_complete("CREATE TABLE t (a INT);"));
    assert!(!input_is_complete("SELECT /* ; */"));
    assert!(input_is_complete("SELECT 1 /* x */;"));
    // An extra `)` is the parser's to report, with its position.
    assert!(input_is_complete("SELECT 1);"));
}

#[test]
fn file_names_after_backslash_i_and_in_path_options() {
    assert!(completes_file_name("\\i ex", 5));
    assert!(completes_file_name("\\o ", 3));
    assert!(completes_file_name(
        "CREATE TABLE t (a INT) WITH (path = 'da",
        39
    ));
    assert!(!completes_file_name(
        "CREATE TABLE t (a INT) WITH (format = 'c",
        40
    ));
    assert!(!completes_file_name("SELECT * FROM b", 15));
}
