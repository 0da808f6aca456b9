//! Dynamic Resource Allocation as the live driver sees it: DeviceClasses, ResourceSlices,
//! ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1), each watched like any
//! other kind, turned into the engine's model with the conversions of `dra`.
//!
//! - Node inventories: a node's slices and the network-attached devices it reaches (slices
//!   with a `nodeSelector`, `allNodes` or `perDeviceNodeSelection`, matched against the
//!   node's labels), with the devices every claim's `status.allocation` holds, whoever
//!   allocated them (kube-scheduler, another scheduler, this one before a restart).
//!   Rebuilt for the nodes a slice or an allocated claim touches: every node when it is a
//!   network-attached one (its devices are allocatable once, cluster-wide), and a node
//!   whose labels change while network-attached pools exist.
//! - A pod's claims (`spec.resourceClaims`): `resourceClaimName` names a claim its
//!   pods share; `resourceClaimTemplateName` is the claim the resource-claim controller
//!   makes for the pod, named in `status.resourceClaimStatuses`. Until that claim exists,
//!   or when it asks for what the engine does not model, the pod's claim is blocked with a
//!   reason naming it, and its gang waits saying so. A bound pod keeps its allocated
//!   claims: they count against its queue's device quota until it is gone. Pods are
//!   resolved again when a claim or template they depend on changes.
//! - Allocations this scheduler is writing (`dra_commit`) count as allocated until the
//!   claim's own status shows them or the write is rolled back, so that no cycle meanwhile
//!   hands the same devices out again.
//!
//! A network-attached slice that cannot be read (a node selector with an unknown operator,
//! a device that says no node) is left out, logged once.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ::kube::ResourceExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

use super::{store_newest, Index, Wake};
use crate::cache::PodUpdate;
use crate::dra::{
    claim_allocation, claim_spec, class_selectors, cluster_inventories, pool_devices,
};
use crate::model::devices::{ClaimAllocation, ClaimSpec, TaskClaim};
use crate::retry::warn_limited;

/// What a pending pod's claims were resolved from (namespace/name keys).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClaimDep {
    Claim(String),
    Template(String),
}

/// The DRA objects as last seen, and what the driver derives from them.
#[derive(Default)]
pub struct DraObjects {
    /// DeviceClasses: name → CEL selectors.
    classes: BTreeMap<String, Vec<String>>,
    /// ResourceSlices by name, the newest seen.
    slices: HashMap<String, ResourceSlice>,
    /// The node of each node-local slice, and the slices of each node.
    slice_node: HashMap<String, String>,
    node_slices: HashMap<String, BTreeSet<String>>,
    /// Network-attached slices (no `nodeName`): every node's inventory reads them, each
    /// node the devices it reaches.
    network_slices: BTreeSet<String>,
    /// Their pools: (driver, pool).
    network_pools: HashSet<(String, String)>,
    /// Allocated claims holding devices of a network-attached pool: every node reaching
    /// those devices counts them held.
    network_claims: BTreeSet<String>,
    /// ResourceClaims by `namespace/name`, the newest seen (from the watch or from this
    /// scheduler's own writes).
    pub(crate) claims: HashMap<String, ResourceClaim>,
    /// The node of each claim allocated on one node, and the allocated claims of each node.
    claim_node: HashMap<String, String>,
    node_claims: HashMap<String, BTreeSet<String>>,
    /// ResourceClaimTemplates by `namespace/name`.
    templates: HashMap<String, ResourceClaimTemplate>,
    /// Pending pods of ours with claims, by uid, with what their claims were resolved from.
    pods: HashMap<String, (Pod, Vec<ClaimDep>)>,
    by_dep: HashMap<ClaimDep, HashSet<String>>,
    /// Allocations being written by a gang's commit, by claim key.
    pub(crate) committing: HashMap<String, Arc<ClaimAllocation>>,
    /// Pods backing off after their gang's commit failed: uid → (until, in ms; why).
    pub(crate) backoffs: HashMap<String, (i64, String)>,
    /// Failed commits in a row, by gang.
    pub(crate) attempts: HashMap<String, u32>,
    /// Slices that cannot be read, already logged.
    left_out: HashSet<String>,
}

