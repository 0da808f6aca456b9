//! Where pods are, found by their labels: what inter-pod affinity, anti-affinity and
//! topology spread need to know, without scanning every pod for every candidate node.
//!
//! Built on first use in a session (sessions whose pods carry no such rules never build
//! it) from every pod on a node, whichever scheduler placed it, and kept up to date by
//! `Session::move_task`, so pods placed earlier in the same session (a gang's own members
//! included) count like running ones. Releasing pods do not count: they are leaving.

use std::cell::{Ref, RefCell};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::Arc;

use super::pod_fit::{CountedNodes, PodFit};
use crate::model::pod_rules::{Labels, PodAffinityTerm, TopologySpreadConstraint};
use crate::model::{NodeId, NodeTask, Placement, TaskInfo, TaskStatus};
use crate::snapshot::ClusterState;

/// A pod counted by the index.
pub struct IndexedPod {
    pub node: NodeId,
    pub namespace: Arc<str>,
    pub labels: Arc<Labels>,
    pub placement: Arc<Placement>,
}

/// Per node slot, the value of one topology key as a dense domain number.
pub struct Domains {
    pub of_node: Vec<Option<u32>>,
    pub names: Vec<String>,
}

impl Domains {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn of(&self, node: NodeId) -> Option<u32> {
        self.of_node.get(node.0 as usize).copied().flatten()
    }
}

#[derive(Default)]
struct Index {
    pods: Vec<Option<IndexedPod>>,
    free: Vec<u32>,
    slot_of: HashMap<Arc<str>, u32>,
    /// Per `key=value` hash, the slots of pods carrying that label (in insertion order, so
    /// the rollback of a recent placement finds its pod near the end).
    by_pair: HashMap<u64, Vec<u32>>,
    /// Slots of pods with required anti-affinity, per the pair their term requires (or
    /// under `UNINDEXED`): the pods whose rules an incoming pod must respect.
    anti_by_pair: HashMap<u64, Vec<u32>>,
    domains: HashMap<String, Arc<Domains>>,
    /// Pods with required anti-affinity terms.
    anti_pods: usize,
    version: u64,
}

const UNINDEXED: u64 = 0;

fn pair_hash(key: &str, value: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (key, value).hash(&mut h);
    h.finish().max(1)
}

fn counts(status: TaskStatus) -> bool {
    (status.occupies_node() || status == TaskStatus::Pipelined) && status != TaskStatus::Releasing
}

fn remove_from(list: &mut HashMap<u64, Vec<u32>>, key: u64, slot: u32) {
    if let Some(v) = list.get_mut(&key) {
        if let Some(at) = v.iter().rposition(|s| *s == slot) {
            v.remove(at);
        }
    }
}

