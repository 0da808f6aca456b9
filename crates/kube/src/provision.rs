//! WaitForFirstConsumer claims, provisioned for a whole gang before any of it binds.
//!
//! When a cycle commits a gang whose pods use unbound WaitForFirstConsumer claims, the
//! driver does what kube-scheduler's VolumeBinding PreBind does, for the whole gang at
//! once: it sets `volume.kubernetes.io/selected-node` on every such claim (the node its
//! pod was placed on) and holds all of the gang's binds of that cycle. Their room stays
//! assumed in the cache (the pods are `Binding` to the engine), so no other gang takes it
//! meanwhile. The binds go out only once every claim of the gang is Bound (and the volume
//! it got is reachable from the pod's node); so a gang with several claims is still
//! all-or-nothing: no pod binds while any of its claims is unprovisioned. If a claim is
//! not bound in time (or cannot be annotated, or its pod or gang goes), the gang is
//! called off as a whole: the annotation is removed from its claims that are still
//! unbound (so the provisioner may try elsewhere), the assumptions are dropped (its room
//! is free again), and an event and the gang's condition name the claim.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::volumes::{claim_bound, VolumeObjects};
use crate::cache::Cache;
use crate::framework::Bind;
use crate::model::Timestamp;

/// kube-scheduler's default for VolumeBinding's `bindTimeoutSeconds`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Reason of the events on a gang whose claims were not provisioned.
pub const VOLUME_BINDING_FAILED: &str = "FailedVolumeBinding";

/// A gang whose binds wait for its claims.
#[derive(Clone, Debug, PartialEq)]
struct Waiting {
    binds: Vec<Bind>,
    /// Claim (`namespace/name`) -> the node it was handed to its provisioner for.
    claims: BTreeMap<String, Arc<str>>,
    since: Timestamp,
    /// Why it cannot go on (an annotation refused), if so.
    failed: Option<String>,
}

/// Gangs waiting for their claims, by gang key, and pods backing off after their gang was
/// called off.
#[derive(Debug)]
pub struct Provisioning {
    gangs: HashMap<String, Waiting>,
    pub timeout: Duration,
    /// Pod uid -> until when it is no candidate, and why (its volume rules say so).
    backing_off: HashMap<String, (Timestamp, String)>,
    /// Gang -> how many times in a row it was called off.
    failures: HashMap<String, u32>,
}

impl Default for Provisioning {
    fn default() -> Self {
        Provisioning {
            gangs: HashMap::new(),
            timeout: DEFAULT_TIMEOUT,
            backing_off: HashMap::new(),
            failures: HashMap::new(),
        }
    }
}

/// Back-off of a gang called off for the n-th time in a row: 5 s doubling, at most 5 min
/// (without one it would take the same room again at once, and nobody else could).
fn backoff_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(6);
    (5_000i64 << doublings).min(300_000)
}

/// A claim to annotate with the node it is for (`Some`) or to clear (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPatch {
    pub gang: String,
    /// `namespace/name`.
    pub claim: String,
    pub node: Option<Arc<str>>,
}

/// A gang called off: its binds (whose assumptions to drop), its claims to clear, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct CalledOff {
    pub gang: String,
    pub binds: Vec<Bind>,
    pub clear: Vec<ClaimPatch>,
    pub message: String,
}

/// What a review found: binds to send now, gangs called off.
#[derive(Debug, Default, PartialEq)]
pub struct Review {
    pub ready: Vec<Bind>,
    /// How long each bind of `ready` waited for its gang's claims, ms (in the same order).
    pub waited: Vec<i64>,
    pub called_off: Vec<CalledOff>,
}

