//! End-to-end with the real Kubeflow operators (issue 16): the training-operator (TFJob,
//! PyTorchJob) and the MPI operator v2 (MPIJob `kubeflow.org/v2beta1`), built unchanged
//! from Go modules (tests/cluster/operators/*/build.sh, cached by version), installed from
//! their own manifests (the `standalone` overlay in each module: CRDs, RBAC, namespace), and
//! run as processes under their own ServiceAccounts (impersonation), so they have exactly
//! the permissions they ship. rust-batch answers to `volcano`, the scheduler name both
//! operators write into their pods in Volcano gang mode, and every test holds
//! `volcano_name_lock` for its whole run: one such scheduler, and one instance of each
//! operator, at a time.
//!
//! The MPI operator v2 makes its launcher a batch/v1 Job (its workers are pods), so its
//! tests also run kube-controller-manager with only the Job controller, as any real cluster
//! has it; the test control plane runs only the PV binder otherwise.
//!
//! Every flow runs under `guarded`, which polls every 200 ms that no gang is bound
//! partially and no node holds more than its allocatable. Pods finish through the kwok
//! stage annotation `rust-batch.io/runtime`, set in the jobs' pod templates. Without a
//! cluster these tests fail; they never skip, and a missing operator binary is built.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::operators::{
    apply_kustomization, built, group_of, guarded, placements, pod_group_named, volcano_name_lock,
    Built, Operator,
};
use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::{json, Value};

/// The namespace and ServiceAccount the training-operator's standalone overlay ships.
const TRAINING_OPERATOR_NS: &str = "kubeflow";
const TRAINING_OPERATOR_SA: &str = "training-operator";
/// The MPI operator's (its standalone overlay; also its default leader-election namespace).
const MPI_OPERATOR_NS: &str = "mpi-operator";
const MPI_OPERATOR_SA: &str = "mpi-operator";
/// Where the training-operator reads its webhook certificate (a constant in its pkg/cert,
/// not a flag): in its Deployment, the mount of the Secret it writes the certificate into;
/// here the test plays that volume (`mount_webhook_cert_secret`).
const TRAINING_OPERATOR_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// The MPI operator's health endpoint: a constant in cmd/mpi-operator/app/server.go,
/// bound on every interface, not a flag.
const MPI_OPERATOR_HEALTH_PORT: u16 = 8080;
/// A kwok node with 4 cpus and no GPU (the MPI jobs here ask for cpu only).
fn cpu_node() -> Value {
    json!({"cpu": "4", "memory": "32Gi"})
}

/// A kwok node with two GPUs.
fn gpu_node() -> Value {
    json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"})
}

// ---------------------------------------------------------------------------------------
// Installing and running the operators
// ---------------------------------------------------------------------------------------

/// The training-operator built, and its standalone overlay applied once per test process:
/// namespace `kubeflow`, its ServiceAccount, ClusterRole and binding, the empty Secret its
/// certificate rotator fills (the overlay's secretGenerator), and its CRDs.
fn training_operator_installed() -> &'static Built {
    static INSTALLED: OnceLock<Built> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let operator = built("training-operator");
        let applied = apply_kustomization(
            &operator.src.join("manifests/overlays/standalone"),
            |object| {
                let kind = object["kind"].as_str().unwrap_or_default();
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                match kind {
                    // No kubelet runs its image; the operator runs as a process (below).
                    "Deployment" | "Service" => false,
                    // The API server cannot reach the webhook here (the Service has no
                    // endpoints), and its failurePolicy is Fail: registered, it would
                    // refuse every job.
                    "ValidatingWebhookConfiguration" => false,
                    // The training-operator's kubeflow.org/v1 MPIJob CRD has the name of
                    // the MPI operator v2's (v2beta1): one cluster holds one of them. As
                    // Kubeflow documents for running both, the MPI operator's is installed
                    // and the training-operator runs without its MPIJob scheme.
                    "CustomResourceDefinition" => name != "mpijobs.kubeflow.org",
                    _ => true,
                }
            },
        );
        eprintln!(
            "training-operator {} installed: {}",
            operator.version,
            applied.join(", ")
        );
        operator
    })
}

/// The MPI operator built, and its standalone overlay applied once per test process
/// (namespace `mpi-operator`, ServiceAccount, ClusterRoles and binding, the MPIJob CRD).
fn mpi_operator_installed() -> &'static Built {
    static INSTALLED: OnceLock<Built> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let operator = built("mpi-operator");
        let applied = apply_kustomization(
            &operator.src.join("manifests/overlays/standalone"),
            // No kubelet runs its image; the operator runs as a process (below).
            |object| object["kind"].as_str() != Some("Deployment"),
        );
        eprintln!(
            "mpi-operator {} installed: {}",
            operator.version,
            applied.join(", ")
        );
        operator
    })
}

