//! The autoscaler signal on the real control plane: pending pods of a gang the nodes
//! cannot hold get PodScheduled=False with reason `Unschedulable` and the gang message
//! (what Cluster Autoscaler and Karpenter look for); pods held back only by their queue's
//! capability or by admission get PodScheduled=False with reasons of their own
//! (`QueueLimit`, `NotAdmitted`, `GangIncomplete`), so no autoscaler buys nodes for them.
//! The condition is written once, not every cycle nor per arriving sibling, and the bind
//! replaces it (PodScheduled=True).

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use rust_batch::kube::dialects::volcano::{PodGroup, Queue};
use serde_json::json;

const NS: &str = "e2e-autoscale";
const POOL: &str = "e2e-autoscale";
const SCHEDULER: &str = "rb-autoscale";

/// A pod's PodScheduled condition: (status, reason, message), and its resourceVersion.
async fn pod_scheduled(api: &Api<Pod>, name: &str) -> Option<(String, String, String, String)> {
    let p = api.get(name).await.ok()?;
    let rv = p.metadata.resource_version.clone()?;
    let c = p
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
        rv,
    ))
}

async fn wait_reason(api: &Api<Pod>, name: &str, reason: &str) -> (String, String) {
    wait_for(
        Duration::from_secs(60),
        &format!("{name} PodScheduled=False {reason}"),
        || async {
            let (status, r, message, rv) = pod_scheduled(api, name).await?;
            (status == "False" && r == reason).then_some((message, rv))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_pods_more_nodes_would_help_say_unschedulable() {
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    let queue: Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": "autoscale-capped"},
        "spec": {"weight": 1, "capability": {"cpu": "2"}, "reclaimable": true}
    }))
    .unwrap();
    Api::<Queue>::all(client.clone())
        .create(&PostParams::default(), &queue)
        .await
        .expect("queue created");
    fake_node(
        &client,
        "autoscale-n1",
        POOL,
        json!({"cpu": "4", "memory": "16Gi"}),
    )
    .await;
    let _scheduler = start_scheduler(SCHEDULER);
    let place = Place {
        client: &client,
        ns: NS,
        pool: POOL,
        scheduler: SCHEDULER,
    };
    // 3 × 2 cpu on one 4-cpu node: short of a node.
    pod_group(&client, NS, "big", 3).await;
    for i in 0..3 {
        place
            .pod(
                "big",
                &format!("big-{i}"),
                "worker",
                json!({"cpu": "2"}),
                None,
            )
            .await;
    }
    // Fits the node, not its queue's capability (2 cpu).
    pod_group_in(&client, NS, "capped", 3, "autoscale-capped").await;
    for i in 0..3 {
        place
            .pod(
                "capped",
                &format!("capped-{i}"),
                "worker",
                json!({"cpu": "1"}),
                None,
            )
            .await;
    }
    // minResources beyond the capability: never admitted.
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "unadmitted", "namespace": NS},
        "spec": {"minMember": 1, "queue": "autoscale-capped", "minResources": {"cpu": "3"}}
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pg)
        .await
        .unwrap();
    place
        .pod(
            "unadmitted",
            "unadmitted-0",
            "worker",
            json!({"cpu": "3"}),
            None,
        )
        .await;

    // Two of its three pods: still forming.
    pod_group(&client, NS, "forming", 3).await;
    place
        .pod(
            "forming",
            "forming-0",
            "worker",
            json!({"cpu": "100m"}),
            None,
        )
        .await;

    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let (m, forming_rv) = wait_reason(&pods, "forming-0", "GangIncomplete").await;
    assert_eq!(m, rust_batch::kube::driver::FORMING_MESSAGE);
    place
        .pod(
            "forming",
            "forming-1",
            "worker",
            json!({"cpu": "100m"}),
            None,
        )
        .await;
    wait_reason(&pods, "forming-1", "GangIncomplete").await;
    let (message, rv) = wait_reason(&pods, "big-0", "Unschedulable").await;
    eprintln!("big-0: Unschedulable: {message}");
    let gang_message = wait_for(
        Duration::from_secs(30),
        "the gang's Unschedulable condition",
        || condition_message(&client, NS, "big"),
    )
    .await;
    assert_eq!(message, gang_message, "the pod carries the gang message");
    assert!(message.contains("Insufficient cpu"), "{message}");
    for i in 1..3 {
        wait_reason(&pods, &format!("big-{i}"), "Unschedulable").await;
    }
    for i in 0..3 {
        let (m, _) = wait_reason(&pods, &format!("capped-{i}"), "QueueLimit").await;
        assert!(m.contains("capability"), "{m}");
    }
    let (m, _) = wait_reason(&pods, "unadmitted-0", "NotAdmitted").await;
    assert!(m.contains("not admitted"), "{m}");
    eprintln!("capped: QueueLimit; unadmitted-0: NotAdmitted: {m}");

    // Several cycles (500 ms each) later, nothing was written again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, _, _, rv_later) = pod_scheduled(&pods, "big-0").await.unwrap();
    assert_eq!(rv, rv_later, "the condition is written on change only");
    let (_, _, _, rv_later) = pod_scheduled(&pods, "forming-0").await.unwrap();
    assert_eq!(
        forming_rv, rv_later,
        "a sibling's arrival does not rewrite a forming gang's pods"
    );

    // A second node: the gang fits and binds, and the binding replaces the condition.
    fake_node(
        &client,
        "autoscale-n2",
        POOL,
        json!({"cpu": "4", "memory": "16Gi"}),
    )
    .await;
    for i in 0..3 {
        let name = format!("big-{i}");
        wait_for(
            Duration::from_secs(60),
            &format!("{name} bound with PodScheduled=True"),
            || async {
                let (status, ..) = pod_scheduled(&pods, &name).await?;
                let p = pods.get(&name).await.ok()?;
                (status == "True" && node_of(&p).is_some()).then_some(())
            },
        )
        .await;
    }
    // The others still wait for their queue, still saying so.
    let (status, reason, ..) = pod_scheduled(&pods, "capped-0").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "QueueLimit"));
    check_invariants(&client, NS).await;
}
