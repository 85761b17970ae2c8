//! The pass plan: which files a pass reads, in which order, and which part of
//! them belongs to this rank.
//!
//! - [`expand_inputs`] turns what a user typed (paths, remote URLs, glob
//!   patterns, brace ranges, list files, `FORMAT:` prefixes) into the sorted
//!   list of file specs.
//! - [`Shard`] is this process's `rank` among `world_size` (from `RANK` /
//!   `WORLD_SIZE`).
//! - [`PassPlan`] orders the files of pass `p` by a permutation drawn from
//!   `(seed, p)` and keeps this rank's shard: whole files ([`ShardBy::File`])
//!   or every `world_size`-th record of every file ([`ShardBy::Record`]).
//!   The shards of all ranks partition the pass's records.
//! - [`equalized_counts`] says how many instances each rank keeps, drops or
//!   pads so that all ranks run the same number of batches.
//!
//! Randomness is portable: every permutation comes from a `ChaCha8Rng` keyed
//! by `(seed, domain, pass)` ([`pass_rng`]) and an index sampler of our own
//! ([`uniform_index`]), so the same seed gives the same order on every
//! machine and with every version of `rand`.
//!
//! ```
//! use feedline::plan::{PassPlan, Shard, ShardBy};
//! let files: Vec<String> = (0..5).map(|i| format!("part-{i}.tfrecord")).collect();
//! let plan = PassPlan::new(files).seed(7).shard(Shard::new(1, 2).unwrap());
//! let tasks = plan.tasks(0);
//! assert_eq!(tasks.len(), 2); // rank 1 of 2 takes positions 1 and 3 of the order
//! assert_eq!(plan.effective_shard_by(), ShardBy::File);
//! assert_ne!(plan.tasks(0), plan.tasks(1)); // another pass, another order (most likely)
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::RngCore;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::chunk::Chunk;
use crate::error::{Error, Result};

/// RNG domain of the file order of a pass ([`PassPlan::tasks`]).
pub const DOMAIN_FILE_ORDER: u64 = 1;
/// RNG domain of the shuffle buffer ([`crate::shuffle::ShuffleBuffer`]).
pub const DOMAIN_SHUFFLE_BUFFER: u64 = 2;
/// RNG domain of the `shuffle` reader decorator.
pub const DOMAIN_SHUFFLE_READER: u64 = 3;

/// The generator for `(seed, domain, pass)`: a `ChaCha8Rng` whose 32-byte key
/// is `seed`, `domain` and `pass` in little-endian followed by 8 zero bytes.
/// Different domains or passes give independent streams.
pub fn pass_rng(seed: u64, domain: u64, pass: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&domain.to_le_bytes());
    key[16..24].copy_from_slice(&pass.to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

/// A uniform index in `0..n` (`n > 0`), by Lemire's multiply-and-reject
/// method on 64-bit draws: unbiased, and fixed here so that orders do not
/// change with the `rand` version. Returns 0 for `n == 0`.
pub fn uniform_index<R: RngCore + ?Sized>(rng: &mut R, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let n = n as u64;
    let mut m = u128::from(rng.next_u64()) * u128::from(n);
    let mut low = m as u64;
    if low < n {
        let threshold = n.wrapping_neg() % n;
        while low < threshold {
            m = u128::from(rng.next_u64()) * u128::from(n);
            low = m as u64;
        }
    }
    (m >> 64) as usize
}

/// A uniformly random permutation of `0..n` (Fisher–Yates with [`uniform_index`]).
pub fn permutation<R: RngCore + ?Sized>(rng: &mut R, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = uniform_index(rng, i + 1);
        p.swap(i, j);
    }
    p
}

/// Nested list files deeper than this are an error (most likely a cycle).
const MAX_LIST_DEPTH: usize = 16;

