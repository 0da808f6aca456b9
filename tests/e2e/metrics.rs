//! /metrics of a scheduler running on the real control plane has every metric the docs'
//! metrics table names (read from docs/src/metrics.md, so the list and the code cannot drift),
//! and the per-queue values (Volcano's names) say what the cluster holds.

use std::time::Duration;

use crate::common::*;
use kube::api::{Api, PostParams};
use rust_batch::kube::dialects::volcano::Queue;
use serde_json::json;

const NS: &str = "e2e-metrics";
const POOL: &str = "e2e-metrics";
const SCHEDULER: &str = "rb-metrics";
const QUEUE: &str = "metrics-q";

/// The metric names the docs' table lists (first column, between the markers).
fn documented() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/metrics.md"))
            .expect("docs/src/metrics.md");
    let start = readme
        .find("<!-- metrics")
        .expect("docs/src/metrics.md has the metrics table");
    let end = readme[start..]
        .find("<!-- /metrics -->")
        .expect("the metrics table ends")
        + start;
    let names: Vec<String> = readme[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect();
    assert!(
        names.len() > 20,
        "docs/src/metrics.md lists the metrics: {names:?}"
    );
    names
}

/// A sample's value: the series of `name` that has every label pair of `labels`.
fn sample_with(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .find_map(|l| l.rsplit_once("} ")?.1.trim().parse().ok())
}

/// A sample's value: `name{labels} value`, labels given as they appear.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_metric_is_served() {
    let names = documented();
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    let q: Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": QUEUE},
        "spec": {"weight": 2, "capability": {"cpu": "3", "memory": "64Gi", "nvidia.com/gpu": "2"}, "reclaimable": true}
    }))
    .unwrap();
    Api::<Queue>::all(client.clone())
        .create(&PostParams::default(), &q)
        .await
        .expect("queue created");
    fake_node(
        &client,
        "metrics-n1",
        POOL,
        json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}),
    )
    .await;
    let port = free_port();
    let _scheduler =
        start_scheduler_with(SCHEDULER, &["--http-address", &format!("127.0.0.1:{port}")]);
    let place = Place {
        client: &client,
        ns: NS,
        pool: POOL,
        scheduler: SCHEDULER,
    };
    pod_group_in(&client, NS, "train", 2, QUEUE).await;
    for i in 0..2 {
        place
            .pod(
                "train",
                &format!("train-{i}"),
                "worker",
                json!({"cpu": "1", "nvidia.com/gpu": "1"}),
                None,
            )
            .await;
    }
    // Beyond the queue's capability (3 cpu) on its own: waits, counted as unschedulable.
    pod_group_in(&client, NS, "big", 1, QUEUE).await;
    place
        .pod("big", "big-0", "worker", json!({"cpu": "4"}), None)
        .await;
    let text = wait_for(
        Duration::from_secs(60),
        "the gang bound and the metrics showing it",
        || async {
            let (code, text) = http_get(port, "/metrics").await?;
            assert_eq!(code, 200);
            let running = sample(
                &text,
                "volcano_queue_pod_group_running_count",
                &format!("queue_name=\"{QUEUE}\""),
            );
            // The gang counts as running once its binds are assumed; the attempts
            // counter moves when the API server answers them, a moment later.
            let scheduled = sample(
                &text,
                "volcano_schedule_attempts_total",
                "result=\"scheduled\"",
            );
            (running == Some(1.0) && scheduled.is_some_and(|n| n >= 2.0)).then_some(text)
        },
    )
    .await;
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !text.contains(&format!("# TYPE {n} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not served: {missing:?}\n{text}"
    );
    let q = format!("queue_name=\"{QUEUE}\"");
    assert_eq!(
        sample(&text, "volcano_queue_allocated_milli_cpu", &q),
        Some(2000.0)
    );
    assert_eq!(
        sample(
            &text,
            "volcano_queue_allocated_scalar_resources",
            &format!("{q},resource=\"nvidia.com/gpu\"")
        ),
        Some(2000.0),
        "extended resources in milli-units"
    );
    assert_eq!(
        sample(&text, "volcano_queue_capacity_milli_cpu", &q),
        Some(3000.0)
    );
    assert_eq!(
        sample(
            &text,
            "volcano_queue_capacity_scalar_resources",
            &format!("{q},resource=\"nvidia.com/gpu\"")
        ),
        Some(2000.0)
    );
    // Each dimension the capability names (one it does not name has no series).
    assert_eq!(
        sample(&text, "volcano_queue_capacity_memory_bytes", &q),
        Some((64u64 << 30) as f64)
    );
    assert_eq!(sample(&text, "volcano_queue_weight", &q), Some(2.0));
    assert!(sample(&text, "volcano_queue_deserved_milli_cpu", &q).is_some_and(|d| d > 0.0));
    assert_eq!(sample(&text, "rust_batch_leader", ""), Some(1.0));
    let unschedulable = wait_for(Duration::from_secs(30), "big-0 counted", || async {
        let (_, text) = http_get(port, "/metrics").await?;
        sample(
            &text,
            "volcano_schedule_attempts_total",
            "result=\"unschedulable\"",
        )
        .filter(|n| *n >= 1.0)
    })
    .await;
    // Volcano's queue and gang metrics its dashboards query (tests/offline/volcano_dashboards.rs
    // checks every name; these, what they say): placed and pending requests, what the queue
    // may hold (its 3 cpu), the pod `big` still waits for, how long `train` took to place.
    wait_for(
        Duration::from_secs(30),
        "request, real capacity and big's count",
        || async {
            let (_, text) = http_get(port, "/metrics").await?;
            let q = [("queue_name", QUEUE)];
            let request = sample_with(&text, "volcano_queue_request_milli_cpu", &q);
            let real = sample_with(&text, "volcano_queue_real_capacity_milli_cpu", &q);
            let big = sample_with(&text, "volcano_unschedule_task_count", &[("job_id", "big")]);
            (request == Some(6000.0) && real == Some(3000.0) && big == Some(1.0)).then_some(())
        },
    )
    .await;
    let train = [
        ("job_name", "train"),
        ("queue", QUEUE),
        ("job_namespace", NS),
    ];
    assert!(
        sample_with(&text, "volcano_e2e_job_scheduling_duration", &train)
            .is_some_and(|ms| ms > 0.0),
        "train's creation to its pods placed, ms"
    );
    eprintln!(
        "{} documented metrics served; {unschedulable} unschedulable attempts",
        names.len()
    );
    check_invariants(&client, NS).await;
}
