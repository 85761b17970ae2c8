//! What a path that exists and is not a regular file is ([`PathKind`]):
//! the kinds a checkpoint is never saved over, named in the refusal.

/// What a path that exists and is not a regular file is (the kinds a
/// checkpoint is never saved over).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// A directory.
    Directory,
    /// A character device (`/dev/null`, `/dev/full`).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A FIFO (a named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// Anything else that is not a regular file.
    Other,
}

impl PathKind {
    /// The kind of the file `meta` describes; `None` for a regular file.
    pub fn of(meta: &std::fs::Metadata) -> Option<PathKind> {
        let t = meta.file_type();
        if t.is_file() {
            return None;
        }
        if t.is_dir() {
            return Some(PathKind::Directory);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_char_device() {
                return Some(PathKind::CharDevice);
            }
            if t.is_block_device() {
                return Some(PathKind::BlockDevice);
            }
            if t.is_fifo() {
                return Some(PathKind::Fifo);
            }
            if t.is_socket() {
                return Some(PathKind::Socket);
            }
        }
        Some(PathKind::Other)
    }
}

impl std::fmt::Display for PathKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathKind::Directory => "a directory",
            PathKind::CharDevice => "a character device",
            PathKind::BlockDevice => "a block device",
            PathKind::Fifo => "a FIFO",
            PathKind::Socket => "a socket",
            PathKind::Other => "a special file",
        })
    }
}
