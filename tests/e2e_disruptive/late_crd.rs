//! End-to-end on a real control plane: a PodGroup CRD that is not installed turns its
//! dialect off with one log line (no error flood), its pods wait with an event, and the
//! scheduler turns the dialect on by itself when the CRD is installed later. The HyperNode
//! CRD, missing too, holds nothing up either and is watched once installed. It removes the
//! legacy PodGroup and HyperNode CRDs, which other tests use and install again, so it runs
//! alone, in the disruptive test binary.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use rust_batch::kube::dialects::coscheduling::SigsPodGroup;
use serde_json::json;

const CRD: &str = "podgroups.scheduling.sigs.k8s.io";
const HYPERNODE_CRD: &str = "hypernodes.topology.volcano.sh";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_disables_its_dialect_with_one_line_until_it_is_installed() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let client = client().await;
    install_crds(&client).await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in [CRD, HYPERNODE_CRD] {
        let _ = crds.delete(crd, &DeleteParams::default()).await;
        wait_for(Duration::from_secs(60), &format!("{crd} gone"), || async {
            crds.get_opt(crd).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    let log = std::env::temp_dir().join(format!("rust-batch-late-crd-{}.log", std::process::id()));
    let name = "rust-batch-late-crd";
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _scheduler = start_scheduler_logged(name, &["--http-address", &address], &log);
    wait_for(Duration::from_secs(30), "/readyz ready", || async {
        http_get(port, "/readyz")
            .await
            .filter(|(c, _)| *c == 200)
            .map(|_| ())
    })
    .await;

    let ns = "e2e-late-crd";
    let place = Place {
        client: &client,
        ns,
        pool: ns,
        scheduler: name,
    };
    namespace(&client, ns).await;
    fake_nodes(
        &client,
        ns,
        1..=1,
        ns,
        &json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let labels = json!({"pod-group.scheduling.sigs.k8s.io": "late"});
    for i in 0..2 {
        place
            .raw_pod(
                &format!("late-{i}"),
                labels.clone(),
                json!({}),
                json!({"cpu": "1"}),
            )
            .await;
    }
    wait_for(
        Duration::from_secs(30),
        "the pods say their PodGroup is missing",
        || async {
            pod_events(&client, ns, "late-0")
                .await
                .iter()
                .any(|(_, note)| note.contains("PodGroup late does not exist"))
                .then_some(())
        },
    )
    .await;
    // Long enough for several polls for the CRD: still one line.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let pods = check_invariants(&client, ns).await;
    assert!(
        pods.values().all(|p| node_of(p).is_none()),
        "no gang, no bind"
    );

    install_crds(&client).await;
    let pg: SigsPodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "late", "namespace": ns}, "spec": {"minMember": 2}
    }))
    .unwrap();
    Api::<SigsPodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("legacy PodGroup created");
    wait_for(
        Duration::from_secs(45),
        "the gang binds once the CRD is there",
        || async {
            let pods = check_invariants(&client, ns).await;
            pods.values().all(|p| phase(p) == "Running").then_some(())
        },
    )
    .await;

    // Polled for every 10 s, like the dialect's.
    wait_for(
        Duration::from_secs(30),
        "a line says HyperNodes are watched",
        || async {
            std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .any(|l| l.contains("topology.volcano.sh HyperNode") && l.contains("CRD installed"))
                .then_some(())
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    let off: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("CRD not installed") && l.contains("scheduling.sigs.k8s.io"))
        .collect();
    assert_eq!(
        off.len(),
        1,
        "exactly one line says the dialect is off:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("CRD installed") && l.contains("scheduling.sigs.k8s.io")),
        "a line says it is on again:\n{text}"
    );
    let hypernode = |l: &&str| l.contains("topology.volcano.sh HyperNode");
    let off: Vec<&str> = text
        .lines()
        .filter(hypernode)
        .filter(|l| l.contains("CRD not installed"))
        .collect();
    assert_eq!(
        off.len(),
        1,
        "exactly one line says HyperNodes are off:\n{text}"
    );
    assert!(
        text.lines()
            .filter(hypernode)
            .any(|l| l.contains("CRD installed")),
        "a line says HyperNodes are watched:\n{text}"
    );
    let failures = text.lines().filter(|l| l.contains("watch failed")).count();
    assert!(failures <= 1, "no flood of watch errors:\n{text}");
    let _ = std::fs::remove_file(&log);
}