/// Starts the training-operator as its Deployment would run it, in Volcano gang mode, and
/// waits until its /readyz answers (certificates made, webhook server listening).
async fn start_training_operator(client: &Client, operator: &Built) -> Operator {
    // What the kubelet's Secret volume held last time is stale for this run's Secret.
    let _ = std::fs::remove_dir_all(TRAINING_OPERATOR_CERT_DIR);
    std::fs::create_dir_all(TRAINING_OPERATOR_CERT_DIR)
        .expect("the training-operator's certificate directory is writable");
    let kubeconfig = impersonating_kubeconfig(TRAINING_OPERATOR_NS, TRAINING_OPERATOR_SA);
    let probe_port = free_port();
    let args = [
        format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
        format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
        format!("--webhook-server-port={}", free_port()),
        // One instance at a time (the tests hold the volcano-name lock): no Lease needed.
        "--leader-elect=false".into(),
        "--gang-scheduler-name=volcano".into(),
        // Not its MPIJob (v1): the cluster's mpijobs CRD is the MPI operator v2's.
        "--enable-scheme=tfjob".into(),
        "--enable-scheme=pytorchjob".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut process = Operator::start(
        "training-operator",
        &operator.bin,
        &args,
        &kubeconfig,
        &std::env::temp_dir(),
        // Where its certificate Secret lives (the Deployment sets it from the pod's namespace).
        &[("MY_POD_NAMESPACE", TRAINING_OPERATOR_NS)],
    );
    eprintln!("training-operator log: {}", process.log.display());
    let start = Instant::now();
    mount_webhook_cert_secret(client, &mut process).await;
    process
        .wait_probe(probe_port, "/readyz", Duration::from_secs(90))
        .await;
    eprintln!(
        "training-operator ready in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    process
}

/// Plays the kubelet's Secret volume of the training-operator's Deployment: once the
/// operator has written its self-made certificate into the Secret
/// `training-operator-webhook-cert`, its keys become files in the certificate directory.
/// The operator reports ready only once `tls.crt` is there (the certificate rotator waits
/// for the volume to show it) and starts its webhook server from those files.
async fn mount_webhook_cert_secret(client: &Client, process: &mut Operator) {
    use k8s_openapi::api::core::v1::Secret;
    let secrets = Api::<Secret>::namespaced(client.clone(), TRAINING_OPERATOR_NS);
    let start = Instant::now();
    let data = loop {
        assert!(
            process.running(),
            "training-operator exited:\n{}",
            process.log_tail(40)
        );
        let data = secrets
            .get("training-operator-webhook-cert")
            .await
            .ok()
            .and_then(|secret| secret.data)
            .unwrap_or_default();
        if data.contains_key("tls.crt") && data.contains_key("tls.key") {
            break data;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no certificate in the training-operator's Secret after 60 s:\n{}",
            process.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (key, value) in data {
        std::fs::write(Path::new(TRAINING_OPERATOR_CERT_DIR).join(&key), value.0)
            .unwrap_or_else(|e| panic!("writing {key} into {TRAINING_OPERATOR_CERT_DIR}: {e}"));
    }
}

/// Starts the MPI operator in Volcano gang mode and waits until it leads (it always runs
/// leader election, in namespace `mpi-operator`).
async fn start_mpi_operator(operator: &Built) -> Operator {
    // Its health port is fixed: wait for another process to let it go rather than watch the
    // operator exit on "address already in use".
    wait_for(
        Duration::from_secs(60),
        "port 8080 (the MPI operator's fixed health port) free",
        || async { std::net::TcpListener::bind(("0.0.0.0", MPI_OPERATOR_HEALTH_PORT)).ok() },
    )
    .await;
    let kubeconfig = impersonating_kubeconfig(MPI_OPERATOR_NS, MPI_OPERATOR_SA);
    let mut process = Operator::start(
        "mpi-operator",
        &operator.bin,
        &["--gang-scheduling=volcano", "--threadiness=2"],
        &kubeconfig,
        &std::env::temp_dir(),
        &[],
    );
    eprintln!("mpi-operator log: {}", process.log.display());
    let start = Instant::now();
    loop {
        assert!(
            process.running(),
            "mpi-operator exited:\n{}",
            process.log_tail(40)
        );
        if std::fs::read_to_string(&process.log)
            .unwrap_or_default()
            .contains("Leading started")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "mpi-operator not leading after 60 s:\n{}",
            process.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    process
}

/// kube-controller-manager running only the Job controller. The MPI operator v2 creates its
/// launcher as a batch/v1 Job (workers as pods), so a cluster needs the Job controller for
/// it, as every real cluster has; the test control plane runs only the PV binder otherwise.
/// It starts once no other test runs a Job controller (`job_controller`).
async fn start_job_controller() -> JobController {
    let mut controller = job_controller("job-controller", "").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        controller.process.running(),
        "kube-controller-manager (Job controller) exited:\n{}",
        controller.process.log_tail(20)
    );
    controller
}

// ---------------------------------------------------------------------------------------
// Jobs, their pods and PodGroups
// ---------------------------------------------------------------------------------------

fn kubeflow_api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let (version, plural) = match kind {
        "TFJob" => ("v1", "tfjobs"),
        "PyTorchJob" => ("v1", "pytorchjobs"),
        "MPIJob" => ("v2beta1", "mpijobs"),
        other => panic!("no such Kubeflow job kind here: {other}"),
    };
    let resource = ApiResource {
        group: "kubeflow.org".into(),
        version: version.into(),
        api_version: format!("kubeflow.org/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

async fn create_job(client: &Client, job: Value) {
    let kind = job["kind"].as_str().unwrap().to_string();
    let ns = job["metadata"]["namespace"].as_str().unwrap().to_string();
    let object: DynamicObject = serde_json::from_value(job).unwrap();
    kubeflow_api(client, &ns, &kind)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{kind} created in {ns}: {e}"));
}

/// The status of the job's condition `type_` (the operator's JobStatus conditions).
async fn job_condition(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    type_: &str,
) -> Option<String> {
    let job = kubeflow_api(client, ns, kind).get(name).await.ok()?;
    job.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

async fn wait_job_condition(client: &Client, ns: &str, kind: &str, name: &str, type_: &str) {
    wait_for(
        Duration::from_secs(60),
        &format!("{kind} {ns}/{name} condition {type_}=True"),
        || async {
            (job_condition(client, ns, kind, name, type_)
                .await
                .as_deref()
                == Some("True"))
            .then_some(())
        },
    )
    .await;
}

/// A replica's pod template: `pool`'s nodes, one container named as the operator expects,
/// `gpus` GPUs (requests and limits, as extended resources need), and the kwok runtime.
fn template(pool: &str, container: &str, gpus: u32, runtime: Option<&str>) -> Value {
    let mut requests = json!({"cpu": "1", "memory": "1Gi"});
    let mut limits = json!({});
    if gpus > 0 {
        requests["nvidia.com/gpu"] = gpus.to_string().into();
        limits["nvidia.com/gpu"] = gpus.to_string().into();
    }
    let annotations = match runtime {
        Some(r) => json!({"rust-batch.io/runtime": r}),
        None => json!({}),
    };
    json!({
        "metadata": {"annotations": annotations},
        "spec": {
            "nodeSelector": {"pool": pool},
            "containers": [{
                "name": container, "image": "registry.invalid/kubeflow-e2e:never-pulled",
                "resources": {"requests": requests, "limits": limits}
            }]
        }
    })
}

/// A TFJob: one parameter server (cpu only) and `workers` workers with `gpus` GPUs each.
fn tfjob(ns: &str, name: &str, workers: u32, gpus: u32, runtime: Option<&str>) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "PS": {"replicas": 1, "restartPolicy": "Never",
                       "template": template(ns, "tensorflow", 0, runtime)},
                "Worker": {"replicas": workers, "restartPolicy": "Never",
                           "template": template(ns, "tensorflow", gpus, runtime)}
            }
        }
    })
}

/// A PyTorchJob: a master and `workers` workers, `gpus` GPUs each.
fn pytorchjob(ns: &str, name: &str, workers: u32, gpus: u32, runtime: Option<&str>) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never",
                           "template": template(ns, "pytorch", gpus, runtime)},
                "Worker": {"replicas": workers, "restartPolicy": "Never",
                           "template": template(ns, "pytorch", gpus, runtime)}
            }
        }
    })
}

