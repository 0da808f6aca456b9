//! End-to-end on a real control plane (1.37, `scheduling.k8s.io/v1beta1` served): gangs
//! declared the Kubernetes way — a `scheduling.k8s.io` PodGroup and pods naming it in
//! `spec.schedulingGroup.podGroupName` — under the RBAC the chart ships. Each test checks
//! the two invariants (no partial gang, no over-committed node) on every poll. Without a
//! cluster this test fails; it never skips.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::Client;
use rust_batch::kube::dialects::native::NativePodGroup;
use rust_batch::kube::dialects::workload::Workload;
use serde_json::{json, Value};

fn gang(min: i32) -> Value {
    json!({"schedulingPolicy": {"gang": {"minCount": min}}})
}

/// A pod of ours on `pool`'s nodes joining PodGroup `group` the Kubernetes way, with
/// `annotations` besides.
async fn member(
    client: &Client,
    ns: &str,
    scheduler: &str,
    name: &str,
    group: &str,
    cpu: &str,
    annotations: Value,
) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"pool": ns},
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("pod created");
}

/// `count` kwok nodes of pool `ns` with `cpu` each, labelled `labels`.
async fn nodes(client: &Client, ns: &str, prefix: &str, count: usize, cpu: &str, labels: Value) {
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let alloc = json!({"cpu": cpu, "memory": "16Gi"});
        fake_node_labelled(client, &name, ns, alloc, labels.clone()).await;
    }
}

/// A `scheduling.k8s.io/v1beta1` Workload with `templates` (its podGroupTemplates).
async fn workload(client: &Client, ns: &str, name: &str, templates: Value) {
    let w: Workload = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podGroupTemplates": templates}
    }))
    .unwrap();
    Api::<Workload>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &w)
        .await
        .expect("Workload created");
}

async fn resource_version(client: &Client, ns: &str, name: &str) -> String {
    Api::<NativePodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

async fn event_with(client: &Client, ns: &str, pod: &str, reason: &str, text: &str) -> String {
    wait_for(
        Duration::from_secs(30),
        &format!("{pod}: event {reason} saying {text:?}"),
        || async {
            check_invariants(client, ns).await;
            pod_events(client, ns, pod)
                .await
                .into_iter()
                .find(|(r, n)| r == reason && n.contains(text))
                .map(|(_, n)| n)
        },
    )
    .await
}

/// gang.minCount: fewer members than minCount wait (the PodGroup says
/// PodGroupInitiallyScheduled=False, reason Unschedulable, once, gets one GangIncomplete
/// event, and is not rewritten while nothing changes); explain names the Workload and
/// template its `workloadRef` points at; the last member makes the whole gang bind, and the
/// condition turns True (reason Scheduled) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_for_min_count_then_binds_whole_and_says_so() {
    let client = client().await;
    let name = "rb-native-gang";
    let (_scheduler, port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-mincount";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    workload(
        &client,
        ns,
        "training",
        json!([{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}},
                "disruptionMode": {"all": {}}}]),
    )
    .await;
    let mut spec = gang(3);
    spec["workloadRef"] = json!({"workloadName": "training", "templateName": "workers"});
    native_group(&client, ns, "train", spec).await;
    for i in 0..2 {
        member(&client, ns, name, &format!("w{i}"), "train", "1", json!({})).await;
    }
    // A cycle may run between the two creates and say "only 1 pod" first: wait for the
    // condition that has seen both.
    let (status, reason, message) = wait_for(
        Duration::from_secs(30),
        "PodGroupInitiallyScheduled=False with both members seen",
        || async {
            check_invariants(&client, ns).await;
            initially_scheduled(&client, ns, "train")
                .await
                .filter(|(s, _, m)| s == "False" && m.contains("only 2 pods exist"))
        },
    )
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    // The same words Volcano's PodGroup condition carries for a gang short of members.
    assert_eq!(
        message,
        "2/2 tasks in gang unschedulable: only 2 pods exist, minMember is 3"
    );
    // minCount larger than the pods there are: no churn while nothing changes.
    let version = resource_version(&client, ns, "train").await;
    stays_unbound(&client, ns, 4).await;
    assert_eq!(
        resource_version(&client, ns, "train").await,
        version,
        "the waiting PodGroup is not rewritten"
    );
    // One event says so, on the PodGroup; its pods get none (their condition says it).
    let said = pod_events(&client, ns, "train").await;
    let incomplete: Vec<&(String, String)> =
        said.iter().filter(|(r, _)| r == "GangIncomplete").collect();
    assert_eq!(incomplete.len(), 1, "{said:?}");
    assert!(incomplete[0].1.contains("minimum of 3"), "{said:?}");
    for pod in ["w0", "w1"] {
        let said = pod_events(&client, ns, pod).await;
        assert!(said.is_empty(), "{pod}: {said:?}");
    }
    let text = explain(port, &format!("{ns}/train"));
    assert!(
        text.contains(&format!(
            "workload {ns}/training, template workers: gang minCount 3, disruptionMode all"
        )),
        "{text}"
    );
    member(&client, ns, name, "w2", "train", "1", json!({})).await;
    all_bound(&client, ns, 3, "the whole gang bound").await;
    let (status, reason, _) = wait_for(
        Duration::from_secs(30),
        "PodGroupInitiallyScheduled=True",
        || async {
            initially_scheduled(&client, ns, "train")
                .await
                .filter(|(s, _, _)| s == "True")
        },
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));
}

