//! Real operators in the e2e suite: each is built from Go modules by
//! tests/cluster/operators/NAME/build.sh (cached by version; tests/run.sh builds them all in
//! the background first), its CRDs and RBAC come from its module's source, and it runs as a
//! process against the test control plane under its own ServiceAccount (impersonation), as
//! it would in a cluster.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

use super::{assert_not_over_committed, partial_gangs, phase};

/// What an operator's build script reports.
pub struct Built {
    pub bin: PathBuf,
    /// The operator's module source (read-only, in the Go module cache).
    pub src: PathBuf,
    pub version: String,
}

/// Builds (or finds cached) the operator `name` with tests/cluster/operators/NAME/build.sh.
pub fn built(name: &str) -> Built {
    let report = build_report(name);
    Built {
        bin: report_line(&report, name, "BIN").into(),
        src: report_line(&report, name, "SRC").into(),
        version: report_line(&report, name, "VERSION"),
    }
}

/// What tests/cluster/operators/NAME/build.sh prints: `KEY=value` lines, last.
fn build_report(name: &str) -> String {
    super::script_stdout(
        &format!("tests/cluster/operators/{name}/build.sh"),
        &format!("operator {name} could not be built from Go modules"),
    )
}

fn report_line(report: &str, name: &str, key: &str) -> String {
    super::report_value(report, key)
        .unwrap_or_else(|| panic!("the build report of {name} has no {key} line"))
}

