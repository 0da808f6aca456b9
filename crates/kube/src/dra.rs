//! resource.k8s.io/v1 objects as the engine's DRA model (`model::devices`): ResourceSlices
//! as node inventories, DeviceClasses as selectors, ResourceClaims as claim specs and
//! allocations, and an allocation as the `status` patch kube-scheduler's DRA plugin writes
//! at PreBind. Pure conversions: the watches and the commit use them.
//!
//! What the engine does not model is named, not dropped: a claim asking for it is blocked
//! with a reason (`TaskClaim::blocked`), and a network-attached slice is left out with one.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceSelector, DeviceSubRequest, ExactDeviceRequest, ResourceClaim,
    ResourceClaimSpec, ResourceSlice,
};
use serde_json::{json, Value};

use crate::model::devices::{
    qualified_name, AllocatedDevice, AllocationMode, AttrValue, ClaimAllocation, ClaimSpec, Device,
    DeviceChoice, DeviceRequest, MatchAttribute, NodeDevices,
};
use crate::model::resource::parse_milli;

/// The field kube-scheduler's node selector of a node-local allocation matches on.
const NODE_NAME_FIELD: &str = "metadata.name";

/// The devices of a node-local slice, with the node's name; or why the slice is left out
/// (a network-attached pool, which the engine does not model).
pub fn slice_devices(slice: &ResourceSlice) -> Result<(String, Vec<Device>), String> {
    let spec = &slice.spec;
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    let Some(node) = spec.node_name.clone() else {
        return Err(format!(
            "ResourceSlice {name}: pool {} of driver {} is network-attached (nodeSelector or \
             allNodes), which rust-batch does not allocate from",
            spec.pool.name, spec.driver
        ));
    };
    let driver: Arc<str> = Arc::from(spec.driver.as_str());
    let pool: Arc<str> = Arc::from(spec.pool.name.as_str());
    let devices = spec
        .devices
        .iter()
        .flatten()
        .map(|d| {
            let attributes = d
                .attributes
                .iter()
                .flatten()
                .filter_map(|(k, a)| {
                    let v = if let Some(b) = a.bool {
                        AttrValue::Bool(b)
                    } else if let Some(i) = a.int {
                        AttrValue::Int(i)
                    } else if let Some(s) = &a.string {
                        AttrValue::String(s.clone())
                    } else {
                        AttrValue::Version(a.version.clone()?)
                    };
                    Some((qualified_name(k, &spec.driver), v))
                })
                .collect();
            let capacity = d
                .capacity
                .iter()
                .flatten()
                .filter_map(|(k, c)| {
                    let milli = i64::try_from(parse_milli(&c.value.0).ok()?).ok()?;
                    Some((qualified_name(k, &spec.driver), milli))
                })
                .collect();
            Device {
                driver: driver.clone(),
                pool: pool.clone(),
                name: Arc::from(d.name.as_str()),
                attributes,
                capacity,
            }
        })
        .collect();
    Ok((node, devices))
}

/// A DeviceClass's CEL selectors.
pub fn class_selectors(class: &DeviceClass) -> Vec<String> {
    cel_expressions(class.spec.as_ref().and_then(|s| s.selectors.as_deref()))
}

fn cel_expressions(selectors: Option<&[DeviceSelector]>) -> Vec<String> {
    selectors
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
        .collect()
}

fn mode(allocation_mode: Option<&str>, count: Option<i64>) -> Result<AllocationMode, String> {
    match allocation_mode {
        None | Some("ExactCount") => {
            let n = count.unwrap_or(1);
            u32::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(AllocationMode::ExactCount)
                .ok_or_else(|| format!("count {n} is not a positive number"))
        }
        Some("All") => Ok(AllocationMode::All),
        Some(other) => Err(format!("allocationMode {other} is not ExactCount or All")),
    }
}

fn exact_choice(r: &ExactDeviceRequest) -> Result<DeviceChoice, String> {
    if r.admin_access == Some(true) {
        return Err("adminAccess is not supported by rust-batch".into());
    }
    if r.capacity.is_some() {
        return Err(
            "capacity requests (consumable capacity) are not supported by rust-batch".into(),
        );
    }
    Ok(DeviceChoice {
        name: String::new(),
        device_class_name: r.device_class_name.clone(),
        selectors: cel_expressions(r.selectors.as_deref()),
        mode: mode(r.allocation_mode.as_deref(), r.count)?,
    })
}

fn sub_choice(r: &DeviceSubRequest) -> Result<DeviceChoice, String> {
    if r.capacity.is_some() {
        return Err(
            "capacity requests (consumable capacity) are not supported by rust-batch".into(),
        );
    }
    Ok(DeviceChoice {
        name: r.name.clone(),
        device_class_name: r.device_class_name.clone(),
        selectors: cel_expressions(r.selectors.as_deref()),
        mode: mode(r.allocation_mode.as_deref(), r.count)?,
    })
}

