//! End-to-end on a real control plane: topology-aware gang placement. Volcano HyperNodes
//! (racks by exactMatch and regexMatch under a spine) with PodGroups asking
//! `networkTopology` hard and soft; Kueue's TAS annotation over a node label; the GPU model
//! rule of the `gpu-affinity` plugin; malformed HyperNodes, networkTopology and annotations
//! reported as events while everyone else keeps being scheduled. Every scheduler runs as the
//! ServiceAccount deploy/ ships (so the HyperNode RBAC is exercised); each test has its own
//! namespace, nodes and HyperNodes. The invariants are checked on every poll. Without a
//! cluster these tests fail; they never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::dialects::coscheduling::XK8sPodGroup;
use rust_batch::kube::dialects::volcano::{HyperNode, PodGroup};
use serde_json::{json, Value};

/// Volcano's default configuration plus `gpu-affinity`, with the rack label as the only
/// label level (HyperNodes are used whenever there are any).
fn topology_conf() -> String {
    rust_batch::conf::DEFAULT_CONF.replace(rust_batch::conf::DEFAULT_TOPOLOGY_LEVELS, RACK_LABEL)
}

const RACK_LABEL: &str = "example.com/rack";
const GPU_MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// Starts a scheduler answering to `name`, with `conf` (None: the bundled default), and
/// waits until it is ready. Fails at once, with its exit status, if it stops.
async fn start(name: &str, conf: Option<&str>) -> Scheduler {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut args = vec!["--http-address".to_string(), address];
    if let Some(text) = conf {
        let path = std::env::temp_dir().join(format!("{name}-{}.conf", std::process::id()));
        std::fs::write(&path, text).unwrap();
        args.extend(["--scheduler-conf".to_string(), path.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut scheduler = start_scheduler_with(name, &args);
    wait_for(Duration::from_secs(30), "/readyz ready", || {
        let exited = scheduler.0.try_wait().unwrap();
        async move {
            assert!(exited.is_none(), "rust-batch {name} exited: {exited:?}");
            http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 200)
                .map(|_| ())
        }
    })
    .await;
    scheduler
}

/// Fake nodes `{prefix}-n{i}` in `pool`, carrying `labels` besides.
async fn labelled_nodes(
    client: &Client,
    prefix: &str,
    numbers: std::ops::RangeInclusive<usize>,
    pool: &str,
    shape: &Value,
    labels: Value,
) {
    let api = Api::<Node>::all(client.clone());
    for i in numbers {
        let name = format!("{prefix}-n{i}");
        fake_node(client, &name, pool, shape.clone()).await;
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .expect("node labelled");
    }
}

async fn create_hypernode(client: &Client, name: &str, spec: Value) {
    let hn: HyperNode = serde_json::from_value(json!({
        "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    Api::<HyperNode>::all(client.clone())
        .create(&PostParams::default(), &hn)
        .await
        .expect("HyperNode created");
}

async fn delete_hypernodes(client: &Client, names: &[&str]) {
    let api = Api::<HyperNode>::all(client.clone());
    for name in names {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("HyperNode deleted");
    }
}

/// A tier-1 HyperNode of the nodes `{prefix}-n{i}`, named one by one.
fn rack_by_names(prefix: &str, numbers: std::ops::RangeInclusive<usize>) -> Value {
    let members: Vec<Value> = numbers
        .map(|i| json!({"type": "Node", "selector": {"exactMatch": {"name": format!("{prefix}-n{i}")}}}))
        .collect();
    json!({"tier": 1, "tierName": "rack", "members": members})
}

/// A tier-1 HyperNode of every node whose name is `{prefix}-n<digits>`.
fn rack_by_regex(prefix: &str) -> Value {
    json!({"tier": 1, "tierName": "rack", "members": [
        {"type": "Node", "selector": {"regexMatch": {"pattern": format!("{prefix}-n[0-9]+")}}}
    ]})
}

/// A tier-2 HyperNode over the named HyperNodes.
fn spine(racks: &[&str]) -> Value {
    let members: Vec<Value> = racks
        .iter()
        .map(|r| json!({"type": "HyperNode", "selector": {"exactMatch": {"name": r}}}))
        .collect();
    json!({"tier": 2, "tierName": "spine", "members": members})
}

/// A Volcano PodGroup of `n` pods `{group}-{i}`, each asking `request`, with
/// `networkTopology` if given.
async fn volcano_gang(
    place: &Place<'_>,
    group: &str,
    n: usize,
    request: Value,
    network_topology: Option<Value>,
) {
    let mut spec = json!({"minMember": n, "queue": "default"});
    if let Some(t) = network_topology {
        spec["networkTopology"] = t;
    }
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": group, "namespace": place.ns}, "spec": spec
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(place.client.clone(), place.ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("PodGroup created");
    for i in 0..n {
        place
            .pod(
                group,
                &format!("{group}-{i}"),
                "worker",
                request.clone(),
                None,
            )
            .await;
    }
}

/// A pod of another scheduler on `node`, holding `request` there.
async fn occupy(client: &Client, ns: &str, name: &str, node: &str, request: Value) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": "other-scheduler",
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": request.clone(), "limits": request}}]
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("foreign pod created");
}

/// Waits until the `n` pods named `{group}-*` are running, and returns them.
async fn gang_running(client: &Client, ns: &str, group: &str, n: usize) -> BTreeMap<String, Pod> {
    let prefix = format!("{group}-");
    wait_for(
        Duration::from_secs(60),
        &format!("{ns}/{group} bound whole"),
        || async {
            let pods: BTreeMap<String, Pod> = check_invariants(client, ns)
                .await
                .into_iter()
                .filter(|(name, _)| name.starts_with(&prefix))
                .collect();
            (pods.len() == n && pods.values().all(|p| phase(p) == "Running")).then_some(pods)
        },
    )
    .await
}

/// Polls for `secs` seconds that no pod named `{group}-*` is bound.
async fn stays_unbound(client: &Client, ns: &str, group: &str, secs: u64) {
    let prefix = format!("{group}-");
    for _ in 0..secs * 2 {
        let pods = check_invariants(client, ns).await;
        let bound: Vec<&String> = pods
            .iter()
            .filter(|(name, p)| name.starts_with(&prefix) && node_of(p).is_some())
            .map(|(name, _)| name)
            .collect();
        assert!(bound.is_empty(), "{ns}/{group}: bound: {bound:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The domains (by `domain_of` the node) the pods are on.
fn domains(pods: &BTreeMap<String, Pod>, domain_of: impl Fn(&str) -> String) -> BTreeSet<String> {
    pods.values()
        .filter_map(node_of)
        .map(|n| domain_of(&n))
        .collect()
}

/// The rack of node `{ns}-{rack}-n{i}`.
fn rack_of(ns: &str) -> impl Fn(&str) -> String + '_ {
    move |node: &str| {
        node.strip_prefix(&format!("{ns}-"))
            .and_then(|rest| rest.split_once("-n"))
            .map(|(rack, _)| rack.to_string())
            .unwrap_or_else(|| panic!("{node} is not a node of {ns}"))
    }
}

/// Events (events.k8s.io/v1) of `ns` about the object named `name` from the scheduler
/// `instance` (every scheduler running reports on cluster-scoped HyperNodes): (reason,
/// note).
async fn events_about(
    client: &Client,
    ns: &str,
    name: &str,
    instance: &str,
) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reporting_instance.as_deref() == Some(instance))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

fn place<'a>(client: &'a Client, ns: &'a str, scheduler: &'a str) -> Place<'a> {
    Place {
        client,
        ns,
        pool: ns,
        scheduler,
    }
}

/// Scenario a. Two tier-1 racks (one by node names, one by a name pattern) under a tier-2
/// spine. A hard tier-1 gang that fits either rack, but that a placement blind to racks
/// would split (the fullest node, which binpack prefers, is in the rack that cannot hold it
/// whole), lands in one rack. A hard tier-1 gang bigger than any rack but smaller than the
/// cluster stays unbound, and its condition names the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_gang_lands_in_one_rack_and_one_bigger_than_any_rack_waits() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-topo-hard";
    let _scheduler = start(name, Some(&topology_conf())).await;
    let shape = json!({"cpu": "4", "memory": "16Gi"});

    // One rack of 2 x 4 cpu holds the gang of 4 x 2 cpu; the other, 2 cpu short, does not.
    let ns = "e2e-topo-hard";
    namespace(&client, ns).await;
    fake_nodes(&client, &format!("{ns}-a"), 1..=2, ns, &shape).await;
    fake_nodes(&client, &format!("{ns}-b"), 1..=2, ns, &shape).await;
    create_hypernode(
        &client,
        "e2e-topo-hard-a",
        rack_by_names(&format!("{ns}-a"), 1..=2),
    )
    .await;
    create_hypernode(
        &client,
        "e2e-topo-hard-b",
        rack_by_regex(&format!("{ns}-b")),
    )
    .await;
    create_hypernode(
        &client,
        "e2e-topo-hard-spine",
        spine(&["e2e-topo-hard-a", "e2e-topo-hard-b"]),
    )
    .await;
    occupy(
        &client,
        ns,
        "other-0",
        &format!("{ns}-a-n1"),
        json!({"cpu": "2"}),
    )
    .await;
    let hard_rack = json!({"mode": "hard", "highestTierAllowed": 1});
    let place = place(&client, ns, name);
    volcano_gang(
        &place,
        "fits",
        4,
        json!({"cpu": "2"}),
        Some(hard_rack.clone()),
    )
    .await;
    let pods = gang_running(&client, ns, "fits", 4).await;
    assert_eq!(
        domains(&pods, rack_of(ns)),
        BTreeSet::from(["b".to_string()]),
        "the whole gang in rack b: {:?}",
        pods.values().map(node_of).collect::<Vec<_>>()
    );

    // Two racks of 2 x 4 cpu: 16 cpu hold 5 x 2 cpu, no rack does.
    let big = "e2e-topo-hard-big";
    namespace(&client, big).await;
    fake_nodes(&client, &format!("{big}-c"), 1..=2, big, &shape).await;
    fake_nodes(&client, &format!("{big}-d"), 1..=2, big, &shape).await;
    create_hypernode(
        &client,
        "e2e-topo-hard-c",
        rack_by_names(&format!("{big}-c"), 1..=2),
    )
    .await;
    create_hypernode(
        &client,
        "e2e-topo-hard-d",
        rack_by_regex(&format!("{big}-d")),
    )
    .await;
    create_hypernode(
        &client,
        "e2e-topo-hard-spine-2",
        spine(&["e2e-topo-hard-c", "e2e-topo-hard-d"]),
    )
    .await;
    let place = Place {
        ns: big,
        pool: big,
        ..place
    };
    volcano_gang(&place, "too-big", 5, json!({"cpu": "2"}), Some(hard_rack)).await;
    let message = wait_for(
        Duration::from_secs(30),
        "an Unschedulable condition naming the tier",
        || async {
            check_invariants(&client, big).await;
            condition_message(&client, big, "too-big")
                .await
                .filter(|m| m.contains("tier"))
        },
    )
    .await;
    assert!(message.contains("tier 1"), "{message}");
    stays_unbound(&client, big, "too-big", 3).await;

    delete_hypernodes(
        &client,
        &[
            "e2e-topo-hard-spine",
            "e2e-topo-hard-a",
            "e2e-topo-hard-b",
            "e2e-topo-hard-spine-2",
            "e2e-topo-hard-c",
            "e2e-topo-hard-d",
        ],
    )
    .await;
}

/// Scenario b. Three racks of 2 x 4 cpu; in racks 2 and 3 another scheduler's pods take
/// half of each node (8, 4 and 4 cpu free). A soft gang of 6 x 2 cpu fits no rack; it lands
/// in the fewest racks, 2 (rack 1 and one other), where a placement blind to racks uses all
/// 3 (the two pods rack 1 cannot hold go to two half-full nodes, in racks 2 and 3). A
/// fourth rack, roomier but in another pool, is none of the gang's business.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_gang_that_fits_no_rack_lands_in_the_fewest_racks() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-topo-soft";
    let _scheduler = start(name, Some(&topology_conf())).await;
    let ns = "e2e-topo-soft";
    namespace(&client, ns).await;
    let shape = json!({"cpu": "4", "memory": "16Gi"});
    let racks = ["r1", "r2", "r3"];
    // Nodes in rack-interleaved order (r1-n1, r2-n1, r3-n1, r1-n2, …): whatever order a
    // placement blind to racks walks nodes of one shape in, it does not follow the racks.
    for n in 1..=2 {
        for rack in racks {
            let node = format!("{ns}-{rack}-n{n}");
            fake_node(&client, &node, ns, shape.clone()).await;
            if rack != "r1" {
                occupy(
                    &client,
                    ns,
                    &format!("other-{rack}-{n}"),
                    &node,
                    json!({"cpu": "2"}),
                )
                .await;
            }
        }
    }
    let mut hypernodes = Vec::new();
    for (i, rack) in racks.iter().enumerate() {
        let prefix = format!("{ns}-{rack}");
        let hn = format!("e2e-topo-soft-{rack}");
        let spec = if i % 2 == 0 {
            rack_by_names(&prefix, 1..=2)
        } else {
            rack_by_regex(&prefix)
        };
        create_hypernode(&client, &hn, spec).await;
        hypernodes.push(hn);
    }
    // A roomier rack in another pool, which the gang's pods may not use (their node
    // selector): room the gang cannot have does not make a rack one of the fewest.
    let elsewhere = format!("{ns}-other");
    let big = json!({"cpu": "8", "memory": "32Gi"});
    fake_nodes(&client, &format!("{ns}-elsewhere"), 1..=2, &elsewhere, &big).await;
    let hn = "e2e-topo-soft-elsewhere".to_string();
    create_hypernode(
        &client,
        &hn,
        rack_by_names(&format!("{ns}-elsewhere"), 1..=2),
    )
    .await;
    hypernodes.push(hn);
    let rack_names: Vec<&str> = hypernodes.iter().map(String::as_str).collect();
    create_hypernode(&client, "e2e-topo-soft-spine", spine(&rack_names)).await;

    let place = place(&client, ns, name);
    // Soft within tier 1: a rack if one held it, else the fewest racks.
    let soft = json!({"mode": "soft", "highestTierAllowed": 1});
    volcano_gang(&place, "wide", 6, json!({"cpu": "2"}), Some(soft)).await;
    let pods = gang_running(&client, ns, "wide", 6).await;
    let used = domains(&pods, rack_of(ns));
    assert!(
        used.len() == 2 && used.contains("r1"),
        "the fewest racks: {used:?} ({:?})",
        pods.values().map(node_of).collect::<Vec<_>>()
    );

    let mut all = rack_names;
    all.insert(0, "e2e-topo-soft-spine");
    delete_hypernodes(&client, &all).await;
}

/// Scenario c. Kueue's TAS: a scheduler-plugins gang whose pods carry
/// `kueue.x-k8s.io/podset-required-topology: example.com/rack` lands in one rack-label
/// domain (no HyperNodes involved), though the fullest node is in the other rack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_required_topology_keeps_a_gang_in_one_label_domain() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-topo-kueue";
    let _scheduler = start(name, Some(&topology_conf())).await;
    let ns = "e2e-topo-kueue";
    namespace(&client, ns).await;
    let shape = json!({"cpu": "4", "memory": "16Gi"});
    for rack in ["x", "y"] {
        let labels = json!({ RACK_LABEL: format!("{ns}-{rack}") });
        labelled_nodes(&client, &format!("{ns}-{rack}"), 1..=2, ns, &shape, labels).await;
    }
    occupy(
        &client,
        ns,
        "other-0",
        &format!("{ns}-x-n1"),
        json!({"cpu": "2"}),
    )
    .await;

    let group: XK8sPodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "tas", "namespace": ns}, "spec": {"minMember": 4}
    }))
    .unwrap();
    Api::<XK8sPodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &group)
        .await
        .expect("PodGroup created");
    let place = place(&client, ns, name);
    for i in 0..4 {
        place
            .raw_pod(
                &format!("tas-{i}"),
                json!({"scheduling.x-k8s.io/pod-group": "tas"}),
                json!({"kueue.x-k8s.io/podset-required-topology": RACK_LABEL}),
                json!({"cpu": "2"}),
            )
            .await;
    }
    let pods = gang_running(&client, ns, "tas", 4).await;
    assert_eq!(
        domains(&pods, rack_of(ns)),
        BTreeSet::from(["y".to_string()]),
        "one rack-label domain, the one that holds the gang: {:?}",
        pods.values().map(node_of).collect::<Vec<_>>()
    );
}

