//! The Helm chart's render (deploy/rust-batch.yaml) on the real control plane (started by
//! tests/cluster/with-cluster.sh from tests/run.sh): the API server accepts every object
//! (`kubectl apply --dry-run=server`, CRDs installed first), PodSecurity "restricted" admits
//! the scheduler's pod, and rust-batch run exactly as the Deployment runs it — its arguments,
//! its ConfigMap's configuration, its ServiceAccount's RBAC, its Lease and leader fence —
//! binds a gang; so does the image's static binary in a root holding nothing but itself and
//! what the kubelet mounts, as UID 65532, with the in-cluster configuration of a real
//! ServiceAccount token. Without a cluster these tests fail; they never skip.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "rust-batch-system";

fn documents() -> Vec<serde_json::Value> {
    rust_batch::yaml::from_str_multiple::<serde_json::Value>(rendered_manifests())
        .expect("valid YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn of_kind(kind: &str) -> serde_json::Value {
    documents()
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the render"))
}

/// The render's Namespace, applied (server-side, idempotent): namespaced objects can only be
/// dry-run into a namespace that exists.
async fn ensure_namespace(client: &kube::Client) {
    let ns: Namespace = serde_json::from_value(of_kind("Namespace")).unwrap();
    Api::<Namespace>::all(client.clone())
        .patch(
            NAMESPACE,
            &PatchParams::apply("rust-batch-e2e-helm").force(),
            &Patch::Apply(&ns),
        )
        .await
        .expect("the render's Namespace applies");
}

#[tokio::test]
async fn the_render_passes_a_server_side_dry_run() {
    let client = client().await;
    install_crds(&client).await;
    ensure_namespace(&client).await;
    // Server-side apply: the other tests of this binary apply the same render for real
    // (`scheduler_kubeconfig`), and a client-side apply's read-then-create would race them
    // (a dry-run create of an object created meanwhile is refused: AlreadyExists).
    let out = kubectl_admin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-o",
            "name",
            "-f",
            "-",
        ],
        rendered_manifests(),
    );
    let accepted: Vec<&str> = out.lines().collect();
    eprintln!("server dry run accepted:\n{out}");
    assert_eq!(
        accepted.len(),
        documents().len(),
        "every object of the render is accepted: {accepted:?}"
    );
    for object in [
        "clusterrole.rbac.authorization.k8s.io/rust-batch",
        "deployment.apps/rust-batch",
        "validatingadmissionpolicy.admissionregistration.k8s.io/rust-batch-leader-fence",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/rust-batch-leader-fence",
        "poddisruptionbudget.policy/rust-batch",
    ] {
        assert!(accepted.contains(&object), "{object} in {accepted:?}");
    }
}