/// Expand what the user gave into file specs, in order.
///
/// Each input is one of:
/// - a list file: `@train.list`, or any unprefixed path ending in `.list`:
///   one input per line (globs, prefixes and nested lists allowed), blank
///   lines and lines starting with `#` ignored, relative paths taken
///   relative to the list file's folder;
/// - a glob pattern (`*`, `?`, `[…]`): its matching files, sorted; a pattern
///   that matches no file is an error (directories are skipped); on an object
///   store (`s3://b/train/*.tfrecord`, `gs://…`) the pattern is matched
///   against a listing of the keys under its first wildcard's folder;
/// - a dataset directory another tool wrote: a Hugging Face
///   `save_to_disk` directory (its Arrow files, in its `state.json`'s
///   order), or a Mosaic Streaming MDS directory (its shards, in its
///   `index.json`'s order, as `mds:DIR/shard.00000.mds`); a `DatasetDict`
///   directory is an error naming its splits. `arrow:DIR` and `mds:DIR`
///   name one kind;
/// - a path or a remote URL (`s3://`, `gs://`, `http(s)://`, see
///   [`crate::remote`]), kept as given (its existence is checked when it is
///   opened).
///
/// Brace ranges and lists as WebDataset writes them expand first, for local
/// paths and URLs alike: `shard-{000000..000099}.tar` is 100 paths (zero
/// padded to the width written), `{train,val}/*.tar` two patterns; an input
/// that is an existing file is never expanded.
///
/// Any of them may carry a `FORMAT:` prefix (`tfrecord:shard-*.dat`): the
/// prefix is kept on every resulting spec and only the part after it is
/// globbed. A prefix is a run of ASCII letters, digits, `_` or `-` before the
/// first `:`, and only counts when the whole input is not an existing path.
///
/// The same file named twice — by a glob and a path, two globs, a list and
/// an argument, with or without a prefix, by different relative paths,
/// through a symbolic link (paths are compared canonicalized) or as a hard
/// link (files are compared by device and inode) — is an error naming the
/// file and both inputs. Reading it twice per pass would
/// train on its records twice as often as on the others' with no sign of
/// it, and dropping the second mention would silently undo an intent to
/// repeat it; a deliberate weighting is a file set with its own weight.
/// Specs that are not existing files (a generator, `gen:NAME`) are compared
/// as written.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # for n in ["b.npy", "a.npy"] { std::fs::write(dir.path().join(n), b"").unwrap(); }
/// # let d = dir.path().to_str().unwrap();
/// use feedline::plan::expand_inputs;
/// let files = expand_inputs(&[format!("npy:{d}/*.npy")]).unwrap();
/// assert_eq!(files, vec![format!("npy:{d}/a.npy"), format!("npy:{d}/b.npy")]);
/// assert!(expand_inputs(&[format!("{d}/*.nothing")]).is_err());
/// ```
pub fn expand_inputs(inputs: &[String]) -> Result<Vec<String>> {
    if inputs.is_empty() {
        return Err(Error::Config("no input files given".into()));
    }
    let mut out = Vec::new();
    for input in inputs {
        let from = out.len();
        expand_one(input, None, 0, &mut out)?;
        for (_, by) in &mut out[from..] {
            if by.is_empty() {
                *by = format!("`{input}`");
            }
        }
    }
    let mut seen: HashMap<PathBuf, usize> = HashMap::with_capacity(out.len());
    // The same file under two names (a hard link, a bind mount): by device
    // and inode, with the path it was first seen as.
    let mut seen_ids: HashMap<(u64, u64), (PathBuf, usize)> = HashMap::with_capacity(out.len());
    let twice = |key: &Path, j: usize, by: &str, also: Option<&Path>| {
        Error::Config(format!(
            "{}{} is given twice, by {} and by {}: each pass would read its records twice; \
             give it once (a file set with its own weight repeats files on purpose)",
            key.display(),
            also.map(|p| format!(" (the same file as {}: a hard link)", p.display()))
                .unwrap_or_default(),
            out[j].1,
            by
        ))
    };
    for (i, (spec, by)) in out.iter().enumerate() {
        let bare = split_prefix(spec).1;
        let key = if crate::remote::is_remote(bare) {
            PathBuf::from(bare)
        } else {
            std::fs::canonicalize(bare).unwrap_or_else(|_| PathBuf::from(spec))
        };
        if let Some(&j) = seen.get(&key) {
            return Err(twice(&key, j, by, None));
        }
        if let Some(id) = file_id(&key) {
            if let Some((first, j)) = seen_ids.get(&id) {
                return Err(twice(first, *j, by, Some(&key)));
            }
            seen_ids.insert(id, (key.clone(), i));
        }
        seen.insert(key, i);
    }
    Ok(out.into_iter().map(|(spec, _)| spec).collect())
}

