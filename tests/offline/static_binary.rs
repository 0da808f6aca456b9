//! The image's binary (deploy/Containerfile: FROM scratch, nothing but the binary): built
//! statically by deploy/static-build.sh, it runs in a root directory that holds only itself
//! (no loader, no libc, no /etc, no /tmp), as the image's non-root user, and answers
//! --version and check-config. A dynamically linked binary fails here: its loader is missing.
//! Root uses chroot(8); anyone else a user namespace (unshare --map-root-user --root).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{in_root, static_binary};

/// A fresh directory holding only the binary at /rust-batch (as the image does).
fn empty_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rb-root-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(static_binary(), dir.join("rust-batch")).unwrap();
    dir
}

/// `/rust-batch ARGS` with `root` as its whole filesystem, as the image's user when root.
fn run_in(root: &Path, args: &[&str]) -> Output {
    let mut cmd = in_root(root);
    cmd.arg("/rust-batch")
        .args(args)
        // Nothing from this environment but where chroot/unshare are.
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("chroot / unshare runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_static_binary_answers_version_in_an_empty_root() {
    let root = empty_root("version");
    let entries: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["rust-batch"], "nothing but the binary");
    let out = run_in(&root, &["--version"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("rust-batch {}", env!("CARGO_PKG_VERSION"))
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn check_config_reads_the_shipped_configuration_in_an_empty_root() {
    let root = empty_root("check-config");
    // The configuration deploy/ ships (the chart's default schedulerConf).
    let manifests = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/rust-batch.yaml"
    ))
    .unwrap();
    let conf = manifests
        .split("\n---")
        .map(|d| rust_batch::yaml::from_str::<serde_json::Value>(d).unwrap())
        .find(|d| d["kind"] == "ConfigMap")
        .expect("the ConfigMap")["data"]["volcano-scheduler.conf"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(root.join("volcano-scheduler.conf"), &conf).unwrap();
    let out = run_in(&root, &["check-config", "/volcano-scheduler.conf"]);
    assert!(out.status.success(), "{}", text(&out));

    // It really read the file: an unknown plugin is named.
    std::fs::write(
        root.join("bad.conf"),
        "actions: \"allocate\"\ntiers:\n- plugins:\n  - name: no-such-plugin\n",
    )
    .unwrap();
    let out = run_in(&root, &["check-config", "/bad.conf"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-such-plugin"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(&root).unwrap();
}
