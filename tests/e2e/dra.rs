//! End-to-end Dynamic Resource Allocation (resource.k8s.io/v1, served by the 1.37 control
//! plane) with real parts: ResourceSlices published for kwok nodes as a DRA driver publishes
//! them (8 GPUs a node, in two NVLink cliques of 4), a DeviceClass selecting them by CEL,
//! and kube-controller-manager's resource-claim controller making each pod's claim from its
//! template (and deallocating claims whose pods are gone). rust-batch runs under the
//! shipped RBAC and writes each claim's allocation and reservation before it binds.
//! Without a cluster these tests fail; they never skip.

// Each test holds `one_at_a_time()` (a std Mutex) for its whole run, across awaits: it
// serialises whole tests (each on its own runtime), which is its purpose.
#![allow(clippy::await_holding_lock)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::common::operators::Operator;
use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const DRIVER: &str = "gpu.e2e.rust-batch.io";
const CLASS: &str = "e2e-gpu";
const GPUS_PER_NODE: usize = 8;

/// The tests of this module run one at a time: they share the resource-claim controller,
/// and the latency measured in the first is not the machine's other tests' to share.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// kube-controller-manager's resource-claim controller, one for the whole binary (two
/// would each make a claim for the same pod).
fn claim_controller() {
    static KCM: OnceLock<Mutex<Operator>> = OnceLock::new();
    let kcm = KCM.get_or_init(|| {
        Mutex::new(controller_manager(
            "kcm-resourceclaim",
            "resourceclaim-controller",
            "",
            true,
        ))
    });
    let mut kcm = kcm.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        kcm.running(),
        "kube-controller-manager (resource-claim controller) exited:\n{}",
        kcm.log_tail(40)
    );
}

/// What every test begins with: its turn (held while the guard lives), the resource-claim
/// controller, a client, the CRDs, its namespace, the DeviceClass `CLASS` and `gpu_nodes`
/// nodes `{ns}-n{i}` with 8 GPUs each (`gpu_node`).
async fn begin(ns: &str, gpu_nodes: usize) -> (MutexGuard<'static, ()>, Client) {
    let one = one_at_a_time();
    claim_controller();
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    device_class(&client).await;
    for i in 0..gpu_nodes {
        gpu_node(&client, &format!("{ns}-n{i}"), ns).await;
    }
    (one, client)
}

/// Waits until gang `group`'s condition says all of `words`; returns it.
async fn wait_reason(client: &Client, ns: &str, group: &str, words: &[&str]) -> String {
    let what = format!("gang {group} saying {words:?}");
    wait_for(Duration::from_secs(30), &what, || async {
        condition_message(client, ns, group)
            .await
            .filter(|m| words.iter().all(|w| m.contains(w)))
    })
    .await
}

fn object<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// The DeviceClass every test's claims name (created once; cluster-scoped).
async fn device_class(client: &Client) {
    let class: DeviceClass = object(json!({
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}
    }));
    match Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("DeviceClass not created: {e}"),
    }
}

/// The clique of device `gpu-i` of `node`: four GPUs to an NVLink domain.
fn clique(node: &str, device: &str) -> String {
    let i: usize = device
        .trim_start_matches("gpu-")
        .parse()
        .expect("a device of ours");
    format!("{node}-clique-{}", i / 4)
}

/// A kwok node of `pool` with its ResourceSlice, as the GPU driver on it would publish.
async fn gpu_node(client: &Client, node: &str, pool: &str) {
    gpu_node_with(client, node, pool, GPUS_PER_NODE, |i| {
        json!({
            "nvlinkClique": {"string": clique(node, &format!("gpu-{i}"))},
            "model": {"string": "h100"}
        })
    })
    .await
}

