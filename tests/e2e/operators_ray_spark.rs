//! End-to-end with the REAL KubeRay operator and the REAL Spark operator (built from Go
//! modules, unchanged, by tests/cluster/operators/{kuberay,spark-operator}/build.sh), each
//! running as a process under its own ServiceAccount with the RBAC its module ships (KubeRay:
//! config/rbac plus the PodGroup rule its Helm chart adds for Volcano; Spark: its chart's
//! RBAC, rendered with helm), against rust-batch answering to `volcano` (both operators
//! hard-code that scheduler name) on the test control plane. kwok fakes the pods: no
//! container runs.
//!
//! - KubeRay (`--batch-scheduler=volcano`): the operator makes the PodGroup (minMember the
//!   head plus the workers, minResources their sum); head and workers bind as one gang, wait
//!   whole while the pool is short, bind whole once nodes appear; scaling the worker group
//!   up raises the PodGroup and the new workers bind as room allows. The operator and
//!   rust-batch are each restarted mid-run without disturbing the other's objects.
//! - Spark operator (`--enable-batch-scheduler`, `spec.batchScheduler: volcano`): the
//!   operator makes the PodGroup (minMember 1, minResources driver and executors) and runs
//!   the real `spark-submit` (Spark's own SparkSubmit from Maven Central jars), which creates
//!   the driver pod; the driver waits until its queue can hold the whole application. The
//!   test then plays the driver JVM (no container runs): it creates the executor pods as
//!   Spark's executor pod builder would, from the conf spark-submit handed the driver. The
//!   operator restarts mid-run without resubmitting or touching what rust-batch bound.
//!
//! Every poll checks the invariants (no partial gang, no over-committed node) on what the
//! API server reports. Without the cluster or a buildable operator the tests fail; none skip.

// Each test holds operators::volcano_name_lock() (a std Mutex) for its whole run, across
// awaits: it serialises whole tests (each on its own runtime), which is its purpose.
#![allow(clippy::await_holding_lock)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::operators::{self, group_of, placements, pod_group_named, Built, Operator};
use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::convert::resource_list;
use rust_batch::kube::dialects::volcano::PodGroup;
use rust_batch::model::Resource;
use serde_json::{json, Value};

/// The scheduler name both operators put on every pod they create.
const VOLCANO: &str = "volcano";

// ---------------------------------------------------------------------------------------
// Shared plumbing
// ---------------------------------------------------------------------------------------

/// `kubectl apply --server-side` of objects given as JSON (one object or a List).
fn apply(objects: &Value) {
    kubectl_admin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &serde_json::to_string(objects).unwrap(),
    );
}

/// Every document of a (multi-document) YAML file of an operator's source.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} (operator source) reads: {e}", path.display()));
    rust_batch::yaml::from_str_multiple::<Value>(&text)
        .expect("YAML document parses")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Applies an operator's CRDs (a directory of its source) and waits until the API server
/// serves them (an operator started before that exits: its kinds are unknown).
async fn install_operator_crds(client: &Client, dir: &Path) {
    operators::apply_paths(&[dir]);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        for doc in yaml_documents(&path) {
            if doc["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            wait_crd_established(client, &name, Duration::from_secs(60)).await;
        }
    }
}

/// helm, built from Go modules by tests/cluster/build-helm.sh (cached; rust-batch's own
/// chart needs it too).
fn helm() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/build-helm.sh");
    let out = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("tests/cluster/build-helm.sh runs");
    assert!(out.status.success(), "tests/cluster/build-helm.sh failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("HELM="))
        .expect("build-helm.sh prints HELM=")
        .into()
}

fn dynamic_api(
    client: &Client,
    ns: &str,
    gvk: (&str, &str, &str),
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version, kind) = gvk;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn min_resources(pg: &PodGroup) -> Resource {
    resource_list(pg.spec.min_resources.as_ref()).expect("minResources parse")
}

fn resources(pairs: &[(&str, &str)]) -> Resource {
    Resource::from_quantities(pairs.iter().copied()).unwrap()
}