/// The (device, inode) of an existing local file: one file under two
/// names (hard links) has one. `None` for what is not a local file (a
/// remote URL, a generator's name, a missing path) or off Unix.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if crate::remote::is_remote(&path.to_string_lossy()) {
            return None;
        }
        let m = std::fs::metadata(path).ok()?;
        Some((m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Split `FORMAT:rest` into `(Some("FORMAT"), "rest")`.
pub(crate) fn split_prefix(spec: &str) -> (Option<&str>, &str) {
    if crate::remote::is_remote(spec) || Path::new(spec).exists() {
        return (None, spec);
    }
    match spec.split_once(':') {
        Some((p, rest))
            if !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            (Some(p), rest)
        }
        _ => (None, spec),
    }
}

fn has_glob_chars(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn with_prefix(prefix: Option<&str>, path: &str) -> String {
    match prefix {
        Some(p) => format!("{p}:{path}"),
        None => path.to_string(),
    }
}

/// Expand one input into `out` as (spec, the input that named it — empty
/// for a top-level input, filled in by the caller); `base` is the folder of
/// the list file it came from.
fn expand_one(
    input: &str,
    base: Option<&Path>,
    depth: usize,
    out: &mut Vec<(String, String)>,
) -> Result<()> {
    let input = input.trim();
    if input.is_empty() {
        return Err(Error::Config("an input path is empty".into()));
    }
    let relative = |p: &str| -> PathBuf {
        match base {
            _ if crate::remote::is_remote(p) => PathBuf::from(p),
            Some(b) if crate::remote::is_remote(&b.to_string_lossy()) => {
                PathBuf::from(format!("{}/{p}", b.to_string_lossy().trim_end_matches('/')))
            }
            Some(b) if Path::new(p).is_relative() => b.join(p),
            _ => PathBuf::from(p),
        }
    };
    if let Some(list) = input.strip_prefix('@') {
        return expand_list(&relative(list), depth, out);
    }
    let (prefix, rest) = split_prefix(input);
    if prefix.is_none() && rest.ends_with(".list") {
        return expand_list(&relative(rest), depth, out);
    }
    let literal = relative(rest);
    if rest.contains('{') && !literal.exists() {
        let alternatives = expand_braces(rest)
            .map_err(|what| Error::Config(format!("input `{input}`: {what}")))?;
        for alt in alternatives {
            expand_one(&with_prefix(prefix, &alt), base, depth, out)?;
        }
        return Ok(());
    }
    let literal_text = literal.to_string_lossy();
    if crate::remote::is_remote(&literal_text) {
        #[cfg(not(feature = "remote"))]
        return Err(Error::not_compiled_in(input, crate::Feature::Remote));
        #[cfg(feature = "remote")]
        {
            if !has_glob_chars(&literal_text) {
                out.push((with_prefix(prefix, &literal_text), String::new()));
                return Ok(());
            }
            let found = crate::remote::expand_glob(&literal_text)
                .map_err(|e| Error::Config(format!("input `{input}`: {e}")))?;
            out.extend(
                found
                    .iter()
                    .map(|p| (with_prefix(prefix, p), String::new())),
            );
            return Ok(());
        }
    }
    if literal.is_dir() {
        if let Some(files) =
            crate::dataset_dir::expand_dir(&literal, prefix).map_err(|e| match e {
                Error::Config(what) => Error::Config(format!("input `{input}`: {what}")),
                other => other,
            })?
        {
            out.extend(files.into_iter().map(|f| (f, String::new())));
            return Ok(());
        }
    }
    if literal.exists() || !has_glob_chars(rest) {
        out.push((
            with_prefix(prefix, &literal.to_string_lossy()),
            String::new(),
        ));
        return Ok(());
    }
    // A glob: escape the list file's folder, keep the pattern as written.
    let pattern = match base {
        Some(b) if Path::new(rest).is_relative() => {
            let escaped = glob::Pattern::escape(&b.to_string_lossy());
            format!("{}/{}", escaped.trim_end_matches('/'), rest)
        }
        _ => rest.to_string(),
    };
    let paths = glob::glob(&pattern).map_err(|e| {
        Error::Config(format!(
            "input `{input}`: bad glob pattern at character {}: {}",
            e.pos, e.msg
        ))
    })?;
    let mut found = Vec::new();
    for p in paths {
        let p = p.map_err(|e| {
            let path = e.path().to_path_buf();
            Error::io(path, std::io::Error::from(e))
        })?;
        if p.is_dir() {
            continue;
        }
        found.push(p.to_string_lossy().into_owned());
    }
    if found.is_empty() {
        return Err(Error::Config(format!(
            "input `{input}`: the pattern `{pattern}` matches no file"
        )));
    }
    found.sort();
    out.extend(
        found
            .iter()
            .map(|p| (with_prefix(prefix, p), String::new())),
    );
    Ok(())
}

fn expand_list(path: &Path, depth: usize, out: &mut Vec<(String, String)>) -> Result<()> {
    if depth >= MAX_LIST_DEPTH {
        return Err(Error::Config(format!(
            "{}: list files nest more than {MAX_LIST_DEPTH} deep (does a list include itself?)",
            path.display()
        )));
    }
    let text = read_list(path)?;
    let base = match path.to_str().filter(|p| crate::remote::is_remote(p)) {
        Some(url) => PathBuf::from(url.rsplit_once('/').map_or(url, |(dir, _)| dir)),
        None => path.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let before = out.len();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let from = out.len();
        expand_one(line, Some(&base), depth + 1, out).map_err(|e| match e {
            Error::Config(what) => {
                Error::Config(format!("{}: line {}: {what}", path.display(), lineno + 1))
            }
            other => other,
        })?;
        for (_, by) in &mut out[from..] {
            if by.is_empty() {
                *by = format!("`{line}` ({} line {})", path.display(), lineno + 1);
            }
        }
    }
    if out.len() == before {
        return Err(Error::Config(format!(
            "{}: the list file names no input",
            path.display()
        )));
    }
    Ok(())
}

/// The text of a list file, local or remote.
fn read_list(path: &Path) -> Result<String> {
    if crate::input::remote_url(path).is_none() {
        return std::fs::read_to_string(path).map_err(|e| Error::io(path, e));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut crate::input::open_read(path)?, &mut text)
        .map_err(|e| Error::io(path, e))?;
    Ok(text)
}

/// Inputs one brace pattern may expand to, at most.
const MAX_BRACE_EXPANSION: usize = 1_000_000;

/// Expand WebDataset's (bash's) braces in `s`: `{a,b,c}` alternatives and
/// `{000..099}` numeric ranges (zero padded to the width of the bounds when
/// one is written with a leading zero), nested and repeated, in order.
/// Errors say what is wrong (an unmatched brace, a group that is neither
/// form, a reversed range, too many results).
///
/// ```
/// use feedline::plan::expand_braces;
/// assert_eq!(expand_braces("s-{08..10}.tar").unwrap(), ["s-08.tar", "s-09.tar", "s-10.tar"]);
/// assert_eq!(expand_braces("{a,b}/{1..2}").unwrap(), ["a/1", "a/2", "b/1", "b/2"]);
/// assert!(expand_braces("s-{9..1}.tar").is_err());
/// ```
pub fn expand_braces(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    expand_braces_into(s, &mut out)?;
    Ok(out)
}

fn expand_braces_into(s: &str, out: &mut Vec<String>) -> std::result::Result<(), String> {
    let Some(open) = s.find('{') else {
        if s.contains('}') {
            return Err(format!("`}}` without `{{` in `{s}`"));
        }
        if out.len() >= MAX_BRACE_EXPANSION {
            return Err(format!(
                "braces expand to more than {MAX_BRACE_EXPANSION} inputs"
            ));
        }
        out.push(s.to_string());
        return Ok(());
    };
    let mut depth = 0usize;
    let mut close = None;
    let mut commas = Vec::new();
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(open + i),
            _ => {}
        }
    }
    let close = close.ok_or_else(|| format!("`{{` at character {open} is never closed"))?;
    let (head, body, tail) = (&s[..open], &s[open + 1..close], &s[close + 1..]);
    if !commas.is_empty() {
        let mut start = open + 1;
        for end in commas.into_iter().chain([close]) {
            expand_braces_into(&format!("{head}{}{tail}", &s[start..end]), out)?;
            start = end + 1;
        }
        return Ok(());
    }
    let Some((lo, hi)) = body.split_once("..") else {
        return Err(format!(
            "`{{{body}}}` is neither a list `{{a,b}}` nor a range `{{000..099}}`"
        ));
    };
    let number = |t: &str| {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u64>().ok())
            .flatten()
    };
    let (Some(a), Some(b)) = (number(lo), number(hi)) else {
        return Err(format!(
            "`{{{body}}}`: a range needs two whole numbers, like `{{000..099}}`"
        ));
    };
    if a > b {
        return Err(format!("`{{{body}}}`: the range runs backwards"));
    }
    if b - a >= MAX_BRACE_EXPANSION as u64 {
        return Err(format!(
            "`{{{body}}}` expands to more than {MAX_BRACE_EXPANSION} inputs"
        ));
    }
    let padded = (lo.len() > 1 && lo.starts_with('0')) || (hi.len() > 1 && hi.starts_with('0'));
    let width = if padded { lo.len().max(hi.len()) } else { 0 };
    for n in a..=b {
        expand_braces_into(&format!("{head}{n:0width$}{tail}"), out)?;
    }
    Ok(())
}

