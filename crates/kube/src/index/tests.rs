use super::*;
use crate::dialects::coscheduling::{SigsPodGroup, XK8sPodGroup};
use crate::dialects::volcano::PodGroup;
use serde::de::DeserializeOwned;
use serde_json::json;

fn object<K: DeserializeOwned>(api_version: &str, min: i32) -> K {
    serde_json::from_value(serde_json::json!({
        "apiVersion": api_version, "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": min}
    }))
    .unwrap()
}

fn min_member(st: &Index) -> Option<u32> {
    let s = st.cache.state();
    s.job_by_uid("ns/g").map(|id| s.job(id).min_member)
}

#[test]
fn a_priority_classs_protection_reaches_the_gangs_that_name_it() {
    let mut st = Index::default();
    let pg: PodGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": 1, "priorityClassName": "batch"}
    }))
    .unwrap();
    st.apply_group::<PodGroup>(&pg);
    let class = |annotations: serde_json::Value| -> PriorityClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "batch", "annotations": annotations},
            "value": 10
        }))
        .unwrap()
    };
    let policy = |st: &Index| {
        let s = st.cache.state();
        let j = s.job(s.job_by_uid("ns/g").unwrap());
        (j.priority, j.policy.min_runtime, j.policy.preemption_delay)
    };
    st.apply_priority_class(&class(serde_json::json!({
        "rust-batch.io/min-runtime": "10m", "rust-batch.io/preemption-delay": "1m"
    })));
    assert_eq!(policy(&st), (10, Some(600_000), Some(60_000)));
    // A bad value is left out (and reported); the other one stays.
    st.apply_priority_class(&class(serde_json::json!({
        "rust-batch.io/min-runtime": "0s", "rust-batch.io/preemption-delay": "1m"
    })));
    assert_eq!(policy(&st), (10, None, Some(60_000)));
    st.apply_priority_class(&class(serde_json::json!({})));
    assert_eq!(policy(&st), (10, None, None));
}

#[test]
fn podgroup_kinds_sharing_a_name_take_precedence_volcano_x_k8s_legacy() {
    let mut st = Index::default();
    st.apply_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 3));
    assert_eq!(min_member(&st), Some(3));
    st.apply_group::<XK8sPodGroup>(&object("scheduling.x-k8s.io/v1alpha1", 2));
    assert_eq!(min_member(&st), Some(2), "scheduler-plugins over legacy");
    st.apply_group::<PodGroup>(&object("scheduling.volcano.sh/v1beta1", 1));
    assert_eq!(min_member(&st), Some(1), "Volcano over both");
    // A later update of a lower kind does not take over.
    st.apply_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 5));
    assert_eq!(min_member(&st), Some(1));
    assert_eq!(st.group_dialect("ns/g"), Some(Dialect::VOLCANO));
    st.delete_group(Dialect::VOLCANO, "ns/g");
    assert_eq!(min_member(&st), Some(2), "the next kind takes over");
    st.delete_group(Dialect::X_K8S, "ns/g");
    assert_eq!(min_member(&st), Some(5));
    st.delete_group(Dialect::SIGS, "ns/g");
    assert_eq!(min_member(&st), None, "no object left: the gang is gone");
}

fn pod_group(rv: &str, phase: &str) -> PodGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns", "resourceVersion": rv},
        "spec": {"minMember": 1},
        "status": {"phase": phase}
    }))
    .unwrap()
}

#[test]
fn a_watch_event_older_than_the_stored_object_does_not_replace_it() {
    let mut st = Index::default();
    st.apply_group(&pod_group("20", "Running"));
    st.apply_group(&pod_group("12", "Pending"));
    let phase = |st: &Index| {
        st.groups.typed::<PodGroup>()["ns/g"]
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map(|p| p.as_str().to_string())
    };
    assert_eq!(
        phase(&st).as_deref(),
        Some("Running"),
        "older event ignored"
    );
    st.apply_group(&pod_group("21", "Inqueue"));
    assert_eq!(phase(&st).as_deref(), Some("Inqueue"), "newer event taken");
    assert!(older(Some("9"), Some("10")) && !older(Some("x"), Some("10")));
}

