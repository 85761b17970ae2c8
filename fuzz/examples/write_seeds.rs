//! Write the seed inputs of every target (fixtures and small generated
//! files, `tests/fuzz_targets/mod.rs::seeds`) into `fuzz/corpus/<target>/`,
//! each named by a hash of its bytes: `cargo run --example write_seeds`.

#[path = "../../tests/fuzz_targets/mod.rs"]
mod fuzz_targets;

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, _) in fuzz_targets::TARGETS {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for seed in fuzz_targets::seeds(name) {
            // FNV-1a, enough to name a few hundred files.
            let h = seed.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
            std::fs::write(dir.join(format!("seed-{h:016x}")), &seed).expect("write seed");
        }
        println!("{name}: {} seeds", fuzz_targets::seeds(name).len());
    }
}