impl Index {
    fn anti_keys(placement: &Placement) -> Vec<u64> {
        let Some(rules) = placement.rules() else {
            return Vec::new();
        };
        let mut keys: Vec<u64> = rules
            .pod_anti_affinity
            .required()
            .iter()
            .map(|t| {
                t.label_selector
                    .as_ref()
                    .and_then(|s| s.required_pair())
                    .map_or(UNINDEXED, |(k, v)| pair_hash(k, v))
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    fn insert(&mut self, uid: Arc<str>, node: NodeId, t: &NodeTask) {
        self.remove(&uid);
        let pod = IndexedPod {
            node,
            namespace: t.namespace.clone(),
            labels: t.labels.clone(),
            placement: t.placement.clone(),
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pods.push(None);
                (self.pods.len() - 1) as u32
            }
        };
        for (k, v) in pod.labels.iter() {
            self.by_pair.entry(pair_hash(k, v)).or_default().push(slot);
        }
        let keys = Self::anti_keys(&pod.placement);
        self.anti_pods += usize::from(!keys.is_empty());
        for key in keys {
            self.anti_by_pair.entry(key).or_default().push(slot);
        }
        self.pods[slot as usize] = Some(pod);
        self.slot_of.insert(uid, slot);
        self.version += 1;
    }

    fn remove(&mut self, uid: &str) {
        let Some(slot) = self.slot_of.remove(uid) else {
            return;
        };
        let pod = self.pods[slot as usize].take().expect("indexed slot");
        for (k, v) in pod.labels.iter() {
            remove_from(&mut self.by_pair, pair_hash(k, v), slot);
        }
        let keys = Self::anti_keys(&pod.placement);
        self.anti_pods -= usize::from(!keys.is_empty());
        for key in keys {
            remove_from(&mut self.anti_by_pair, key, slot);
        }
        self.free.push(slot);
        self.version += 1;
    }
}

/// Per task uid, its rules worked out at an index version.
type FitMemo = HashMap<Arc<str>, (u64, Rc<PodFit>)>;

/// Per placement (static key), topology key and the two node inclusion policies: the
/// nodes a spread constraint counts.
type CountedKey = (u64, String, bool, bool);

/// A task's uid (kept, so the pointer stays unique), index version, fit.
type LastFit = (Arc<str>, u64, Rc<PodFit>);

/// The session's index (see the module comment).
#[derive(Default)]
pub struct PodIndex {
    index: RefCell<Option<Index>>,
    fits: RefCell<FitMemo>,
    counted: RefCell<HashMap<CountedKey, Rc<CountedNodes>>>,
    /// The last answer of `PodView::fit`.
    last_fit: RefCell<Option<LastFit>>,
}

/// Beyond this many remembered fits, the memo starts afresh (entries of old versions are
/// dead weight).
const FITS_KEPT: usize = 4096;

impl PodIndex {
    fn built(&self, state: &ClusterState) -> Ref<'_, Index> {
        if self.index.borrow().is_none() {
            let mut index = Index::default();
            for (id, node) in state.nodes() {
                for (uid, t) in &node.tasks {
                    if counts(t.status) {
                        index.insert(uid.clone(), id, t);
                    }
                }
            }
            *self.index.borrow_mut() = Some(index);
        }
        Ref::map(self.index.borrow(), |i| i.as_ref().expect("built above"))
    }

    /// Records that a pod is now `task` on `node` (None: on no node). Only an index that
    /// was built is kept up to date; one built later reads the state as it is then.
    pub(super) fn moved(&self, uid: &Arc<str>, node: Option<(NodeId, &NodeTask)>) {
        let mut guard = self.index.borrow_mut();
        let Some(index) = guard.as_mut() else {
            return;
        };
        match node {
            Some((id, t)) if counts(t.status) => index.insert(uid.clone(), id, t),
            _ => index.remove(uid),
        }
    }
}

/// What pod votes read: the index and the cluster it indexes.
pub struct PodView<'a> {
    pub(super) index: &'a PodIndex,
    pub(super) state: &'a ClusterState,
}

