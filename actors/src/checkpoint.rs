//! The checkpoint: a loader's position as plain serde values — provenance,
//! not data ([`Checkpoint`]). It holds the envelope's fields (version,
//! rank and world size, the source table, the inputs' and settings'
//! fingerprints) and, by pass, each stage's part, one file each with its
//! own checks and tests: the consumers' progress of a pass
//! (`pass_progress.rs`, [`PassProgress`]), the shuffle stage's snapshot of
//! its draw (`draw_snapshot.rs`, [`DrawSnapshot`]), the packer's partly
//! delivered documents (`doc_pieces.rs`, [`DocPieces`]). This module checks
//! what ties them together. The parts import nothing of the crate, so that
//! every stage may name them (the progress holds the shuffle stage's
//! snapshot; the stages take their resume parts from the plan, which
//! builds on the progress). Its JSON form, sealed with a checksum, and the
//! atomic save are the core's (`feedline::checkpoint`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub use feedline::checkpoint::*;
use serde::{Deserialize, Serialize};

mod doc_pieces;
mod draw_snapshot;
mod pass_progress;

pub use doc_pieces::DocPieces;
pub use draw_snapshot::{ChunkRef, DrawSnapshot};
pub use pass_progress::PassProgress;

/// A loader's position: the provenance of everything consumed so far,
/// enough to go on from exactly there. See the module doc.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version ([`CHECKPOINT_VERSION`]).
    pub version: u32,
    /// How many batches of this run the checkpoint covers.
    pub batches: u64,
    /// The first pass not complete (= the number of passes when all are).
    pub pass: u64,
    /// The rank that took it and the world size then.
    pub rank: u32,
    /// The world size.
    pub world_size: u32,
    /// True when taken in deterministic mode.
    pub deterministic: bool,
    /// Source names; references name a source by its index here.
    pub sources: Vec<String>,
    /// The inputs' fingerprint.
    pub inputs: InputFingerprint,
    /// The order-fixing settings.
    pub settings: SettingsFingerprint,
    /// What was consumed of the passes from the last complete one on, by pass.
    pub passes: Vec<PassProgress>,
}

impl Checkpoint {
    /// The JSON form: the checkpoint's fields, then `"checksum"`, the
    /// SHA-256 of the JSON of the fields before it (the canonical form:
    /// what [`from_json`](Self::from_json) writes again from the parsed
    /// fields), so that an edit by hand or damage is refused on load
    /// ([`seal`]).
    pub fn to_json(&self) -> String {
        seal(&serde_json::to_string(self).expect("a checkpoint is plain data"))
    }

    /// Parse the JSON form and check it: its version, its content checksum
    /// ([`unseal`]: a version-1 checkpoint, from before checksums, is read
    /// with a warning), and every field alone and beside the fields it must
    /// agree with ([`validate`](Self::validate)); `path` names the origin in
    /// errors.
    pub fn from_json(text: &str, path: &Path) -> CheckpointResult<Self> {
        let cp: Checkpoint = unseal(text, path)?;
        cp.validate()?;
        Ok(cp)
    }