/// What a claim asks for, or why the engine cannot allocate it (named for the pod's
/// event: `claim ns/name: request gpu: …`).
pub fn claim_spec(claim: &str, spec: &ResourceClaimSpec) -> Result<ClaimSpec, String> {
    let devices = spec.devices.as_ref();
    let mut requests = Vec::new();
    for r in devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
    {
        let fail = |why: String| format!("claim {claim}: request {}: {why}", r.name);
        let choices = match (&r.exactly, &r.first_available) {
            (Some(e), None) => vec![exact_choice(e).map_err(fail)?],
            (None, Some(subs)) if !subs.is_empty() => subs
                .iter()
                .map(sub_choice)
                .collect::<Result<_, _>>()
                .map_err(fail)?,
            _ => {
                return Err(fail(
                    "exactly one of exactly and firstAvailable is required".into(),
                ))
            }
        };
        requests.push(DeviceRequest {
            name: r.name.clone(),
            choices,
        });
    }
    let mut constraints = Vec::new();
    for c in devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
    {
        if c.distinct_attribute.is_some() {
            return Err(format!(
                "claim {claim}: distinctAttribute constraints are not supported by rust-batch"
            ));
        }
        if let Some(attribute) = &c.match_attribute {
            constraints.push(MatchAttribute {
                requests: c.requests.clone().unwrap_or_default(),
                attribute: attribute.clone(),
            });
        }
    }
    Ok(ClaimSpec {
        requests,
        constraints,
    })
}

/// The node of a node-local allocation: its node selector's `metadata.name` field.
fn allocation_node(selector: &k8s_openapi::api::core::v1::NodeSelector) -> Option<String> {
    selector.node_selector_terms.iter().find_map(|t| {
        t.match_fields.iter().flatten().find_map(|f| {
            (f.key == NODE_NAME_FIELD && f.operator == "In")
                .then(|| f.values.as_ref()?.first().cloned())
                .flatten()
        })
    })
}

/// A claim's `status.allocation` as the engine's, if it is allocated on one node.
pub fn claim_allocation(claim: &ResourceClaim) -> Option<ClaimAllocation> {
    let alloc = claim.status.as_ref()?.allocation.as_ref()?;
    let node = allocation_node(alloc.node_selector.as_ref()?)?;
    let devices = alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| AllocatedDevice {
            request: r.request.clone(),
            driver: Arc::from(r.driver.as_str()),
            pool: Arc::from(r.pool.as_str()),
            device: Arc::from(r.device.as_str()),
        })
        .collect();
    Some(ClaimAllocation {
        node: Arc::from(node.as_str()),
        devices,
    })
}

/// Every node's inventory from the cluster's slices, with the devices allocated claims
/// hold on it (by `namespace/name`); and the slices left out, each with why.
pub fn node_inventories(
    slices: &[ResourceSlice],
    claims: &[ResourceClaim],
) -> (BTreeMap<String, NodeDevices>, Vec<String>) {
    let mut devices: BTreeMap<String, Vec<Device>> = BTreeMap::new();
    let mut left_out = Vec::new();
    for s in slices {
        match slice_devices(s) {
            Ok((node, d)) => devices.entry(node).or_default().extend(d),
            Err(why) => left_out.push(why),
        }
    }
    let mut allocated: BTreeMap<String, BTreeMap<Arc<str>, Vec<AllocatedDevice>>> = BTreeMap::new();
    for c in claims {
        if let Some(a) = claim_allocation(c) {
            let name = format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or_default(),
                c.metadata.name.as_deref().unwrap_or_default()
            );
            allocated
                .entry(a.node.to_string())
                .or_default()
                .insert(Arc::from(name), a.devices);
        }
    }
    let inventories = devices
        .into_iter()
        .map(|(node, d)| {
            let held = allocated.remove(&node).unwrap_or_default();
            (node, NodeDevices::new(d, &held))
        })
        .collect();
    (inventories, left_out)
}

/// The status patch that commits an allocation for a pod, as kube-scheduler's DRA plugin
/// writes it at PreBind: the devices, the node selector of a node-local allocation, and
/// the pod among the claim's consumers.
pub fn allocation_patch(alloc: &ClaimAllocation, pod_name: &str, pod_uid: &str) -> Value {
    let results: Vec<Value> = alloc
        .devices
        .iter()
        .map(|d| {
            json!({"request": d.request, "driver": &*d.driver, "pool": &*d.pool, "device": &*d.device})
        })
        .collect();
    json!({
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": NODE_NAME_FIELD, "operator": "In", "values": [&*alloc.node]}
                ]}]}
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(yaml: &str) -> ResourceSlice {
        crate::yaml::from_str(yaml).expect("slice YAML")
    }

    const NODE_SLICE: &str = "