/// A claim that cannot be allocated anywhere, and why.
fn blocked(name: &str, why: String) -> TaskClaim {
    let mut c = TaskClaim::new(name, ClaimSpec::default());
    c.blocked = Some(why);
    c
}

fn claim_key(c: &ResourceClaim) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

fn unlist(map: &mut HashMap<String, BTreeSet<String>>, key: &str, item: &str) {
    if let Some(set) = map.get_mut(key) {
        set.remove(item);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl DraObjects {
    /// The pod's claims as the engine's, and what they were resolved from.
    pub fn pod_claims(&self, pod: &Pod) -> (Vec<TaskClaim>, Vec<ClaimDep>) {
        let ns = pod.namespace().unwrap_or_default();
        let uid = pod.uid().unwrap_or_default();
        let entries = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or_default();
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_deref())
            .unwrap_or_default();
        let mut claims = Vec::with_capacity(entries.len());
        let mut deps = Vec::with_capacity(entries.len() * 2);
        for e in entries {
            let (key, shared) = if let Some(name) = &e.resource_claim_name {
                (format!("{ns}/{name}"), true)
            } else if let Some(template) = &e.resource_claim_template_name {
                let tkey = format!("{ns}/{template}");
                deps.push(ClaimDep::Template(tkey.clone()));
                match statuses.iter().find(|s| s.name == e.name) {
                    Some(s) => match &s.resource_claim_name {
                        Some(name) => (format!("{ns}/{name}"), false),
                        // The resource-claim controller found no claim is needed.
                        None => continue,
                    },
                    None if !self.templates.contains_key(&tkey) => {
                        claims.push(blocked(
                            &tkey,
                            format!(
                                "pod claim {}: resourceclaimtemplate {tkey} not found",
                                e.name
                            ),
                        ));
                        continue;
                    }
                    None => {
                        claims.push(blocked(
                            &tkey,
                            format!(
                                "pod claim {}: waiting for the resource claim controller to \
                                 create its claim from resourceclaimtemplate {tkey}",
                                e.name
                            ),
                        ));
                        continue;
                    }
                }
            } else {
                claims.push(blocked(
                    &format!("{ns}/{}", e.name),
                    format!(
                        "pod claim {}: neither resourceClaimName nor resourceClaimTemplateName",
                        e.name
                    ),
                ));
                continue;
            };
            deps.push(ClaimDep::Claim(key.clone()));
            let Some(claim) = self.claims.get(&key) else {
                claims.push(blocked(
                    &key,
                    format!("pod claim {}: resourceclaim {key} not found", e.name),
                ));
                continue;
            };
            let for_pod = claim
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            if !shared && !for_pod {
                claims.push(blocked(
                    &key,
                    format!("resourceclaim {key} was not created for this pod"),
                ));
                continue;
            }
            claims.push(self.task_claim(&key, claim, shared));
        }
        if let Some((_, why)) = self.backoffs.get(&uid) {
            for c in &mut claims {
                c.blocked.get_or_insert_with(|| why.clone());
            }
        }
        (claims, deps)
    }

    /// One claim as the engine's: its spec, and its allocation (from its status, or being
    /// written by this scheduler); blocked with a reason when the engine cannot place it.
    fn task_claim(&self, key: &str, claim: &ResourceClaim, shared: bool) -> TaskClaim {
        let mut why = claim
            .metadata
            .deletion_timestamp
            .is_some()
            .then(|| format!("resourceclaim {key} is being deleted"));
        let spec = match claim.spec.as_ref().map(|s| claim_spec(key, s)) {
            Some(Ok(spec)) => spec,
            Some(Err(e)) => {
                why.get_or_insert(e);
                ClaimSpec::default()
            }
            None => {
                why.get_or_insert_with(|| format!("resourceclaim {key} has no spec"));
                ClaimSpec::default()
            }
        };
        let allocated = claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some());
        let allocation = if allocated {
            let a = claim_allocation(claim).map(Arc::new);
            if a.is_none() {
                why.get_or_insert_with(|| {
                    format!(
                        "resourceclaim {key} is allocated to devices that are not on one node \
                         (network-attached), which rust-batch does not place pods with"
                    )
                });
            }
            a
        } else {
            self.committing.get(key).cloned()
        };
        let mut c = TaskClaim::new(key, spec);
        c.shared = shared;
        c.allocation = allocation;
        c.blocked = why;
        c
    }

    fn remember_pod(&mut self, uid: &str, pod: Pod, deps: Vec<ClaimDep>) {
        self.forget_pod(uid);
        for d in &deps {
            self.by_dep
                .entry(d.clone())
                .or_default()
                .insert(uid.to_string());
        }
        self.pods.insert(uid.to_string(), (pod, deps));
    }

    pub fn forget_pod(&mut self, uid: &str) {
        let Some((_, deps)) = self.pods.remove(uid) else {
            return;
        };
        for d in deps {
            if let Some(set) = self.by_dep.get_mut(&d) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_dep.remove(&d);
                }
            }
        }
    }

    fn pods_depending_on(&self, dep: &ClaimDep) -> Vec<Pod> {
        self.by_dep
            .get(dep)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid).map(|(p, _)| p.clone()))
            .collect()
    }

    /// A node's inventory from its slices, the network-attached ones it reaches (given its
    /// labels; none for a node not seen yet) and the claims holding their devices (None:
    /// no slice).
    fn inventory(
        &self,
        node: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Option<Arc<crate::model::devices::NodeDevices>> {
        let names: BTreeSet<&String> = self
            .node_slices
            .get(node)
            .into_iter()
            .flatten()
            .chain(&self.network_slices)
            .collect();
        let slices: Vec<ResourceSlice> = names
            .into_iter()
            .filter_map(|s| self.slices.get(s).cloned())
            .collect();
        if slices.is_empty() {
            return None;
        }
        let names: BTreeSet<&String> = self
            .node_claims
            .get(node)
            .into_iter()
            .flatten()
            .chain(&self.network_claims)
            .collect();
        let claims: Vec<ResourceClaim> = names
            .into_iter()
            .filter_map(|c| self.claims.get(c).cloned())
            .collect();
        let nodes: BTreeMap<String, BTreeMap<String, String>> = labels
            .map(|l| BTreeMap::from([(node.to_string(), l.clone())]))
            .unwrap_or_default();
        let (mut inventories, _) = cluster_inventories(&slices, &claims, Some(&nodes));
        inventories.remove(node).map(Arc::new)
    }

    /// Whether a claim's allocation holds a device of a network-attached pool.
    fn holds_network_devices(&self, claim: &ResourceClaim) -> bool {
        if self.network_pools.is_empty() {
            return false;
        }
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .any(|r| {
                self.network_pools
                    .contains(&(r.driver.clone(), r.pool.clone()))
            })
    }

    /// The network-attached slices changed: their pools, and the claims holding their
    /// devices, found again.
    fn network_pools_changed(&mut self) {
        self.network_pools = self
            .network_slices
            .iter()
            .filter_map(|s| self.slices.get(s))
            .map(|s| (s.spec.driver.clone(), s.spec.pool.name.clone()))
            .collect();
        self.network_claims = self
            .claims
            .iter()
            .filter(|(_, c)| self.holds_network_devices(c))
            .map(|(k, _)| k.clone())
            .collect();
    }
}

