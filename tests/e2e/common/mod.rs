//! Helpers shared by the end-to-end tests: they talk to the real control plane started by
//! tests/cluster/with-cluster.sh (KUBECONFIG), run the real `rust-batch` binary, and check
//! the two invariants from what the API server reports.
#![allow(dead_code)] // each binary mounting it (e2e, e2e_disruptive, offline, benches) uses a subset

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::convert::{node_to_spec, pod_to_update};
use rust_batch::kube::dialects::crds::crd_files;
use rust_batch::kube::dialects::volcano::PodGroup;
use rust_batch::model::Resource;
use serde_json::json;

pub mod operators;

pub struct Scheduler(pub Child);

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn client() -> Client {
    let path = std::env::var("KUBECONFIG").expect(
        "KUBECONFIG is not set: e2e tests need the test control plane; run tests/run.sh, which starts it",
    );
    assert!(
        std::path::Path::new(&path).exists(),
        "KUBECONFIG {path} does not exist"
    );
    rust_batch::kube::client::infer()
        .await
        .expect("kubeconfig loads")
}

pub async fn install_crds(client: &Client) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for (_, yaml) in crd_files() {
        let crd: CustomResourceDefinition =
            rust_batch::yaml::from_str(&yaml).expect("generated CRD parses");
        let name = crd.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::apply("rust-batch-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("CRD applies");
        wait_crd_established(client, &name, Duration::from_secs(30)).await;
    }
}

