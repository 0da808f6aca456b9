//! PersistentVolumeClaims, PersistentVolumes and StorageClasses as the watches last saw
//! them, and what they make of a pod's volumes (`model::volumes::VolumeRules`): the
//! index resolves every pending pod of ours that uses a claim, and resolves it again when
//! one of the objects it depends on changes.

use std::collections::{BTreeSet, HashMap};

use ::kube::ResourceExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::convert::selector_term;
use crate::model::placement::{NodeSelectorRequirement, NodeSelectorTerm, SelectorOperator};
use crate::model::volumes::{ClaimTopology, VolumeRules, SELECTED_NODE_ANNOTATION};

/// The provisioner of classes whose volumes are all created by hand (local volumes).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// An object a pod's volume rules were resolved from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VolumeDep {
    /// `namespace/name`.
    Claim(String),
    Volume(String),
    Class(String),
}

/// The claims, volumes and classes the watches know.
#[derive(Default)]
pub struct VolumeObjects {
    /// By `namespace/name`.
    pub claims: HashMap<String, PersistentVolumeClaim>,
    pub volumes: HashMap<String, PersistentVolume>,
    pub classes: HashMap<String, StorageClass>,
}

/// Pending pods of ours that use claims (by uid), with the objects their volume rules were
/// resolved from, and the other way round: a change to a claim, volume or class finds the
/// pods it touches without scanning them all.
#[derive(Default)]
pub struct VolumePods {
    pods: HashMap<String, (Pod, BTreeSet<VolumeDep>)>,
    dependents: HashMap<VolumeDep, BTreeSet<String>>,
}

impl VolumePods {
    pub fn insert(&mut self, uid: &str, pod: Pod, deps: BTreeSet<VolumeDep>) {
        self.remove(uid);
        for dep in &deps {
            self.dependents
                .entry(dep.clone())
                .or_default()
                .insert(uid.to_string());
        }
        self.pods.insert(uid.to_string(), (pod, deps));
    }

    pub fn remove(&mut self, uid: &str) {
        let Some((_, deps)) = self.pods.remove(uid) else {
            return;
        };
        for dep in deps {
            if let Some(uids) = self.dependents.get_mut(&dep) {
                uids.remove(uid);
                if uids.is_empty() {
                    self.dependents.remove(&dep);
                }
            }
        }
    }

    pub fn get(&self, uid: &str) -> Option<&Pod> {
        self.pods.get(uid).map(|(pod, _)| pod)
    }

    /// The pods whose volume rules depend on `dep`.
    pub fn depending_on(&self, dep: &VolumeDep) -> Vec<Pod> {
        self.dependents
            .get(dep)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.get(uid).cloned())
            .collect()
    }
}

/// The claims a pod uses (name, and whether it is the pod's generic ephemeral volume's),
/// in the order of its volumes, without repeats.
pub fn pod_claims(pod: &Pod) -> Vec<(String, bool)> {
    let pod_name = pod.name_any();
    let mut claims: Vec<(String, bool)> = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let claim = if let Some(pvc) = &v.persistent_volume_claim {
            (pvc.claim_name.clone(), false)
        } else if v.ephemeral.is_some() {
            // The ephemeral volume controller names the claim after the pod and volume.
            (format!("{pod_name}-{}", v.name), true)
        } else {
            continue;
        };
        if !claims.iter().any(|(c, _)| *c == claim.0) {
            claims.push(claim);
        }
    }
    claims
}

/// Whether a claim is bound (the PV controller finished binding it).
pub fn claim_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        && pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
}

/// The node a claim was handed to its provisioner for, if any.
pub fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .annotations
        .as_ref()?
        .get(SELECTED_NODE_ANNOTATION)
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

fn node_named(node: &str) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: vec![],
        match_fields: vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: SelectorOperator::In,
            values: vec![node.to_string()],
        }],
    }
}

