//! The checkpoint's envelope: its JSON form sealed with a content checksum
//! ([`seal`]) and opened again ([`unseal`]): the version checked first (a
//! newer format says so rather than failing on a field), then the checksum
//! (an edit by hand or damage is refused; a version-1 checkpoint, from
//! before checksums, is read with a warning). What the fields mean and how
//! they are checked is each stage's own (the actor crate's `checkpoint`).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::fingerprint::hex_digest;
use super::{CheckpointError, CheckpointResult, CHECKPOINT_VERSION, OLDEST_CHECKPOINT_VERSION};

/// `fields` (the JSON of a value that serializes as an object) with
/// `"checksum"`, the SHA-256 of `fields`, as its last member.
///
/// ```
/// let sealed = feedline::checkpoint::seal(r#"{"version":2}"#);
/// assert!(sealed.starts_with(r#"{"version":2,"checksum":"sha256:"#));
/// ```
pub fn seal(fields: &str) -> String {
    let sum = hex_digest(fields.as_bytes());
    // The fields' object, with the checksum as its last member.
    let open = fields
        .strip_suffix('}')
        .expect("a checkpoint is a JSON object");
    format!("{open},\"checksum\":\"sha256:{sum}\"}}")
}

/// The value of the sealed JSON `text` ([`seal`]), its version and checksum
/// checked; `path` names the origin in errors. The checksum is checked
/// against the canonical form of the parsed value (its JSON written again),
/// so that the same value reads the same whatever the spacing.
pub fn unseal<T: Serialize + DeserializeOwned>(text: &str, path: &Path) -> CheckpointResult<T> {
    if text.trim().is_empty() {
        return Err(CheckpointError::Corrupt {
            path: path.into(),
            what: "the file is empty (a torn or unfinished write?)".into(),
        });
    }
    // The version first, so a newer format says so rather than failing on a field.
    #[derive(Deserialize)]
    struct Head {
        version: u32,
        #[serde(default)]
        checksum: Option<String>,
    }
    let head: Head = serde_json::from_str(text).map_err(|e| corrupt(path, &e))?;
    if !(OLDEST_CHECKPOINT_VERSION..=CHECKPOINT_VERSION).contains(&head.version) {
        return Err(CheckpointError::Version {
            path: path.into(),
            found: head.version,
            expected: CHECKPOINT_VERSION,
        });
    }
    let value: T = serde_json::from_str(text).map_err(|e| corrupt(path, &e))?;
    let modified = |what: String| CheckpointError::Modified {
        path: path.into(),
        what,
    };
    match head.checksum {
        Some(sum) => {
            let canonical = serde_json::to_string(&value).expect("a checkpoint is plain data");
            let want = format!("sha256:{}", hex_digest(canonical.as_bytes()));
            if sum != want {
                return Err(modified(format!(
                    "its content checksum is {sum}, its content's is {want} (edited by hand or damaged)"
                )));
            }
        }
        None if head.version < 2 => log::warn!(
            "{}: a version-{} checkpoint, from before content checksums: its fields are checked, but an edit that keeps them consistent cannot be told",
            path.display(),
            head.version
        ),
        None => {
            return Err(modified(format!(
                "a version-{} checkpoint without its content checksum",
                head.version
            )))
        }
    }
    Ok(value)
}

fn corrupt(path: &Path, e: &serde_json::Error) -> CheckpointError {
    let what = if e.is_eof() {
        format!("{e} (the file is cut short: a torn write?)")
    } else {
        e.to_string()
    };
    CheckpointError::Corrupt {
        path: path.into(),
        what,
    }
}