/// `basic`: no gang — each pod is placed on its own, as far as room goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_policy_places_pods_alone() {
    let client = client().await;
    let name = "rb-native-basic";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-basic";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 1, "2", json!({})).await;
    native_group(
        &client,
        ns,
        "web",
        json!({"schedulingPolicy": {"basic": {}}}),
    )
    .await;
    for i in 0..3 {
        member(&client, ns, name, &format!("w{i}"), "web", "1", json!({})).await;
    }
    wait_for(
        Duration::from_secs(30),
        "two of three pods bound",
        || async { (bound(&check_invariants(&client, ns).await) == 2).then_some(()) },
    )
    .await;
}

/// A pod naming a PodGroup that does not exist yet waits (one event, after the lists are
/// in); the PodGroup appearing lets the gang bind. Its `workloadRef` names a Workload that
/// does not exist: the PodGroup is told so, and it binds all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_wait_for_a_podgroup_that_does_not_exist_yet() {
    let client = client().await;
    let name = "rb-native-missing";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-missing";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    for i in 0..2 {
        member(&client, ns, name, &format!("w{i}"), "late", "1", json!({})).await;
    }
    event_with(
        &client,
        ns,
        "w0",
        "FailedScheduling",
        "PodGroup late does not exist",
    )
    .await;
    stays_unbound(&client, ns, 2).await;
    let told = pod_events(&client, ns, "w0")
        .await
        .into_iter()
        .filter(|(_, n)| n.contains("does not exist"))
        .count();
    assert_eq!(told, 1, "told once");
    let mut spec = gang(2);
    spec["workloadRef"] = json!({"workloadName": "nowhere", "templateName": "workers"});
    native_group(&client, ns, "late", spec).await;
    all_bound(&client, ns, 2, "the gang bound once its PodGroup exists").await;
    let note = event_with(&client, ns, "late", "WorkloadReference", "nowhere").await;
    assert_eq!(
        note,
        format!("workload {ns}/nowhere, template workers: Workload {ns}/nowhere does not exist")
    );
}

