//! `rust-batch simulate --write-scenario` and the `--from-cluster` flags, without a cluster:
//! a scenario written out runs to the same report as the file it came from; flags that need
//! `--from-cluster` are refused without it; an output that cannot be written is a clear
//! error.

use std::process::{Command, Output};

fn rust_batch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("rust-batch runs")
}

#[test]
fn a_written_scenario_runs_to_the_same_report() {
    let file = std::env::temp_dir().join(format!("rb-written-{}.yaml", std::process::id()));
    let path = file.to_str().unwrap();
    let source = "examples/scenarios/s2-two-gangs-one-fits.yaml";
    let first = rust_batch(&[
        "simulate",
        source,
        "--output",
        "json",
        "--write-scenario",
        path,
    ]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let again = rust_batch(&["simulate", path, "--output", "json"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&again.stdout)
    );
    let _ = std::fs::remove_file(&file);
}

#[test]
fn cluster_flags_need_from_cluster_and_bad_outputs_are_named() {
    let out = rust_batch(&["simulate", "--kubeconfig", "/kc"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--from-cluster"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rust_batch(&[
        "simulate",
        "--from-cluster",
        "examples/scenarios/default.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = rust_batch(&["simulate", "--write-scenario", "/nonexistent/dir/s.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: writing the scenario to /nonexistent/dir/s.yaml: No such file or directory"
        ),
        "{stderr}"
    );
}
