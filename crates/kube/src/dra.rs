//! resource.k8s.io/v1 objects as the engine's DRA model (`model::devices`): ResourceSlices
//! as node inventories, DeviceClasses as selectors, ResourceClaims as claim specs and
//! allocations, and an allocation as the `status` patch kube-scheduler's DRA plugin writes
//! at PreBind. Pure conversions: the watches and the commit use them.
//!
//! What the engine does not model is named, not dropped: a claim asking for it is blocked
//! with a reason (`TaskClaim::blocked`), and a slice that cannot be read is left out with
//! one (`cluster_inventories`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceSelector, DeviceSubRequest, ExactDeviceRequest, ResourceClaim,
    ResourceClaimSpec, ResourceSlice, ResourceSliceSpec,
};
use serde_json::{json, Value};

use crate::model::devices::{
    qualified_name, AllocatedDevice, AllocationMode, AttrValue, ClaimAllocation, ClaimSpec,
    CounterDraw, CounterSet, Device, DeviceChoice, DeviceRequest, MatchAttribute, NodeDevices,
};
use crate::model::placement::NodeSelectorTerm;
use crate::model::resource::parse_milli;

/// The field kube-scheduler's node selector of a node-local allocation matches on.
const NODE_NAME_FIELD: &str = "metadata.name";

/// The devices of a node-local slice, with the node's name; or why the slice is left out
/// (a network-attached pool: `pool_devices` reads it, given where each device reaches).
pub fn slice_devices(slice: &ResourceSlice) -> Result<(String, Vec<Device>), String> {
    let spec = &slice.spec;
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    let Some(node) = spec.node_name.clone() else {
        return Err(format!(
            "ResourceSlice {name}: pool {} of driver {} is network-attached (nodeSelector, \
             allNodes or perDeviceNodeSelection): read it with pool_devices",
            spec.pool.name, spec.driver
        ));
    };
    let devices = pool_devices(slice)?.into_iter().map(|(_, d)| d).collect();
    Ok((node, devices))
}

/// One device of a slice in the engine's terms: qualified attribute and capacity names,
/// capacities and counter draws in milli-units.
fn device_of(spec: &ResourceSliceSpec, d: &k8s_openapi::api::resource::v1::Device) -> Device {
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
    let consumes = d
        .consumes_counters
        .iter()
        .flatten()
        .map(|c| CounterDraw {
            counter_set: c.counter_set.clone(),
            counters: counters_milli(&c.counters),
        })
        .collect();
    Device {
        driver: Arc::from(spec.driver.as_str()),
        pool: Arc::from(spec.pool.name.as_str()),
        name: Arc::from(d.name.as_str()),
        attributes,
        capacity,
        consumes,
    }
}

/// Counter values in milli-units; a value that is not a quantity counts as none (a draw
/// on it never fits, a capacity of it holds nothing).
fn counters_milli(
    counters: &BTreeMap<String, k8s_openapi::api::resource::v1::Counter>,
) -> BTreeMap<String, i64> {
    counters
        .iter()
        .map(|(k, c)| {
            let milli = parse_milli(&c.value.0)
                .ok()
                .and_then(|m| i64::try_from(m).ok())
                .unwrap_or(0);
            (k.clone(), milli)
        })
        .collect()
}

/// The counter sets a slice shares with the devices of its pool (`sharedCounters`).
pub fn slice_counter_sets(slice: &ResourceSlice) -> Vec<CounterSet> {
    let spec = &slice.spec;
    spec.shared_counters
        .iter()
        .flatten()
        .map(|c| CounterSet {
            driver: Arc::from(spec.driver.as_str()),
            pool: Arc::from(spec.pool.name.as_str()),
            name: c.name.clone(),
            counters: counters_milli(&c.counters),
        })
        .collect()
}

/// Where a device can be used: one node (a node-local slice), or the nodes a selector
/// picks, or every node (network-attached: allocatable once, cluster-wide).
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceReach {
    Node(String),
    Nodes(Vec<NodeSelectorTerm>),
    AllNodes,
}

impl DeviceReach {
    pub fn reaches(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Node(n) => n == node,
            Self::Nodes(terms) => terms.iter().any(|t| t.matches(node, labels)),
            Self::AllNodes => true,
        }
    }
}