/// Scenario d. Two GPU pools, A100 and H100, of 2 nodes x 2 GPUs each. A gang of 3 x 2
/// GPUs fits only by mixing models: it waits. A gang of 2 x 2 GPUs (in a twin pair of
/// pools) fits one pool: it lands on one model only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_gang_never_mixes_gpu_models() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-topo-gpu";
    let _scheduler = start(name, Some(&topology_conf())).await;
    let shape = json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"});
    let pools = |ns: &'static str| {
        let client = &client;
        let shape = &shape;
        async move {
            namespace(client, ns).await;
            for model in ["A100", "H100"] {
                let labels = json!({ GPU_MODEL_LABEL: format!("NVIDIA-{model}-SXM4-80GB") });
                let prefix = format!("{ns}-{}", model.to_lowercase());
                labelled_nodes(client, &prefix, 1..=2, ns, shape, labels).await;
            }
        }
    };
    let model_of = |node: &str| -> String {
        if node.contains("-a100-") {
            "A100".into()
        } else if node.contains("-h100-") {
            "H100".into()
        } else {
            panic!("{node} is not a GPU node of this test")
        }
    };

    let mixed = "e2e-topo-gpu-mixed";
    let fits = "e2e-topo-gpu-fits";
    tokio::join!(pools(mixed), pools(fits));
    volcano_gang(
        &place(&client, mixed, name),
        "six",
        3,
        json!({"nvidia.com/gpu": "2"}),
        None,
    )
    .await;
    volcano_gang(
        &place(&client, fits, name),
        "four",
        2,
        json!({"nvidia.com/gpu": "2"}),
        None,
    )
    .await;

    let pods = gang_running(&client, fits, "four", 2).await;
    assert_eq!(
        domains(&pods, model_of).len(),
        1,
        "one GPU model: {:?}",
        pods.values().map(node_of).collect::<Vec<_>>()
    );
    let message = wait_for(
        Duration::from_secs(30),
        "the mixed gang's Unschedulable condition",
        || async {
            check_invariants(&client, mixed).await;
            condition_message(&client, mixed, "six").await
        },
    )
    .await;
    stays_unbound(&client, mixed, "six", 3).await;
    println!("the gang that would mix models waits: {message}");
}

