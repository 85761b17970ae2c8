//! Input files as the formats read them: opened by kind ([`open_input`]: a
//! regular file is read by position, anything else — a FIFO, a pipe, a
//! character device — as a stream), read by position with `pread`
//! ([`InputFile`]), through a reused page-aligned window ([`Window`]) or as
//! a byte range ([`RangeReader`]). A remote URL (`s3://`, `gs://`,
//! `http(s)://`, see [`crate::remote`]) opens as a stream of ranged GETs.
//!
//! Nothing here maps a file into memory: a mapped file that another process
//! shortens kills the reader with `SIGBUS` when it touches a page past the
//! new end, and no safe Rust can catch that. A positioned read of those
//! bytes instead returns short, which becomes an [`Error::Io`] naming the
//! file ("it was shortened while being read").
//!
//! A file's length is taken once, when it is opened: bytes appended later
//! are not read, and a length field in the data is never trusted beyond it.

use std::fs::File;
use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// A regular file opened for positioned reads, shared by its reader and by
/// every chunk with a row that refers to it (see [`crate::Column`]).
pub(crate) struct InputFile {
    file: File,
    path: PathBuf,
    /// The length when it was opened.
    len: u64,
}

impl std::fmt::Debug for InputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish()
    }
}

/// What a path opened as.
pub(crate) enum Opened {
    /// A regular file: read by position.
    Regular(Arc<InputFile>),
    /// Anything else that can be read (a FIFO, a pipe such as `<(cat x)`,
    /// a character device such as `/dev/urandom`, a remote object): read as
    /// a stream. Its length is unknown (`metadata` says 0), so it is never
    /// taken for empty.
    Stream(Box<dyn Read + Send>),
}

/// Open `path`: a regular file for positioned reads, a remote URL or
/// anything else that is not a directory as a stream. Errors name the path
/// (or URL).
pub(crate) fn open_input(path: &Path) -> Result<Opened> {
    if let Some(url) = remote_url(path) {
        return open_remote(url).map(Opened::Stream);
    }
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return Err(Error::BadFile {
            path: path.to_path_buf(),
            what: "is a directory, not a file: give the files in it, e.g. the glob `DIR/*`"
                .replace("DIR", path.to_string_lossy().trim_end_matches('/')),
        });
    }
    if !meta.is_file() {
        return Ok(Opened::Stream(Box::new(file)));
    }
    Ok(Opened::Regular(Arc::new(InputFile {
        file,
        path: path.to_path_buf(),
        len: meta.len(),
    })))
}

/// The URL `path` is, if it names a remote object.
pub(crate) fn remote_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| crate::remote::is_remote(s))
}

/// Open the remote object at `url` as a stream; errors name the URL.
#[cfg(feature = "remote")]
fn open_remote(url: &str) -> Result<Box<dyn Read + Send>> {
    crate::remote::RemoteObject::open_cached(url).map_err(|e| Error::io(url, e.into_io()))
}

/// Without the `remote` feature a URL is refused, naming the feature.
#[cfg(not(feature = "remote"))]
fn open_remote(url: &str) -> Result<Box<dyn Read + Send>> {
    Err(Error::not_compiled_in(url, crate::Feature::Remote))
}

/// Open `path` (a file or a remote URL) as a plain byte stream.
pub(crate) fn open_read(path: &Path) -> Result<Box<dyn Read + Send>> {
    if let Some(url) = remote_url(path) {
        return open_remote(url);
    }
    Ok(Box::new(File::open(path).map_err(|e| Error::io(path, e))?))
}

impl InputFile {
    /// The file's length when it was opened.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The path it was opened by.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Heap memory an `Arc<InputFile>` holds: the struct (with the `Arc`'s
    /// counts) and its path.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + 2 * std::mem::size_of::<usize>() + self.path.capacity()
    }

    /// An I/O error on this file.
    pub(crate) fn error(&self, e: io::Error) -> Error {
        Error::io(&self.path, e)
    }

    /// Read `dst.len()` bytes at `off` into `dst` (which may be
    /// uninitialized: only written). Bytes the file no longer has — it was
    /// shortened since it was opened — are an [`Error::Io`] naming it.
    pub(crate) fn read_at(&self, off: u64, dst: &mut [MaybeUninit<u8>]) -> Result<()> {
        read_exact_at(&self.file, off, dst).map_err(|e| self.error(e))
    }

    /// [`read_at`](Self::read_at) into initialized bytes.
    pub(crate) fn read_at_init(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the same memory as bytes that may be uninitialized;
        // `read_at` only writes initialized bytes into it.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<MaybeUninit<u8>>(), dst.len())
        };
        self.read_at(off, dst)
    }
}

/// Read all of `dst` from `file` at `off`; a short file is `UnexpectedEof`
/// saying how much was there and how long the file is now.
fn read_exact_at(file: &File, off: u64, dst: &mut [MaybeUninit<u8>]) -> io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        let at = off + done as u64;
        match read_some_at(file, at, &mut dst[done..]) {
            Ok(0) => {
                let now = file.metadata().map_or_else(
                    |_| String::new(),
                    |m| format!(": it is {} bytes long now", m.len()),
                );
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "reading {} bytes at offset {off}, only {done} were there{now} \
                         (it was shortened while being read)",
                        dst.len()
                    ),
                ));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One `pread`: up to `dst.len()` bytes of `file` at `at`.
