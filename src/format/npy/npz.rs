//! Opening an `.npz` archive: its `.npy` members (stored ones read by
//! position, deflated ones as streams), one field per member, all with the
//! same number of rows, their CRC-32 checks queued when asked for.

use std::io::{self, Read};
use std::path::Path;

use super::array::{load_whole, Array, Data, StreamRows, BLOCK_BYTES};
use super::crc::EntryCheck;
use super::header::{header_from_file, header_from_stream};
use super::reader::{bad, NpReader};
use crate::error::Result;
use crate::format::{Compression, OpenOptions};
use crate::input::{open_input, Opened, RangeReader, Window};

pub(super) fn open_npz(path: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    if let Some(c) = opts.compression.filter(|c| *c != Compression::None) {
        return Err(bad(
            path,
            format!(
                "an .npz archive is not read through {c:?} compression (its entries carry \
                 their own); decompress the file first"
            ),
        ));
    }
    let file = match open_input(path)? {
        Opened::Regular(file) => file,
        Opened::Stream(_) => {
            return Err(bad(
                path,
                "not a regular file (a FIFO, a pipe, a device or a remote object): an .npz \
                 archive is read by position (its directory is at its end); copy it to a file first",
            ))
        }
    };
    if file.len() == 0 {
        return Err(bad(path, "empty file"));
    }
    let mut entries = Vec::new();
    {
        let mut zip = zip::ZipArchive::new(RangeReader::new(file.clone(), 0, file.len()))
            .map_err(|e| bad(path, format!("not a readable zip archive: {e}")))?;
        for i in 0..zip.len() {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| bad(path, format!("zip entry {i}: {e}")))?;
            if f.is_dir() {
                continue;
            }
            entries.push((
                f.name().to_string(),
                f.compression(),
                f.encrypted(),
                f.data_start(),
                f.compressed_size(),
                f.size(),
                f.crc32(),
            ));
        }
    }
    let mut arrays: Vec<Array> = Vec::new();
    let mut checks = Vec::new();
    for (ename, method, encrypted, start, csize, size, crc) in entries {
        let Some(field) = ename.strip_suffix(".npy") else {
            log::warn!(
                "{}: entry `{ename}` is not a .npy array; skipped",
                path.display()
            );
            continue;
        };
        let label = format!("entry `{ename}`: ");
        let ebad = |w: String| bad(path, format!("{label}{w}"));
        if encrypted {
            return Err(ebad("encrypted entries are not supported".into()));
        }
        if arrays.iter().any(|a| a.name == field) {
            return Err(ebad(format!("a second array named `{field}`")));
        }
        let end = start
            .checked_add(csize)
            .filter(|&e| e <= file.len())
            .ok_or_else(|| {
                ebad(format!(
                    "offset {start}: {csize} bytes of entry data run past the end of the file ({} bytes)",
                    file.len()
                ))
            })?;
        let deflated = match method {
            zip::CompressionMethod::Stored => false,
            zip::CompressionMethod::Deflated => true,
            other => {
                return Err(ebad(format!(
                    "compression method {other:?} is not supported (stored or deflated only)"
                )))
            }
        };
        if opts.verify_checksums {
            checks.push(EntryCheck {
                label: label.clone(),
                file: file.clone(),
                start,
                end,
                deflated,
                size: if deflated { size } else { csize },
                expected: crc,
            });
        }
        let array = if deflated {
            let raw: Box<dyn Read + Send> = Box::new(RangeReader::new(file.clone(), start, end));
            let raw = io::BufReader::new(raw);
            let mut src: Box<dyn Read + Send> = Box::new(flate2::bufread::DeflateDecoder::new(raw));
            let h = header_from_stream(&mut src, opts.max_record_bytes).map_err(ebad)?;
            let data = if h.fortran && h.shape.len() >= 2 {
                Data::Owned(load_whole(&mut src, &h, opts.max_record_bytes).map_err(ebad)?)
            } else {
                Data::Stream(Box::new(StreamRows::new(src)))
            };
            Array::new(field.to_string(), label.clone(), h, data)
        } else {
            let h = header_from_file(&file, start, csize)?.map_err(ebad)?;
            let avail = csize - h.data_offset as u64;
            if h.data_bytes > avail {
                return Err(ebad(format!(
                    "offset {}: shape {:?} of {} needs {} bytes of data, the entry has {avail}",
                    start + h.data_offset as u64,
                    h.shape,
                    h.descr,
                    h.data_bytes
                )));
            }
            let data = Data::File {
                file: file.clone(),
                start: start + h.data_offset as u64,
                window: Window::new(BLOCK_BYTES),
            };
            Array::new(field.to_string(), label.clone(), h, data)
        };
        arrays.push(array);
    }
    if arrays.is_empty() {
        return Err(bad(path, "no .npy arrays in the archive"));
    }
    let rows = arrays[0].h.rows;
    if arrays.iter().any(|a| a.h.rows != rows) {
        let list: Vec<String> = arrays
            .iter()
            .map(|a| format!("`{}` has {}", a.name, a.h.rows))
            .collect();
        return Err(bad(
            path,
            format!(
                "the arrays have different numbers of rows: {}",
                list.join(", ")
            ),
        ));
    }
    NpReader::new(path, arrays, opts, false, checks)
}