    /// Check every field alone and against the fields it must agree with —
    /// the version; rank and world size; the source table (no repeat, every
    /// reference within it); `deterministic` against the settings'; each
    /// pass given once, complete exactly when before `pass` (the first pass
    /// not complete), the last complete one just before it; each pass's
    /// batch numbers and record ranges sorted and not overlapping, as many
    /// numbers as `batches`, records only where batches were taken; a
    /// snapshot of the draw of that pass, before a batch all of whose
    /// predecessors were taken, whose pool adds up (slots, free slots, rows,
    /// capacities, counts) — and an error naming the field when one does
    /// not. What needs the settings, the pass plan or the files' record
    /// counts is checked where those are known (the resume plan).
    pub fn validate(&self) -> CheckpointResult<()> {
        let bad = |field: String, what: String| Err(CheckpointError::Invalid { field, what });
        if !(OLDEST_CHECKPOINT_VERSION..=CHECKPOINT_VERSION).contains(&self.version) {
            return bad(
                "version".into(),
                format!(
                    "is {}, this build reads versions {OLDEST_CHECKPOINT_VERSION} to {CHECKPOINT_VERSION}",
                    self.version
                ),
            );
        }
        if self.world_size == 0 {
            return bad("world_size".into(), "is 0".into());
        }
        if self.rank >= self.world_size {
            return bad(
                "rank".into(),
                format!(
                    "is {}, not below `world_size` {}",
                    self.rank, self.world_size
                ),
            );
        }
        let mut names = HashMap::new();
        for (i, name) in self.sources.iter().enumerate() {
            if let Some(j) = names.insert(name.as_str(), i) {
                return bad(
                    format!("sources[{i}]"),
                    format!("{name} is named again (first as sources[{j}])"),
                );
            }
        }
        self.check_refs()?;
        if let Some(v) = self.settings.get("deterministic") {
            let same = *v == serde_json::Value::Bool(self.deterministic)
                || *v == serde_json::Value::String(self.deterministic.to_string());
            if !same {
                return bad(
                    "deterministic".into(),
                    format!(
                        "is {}, but the checkpoint's settings say `deterministic` = {v}",
                        self.deterministic
                    ),
                );
            }
        }
        let mut seen = BTreeMap::new();
        for (i, p) in self.passes.iter().enumerate() {
            if let Some(j) = seen.insert(p.pass, i) {
                return bad(
                    format!("passes[{i}].pass"),
                    format!("pass {} is given twice (passes[{j}] too)", p.pass),
                );
            }
            if p.complete && p.pass >= self.pass {
                return bad(
                    format!("passes[{i}].complete"),
                    format!(
                        "pass {} is complete, but `pass` (the first pass not complete) is {}",
                        p.pass, self.pass
                    ),
                );
            }
            if !p.complete && p.pass < self.pass {
                return bad(
                    "pass".into(),
                    format!(
                        "is {}, but pass {} (passes[{i}]) is not complete: a pass beyond the passes run",
                        self.pass, p.pass
                    ),
                );
            }
        }
        if let Some(last) = self
            .passes
            .iter()
            .filter(|p| p.complete)
            .map(|p| p.pass)
            .max()
        {
            if last + 1 != self.pass {
                return bad(
                    "pass".into(),
                    format!(
                        "is {}, but the last complete pass is {last}: passes {} to {} were not run",
                        self.pass,
                        last + 1,
                        self.pass.saturating_sub(1)
                    ),
                );
            }
        }
        for (i, p) in self.passes.iter().enumerate() {
            p.validate(&format!("passes[{i}]"), &self.sources, self.deterministic)?;
        }
        Ok(())
    }

    fn check_refs(&self) -> CheckpointResult<()> {
        let n = self.sources.len();
        let indices =
            (self.passes.iter()).flat_map(|p| p.records.keys().chain(p.pieces.keys()).copied());
        for index in indices {
            if index as usize >= n {
                return Err(CheckpointError::BadSourceIndex { index, sources: n });
            }
        }
        Ok(())
    }

    /// The consumed records of `pass`, by source name (empty when the
    /// checkpoint holds nothing of it).
    pub fn consumed(&self, pass: u64) -> BTreeMap<&str, &RecordRanges> {
        self.passes
            .iter()
            .filter(|p| p.pass == pass)
            .flat_map(|p| p.records.iter())
            .map(|(&s, r)| (self.sources[s as usize].as_str(), r))
            .collect()
    }

    /// Write to `path` atomically: a temporary file in the same directory,
    /// fsynced, renamed over `path`, then the directory fsynced — a crash at
    /// any moment leaves the previous checkpoint or this one, never a torn file.
    /// Refused first ([`check_save_path`]): a path that exists and is not a
    /// regular file, one in a missing directory, and one of this
    /// checkpoint's own input files (each stamped input `stat`ed: a loader's
    /// `save_checkpoint` knows its inputs once for all its saves).
    pub fn save_atomic(&self, path: &Path) -> CheckpointResult<()> {
        self.save_atomic_sparing(path, &InputFiles::of_fingerprint(&self.inputs))
    }

    /// [`save_atomic`](Self::save_atomic), refusing the files `inputs` (a
    /// loader's inputs, found once) rather than this checkpoint's stamped ones.
    pub fn save_atomic_sparing(&self, path: &Path, inputs: &InputFiles) -> CheckpointResult<()> {
        save_atomic_sparing(path, self.to_json().as_bytes(), inputs)
    }

