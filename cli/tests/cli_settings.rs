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
    ];
    for (args, sentence) in cases {
        let o = feedline(&args);
        assert_no_panic(&o);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).trim_end(),
            format!("feedline: error: invalid configuration: {sentence}"),
            "{args:?}"
        );
    }
}
