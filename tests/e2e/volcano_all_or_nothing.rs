//! End-to-end on a real control plane (kube-apiserver + etcd + kwok, started by
//! tests/cluster/with-cluster.sh from tests/run.sh): S1 and S2 of docs/src/scenarios.md through
//! Volcano PodGroups, with the two invariants checked on every poll. Without a cluster this
//! test fails; it never skips.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use rust_batch::kube::dialects::volcano::{PodGroup, Queue};
use serde_json::json;

/// Its own scheduler name: volcano_controllers' tests run one answering to `rust-batch`.
const SCHEDULER: &str = "rb-all-or-nothing";

async fn s1(client: &Client, port: u16) {
    let (ns, pool) = ("e2e-s1", "e2e-s1");
    let place = Place {
        client,
        ns,
        pool,
        scheduler: SCHEDULER,
    };
    namespace(client, ns).await;
    let gpu_node = json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"});
    fake_nodes(client, "s1", 1..=2, pool, &gpu_node).await;
    // A queue of its own: every scheduler writes the status of the queues its gangs name,
    // from its own gangs, and other tests' schedulers run beside this one with gangs in
    // `default`.
    let queue: Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": ns}, "spec": {"weight": 1}
    }))
    .unwrap();
    Api::<Queue>::all(client.clone())
        .create(&kube::api::PostParams::default(), &queue)
        .await
        .expect("queue created");
    pod_group_in(client, ns, "tf-smoke-gpu", 5, ns).await;
    place
        .ps_and_workers("tf-smoke-gpu", "", 4, json!({"nvidia.com/gpu": "2"}), None)
        .await;
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
    wait_for(
        Duration::from_secs(30),
        "an Unschedulable event on the PodGroup",
        || async {
            let events = pod_events(client, ns, "tf-smoke-gpu").await;
            events
                .iter()
                .any(|(reason, note)| {
                    reason == "Unschedulable" && note.contains("short of 4 nvidia.com/gpu")
                })
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = check_invariants(client, ns).await;
    assert!(
        pods.values().all(|p| node_of(p).is_none()),
        "no S1 pod may be bound before the nodes arrive"
    );

    // The gang debug API (Koordinator's field names) and `rust-batch explain` say the same.
    let (code, body) = http_get(
        port,
        "/apis/v1/plugins/Coscheduling/gang/e2e-s1/tf-smoke-gpu",
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{body}");
    let gang: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(gang["minRequiredNumber"], 5);
    assert_eq!(gang["totalChildrenNum"], 5);
    assert_eq!(gang["boundChildren"].as_array().unwrap().len(), 0);
    assert_eq!(gang["gangFrom"], "GangFromPodGroupCrd");
    assert_eq!(gang["dialect"], "scheduling.volcano.sh");
    let reasons = gang["pending"].to_string();
    assert!(reasons.contains("Insufficient nvidia.com/gpu"), "{reasons}");
    let (code, body) = http_get(port, "/apis/v1/plugins/Coscheduling/gang/e2e-s1/nope")
        .await
        .unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("gang e2e-s1/nope not found"), "{body}");
    let text = explain(port, "e2e-s1/tf-smoke-gpu");
    assert!(text.contains("0/5 bound, minMember 5"), "{text}");
    assert!(text.contains("e2e-s1/worker-3: pending:"), "{text}");
    assert!(text.contains("Insufficient nvidia.com/gpu"), "{text}");

    fake_nodes(client, "s1", 3..=4, pool, &gpu_node).await;
    let pods = wait_for(Duration::from_secs(30), "S1 gang bound whole", || async {
        let pods = check_invariants(client, ns).await;
        pods.values().all(|p| phase(p) == "Running").then_some(pods)
    })
    .await;
    assert_eq!(
        distinct_nodes(&pods, "worker"),
        4,
        "every worker on a node with 2 free GPUs of its own"
    );
    // Told once per gang, not once per pod (an API write per pod saved at every bind).
    wait_for(
        Duration::from_secs(30),
        "a Scheduled event on the PodGroup",
        || async {
            pod_events(client, ns, "tf-smoke-gpu")
                .await
                .iter()
                .any(|(reason, note)| reason == "Scheduled" && note.contains("5/5 tasks"))
                .then_some(())
        },
    )
    .await;
    for pod in pods.keys() {
        let scheduled = pod_events(client, ns, pod)
            .await
            .into_iter()
            .filter(|(reason, _)| reason == "Scheduled")
            .count();
        assert_eq!(scheduled, 0, "{pod}: no per-pod Scheduled event by default");
    }
    let (_, body) = http_get(port, "/apis/v1/plugins/Coscheduling/gangs")
        .await
        .unwrap();
    let gangs: serde_json::Value = serde_json::from_str(&body).unwrap();
    let s1 = gangs
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "e2e-s1/tf-smoke-gpu")
        .unwrap();
    assert_eq!(s1["boundChildren"].as_array().unwrap().len(), 5, "{s1}");
    // The PodGroup and the queue report it.
    wait_for(
        Duration::from_secs(30),
        "PodGroup Running with 5 running pods",
        || async {
            let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
                .get("tf-smoke-gpu")
                .await
                .ok()?;
            let st = pg.status?;
            (st.phase.as_ref().map(|p| p.as_str()) == Some("Running") && st.running == Some(5))
                .then_some(())
        },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "queue e2e-s1 counts the running gang and its GPUs",
        || async {
            let q = Api::<Queue>::all(client.clone()).get(ns).await.ok()?;
            let st = q.status?;
            let gpus = st.allocated.get("nvidia.com/gpu").map(|g| g.0.clone());
            (st.running.unwrap_or(0) >= 1 && gpus.as_deref() == Some("8")).then_some(())
        },
    )
    .await;
}