/// Operators hard-code `schedulerName: volcano` on the pods they create, so one rust-batch
/// answering to that name sees every operator's pods in the cluster: every test that starts
/// such a scheduler takes this lock for its whole run (they are all in the e2e test binary).
pub fn volcano_name_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An operator process; killed when dropped.
pub struct Operator {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Operator {
    /// Starts `bin args…` with `kubeconfig` (as `KUBECONFIG`), in `dir`, extra `env`, its
    /// stdout and stderr in a log file under the temp dir (named in failures).
    pub fn start(
        name: &str,
        bin: &Path,
        args: &[&str],
        kubeconfig: &Path,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Operator {
        Operator::spawn(name, Command::new(bin).args(args), kubeconfig, dir, env)
    }

    /// Like `start`, for an operator shared by every test of a test binary (kept in a
    /// static, which is never dropped): it is tied to the test process. A small `sh` reads a
    /// pipe from the test process and then `exec`s the operator (same pid: `running`, `stop`
    /// and `Drop` act on the operator itself); a background subshell holds the pipe's read end
    /// and sends the operator SIGTERM (SIGKILL 10 s later) when the pipe closes, which happens
    /// when the test process exits however it exits (the write end is close-on-exec, so no
    /// other child keeps it open).
    pub fn start_tied(
        name: &str,
        bin: &Path,
        args: &[&str],
        kubeconfig: &Path,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Operator {
        // `ours` checks that the pid still runs the operator's binary (it may have exited
        // and the pid been reused) before each signal.
        const TIE: &str = r#"exec 3<&0
ours() { [ "$(readlink -f /proc/$$/exe 2>/dev/null)" = "$(readlink -f "$1")" ]; }
( while read -r _ <&3; do :; done
  ours "$1" || exit 0
  kill -TERM $$ 2>/dev/null
  i=0; while [ $i -lt 20 ] && ours "$1"; do sleep 0.5; i=$((i + 1)); done
  ours "$1" && kill -KILL $$ 2>/dev/null ) &
exec "$@" 3<&- </dev/null"#;
        Operator::spawn(
            name,
            Command::new("sh")
                .args(["-c", TIE, "sh"])
                .arg(bin)
                .args(args)
                .stdin(Stdio::piped()),
            kubeconfig,
            dir,
            env,
        )
    }

    fn spawn(
        name: &str,
        command: &mut Command,
        kubeconfig: &Path,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Operator {
        let log = std::env::temp_dir().join(format!(
            "rb-operator-{name}-{}-{}.log",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        ));
        let file = std::fs::File::create(&log).expect("operator log file");
        let child = command
            .current_dir(dir)
            .env("KUBECONFIG", kubeconfig)
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("operator {name} ({command:?}) starts: {e}"));
        Operator {
            name: name.to_string(),
            child: Some(child),
            log,
        }
    }

    /// Whether the process is still running (an operator that exits on its own is a failure
    /// the test should report with `log_tail`).
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Waits until it answers 200 on `127.0.0.1:port` `path` (its manager has started),
    /// failing with its log's tail if it exits first or `timeout` passes.
    pub async fn wait_probe(&mut self, port: u16, path: &str, timeout: std::time::Duration) {
        let start = Instant::now();
        loop {
            assert!(
                self.running(),
                "operator {} exited:\n{}",
                self.name,
                self.log_tail(40)
            );
            if let Some((200, _)) = super::http_get(port, path).await {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "operator {} not answering {path} after {timeout:?}:\n{}",
                self.name,
                self.log_tail(40)
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Stops it: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: std::time::Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Its log's last `lines` lines, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `kubectl apply --server-side` of files or directories (CRDs, RBAC from an operator's
/// module source) as the cluster admin.
pub fn apply_paths(paths: &[&Path]) {
    for path in paths {
        super::kubectl_admin(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                &path.display().to_string(),
            ],
            "",
        );
    }
}

/// A `KEY=` line of an operator's build report beyond BIN, SRC and VERSION (the Spark
/// operator's also names the SPARK_HOME its spark-submit lives in). Runs the build script
/// again, which answers at once from its cache.
pub fn report_field(name: &str, key: &str) -> String {
    report_line(&build_report(name), name, key)
}

/// `kubectl kustomize DIR` (an operator's shipped overlay or base, read from its module
/// source), then `kubectl apply --server-side` of the rendered objects `keep` accepts, as the
/// cluster admin (an overlay also carries what a cluster without kubelet cannot run, such as
/// the operator's Deployment, or what would get in the way here, such as a webhook
/// registration the API server cannot reach). Waits until its CustomResourceDefinitions are
/// established. Returns `Kind/name` of each object applied.
pub fn apply_kustomization(dir: &Path, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<String> {
    let rendered = super::kubectl_admin(&["kustomize", &dir.display().to_string()], "");
    let mut applied = Vec::new();
    let mut crds: Vec<String> = Vec::new();
    let mut kept = String::new();
    let documents: Vec<serde_json::Value> =
        rust_batch::yaml::from_str_multiple(&rendered).expect("kustomize renders YAML");
    for object in documents {
        if object.is_null() || !keep(&object) {
            continue;
        }
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if kind == "CustomResourceDefinition" {
            crds.push(format!("crd/{name}"));
        }
        applied.push(format!("{kind}/{name}"));
        kept.push_str("---\n");
        kept.push_str(&rust_batch::yaml::to_string(&object).unwrap());
    }
    assert!(!applied.is_empty(), "nothing kept from {}", dir.display());
    super::kubectl_admin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &kept,
    );
    // Polled rather than `kubectl wait`, which fails on a CRD whose status has no
    // conditions yet (just created).
    let established = |crd: &str| {
        let object: serde_json::Value =
            serde_json::from_str(&super::kubectl_admin(&["get", crd, "-o", "json"], "")).unwrap();
        object["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
    };
    for crd in &crds {
        let start = Instant::now();
        while !established(crd) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "{crd} not established after 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    applied
}

/// The PodGroup an operator made, if it exists yet.
pub async fn pod_group_named(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<rust_batch::kube::dialects::volcano::PodGroup> {
    kube::Api::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()
}

/// The gang a pod's annotation names.
pub fn group_of(p: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get("scheduling.k8s.io/group-name")
        .map(String::as_str)
}

/// Pod name → (uid, node) of the bound pods: what must not change across a restart.
pub fn placements<'a>(
    pods: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Pod>,
) -> std::collections::BTreeMap<String, (String, String)> {
    pods.into_iter()
        .filter_map(|p| {
            Some((
                p.metadata.name.clone()?,
                (p.metadata.uid.clone()?, super::node_of(p)?),
            ))
        })
        .collect()
}

/// How long a gang may look partially bound while its binds land (one API call per pod).
pub const BIND_GRACE: Duration = Duration::from_secs(3);

/// Runs `flow` while checking, every second, that no node is over-committed and no gang
/// of `namespaces` stays bound partially for longer than binds take to land. A gang one of
/// whose pods has finished is past placement (pods finish at their own pace, and operators
/// delete what is left) and is not checked.
pub async fn guarded<T>(client: &Client, namespaces: &[&str], flow: impl Future<Output = T>) -> T {
    let mut partial_since: HashMap<(String, String), Instant> = HashMap::new();
    // Once a second: each look lists every pod of the cluster (over-commit counts every
    // scheduler's pods), thousands after the rest of the suite, and a tighter loop starved
    // the scheduler under test of CPU. A partial gang must outlast BIND_GRACE (3 s) anyway.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(flow);
    loop {
        tokio::select! {
            out = &mut flow => return out,
            _ = tick.tick() => {
                let pods = Api::<Pod>::all(client.clone())
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items;
                assert_not_over_committed(client, &pods).await;
                let mut partial_now = Vec::new();
                for ns in namespaces {
                    for (gang, placed, min) in partial_gangs(client, ns).await {
                        let finished = pods.iter().any(|p| {
                            p.metadata.namespace.as_deref() == Some(*ns)
                                && group_of(p) == Some(gang.as_str())
                                && matches!(phase(p).as_str(), "Succeeded" | "Failed")
                        });
                        if finished {
                            continue;
                        }
                        let key = (ns.to_string(), gang.clone());
                        let since = *partial_since.entry(key.clone()).or_insert_with(Instant::now);
                        assert!(
                            since.elapsed() < BIND_GRACE,
                            "gang {ns}/{gang} bound partially: {placed} of min {min} for {:.1} s",
                            since.elapsed().as_secs_f64()
                        );
                        partial_now.push(key);
                    }
                }
                partial_since.retain(|key, _| partial_now.contains(key));
            }
        }
    }
}
