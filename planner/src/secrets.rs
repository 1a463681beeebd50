//! Passwords kept apart from the statements a data directory records.
//!
//! The catalog (`catalog.sql`) and job records (`jobs/<job>/job.json`) hold statements, and
//! statements hold connection URLs with passwords. Before a statement is written, every
//! password in it ([`weir_connectors::redact::secret_spans`]) moves to `secrets.json` (mode
//! 0600) and the statement keeps a reference, `{{secret:<id>}}`; reading the statement back
//! puts the password in again. A reader of a job record or of the catalog (a backup, a
//! support bundle, a file connector pointed at it) sees no password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weir_connectors::redact::secret_spans;
use weir_engine::atomic_file::atomic_write_private;

use crate::error::{PlanError, Result};

const OPEN: &str = "{{secret:";
const CLOSE: &str = "}}";

/// The file of a data directory's secrets.
pub fn secrets_file(data_dir: &Path) -> PathBuf {
    data_dir.join("secrets.json")
}

fn load(file: &Path) -> Result<BTreeMap<String, String>> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| PlanError::Internal(format!("'{}' is unreadable: {e}", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(PlanError::io(
            format!("cannot read '{}'", file.display()),
            e,
        )),
    }
}

/// FNV-1a: the same password gets the same id (the file does not grow with every save).
fn id_of(secret: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in secret.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `text` with each password replaced by a reference to it in `data_dir`'s secrets file
/// (written first, when it gains one).
pub fn seal(data_dir: &Path, text: &str) -> Result<String> {
    let spans = secret_spans(text);
    if spans.is_empty() {
        return Ok(text.to_string());
    }
    let file = secrets_file(data_dir);
    let mut secrets = load(&file)?;
    let mut changed = false;
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        let secret = &text[span.clone()];
        let mut id = id_of(secret);
        // Another password with the same id (a collision): the next free one.
        let mut n = 0;
        while secrets.get(&id).is_some_and(|s| s != secret) {
            n += 1;
            id = format!("{}-{n}", id_of(secret));
        }
        if !secrets.contains_key(&id) {
            secrets.insert(id.clone(), secret.to_string());
            changed = true;
        }
        out.push_str(&text[at..span.start]);
        out.push_str(OPEN);
        out.push_str(&id);
        out.push_str(CLOSE);
        at = span.end;
    }
    out.push_str(&text[at..]);
    if changed {
        let json = serde_json::to_string_pretty(&secrets)
            .map_err(|e| PlanError::Internal(e.to_string()))?;
        atomic_write_private(&file, json.as_bytes())
            .map_err(|e| PlanError::io(format!("cannot write '{}'", file.display()), e))?;
    }
    Ok(out)
}

/// `text` with its references replaced by the passwords from `data_dir`'s secrets file.
pub fn unseal(data_dir: &Path, text: &str) -> Result<String> {
    if !text.contains(OPEN) {
        return Ok(text.to_string());
    }
    let secrets = load(&secrets_file(data_dir))?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find(CLOSE) else {
            break;
        };
        let id = &after[..end];
        let secret = secrets.get(id).ok_or_else(|| {
            PlanError::Invalid(format!(
                "a recorded statement refers to secret {id}, which '{}' does not hold",
                secrets_file(data_dir).display()
            ))
        })?;
        out.push_str(&rest[..start]);
        out.push_str(secret);
        rest = &after[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn passwords_move_to_a_private_file_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let statement = "CREATE SINK s WITH (connector = 'postgres', \
            url = 'postgresql://weir:hunter2@db:5432/x', table = 't') AS SELECT 1";
        let other = "CREATE TABLE p (a INT) WITH (connector = 'postgres', \
            url = 'host=db user=weir password=swordfish', table = 'p')";
        let sealed = seal(dir.path(), statement).unwrap();
        let sealed_other = seal(dir.path(), other).unwrap();
        for s in [&sealed, &sealed_other] {
            assert!(!s.contains("hunter2") && !s.contains("swordfish"), "{s}");
            assert!(s.contains("{{secret:"), "{s}");
        }
        assert_eq!(unseal(dir.path(), &sealed).unwrap(), statement);
        assert_eq!(unseal(dir.path(), &sealed_other).unwrap(), other);
        // The same password again: the same reference, the file does not grow.
        let before = std::fs::read_to_string(secrets_file(dir.path())).unwrap();
        assert_eq!(seal(dir.path(), statement).unwrap(), sealed);
        let after = std::fs::read_to_string(secrets_file(dir.path())).unwrap();
        assert_eq!(before, after);
        let mode = std::fs::metadata(secrets_file(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A statement without passwords is kept as it is and writes nothing.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(seal(empty.path(), "SELECT 1").unwrap(), "SELECT 1");
        assert!(!secrets_file(empty.path()).exists());
        // A reference the file does not hold is an error naming it.
        let err = unseal(empty.path(), &sealed).unwrap_err().to_string();
        assert!(err.contains("secrets.json"), "{err}");
    }
}
