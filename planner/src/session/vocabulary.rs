//! The names a person may type in a statement, as the session knows them now: what the
//! REPL completes and what "did you mean" suggests from.

use super::Session;

/// What kind of relation a name in FROM is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationKind {
    Table,
    View,
    MaterializedView,
}

/// A relation a query can read, with its columns in order.
#[derive(Debug, Clone)]
pub struct Relation {
    pub name: String,
    pub kind: RelationKind,
    pub columns: Vec<String>,
}

/// A snapshot of the session's names.
#[derive(Debug, Clone, Default)]
pub struct Vocabulary {
    pub relations: Vec<Relation>,
    /// Sink jobs and materialized views' jobs (SHOW JOBS' names).
    pub jobs: Vec<String>,
    /// `SET` / `SHOW` names.
    pub settings: Vec<&'static str>,
    /// Scalar, aggregate and window functions, lowercase, sorted.
    pub functions: Vec<String>,
}

impl Vocabulary {
    /// The relation of that name (case-insensitive).
    pub fn relation(&self, name: &str) -> Option<&Relation> {
        self.relations
            .iter()
            .find(|r| r.name.eq_ignore_ascii_case(name))
    }
}

impl Session {
    /// The tables, views, jobs, settings and functions this session knows now.
    pub fn vocabulary(&self) -> Vocabulary {
        let catalog = self.catalog();
        let mut relations: Vec<Relation> = catalog
            .tables()
            .map(|t| Relation {
                name: t.name.clone(),
                kind: if t.options.get("connector") == Some("materialized view") {
                    RelationKind::MaterializedView
                } else {
                    RelationKind::Table
                },
                columns: t.schema.fields().iter().map(|f| f.name().clone()).collect(),
            })
            .collect();
        relations.extend(catalog.views().map(|v| Relation {
            name: v.name.clone(),
            kind: RelationKind::View,
            columns: v.schema.fields().iter().map(|f| f.name().clone()).collect(),
        }));
        relations.sort_by(|a, b| a.name.cmp(&b.name));
        let jobs = self
            .shared
            .jobs_if_any(|j| j.rows().into_iter().map(|r| r[0].clone()).collect())
            .unwrap_or_default();
        let mut functions: Vec<String> = self
            .state
            .scalar_functions()
            .keys()
            .chain(self.state.aggregate_functions().keys())
            .chain(self.state.window_functions().keys())
            .map(|f| f.to_lowercase())
            .collect();
        functions.sort();
        functions.dedup();
        Vocabulary {
            relations,
            jobs,
            settings: self.setting_names(),
            functions,
        }
    }
}