    /// Read and check the checkpoint at `path`.
    pub fn load(path: &Path) -> CheckpointResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
            path: path.into(),
            source,
        })?;
        Self::from_json(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use feedline::{Origin, SourceId};

    fn sample(pool: usize) -> Checkpoint {
        let mut table = SourceTable::default();
        let origins: Vec<Origin> = (0..pool)
            .map(|i| {
                Origin::new(
                    SourceId::intern(&format!("/data/part-{:05}.tfrecord", i % 64)),
                    (i as u64 * 7919) % 100_000,
                )
            })
            .collect();
        // The consumed records of a pass cut mid-way with a 10,000 pool:
        // every record of a file's read prefix but those still in the pool.
        let mut records: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for o in &origins {
            records
                .entry(table.index(o.source))
                .or_default()
                .push(o.record);
        }
        let records = records
            .into_iter()
            .map(|(s, held)| {
                let held: BTreeSet<u64> = held.into_iter().collect();
                let taken = (0..100_000).filter(|r| !held.contains(r));
                (s, RecordRanges::from_records(taken))
            })
            .collect();
        Checkpoint {
            version: CHECKPOINT_VERSION,
            batches: 17,
            pass: 1,
            rank: 0,
            world_size: 1,
            deterministic: true,
            sources: table.into_names(),
            inputs: InputFingerprint::default(),
            settings: SettingsFingerprint::new().with("seed", 7),
            passes: vec![PassProgress {
                pass: 1,
                complete: false,
                batches: 17,
                by_seq: true,
                seqs: RecordRanges::from_records(0..17),
                records,
                snapshot: None,
                pieces: BTreeMap::new(),
            }],
        }
    }

    #[test]
    fn json_round_trip_and_size_of_a_10000_pool() {
        let cp = sample(10_000);
        let json = cp.to_json();
        assert!(json.len() <= 1 << 20, "{} bytes", json.len());
        let back = Checkpoint::from_json(&json, Path::new("cp.json")).unwrap();
        assert_eq!(back, cp);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["batches"].as_u64(), Some(17));
    }

    /// `Checkpoint::save_atomic` (the Rust face without a loader) refuses
    /// its own stamped inputs — by path, and with a `FORMAT:` prefix taken
    /// off — and a remote one is no local file. Mutation caught:
    /// `save_atomic` with `InputFiles::new()` in place of the checkpoint's
    /// stamped files — the input is replaced by the JSON.
    #[test]
    fn a_checkpoint_is_never_saved_over_its_own_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.data"));
        for p in [&a, &b] {
            std::fs::write(p, "{\"x\": 1}\n").unwrap();
        }
        let stamp = |path: String| FileStamp {
            path,
            size: 9,
            mtime_ns: None,
            content: None,
        };
        let mut cp = sample(10);
        cp.inputs = InputFingerprint {
            files: vec![
                stamp(a.display().to_string()),
                stamp(format!("jsonl:{}", b.display())),
                stamp("s3://bucket/c.jsonl".into()),
            ],
        };
        for (p, input) in [(&a, a.display().to_string()), (&b, b.display().to_string())] {
            let e = cp.save_atomic(p).unwrap_err();
            assert!(matches!(e, CheckpointError::IsAnInput { .. }), "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("one of this loader's input files ({input})")),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(p).unwrap(), "{\"x\": 1}\n");
        }
        let other = dir.path().join("cp.json");
        cp.save_atomic(&other).unwrap();
        assert_eq!(Checkpoint::load(&other).unwrap(), cp);
    }

    #[test]
    fn save_atomic_then_load_and_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let cp = sample(50);
        cp.save_atomic(&path).unwrap();
        assert_eq!(Checkpoint::load(&path).unwrap(), cp);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let json = cp.to_json();
        std::fs::write(&path, &json[..json.len() / 2]).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("cp.json") && e.contains("torn write"), "{e}");

        std::fs::write(&path, "").unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");

        std::fs::write(&path, "{\"version\": 1, \"batches\": \"x\"}").unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("not a valid checkpoint") && e.contains("line 1"),
            "{e}"
        );

        std::fs::write(&path, json.replacen("\"version\":2", "\"version\":99", 1)).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("version 99") && e.contains("reads versions 1 to 2"),
            "{e}"
        );

        let mut bad = cp.clone();
        let ranges = bad.passes[0].records.remove(&0).unwrap();
        bad.passes[0].records.insert(1000, ranges);
        std::fs::write(&path, bad.to_json()).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("source #1000"), "{e}");

        let e = Checkpoint::load(&dir.path().join("absent.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("absent.json"), "{e}");
    }

    /// The content checksum (issue 28, item 7): any edit of a field is
    /// refused as "checkpoint modified or corrupt" — even one that keeps
    /// every field consistent —, a re-formatted file with the same content
    /// is read, a version-2 file without its checksum is refused and a
    /// version-1 file (from before checksums) is read. Mutations killed:
    /// the checksum comparison in `from_json` made always equal; the
    /// version-2-without-checksum arm made a warning.
    #[test]
    fn the_checksum_refuses_any_edit() {
        let p = Path::new("cp.json");
        let cp = sample(50);
        let json = cp.to_json();
        assert!(json.contains(",\"checksum\":\"sha256:"), "{json}");
        assert_eq!(Checkpoint::from_json(&json, p).unwrap(), cp);
        // One number changed, every field still consistent.
        let edited = json.replacen("\"batches\":17", "\"batches\":18", 1);
        assert_ne!(edited, json);
        let e = Checkpoint::from_json(&edited, p).unwrap_err().to_string();
        assert!(e.contains("cp.json: checkpoint modified or corrupt"), "{e}");
        // The same content laid out otherwise (keys sorted, indented).
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        assert_eq!(Checkpoint::from_json(&pretty, p).unwrap(), cp);
        let mut stripped = v.clone();
        stripped.as_object_mut().unwrap().remove("checksum");
        let e = Checkpoint::from_json(&stripped.to_string(), p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("checkpoint modified or corrupt")
                && e.contains("version-2 checkpoint without its content checksum"),
            "{e}"
        );
        stripped["version"] = 1.into();
        let old = Checkpoint::from_json(&stripped.to_string(), p).unwrap();
        assert_eq!(old.version, 1);
        assert_eq!(old.passes, cp.passes);
    }

    /// The draw snapshot of `draw_snapshot`'s tests (a pool that adds up).
    fn snapshot() -> DrawSnapshot {
        draw_snapshot::tests::pool()
    }

    /// Hand-edited checkpoints whose checksum was made again (or that have
    /// none): each inconsistent field is refused naming it, at once — a
    /// range to 2^64 - 1 included (no spin) — and the intact one is read.
    #[test]
    fn inconsistent_fields_are_refused_naming_them() {
        let p = Path::new("cp.json");
        let mut good = sample(20);
        good.settings = good.settings.clone().with("deterministic", true);
        good.passes[0].snapshot = Some(snapshot());
        Checkpoint::from_json(&good.to_json(), p).unwrap();
        type Edit = Box<dyn Fn(&mut Checkpoint)>;
        let snap = |f: fn(&mut DrawSnapshot)| -> Edit {
            Box::new(move |c: &mut Checkpoint| f(c.passes[0].snapshot.as_mut().unwrap()))
        };
        let cases: Vec<(Edit, &str, &str)> = vec![
            (
                Box::new(|c| c.rank = 2),
                "`rank`",
                "not below `world_size` 1",
            ),
            (Box::new(|c| c.world_size = 0), "`world_size`", "is 0"),
            (
                Box::new(|c| {
                    let again = c.sources[0].clone();
                    c.sources.push(again)
                }),
                "`sources[",
                "is named again",
            ),
            (
                Box::new(|c| c.deterministic = false),
                "`deterministic`",
                "settings say `deterministic` = true",
            ),
            (
                Box::new(|c| {
                    let again = c.passes[0].clone();
                    c.passes.push(again)
                }),
                "`passes[1].pass`",
                "given twice",
            ),
            (
                Box::new(|c| c.pass = 4),
                "`pass`",
                "a pass beyond the passes run",
            ),
            (
                Box::new(|c| {
                    c.passes[0].complete = true;
                    c.passes[0].snapshot = None;
                }),
                "`passes[0].complete`",
                "first pass not complete",
            ),
            (
                Box::new(|c| {
                    let mut done = c.passes[0].clone();
                    done.pass = 0;
                    done.complete = true;
                    done.snapshot = None;
                    c.passes.insert(0, done);
                    c.passes[1].pass = 3;
                    c.passes[1].snapshot = None;
                    c.pass = 3;
                }),
                "`pass`",
                "passes 1 to 2 were not run",
            ),
            (
                Box::new(|c| c.passes[0].seqs = RecordRanges::unchecked(vec![[0, u64::MAX]])),
                "`passes[0].seqs`",
                "numbers 18446744073709551615 batches, but `batches` is 17",
            ),
            (
                Box::new(|c| c.passes[0].seqs = RecordRanges::unchecked(vec![[0, 10], [5, 12]])),
                "`passes[0].seqs`",
                "overlaps",
            ),
            (
                Box::new(|c| {
                    c.passes[0]
                        .records
                        .insert(0, RecordRanges::unchecked(vec![[0, 10], [9, 20]]));
                }),
                "`passes[0].records.0`",
                "range #1 [9, 20) overlaps",
            ),
            (
                Box::new(|c| {
                    c.passes[0]
                        .records
                        .insert(0, RecordRanges::unchecked(vec![[7, 7]]));
                }),
                "`passes[0].records.0`",
                "empty or reversed",
            ),
            (
                Box::new(|c| {
                    c.passes[0].pieces.insert(
                        0,
                        vec![DocPieces {
                            record: 3,
                            tokens: 10,
                            delivered: RecordRanges::unchecked(vec![[4, 12]]),
                        }],
                    );
                }),
                "`passes[0].pieces.0[0]`",
                "of a document of 10 tokens",
            ),
            (
                Box::new(|c| {
                    c.passes[0].pieces.insert(
                        0,
                        vec![DocPieces {
                            record: 3,
                            tokens: 10,
                            delivered: RecordRanges::unchecked(vec![[0, 10]]),
                        }],
                    );
                }),
                "`passes[0].pieces.0[0]`",
                "belongs in `records`",
            ),
            (
                Box::new(|c| {
                    c.passes[0].pieces.insert(
                        0,
                        vec![DocPieces {
                            record: 3,
                            tokens: 10,
                            delivered: RecordRanges::unchecked(vec![[5, 2]]),
                        }],
                    );
                }),
                "`passes[0].pieces.0[0]`",
                "empty or reversed",
            ),
            (
                Box::new(|c| {
                    c.passes[0].by_seq = false;
                    c.passes[0].snapshot = None;
                }),
                "`passes[0].seqs`",
                "resumed by record",
            ),
            (
                Box::new(|c| {
                    c.passes[0].batches = 0;
                    c.passes[0].seqs = RecordRanges::default();
                    c.passes[0].snapshot = None;
                }),
                "`passes[0].records`",
                "`batches` is 0",
            ),
            (
                Box::new(|c| {
                    c.deterministic = false;
                    c.settings = c.settings.clone().with("deterministic", false);
                }),
                "`passes[0].snapshot`",
                "deterministic pass",
            ),
            (snap(|s| s.pass = 0), "`passes[0].snapshot.pass`", "is 0"),
            (snap(|s| s.seq = 0), "`passes[0].snapshot.seq`", "is 0"),
            (
                snap(|s| s.seq = 18),
                "`passes[0].snapshot.seq`",
                "batches 0 to 16 were",
            ),
            (
                snap(|s| s.row_records.pop().map(drop).unwrap()),
                "snapshot.row_records`",
                "2 records for 3 rows",
            ),
            (
                snap(|s| s.free_slots = vec![7]),
                "snapshot.free_slots[0]`",
                "slot 7 is out of range",
            ),
            (
                snap(|s| s.free_slots = vec![0]),
                "snapshot.free_slots[0]`",
                "slot 0 is in use",
            ),
            (
                snap(|s| s.free_slots = vec![1, 1]),
                "snapshot.free_slots[1]`",
                "given twice",
            ),
            (
                snap(|s| s.free_slots = vec![]),
                "snapshot.free_slots`",
                "slot 1 holds no chunk",
            ),
            (
                snap(|s| s.row_slots[2] = 1),
                "snapshot.row_slots[2]`",
                "slot 1 is free",
            ),
            (
                snap(|s| s.row_slots[2] = 9),
                "snapshot.row_slots[2]`",
                "slot 9 is out of range",
            ),
            (
                snap(|s| s.row_records[2] = 9),
                "snapshot.row_records[2]`",
                "before the first record (10)",
            ),
            (
                snap(|s| s.row_records[1] = 1),
                "snapshot.row_records`",
                "record 1 is in slot 0 twice",
            ),
            (
                snap(|s| {
                    s.row_slots = vec![0, 0, 0, 0, 0, 2];
                    s.row_records = vec![0, 1, 2, 3, 4, 11];
                    s.capacities[0] = 8;
                }),
                "snapshot.row_slots`",
                "5 rows name slot 0, whose chunk has 4 rows",
            ),
            (
                snap(|s| {
                    s.row_slots = vec![0, 0, 0];
                    s.row_records = vec![1, 2, 3];
                }),
                "snapshot.chunks[2]`",
                "holds a chunk but no row",
            ),
            (
                snap(|s| s.chunks[2].as_mut().unwrap().rows = 0),
                "snapshot.chunks[2].rows`",
                "is 0",
            ),
            (
                snap(|s| s.chunks[2].as_mut().unwrap().bytes = u64::MAX),
                "snapshot.chunks[2].bytes`",
                "overflow",
            ),
            (
                snap(|s| s.capacities = [2, 4, 4]),
                "snapshot.capacities[0]`",
                "less than the 3 entries",
            ),
            (
                snap(|s| s.capacities = [8, 1, 4]),
                "snapshot.capacities[1]`",
                "less than the 3 entries",
            ),
            (
                snap(|s| s.pass_records = 9),
                "snapshot.pass_records`",
                "rows do not add up",
            ),
            (
                snap(|s| s.batcher_rows = [7, 6]),
                "snapshot.batcher_rows`",
                "7 rows into the batcher but 6",
            ),
        ];
        for (k, (edit, field, what)) in cases.into_iter().enumerate() {
            let mut c = good.clone();
            edit(&mut c);
            let e = match Checkpoint::from_json(&c.to_json(), p) {
                Ok(_) => panic!("case {k} ({field}): read"),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains("checkpoint field `") && e.contains(field) && e.contains(what),
                "case {k}: {e}"
            );
        }
    }

    /// Checkpoints are written atomically (issue 28, item 15), told by
    /// events, not by a kill landing in a window: at the moment between
    /// the write and the rename, the path still holds the previous
    /// checkpoint whole; after the save, the file at the path is the very
    /// file written (its inode: renamed, not copied), and a reader that
    /// opened the previous checkpoint before the save still reads it whole;
    /// a crash between the write and the rename leaves the previous one
    /// and no temporary file. Mutation killed: the rename replaced by a
    /// copy and a remove (`std::fs::copy(&tmp, path)` + `remove_file`).
    #[cfg(unix)]
    #[test]
    fn saves_are_atomic_by_rename() {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let (a, mut b) = (sample(30), sample(40));
        b.batches = 99;
        a.save_atomic(&path).unwrap();
        let mut reader = std::fs::File::open(&path).unwrap();
        let mut written = None;
        save_atomic_with(&path, b.to_json().as_bytes(), |tmp| {
            assert_eq!(Checkpoint::load(&path).unwrap(), a);
            assert_eq!(std::fs::read_to_string(tmp).unwrap(), b.to_json());
            written = Some(std::fs::metadata(tmp).unwrap().ino());
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), written.unwrap());
        assert_eq!(Checkpoint::load(&path).unwrap(), b);
        let mut before = String::new();
        reader.read_to_string(&mut before).unwrap();
        assert_eq!(before, a.to_json(), "the reader of the previous file");
        let e = save_atomic_with(&path, a.to_json().as_bytes(), |_| {
            Err(std::io::Error::other(
                "killed between the write and the rename",
            ))
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("killed between"), "{e}");
        assert_eq!(Checkpoint::load(&path).unwrap(), b);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
