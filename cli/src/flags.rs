//! The command's spelling of the settings: each as its flag (`--min-pool`,
//! `--min-pool 3000`), so that a refusal of the settings' check reads in
//! the command's own words. Its own module: the error printer and the
//! flags' translation both use it.

use feedline_actors::{Setting, SettingError, Spelling, Value};

/// The command's spelling of the settings: its flags (`--min-pool`,
/// `--min-pool 3000`); a setting with no flag by its key.
pub struct Flags;

impl Flags {
    /// The flag of `setting`, if the command has one.
    fn flag(setting: Setting) -> Option<&'static str> {
        use Setting as S;
        Some(match setting {
            S::Files => "FILES",
            S::FileSet => "--set",
            S::Schema => "--schema",
            S::Readers => "--readers",
            S::ChunkRecords => "--chunk-records",
            S::ChunkBytes => "--chunk-mib",
            S::Shuffle => "--shuffle",
            S::MinPool => "--min-pool",
            S::ShuffleBytes => "--shuffle-mib",
            S::Passes => "--passes",
            S::Deterministic => "--deterministic",
            S::ShuffleMode => "--shuffle-mode",
            S::IndexDir => "--index-dir",
            S::Shard => "--rank/--world-size",
            S::Rank => "--rank",
            S::WorldSize => "--world-size",
            S::Equalize => "--equalize",
            S::Batch => "--batch",
            S::DropLast => "--drop-last",
            S::BatchesInFlight => "--batches-in-flight",
            S::Pack => "--pack",
            S::PackPolicy => "--pack-policy",
            S::PackWindow => "--pack-window",
            S::LongDocs => "--long-docs",
            S::PackField => "--pack-field",
            S::Transform => "--transform",
            S::MaxPixels => "--max-pixels",
            S::Tokenizer => "--tokenizer",
            S::TextField => "--text-field",
            S::AddEos => "--add-eos",
            S::AddBos => "--add-bos",
            S::Workers => "--workers",
            S::Devices => "--devices",
            S::Capacity => "--capacity",
            S::OnError => "--on-error",
            S::MaxBad => "--max-bad",
            S::MetricsAddr => "--metrics-addr",
            S::Autotune => "--autotune",
            S::Cpus => "--cpus",
            S::MemoryBudget => "--memory-budget",
            _ => return None,
        })
    }

    /// `e` as the command says it.
    pub fn say(e: &SettingError) -> String {
        format!("invalid configuration: {}", e.spelled(&Flags))
    }
}

impl Spelling for Flags {
    fn name(&self, setting: Setting) -> String {
        Flags::flag(setting).map_or_else(|| setting.key().to_string(), String::from)
    }

    fn given(&self, setting: Setting, value: &Value) -> String {
        let (Value::Number(v) | Value::Text(v)) = value;
        // The byte bounds are given in MiB.
        let v = match (setting, v.parse::<u64>()) {
            (Setting::ShuffleBytes | Setting::ChunkBytes, Ok(b)) if b % (1 << 20) == 0 => {
                (b >> 20).to_string()
            }
            // A size: in MiB where it is whole MiB.
            (Setting::MemoryBudget, Ok(b)) if b > 0 && b % (1 << 20) == 0 => {
                format!("{}MiB", b >> 20)
            }
            _ => v.clone(),
        };
        match Flags::flag(setting) {
            Some(flag) => format!("{flag} {v}"),
            None => format!("{} {v}", setting.key()),
        }
    }
}