#[test]
fn a_pod_group_wakes_a_cycle_only_when_the_engine_can_act_on_it() {
    let mut counts = pod_group("6", "Inqueue");
    counts.status.as_mut().unwrap().running = Some(1);
    let mut bigger = pod_group("8", "Running");
    bigger.spec.min_member = Some(2);
    let steps = [
            (pod_group("5", "Inqueue"), Wake::Now, "a new gang"),
            (
                pod_group("5", "Inqueue"),
                Wake::No,
                "this version again: the watch's echo of the status writer's write, whose answer the index stored",
            ),
            (pod_group("4", "Pending"), Wake::No, "an older one"),
            (
                counts,
                Wake::Soon,
                "only its status counts changed (another writer): the status writer may mend it, no gang waits on it",
            ),
            (pod_group("7", "Running"), Wake::Now, "its phase changed"),
            (bigger, Wake::Now, "its minimum changed"),
        ];
    let mut st = Index::default();
    for (group, wake, why) in steps {
        assert_eq!(st.apply_group(&group), wake, "{why}");
    }
}

#[test]
fn an_answer_after_the_delete_event_does_not_bring_the_object_back() {
    let mut st = Index::default();
    let with_uid = |rv: &str| {
        let mut g = pod_group(rv, "Running");
        g.metadata.uid = Some("pg-uid".into());
        g
    };
    st.apply_group(&with_uid("5"));
    st.apply_group_answer(&with_uid("6"));
    assert_eq!(
        st.groups.typed::<PodGroup>()["ns/g"]
            .metadata
            .resource_version
            .as_deref(),
        Some("6"),
        "an answer updates the object the index has"
    );
    // The status writer's PATCH was answered, but the delete event came first.
    st.delete_group(Dialect::VOLCANO, "ns/g");
    st.apply_group_answer(&with_uid("7"));
    assert_eq!(st.group_dialect("ns/g"), None, "gone stays gone");
    assert!(st.cache.state().job_by_uid("ns/g").is_none());
    // A new object of the same name is another uid: the watch brings it, not an answer.
    let mut new = with_uid("9");
    new.metadata.uid = Some("other".into());
    st.apply_group(&new);
    st.apply_group_answer(&with_uid("10"));
    assert_eq!(
        st.groups.typed::<PodGroup>()["ns/g"]
            .metadata
            .uid
            .as_deref(),
        Some("other"),
        "an answer about the old object does not replace the new one"
    );

    let queue = |rv: &str| -> Queue {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": "q", "uid": "q-uid", "resourceVersion": rv},
            "spec": {"weight": 1}
        }))
        .unwrap()
    };
    st.apply_queue(&queue("1"));
    st.delete_queue("q");
    st.apply_queue_answer(&queue("2"));
    assert!(!st.queues.contains_key("q"));

    let mut st = Index::new(vec!["rust-batch".into()]);
    let mut p = pod("a", false, "rust-batch");
    p.metadata.resource_version = Some("3".into());
    st.apply_pod(&p);
    assert!(st.pending_pods.contains_key("a"));
    st.delete_pod("a");
    st.note_pod_answer(&p);
    assert!(
        !st.pending_pods.contains_key("a"),
        "a deleted pod is not noted"
    );
}

fn pod(name: &str, gated: bool, scheduler: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "annotations": {"scheduling.k8s.io/group-name": "g"}},
            "spec": {"schedulerName": scheduler,
                     "schedulingGates": if gated { serde_json::json!([{"name": "example.com/wait"}]) } else { serde_json::json!([]) },
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap()
}

