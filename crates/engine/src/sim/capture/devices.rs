//! DRA in a snapshot: the DeviceClasses, each node's devices as the scenario's device sets
//! (nodes group only with nodes of equal sets), network-attached pools as `devicePools`,
//! and the claims of the captured pods.
//!
//! A device set says, of devices of one driver, their common attributes and capacities and
//! at most one attribute whose value is unique to the node (and to a group of its devices,
//! `groups`: an NVLink clique, or a device's UUID with groups of one). The devices of a
//! driver on a node are split into sets by the attributes whose values other nodes have too
//! (a model, an index) and by capacity, so those are kept exactly; of the attributes whose
//! values are the node's own, one becomes the set's `groups` (one a claim constrains,
//! else the one with the largest groups), its values renamed per node; the others are left
//! out, as a note.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{Capturing, Skipped};
use crate::model::devices::{AttrValue, Device, TaskClaim};
use crate::model::pod_rules::HOSTNAME_LABEL;
use crate::model::{JobInfo, NodeInfo, TaskInfo, TaskStatus};
use crate::sim::devices::{
    ClaimDef, ConstraintDef, DeviceClassDef, DeviceGroupsDef, DevicePoolDef, DeviceRequestDef,
    DeviceSetDef,
};

/// A note said of many nodes, written once with the nodes it concerns.
#[derive(Default)]
struct NodeNotes(BTreeMap<String, BTreeSet<String>>);

impl NodeNotes {
    fn add(&mut self, note: String, node: &str) {
        self.0.entry(note).or_default().insert(node.to_string());
    }

    fn into_notes(self) -> Vec<String> {
        self.0
            .into_iter()
            .map(|(note, nodes)| {
                let shown: Vec<&str> = nodes.iter().take(5).map(String::as_str).collect();
                let more = nodes.len().saturating_sub(shown.len());
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!("node {}{tail}: {note}", shown.join(", "))
            })
            .collect()
    }
}

/// The devices of every node, as the scenario writes them.
pub(super) struct CapturedDevices {
    /// Each node's device sets (none: no devices).
    pub per_node: BTreeMap<Arc<str>, Vec<DeviceSetDef>>,
    pub pools: Vec<DevicePoolDef>,
}

/// An attribute's value as a scenario writes it; a version becomes its string.
fn value_json(v: &AttrValue) -> serde_json::Value {
    match v {
        AttrValue::Int(i) => (*i).into(),
        AttrValue::Bool(b) => (*b).into(),
        AttrValue::String(s) | AttrValue::Version(s) => s.clone().into(),
    }
}

/// A capacity (milli-units) as a quantity `parse_milli` reads back exactly.
fn quantity(milli: i64) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    crate::model::resource::binary_quantity(milli / 1000)
}

/// A qualified name as a set of `driver` writes it: the driver's own unqualified.
fn local_name(name: &str, driver: &str) -> String {
    name.strip_prefix(driver)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(name)
        .to_string()
}

/// Which nodes have each value of each attribute (by driver and qualified name).
type ValueNodes<'a> = BTreeMap<(&'a str, &'a str), BTreeMap<&'a AttrValue, BTreeSet<&'a str>>>;

impl Capturing {
    /// The DeviceClasses, and the devices of `nodes` (see `devices`). What selectors read
    /// and constraints compare decides how devices are written.
    pub(super) fn dra(
        &mut self,
        snapshot: &crate::snapshot::Snapshot,
        jobs: &[&JobInfo],
        nodes: &[&NodeInfo],
        captured: &BTreeSet<Arc<str>>,
    ) -> (Vec<DeviceClassDef>, CapturedDevices) {
        let classes = snapshot.device_classes().classes();
        let device_classes = classes
            .iter()
            .map(|(name, selectors)| DeviceClassDef {
                name: name.clone(),
                selectors: selectors.clone(),
            })
            .collect();
        let mut selectors: String = classes.values().flatten().cloned().collect();
        let mut constrained: BTreeSet<String> = BTreeSet::new();
        for t in jobs.iter().flat_map(|j| j.tasks()) {
            for claim in t.claims.iter() {
                for ch in claim.spec.requests.iter().flat_map(|r| &r.choices) {
                    for sel in &ch.selectors {
                        selectors.push_str(sel);
                    }
                }
                constrained.extend(claim.spec.constraints.iter().map(|m| m.attribute.clone()));
            }
        }
        let mut notes = NodeNotes::default();
        let devices = self.devices(nodes, captured, &selectors, &constrained, &mut notes);
        self.notes.extend(notes.into_notes());
        (device_classes, devices)
    }

