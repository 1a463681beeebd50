//! A limit on how deep operators nest in one expression. sqlparser builds a chain like
//! `1 + 1 + ... + 1` or `a OR b OR ...` in a loop, so its recursion limit does not stop it, but
//! planning and evaluating walk the tree recursively: ten thousand terms overflowed the stack
//! and aborted the whole process (every wire client with it). Deeper statements are refused
//! here, before anything recurses over them; even dropping such a tree recurses, so a refused
//! statement's expressions are taken apart with a loop.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Value, Visit, VisitMut, Visitor, VisitorMut};

use super::statement::WeirStatement;
use crate::error::{PlanError, Result};

/// Operators may nest this deep in one expression (PostgreSQL's default stack allows about as
/// many; `IN (...)` lists and tables take more values without nesting).
pub const MAX_EXPRESSION_DEPTH: usize = 1000;

/// Tracks the nesting of expressions as the visitor walks down and up, and stops at the first
/// one that goes past the limit: the visitor's own recursion never goes deeper than that.
struct Depth {
    now: usize,
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.now += 1;
        if self.now > MAX_EXPRESSION_DEPTH {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.now -= 1;
        ControlFlow::Continue(())
    }
}

fn too_deep(node: &impl Visit) -> bool {
    node.visit(&mut Depth { now: 0 }).is_break()
}

/// Replaces every outermost expression with NULL and takes the old one apart with a loop, so
/// that dropping the statement does not recurse down a deep chain.
struct Dismantle;

impl VisitorMut for Dismantle {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let mut stack = vec![std::mem::replace(expr, Expr::value(Value::Null))];
        while let Some(e) = stack.pop() {
            match e {
                Expr::BinaryOp { left, right, .. } => {
                    stack.push(*left);
                    stack.push(*right);
                }
                Expr::UnaryOp { expr, .. }
                | Expr::Nested(expr)
                | Expr::IsNull(expr)
                | Expr::IsNotNull(expr)
                | Expr::Cast { expr, .. } => stack.push(*expr),
                shallow => drop(shallow),
            }
        }
        ControlFlow::Continue(())
    }
}

/// Refuses a statement with an expression nested deeper than [`MAX_EXPRESSION_DEPTH`].
pub fn check_depth(statement: &mut WeirStatement, first_line: u64) -> Result<()> {
    let deep = match statement {
        WeirStatement::Sql(s) => {
            too_deep(s.as_ref()) && {
                let _ = VisitMut::visit(s.as_mut(), &mut Dismantle);
                true
            }
        }
        WeirStatement::CreateJob(job) => {
            too_deep(&job.query) && {
                let _ = VisitMut::visit(&mut job.query, &mut Dismantle);
                true
            }
        }
        WeirStatement::CreateTable(t) => match t.watermark.as_mut() {
            Some(w) if too_deep(&w.expr) => {
                let _ = VisitMut::visit(&mut w.expr, &mut Dismantle);
                true
            }
            _ => false,
        },
        _ => false,
    };
    if deep {
        return Err(PlanError::TooComplex(format!(
            "the statement at line {first_line} nests operators more than {MAX_EXPRESSION_DEPTH} deep in one expression (a chain like 1 + 1 + ... or a OR b OR ...); use IN (...) or a table for long lists of values"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse_statement;
    use crate::error::PlanError;

    fn chain(n: usize, op: &str) -> String {
        format!("SELECT {}", vec!["1"; n].join(op))
    }

    #[test]
    fn long_operator_chains_are_refused_not_overflowed() {
        // Deeper than the limit: refused with the reason (on a 256 KiB stack: the check itself
        // must not recurse past the limit).
        let text = chain(100_000, " + ");
        let r = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || parse_statement(&text, 3).map(|_| ()))
            .unwrap()
            .join()
            .expect("no stack overflow");
        match r {
            Err(PlanError::TooComplex(m)) => {
                assert!(m.contains("line 3") && m.contains("1000 deep"), "{m}")
            }
            other => panic!("expected TooComplex, got {other:?}"),
        }
        let or = format!(
            "SELECT * FROM t WHERE {}",
            vec!["a = 1"; 2_000].join(" OR ")
        );
        assert!(matches!(
            parse_statement(&or, 1),
            Err(PlanError::TooComplex(_))
        ));
        // Within it: planned as before.
        assert!(parse_statement(&chain(500, " + "), 1).is_ok());
        assert!(parse_statement(
            &format!("SELECT x IN ({})", vec!["1"; 50_000].join(", ")),
            1
        )
        .is_ok());
    }
}
