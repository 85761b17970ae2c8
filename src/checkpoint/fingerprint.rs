//! What a checkpoint was taken against: each input's identity
//! ([`FileStamp`]: size, time, a hash of its ends), all the inputs
//! ([`InputFingerprint`]) and the settings that fix the order
//! ([`SettingsFingerprint`]), each with a check that names what changed, old
//! vs new.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{CheckpointError, CheckpointResult};

/// A data file's identity at checkpoint time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// The path as the loader was given it.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch (`None` where
    /// the platform has none).
    pub mtime_ns: Option<u64>,
    /// A fingerprint of the content of a local file ([`content_fingerprint`]:
    /// SHA-256 of its size, first and last 64 KiB), so that a file
    /// rewritten to the same size — or a copy given the same modification
    /// time — is told apart. `None` for a remote object and in checkpoints
    /// written before it existed (then not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// `bytes`' SHA-256 as lowercase hex.
pub(super) fn hex_digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A digest as lowercase hex.
fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a file's start and of its end that its content fingerprint reads.
pub const FINGERPRINT_EDGE_BYTES: u64 = 64 << 10;

/// The content fingerprint of the local file `path` of `size` bytes:
/// `sha256:` and the SHA-256 of its size (8 bytes, little-endian), its
/// first 64 KiB and its last 64 KiB (the whole file when it is shorter
/// than 128 KiB) — two reads of a file, whatever its size. A change in the
/// middle of a large file that keeps its size is seen by the modification
/// time alone.
pub fn content_fingerprint(path: &Path, size: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    h.update(size.to_le_bytes());
    let mut buf = Vec::new();
    let head = size.min(FINGERPRINT_EDGE_BYTES);
    (&mut f).take(head).read_to_end(&mut buf)?;
    let tail_from = size.saturating_sub(FINGERPRINT_EDGE_BYTES).max(head);
    if tail_from < size {
        f.seek(SeekFrom::Start(tail_from))?;
        (&mut f).take(size - tail_from).read_to_end(&mut buf)?;
    }
    if buf.len() as u64 != size.min(2 * FINGERPRINT_EDGE_BYTES) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("read {} bytes of a {size}-byte file", buf.len()),
        ));
    }
    h.update(&buf);
    Ok(format!("sha256:{}", hex(&h.finalize())))
}

impl FileStamp {
    /// The stamp of `path` now (of a remote URL: its size and last
    /// modification time by a HEAD request).
    pub fn of(path: &str) -> CheckpointResult<Self> {
        if crate::remote::is_remote(path) {
            return Self::of_remote(path);
        }
        let meta = std::fs::metadata(path).map_err(|source| CheckpointError::Io {
            path: path.into(),
            source,
        })?;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as u64);
        // A regular file's content; a device or a pipe is not read here.
        let content = if meta.is_file() {
            let c = content_fingerprint(Path::new(path), meta.len()).map_err(|source| {
                CheckpointError::Io {
                    path: path.into(),
                    source,
                }
            })?;
            Some(c)
        } else {
            None
        };
        Ok(FileStamp {
            path: path.to_string(),
            size: meta.len(),
            mtime_ns,
            content,
        })
    }

    /// The stamp of a remote object, by a HEAD request.
    #[cfg(feature = "remote")]
    fn of_remote(path: &str) -> CheckpointResult<Self> {
        let (size, mtime_ns) = crate::remote::stat(path).map_err(|e| CheckpointError::Io {
            path: path.into(),
            source: e.into_io(),
        })?;
        Ok(FileStamp {
            path: path.to_string(),
            size,
            mtime_ns,
            content: None,
        })
    }

    /// Without the `remote` feature a URL has no stamp: an error naming
    /// the feature.
    #[cfg(not(feature = "remote"))]
    fn of_remote(path: &str) -> CheckpointResult<Self> {
        Err(CheckpointError::Io {
            path: path.into(),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                crate::Error::not_compiled_in(path, crate::Feature::Remote),
            ),
        })
    }
}

/// The fingerprint of the inputs: every data file's path, size and
/// modification time, in the loader's file order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    /// The files.
    pub files: Vec<FileStamp>,
}

impl InputFingerprint {
    /// Stamp `paths` now.
    pub fn of<S: AsRef<str>>(paths: &[S]) -> CheckpointResult<Self> {
        Ok(InputFingerprint {
            files: paths
                .iter()
                .map(|p| FileStamp::of(p.as_ref()))
                .collect::<CheckpointResult<_>>()?,
        })
    }