impl Provisioning {
    /// Takes a cycle's binds (already assumed): the binds of gangs none of whose pods has a
    /// claim to provision come back to be sent; the others are held, and their claims come
    /// back to be annotated. A claim two pods of one gang would provision on different
    /// nodes cannot be: that gang is called off at once (in `conflicts`).
    pub fn hold(
        &mut self,
        cache: &Cache,
        binds: Vec<Bind>,
        now: Timestamp,
    ) -> (Vec<Bind>, Vec<ClaimPatch>, Vec<CalledOff>) {
        let mut by_gang: BTreeMap<Arc<str>, Vec<Bind>> = BTreeMap::new();
        for b in binds {
            by_gang.entry(b.job.clone()).or_default().push(b);
        }
        let (mut send, mut patches, mut conflicts) = (Vec::new(), Vec::new(), Vec::new());
        for (gang, binds) in by_gang {
            let mut claims: BTreeMap<String, Arc<str>> = BTreeMap::new();
            let mut clash = None;
            for b in &binds {
                let Some(rules) = cache
                    .pod(&b.task)
                    .and_then(|p| p.task.placement.volumes.as_deref())
                else {
                    continue;
                };
                for claim in rules.to_provision() {
                    match claims.get(claim) {
                        Some(node) if *node != b.node => {
                            clash = Some(format!(
                                "persistentvolumeclaim {claim} would be provisioned for two nodes ({node} and {}): pods sharing a WaitForFirstConsumer claim must share a node",
                                b.node
                            ));
                        }
                        _ => {
                            claims.insert(claim.to_string(), b.node.clone());
                        }
                    }
                }
            }
            if let Some(message) = clash {
                conflicts.push(CalledOff {
                    gang: gang.to_string(),
                    binds,
                    clear: Vec::new(),
                    message,
                });
                continue;
            }
            // A gang already waiting for its claims keeps later members' binds too: none
            // of it binds before all of it can.
            if claims.is_empty() && !self.gangs.contains_key(&*gang) {
                send.extend(binds);
                continue;
            }
            patches.extend(claims.iter().map(|(claim, node)| ClaimPatch {
                gang: gang.to_string(),
                claim: claim.clone(),
                node: Some(node.clone()),
            }));
            let waiting = self.gangs.entry(gang.to_string()).or_insert(Waiting {
                binds: Vec::new(),
                claims: BTreeMap::new(),
                since: now,
                failed: None,
            });
            waiting.binds.extend(binds);
            waiting.claims.extend(claims);
        }
        (send, patches, conflicts)
    }

    /// A claim of `gang` could not be annotated: the gang is called off at the next review.
    pub fn fail(&mut self, gang: &str, why: String) {
        if let Some(w) = self.gangs.get_mut(gang) {
            w.failed.get_or_insert(why);
        }
    }

    /// The claims a gang's binds wait for (`namespace/name (node)`, comma-separated).
    pub fn waiting_claims(&self, gang: &str) -> Option<String> {
        let w = self.gangs.get(gang)?;
        let claims: Vec<String> = w
            .claims
            .iter()
            .map(|(claim, node)| format!("{claim} (node {node})"))
            .collect();
        Some(claims.join(", "))
    }

    /// Whether a gang's binds are held for its claims.
    pub fn holds(&self, gang: &str) -> bool {
        self.gangs.contains_key(gang)
    }

    /// Once per cycle, before it: gangs whose claims are all bound (to volumes their pods'
    /// nodes reach) release their binds; gangs past the timeout, refused an annotation, or
    /// whose volume landed out of reach are called off; binds of pods gone are dropped.
    pub fn review(&mut self, objects: &VolumeObjects, cache: &Cache, now: Timestamp) -> Review {
        let mut review = Review::default();
        let timeout = self.timeout.as_millis() as i64;
        let gangs: Vec<String> = self.gangs.keys().cloned().collect();
        for gang in gangs {
            let Some(w) = self.gangs.get_mut(&gang) else {
                continue;
            };
            // A pod deleted (or bound by someone else) meanwhile: nothing to bind for it.
            w.binds.retain(|b| {
                cache
                    .pod(&b.task)
                    .is_some_and(|p| p.task.node.as_deref() == Some(&*b.node))
            });
            // Bound, and its volume seen too (the pod's rules are resolved against it).
            let unbound: Vec<&String> = w
                .claims
                .keys()
                .filter(|c| {
                    !objects
                        .claims
                        .get(*c)
                        .is_some_and(|pvc| volume_seen(objects, pvc))
                })
                .collect();
            let out_of_reach = w.binds.iter().find_map(|b| {
                let pod = cache.pod(&b.task)?;
                let rules = pod.task.placement.volumes.as_deref()?;
                let state = cache.state();
                let node = state.node(state.node_by_name(&b.node)?);
                let why = rules.check(&node.name, &node.labels).err()?;
                Some(format!(
                    "the volumes of pod {}/{} cannot be used on node {}: {why}",
                    b.namespace, b.name, b.node
                ))
            });
            let why = if let Some(failed) = &w.failed {
                Some(failed.clone())
            } else if w.binds.is_empty() {
                Some("its pods are gone".to_string())
            } else if let Some(why) = out_of_reach.filter(|_| unbound.is_empty()) {
                Some(why)
            } else if !unbound.is_empty() && now - w.since >= timeout {
                let claims: Vec<String> = unbound
                    .iter()
                    .map(|c| format!("persistentvolumeclaim {c} (for node {})", w.claims[*c]))
                    .collect();
                Some(format!(
                    "{} not bound within {}s of being handed to the provisioner",
                    claims.join(", "),
                    self.timeout.as_secs()
                ))
            } else {
                None
            };
            if let Some(why) = why {
                let Some(w) = self.gangs.remove(&gang) else {
                    continue;
                };
                let clear = w
                    .claims
                    .keys()
                    .filter(|c| !objects.claims.get(*c).is_some_and(claim_bound))
                    .map(|c| ClaimPatch {
                        gang: gang.clone(),
                        claim: c.clone(),
                        node: None,
                    })
                    .collect();
                review.called_off.push(CalledOff {
                    message: format!("volume binding of the gang called off: {why}"),
                    gang,
                    binds: w.binds,
                    clear,
                });
            } else if unbound.is_empty() {
                if let Some(w) = self.gangs.remove(&gang) {
                    review.waited.extend(w.binds.iter().map(|_| now - w.since));
                    review.ready.extend(w.binds);
                }
                self.succeeded(&gang);
            }
        }
        review
    }

