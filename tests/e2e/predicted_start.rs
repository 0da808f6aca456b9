//! End-to-end on a real control plane (kube-apiserver + etcd + kwok, started by
//! tests/cluster/with-cluster.sh): `rust-batch run --predict-start` puts each waiting gang's
//! predicted start in its PodGroup's condition message and annotation, in `explain`, and in
//! the metric. Without a cluster this test fails; it never skips.

use std::time::Duration;

use crate::common::*;
use kube::api::Api;
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::json;

const SCHEDULER: &str = "rb-predict";
const NS: &str = "e2e-predict";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gang_is_told_when_it_will_start_by_the_running_gangs_estimate() {
    let client = client().await;
    install_crds(&client).await;
    let (_scheduler, port) = start_ready_scheduler(SCHEDULER, &["--predict-start"]).await;
    let place = Place {
        client: &client,
        ns: NS,
        pool: NS,
        scheduler: SCHEDULER,
    };
    namespace(&client, NS).await;
    fake_nodes(
        &client,
        "predict",
        1..=1,
        NS,
        &json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}),
    )
    .await;
    wait_node_ready(&client, "predict-n1", Duration::from_secs(30)).await;

    // The running gang holds the node's 8 GPUs for 10m by its estimate.
    pod_group(&client, NS, "running", 1).await;
    let estimate = |e: &str| json!({"scheduling.k8s.io/group-name": "running", "rust-batch.io/runtime-estimate": e});
    place
        .raw_pod(
            "running-0",
            json!({}),
            estimate("10m"),
            json!({"nvidia.com/gpu": "8"}),
        )
        .await;
    let started = wait_for(Duration::from_secs(30), "the running gang runs", || async {
        let pod = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), NS)
            .get("running-0")
            .await
            .ok()?;
        check_invariants(&client, NS).await;
        pod.status?.start_time.map(|t| t.0.as_millisecond())
    })
    .await;

    pod_group(&client, NS, "waiting", 1).await;
    place
        .raw_pod(
            "waiting-0",
            json!({}),
            json!({"scheduling.k8s.io/group-name": "waiting", "rust-batch.io/runtime-estimate": "5m"}),
            json!({"nvidia.com/gpu": "8"}),
        )
        .await;
    let expected = {
        let at = std::time::UNIX_EPOCH + Duration::from_millis((started + 600_000) as u64);
        humantime::format_rfc3339_seconds(at).to_string()
    };
    let message = wait_for(
        Duration::from_secs(30),
        "the predicted start in the condition",
        || async {
            check_invariants(&client, NS).await;
            condition_message(&client, NS, "waiting")
                .await
                .filter(|m| m.contains("start predicted"))
        },
    )
    .await;
    assert!(
        message.ends_with(&format!(
            "; start predicted at {expected} (by runtime estimates)"
        )),
        "{message}"
    );
    let pg = Api::<PodGroup>::namespaced(client.clone(), NS)
        .get("waiting")
        .await
        .unwrap();
    assert_eq!(
        pg.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("rust-batch.io/predicted-start"))
            .map(String::as_str),
        Some(expected.as_str()),
        "{:?}",
        pg.metadata.annotations
    );
    let explained = explain(port, &format!("{NS}/waiting"));
    assert!(
        explained.contains(&format!(
            "\nstart predicted at {expected} (by runtime estimates)\n"
        )),
        "{explained}"
    );
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics answers");
    let line = format!(
        "rust_batch_gang_predicted_start_seconds{{name=\"waiting\",namespace=\"{NS}\"}} {}",
        (started + 600_000) / 1000
    );
    assert!(metrics.contains(&line), "{line} not in:\n{metrics}");
    // Nothing of the waiting gang is bound meanwhile.
    let pods = check_invariants(&client, NS).await;
    assert_eq!(node_of(&pods["waiting-0"]), None);
}