    /// `Ok` when `now` has the same files, sizes and times as `self` (the
    /// checkpoint's); otherwise an error listing every change.
    pub fn check_unchanged(&self, now: &InputFingerprint) -> CheckpointResult<()> {
        let old: BTreeMap<&str, &FileStamp> =
            self.files.iter().map(|f| (f.path.as_str(), f)).collect();
        let new: BTreeMap<&str, &FileStamp> =
            now.files.iter().map(|f| (f.path.as_str(), f)).collect();
        let mut changes = Vec::new();
        for (path, o) in &old {
            match new.get(path) {
                None => changes.push(format!(
                    "{path}: in the checkpoint's inputs, not in the inputs now"
                )),
                Some(n) => {
                    if o.size != n.size {
                        changes.push(format!(
                            "{path}: size was {} bytes, now {} bytes",
                            o.size, n.size
                        ));
                    }
                    if o.mtime_ns != n.mtime_ns {
                        changes.push(format!(
                            "{path}: modification time was {}, now {}",
                            show_mtime(o.mtime_ns),
                            show_mtime(n.mtime_ns)
                        ));
                    }
                    if let (Some(a), Some(b)) = (&o.content, &n.content) {
                        if a != b && o.size == n.size {
                            changes.push(format!(
                                "{path}: content changed (same size; fingerprint of its first and last 64 KiB was {a}, now {b})"
                            ));
                        }
                    }
                }
            }
        }
        for path in new.keys().filter(|p| !old.contains_key(*p)) {
            changes.push(format!(
                "{path}: a new input, not in the checkpoint's inputs"
            ));
        }
        if changes.is_empty() {
            let old_order: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
            let new_order: Vec<&str> = now.files.iter().map(|f| f.path.as_str()).collect();
            if old_order != new_order {
                changes.push(format!(
                    "file order was [{}], now [{}]",
                    old_order.join(", "),
                    new_order.join(", ")
                ));
            }
        }
        if changes.is_empty() {
            Ok(())
        } else {
            Err(CheckpointError::InputsChanged { changes })
        }
    }
}

fn show_mtime(ns: Option<u64>) -> String {
    match ns {
        Some(ns) => format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000),
        None => "(unknown)".to_string(),
    }
}

/// The settings that fix the order of a pass (seed, shuffle, batch policy,
/// deterministic, world size, shard_by, sets and weights, transforms…), by
/// name, as typed JSON values (numbers, booleans, strings, objects of
/// named fields — never a type's `Debug` text). Whoever builds the loader
/// decides which settings go in (one place: the builder); this type
/// compares them, field by field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SettingsFingerprint(BTreeMap<String, serde_json::Value>);

impl SettingsFingerprint {
    /// An empty fingerprint.
    pub fn new() -> Self {
        Self::default()
    }

    /// With setting `name` = `value` (its serde form: a number, a string,
    /// an object of named fields…).
    pub fn with(mut self, name: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.0.insert(name.to_string(), value);
        self
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.get(name)
    }

    /// `Ok` when `now` equals `self` (the checkpoint's) on every setting
    /// but those in `except` (an elastic resume excepts `rank` and
    /// `world_size`); otherwise the first changed setting — the innermost
    /// changed field of an object setting (`transforms.instance.name`) —,
    /// old vs new.
    pub fn check_compatible(
        &self,
        now: &SettingsFingerprint,
        except: &[&str],
    ) -> CheckpointResult<()> {
        let names: BTreeSet<&String> = self.0.keys().chain(now.0.keys()).collect();
        for name in names {
            if except.contains(&name.as_str()) {
                continue;
            }
            if let Some((name, old, new)) = first_change(name, self.0.get(name), now.0.get(name)) {
                return Err(CheckpointError::SettingChanged { name, old, new });
            }
        }
        Ok(())
    }
}

/// The first difference between `old` and `new` (a setting or one of its
/// fields, by its dotted name), each shown as compact JSON (a string bare).
fn first_change(
    name: &str,
    old: Option<&serde_json::Value>,
    new: Option<&serde_json::Value>,
) -> Option<(String, String, String)> {
    use serde_json::Value;
    if let (Some(Value::Object(a)), Some(Value::Object(b))) = (old, new) {
        let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        return keys
            .into_iter()
            .find_map(|k| first_change(&format!("{name}.{k}"), a.get(k), b.get(k)));
    }
    if old == new {
        return None;
    }
    let show = |v: Option<&Value>| match v {
        None => "(unset)".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    Some((name.to_string(), show(old), show(new)))
}