    /// Keeps the pods of a gang called off out of placement for a back-off that grows with
    /// each call-off in a row; returns what their volume rules say meanwhile.
    pub fn back_off(&mut self, called_off: &CalledOff, now: Timestamp) -> String {
        let failures = self.failures.entry(called_off.gang.clone()).or_insert(0);
        *failures += 1;
        let wait = backoff_ms(*failures);
        let why = format!("{}; retrying in {}s", called_off.message, wait / 1000);
        for b in &called_off.binds {
            self.backing_off
                .insert(b.task.to_string(), (now + wait, why.clone()));
        }
        why
    }

    /// Why a pod is no candidate yet, while it backs off.
    pub fn backing_off(&self, uid: &str) -> Option<&str> {
        self.backing_off.get(uid).map(|(_, why)| why.as_str())
    }

    /// Pods whose back-off is over (their volume rules are to be resolved again).
    pub fn backoffs_over(&mut self, now: Timestamp) -> Vec<String> {
        let over: Vec<String> = self
            .backing_off
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &over {
            self.backing_off.remove(uid);
        }
        over
    }

    /// The gang bound: its next call-off starts the back-off afresh.
    fn succeeded(&mut self, gang: &str) {
        self.failures.remove(gang);
    }

    /// The gang is gone: nothing of it is kept (a gang waiting for its claims is called
    /// off at the next review, as its pods are gone too).
    pub fn forget(&mut self, gang: &str) {
        self.failures.remove(gang);
    }
}

