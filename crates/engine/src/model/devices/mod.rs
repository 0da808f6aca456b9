//! Dynamic Resource Allocation (resource.k8s.io/v1) in the engine's terms: the devices a
//! node's ResourceSlices publish (with their attributes and capacities), the DeviceClasses
//! that select among them, and the ResourceClaims a pod asks devices through. A claim is
//! allocated on the node its pod is placed on, in the same search that places the pod's
//! gang (`allocate.rs`); devices held by any claim's `status.allocation`, whoever wrote it,
//! are never handed out again.
//!
//! Devices of a node are a resource of that node (`NodeInfo::devices`): a placement holds a
//! claim's devices on the node and an undone placement gives them back, exactly like cpu.
//! Network-attached pools (slices with a node selector or `allNodes`) are not modelled: a
//! device reachable from many nodes would make one node's placement change every other
//! node's fit, which the per-node search caches do not see.

pub mod allocate;
pub mod selectors;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The prefix of a queue resource that counts devices of a DeviceClass, as Volcano's
/// capacity plugin (1.15) reads a queue's `capability`, `deserved` and `guarantee`:
/// `deviceclass/gpu.example.com: 8` is eight devices allocated through class
/// `gpu.example.com`, whichever node they are on.
pub const DEVICE_CLASS_PREFIX: &str = "deviceclass/";

/// What a pod's claims count against its queue: per DeviceClass, the devices they ask for,
/// as the resource `deviceclass/<class>` (in milli-units, like every extended resource:
/// a count of 2 is 2000). `exactly` counts its `count`; a `firstAvailable` request counts
/// the alternative its allocation took, else its first; `allocationMode: All` counts the
/// devices its allocation holds, else one (the least it can take). A claim shared by
/// several pods counts for each of them: never less than what they hold, so a queue stays
/// within its device capability.
pub fn device_charge(claims: &[TaskClaim]) -> super::Resource {
    let mut charge = super::Resource::new();
    for c in claims {
        if c.blocked.is_some() {
            continue;
        }
        for r in &c.spec.requests {
            let chosen = c.allocation.as_ref().and_then(|a| {
                let taken: Vec<&AllocatedDevice> = a
                    .devices
                    .iter()
                    .filter(|d| d.request.split('/').next() == Some(r.name.as_str()))
                    .collect();
                let sub = taken.first()?.request.split_once('/').map(|(_, s)| s);
                let choice = match sub {
                    Some(sub) => r.choices.iter().find(|ch| ch.name == sub)?,
                    None => r.choices.first()?,
                };
                Some((choice, taken.len() as i64))
            });
            let (class, count) = match (chosen, r.choices.first()) {
                (Some((choice, n)), _) => (&choice.device_class_name, n),
                (None, Some(first)) => (
                    &first.device_class_name,
                    match first.mode {
                        AllocationMode::ExactCount(n) => i64::from(n),
                        AllocationMode::All => 1,
                    },
                ),
                (None, None) => continue,
            };
            let name = format!("{DEVICE_CLASS_PREFIX}{class}");
            let before = charge.scalar(&name);
            charge.set_scalar(&name, before + count * 1000);
        }
    }
    charge
}

/// A device attribute's value (`DeviceAttribute`: exactly one of int, bool, string,
/// version; a version is compared as its string).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AttrValue {
    Int(i64),
    Bool(bool),
    String(String),
    Version(String),
}

impl AttrValue {
    /// The value as a slice writes it.
    pub fn describe(&self) -> String {
        match self {
            Self::Int(i) => i.to_string(),
            Self::Bool(b) => b.to_string(),
            Self::String(s) | Self::Version(s) => s.clone(),
        }
    }
}