/// Name → (phase, node) of every pod, for failure messages.
fn summary(pods: &BTreeMap<String, Pod>) -> String {
    pods.iter()
        .map(|(n, p)| format!("{n}: {} on {:?}", phase(p), node_of(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls (checking the invariants on every poll, and that the operator still runs) until
/// `done` returns a value.
async fn poll_until<T>(
    client: &Client,
    ns: &str,
    operator: &mut Operator,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&BTreeMap<String, Pod>) -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        let pods = check_invariants(client, ns).await;
        assert!(
            operator.running(),
            "operator {} exited while waiting for {what}:\n{}",
            operator.name,
            operator.log_tail(40)
        );
        if let Some(v) = done(&pods) {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "{ns}: timed out after {timeout:?} waiting for {what}; pods: {}\noperator log:\n{}",
            summary(&pods),
            operator.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Polls for `duration` (invariants checked each time) that `check` holds throughout.
async fn holds_for(
    client: &Client,
    ns: &str,
    duration: Duration,
    what: &str,
    mut check: impl FnMut(&BTreeMap<String, Pod>) -> bool,
) {
    let start = Instant::now();
    while start.elapsed() < duration {
        let pods = check_invariants(client, ns).await;
        assert!(
            check(&pods),
            "{ns}: {what} stopped holding; pods: {}",
            summary(&pods)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn bound_count(pods: &BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter()
        .filter(|(n, p)| n.starts_with(prefix) && node_of(p).is_some())
        .count()
}

fn all_running(pods: &BTreeMap<String, Pod>, prefix: &str, n: usize) -> bool {
    let mine: Vec<&Pod> = pods
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, p)| p)
        .collect();
    mine.len() == n && mine.iter().all(|p| phase(p) == "Running")
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rb-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------
// KubeRay
// ---------------------------------------------------------------------------------------

const RAY_CLUSTER: (&str, &str, &str) = ("ray.io", "v1", "RayCluster");

/// KubeRay installed for namespace `ns`: its CRDs (config/crd/bases) and its ClusterRole
/// (config/rbac/role.yaml) from the module source, its ServiceAccount in `ns` bound to that
/// role, and the kubeconfig that acts as that account.
async fn install_kuberay(client: &Client, ray: &Built, ns: &str) -> PathBuf {
    install_operator_crds(client, &ray.src.join("config/crd/bases")).await;
    for doc in yaml_documents(&ray.src.join("config/rbac/role.yaml")) {
        apply(&doc);
    }
    let role = yaml_documents(&ray.src.join("config/rbac/role.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("config/rbac/role.yaml holds the operator's ClusterRole");
    let role_name = role["metadata"]["name"].as_str().unwrap().to_string();
    let account = yaml_documents(&ray.src.join("config/rbac/service_account.yaml"))[0]["metadata"]
        ["name"]
        .as_str()
        .unwrap()
        .to_string();
    apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": account, "namespace": ns}}));
    // config/rbac/role_binding.yaml binds the role to the account in the namespace
    // kustomize sets (config/default); here each test's namespace gets its own binding.
    apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{role_name}-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]
    }));
    // ray-operator's config/rbac (generated from its code's RBAC markers) has no rule for
    // Volcano PodGroups, which `--batch-scheduler=volcano` creates and watches; KubeRay's
    // Helm chart (helm-chart/kuberay-operator, not part of the Go module) adds exactly this
    // rule when the batch scheduler is volcano. Granted here as the chart grants it.
    apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kuberay-operator-volcano-podgroups"},
        "rules": [{"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
                   "verbs": ["create", "delete", "get", "list", "update", "watch"]}]
    }));
    apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("kuberay-operator-volcano-podgroups-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kuberay-operator-volcano-podgroups"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]
    }));
    impersonating_kubeconfig(ns, &account)
}

/// The KubeRay operator watching `ns` only, with Volcano as its batch scheduler, no leader
/// election (one replica), no webhooks (ENABLE_WEBHOOKS unset), probes on free ports.
async fn start_kuberay(ray: &Built, kubeconfig: &Path, ns: &str) -> Operator {
    let probe = free_port();
    let metrics = free_port();
    let args = [
        "--batch-scheduler=volcano".to_string(),
        format!("--watch-namespace={ns}"),
        "--enable-leader-election=false".to_string(),
        format!("--health-probe-bind-address=127.0.0.1:{probe}"),
        format!("--metrics-addr=127.0.0.1:{metrics}"),
        "--log-stdout-encoder=console".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut operator = Operator::start(
        "kuberay",
        &ray.bin,
        &args,
        kubeconfig,
        &temp_dir(&format!("kuberay-{ns}")),
        &[],
    );
    operator
        .wait_probe(probe, "/healthz", Duration::from_secs(60))
        .await;
    operator
}

/// A RayCluster as a user writes it for Volcano: the scheduler and queue labels, a head and
/// one worker group of `workers` replicas (no autoscaling), everything in the test's pool.
fn ray_cluster(ns: &str, name: &str, head_cpu: &str, worker_cpu: &str, workers: u32) -> Value {
    let container = |cname: &str, cpu: &str| {
        json!({"name": cname, "image": "rayproject/ray:2.46.0",
               "resources": {"requests": {"cpu": cpu, "memory": "1Gi"},
                             "limits": {"cpu": cpu, "memory": "1Gi"}}})
    };
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"ray.io/scheduler-name": VOLCANO, "volcano.sh/queue-name": "default"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {},
                "template": {"spec": {"nodeSelector": {"pool": ns},
                                      "containers": [container("ray-head", head_cpu)]}}},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": workers,
                "minReplicas": 0, "maxReplicas": 8, "rayStartParams": {},
                "template": {"spec": {"nodeSelector": {"pool": ns},
                                      "containers": [container("ray-worker", worker_cpu)]}}}]
        }
    })
}

fn scale_workers(ns: &str, name: &str, replicas: u32) {
    let patch =
        json!([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}]);
    kubectl_admin(
        &[
            "patch",
            "-n",
            ns,
            "rayclusters.ray.io",
            name,
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
        "",
    );
}

/// Waits for the PodGroup KubeRay keeps for RayCluster `name` to say `min` members and
/// `resources`.
async fn ray_pod_group_is(
    client: &Client,
    ns: &str,
    name: &str,
    min: i32,
    expected: &Resource,
) -> PodGroup {
    let pg_name = format!("ray-{name}-pg");
    wait_for(
        Duration::from_secs(60),
        &format!("{ns}/{pg_name} with minMember {min}, minResources {expected}"),
        || async {
            let pg = pod_group_named(client, ns, &pg_name).await?;
            (pg.spec.min_member == Some(min) && &min_resources(&pg) == expected).then_some(pg)
        },
    )
    .await
}

