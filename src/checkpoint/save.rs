//! Where a checkpoint may be saved, and the atomic save. One
//! rule, [`check_save_path`], for every face that writes a checkpoint —
//! [`Checkpoint::save_atomic`](super::Checkpoint::save_atomic), the free
//! [`save_atomic`], the Rust and Python loaders' `checkpoint(path)` and
//! `feedline run --checkpoint` (which refuses before the run starts):
//!
//! - a save renames a new file over its path, so a path that exists must be
//!   a regular file (a previous checkpoint, replaced): a device
//!   (`/dev/null`, replaced for the whole machine when run as root), a
//!   FIFO, a socket or a directory — through a symbolic link too — is
//!   refused, naming what it is ([`PathKind`]);
//! - so is one of the loader's own input files ([`InputFiles`]: the same
//!   device and inode, or the same canonical path), which the next run
//!   could not read;
//! - a path in a directory that does not exist is named with that
//!   directory, never under the temporary file's name.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CheckpointError, CheckpointResult, InputFingerprint, PathKind};

/// The files a loader reads — its data files, list files, a schema file —
/// that a checkpoint is never saved over: each by device and inode and by
/// canonical path, found once ([`add`](Self::add): one `stat` each), so a
/// save looks its path up without a `stat` per input.
#[derive(Clone, Debug, Default)]
pub struct InputFiles {
    /// (device, inode) → the input as given.
    ids: HashMap<(u64, u64), PathBuf>,
    /// Canonical path → the input as given.
    canonical: HashMap<PathBuf, PathBuf>,
}

impl InputFiles {
    /// No files.
    pub fn new() -> Self {
        Self::default()
    }

    /// These files ([`add`](Self::add) each).
    pub fn of<P: Into<PathBuf>>(paths: impl IntoIterator<Item = P>) -> Self {
        let mut files = Self::new();
        for p in paths {
            files.add(p);
        }
        files
    }

    /// The local files of a checkpoint's inputs: each stamped path, a
    /// `FORMAT:` prefix taken off as the loader takes it off. Remote objects
    /// and generators (`gen:NAME`) are no local files.
    pub fn of_fingerprint(inputs: &InputFingerprint) -> Self {
        Self::of(
            (inputs.files.iter())
                .filter(|f| !crate::remote::is_remote(&f.path))
                .map(|f| PathBuf::from(crate::plan::split_prefix(&f.path).1)),
        )
    }

    /// Add the file at `path`, named so in errors. A path where nothing is
    /// (a remote object's URL, a generator's name) is passed over: there is
    /// nothing there to destroy.
    pub fn add(&mut self, path: impl Into<PathBuf>) {
        let path = path.into();
        let Ok(meta) = std::fs::metadata(&path) else {
            return;
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            self.ids
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| path.clone());
        }
        #[cfg(not(unix))]
        let _ = meta;
        if let Ok(c) = std::fs::canonicalize(&path) {
            self.canonical.entry(c).or_insert(path);
        }
    }

    /// How many files (by device and inode where the platform has them).
    pub fn len(&self) -> usize {
        self.ids.len().max(self.canonical.len())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The input that `path` is (as it was given), if it is one: the same
    /// device and inode (a hard link, a symbolic link, another spelling),
    /// or the same canonical path (the input replaced by a new file since).
    pub fn find(&self, path: &Path) -> Option<&Path> {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            if let Some(p) = self.ids.get(&(meta.dev(), meta.ino())) {
                return Some(p);
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        let c = std::fs::canonicalize(path).ok()?;
        self.canonical.get(&c).map(PathBuf::as_path)
    }
}

/// The directory a save to `path` writes its temporary file in.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuse `path` as the place of a checkpoint when saving there would
/// destroy something or fail for a reason the user can fix: it exists and
/// is not a regular file ([`CheckpointError::NotARegularFile`], symbolic
/// links followed), it is one of `inputs`
/// ([`CheckpointError::IsAnInput`]), or its directory does not exist
/// ([`CheckpointError::MissingDirectory`]) or is not a directory
/// ([`CheckpointError::NotADirectory`]). A regular file (a previous
/// checkpoint) and a path where nothing is yet are fine. Writes nothing.
pub fn check_save_path(path: &Path, inputs: &InputFiles) -> CheckpointResult<()> {
    if path.file_name().is_none() {
        return Err(CheckpointError::Io {
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
        });
    }
    if let Ok(meta) = std::fs::metadata(path) {
        if let Some(kind) = PathKind::of(&meta) {
            return Err(CheckpointError::NotARegularFile {
                path: path.into(),
                kind,
            });
        }
        if let Some(input) = inputs.find(path) {
            return Err(CheckpointError::IsAnInput {
                path: path.into(),
                input: input.into(),
            });
        }
        return Ok(());
    }
    check_directory(path)
}

/// `path` is not there (or is a dangling link, which the save replaces):
/// its directory must be one.
fn check_directory(path: &Path) -> CheckpointResult<()> {
    let dir = directory_of(path);
    let not_a_dir = |dir: &Path| CheckpointError::NotADirectory {
        path: path.into(),
        dir: dir.into(),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(not_a_dir(&dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(CheckpointError::MissingDirectory {
                path: path.into(),
                dir,
            })
        }
        // A file on the way to it: the nearest ancestor that is one.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            let file =
                (dir.ancestors().skip(1)).find(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir()));
            Err(not_a_dir(file.unwrap_or(&dir)))
        }
        // Not searchable (a permission): the write says so.
        Err(_) => Ok(()),
    }
}

