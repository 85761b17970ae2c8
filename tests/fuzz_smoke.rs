//! Fuzz smoke test, on stable, in the normal test suite: for every fuzz
//! target of `tests/fuzz_targets/mod.rs` (the same functions and invariants
//! the libFuzzer crate in `fuzz/` runs),
//!
//! 1. replay every file of `fuzz/corpus/<target>/` (the minimized corpus,
//!    including the inputs of every bug found so far), and
//! 2. run a seeded, deterministic mutation loop (bit flips, interesting
//!    values, truncation, insertion, deletion, duplication, splicing) over
//!    the corpus and the seeds.
//!
//! A failing input is written to `CARGO_TARGET_TMPDIR/fuzz-smoke-<target>.bin`
//! so that it can be replayed with `cargo fuzz run <target> FILE` or added
//! to the corpus.

#[path = "fuzz_targets/mod.rs"]
mod fuzz_targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[global_allocator]
static ALLOC: fuzz_targets::CountingAlloc = fuzz_targets::CountingAlloc;

/// Mutated inputs per target.
const MUTATIONS: usize = 1000;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect()
}

const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    256 << 20,
    i64::MAX as u64,
    u64::MAX,
];

fn mutate(rng: &mut ChaCha8Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let len = v.len();
        match rng.gen_range(0..8) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                v[i] = [0, 0xff, 0x7f, 0x80, b'\n', b',', b'"', b'['][rng.gen_range(0..8)];
            }
            2 if len > 0 => {
                // An interesting little-endian integer of 1, 2, 4 or 8 bytes.
                let w = [1, 2, 4, 8][rng.gen_range(0..4)].min(len);
                let i = rng.gen_range(0..=len - w);
                let x = INTERESTING[rng.gen_range(0..INTERESTING.len())].to_le_bytes();
                v[i..i + w].copy_from_slice(&x[..w]);
            }
            3 => v.truncate(rng.gen_range(0..=len)),
            4 => {
                let i = rng.gen_range(0..=len);
                let n = rng.gen_range(1..=8);
                let ins: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                v.splice(i..i, ins);
            }
            5 if len > 0 => {
                let i = rng.gen_range(0..len);
                let j = rng.gen_range(i..=len.min(i + 64));
                v.drain(i..j);
            }
            6 if len > 0 => {
                let i = rng.gen_range(0..len);
                let j = rng.gen_range(i..=len.min(i + 64));
                let dup = v[i..j].to_vec();
                let at = rng.gen_range(0..=v.len());
                v.splice(at..at, dup);
            }
            7 => {
                // Splice: a prefix of this input and a suffix of another.
                let i = rng.gen_range(0..=len);
                let j = rng.gen_range(0..=other.len());
                v.truncate(i);
                v.extend_from_slice(&other[j..]);
            }
            _ => {}
        }
    }
    v
}

/// Run `target` on `data`; on a panic, keep the input and fail.
fn run_one(target: &str, data: &[u8], what: &str) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| fuzz_targets::run(target, data))) {
        let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-smoke-{target}.bin"));
        let _ = std::fs::write(&keep, data);
        eprintln!(
            "{target}: {what} failed; input ({} bytes) kept in {}",
            data.len(),
            keep.display()
        );
        std::panic::resume_unwind(p);
    }
}

fn smoke(target: &str) {
    assert!(
        fuzz_targets::counting_active(),
        "the counting allocator is not installed"
    );
    let started = std::time::Instant::now();
    let corpus = corpus(target);
    assert!(!corpus.is_empty(), "fuzz/corpus/{target} is empty");
    for (i, data) in corpus.iter().enumerate() {
        run_one(target, data, &format!("corpus file {i}"));
    }
    let mut bases = corpus;
    bases.extend(fuzz_targets::seeds(target));
    for (i, data) in bases.iter().enumerate().rev().take(64) {
        run_one(target, data, &format!("seed {i}"));
    }
    let seed = target.bytes().fold(0xfeed_u64, |h, b| {
        h.wrapping_mul(0x100_0000_01b3).wrapping_add(b as u64)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in 0..MUTATIONS {
        let base = &bases[rng.gen_range(0..bases.len())];
        let other = &bases[rng.gen_range(0..bases.len())];
        let data = mutate(&mut rng, base, other);
        run_one(target, &data, &format!("mutation {i}"));
    }
    fuzz_targets::remove_scratch_dir();
    let (peak, input) = fuzz_targets::largest_heap_growth();
    eprintln!(
        "{target}: {} corpus/seed inputs + {MUTATIONS} mutations in {:.2?}; largest heap growth {peak} B (input {input} B)",
        bases.len(),
        started.elapsed()
    );
}

#[test]
fn fuzz_smoke_tfrecord() {
    smoke("tfrecord");
}

#[test]
fn fuzz_smoke_tfrecord_stream() {
    smoke("tfrecord_stream");
}

#[test]
fn fuzz_smoke_example() {
    smoke("example");
}

#[test]
fn fuzz_smoke_npy() {
    smoke("npy");
}

#[test]
fn fuzz_smoke_npz() {
    smoke("npz");
}

#[test]
fn fuzz_smoke_jsonl() {
    smoke("jsonl");
}

#[test]
fn fuzz_smoke_csv() {
    smoke("csv");
}

/// The mutation loop really mutates, and is deterministic.
#[test]
fn mutations_are_seeded_and_change_the_input() {
    let base = b"0123456789abcdef".to_vec();
    let run = || {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..50)
            .map(|_| mutate(&mut rng, &base, b"XYZ"))
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    assert!(a.iter().filter(|m| **m != base).count() > 40);
}
