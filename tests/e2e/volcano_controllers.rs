//! End-to-end with Volcano's own controller-manager (issue 36): vc-controller-manager v1.15.1,
//! built unchanged from Volcano's source (tests/cluster/operators/volcano-controllers/build.sh,
//! cached by version), runs beside rust-batch as it runs beside Volcano's scheduler in a
//! Volcano install. Users submit Volcano Jobs (`batch.volcano.sh/v1alpha1`, "vcjobs"); the
//! controller creates the PodGroup, and the pods only once rust-batch's enqueue has let the
//! PodGroup out of Pending; rust-batch binds whole gangs and writes the PodGroup's status, which
//! the controller turns into the Job's phase.
//!
//! One controller process serves every test of this module (`volcano_controllers`), killed
//! when the test binary ends. It runs the job controller and the queue controller only (why:
//! `CONTROLLERS`), as the cluster admin (it is Volcano's; rust-batch runs under the RBAC the
//! chart ships, through tests/e2e/common). No admission webhook runs, so every vcjob here is
//! written the way Volcano's mutating webhook would leave it (queue, schedulerName, maxRetry,
//! minAvailable, and each task's name, minAvailable and maxRetry set).
//!
//! The vcjobs of most tests name the scheduler `volcano`, as Volcano users' do: the tests take
//! `volcano_name_lock` and run one after another, each with its own rust-batch answering to
//! the name its vcjobs give (admission also counts every admitted gang of the cluster, so even
//! the test with `schedulerName: rust-batch` runs alone). Each test has its
//! own namespace and its own pool of kwok nodes, and runs under `guarded`, which polls every
//! second that no gang is bound partially and no node holds more than its allocatable.
//! Without a cluster these tests fail; they never skip.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::operators::{apply_paths, built, guarded, volcano_name_lock, Operator};
use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::Client;
use rust_batch::kube::dialects::volcano::{PodGroup, Queue};
use serde_json::{json, Value};

/// The controllers of vc-controller-manager that run (`--controllers`; every other one is
/// off): the job controller (vcjobs: their PodGroups and pods) and the queue controller
/// (Queue state and hierarchy: it gives every queue without a parent `spec.parent: root`),
/// the two a Volcano user's jobs go through. Not the pg-controller: it makes a PodGroup for
/// every pod of ours without one in any namespace, which would change what the other
/// tests' bare pods are (gangs of one). Not the jobflow, jobtemplate, cronjob, gc,
/// hypernode, colocation or sharding controllers: no test here uses their objects, and the
/// hypernode controller would manage the HyperNodes of the topology tests.
const CONTROLLERS: &str = "job-controller,queue-controller";
/// Volcano's CRDs the two controllers' informers wait for (read from the extracted source).
/// The job controller watches jobs, commands, PodGroups and Queues (and pods, PVCs,
/// Services, PriorityClasses), the queue controller Queues, PodGroups and commands.
/// PodGroups and Queues are rust-batch's own CRDs (crds/, `install_crds`).
const VOLCANO_CRDS: [(&str, &str); 2] = [
    ("batch.volcano.sh_jobs.yaml", "jobs.batch.volcano.sh"),
    ("bus.volcano.sh_commands.yaml", "commands.bus.volcano.sh"),
];
/// What the job controller logs once every informer it waits for has synced.
const JOB_CONTROLLER_RUNNING: &str = "JobController is running";
/// The image of every vcjob's pods: kwok never pulls it.
const IMAGE: &str = "registry.invalid/vcjob-e2e:never-pulled";

// ---------------------------------------------------------------------------------------
// Volcano's controllers, once per test binary
// ---------------------------------------------------------------------------------------

struct VolcanoControllers {
    process: Mutex<Operator>,
    version: String,
}

static VOLCANO_CONTROLLERS: tokio::sync::OnceCell<VolcanoControllers> =
    tokio::sync::OnceCell::const_new();