/// This process's place among the data-parallel ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// 0-based rank.
    pub rank: usize,
    /// Number of ranks (≥ 1).
    pub world_size: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::single()
    }
}

impl Shard {
    /// Rank `rank` of `world_size`; an error unless `rank < world_size`.
    pub fn new(rank: usize, world_size: usize) -> Result<Self> {
        if world_size == 0 {
            return Err(Error::Config("world size must be at least 1".into()));
        }
        if rank >= world_size {
            return Err(Error::Config(format!(
                "rank {rank} is out of range for world size {world_size} (ranks are 0..{world_size})"
            )));
        }
        Ok(Shard { rank, world_size })
    }

    /// The only rank: 0 of 1.
    pub fn single() -> Self {
        Shard {
            rank: 0,
            world_size: 1,
        }
    }

    /// From the environment variables `RANK` and `WORLD_SIZE` (defaults 0
    /// and 1); an error names the variable and value that is wrong.
    pub fn from_env() -> Result<Self> {
        let rank = std::env::var("RANK").ok();
        let world = std::env::var("WORLD_SIZE").ok();
        Self::from_vars(rank.as_deref(), world.as_deref())
    }

    /// As [`from_env`](Self::from_env), from the values given (`None` = unset).
    pub fn from_vars(rank: Option<&str>, world_size: Option<&str>) -> Result<Self> {
        fn parse(name: &str, v: Option<&str>, default: usize) -> Result<usize> {
            match v.map(str::trim) {
                None | Some("") => Ok(default),
                Some(s) => s.parse::<usize>().map_err(|_| {
                    Error::Config(format!("{name}=`{s}` is not a non-negative integer"))
                }),
            }
        }
        let rank = parse("RANK", rank, 0)?;
        let world = parse("WORLD_SIZE", world_size, 1)?;
        if world == 0 {
            return Err(Error::Config("WORLD_SIZE=0: must be at least 1".into()));
        }
        if rank >= world {
            return Err(Error::Config(format!(
                "RANK={rank} is out of range for WORLD_SIZE={world} (ranks are 0..{world})"
            )));
        }
        Ok(Shard {
            rank,
            world_size: world,
        })
    }
}

