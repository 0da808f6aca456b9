//! End-to-end on a real control plane (kube-apiserver + etcd + kwok, started by
//! tests/cluster/with-cluster.sh): `rust-batch simulate --from-cluster` takes a snapshot of
//! a cluster where one gang runs and three wait, with nothing but the `list` permissions
//! docs/src/scenarios.md gives; the scenario it writes loads, and the order in which its
//! simulation starts the waiting gangs is the order in which the live scheduler starts
//! them as room is freed. Objects it cannot represent are listed as skipped; an
//! unreachable API server and an unwritable output are clear errors. Without a cluster this
//! test fails; it never skips.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, PostParams};
use rust_batch::kube::dialects::volcano::PodGroup;
use rust_batch::sim::Scenario;
use serde_json::json;

const SCHEDULER: &str = "rb-snapshot";
const NS: &str = "e2e-snapshot";

/// The ClusterRole docs/src/scenarios.md gives for snapshots (the YAML block after the
/// `snapshot-rbac` marker), bound to a ServiceAccount of `NS`: a kubeconfig acting as it.
fn list_only_kubeconfig() -> std::path::PathBuf {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/scenarios.md"),
    )
    .unwrap();
    let after = docs
        .split_once("<!-- snapshot-rbac -->")
        .expect("docs/src/scenarios.md marks the snapshot's ClusterRole")
        .1;
    let role = after
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a yaml block follows the marker")
        .0;
    for line in role.lines().filter(|l| l.contains("verbs")) {
        assert_eq!(line.trim(), "verbs: [list]", "the role only lists");
    }
    let binding = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: snapshot, namespace: {NS}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: rust-batch-snapshot-e2e}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rust-batch-snapshot}}\n\
         subjects: [{{kind: ServiceAccount, name: snapshot, namespace: {NS}}}]\n"
    );
    kubectl_admin(&["apply", "-f", "-"], &format!("{role}\n---\n{binding}"));
    impersonating_kubeconfig(NS, "snapshot")
}

fn simulate(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(["simulate", "--from-cluster", "--scheduler-name", SCHEDULER])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .output()
        .expect("rust-batch runs")
}

/// A gang of `pods` pods of 4 CPUs in a Volcano PodGroup, with a runtime estimate.
async fn gang(place: &Place<'_>, name: &str, pods: usize, estimate: &str, class: Option<&str>) {
    let mut spec = json!({"minMember": pods, "queue": "default"});
    if let Some(c) = class {
        spec["priorityClassName"] = c.into();
    }
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS}, "spec": spec
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(place.client.clone(), NS)
        .create(&PostParams::default(), &pg)
        .await
        .unwrap();
    for i in 0..pods {
        place
            .raw_pod(
                &format!("{name}-{i}"),
                json!({}),
                json!({"scheduling.k8s.io/group-name": name, "rust-batch.io/runtime-estimate": estimate}),
                json!({"cpu": "4"}),
            )
            .await;
    }
    // Creation times are whole seconds: gangs a second apart keep their order.
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

/// Bound pods per gang (`<gang>-<i>` names).
async fn bound_by_gang(client: &kube::Client) -> BTreeMap<String, usize> {
    let pods = check_invariants(client, NS).await;
    let mut out = BTreeMap::new();
    for (name, p) in &pods {
        let gang = name.rsplit_once('-').map_or(name.as_str(), |(g, _)| g);
        *out.entry(gang.to_string()).or_default() += usize::from(node_of(p).is_some());
    }
    out
}

