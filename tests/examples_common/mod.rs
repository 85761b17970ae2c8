//! Shared by the tests that run the examples: where cargo put them.

use std::path::PathBuf;

/// target/<profile>/examples/<name>, next to the test's own binary.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built (cargo test builds examples)",
        path.display()
    );
    path
}