    /// Whether the claims of a gang's pods (`kept`) can be written: none is blocked (what
    /// the scenario cannot say, or what the scheduler cannot allocate, with the reason, as
    /// the gang is skipped then). What they say only approximately is noted.
    pub(super) fn claims_capturable(&mut self, object: &str, kept: &[&TaskInfo]) -> bool {
        if let Some(why) = kept
            .iter()
            .flat_map(|t| t.claims.iter())
            .find_map(|c| c.blocked.as_deref())
        {
            self.skip(
                object.to_string(),
                format!(
                    "a pod's ResourceClaim cannot be allocated as it is ({why}) (its running \
                     pods are kept as their nodes' usage)"
                ),
            );
            return false;
        }
        if kept
            .iter()
            .any(|t| t.status != TaskStatus::Pending && !t.claims.is_empty())
        {
            self.notes.push(format!(
                "{object}: its running pods' claims are allocated again at t=0 on their nodes \
                 (the same count of devices, class and constraints; which devices may differ \
                 from the cluster's)"
            ));
        }
        if kept.iter().any(|t| {
            t.status == TaskStatus::Pending
                && t.claims.iter().any(|c| !c.shared && c.allocation.is_some())
        }) {
            self.notes.push(format!(
                "{object}: a pending pod's claim is allocated already; the simulation allocates \
                 it afresh"
            ));
        }
        true
    }

    /// The devices of `nodes`: those of their own as device sets, the network-attached
    /// ones as pools. Devices held by claims the scenario does not carry (of pods of other
    /// schedulers, of skipped gangs, of no pod) are left out: those pods hold them for the
    /// whole simulation. `captured`: the claims of the captured pods, which hold their
    /// devices again at t=0; `selectors`: the text of every DeviceClass's and claim's
    /// selectors; `constrained`: attributes claims' constraints name.
    fn devices(
        &mut self,
        nodes: &[&NodeInfo],
        captured: &BTreeSet<Arc<str>>,
        selectors: &str,
        constrained: &BTreeSet<String>,
        notes: &mut NodeNotes,
    ) -> CapturedDevices {
        // Each node's usable devices of its own, and the network-attached devices it reaches.
        let mut local: Vec<(&NodeInfo, Vec<&Device>)> = Vec::new();
        let mut shared: BTreeMap<String, (&Device, BTreeSet<&str>)> = BTreeMap::new();
        let mut held_shared: BTreeSet<String> = BTreeSet::new();
        for n in nodes {
            let Some(inv) = n.devices.as_deref() else {
                continue;
            };
            if let Some(problem) = &inv.problem {
                notes.add(
                    format!("its devices cannot be used ({problem}); written without devices"),
                    &n.name,
                );
                continue;
            }
            let mut held = vec![false; inv.devices.len()];
            let held_by = inv
                .allocated
                .iter()
                .chain(n.device_claims.iter().map(|(c, h)| (c, &h.devices)));
            let mut left_out = 0;
            for (claim, ids) in held_by {
                if captured.contains(claim) {
                    continue;
                }
                for &i in ids {
                    if !held[i as usize] && !inv.is_shared(i) {
                        left_out += 1;
                    }
                    held[i as usize] = true;
                }
            }
            if left_out > 0 {
                notes.add(
                    "devices held by claims of pods the scenario does not carry as gangs (or \
                     of no pod) are left out of its devices: they stay held for the whole \
                     simulation"
                        .into(),
                    &n.name,
                );
            }
            let mut own = Vec::new();
            for (i, d) in inv.devices.iter().enumerate() {
                if inv.is_shared(i as u32) {
                    let entry = shared
                        .entry(d.key())
                        .or_insert_with(|| (d, BTreeSet::new()));
                    entry.1.insert(&n.name);
                    if held[i] {
                        held_shared.insert(d.key());
                    }
                } else if !held[i] {
                    own.push(d);
                }
            }
            if own.iter().any(|d| !d.consumes.is_empty()) || !inv.counters.is_empty() {
                notes.add(
                    "the counters its partitionable devices share are not captured: \
                     partitions of one device may be allocated together in the simulation"
                        .into(),
                    &n.name,
                );
            }
            local.push((n, own));
        }
        let mut values: ValueNodes = BTreeMap::new();
        for (n, devs) in &local {
            for d in devs {
                for (a, v) in &d.attributes {
                    values
                        .entry((&d.driver, a.as_str()))
                        .or_default()
                        .entry(v)
                        .or_default()
                        .insert(&n.name);
                }
            }
        }
        let mut per_node = BTreeMap::new();
        for (n, devs) in &local {
            let sets = node_sets(&n.name, devs, &values, selectors, constrained, notes);
            per_node.insert(n.name.clone(), sets);
        }
        let pools = self.pools(nodes, shared, &held_shared);
        if !held_shared.is_empty() {
            self.notes.push(format!(
                "{} network-attached devices held by claims the scenario does not carry (of \
                 running pods: rust-batch does not place pods with them) are left out of \
                 their pools",
                held_shared.len()
            ));
        }
        CapturedDevices { per_node, pools }
    }

