//! Rules relative to other pods on the real control plane: anti-affinity inside a gang
//! (one worker per node), topology spread across two zones, and a host-port clash. Each
//! test has its own namespace, node pool and scheduler (running with deploy/'s RBAC).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

/// Creates a pod of gang `group` from a spec fragment merged over the usual one.
#[allow(clippy::too_many_arguments)]
async fn pod_with(
    client: &Client,
    ns: &str,
    pool: &str,
    scheduler: &str,
    name: &str,
    group: &str,
    labels: serde_json::Value,
    spec: serde_json::Value,
) {
    let mut p = json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels,
                     "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"pool": pool},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]
        }
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    let p: Pod = serde_json::from_value(p).unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("pod created");
}

/// Node of every bound pod in the namespace.
async fn bound(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("pods listed")
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, node_of(&p)?)))
        .collect()
}

const SHAPE: &str = r#"{"cpu": "8", "memory": "32Gi"}"#;

fn shape() -> serde_json::Value {
    serde_json::from_str(SHAPE).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_affinity_keeps_one_worker_per_node_inside_the_gang() {
    const NS: &str = "e2e-anti";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    for i in 0..3 {
        fake_node(&client, &format!("anti-n{i}"), NS, shape()).await;
    }
    let _s = start_scheduler("rb-anti");
    pod_group(&client, NS, "w", 4).await;
    let one_per_node = json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"job": "w"}}}]}}});
    for i in 0..4 {
        pod_with(
            &client,
            NS,
            NS,
            "rb-anti",
            &format!("w-{i}"),
            "w",
            json!({"job": "w"}),
            one_per_node.clone(),
        )
        .await;
    }
    let msg = wait_for(
        Duration::from_secs(30),
        "the gang says why it waits",
        || async {
            condition_message(&client, NS, "w")
                .await
                .filter(|m| m.contains("anti-affinity"))
        },
    )
    .await;
    assert!(
        msg.contains("node(s) didn't match pod anti-affinity rules"),
        "{msg}"
    );
    assert!(
        bound(&client, NS).await.is_empty(),
        "4 one-per-node pods on 3 nodes: none binds"
    );

    fake_node(&client, "anti-n3", NS, shape()).await;
    let nodes = wait_for(
        Duration::from_secs(30),
        "the gang bound on a fourth node",
        || async {
            let b = bound(&client, NS).await;
            (b.len() == 4).then_some(b)
        },
    )
    .await;
    let distinct: std::collections::BTreeSet<&String> = nodes.values().collect();
    assert_eq!(distinct.len(), 4, "one worker per node: {nodes:?}");
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_balances_a_gang_across_two_zones() {
    const NS: &str = "e2e-spread";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    for (i, zone) in ["a", "a", "a", "b"].iter().enumerate() {
        fake_node_labelled(
            &client,
            &format!("spread-n{i}"),
            NS,
            shape(),
            json!({"topology.kubernetes.io/zone": format!("zone-{zone}")}),
        )
        .await;
    }
    let _s = start_scheduler("rb-spread");
    pod_group(&client, NS, "s", 6).await;
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"job": "s"}}}]});
    for i in 0..6 {
        pod_with(
            &client,
            NS,
            NS,
            "rb-spread",
            &format!("s-{i}"),
            "s",
            json!({"job": "s"}),
            spread.clone(),
        )
        .await;
    }
    let nodes = wait_for(Duration::from_secs(30), "the gang bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 6).then_some(b)
    })
    .await;
    // Zone b has one node and zone a three: the constraint, not the node count, decides.
    let in_b = nodes.values().filter(|n| *n == "spread-n3").count();
    assert_eq!(in_b, 3, "3 per zone: {nodes:?}");
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_port_is_taken_once_per_node() {
    const NS: &str = "e2e-ports";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(&client, "ports-n0", NS, shape()).await;
    let _s = start_scheduler("rb-ports");
    let port = json!({"containers": [{"name": "main", "image": "busybox",
        "ports": [{"containerPort": 9000, "hostPort": 9000}],
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]});
    for g in ["sshd-a", "sshd-b"] {
        pod_group(&client, NS, g, 1).await;
        pod_with(
            &client,
            NS,
            NS,
            "rb-ports",
            &format!("{g}-0"),
            g,
            json!({}),
            port.clone(),
        )
        .await;
    }
    let first = wait_for(Duration::from_secs(30), "one pod bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 1).then_some(b)
    })
    .await;
    let waiting = if first.contains_key("sshd-a-0") {
        "sshd-b"
    } else {
        "sshd-a"
    };
    let msg = wait_for(Duration::from_secs(30), "the other says why", || async {
        condition_message(&client, NS, waiting)
            .await
            .filter(|m| m.contains("ports"))
    })
    .await;
    assert!(
        msg.contains("node(s) didn't have free ports for the requested pod ports"),
        "{msg}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&client, NS).await.len(), 1, "never two on one node");

    fake_node(&client, "ports-n1", NS, shape()).await;
    let nodes = wait_for(Duration::from_secs(30), "both bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 2).then_some(b)
    })
    .await;
    assert_ne!(nodes["sshd-a-0"], nodes["sshd-b-0"], "{nodes:?}");
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_finds_pods_of_other_namespaces_by_their_labels() {
    const NS: &str = "e2e-nssel";
    const DATA: &str = "e2e-nssel-data";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "metadata": {"name": DATA, "labels": {"team": "data"}}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    for i in 0..3 {
        fake_node(&client, &format!("nssel-n{i}"), NS, shape()).await;
    }
    // A cache pod of another team (another scheduler placed it) on the last node.
    let cache: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cache", "namespace": DATA, "labels": {"app": "cache"}},
        "spec": {"schedulerName": "other-scheduler", "nodeName": "nssel-n2",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "1"}}}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), DATA)
        .create(&PostParams::default(), &cache)
        .await
        .expect("cache pod created");
    let _s = start_scheduler("rb-nssel");
    pod_group(&client, NS, "r", 2).await;
    let near_cache = json!({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {"team": "data"}},
            "labelSelector": {"matchLabels": {"app": "cache"}}}]}}});
    for i in 0..2 {
        pod_with(
            &client,
            NS,
            NS,
            "rb-nssel",
            &format!("r-{i}"),
            "r",
            json!({}),
            near_cache.clone(),
        )
        .await;
    }
    let nodes = wait_for(Duration::from_secs(30), "the readers bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 2).then_some(b)
    })
    .await;
    assert!(
        nodes.values().all(|n| n == "nssel-n2"),
        "beside the cache: {nodes:?}"
    );
    check_invariants(&client, NS).await;
}
