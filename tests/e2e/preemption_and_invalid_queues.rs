//! Preemption and queue state on the real control plane: S6 (priority preemption within a
//! queue, through the pods/eviction API, with the `preempt` action configured), a victim its
//! PodDisruptionBudget protects, and invalid queues (an event each; everyone else keeps
//! scheduling).

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::Client;
use rust_batch::kube::dialects::volcano::{PodGroup, Queue};
use serde_json::json;

const CONF: &str = "actions: \"enqueue, allocate, preempt, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: proportion
  - name: nodeorder
";

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("created");
}

async fn gang(
    client: &Client,
    ns: &str,
    name: &str,
    queue: &str,
    class: &str,
    min: i32,
    pods: usize,
) {
    create(
        &Api::<PodGroup>::namespaced(client.clone(), ns),
        json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"minMember": min, "queue": queue, "priorityClassName": class}}),
    )
    .await;
    for i in 0..pods {
        create(
            &Api::<Pod>::namespaced(client.clone(), ns),
            json!({"metadata": {"name": format!("{name}-{i}"), "namespace": ns,
                                "labels": {"gang": name},
                                "annotations": {"scheduling.k8s.io/group-name": name}},
                   "spec": {"schedulerName": scheduler_of(ns), "priorityClassName": class, "nodeSelector": {"pool": ns},
                            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}),
        )
        .await;
    }
}

/// Each test runs its own scheduler on its own namespace's nodes: `e2e-s6` -> `rb-s6`.
fn scheduler_of(ns: &str) -> String {
    format!("rb-{}", ns.trim_start_matches("e2e-"))
}

fn running(pods: &std::collections::BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter()
        .filter(|(n, p)| n.starts_with(prefix) && node_of(p).is_some() && phase(p) == "Running")
        .count()
}