/// Polls a running gang whose minimum the operator raised above its bound members: no node
/// over-committed, and the members in `running` neither moved, replaced nor evicted. With
/// `until: (prefix, n)` returns once `n` pods of `prefix` run (failing after `duration`);
/// without, checks for the whole `duration`.
async fn raised_gang_waits(
    client: &Client,
    ns: &str,
    running: &BTreeMap<String, (String, String)>,
    duration: Duration,
    until: Option<(&str, usize)>,
) -> BTreeMap<String, Pod> {
    let start = Instant::now();
    loop {
        let all = Api::<Pod>::all(client.clone())
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        assert_not_over_committed(client, &all).await;
        let pods: BTreeMap<String, Pod> = all
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        let now = placements(pods.values());
        for (name, placed) in running {
            assert_eq!(
                now.get(name),
                Some(placed),
                "{ns}: running member {name} disturbed: {}",
                summary(&pods)
            );
        }
        match until {
            Some((prefix, n)) if all_running(&pods, prefix, n) => return pods,
            Some(_) => assert!(
                start.elapsed() < duration,
                "{ns}: not all bound after {duration:?}: {}",
                summary(&pods)
            ),
            None if start.elapsed() >= duration => return pods,
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The pods of RayCluster `name` as KubeRay makes them for Volcano.
fn assert_ray_pods_declare_the_gang(pods: &BTreeMap<String, Pod>, name: &str) {
    let pg_name = format!("ray-{name}-pg");
    for (pod_name, p) in pods.iter().filter(|(n, _)| n.starts_with(name)) {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.scheduler_name.as_deref(),
            Some(VOLCANO),
            "{pod_name} schedulerName"
        );
        assert_eq!(
            group_of(p),
            Some(pg_name.as_str()),
            "{pod_name} group annotation"
        );
        let task = p
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("volcano.sh/task-spec");
        assert!(
            matches!(task.map(String::as_str), Some("headgroup" | "workers")),
            "{pod_name} task-spec {task:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kuberay_gang_waits_whole_binds_whole_and_scales_up_as_room_allows() {
    let _volcano = operators::volcano_name_lock();
    let client = client().await;
    install_crds(&client).await;
    let ray = operators::built("kuberay");
    let ns = "e2e-kuberay";
    namespace(&client, ns).await;
    let kubeconfig = install_kuberay(&client, &ray, ns).await;
    let node = json!({"cpu": "4", "memory": "16Gi"});
    fake_node(&client, &format!("{ns}-n1"), ns, node.clone()).await;
    let (_rust_batch, _port) = start_ready_scheduler(VOLCANO, &[]).await;
    let mut operator = start_kuberay(&ray, &kubeconfig, ns).await;

    // Head 2 cpu + 2 workers × 2 cpu: 6 cpu, one 4-cpu node.
    apply(&ray_cluster(ns, "gang", "2", "2", 2));
    let pg = ray_pod_group_is(
        &client,
        ns,
        "gang",
        3,
        &resources(&[("cpu", "6"), ("memory", "3Gi")]),
    )
    .await;
    assert_eq!(
        pg.spec.queue.as_deref(),
        Some("default"),
        "queue from volcano.sh/queue-name"
    );
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(60),
        "KubeRay's 3 pods",
        |pods| (pods.keys().filter(|n| n.starts_with("gang-")).count() == 3).then(|| pods.clone()),
    )
    .await;
    assert_ray_pods_declare_the_gang(&pods, "gang");
    // Short of 2 cpu: the gang waits whole (nothing bound, no matter how long).
    holds_for(
        &client,
        ns,
        Duration::from_secs(6),
        "the short gang stays unbound",
        |pods| bound_count(pods, "gang-") == 0,
    )
    .await;

    fake_node(&client, &format!("{ns}-n2"), ns, node.clone()).await;
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(45),
        "the gang bound whole",
        |pods| all_running(pods, "gang-", 3).then(|| pods.clone()),
    )
    .await;
    let first = placements(pods.values());

    // Scale up with room for one more worker (2 cpu free): KubeRay raises the PodGroup to
    // 4 members / 8 cpu and the new worker binds; the others stay where they are.
    scale_workers(ns, "gang", 3);
    ray_pod_group_is(
        &client,
        ns,
        "gang",
        4,
        &resources(&[("cpu", "8"), ("memory", "4Gi")]),
    )
    .await;
    // (Until it binds, 3 of a minimum of 4 are bound by the operator's raise: polled
    // without the partial-gang check, then with it.)
    let pods = raised_gang_waits(
        &client,
        ns,
        &first,
        Duration::from_secs(45),
        Some(("gang-", 4)),
    )
    .await;
    assert!(
        operator.running(),
        "KubeRay exited:\n{}",
        operator.log_tail(40)
    );
    check_invariants(&client, ns).await;
    let second = placements(pods.values());

    // Scale up with no room (8 of 8 cpu used): the PodGroup asks for 5 members, the new
    // worker waits, and the four running members are left alone (not evicted, not moved) —
    // a running gang whose minimum was raised is not a partial bind.
    scale_workers(ns, "gang", 4);
    ray_pod_group_is(
        &client,
        ns,
        "gang",
        5,
        &resources(&[("cpu", "10"), ("memory", "5Gi")]),
    )
    .await;
    wait_for(Duration::from_secs(30), "KubeRay's 5th pod", || async {
        let pods = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .ok()?;
        (pods.items.len() == 5).then_some(())
    })
    .await;
    // (Polled without the partial-gang check: 4 of a minimum of 5 are bound, by the
    // operator's raise, not by a bind of ours.)
    let pods = raised_gang_waits(&client, ns, &second, Duration::from_secs(6), None).await;
    assert_eq!(
        bound_count(&pods, "gang-"),
        4,
        "the 5th worker bound with no room: {}",
        summary(&pods)
    );
    fake_node(&client, &format!("{ns}-n3"), ns, node).await;
    let pods = raised_gang_waits(
        &client,
        ns,
        &second,
        Duration::from_secs(45),
        Some(("gang-", 5)),
    )
    .await;
    assert_eq!(placements(pods.values()).len(), 5, "{}", summary(&pods));
    check_invariants(&client, ns).await;
    // KubeRay saw its cluster come up: every worker it asked for is ready.
    wait_for(
        Duration::from_secs(30),
        "RayCluster status: 4 ready workers",
        || async {
            let rc = dynamic_api(&client, ns, RAY_CLUSTER, "rayclusters")
                .get("gang")
                .await
                .ok()?;
            (rc.data["status"]["readyWorkerReplicas"] == 4).then_some(())
        },
    )
    .await;
    assert!(
        operator.running(),
        "KubeRay exited:\n{}",
        operator.log_tail(40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kuberay_and_rust_batch_each_restart_mid_run_without_disturbing_the_other() {
    let _volcano = operators::volcano_name_lock();
    let client = client().await;
    install_crds(&client).await;
    let ray = operators::built("kuberay");
    let ns = "e2e-kuberay-restart";
    namespace(&client, ns).await;
    let kubeconfig = install_kuberay(&client, &ray, ns).await;
    let node = json!({"cpu": "4", "memory": "16Gi"});
    fake_nodes(&client, ns, 1..=2, ns, &node).await;
    let (rust_batch, _port) = start_ready_scheduler(VOLCANO, &[]).await;
    let mut operator = start_kuberay(&ray, &kubeconfig, ns).await;

    // A running gang: head + 2 workers, 2 cpu each (6 of 8 cpu).
    apply(&ray_cluster(ns, "steady", "2", "2", 2));
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(60),
        "`steady` bound whole",
        |pods| all_running(pods, "steady-", 3).then(|| pods.clone()),
    )
    .await;
    let steady = placements(pods.values());
    let steady_pg = pod_group_named(&client, ns, "ray-steady-pg").await.unwrap();

    // The operator goes away mid-run. rust-batch keeps running, and a RayCluster created
    // meanwhile gets nothing until the operator is back; then it binds whole.
    operator.stop(Duration::from_secs(10));
    apply(&ray_cluster(ns, "late", "1", "500m", 2));
    holds_for(
        &client,
        ns,
        Duration::from_secs(3),
        "nothing happens without the operator",
        |pods| placements(pods.values()) == steady && pods.len() == 3,
    )
    .await;
    let mut operator = start_kuberay(&ray, &kubeconfig, ns).await;
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(60),
        "`late` bound whole after the operator restart",
        |pods| all_running(pods, "late-", 3).then(|| pods.clone()),
    )
    .await;
    let now = placements(pods.values());
    for (name, placed) in &steady {
        assert_eq!(
            now.get(name),
            Some(placed),
            "{name} disturbed by the operator restart"
        );
    }
    let pg = pod_group_named(&client, ns, "ray-steady-pg").await.unwrap();
    assert_eq!(
        pg.metadata.uid, steady_pg.metadata.uid,
        "the restarted operator replaced the PodGroup"
    );
    let mut rust_batch = rust_batch;
    assert!(
        rust_batch.0.try_wait().unwrap().is_none(),
        "rust-batch exited during the operator restart"
    );
    let before_scheduler_restart = now;

    // A gang that cannot fit (head 2 + 2 workers × 2 cpu = 6; 0.5 cpu free) waits whole...
    apply(&ray_cluster(ns, "waiting", "2", "2", 2));
    poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(60),
        "KubeRay's pods of `waiting`",
        |pods| (pods.keys().filter(|n| n.starts_with("waiting-")).count() == 3).then_some(()),
    )
    .await;
    holds_for(
        &client,
        ns,
        Duration::from_secs(4),
        "`waiting` stays unbound",
        |pods| bound_count(pods, "waiting-") == 0,
    )
    .await;
    // ... rust-batch dies (SIGKILL) and room appears while it is down ...
    drop(rust_batch);
    fake_node(&client, &format!("{ns}-n3"), ns, node.clone()).await;
    fake_node(&client, &format!("{ns}-n4"), ns, node).await;
    holds_for(
        &client,
        ns,
        Duration::from_secs(3),
        "nothing binds without a scheduler",
        |pods| {
            bound_count(pods, "waiting-") == 0
                && placements(pods.values()) == before_scheduler_restart
        },
    )
    .await;
    // ... and the operator's objects are intact: its PodGroup and pods, unchanged.
    let waiting_pg = pod_group_named(&client, ns, "ray-waiting-pg")
        .await
        .expect("PodGroup kept");
    assert_eq!(waiting_pg.spec.min_member, Some(3));
    // A new rust-batch binds the waiting gang whole and leaves the running ones alone.
    let (_rust_batch, _port) = start_ready_scheduler(VOLCANO, &[]).await;
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(60),
        "`waiting` bound whole after the scheduler restart",
        |pods| all_running(pods, "waiting-", 3).then(|| pods.clone()),
    )
    .await;
    let after = placements(pods.values());
    for (name, placed) in &before_scheduler_restart {
        assert_eq!(
            after.get(name),
            Some(placed),
            "{name} disturbed by the scheduler restart"
        );
    }
    let pg = pod_group_named(&client, ns, "ray-waiting-pg")
        .await
        .unwrap();
    assert_eq!(
        pg.metadata.uid, waiting_pg.metadata.uid,
        "PodGroup replaced across the scheduler restart"
    );
    assert!(
        operator.running(),
        "KubeRay exited:\n{}",
        operator.log_tail(40)
    );
}

// ---------------------------------------------------------------------------------------
// Spark operator
// ---------------------------------------------------------------------------------------

const SPARK_APPLICATION: (&str, &str, &str) =
    ("sparkoperator.k8s.io", "v1beta2", "SparkApplication");

/// The Spark operator installed for namespace `ns` as its Helm chart (the module's
/// charts/spark-operator-chart) installs it with `spark.jobNamespaces: [ns]`,
/// `controller.batchScheduler.enable: true` and no webhook: its CRDs, and from the chart's
/// render every RBAC object (the controller's ServiceAccount, ClusterRole — with the Volcano
/// PodGroup rule the batch scheduler needs — and Role, the Spark driver's ServiceAccount
/// and Role in `ns`, their bindings). Returns a kubeconfig with a token of the controller's
/// ServiceAccount. (config/rbac/role.yaml of v2.5.0 is not an installable alternative: its
/// core-group rules have no apiGroups, which the API server refuses.)
async fn install_spark_operator(client: &Client, spark: &Built, ns: &str) -> PathBuf {
    install_operator_crds(client, &spark.src.join("charts/spark-operator-chart/crds")).await;
    let out = std::process::Command::new(helm())
        .args(["template", "spark-operator"])
        .arg(spark.src.join("charts/spark-operator-chart"))
        .args(["--namespace", ns])
        .args(["--set", &format!("spark.jobNamespaces={{{ns}}}")])
        .args(["--set", "controller.batchScheduler.enable=true"])
        .args(["--set", "webhook.enable=false"])
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template of the Spark operator's chart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).unwrap();
    let mut account = None;
    for doc in rust_batch::yaml::from_str_multiple::<Value>(&rendered).unwrap() {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if ![
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
        .contains(&kind)
        {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        if kind == "ServiceAccount" && name.ends_with("-controller") {
            account = Some(name);
        }
        apply(&doc);
    }
    let account = account.expect("the chart renders the controller's ServiceAccount");
    service_account_token_kubeconfig(ns, &account)
}

/// A kubeconfig that authenticates as ServiceAccount `namespace/name` with a token of its own
/// (TokenRequest, as a pod's projected token). Not `impersonating_kubeconfig`: Spark's
/// Kubernetes client (fabric8, built by SparkKubernetesClientFactory) drops a kubeconfig's
/// impersonation (`as`, `as-groups`), so spark-submit would act as the cluster admin; with
/// a token both the operator and the spark-submit it runs act as its ServiceAccount, as in
/// a pod. (Checked: spark-submit with such a token for an account without RBAC is refused
/// `pods is forbidden`; with impersonation it created the driver pod.)
fn service_account_token_kubeconfig(namespace: &str, name: &str) -> PathBuf {
    let token = kubectl_admin(
        &["create", "token", name, "-n", namespace, "--duration=2h"],
        "",
    );
    let admin = std::env::var("KUBECONFIG").expect("KUBECONFIG is set by with-cluster.sh");
    let mut config: serde_json::Value =
        rust_batch::yaml::from_str(&std::fs::read_to_string(&admin).unwrap()).unwrap();
    for user in config["users"].as_array_mut().expect("users") {
        user["user"] = serde_json::to_value(json!({"token": token.trim()})).unwrap();
    }
    let path = std::env::temp_dir().join(format!(
        "rb-token-{namespace}-{name}-{}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(&path, rust_batch::yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// The Spark operator's controller (`controller start`, as its chart runs it) for `ns`,
/// with the batch scheduler on, no leader election and no webhook (the webhook is the
/// separate `webhook start` process, not run here). spark-submit finds the API server the
/// way it does in a pod (KUBERNETES_SERVICE_HOST/PORT, the operator's master URL) and
/// authenticates with the operator's kubeconfig (its ServiceAccount's token).
async fn start_spark_operator(spark: &Built, kubeconfig: &Path, ns: &str) -> Operator {
    let spark_home = operators::report_field("spark-operator", "SPARK_HOME");
    let api = std::env::var("RB_APISERVER_URL")
        .expect("RB_APISERVER_URL is exported by tests/cluster/with-cluster.sh");
    let host_port = api.trim_start_matches("https://");
    let (host, port) = host_port
        .rsplit_once(':')
        .expect("RB_APISERVER_URL has a port");
    // spark-defaults.conf for the submission client: the API server's own serving
    // certificate (self-signed by kube-apiserver in the cluster's cert dir) is the CA,
    // as a pod's service-account CA would be in a cluster.
    let conf_dir = temp_dir(&format!("spark-conf-{ns}"));
    let cluster = std::env::var("RB_CLUSTER_DIR")
        .expect("RB_CLUSTER_DIR is exported by tests/cluster/with-cluster.sh");
    let ca = Path::new(&cluster).join("apiserver-certs/apiserver.crt");
    assert!(
        ca.exists(),
        "{} (the API server's certificate) missing",
        ca.display()
    );
    std::fs::write(
        conf_dir.join("spark-defaults.conf"),
        format!(
            "spark.kubernetes.authenticate.submission.caCertFile {}\n",
            ca.display()
        ),
    )
    .unwrap();
    let probe = free_port();
    let args = [
        "controller".to_string(),
        "start".to_string(),
        format!("--namespaces={ns}"),
        "--enable-batch-scheduler=true".to_string(),
        "--leader-election=false".to_string(),
        format!("--health-probe-bind-address=127.0.0.1:{probe}"),
        "--metrics-bind-address=0".to_string(),
        "--controller-threads=4".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let conf_dir_text = conf_dir.display().to_string();
    let mut operator = Operator::start(
        "spark-operator",
        &spark.bin,
        &args,
        kubeconfig,
        &temp_dir(&format!("spark-operator-{ns}")),
        &[
            ("SPARK_HOME", spark_home.as_str()),
            ("SPARK_CONF_DIR", conf_dir_text.as_str()),
            ("KUBERNETES_SERVICE_HOST", host),
            ("KUBERNETES_SERVICE_PORT", port),
        ],
    );
    operator
        .wait_probe(probe, "/healthz", Duration::from_secs(60))
        .await;
    operator
}

/// A SparkApplication as a user writes it for Volcano (`batchScheduler: volcano`, `queue`),
/// in the test's pool.
fn spark_application(
    ns: &str,
    name: &str,
    queue: &str,
    executors: u32,
    executor_cores: u32,
) -> Value {
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.1",
            "image": "docker.io/library/spark:4.0.1",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "batchScheduler": VOLCANO,
            "batchSchedulerOptions": {"queue": queue},
            "nodeSelector": {"pool": ns},
            // The operator's pod webhook (not run here) is what puts spec.batchScheduler
            // into the pods' schedulerName; without it the user says it in Spark's own
            // conf, which spark-submit applies to the driver and the driver to executors.
            "sparkConf": {"spark.kubernetes.scheduler.name": VOLCANO},
            "driver": {"cores": 1, "memory": "1G", "serviceAccount": "spark-operator-spark"},
            "executor": {"instances": executors, "cores": executor_cores, "memory": "1G"}
        }
    })
}

/// spark.properties of the driver: the conf spark-submit wrote into the ConfigMap it
/// mounts into the driver pod (what the driver JVM reads at start).
async fn driver_conf(client: &Client, ns: &str, driver: &Pod) -> BTreeMap<String, String> {
    let spec = driver.spec.as_ref().unwrap();
    let mut seen = vec![];
    let mut properties = None;
    for name in spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()))
    {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(&name)
            .await
            .expect("the driver's ConfigMap (created by spark-submit)");
        let data = cm.data.unwrap_or_default();
        seen.push(format!("{name}: {:?}", data.keys().collect::<Vec<_>>()));
        if let Some(text) = data.get("spark.properties") {
            properties = Some(text.clone());
        }
    }
    let properties = properties
        .unwrap_or_else(|| panic!("no spark.properties in the driver's ConfigMaps: {seen:?}"));
    // java.util.Properties as Spark writes it: key=value lines, `\:` and `\=` escaped.
    properties
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            let unescape = |s: &str| {
                s.replace("\\:", ":")
                    .replace("\\=", "=")
                    .replace("\\\\", "\\")
            };
            (unescape(k.trim()), unescape(v.trim()))
        })
        .collect()
}

