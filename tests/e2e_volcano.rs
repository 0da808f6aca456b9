//! End-to-end on a real control plane (kube-apiserver + etcd + kwok, started by
//! tests/cluster/with-cluster.sh from tests/run.sh): S1 and S2 of SCENARIOS.md through
//! Volcano PodGroups, with the two invariants checked on every poll. Without a cluster this
//! test fails; it never skips.

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::convert::{node_to_spec, pod_to_update};
use rust_batch::kube::crd::{crd_files, PodGroup};
use rust_batch::model::Resource;
use serde_json::json;

struct Scheduler(Child);

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn client() -> Client {
    let path = std::env::var("KUBECONFIG").expect(
        "KUBECONFIG is not set: e2e tests need the test control plane; run tests/run.sh, which starts it",
    );
    assert!(
        std::path::Path::new(&path).exists(),
        "KUBECONFIG {path} does not exist"
    );
    Client::try_default().await.expect("kubeconfig loads")
}

async fn install_crds(client: &Client) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for (_, yaml) in crd_files() {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&yaml).expect("generated CRD parses");
        let name = crd.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::apply("rust-batch-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("CRD applies");
        wait_for(Duration::from_secs(30), "CRD established", || async {
            let c = api.get(&name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
}

fn start_scheduler() -> Scheduler {
    let child = Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args([
            "run",
            "--scheduler-name",
            "rust-batch",
            "--schedule-period",
            "500ms",
        ])
        .env("RUST_LOG", "info,kube=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rust-batch starts");
    Scheduler(child)
}

async fn wait_for<F, Fut, T>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn namespace(client: &Client, name: &str) {
    let api = Api::<Namespace>::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("namespace created (each run uses a fresh cluster)");
}

async fn fake_node(client: &Client, name: &str, pool: &str, alloc: serde_json::Value) {
    let mut alloc = alloc;
    alloc["pods"] = "110".into();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"pool": pool, "type": "kwok"}},
        "status": {"allocatable": alloc.clone(), "capacity": alloc}
    }))
    .unwrap();
    let api = Api::<Node>::all(client.clone());
    api.create(&PostParams::default(), &node)
        .await
        .expect("node created");
    // No node-lifecycle controller runs here: once kwok reports the node Ready, lift the
    // not-ready taint the API server put on it at creation, as that controller would.
    wait_for(Duration::from_secs(30), "node Ready", || async {
        let n = api.get(name).await.ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": []}})),
    )
    .await
    .expect("taints cleared");
}

async fn pod_group(client: &Client, ns: &str, name: &str, min: i32) {
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min, "queue": "default"}
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("podgroup created");
}

/// Where a test's pods go: its namespace and its own pool of nodes.
struct Place<'a> {
    client: &'a Client,
    ns: &'a str,
    pool: &'a str,
}

impl Place<'_> {
    async fn pod(
        &self,
        group: &str,
        name: &str,
        role: &str,
        requests: serde_json::Value,
        runtime: Option<&str>,
    ) {
        let mut annotations =
            json!({"scheduling.k8s.io/group-name": group, "volcano.sh/task-spec": role});
        if let Some(r) = runtime {
            annotations["rust-batch.io/runtime"] = r.into();
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns, "annotations": annotations},
            "spec": {
                "schedulerName": "rust-batch",
                "nodeSelector": {"pool": self.pool},
                "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests.clone(), "limits": requests}}]
            }
        }))
        .unwrap();
        Api::<Pod>::namespaced(self.client.clone(), self.ns)
            .create(&PostParams::default(), &p)
            .await
            .expect("pod created");
    }
}

/// The two invariants, from what the API server says: no gang bound partially, no node
/// holding more than its allocatable. Returns pods by name.
async fn check_invariants(client: &Client, ns: &str) -> BTreeMap<String, Pod> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut used: HashMap<String, Resource> = HashMap::new();
    for p in &pods {
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            if phase != "Succeeded" && phase != "Failed" {
                used.entry(node)
                    .or_default()
                    .add(&pod_to_update(p, None).unwrap().task.resreq);
            }
        }
    }
    for n in &nodes {
        let spec = node_to_spec(n).unwrap();
        if let Some(u) = used.get(&spec.name) {
            assert!(
                u.fits(&spec.allocatable),
                "node {} over-committed: {u} on {}",
                spec.name,
                spec.allocatable
            );
        }
    }
    let groups = Api::<PodGroup>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mine: BTreeMap<String, Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .map(|p| (p.metadata.name.clone().unwrap(), p))
        .collect();
    for g in groups {
        let name = g.metadata.name.clone().unwrap();
        let min = g.spec.min_member.unwrap_or(1) as usize;
        let placed = mine
            .values()
            .filter(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("scheduling.k8s.io/group-name"))
                    == Some(&name)
            })
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        assert!(
            placed == 0 || placed >= min,
            "gang {ns}/{name} bound partially: {placed} of min {min}"
        );
    }
    mine
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn condition_message(client: &Client, ns: &str, name: &str) -> Option<String> {
    let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    pg.status?
        .conditions?
        .into_iter()
        .find(|c| {
            c.type_.as_ref().map(|t| t.as_str()) == Some("Unschedulable")
                && c.status.as_deref() == Some("True")
        })
        .and_then(|c| c.message)
}