/// schedulingConstraints.topology[].key: the whole group in one domain of that node label,
/// though the emptiest nodes are in the other domain; a key no node carries makes its gang
/// wait, naming the key, while the first gang binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_key_keeps_the_group_in_one_domain_and_a_missing_key_waits() {
    let client = client().await;
    let name = "rb-native-topo";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-topo";
    namespace(&client, ns).await;
    let rack = "e2e.example.com/rack";
    // Rack a: 3 nodes x 1 CPU; rack b: 2 nodes x 2 CPUs. A gang of 4 x 1 CPU fits only
    // rack b whole, while bin-packing alone would fill rack a's small nodes first.
    nodes(
        &client,
        ns,
        &format!("{ns}-a"),
        3,
        "1",
        json!({ rack: "a" }),
    )
    .await;
    nodes(
        &client,
        ns,
        &format!("{ns}-b"),
        2,
        "2",
        json!({ rack: "b" }),
    )
    .await;
    let with_key = |key: &str| {
        json!({"schedulingPolicy": {"gang": {"minCount": 4}},
               "schedulingConstraints": {"topology": [{"key": key}]}})
    };
    native_group(&client, ns, "racked", with_key(rack)).await;
    native_group(
        &client,
        ns,
        "nowhere",
        with_key("e2e.example.com/no-such-label"),
    )
    .await;
    for i in 0..4 {
        member(
            &client,
            ns,
            name,
            &format!("r{i}"),
            "racked",
            "1",
            json!({}),
        )
        .await;
    }
    let pods = wait_for(Duration::from_secs(45), "the racked gang bound", || async {
        let pods = check_invariants(&client, ns).await;
        let racked: Vec<&Pod> = pods
            .iter()
            .filter(|(n, _)| n.starts_with('r'))
            .map(|(_, p)| p)
            .collect();
        (racked.len() == 4 && racked.iter().all(|p| node_of(p).is_some())).then_some(pods)
    })
    .await;
    let racks: std::collections::BTreeSet<String> = pods
        .iter()
        .filter(|(n, _)| n.starts_with('r'))
        .filter_map(|(_, p)| node_of(p))
        .map(|n| {
            if n.contains("-a-") {
                "a".into()
            } else {
                "b".into()
            }
        })
        .collect();
    assert_eq!(
        racks,
        std::collections::BTreeSet::from(["b".to_string()]),
        "one rack, the one that holds the gang"
    );

    for i in 0..4 {
        member(
            &client,
            ns,
            name,
            &format!("x{i}"),
            "nowhere",
            "1",
            json!({}),
        )
        .await;
    }
    let (status, _, message) = wait_for(
        Duration::from_secs(30),
        "the gang with a missing key says so",
        || async {
            check_invariants(&client, ns).await;
            initially_scheduled(&client, ns, "nowhere")
                .await
                .filter(|(s, _, m)| s == "False" && m.contains("no-such-label"))
        },
    )
    .await;
    assert_eq!(status, "False", "{message}");
    let pods = check_invariants(&client, ns).await;
    assert!(
        pods.iter()
            .filter(|(n, _)| n.starts_with('x'))
            .all(|(_, p)| node_of(p).is_none()),
        "the gang whose key no node carries waits"
    );
}

/// A pod carrying two declarations (spec.schedulingGroup and Volcano's group annotation)
/// joins the native PodGroup, and is told, naming both; a PodGroup asking for
/// resourceClaims is refused with a named reason while its pods wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_declarations_and_refused_claims_are_named() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-native-conflict";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-conflict";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    native_group(&client, ns, "native", gang(2)).await;
    let volcano = json!({"scheduling.k8s.io/group-name": "volcano-one"});
    for i in 0..2 {
        member(
            &client,
            ns,
            name,
            &format!("both{i}"),
            "native",
            "1",
            volcano.clone(),
        )
        .await;
    }
    all_bound(&client, ns, 2, "the native gang bound").await;
    let note = event_with(
        &client,
        ns,
        "both0",
        "ConflictingGangDeclarations",
        "native",
    )
    .await;
    assert!(
        note.contains("spec.schedulingGroup")
            && note.contains("scheduling.k8s.io/group-name")
            && note.contains("volcano-one"),
        "{note}"
    );

    native_group(
        &client,
        ns,
        "claims",
        json!({"schedulingPolicy": {"gang": {"minCount": 1}},
               "resourceClaims": [{"name": "gpus", "resourceClaimName": "shared-gpus"}]}),
    )
    .await;
    member(&client, ns, name, "claimer", "claims", "1", json!({})).await;
    let note = event_with(&client, ns, "claimer", "FailedScheduling", "claims").await;
    assert!(note.contains("cannot be used"), "{note}");
    let events = wait_for(
        Duration::from_secs(30),
        "the PodGroup's Invalid event",
        || async {
            pod_events(&client, ns, "claims")
                .await
                .into_iter()
                .find(|(r, n)| r == "Invalid" && n.contains("spec.resourceClaims"))
        },
    )
    .await;
    assert!(events.1.contains("not supported"), "{}", events.1);
    let pods = check_invariants(&client, ns).await;
    assert!(node_of(&pods["claimer"]).is_none(), "waits");
}

