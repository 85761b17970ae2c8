//! placeholder
use super::*;
/// CSV.
#[derive(Default)]
pub struct CsvFormat;
impl Format for CsvFormat {
    fn name(&self) -> &str {
        "csv"
    }
    fn extensions(&self) -> &[&str] {
        &["csv"]
    }
    fn open(&self, _p: &Path, _o: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Err(Error::Config("todo".into()))
    }
}