/// How the data is split among ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShardBy {
    /// By file, unless there are fewer files than ranks: then by record.
    #[default]
    Auto,
    /// Whole files: rank `r` reads positions `r, r + world, …` of the pass's order.
    File,
    /// Every rank reads every file and keeps every `world_size`-th record.
    Record,
}

/// Which records of a file a task keeps: those whose 0-based index `i` has
/// `i % step == offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordStride {
    /// Index of the first kept record (`< step`).
    pub offset: u64,
    /// Distance between kept records; 1 keeps all.
    pub step: u64,
}

impl Default for RecordStride {
    fn default() -> Self {
        RecordStride::ALL
    }
}

impl RecordStride {
    /// Every record.
    pub const ALL: RecordStride = RecordStride { offset: 0, step: 1 };

    /// The rows of `chunk` this stride keeps (the chunk itself when it keeps all).
    pub fn filter(&self, chunk: Chunk) -> Chunk {
        if self.is_all() {
            return chunk;
        }
        let keep: Vec<usize> = (0..chunk.len())
            .filter(|&i| self.keeps(chunk.origins()[i].record))
            .collect();
        if keep.len() == chunk.len() {
            return chunk;
        }
        chunk.select_rows(&keep)
    }

    /// True if record `record_index` is kept.
    pub fn keeps(&self, record_index: u64) -> bool {
        self.step <= 1 || record_index % self.step == self.offset
    }

