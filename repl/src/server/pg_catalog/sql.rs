//! psql's catalog SQL, read by sqlparser: whether a statement reads the catalog, and the
//! statement in the form DataFusion plans. `pg_catalog.` qualifiers are dropped from tables,
//! functions and types; `OPERATOR(pg_catalog.~)` becomes `~`; `COLLATE` goes; casts to the
//! reg* and oid types go (weir's oids are plain integers) and casts to `name` / `"char"`
//! become text; a subquery that reads a catalog weir has nothing in (and no outer join or
//! set operation that could still give rows) becomes an empty one, since DataFusion cannot
//! plan some of psql's correlated forms and the answer is no rows anyway.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, visit_relations, visit_relations_mut, BinaryOperator,
    DataType, Expr, JoinOperator, ObjectName, Query, SetExpr, Statement, TableFactor,
    TableWithJoins,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::tables::{CATALOG_TABLES, EMPTY_TABLES};

/// Types whose casts are dropped: weir's oids are plain integers.
const OID_TYPES: &[&str] = &[
    "regclass",
    "regtype",
    "regnamespace",
    "regproc",
    "regprocedure",
    "oid",
];

fn parse(sql: &str) -> Option<Statement> {
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    (statements.len() == 1).then(|| statements.remove(0))
}

/// The parts of a name, lowercase.
fn parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| p.to_string().trim_matches('"').to_ascii_lowercase())
        .collect()
}

fn qualified_by_pg_catalog(name: &ObjectName) -> bool {
    let parts = parts(name);
    parts.len() > 1 && parts[0] == "pg_catalog"
}

fn strip_pg_catalog(name: &mut ObjectName) {
    if qualified_by_pg_catalog(name) {
        name.0.remove(0);
    }
}

fn is_empty_table(name: &ObjectName) -> bool {
    let last = parts(name).pop().unwrap_or_default();
    EMPTY_TABLES.iter().any(|(n, _)| *n == last)
}