async fn delete_gang(client: &kube::Client, name: &str, pods: usize) {
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    for i in 0..pods {
        api.delete(
            &format!("{name}-{i}"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulation_of_a_snapshot_starts_the_waiting_gangs_in_the_live_schedulers_order() {
    let client = client().await;
    install_crds(&client).await;
    let (_scheduler, _port) = start_ready_scheduler(SCHEDULER, &[]).await;
    namespace(&client, NS).await;
    let place = Place {
        client: &client,
        ns: NS,
        pool: NS,
        scheduler: SCHEDULER,
    };
    let shape = json!({"cpu": "5", "memory": "16Gi"});
    fake_nodes(&client, "snap", 1..=2, NS, &shape).await;
    Api::<PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "snapshot-urgent"}, "value": 1000}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    // Another scheduler's pod holds a CPU of snap-n1: node usage in the snapshot.
    foreign_pod(&client, NS, "web", Some("snap-n1"), "1").await;

    // One gang fills both nodes; three wait: `big` (both nodes) before `small` (one node,
    // a long estimate), and `urgent` (one node, created last, of a higher PriorityClass).
    gang(&place, "run", 2, "10m", None).await;
    wait_for(Duration::from_secs(30), "gang run bound", || async {
        (bound_by_gang(&client).await.get("run") == Some(&2)).then_some(())
    })
    .await;
    gang(&place, "big", 2, "5m", None).await;
    gang(&place, "small", 1, "30m", None).await;
    gang(&place, "urgent", 1, "5m", Some("snapshot-urgent")).await;
    // Two that cannot be represented: a gated pod, and a gang short of its members.
    let gated: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated", "namespace": NS},
        "spec": {"schedulerName": SCHEDULER, "schedulingGates": [{"name": "example.com/hold"}],
                 "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &gated)
        .await
        .unwrap();
    pod_group(&client, NS, "short", 2).await;
    place
        .raw_pod(
            "short-0",
            json!({}),
            json!({"scheduling.k8s.io/group-name": "short"}),
            json!({"cpu": "1"}),
        )
        .await;
    stays_pending(&client, &["big", "small", "urgent"]).await;

    // The snapshot, with the docs' list-only role.
    let kubeconfig = list_only_kubeconfig();
    let file = std::env::temp_dir().join(format!("rb-snapshot-{}.yaml", std::process::id()));
    let out = simulate(
        &kubeconfig,
        &[
            "--write-scenario",
            file.to_str().unwrap(),
            "--output",
            "json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "snapshot failed: {stderr}");
    assert!(
        stderr.contains(&format!(
            "skipped: pod {NS}/gated: gated by example.com/hold"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("skipped: gang {NS}/short: has 1 of the 2 members")),
        "{stderr}"
    );
    let scenario = Scenario::load(&file).expect("the written scenario loads");
    let names: Vec<&str> = scenario.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["run", "big", "small", "urgent"], "creation order");
    // The snapshot is of the whole cluster: other tests' pods on their own nodes are in it
    // too (as other pods, not this scheduler's); this namespace has one.
    let ours: Vec<_> = scenario
        .other_pods
        .iter()
        .filter(|p| p.name.starts_with(&format!("{NS}/")))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].node, "snap-n1");
    let run = &scenario.jobs[0].tasks[0];
    assert_eq!(run.running.len(), 2, "{run:?}");
    assert_eq!(scenario.jobs[3].priority, 1000, "the PriorityClass's value");

    // The simulation's order of the next starts: waves of gangs starting together.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut starts: Vec<(i64, String)> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["name"] != format!("{NS}/run"))
        .map(|j| {
            let name = j["name"].as_str().unwrap();
            let at = j["started"]
                .as_i64()
                .unwrap_or_else(|| panic!("{name} never starts: {j}"));
            (at, name.trim_start_matches(&format!("{NS}/")).to_string())
        })
        .collect();
    starts.sort();
    let mut waves: Vec<Vec<String>> = Vec::new();
    let mut last = None;
    for (at, name) in starts {
        if last != Some(at) {
            waves.push(Vec::new());
            last = Some(at);
        }
        waves.last_mut().unwrap().push(name);
    }
    println!("simulated order: {waves:?}");
    // urgent first (its PriorityClass), then big (created before small): small, on the
    // node urgent leaves free, would delay big's reservation by its 30m estimate.
    assert_eq!(
        waves,
        [
            vec!["urgent".to_string()],
            vec!["big".into()],
            vec!["small".into()]
        ],
        "the simulated order"
    );

    // The live scheduler, as room is freed: each wave starts, and nothing after it.
    let sizes: BTreeMap<&str, usize> = [("run", 2), ("big", 2), ("small", 1), ("urgent", 1)]
        .into_iter()
        .collect();
    let mut free = vec!["run".to_string()];
    for (i, wave) in waves.iter().enumerate() {
        for g in free.drain(..) {
            delete_gang(&client, &g, sizes[g.as_str()]).await;
        }
        wait_for(
            Duration::from_secs(30),
            &format!("wave {wave:?} bound"),
            || async {
                let bound = bound_by_gang(&client).await;
                wave.iter()
                    .all(|g| bound.get(g) == Some(&sizes[g.as_str()]))
                    .then_some(())
            },
        )
        .await;
        let later: Vec<&str> = waves[i + 1..]
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        stays_pending(&client, &later).await;
        free = wave.clone();
    }

    // The scheduler configuration given is the scenario's.
    let conf_text = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n  - name: proportion\n";
    let conf = std::env::temp_dir().join(format!("rb-snapshot-{}.conf", std::process::id()));
    std::fs::write(&conf, conf_text).unwrap();
    let out = simulate(
        &kubeconfig,
        &[
            "--scheduler-conf",
            conf.to_str().unwrap(),
            "--write-scenario",
            file.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scenario = Scenario::load(&file).expect("the written scenario loads");
    assert_eq!(scenario.config.as_deref(), Some(conf_text));

    // An output path that cannot be written: a clear error, nothing simulated.
    let out = simulate(
        &kubeconfig,
        &["--write-scenario", "/nonexistent/dir/s.yaml"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: writing the scenario to /nonexistent/dir/s.yaml: No such file or directory"
        ),
        "{stderr}"
    );
}

/// None of `gangs`' pods is bound for 3 s.
async fn stays_pending(client: &kube::Client, gangs: &[&str]) {
    for _ in 0..6 {
        let bound = bound_by_gang(client).await;
        for g in gangs {
            assert_eq!(
                bound.get(*g).copied().unwrap_or(0),
                0,
                "{g} bound too early"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn an_unreachable_api_server_is_a_clear_error() {
    let port = free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(["simulate", "--from-cluster", "--master"])
        .arg(format!("http://127.0.0.1:{port}"))
        .env_remove("KUBECONFIG")
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: taking a snapshot of the cluster: cannot list PriorityClass from the API server: API server unreachable"
        ),
        "{stderr}"
    );
}