fn reach_of(
    node_name: Option<&String>,
    selector: Option<&k8s_openapi::api::core::v1::NodeSelector>,
    all_nodes: Option<bool>,
) -> Result<Option<DeviceReach>, String> {
    if let Some(n) = node_name {
        return Ok(Some(DeviceReach::Node(n.clone())));
    }
    if let Some(sel) = selector {
        let terms = sel
            .node_selector_terms
            .iter()
            .map(crate::convert::selector_term)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("nodeSelector: {e}"))?;
        return Ok(Some(DeviceReach::Nodes(terms)));
    }
    Ok((all_nodes == Some(true)).then_some(DeviceReach::AllNodes))
}

/// Every device of a slice with where it can be used: the slice's node, node selector or
/// `allNodes`, or each device's own (`perDeviceNodeSelection`); or why the slice cannot
/// be read (a selector with an unknown operator, a device that says nowhere).
pub fn pool_devices(slice: &ResourceSlice) -> Result<Vec<(DeviceReach, Device)>, String> {
    let spec = &slice.spec;
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    let fail = |why: String| format!("ResourceSlice {name}: {why}");
    let per_device = spec.per_device_node_selection == Some(true);
    let slice_reach = reach_of(
        spec.node_name.as_ref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
    )
    .map_err(fail)?;
    let mut out = Vec::new();
    for d in spec.devices.iter().flatten() {
        let reach = if per_device {
            reach_of(d.node_name.as_ref(), d.node_selector.as_ref(), d.all_nodes)
                .map_err(|e| fail(format!("device {}: {e}", d.name)))?
        } else {
            slice_reach.clone()
        };
        let Some(reach) = reach else {
            return Err(fail(format!(
                "device {} says no node it is available on (nodeName, nodeSelector, allNodes)",
                d.name
            )));
        };
        out.push((reach, device_of(spec, d)));
    }
    Ok(out)
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
    let mode = (r.allocation_mode.as_deref(), r.count);
    choice(
        "",
        &r.device_class_name,
        r.selectors.as_deref(),
        mode,
        r.capacity.is_some(),
    )
}

fn sub_choice(r: &DeviceSubRequest) -> Result<DeviceChoice, String> {
    let mode = (r.allocation_mode.as_deref(), r.count);
    choice(
        &r.name,
        &r.device_class_name,
        r.selectors.as_deref(),
        mode,
        r.capacity.is_some(),
    )
}