/// One device of a ResourceSlice. Attribute and capacity names are fully qualified
/// (`domain/name`); an unqualified name in a slice belongs to the slice's driver and is
/// qualified by whoever builds the device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub name: Arc<str>,
    #[serde(default)]
    pub attributes: BTreeMap<String, AttrValue>,
    /// Capacities in milli-units (a quantity of `40Gi` is 40 × 2³⁰ × 1000).
    #[serde(default)]
    pub capacity: BTreeMap<String, i64>,
    /// What allocating it draws from counter sets its pool shares (`consumesCounters`:
    /// a MIG slice draws memory slices of its GPU), so that overlapping partitions of one
    /// device are never allocated together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes: Vec<CounterDraw>,
}

/// A device's draw on one counter set (`DeviceCounterConsumption`), in milli-units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CounterDraw {
    pub counter_set: String,
    pub counters: BTreeMap<String, i64>,
}

/// A counter set a pool shares among its devices (`sharedCounters`: a physical GPU's
/// memory slices and compute units, which its MIG partitions draw from), in milli-units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CounterSet {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub name: String,
    pub counters: BTreeMap<String, i64>,
}

/// A counter set's identity: driver, pool and name.
pub type CounterSetKey = (Arc<str>, Arc<str>, String);

impl Device {
    /// `driver/pool/device`: what identifies a device in a claim's allocation.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.name)
    }
}

/// An attribute or capacity name as the engine keys it: `domain/name`; a name a slice gives
/// unqualified belongs to its driver.
pub fn qualified_name(name: &str, driver: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{driver}/{name}")
    }
}

/// A device in a claim's allocation (`status.allocation.devices.results[]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllocatedDevice {
    /// The request it satisfies (`request/subrequest` for a `firstAvailable` choice).
    pub request: String,
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub device: Arc<str>,
}

impl AllocatedDevice {
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Where a claim's devices are and which they are.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimAllocation {
    pub node: Arc<str>,
    pub devices: Vec<AllocatedDevice>,
}

/// Shared claims placed in a session and not yet allocated in the API: their allocation and
/// how many placed pods use them (see `ClusterState::claims_placed`).
pub type ClaimsPlaced = HashMap<Arc<str>, (Arc<ClaimAllocation>, u32)>;

/// Every node-local device a node's ResourceSlices publish, and the claims (by
/// `namespace/name`) whose `status.allocation` already holds some of them, whoever
/// allocated them (kube-scheduler, us before a restart, another scheduler).
#[derive(Debug, Default, PartialEq)]
pub struct NodeDevices {
    /// Identifies this inventory in memos of selector results (never reused).
    pub id: u64,
    pub devices: Vec<Device>,
    /// Device index by `driver/pool/device`.
    index: HashMap<String, u32>,
    /// Claims allocated in the API to devices of this node, with their device indices.
    pub allocated: BTreeMap<Arc<str>, Vec<u32>>,
    /// Why no device of the node may be used (a slice with a device name twice, an
    /// allocation naming a device no slice has), naming it.
    pub problem: Option<String>,
    /// The counter sets its pools share, with their capacities (partitionable devices).
    pub counters: BTreeMap<CounterSetKey, BTreeMap<String, i64>>,
    /// Which devices are network-attached (published by a slice with a node selector or
    /// `allNodes`): reachable from this node and others, allocatable once cluster-wide.
    /// Empty when none is.
    pub shared: Vec<bool>,
}

static INVENTORIES: AtomicU64 = AtomicU64::new(1);

impl NodeDevices {
    /// The node's devices and the claims already allocated on them. A device published
    /// twice (by name, within its driver and pool) makes the whole inventory unusable with
    /// a reason naming it, as kube-scheduler refuses such a pool.
    pub fn new(devices: Vec<Device>, allocated: &BTreeMap<Arc<str>, Vec<AllocatedDevice>>) -> Self {
        let mut index = HashMap::with_capacity(devices.len());
        let mut problem = None;
        for (i, d) in devices.iter().enumerate() {
            if index.insert(d.key(), i as u32).is_some() && problem.is_none() {
                problem = Some(format!(
                    "pool {}/{} of driver {} publishes device {} more than once",
                    d.driver, d.pool, d.driver, d.name
                ));
            }
        }
        let mut held = BTreeMap::new();
        for (claim, results) in allocated {
            let mut ids = Vec::with_capacity(results.len());
            for r in results {
                match index.get(&r.key()) {
                    Some(&i) => ids.push(i),
                    // A device that left its slice: nothing to keep free for it.
                    None => continue,
                }
            }
            held.insert(claim.clone(), ids);
        }
        NodeDevices {
            id: INVENTORIES.fetch_add(1, Ordering::Relaxed),
            devices,
            index,
            allocated: held,
            problem,
            counters: BTreeMap::new(),
            shared: Vec::new(),
        }
    }

