//! placeholder
use super::*;
/// TFRecord.
pub struct TfRecordFormat;
impl Format for TfRecordFormat {
    fn name(&self) -> &str {
        "tfrecord"
    }
    fn extensions(&self) -> &[&str] {
        &["tfrecord", "tfrecords", "tfr"]
    }
    fn open(&self, _p: &Path, _o: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Err(Error::Config("todo".into()))
    }
}