    /// True if every record is kept.
    pub fn is_all(&self) -> bool {
        self.step <= 1
    }

    /// How many of the records `0..total` are kept.
    pub fn count(&self, total: u64) -> u64 {
        if self.step <= 1 {
            return total;
        }
        if total <= self.offset {
            0
        } else {
            (total - self.offset).div_ceil(self.step)
        }
    }

    /// How many of the records `start..total` are kept.
    pub fn count_from(&self, start: u64, total: u64) -> u64 {
        self.count(total) - self.count(start.min(total))
    }
}

/// One file to read in a pass, as this rank reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileTask {
    /// The pass.
    pub pass: u64,
    /// Position of this task in this rank's list for the pass (0, 1, …):
    /// the order in which a single-thread reader reads them.
    pub seq: usize,
    /// Index of the file in the plan's file list.
    pub file_index: usize,
    /// The file spec as given (with any `FORMAT:` prefix).
    pub file: String,
    /// First record to read (0 from the plan; a re-queued task sets it to
    /// the records already delivered).
    pub start_record: u64,
    /// Which records of the file this rank keeps.
    pub stride: RecordStride,
}

/// The order and sharding of files pass after pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassPlan {
    files: Vec<String>,
    seed: u64,
    shuffle_files: bool,
    shard: Shard,
    shard_by: ShardBy,
}

impl PassPlan {
    /// A plan over `files` (specs as [`expand_inputs`] gives them): seed 0,
    /// files reshuffled every pass, a single rank, [`ShardBy::Auto`].
    pub fn new(files: Vec<String>) -> Self {
        PassPlan {
            files,
            seed: 0,
            shuffle_files: true,
            shard: Shard::single(),
            shard_by: ShardBy::Auto,
        }
    }