    /// Network-attached devices as pools: by driver, pool and the nodes that reach them,
    /// split by attributes and capacity; each pool's nodes named by the labels they share,
    /// or the pool is skipped when no labels name exactly them.
    fn pools(
        &mut self,
        nodes: &[&NodeInfo],
        shared: BTreeMap<String, (&Device, BTreeSet<&str>)>,
        held: &BTreeSet<String>,
    ) -> Vec<DevicePoolDef> {
        type Reach<'a> = BTreeSet<&'a str>;
        let mut by_pool: BTreeMap<(&str, &str, Reach), Vec<&Device>> = BTreeMap::new();
        for (key, (d, reach)) in &shared {
            if held.contains(key) {
                continue;
            }
            by_pool
                .entry((&d.driver, &d.pool, reach.clone()))
                .or_default()
                .push(d);
        }
        let mut pools: Vec<DevicePoolDef> = Vec::new();
        for ((driver, pool, reach), devs) in by_pool {
            let Some(node_selector) = selector_of(nodes, &reach) else {
                self.skipped.push(Skipped {
                    object: format!("ResourceSlice pool {driver}/{pool}"),
                    reason: format!(
                        "its devices are reached by {} nodes that no node labels select \
                         exactly (a scenario's device pool names its nodes by labels)",
                        reach.len()
                    ),
                });
                continue;
            };
            let mut parts: Vec<(DeviceSetDef, u32)> = Vec::new();
            for d in devs {
                let set = set_of(d, &d.attributes, 1, None);
                match parts.iter_mut().find(|(s, _)| *s == set) {
                    Some((_, n)) => *n += 1,
                    None => parts.push((set, 1)),
                }
            }
            for (mut set, count) in parts {
                set.count = count;
                let mut name = pool.to_string();
                let mut k = 1;
                while pools.iter().any(|p| p.name == name) {
                    k += 1;
                    name = format!("{pool}-{k}");
                }
                pools.push(DevicePoolDef {
                    name,
                    node_selector: node_selector.clone(),
                    devices: set,
                });
            }
        }
        pools
    }
}

/// The labels every node of `reach` has (but the hostname), if those select exactly them
/// among `nodes` (empty: every node).
fn selector_of(nodes: &[&NodeInfo], reach: &BTreeSet<&str>) -> Option<BTreeMap<String, String>> {
    let mut common: Option<BTreeMap<String, String>> = None;
    for n in nodes.iter().filter(|n| reach.contains(&*n.name)) {
        let labels: BTreeMap<String, String> = n
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != HOSTNAME_LABEL)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        common = Some(match common {
            None => labels,
            Some(c) => c
                .into_iter()
                .filter(|(k, v)| labels.get(k) == Some(v))
                .collect(),
        });
    }
    let common = common?;
    if nodes.len() == reach.len() {
        return Some(BTreeMap::new());
    }
    let selected = nodes
        .iter()
        .filter(|n| common.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
        .count();
    (selected == reach.len()).then_some(common)
}

