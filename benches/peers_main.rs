//! The crate root of the example `peers_adapter` (the peers harness adapter,
//! `benches/peers.rs`): the command's modules it shares, and its `main`.

use std::process::ExitCode;

#[allow(dead_code)]
#[path = "../actors/src/bin/feedline/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../actors/src/bin/feedline/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../actors/src/bin/feedline/output.rs"]
mod output;
#[path = "peers.rs"]
mod peers;
#[allow(dead_code)]
#[path = "../actors/src/bin/feedline/pipeline_args.rs"]
mod pipeline_args;

fn main() -> ExitCode {
    peers::main()
}