#[tokio::test]
async fn pod_security_restricted_admits_the_schedulers_pod() {
    let client = client().await;
    ensure_namespace(&client).await;
    let ns: Namespace = serde_json::from_value(of_kind("Namespace")).unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap_or_default()["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // The Deployment's pod template as the ReplicaSet controller would create it (none runs
    // here), dry-run: PodSecurity admission enforces on pods, not on Deployments.
    let template = of_kind("Deployment")["spec"]["template"].clone();
    let mut pod: serde_json::Value = serde_json::to_value(&template).unwrap();
    pod["metadata"]["name"] = "rust-batch-podsecurity-check".into();
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let admitted: Pod = serde_json::from_value(pod.clone()).unwrap();
    pods.create(&dry, &admitted)
        .await
        .unwrap_or_else(|e| panic!("restricted refuses the chart's pod: {e}"));

    // The same pod without its container securityContext is refused: the check is real.
    pod["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("securityContext");
    let refused: Pod = serde_json::from_value(pod).unwrap();
    let err = pods
        .create(&dry, &refused)
        .await
        .expect_err("a pod that may escalate privileges is refused");
    let message = err.to_string();
    assert!(message.contains("violates PodSecurity"), "{message}");
}

#[tokio::test]
async fn the_deployments_command_config_and_rbac_bind_a_gang() {
    let client = client().await;
    install_crds(&client).await;
    // Applies the render (ServiceAccount, ClusterRole, lease Role, fence) as the admin.
    let kubeconfig = scheduler_kubeconfig();

    let dir = std::env::temp_dir().join(format!("rb-e2e-helm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = of_kind("ConfigMap")["data"]["volcano-scheduler.conf"]
        .as_str()
        .expect("the ConfigMap's volcano-scheduler.conf")
        .to_string();
    let conf_path = dir.join("volcano-scheduler.conf");
    std::fs::write(&conf_path, conf).unwrap();

    // The Deployment's arguments; its Lease (rust-batch-system/rust-batch) and the fence
    // bound to it stay as shipped, the mounted config is the file above.
    let port = free_port();
    let scheduler = "rb-helm";
    let args = deployment_args(
        scheduler,
        &format!("127.0.0.1:{port}"),
        "rust-batch",
        &conf_path.display().to_string(),
    );
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    let log = dir.join("scheduler.log");
    let child = Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(&args)
        .env("KUBECONFIG", kubeconfig)
        // What the downward API gives the Deployment's pods.
        .env("POD_NAME", "rb-helm-0")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("RUST_LOG", "info,kube=warn,kube_client=error")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("rust-batch starts");
    let _scheduler = Scheduler(child);
    eprintln!("rust-batch {} (log {})", args.join(" "), log.display());

    let (ns, pool) = ("e2e-helm", "e2e-helm");
    namespace(&client, ns).await;
    let shape = json!({"cpu": "4", "memory": "16Gi"});
    fake_nodes(&client, "helm", 1..=2, pool, &shape).await;
    pod_group(&client, ns, "trainer", 3).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler,
    };
    for i in 0..3 {
        place
            .pod(
                "trainer",
                &format!("trainer-{i}"),
                "worker",
                json!({"cpu": "2"}),
                None,
            )
            .await;
    }
    let bound = wait_for(Duration::from_secs(60), "the gang bound", || async {
        let pods = check_invariants(&client, ns).await;
        (pods.len() == 3 && pods.values().all(|p| node_of(p).is_some())).then_some(pods)
    })
    .await;
    assert_not_over_committed(&client, &bound.values().cloned().collect::<Vec<_>>()).await;

    // It bound as the leader of the shipped Lease, through the shipped fence.
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get("rust-batch")
        .await
        .expect("the shipped Lease exists");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.starts_with("rb-helm-0_"), "lease holder {holder}");
    let (code, body) = http_get(port, "/readyz").await.expect("/readyz answers");
    assert_eq!((code, body.trim()), (200, "ok: leader"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Deployment's arguments for a test on a shared cluster: the scheduler answers to a
/// name of its own (other tests use rust-batch and volcano), serves HTTP on `http`, holds
/// `lease` and reads its configuration from `conf`; every other argument as shipped.
fn deployment_args(scheduler: &str, http: &str, lease: &str, conf: &str) -> Vec<String> {
    let container = of_kind("Deployment")["spec"]["template"]["spec"]["containers"][0].clone();
    let shipped: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let mut args: Vec<String> = shipped
        .into_iter()
        .filter(|a| !a.starts_with("--scheduler-name="))
        .map(|a| {
            if a.starts_with("--http-address=") {
                format!("--http-address={http}")
            } else if a.starts_with("--leader-elect-lease-name=") {
                format!("--leader-elect-lease-name={lease}")
            } else if a.starts_with("--scheduler-conf=") {
                format!("--scheduler-conf={conf}")
            } else {
                a
            }
        })
        .collect();
    args.push(format!("--scheduler-name={scheduler}"));
    args
}

#[tokio::test]
async fn the_static_binary_in_an_empty_root_schedules_as_the_service_account() {
    let client = client().await;
    install_crds(&client).await;
    // The render applied: the ServiceAccount exists and has the chart's permissions.
    scheduler_kubeconfig();

    // The pod's filesystem as the image and the kubelet make it: the binary, the ConfigMap
    // at its mount path, the ServiceAccount's token, CA and namespace. Nothing else: no
    // loader, no libc, no /etc/ssl, no /tmp.
    let root = std::env::temp_dir().join(format!("rb-e2e-image-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let sa = root.join("var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::create_dir_all(root.join("etc/rust-batch")).unwrap();
    std::fs::copy(static_binary(), root.join("rust-batch")).unwrap();
    let conf = of_kind("ConfigMap")["data"]["volcano-scheduler.conf"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(root.join("etc/rust-batch/volcano-scheduler.conf"), conf).unwrap();
    // A real token of the ServiceAccount (TokenRequest): no impersonation here.
    let token = kubectl_admin(
        &[
            "create",
            "token",
            "rust-batch",
            "-n",
            NAMESPACE,
            "--duration=1h",
        ],
        "",
    );
    std::fs::write(sa.join("token"), token.trim()).unwrap();
    let state = std::env::var("RB_CLUSTER_DIR").expect("RB_CLUSTER_DIR (with-cluster.sh)");
    std::fs::copy(
        format!("{state}/apiserver-certs/apiserver.crt"),
        sa.join("ca.crt"),
    )
    .unwrap();
    std::fs::write(sa.join("namespace"), NAMESPACE).unwrap();
    let url = std::env::var("RB_APISERVER_URL").expect("RB_APISERVER_URL (with-cluster.sh)");
    let (host, port) = url
        .trim_start_matches("https://")
        .rsplit_once(':')
        .expect("https://HOST:PORT");

    let scheduler = "rb-helm-image";
    let http = free_port();
    // Its own Lease: the other test of this file leads rust-batch-system/rust-batch.
    let args = deployment_args(
        scheduler,
        &format!("127.0.0.1:{http}"),
        "rb-helm-image",
        "/etc/rust-batch/volcano-scheduler.conf",
    );
    let log = std::env::temp_dir().join(format!("rb-e2e-image-{}.log", std::process::id()));
    let child = in_root(&root)
        .arg("/rust-batch")
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // What the kubelet sets: the in-cluster API server, and the downward API's values.
        .env("KUBERNETES_SERVICE_HOST", host)
        .env("KUBERNETES_SERVICE_PORT", port)
        .env("POD_NAME", "rb-helm-image-0")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("RUST_LOG", "info,kube=warn,kube_client=error")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("chroot / unshare runs");
    let _scheduler = Scheduler(child);
    eprintln!(
        "chroot {} /rust-batch {} (log {})",
        root.display(),
        args.join(" "),
        log.display()
    );

    let (ns, pool) = ("e2e-helm-image", "e2e-helm-image");
    namespace(&client, ns).await;
    fake_nodes(
        &client,
        "helm-image",
        1..=2,
        pool,
        &json!({"cpu": "4", "memory": "16Gi"}),
    )
    .await;
    pod_group(&client, ns, "trainer", 4).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler,
    };
    for i in 0..4 {
        place
            .pod(
                "trainer",
                &format!("trainer-{i}"),
                "worker",
                json!({"cpu": "2"}),
                None,
            )
            .await;
    }
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let bound = wait_for(
        Duration::from_secs(60),
        "the gang bound by the static binary",
        || async {
            let pods = check_invariants(&client, ns).await;
            (pods.len() == 4 && pods.values().all(|p| node_of(p).is_some())).then_some(pods)
        },
    )
    .await;
    assert_not_over_committed(&client, &bound.values().cloned().collect::<Vec<_>>()).await;
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get("rb-helm-image")
        .await
        .unwrap_or_else(|e| panic!("its Lease: {e}\n{}", log_text()));
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.starts_with("rb-helm-image-0_"),
        "lease holder {holder}"
    );
    let text = log_text();
    assert!(
        !text.contains("forbidden") && !text.contains("Forbidden"),
        "the ServiceAccount's own token lacks a permission:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