    /// The same inventory with the counter sets its pools share. A set published twice
    /// makes the inventory unusable, naming it.
    pub fn with_counters(mut self, sets: Vec<CounterSet>) -> Self {
        for set in sets {
            let key = (set.driver.clone(), set.pool.clone(), set.name.clone());
            if self.counters.insert(key, set.counters).is_some() && self.problem.is_none() {
                self.problem = Some(format!(
                    "pool {}/{} of driver {} publishes counter set {} more than once",
                    set.driver, set.pool, set.driver, set.name
                ));
            }
        }
        self
    }

    /// The same inventory with network-attached devices it can reach (`shared`), after
    /// its own, and the claims the API records as allocated to some of them: whichever
    /// node allocates one, no other may (see `NodeInfo::shared_holds`).
    pub fn with_shared(
        self,
        shared: Vec<Device>,
        allocated: &BTreeMap<Arc<str>, Vec<AllocatedDevice>>,
    ) -> Self {
        if shared.is_empty() {
            return self;
        }
        let own = self.devices.len();
        let mut devices = self.devices;
        devices.extend(shared);
        let mut out = NodeDevices::new(devices, allocated);
        // The node's own claims keep their devices (indices unchanged for its own).
        for (claim, ids) in self.allocated {
            out.allocated.entry(claim).or_default().extend(ids);
        }
        out.counters = self.counters;
        if out.problem.is_none() {
            out.problem = self.problem;
        }
        out.shared = (0..out.devices.len()).map(|i| i >= own).collect();
        out
    }

    /// Whether device `i` is network-attached.
    pub fn is_shared(&self, i: u32) -> bool {
        self.shared.get(i as usize).copied().unwrap_or(false)
    }

    pub fn position(&self, key: &str) -> Option<u32> {
        self.index.get(key).copied()
    }

    /// How many claims hold each device as the node's inventory arrived.
    pub fn initial_holds(&self) -> Vec<u16> {
        let mut taken = vec![0u16; self.devices.len()];
        for ids in self.allocated.values() {
            for &i in ids {
                taken[i as usize] += 1;
            }
        }
        taken
    }
}

/// How many devices a request (or one `firstAvailable` alternative) wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AllocationMode {
    /// `allocationMode: ExactCount` with `count` (default 1).
    ExactCount(u32),
    /// `allocationMode: All`: every matching device of the node, at least one, all free.
    All,
}

impl Default for AllocationMode {
    fn default() -> Self {
        Self::ExactCount(1)
    }
}

/// One way to satisfy a request: a class, the request's own selectors, how many.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceChoice {
    /// The subrequest's name for a `firstAvailable` alternative, empty for `exactly`.
    #[serde(default)]
    pub name: String,
    pub device_class_name: String,
    /// CEL expressions over `device`; all must be true.
    #[serde(default)]
    pub selectors: Vec<String>,
    #[serde(default)]
    pub mode: AllocationMode,
}

/// `spec.devices.requests[]`: `exactly` (one choice) or `firstAvailable` (the first
/// choice that can be satisfied, in order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRequest {
    pub name: String,
    pub choices: Vec<DeviceChoice>,
}

/// `spec.devices.constraints[]` with `matchAttribute`: every device allocated for the
/// named requests (none named: all of the claim's) has the attribute, with one value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchAttribute {
    #[serde(default)]
    pub requests: Vec<String>,
    pub attribute: String,
}