/// An MPIJob (v2beta1): a launcher (the kwok runtime `launcher_runtime`; none: it runs
/// until deleted) and `workers` workers, 1 cpu each. Once the launcher is done, the
/// operator deletes the workers (they would run sshd until then) and the PodGroup.
fn mpijob(ns: &str, name: &str, workers: u32, launcher_runtime: Option<&str>) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1,
                             "template": template(ns, "mpi-launcher", 0, launcher_runtime)},
                "Worker": {"replicas": workers, "template": template(ns, "mpi-worker", 0, None)}
            }
        }
    })
}

/// The pods of one job: those naming its PodGroup (both operators name it after the job).
async fn job_pods(client: &Client, ns: &str, job: &str) -> Vec<Pod> {
    of_job(&namespace_pods(client, ns).await, job)
}

async fn namespace_pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

fn of_job(pods: &[Pod], job: &str) -> Vec<Pod> {
    pods.iter()
        .filter(|p| group_of(p) == Some(job))
        .cloned()
        .collect()
}

/// Lets a job's pods finish now: each gets the kwok stage's runtime annotation (`0s`), so
/// the job runs exactly as long as the test needs it to (a runtime fixed at creation would
/// race the test's own checks on a loaded machine).
/// `role`: only the pods of that `training.kubeflow.org/job-role` (an MPIJob ends with its
/// launcher; its workers are the operator's to delete).
async fn finish(client: &Client, ns: &str, job: &str, role: Option<&str>) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    for pod in job_pods(client, ns, job).await {
        let pod_role = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("training.kubeflow.org/job-role"));
        if role.is_some_and(|r| pod_role.map(String::as_str) != Some(r)) {
            continue;
        }
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

