//! Column groups: several `.npy` files as the columns of the same rows
//! ([`NpyColumnsFormat`], its `npy-columns:` spec and [`columns_spec`]).

use std::path::Path;

use super::array::Array;
use super::file::open_npy;
use super::reader::{bad, NpReader};
use crate::error::Result;
use crate::format::{Compression, Format, OpenOptions, RecordReader};

/// A file group: several `.npy` files as the columns of the same rows —
/// numpy's common `images.npy` + `labels.npy` layout (a Paddle/MXNet
/// tuple of files). Its input spec is `npy-columns:` and the member paths,
/// comma-separated (`npy-columns:data/images.npy,data/labels.npy`; a member
/// path cannot contain a comma); [`columns_spec`] writes one. Each member
/// is one field, named after its file stem, so the stems must differ; all
/// members must have the same number of rows (checked when the group is
/// opened: an error names each member and its rows). Row `i` of the group
/// is row `i` of every member; its records are located as
/// `npy-columns:…: record i`, and a bad row names the member it is in.
///
/// ```
/// use feedline::format::{npy::columns_spec, OpenOptions, Registry};
/// # let dir = tempfile::tempdir().unwrap();
/// # let (images, labels) = (dir.path().join("images.npy"), dir.path().join("labels.npy"));
/// ndarray_npy::write_npy(&images, &ndarray::Array3::<f32>::zeros((5, 2, 2))).unwrap();
/// ndarray_npy::write_npy(&labels, &ndarray::Array1::<i64>::from(vec![0, 1, 2, 3, 4])).unwrap();
/// let spec = columns_spec([&images, &labels]);
/// let mut r = Registry::with_builtin().open(&spec, None, &OpenOptions::default()).unwrap();
/// assert_eq!(r.len_hint(), Some(5));
/// let rec = r.next_record().unwrap().unwrap();
/// assert_eq!(rec.to_json(), serde_json::json!({"images": [0.0, 0.0, 0.0, 0.0], "labels": [0]}));   // values, flat
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NpyColumnsFormat;

/// The format name of [`NpyColumnsFormat`], the prefix of its specs.
pub const NPY_COLUMNS: &str = "npy-columns";

/// The input spec of a [`NpyColumnsFormat`] group: `npy-columns:a,b,…`.
pub fn columns_spec<P: AsRef<Path>>(members: impl IntoIterator<Item = P>) -> String {
    let members: Vec<String> = members
        .into_iter()
        .map(|p| p.as_ref().to_string_lossy().into_owned())
        .collect();
    format!("{NPY_COLUMNS}:{}", members.join(","))
}

impl Format for NpyColumnsFormat {
    fn name(&self) -> &str {
        NPY_COLUMNS
    }

    fn extensions(&self) -> &[&str] {
        &[]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npy_columns(path, opts)?))
    }
}

/// Open a group of `.npy` files (`path` is the members, comma-separated).
fn open_npy_columns(group: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    let text = group.to_string_lossy();
    let members: Vec<&str> = text.split(',').map(str::trim).collect();
    if members.len() < 2 || members.iter().any(|m| m.is_empty()) {
        return Err(bad(
            group,
            format!(
                "a {NPY_COLUMNS} group is two or more .npy paths separated by commas \
                 (`{NPY_COLUMNS}:images.npy,labels.npy`), got {} non-empty of {}",
                members.iter().filter(|m| !m.is_empty()).count(),
                members.len()
            ),
        ));
    }
    // Each member from row 0: the group's reader positions them all.
    let member_opts = OpenOptions {
        start_record: 0,
        compression: None,
        ..opts.clone()
    };
    let mut arrays: Vec<Array> = Vec::with_capacity(members.len());
    let mut sources: Vec<(String, u64)> = Vec::with_capacity(members.len());
    for m in &members {
        let path = Path::new(m);
        let mut o = member_opts.clone();
        o.compression = Some(Compression::from_path(path));
        let mut r = open_npy(path, &o)?;
        let mut array = r.arrays.remove(0);
        if let Some(other) = arrays.iter().position(|a| a.name == array.name) {
            return Err(bad(
                group,
                format!(
                    "`{}` and `{m}` would both be field `{}` (a member's field is its file stem): \
                     rename one",
                    sources[other].0, array.name
                ),
            ));
        }
        array.label = format!("`{m}`: ");
        sources.push((m.to_string(), array.h.rows));
        arrays.push(array);
    }
    let rows = sources[0].1;
    if sources.iter().any(|(_, n)| *n != rows) {
        let list: Vec<String> = sources
            .iter()
            .map(|(m, n)| format!("`{m}` has {n}"))
            .collect();
        return Err(bad(
            group,
            format!(
                "the members of a {NPY_COLUMNS} group are columns of the same rows, but they \
                 have different numbers of rows: {}",
                list.join(", ")
            ),
        ));
    }
    NpReader::new(group, arrays, opts, false, Vec::new())
}
