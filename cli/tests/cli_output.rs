//! Every subcommand that prints handles a failed write: standard output
//! (or standard error) on a full disk (`/dev/full`) is a clear error and an
//! exit code other than 0, never a panic; a closed pipe ends the command
//! quietly (SIGPIPE), as Unix tools do. And the help says what the command
//! does — not the crate's package description — and `bench --help` shows no
//! option of the team's benchmark harness.

mod cli_common;

use std::fs::OpenOptions;
use std::io::Read;
use std::process::Stdio;

use cli_common::*;

/// `gen` of a tiny dataset into `out`.
fn gen_args(out: &str) -> [&str; 9] {
    [
        "gen",
        "--preset",
        "small",
        "--out",
        out,
        "--files",
        "1",
        "--records",
        "3",
    ]
}

fn dev_full() -> Stdio {
    Stdio::from(OpenOptions::new().write(true).open("/dev/full").unwrap())
}

#[test]
fn a_full_disk_on_standard_output_is_an_error_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(&dir.path().join("data"), 2, 40);
    let f = files[0].as_str();
    let out = dir.path().join("gen").to_string_lossy().into_owned();
    let runs: &[&[&str]] = &[
        &["cat", f],
        &["cat", f, "--limit", "1"],
        &["inspect", f],
        &["inspect", f, "--json"],
        &gen_args(&out),
        &["run", f],
        &["run", f, "--json"],
        &["bench", f],
        &["bench", f, "--json"],
        &["--help"],
        &["run", "--help"],
        &["--version"],
    ];
    for args in runs {
        let o = feedline_to(args, dev_full());
        assert_no_panic(&o);
        let err = stderr(&o);
        assert_ne!(code(&o), 0, "{args:?} succeeded on a full disk: {err}");
        assert!(
            err.contains("cannot write to standard output")
                && err.contains("No space left on device"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_full_disk_on_standard_error_is_an_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen").to_string_lossy().into_owned();
    // gen says what it wrote on standard error; a usage error goes there too.
    for args in [
        &gen_args(&out)[..],
        &["run", "x.tfrecord", "--devices", "0"],
    ] {
        let o = command(args)
            .stdout(Stdio::null())
            .stderr(dev_full())
            .output()
            .unwrap();
        // 1: the command's error (not 101, a panic's; not 0).
        assert_eq!(code(&o), 1, "{args:?}");
    }
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 1, 5000);
    let mut child = command(&["cat", &files[0]])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    drop(child.stdout.take()); // as `| head -c 100` does
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}", o.status);
    assert_eq!(stderr(&o), "", "a closed pipe is not an error to report");
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

#[test]
fn the_help_says_what_the_command_does() {
    let o = feedline(&["--help"]);
    assert_eq!(code(&o), 0);
    let help = stdout(&o);
    let first = first_line(&help);
    // Not a package description (of this crate or the core's).
    assert!(
        !first.contains("actor pipeline (actix)") && !first.contains("(core, no actix)"),
        "{first}"
    );
    for what in ["training-data files", "feed", "run the loader", "measure"] {
        assert!(
            first.contains(what) || help.contains(what),
            "{what}: {help}"
        );
    }
    for sub in ["cat", "inspect", "gen", "run", "bench"] {
        let o = feedline(&[sub, "--help"]);
        assert_eq!(code(&o), 0, "{sub}");
        assert!(!stdout(&o).contains("actor pipeline (actix)"), "{sub}");
    }
}

#[test]
fn bench_help_shows_no_harness_option() {
    let o = feedline(&["bench", "--help"]);
    assert_eq!(code(&o), 0);
    let help = stdout(&o).to_lowercase();
    for harness in ["peers", "manifest", "variant", "result"] {
        assert!(
            !help.contains(harness),
            "`{harness}` in bench --help:\n{help}"
        );
    }
    for user in [
        "--repeats",
        "--warmup",
        "--json",
        "--multi-pass",
        "--single-thread",
    ] {
        assert!(help.contains(user), "{user} missing from bench --help");
    }
}