/// Creates executor `id` as Spark's driver does (KubernetesClusterSchedulerBackend →
/// BasicExecutorFeatureStep): named `<podNamePrefix>-exec-<id>`, labelled spark-app-selector /
/// spark-exec-id / spark-role=executor / spark-exec-resourceprofile-id plus every
/// `spark.kubernetes.executor.label.*`, annotated with every
/// `spark.kubernetes.executor.annotation.*` (the operator's Volcano group annotation among
/// them), scheduled by `spark.kubernetes.scheduler.name`, placed by
/// `spark.kubernetes.node.selector.*`, requesting spark.executor.cores and executor memory +
/// overhead (max(384 MiB, 10 %)), and owned by the driver pod.
async fn create_executor(
    client: &Client,
    ns: &str,
    driver: &Pod,
    conf: &BTreeMap<String, String>,
    id: u32,
) -> String {
    let app_id = driver.metadata.labels.as_ref().unwrap()["spark-app-selector"].clone();
    let prefix = executor_pod_name_prefix(conf);
    let name = format!("{prefix}-exec-{id}");
    let mut labels = json!({
        "spark-app-selector": app_id, "spark-exec-id": id.to_string(),
        "spark-role": "executor", "spark-exec-resourceprofile-id": "0",
    });
    if let Some(app_name) = driver
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .get("spark-app-name")
    {
        labels["spark-app-name"] = app_name.clone().into();
    }
    let mut annotations = json!({});
    let mut node_selector = json!({});
    for (k, v) in conf {
        if let Some(l) = k.strip_prefix("spark.kubernetes.executor.label.") {
            labels[l] = v.clone().into();
        } else if let Some(a) = k.strip_prefix("spark.kubernetes.executor.annotation.") {
            annotations[a] = v.clone().into();
        } else if let Some(s) = k.strip_prefix("spark.kubernetes.node.selector.") {
            node_selector[s] = v.clone().into();
        } else if let Some(s) = k.strip_prefix("spark.kubernetes.executor.node.selector.") {
            node_selector[s] = v.clone().into();
        }
    }
    let scheduler = conf
        .get("spark.kubernetes.executor.scheduler.name")
        .or_else(|| conf.get("spark.kubernetes.scheduler.name"))
        .cloned();
    let cores = conf
        .get("spark.executor.cores")
        .cloned()
        .unwrap_or_else(|| "1".into());
    let memory_mib = spark_memory_mib(
        conf.get("spark.executor.memory")
            .map_or("1g", String::as_str),
    );
    let overhead_mib = (memory_mib / 10).max(384);
    let memory = format!("{}Mi", memory_mib + overhead_mib);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": ns, "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "controller": true,
                                 "name": driver.metadata.name, "uid": driver.metadata.uid}]
        },
        "spec": {
            "schedulerName": scheduler, "nodeSelector": node_selector,
            "hostname": name, "restartPolicy": "Never",
            "containers": [{"name": "spark-kubernetes-executor",
                            "image": conf.get("spark.kubernetes.container.image"),
                            "args": ["executor"],
                            "resources": {"requests": {"cpu": cores, "memory": memory},
                                          "limits": {"memory": memory}}}]
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("executor pod created");
    name
}

