//! libFuzzer target `npz`: see `tests/fuzz_targets/mod.rs` for what it checks.
#![no_main]

#[path = "../../tests/fuzz_targets/mod.rs"]
mod fuzz_targets;

#[global_allocator]
static ALLOC: fuzz_targets::CountingAlloc = fuzz_targets::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::npz(data));
