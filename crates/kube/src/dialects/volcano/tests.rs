use super::*;

fn queue(name: &str, spec: serde_json::Value) -> Queue {
    serde_json::from_value(json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})).unwrap()
}

#[test]
fn queue_problems_are_named() {
    let qs = [
        queue("root-child", json!({"parent": "root"})),
        queue("orphan", json!({"parent": "nowhere"})),
        queue("a", json!({"parent": "b"})),
        queue("b", json!({"parent": "a"})),
        queue(
            "greedy",
            json!({"capability": {"cpu": "4"}, "guarantee": {"resource": {"cpu": "8", "memory": "1Gi"}}}),
        ),
        queue(
            "fine",
            json!({"capability": {"cpu": "8"}, "guarantee": {"resource": {"cpu": "4"}}}),
        ),
    ];
    let p = queue_problems(qs.iter());
    assert_eq!(p["orphan"], "spec.parent: queue \"nowhere\" does not exist");
    assert_eq!(p["a"], "spec.parent: queues a -> b form a cycle");
    assert_eq!(p["b"], p["a"]);
    assert_eq!(
        p["greedy"],
        "spec.guarantee: cpu 8 is above the capability 4"
    );
    assert!(
        !p.contains_key("fine") && !p.contains_key("root-child"),
        "{p:?}"
    );
}

#[test]
fn queue_status_counts_gangs_per_phase_and_is_not_written_again_once_stored() {
    let mut gangs = crate::snapshot::QueueSums {
        phases: [1, 0, 2, 0, 0],
        ..Default::default()
    };
    gangs.allocated.milli_cpu = 1500;
    let mut q = queue("q", json!({}));
    q.status = Some(serde_json::from_value(json!({"allocated": {"memory": "1Gi"}})).unwrap());
    let patch = queue_status_patch(&q, &gangs).expect("the counts are news");
    assert_eq!(
        patch["status"],
        json!({"state": "Open", "pending": 1, "inqueue": 0, "running": 2, "unknown": 0,
                   "completed": 0, "allocated": {"cpu": "1500m", "memory": null}})
    );
    // Stored as patched: nothing more to write.
    let mut stored = patch["status"].clone();
    stored["allocated"] = json!({"cpu": "1500m"});
    q.status = Some(serde_json::from_value(stored).unwrap());
    assert_eq!(queue_status_patch(&q, &gangs), None);
}
