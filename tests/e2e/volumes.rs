//! Pods' volumes on the real control plane: a claim bound to a volume with node affinity,
//! WaitForFirstConsumer claims provisioned for a whole gang before any of it binds, and
//! pods that must wait (an unbound Immediate claim, a missing claim). Each test has its
//! own namespace, node pool, StorageClass and scheduler (running with deploy/'s RBAC).
//!
//! Binding claims to volumes is the real PersistentVolume controller's work: the test
//! cluster runs kube-controller-manager with only that controller (tests/cluster/up.sh).
//! No provisioner runs, so the tests play the external provisioner, as external-provisioner
//! does: for a claim with `volume.kubernetes.io/selected-node`, a PersistentVolume with a
//! `claimRef` to it and node affinity to that node; the PV controller then binds the two.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

fn shape() -> serde_json::Value {
    json!({"cpu": "8", "memory": "32Gi"})
}

async fn create<K>(api: Api<K>, obj: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).expect("object parses");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("object created");
}

async fn storage_class(client: &Client, name: &str, mode: &str) {
    create(
        Api::<StorageClass>::all(client.clone()),
        json!({"metadata": {"name": name}, "provisioner": "example.com/e2e-disk",
               "volumeBindingMode": mode, "reclaimPolicy": "Delete"}),
    )
    .await;
}