fn volume_seen(objects: &VolumeObjects, pvc: &PersistentVolumeClaim) -> bool {
    claim_bound(pvc)
        && pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_some_and(|v| objects.volumes.contains_key(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PodUpdate;
    use crate::model::volumes::{ClaimTopology, VolumeRules};
    use crate::model::{NodeSpec, Placement, TaskInfo};
    use crate::testkit::res;
    use serde_json::json;

    fn pod(cache: &mut Cache, uid: &str, claims: &[&str]) {
        let volumes = (!claims.is_empty()).then(|| {
            Box::new(VolumeRules {
                provision: claims
                    .iter()
                    .map(|c| ClaimTopology {
                        claim: format!("ns/{c}"),
                        terms: vec![],
                    })
                    .collect(),
                ..Default::default()
            })
        });
        let placement = Placement {
            volumes,
            ..Default::default()
        };
        let task = TaskInfo::new(
            uid,
            "ns",
            uid,
            "",
            res(&[("cpu", "1")]),
            0,
            Arc::new(placement),
            0,
        );
        cache.apply_pod(PodUpdate {
            task,
            job: Some("ns/g".into()),
        });
    }

    fn bind(uid: &str, node: &str) -> Bind {
        Bind {
            job: Arc::from("ns/g"),
            task: Arc::from(uid),
            namespace: Arc::from("ns"),
            name: Arc::from(uid),
            node: Arc::from(node),
            claims: Arc::from([]),
        }
    }

    fn setup() -> Cache {
        let mut cache = Cache::default();
        for n in ["n1", "n2"] {
            cache.apply_node(NodeSpec {
                name: n.into(),
                allocatable: res(&[("cpu", "4"), ("pods", "10")]),
                ..Default::default()
            });
        }
        pod(&mut cache, "a", &["data-a"]);
        pod(&mut cache, "b", &["data-b"]);
        pod(&mut cache, "c", &[]);
        for (uid, node) in [("a", "n1"), ("b", "n2"), ("c", "n2")] {
            cache.assume(uid, crate::cache::Assumption::Bind(Arc::from(node)));
        }
        cache
    }

    fn bound(objects: &mut VolumeObjects, claim: &str) {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": claim, "namespace": "ns"},
            "spec": {"volumeName": format!("pv-{claim}")},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        objects.claims.insert(format!("ns/{claim}"), pvc);
        let pv: k8s_openapi::api::core::v1::PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": format!("pv-{claim}")}})).unwrap();
        objects.volumes.insert(format!("pv-{claim}"), pv);
    }

    #[test]
    fn a_gang_binds_only_once_every_claim_of_it_is_bound() {
        let mut cache = setup();
        pod(&mut cache, "e", &[]);
        cache.assume("e", crate::cache::Assumption::Bind(Arc::from("n1")));
        let mut p = Provisioning::default();
        let binds = vec![bind("a", "n1"), bind("b", "n2"), bind("c", "n2")];
        let (send, patches, conflicts) = p.hold(&cache, binds, 0);
        assert!(send.is_empty(), "the whole gang is held, c included");
        assert!(conflicts.is_empty());
        assert_eq!(
            patches
                .iter()
                .map(|c| (c.claim.as_str(), c.node.as_deref()))
                .collect::<Vec<_>>(),
            [("ns/data-a", Some("n1")), ("ns/data-b", Some("n2"))]
        );
        let mut objects = VolumeObjects::default();
        assert_eq!(p.review(&objects, &cache, 1000), Review::default());
        bound(&mut objects, "data-a");
        assert_eq!(
            p.review(&objects, &cache, 2000),
            Review::default(),
            "one claim of two: nothing binds"
        );
        bound(&mut objects, "data-b");
        // A member placed in a later cycle, without claims of its own, waits with them.
        let (send, patches, _) = p.hold(&cache, vec![bind("e", "n1")], 2500);
        assert!(send.is_empty() && patches.is_empty());
        let review = p.review(&objects, &cache, 3000);
        assert_eq!(review.ready.len(), 4);
        assert!(review.called_off.is_empty());
        assert!(!p.holds("ns/g"));
    }

    #[test]
    fn a_gang_whose_claim_is_not_bound_in_time_is_called_off_and_its_claims_cleared() {
        let cache = setup();
        let mut p = Provisioning {
            timeout: Duration::from_secs(5),
            ..Default::default()
        };
        p.hold(&cache, vec![bind("a", "n1"), bind("b", "n2")], 0);
        let mut objects = VolumeObjects::default();
        bound(&mut objects, "data-a");
        assert_eq!(p.review(&objects, &cache, 4_000), Review::default());
        let review = p.review(&objects, &cache, 5_000);
        assert!(review.ready.is_empty());
        let off = &review.called_off[0];
        assert_eq!(off.binds.len(), 2, "both binds dropped");
        assert_eq!(
            off.clear,
            [ClaimPatch {
                gang: "ns/g".into(),
                claim: "ns/data-b".into(),
                node: None
            }],
            "only the unbound claim is cleared"
        );
        assert!(
            off.message
                .contains("persistentvolumeclaim ns/data-b (for node n2) not bound within 5s"),
            "{}",
            off.message
        );
    }

    #[test]
    fn a_gang_called_off_backs_off_longer_each_time_in_a_row() {
        let cache = setup();
        let mut p = Provisioning::default();
        let off = CalledOff {
            gang: "ns/g".into(),
            binds: vec![bind("a", "n1")],
            clear: vec![],
            message: "volume binding of the gang called off: x".into(),
        };
        assert!(p.back_off(&off, 0).ends_with("; retrying in 5s"));
        assert!(p.backing_off("a").is_some());
        assert!(p.backoffs_over(4_999).is_empty());
        assert_eq!(p.backoffs_over(5_000), ["a"]);
        assert!(p.backing_off("a").is_none());
        assert!(p.back_off(&off, 0).ends_with("retrying in 10s"));
        // Bound at last: the next call-off starts afresh.
        p.hold(&cache, vec![bind("c", "n2")], 0);
        p.gangs.insert(
            "ns/g".into(),
            Waiting {
                binds: vec![bind("c", "n2")],
                claims: BTreeMap::new(),
                since: 0,
                failed: None,
            },
        );
        assert_eq!(
            p.review(&VolumeObjects::default(), &cache, 1).ready.len(),
            1
        );
        assert!(p.back_off(&off, 0).ends_with("retrying in 5s"));
        // A deleted gang leaves no count behind.
        p.forget("ns/g");
        assert!(p.failures.is_empty());
    }

    #[test]
    fn a_refused_annotation_calls_the_gang_off() {
        let cache = setup();
        let mut p = Provisioning::default();
        p.hold(&cache, vec![bind("a", "n1")], 0);
        p.fail("ns/g", "persistentvolumeclaim ns/data-a not found".into());
        let review = p.review(&VolumeObjects::default(), &cache, 1);
        assert!(review.called_off[0].message.contains("data-a not found"));
    }

    #[test]
    fn a_claim_shared_across_two_nodes_cannot_be_provisioned() {
        let mut cache = setup();
        pod(&mut cache, "d", &["data-a"]);
        cache.assume("d", crate::cache::Assumption::Bind(Arc::from("n2")));
        let mut p = Provisioning::default();
        let (send, patches, conflicts) = p.hold(&cache, vec![bind("a", "n1"), bind("d", "n2")], 0);
        assert!(send.is_empty() && patches.is_empty());
        assert!(conflicts[0].message.contains("two nodes (n1 and n2)"));
        assert!(!p.holds("ns/g"));
    }
}