impl VolumeObjects {
    /// What the pod's claims ask of its node (None: it uses no claim), and the objects that
    /// answer depends on. Every problem keeps the pod off every node with its reason, in
    /// kube-scheduler's words where it has some, naming the claim, volume or class.
    pub fn resolve(&self, pod: &Pod) -> (Option<VolumeRules>, BTreeSet<VolumeDep>) {
        let ns = pod.namespace().unwrap_or_default();
        let mut deps = BTreeSet::new();
        let claims = pod_claims(pod);
        if claims.is_empty() {
            return (None, deps);
        }
        let mut rules = VolumeRules::default();
        let mut blocked: Vec<String> = Vec::new();
        for (name, ephemeral) in claims {
            let key = format!("{ns}/{name}");
            deps.insert(VolumeDep::Claim(key.clone()));
            let Some(pvc) = self.claims.get(&key) else {
                blocked.push(if ephemeral {
                    format!("waiting for the ephemeral volume controller to create the persistentvolumeclaim \"{name}\"")
                } else {
                    format!("persistentvolumeclaim \"{name}\" not found")
                });
                continue;
            };
            if pvc.metadata.deletion_timestamp.is_some() {
                blocked.push(format!("persistentvolumeclaim \"{name}\" is being deleted"));
                continue;
            }
            if ephemeral && !owned_by(pvc, pod) {
                blocked.push(format!(
                    "persistentvolumeclaim \"{name}\" was not created for pod \"{}\" (pod's volume is ephemeral)",
                    pod.name_any()
                ));
                continue;
            }
            let spec = pvc.spec.clone().unwrap_or_default();
            if let Some(pv_name) = spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                deps.insert(VolumeDep::Volume(pv_name.to_string()));
                match self.volumes.get(pv_name) {
                    None => blocked.push(format!(
                        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s): persistentvolumeclaim \"{name}\" is bound to persistentvolume \"{pv_name}\", which does not exist"
                    )),
                    Some(pv) => match volume_terms(pv) {
                        Ok(terms) if terms.is_empty() => {}
                        Ok(terms) => rules.bound.push(ClaimTopology { claim: key, terms }),
                        Err(e) => blocked.push(e),
                    },
                }
                continue;
            }
            let class = spec.storage_class_name.as_deref().unwrap_or("");
            if class.is_empty() {
                blocked.push(format!(
                    "pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"{name}\" is not bound (it names no StorageClass)"
                ));
                continue;
            }
            deps.insert(VolumeDep::Class(class.to_string()));
            let Some(sc) = self.classes.get(class) else {
                blocked.push(format!(
                    "storageclass.storage.k8s.io \"{class}\" not found (persistentvolumeclaim \"{name}\")"
                ));
                continue;
            };
            if sc.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
                blocked.push(format!(
                    "pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"{name}\" is not bound"
                ));
                continue;
            }
            // Static volumes only (local PVs): kube-scheduler binds the claim to a matching
            // volume itself, which rust-batch does not do; refused rather than annotated
            // for a provisioner that never comes.
            if sc.provisioner == NO_PROVISIONER {
                blocked.push(format!(
                    "persistentvolumeclaim \"{name}\" is unbound and its StorageClass \"{class}\" has no provisioner ({NO_PROVISIONER}): binding a claim to an existing volume is not supported by rust-batch; pre-bind it (spec.volumeName)"
                ));
                continue;
            }
            // Handed to its provisioner for a node already: only that node will do.
            let terms = match selected_node(pvc) {
                Some(node) => vec![node_named(node)],
                None => match class_terms(sc) {
                    Ok(terms) => terms,
                    Err(e) => {
                        blocked.push(e);
                        continue;
                    }
                },
            };
            rules.provision.push(ClaimTopology { claim: key, terms });
        }
        if !blocked.is_empty() {
            rules.blocked = Some(blocked.join("; "));
        }
        (Some(rules), deps)
    }
}