/// Waits until the API server serves CRD `name` (its Established condition True).
pub async fn wait_crd_established(client: &Client, name: &str, timeout: Duration) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    wait_for(timeout, &format!("CRD {name} established"), || async {
        let c = api.get(name).await.ok()?;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Starts `rust-batch run` answering to `name` (each test uses its own name, namespace and
/// nodes, so tests running side by side never share pods).
pub fn start_scheduler(name: &str) -> Scheduler {
    start_scheduler_with(name, &["--http-address", "off"])
}

pub fn start_scheduler_with(name: &str, extra: &[&str]) -> Scheduler {
    spawn_scheduler(name, extra, Stdio::inherit())
}

/// Like `start_scheduler_with`, its log (stderr) going to `log`.
pub fn start_scheduler_logged(name: &str, extra: &[&str], log: &std::path::Path) -> Scheduler {
    let file = std::fs::File::create(log).expect("log file");
    spawn_scheduler(name, extra, Stdio::from(file))
}

/// `rust-batch run` answering to `name` with its HTTP endpoints on a free port, once
/// /readyz says every watched kind is listed; returns it and the port.
pub async fn start_ready_scheduler(name: &str, extra: &[&str]) -> (Scheduler, u16) {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut args = vec!["--http-address", address.as_str()];
    args.extend_from_slice(extra);
    let scheduler = start_scheduler_with(name, &args);
    wait_for(Duration::from_secs(60), "rust-batch /readyz", || async {
        http_get(port, "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    (scheduler, port)
}

/// The chart rendered now with its default values (deploy/render.sh, helm built by
/// tests/cluster/build-helm.sh and cached): what deploy/rust-batch.yaml must equal.
pub fn rendered_manifests() -> &'static str {
    static RENDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RENDER.get_or_init(|| script_stdout("deploy/render.sh", "helm template of the chart"))
}

/// Runs a script of this repository (`path` from its root; its stderr shown) and returns
/// what it printed; panics naming `what` failed if it fails.
pub fn script_stdout(path: &str, what: &str) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{path} does not run: {e}"));
    assert!(out.status.success(), "{path} failed: {what}");
    String::from_utf8(out.stdout).unwrap_or_else(|_| panic!("{path} printed non-UTF-8"))
}

/// The value of the last `KEY=value` line of a script's report (build scripts print them
/// last).
pub fn report_value(report: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    report
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// `kubectl` (the one tests/cluster built, first on PATH under with-cluster.sh) as the
/// cluster admin, `stdin` piped in; panics with its stderr unless it succeeds.
pub fn kubectl_admin(args: &[&str], stdin: &str) -> String {
    use std::io::Write;
    let admin = std::env::var("KUBECONFIG")
        .expect("KUBECONFIG is not set: run tests/run.sh, which starts the control plane");
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let mut child = Command::new(&kubectl)
        .args(args)
        .env("KUBECONFIG", &admin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A kubeconfig that acts as the scheduler's ServiceAccount (impersonation), after the
/// chart's render (namespace, ServiceAccount, ClusterRole, bindings, fence) is applied to
/// the cluster with kubectl: every e2e scheduler runs with exactly the permissions the chart
/// ships, so a missing one fails a test instead of hiding behind cluster admin.
pub fn scheduler_kubeconfig() -> &'static std::path::Path {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        kubectl_admin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            rendered_manifests(),
        );
        impersonating_kubeconfig("rust-batch-system", "rust-batch")
    })
}

/// A kubeconfig (written once per call under the temp dir) that acts as the ServiceAccount
/// `namespace/name` through impersonation of the admin's credentials: a component started
/// with it has exactly the permissions bound to that account.
pub fn impersonating_kubeconfig(namespace: &str, name: &str) -> std::path::PathBuf {
    let admin = std::env::var("KUBECONFIG")
        .expect("KUBECONFIG is not set: run tests/run.sh, which starts the control plane");
    let mut config: serde_json::Value =
        rust_batch::yaml::from_str(&std::fs::read_to_string(&admin).unwrap()).unwrap();
    for user in config["users"].as_array_mut().expect("users") {
        user["user"]["as"] = format!("system:serviceaccount:{namespace}:{name}").into();
        user["user"]["as-groups"] = serde_json::to_value([
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_string(),
        ])
        .unwrap();
    }
    let path = std::env::temp_dir().join(format!(
        "rb-{namespace}-{name}-{}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(&path, rust_batch::yaml::to_string(&config).unwrap()).unwrap();
    path
}

fn spawn_scheduler(name: &str, extra: &[&str], stderr: Stdio) -> Scheduler {
    // RB_SCHEDULER_BIN runs the suite against another build (an older one, to show a test
    // catches what a change fixed).
    let bin = std::env::var("RB_SCHEDULER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rust-batch").to_string());
    let child = Command::new(bin)
        .args([
            "run",
            "--scheduler-name",
            name,
            "--schedule-period",
            "500ms",
        ])
        .args(extra)
        .env("KUBECONFIG", scheduler_kubeconfig())
        // Events name the instance that sent them (reportingInstance), as the Deployment's
        // pod name does: several schedulers of one test binary stay apart.
        .env("POD_NAME", name)
        .env(
            "RUST_LOG",
            "info,kube=warn,kube_client=error,kube_client::client::builder=off",
        )
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("rust-batch starts");
    Scheduler(child)
}

pub async fn wait_for<F, Fut, T>(timeout: Duration, what: &str, mut f: F) -> T
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

/// kube-controller-manager running only `controllers` (comma-separated), with feature
/// `gates` (empty: none), as Kubernetes' own component (the admin kubeconfig): one instance,
/// no serving port (tests run side by side). Killed when dropped; `tied`: also when the
/// test process exits, for one kept in a static and shared by a test binary's tests.
pub fn controller_manager(
    name: &str,
    controllers: &str,
    gates: &str,
    tied: bool,
) -> operators::Operator {
    let bin_dir = std::env::var("K8S_BIN_DIR")
        .expect("K8S_BIN_DIR is not set: run tests/run.sh, which starts the control plane");
    let kubeconfig = std::env::var("KUBECONFIG")
        .expect("KUBECONFIG is not set: run tests/run.sh, which starts the control plane");
    let bin = std::path::Path::new(&bin_dir).join("kube-controller-manager");
    let mut args = vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--controllers={controllers}"),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ];
    if !gates.is_empty() {
        args.push(format!("--feature-gates={gates}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let start = if tied {
        operators::Operator::start_tied
    } else {
        operators::Operator::start
    };
    start(
        name,
        &bin,
        &args,
        std::path::Path::new(&kubeconfig),
        &std::env::temp_dir(),
        &[],
    )
}

/// kube-controller-manager's Job controller (`controller_manager`, named `name`, with
/// feature `gates`), while it holds the test binary's one turn to run a Job controller: two
/// would each make pods for the same Job, and every Job of the cluster is theirs. Killed,
/// then the turn passed on, when dropped.
pub struct JobController {
    // Dropped first: the process is gone before the next test's starts.
    pub process: operators::Operator,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// Waits for the turn to run a Job controller (`JobController`), then starts it.
pub async fn job_controller(name: &str, gates: &str) -> JobController {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    JobController {
        process: controller_manager(name, "job-controller", gates, false),
        _turn: turn,
    }
}

pub async fn namespace(client: &Client, name: &str) {
    let api = Api::<Namespace>::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("namespace created (each run uses a fresh cluster)");
}

pub async fn fake_node(client: &Client, name: &str, pool: &str, alloc: serde_json::Value) {
    fake_node_labelled(client, name, pool, alloc, json!({})).await
}

/// Waits until kwok reports node `name` Ready (its status filled in).
pub async fn wait_node_ready(client: &Client, name: &str, timeout: Duration) {
    let api = Api::<Node>::all(client.clone());
    wait_for(timeout, "node Ready", || async {
        let n = api.get(name).await.ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// A kwok node of `pool` labelled as a kubelet labels its node (`kubernetes.io/hostname`),
/// plus `labels` (zones, racks).
pub async fn fake_node_labelled(
    client: &Client,
    name: &str,
    pool: &str,
    alloc: serde_json::Value,
    labels: serde_json::Value,
) {
    let mut alloc = alloc;
    alloc["pods"] = "110".into();
    let mut all_labels = json!({"pool": pool, "type": "kwok", "kubernetes.io/hostname": name});
    for (k, v) in labels.as_object().into_iter().flatten() {
        all_labels[k] = v.clone();
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": all_labels},
        "status": {"allocatable": alloc.clone(), "capacity": alloc}
    }))
    .unwrap();
    let api = Api::<Node>::all(client.clone());
    api.create(&PostParams::default(), &node)
        .await
        .expect("node created");
    // No node-lifecycle controller runs here: once kwok reports the node Ready, lift the
    // not-ready taint the API server put on it at creation, as that controller would.
    wait_node_ready(client, name, Duration::from_secs(30)).await;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": []}})),
    )
    .await
    .expect("taints cleared");
}

pub async fn pod_group(client: &Client, ns: &str, name: &str, min: i32) {
    pod_group_in(client, ns, name, min, "default").await
}

pub async fn pod_group_in(client: &Client, ns: &str, name: &str, min: i32, queue: &str) {
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min, "queue": queue}
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("podgroup created");
}

/// Where a test's pods go: its namespace and its own pool of nodes.
pub struct Place<'a> {
    pub client: &'a Client,
    pub ns: &'a str,
    pub pool: &'a str,
    pub scheduler: &'a str,
}

impl Place<'_> {
    /// A pod of this place with the given labels and annotations (any gang dialect).
    pub async fn raw_pod(
        &self,
        name: &str,
        labels: serde_json::Value,
        annotations: serde_json::Value,
        requests: serde_json::Value,
    ) {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns, "labels": labels, "annotations": annotations},
            "spec": {
                "schedulerName": self.scheduler,
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

    pub async fn pod(
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
        self.raw_pod(name, json!({}), annotations, requests).await
    }
}

/// `rust-batch explain GANG` against the scheduler serving on `port`: its output (fails the
/// test if the command fails).
pub fn explain(port: u16, gang: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args([
            "explain",
            gang,
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The two invariants, from what the API server says: no gang bound partially, no node
/// holding more than its allocatable. Returns pods by name.
pub async fn check_invariants(client: &Client, ns: &str) -> BTreeMap<String, Pod> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_not_over_committed(client, &pods).await;
    let mine: BTreeMap<String, Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .map(|p| (p.metadata.name.clone().unwrap(), p))
        .collect();
    // Binding a gang is one API call per pod, so for a moment an observer can see part of a
    // gang bound while the rest of its binds are in flight. A gang that still looks partial
    // after the binds have had time to land was bound partially: fail.
    let partial = partial_gangs(client, ns).await;
    if !partial.is_empty() {
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (gang, placed, min) in partial_gangs(client, ns).await {
            assert!(
                !partial.iter().any(|(g, _, _)| *g == gang),
                "gang {ns}/{gang} bound partially: {placed} of min {min}"
            );
        }
    }
    mine
}

/// Fails if any node holds more than its allocatable, counting every pod bound to it
/// whoever scheduled it (finished pods hold nothing).
pub async fn assert_not_over_committed(client: &Client, pods: &[Pod]) {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut used: HashMap<String, Resource> = HashMap::new();
    for p in pods {
        let phase = phase(p);
        if let Some(node) = node_of(p) {
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
}

/// The current pid of a control-plane process (`APISERVER_PID`, `ETCD_PID`): the last line
/// for it in the cluster's env file (tests/cluster/restart.sh appends a new one).
pub fn cluster_pid(var: &str) -> String {
    let dir = std::env::var("RB_CLUSTER_DIR")
        .expect("RB_CLUSTER_DIR is exported by tests/cluster/with-cluster.sh; run tests/run.sh");
    let env = std::fs::read_to_string(format!("{dir}/env")).expect("the cluster's env file");
    env.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{var}=")))
        .unwrap_or_else(|| panic!("{var} not in {dir}/env"))
        .to_string()
}

/// A process's resident memory, MiB (0 if it is gone).
pub fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The PodGroup's Unschedulable condition, whatever its status.
pub async fn unschedulable_condition(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<rust_batch::kube::dialects::volcano::api::PodGroupCondition> {
    let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    pg.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_.as_ref().map(|t| t.as_str()) == Some("Unschedulable"))
}

/// The message of the PodGroup's Unschedulable condition while it holds (status True).
pub async fn condition_message(client: &Client, ns: &str, name: &str) -> Option<String> {
    unschedulable_condition(client, ns, name)
        .await
        .filter(|c| c.status.as_deref() == Some("True"))
        .and_then(|c| c.message)
}

/// Events (events.k8s.io/v1) about a pod: (reason, note).
pub async fn pod_events(client: &Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    use k8s_openapi::api::events::v1::Event;
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Creates a pod another scheduler owns, optionally already bound to `node`.
pub async fn foreign_pod(client: &Client, ns: &str, name: &str, node: Option<&str>, cpu: &str) {
    let mut spec = json!({
        "schedulerName": "other-scheduler",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]
    });
    if let Some(n) = node {
        spec["nodeName"] = n.into();
    }
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))
            .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("foreign pod created");
}

/// Every object `api` lists, waiting out an API server that is (re)starting (429 "storage
/// is (re)initializing", 5xx, refused connections: tried again for up to 30 s, as a
/// client would); a kind the API server does not serve (404) lists as nothing. Any other
/// failure fails the test.
pub async fn list_all<K>(api: &Api<K>) -> Vec<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use rust_batch::kube::retry::Failure;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => return list.items,
            Err(e) => match Failure::of(&e) {
                Failure::NotFound => return Vec::new(),
                Failure::Transient if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await
                }
                _ => panic!("listing failed: {e}"),
            },
        }
    }
}

/// Gangs of `ns` with some but fewer than minMember pods bound: (name, bound, min). A gang
/// is any group a pod declares in any dialect; its minimum comes from its PodGroup, else
/// from the pods (kube-batch annotation, ACK labels).
pub async fn partial_gangs(client: &Client, ns: &str) -> Vec<(String, usize, usize)> {
    use rust_batch::kube::dialects::coscheduling::{SigsPodGroup, XK8sPodGroup};
    // Every PodGroup kind; where several share a name, Kubernetes' own, then Volcano's, then
    // scheduler-plugins'.
    let mut groups: HashMap<String, usize> = HashMap::new();
    let min = |m: Option<i32>| m.unwrap_or(1) as usize;
    for g in list_all(&Api::<SigsPodGroup>::namespaced(client.clone(), ns)).await {
        groups.insert(g.metadata.name.clone().unwrap(), min(g.spec.min_member));
    }
    for g in list_all(&Api::<XK8sPodGroup>::namespaced(client.clone(), ns)).await {
        groups.insert(g.metadata.name.clone().unwrap(), min(g.spec.min_member));
    }
    for g in list_all(&Api::<PodGroup>::namespaced(client.clone(), ns)).await {
        groups.insert(g.metadata.name.clone().unwrap(), min(g.spec.min_member));
    }
    // Kubernetes' own PodGroup defines a gang before every other kind (basic: no gang).
    use rust_batch::kube::dialects::native::NativePodGroup;
    for g in list_all(&Api::<NativePodGroup>::namespaced(client.clone(), ns)).await {
        let gang = g.spec.scheduling_policy.gang.as_ref();
        groups.insert(
            g.metadata.name.clone().unwrap(),
            gang.map_or(1, |g| g.min_count.max(1) as usize),
        );
    }
    let pods = list_all(&Api::<Pod>::namespaced(client.clone(), ns)).await;
    let mut gangs: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for p in &pods {
        let Ok(Some(decl)) = rust_batch::kube::dialects::pod_gang(p) else {
            continue;
        };
        let min = groups
            .get(&decl.name)
            .copied()
            .or(decl.implicit_min.map(|m| m as usize))
            .unwrap_or(1);
        let entry = gangs.entry(decl.name).or_insert((0, min));
        // A pod being deleted is on its way out (one on a node that is gone may stay
        // terminating: no kubelet, and no pod garbage collector here).
        if node_of(p).is_some() && p.metadata.deletion_timestamp.is_none() {
            entry.0 += 1;
        }
    }
    gangs
        .into_iter()
        .filter(|(_, (placed, min))| *placed > 0 && placed < min)
        .map(|(name, (placed, min))| (name, placed, min))
        .collect()
}

/// A free port on 127.0.0.1 (bound, then released for the scheduler to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET http://127.0.0.1:{port}{path}: (status code, body). Plain HTTP/1.0, no client crate.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Fake nodes `{prefix}-n{i}` for `i` in `numbers`, all of one shape, in `pool`.
pub async fn fake_nodes(
    client: &Client,
    prefix: &str,
    numbers: std::ops::RangeInclusive<usize>,
    pool: &str,
    shape: &serde_json::Value,
) {
    for i in numbers {
        fake_node(client, &format!("{prefix}-n{i}"), pool, shape.clone()).await;
    }
}

/// How many distinct nodes hold the bound pods whose names start with `prefix`.
pub fn distinct_nodes(pods: &BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter()
        .filter(|(n, _)| n.starts_with(prefix))
        .filter_map(|(_, p)| node_of(p))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

impl Place<'_> {
    /// A training job's pods: `{prefix}ps-0` (1 cpu) and `{prefix}worker-{i}`.
    pub async fn ps_and_workers(
        &self,
        group: &str,
        prefix: &str,
        workers: usize,
        worker_request: serde_json::Value,
        runtime: Option<&str>,
    ) {
        self.pod(
            group,
            &format!("{prefix}ps-0"),
            "ps",
            json!({"cpu": "1"}),
            runtime,
        )
        .await;
        for i in 0..workers {
            self.pod(
                group,
                &format!("{prefix}worker-{i}"),
                "worker",
                worker_request.clone(),
                runtime,
            )
            .await;
        }
    }
}

/// The image's UID and GID (deploy/Containerfile USER, the chart's runAsUser).
pub const IMAGE_USER: &str = "65532:65532";

/// The statically linked binary of the image (deploy/static-build.sh, built once per test
/// process; up to date, the script returns at once).
pub fn static_binary() -> &'static std::path::Path {
    static BINARY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let stdout = script_stdout("deploy/static-build.sh", "the static build");
        std::path::PathBuf::from(stdout.lines().last().expect("the binary's path").trim())
    })
}