async fn s2(client: &Client) {
    let (ns, pool) = ("e2e-s2", "e2e-s2");
    let place = Place {
        client,
        ns,
        pool,
        scheduler: SCHEDULER,
    };
    namespace(client, ns).await;
    let shape = json!({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"});
    fake_nodes(client, "s2", 1..=4, pool, &shape).await;
    pod_group(client, ns, "job1", 4).await;
    place
        .ps_and_workers(
            "job1",
            "job1-",
            3,
            json!({"nvidia.com/gpu": "1"}),
            Some("8s"),
        )
        .await;
    wait_for(Duration::from_secs(30), "job1 running", || async {
        let pods = check_invariants(client, ns).await;
        (pods.len() == 4 && pods.values().all(|p| phase(p) == "Running")).then_some(())
    })
    .await;
    pod_group(client, ns, "job2", 3).await;
    place
        .ps_and_workers("job2", "job2-", 2, json!({"nvidia.com/gpu": "1"}), None)
        .await;
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
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _scheduler = start_scheduler_with(SCHEDULER, &["--http-address", &address]);
    wait_for(Duration::from_secs(30), "/readyz ready", || async {
        http_get(port, "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    assert_eq!(http_get(port, "/healthz").await.map(|r| r.0), Some(200));
    s1(&client, port).await;
    s2(&client).await;
    // Every bind of S1 (5) and S2 (4 + 3) is counted; the latency histograms have samples.
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics answers");
    let value = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing in /metrics:\n{metrics}"))
    };
    assert_eq!(value("rust_batch_pods_bound_total"), 12.0);
    assert_eq!(value("rust_batch_bind_failures_total"), 0.0);
    assert!(value("rust_batch_e2e_scheduling_latency_seconds_count") >= 12.0);
    assert!(value("rust_batch_cycle_latency_seconds_count") > 0.0);
    assert!(
        metrics.contains("rust_batch_action_latency_seconds_count{action=\"allocate\"}"),
        "{metrics}"
    );
}