#[cfg(unix)]
fn read_some_at(file: &File, at: u64, dst: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    use std::os::unix::io::AsRawFd;
    let at = libc::off_t::try_from(at).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("offset {at} is too large"),
        )
    })?;
    // SAFETY: `dst` is valid for writes of `dst.len()` bytes; `pread`
    // writes at most that many (initialized) bytes there.
    let n = unsafe { libc::pread(file.as_raw_fd(), dst.as_mut_ptr().cast(), dst.len(), at) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One positioned read: up to `dst.len()` bytes of `file` at `at`.
#[cfg(windows)]
fn read_some_at(file: &File, at: u64, dst: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    use std::os::windows::fs::FileExt;
    // SAFETY: zero-filled first, so every byte is initialized.
    let dst = unsafe {
        std::ptr::write_bytes(dst.as_mut_ptr(), 0, dst.len());
        std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), dst.len())
    };
    file.seek_read(dst, at)
}

/// Alignment of a [`Window`]'s bytes: reading into a buffer 16 bytes into
/// a page (where the allocator puts large blocks) measured several times
/// slower than into an aligned one.
const ALIGN: usize = 4096;

/// A reused, page-aligned buffer holding a window of a file: the bytes a
/// reader looks at are read into it by position, a block at a time.
pub(crate) struct Window {
    /// Zero-filled once; the window's bytes start at `start` (aligned).
    mem: Vec<u8>,
    start: usize,
    /// Bytes read at a time, at least.
    block: usize,
    /// File offset of the first byte held.
    pos: u64,
    /// Bytes held.
    held: usize,
}

impl Window {
    /// An empty window that reads `block` bytes at a time (or what is asked
    /// for, if more).
    pub(crate) fn new(block: usize) -> Self {
        Window {
            mem: Vec::new(),
            start: 0,
            block: block.max(1),
            pos: 0,
            held: 0,
        }
    }

    fn room(&self) -> usize {
        self.mem.len() - self.start
    }

    /// Read `block` bytes at a time from now on (at least 1).
    pub(crate) fn set_block(&mut self, block: usize) {
        self.block = block.max(1);
    }

    /// Bytes `pos..pos + n` of `file` (which has them: the caller checked
    /// against [`InputFile::len`]), from the window, read into it first if
    /// it does not hold them all. A read starts at `pos` and takes a block
    /// (or `n`, if more), up to the end of the file.
    pub(crate) fn get(&mut self, file: &InputFile, pos: u64, n: usize) -> Result<&[u8]> {
        let held_end = self.pos + self.held as u64;
        if pos < self.pos || pos + n as u64 > held_end {
            let want = n.max(self.block);
            let want = (want as u64)
                .min(file.len().saturating_sub(pos))
                .max(n as u64) as usize;
            if self.room() < want {
                let mut mem = vec![0u8; want + ALIGN];
                self.start = mem.as_ptr().align_offset(ALIGN);
                std::mem::swap(&mut self.mem, &mut mem);
            }
            self.held = 0;
            file.read_at_init(pos, &mut self.mem[self.start..self.start + want])?;
            self.pos = pos;
            self.held = want;
        }
        let at = self.start + (pos - self.pos) as usize;
        Ok(&self.mem[at..at + n])
    }
}

/// Bytes `start..end` of a file as a stream (a zip entry's compressed
/// data, a compressed file), read by position; seeking is within the range.
pub(crate) struct RangeReader {
    file: Arc<InputFile>,
    start: u64,
    pos: u64,
    end: u64,
}

impl RangeReader {
    /// Bytes `start..end` of `file`.
    pub(crate) fn new(file: Arc<InputFile>, start: u64, end: u64) -> Self {
        RangeReader {
            file,
            start,
            pos: start,
            end,
        }
    }
}

impl io::Seek for RangeReader {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let len = self.end - self.start;
        let at = match to {
            io::SeekFrom::Start(n) => Some(n),
            io::SeekFrom::End(d) => len.checked_add_signed(d),
            io::SeekFrom::Current(d) => (self.pos - self.start).checked_add_signed(d),
        };
        let at =
            at.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = self.start + at.min(len);
        Ok(self.pos - self.start)
    }
}

impl Read for RangeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.end.saturating_sub(self.pos)) as usize;
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: as in `InputFile::read_at_init`.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<MaybeUninit<u8>>(), n)
        };
        read_exact_at(&self.file.file, self.pos, dst)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reads_blocks_and_a_shortened_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.bin");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let Opened::Regular(file) = open_input(&path).unwrap() else {
            panic!("a regular file")
        };
        assert_eq!(file.len(), 10_000);
        let mut w = Window::new(1000);
        assert_eq!(w.get(&file, 10, 5).unwrap(), &bytes[10..15]);
        assert_eq!((w.pos, w.held), (10, 1000));
        assert_eq!(w.get(&file, 500, 510).unwrap(), &bytes[500..1010]);
        assert_eq!(w.pos, 10, "held already");
        assert_eq!(w.get(&file, 9_000, 1000).unwrap(), &bytes[9_000..]);
        assert_eq!(w.get(&file, 100, 3000).unwrap(), &bytes[100..3100]);
        assert_eq!((w.mem.as_ptr() as usize + w.start) % ALIGN, 0);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4000)
            .unwrap();
        let e = w.get(&file, 5000, 10).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("w.bin") && e.contains("shortened"), "{e}");
        let mut r = RangeReader::new(file, 3990, 4100);
        let mut out = Vec::new();
        assert!(r.read_to_end(&mut out).is_err());
    }

    #[test]
    fn a_directory_is_refused_and_a_fifo_is_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        let e = open_input(dir.path()).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
        #[cfg(unix)]
        {
            let fifo = dir.path().join("f");
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            {
                let writer = std::thread::spawn({
                    let fifo = fifo.clone();
                    move || std::fs::write(fifo, b"abc").unwrap()
                });
                let Ok(Opened::Stream(mut f)) = open_input(&fifo) else {
                    panic!("a FIFO is a stream")
                };
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                assert_eq!(s, "abc");
                writer.join().unwrap();
            }
        }
    }
}
