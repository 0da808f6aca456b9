use super::*;

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("object")
}

pub(crate) fn slice(node: &str, gpus: usize) -> ResourceSlice {
    let devices: Vec<_> = (0..gpus)
        .map(|i| {
            serde_json::json!({"name": format!("gpu-{i}"),
                    "attributes": {"clique": {"string": format!("c{}", i / 4)}}})
        })
        .collect();
    obj(serde_json::json!({
        "metadata": {"name": format!("{node}-gpus"), "resourceVersion": "1"},
        "spec": {"driver": "gpu.example.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices}
    }))
}

/// A Ready node with 8 CPUs and `labels`.
pub(crate) fn ready_node(
    name: &str,
    labels: serde_json::Value,
) -> k8s_openapi::api::core::v1::Node {
    obj(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

pub(crate) fn class() -> DeviceClass {
    obj(serde_json::json!({
        "metadata": {"name": "gpu", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
    }))
}

pub(crate) fn claim(name: &str, owner: Option<&str>, count: u32) -> ResourceClaim {
    let mut c: ResourceClaim = obj(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("claim-{name}"),
            "resourceVersion": "5"},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count}}],
            "constraints": [{"matchAttribute": "gpu.example.com/clique"}]
        }}
    }));
    if let Some(uid) = owner {
        c.metadata.owner_references = Some(vec![obj(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": true
        }))]);
    }
    c
}

pub(crate) fn template() -> ResourceClaimTemplate {
    obj(serde_json::json!({
        "metadata": {"name": "two-gpus", "namespace": "ns", "resourceVersion": "1"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2}}]}}}
    }))
}

/// A pending pod of ours (gang `ns/g`) with one claim from template `two-gpus`, its
/// claim (if made) named in its status.
pub(crate) fn template_pod(name: &str, made: Option<&str>) -> Pod {
    let mut p: Pod = obj(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1",
            "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": {"schedulerName": "rust-batch", "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]}
    }));
    if let Some(claim) = made {
        p.status = Some(obj(serde_json::json!({
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim}]
        })));
    }
    p
}

fn claims_of(st: &Index, uid: &str) -> Vec<TaskClaim> {
    st.cache.pod(uid).expect("pod known").task.claims.to_vec()
}

fn blocked_why(st: &Index, uid: &str) -> Option<String> {
    claims_of(st, uid).iter().find_map(|c| c.blocked.clone())
}

#[test]
fn a_template_claim_waits_for_its_template_then_its_claim_then_is_allocatable() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_pod(&template_pod("a", None));
    assert_eq!(
        blocked_why(&st, "a").as_deref(),
        Some("pod claim gpus: resourceclaimtemplate ns/two-gpus not found")
    );
    st.apply_claim_template(&template());
    assert!(
        blocked_why(&st, "a")
            .unwrap()
            .contains("waiting for the resource claim controller"),
        "the template exists: resolved again, waiting for its claim"
    );
    st.apply_pod(&template_pod("a", Some("a-gpus")));
    assert_eq!(
        blocked_why(&st, "a").as_deref(),
        Some("pod claim gpus: resourceclaim ns/a-gpus not found")
    );
    st.apply_resource_claim(&claim("a-gpus", Some("a"), 2));
    let claims = claims_of(&st, "a");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].blocked, None, "the claim arrived: resolved again");
    assert_eq!(&*claims[0].name, "ns/a-gpus");
    assert!(!claims[0].shared);
    assert_eq!(claims[0].spec.requests[0].name, "gpu");
    // A claim made for another pod is not this pod's.
    st.apply_resource_claim(&{
        let mut c = claim("a-gpus", Some("someone-else"), 2);
        c.metadata.resource_version = Some("6".into());
        c
    });
    assert_eq!(
        blocked_why(&st, "a").as_deref(),
        Some("resourceclaim ns/a-gpus was not created for this pod")
    );
}

#[test]
fn what_a_claim_asks_that_the_engine_does_not_model_blocks_it_by_name() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    let mut c = claim("shared", None, 1);
    c.spec
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .constraints = Some(vec![obj(
        serde_json::json!({"distinctAttribute": "gpu.example.com/clique"}),
    )]);
    st.apply_resource_claim(&c);
    let mut p = template_pod("a", None);
    p.spec.as_mut().unwrap().resource_claims = Some(vec![obj(
        serde_json::json!({"name": "gpus", "resourceClaimName": "shared"}),
    )]);
    st.apply_pod(&p);
    assert_eq!(
        blocked_why(&st, "a").as_deref(),
        Some("claim ns/shared: distinctAttribute constraints are not supported by rust-batch")
    );
    assert!(claims_of(&st, "a")[0].shared);
}

