//! Reading frames: by position from bytes in memory or a regular file
//! through a window ([`Frames`]), or one after the other from a byte
//! stream, each header checked and the cursor moved past the frame.

use std::io::{self, Read};

use super::cursor::Cursor;
use super::frame::{FOOTER_BYTES, HEADER_BYTES};
use crate::backing::Backing;
use crate::error::Result;
use crate::input::Window;
use crate::provenance::Location;

/// Bytes that frames are read from by position: a stream in memory, or a
/// regular file through a window.
pub(super) trait Frames<'a> {
    /// Bytes from `pos` to the end.
    fn left(&self, pos: u64) -> u64;
    /// The 12 bytes at `pos` (at most [`left`](Self::left)).
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]>;
    /// Bytes `pos..pos + n` (`n` at most [`left`](Self::left)).
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]>;
}

impl<'a> Frames<'a> for &'a [u8] {
    #[inline(always)]
    fn left(&self, pos: u64) -> u64 {
        (self.len() as u64).saturating_sub(pos)
    }

    #[inline(always)]
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]> {
        Ok(self[pos as usize..pos as usize + HEADER_BYTES]
            .try_into()
            .expect("12 bytes"))
    }

    #[inline(always)]
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]> {
        Ok(&self[pos as usize..pos as usize + n])
    }
}

/// A regular file read through a window.
pub(super) struct FileFrames<'a> {
    pub(super) file: &'a Backing,
    pub(super) window: &'a mut Window,
}

impl<'a> Frames<'a> for FileFrames<'a> {
    #[inline(always)]
    fn left(&self, pos: u64) -> u64 {
        self.file.len().saturating_sub(pos)
    }

    #[inline(always)]
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]> {
        let h = self.window.get(self.file, pos, HEADER_BYTES)?;
        Ok(h.try_into().expect("12 bytes"))
    }

    #[inline(always)]
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]> {
        self.window.get(self.file, pos, n)
    }
}

/// A frame read by position.
pub(super) struct Frame<'a> {
    pub(super) payload: &'a [u8],
    /// The masked payload CRC stored after it.
    pub(super) stored: u32,
    /// Offset of the payload in the stream.
    pub(super) at: u64,
    pub(super) loc: Location,
}

/// Check the header of the frame at the cursor against the bytes left:
/// its payload length, or the fatal error.
#[inline(always)]
fn frame_len<'a, F: Frames<'a>>(src: &mut F, cur: &mut Cursor) -> Result<Option<u64>> {
    let left = src.left(cur.pos);
    if left == 0 {
        return Ok(None);
    }
    if left < HEADER_BYTES as u64 {
        return Err(cur.fatal(format!("truncated header: {left} of {HEADER_BYTES} bytes")));
    }
    let header = match src.header(cur.pos) {
        Ok(h) => h,
        Err(e) => return Err(cur.file_fatal(e)),
    };
    let len = cur.header(&header)?;
    let avail = left - HEADER_BYTES as u64;
    if len > avail {
        return Err(cur.fatal(format!(
            "truncated payload: header says {len} bytes, {avail} left"
        )));
    }
    if avail - len < FOOTER_BYTES as u64 {
        return Err(cur.fatal(format!(
            "truncated record: payload CRC has {} of {FOOTER_BYTES} bytes",
            avail - len
        )));
    }
    Ok(Some(len))
}

/// The next frame at the cursor (its payload CRC checked if `check` and
/// the reader verifies), the cursor moved past it.
#[inline(always)]
pub(super) fn frame_at<'a, F: Frames<'a>>(
    mut src: F,
    cur: &mut Cursor,
    check: bool,
) -> Result<Option<Frame<'a>>> {
    let Some(len) = frame_len(&mut src, cur)? else {
        return Ok(None);
    };
    let len = len as usize;
    let pos = cur.pos;
    let frame = match src.take(pos, HEADER_BYTES + len + FOOTER_BYTES) {
        Ok(f) => f,
        Err(e) => return Err(cur.file_fatal(e)),
    };
    let payload = &frame[HEADER_BYTES..HEADER_BYTES + len];
    let footer: [u8; 4] = frame[HEADER_BYTES + len..].try_into().expect("4 bytes");
    let loc = cur.finish(payload, footer, check)?;
    Ok(Some(Frame {
        payload,
        stored: u32::from_le_bytes(footer),
        at: pos + HEADER_BYTES as u64,
        loc,
    }))
}

/// Move past the frame at the cursor, reading its header only. False at
/// the end.
pub(super) fn skip_frame<'a, F: Frames<'a>>(mut src: F, cur: &mut Cursor) -> Result<bool> {
    let Some(len) = frame_len(&mut src, cur)? else {
        return Ok(false);
    };
    cur.advance(len as usize);
    Ok(true)
}

/// Read until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The next frame of a byte stream, read into `buf` (reused; it grows only
/// with bytes actually read, never to a size a length field claims).
pub(super) fn stream_frame<'a>(
    reader: &mut dyn Read,
    buf: &'a mut Vec<u8>,
    cur: &mut Cursor,
    check: bool,
) -> Result<Option<(&'a [u8], Location)>> {
    let mut header = [0u8; HEADER_BYTES];
    let got = read_full(reader, &mut header).map_err(|e| cur.io_fatal(e))?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_BYTES {
        return Err(cur.fatal(format!("truncated header: {got} of {HEADER_BYTES} bytes")));
    }
    let len = cur.header(&header)?;
    let want = len.saturating_add(FOOTER_BYTES as u64);
    buf.clear();
    let got = reader
        .take(want)
        .read_to_end(buf)
        .map_err(|e| cur.io_fatal(e))? as u64;
    if got < len {
        return Err(cur.fatal(format!(
            "truncated payload: header says {len} bytes, {got} left"
        )));
    }
    if got < want {
        return Err(cur.fatal(format!(
            "truncated record: payload CRC has {} of {FOOTER_BYTES} bytes",
            got - len
        )));
    }
    let len = len as usize;
    let (payload, footer) = buf.split_at(len);
    let footer: [u8; 4] = footer.try_into().expect("4 bytes");
    let loc = cur.finish(payload, footer, check)?;
    Ok(Some((payload, loc)))
}