impl Index {
    // ----- device classes ------------------------------------------------------------

    pub fn apply_device_class(&mut self, class: &DeviceClass) -> Wake {
        let selectors = class_selectors(class);
        if self.dra.classes.get(&class.name_any()) == Some(&selectors) {
            return Wake::No;
        }
        self.dra.classes.insert(class.name_any(), selectors);
        self.cache.set_device_classes(self.dra.classes.clone());
        Wake::Now
    }

    pub fn delete_device_class(&mut self, name: &str) {
        if self.dra.classes.remove(name).is_some() {
            self.cache.set_device_classes(self.dra.classes.clone());
        }
    }

    pub fn device_class_keys(&self) -> Vec<String> {
        self.dra.classes.keys().cloned().collect()
    }

    // ----- resource slices -----------------------------------------------------------

    pub fn apply_resource_slice(&mut self, slice: &ResourceSlice) -> Wake {
        let name = slice.name_any();
        if !store_newest(&mut self.dra.slices, name.clone(), slice) {
            return Wake::No;
        }
        self.slice_moved(&name);
        Wake::Now
    }

    pub fn delete_resource_slice(&mut self, name: &str) {
        if self.dra.slices.remove(name).is_some() {
            self.slice_moved(name);
        }
        self.dra.left_out.remove(name);
    }

