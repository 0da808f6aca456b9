//! DRA in scenarios: DeviceClasses, the devices each node of a group publishes (as a DRA
//! driver's ResourceSlice would), and the ResourceClaims each pod of a task carries — one
//! per pod, as from a ResourceClaimTemplate, or one shared by every pod of the job.
//!
//! ```yaml
//! deviceClasses:
//! - name: gpu
//!   selectors: ['device.driver == "gpu.example.com"']
//! nodeGroups:
//! - name: dgx
//!   count: 2
//!   allocatable: {cpu: 64, memory: 512Gi}
//!   devices:
//!   - driver: gpu.example.com
//!     count: 8
//!     attributes: {model: h100}
//!     capacity: {memory: 80Gi}
//!     groups: {attribute: clique, size: 4}   # devices 0-3 in one clique, 4-7 in another
//! jobs:
//! - name: train
//!   tasks:
//!   - role: worker
//!     replicas: 4
//!     claims:
//!     - name: gpus
//!       requests: [{name: gpu, deviceClassName: gpu, count: 2}]
//!       constraints: [{matchAttribute: gpu.example.com/clique}]
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::devices::{
    qualified_name, AllocationMode, AttrValue, ClaimSpec, Device, DeviceChoice, DeviceRequest,
    MatchAttribute, NodeDevices, TaskClaim,
};
use crate::model::resource::parse_milli;

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceClassDef {
    pub name: String,
    #[serde(default)]
    pub selectors: Vec<String>,
}

/// Devices of one driver on every node of a group.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSetDef {
    pub driver: String,
    pub count: u32,
    /// Attributes every device has; an unqualified name is the driver's.
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// Capacities (quantities) every device has.
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
    /// Devices in consecutive groups of `size` share the attribute, with a value unique to
    /// the node and group (an NVLink clique).
    #[serde(default)]
    pub groups: Option<DeviceGroupsDef>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceGroupsDef {
    pub attribute: String,
    pub size: u32,
}