/// A kwok node of `pool` publishing `gpus` GPUs, GPU `i` with `attributes(i)` (and its
/// index).
async fn gpu_node_with(
    client: &Client,
    node: &str,
    pool: &str,
    gpus: usize,
    attributes: impl Fn(usize) -> Value,
) {
    fake_node(client, node, pool, json!({"cpu": "32", "memory": "256Gi"})).await;
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            let mut attrs = attributes(i);
            attrs["index"] = json!({"int": i});
            json!({
                "name": format!("gpu-{i}"),
                "attributes": attrs,
                "capacity": {"memory": {"value": "80Gi"}}
            })
        })
        .collect();
    let on_node = json!({"nodeName": node});
    publish_slice(client, &format!("{node}-gpus"), DRIVER, on_node, devices).await;
}

/// ResourceSlice `name` of `driver` publishing `devices` where `reach` says (`nodeName`,
/// `nodeSelector` or `allNodes`), its pool named after it, as a driver publishes one.
async fn publish_slice(
    client: &Client,
    name: &str,
    driver: &str,
    reach: Value,
    devices: Vec<Value>,
) {
    let pool = reach["nodeName"].as_str().unwrap_or(name);
    let mut spec = json!({
        "driver": driver,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
        "devices": devices
    });
    for (k, v) in reach.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let slice: ResourceSlice = object(json!({"metadata": {"name": name}, "spec": spec}));
    Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_or_else(|e| panic!("ResourceSlice {name} not published: {e}"));
}

/// A request of `count` devices of `class` (with extra selectors), as a claim spec.
fn gpus(class: &str, count: u32, selectors: &[&str]) -> Value {
    let mut exactly = json!({"deviceClassName": class, "count": count});
    if !selectors.is_empty() {
        exactly["selectors"] = selectors
            .iter()
            .map(|e| json!({"cel": {"expression": e}}))
            .collect();
    }
    json!({"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}})
}

/// `gpus(…)` with all devices in one NVLink clique.
fn gpus_in_one_clique(count: u32) -> Value {
    let mut spec = gpus(CLASS, count, &[]);
    spec["devices"]["constraints"] =
        json!([{"matchAttribute": format!("{DRIVER}/nvlinkClique"), "requests": ["gpu"]}]);
    spec
}

async fn template(client: &Client, ns: &str, name: &str, spec: Value) -> kube::Result<()> {
    let t: ResourceClaimTemplate = object(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": spec}
    }));
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &t)
        .await
        .map(|_| ())
}

/// `template`, which the API server must accept.
async fn new_template(client: &Client, ns: &str, name: &str, spec: Value) {
    template(client, ns, name, spec)
        .await
        .unwrap_or_else(|e| panic!("template {name}: {e}"));
}

/// A pod of gang `group` on `ns`'s nodes with `claims` (its spec.resourceClaims), each
/// one its container uses.
async fn claims_pod(
    client: &Client,
    ns: &str,
    scheduler: &str,
    group: &str,
    name: &str,
    claims: Value,
) {
    let on = json!({"pool": ns});
    claims_pod_on(client, ns, scheduler, group, name, claims, on).await
}

/// `claims_pod` on the nodes `node_selector` picks.
async fn claims_pod_on(
    client: &Client,
    ns: &str,
    scheduler: &str,
    group: &str,
    name: &str,
    claims: Value,
    node_selector: Value,
) {
    let uses: Vec<Value> = claims
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"name": c["name"]}))
        .collect();
    let p: Pod = object(json!({
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": node_selector,
            "resourceClaims": claims,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}, "claims": uses}}]
        }
    }));
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("pod created");
}

fn from_template(template: &str) -> Value {
    json!([{"name": "gpus", "resourceClaimTemplateName": template}])
}

async fn claims_in(client: &Client, ns: &str) -> Vec<ResourceClaim> {
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("claims listed")
        .items
}

/// The node of a claim's allocation (its node selector's `metadata.name`).
fn allocated_node(c: &ResourceClaim) -> Option<String> {
    let alloc = c.status.as_ref()?.allocation.as_ref()?;
    alloc
        .node_selector
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

/// The devices of a claim's allocation: (pool, device).
fn allocated_devices(c: &ResourceClaim) -> Vec<(String, String)> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.pool, r.device))
        .collect()
}

