//! End-to-end on a real control plane (1.37, `scheduling.k8s.io/v1beta1` served): gangs
//! declared the Kubernetes way — a `scheduling.k8s.io` PodGroup and pods naming it in
//! `spec.schedulingGroup.podGroupName` — under the RBAC the chart ships. Each test checks
//! the two invariants (no partial gang, no over-committed node) on every poll. Without a
//! cluster this test fails; it never skips.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::Client;
use rust_batch::kube::dialects::native::{NativePodGroup, INITIALLY_SCHEDULED};
use serde_json::{json, Value};

/// A `scheduling.k8s.io/v1beta1` PodGroup with `spec` in namespace `ns`.
async fn native_group(client: &Client, ns: &str, name: &str, spec: Value) {
    let pg: NativePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .unwrap();
    Api::<NativePodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("scheduling.k8s.io PodGroup created (is scheduling.k8s.io/v1beta1 served?)");
}

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

/// The PodGroupInitiallyScheduled condition of a native PodGroup: (status, reason, message).
async fn initially_scheduled(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<(String, String, String)> {
    let pg = Api::<NativePodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    pg.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == INITIALLY_SCHEDULED)
        .map(|c| (c.status, c.reason, c.message))
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

fn bound(pods: &std::collections::BTreeMap<String, Pod>) -> usize {
    pods.values().filter(|p| node_of(p).is_some()).count()
}

/// Polls for `secs` seconds that no pod of `ns` is bound (and the invariants hold).
async fn stays_unbound(client: &Client, ns: &str, secs: u64) {
    for _ in 0..secs * 2 {
        let pods = check_invariants(client, ns).await;
        assert_eq!(bound(&pods), 0, "{ns}: bound too early");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn all_bound(
    client: &Client,
    ns: &str,
    n: usize,
    what: &str,
) -> std::collections::BTreeMap<String, Pod> {
    wait_for(Duration::from_secs(45), what, || async {
        let pods = check_invariants(client, ns).await;
        (pods.len() == n && bound(&pods) == n).then_some(pods)
    })
    .await
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
/// PodGroupInitiallyScheduled=False, reason Unschedulable, once, and is not rewritten while
/// nothing changes); the last member makes the whole gang bind, and the condition turns
/// True (reason Scheduled) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_for_min_count_then_binds_whole_and_says_so() {
    let client = client().await;
    let name = "rb-native-gang";
    let (_scheduler, _port) = start_ready_scheduler(name, &[]).await;
    let ns = "e2e-native-mincount";
    namespace(&client, ns).await;
    nodes(&client, ns, ns, 2, "2", json!({})).await;
    native_group(&client, ns, "train", gang(3)).await;
    for i in 0..2 {
        member(&client, ns, name, &format!("w{i}"), "train", "1", json!({})).await;
    }
    let (status, reason, message) = wait_for(
        Duration::from_secs(30),
        "PodGroupInitiallyScheduled=False",
        || async {
            check_invariants(&client, ns).await;
            initially_scheduled(&client, ns, "train")
                .await
                .filter(|(s, _, _)| s == "False")
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
/// in); the PodGroup appearing lets the gang bind.
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
    native_group(&client, ns, "late", gang(2)).await;
    all_bound(&client, ns, 2, "the gang bound once its PodGroup exists").await;
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