#[test]
fn changes_wake_a_cycle_as_soon_as_it_can_act_on_them() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_group::<PodGroup>(&object("scheduling.volcano.sh/v1beta1", 3));
    let (a, b, c) = (
        pod("a", false, "rust-batch"),
        pod("b", false, "rust-batch"),
        pod("c", false, "rust-batch"),
    );
    assert_eq!(st.apply_pod(&a), Wake::No, "1 of 3: nothing to decide");
    assert_eq!(st.apply_pod(&b), Wake::No, "2 of 3");
    assert_eq!(st.apply_pod(&c), Wake::Now, "3 of 3: the gang may bind");
    // A condition written on a pod (ours: PodScheduled) changes nothing the engine reads.
    let mut told = c.clone();
    told.status = Some(
        serde_json::from_value(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        }))
        .unwrap(),
    );
    assert_eq!(st.apply_pod(&told), Wake::No, "a status condition alone");
    let mut bigger = c.clone();
    bigger.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(serde_json::json!({"requests": {"cpu": "2"}})).unwrap());
    assert_eq!(
        st.apply_pod(&bigger),
        Wake::Now,
        "a change the engine reads"
    );
    // The gang bound: its pods running is news, not urgent.
    let mut running = bigger.clone();
    running.spec.as_mut().unwrap().node_name = Some("n1".into());
    running.status = Some(serde_json::from_value(serde_json::json!({"phase": "Running"})).unwrap());
    assert_eq!(st.apply_pod(&running), Wake::Soon);
    // Not ours, or of a gang not known yet: a cycle decides (or reports) at once.
    assert_eq!(
        st.apply_pod(&pod("x", false, "default-scheduler")),
        Wake::Soon,
        "another scheduler's pod"
    );
    let mut orphan = pod("o", false, "rust-batch");
    orphan.metadata.annotations = Some(
        [(
            "scheduling.k8s.io/group-name".to_string(),
            "nowhere".to_string(),
        )]
        .into(),
    );
    assert_eq!(st.apply_pod(&orphan), Wake::Now);
    // A node's heartbeat (its conditions' times) is no change; its capacity is.
    let node = |cpu: &str, heartbeat: &str| -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": heartbeat}]}
        }))
        .unwrap()
    };
    assert_eq!(st.apply_node(&node("4", "2026-01-01T00:00:00Z")), Wake::Now);
    assert_eq!(st.apply_node(&node("4", "2026-01-01T00:00:40Z")), Wake::No);
    assert_eq!(st.apply_node(&node("8", "2026-01-01T00:00:40Z")), Wake::Now);
}

#[test]
fn a_deleted_group_warns_only_the_pods_still_waiting() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_group(&pod_group("1", "Running"));
    let mut done = pod("done", false, "rust-batch");
    done.spec.as_mut().unwrap().node_name = Some("n1".into());
    done.status = Some(serde_json::from_value(serde_json::json!({"phase": "Succeeded"})).unwrap());
    st.apply_pod(&done);
    st.apply_pod(&pod("waiting", false, "rust-batch"));
    // Volcano's job controller deletes the PodGroup of a finished job.
    st.delete_group(Dialect::VOLCANO, "ns/g");
    assert_eq!(
        st.events.last("done", "FailedScheduling"),
        None,
        "a finished pod loses nothing"
    );
    assert!(st
        .events
        .last("waiting", "FailedScheduling")
        .is_some_and(|m| m.contains("PodGroup ns/g was deleted")));
    // Told once: the missing group's report says the same words; a pod naming the
    // deleted group since is told them too.
    st.report_missing_groups(0);
    let before = st.events.kept.len();
    st.report_missing_groups(MISSING_GROUP_GRACE_MS);
    assert_eq!(st.events.kept.len(), before, "said once");
    st.apply_pod(&pod("late", false, "rust-batch"));
    st.report_missing_groups(MISSING_GROUP_GRACE_MS);
    st.report_missing_groups(2 * MISSING_GROUP_GRACE_MS);
    assert!(st
        .events
        .last("late", "FailedScheduling")
        .is_some_and(|m| m.contains("PodGroup ns/g was deleted")));
}

#[test]
fn a_gated_pod_is_no_candidate_until_its_gates_are_lifted() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_group(&pod_group("1", "Inqueue"));
    st.apply_pod(&pod("a", false, "rust-batch"));
    st.apply_pod(&pod("b", true, "rust-batch"));
    let members = |st: &Index| {
        let s = st.cache.state();
        s.job(s.job_by_uid("ns/g").unwrap()).tasks().len()
    };
    assert_eq!(members(&st), 1, "the gated pod is not a member yet");
    assert!(st.pod_keys().contains(&"b".to_string()), "but it is known");
    assert!(st
        .events
        .last("b", "SchedulingGated")
        .is_some_and(|m| m.contains("example.com/wait")));
    let held = |st: &Index| {
        let s = st.cache.state();
        s.job(s.job_by_uid("ns/g").unwrap()).held_back.clone()
    };
    assert_eq!(held(&st).gated_pods, 1, "its gang counts it");
    assert_eq!(held(&st).describe(), "1 pod gated by example.com/wait");
    let said = st.events.kept.len();
    st.apply_pod(&pod("b", true, "rust-batch"));
    assert_eq!(
        st.events.kept.len(),
        said,
        "one event per change of the gates"
    );
    assert!(
        !st.pod_conditions.contains_key("b"),
        "the API server's SchedulingGated condition is left alone"
    );
    st.apply_pod(&pod("b", false, "rust-batch"));
    assert_eq!(members(&st), 2, "gate lifted: a candidate");
    assert!(held(&st).is_empty());
}