/// One request of a claim: `exactly` written flat (class, selectors, count or
/// `allocationMode: All`), or `firstAvailable` alternatives of that shape.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRequestDef {
    pub name: String,
    #[serde(default)]
    pub device_class_name: Option<String>,
    #[serde(default)]
    pub selectors: Vec<String>,
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub allocation_mode: Option<String>,
    #[serde(default)]
    pub first_available: Vec<DeviceRequestDef>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConstraintDef {
    pub match_attribute: String,
    #[serde(default)]
    pub requests: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimDef {
    pub name: String,
    /// One claim for every pod of the job (`resourceClaimName`) rather than one per pod.
    #[serde(default)]
    pub shared: bool,
    pub requests: Vec<DeviceRequestDef>,
    #[serde(default)]
    pub constraints: Vec<ConstraintDef>,
}

fn attr(v: &serde_json::Value) -> Result<AttrValue, String> {
    match v {
        serde_json::Value::Bool(b) => Ok(AttrValue::Bool(*b)),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(AttrValue::Int)
            .ok_or_else(|| format!("{n} is not an integer")),
        serde_json::Value::String(s) => Ok(AttrValue::String(s.clone())),
        other => Err(format!("{other} is not a bool, integer or string")),
    }
}

impl DeviceSetDef {
    /// Checks what the scenario loader can: attribute values and quantities.
    pub fn validate(&self) -> Result<(), String> {
        for (k, v) in &self.attributes {
            attr(v).map_err(|e| format!("attributes.{k}: {e}"))?;
        }
        for (k, q) in &self.capacity {
            parse_milli(q).map_err(|e| format!("capacity.{k}: {e}"))?;
        }
        if self.groups.as_ref().is_some_and(|g| g.size == 0) {
            return Err("groups.size: must be at least 1".into());
        }
        Ok(())
    }

    /// Appends the set's devices, in pool `node`, to `out`. Names and group values go on
    /// from those of earlier sets of the same driver in the pool, so that several sets of
    /// one driver (devices that differ in attributes or capacity) never share a device or a
    /// group.
    fn devices(&self, node: &str, out: &mut Vec<Device>) {
        let mut attributes: BTreeMap<String, AttrValue> = BTreeMap::new();
        for (k, v) in &self.attributes {
            if let Ok(a) = attr(v) {
                attributes.insert(qualified_name(k, &self.driver), a);
            }
        }
        let capacity: BTreeMap<String, i64> = self
            .capacity
            .iter()
            .filter_map(|(k, q)| {
                let milli = i64::try_from(parse_milli(q).ok()?).ok()?;
                Some((qualified_name(k, &self.driver), milli))
            })
            .collect();
        let driver: Arc<str> = Arc::from(self.driver.as_str());
        let pool: Arc<str> = Arc::from(node);
        let earlier = out
            .iter()
            .filter(|d| d.driver == driver && d.pool == pool)
            .count() as u32;
        for i in 0..self.count {
            let mut attributes = attributes.clone();
            if let Some(g) = &self.groups {
                attributes.insert(
                    qualified_name(&g.attribute, &self.driver),
                    AttrValue::String(if earlier == 0 {
                        format!("{node}-{}", i / g.size.max(1))
                    } else {
                        format!("{node}-{earlier}-{}", i / g.size.max(1))
                    }),
                );
            }
            let n = earlier + i;
            out.push(Device {
                driver: driver.clone(),
                pool: pool.clone(),
                name: format!("{}-{n}", self.driver.split('.').next().unwrap_or("dev")).into(),
                attributes,
                capacity: capacity.clone(),
                consumes: Vec::new(),
            });
        }
    }
}

/// The inventory a node of a group with `sets` publishes (None: no devices).
pub fn node_devices(node: &str, sets: &[DeviceSetDef]) -> Option<Arc<NodeDevices>> {
    node_inventory(node, sets, &[], &BTreeMap::new())
}

/// A network-attached pool (a ResourceSlice with a node selector, or `allNodes`): its
/// devices are reachable from every node whose labels include `nodeSelector` (every node
/// when it is empty), and each is allocated at most once, whichever node takes it.
///
/// ```yaml
/// devicePools:
/// - name: fabric
///   nodeSelector: {example.com/rack: a}
///   devices: {driver: nic.example.com, count: 2, attributes: {speed: 400}}
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicePoolDef {
    pub name: String,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    pub devices: DeviceSetDef,
}

/// The inventory of node `node` (with `labels`): its group's `sets`, and the devices of
/// the network-attached `pools` it reaches (None: no devices at all).
pub fn node_inventory(
    node: &str,
    sets: &[DeviceSetDef],
    pools: &[DevicePoolDef],
    labels: &BTreeMap<String, String>,
) -> Option<Arc<NodeDevices>> {
    let reached: Vec<&DevicePoolDef> = pools
        .iter()
        .filter(|p| {
            p.node_selector
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    if sets.is_empty() && reached.is_empty() {
        return None;
    }
    let mut devices = Vec::new();
    for s in sets {
        s.devices(node, &mut devices);
    }
    let mut shared = Vec::new();
    for p in reached {
        p.devices.devices(&p.name, &mut shared);
    }
    let inventory =
        NodeDevices::new(devices, &BTreeMap::new()).with_shared(shared, &BTreeMap::new());
    Some(Arc::new(inventory))
}

impl DeviceRequestDef {
    fn choice(&self, name: String) -> Result<DeviceChoice, String> {
        let class = self
            .device_class_name
            .clone()
            .ok_or_else(|| format!("request {}: deviceClassName is required", self.name))?;
        let mode = match self.allocation_mode.as_deref() {
            None | Some("ExactCount") => AllocationMode::ExactCount(self.count.unwrap_or(1)),
            Some("All") => AllocationMode::All,
            Some(other) => {
                return Err(format!(
                    "request {}: allocationMode {other} is not ExactCount or All",
                    self.name
                ))
            }
        };
        Ok(DeviceChoice {
            name,
            device_class_name: class,
            selectors: self.selectors.clone(),
            mode,
        })
    }

    fn to_request(&self) -> Result<DeviceRequest, String> {
        let choices = if self.first_available.is_empty() {
            vec![self.choice(String::new())?]
        } else {
            self.first_available
                .iter()
                .map(|s| s.choice(s.name.clone()))
                .collect::<Result<_, _>>()?
        };
        Ok(DeviceRequest {
            name: self.name.clone(),
            choices,
        })
    }
}

impl ClaimDef {
    pub fn to_spec(&self) -> Result<ClaimSpec, String> {
        Ok(ClaimSpec {
            requests: self
                .requests
                .iter()
                .map(DeviceRequestDef::to_request)
                .collect::<Result<_, _>>()?,
            constraints: self
                .constraints
                .iter()
                .map(|c| MatchAttribute {
                    requests: c.requests.clone(),
                    attribute: c.match_attribute.clone(),
                })
                .collect(),
        })
    }

    /// The claim of pod `pod` of job `job` (both `namespace/name`).
    pub fn for_pod(&self, job: &str, pod: &str) -> TaskClaim {
        let (name, shared) = if self.shared {
            (format!("{job}-{}", self.name), true)
        } else {
            (format!("{pod}-{}", self.name), false)
        };
        match self.to_spec() {
            Ok(spec) => {
                let mut c = TaskClaim::new(name, spec);
                c.shared = shared;
                c
            }
            Err(why) => {
                let mut c = TaskClaim::new(name, ClaimSpec::default());
                c.blocked = Some(why);
                c
            }
        }
    }
}
