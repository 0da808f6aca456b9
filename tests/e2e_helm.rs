//! The Helm chart's render (deploy/rust-batch.yaml) on the real control plane (started by
//! tests/cluster/with-cluster.sh from tests/run.sh): the API server accepts every object
//! (`kubectl apply --dry-run=server`, CRDs installed first), PodSecurity "restricted" admits
//! the scheduler's pod, and rust-batch run exactly as the Deployment runs it — its arguments,
//! its ConfigMap's configuration, its ServiceAccount's RBAC, its Lease and leader fence —
//! binds a gang. Without a cluster these tests fail; they never skip.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::json;

const NAMESPACE: &str = "rust-batch-system";

fn documents() -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(rendered_manifests())
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

fn of_kind(kind: &str) -> serde_yaml::Value {
    documents()
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the render"))
}

/// The render's Namespace, applied (server-side, idempotent): namespaced objects can only be
/// dry-run into a namespace that exists.
async fn ensure_namespace(client: &kube::Client) {
    let ns: Namespace = serde_yaml::from_value(of_kind("Namespace")).unwrap();
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
    let out = kubectl_admin(
        &["apply", "--dry-run=server", "-o", "name", "-f", "-"],
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
    let ns: Namespace = serde_yaml::from_value(of_kind("Namespace")).unwrap();
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

    // The Deployment's arguments, with the paths and names a test on a shared cluster needs:
    // the mounted config is the file above, the scheduler answers to a name of its own (other
    // tests use rust-batch and volcano), HTTP on a free loopback port. Leader election, its
    // Lease (rust-batch-system/rust-batch) and the fence bound to it stay as shipped.
    let container = of_kind("Deployment")["spec"]["template"]["spec"]["containers"][0].clone();
    let shipped: Vec<String> = serde_yaml::from_value(container["args"].clone()).unwrap();
    assert_eq!(shipped[0], "run");
    let port = free_port();
    let scheduler = "rb-helm";
    let mut args = Vec::new();
    for a in &shipped {
        if a.starts_with("--scheduler-conf=") {
            args.push(format!("--scheduler-conf={}", conf_path.display()));
        } else if a.starts_with("--scheduler-name=") {
            continue;
        } else if a.starts_with("--http-address=") {
            args.push(format!("--http-address=127.0.0.1:{port}"));
        } else {
            args.push(a.clone());
        }
    }
    args.push(format!("--scheduler-name={scheduler}"));
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
