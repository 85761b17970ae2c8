//! The CRC-32 check of an npz entry ([`EntryCheck`]), over the whole entry
//! (a deflated one decompressed in bounded memory), made before any row of
//! the archive is read.

use std::io::{self, Read};
use std::sync::Arc;

use super::array::BLOCK_BYTES;
use crate::error::Result;
use crate::input::{InputFile, RangeReader};

/// A zip entry's CRC-32, checked over the whole entry before any of its
/// rows is read: it covers the entry as a whole, so no row of a corrupt
/// entry can be told apart from the good ones.
pub(super) struct EntryCheck {
    /// `entry `x.npy`: `, for messages.
    pub(super) label: String,
    pub(super) file: Arc<InputFile>,
    /// The entry's (compressed) data in the file.
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) deflated: bool,
    /// Its uncompressed size, as the archive declares it.
    pub(super) size: u64,
    /// Its CRC-32, as the archive declares it.
    pub(super) expected: u32,
}

impl EntryCheck {
    /// `Ok(None)` if the entry's CRC-32 holds, `Ok(Some(what))` if it
    /// does not (or a deflated entry does not decompress to its declared
    /// size); `Err` if the file cannot be read.
    pub(super) fn verify(&self) -> Result<Option<String>> {
        let computed = if self.deflated {
            let raw = io::BufReader::new(RangeReader::new(self.file.clone(), self.start, self.end));
            let mut dec = flate2::CrcReader::new(flate2::bufread::DeflateDecoder::new(raw));
            let n = match io::copy(
                &mut (&mut dec).take(self.size.saturating_add(1)),
                &mut io::sink(),
            ) {
                Ok(n) => n,
                Err(e) => return Ok(Some(format!("cannot be decompressed: {e}"))),
            };
            if n != self.size {
                return Ok(Some(format!(
                    "decompresses to {}{n} bytes, the archive declares {}",
                    if n > self.size { "more than " } else { "" },
                    self.size
                )));
            }
            dec.crc().sum()
        } else {
            let mut crc = flate2::Crc::new();
            let mut buf = vec![0u8; BLOCK_BYTES];
            let mut at = self.start;
            while at < self.end {
                let n = ((self.end - at) as usize).min(buf.len());
                self.file.read_at_init(at, &mut buf[..n])?;
                crc.update(&buf[..n]);
                at += n as u64;
            }
            crc.sum()
        };
        Ok((computed != self.expected).then(|| {
            format!(
                "CRC-32 mismatch (stored 0x{:08x}, computed 0x{computed:08x})",
                self.expected,
            )
        }))
    }
}