#[test]
fn slices_and_allocated_claims_make_node_inventories() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_node(&ready_node("n0", serde_json::json!({})));
    st.apply_device_class(&class());
    st.apply_resource_slice(&slice("n0", 8));
    let inventory = |st: &Index| {
        let s = st.cache.state();
        s.node(s.node_by_name("n0").unwrap()).devices.clone()
    };
    assert_eq!(inventory(&st).unwrap().devices.len(), 8);
    // Another scheduler allocated two devices: held in the inventory.
    let mut c = claim("theirs", None, 2);
    c.status = Some(obj(serde_json::json!({"allocation": {
        "devices": {"results": [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-0"},
            {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}
    }})));
    st.apply_resource_claim(&c);
    assert_eq!(inventory(&st).unwrap().initial_holds()[..3], [1, 1, 0]);
    st.delete_resource_claim("ns/theirs");
    assert_eq!(inventory(&st).unwrap().initial_holds()[..3], [0, 0, 0]);
    st.delete_resource_slice("n0-gpus");
    assert!(inventory(&st).is_none());
}

#[test]
fn a_pod_backing_off_is_blocked_until_its_back_off_ends() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_claim_template(&template());
    st.apply_resource_claim(&claim("a-gpus", Some("a"), 2));
    st.apply_pod(&template_pod("a", Some("a-gpus")));
    assert_eq!(blocked_why(&st, "a"), None);
    st.dra
        .backoffs
        .insert("a".into(), (1_000, "devices could not be allocated".into()));
    st.refresh_claims_pod("a");
    assert_eq!(
        blocked_why(&st, "a").as_deref(),
        Some("devices could not be allocated")
    );
    st.end_device_backoffs(999);
    assert!(blocked_why(&st, "a").is_some(), "not over yet");
    st.end_device_backoffs(1_000);
    assert_eq!(blocked_why(&st, "a"), None);
}

fn inventory_of(st: &Index, node: &str) -> Option<Arc<crate::model::devices::NodeDevices>> {
    let s = st.cache.state();
    s.node(s.node_by_name(node)?).devices.clone()
}

#[test]
fn a_network_attached_pool_reaches_the_nodes_its_selector_picks_and_is_held_on_each() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_device_class(&class());
    let rack = |r: &str| serde_json::json!({"example.com/rack": r});
    st.apply_node(&ready_node("a0", rack("a")));
    st.apply_node(&ready_node("b0", rack("b")));
    st.apply_resource_slice(&obj(serde_json::json!({
        "metadata": {"name": "fabric", "resourceVersion": "1"},
        "spec": {"driver": "gpu.example.com",
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "example.com/rack", "operator": "In", "values": ["a"]}]}]},
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}
    })));
    let count = |st: &Index, n: &str| inventory_of(st, n).map_or(0, |i| i.devices.len());
    assert_eq!((count(&st, "a0"), count(&st, "b0")), (2, 0));
    // A node relabelled into the rack reaches the pool; one that arrives there too.
    st.apply_node(&ready_node("b0", rack("a")));
    st.apply_node(&ready_node("a1", rack("a")));
    assert_eq!((count(&st, "b0"), count(&st, "a1")), (2, 2));
    // Allocated by anyone, with no node's name in its selector: held wherever reached.
    let mut c = claim("theirs", None, 1);
    c.status = Some(obj(
        serde_json::json!({"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "fabric", "device": "gpu-1"}
        ]}}}),
    ));
    st.apply_resource_claim(&c);
    for n in ["a0", "b0", "a1"] {
        assert_eq!(inventory_of(&st, n).unwrap().initial_holds(), [0, 1], "{n}");
    }
    st.delete_resource_claim("ns/theirs");
    assert_eq!(inventory_of(&st, "a0").unwrap().initial_holds(), [0, 0]);
    st.delete_resource_slice("fabric");
    assert!(inventory_of(&st, "a0").is_none() && inventory_of(&st, "b0").is_none());
}

#[test]
fn a_bound_pod_keeps_its_allocated_claims_to_count_against_its_queue() {
    let mut st = Index::new(vec!["rust-batch".into()]);
    st.apply_node(&ready_node("n0", serde_json::json!({})));
    st.apply_device_class(&class());
    st.apply_resource_slice(&slice("n0", 8));
    st.apply_claim_template(&template());
    let mut c = claim("a-gpus", Some("a"), 2);
    c.status = Some(obj(serde_json::json!({
        "allocation": {
            "devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-0"},
                {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-1"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "a", "uid": "a"}]
    })));
    st.apply_resource_claim(&c);
    let mut p = template_pod("a", Some("a-gpus"));
    p.spec.as_mut().unwrap().node_name = Some("n0".into());
    st.apply_pod(&p);
    let claims = claims_of(&st, "a");
    assert_eq!(claims.len(), 1);
    assert!(claims[0].allocation.is_some() && claims[0].blocked.is_none());
    let task = &st.cache.pod("a").unwrap().task;
    assert_eq!(task.device_charge.scalar("deviceclass/gpu"), 2000);
    let holds = inventory_of(&st, "n0").unwrap().initial_holds();
    let s = st.cache.state();
    assert_eq!(
        s.node(s.node_by_name("n0").unwrap()).device_holds,
        holds,
        "held once, by the inventory"
    );
    assert_eq!(holds[..3], [1, 1, 0]);
}
