//! The record index of a file: how many records it holds and, for the
//! formats whose records are frames or lines (uncompressed TFRecord, JSON
//! Lines), the byte offset of every record, so that a reader can go to any
//! record without reading those before it
//! ([`RecordReader::seek_indexed`](crate::format::RecordReader::seek_indexed)).
//! The others are read by position through their own `skip_to` (npy and
//! npz members by arithmetic, Parquet by row group, Arrow and MDS from their
//! own offset tables; CSV and tar by reading up to the record).
//!
//! An index is built once per file, from one scan, and kept in a cache
//! directory ([`default_index_dir`], or the user's `index_dir`) as
//! `<hash of the path>.idx`: a 48-byte header (the file's [`IndexStamp`]:
//! size, modification time, a hash of its first and last 64 KiB; the kind;
//! the record count) and, where there are offsets, one little-endian `u64`
//! per record plus the end of the last: 8 bytes a record. An index whose
//! stamp does not match its file is rebuilt, never used. Offsets are read
//! from the index file as needed ([`RecordIndex::span`]: one 16-byte read),
//! so a run holds no offset table in memory: one open index file per file.
//!
//! A compressed input cannot be read by position: building its index is an
//! error naming the file and the modes that read it.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::error::{Error, Result};
use crate::format::tfrecord::{masked_crc32c, FOOTER_BYTES, HEADER_BYTES};

const MAGIC: &[u8; 8] = b"FLIDX\x01\0\0";
const HEADER: u64 = 48;
/// Bytes of each end of a file its stamp hashes.
const STAMP_ENDS: u64 = 64 << 10;

/// What identifies a file's content for its index: size, modification
/// time (nanoseconds), and a hash of its first and last 64 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexStamp {
    /// Bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: u64,
    /// CRC-32C of the first and last 64 KiB, as one number.
    pub ends: u64,
}

impl IndexStamp {
    /// The stamp of `path` now.
    pub fn of(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Self::of_file(path, &file)
    }

    fn of_file(path: &Path, file: &File) -> Result<Self> {
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let size = meta.len();
        let mtime_ns = (meta.modified().ok())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        let mut buf = vec![0u8; STAMP_ENDS.min(size) as usize];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| Error::io(path, e))?;
        let head = crc32c::crc32c(&buf);
        let tail_at = size.saturating_sub(STAMP_ENDS);
        file.read_exact_at(&mut buf, tail_at)
            .map_err(|e| Error::io(path, e))?;
        let tail = crc32c::crc32c(&buf);
        Ok(IndexStamp {
            size,
            mtime_ns,
            ends: (u64::from(head) << 32) | u64::from(tail),
        })
    }
}

/// How a file's records are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// TFRecord frames: the offset of each frame's header.
    TfRecordFrames,
    /// JSON Lines: the offset of each line that holds a record.
    JsonLines,
    /// The record count alone (the format reads by position itself).
    Count,
}

impl IndexKind {
    fn code(self) -> u64 {
        match self {
            IndexKind::TfRecordFrames => 1,
            IndexKind::JsonLines => 2,
            IndexKind::Count => 3,
        }
    }

    fn has_offsets(self) -> bool {
        self != IndexKind::Count
    }
}

/// Where indexes are kept when no `index_dir` is given:
/// `$XDG_CACHE_HOME/feedline/index`, else `$HOME/.cache/feedline/index`,
/// else `feedline-index` under the system's temporary directory.
pub fn default_index_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("feedline").join("index");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h)
            .join(".cache")
            .join("feedline")
            .join("index");
    }
    std::env::temp_dir().join("feedline-index")
}

/// A file's record index, as kept in its cache directory.
#[derive(Debug)]
pub struct RecordIndex {
    data: PathBuf,
    stamp: IndexStamp,
    kind: IndexKind,
    records: u64,
    /// The index file, for the offsets (kinds with offsets).
    offsets: Option<(PathBuf, File)>,
    /// A remote object's HEAD when it was indexed (`None`: a local file).
    #[cfg(feature = "remote")]
    remote: Option<crate::remote::ObjectInfo>,
}