/// The controller-manager of this test binary: built (or found cached), its CRDs and
/// rust-batch's installed, started once and tied to this process (it ends with it), and
/// running its job controller (every informer synced). Each test then checks it is healthy.
async fn volcano_controllers(client: &Client) -> &'static VolcanoControllers {
    let controllers = VOLCANO_CONTROLLERS
        .get_or_init(|| async {
            let built = built("volcano-controllers");
            // PodGroups and Queues first: the controller's informers list them at start.
            install_crds(client).await;
            let bases = built.src.join("installer/helm/chart/volcano/crd/bases");
            for (file, crd) in VOLCANO_CRDS {
                apply_paths(&[&bases.join(file)]);
                wait_crd_established(client, crd, Duration::from_secs(60)).await;
            }
            let admin = std::env::var("KUBECONFIG")
                .expect("KUBECONFIG is not set: run tests/run.sh, which starts the control plane");
            let args = [
                format!("--kubeconfig={admin}"),
                // One instance per test binary: no Lease needed.
                "--leader-elect=false".into(),
                format!("--controllers={CONTROLLERS}"),
                // The names rust-batch answers to here. Only the pg-controller (off) reads
                // them; the job controller copies each Job's own spec.schedulerName into its
                // pods.
                "--scheduler-name=volcano".into(),
                "--scheduler-name=rust-batch".into(),
                // Job syncs and pod creations in the log (failures show them).
                "-v=3".into(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut process = Operator::start_tied(
                "vc-controller-manager",
                &built.bin,
                &args,
                Path::new(&admin),
                &std::env::temp_dir(),
                &[],
            );
            eprintln!(
                "vc-controller-manager {} (controllers {CONTROLLERS}) log: {}",
                built.version,
                process.log.display()
            );
            let start = Instant::now();
            loop {
                assert!(
                    process.running(),
                    "vc-controller-manager exited:\n{}",
                    process.log_tail(40)
                );
                let log = std::fs::read_to_string(&process.log).unwrap_or_default();
                if log.contains(JOB_CONTROLLER_RUNNING) {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "vc-controller-manager's job controller not running after 60 s (an informer \
                     whose CRD is missing never syncs):\n{}",
                    process.log_tail(40)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            eprintln!(
                "vc-controller-manager running in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            VolcanoControllers {
                process: Mutex::new(process),
                version: built.version,
            }
        })
        .await;
    controllers.assert_healthy();
    controllers
}

impl VolcanoControllers {
    /// Still running, and nothing it wrote was refused or dropped by the API server: no
    /// "unknown field" warning (a field of a PodGroup or Queue our CRDs would prune) in its
    /// log.
    fn assert_healthy(&self) {
        let mut process = self.process.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            process.running(),
            "vc-controller-manager {} exited:\n{}",
            self.version,
            process.log_tail(60)
        );
        let log = std::fs::read_to_string(&process.log).unwrap_or_default();
        let pruned: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("unknown field"))
            .take(5)
            .collect();
        assert!(
            pruned.is_empty(),
            "the API server dropped fields vc-controller-manager wrote:\n{}",
            pruned.join("\n")
        );
    }

    fn log_tail(&self, lines: usize) -> String {
        self.process
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .log_tail(lines)
    }
}

/// Runs a test's body on its own runtime while holding the volcano-name lock, taken outside
/// the runtime: the vcjobs of these tests name the scheduler `volcano`, so they run one after
/// another, each with its own rust-batch answering to that name.
fn with_volcano_name(test: impl Future<Output = ()>) {
    let _volcano = volcano_name_lock();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(test);
}

/// What every test deletes when it ends, however it ends (a panic included): the vcjobs,
/// PodGroups and pods of its namespace. A gang left admitted but not running (a test that
/// failed half-way, or one that waits for ever on purpose) counts against every later
/// admission in the cluster (overcommit), and a Job's pods left waiting would be scheduled
/// by the next test's rust-batch.
struct Cleanup(&'static str);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
        // The Jobs first, so that the controller does not make their PodGroups and pods again
        // (no garbage collector runs for their owner references).
        for kind in [
            "jobs.batch.volcano.sh",
            "podgroups.scheduling.volcano.sh",
            "pods",
        ] {
            // Not kubectl_admin: it panics on failure, and this may run while unwinding.
            let _ = std::process::Command::new(&kubectl)
                .args(["delete", kind, "--all", "--wait=false", "-n", self.0])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// kube-controller-manager running only the garbage collector: Volcano's job controller
/// leaves a deleted Job's pods and PodGroup to it (their owner references), as every real
/// cluster runs it; the test control plane runs only the PV binder otherwise.
async fn start_garbage_collector() -> Operator {
    let bin_dir = std::env::var("K8S_BIN_DIR")
        .expect("K8S_BIN_DIR is exported by tests/cluster/with-cluster.sh; run tests/run.sh");
    let admin = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let kubeconfig = format!("--kubeconfig={admin}");
    let mut process = Operator::start(
        "garbage-collector",
        &Path::new(&bin_dir).join("kube-controller-manager"),
        &[
            &kubeconfig,
            "--controllers=garbage-collector-controller",
            "--leader-elect=false",
            "--secure-port=0",
        ],
        Path::new(&admin),
        &std::env::temp_dir(),
        &[],
    );
    // It has started collecting once its graph builder has synced every monitor.
    let start = Instant::now();
    loop {
        assert!(
            process.running(),
            "kube-controller-manager (garbage collector) exited:\n{}",
            process.log_tail(20)
        );
        let log = std::fs::read_to_string(&process.log).unwrap_or_default();
        if log.contains("all resource monitors have synced") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the garbage collector not synced after 60 s:\n{}",
            process.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    process
}

// ---------------------------------------------------------------------------------------
// vcjobs, their pods and PodGroups
// ---------------------------------------------------------------------------------------

fn vcjob_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "batch.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// A PodGroup as the API server holds it, every field (the typed one keeps only what
/// rust-batch reads).
fn raw_pod_group_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "scheduling.volcano.sh".into(),
        version: "v1beta1".into(),
        api_version: "scheduling.volcano.sh/v1beta1".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// One task of a vcjob.
struct Task<'a> {
    name: &'a str,
    replicas: i32,
    min: i32,
    /// Requests, also the limits (extended resources need both).
    requests: Value,
    /// The kwok runtime annotation in the template: none, it runs until the test finishes it.
    runtime: Option<&'a str>,
}

/// A vcjob in `ns` whose pods go to the pool named after `ns`, written as Volcano's mutating
/// webhook would leave it. `extra` is merged into its spec (policies, priorityClassName).
fn vcjob(
    ns: &str,
    name: &str,
    scheduler: &str,
    queue: &str,
    min_available: i32,
    tasks: &[Task],
    extra: Value,
) -> Value {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let annotations = match t.runtime {
                Some(r) => json!({"rust-batch.io/runtime": r}),
                None => json!({}),
            };
            json!({
                "name": t.name, "replicas": t.replicas, "minAvailable": t.min, "maxRetry": 3,
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"pool": ns},
                        "containers": [{
                            "name": "main", "image": IMAGE,
                            "resources": {"requests": t.requests.clone(), "limits": t.requests.clone()}
                        }]
                    }
                }
            })
        })
        .collect();
    let mut spec = json!({
        "schedulerName": scheduler, "queue": queue, "minAvailable": min_available,
        "maxRetry": 3, "tasks": tasks
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    })
}

async fn create_vcjob(client: &Client, job: Value) {
    let ns = job["metadata"]["namespace"].as_str().unwrap().to_string();
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    let object: DynamicObject = serde_json::from_value(job).unwrap();
    vcjob_api(client, &ns)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("vcjob {ns}/{name} created: {e}"));
}

async fn get_vcjob(client: &Client, ns: &str, name: &str) -> Option<DynamicObject> {
    vcjob_api(client, ns).get(name).await.ok()
}

/// The Job's `status.state.phase` (Pending, Running, Restarting, Completed, ...).
async fn vcjob_phase(client: &Client, ns: &str, name: &str) -> Option<String> {
    let job = get_vcjob(client, ns, name).await?;
    job.data["status"]["state"]["phase"]
        .as_str()
        .map(str::to_string)
}

