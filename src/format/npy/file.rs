//! Opening one `.npy` file: an uncompressed regular file read by
//! position, anything else (compressed, a FIFO, a pipe) as a stream; the
//! field is named after the file stem.

use std::io::Read;
use std::path::Path;

use super::array::{load_whole, Array, Data, StreamRows, BLOCK_BYTES};
use super::header::{header_from_file, header_from_stream};
use super::reader::{bad, NpReader};
use crate::error::Result;
use crate::format::{decompress, Compression, OpenOptions};
use crate::input::{open_input, Opened, RangeReader, Window};

/// The field name of a .npy path: the file name without `.npy` (and
/// without a compression extension).
fn stem(path: &Path, compression: Compression) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name = name.as_str();
    if compression != Compression::None {
        for ext in [".gz", ".zz", ".zlib"] {
            if let Some(s) = name.strip_suffix(ext) {
                name = s;
                break;
            }
        }
    }
    Path::new(name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_string())
}

pub(super) fn open_npy(path: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    let compression = opts
        .compression
        .unwrap_or_else(|| Compression::from_path(path));
    let name = stem(path, compression);
    let array = match (open_input(path)?, compression) {
        (Opened::Regular(file), Compression::None) => {
            if file.len() == 0 {
                return Err(bad(path, "empty file"));
            }
            let h = header_from_file(&file, 0, file.len())?.map_err(|w| bad(path, w))?;
            let avail = file.len() - h.data_offset as u64;
            if h.data_bytes > avail {
                return Err(bad(
                    path,
                    format!(
                        "offset {}: shape {:?} of {} needs {} bytes of data, the file has {avail}",
                        h.data_offset, h.shape, h.descr, h.data_bytes
                    ),
                ));
            }
            if avail > h.data_bytes {
                log::warn!(
                    "{}: {} bytes after the array data are ignored",
                    path.display(),
                    avail - h.data_bytes
                );
            }
            let start = h.data_offset as u64;
            let data = Data::File {
                file,
                start,
                window: Window::new(BLOCK_BYTES),
            };
            Array::new(name, String::new(), h, data)
        }
        (opened, c) => {
            let raw: Box<dyn Read + Send> = match opened {
                Opened::Regular(file) => {
                    let len = file.len();
                    Box::new(RangeReader::new(file, 0, len))
                }
                Opened::Stream(f) => f,
            };
            let mut src = decompress(raw, c);
            let h =
                header_from_stream(&mut src, opts.max_record_bytes).map_err(|w| bad(path, w))?;
            let data = if h.fortran && h.shape.len() >= 2 {
                Data::Owned(
                    load_whole(&mut src, &h, opts.max_record_bytes).map_err(|w| bad(path, w))?,
                )
            } else {
                Data::Stream(Box::new(StreamRows::new(src)))
            };
            Array::new(name, String::new(), h, data)
        }
    };
    NpReader::new(path, vec![array], opts, true, Vec::new())
}