/// FNV-1a of `bytes`: the index file's name from the data file's path.
fn name_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl RecordIndex {
    /// The index of `data` (a local, uncompressed file) of kind `kind`
    /// from `dir`, built there first if it is missing or its stamp does not
    /// match the file. `count` counts the records of a [`IndexKind::Count`]
    /// file (through its format's reader).
    pub fn open_or_build(
        data: &Path,
        kind: IndexKind,
        dir: &Path,
        count: impl FnOnce() -> Result<u64>,
    ) -> Result<Self> {
        let absolute = std::fs::canonicalize(data).map_err(|e| Error::io(data, e))?;
        let file = File::open(&absolute).map_err(|e| Error::io(data, e))?;
        let stamp = IndexStamp::of_file(data, &file)?;
        let name = format!(
            "{:016x}.idx",
            name_hash(absolute.as_os_str().as_encoded_bytes())
        );
        let index_path = dir.join(name);
        match Self::read(data, &index_path, stamp, kind) {
            Ok(Some(index)) => return Ok(index),
            Ok(None) => {}
            Err(e) => log::warn!("{}: rebuilding: {e}", index_path.display()),
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::BadFile {
            path: dir.to_path_buf(),
            what: format!("the record index directory cannot be made: {e}"),
        })?;
        let t0 = std::time::Instant::now();
        let (records, offsets) = match kind {
            IndexKind::TfRecordFrames => scan_frames(data, file, stamp.size)?,
            IndexKind::JsonLines => scan_lines(data, file)?,
            IndexKind::Count => (count()?, Vec::new()),
        };
        Self::write(&index_path, stamp, kind, records, &offsets)?;
        log::debug!(
            "{}: record index of {records} records built in {:?}",
            data.display(),
            t0.elapsed()
        );
        Self::read(data, &index_path, stamp, kind)?.ok_or_else(|| Error::BadFile {
            path: index_path.clone(),
            what: "the record index just written does not read back".into(),
        })
    }

    /// The index of the remote object at `url` (`s3://`, `gs://`,
    /// `http(s)://`) of kind `kind` from `dir`, built there first if it is
    /// missing or was of another version of the object: its stamp is the
    /// object's size, modification time and a hash of its ETag (or
    /// version), as a HEAD request gives them; the index is built from one
    /// streamed read of the object. Only uncompressed TFRecord objects
    /// ([`IndexKind::TfRecordFrames`]) are indexed: the others are read by
    /// position only through their readers, which a remote stream cannot
    /// do at a cost worth paying. [`remote_info`](Self::remote_info) gives
    /// the HEAD the reads are then pinned to.
    #[cfg(feature = "remote")]
    pub fn open_or_build_remote(url: &str, kind: IndexKind, dir: &Path) -> Result<Self> {
        let data = PathBuf::from(url);
        let remote = |e: crate::remote::RemoteError| Error::io(&data, e.into_io());
        if kind != IndexKind::TfRecordFrames {
            return Err(Error::Config(format!(
                "{url}: a remote input is read by position only as uncompressed TFRecord \
                 (its record index holds its frames' offsets)"
            )));
        }
        let info = crate::remote::head(url).map_err(remote)?;
        let version = (info.e_tag.as_deref())
            .or(info.version.as_deref())
            .unwrap_or("");
        let stamp = IndexStamp {
            size: info.size,
            mtime_ns: info.mtime_ns.unwrap_or(0),
            ends: name_hash(version.as_bytes()),
        };
        let index_path = dir.join(format!("{:016x}.idx", name_hash(url.as_bytes())));
        let found = match Self::read(&data, &index_path, stamp, kind) {
            Ok(found) => found,
            Err(e) => {
                log::warn!("{}: rebuilding: {e}", index_path.display());
                None
            }
        };
        let mut index = match found {
            Some(index) => index,
            None => {
                std::fs::create_dir_all(dir).map_err(|e| Error::BadFile {
                    path: dir.to_path_buf(),
                    what: format!("the record index directory cannot be made: {e}"),
                })?;
                let t0 = std::time::Instant::now();
                let object = crate::remote::RemoteObject::open_at(url, &info, 0).map_err(remote)?;
                let stream = BufReader::with_capacity(1 << 20, object);
                let (records, offsets) = scan_frames_in(&data, stream, info.size, |r, n| {
                    std::io::copy(&mut r.by_ref().take(n), &mut std::io::sink()).map(|_| ())
                })?;
                Self::write(&index_path, stamp, kind, records, &offsets)?;
                log::debug!(
                    "{url}: record index of {records} records built in {:?}",
                    t0.elapsed()
                );
                Self::read(&data, &index_path, stamp, kind)?.ok_or_else(|| Error::BadFile {
                    path: index_path.clone(),
                    what: "the record index just written does not read back".into(),
                })?
            }
        };
        index.remote = Some(info);
        Ok(index)
    }

    /// The HEAD of the remote object indexed, which its reads are pinned
    /// to (`None`: a local file).
    #[cfg(feature = "remote")]
    pub fn remote_info(&self) -> Option<&crate::remote::ObjectInfo> {
        self.remote.as_ref()
    }

    /// The index at `index_path` if it is of `data` as stamped now.
    fn read(
        data: &Path,
        index_path: &Path,
        stamp: IndexStamp,
        kind: IndexKind,
    ) -> Result<Option<Self>> {
        let mut f = match File::open(index_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(index_path, e)),
        };
        let mut h = [0u8; HEADER as usize];
        if f.read_exact(&mut h).is_err() || &h[..8] != MAGIC {
            return Err(Error::BadFile {
                path: index_path.to_path_buf(),
                what: "not a feedline record index".into(),
            });
        }
        let word = |i: usize| u64::from_le_bytes(h[8 * i..8 * i + 8].try_into().expect("8"));
        let stored = IndexStamp {
            size: word(1),
            mtime_ns: word(2),
            ends: word(3),
        };
        if stored != stamp || word(4) != kind.code() {
            log::info!(
                "{}: its record index is stale (stamp {stored:?}, the file now {stamp:?}): rebuilt",
                data.display()
            );
            return Ok(None);
        }
        let records = word(5);
        let len = f.metadata().map_err(|e| Error::io(index_path, e))?.len();
        if kind.has_offsets() && len != HEADER + 8 * (records + 1) {
            return Err(Error::BadFile {
                path: index_path.to_path_buf(),
                what: format!(
                    "{len} bytes, {} expected for {records} records",
                    HEADER + 8 * (records + 1)
                ),
            });
        }
        Ok(Some(RecordIndex {
            data: data.to_path_buf(),
            stamp,
            kind,
            records,
            offsets: kind.has_offsets().then(|| (index_path.to_path_buf(), f)),
            #[cfg(feature = "remote")]
            remote: None,
        }))
    }

    fn write(
        index_path: &Path,
        stamp: IndexStamp,
        kind: IndexKind,
        records: u64,
        offsets: &[u64],
    ) -> Result<()> {
        let tmp = index_path.with_extension(format!("idx.{}.tmp", std::process::id()));
        let io = |e| Error::io(&tmp, e);
        let mut out = std::io::BufWriter::new(File::create(&tmp).map_err(io)?);
        out.write_all(MAGIC).map_err(io)?;
        for w in [stamp.size, stamp.mtime_ns, stamp.ends, kind.code(), records] {
            out.write_all(&w.to_le_bytes()).map_err(io)?;
        }
        for o in offsets {
            out.write_all(&o.to_le_bytes()).map_err(io)?;
        }
        out.flush().map_err(io)?;
        drop(out);
        std::fs::rename(&tmp, index_path).map_err(|e| Error::io(index_path, e))
    }

    /// The file indexed.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Its stamp when indexed.
    pub fn stamp(&self) -> IndexStamp {
        self.stamp
    }

    /// How its records are found.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// Records in the file.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes `start..end` of records `first..last` (`first < last <=
    /// records()`), if the index has offsets: one 16-byte read of the
    /// index file per end. An offset past the file's end, or a range that
    /// runs backwards, is an error naming the file and record.
    pub fn span(&self, first: u64, last: u64) -> Result<Option<(u64, u64)>> {
        let Some((path, f)) = &self.offsets else {
            return Ok(None);
        };
        if first >= last || last > self.records {
            return Err(Error::BadFile {
                path: self.data.clone(),
                what: format!(
                    "records {first}..{last} asked of an index of {} records",
                    self.records
                ),
            });
        }
        let at = |i: u64| -> Result<u64> {
            let mut b = [0u8; 8];
            f.read_exact_at(&mut b, HEADER + 8 * i)
                .map_err(|e| Error::io(path, e))?;
            Ok(u64::from_le_bytes(b))
        };
        let (start, end) = if last == first + 1 {
            // Neighbours in the table: one read.
            let mut b = [0u8; 16];
            f.read_exact_at(&mut b, HEADER + 8 * first)
                .map_err(|e| Error::io(path, e))?;
            let word = |k: usize| u64::from_le_bytes(b[k..k + 8].try_into().expect("8"));
            (word(0), word(8))
        } else {
            (at(first)?, at(last)?)
        };
        self.checked_span(first, start, end).map(Some)
    }

    /// Whether the index has offsets (else the format reads by position itself).
    pub fn has_offsets(&self) -> bool {
        self.offsets.is_some()
    }

    /// Entries `first..first + n` of the offset table (fewer at its end;
    /// the table has `records() + 1`, the last the end of the last record):
    /// one read of the index file, for a reader that keeps pages of it.
    pub fn offsets(&self, first: u64, n: u64) -> Result<Vec<u64>> {
        let Some((path, f)) = &self.offsets else {
            return Ok(Vec::new());
        };
        let n = n.min((self.records + 1).saturating_sub(first));
        let mut b = vec![0u8; 8 * n as usize];
        f.read_exact_at(&mut b, HEADER + 8 * first)
            .map_err(|e| Error::io(path, e))?;
        Ok(b.chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
            .collect())
    }

    /// `start..end`, the bytes of records from `first` on as the offset
    /// table gave them, checked: an offset past the file's end, or a range
    /// that runs backwards, is an error naming the file and record.
    pub fn checked_span(&self, first: u64, start: u64, end: u64) -> Result<(u64, u64)> {
        if start >= end || end > self.stamp.size {
            return Err(Error::BadFile {
                path: self.data.clone(),
                what: format!(
                    "record index: record {first} at bytes {start}..{end}, the file has {} bytes",
                    self.stamp.size
                ),
            });
        }
        Ok((start, end))
    }

    /// Is the file still what was indexed? An error naming it if it changed.
    pub fn check_unchanged(&self) -> Result<()> {
        // A remote object's reads are pinned to the version indexed (its
        // ETag, `If-Match`): a changed object fails the read that meets it,
        // naming its URL, without a HEAD per check.
        #[cfg(feature = "remote")]
        if self.remote.is_some() {
            return Ok(());
        }
        let now = IndexStamp::of(&self.data)?;
        if now != self.stamp {
            return Err(Error::BadFile {
                path: self.data.clone(),
                what: format!(
                    "changed since its record index was built ({} bytes, now {}): \
                     a file must not change during a run",
                    self.stamp.size, now.size
                ),
            });
        }
        Ok(())
    }
}