async fn wait_vcjob_phase(client: &Client, ns: &str, name: &str, want: &str, timeout: Duration) {
    let mut last = None;
    let start = Instant::now();
    loop {
        let phase = vcjob_phase(client, ns, name).await;
        if phase.as_deref() == Some(want) {
            return;
        }
        last = phase.or(last);
        assert!(
            start.elapsed() < timeout,
            "vcjob {ns}/{name} not {want} after {timeout:?} (last phase {last:?})\n{}",
            describe(client, ns, name).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The name of the PodGroup the controller makes for a Job: `{job}-{job uid}`.
async fn pod_group_name(client: &Client, ns: &str, job: &str) -> String {
    let object = get_vcjob(client, ns, job)
        .await
        .unwrap_or_else(|| panic!("vcjob {ns}/{job} exists"));
    format!("{job}-{}", object.metadata.uid.unwrap())
}

/// The Job's PodGroup, once the controller has made it (and while it is not being deleted).
async fn vcjob_pod_group(client: &Client, ns: &str, job: &str) -> Option<PodGroup> {
    let name = pod_group_name(client, ns, job).await;
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .ok()
        .filter(|pg| pg.metadata.deletion_timestamp.is_none())
}

async fn wait_vcjob_pod_group(client: &Client, ns: &str, job: &str) -> PodGroup {
    wait_for(
        Duration::from_secs(30),
        &format!("the PodGroup vc-controller-manager makes for vcjob {ns}/{job}"),
        || vcjob_pod_group(client, ns, job),
    )
    .await
}

fn pg_phase(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.phase.as_ref())
        .map(|p| p.as_str().to_string())
        .unwrap_or_default()
}

/// The pods the controller made for the Job (annotation `volcano.sh/job-name`).
async fn vcjob_pods(client: &Client, ns: &str, job: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| job_of(p) == Some(job))
        .collect()
}

fn job_of(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get("volcano.sh/job-name")
        .map(String::as_str)
}

fn bound_count(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| node_of(p).is_some() && p.metadata.deletion_timestamp.is_none())
        .count()
}

