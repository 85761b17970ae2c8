//! placeholder
use super::*;
/// JSONL.
pub struct JsonlFormat;
impl Format for JsonlFormat {
    fn name(&self) -> &str {
        "jsonl"
    }
    fn extensions(&self) -> &[&str] {
        &["jsonl", "ndjson"]
    }
    fn open(&self, _p: &Path, _o: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Err(Error::Config("todo".into()))
    }
}