/// A command that runs what is appended to it with `root` as its whole filesystem: as the
/// image's user under chroot(8) when root, else in a user namespace (unshare
/// --map-root-user; no network namespace, so 127.0.0.1 is the host's).
pub fn in_root(root: &std::path::Path) -> Command {
    if is_root() {
        let mut c = Command::new("chroot");
        c.arg(format!("--userspec={IMAGE_USER}")).arg(root);
        c
    } else {
        let mut c = Command::new("unshare");
        c.arg("--map-root-user")
            .arg(format!("--root={}", root.display()));
        c
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

// ----- Kubernetes' own gangs (scheduling.k8s.io/v1beta1) ----------------------------------

/// How many of `pods` are bound to a node.
pub fn bound(pods: &BTreeMap<String, Pod>) -> usize {
    pods.values().filter(|p| node_of(p).is_some()).count()
}

/// Polls for `secs` seconds that no pod of `ns` is bound (and the invariants hold).
pub async fn stays_unbound(client: &Client, ns: &str, secs: u64) {
    for _ in 0..secs * 2 {
        let pods = check_invariants(client, ns).await;
        assert_eq!(bound(&pods), 0, "{ns}: bound too early");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (45 s at most) until `ns` has exactly `n` pods, all bound (the invariants hold
/// on every poll).
pub async fn all_bound(client: &Client, ns: &str, n: usize, what: &str) -> BTreeMap<String, Pod> {
    wait_for(Duration::from_secs(45), what, || async {
        let pods = check_invariants(client, ns).await;
        (pods.len() == n && bound(&pods) == n).then_some(pods)
    })
    .await
}

/// A `scheduling.k8s.io/v1beta1` PodGroup with `spec` in namespace `ns`.
pub async fn native_group(client: &Client, ns: &str, name: &str, spec: serde_json::Value) {
    use rust_batch::kube::dialects::native::NativePodGroup;
    let pg: NativePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .unwrap();
    Api::<NativePodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("scheduling.k8s.io PodGroup created (is scheduling.k8s.io/v1beta1 served?)");
}

/// The PodGroupInitiallyScheduled condition of a native PodGroup: (status, reason, message).
pub async fn initially_scheduled(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<(String, String, String)> {
    use rust_batch::kube::dialects::native::{NativePodGroup, INITIALLY_SCHEDULED};
    let pg = Api::<NativePodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    pg.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == INITIALLY_SCHEDULED)
        .map(|c| (c.status, c.reason, c.message))
}