async fn s1(client: &Client) {
    let (ns, pool) = ("e2e-s1", "e2e-s1");
    let place = Place { client, ns, pool };
    namespace(client, ns).await;
    let gpu_node = json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"});
    fake_node(client, "s1-n1", pool, gpu_node.clone()).await;
    fake_node(client, "s1-n2", pool, gpu_node.clone()).await;
    pod_group(client, ns, "tf-smoke-gpu", 5).await;
    place
        .pod("tf-smoke-gpu", "ps-0", "ps", json!({"cpu": "1"}), None)
        .await;
    for i in 0..4 {
        place
            .pod(
                "tf-smoke-gpu",
                &format!("worker-{i}"),
                "worker",
                json!({"nvidia.com/gpu": "2"}),
                None,
            )
            .await;
    }
    // The gang reports why it waits, and nothing binds meanwhile (not even the PS).
    let message = wait_for(
        Duration::from_secs(30),
        "S1 Unschedulable condition",
        || async {
            check_invariants(client, ns).await;
            // Until all 5 pods exist the gang is NotEnoughTasks; then it is short of GPUs.
            condition_message(client, ns, "tf-smoke-gpu")
                .await
                .filter(|m| m.contains("Insufficient"))
        },
    )
    .await;
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");
    assert!(
        message.contains("gang is short of 4 nvidia.com/gpu"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = check_invariants(client, ns).await;
    assert!(
        pods.values().all(|p| node_of(p).is_none()),
        "no S1 pod may be bound before the nodes arrive"
    );

    fake_node(client, "s1-n3", pool, gpu_node.clone()).await;
    fake_node(client, "s1-n4", pool, gpu_node).await;
    let pods = wait_for(Duration::from_secs(30), "S1 gang bound whole", || async {
        let pods = check_invariants(client, ns).await;
        pods.values().all(|p| phase(p) == "Running").then_some(pods)
    })
    .await;
    let mut worker_nodes: Vec<String> = pods
        .iter()
        .filter(|(n, _)| n.starts_with("worker"))
        .filter_map(|(_, p)| node_of(p))
        .collect();
    worker_nodes.sort();
    worker_nodes.dedup();
    assert_eq!(
        worker_nodes.len(),
        4,
        "every worker on a node with 2 free GPUs of its own"
    );
}

async fn s2(client: &Client) {
    let (ns, pool) = ("e2e-s2", "e2e-s2");
    let place = Place { client, ns, pool };
    namespace(client, ns).await;
    for i in 1..=4 {
        fake_node(
            client,
            &format!("s2-n{i}"),
            pool,
            json!({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}),
        )
        .await;
    }
    pod_group(client, ns, "job1", 4).await;
    place
        .pod("job1", "job1-ps", "ps", json!({"cpu": "1"}), Some("8s"))
        .await;
    for i in 0..3 {
        place
            .pod(
                "job1",
                &format!("job1-worker-{i}"),
                "worker",
                json!({"nvidia.com/gpu": "1"}),
                Some("8s"),
            )
            .await;
    }
    wait_for(Duration::from_secs(30), "job1 running", || async {
        let pods = check_invariants(client, ns).await;
        (pods.len() == 4 && pods.values().all(|p| phase(p) == "Running")).then_some(())
    })
    .await;
    pod_group(client, ns, "job2", 3).await;
    place
        .pod("job2", "job2-ps", "ps", json!({"cpu": "1"}), None)
        .await;
    for i in 0..2 {
        place
            .pod(
                "job2",
                &format!("job2-worker-{i}"),
                "worker",
                json!({"nvidia.com/gpu": "1"}),
                None,
            )
            .await;
    }
    // While job1 runs, job2 stays whole Pending: no PS, no worker bound.
    let message = wait_for(
        Duration::from_secs(30),
        "job2 Unschedulable condition",
        || async {
            let pods = check_invariants(client, ns).await;
            let job1_running = pods
                .iter()
                .filter(|(n, _)| n.starts_with("job1"))
                .all(|(_, p)| phase(p) == "Running");
            let job2_unbound = pods
                .iter()
                .filter(|(n, _)| n.starts_with("job2"))
                .all(|(_, p)| node_of(p).is_none());
            assert!(
                !job1_running || job2_unbound,
                "job2 bound while job1 holds the GPUs"
            );
            condition_message(client, ns, "job2")
                .await
                .filter(|m| m.contains("Insufficient"))
        },
    )
    .await;
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");
    // When job1's pods finish, job2 binds whole.
    wait_for(
        Duration::from_secs(60),
        "job2 bound whole after job1 finished",
        || async {
            let pods = check_invariants(client, ns).await;
            let job2: Vec<&Pod> = pods
                .iter()
                .filter(|(n, _)| n.starts_with("job2"))
                .map(|(_, p)| p)
                .collect();
            (job2.len() == 3 && job2.iter().all(|p| phase(p) == "Running")).then_some(())
        },
    )
    .await;
    let pods = check_invariants(client, ns).await;
    assert!(pods
        .iter()
        .filter(|(n, _)| n.starts_with("job1"))
        .all(|(_, p)| phase(p) == "Succeeded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_podgroups_s1_s2_on_a_real_control_plane() {
    let client = client().await;
    install_crds(&client).await;
    let _scheduler = start_scheduler();
    s1(&client).await;
    s2(&client).await;
}