/// A namespace with priority classes `{prefix}-1` and `{prefix}-100` (prefix: the
/// namespace without `e2e-`), the given queues, `nodes` fake nodes of 4 CPUs and its own
/// scheduler running `CONF` (with preempt).
/// The cluster of a preemption scenario and its scheduler, serving HTTP on `port` (0: off).
async fn preemption_cluster(
    client: &Client,
    ns: &str,
    queues: &[&str],
    nodes: usize,
    port: u16,
) -> Scheduler {
    let prefix = ns.trim_start_matches("e2e-");
    install_crds(client).await;
    namespace(client, ns).await;
    for value in [1, 100] {
        create(
            &Api::<PriorityClass>::all(client.clone()),
            json!({"metadata": {"name": format!("{prefix}-{value}")}, "value": value}),
        )
        .await;
    }
    for q in queues {
        create(
            &Api::<Queue>::all(client.clone()),
            json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": q}, "spec": {"weight": 1}}),
        )
        .await;
    }
    for i in 1..=nodes {
        fake_node(
            client,
            &format!("{prefix}-n{i}"),
            ns,
            json!({"cpu": "4", "memory": "16Gi"}),
        )
        .await;
    }
    let conf = std::env::temp_dir().join(format!("rb-{prefix}-{}.conf", std::process::id()));
    std::fs::write(&conf, CONF).unwrap();
    let http = match port {
        0 => "off".to_string(),
        p => format!("127.0.0.1:{p}"),
    };
    start_scheduler_with(
        &scheduler_of(ns),
        &[
            "--http-address",
            &http,
            "--scheduler-conf",
            conf.to_str().unwrap(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_priority_preemption_within_a_queue() {
    let ns = "e2e-s6";
    let client = client().await;
    let port = free_port();
    let _scheduler = preemption_cluster(&client, ns, &["s6-q", "s6-other"], 3, port).await;

    gang(&client, ns, "low-a", "s6-q", "s6-1", 2, 4).await;
    gang(&client, ns, "low-b", "s6-q", "s6-1", 2, 4).await;
    gang(&client, ns, "bystander", "s6-other", "s6-1", 2, 4).await;
    wait_for(
        Duration::from_secs(60),
        "the cluster full of low-priority gangs",
        || async {
            let pods = check_invariants(&client, ns).await;
            (running(&pods, "low-a") == 4
                && running(&pods, "low-b") == 4
                && running(&pods, "bystander") == 4)
                .then_some(())
        },
    )
    .await;

    gang(&client, ns, "urgent", "s6-q", "s6-100", 4, 4).await;
    wait_for(
        Duration::from_secs(90),
        "the urgent gang bound after evictions",
        || async {
            let pods = check_invariants(&client, ns).await;
            for victim in ["low-a", "low-b"] {
                let left = pods.keys().filter(|n| n.starts_with(victim)).count();
                assert!(
                    left >= 2,
                    "victim gang {victim} left below its minMember: {left} pods"
                );
            }
            assert_eq!(
                running(&pods, "bystander"),
                4,
                "a pod of another queue was touched"
            );
            (running(&pods, "urgent") == 4).then_some(())
        },
    )
    .await;
    let mut preempted = 0;
    for victim in ["low-a", "low-b"] {
        for i in 0..4 {
            let events = pod_events(&client, ns, &format!("{victim}-{i}")).await;
            preempted += events
                .iter()
                .filter(|(r, note)| {
                    r == "Preempted"
                        && note.contains(&format!("preempted by {ns}/urgent (priority"))
                })
                .count();
        }
    }
    assert_eq!(preempted, 4, "four victims, each told who preempted it");
    // The metrics say the same: four victims of preempt (same queue), none of reclaim.
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics");
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    assert_eq!(
        value("rust_batch_victims_total{action=\"preempt\"}"),
        Some(4.0)
    );
    assert_eq!(
        value("rust_batch_victims_total{action=\"reclaim\"}"),
        Some(0.0)
    );
    assert!(value("volcano_total_preemption_attempts").is_some_and(|n| n >= 1.0));
}

/// S6 with a PodDisruptionBudget over one of the victim gangs. No disruption controller runs
/// here, so the budget never allows a disruption and the eviction API would refuse every
/// eviction it covers: the preemptor must take the other gang (whole, its surplus is not
/// enough) and never try the protected one, so no eviction is refused and no gang is left
/// half evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_never_picks_a_victim_its_disruption_budget_protects() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let ns = "e2e-pdb";
    let client = client().await;
    let _scheduler = preemption_cluster(&client, ns, &["pdb-q"], 2, 0).await;
    create(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        json!({"metadata": {"name": "protect-a", "namespace": ns},
               "spec": {"minAvailable": 4, "selector": {"matchLabels": {"gang": "low-a"}}}}),
    )
    .await;

    gang(&client, ns, "low-a", "pdb-q", "pdb-1", 2, 4).await;
    gang(&client, ns, "low-b", "pdb-q", "pdb-1", 2, 4).await;
    wait_for(
        Duration::from_secs(60),
        "the cluster full of low-priority gangs",
        || async {
            let pods = check_invariants(&client, ns).await;
            (running(&pods, "low-a") == 4 && running(&pods, "low-b") == 4).then_some(())
        },
    )
    .await;

    gang(&client, ns, "urgent", "pdb-q", "pdb-100", 4, 4).await;
    wait_for(
        Duration::from_secs(90),
        "the urgent gang bound in place of the unprotected gang",
        || async {
            let pods = check_invariants(&client, ns).await;
            assert_eq!(
                running(&pods, "low-a"),
                4,
                "a pod its disruption budget protects was evicted"
            );
            let low_b = pods.keys().filter(|n| n.starts_with("low-b")).count();
            assert!(
                low_b == 0 || low_b >= 2,
                "low-b left below its minMember: {low_b} pods"
            );
            (running(&pods, "urgent") == 4 && low_b == 0).then_some(())
        },
    )
    .await;
    for victim in ["low-a", "low-b"] {
        for i in 0..4 {
            let events = pod_events(&client, ns, &format!("{victim}-{i}")).await;
            let refused: Vec<_> = events
                .iter()
                .filter(|(r, _)| r == "EvictionFailed")
                .collect();
            assert!(refused.is_empty(), "{victim}-{i}: {refused:?}");
            let preempted = events.iter().any(|(r, _)| r == "Preempted");
            assert_eq!(preempted, victim == "low-b", "{victim}-{i}: {events:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_queues_get_an_event_and_the_rest_keeps_scheduling() {
    let ns = "e2e-qbad";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    fake_node(&client, "qbad-n1", ns, json!({"cpu": "4", "memory": "8Gi"})).await;
    let _scheduler = start_scheduler("rb-qbad");
    let queues = Api::<Queue>::all(client.clone());
    for (name, spec) in [
        ("qbad-orphan", json!({"weight": 1, "parent": "nowhere"})),
        ("qbad-x", json!({"weight": 1, "parent": "qbad-y"})),
        ("qbad-y", json!({"weight": 1, "parent": "qbad-x"})),
        (
            "qbad-greedy",
            json!({"weight": 1, "capability": {"cpu": "2"}, "guarantee": {"resource": {"cpu": "4"}}}),
        ),
        ("qbad-zero", json!({"weight": 0})),
        ("qbad-negative", json!({"weight": -2})),
    ] {
        create(
            &queues,
            json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }
    for (queue, expected) in [
        ("qbad-orphan", "queue \"nowhere\" does not exist"),
        ("qbad-x", "form a cycle"),
        ("qbad-greedy", "cpu 4 is above the capability 2"),
        ("qbad-zero", "spec.weight: must be at least 1, got 0"),
        ("qbad-negative", "spec.weight: must be at least 1, got -2"),
    ] {
        wait_for(Duration::from_secs(30), "an InvalidQueue event", || async {
            let events = pod_events(&client, "default", queue).await;
            events
                .iter()
                .any(|(r, note)| r == "InvalidQueue" && note.contains(expected))
                .then_some(())
        })
        .await;
    }
    let place = Place {
        client: &client,
        ns,
        pool: ns,
        scheduler: "rb-qbad",
    };
    pod_group(&client, ns, "fine", 1).await;
    place
        .pod("fine", "fine-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "everyone else keeps scheduling",
        || async { node_of(&check_invariants(&client, ns).await["fine-0"]).map(|_| ()) },
    )
    .await;
}