#[test]
fn a_pod_with_dra_claims_is_a_member_whose_missing_claim_is_named() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_group(&pod_group("1", "Inqueue"));
    st.apply_pod(&pod("a", false, "rust-batch"));
    let mut dra = pod("b", false, "rust-batch");
    dra.spec.as_mut().unwrap().resource_claims = Some(vec![serde_json::from_value(
        serde_json::json!({"name": "gpu", "resourceClaimName": "gpu-claim"}),
    )
    .unwrap()]);
    st.apply_pod(&dra);
    let s = st.cache.state();
    let job = s.job(s.job_by_uid("ns/g").unwrap());
    assert_eq!(job.tasks().len(), 2, "a candidate, no longer refused");
    assert!(job.held_back.is_empty());
    let claims = st.cache.pod("b").unwrap().task.claims.clone();
    assert_eq!(
        claims[0].blocked.as_deref(),
        Some("pod claim gpu: resourceclaim ns/gpu-claim not found"),
        "it waits, naming the claim"
    );
    st.delete_pod("b");
    assert!(!st.pod_keys().contains(&"b".to_string()));
}

#[test]
fn a_claim_or_class_change_resolves_its_pods_volume_rules_again() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_group(&pod_group("1", "Inqueue"));
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "v", "namespace": "ns", "uid": "v",
                     "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": {"schedulerName": "rust-batch", "containers": [{"name": "c"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    }))
    .unwrap();
    st.apply_pod(&p);
    let rules = |st: &Index| {
        st.cache
            .pod("v")
            .and_then(|p| p.task.placement.volumes.clone())
            .unwrap()
    };
    assert_eq!(
        rules(&st).blocked.as_deref(),
        Some("persistentvolumeclaim \"data\" not found")
    );
    st.apply_claim(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "ns"},
            "spec": {"storageClassName": "late"}
        }))
        .unwrap(),
    );
    assert!(rules(&st).blocked.unwrap().contains("\"late\" not found"));
    st.apply_class(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "late"}, "provisioner": "example.com/disk",
            "volumeBindingMode": "WaitForFirstConsumer"
        }))
        .unwrap(),
    );
    let r = rules(&st);
    assert_eq!(r.blocked, None);
    assert_eq!(r.to_provision().collect::<Vec<_>>(), ["ns/data"]);
    st.delete_claim("ns/data");
    assert!(
        rules(&st).blocked.is_some(),
        "claim gone: the pod waits again"
    );
}

#[test]
fn missing_groups_are_reported_only_when_asked_after_the_lists() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_pod(&pod("a", false, "rust-batch"));
    assert!(st.events.kept.is_empty(), "nothing said while listing");
    st.report_missing_groups(1_000);
    assert!(
        st.events.kept.is_empty(),
        "the group's own watch event may be just behind"
    );
    st.report_missing_groups(1_000 + MISSING_GROUP_GRACE_MS);
    assert!(st
        .events
        .last("a", "FailedScheduling")
        .is_some_and(|m| m.contains("PodGroup g does not exist")));
    let before = st.events.kept.len();
    st.report_missing_groups(5_000);
    assert_eq!(st.events.kept.len(), before, "said once");
}

fn hypernode(name: &str, spec: serde_json::Value) -> HyperNode {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": spec
    }))
    .unwrap()
}

fn said(st: &Index, reason: &str) -> Vec<(String, String)> {
    st.events
        .kept
        .iter()
        .filter(|e| e.reason == reason)
        .map(|e| (e.regarding.name.clone().unwrap_or_default(), e.note.clone()))
        .collect()
}