/// A device set of `count` devices like `d` with `attributes`, grouped by `groups`.
fn set_of(
    d: &Device,
    attributes: &BTreeMap<String, AttrValue>,
    count: u32,
    groups: Option<DeviceGroupsDef>,
) -> DeviceSetDef {
    DeviceSetDef {
        driver: d.driver.to_string(),
        count,
        attributes: attributes
            .iter()
            .map(|(k, v)| (local_name(k, &d.driver), value_json(v)))
            .collect(),
        capacity: d
            .capacity
            .iter()
            .map(|(k, m)| (local_name(k, &d.driver), quantity(*m)))
            .collect(),
        groups,
    }
}

/// A node's own devices as device sets, in the order of their first device.
fn node_sets(
    node: &str,
    devs: &[&Device],
    values: &ValueNodes,
    selectors: &str,
    constrained: &BTreeSet<String>,
    notes: &mut NodeNotes,
) -> Vec<DeviceSetDef> {
    let mut drivers: Vec<&str> = Vec::new();
    for d in devs {
        if !drivers.contains(&&*d.driver) {
            drivers.push(&d.driver);
        }
    }
    let mut sets = Vec::new();
    for driver in drivers {
        let of_driver: Vec<&Device> = devs
            .iter()
            .copied()
            .filter(|d| &*d.driver == driver)
            .collect();
        let names: BTreeSet<&str> = of_driver
            .iter()
            .flat_map(|d| d.attributes.keys().map(String::as_str))
            .collect();
        // An attribute is the node's own when no selector reads it (its values matter to
        // no one but constraints, which only compare them), every device has it, no other
        // node has any of its values here, and it says something of the node: its values
        // differ on the node (a clique, a UUID), or other nodes have values of their own.
        let own: BTreeSet<&str> = names
            .iter()
            .copied()
            .filter(|a| {
                let short = a.rsplit('/').next().unwrap_or(a);
                let Some(by_value) = values.get(&(driver, *a)) else {
                    return false;
                };
                let nodes_with_it: BTreeSet<&&str> = by_value.values().flatten().collect();
                let varies = of_driver
                    .iter()
                    .any(|d| d.attributes.get(*a) != of_driver[0].attributes.get(*a));
                !selectors.contains(short)
                    && of_driver.iter().all(|d| d.attributes.contains_key(*a))
                    && of_driver.iter().all(|d| {
                        by_value
                            .get(&d.attributes[*a])
                            .is_some_and(|nodes| nodes.len() == 1)
                    })
                    && (varies || nodes_with_it.len() > 1)
            })
            .collect();
        // Split by everything else.
        let mut parts: Vec<(BTreeMap<String, AttrValue>, Vec<&Device>)> = Vec::new();
        for d in &of_driver {
            let common: BTreeMap<String, AttrValue> = d
                .attributes
                .iter()
                .filter(|(a, _)| !own.contains(a.as_str()))
                .map(|(a, v)| (a.clone(), v.clone()))
                .collect();
            match parts
                .iter_mut()
                .find(|(c, p)| *c == common && p[0].capacity == d.capacity)
            {
                Some((_, p)) => p.push(d),
                None => parts.push((common, vec![d])),
            }
        }
        for (common, part) in parts {
            // The node's own attributes that split the part into groups of one size.
            let mut candidates: Vec<(&str, u32)> = Vec::new();
            for a in &own {
                let mut sizes: BTreeMap<&AttrValue, u32> = BTreeMap::new();
                for d in &part {
                    *sizes.entry(&d.attributes[*a]).or_default() += 1;
                }
                let first = sizes.values().next().copied().unwrap_or(0);
                if sizes.values().all(|s| *s == first) {
                    candidates.push((a, first));
                } else {
                    notes.add(
                        format!(
                            "attribute {a} of its {driver} devices groups them in groups of \
                             different sizes, which a device set cannot say: left out"
                        ),
                        node,
                    );
                }
            }
            candidates.sort_by_key(|(a, size)| {
                (
                    !constrained.contains(*a),
                    std::cmp::Reverse(*size),
                    a.to_string(),
                )
            });
            let groups = candidates.first().map(|(a, size)| {
                let strings = part
                    .iter()
                    .all(|d| matches!(d.attributes[*a], AttrValue::String(_)));
                if !strings {
                    notes.add(
                        format!(
                            "attribute {a} of its {driver} devices is not a string: the \
                             scenario gives it string values, unique to the node"
                        ),
                        node,
                    );
                }
                DeviceGroupsDef {
                    attribute: local_name(a, driver),
                    size: *size,
                }
            });
            for (a, _) in candidates.iter().skip(1) {
                notes.add(
                    format!(
                        "attribute {a} of its {driver} devices has values of the node's own, \
                         as {} has, and a device set can say only one such attribute: left \
                         out",
                        candidates[0].0
                    ),
                    node,
                );
            }
            if let Some(g) = &groups {
                notes.add(
                    format!(
                        "the values of attribute {}/{} of its {driver} devices are renamed \
                         after the node (equal where they were equal on the node)",
                        driver, g.attribute
                    ),
                    node,
                );
            }
            for a in common
                .iter()
                .filter(|(_, v)| matches!(v, AttrValue::Version(_)))
                .map(|(a, _)| a)
            {
                notes.add(
                    format!("version attribute {a} is written as a string"),
                    node,
                );
            }
            sets.push(set_of(part[0], &common, part.len() as u32, groups));
        }
    }
    sets
}