/// The executors' pod name prefix: `spark.kubernetes.executor.podNamePrefix`, else what the
/// driver sets it to at start (KubernetesClusterManager → KubernetesConf.getResourceNamePrefix
/// of spark.app.name): `<app name>-<uniqueID>`, uniqueID = 3 random bytes in hex (here: from the clock and pid) then
/// the low 40 bits of the clock in milliseconds in hex, then lowercased and reduced to a DNS
/// label. Computed once per driver, as Spark does.
fn executor_pod_name_prefix(conf: &BTreeMap<String, String>) -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(p) = conf.get("spark.kubernetes.executor.podNamePrefix") {
        return p.clone();
    }
    PREFIX
        .get_or_init(|| {
            let app = conf
                .get("spark.app.name")
                .expect("spark.app.name in the driver's conf");
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let random = (nanos.subsec_nanos() ^ std::process::id()) & 0xFF_FFFF;
            let millis = nanos.as_millis() as u64 & 0xFF_FFFF_FFFF;
            let raw = format!("{app}-{random:06x}{millis:x}")
                .trim()
                .to_lowercase();
            let mut name = String::new();
            for c in raw.chars() {
                let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                    c
                } else {
                    '-'
                };
                if !(c == '-' && name.ends_with('-')) {
                    name.push(c);
                }
            }
            let name = name.trim_start_matches('-').to_string();
            match name.chars().next() {
                Some(c) if c.is_ascii_digit() => format!("x{}", &name[1..]),
                _ => name,
            }
        })
        .clone()
}