/// Pods not being deleted.
fn live(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until all `members` live pods of the Job are bound, then until its PodGroup says
/// Running with no Unschedulable condition holding.
async fn binds_whole(client: &Client, ns: &str, job: &str, members: usize) -> Vec<Pod> {
    let start = Instant::now();
    let pods = loop {
        let pods = live(vcjob_pods(client, ns, job).await);
        if pods.len() == members && bound_count(&pods) == members {
            break pods;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "vcjob {ns}/{job}: not all {members} pods bound after 60 s\n{}",
            describe(client, ns, job).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pg = pod_group_name(client, ns, job).await;
    wait_for(
        Duration::from_secs(20),
        &format!("{ns}/{pg}: PodGroup Running, no Unschedulable condition holding"),
        || async {
            let group = vcjob_pod_group(client, ns, job).await?;
            let unschedulable = condition_message(client, ns, &pg).await;
            (pg_phase(&group) == "Running" && unschedulable.is_none()).then_some(())
        },
    )
    .await;
    pods
}

/// What a failing test says about a Job: its phase, its PodGroup's phase and conditions,
/// its pods (node, phase), rust-batch's events in the namespace and the controller's log.
async fn describe(client: &Client, ns: &str, job: &str) -> String {
    let job_phase = vcjob_phase(client, ns, job).await;
    let group = match vcjob_pod_group(client, ns, job).await {
        Some(pg) => format!(
            "PodGroup {} {}: {:?}",
            pg.metadata.name.as_deref().unwrap_or_default(),
            pg_phase(&pg),
            pg.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(|cs| cs
                    .iter()
                    .map(|c| format!(
                        "{}={} {}",
                        c.type_.as_ref().map(|t| t.as_str()).unwrap_or_default(),
                        c.status.as_deref().unwrap_or_default(),
                        c.message.as_deref().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>())
        ),
        None => "no PodGroup".into(),
    };
    let pods: Vec<String> = vcjob_pods(client, ns, job)
        .await
        .iter()
        .map(|p| {
            format!(
                "{} on {:?} {}{}",
                p.metadata.name.as_deref().unwrap_or_default(),
                node_of(p),
                phase(p),
                if p.metadata.deletion_timestamp.is_some() {
                    " (deleting)"
                } else {
                    ""
                }
            )
        })
        .collect();
    let events: Vec<String> = rust_batch_events(client, ns)
        .await
        .into_iter()
        .rev()
        .take(8)
        .map(|(_, t, r, on, note)| format!("{t} {r} {on}: {note}"))
        .collect();
    format!(
        "Job phase {job_phase:?}; {group}\npods: {pods:#?}\nlast events by rust-batch: {events:#?}\n\
         vc-controller-manager log:\n{}",
        VOLCANO_CONTROLLERS
            .get()
            .map(|c| c.log_tail(15))
            .unwrap_or_default()
    )
}

/// Lets the Job's pods finish now (kwok's runtime annotation `0s`), so it runs exactly as
/// long as the test needs.
async fn finish(client: &Client, ns: &str, job: &str) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    for pod in live(vcjob_pods(client, ns, job).await) {
        let name = pod.metadata.name.unwrap();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rust-batch.io/runtime": "0s"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{ns}/{name}: runtime annotation: {e}"));
    }
}

/// Waits until the Job's PodGroup says why it cannot start while none of its pods is bound,
/// then checks it keeps waiting whole; returns the PodGroup's phase and the condition. Which
/// of two reasons holds depends on the whole cluster (other tests' pools count):
/// - Pending: enqueue did not admit it (its minResources exceed what the cluster can hold),
///   and the controller, which makes pods only once the PodGroup leaves Pending, made none;
/// - Inqueue: admitted, its pods exist and wait whole.
///
/// Either way the condition's message names `resource`.
async fn waits_whole(client: &Client, ns: &str, job: &str, resource: &str) -> (String, String) {
    let pg = pod_group_name(client, ns, job).await;
    let mut last = String::new();
    let start = Instant::now();
    let (phase, message) = loop {
        let pods = live(vcjob_pods(client, ns, job).await);
        assert_eq!(
            bound_count(&pods),
            0,
            "vcjob {ns}/{job}: a pod bound while the gang cannot fit"
        );
        if let Some(group) = vcjob_pod_group(client, ns, job).await {
            let phase = pg_phase(&group);
            let condition = unschedulable_condition(client, ns, &pg)
                .await
                .filter(|c| c.status.as_deref() == Some("True"));
            if let Some(c) = condition {
                let message = c.message.clone().unwrap_or_default();
                last = format!("{phase}: {message}");
                let explained = match phase.as_str() {
                    "Pending" => pods.is_empty() && message.contains(resource),
                    "Inqueue" => message.contains(resource),
                    _ => false,
                };
                if explained {
                    break (phase, message);
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "vcjob {ns}/{job}: no Unschedulable condition naming {resource} after 45 s \
             (last: {last:?})\n{}",
            describe(client, ns, job).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // And it keeps waiting whole.
    for _ in 0..10 {
        let pods = live(vcjob_pods(client, ns, job).await);
        assert_eq!(
            bound_count(&pods),
            0,
            "vcjob {ns}/{job}: bound while short of {resource}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("vcjob {ns}/{job} waits whole: PodGroup {phase}, Unschedulable: {message}");
    (phase, message)
}

/// Events (events.k8s.io/v1) rust-batch posted in `ns`: (time, type, reason, regarding, note).
async fn rust_batch_events(
    client: &Client,
    ns: &str,
) -> Vec<(k8s_openapi::jiff::Timestamp, String, String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("rust-batch"))
        .filter_map(|e| {
            Some((
                e.event_time.as_ref()?.0,
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.note.unwrap_or_default(),
            ))
        })
        .collect()
}

/// rust-batch's Warnings in `ns` that say a pod's PodGroup was deleted: (pod, note).
async fn deleted_group_warnings(client: &Client, ns: &str) -> Vec<(String, String)> {
    rust_batch_events(client, ns)
        .await
        .into_iter()
        .filter(|(_, type_, _, _, note)| type_ == "Warning" && note.contains("was deleted"))
        .map(|(_, _, _, pod, note)| (pod, note))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The invariants, polled throughout
// ---------------------------------------------------------------------------------------

/// A namespace of its own with `nodes` kwok nodes of `shape` in a pool named after it.
async fn pool(client: &Client, ns: &str, nodes: usize, shape: Value) {
    namespace(client, ns).await;
    fake_nodes(client, ns, 1..=nodes, ns, &shape).await;
}

fn cpu_node() -> Value {
    json!({"cpu": "4", "memory": "16Gi"})
}

fn gpu_node() -> Value {
    json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"})
}

async fn create<K>(api: &Api<K>, value: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value.clone()).unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("{value} created: {e}"));
}

/// A rust-batch configuration file with `actions` and Volcano's default plugins.
fn scheduler_conf(name: &str, actions: &str) -> std::path::PathBuf {
    let conf = format!(
        "actions: \"{actions}\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"
    );
    let path = std::env::temp_dir().join(format!("rb-{name}-{}.conf", std::process::id()));
    std::fs::write(&path, conf).unwrap();
    path
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// a. A vcjob (one parameter server, three workers) binds whole and reaches Running, then
/// Completed; the PodGroup the controller wrote keeps every key it declared (rust-batch's
/// CRD prunes nothing), and once the finished Job's PodGroup is deleted by the controller,
/// rust-batch says nothing about the finished pods.
#[test]
fn vcjob_ps_and_workers_binds_whole_runs_and_completes() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-train";
        let _cleanup = Cleanup(ns);
        pool(&client, ns, 2, cpu_node()).await;
        guarded(&client, &[ns], async {
            let tasks = [
                Task {
                    name: "ps",
                    replicas: 1,
                    min: 1,
                    requests: json!({"cpu": "1", "memory": "1Gi"}),
                    runtime: None,
                },
                Task {
                    name: "worker",
                    replicas: 3,
                    min: 3,
                    requests: json!({"cpu": "2", "memory": "2Gi"}),
                    runtime: None,
                },
            ];
            create_vcjob(
                &client,
                vcjob(ns, "train", "volcano", "default", 4, &tasks, json!({})),
            )
            .await;
            let pg = wait_vcjob_pod_group(&client, ns, "train").await;
            assert_eq!(pg.spec.min_member, Some(4), "minMember the controller set");
            assert_eq!(
                pg.spec.min_task_member,
                Some(BTreeMap::from([
                    ("ps".to_string(), 1),
                    ("worker".to_string(), 3)
                ])),
                "minTaskMember the controller set"
            );
            // What the controller wrote into minResources, as stored: plain resources and
            // the quota-style keys (count/pods, requests.cpu, limits.memory ...), none pruned.
            let raw = raw_pod_group_api(&client, ns)
                .get(pg.metadata.name.as_deref().unwrap())
                .await
                .unwrap();
            let min_resources = &raw.data["spec"]["minResources"];
            for (key, value) in [
                ("cpu", "7"),
                ("memory", "7Gi"),
                ("pods", "4"),
                ("count/pods", "4"),
                ("requests.cpu", "7"),
                ("limits.cpu", "7"),
                ("limits.memory", "7Gi"),
            ] {
                assert_eq!(
                    min_resources[key].as_str(),
                    Some(value),
                    "minResources[{key}] as the controller wrote it: {min_resources}"
                );
            }
            let pods = binds_whole(&client, ns, "train", 4).await;
            assert_eq!(
                distinct_nodes_of(&pods),
                2,
                "7 cpu of pods on two 4-cpu nodes"
            );
            wait_vcjob_phase(&client, ns, "train", "Running", Duration::from_secs(30)).await;
            finish(&client, ns, "train").await;
            wait_vcjob_phase(&client, ns, "train", "Completed", Duration::from_secs(60)).await;
            // The controller deletes a finished Job's PodGroup (killJob); the Succeeded pods
            // stay. Nothing is to be said about them.
            wait_for(
                Duration::from_secs(30),
                "the finished vcjob's PodGroup deleted by the controller",
                || async {
                    vcjob_pod_group(&client, ns, "train")
                        .await
                        .is_none()
                        .then_some(())
                },
            )
            .await;
            let finished = vcjob_pods(&client, ns, "train").await;
            assert!(
                finished.len() == 4 && finished.iter().all(|p| phase(p) == "Succeeded"),
                "the Job's four pods stay, Succeeded"
            );
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let warnings = deleted_group_warnings(&client, ns).await;
                assert!(
                    warnings.is_empty(),
                    "warnings about the deleted PodGroup of a finished Job: {warnings:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        controllers.assert_healthy();
    });
}

fn distinct_nodes_of(pods: &[Pod]) -> usize {
    pods.iter()
        .filter_map(node_of)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// b. A GPU vcjob (a parameter server and four 2-GPU workers, 8 GPUs) on one 2-GPU node
/// waits whole, saying it is short of GPUs; when three more nodes arrive it binds whole
/// and runs.
#[test]
fn gpu_vcjob_that_does_not_fit_waits_whole_then_binds_whole_when_nodes_come() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-gpu";
        let _cleanup = Cleanup(ns);
        pool(&client, ns, 1, gpu_node()).await;
        guarded(&client, &[ns], async {
            let tasks = [
                Task {
                    name: "ps",
                    replicas: 1,
                    min: 1,
                    requests: json!({"cpu": "1", "memory": "1Gi"}),
                    runtime: None,
                },
                Task {
                    name: "worker",
                    replicas: 4,
                    min: 4,
                    requests: json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}),
                    runtime: None,
                },
            ];
            create_vcjob(
                &client,
                vcjob(ns, "mnist", "volcano", "default", 5, &tasks, json!({})),
            )
            .await;
            let pg = wait_vcjob_pod_group(&client, ns, "mnist").await;
            assert_eq!(pg.spec.min_member, Some(5));
            waits_whole(&client, ns, "mnist", "nvidia.com/gpu").await;
            fake_nodes(&client, ns, 2..=4, ns, &gpu_node()).await;
            binds_whole(&client, ns, "mnist", 5).await;
            wait_vcjob_phase(&client, ns, "mnist", "Running", Duration::from_secs(30)).await;
            finish(&client, ns, "mnist").await;
            wait_vcjob_phase(&client, ns, "mnist", "Completed", Duration::from_secs(60)).await;
        })
        .await;
        controllers.assert_healthy();
    });
}

/// c. Two elastic vcjobs (12 and 24 one-GPU workers, at least 2 at a time) in queues of
/// weights 1 and 3 compete for the 8 GPUs of their pool, each pod running 4 s: while both
/// have pods waiting, the GPUs they hold over time are shared by weight (1:3, ±0.12 of the
/// whole; the light queue never holding more than its 2 GPUs),
/// never a partial gang. The GPUs are `amd.com/gpu`, which no other test's nodes
/// have: shares are of the whole cluster (every pool of every test counts), and only this
/// pool has these. The pods ask for GPUs only, so the GPUs alone decide whether a queue has
/// its deserved share (Overused asks every resource). The nodes refuse pods (a taint) until
/// both Jobs' pods exist, so that the GPUs free up for both at once. The queue controller
/// gives both queues `spec.parent: root`, and the root queue exists.
#[test]
fn two_vcjobs_in_queues_of_weights_1_and_3_share_contended_gpus_by_weight() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-shares";
        let _cleanup = Cleanup(ns);
        let amd_node = json!({"cpu": "8", "memory": "32Gi", "amd.com/gpu": "2"});
        pool(&client, ns, 4, amd_node).await;
        // (queue and Job, weight, workers): the heavy queue has the more work, so that both
        // have pods waiting for a while at the shares their weights give (2 and 6 GPUs).
        let queues = [("e2e-vc-light", 1, 12), ("e2e-vc-heavy", 3, 24)];
        for (queue, weight, _) in queues {
            create(
                &Api::<Queue>::all(client.clone()),
                json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                       "metadata": {"name": queue}, "spec": {"weight": weight}}),
            )
            .await;
        }
        // Volcano's queue controller puts every queue under root; rust-batch keeps root.
        wait_for(
            Duration::from_secs(30),
            "both queues under root, and the root queue there",
            || async {
                let api = Api::<Queue>::all(client.clone());
                api.get("root").await.ok()?;
                for (queue, _, _) in queues {
                    let q = api.get(queue).await.ok()?;
                    (q.spec.parent.as_deref() == Some("root")).then_some(())?;
                }
                Some(())
            },
        )
        .await;
        // The pool's nodes refuse new pods (a NoSchedule taint the Jobs do not tolerate)
        // until both Jobs' pods are there, so that the GPUs free up for both at once.
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
        let taint = |taints: Value| {
            let nodes = nodes.clone();
            async move {
                for i in 1..=4 {
                    nodes
                        .patch(
                            &format!("{ns}-n{i}"),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"taints": taints}})),
                        )
                        .await
                        .expect("node taints patched");
                }
            }
        };
        taint(json!([{"key": "e2e-vc/hold", "effect": "NoSchedule"}])).await;
        guarded(&client, &[ns], async {
            for (queue, _, workers) in queues {
                let task = Task {
                    name: "worker",
                    replicas: workers,
                    min: 2,
                    requests: json!({"amd.com/gpu": "1"}),
                    runtime: Some("4s"),
                };
                create_vcjob(
                    &client,
                    vcjob(ns, queue, "volcano", queue, 2, &[task], json!({})),
                )
                .await;
            }
            let start = Instant::now();
            loop {
                let mut made = 0;
                for (job, _, workers) in queues {
                    let pods = live(vcjob_pods(&client, ns, job).await);
                    assert_eq!(bound_count(&pods), 0, "{job} bound on a tainted node");
                    made += usize::from(pods.len() == workers as usize);
                }
                if made == 2 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(45),
                    "both Jobs' pods not made after 45 s\n{}\n{}",
                    describe(&client, ns, queues[0].0).await,
                    describe(&client, ns, queues[1].0).await
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            taint(json!([])).await;
            // GPU-seconds held per queue while both still have pods waiting.
            let mut held: BTreeMap<&str, f64> = BTreeMap::new();
            let mut samples = Vec::new();
            let mut last = Instant::now();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                assert!(
                    Instant::now() < deadline,
                    "both Jobs still waiting after 120 s"
                );
                let all = live(
                    Api::<Pod>::namespaced(client.clone(), ns)
                        .list(&ListParams::default())
                        .await
                        .unwrap()
                        .items,
                );
                let now = Instant::now();
                let dt = (now - last).as_secs_f64();
                last = now;
                let mut waiting = 0;
                let mut sample = Vec::new();
                for (job, _, _) in queues {
                    let of_job: Vec<&Pod> = all.iter().filter(|p| job_of(p) == Some(job)).collect();
                    let running = of_job
                        .iter()
                        .filter(|p| node_of(p).is_some() && phase(p) != "Succeeded")
                        .count();
                    if of_job.iter().any(|p| node_of(p).is_none()) {
                        waiting += 1;
                    }
                    *held.entry(job).or_default() += running as f64 * dt;
                    sample.push(running);
                }
                samples.push(sample);
                if waiting < 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let (light, heavy) = (held["e2e-vc-light"], held["e2e-vc-heavy"]);
            let heavy_share = heavy / (light + heavy);
            eprintln!(
                "GPU-seconds while both waited: light {light:.1}, heavy {heavy:.1} (heavy's \
                 share {heavy_share:.2}); GPUs held light/heavy over time: {samples:?}"
            );
            assert!(
                (0.63..=0.87).contains(&heavy_share),
                "queues of weights 1 and 3: heavy held {heavy_share:.2} of the GPU time, not \
                 0.75 (light {light:.1}, heavy {heavy:.1} GPU-seconds; held over time: {samples:?})"
            );
            // And at any moment: the light queue deserves 2 of the 8 GPUs while the heavy one
            // has pods waiting, and a queue at its deserved share gets no more (Overused, asked
            // before each placement). A look between a pod's end and its successor's bind
            // sees less held, never more; one look is let pass.
            let over = samples.iter().filter(|s| s[0] > 2).count();
            assert!(
                over <= 1,
                "the light queue (weight 1) held more than its 2 GPUs in {over} of {} looks \
                 while the heavy one (weight 3) had pods waiting: {samples:?}",
                samples.len()
            );
            for (job, _, _) in queues {
                wait_vcjob_phase(&client, ns, job, "Completed", Duration::from_secs(90)).await;
            }
        })
        .await;
        controllers.assert_healthy();
    });
}

