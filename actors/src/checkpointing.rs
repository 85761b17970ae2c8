//! A pipeline's settings made into what checkpoints need (issue 17): the
//! identity a checkpoint records ([`CheckpointBase::of`]: the inputs
//! stamped, the order-fixing settings) and the resume point of one or
//! several checkpoints under these settings ([`ResumeFrom::new`]). The
//! checkpoint and resume types themselves are in `resume`, which knows
//! nothing of the settings.

use feedline::checkpoint::{Checkpoint, FileStamp, InputFingerprint, SettingsFingerprint};
use feedline::plan::expand_inputs;

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::resume::{CheckpointBase, ResumeFrom};

impl CheckpointBase {
    /// The identity of a pipeline of these settings: every input file
    /// stamped (path, size, modification time; a source that is no file,
    /// such as `gen:NAME`, by its name alone) and the settings that fix
    /// the order of the batches.
    pub fn of(config: &PipelineConfig) -> Result<Self, PipelineError> {
        let mut files = Vec::new();
        let lists = std::iter::once(&config.files).chain(config.sets.iter().map(|s| &s.files));
        for list in lists.filter(|l| !l.is_empty()) {
            for spec in expand_inputs(list)? {
                let bare = match config.registry.resolve(&spec, config.format.as_deref()) {
                    Ok((_, bare, _)) => bare,
                    Err(_) => std::path::PathBuf::from(&spec),
                };
                let stamp = match FileStamp::of(&bare.to_string_lossy()) {
                    Ok(s) => FileStamp { path: spec, ..s },
                    Err(_) => FileStamp {
                        path: spec,
                        size: 0,
                        mtime_ns: None,
                    },
                };
                files.push(stamp);
            }
        }
        let t = &config.transforms;
        let sets: Vec<String> = (config.sets.iter())
            .map(|s| format!("{}={:?}*{}", s.name, s.files, s.weight))
            .collect();
        let settings = SettingsFingerprint::new()
            .with("seed", config.seed)
            .with("shuffle", config.shuffle)
            .with("min_pool", format!("{:?}", config.min_pool))
            .with("shuffle_bytes", config.shuffle_bytes)
            .with("batch", format!("{:?}", config.batch))
            .with("drop_last", config.drop_last)
            .with("shuffle_files", config.shuffle_files)
            .with("deterministic", config.deterministic)
            .with("chunk_records", config.chunk_records)
            .with("chunk_bytes", config.chunk_bytes)
            .with("shard_by", format!("{:?}", config.shard_by))
            .with("equalize", format!("{:?}", config.equalize))
            .with("format", format!("{:?}", config.format))
            .with("sets", format!("[{}]", sets.join(", ")))
            .with(
                "transforms",
                format!(
                    "records: {}, instance: {}, batch: {}",
                    t.records.is_some(),
                    t.instance.is_some(),
                    t.batch.is_some()
                ),
            );
        Ok(CheckpointBase {
            inputs: InputFingerprint { files },
            settings,
            rank: config.shard.rank as u32,
            world_size: config.shard.world_size as u32,
            deterministic: config.deterministic,
        })
    }
}

impl ResumeFrom {
    /// How `config` goes on from `checkpoints` — one, or one per rank of
    /// the old job (merged: an elastic resume under `config`'s shard).
    /// Every checkpoint must match `config`'s inputs and order-fixing
    /// settings; the error says what changed.
    pub fn new(checkpoints: &[Checkpoint], config: &PipelineConfig) -> Result<Self, PipelineError> {
        if config.push.is_some() {
            return Err(PipelineError::Config(
                "push mode cannot resume from a checkpoint: its data is what is pushed".into(),
            ));
        }
        let now = CheckpointBase::of(config)?;
        ResumeFrom::plan(checkpoints, &now, config.passes, config.equalize)
    }
}