/// Spark's memory strings (JavaUtils.byteStringAsMb): a number with an optional
/// k/m/g/t suffix (binary units); MiB.
fn spark_memory_mib(text: &str) -> u64 {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("Spark memory {text}"));
    match unit {
        "k" => n / 1024,
        "" | "m" => n,
        "g" => n * 1024,
        "t" => n * 1024 * 1024,
        other => panic!("Spark memory unit {other} in {text}"),
    }
}

async fn spark_app_state(client: &Client, ns: &str, name: &str) -> Option<(String, Value)> {
    let app = dynamic_api(client, ns, SPARK_APPLICATION, "sparkapplications")
        .get(name)
        .await
        .ok()?;
    let status = app.data["status"].clone();
    Some((
        status["applicationState"]["state"].as_str()?.to_string(),
        status,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_operator_podgroup_covers_driver_and_executors_and_gates_the_driver_on_them() {
    let _volcano = operators::volcano_name_lock();
    let client = client().await;
    install_crds(&client).await;
    let spark = operators::built("spark-operator");
    let ns = "e2e-spark";
    namespace(&client, ns).await;
    let kubeconfig = install_spark_operator(&client, &spark, ns).await;
    // Room on the nodes for everything; what gates the application is its queue. (Admission
    // by minResources against the nodes is cluster-wide, as in Volcano, and the other
    // tests' nodes share this cluster: a queue's capability is this test's alone.) 4 cpu:
    // the driver (1 cpu) would fit, the application (1 + 2 × 2 cpu) does not.
    let queue = "e2e-spark";
    apply(
        &json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                  "metadata": {"name": queue}, "spec": {"weight": 1, "capability": {"cpu": "4"}}}),
    );
    fake_node(
        &client,
        &format!("{ns}-n1"),
        ns,
        json!({"cpu": "8", "memory": "32Gi"}),
    )
    .await;
    let (_rust_batch, _port) = start_ready_scheduler(VOLCANO, &[]).await;
    let mut operator = start_spark_operator(&spark, &kubeconfig, ns).await;

    apply(&spark_application(ns, "pi", queue, 2, 2));
    // The operator's PodGroup: one member (the driver first), minResources the driver's
    // cores + memory and the executors' (instances × cores, instances × memory; the
    // operator reads Spark's "1G" as a Kubernetes quantity, 10^9 bytes, where Spark means
    // 1 GiB and adds its memory overhead to the pods).
    let pg = wait_for(
        Duration::from_secs(90),
        "the operator's PodGroup spark-pi-pg",
        || async { pod_group_named(&client, ns, "spark-pi-pg").await },
    )
    .await;
    assert_eq!(
        pg.spec.min_member,
        Some(1),
        "Spark's Volcano integration: the driver first"
    );
    assert_eq!(
        min_resources(&pg),
        resources(&[("cpu", "5"), ("memory", "3G")])
    );
    assert_eq!(
        pg.spec.queue.as_deref(),
        Some(queue),
        "batchSchedulerOptions.queue"
    );
    let owner = &pg.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("SparkApplication", "pi")
    );

    // spark-submit (a JVM) creates the driver pod: the group annotation and scheduler come
    // through Spark's conf.
    let driver = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(120),
        "the driver pod from spark-submit",
        |pods| pods.get("pi-driver").cloned(),
    )
    .await;
    assert_eq!(group_of(&driver), Some("spark-pi-pg"));
    assert_eq!(
        driver.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some(VOLCANO)
    );
    assert_eq!(
        driver.metadata.labels.as_ref().unwrap()["spark-role"],
        "driver"
    );
    // The queue cannot hold the application's 5 cpu: the driver is not admitted, though it
    // alone would fit.
    holds_for(
        &client,
        ns,
        Duration::from_secs(5),
        "the driver waits",
        |pods| bound_count(pods, "pi-driver") == 0,
    )
    .await;
    wait_for(
        Duration::from_secs(20),
        "the driver's PodScheduled=False NotAdmitted",
        || async {
            let p = Api::<Pod>::namespaced(client.clone(), ns)
                .get("pi-driver")
                .await
                .ok()?;
            p.status?
                .conditions?
                .iter()
                .any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("NotAdmitted")
                })
                .then_some(())
        },
    )
    .await;

    // Room for the whole application: the driver binds and the operator sees it run.
    kubectl_admin(
        &[
            "patch",
            "queues.scheduling.volcano.sh",
            queue,
            "--type=merge",
            "-p",
            r#"{"spec":{"capability":{"cpu":"8"}}}"#,
        ],
        "",
    );
    let driver = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(45),
        "the driver running",
        |pods| {
            pods.get("pi-driver")
                .filter(|p| phase(p) == "Running")
                .cloned()
        },
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "SparkApplication RUNNING",
        || async {
            let (state, _) = spark_app_state(&client, ns, "pi").await?;
            (state == "RUNNING").then_some(())
        },
    )
    .await;

    // The operator restarts mid-run: it neither submits again nor touches the PodGroup or
    // the bound driver, and rust-batch carries on.
    operator.stop(Duration::from_secs(10));
    let mut operator = start_spark_operator(&spark, &kubeconfig, ns).await;
    holds_for(
        &client,
        ns,
        Duration::from_secs(4),
        "the driver stays as it was",
        |pods| {
            pods.len() == 1
                && pods.get("pi-driver").is_some_and(|p| {
                    p.metadata.uid == driver.metadata.uid
                        && node_of(p) == node_of(&driver)
                        && phase(p) == "Running"
                })
        },
    )
    .await;
    let after = pod_group_named(&client, ns, "spark-pi-pg")
        .await
        .expect("PodGroup kept");
    assert_eq!(
        after.metadata.uid, pg.metadata.uid,
        "PodGroup replaced by the restarted operator"
    );
    let (state, status) = spark_app_state(&client, ns, "pi").await.unwrap();
    assert_eq!(state, "RUNNING");
    assert_eq!(
        status["submissionAttempts"], 1,
        "submitted again after the restart: {status}"
    );

    // The test plays the driver JVM: it asks for its two executors as Spark would.
    let conf = driver_conf(&client, ns, &driver).await;
    let mut executors = vec![];
    for id in 1..=2 {
        executors.push(create_executor(&client, ns, &driver, &conf, id).await);
    }
    let pods = poll_until(
        &client,
        ns,
        &mut operator,
        Duration::from_secs(45),
        "both executors running",
        |pods| {
            executors
                .iter()
                .all(|e| pods.get(e).is_some_and(|p| phase(p) == "Running"))
                .then(|| pods.clone())
        },
    )
    .await;
    for e in &executors {
        let p = &pods[e];
        assert_eq!(
            group_of(p),
            Some("spark-pi-pg"),
            "{e}: the operator's group annotation"
        );
        assert_eq!(
            p.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some(VOLCANO)
        );
    }
    // The operator tracks them as its application's executors.
    wait_for(
        Duration::from_secs(60),
        "executorState: both RUNNING",
        || async {
            let (_, status) = spark_app_state(&client, ns, "pi").await?;
            let states = status["executorState"].as_object()?;
            (executors
                .iter()
                .all(|e| states.get(e).and_then(Value::as_str) == Some("RUNNING")))
            .then_some(())
        },
    )
    .await;

    // The application ends: the driver stops its executors and exits 0 (kwok completes the
    // pod); the operator marks it COMPLETED and deletes its PodGroup.
    for e in &executors {
        Api::<Pod>::namespaced(client.clone(), ns)
            .delete(e, &DeleteParams::default())
            .await
            .expect("executor deleted");
    }
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            "pi-driver",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rust-batch.io/runtime": "0s"}}})),
        )
        .await
        .expect("driver finishes");
    wait_for(
        Duration::from_secs(60),
        "SparkApplication COMPLETED",
        || async {
            let (state, _) = spark_app_state(&client, ns, "pi").await?;
            (state == "COMPLETED").then_some(())
        },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the operator deletes its PodGroup",
        || async {
            pod_group_named(&client, ns, "spark-pi-pg")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        operator.running(),
        "the Spark operator exited:\n{}",
        operator.log_tail(40)
    );
    // The queue is this test's alone; other tests share this cluster and its queues'
    // shares.
    kubectl_admin(&["delete", "queues.scheduling.volcano.sh", queue], "");
}
