//! The peers harness adapter's own unit tests (its checker, manifest reader
//! and JSON printer, `benches/peers.rs`), under the same crate layout as the
//! example `peers_adapter` (`benches/peers_main.rs`), which
//! `tests/examples_cli.rs` runs on every job of `benches/peers-jobs.tsv`.

#[allow(dead_code)]
#[path = "../cli/src/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../cli/src/flags.rs"]
mod flags;
#[allow(dead_code)]
#[path = "../cli/src/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../cli/src/output.rs"]
mod output;
#[allow(dead_code)]
#[path = "../benches/peers.rs"]
mod peers;
#[allow(dead_code)]
#[path = "../cli/src/pipeline_args.rs"]
mod pipeline_args;