fn owned_by(pvc: &PersistentVolumeClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref();
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// A volume's required node affinity (none: any node), or what is wrong with it.
fn volume_terms(pv: &PersistentVolume) -> Result<Vec<NodeSelectorTerm>, String> {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(Vec::new());
    };
    let name = pv.name_any();
    let terms = required
        .node_selector_terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            selector_term(t).map_err(|m| {
                format!("persistentvolume \"{name}\": spec.nodeAffinity.required.nodeSelectorTerms[{i}]: {m}")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if terms.is_empty() {
        // No term matches no node (Kubernetes semantics for an empty required list).
        return Err(format!(
            "persistentvolume \"{name}\": spec.nodeAffinity.required.nodeSelectorTerms is empty: no node can reach it"
        ));
    }
    Ok(terms)
}

/// A class's allowedTopologies as node selector terms (`key In values` each; none: any
/// node), or what is wrong with them.
fn class_terms(sc: &StorageClass) -> Result<Vec<NodeSelectorTerm>, String> {
    let name = sc.name_any();
    let mut terms = Vec::new();
    for (i, t) in sc.allowed_topologies.iter().flatten().enumerate() {
        let mut term = NodeSelectorTerm::default();
        for (j, e) in t.match_label_expressions.iter().flatten().enumerate() {
            if e.values.is_empty() {
                return Err(format!(
                    "storageclass.storage.k8s.io \"{name}\": allowedTopologies[{i}].matchLabelExpressions[{j}].values is empty"
                ));
            }
            term.match_expressions.push(NodeSelectorRequirement {
                key: e.key.clone(),
                operator: SelectorOperator::In,
                values: e.values.clone(),
            });
        }
        terms.push(term);
    }
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::volumes::VolumeMismatch;
    use crate::testkit::labels;
    use serde_json::json;

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes}
        }))
        .unwrap()
    }

    fn claim(name: &str, class: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"storageClassName": class, "volumeName": volume,
                     "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": if volume.is_some() { "Bound" } else { "Pending" }}
        }))
        .unwrap()
    }

    fn class(name: &str, mode: &str, allowed: serde_json::Value) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": name}, "provisioner": "example.com/disk",
            "volumeBindingMode": mode, "allowedTopologies": allowed
        }))
        .unwrap()
    }

    fn volume(name: &str, affinity: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "nodeAffinity": affinity}
        }))
        .unwrap()
    }

    fn uses(claims: &[&str]) -> Pod {
        pod(json!(claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect::<Vec<_>>()))
    }

    fn objects() -> VolumeObjects {
        let mut o = VolumeObjects::default();
        for c in [
            claim("local", Some("local"), Some("pv-local")),
            claim("anywhere", Some("fast"), Some("pv-anywhere")),
            claim("wffc", Some("late"), None),
            claim("zonal", Some("zonal"), None),
            claim("now", Some("fast"), None),
            claim("classless", None, None),
            claim("nofast", Some("missing"), None),
            claim("lost", Some("fast"), Some("pv-gone")),
        ] {
            o.claims.insert(format!("ns/{}", c.name_any()), c);
        }
        o.volumes.insert(
            "pv-local".into(),
            volume(
                "pv-local",
                json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}),
            ),
        );
        o.volumes
            .insert("pv-anywhere".into(), volume("pv-anywhere", json!(null)));
        o.classes
            .insert("fast".into(), class("fast", "Immediate", json!(null)));
        o.classes.insert(
            "late".into(),
            class("late", "WaitForFirstConsumer", json!(null)),
        );
        o.classes.insert(
            "zonal".into(),
            class(
                "zonal",
                "WaitForFirstConsumer",
                json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}]),
            ),
        );
        o
    }

    fn rules(o: &VolumeObjects, claims: &[&str]) -> VolumeRules {
        o.resolve(&uses(claims)).0.unwrap()
    }

    #[test]
    fn pods_are_found_by_what_their_rules_depend_on() {
        let mut pods = VolumePods::default();
        let claim = |c: &str| VolumeDep::Claim(format!("ns/{c}"));
        pods.insert(
            "a",
            uses(&["x"]),
            [claim("x"), VolumeDep::Class("late".into())].into(),
        );
        pods.insert("b", uses(&["x", "y"]), [claim("x"), claim("y")].into());
        assert_eq!(pods.depending_on(&claim("x")).len(), 2);
        pods.insert("b", uses(&["y"]), [claim("y")].into());
        assert_eq!(pods.depending_on(&claim("x")).len(), 1, "b resolved again");
        pods.remove("a");
        assert!(pods.depending_on(&claim("x")).is_empty());
        assert!(pods.dependents.len() == 1 && pods.get("b").is_some());
    }

    #[test]
    fn a_pod_without_claims_has_no_volume_rules() {
        let o = objects();
        let p = pod(json!([{"name": "tmp", "emptyDir": {}}]));
        assert_eq!(o.resolve(&p), (None, BTreeSet::new()));
    }

    #[test]
    fn a_claim_bound_to_a_volume_with_node_affinity_pins_the_pod() {
        let o = objects();
        let r = rules(&o, &["local"]);
        assert_eq!(r.bound.len(), 1);
        assert_eq!(r.bound[0].claim, "ns/local");
        let host = |h: &str| labels(&[("kubernetes.io/hostname", h)]);
        assert_eq!(r.check("n1", &host("n1")), Ok(()));
        assert_eq!(
            r.check("n2", &host("n2")),
            Err(VolumeMismatch::NodeConflict)
        );
        let (_, deps) = o.resolve(&uses(&["local"]));
        assert!(deps.contains(&VolumeDep::Volume("pv-local".into())));
        assert!(rules(&o, &["anywhere"]).is_empty(), "no affinity: any node");
    }

    #[test]
    fn an_unbound_wait_for_first_consumer_claim_is_provisioned_where_its_class_allows() {
        let o = objects();
        let r = rules(&o, &["wffc", "zonal"]);
        assert_eq!(r.blocked, None);
        assert_eq!(
            r.to_provision().collect::<Vec<_>>(),
            ["ns/wffc", "ns/zonal"]
        );
        assert_eq!(r.check("n", &labels(&[("zone", "b")])), Ok(()));
        assert_eq!(
            r.check("n", &labels(&[("zone", "c")])),
            Err(VolumeMismatch::BindConflict)
        );
        // Once handed to the provisioner for a node, only that node.
        let mut o = objects();
        let pvc = o.claims.get_mut("ns/wffc").unwrap();
        pvc.metadata.annotations =
            Some([(SELECTED_NODE_ANNOTATION.to_string(), "n7".to_string())].into());
        let r = rules(&o, &["wffc"]);
        assert_eq!(r.check("n7", &labels(&[])), Ok(()));
        assert!(r.check("n8", &labels(&[])).is_err());
    }

    #[test]
    fn unbound_immediate_missing_claims_classes_and_volumes_block_with_their_names() {
        let o = objects();
        let blocked = |claims: &[&str]| rules(&o, claims).blocked.unwrap();
        assert_eq!(
            blocked(&["now"]),
            "pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"now\" is not bound"
        );
        assert!(
            blocked(&["classless"]).contains("persistentvolumeclaim \"classless\" is not bound")
        );
        assert_eq!(
            blocked(&["ghost"]),
            "persistentvolumeclaim \"ghost\" not found"
        );
        assert_eq!(
            blocked(&["nofast"]),
            "storageclass.storage.k8s.io \"missing\" not found (persistentvolumeclaim \"nofast\")"
        );
        assert!(blocked(&["lost"]).contains("persistentvolume \"pv-gone\", which does not exist"));
        let mut o = objects();
        o.classes.get_mut("late").unwrap().provisioner = NO_PROVISIONER.into();
        assert!(rules(&o, &["wffc"])
            .blocked
            .unwrap()
            .contains("binding a claim to an existing volume is not supported by rust-batch"));
        // Every problem is told, and a good claim beside them does not unblock the pod.
        let both = blocked(&["local", "ghost", "now"]);
        assert!(both.contains("\"ghost\" not found") && both.contains("\"now\" is not bound"));
        let (_, deps) = o.resolve(&uses(&["ghost", "nofast"]));
        assert!(deps.contains(&VolumeDep::Claim("ns/ghost".into())));
        assert!(deps.contains(&VolumeDep::Class("missing".into())));
    }

    #[test]
    fn malformed_affinity_and_topologies_name_the_object_and_field() {
        let mut o = objects();
        o.volumes.insert(
            "pv-local".into(),
            volume(
                "pv-local",
                json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "k", "operator": "Near", "values": ["x"]}]}]}}),
            ),
        );
        o.classes.insert(
            "zonal".into(),
            class(
                "zonal",
                "WaitForFirstConsumer",
                json!([{"matchLabelExpressions": [{"key": "zone", "values": []}]}]),
            ),
        );
        assert_eq!(
            rules(&o, &["local"]).blocked.unwrap(),
            "persistentvolume \"pv-local\": spec.nodeAffinity.required.nodeSelectorTerms[0]: unknown operator \"Near\""
        );
        assert_eq!(
            rules(&o, &["zonal"]).blocked.unwrap(),
            "storageclass.storage.k8s.io \"zonal\": allowedTopologies[0].matchLabelExpressions[0].values is empty"
        );
    }

    #[test]
    fn an_ephemeral_volume_waits_for_its_claim_and_takes_only_its_own() {
        let mut o = objects();
        let p = pod(
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "late",
                     "resources": {"requests": {"storage": "1Gi"}}}}}}]),
        );
        let r = o.resolve(&p).0.unwrap();
        assert!(r
            .blocked
            .unwrap()
            .contains("persistentvolumeclaim \"p-scratch\""));
        let mut c = claim("p-scratch", Some("late"), None);
        o.claims.insert("ns/p-scratch".into(), c.clone());
        assert!(o
            .resolve(&p)
            .0
            .unwrap()
            .blocked
            .unwrap()
            .contains("was not created for pod"));
        c.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid", "controller": true
        }))
        .unwrap()]);
        o.claims.insert("ns/p-scratch".into(), c);
        let r = o.resolve(&p).0.unwrap();
        assert_eq!(r.blocked, None);
        assert_eq!(r.to_provision().collect::<Vec<_>>(), ["ns/p-scratch"]);
    }
}