/// d and e: a low-priority vcjob (four 2-cpu pods, all needed: minAvailable 4) whose policy
/// restarts it when a pod is evicted fills its pool (8 cpu); a high-priority vcjob (two 2-cpu
/// pods) in the same queue preempts it: the whole low gang is evicted (it cannot lose less
/// and stay a gang), the controller restarts the Job (a new PodGroup), which waits whole
/// while the high one runs and binds whole when the high one has finished; both complete.
async fn preempted_vcjob_restarts_whole(client: &Client, ns: &str, scheduler: &str) {
    let prefix = ns.trim_start_matches("e2e-");
    let (low, high) = (format!("{prefix}-low"), format!("{prefix}-high"));
    for (class, value) in [(&low, 10), (&high, 1000)] {
        create(
            &Api::<PriorityClass>::all(client.clone()),
            json!({"metadata": {"name": class}, "value": value}),
        )
        .await;
    }
    create(
        &Api::<Queue>::all(client.clone()),
        json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
               "metadata": {"name": ns}, "spec": {"weight": 1}}),
    )
    .await;
    pool(client, ns, 2, cpu_node()).await;
    let worker = |replicas| Task {
        name: "worker",
        replicas,
        min: replicas,
        requests: json!({"cpu": "2", "memory": "1Gi"}),
        runtime: None,
    };
    create_vcjob(
        client,
        vcjob(
            ns,
            "low",
            scheduler,
            ns,
            4,
            &[worker(4)],
            json!({"priorityClassName": low,
                   "policies": [{"event": "PodEvicted", "action": "RestartJob"}]}),
        ),
    )
    .await;
    let first = binds_whole(client, ns, "low", 4).await;
    wait_vcjob_phase(client, ns, "low", "Running", Duration::from_secs(30)).await;
    let first_group = vcjob_pod_group(client, ns, "low")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    create_vcjob(
        client,
        vcjob(
            ns,
            "high",
            scheduler,
            ns,
            2,
            &[worker(2)],
            json!({"priorityClassName": high}),
        ),
    )
    .await;
    binds_whole(client, ns, "high", 2).await;
    // Every pod of the low Job was told who preempted it.
    for pod in &first {
        let name = pod.metadata.name.as_deref().unwrap();
        let events = wait_for(
            Duration::from_secs(10),
            &format!("a Preempted event on {ns}/{name}"),
            || async {
                let events = pod_events(client, ns, name).await;
                events
                    .iter()
                    .any(|(reason, _)| reason == "Preempted")
                    .then_some(events)
            },
        )
        .await;
        eprintln!("{ns}/{name}: {events:?}");
    }
    // The controller restarted the low Job: a new PodGroup, its pods made again, waiting
    // whole while the high Job holds half the pool.
    wait_for(
        Duration::from_secs(60),
        "the low Job restarted (retryCount 1, a new PodGroup, 4 new pods)",
        || async {
            let job = get_vcjob(client, ns, "low").await?;
            (job.data["status"]["retryCount"].as_i64() >= Some(1)).then_some(())?;
            let group = vcjob_pod_group(client, ns, "low").await?;
            (group.metadata.uid.as_deref() != Some(first_group.as_str())).then_some(())?;
            let pods = live(vcjob_pods(client, ns, "low").await);
            let old: Vec<_> = first
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            (pods.len() == 4
                && pods
                    .iter()
                    .all(|p| !old.contains(p.metadata.uid.as_ref().unwrap())))
            .then_some(())
        },
    )
    .await;
    waits_whole(client, ns, "low", "cpu").await;
    // Room returns: the high Job finishes, the low one binds whole, runs and completes.
    finish(client, ns, "high").await;
    wait_vcjob_phase(client, ns, "high", "Completed", Duration::from_secs(60)).await;
    binds_whole(client, ns, "low", 4).await;
    wait_vcjob_phase(client, ns, "low", "Running", Duration::from_secs(30)).await;
    finish(client, ns, "low").await;
    wait_vcjob_phase(client, ns, "low", "Completed", Duration::from_secs(60)).await;
}