    pub fn resource_slice_keys(&self) -> Vec<String> {
        self.dra.slices.keys().cloned().collect()
    }

    /// A slice changed or went: the inventories of the nodes it was and is on are built
    /// again; of every node, when it is network-attached.
    fn slice_moved(&mut self, name: &str) {
        let before = self.dra.slice_node.remove(name);
        if let Some(n) = &before {
            unlist(&mut self.dra.node_slices, n, name);
        }
        let was_network = self.dra.network_slices.remove(name);
        let slice = self.dra.slices.get(name);
        let after = slice.and_then(|s| s.spec.node_name.clone());
        let network = match slice {
            Some(s) if after.is_none() => match pool_devices(s) {
                Ok(_) => true,
                Err(why) => {
                    if self.dra.left_out.insert(name.to_string()) {
                        warn_limited("ResourceSlice left out", &why);
                    }
                    false
                }
            },
            _ => false,
        };
        if let Some(n) = &after {
            self.dra.slice_node.insert(name.to_string(), n.clone());
            self.dra
                .node_slices
                .entry(n.clone())
                .or_default()
                .insert(name.to_string());
        }
        if network {
            self.dra.network_slices.insert(name.to_string());
        }
        if network || was_network {
            self.dra.network_pools_changed();
            self.rebuild_all_inventories();
            return;
        }
        let nodes: BTreeSet<String> = before.into_iter().chain(after).collect();
        for n in nodes {
            self.rebuild_inventory(&n);
        }
    }

    fn rebuild_inventory(&mut self, node: &str) {
        let state = self.cache.state();
        let labels = state
            .node_by_name(node)
            .map(|id| state.node(id).labels.clone());
        let inventory = self.dra.inventory(node, labels.as_deref());
        self.cache.apply_node_devices(node, inventory);
    }

    /// Every node's inventory built again: those the engine knows and those slices name.
    fn rebuild_all_inventories(&mut self) {
        let mut nodes: BTreeSet<String> = self.node_keys().into_iter().collect();
        nodes.extend(self.dra.node_slices.keys().cloned());
        for n in nodes {
            self.rebuild_inventory(&n);
        }
    }

    /// A node appeared, changed or went: while network-attached pools exist, the devices
    /// it reaches follow its labels.
    pub(crate) fn node_reach_changed(&mut self, node: &str) {
        if !self.dra.network_slices.is_empty() {
            self.rebuild_inventory(node);
        }
    }

    // ----- resource claims -----------------------------------------------------------

    pub fn apply_resource_claim(&mut self, claim: &ResourceClaim) -> Wake {
        let key = claim_key(claim);
        if !store_newest(&mut self.dra.claims, key.clone(), claim) {
            return Wake::No;
        }
        self.claim_changed(&key);
        Wake::Now
    }

    pub fn delete_resource_claim(&mut self, key: &str) {
        self.dra.claims.remove(key);
        self.claim_changed(key);
    }

    pub fn resource_claim_keys(&self) -> Vec<String> {
        self.dra.claims.keys().cloned().collect()
    }