/// Whether a statement reads the PostgreSQL catalog (and weir answers it from its own).
pub fn is_catalog_query(sql: &str) -> bool {
    let Some(statement) = parse(sql) else {
        return false;
    };
    let reads_catalog = visit_relations(&statement, |name| {
        let parts = parts(name);
        let last = parts.last().map(String::as_str).unwrap_or_default();
        let catalog = (parts.len() > 1
            && (parts[0] == "pg_catalog" || parts[0] == "information_schema"))
            || CATALOG_TABLES.contains(&last)
            || is_empty_table(name);
        if catalog {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let calls_catalog = || {
        visit_expressions(&statement, |e| match e {
            Expr::Function(f) if qualified_by_pg_catalog(&f.name) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        })
    };
    reads_catalog.is_break() || calls_catalog().is_break()
}

/// psql's catalog SQL in a form DataFusion plans (see the module above); SQL that does not
/// parse is returned as it is, for DataFusion to report.
pub fn rewrite(sql: &str) -> String {
    let (Some(mut statement), Some(Statement::Query(empty))) =
        (parse(sql), parse("SELECT NULL WHERE false"))
    else {
        return sql.to_string();
    };
    let _ = visit_relations_mut(&mut statement, |name| {
        strip_pg_catalog(name);
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions_mut(&mut statement, |e| {
        rewrite_expr(e, &empty);
        ControlFlow::<()>::Continue(())
    });
    statement.to_string()
}

/// Rewrites one expression; `empty` replaces subqueries over empty catalogs.
fn rewrite_expr(e: &mut Expr, empty: &Query) {
    match e {
        Expr::Function(f) => strip_pg_catalog(&mut f.name),
        Expr::BinaryOp { op, .. } => {
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op {
                if let Some(plain) = parts.last().and_then(|o| operator(o)) {
                    *op = plain;
                }
            }
        }
        Expr::Collate { expr, .. } => *e = std::mem::replace(expr.as_mut(), Expr::value(null())),
        Expr::Cast {
            expr, data_type, ..
        } => match cast_target(data_type) {
            Cast::Drop => *e = std::mem::replace(expr.as_mut(), Expr::value(null())),
            Cast::To(t) => *data_type = t,
            Cast::Keep => {}
        },
        Expr::Subquery(q) if reads_only_empty(q) => **q = empty.clone(),
        Expr::Exists { subquery, .. } if reads_only_empty(subquery) => **subquery = empty.clone(),
        Expr::InSubquery { subquery, .. } if reads_only_empty(subquery) => {
            **subquery = empty.clone()
        }
        _ => {}
    }
}

fn null() -> datafusion::sql::sqlparser::ast::Value {
    datafusion::sql::sqlparser::ast::Value::Null
}

/// The plain operator of `OPERATOR(pg_catalog.op)`.
fn operator(op: &str) -> Option<BinaryOperator> {
    Some(match op {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "=" => BinaryOperator::Eq,
        "<>" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        _ => return None,
    })
}

enum Cast {
    Drop,
    To(DataType),
    Keep,
}

fn cast_target(data_type: &DataType) -> Cast {
    let name = match data_type {
        DataType::Regclass => return Cast::Drop,
        DataType::Custom(name, _) => parts(name),
        DataType::Char(_) | DataType::Character(_) => return Cast::To(DataType::Text),
        _ => return Cast::Keep,
    };
    let last = name.last().map(String::as_str).unwrap_or_default();
    if OID_TYPES.contains(&last) {
        return Cast::Drop;
    }
    if last == "name" || last == "char" {
        return Cast::To(DataType::Text);
    }
    if name.len() > 1 && name[0] == "pg_catalog" {
        // `::pg_catalog.text` and the like: the type by its own name.
        let parsed = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(last)
            .and_then(|mut p| p.parse_data_type());
        if let Ok(t) = parsed {
            return Cast::To(t);
        }
    }
    Cast::Keep
}

/// Whether a subquery's own FROM list reads a catalog weir has nothing in, with no outer
/// join or set operation that could give rows without it.
fn reads_only_empty(q: &Query) -> bool {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    let outer = select.from.iter().flat_map(|t| &t.joins).any(|j| {
        matches!(
            j.join_operator,
            JoinOperator::Left(_)
                | JoinOperator::LeftOuter(_)
                | JoinOperator::Right(_)
                | JoinOperator::RightOuter(_)
                | JoinOperator::FullOuter(_)
        )
    });
    !outer && select.from.iter().any(reads_empty)
}

fn reads_empty(t: &TableWithJoins) -> bool {
    let empty =
        |f: &TableFactor| matches!(f, TableFactor::Table { name, .. } if is_empty_table(name));
    empty(&t.relation) || t.joins.iter().any(|j| empty(&j.relation))
}

/// Whether the outer query reads a table weir has no rows in (subqueries do not count; a
/// set operation counts when one of its sides does).
pub fn reads_empty_table(sql: &str) -> bool {
    match parse(sql) {
        Some(Statement::Query(q)) => body_reads_empty(&q.body),
        _ => false,
    }
}

fn body_reads_empty(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(s) => s.from.iter().any(reads_empty),
        SetExpr::SetOperation { left, right, .. } => {
            body_reads_empty(left) || body_reads_empty(right)
        }
        SetExpr::Query(q) => body_reads_empty(&q.body),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_spellings_are_rewritten() {
        let sql = "SELECT c.oid::pg_catalog.regclass, c.relname::name, x::pg_catalog.text \
                   FROM pg_catalog.pg_class c \
                   WHERE c.relname OPERATOR(pg_catalog.~) '^(bids)$' COLLATE pg_catalog.default \
                   AND pg_catalog.pg_table_is_visible(c.oid) \
                   AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)";
        let out = rewrite(sql);
        assert_eq!(
            out,
            "SELECT c.oid, c.relname::TEXT, x::TEXT FROM pg_class c \
             WHERE c.relname ~ '^(bids)$' AND pg_table_is_visible(c.oid) \
             AND NOT EXISTS (SELECT NULL WHERE false)"
        );
    }

    #[test]
    fn catalog_queries_are_recognised() {
        assert!(is_catalog_query("select * from pg_catalog.pg_class"));
        assert!(is_catalog_query(
            "SELECT table_name FROM information_schema.tables"
        ));
        assert!(is_catalog_query("SELECT pg_catalog.version()"));
        assert!(!is_catalog_query(
            "SELECT * FROM bids WHERE note = 'pg_class'"
        ));
        assert!(!is_catalog_query("SELECT * FROM pg_bids"));
        assert!(reads_empty_table("SELECT * FROM pg_index x JOIN t ON true"));
        assert!(!reads_empty_table(
            "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM pg_index)"
        ));
        assert!(reads_empty_table(
            "SELECT a, NULL FROM pg_publication UNION SELECT a, b FROM t"
        ));
    }
}