/// The frame offsets of an uncompressed TFRecord file, from its headers
/// alone (each header's length CRC checked); payloads are stepped over.
fn scan_frames(path: &Path, file: File, size: u64) -> Result<(u64, Vec<u64>)> {
    let r = BufReader::with_capacity(1 << 20, file);
    scan_frames_in(path, r, size, |r, n| r.seek_relative(n as i64))
}

/// The frame offsets of `size` bytes of uncompressed TFRecord read from
/// `r`, its payloads stepped over by `skip` (a seek in a file, a read in a
/// stream).
fn scan_frames_in<R: Read>(
    path: &Path,
    mut r: R,
    size: u64,
    mut skip: impl FnMut(&mut R, u64) -> std::io::Result<()>,
) -> Result<(u64, Vec<u64>)> {
    let mut offsets = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let record = offsets.len() as u64;
        let bad = |what: String| Error::BadFile {
            path: path.to_path_buf(),
            what: format!("record {record} at byte {pos}: {what} (indexing it)"),
        };
        let mut h = [0u8; HEADER_BYTES];
        if size - pos < HEADER_BYTES as u64 {
            return Err(bad(format!(
                "truncated header: {} of {HEADER_BYTES} bytes",
                size - pos
            )));
        }
        r.read_exact(&mut h).map_err(|e| Error::io(path, e))?;
        let len = u64::from_le_bytes(h[..8].try_into().expect("8"));
        let crc = u32::from_le_bytes(h[8..].try_into().expect("4"));
        if masked_crc32c(&h[..8]) != crc {
            return Err(bad(format!(
                "bad length CRC (stored {crc:#010x}, computed {:#010x})",
                masked_crc32c(&h[..8])
            )));
        }
        let frame = HEADER_BYTES as u64 + len + FOOTER_BYTES as u64;
        if len > size - pos || frame > size - pos {
            return Err(bad(format!(
                "truncated record: the header says {len} bytes, {} left",
                size - pos - HEADER_BYTES as u64
            )));
        }
        offsets.push(pos);
        skip(&mut r, len + FOOTER_BYTES as u64).map_err(|e| Error::io(path, e))?;
        pos += frame;
    }
    let n = offsets.len() as u64;
    offsets.push(size);
    Ok((n, offsets))
}