/// The scenario's claim for one of a pod's claims. A claim made for the pod from a
/// template is named by the pod's claim (the name the resource-claim controller put
/// between the pod's name and its random suffix), so that the pods of a task have equal
/// claims; a shared claim keeps its name (less its job's name, which the scenario adds).
pub(super) fn claim_def(t: &TaskInfo, job: &str, index: usize, c: &TaskClaim) -> ClaimDef {
    let name = c.name.split_once('/').map_or(&*c.name, |(_, n)| n);
    let name = if c.shared {
        name.strip_prefix(job)
            .and_then(|rest| rest.strip_prefix('-'))
            .filter(|rest| !rest.is_empty())
            .unwrap_or(name)
            .to_string()
    } else {
        match name
            .strip_prefix(&*t.name)
            .and_then(|rest| rest.strip_prefix('-'))
        {
            Some(rest) if !rest.is_empty() => match rest.rsplit_once('-') {
                Some((claim, suffix))
                    if !claim.is_empty()
                        && suffix.len() == 5
                        && suffix
                            .chars()
                            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit()) =>
                {
                    claim.to_string()
                }
                _ => rest.to_string(),
            },
            _ => format!("claim-{index}"),
        }
    };
    ClaimDef {
        name,
        shared: c.shared,
        requests: c
            .spec
            .requests
            .iter()
            .map(|r| match r.choices.as_slice() {
                [only] if only.name.is_empty() => request_def(r.name.clone(), only),
                choices => DeviceRequestDef {
                    name: r.name.clone(),
                    device_class_name: None,
                    selectors: Vec::new(),
                    count: None,
                    allocation_mode: None,
                    first_available: choices
                        .iter()
                        .map(|ch| request_def(ch.name.clone(), ch))
                        .collect(),
                },
            })
            .collect(),
        constraints: c
            .spec
            .constraints
            .iter()
            .map(|m| ConstraintDef {
                match_attribute: m.attribute.clone(),
                requests: m.requests.clone(),
            })
            .collect(),
    }
}

fn request_def(name: String, choice: &crate::model::devices::DeviceChoice) -> DeviceRequestDef {
    use crate::model::devices::AllocationMode;
    let (count, allocation_mode) = match choice.mode {
        // One is the default a scenario need not write.
        AllocationMode::ExactCount(n) => ((n != 1).then_some(n), None),
        AllocationMode::All => (None, Some("All".to_string())),
    };
    DeviceRequestDef {
        name,
        device_class_name: Some(choice.device_class_name.clone()),
        selectors: choice.selectors.clone(),
        count,
        allocation_mode,
        first_available: Vec::new(),
    }
}