fn reserved_for(c: &ResourceClaim) -> BTreeSet<String> {
    c.status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect()
}

/// The claim the resource-claim controller made for the pod (its status names it).
fn claim_of(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .first()?
        .resource_claim_name
        .clone()
}

/// No device is in two allocations, in the whole cluster.
async fn assert_no_device_twice(client: &Client) {
    let all = Api::<ResourceClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("claims listed")
        .items;
    let mut owner: BTreeMap<(String, String), String> = BTreeMap::new();
    for c in &all {
        let name = format!(
            "{}/{}",
            c.metadata.namespace.clone().unwrap_or_default(),
            c.metadata.name.clone().unwrap_or_default()
        );
        for d in allocated_devices(c) {
            if let Some(other) = owner.insert(d.clone(), name.clone()) {
                panic!("device {d:?} allocated to both {other} and {name}");
            }
        }
    }
}

async fn pods_in(client: &Client, ns: &str) -> BTreeMap<String, Pod> {
    check_invariants(client, ns).await
}

fn bound_count(pods: &BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter()
        .filter(|(n, p)| n.starts_with(prefix) && node_of(p).is_some())
        .count()
}

/// A gang of four pods, each claiming two GPUs of one NVLink clique through a template,
/// binds whole: every claim allocated with its pod in reservedFor, its devices on the node
/// its pod is bound to and in one clique; within 2 s of its last pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_claiming_gpus_in_one_nvlink_clique_binds_whole_within_two_seconds() {
    let ns = "dra-clique";
    let scheduler = "rb-dra-clique";
    let (_one, client) = begin(ns, 3).await;
    let (_scheduler, _port) = start_ready_scheduler(scheduler, &[]).await;
    new_template(&client, ns, "two-gpus-one-clique", gpus_in_one_clique(2)).await;
    pod_group(&client, ns, "train", 4).await;
    for i in 0..4 {
        claims_pod(
            &client,
            ns,
            scheduler,
            "train",
            &format!("train-{i}"),
            from_template("two-gpus-one-clique"),
        )
        .await;
    }
    let last_pod = Instant::now();
    let took = loop {
        let pods = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("pods listed")
            .items;
        if pods.len() == 4 && pods.iter().all(|p| node_of(p).is_some()) {
            break last_pod.elapsed();
        }
        assert!(
            last_pod.elapsed() < Duration::from_secs(60),
            "the gang did not bind: {:?}",
            partial_gangs(&client, ns).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("DRA gang of 4 (2 GPUs each, one clique) bound {took:?} after its last pod");

    let pods = pods_in(&client, ns).await;
    let claims: BTreeMap<String, ResourceClaim> = claims_in(&client, ns)
        .await
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap(), c))
        .collect();
    for (name, p) in &pods {
        let node = node_of(p).expect("bound");
        let claim = claim_of(p).unwrap_or_else(|| panic!("{name}: no claim made for it"));
        let c = &claims[&claim];
        assert_eq!(allocated_node(c).as_deref(), Some(node.as_str()), "{claim}");
        assert_eq!(
            reserved_for(c),
            BTreeSet::from([p.metadata.uid.clone().unwrap()]),
            "{claim} is reserved for its pod"
        );
        let devices = allocated_devices(c);
        assert_eq!(devices.len(), 2, "{claim}: two GPUs");
        assert!(
            devices.iter().all(|(pool, _)| *pool == node),
            "{claim}: on {node}"
        );
        let cliques: BTreeSet<String> = devices.iter().map(|(_, d)| clique(&node, d)).collect();
        assert_eq!(
            cliques.len(),
            1,
            "{claim}: one NVLink clique, got {cliques:?}"
        );
        assert!(
            c.metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == "resource.kubernetes.io/delete-protection"),
            "{claim}: kube-scheduler's finalizer, so the controller deallocates it later"
        );
    }
    assert_no_device_twice(&client).await;
    assert!(
        took < Duration::from_secs(2),
        "bound {took:?} after its last pod (target: 2 s)"
    );
}

