//! Decompressing a GZIP or ZLIB stream, an empty input being an empty
//! stream.

use std::io::{self, Read};

use crate::format::Compression;

/// A decompressing reader that, like [`TfRecordReader::open`](super::TfRecordReader::open) and
/// [`TfRecordReader::from_bytes`](super::TfRecordReader::from_bytes), takes an empty input for an empty stream
/// (a decoder alone would call it truncated): the decoder is made on the
/// first read, once there is a byte to decode.
pub(super) enum Decompress<R: io::BufRead> {
    Pending(R, Compression),
    Empty,
    Decoding(Box<dyn Read + Send>),
}

impl<R: io::BufRead + Send + 'static> Read for Decompress<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Decompress::Pending(r, _) = self {
            if r.fill_buf()?.is_empty() {
                *self = Decompress::Empty;
            } else {
                let Decompress::Pending(r, c) = std::mem::replace(self, Decompress::Empty) else {
                    unreachable!("matched above")
                };
                *self = Decompress::Decoding(match c {
                    Compression::Zlib => Box::new(flate2::bufread::ZlibDecoder::new(r)),
                    _ => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
                });
            }
        }
        match self {
            Decompress::Decoding(d) => d.read(buf),
            _ => Ok(0),
        }
    }
}