    /// A claim changed or went: the inventory of the node its allocation is (and was) on
    /// (of every node, when it holds network-attached devices), and the pods using it.
    fn claim_changed(&mut self, key: &str) {
        let claim = self.dra.claims.get(key);
        let allocated =
            claim.is_some_and(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()));
        let after = claim.and_then(claim_allocation).map(|a| a.node.to_string());
        let network = claim.is_some_and(|c| self.dra.holds_network_devices(c));
        let was_network = self.dra.network_claims.remove(key);
        if network {
            self.dra.network_claims.insert(key.to_string());
        }
        if allocated {
            // What this scheduler was writing is now the claim's own status.
            self.dra.committing.remove(key);
        }
        let before = self.dra.claim_node.remove(key);
        if let Some(n) = &before {
            unlist(&mut self.dra.node_claims, n, key);
        }
        if let Some(n) = &after {
            self.dra.claim_node.insert(key.to_string(), n.clone());
            self.dra
                .node_claims
                .entry(n.clone())
                .or_default()
                .insert(key.to_string());
        }
        if network || was_network {
            self.rebuild_all_inventories();
        } else {
            let nodes: BTreeSet<String> = before.into_iter().chain(after).collect();
            for n in nodes {
                self.rebuild_inventory(&n);
            }
        }
        self.refresh_claim_pods(key);
    }

    /// The pods using a claim resolve it again.
    pub(crate) fn refresh_claim_pods(&mut self, key: &str) {
        for pod in self
            .dra
            .pods_depending_on(&ClaimDep::Claim(key.to_string()))
        {
            self.apply_pod(&pod);
        }
    }

    // ----- resource claim templates --------------------------------------------------

    pub fn apply_claim_template(&mut self, template: &ResourceClaimTemplate) -> Wake {
        let key = format!(
            "{}/{}",
            template.namespace().unwrap_or_default(),
            template.name_any()
        );
        if !store_newest(&mut self.dra.templates, key.clone(), template) {
            return Wake::No;
        }
        self.refresh_template_pods(&key);
        Wake::Now
    }

    pub fn delete_claim_template(&mut self, key: &str) {
        self.dra.templates.remove(key);
        self.refresh_template_pods(key);
    }

    pub fn claim_template_keys(&self) -> Vec<String> {
        self.dra.templates.keys().cloned().collect()
    }

    fn refresh_template_pods(&mut self, key: &str) {
        for pod in self
            .dra
            .pods_depending_on(&ClaimDep::Template(key.to_string()))
        {
            self.apply_pod(&pod);
        }
    }

    // ----- pods ----------------------------------------------------------------------

    /// Lays a pod's claims over its task, and remembers what they were resolved from. A
    /// bound pod keeps only its allocated claims, never blocked: its devices are held in
    /// its node's inventory already, and the claims count them against its queue's device
    /// quota (and as what its eviction would free) until the pod is gone.
    pub(crate) fn resolve_claims(&mut self, pod: &Pod, uid: &str, update: &mut PodUpdate) {
        let has_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_claims {
            self.dra.forget_pod(uid);
            return;
        }
        let (mut claims, deps) = self.dra.pod_claims(pod);
        if update.task.node.is_some() {
            claims.retain(|c| c.allocation.is_some());
            for c in &mut claims {
                c.blocked = None;
            }
        }
        update.task.set_claims(claims);
        self.dra.remember_pod(uid, pod.clone(), deps);
    }

    /// A pending pod with claims resolves them again (its back-off began or ended).
    pub(crate) fn refresh_claims_pod(&mut self, uid: &str) {
        if let Some((pod, _)) = self.dra.pods.get(uid).cloned() {
            self.apply_pod(&pod);
        }
    }

    pub(crate) fn forget_claims_pod(&mut self, uid: &str) {
        self.dra.forget_pod(uid);
        self.dra.backoffs.remove(uid);
    }

    /// A gang the index drops forgets its failed commits in a row (a gang of that name
    /// made later starts without back-off).
    pub(crate) fn forget_device_gang(&mut self, gang: &str) {
        self.dra.attempts.remove(gang);
    }

    /// Pods whose back-off after a failed commit is over are candidates again.
    pub fn end_device_backoffs(&mut self, now_ms: i64) {
        let over: Vec<String> = self
            .dra
            .backoffs
            .iter()
            .filter(|(_, (until, _))| *until <= now_ms)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in over {
            self.dra.backoffs.remove(&uid);
            self.refresh_claims_pod(&uid);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