/// One way to satisfy a request (`exactly`, or a `firstAvailable` subrequest `name`):
/// its class, selectors and (allocation mode, count); capacity requests are refused.
fn choice(
    name: &str,
    class: &str,
    selectors: Option<&[DeviceSelector]>,
    (allocation_mode, count): (Option<&str>, Option<i64>),
    capacity: bool,
) -> Result<DeviceChoice, String> {
    if capacity {
        return Err(
            "capacity requests (consumable capacity) are not supported by rust-batch".into(),
        );
    }
    Ok(DeviceChoice {
        name: name.to_string(),
        device_class_name: class.to_string(),
        selectors: cel_expressions(selectors),
        mode: mode(allocation_mode, count)?,
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
    Some(ClaimAllocation {
        node: Arc::from(node.as_str()),
        devices: claim_results(claim)?,
    })
}

/// Every node's inventory from the cluster's slices, with the devices allocated claims
/// hold on it (by `namespace/name`) and the counter sets its pools share; and the slices
/// left out, each with why. Network-attached pools need the nodes' labels: see
/// `cluster_inventories` (here they are left out, naming them).
pub fn node_inventories(
    slices: &[ResourceSlice],
    claims: &[ResourceClaim],
) -> (BTreeMap<String, NodeDevices>, Vec<String>) {
    cluster_inventories(slices, claims, None)
}

/// `node_inventories` with network-attached pools (slices with a node selector,
/// `allNodes` or `perDeviceNodeSelection`) given `nodes` (name → labels): each node's
/// inventory holds the network-attached devices it reaches besides its own
/// (`NodeDevices::with_shared`), which the engine allocates once cluster-wide. A claim's
/// devices are held wherever they are, whichever node selector its allocation has.
pub fn cluster_inventories(
    slices: &[ResourceSlice],
    claims: &[ResourceClaim],
    nodes: Option<&BTreeMap<String, BTreeMap<String, String>>>,
) -> (BTreeMap<String, NodeDevices>, Vec<String>) {
    let mut own: BTreeMap<String, Vec<Device>> = BTreeMap::new();
    let mut network: Vec<(DeviceReach, Device)> = Vec::new();
    let mut counter_sets: Vec<CounterSet> = Vec::new();
    let mut left_out = Vec::new();
    for s in slices {
        counter_sets.extend(slice_counter_sets(s));
        if s.spec.node_name.is_some() {
            match slice_devices(s) {
                Ok((node, d)) => own.entry(node).or_default().extend(d),
                Err(why) => left_out.push(why),
            }
            continue;
        }
        if nodes.is_none() {
            if s.spec.devices.as_ref().is_some_and(|d| !d.is_empty()) {
                left_out.push(slice_devices(s).err().unwrap_or_default());
            }
            continue;
        }
        match pool_devices(s) {
            Ok(devices) => {
                for (reach, d) in devices {
                    match reach {
                        DeviceReach::Node(n) => own.entry(n).or_default().push(d),
                        other => network.push((other, d)),
                    }
                }
            }
            Err(why) => left_out.push(why),
        }
    }
    // Which inventory each device is in: a node's own, or the network-attached ones.
    let mut home: BTreeMap<String, Option<&str>> = BTreeMap::new();
    for (node, devices) in &own {
        for d in devices {
            home.insert(d.key(), Some(node.as_str()));
        }
    }
    for (_, d) in &network {
        home.insert(d.key(), None);
    }
    type Held = BTreeMap<Arc<str>, Vec<AllocatedDevice>>;
    let mut allocated: BTreeMap<String, Held> = BTreeMap::new();
    let mut allocated_network: Held = BTreeMap::new();
    for c in claims {
        let Some(results) = claim_results(c) else {
            continue;
        };
        let name: Arc<str> = Arc::from(format!(
            "{}/{}",
            c.metadata.namespace.as_deref().unwrap_or_default(),
            c.metadata.name.as_deref().unwrap_or_default()
        ));
        for r in results {
            match home.get(&r.key()) {
                Some(Some(node)) => allocated
                    .entry(node.to_string())
                    .or_default()
                    .entry(name.clone())
                    .or_default()
                    .push(r),
                Some(None) => allocated_network.entry(name.clone()).or_default().push(r),
                // A device no slice publishes now: nothing to keep free for it.
                None => {}
            }
        }
    }
    let sets_of = |devices: &[&Device]| -> Vec<CounterSet> {
        counter_sets
            .iter()
            .filter(|set| {
                devices
                    .iter()
                    .any(|d| d.driver == set.driver && d.pool == set.pool)
            })
            .cloned()
            .collect()
    };
    let mut names: Vec<String> = own.keys().cloned().collect();
    if let Some(nodes) = nodes {
        if !network.is_empty() {
            names.extend(nodes.keys().cloned());
            names.sort();
            names.dedup();
        }
    }
    let empty = BTreeMap::new();
    let inventories = names
        .into_iter()
        .filter_map(|node| {
            let mine = own.remove(&node).unwrap_or_default();
            let labels = nodes.and_then(|n| n.get(&node)).unwrap_or(&empty);
            let reached: Vec<Device> = network
                .iter()
                .filter(|(reach, _)| reach.reaches(&node, labels))
                .map(|(_, d)| d.clone())
                .collect();
            if mine.is_empty() && reached.is_empty() {
                return None;
            }
            let all: Vec<&Device> = mine.iter().chain(&reached).collect();
            let sets = sets_of(&all);
            let held = allocated.remove(&node).unwrap_or_default();
            let inv = NodeDevices::new(mine, &held)
                .with_counters(sets)
                .with_shared(reached, &allocated_network);
            Some((node, inv))
        })
        .collect();
    (inventories, left_out)
}

/// The devices a claim's `status.allocation` holds, whatever its node selector.
fn claim_results(claim: &ResourceClaim) -> Option<Vec<AllocatedDevice>> {
    let alloc = claim.status.as_ref()?.allocation.as_ref()?;
    Some(
        alloc
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
            .collect(),
    )
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
mod tests;