/// Scenario e. Malformed HyperNodes (a bad regex, an unknown member type, two selectors in
/// one member; a tier of 0), a PodGroup whose networkTopology has a tier of 0 and a pod whose
/// Kueue annotation is not a label key: each gets a Warning event naming it and the field,
/// the scheduler keeps running, and an unrelated gang binds. Runs the bundled default
/// configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_topology_input_is_reported_and_everyone_else_is_scheduled() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rb-topo-bad";
    let mut scheduler = start(name, None).await;
    let ns = "e2e-topo-bad";
    namespace(&client, ns).await;
    fake_nodes(
        &client,
        ns,
        1..=2,
        ns,
        &json!({"cpu": "4", "memory": "16Gi"}),
    )
    .await;

    create_hypernode(
        &client,
        "e2e-topo-bad-members",
        json!({"tier": 1, "members": [
            {"type": "Node", "selector": {"regexMatch": {"pattern": "e2e-topo-bad-n["}}},
            {"type": "Switch", "selector": {"exactMatch": {"name": "e2e-topo-bad-n1"}}},
            {"type": "Node", "selector": {"exactMatch": {"name": "e2e-topo-bad-n2"},
                                          "regexMatch": {"pattern": "e2e-topo-bad-n2"}}},
        ]}),
    )
    .await;
    create_hypernode(
        &client,
        "e2e-topo-bad-tier",
        json!({"tier": 0, "members": []}),
    )
    .await;
    // Cluster-scoped objects get their events in namespace default.
    let note = wait_for(
        Duration::from_secs(30),
        "an InvalidHyperNode event on e2e-topo-bad-members",
        || async {
            events_about(&client, "default", "e2e-topo-bad-members", name)
                .await
                .into_iter()
                .find(|(reason, _)| reason == "InvalidHyperNode")
                .map(|(_, note)| note)
        },
    )
    .await;
    for field in [
        "HyperNode e2e-topo-bad-members: spec.members[0].selector.regexMatch.pattern \"e2e-topo-bad-n[\"",
        "HyperNode e2e-topo-bad-members: spec.members[1].type \"Switch\"",
        "HyperNode e2e-topo-bad-members: spec.members[2].selector: exactMatch and regexMatch are both set",
    ] {
        assert!(note.contains(field), "{field:?} not in {note}");
    }
    let tier = wait_for(
        Duration::from_secs(30),
        "an InvalidHyperNode event on e2e-topo-bad-tier",
        || async {
            events_about(&client, "default", "e2e-topo-bad-tier", name)
                .await
                .into_iter()
                .find(|(reason, _)| reason == "InvalidHyperNode")
                .map(|(_, note)| note)
        },
    )
    .await;
    assert_eq!(
        tier,
        "HyperNode e2e-topo-bad-tier: spec.tier: must be at least 1, got 0"
    );

    let place = place(&client, ns, name);
    volcano_gang(
        &place,
        "tier-zero",
        1,
        json!({"cpu": "1"}),
        Some(json!({"mode": "hard", "highestTierAllowed": 0})),
    )
    .await;
    place
        .raw_pod(
            "bad-key",
            json!({}),
            json!({"kueue.x-k8s.io/podset-required-topology": "not a key/"}),
            json!({"cpu": "1"}),
        )
        .await;
    volcano_gang(&place, "unrelated", 2, json!({"cpu": "1"}), None).await;
    gang_running(&client, ns, "unrelated", 2).await;
    let said = |object: &'static str, reason: &'static str, what: &'static str| {
        let client = &client;
        async move {
            wait_for(Duration::from_secs(30), what, || async {
                events_about(client, ns, object, name)
                    .await
                    .into_iter()
                    .find(|(r, _)| r == reason)
                    .map(|(_, note)| note)
            })
            .await
        }
    };
    let note = said(
        "tier-zero",
        "InvalidNetworkTopology",
        "an InvalidNetworkTopology event on the PodGroup",
    )
    .await;
    assert_eq!(
        note,
        "PodGroup e2e-topo-bad/tier-zero: spec.networkTopology.highestTierAllowed must be at \
         least 1, got 0"
    );
    let note = said(
        "bad-key",
        "InvalidNetworkTopology",
        "an InvalidNetworkTopology event on the pod",
    )
    .await;
    assert!(
        note.starts_with(
            "pod e2e-topo-bad/bad-key: annotation kueue.x-k8s.io/podset-required-topology \
             \"not a key/\""
        ),
        "{note}"
    );

    // Said once per change, not per cycle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let repeats = events_about(&client, "default", "e2e-topo-bad-members", name)
        .await
        .into_iter()
        .filter(|(reason, _)| reason == "InvalidHyperNode")
        .count();
    assert_eq!(repeats, 1, "one event for one set of problems");
    assert!(
        scheduler.0.try_wait().unwrap().is_none(),
        "the scheduler still runs"
    );
    delete_hypernodes(&client, &["e2e-topo-bad-members", "e2e-topo-bad-tier"]).await;
}
