//! The crate root of the example `peers_adapter` (the peers harness adapter,
//! `benches/peers.rs`): the command's modules it shares, and its `main`.

use std::process::ExitCode;

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
#[path = "peers.rs"]
mod peers;
#[allow(dead_code)]
#[path = "../cli/src/pipeline_args.rs"]
mod pipeline_args;

fn main() -> ExitCode {
    peers::main()
}