impl PodView<'_> {
    pub fn state(&self) -> &ClusterState {
        self.state
    }

    /// Changes with every pod placed or taken off a node: answers derived from the index
    /// hold while it stays the same.
    pub fn version(&self) -> u64 {
        self.index.built(self.state).version
    }

    /// The domains of a topology key: each node's value of the label, numbered.
    pub fn domains(&self, key: &str) -> Arc<Domains> {
        if let Some(d) = self.index.built(self.state).domains.get(key) {
            return d.clone();
        }
        let mut numbers: HashMap<&str, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut of_node = vec![None; self.state.node_slots()];
        for (id, node) in self.state.nodes() {
            if let Some(v) = node.labels.get(key) {
                let n = *numbers.entry(v.as_str()).or_insert_with(|| {
                    names.push(v.clone());
                    (names.len() - 1) as u32
                });
                of_node[id.0 as usize] = Some(n);
            }
        }
        let d = Arc::new(Domains { of_node, names });
        self.index
            .index
            .borrow_mut()
            .as_mut()
            .expect("built above")
            .domains
            .insert(key.to_string(), d.clone());
        d
    }

    /// The nodes spread constraint `c` of `t` counts (see `CountedNodes`), worked out once
    /// per session for each placement and constraint.
    pub fn counted_nodes(&self, t: &TaskInfo, c: &TopologySpreadConstraint) -> Rc<CountedNodes> {
        let key = (
            t.placement_key,
            c.topology_key.clone(),
            c.honours_node_affinity(),
            c.honours_taints(),
        );
        if let Some(counted) = self.index.counted.borrow().get(&key) {
            return counted.clone();
        }
        let counted = Rc::new(CountedNodes::new(self, t, c));
        self.index.counted.borrow_mut().insert(key, counted.clone());
        counted
    }

    /// The labels of a namespace, as far as the scheduler knows them (at least
    /// `kubernetes.io/metadata.name`, which the API server sets on every namespace).
    pub fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        let mut labels = self
            .state
            .namespace_labels(namespace)
            .cloned()
            .unwrap_or_default();
        labels.insert("kubernetes.io/metadata.name".into(), namespace.into());
        Some(labels)
    }

    /// Calls `f` with the node of every counted pod the term (owned by a pod in
    /// `owner_namespace`) selects.
    pub fn for_each_selected(
        &self,
        owner_namespace: &str,
        term: &PodAffinityTerm,
        mut f: impl FnMut(NodeId, &IndexedPod),
    ) {
        let Some(selector) = &term.label_selector else {
            return;
        };
        let index = self.index.built(self.state);
        let mut visit = |pod: &IndexedPod| {
            if selector.matches(&pod.labels)
                && term.selects_namespace(owner_namespace, &pod.namespace, |n| {
                    self.namespace_labels(n)
                })
            {
                f(pod.node, pod);
            }
        };
        match selector.required_pair() {
            Some((k, v)) => {
                for slot in index.by_pair.get(&pair_hash(k, v)).into_iter().flatten() {
                    visit(index.pods[*slot as usize].as_ref().expect("live slot"));
                }
            }
            None => {
                for pod in index.pods.iter().flatten() {
                    visit(pod);
                }
            }
        }
    }

    /// Calls `f` with every required anti-affinity term of a counted pod that selects a
    /// pod in `namespace` with `labels`, and the node of the term's owner.
    pub fn for_each_anti_term_selecting(
        &self,
        namespace: &str,
        labels: &Labels,
        mut f: impl FnMut(&PodAffinityTerm, NodeId),
    ) {
        let index = self.index.built(self.state);
        if index.anti_pods == 0 {
            return;
        }
        let mut keys: Vec<u64> = labels.iter().map(|(k, v)| pair_hash(k, v)).collect();
        keys.push(UNINDEXED);
        let mut seen: Vec<u32> = Vec::new();
        for key in keys {
            for &slot in index.anti_by_pair.get(&key).into_iter().flatten() {
                if seen.contains(&slot) {
                    continue;
                }
                seen.push(slot);
                let owner = index.pods[slot as usize].as_ref().expect("live slot");
                let Some(rules) = owner.placement.rules() else {
                    continue;
                };
                for term in rules.pod_anti_affinity.required() {
                    if term.selects(&owner.namespace, namespace, labels, |n| {
                        self.namespace_labels(n)
                    }) {
                        f(term, owner.node);
                    }
                }
            }
        }
    }

    /// The task's rules against where pods are now, worked out once per index version.
    /// None when there is nothing to check: the task has no rules and no counted pod has
    /// required anti-affinity.
    pub fn fit(&self, t: &TaskInfo) -> Option<Rc<PodFit>> {
        let version = {
            let index = self.index.built(self.state);
            if t.placement.rules().is_none() && index.anti_pods == 0 {
                return None;
            }
            index.version
        };
        // A node scan asks for one task's fit node after node: the last answer is checked
        // first, by pointer, sparing a hash of the uid per node.
        if let Some((uid, v, fit)) = &*self.index.last_fit.borrow() {
            if *v == version && Arc::ptr_eq(uid, &t.uid) {
                return (!fit.empty).then(|| fit.clone());
            }
        }
        let cached = match self.index.fits.borrow().get(&t.uid) {
            Some((v, fit)) if *v == version => Some(fit.clone()),
            _ => None,
        };
        let fit = match cached {
            Some(fit) => fit,
            None => {
                let fit = Rc::new(PodFit::new(self, t));
                let mut fits = self.index.fits.borrow_mut();
                if fits.len() >= FITS_KEPT {
                    fits.clear();
                }
                fits.insert(t.uid.clone(), (version, fit.clone()));
                fit
            }
        };
        *self.index.last_fit.borrow_mut() = Some((t.uid.clone(), version, fit.clone()));
        (!fit.empty).then_some(fit)
    }

    /// Whether any counted pod's required anti-affinity selects a pod in `namespace` with
    /// `labels` (such a pod's room depends on its labels, not only on its template).
    pub fn anti_affinity_selects(&self, namespace: &str, labels: &Labels) -> bool {
        let mut any = false;
        self.for_each_anti_term_selecting(namespace, labels, |_, _| any = true);
        any
    }
}