    /// Seed of the file order.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// `true` (default): a new file order every pass; `false`: the files'
    /// own order every pass.
    pub fn shuffle_files(mut self, yes: bool) -> Self {
        self.shuffle_files = yes;
        self
    }

    /// This process's rank.
    pub fn shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// How to split the data among ranks.
    pub fn shard_by(mut self, by: ShardBy) -> Self {
        self.shard_by = by;
        self
    }

    /// The files, as given.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// The seed.
    pub fn get_seed(&self) -> u64 {
        self.seed
    }

    /// True if the file order changes every pass.
    pub fn shuffles_files(&self) -> bool {
        self.shuffle_files
    }

    /// The rank.
    pub fn get_shard(&self) -> Shard {
        self.shard
    }

    /// The same plan for another rank (to compute every rank's share).
    pub fn for_rank(&self, rank: usize) -> Result<Self> {
        let shard = Shard::new(rank, self.shard.world_size)?;
        Ok(self.clone().shard(shard))
    }

    /// [`ShardBy::File`] or [`ShardBy::Record`]: what `Auto` means for this
    /// plan (record sharding when there are fewer files than ranks).
    pub fn effective_shard_by(&self) -> ShardBy {
        match self.shard_by {
            ShardBy::Auto if self.files.len() < self.shard.world_size => ShardBy::Record,
            ShardBy::Auto => ShardBy::File,
            other => other,
        }
    }

    /// Order of all files (indices into [`files`](Self::files)) in pass `pass`.
    pub fn order(&self, pass: u64) -> Vec<usize> {
        if self.shuffle_files {
            let mut rng = pass_rng(self.seed, DOMAIN_FILE_ORDER, pass);
            permutation(&mut rng, self.files.len())
        } else {
            (0..self.files.len()).collect()
        }
    }

    /// This rank's tasks for pass `pass`, in reading order.
    ///
    /// By file, rank `r` of `w` takes positions `r, r + w, …` of
    /// [`order`](Self::order). By record, it takes every file in that order
    /// and keeps record `i` of the file at position `k` when
    /// `(i + k) % w == r` (the offset rotates from file to file so that no
    /// rank always gets each file's first record).
    pub fn tasks(&self, pass: u64) -> Vec<FileTask> {
        let order = self.order(pass);
        let Shard { rank, world_size } = self.shard;
        let w = world_size.max(1);
        let task = |seq, k: usize, stride| FileTask {
            pass,
            seq,
            file_index: order[k],
            file: self.files[order[k]].clone(),
            start_record: 0,
            stride,
        };
        match self.effective_shard_by() {
            ShardBy::Record if w > 1 => (0..order.len())
                .map(|k| {
                    let offset = ((rank + w - k % w) % w) as u64;
                    task(
                        k,
                        k,
                        RecordStride {
                            offset,
                            step: w as u64,
                        },
                    )
                })
                .collect(),
            _ => (rank..order.len())
                .step_by(w)
                .enumerate()
                .map(|(seq, k)| task(seq, k, RecordStride::ALL))
                .collect(),
        }
    }
}

/// How ranks are made to run the same number of batches in a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Equalize {
    /// Each rank delivers what it has; batch counts may differ.
    #[default]
    Off,
    /// Every rank keeps as many instances as the smallest rank has.
    Drop,
    /// Every rank is padded (by repeating its own instances) to as many
    /// instances as the largest rank has.
    Pad,
}

/// What one rank delivers in a pass after [`equalized_counts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EqualizedCount {
    /// Instances the rank has in the pass.
    pub available: u64,
    /// Of those, how many are delivered (the first `keep` in delivery order).
    pub keep: u64,
    /// `available - keep`: left out.
    pub drop: u64,
    /// Repeated instances added after the kept ones.
    pub pad: u64,
    /// Batches delivered: `ceil((keep + pad) / batch)`.
    pub batches: u64,
    /// Size of the last batch (`0` when there is none).
    pub last_batch: u64,
}