/// What a ResourceClaim asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimSpec {
    pub requests: Vec<DeviceRequest>,
    #[serde(default)]
    pub constraints: Vec<MatchAttribute>,
}

/// One of a pod's claims.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskClaim {
    /// `namespace/name` of the ResourceClaim.
    pub name: Arc<str>,
    pub spec: Arc<ClaimSpec>,
    /// Several pods may use the claim (`resourceClaimName`); a claim made from a template
    /// for one pod is not shared. A shared claim is allocated once, on one node.
    pub shared: bool,
    /// Its allocation: from `status.allocation`, or chosen by this session's placement.
    pub allocation: Option<Arc<ClaimAllocation>>,
    /// Why the claim cannot be allocated anywhere (its template is missing, a class it
    /// names does not exist, a selector does not compile), naming it.
    pub blocked: Option<String>,
}

impl TaskClaim {
    pub fn new(name: impl Into<Arc<str>>, spec: ClaimSpec) -> Self {
        TaskClaim {
            name: name.into(),
            spec: Arc::new(spec),
            shared: false,
            allocation: None,
            blocked: None,
        }
    }

    /// What decides where the claim fits, for the task's template key: the spec, and the
    /// name of a claim other pods may share or that is already allocated.
    pub fn template_part(&self) -> impl std::hash::Hash + '_ {
        let named = self.shared || self.allocation.is_some();
        (
            &*self.spec,
            named.then_some(&*self.name),
            self.allocation.as_deref(),
            self.blocked.as_deref(),
        )
    }
}

/// A rule on the devices of a whole gang, from gpu-affinity (`deviceAttribute`,
/// `deviceModelAttribute`): every device its pods' claims are given has the attribute,
/// with one value for the whole gang (one NVLink clique, one GPU model). `value` is the
/// value the gang's devices already have, if any of them is allocated; a soft rule is
/// kept where it can be and dropped where it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangDeviceRule {
    pub attribute: String,
    pub value: Option<AttrValue>,
    pub hard: bool,
}

/// Why a pod's claims keep it off a node, in kube-scheduler's words where it has them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceMismatch {
    /// Not enough free devices matching the claims on the node.
    Unavailable,
    /// A claim is allocated (or placed by a pod of the gang) on another node.
    ClaimElsewhere,
    /// The node's devices cannot be used (see `NodeDevices::problem`).
    Inventory(String),
    /// A selector failed while evaluated (kube-scheduler gives up on the claim too).
    Runtime(String),
    /// Not enough free devices, where some are network-attached: a placement on another
    /// node may free or take them, so the node is asked again rather than dropped.
    Contended,
    /// No node can take the pod (see `TaskClaim::blocked`).
    Blocked(String),
    /// The devices free here do not keep a hard rule on the gang's devices
    /// (`GangDeviceRule`): the attribute it names, and the value the gang has, if any.
    GangAttribute {
        attribute: String,
        value: Option<AttrValue>,
    },
}

impl DeviceMismatch {
    /// Whether the node stays unfit until something on it is released (so node searches
    /// may drop it until then); a shared claim placed elsewhere by a sibling moves with
    /// the sibling.
    pub fn until_release(&self) -> bool {
        !matches!(
            self,
            Self::ClaimElsewhere | Self::GangAttribute { .. } | Self::Contended
        )
    }
}

impl fmt::Display for DeviceMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable | Self::Contended => write!(f, "cannot allocate all claims"),
            Self::ClaimElsewhere => {
                write!(f, "resourceclaim is allocated to devices of another node")
            }
            Self::Inventory(why) | Self::Runtime(why) | Self::Blocked(why) => write!(f, "{why}"),
            Self::GangAttribute {
                attribute,
                value: Some(v),
            } => write!(
                f,
                "cannot allocate all claims with {attribute} = {} as the gang's other devices",
                v.describe()
            ),
            Self::GangAttribute {
                attribute,
                value: None,
            } => write!(
                f,
                "cannot allocate all claims on devices sharing one value of {attribute}"
            ),
        }
    }
}
