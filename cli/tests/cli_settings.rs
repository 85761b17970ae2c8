//! A refused setting reads the same from the command as from the Rust
//! builder and Python (`actors/tests/settings.rs`,
//! `python/tests/test_settings.py` make the same mistakes): the settings'
//! own sentence, each setting spelled as the command's flag.

mod cli_common;

use cli_common::*;

fn fixture(name: &str) -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/text")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_mistake_reads_as_the_flags_name_its_settings() {
    let docs = fixture("docs.jsonl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", &docs, "--shuffle", "1000", "--min-pool", "3000"],
            "--min-pool 3000 is more than the pool holds (--shuffle 1000): give at most 1000",
        ),
        (
            vec![
                "run",
                &docs,
                "--pack",
                "64",
                "--pack-policy",
                "concat",
                "--pack-window",
                "16",
            ],
            "--pack-window 16 does not apply with --pack-policy concat (concat fills one row \
             at a time: it holds no window of open rows): leave --pack-window out, or give \
             --pack-policy best-fit or first-fit",
        ),
        (
            vec!["run", &docs, "--pack", "64", "--drop-last"],
            "--drop-last with --pack 64: a pass's last packed batch is filled with padding rows \
             (segment ids 0), not dropped",
        ),
        (vec!["run"], "no input files: give FILES or --set"),
        (
            vec!["run", &docs, "--shuffle-mode", "block", "--shuffle", "0"],
            "--shuffle (the records of a block) must be at least 1 with --shuffle-mode block, \
             not 0",
        ),
    ];
    for (args, sentence) in cases {
        assert_refused(&args, sentence);
    }
}

/// A compressed input in `global` mode is refused naming the file, and the
/// way out spelled as the command's flag.
#[test]
fn a_compressed_input_in_global_mode_names_the_file_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("docs.jsonl.gz");
    let mut w = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    std::io::Write::write_all(&mut w, &std::fs::read(fixture("docs.jsonl")).unwrap()).unwrap();
    w.finish().unwrap();
    let gz = gz.to_string_lossy().into_owned();
    let idx = dir.path().join("idx").to_string_lossy().into_owned();
    let o = feedline(&["run", &gz, "--shuffle-mode", "global", "--index-dir", &idx]);
    assert_no_panic(&o);
    assert_ne!(code(&o), 0);
    let e = stderr(&o);
    assert!(
        e.contains("docs.jsonl.gz")
            && e.contains("compressed")
            && e.contains("--shuffle-mode global reads records by position")
            && e.contains("--shuffle-mode buffer (the default) reads it"),
        "{e}"
    );
}