impl EqualizedCount {
    /// A rank with `available` instances that delivers `keep` of them and
    /// `pad` repeats in batches of `batch` (≥ 1); `keep ≤ available`.
    ///
    /// ```
    /// use feedline::plan::EqualizedCount;
    /// let c = EqualizedCount::of(10, 7, 2, 4);
    /// assert_eq!((c.drop, c.batches, c.last_batch), (3, 3, 1));
    /// ```
    pub fn of(available: u64, keep: u64, pad: u64, batch: u64) -> Self {
        let delivered = keep + pad;
        let batches = delivered.div_ceil(batch);
        EqualizedCount {
            available,
            keep,
            drop: available - keep,
            pad,
            batches,
            last_batch: if delivered == 0 {
                0
            } else {
                delivered - (batches - 1) * batch
            },
        }
    }
}

/// How many instances each rank keeps, drops and pads in a pass.
///
/// `records_per_rank[r]` is what rank `r` has in the pass; `batch` the batch
/// size; `drop_last` whether a partial last batch is dropped.
///
/// - [`Equalize::Off`]: each rank keeps all (with `drop_last`, all but the
///   partial batch); counts may differ between ranks.
/// - [`Equalize::Drop`]: every rank keeps `m = min(records)` (with
///   `drop_last`, `m` rounded down to whole batches) and drops the rest.
/// - [`Equalize::Pad`]: every rank delivers `M = max(records)` (with
///   `drop_last`, `M` rounded down to whole batches): a rank with fewer pads
///   by repeating its own instances (the pipeline repeats the first `pad` it
///   delivered, in order), one with more drops the excess.
///
/// With `Drop` and `Pad` all ranks get the same `batches` and the same batch
/// sizes. Errors: `batch == 0`, no ranks, or `Pad` for a rank with no
/// instances that would need padding (nothing to repeat).
///
/// ```
/// use feedline::plan::{equalized_counts, Equalize};
/// let c = equalized_counts(&[10, 7], 4, false, Equalize::Pad).unwrap();
/// assert_eq!((c[1].keep, c[1].pad, c[1].batches), (7, 3, 3));
/// let c = equalized_counts(&[10, 7], 4, true, Equalize::Drop).unwrap();
/// assert_eq!((c[0].keep, c[0].drop, c[0].batches), (4, 6, 1));
/// ```
pub fn equalized_counts(
    records_per_rank: &[u64],
    batch: usize,
    drop_last: bool,
    how: Equalize,
) -> Result<Vec<EqualizedCount>> {
    if batch == 0 {
        return Err(Error::Config("batch size must be at least 1".into()));
    }
    if records_per_rank.is_empty() {
        return Err(Error::Config("equalized_counts: no ranks".into()));
    }
    let b = batch as u64;
    let whole = |n: u64| if drop_last { n / b * b } else { n };
    let count = |available: u64, target: u64| {
        let keep = available.min(target);
        EqualizedCount::of(available, keep, target - keep, b)
    };
    let min = records_per_rank.iter().copied().min().unwrap_or(0);
    let max = records_per_rank.iter().copied().max().unwrap_or(0);
    let mut out = Vec::with_capacity(records_per_rank.len());
    for (rank, &n) in records_per_rank.iter().enumerate() {
        let c = match how {
            Equalize::Off => count(n, whole(n)),
            Equalize::Drop => count(n, whole(min)),
            Equalize::Pad => {
                let c = count(n, whole(max));
                if n == 0 && c.pad > 0 {
                    return Err(Error::Config(format!(
                        "rank {rank} has no instances in this pass, so it cannot pad to {} \
                         like the others (use Equalize::Drop, or give every rank data)",
                        c.pad
                    )));
                }
                c
            }
        };
        out.push(c);
    }
    Ok(out)
}