metadata: {name: n0-gpu}
spec:
  driver: gpu.example.com
  nodeName: n0
  pool: {name: n0, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      clique: {string: c0}
      index: {int: 0}
      nvidia.com/brand: {string: nvidia}
    capacity:
      memory: {value: 80Gi}
  - name: gpu-1
    attributes:
      clique: {string: c0}
";

    #[test]
    fn a_node_slice_is_the_nodes_devices_with_qualified_names() {
        let (node, devices) = slice_devices(&slice(NODE_SLICE)).unwrap();
        assert_eq!(node, "n0");
        assert_eq!(devices.len(), 2);
        let d = &devices[0];
        assert_eq!(
            (&*d.driver, &*d.pool, &*d.name),
            ("gpu.example.com", "n0", "gpu-0")
        );
        assert_eq!(
            d.attributes["gpu.example.com/clique"],
            AttrValue::String("c0".into())
        );
        assert_eq!(d.attributes["gpu.example.com/index"], AttrValue::Int(0));
        assert_eq!(
            d.attributes["nvidia.com/brand"],
            AttrValue::String("nvidia".into())
        );
        assert_eq!(
            d.capacity["gpu.example.com/memory"],
            80 * (1i64 << 30) * 1000
        );
    }

    #[test]
    fn a_network_attached_slice_is_left_out_by_name() {
        let s = slice(
            "
metadata: {name: fabric}
spec:
  driver: net.example.com
  allNodes: true
  pool: {name: fabric, generation: 1, resourceSliceCount: 1}
  devices: [{name: nic-0}]
",
        );
        let why = slice_devices(&s).unwrap_err();
        assert!(
            why.contains(
                "ResourceSlice fabric: pool fabric of driver net.example.com is network-attached"
            ),
            "{why}"
        );
        let (inv, left_out) = node_inventories(&[s, slice(NODE_SLICE)], &[]);
        assert_eq!(inv.keys().collect::<Vec<_>>(), ["n0"]);
        assert_eq!(left_out.len(), 1);
    }

    fn claim(yaml: &str) -> ResourceClaim {
        crate::yaml::from_str(yaml).expect("claim YAML")
    }

    #[test]
    fn claims_convert_requests_alternatives_and_constraints() {
        let c = claim(
            r#"
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu
        count: 2
        selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "h100"'}}]
    - name: nic
      firstAvailable:
      - {name: fast, deviceClassName: nic, allocationMode: All}
      - {name: slow, deviceClassName: nic}
    constraints:
    - {matchAttribute: gpu.example.com/clique, requests: [gpu]}
"#,
        );
        let spec = claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap();
        assert_eq!(spec.requests.len(), 2);
        let gpu = &spec.requests[0].choices[0];
        assert_eq!(gpu.mode, AllocationMode::ExactCount(2));
        assert_eq!(gpu.selectors.len(), 1);
        let nic = &spec.requests[1].choices;
        assert_eq!(nic[0].name, "fast");
        assert_eq!(nic[0].mode, AllocationMode::All);
        assert_eq!(nic[1].mode, AllocationMode::ExactCount(1));
        assert_eq!(
            spec.constraints,
            vec![MatchAttribute {
                requests: vec!["gpu".into()],
                attribute: "gpu.example.com/clique".into()
            }]
        );
    }

    #[test]
    fn what_the_engine_does_not_model_is_named() {
        let c = claim(
            "
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu}}]
    constraints: [{distinctAttribute: gpu.example.com/index}]
",
        );
        assert_eq!(
            claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap_err(),
            "claim ns/c: distinctAttribute constraints are not supported by rust-batch"
        );
        let c = claim(
            "
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu, adminAccess: true}}]
",
        );
        assert_eq!(
            claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap_err(),
            "claim ns/c: request gpu: adminAccess is not supported by rust-batch"
        );
    }

    #[test]
    fn an_allocation_round_trips_through_the_status_patch() {
        let alloc = ClaimAllocation {
            node: "n0".into(),
            devices: vec![AllocatedDevice {
                request: "gpu".into(),
                driver: "gpu.example.com".into(),
                pool: "n0".into(),
                device: "gpu-1".into(),
            }],
        };
        let patch = allocation_patch(&alloc, "p", "uid-1");
        assert_eq!(patch["status"]["reservedFor"][0]["uid"], "uid-1");
        let mut c = claim("metadata: {name: c, namespace: ns}\nspec: {}\n");
        c.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        assert_eq!(claim_allocation(&c), Some(alloc));
        // Read back with the slices, the claim's devices are held on its node.
        let (inv, _) = node_inventories(&[slice(NODE_SLICE)], &[c]);
        assert_eq!(inv["n0"].allocated[&Arc::<str>::from("ns/c")], vec![1]);
        assert_eq!(inv["n0"].initial_holds(), vec![0, 1]);
    }
}