#[test]
fn hypernode_problems_are_one_event_per_hypernode_and_change() {
    let mut st = Index::default();
    let good = serde_json::json!({"tier": 1, "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "n0"}}}]});
    let bad = serde_json::json!({"tier": 1, "members": [
            {"type": "Node", "selector": {"regexMatch": {"pattern": "n["}}},
            {"type": "Switch", "selector": {"exactMatch": {"name": "n1"}}}]});
    st.apply_hypernode(&hypernode("rack-a", good.clone()));
    st.apply_hypernode(&hypernode("rack-b", bad.clone()));
    st.apply_hypernode(&hypernode("odd", serde_json::json!({"tier": -1})));
    assert_eq!(
        said(&st, INVALID_HYPERNODE),
        [(
            "odd".to_string(),
            "HyperNode odd: spec.tier: must be at least 1, got -1".to_string()
        )]
    );
    let names: Vec<&String> = st.cache.hypernode_names().collect();
    assert_eq!(
        names,
        ["rack-a", "rack-b"],
        "an unusable HyperNode is left out"
    );

    st.report_topology_problems(&st.cache.snapshot());
    let events = said(&st, INVALID_HYPERNODE);
    assert_eq!(events.len(), 2, "{events:?}");
    let (name, note) = &events[1];
    assert_eq!(name, "rack-b");
    let lines: Vec<&str> = note.lines().collect();
    assert_eq!(lines.len(), 2, "both problems in one event: {note}");
    assert!(lines[0].starts_with("HyperNode rack-b: spec.members[0].selector.regexMatch"));
    assert!(lines[1].starts_with("HyperNode rack-b: spec.members[1].type \"Switch\""));
    // Later cycles on the same topology, or a new one with the same problems: no news.
    st.report_topology_problems(&st.cache.snapshot());
    st.apply_hypernode(&hypernode("rack-c", good.clone()));
    st.report_topology_problems(&st.cache.snapshot());
    assert_eq!(said(&st, INVALID_HYPERNODE).len(), 2);
    // Fixed, then broken again the same way: news again.
    st.apply_hypernode(&hypernode("rack-b", good));
    st.report_topology_problems(&st.cache.snapshot());
    assert_eq!(said(&st, INVALID_HYPERNODE).len(), 2);
    st.apply_hypernode(&hypernode("rack-b", bad));
    st.report_topology_problems(&st.cache.snapshot());
    assert_eq!(said(&st, INVALID_HYPERNODE).len(), 3);
    // A deleted HyperNode leaves the topology.
    st.delete_hypernode("rack-b");
    assert!(!st.hypernode_keys().contains(&"rack-b".to_string()));
    assert!(!st.cache.hypernode_names().any(|n| n == "rack-b"));
}

#[test]
fn a_bad_network_topology_is_said_once_on_the_podgroup() {
    let mut st = Index::default();
    let group = |tier: i64, rv: &str| -> PodGroup {
        serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns", "uid": "pg", "resourceVersion": rv},
                "spec": {"minMember": 1, "networkTopology": {"mode": "hard", "highestTierAllowed": tier}}
            }))
            .unwrap()
    };
    st.apply_group(&group(0, "1"));
    st.apply_group(&group(0, "2"));
    let events = said(&st, INVALID_NETWORK_TOPOLOGY);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0]
        .1
        .contains("highestTierAllowed must be at least 1, got 0"));
    let s = st.cache.state();
    let job = s.job(s.job_by_uid("ns/g").unwrap());
    assert!(job.topology_request().is_some_and(|t| t.problem.is_some()));
    st.apply_group(&group(2, "3"));
    st.apply_group(&group(0, "4"));
    assert_eq!(
        said(&st, INVALID_NETWORK_TOPOLOGY).len(),
        2,
        "fixed, then broken: said again"
    );
}

// The native kind in the index (moved here from dialects/native.rs: the dialects do not
// know the index).