#[test]
fn low_priority_vcjob_with_restart_policy_is_preempted_whole_and_restarts_whole() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let ns = "e2e-vc-preempt";
        let _cleanup = Cleanup(ns);
        let conf = scheduler_conf(ns, "enqueue, allocate, preempt, backfill");
        let (_scheduler, _port) =
            start_ready_scheduler("volcano", &["--scheduler-conf", conf.to_str().unwrap()]).await;
        guarded(
            &client,
            &[ns],
            preempted_vcjob_restarts_whole(&client, ns, "volcano"),
        )
        .await;
        controllers.assert_healthy();
    });
}

/// e. The same with `schedulerName: rust-batch`, rust-batch's own name. It too runs alone:
/// admission looks at every admitted gang of the cluster, whichever scheduler's.
#[test]
fn vcjob_naming_rust_batch_is_preempted_whole_and_restarts_whole() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let ns = "e2e-vc-rbname";
        let _cleanup = Cleanup(ns);
        let conf = scheduler_conf(ns, "enqueue, allocate, preempt, backfill");
        let (_scheduler, _port) =
            start_ready_scheduler("rust-batch", &["--scheduler-conf", conf.to_str().unwrap()])
                .await;
        guarded(
            &client,
            &[ns],
            preempted_vcjob_restarts_whole(&client, ns, "rust-batch"),
        )
        .await;
        controllers.assert_healthy();
    });
}