const PREEMPT_CONF: &str = "actions: \"enqueue, allocate, preempt, backfill\"
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

/// A member of a PriorityClass `class` (the Priority admission plugin sets its priority).
async fn classed_member(
    client: &Client,
    ns: &str,
    scheduler: &str,
    name: &str,
    group: &str,
    class: &str,
) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "priorityClassName": class,
            "nodeSelector": {"pool": ns},
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("pod created");
}

/// Pods of `ns` whose name starts with `prefix`, bound and not on their way out.
fn holding(pods: &std::collections::BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter()
        .filter(|(n, p)| {
            n.starts_with(prefix) && node_of(p).is_some() && p.metadata.deletion_timestamp.is_none()
        })
        .count()
}

/// The PriorityClasses the preemption tests use (kept from an earlier test or run).
async fn priority_classes(client: &Client) {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let classes = Api::<PriorityClass>::all(client.clone());
    // The Priority admission plugin checks a PodGroup's preemptionPolicy against its class
    // (1.37.2 defaults an unset one to PreemptLowerPriority first, so a class saying Never
    // needs the field set to Never too): `e2e-native-polite` says Never.
    for (class, value, policy) in [
        ("e2e-native-low", 10, "PreemptLowerPriority"),
        ("e2e-native-high", 1000, "PreemptLowerPriority"),
        ("e2e-native-polite", 1000, "Never"),
    ] {
        let pc: PriorityClass = serde_json::from_value(
            json!({"metadata": {"name": class}, "value": value, "preemptionPolicy": policy}),
        )
        .unwrap();
        let _ = classes.create(&PostParams::default(), &pc).await; // kept from an earlier run
    }
}

/// The preempt action's configuration, written for scheduler `name`.
fn preempt_conf(name: &str) -> String {
    let conf = std::env::temp_dir().join(format!("{name}-{}.conf", std::process::id()));
    std::fs::write(&conf, PREEMPT_CONF).unwrap();
    conf.display().to_string()
}

/// Pods' `DisruptionTarget` conditions by pod name: (reason, message).
type Seen = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, (String, String)>>>;

/// The `DisruptionTarget` condition (reason, message) each pod of `ns` was last seen with,
/// by name, from a watch (a deleted pod's last state included), kept while the task runs.
fn disruption_targets(client: &Client, ns: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(Event::Apply(p) | Event::InitApply(p) | Event::Delete(p)) => p,
                _ => continue,
            };
            let target = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
                .map(|c| {
                    (
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default(),
                    )
                });
            if let (Some(name), Some(target)) = (pod.metadata.name.clone(), target) {
                into.lock().unwrap().insert(name, target);
            }
        }
    });
    (seen, task)
}

