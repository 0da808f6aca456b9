//! Replays every input of the fuzz corpora (fuzz/corpus/<target>/) through the same target
//! bodies the cargo-fuzz binaries run (fuzz/src/lib.rs), on stable, in the normal
//! `cargo test`: whatever the fuzzers found interesting (crashes fixed since included)
//! must never panic again. See fuzz/README.md to run the fuzzers themselves.

#[path = "../../fuzz/src/lib.rs"]
mod fuzz_bodies;

use std::path::Path;

#[test]
fn every_corpus_input_runs_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut failures = Vec::new();
    for (target, body) in fuzz_bodies::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: the corpus is empty", dir.display());
        for file in files {
            let data = std::fs::read(&file).unwrap();
            if std::panic::catch_unwind(|| body(&data)).is_err() {
                failures.push(file.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:#?}");
}
