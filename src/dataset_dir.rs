//! Directories that are datasets: what a directory given as an input
//! names, for [`crate::plan::expand_inputs`].
//!
//! This module owns the recognition of the two dataset directories other
//! tools write and the files each names, in order:
//!
//! - Hugging Face `datasets`' `Dataset.save_to_disk`: a `state.json` whose
//!   `_data_files` lists its Arrow IPC stream files
//!   (`data-00000-of-00002.arrow`…), read by the `arrow` format. A
//!   `DatasetDict`'s directory (a `dataset_dict.json` naming its splits,
//!   one sub-directory each) is refused naming the splits: a split is
//!   given, not guessed.
//! - Mosaic Streaming's `MDSWriter`: an `index.json` whose `shards` name
//!   their files (`raw_data`, or `zip_data` when only the compressed file
//!   is there), each given as `mds:DIR/BASENAME` to the `mds` format. A
//!   directory without `index.json` whose sub-directories have one (the
//!   streams of a merged dataset before their indexes are merged) is their
//!   shards, sub-directory by sub-directory in name order.
//!
//! A directory that is neither is left to the caller (`Ok(None)`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The index file of an MDS dataset.
pub(crate) const MDS_INDEX: &str = "index.json";

/// How deep sub-directories are searched for MDS indexes.
const MAX_DEPTH: usize = 3;

/// The file specs directory `dir` names if it is a dataset directory
/// (with `prefix`, the `FORMAT:` prefix it was given with, if any);
/// `Ok(None)` if it is not one.
pub(crate) fn expand_dir(dir: &Path, prefix: Option<&str>) -> Result<Option<Vec<String>>> {
    let arrow = matches!(prefix, None | Some("arrow"));
    let mds = matches!(prefix, None | Some("mds"));
    if arrow && dir.join("dataset_dict.json").is_file() {
        return Err(dataset_dict(dir));
    }
    if arrow && dir.join("state.json").is_file() {
        return saved_dataset(dir, prefix).map(Some);
    }
    if mds {
        let mut indexes = Vec::new();
        find_indexes(dir, 0, &mut indexes)?;
        if indexes.is_empty() && prefix == Some("mds") {
            return Err(Error::Config(format!(
                "{}: no {MDS_INDEX} in it or in its sub-directories: not an MDS dataset",
                dir.display()
            )));
        }
        if indexes.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for index in indexes {
            for (_, file) in mds_shard_files(&index)? {
                out.push(format!("mds:{}", file.display()));
            }
        }
        return Ok(Some(out));
    }
    Ok(None)
}

/// The error for a `DatasetDict` directory: its splits.
fn dataset_dict(dir: &Path) -> Error {
    let path = dir.join("dataset_dict.json");
    let splits = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v.get("splits")?.as_array().map(|s| {
                s.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
        })
        .unwrap_or_default();
    let example = splits
        .first()
        .map(|s| format!(", e.g. {}", dir.join(s).display()))
        .unwrap_or_default();
    Error::Config(format!(
        "{}: a Hugging Face DatasetDict of {} split{} ({}): give the directory of one split{example}",
        dir.display(),
        splits.len(),
        if splits.len() == 1 { "" } else { "s" },
        if splits.is_empty() {
            "none listed in dataset_dict.json".to_string()
        } else {
            splits.join(", ")
        }
    ))
}

/// The Arrow files of a `save_to_disk` directory, in `state.json`'s order.
fn saved_dataset(dir: &Path, prefix: Option<&str>) -> Result<Vec<String>> {
    let path = dir.join("state.json");
    let bad = |what: String| Error::BadFile {
        path: path.clone(),
        what,
    };
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let state: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let files = state
        .get("_data_files")
        .and_then(|f| f.as_array())
        .ok_or_else(|| bad("no `_data_files` list".into()))?;
    if files.is_empty() {
        return Err(bad("`_data_files` lists no file".into()));
    }
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let name = f
            .get("filename")
            .and_then(|n| n.as_str())
            .ok_or_else(|| bad(format!("`_data_files[{i}]` has no `filename`")))?;
        let file = inside(dir, name).ok_or_else(|| {
            bad(format!(
                "`_data_files[{i}]`: `{name}` is not a file name in {}",
                dir.display()
            ))
        })?;
        if !file.is_file() {
            return Err(bad(format!(
                "`_data_files[{i}]`: {} does not exist",
                file.display()
            )));
        }
        out.push(match prefix {
            Some(p) => format!("{p}:{}", file.display()),
            None => file.display().to_string(),
        });
    }
    Ok(out)
}

/// `dir/name` if `name` is a relative path that stays inside `dir`.
fn inside(dir: &Path, name: &str) -> Option<PathBuf> {
    let rel = Path::new(name);
    let plain = !name.is_empty()
        && rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    plain.then(|| dir.join(rel))
}

/// The MDS indexes of `dir`: its own, or else those of its
/// sub-directories (in name order, searched to [`MAX_DEPTH`]).
fn find_indexes(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let index = dir.join(MDS_INDEX);
    if index.is_file() {
        out.push(index);
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p = entry.path();
        if p.is_dir() {
            subdirs.push(p);
        }
    }
    subdirs.sort();
    for d in subdirs {
        find_indexes(&d, depth + 1, out)?;
    }
    Ok(())
}

/// The shards of the MDS index at `index`: each shard's entry, and the
/// file to read for it (`raw_data` if it exists, else `zip_data`).
pub(crate) fn mds_shard_files(index: &Path) -> Result<Vec<(serde_json::Value, PathBuf)>> {
    let shards = mds_shards(index)?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut out = Vec::with_capacity(shards.len());
    for (i, shard) in shards.into_iter().enumerate() {
        let [raw, zip] = ["raw_data", "zip_data"].map(|k| {
            shard
                .get(k)
                .and_then(|d| d.get("basename"))
                .and_then(|b| b.as_str())
                .map(str::to_string)
        });
        let bad = |what: String| Error::BadFile {
            path: index.to_path_buf(),
            what: format!("shard {i}: {what}"),
        };
        let mut candidates = Vec::new();
        for name in raw.iter().chain(zip.iter()) {
            candidates.push(
                inside(dir, name).ok_or_else(|| {
                    bad(format!("`{name}` is not a file name in {}", dir.display()))
                })?,
            );
        }
        if candidates.is_empty() {
            return Err(bad("no `raw_data` or `zip_data` basename".into()));
        }
        let file = candidates
            .iter()
            .find(|c| c.is_file())
            .cloned()
            .ok_or_else(|| {
                bad(format!(
                    "none of its files exists ({})",
                    candidates
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        out.push((shard, file));
    }
    if out.is_empty() {
        return Err(Error::BadFile {
            path: index.to_path_buf(),
            what: "the index lists no shard".into(),
        });
    }
    Ok(out)
}

/// The `shards` of the MDS index at `index` (its `version` must be 2).
pub(crate) fn mds_shards(index: &Path) -> Result<Vec<serde_json::Value>> {
    let bad = |what: String| Error::BadFile {
        path: index.to_path_buf(),
        what,
    };
    let bytes = std::fs::read(index).map_err(|e| Error::io(index, e))?;
    let mut v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    match v.get("version").and_then(|x| x.as_u64()) {
        Some(2) => {}
        other => {
            return Err(bad(format!(
                "index version {}, expected 2 (what streaming 0.6 and later write)",
                other.map_or("missing".to_string(), |x| x.to_string())
            )))
        }
    }
    match v.get_mut("shards").map(serde_json::Value::take) {
        Some(serde_json::Value::Array(a)) => Ok(a),
        _ => Err(bad("no `shards` list".into())),
    }
}