/// A claim two pods of a gang share (`resourceClaimName`) is allocated once: one device,
/// both pods on its node and in its reservedFor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_shared_by_two_pods_of_a_gang_is_allocated_once() {
    let ns = "dra-shared";
    let scheduler = "rb-dra-shared";
    let (_one, client) = begin(ns, 2).await;
    let (_scheduler, _port) = start_ready_scheduler(scheduler, &[]).await;
    let shared: ResourceClaim = object(json!({
        "metadata": {"name": "shared-gpu", "namespace": ns},
        "spec": gpus(CLASS, 1, &[])
    }));
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &shared)
        .await
        .expect("claim created");
    pod_group(&client, ns, "pair", 2).await;
    for i in 0..2 {
        claims_pod(
            &client,
            ns,
            scheduler,
            "pair",
            &format!("pair-{i}"),
            json!([{"name": "shared", "resourceClaimName": "shared-gpu"}]),
        )
        .await;
    }
    let pods = wait_for(Duration::from_secs(30), "the pair bound", || async {
        let pods = pods_in(&client, ns).await;
        (bound_count(&pods, "pair-") == 2).then_some(pods)
    })
    .await;
    let nodes: BTreeSet<String> = pods.values().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 1, "both pods on the claim's node: {nodes:?}");
    let c = Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .get("shared-gpu")
        .await
        .unwrap();
    assert_eq!(allocated_node(&c), nodes.into_iter().next());
    assert_eq!(allocated_devices(&c).len(), 1, "allocated once: one device");
    let uids: BTreeSet<String> = pods
        .values()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert_eq!(reserved_for(&c), uids, "reserved for both pods");
    assert_no_device_twice(&client).await;
}

