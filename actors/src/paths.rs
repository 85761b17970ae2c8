//! [`IntoPaths`]: what [`LoaderBuilder::files`](crate::LoaderBuilder::files)
//! and [`FileSet::new`](crate::FileSet::new) accept — one input (a path, a
//! glob, `@list`, `FORMAT:path`) or many, as strings or `Path`s.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// One input spec: a `&str`, `String`, `&Path` or `PathBuf`.
///
/// A `Path` that is not valid UTF-8 is taken with its invalid bytes
/// replaced (`to_string_lossy`): opening it then fails naming the replaced
/// path, never a different file silently.
pub trait IntoPath {
    /// The spec as the pipeline keeps it.
    fn into_path_string(self) -> String;
}

impl IntoPath for &str {
    fn into_path_string(self) -> String {
        self.to_string()
    }
}

impl IntoPath for String {
    fn into_path_string(self) -> String {
        self
    }
}

impl IntoPath for &String {
    fn into_path_string(self) -> String {
        self.clone()
    }
}

impl IntoPath for Cow<'_, str> {
    fn into_path_string(self) -> String {
        self.into_owned()
    }
}

impl IntoPath for &Path {
    fn into_path_string(self) -> String {
        self.to_string_lossy().into_owned()
    }
}

impl IntoPath for PathBuf {
    fn into_path_string(self) -> String {
        self.as_path().into_path_string()
    }
}

impl IntoPath for &PathBuf {
    fn into_path_string(self) -> String {
        self.as_path().into_path_string()
    }
}

/// One input spec or many: a single [`IntoPath`], or an array, `Vec` or
/// slice of them. An iterator of specs: collect it first
/// (`.files(names.iter().map(|n| format!("data/{n}")).collect::<Vec<_>>())`)
/// — a single path is also accepted, so iterators cannot be, by coherence.
///
/// ```
/// use feedline_actors::IntoPaths;
/// assert_eq!("data/train.npz".into_paths(), ["data/train.npz"]);
/// assert_eq!(["a.npy", "b.npy"].into_paths(), ["a.npy", "b.npy"]);
/// assert_eq!(vec![std::path::PathBuf::from("c.jsonl")].into_paths(), ["c.jsonl"]);
/// let many = vec!["x-*.tfrecord".to_string(), "@extra.list".to_string()];
/// assert_eq!(many.as_slice().into_paths(), many);
/// ```
pub trait IntoPaths {
    /// The specs, in order.
    fn into_paths(self) -> Vec<String>;
}

impl<P: IntoPath> IntoPaths for P {
    fn into_paths(self) -> Vec<String> {
        vec![self.into_path_string()]
    }
}

impl<P: IntoPath, const N: usize> IntoPaths for [P; N] {
    fn into_paths(self) -> Vec<String> {
        self.into_iter().map(IntoPath::into_path_string).collect()
    }
}

impl<P: IntoPath + Clone, const N: usize> IntoPaths for &[P; N] {
    fn into_paths(self) -> Vec<String> {
        self.as_slice().into_paths()
    }
}

impl<P: IntoPath> IntoPaths for Vec<P> {
    fn into_paths(self) -> Vec<String> {
        self.into_iter().map(IntoPath::into_path_string).collect()
    }
}

impl<P: IntoPath + Clone> IntoPaths for &Vec<P> {
    fn into_paths(self) -> Vec<String> {
        self.as_slice().into_paths()
    }
}

impl<P: IntoPath + Clone> IntoPaths for &[P] {
    fn into_paths(self) -> Vec<String> {
        self.iter()
            .cloned()
            .map(IntoPath::into_path_string)
            .collect()
    }
}