/// With the `preempt` action: a higher-priority group whose PodGroup says
/// `preemptionPolicy: Never` (from its PriorityClass; its pods' class says
/// PreemptLowerPriority) waits for room and evicts nobody; one that may preempt, facing
/// a group of `disruptionMode: All` with two members above its minCount, evicts that whole
/// group — not only the surplus, as it would for `Single` — and each victim carries the
/// `DisruptionTarget` condition kube-scheduler writes (reason `PreemptionByScheduler`)
/// before it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_preempting_groups_wait_and_all_mode_groups_are_evicted_whole() {
    let client = client().await;
    let name = "rb-native-preempt";
    let conf = preempt_conf(name);
    let (_scheduler, _port) = start_ready_scheduler(name, &["--scheduler-conf", &conf]).await;
    let ns = "e2e-native-preempt";
    namespace(&client, ns).await;
    priority_classes(&client).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    native_group(
        &client,
        ns,
        "low",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "priorityClassName": "e2e-native-low", "disruptionMode": {"all": {}}}),
    )
    .await;
    for i in 0..4 {
        classed_member(
            &client,
            ns,
            name,
            &format!("low-{i}"),
            "low",
            "e2e-native-low",
        )
        .await;
    }
    all_bound(&client, ns, 4, "the low group bound").await;

    native_group(
        &client,
        ns,
        "polite",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "priorityClassName": "e2e-native-polite", "preemptionPolicy": "Never"}),
    )
    .await;
    for i in 0..2 {
        classed_member(
            &client,
            ns,
            name,
            &format!("polite-{i}"),
            "polite",
            "e2e-native-high",
        )
        .await;
    }
    for _ in 0..8 {
        let pods = check_invariants(&client, ns).await;
        assert_eq!(
            holding(&pods, "low-"),
            4,
            "preemptionPolicy Never evicts nobody"
        );
        assert_eq!(holding(&pods, "polite-"), 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    for i in 0..2 {
        pods_api
            .delete(&format!("polite-{i}"), &Default::default())
            .await
            .expect("pending pod deleted");
    }

    let (targets, watching) = disruption_targets(&client, ns);
    native_group(
        &client,
        ns,
        "high",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "priorityClassName": "e2e-native-high"}),
    )
    .await;
    for i in 0..2 {
        classed_member(
            &client,
            ns,
            name,
            &format!("high-{i}"),
            "high",
            "e2e-native-high",
        )
        .await;
    }
    wait_for(
        Duration::from_secs(60),
        "the low group evicted whole and the high group bound",
        || async {
            let pods = check_invariants(&client, ns).await;
            (holding(&pods, "low-") == 0 && holding(&pods, "high-") == 2).then_some(())
        },
    )
    .await;
    let targets = wait_for(
        Duration::from_secs(30),
        "each victim seen with its DisruptionTarget condition",
        || async {
            let t = targets.lock().unwrap().clone();
            ((0..4).all(|i| t.contains_key(&format!("low-{i}")))).then_some(t)
        },
    )
    .await;
    watching.abort();
    for i in 0..4 {
        assert_eq!(
            targets[&format!("low-{i}")],
            (
                "PreemptionByScheduler".to_string(),
                format!("{name}: preempting to accommodate a higher priority podgroup")
            ),
            "low-{i}"
        );
    }
    assert!(
        targets.keys().all(|p| p.starts_with("low-")),
        "only the victims: {targets:?}"
    );
}

/// `disruptionMode: single` (the default): a preemptor facing a group with two members
/// above its minCount takes those two alone — each with its `DisruptionTarget` condition —
/// and the group keeps running at its minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_mode_groups_lose_only_their_surplus() {
    let client = client().await;
    let name = "rb-native-single";
    let conf = preempt_conf(name);
    let (_scheduler, _port) = start_ready_scheduler(name, &["--scheduler-conf", &conf]).await;
    let ns = "e2e-native-single";
    namespace(&client, ns).await;
    priority_classes(&client).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    native_group(
        &client,
        ns,
        "low",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "priorityClassName": "e2e-native-low", "disruptionMode": {"single": {}}}),
    )
    .await;
    for i in 0..4 {
        classed_member(
            &client,
            ns,
            name,
            &format!("low-{i}"),
            "low",
            "e2e-native-low",
        )
        .await;
    }
    all_bound(&client, ns, 4, "the low group bound").await;
    let (targets, watching) = disruption_targets(&client, ns);
    native_group(
        &client,
        ns,
        "high",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "priorityClassName": "e2e-native-high"}),
    )
    .await;
    for i in 0..2 {
        classed_member(
            &client,
            ns,
            name,
            &format!("high-{i}"),
            "high",
            "e2e-native-high",
        )
        .await;
    }
    wait_for(
        Duration::from_secs(60),
        "the high group bound beside the low group's minimum",
        || async {
            let pods = check_invariants(&client, ns).await;
            (holding(&pods, "high-") == 2).then_some(())
        },
    )
    .await;
    for _ in 0..4 {
        let pods = check_invariants(&client, ns).await;
        assert_eq!(holding(&pods, "low-"), 2, "only the surplus went");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let targets = wait_for(
        Duration::from_secs(30),
        "the two victims seen with their DisruptionTarget condition",
        || async {
            let t = targets.lock().unwrap().clone();
            (t.len() == 2).then_some(t)
        },
    )
    .await;
    watching.abort();
    for (pod, (reason, _)) in &targets {
        assert!(pod.starts_with("low-"), "{targets:?}");
        assert_eq!(reason, "PreemptionByScheduler");
    }
}