/// f. An elastic vcjob (six 2-cpu workers, minAvailable 3) on one 7-cpu node: three bind
/// together (never fewer), the other three wait; a second node comes and they bind too.
#[test]
fn elastic_vcjob_binds_its_minimum_together_and_the_rest_when_room_comes() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-elastic";
        let _cleanup = Cleanup(ns);
        let node = json!({"cpu": "7", "memory": "32Gi"});
        pool(&client, ns, 1, node.clone()).await;
        guarded(&client, &[ns], async {
            let task = Task {
                name: "worker",
                replicas: 6,
                min: 3,
                requests: json!({"cpu": "2", "memory": "1Gi"}),
                runtime: None,
            };
            create_vcjob(
                &client,
                vcjob(ns, "elastic", "volcano", "default", 3, &[task], json!({})),
            )
            .await;
            let pg = wait_vcjob_pod_group(&client, ns, "elastic").await;
            assert_eq!(
                pg.spec.min_member,
                Some(3),
                "minMember: the Job's minAvailable"
            );
            // Three bind at once, and no more fit: the others wait. `guarded` fails on fewer
            // than the minimum bound for longer than the binds take to land (a poll can see
            // the first of three binds before the others: one API call per pod).
            let mut seen: Vec<usize> = Vec::new();
            let start = Instant::now();
            loop {
                let pods = live(vcjob_pods(&client, ns, "elastic").await);
                let bound = bound_count(&pods);
                if seen.last() != Some(&bound) {
                    seen.push(bound);
                }
                if pods.len() == 6 && bound == 3 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "3 of 6 pods not bound after 60 s (bound counts seen {seen:?})"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            wait_vcjob_phase(&client, ns, "elastic", "Running", Duration::from_secs(30)).await;
            for _ in 0..10 {
                let pods = live(vcjob_pods(&client, ns, "elastic").await);
                assert_eq!(bound_count(&pods), 3, "only three fit on the 7-cpu node");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            fake_node(&client, &format!("{ns}-n2"), ns, node).await;
            binds_whole(&client, ns, "elastic", 6).await;
            finish(&client, ns, "elastic").await;
            wait_vcjob_phase(&client, ns, "elastic", "Completed", Duration::from_secs(60)).await;
        })
        .await;
        controllers.assert_healthy();
    });
}

/// g. A vcjob deleted mid-run (one task finished, one running) with the garbage collector
/// running, as on any cluster: its pods and PodGroup go, and in the 10 s after the deletion
/// rust-batch posts a bounded number of events in the namespace (at most one per pod), none
/// a Warning that the PodGroup was deleted on a pod that had finished.
#[test]
fn vcjob_deleted_mid_run_leaves_no_event_storm() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _collector = start_garbage_collector().await;
        let ns = "e2e-vc-delete";
        let _cleanup = Cleanup(ns);
        pool(&client, ns, 2, cpu_node()).await;
        guarded(&client, &[ns], async {
            let tasks = [
                Task {
                    name: "prep",
                    replicas: 1,
                    min: 1,
                    requests: json!({"cpu": "1"}),
                    runtime: Some("0s"),
                },
                Task {
                    name: "worker",
                    replicas: 3,
                    min: 3,
                    requests: json!({"cpu": "1"}),
                    runtime: None,
                },
            ];
            create_vcjob(
                &client,
                vcjob(ns, "doomed", "volcano", "default", 4, &tasks, json!({})),
            )
            .await;
            let prep = wait_for(
                Duration::from_secs(60),
                "the prep task finished, the workers running",
                || async {
                    let pods = vcjob_pods(&client, ns, "doomed").await;
                    let done: Vec<String> = pods
                        .iter()
                        .filter(|p| phase(p) == "Succeeded")
                        .filter_map(|p| p.metadata.name.clone())
                        .collect();
                    let running = pods.iter().filter(|p| phase(p) == "Running").count();
                    (done.len() == 1 && running == 3).then_some(done)
                },
            )
            .await;
            let group = pod_group_name(&client, ns, "doomed").await;
            let before = rust_batch_events(&client, ns).await.len();
            let deleted_at = k8s_openapi::jiff::Timestamp::now();
            let deleted = Instant::now();
            vcjob_api(&client, ns)
                .delete("doomed", &DeleteParams::background())
                .await
                .expect("vcjob deleted");
            wait_for(
                Duration::from_secs(60),
                "the deleted Job's pods and PodGroup collected",
                || async {
                    let pods = vcjob_pods(&client, ns, "doomed").await;
                    let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
                        .get_opt(&group)
                        .await
                        .unwrap();
                    (pods.is_empty() && pg.is_none()).then_some(())
                },
            )
            .await;
            // Ten seconds after the deletion, whatever came in that time.
            tokio::time::sleep(Duration::from_secs(10).saturating_sub(deleted.elapsed())).await;
            let events = rust_batch_events(&client, ns).await;
            let after: Vec<_> = events.iter().filter(|e| e.0 >= deleted_at).collect();
            eprintln!(
                "{} events by rust-batch before the deletion, {} after: {after:?}",
                before,
                after.len()
            );
            assert!(
                after.len() <= 4,
                "rust-batch posted {} events in 10 s after a 4-pod Job was deleted: {after:?}",
                after.len()
            );
            for (_, type_, _, regarding, note) in &after {
                assert!(
                    !(type_ == "Warning"
                        && note.contains("was deleted")
                        && prep.contains(regarding)),
                    "a Warning about the deleted PodGroup on the finished pod {regarding}: {note}"
                );
            }
        })
        .await;
        controllers.assert_healthy();
    });
}