fn bound_count(pods: &[Pod]) -> usize {
    pods.iter().filter(|p| node_of(p).is_some()).count()
}

fn pg_phase(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.phase.as_ref())
        .map(|p| p.as_str().to_string())
        .unwrap_or_default()
}

/// The PodGroup's conditions as `type=status: message` lines, for assertion messages.
fn pg_conditions(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={}: {}",
                        c.type_.as_ref().map(|t| t.as_str()).unwrap_or_default(),
                        c.status.as_deref().unwrap_or_default(),
                        c.message.as_deref().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

/// Waits for the PodGroup the operator creates and checks what it declares: `min_member`
/// members and, when given, minResources of `gpus` GPUs.
async fn operator_pod_group(
    client: &Client,
    ns: &str,
    name: &str,
    min_member: i32,
    gpus: Option<u32>,
) -> PodGroup {
    let pg = wait_for(
        Duration::from_secs(30),
        &format!("the operator's PodGroup {ns}/{name}"),
        || pod_group_named(client, ns, name),
    )
    .await;
    assert_eq!(
        pg.spec.min_member,
        Some(min_member),
        "{ns}/{name}: minMember the operator set"
    );
    if let Some(gpus) = gpus {
        let declared = pg
            .spec
            .min_resources
            .as_ref()
            .and_then(|r| r.get("nvidia.com/gpu"))
            .map(|q| q.0.clone());
        assert_eq!(
            declared,
            Some(gpus.to_string()),
            "{ns}/{name}: minResources nvidia.com/gpu the operator set"
        );
    }
    pg
}

/// Waits until the job's PodGroup says why the job cannot start while no pod of it is
/// bound, and checks it keeps waiting whole; returns the PodGroup's phase. Which of two
/// reasons holds depends on the GPUs of the whole cluster (other tests' pools count):
/// - Pending: enqueue did not admit it (its minResources, GPUs included, exceed what the
///   cluster can hold): the Unschedulable condition says so (reason NotEnoughResources), and
///   the training-operator, which creates pods only once the PodGroup leaves Pending, has
///   made none;
/// - Inqueue: admitted, its pods exist and wait whole, and the condition names what the
///   gang is short of: nvidia.com/gpu.
async fn waits_whole_for_gpus(client: &Client, ns: &str, job: &str) -> String {
    let (phase, condition) = wait_for(
        Duration::from_secs(30),
        &format!("{ns}/{job}: an Unschedulable condition saying why it waits"),
        || async {
            let pods = job_pods(client, ns, job).await;
            assert_eq!(
                bound_count(&pods),
                0,
                "{ns}/{job}: a pod bound while the gang cannot fit"
            );
            let pg = pod_group_named(client, ns, job).await?;
            let condition = unschedulable_condition(client, ns, job)
                .await
                .filter(|c| c.status.as_deref() == Some("True"))?;
            let message = condition.message.clone().unwrap_or_default();
            let phase = pg_phase(&pg);
            let explained = match phase.as_str() {
                "Pending" => {
                    condition.reason.as_deref() == Some("NotEnoughResources")
                        && message.contains("minResources")
                        && pods.is_empty()
                }
                "Inqueue" => message.contains("nvidia.com/gpu"),
                _ => false,
            };
            explained.then(|| {
                (
                    phase,
                    format!("{}: {message}", condition.reason.unwrap_or_default()),
                )
            })
        },
    )
    .await;
    // And it keeps waiting whole.
    for _ in 0..10 {
        let pods = job_pods(client, ns, job).await;
        assert_eq!(
            bound_count(&pods),
            0,
            "{ns}/{job}: bound while short of GPUs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("{ns}/{job} waits whole: PodGroup {phase}, Unschedulable {condition}");
    phase
}

/// Waits until all `members` pods of the job are bound, then checks the PodGroup says so:
/// phase Running and no Unschedulable condition holding.
async fn binds_whole(client: &Client, ns: &str, job: &str, members: usize) -> Vec<Pod> {
    let pods = wait_for(
        Duration::from_secs(45),
        &format!("{ns}/{job}: all {members} pods bound"),
        || async {
            let pods = job_pods(client, ns, job).await;
            (pods.len() == members && bound_count(&pods) == members).then_some(pods)
        },
    )
    .await;
    wait_for(
        Duration::from_secs(20),
        &format!("{ns}/{job}: PodGroup Running, no Unschedulable condition holding"),
        || async {
            let pg = pod_group_named(client, ns, job).await?;
            let unschedulable = condition_message(client, ns, job).await;
            (pg_phase(&pg) == "Running" && unschedulable.is_none()).then_some(())
        },
    )
    .await;
    pods
}

/// The job reaches the operator's Running condition; the test then lets its pods (of
/// `role` only, if given) finish through the kwok runtime annotation, and the job reaches
/// Succeeded; its PodGroup then is Completed or, as the
/// training-operator and the MPI operator do with a finished job's, deleted.
async fn runs_to_success(client: &Client, ns: &str, kind: &str, job: &str, role: Option<&str>) {
    wait_job_condition(client, ns, kind, job, "Running").await;
    finish(client, ns, job, role).await;
    wait_job_condition(client, ns, kind, job, "Succeeded").await;
    wait_for(
        Duration::from_secs(20),
        &format!("{ns}/{job}: PodGroup Completed or deleted by the operator"),
        || async {
            match pod_group_named(client, ns, job).await {
                None => Some(()),
                Some(pg) => (pg_phase(&pg) == "Completed").then_some(()),
            }
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// The invariants, polled throughout
// ---------------------------------------------------------------------------------------

/// A namespace of its own with `nodes` two-GPU kwok nodes in a pool named after it.
async fn gpu_pool(client: &Client, ns: &str, nodes: usize) {
    namespace(client, ns).await;
    fake_nodes(client, ns, 1..=nodes, ns, &gpu_node()).await;
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// Runs a test's body on its own runtime while holding the volcano-name lock, taken outside
/// the runtime: the operators hard-code `schedulerName: volcano`, so the tests of this file
/// run one after another, each with its own rust-batch answering to that name.
fn with_volcano_name(test: impl Future<Output = ()>) {
    let _volcano = volcano_name_lock();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(test);
}

/// One training job from too few GPUs to success: its PodGroup, as the operator declares
/// it; waiting whole; all pods bound at once when GPU nodes arrive; the operator's Running,
/// then Succeeded.
async fn gpu_job_waits_whole_then_runs(
    client: &Client,
    ns: &str,
    job: Value,
    members: usize,
    gpus: u32,
    nodes_at_first: usize,
    nodes_in_all: usize,
) {
    let kind = job["kind"].as_str().unwrap().to_string();
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    gpu_pool(client, ns, nodes_at_first).await;
    create_job(client, job).await;
    operator_pod_group(client, ns, &name, members as i32, Some(gpus)).await;
    waits_whole_for_gpus(client, ns, &name).await;
    fake_nodes(
        client,
        ns,
        nodes_at_first + 1..=nodes_in_all,
        ns,
        &gpu_node(),
    )
    .await;
    binds_whole(client, ns, &name, members).await;
    runs_to_success(client, ns, &kind, &name, None).await;
}

#[test]
fn training_operator_tfjob_and_pytorchjob_wait_whole_for_gpus_then_bind_whole_and_succeed() {
    with_volcano_name(async {
        let client = client().await;
        install_crds(&client).await;
        let operator = training_operator_installed();
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _training_operator = start_training_operator(&client, operator).await;
        let (tf, pt) = ("e2e-kf-tfjob", "e2e-kf-pytorchjob");
        guarded(&client, &[tf, pt], async {
            tokio::join!(
                // 1 PS + 4 workers × 2 GPUs: 8 GPUs; one 2-GPU node at first, four in all.
                gpu_job_waits_whole_then_runs(
                    &client,
                    tf,
                    tfjob(tf, "mnist", 4, 2, None),
                    5,
                    8,
                    1,
                    4
                ),
                // Master + 3 workers × 1 GPU: 4 GPUs; one 2-GPU node at first, two in all.
                gpu_job_waits_whole_then_runs(
                    &client,
                    pt,
                    pytorchjob(pt, "resnet", 3, 1, None),
                    4,
                    4,
                    1,
                    2
                ),
            )
        })
        .await;
    });
}

#[test]
fn mpi_operator_mpijob_launcher_and_workers_bind_as_one_gang() {
    with_volcano_name(async {
        let client = client().await;
        install_crds(&client).await;
        let operator = mpi_operator_installed();
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _mpi_operator = start_mpi_operator(operator).await;
        let ns = "e2e-kf-mpijob";
        namespace(&client, ns).await;
        fake_nodes(
            &client,
            ns,
            1..=2,
            ns,
            &json!({"cpu": "8", "memory": "32Gi"}),
        )
        .await;
        guarded(&client, &[ns], async {
            create_job(&client, mpijob(ns, "pi", 3, None)).await;
            // minMember counts the launcher: workers + 1.
            operator_pod_group(&client, ns, "pi", 4, None).await;
            // The operator makes the workers itself and the launcher as a batch/v1 Job; with no
            // Job controller running yet, the gang has 3 of its 4 pods and nothing binds, though
            // the nodes have room for all of them.
            wait_for(Duration::from_secs(30), "3 MPI worker pods", || async {
                (job_pods(&client, ns, "pi").await.len() == 3).then_some(())
            })
            .await;
            for _ in 0..15 {
                let pods = job_pods(&client, ns, "pi").await;
                assert_eq!(
                    bound_count(&pods),
                    0,
                    "MPI workers bound without their launcher"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let message = wait_for(
                Duration::from_secs(10),
                "the PodGroup saying the gang lacks a pod",
                || condition_message(&client, ns, "pi"),
            )
            .await;
            assert!(
                message.contains("only 3 pods exist, minMember is 4"),
                "{ns}/pi without its launcher: {message}"
            );
            let pg = pod_group_named(&client, ns, "pi").await.unwrap();
            eprintln!(
                "{ns}/pi without its launcher: PodGroup {} ({})",
                pg_phase(&pg),
                pg_conditions(&pg)
            );
            // The Job controller makes the launcher's pod: launcher and workers bind together.
            let _job_controller = start_job_controller().await;
            let pods = binds_whole(&client, ns, "pi", 4).await;
            let launchers = pods
                .iter()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("training.kubeflow.org/job-role"))
                        == Some(&"launcher".to_string())
                })
                .count();
            assert_eq!(launchers, 1, "the launcher is one of the gang's bound pods");
            runs_to_success(&client, ns, "MPIJob", "pi", Some("launcher")).await;
        })
        .await;
    });
}

#[test]
fn training_operator_jobs_competing_for_the_same_gpus_run_one_after_the_other() {
    with_volcano_name(async {
        let client = client().await;
        install_crds(&client).await;
        let operator = training_operator_installed();
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _training_operator = start_training_operator(&client, operator).await;
        let ns = "e2e-kf-compete";
        // 4 GPUs; each job wants all of them.
        gpu_pool(&client, ns, 2).await;
        let jobs = [("TFJob", "tf-first", 3), ("PyTorchJob", "pt-second", 2)];
        guarded(&client, &[ns], async {
            create_job(&client, tfjob(ns, "tf-first", 2, 2, Some("4s"))).await;
            create_job(&client, pytorchjob(ns, "pt-second", 1, 2, Some("4s"))).await;
            // Per job: when all its pods were first seen bound, when all had finished.
            let mut all_bound: HashMap<&str, Instant> = HashMap::new();
            let mut all_finished: HashMap<&str, Instant> = HashMap::new();
            let deadline = Instant::now() + Duration::from_secs(90);
            while all_finished.len() < jobs.len() {
                assert!(
                    Instant::now() < deadline,
                    "both jobs not finished after 90 s"
                );
                let mut holding_gpus = Vec::new();
                // One list for both jobs: what it shows held at one moment.
                let all = namespace_pods(&client, ns).await;
                // One time for everything this list shows: the first job seen finished and
                // the second seen bound in the same list is "one after the other", not a tie
                // broken by the order of the loop.
                let seen = Instant::now();
                for (_, job, members) in jobs {
                    let pods = of_job(&all, job);
                    let bound = bound_count(&pods);
                    let finished = pods.iter().filter(|p| phase(p) == "Succeeded").count();
                    if bound == members {
                        all_bound.entry(job).or_insert(seen);
                    }
                    if finished == members {
                        all_finished.entry(job).or_insert(seen);
                    }
                    let gpus_held = pods.iter().any(|p| {
                        node_of(p).is_some()
                            && !matches!(phase(p).as_str(), "Succeeded" | "Failed")
                            && p.spec.as_ref().unwrap().containers[0]
                                .resources
                                .as_ref()
                                .and_then(|r| r.requests.as_ref())
                                .is_some_and(|r| r.contains_key("nvidia.com/gpu"))
                    });
                    if gpus_held {
                        holding_gpus.push(job);
                    }
                }
                assert!(
                    holding_gpus.len() < 2,
                    "both jobs hold GPUs at once: {holding_gpus:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // One after the other: the second bound only once the first had finished.
            let mut order: Vec<&str> = jobs.iter().map(|(_, j, _)| *j).collect();
            order.sort_by_key(|j| all_bound[j]);
            let (first, second) = (order[0], order[1]);
            assert!(
                all_bound[second] >= all_finished[first],
                "{second} bound before {first} finished"
            );
            eprintln!(
                "{first} ran first; {second} bound {:.1} s after {first} finished",
                (all_bound[second] - all_finished[first]).as_secs_f64()
            );
            for (kind, job, _) in jobs {
                wait_job_condition(&client, ns, kind, job, "Succeeded").await;
            }
        })
        .await;
    });
}

/// A TFJob bound and running (4 GPUs, long runtime) and a PyTorchJob waiting for GPUs in
/// the same 4-GPU pool: the setting of both restart tests.
async fn one_running_one_waiting(client: &Client, ns: &str) -> BTreeMap<String, (String, String)> {
    gpu_pool(client, ns, 2).await;
    // No runtime: it runs until the test finishes it.
    create_job(client, tfjob(ns, "running", 2, 2, None)).await;
    let running = binds_whole(client, ns, "running", 3).await;
    wait_job_condition(client, ns, "TFJob", "running", "Running").await;
    create_job(client, pytorchjob(ns, "waiting", 1, 2, None)).await;
    operator_pod_group(client, ns, "waiting", 2, Some(4)).await;
    waits_whole_for_gpus(client, ns, "waiting").await;
    placements(&running)
}

/// The running job's pods are the same pods on the same nodes, still running, and the
/// waiting job has no pod bound.
async fn undisturbed(
    client: &Client,
    ns: &str,
    before: &BTreeMap<String, (String, String)>,
    what: &str,
) {
    let pods = job_pods(client, ns, "running").await;
    assert_eq!(
        &placements(&pods),
        before,
        "{what}: the running job's pods moved or were replaced"
    );
    assert!(
        pods.iter().all(|p| phase(p) == "Running"),
        "{what}: the running job's pods are not all Running"
    );
    assert_eq!(
        bound_count(&job_pods(client, ns, "waiting").await),
        0,
        "{what}: the waiting job bound part of itself"
    );
}

#[test]
fn rust_batch_restart_mid_job_leaves_operator_job_intact_and_waiting_job_binds_whole_after() {
    with_volcano_name(async {
        let client = client().await;
        install_crds(&client).await;
        let operator = training_operator_installed();
        let (scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _training_operator = start_training_operator(&client, operator).await;
        let ns = "e2e-kf-scheduler-restart";
        guarded(&client, &[ns], async {
            let before = one_running_one_waiting(&client, ns).await;
            drop(scheduler);
            for _ in 0..10 {
                undisturbed(&client, ns, &before, "rust-batch down").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
            for _ in 0..10 {
                undisturbed(&client, ns, &before, "rust-batch back").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let pg = pod_group_named(&client, ns, "running").await.unwrap();
            assert_eq!(
                pg_phase(&pg),
                "Running",
                "the running job's PodGroup after the restart"
            );
            assert_eq!(
                job_condition(&client, ns, "TFJob", "running", "Running")
                    .await
                    .as_deref(),
                Some("True"),
                "the operator's TFJob is still Running"
            );
            fake_nodes(&client, ns, 3..=4, ns, &gpu_node()).await;
            binds_whole(&client, ns, "waiting", 2).await;
            assert_eq!(placements(&job_pods(&client, ns, "running").await), before);
            finish_both(&client, ns).await;
        })
        .await;
    });
}

/// The training-operator stopped while a TFJob runs and a PyTorchJob waits for GPUs: the
/// TFJob's pods stay bound where they are; once the operator is back, the PyTorchJob binds
/// whole when GPUs arrive, and both succeed.
async fn training_operator_restart(client: &Client, operator: &Built, ns: &str) {
    let mut training_operator = start_training_operator(client, operator).await;
    let before = one_running_one_waiting(client, ns).await;
    training_operator.stop(Duration::from_secs(15));
    for _ in 0..10 {
        undisturbed(client, ns, &before, "training-operator down").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _training_operator = start_training_operator(client, operator).await;
    undisturbed(client, ns, &before, "training-operator back").await;
    assert_eq!(
        job_condition(client, ns, "TFJob", "running", "Running")
            .await
            .as_deref(),
        Some("True"),
        "the running TFJob is still Running for the restarted operator"
    );
    // Room for the waiting job: it binds whole, and both finish.
    fake_nodes(client, ns, 3..=4, ns, &gpu_node()).await;
    binds_whole(client, ns, "waiting", 2).await;
    assert_eq!(placements(&job_pods(client, ns, "running").await), before);
    finish_both(client, ns).await;
}

/// The end of both restart tests: the once-waiting PyTorchJob and the running TFJob finish
/// and succeed.
async fn finish_both(client: &Client, ns: &str) {
    runs_to_success(client, ns, "PyTorchJob", "waiting", None).await;
    runs_to_success(client, ns, "TFJob", "running", None).await;
}

/// The MPI operator stopped while an MPIJob runs and another waits for cpu: the running
/// one's pods stay bound where they are; once the operator leads again, the waiting one's
/// launcher and workers bind whole when a node arrives, and it succeeds.
async fn mpi_operator_restart(client: &Client, operator: &Built, ns: &str) {
    let mut mpi_operator = start_mpi_operator(operator).await;
    // One 4-cpu node: room for one 3-pod job.
    namespace(client, ns).await;
    fake_nodes(client, ns, 1..=1, ns, &cpu_node()).await;
    // Its launcher has no runtime: it runs however long the restart takes.
    create_job(client, mpijob(ns, "running", 2, None)).await;
    let before = placements(&binds_whole(client, ns, "running", 3).await);
    wait_job_condition(client, ns, "MPIJob", "running", "Running").await;
    create_job(client, mpijob(ns, "waiting", 2, None)).await;
    operator_pod_group(client, ns, "waiting", 3, None).await;
    wait_for(
        Duration::from_secs(30),
        "the waiting MPIJob's 3 pods, its PodGroup saying it is short of cpu",
        || async {
            let pods = job_pods(client, ns, "waiting").await;
            let message = condition_message(client, ns, "waiting").await?;
            (pods.len() == 3 && message.contains("cpu")).then_some(())
        },
    )
    .await;
    mpi_operator.stop(Duration::from_secs(15));
    for _ in 0..10 {
        undisturbed(client, ns, &before, "MPI operator down").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // It leads again only once the old process's Lease has expired (15 s: it is not
    // released on shutdown).
    let restart = Instant::now();
    let _mpi_operator = start_mpi_operator(operator).await;
    eprintln!(
        "mpi-operator leading again after {:.1} s",
        restart.elapsed().as_secs_f64()
    );
    undisturbed(client, ns, &before, "MPI operator back").await;
    assert_eq!(
        job_condition(client, ns, "MPIJob", "running", "Running")
            .await
            .as_deref(),
        Some("True"),
        "the running MPIJob is still Running for the restarted operator"
    );
    // Room for the waiting job: launcher and workers bind whole, and it succeeds.
    fake_nodes(client, ns, 2..=2, ns, &cpu_node()).await;
    binds_whole(client, ns, "waiting", 3).await;
    runs_to_success(client, ns, "MPIJob", "waiting", Some("launcher")).await;
    assert_eq!(
        placements(&job_pods(client, ns, "running").await),
        before,
        "the running MPIJob's pods moved or were replaced"
    );
}

#[test]
fn operator_restarts_leave_bound_jobs_bound_and_waiting_jobs_bind_whole_after() {
    with_volcano_name(async {
        let client = client().await;
        install_crds(&client).await;
        let training = training_operator_installed();
        let mpi = mpi_operator_installed();
        let (_scheduler, _port) = start_ready_scheduler("volcano", &[]).await;
        let _job_controller = start_job_controller().await;
        let (tf, mpi_ns) = (
            "e2e-kf-training-operator-restart",
            "e2e-kf-mpi-operator-restart",
        );
        // Side by side: the MPI operator's restart waits out its Lease meanwhile.
        guarded(&client, &[tf, mpi_ns], async {
            tokio::join!(
                training_operator_restart(&client, training, tf),
                mpi_operator_restart(&client, mpi, mpi_ns),
            )
        })
        .await;
    });
}