/// A PodGroup deleted while its members wait. The API server keeps it while pods name it
/// (the PodGroupProtection admission plugin puts finalizer
/// `scheduling.k8s.io/podgroup-protection` on every PodGroup; its controller removes it
/// once no active pod names the group): the gang is still scheduled from it, whole. When
/// it is really gone (its finalizer removed by hand), its waiting members keep waiting —
/// never bound as lone pods, though each would fit alone — told once, until a PodGroup of
/// that name exists again, as kube-scheduler holds pods whose PodGroup does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_podgroup_leaves_its_waiting_members_waiting() {
    let client = client().await;
    let name = "rb-native-deleted";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-deleted";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 3, "2", json!({})).await;
    let groups = Api::<NativePodGroup>::namespaced(client.clone(), ns);

    // Deleted while in use: it stays, being deleted, and its gang binds whole from it.
    native_group(&client, ns, "kept", gang(3)).await;
    for i in 0..2 {
        member(&client, ns, name, &format!("k{i}"), "kept", "1", json!({})).await;
    }
    stays_unbound(&client, ns, 2).await;
    groups
        .delete("kept", &Default::default())
        .await
        .expect("PodGroup delete accepted");
    let kept = groups.get("kept").await.expect("held by its finalizer");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert!(
        kept.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "scheduling.k8s.io/podgroup-protection"),
        "{:?}",
        kept.metadata.finalizers
    );
    stays_unbound(&client, ns, 2).await;
    member(&client, ns, name, "k2", "kept", "1", json!({})).await;
    all_bound(
        &client,
        ns,
        3,
        "the gang of the PodGroup being deleted bound whole",
    )
    .await;

    // Really gone: its members wait, told once.
    native_group(&client, ns, "gone", gang(2)).await;
    member(&client, ns, name, "g0", "gone", "1", json!({})).await;
    event_with(&client, ns, "gone", "GangIncomplete", "minimum of 2").await;
    groups
        .delete("gone", &Default::default())
        .await
        .expect("PodGroup delete accepted");
    groups
        .patch(
            "gone",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("finalizer removed");
    member(&client, ns, name, "g1", "gone", "1", json!({})).await;
    event_with(&client, ns, "g0", "FailedScheduling", "was deleted").await;
    // A pod naming the group after it went is told the same.
    event_with(&client, ns, "g1", "FailedScheduling", "was deleted").await;
    for _ in 0..6 {
        let pods = check_invariants(&client, ns).await;
        for pod in ["g0", "g1"] {
            assert_eq!(
                node_of(&pods[pod]),
                None,
                "{pod} bound without its PodGroup"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let told = pod_events(&client, ns, "g0")
        .await
        .into_iter()
        .filter(|(r, _)| r == "FailedScheduling")
        .count();
    assert_eq!(told, 1, "told once");
    native_group(&client, ns, "gone", gang(2)).await;
    all_bound(
        &client,
        ns,
        5,
        "the gang bound once its PodGroup exists again",
    )
    .await;
}