/// The offsets of the lines of a JSON Lines file that hold records (as
/// its reader counts them: a line of whitespace only is none); each
/// record's bytes run to the next record's line.
fn scan_lines(path: &Path, file: File) -> Result<(u64, Vec<u64>)> {
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut offsets = Vec::new();
    let mut pos = 0u64;
    // Whether the line being scanned holds a non-blank byte, and where it began.
    let mut line_start = 0u64;
    let mut content = false;
    loop {
        let buf = r.fill_buf().map_err(|e| Error::io(path, e))?;
        if buf.is_empty() {
            break;
        }
        let n = buf.len();
        for (i, &b) in buf.iter().enumerate() {
            if b == b'\n' {
                if content {
                    offsets.push(line_start);
                }
                content = false;
                line_start = pos + i as u64 + 1;
            } else if !content && !b.is_ascii_whitespace() {
                // A UTF-8 byte order mark at the file's start is not content.
                let bom = line_start == 0 && pos + (i as u64) < 3 && b >= 0x80;
                content = !bom;
            }
        }
        pos += n as u64;
        r.consume(n);
    }
    if content {
        offsets.push(line_start);
    }
    let n = offsets.len() as u64;
    offsets.push(size);
    Ok((n, offsets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tfrecord::TfRecordWriter;

    fn tfrecord(path: &Path, payloads: &[&[u8]]) {
        let mut w = TfRecordWriter::create(path, crate::format::Compression::None).unwrap();
        for p in payloads {
            w.write_record(p).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn frames_are_indexed_and_a_changed_file_is_reindexed() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a.tfrecord");
        tfrecord(&data, &[b"x", b"yy", b"zzz"]);
        let idx = dir.path().join("idx");
        let i =
            RecordIndex::open_or_build(&data, IndexKind::TfRecordFrames, &idx, || unreachable!())
                .unwrap();
        assert_eq!(i.records(), 3);
        assert_eq!(i.span(0, 1).unwrap(), Some((0, 17)));
        assert_eq!(i.span(1, 3).unwrap(), Some((17, 17 + 18 + 19)));
        assert!(i.span(2, 4).is_err());
        // Rewritten: the stamp differs, the index is built anew.
        tfrecord(&data, &[b"x", b"yy"]);
        assert!(i.check_unchanged().is_err());
        let j =
            RecordIndex::open_or_build(&data, IndexKind::TfRecordFrames, &idx, || unreachable!())
                .unwrap();
        assert_eq!(j.records(), 2);
        assert_eq!(std::fs::read_dir(&idx).unwrap().count(), 1);
    }

    #[test]
    fn a_damaged_header_is_refused_naming_the_file_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("b.tfrecord");
        tfrecord(&data, &[b"x", b"yy"]);
        let mut bytes = std::fs::read(&data).unwrap();
        bytes[17 + 9] ^= 0xff; // record 1's length CRC
        std::fs::write(&data, &bytes).unwrap();
        let e = RecordIndex::open_or_build(
            &data,
            IndexKind::TfRecordFrames,
            dir.path(),
            || unreachable!(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("b.tfrecord") && e.contains("record 1 at byte 17"),
            "{e}"
        );
    }

    #[test]
    fn lines_with_records_are_indexed_blank_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("c.jsonl");
        std::fs::write(&data, "{\"a\":1}\n\n  \n{\"a\":2}\n{\"a\":3}").unwrap();
        let i =
            RecordIndex::open_or_build(&data, IndexKind::JsonLines, dir.path(), || unreachable!())
                .unwrap();
        assert_eq!(i.records(), 3);
        assert_eq!(i.span(0, 1).unwrap(), Some((0, 12)));
        assert_eq!(i.span(1, 2).unwrap(), Some((12, 20)));
        assert_eq!(i.span(2, 3).unwrap(), Some((20, 27)));
    }

    #[test]
    fn a_damaged_index_file_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d.tfrecord");
        tfrecord(&data, &[b"x"]);
        let idx = dir.path().join("idx");
        let i =
            RecordIndex::open_or_build(&data, IndexKind::TfRecordFrames, &idx, || unreachable!())
                .unwrap();
        let path = i.offsets.as_ref().unwrap().0.clone();
        drop(i);
        std::fs::write(&path, b"garbage").unwrap();
        let j =
            RecordIndex::open_or_build(&data, IndexKind::TfRecordFrames, &idx, || unreachable!())
                .unwrap();
        assert_eq!(j.records(), 1);
    }
}