async fn claim(client: &Client, ns: &str, name: &str, class: &str, volume: Option<&str>) {
    create(
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
        json!({"metadata": {"name": name, "namespace": ns},
               "spec": {"storageClassName": class, "volumeName": volume,
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
}

/// A local volume on `node`, reserved for claim `ns/claim` (what a static or external
/// provisioner creates). `uid`: the claim's, when binding to a known claim.
async fn local_volume(
    client: &Client,
    name: &str,
    node: &str,
    class: &str,
    (ns, claim, uid): (&str, &str, Option<String>),
) {
    create(
        Api::<PersistentVolume>::all(client.clone()),
        json!({"metadata": {"name": name,
                            "annotations": {"pv.kubernetes.io/provisioned-by": "example.com/e2e-disk"}},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": class,
                        "local": {"path": format!("/mnt/disks/{name}")},
                        "claimRef": {"namespace": ns, "name": claim, "uid": uid},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}),
    )
    .await;
}

async fn get_claim(client: &Client, ns: &str, name: &str) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("claim read")
}

fn claim_phase(c: &PersistentVolumeClaim) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn selected_node(c: &PersistentVolumeClaim) -> Option<String> {
    c.metadata.annotations.as_ref()?.get(SELECTED_NODE).cloned()
}

async fn wait_bound(client: &Client, ns: &str, name: &str) {
    wait_for(
        Duration::from_secs(60),
        &format!("the PV controller binds claim {name}"),
        || async { (claim_phase(&get_claim(client, ns, name).await) == "Bound").then_some(()) },
    )
    .await;
}

/// Plays the external provisioner for a claim handed to it: a volume on the selected node.
async fn provision(client: &Client, ns: &str, name: &str, class: &str) -> String {
    let c = get_claim(client, ns, name).await;
    let node = selected_node(&c).expect("the claim has a selected node");
    local_volume(
        client,
        &format!("pv-{ns}-{name}"),
        &node,
        class,
        (ns, name, c.metadata.uid.clone()),
    )
    .await;
    node
}

/// A pod of gang `group` (a PodGroup of that name) mounting the given claims.
async fn pod_with_claims(
    client: &Client,
    ns: &str,
    scheduler: &str,
    name: &str,
    group: &str,
    claims: &[&str],
) {
    let volumes: Vec<serde_json::Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    create(
        Api::<Pod>::namespaced(client.clone(), ns),
        json!({
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"scheduling.k8s.io/group-name": group}},
            "spec": {
                "schedulerName": scheduler,
                "nodeSelector": {"pool": ns},
                "volumes": volumes,
                "containers": [{"name": "main", "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]
            }
        }),
    )
    .await;
}

/// The message of the PodGroup's Scheduled condition.
async fn scheduled_message(client: &Client, ns: &str, name: &str) -> String {
    let pg = Api::<rust_batch::kube::dialects::volcano::PodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("podgroup read");
    pg.status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_.as_ref().map(|t| t.as_str()) == Some("Scheduled"))
        .and_then(|c| c.message)
        .unwrap_or_default()
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

/// Several scheduling cycles (500 ms each) pass and nothing in `ns` binds.
async fn none_binds_for_a_while(client: &Client, ns: &str, why: &str) {
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let b = bound(client, ns).await;
        assert!(b.is_empty(), "{why}: {b:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_go_where_their_bound_volumes_are() {
    const NS: &str = "e2e-vol-local";
    const CLASS: &str = "e2e-vol-local";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    for i in 0..3 {
        fake_node(&client, &format!("vol-local-n{i}"), NS, shape()).await;
    }
    storage_class(&client, CLASS, "WaitForFirstConsumer").await;
    // Volumes on n2, n0 and n1, each reserved for one claim; the PV controller binds them.
    for (claim_name, node) in [
        ("solo", "vol-local-n2"),
        ("w-0", "vol-local-n0"),
        ("w-1", "vol-local-n1"),
    ] {
        local_volume(
            &client,
            &format!("pv-{NS}-{claim_name}"),
            node,
            CLASS,
            (NS, claim_name, None),
        )
        .await;
        claim(
            &client,
            NS,
            claim_name,
            CLASS,
            Some(&format!("pv-{NS}-{claim_name}")),
        )
        .await;
    }
    for claim_name in ["solo", "w-0", "w-1"] {
        wait_bound(&client, NS, claim_name).await;
    }
    let _s = start_scheduler("rb-vol-local");
    pod_group(&client, NS, "solo", 1).await;
    pod_with_claims(&client, NS, "rb-vol-local", "solo-0", "solo", &["solo"]).await;
    pod_group(&client, NS, "w", 2).await;
    pod_with_claims(&client, NS, "rb-vol-local", "w-0", "w", &["w-0"]).await;
    pod_with_claims(&client, NS, "rb-vol-local", "w-1", "w", &["w-1"]).await;
    let nodes = wait_for(Duration::from_secs(30), "all three bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 3).then_some(b)
    })
    .await;
    assert_eq!(nodes["solo-0"], "vol-local-n2", "{nodes:?}");
    assert_eq!(nodes["w-0"], "vol-local-n0", "{nodes:?}");
    assert_eq!(nodes["w-1"], "vol-local-n1", "{nodes:?}");
    check_invariants(&client, NS).await;
}

/// A gang "g" of two pods in `ns`, each with its own WaitForFirstConsumer claim
/// (data-0, data-1) of class `ns`, on `nodes` fresh nodes, scheduled by a new scheduler of
/// that name; returns the scheduler once both claims were handed to the provisioner, with
/// the nodes they were handed to.
async fn wffc_gang(client: &Client, ns: &str, nodes: usize) -> (Scheduler, (String, String)) {
    install_crds(client).await;
    namespace(client, ns).await;
    for i in 0..nodes {
        fake_node(client, &format!("{ns}-n{i}"), ns, shape()).await;
    }
    storage_class(client, ns, "WaitForFirstConsumer").await;
    claim(client, ns, "data-0", ns, None).await;
    claim(client, ns, "data-1", ns, None).await;
    let scheduler = format!("rb-{ns}");
    let s = start_scheduler(&scheduler);
    pod_group(client, ns, "g", 2).await;
    pod_with_claims(client, ns, &scheduler, "g-0", "g", &["data-0"]).await;
    pod_with_claims(client, ns, &scheduler, "g-1", "g", &["data-1"]).await;
    let selected = wait_for(
        Duration::from_secs(30),
        "selected-node on both claims",
        || async {
            let a = selected_node(&get_claim(client, ns, "data-0").await)?;
            let b = selected_node(&get_claim(client, ns, "data-1").await)?;
            Some((a, b))
        },
    )
    .await;
    (s, selected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gangs_wait_for_first_consumer_claims_are_provisioned_before_any_pod_binds() {
    const NS: &str = "e2e-vol-wffc";
    const CLASS: &str = NS;
    let client = client().await;
    // The gang commits: both claims are handed to the provisioner for their pods' nodes.
    let (_s, selected) = wffc_gang(&client, NS, 2).await;
    for node in [&selected.0, &selected.1] {
        assert!(node.starts_with("e2e-vol-wffc-n"), "{selected:?}");
    }
    none_binds_for_a_while(&client, NS, "no claim is bound yet: nothing binds").await;
    let scheduled = scheduled_message(&client, NS, "g").await;
    assert!(
        scheduled.contains("binds wait for its WaitForFirstConsumer claims to be provisioned")
            && scheduled.contains(&format!("{NS}/data-0")),
        "{scheduled}"
    );

    // One claim of two provisioned and bound: still nothing binds.
    let node0 = provision(&client, NS, "data-0", CLASS).await;
    wait_bound(&client, NS, "data-0").await;
    none_binds_for_a_while(&client, NS, "one claim of the gang unbound: nothing binds").await;

    let node1 = provision(&client, NS, "data-1", CLASS).await;
    wait_bound(&client, NS, "data-1").await;
    let nodes = wait_for(Duration::from_secs(30), "the gang bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 2).then_some(b)
    })
    .await;
    assert_eq!(
        nodes["g-0"], node0,
        "pod on the node its volume was made for"
    );
    assert_eq!(nodes["g-1"], node1);
    assert_eq!((node0, node1), selected);
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_never_provisioned_calls_the_gang_off_and_frees_its_room() {
    const NS: &str = "e2e-vol-timeout";
    const CLASS: &str = "e2e-vol-timeout";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(
        &client,
        "vol-timeout-n0",
        NS,
        json!({"cpu": "1", "memory": "4Gi"}),
    )
    .await;
    storage_class(&client, CLASS, "WaitForFirstConsumer").await;
    claim(&client, NS, "never", CLASS, None).await;
    let _s = start_scheduler_with(
        "rb-vol-timeout",
        &["--http-address", "off", "--volume-binding-timeout", "3s"],
    );
    pod_group(&client, NS, "stuck", 1).await;
    pod_with_claims(
        &client,
        NS,
        "rb-vol-timeout",
        "stuck-0",
        "stuck",
        &["never"],
    )
    .await;
    wait_for(Duration::from_secs(30), "selected-node set", || async {
        selected_node(&get_claim(&client, NS, "never").await)
    })
    .await;
    let note = wait_for(
        Duration::from_secs(30),
        "the gang called off with an event naming the claim",
        || async {
            pod_events(&client, NS, "stuck-0")
                .await
                .into_iter()
                .find(|(reason, _)| reason == "FailedVolumeBinding")
                .map(|(_, note)| note)
        },
    )
    .await;
    assert!(
        note.contains(&format!(
            "persistentvolumeclaim {NS}/never (for node vol-timeout-n0) not bound within 3s"
        )),
        "{note}"
    );
    // While it backs off, its condition names the claim.
    wait_for(
        Duration::from_secs(30),
        "the gang's condition names the claim",
        || async {
            condition_message(&client, NS, "stuck")
                .await
                .filter(|c| c.contains(&format!("persistentvolumeclaim {NS}/never")))
        },
    )
    .await;
    // Its room was given back: a pod without volumes takes the node's only CPU.
    pod_group(&client, NS, "other", 1).await;
    pod_with_claims(&client, NS, "rb-vol-timeout", "other-0", "other", &[]).await;
    let b = wait_for(Duration::from_secs(30), "the other pod bound", || async {
        let b = bound(&client, NS).await;
        b.contains_key("other-0").then_some(b)
    })
    .await;
    assert!(!b.contains_key("stuck-0"), "{b:?}");
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_immediate_and_missing_claims_wait_with_their_names_while_others_schedule() {
    const NS: &str = "e2e-vol-wait";
    const CLASS: &str = "e2e-vol-immediate";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(&client, "vol-wait-n0", NS, shape()).await;
    // An Immediate class whose provisioner never comes: its claims stay Pending.
    storage_class(&client, CLASS, "Immediate").await;
    claim(&client, NS, "imm", CLASS, None).await;
    let _s = start_scheduler("rb-vol-wait");
    for (group, claims) in [
        ("immediate", &["imm"][..]),
        ("missing", &["ghost"][..]),
        ("plain", &[][..]),
    ] {
        pod_group(&client, NS, group, 1).await;
        pod_with_claims(
            &client,
            NS,
            "rb-vol-wait",
            &format!("{group}-0"),
            group,
            claims,
        )
        .await;
    }
    wait_for(Duration::from_secs(30), "the plain pod bound", || async {
        bound(&client, NS)
            .await
            .contains_key("plain-0")
            .then_some(())
    })
    .await;
    for (pod, group, said) in [
        (
            "immediate-0",
            "immediate",
            "pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"imm\" is not bound",
        ),
        (
            "missing-0",
            "missing",
            "persistentvolumeclaim \"ghost\" not found",
        ),
    ] {
        let note = wait_for(
            Duration::from_secs(30),
            &format!("an event on {pod} naming its claim"),
            || async {
                pod_events(&client, NS, pod)
                    .await
                    .into_iter()
                    .find(|(reason, note)| reason == "FailedScheduling" && note.contains(said))
                    .map(|(_, note)| note)
            },
        )
        .await;
        assert!(note.contains(said), "{note}");
        wait_for(
            Duration::from_secs(30),
            &format!("gang {group}'s condition names its claim"),
            || async {
                condition_message(&client, NS, group)
                    .await
                    .filter(|c| c.contains(said))
            },
        )
        .await;
    }
    let b = bound(&client, NS).await;
    assert_eq!(b.len(), 1, "only the plain pod: {b:?}");

    // The missing claim appears, bound to a volume on the node: its pod schedules.
    local_volume(
        &client,
        "pv-e2e-vol-wait-ghost",
        "vol-wait-n0",
        CLASS,
        (NS, "ghost", None),
    )
    .await;
    claim(&client, NS, "ghost", CLASS, Some("pv-e2e-vol-wait-ghost")).await;
    wait_for(
        Duration::from_secs(60),
        "the missing-claim pod bound",
        || async {
            bound(&client, NS)
                .await
                .contains_key("missing-0")
                .then_some(())
        },
    )
    .await;
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_scheduler_keeps_a_gang_on_the_nodes_its_claims_were_handed_to() {
    const NS: &str = "e2e-vol-restart";
    const CLASS: &str = NS;
    let client = client().await;
    let (first, selected) = wffc_gang(&client, NS, 3).await;
    // The scheduler goes while the gang waits for its claims; a new one takes over.
    drop(first);
    let _second = start_scheduler(&format!("rb-{NS}"));
    none_binds_for_a_while(&client, NS, "the claims are still unbound: nothing binds").await;
    let node0 = provision(&client, NS, "data-0", CLASS).await;
    let node1 = provision(&client, NS, "data-1", CLASS).await;
    assert_eq!(
        (node0.clone(), node1.clone()),
        selected,
        "the claims kept their nodes"
    );
    let nodes = wait_for(Duration::from_secs(60), "the gang bound", || async {
        let b = bound(&client, NS).await;
        (b.len() == 2).then_some(b)
    })
    .await;
    assert_eq!(nodes["g-0"], node0, "{nodes:?}");
    assert_eq!(nodes["g-1"], node1, "{nodes:?}");
    check_invariants(&client, NS).await;
}