/// In the index: a pod declaring two gangs is told; the native PodGroup defines a gang
/// before Volcano's of the same name; a PodGroup it refuses is named to its pods.
#[test]
fn in_the_index_native_groups_come_first_and_bad_ones_are_named_to_their_pods() {
    use super::{CONFLICTING_DECLARATIONS, MISSING_GROUP_GRACE_MS};
    let mut st = Index::new(vec!["rust-batch".into()]);
    let both: Pod = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": "ns", "uid": "a",
                     "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": {"schedulerName": "rust-batch", "schedulingGroup": {"podGroupName": "g"},
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    }))
    .unwrap();
    st.apply_pod(&both);
    let note = st.events.last("a", CONFLICTING_DECLARATIONS).unwrap();
    assert!(
        note.contains("spec.schedulingGroup") && note.contains("scheduling.k8s.io/group-name"),
        "{note}"
    );
    let volcano: crate::dialects::volcano::PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 3}
    }))
    .unwrap();
    st.apply_group(&volcano);
    let native = |spec: serde_json::Value| -> crate::dialects::native::NativePodGroup {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "pg-g"}, "spec": spec
        }))
        .unwrap()
    };
    st.apply_group(&native(
        json!({"schedulingPolicy": {"gang": {"minCount": 1}},
            "resourceClaims": [{"name": "c", "resourceClaimName": "c"}]}),
    ));
    assert_eq!(
        st.group_dialect("ns/g"),
        Some(crate::dialects::native::NativePodGroup::DIALECT)
    );
    assert!(st
        .events
        .last("pg-g", "Invalid")
        .is_some_and(|m| m.contains("spec.resourceClaims")));
    st.report_missing_groups(0);
    st.report_missing_groups(MISSING_GROUP_GRACE_MS);
    let told = st.events.last("a", "FailedScheduling").unwrap();
    assert!(
        told.contains("(scheduling.k8s.io) cannot be used"),
        "{told}"
    );
    let min_member = |st: &Index| {
        let s = st.cache.state();
        s.job_by_uid("ns/g").map(|id| s.job(id).min_member)
    };
    st.apply_group(&native(
        json!({"schedulingPolicy": {"gang": {"minCount": 2}}}),
    ));
    assert_eq!(
        min_member(&st),
        Some(2),
        "the native PodGroup defines the gang"
    );
    st.delete_group(crate::dialects::native::NativePodGroup::DIALECT, "ns/g");
    assert_eq!(min_member(&st), Some(3), "Volcano's takes over");
}

/// workloadRef, read with the Workload's podGroupTemplates: what explain shows, and the
/// event a reference that does not resolve gets (once, gone when it resolves).
#[test]
fn a_workload_reference_is_described_and_a_dangling_one_is_said_once() {
    use crate::dialects::workload::{Workload, WORKLOAD_REFERENCE};
    let mut st = Index::new(vec!["rust-batch".into()]);
    let group: crate::dialects::native::NativePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "train-0", "namespace": "ns", "uid": "pg"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                 "workloadRef": {"workloadName": "train", "templateName": "workers"}}
    }))
    .unwrap();
    st.apply_group(&group);
    st.report_workload_refs();
    let link = st.workload_link("ns/train-0").unwrap();
    assert_eq!(
        link.describe(),
        "workload ns/train, template workers: Workload ns/train does not exist"
    );
    assert_eq!(
        st.events.last("pg", WORKLOAD_REFERENCE),
        Some(link.describe().as_str())
    );
    let workload = |templates: serde_json::Value| -> Workload {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "train", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"podGroupTemplates": templates}
        }))
        .unwrap()
    };
    st.apply_workload(&workload(json!([{"name": "ps",
            "schedulingPolicy": {"basic": {}}}])));
    st.report_workload_refs();
    assert_eq!(
        st.events.last("pg", WORKLOAD_REFERENCE),
        Some(
            "workload ns/train, template workers: Workload ns/train has no \
                 podGroupTemplate \"workers\" (it has: ps)"
        )
    );
    let mut fixed = workload(json!([{"name": "workers",
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "rack"}]},
            "priorityClassName": "high"}]));
    fixed.metadata.resource_version = Some("2".into());
    st.apply_workload(&fixed);
    st.report_workload_refs();
    assert_eq!(st.events.last("pg", WORKLOAD_REFERENCE), None, "resolved");
    let view = st.gang_view("ns/train-0").unwrap();
    assert_eq!(
        view.workload.as_deref(),
        Some(
            "workload ns/train, template workers: gang minCount 2, topology rack, \
                 priorityClassName high"
        )
    );
    st.delete_workload("ns/train");
    st.report_workload_refs();
    assert!(st.events.last("pg", WORKLOAD_REFERENCE).is_some());
}