/// h. A vcjob whose tasks ask for more cpu than any node has (16 cpu on 8-cpu nodes) waits
/// whole, its PodGroup's message naming cpu, and the Job stays Pending. It is deleted at the
/// end.
#[test]
fn vcjob_asking_more_than_any_node_has_waits_whole_naming_the_resource() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-toobig";
        pool(&client, ns, 2, json!({"cpu": "8", "memory": "32Gi"})).await;
        // Admitted, it would wait for ever.
        let _cleanup = Cleanup(ns);
        guarded(&client, &[ns], async {
            let task = Task {
                name: "worker",
                replicas: 2,
                min: 2,
                requests: json!({"cpu": "16", "memory": "1Gi"}),
                runtime: None,
            };
            create_vcjob(
                &client,
                vcjob(ns, "huge", "volcano", "default", 2, &[task], json!({})),
            )
            .await;
            let (_, message) = waits_whole(&client, ns, "huge", "cpu").await;
            assert_eq!(
                vcjob_phase(&client, ns, "huge").await.as_deref(),
                Some("Pending"),
                "the Job stays Pending ({message})"
            );
        })
        .await;
        controllers.assert_healthy();
    });
}

/// i. A vcjob admitted that cannot run (it asks for 2 accelerators a pod, its nodes have 1
/// each) while other pods take the free accelerators does not hold back the admission of a
/// vcjob that asks for none: each admission is weighed in the resources the gang asks for,
/// as Volcano's overcommit plugin does (`LessEqualWithDimensionAndResourcesName(idle,
/// jobMinReq)`, pkg/scheduler/plugins/overcommit/overcommit.go, v1.15.1). Otherwise the
/// controller, which makes pods only for admitted PodGroups, leaves every later vcjob of the
/// cluster Pending. The accelerators are `habana.ai/gaudi`, which no other test's nodes have
/// (admission weighs the whole cluster).
#[test]
fn vcjob_admitted_but_waiting_for_accelerators_does_not_block_admission_of_others() {
    with_volcano_name(async {
        let client = client().await;
        let controllers = volcano_controllers(&client).await;
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let ns = "e2e-vc-admit";
        pool(
            &client,
            ns,
            4,
            json!({"cpu": "8", "memory": "32Gi", "habana.ai/gaudi": "1"}),
        )
        .await;
        // The waiting Job stays admitted for ever unless deleted.
        let _cleanup = Cleanup(ns);
        guarded(&client, &[ns], async {
            let gaudi = |replicas, per_pod: &str| Task {
                name: "worker",
                replicas,
                min: replicas,
                requests: json!({"cpu": "1", "habana.ai/gaudi": per_pod}),
                runtime: None,
            };
            // 4 accelerators in all (4.8 with overcommit's 1.2): admitted; no node has 2.
            create_vcjob(
                &client,
                vcjob(ns, "fragmented", "volcano", "default", 2, &[gaudi(2, "2")], json!({})),
            )
            .await;
            wait_for(
                Duration::from_secs(30),
                "the fragmented Job admitted, its 2 pods made and waiting",
                || async {
                    let pg = vcjob_pod_group(&client, ns, "fragmented").await?;
                    let pods = live(vcjob_pods(&client, ns, "fragmented").await);
                    (pg_phase(&pg) == "Inqueue" && pods.len() == 2 && bound_count(&pods) == 0)
                        .then_some(())
                },
            )
            .await;
            // Pods of another scheduler take two of the accelerators: less is free than the
            // admitted Job waits for.
            for i in 1..=2 {
                create(
                    &Api::<Pod>::namespaced(client.clone(), ns),
                    json!({"metadata": {"name": format!("inference-{i}"), "namespace": ns},
                           "spec": {"schedulerName": "other-scheduler", "nodeName": format!("{ns}-n{i}"),
                                    "containers": [{"name": "c", "image": IMAGE, "resources": {
                                        "requests": {"habana.ai/gaudi": "1"}, "limits": {"habana.ai/gaudi": "1"}}}]}}),
                )
                .await;
            }
            wait_for(Duration::from_secs(30), "the inference pods running", || async {
                let pods = Api::<Pod>::namespaced(client.clone(), ns);
                for i in 1..=2 {
                    let p = pods.get(&format!("inference-{i}")).await.ok()?;
                    (phase(&p) == "Running").then_some(())?;
                }
                Some(())
            })
            .await;
            // A cpu-only Job is admitted and binds whole.
            let task = Task {
                name: "worker",
                replicas: 2,
                min: 2,
                requests: json!({"cpu": "1", "memory": "1Gi"}),
                runtime: None,
            };
            create_vcjob(&client, vcjob(ns, "cpu-only", "volcano", "default", 2, &[task], json!({})))
                .await;
            binds_whole(&client, ns, "cpu-only", 2).await;
            wait_vcjob_phase(&client, ns, "cpu-only", "Running", Duration::from_secs(30)).await;
            assert_eq!(
                bound_count(&live(vcjob_pods(&client, ns, "fragmented").await)),
                0,
                "the fragmented Job bound part of itself"
            );
        })
        .await;
        controllers.assert_healthy();
    });
}
