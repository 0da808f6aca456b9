//! Dynamic Resource Allocation as the live driver sees it: DeviceClasses, ResourceSlices,
//! ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1), each watched like any
//! other kind, turned into the engine's model with the conversions of `dra`.
//!
//! - Node inventories: a node's slices, with the devices every claim's `status.allocation`
//!   holds on it, whoever allocated them (kube-scheduler, another scheduler, this one before
//!   a restart). Rebuilt for the nodes a slice or an allocated claim touches.
//! - A pending pod's claims (`spec.resourceClaims`): `resourceClaimName` names a claim its
//!   pods share; `resourceClaimTemplateName` is the claim the resource-claim controller
//!   makes for the pod, named in `status.resourceClaimStatuses`. Until that claim exists,
//!   or when it asks for what the engine does not model, the pod's claim is blocked with a
//!   reason naming it, and its gang waits saying so. Pods are resolved again when a claim
//!   or template they depend on changes.
//! - Allocations this scheduler is writing (`dra_commit`) count as allocated until the
//!   claim's own status shows them or the write is rolled back, so that no cycle meanwhile
//!   hands the same devices out again.
//!
//! Network-attached slices (a node selector or `allNodes`) are left out, logged once each.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ::kube::ResourceExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

use super::{store_newest, Index, Wake};
use crate::cache::PodUpdate;
use crate::dra::{claim_allocation, claim_spec, class_selectors, node_inventories};
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
    /// Network-attached slices already logged.
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

    /// A node's inventory from its slices and the claims allocated on it (None: no slice).
    fn inventory(&self, node: &str) -> Option<Arc<crate::model::devices::NodeDevices>> {
        let slices: Vec<ResourceSlice> = self
            .node_slices
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|s| self.slices.get(s).cloned())
            .collect();
        if slices.is_empty() {
            return None;
        }
        let claims: Vec<ResourceClaim> = self
            .node_claims
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|c| self.claims.get(c).cloned())
            .collect();
        let (mut inventories, _) = node_inventories(&slices, &claims);
        inventories.remove(node).map(Arc::new)
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
    /// again.
    fn slice_moved(&mut self, name: &str) {
        let before = self.dra.slice_node.remove(name);
        if let Some(n) = &before {
            unlist(&mut self.dra.node_slices, n, name);
        }
        let after = match self.dra.slices.get(name) {
            Some(s) => match crate::dra::slice_devices(s) {
                Ok((node, _)) => Some(node),
                Err(why) => {
                    if self.dra.left_out.insert(name.to_string()) {
                        warn_limited("ResourceSlice left out", &why);
                    }
                    None
                }
            },
            None => None,
        };
        if let Some(n) = &after {
            self.dra.slice_node.insert(name.to_string(), n.clone());
            self.dra
                .node_slices
                .entry(n.clone())
                .or_default()
                .insert(name.to_string());
        }
        let nodes: BTreeSet<String> = before.into_iter().chain(after).collect();
        for n in nodes {
            self.rebuild_inventory(&n);
        }
    }

    fn rebuild_inventory(&mut self, node: &str) {
        let inventory = self.dra.inventory(node);
        self.cache.apply_node_devices(node, inventory);
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

    /// A claim changed or went: the inventory of the node its allocation is (and was) on,
    /// and the pods using it.
    fn claim_changed(&mut self, key: &str) {
        let claim = self.dra.claims.get(key);
        let allocated =
            claim.is_some_and(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()));
        let after = claim.and_then(claim_allocation).map(|a| a.node.to_string());
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
        let nodes: BTreeSet<String> = before.into_iter().chain(after).collect();
        for n in nodes {
            self.rebuild_inventory(&n);
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

    /// Lays a pending pod's claims over its task (a bound pod's devices are held by its
    /// claims' allocations, in its node's inventory), and remembers what they were
    /// resolved from.
    pub(crate) fn resolve_claims(&mut self, pod: &Pod, uid: &str, update: &mut PodUpdate) {
        let has_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_claims || update.task.node.is_some() {
            self.dra.forget_pod(uid);
            return;
        }
        let (claims, deps) = self.dra.pod_claims(pod);
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
pub(crate) mod tests {
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
        st.apply_node(&obj(serde_json::json!({
            "metadata": {"name": "n0"},
            "status": {"allocatable": {"cpu": "8", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        })));
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
}