/// Claims that cannot be allocated — a class that does not exist, a selector that fails
/// when evaluated, more devices than any node has, a template that does not exist — make
/// their gangs wait, each saying why by name, while another gang binds; the scheduler
/// lives on. A selector that does not compile never reaches it: the API server refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_claims_wait_with_named_reasons_while_another_gang_schedules() {
    let ns = "dra-bad";
    let scheduler = "rb-dra-bad";
    let (_one, client) = begin(ns, 2).await;
    let (mut running, _port) = start_ready_scheduler(scheduler, &[]).await;

    let refused = template(
        &client,
        ns,
        "does-not-compile",
        gpus(CLASS, 1, &["device.attributes["]),
    )
    .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
        "the API server refuses a selector that does not compile: {refused:?}"
    );
    let missing_attribute = format!("device.attributes[\"{DRIVER}\"].noSuchAttribute == \"x\"");
    let templates = [
        ("no-class", gpus("does-not-exist", 1, &[])),
        ("cel-error", gpus(CLASS, 1, &[missing_attribute.as_str()])),
        ("too-many", gpus(CLASS, GPUS_PER_NODE as u32 + 1, &[])),
        ("one-gpu", gpus(CLASS, 1, &[])),
    ];
    for (name, spec) in templates {
        new_template(&client, ns, name, spec).await;
    }
    let cases = [
        (
            "no-class",
            "no-class",
            "device class does-not-exist does not exist",
        ),
        ("cel-error", "cel-error", "CEL runtime error"),
        ("too-many", "too-many", "cannot allocate all claims"),
        (
            "no-template",
            "no-such-template",
            "resourceclaimtemplate dra-bad/no-such-template not found",
        ),
    ];
    for (group, template, _) in cases {
        pod_group(&client, ns, group, 1).await;
        claims_pod(
            &client,
            ns,
            scheduler,
            group,
            &format!("{group}-0"),
            from_template(template),
        )
        .await;
    }
    pod_group(&client, ns, "fine", 2).await;
    for i in 0..2 {
        claims_pod(
            &client,
            ns,
            scheduler,
            "fine",
            &format!("fine-{i}"),
            from_template("one-gpu"),
        )
        .await;
    }
    for (group, _, why) in cases {
        let message = wait_reason(&client, ns, group, &[why]).await;
        eprintln!("{group}: {message}");
    }
    wait_for(Duration::from_secs(30), "the fine gang bound", || async {
        let pods = pods_in(&client, ns).await;
        (bound_count(&pods, "fine-") == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = pods_in(&client, ns).await;
    for (group, _, _) in cases {
        assert_eq!(bound_count(&pods, group), 0, "{group} never bound");
    }
    assert!(
        running.0.try_wait().expect("process state").is_none(),
        "the scheduler lives on"
    );
    assert_no_device_twice(&client).await;
}

/// No device is allocated twice across gangs, and a gang that cannot get all its claims
/// binds nothing and holds no device; once devices are freed (the first gang's pods gone,
/// their claims deallocated by the resource-claim controller) it binds whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_device_is_allocated_twice_and_a_gang_short_of_devices_binds_nothing() {
    let ns = "dra-full";
    let scheduler = "rb-dra-full";
    let (_one, client) = begin(ns, 2).await;
    let (_scheduler, _port) = start_ready_scheduler(scheduler, &[]).await;
    new_template(&client, ns, "four-gpus", gpus(CLASS, 4, &[])).await;
    // Twelve of the sixteen GPUs.
    pod_group(&client, ns, "big", 3).await;
    for i in 0..3 {
        claims_pod(
            &client,
            ns,
            scheduler,
            "big",
            &format!("big-{i}"),
            from_template("four-gpus"),
        )
        .await;
    }
    wait_for(Duration::from_secs(30), "gang big bound", || async {
        let pods = pods_in(&client, ns).await;
        (bound_count(&pods, "big-") == 3).then_some(())
    })
    .await;
    // Eight more do not fit in the four left: nothing of the gang binds or is allocated.
    pod_group(&client, ns, "late", 2).await;
    for i in 0..2 {
        claims_pod(
            &client,
            ns,
            scheduler,
            "late",
            &format!("late-{i}"),
            from_template("four-gpus"),
        )
        .await;
    }
    wait_for(
        Duration::from_secs(30),
        "gang late unschedulable",
        || async { condition_message(&client, ns, "late").await },
    )
    .await;
    for _ in 0..10 {
        let pods = pods_in(&client, ns).await;
        assert_eq!(
            bound_count(&pods, "late-"),
            0,
            "a pod of the short gang bound"
        );
        assert_no_device_twice(&client).await;
        for p in pods
            .values()
            .filter(|p| p.metadata.name.as_deref().unwrap().starts_with("late-"))
        {
            if let Some(claim) = claim_of(p) {
                let c = Api::<ResourceClaim>::namespaced(client.clone(), ns)
                    .get(&claim)
                    .await
                    .unwrap();
                assert!(
                    allocated_devices(&c).is_empty(),
                    "{claim} holds devices unbound"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Gang big goes: its claims are deallocated, and gang late binds whole.
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    for i in 0..3 {
        pods_api
            .delete(
                &format!("big-{i}"),
                &DeleteParams::default().grace_period(0),
            )
            .await
            .expect("pod deleted");
    }
    wait_for(Duration::from_secs(60), "gang late bound", || async {
        let pods = pods_in(&client, ns).await;
        (bound_count(&pods, "late-") == 2).then_some(())
    })
    .await;
    assert_no_device_twice(&client).await;
}

/// A gang `group` of `n` pods of queue `queue`, each with its own claim from `template`.
async fn template_gang(
    client: &Client,
    ns: &str,
    scheduler: &str,
    (group, n, queue): (&str, usize, &str),
    template: &str,
) {
    pod_group_in(client, ns, group, n as i32, queue).await;
    for i in 0..n {
        let name = format!("{group}-{i}");
        claims_pod(client, ns, scheduler, group, &name, from_template(template)).await;
    }
}

/// Waits until `n` pods named `prefix…` are bound (the invariants hold on every poll).
async fn wait_bound(client: &Client, ns: &str, prefix: &str, n: usize) -> BTreeMap<String, Pod> {
    wait_for(
        Duration::from_secs(60),
        &format!("{n} pods {prefix}* bound"),
        || async {
            let pods = pods_in(client, ns).await;
            (bound_count(&pods, prefix) == n).then_some(pods)
        },
    )
    .await
}

/// For a few seconds: no pod named `prefix…` binds, no claim of theirs holds a device,
/// no device is allocated twice and no gang is bound in part.
async fn holds_nothing(client: &Client, ns: &str, prefix: &str) {
    for _ in 0..8 {
        let pods = pods_in(client, ns).await;
        assert_eq!(bound_count(&pods, prefix), 0, "a pod {prefix}* bound");
        assert_no_device_twice(client).await;
        let claims: BTreeMap<String, ResourceClaim> = claims_in(client, ns)
            .await
            .into_iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect();
        for (name, p) in pods.iter().filter(|(n, _)| n.starts_with(prefix)) {
            if let Some(c) = claim_of(p).and_then(|c| claims.get(&c)) {
                assert!(
                    allocated_devices(c).is_empty(),
                    "{name}'s claim holds devices unbound"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The devices the claims of the pods named `prefix…` hold: (pool, device), by claim;
/// each claim allocated on its pod's node and reserved for it.
async fn devices_of_gang(
    client: &Client,
    ns: &str,
    prefix: &str,
) -> BTreeMap<String, Vec<(String, String)>> {
    let pods = pods_in(client, ns).await;
    let claims: BTreeMap<String, ResourceClaim> = claims_in(client, ns)
        .await
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
    let mut out = BTreeMap::new();
    for (name, p) in pods.iter().filter(|(n, _)| n.starts_with(prefix)) {
        let node = node_of(p).unwrap_or_else(|| panic!("{name} bound"));
        let claim = claim_of(p).unwrap_or_else(|| panic!("{name}: no claim made for it"));
        let c = &claims[&claim];
        assert_eq!(allocated_node(c).as_deref(), Some(node.as_str()), "{claim}");
        assert!(
            reserved_for(c).contains(p.metadata.uid.as_deref().unwrap()),
            "{claim} is reserved for {name}"
        );
        out.insert(claim, allocated_devices(c));
    }
    out
}

/// Starts a scheduler answering to `name` with gpu-affinity configured by `arguments`
/// (YAML lines under `arguments:`), under enqueue, allocate and backfill.
async fn start_with_gpu_affinity(name: &str, arguments: &[(&str, &str)]) -> Scheduler {
    let args: String = arguments
        .iter()
        .map(|(k, v)| format!("      {k}: {v}\n"))
        .collect();
    // Without the default's topology levels: the devices' attribute is the only domain.
    let conf = format!(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: gpu-affinity
    arguments:
{args}"
    );
    let path = std::env::temp_dir().join(format!("{name}-{}.conf", std::process::id()));
    std::fs::write(&path, conf).expect("configuration written");
    let (scheduler, _port) =
        start_ready_scheduler(name, &["--scheduler-conf", path.to_str().unwrap()]).await;
    scheduler
}

/// gpu-affinity keeps a gang's DRA devices on one value of `attribute` (a device attribute
/// of the driver), nodes `{ns}-n{i}` of 4 GPUs each publishing `values[i]`: a filler pod
/// takes one GPU of n0, so the value of n0 has one GPU less. Gang `wide` (5 pods × 2 GPUs)
/// fits in the free GPUs but in no single value: it waits, its condition naming the rule,
/// bound in no part. Gang `train` (4 pods × 2 GPUs) binds whole, every device of value
/// `expected`, though a split over n0's value comes first in node order.
async fn one_value_per_gang(
    ns: &str,
    arguments: &[(&str, &str)],
    attribute: &str,
    values: &[&str],
    expected: &str,
) {
    let scheduler = format!("rb-{ns}");
    let (_one, client) = begin(ns, 0).await;
    let mut value_of: BTreeMap<String, String> = BTreeMap::new();
    for (i, v) in values.iter().enumerate() {
        let node = format!("{ns}-n{i}");
        let mut attributes = json!({});
        attributes[attribute] = json!({"string": v});
        gpu_node_with(&client, &node, ns, 4, |_| attributes.clone()).await;
        value_of.insert(node, v.to_string());
    }
    let _scheduler = start_with_gpu_affinity(&scheduler, arguments).await;
    new_template(&client, ns, "one-gpu", gpus(CLASS, 1, &[])).await;
    new_template(&client, ns, "two-gpus", gpus(CLASS, 2, &[])).await;
    pod_group(&client, ns, "filler", 1).await;
    let n0 = json!({"kubernetes.io/hostname": format!("{ns}-n0")});
    let filler = from_template("one-gpu");
    claims_pod_on(&client, ns, &scheduler, "filler", "filler-0", filler, n0).await;
    wait_bound(&client, ns, "filler-", 1).await;

    template_gang(&client, ns, &scheduler, ("wide", 5, "default"), "two-gpus").await;
    let qualified = format!("{DRIVER}/{attribute}");
    let message = wait_reason(&client, ns, "wide", &[&qualified, "(hard)"]).await;
    eprintln!("wide: {message}");

    template_gang(&client, ns, &scheduler, ("train", 4, "default"), "two-gpus").await;
    wait_bound(&client, ns, "train-", 4).await;
    let devices = devices_of_gang(&client, ns, "train-").await;
    assert_eq!(devices.len(), 4, "{devices:?}");
    let used: BTreeSet<&String> = devices
        .values()
        .flatten()
        .map(|(pool, _)| &value_of[pool])
        .collect();
    assert_eq!(
        used,
        BTreeSet::from([&expected.to_string()]),
        "train's devices: {devices:?}"
    );
    holds_nothing(&client, ns, "wide-").await;
}

/// `gpu-affinity.deviceAttribute` (hard): a gang's devices in one NVLink clique, each
/// clique two nodes (a multi-node NVLink domain), or the gang waits naming the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_affinity_keeps_a_gangs_devices_in_one_nvlink_clique_or_the_gang_waits() {
    let attribute = format!("{DRIVER}/nvlinkClique");
    one_value_per_gang(
        "dra-affinity-clique",
        &[
            ("gpu-affinity.deviceAttribute", attribute.as_str()),
            ("gpu-affinity.deviceAttributeMode", "hard"),
        ],
        "nvlinkClique",
        &["x", "x", "y", "y"],
        "y",
    )
    .await;
}

/// `gpu-affinity.deviceModelAttribute` (with `gpuModel` hard, its default): a gang's
/// devices of one GPU model, or the gang waits naming the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_affinity_gives_a_gangs_devices_one_gpu_model_or_the_gang_waits() {
    let attribute = format!("{DRIVER}/productName");
    one_value_per_gang(
        "dra-affinity-model",
        &[("gpu-affinity.deviceModelAttribute", attribute.as_str())],
        "productName",
        &["a100", "h100", "h100"],
        "h100",
    )
    .await;
}

/// A queue whose capability counts devices of a DeviceClass (`deviceclass/<class>: 8`,
/// Volcano 1.15's key): gangs of 4 GPUs each are admitted up to 8, the third waits whole
/// with a reason naming the class though the nodes have 8 GPUs more; once the first
/// gang's pods are gone (their claims deallocated) it binds whole. No device is allocated
/// twice, no gang bound in part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_device_quota_admits_gangs_up_to_it_and_holds_the_next_whole() {
    use rust_batch::kube::dialects::volcano::Queue;
    let ns = "dra-quota";
    let scheduler = "rb-dra-quota";
    let (_one, client) = begin(ns, 2).await;
    let quota = format!("deviceclass/{CLASS}");
    let mut spec = json!({"weight": 1, "capability": {}});
    spec["capability"][quota.as_str()] = json!("8");
    let queue: Queue = object(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": ns}, "spec": spec
    }));
    Api::<Queue>::all(client.clone())
        .create(&PostParams::default(), &queue)
        .await
        .expect("queue created");
    let (_scheduler, _port) = start_ready_scheduler(scheduler, &[]).await;
    new_template(&client, ns, "two-gpus", gpus(CLASS, 2, &[])).await;
    for gang in ["a", "b"] {
        template_gang(&client, ns, scheduler, (gang, 2, ns), "two-gpus").await;
        wait_bound(&client, ns, &format!("{gang}-"), 2).await;
    }
    template_gang(&client, ns, scheduler, ("c", 2, ns), "two-gpus").await;
    let message = wait_reason(&client, ns, "c", &[&quota]).await;
    eprintln!("c: {message}");
    holds_nothing(&client, ns, "c-").await;

    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    for i in 0..2 {
        pods_api
            .delete(&format!("a-{i}"), &DeleteParams::default().grace_period(0))
            .await
            .expect("pod deleted");
    }
    wait_bound(&client, ns, "c-", 2).await;
    for (claim, devices) in devices_of_gang(&client, ns, "c-").await {
        assert_eq!(devices.len(), 2, "{claim}: {devices:?}");
    }
    assert_eq!(bound_count(&pods_in(&client, ns).await, "b-"), 2);
    assert_no_device_twice(&client).await;
}

const FABRIC_DRIVER: &str = "fabric.e2e.rust-batch.io";
const FABRIC_CLASS: &str = "e2e-fabric";

/// A network-attached pool (a ResourceSlice with a `nodeSelector`, no `nodeName`) offers
/// four devices to the nodes whose labels it selects: a gang of two pods each claiming two
/// binds whole, each claim allocated once, on (and pinned to) its pod's node; the pool's
/// devices are then held cluster-wide, so a pod claiming one more waits and holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_attached_pool_is_allocated_once_cluster_wide_to_a_whole_gang() {
    let ns = "dra-fabric";
    let scheduler = "rb-dra-fabric";
    let (_one, client) = begin(ns, 0).await;
    let class: DeviceClass = object(json!({
        "metadata": {"name": FABRIC_CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{FABRIC_DRIVER}'")}}]}
    }));
    Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("DeviceClass created");
    for i in 0..2 {
        let shape = json!({"cpu": "32", "memory": "256Gi"});
        fake_node(&client, &format!("{ns}-n{i}"), ns, shape).await;
    }
    let devices: Vec<Value> = (0..4)
        .map(|i| json!({"name": format!("link-{i}")}))
        .collect();
    let reach = json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": [ns]}]}]}});
    publish_slice(&client, ns, FABRIC_DRIVER, reach, devices).await;
    let (_scheduler, _port) = start_ready_scheduler(scheduler, &[]).await;
    new_template(&client, ns, "two-links", gpus(FABRIC_CLASS, 2, &[])).await;
    new_template(&client, ns, "one-link", gpus(FABRIC_CLASS, 1, &[])).await;
    template_gang(&client, ns, scheduler, ("net", 2, "default"), "two-links").await;
    wait_bound(&client, ns, "net-", 2).await;
    let held = devices_of_gang(&client, ns, "net-").await;
    let all: BTreeSet<&(String, String)> = held.values().flatten().collect();
    assert_eq!(all.len(), 4, "four distinct devices: {held:?}");
    assert!(all.iter().all(|(pool, _)| pool == ns), "{held:?}");
    assert_no_device_twice(&client).await;

    template_gang(&client, ns, scheduler, ("more", 1, "default"), "one-link").await;
    wait_reason(&client, ns, "more", &["cannot allocate all claims"]).await;
    holds_nothing(&client, ns, "more-").await;
}
