//! placeholder
use super::*;
/// NPY.
pub struct NpyFormat;
impl Format for NpyFormat {
    fn name(&self) -> &str {
        "npy"
    }
    fn extensions(&self) -> &[&str] {
        &["npy"]
    }
    fn open(&self, _p: &Path, _o: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Err(Error::Config("todo".into()))
    }
}
/// NPZ.
pub struct NpzFormat;
impl Format for NpzFormat {
    fn name(&self) -> &str {
        "npz"
    }
    fn extensions(&self) -> &[&str] {
        &["npz"]
    }
    fn open(&self, _p: &Path, _o: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Err(Error::Config("todo".into()))
    }
}