/// Write `bytes` to `path` atomically (temp file in the same directory,
/// fsync, rename, fsync of the directory), after [`check_save_path`] with
/// no inputs to spare: a device, a FIFO, a socket, a directory or a
/// missing directory is refused.
pub fn save_atomic(path: &Path, bytes: &[u8]) -> CheckpointResult<()> {
    save_atomic_sparing(path, bytes, &InputFiles::new())
}

/// [`save_atomic`], refusing too a path that is one of `inputs`.
pub fn save_atomic_sparing(path: &Path, bytes: &[u8], inputs: &InputFiles) -> CheckpointResult<()> {
    save(path, bytes, inputs, |_| Ok(()))
}

/// [`save_atomic`] with a hook called between the write (the temporary
/// file complete and fsynced, at the path given to the hook) and the
/// rename over `path`: tests make a crash happen there (an error from the
/// hook stops the save, the temporary file removed) and check what a
/// reader of `path` sees at that moment.
#[doc(hidden)]
pub fn save_atomic_with(
    path: &Path,
    bytes: &[u8],
    before_rename: impl FnOnce(&Path) -> std::io::Result<()>,
) -> CheckpointResult<()> {
    save(path, bytes, &InputFiles::new(), before_rename)
}

fn save(
    path: &Path,
    bytes: &[u8],
    inputs: &InputFiles,
    before_rename: impl FnOnce(&Path) -> std::io::Result<()>,
) -> CheckpointResult<()> {
    check_save_path(path, inputs)?;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| CheckpointError::Io { path: p, source }
    };
    let dir = directory_of(path);
    let name = path.file_name().expect("checked: a file name");
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(|source| {
            match source.kind() {
                // The directory went away since the check: named, not the temporary file.
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
                    check_directory(path).err()
                }
                _ => None,
            }
            .unwrap_or(CheckpointError::Io {
                path: tmp.clone(),
                source,
            })
        })?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        before_rename(&tmp).map_err(io(&tmp))?;
        // Again just before the rename: what is at `path` may have changed
        // while the file was written.
        check_save_path(path, inputs)?;
        std::fs::rename(&tmp, path).map_err(io(path))?;
        #[cfg(unix)]
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&dir))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    /// What a path is, without following a link: inode, kind, size — and
    /// for a link, where it points and the same of its target.
    #[derive(Debug, PartialEq)]
    struct Identity {
        ino: u64,
        kind: &'static str,
        size: u64,
        link: Option<(PathBuf, Box<Identity>)>,
    }

    fn identity(path: &Path) -> Identity {
        let m = std::fs::symlink_metadata(path).unwrap();
        let t = m.file_type();
        let kind = if t.is_symlink() {
            "symlink"
        } else if t.is_fifo() {
            "fifo"
        } else if t.is_char_device() {
            "char device"
        } else if t.is_dir() {
            "dir"
        } else {
            "file"
        };
        let link = t.is_symlink().then(|| {
            let to = std::fs::read_link(path).unwrap();
            let target = directory_of(path).join(&to);
            (to, Box::new(identity(&target)))
        });
        Identity {
            ino: m.ino(),
            kind,
            size: m.len(),
            link,
        }
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// Only the entries `names` are in `dir` (no temporary file left).
    fn assert_only(dir: &Path, names: &[&str]) {
        let mut got: Vec<String> = (std::fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        got.sort();
        let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(got, want);
    }

    /// A save at `path` is refused with `want` (its sentence naming the
    /// path and `words`), and what is at `path` — inode, kind, size, a
    /// link's target — is as it was.
    fn assert_refused(path: &Path, inputs: &InputFiles, words: &[&str]) -> CheckpointError {
        let before = identity(path);
        let e = save_atomic_sparing(path, b"{\"version\":2}", inputs).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("{}: ", path.display())), "{text}");
        for w in words {
            assert!(text.contains(w), "`{w}` not in: {text}");
        }
        assert!(!text.contains(".tmp."), "{text}");
        assert_eq!(identity(path), before, "{} was touched", path.display());
        e
    }

    /// Issue 39 defect 1: a save replaced whatever was at its path. A FIFO,
    /// a symbolic link to `/dev/null` (the device itself only through the
    /// check, which writes nothing: a broken check must not replace a
    /// device of the machine), a directory and a link to it are refused
    /// naming what they are, and nothing is touched. Mutation caught:
    /// `PathKind::of` answering `None` for every kind — the save over the
    /// FIFO succeeds and replaces it.
    #[test]
    fn a_save_over_what_is_not_a_regular_file_is_refused_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let none = InputFiles::new();
        let fifo = d.join("ck.fifo");
        mkfifo(&fifo);
        let e = assert_refused(&fifo, &none, &["that is a FIFO, not a regular file"]);
        assert!(matches!(
            e,
            CheckpointError::NotARegularFile {
                kind: PathKind::Fifo,
                ..
            }
        ));
        let null = d.join("null.json");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        let e = assert_refused(&null, &none, &["that is a character device"]);
        assert!(matches!(
            e,
            CheckpointError::NotARegularFile {
                kind: PathKind::CharDevice,
                ..
            }
        ));
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let to_sub = d.join("to-sub");
        std::os::unix::fs::symlink("sub", &to_sub).unwrap();
        for p in [&sub, &to_sub] {
            assert_refused(p, &none, &["that is a directory"]);
        }
        assert_only(d, &["ck.fifo", "null.json", "sub", "to-sub"]);
        let e = check_save_path(Path::new("/dev/null"), &none).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/null: that is a character device, not a regular file; saving a checkpoint \
             there would replace it with a file: give the path of a regular file"
        );
    }

    /// A save over one of the inputs is refused naming the input, reached
    /// by its path, another spelling, a symbolic link, a hard link — and
    /// after the input was replaced by a new file (the same canonical
    /// path, another inode). A previous checkpoint is replaced as before.
    /// Mutation caught: `find` answering `None` — each input is replaced
    /// by the checkpoint.
    #[test]
    fn a_save_over_an_input_is_refused_naming_it_and_a_checkpoint_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let data = d.join("data");
        std::fs::create_dir(&data).unwrap();
        let input = data.join("a.jsonl");
        std::fs::write(&input, "{\"x\": 1}\n{\"x\": 2}\n").unwrap();
        let inputs = InputFiles::of([&input]);
        assert_eq!(inputs.len(), 1);
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = d.join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        let other = data.join("../data/./a.jsonl");
        for p in [&input, &other, &link, &hard] {
            let e = assert_refused(p, &inputs, &["one of this loader's input files", "a.jsonl"]);
            match e {
                CheckpointError::IsAnInput { input: i, .. } => assert_eq!(i, input),
                e => panic!("{e}"),
            }
        }
        // The input replaced by a new file at its path (the old one kept
        // by its hard link, so the new inode is another): refused by path.
        let old_ino = identity(&input).ino;
        let new = data.join("new");
        std::fs::write(&new, "{\"x\": 3}\n").unwrap();
        std::fs::rename(&new, &input).unwrap();
        assert_ne!(identity(&input).ino, old_ino);
        assert_refused(&input, &inputs, &["input files"]);
        // A previous checkpoint: replaced, no temporary file left.
        let cp = d.join("cp.json");
        save_atomic_sparing(&cp, b"one", &inputs).unwrap();
        save_atomic_sparing(&cp, b"two", &inputs).unwrap();
        assert_eq!(std::fs::read(&cp).unwrap(), b"two");
        assert_only(d, &["cp.json", "data", "hard.json", "link.json"]);
        assert_only(&data, &["a.jsonl"]);
    }

    /// Issue 39 defect 2: a path in a missing directory was reported under
    /// the temporary file's name. The error names the path given and its
    /// missing directory; a file on the way is named as not a directory.
    /// Mutation caught: the check of the directory dropped — the error is
    /// the temporary file's (`.c.json.tmp.PID: No such file or directory`).
    #[test]
    fn a_missing_directory_is_named_with_the_path_given() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let path = d.join("nonexistent/dir/c.json");
        let e = save_atomic(&path, b"{}").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: cannot save a checkpoint there: the directory {} does not exist",
                path.display(),
                d.join("nonexistent/dir").display()
            )
        );
        assert!(matches!(e, CheckpointError::MissingDirectory { .. }));
        let file = d.join("plain");
        std::fs::write(&file, "x").unwrap();
        for p in [file.join("c.json"), file.join("deeper/c.json")] {
            let e = save_atomic(&p, b"{}").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: cannot save a checkpoint there: {} is not a directory",
                    p.display(),
                    file.display()
                )
            );
        }
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        assert_only(d, &["plain"]);
        // A bare file name: the current directory, which exists.
        assert!(check_save_path(Path::new("c.json"), &InputFiles::new()).is_ok());
    }

    /// What is at the path is checked again just before the rename: a FIFO
    /// put there while the file was written is refused and kept, and the
    /// temporary file removed. Mutation caught: the second
    /// `check_save_path` dropped — the FIFO is replaced.
    #[test]
    fn what_appears_at_the_path_during_the_write_is_refused_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        save_atomic(&path, b"old").unwrap();
        let e = save_atomic_with(&path, b"new", |_| {
            std::fs::remove_file(&path)?;
            mkfifo(&path);
            Ok(())
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                CheckpointError::NotARegularFile {
                    kind: PathKind::Fifo,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(identity(&path).kind, "fifo");
        assert_only(dir.path(), &["cp.json"]);
    }
}
