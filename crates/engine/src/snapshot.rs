//! The cluster as a session starts from it: the cache hands out one of these per cycle and
//! a session works on its own copy-on-write view of it. Below the framework so the cache
//! depends on this type only.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

mod slots;
mod tally;
pub use slots::Slots;
pub use tally::{JobSet, QueueSums, Tally};

use crate::model::{
    JobId, JobInfo, NodeId, NodeInfo, QueueInfo, Resource, TaskInfo, TaskRef, Topology,
    TopologyLevel,
};

/// The cluster as a session sees it. A snapshot from the cache is one of these; cloning it
/// is O(1) (an `Arc` clone per field).
#[derive(Clone, Default)]
pub struct ClusterState {
    pub(crate) nodes: Slots<NodeInfo>,
    pub(crate) node_ids: Arc<HashMap<Arc<str>, NodeId>>,
    pub(crate) jobs: Slots<JobInfo>,
    pub(crate) job_ids: Arc<HashMap<Arc<str>, JobId>>,
    pub(crate) queues: Arc<BTreeMap<Arc<str>, Arc<QueueInfo>>>,
    /// PodDisruptionBudgets (`namespace/name`) and how many more pods each lets go.
    pub(crate) budgets: Arc<BTreeMap<Arc<str>, u32>>,
    /// The topology Volcano HyperNodes describe (empty without any).
    pub(crate) hypernodes: Arc<Topology>,
    /// Labels of the namespaces the driver knows (namespaceSelector of pod affinity terms).
    pub(crate) namespaces: Arc<BTreeMap<Arc<str>, crate::model::pod_rules::Labels>>,
    /// Topology levels from node labels, built on first use and shared by every snapshot
    /// until a node is added or deleted or its labels change (the cache starts a new one):
    /// building one reads every node's labels, and sessions on a cluster whose nodes only
    /// gain and lose pods would otherwise pay that every cycle.
    pub(crate) label_levels: Arc<LabelLevels>,
    /// Changes whenever a node is added or deleted or its spec changes, never to a value
    /// another cache or an earlier state had (see `node_specs_version`).
    pub(crate) node_specs: u64,
    /// Sums over the gangs and nodes above, kept as they change (see `Tally`).
    tally: Arc<Tally>,
    /// DeviceClasses, with their compiled selectors (DRA; see `model::devices`).
    pub(crate) device_classes: Arc<crate::model::devices::selectors::DeviceCatalog>,
    /// Shared claims a session placed and the API does not record as allocated yet: where
    /// their devices are, and how many placed pods use them (the other pods of the claim
    /// must go to the same node).
    pub(crate) claims_placed: Arc<crate::model::devices::ClaimsPlaced>,
}

/// The most label levels kept (each is a domain per node): past it, they are built again.
const LABEL_LEVELS_KEPT: usize = 64;

/// Label topology levels by label key (see `ClusterState::label_level`).
#[derive(Default)]
pub struct LabelLevels(Mutex<HashMap<String, Arc<TopologyLevel>>>);

impl ClusterState {
    pub fn device_classes(&self) -> &crate::model::devices::selectors::DeviceCatalog {
        &self.device_classes
    }

    pub fn claims_placed(&self) -> &crate::model::devices::ClaimsPlaced {
        &self.claims_placed
    }

    pub fn node(&self, id: NodeId) -> &NodeInfo {
        self.nodes
            .get(id.0 as usize)
            .expect("NodeId of a live slot")
    }

    pub fn node_slots(&self) -> usize {
        self.nodes.len()
    }

    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &NodeInfo)> + Clone {
        self.nodes.iter().map(|(i, n)| (NodeId(i as u32), &**n))
    }

    /// How many live nodes (each has its name in the index): without a pass over the slots.
    pub fn node_count(&self) -> usize {
        self.node_ids.len()
    }

    /// How many live gangs (each has its uid in the index): without a pass over the slots.
    pub fn job_count(&self) -> usize {
        self.job_ids.len()
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.node_ids.get(name).copied()
    }

    /// Every live node's id by name, shared: a plugin that looks nodes up by name keeps
    /// this rather than building its own index of every node each session.
    pub fn node_index(&self) -> Arc<HashMap<Arc<str>, NodeId>> {
        self.node_ids.clone()
    }

    /// A version of every node's spec (name, labels, taints, readiness, allocatable) and of
    /// the set of nodes, unique across caches: answers that depend on nothing else (which
    /// nodes a placement's static predicates pass) stay valid while it does.
    pub fn node_specs_version(&self) -> u64 {
        self.node_specs
    }

    /// The topology level of node label `key` (a node without the label is in no domain
    /// of it), built once for as long as the nodes' labels stay as they are.
    pub fn label_level(&self, key: &str) -> Arc<TopologyLevel> {
        let mut memo = self
            .label_levels
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(level) = memo.get(key) {
            return level.clone();
        }
        let mut built = Topology::from_labels(&[key.to_string()], self.nodes(), self.node_slots());
        let level = Arc::new(built.levels.remove(0));
        // Gangs name label keys of their own (Kueue-style topology requests): bounded, so
        // keys users invent cannot grow it while the nodes stay as they are.
        if memo.len() >= LABEL_LEVELS_KEPT {
            memo.clear();
        }
        memo.insert(key.to_string(), level.clone());
        level
    }

    pub fn job(&self, id: JobId) -> &JobInfo {
        self.jobs.get(id.0 as usize).expect("JobId of a live slot")
    }

    pub fn jobs(&self) -> impl Iterator<Item = (JobId, &JobInfo)> {
        self.jobs.iter().map(|(i, j)| (JobId(i as u32), &**j))
    }

    pub fn job_by_uid(&self, uid: &str) -> Option<JobId> {
        self.job_ids.get(uid).copied()
    }

    pub fn task(&self, r: TaskRef) -> &TaskInfo {
        self.job(r.job).task(r.index)
    }

    pub fn queue(&self, name: &str) -> Option<&QueueInfo> {
        self.queues.get(name).map(|q| &**q)
    }

    pub fn queues(&self) -> impl Iterator<Item = &QueueInfo> {
        self.queues.values().map(|q| &**q)
    }

    /// The nested domains HyperNode objects describe, resolved against the nodes (empty
    /// when there are none), with what was wrong with them.
    pub fn hypernodes(&self) -> &Topology {
        &self.hypernodes
    }

    /// The topology as shared between snapshots: the same `Arc` until HyperNodes change,
    /// so a driver can tell "changed since I last looked" by pointer.
    pub fn hypernodes_shared(&self) -> &Arc<Topology> {
        &self.hypernodes
    }

    /// Every job slot as shared between snapshots (cloning is O(1); unchanged jobs stay
    /// the same `Arc`), for a driver that compares one cycle's jobs with the last.
    pub fn job_slots(&self) -> &Slots<JobInfo> {
        &self.jobs
    }

    /// How many more pods a PodDisruptionBudget lets go, as the cluster last said (None:
    /// no such budget).
    pub fn disruptions_allowed(&self, budget: &str) -> Option<u32> {
        self.budgets.get(budget).copied()
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&crate::model::pod_rules::Labels> {
        self.namespaces.get(namespace)
    }

    /// Which pod-relative rules the cluster's pods carry, so that plugins register votes
    /// for them only where there is something to check.
    pub fn pod_rules_in_use(&self) -> PodRulesInUse {
        let mut used = PodRulesInUse::default();
        // Only gangs with pending members: a running cluster's tasks are not read.
        for job in self.tally.pending().iter().map(|id| self.job(id)) {
            for t in job.tasks() {
                if t.status == crate::model::TaskStatus::Pending {
                    used.pending_rules |= t.placement.rules().is_some();
                    used.pending_host_ports |= !t.placement.host_ports.is_empty();
                    used.preferred_node_affinity |= !t.placement.preferred_node_affinity.is_empty();
                }
            }
        }
        used.existing_anti_affinity = self.tally.any_anti_affinity();
        used
    }

    /// A node to change; the tally follows when the change is done.
    pub(crate) fn node_mut(&mut self, id: NodeId) -> Changing<'_, NodeInfo> {
        let slot = self.nodes.slot_mut(id.0 as usize);
        let node = Arc::make_mut(slot.as_mut().expect("NodeId of a live slot"));
        let tally = Arc::make_mut(&mut self.tally);
        tally.remove_node(node);
        Changing {
            value: node,
            slot: id.0,
            tally,
        }
    }

    /// A gang to change; the tally follows when the change is done.
    pub(crate) fn job_mut(&mut self, id: JobId) -> Changing<'_, JobInfo> {
        let slot = self.jobs.slot_mut(id.0 as usize);
        let job = Arc::make_mut(slot.as_mut().expect("JobId of a live slot"));
        let tally = Arc::make_mut(&mut self.tally);
        tally.remove_job(id, job);
        Changing {
            value: job,
            slot: id.0,
            tally,
        }
    }

    /// Puts a node in a free slot (or a new one).
    pub(crate) fn insert_node(&mut self, free: &mut Vec<u32>, node: NodeInfo) -> NodeId {
        Arc::make_mut(&mut self.tally).add_node(&node);
        NodeId(insert_slot(&mut self.nodes, free, node))
    }

    /// Empties a node's slot (the caller keeps it for reuse).
    pub(crate) fn remove_node(&mut self, id: NodeId) {
        let slot = self.nodes.slot_mut(id.0 as usize);
        if let Some(node) = slot.take() {
            Arc::make_mut(&mut self.tally).remove_node(&node);
        }
    }

    /// Puts a gang in a free slot (or a new one).
    pub(crate) fn insert_job(&mut self, free: &mut Vec<u32>, job: JobInfo) -> JobId {
        Arc::make_mut(&mut self.tally).add_job(JobId(insert_slot_index(&self.jobs, free)), &job);
        JobId(insert_slot(&mut self.jobs, free, job))
    }

    /// Empties a gang's slot (the caller keeps it for reuse).
    pub(crate) fn remove_job(&mut self, id: JobId) {
        let slot = self.jobs.slot_mut(id.0 as usize);
        if let Some(job) = slot.take() {
            Arc::make_mut(&mut self.tally).remove_job(id, &job);
        }
    }

    /// Sums over the gangs and nodes (see `Tally`).
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Panics if the tally kept differs from one summed afresh: a change that bypassed
    /// `job_mut`/`node_mut`. Debug builds check it as every session opens.
    pub fn check_tally(&self) {
        let fresh = Tally::of(self.jobs(), self.nodes().map(|(_, n)| n));
        assert_eq!(*self.tally, fresh, "the kept tally drifted from the state");
        assert_eq!(
            self.node_count(),
            self.nodes().count(),
            "a node not indexed"
        );
        assert_eq!(self.job_count(), self.jobs().count(), "a gang not indexed");
    }

    /// Total allocatable of schedulable nodes.
    pub fn total_allocatable(&self) -> Resource {
        self.tally.schedulable_allocatable().clone()
    }

    /// How many devices of the schedulable nodes each DeviceClass selects, as the resource
    /// `deviceclass/<class>` (milli-units: the cluster's side of a queue's device quota,
    /// which proportion shares and capacity lends). A device several classes select counts
    /// for each; an inventory that cannot be used, or a class whose selectors fail on it,
    /// counts none. Empty without DeviceClasses.
    pub fn device_class_totals(&self) -> Resource {
        use crate::model::devices::{DeviceChoice, DEVICE_CLASS_PREFIX};
        let catalog = &*self.device_classes;
        let mut totals = Resource::new();
        if catalog.classes().is_empty() {
            return totals;
        }
        let choices: Vec<(String, DeviceChoice)> = catalog
            .classes()
            .keys()
            .map(|class| {
                let choice = DeviceChoice {
                    device_class_name: class.clone(),
                    ..DeviceChoice::default()
                };
                (format!("{DEVICE_CLASS_PREFIX}{class}"), choice)
            })
            .collect();
        let mut counts = vec![0i64; choices.len()];
        for (_, node) in self.nodes() {
            let Some(inv) = node.devices.as_deref() else {
                continue;
            };
            if !node.schedulable() || inv.problem.is_some() {
                continue;
            }
            for (i, (_, choice)) in choices.iter().enumerate() {
                if let Ok(found) = catalog.matching(choice, inv) {
                    counts[i] += found.len() as i64;
                }
            }
        }
        for ((name, _), n) in choices.iter().zip(counts) {
            totals.set_scalar(name, n * 1000);
        }
        totals
    }
}

/// An object of the state being changed (`ClusterState::job_mut`, `node_mut`): what it adds
/// to the tally was taken out when the change began and is put back, as it is now, when the
/// change is done (dropped).
pub(crate) struct Changing<'a, T: Tallied> {
    value: &'a mut T,
    slot: u32,
    tally: &'a mut Tally,
}

/// What the tally sums over.
pub(crate) trait Tallied {
    fn add_to(&self, slot: u32, tally: &mut Tally);
}

impl Tallied for JobInfo {
    fn add_to(&self, slot: u32, tally: &mut Tally) {
        tally.add_job(JobId(slot), self);
    }
}

impl Tallied for NodeInfo {
    fn add_to(&self, _: u32, tally: &mut Tally) {
        tally.add_node(self);
    }
}

impl<T: Tallied> Deref for Changing<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T: Tallied> DerefMut for Changing<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
    }
}

impl<T: Tallied> Drop for Changing<'_, T> {
    fn drop(&mut self) {
        self.value.add_to(self.slot, self.tally);
    }
}

/// The slot `insert_slot` will use.
fn insert_slot_index<T>(slots: &Slots<T>, free: &[u32]) -> u32 {
    free.last().copied().unwrap_or(slots.len() as u32)
}

fn insert_slot<T>(slots: &mut Slots<T>, free: &mut Vec<u32>, value: T) -> u32 {
    match free.pop() {
        Some(i) => {
            *slots.slot_mut(i as usize) = Some(Arc::new(value));
            i
        }
        None => slots.push(Some(Arc::new(value))) as u32,
    }
}

/// See `ClusterState::pod_rules_in_use`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodRulesInUse {
    /// A pending pod has inter-pod affinity, anti-affinity or spread rules.
    pub pending_rules: bool,
    pub pending_host_ports: bool,
    pub preferred_node_affinity: bool,
    /// A pod on a node has required anti-affinity (which pods placed later must respect).
    pub existing_anti_affinity: bool,
}

impl PodRulesInUse {
    /// Whether a pod vote has anything to check.
    pub fn pod_relative(&self) -> bool {
        self.pending_rules || self.existing_anti_affinity
    }
}

/// A snapshot of the cache: the state a session starts from.
pub type Snapshot = ClusterState;

#[cfg(test)]
mod tests {
    use crate::model::pod_rules::PodRules;
    use crate::model::{Placement, TaskStatus};
    use crate::testkit::*;

    fn anti_affinity() -> Placement {
        let rules: PodRules = crate::yaml::from_str(
            "podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}",
        )
        .unwrap();
        Placement {
            pod_rules: Some(Box::new(rules)),
            ..Default::default()
        }
    }

    #[test]
    fn existing_anti_affinity_is_counted_per_node_as_pods_come_change_and_go() {
        let mut cache = cache_with_default_queue();
        cache.apply_node(node("n1", &[("cpu", "8")]));
        let used = |c: &crate::cache::Cache| c.state().pod_rules_in_use().existing_anti_affinity;
        foreign_pod_with(&mut cache, "plain", "n1", &[], Placement::default());
        assert!(!used(&cache));
        foreign_pod_with(&mut cache, "loner", "n1", &[("app", "db")], anti_affinity());
        assert!(used(&cache));
        // Reported again (replaced), and terminating: still on the node.
        foreign_pod_with(&mut cache, "loner", "n1", &[("app", "db")], anti_affinity());
        cache.set_pod_status("loner", TaskStatus::Releasing, Some("n1".into()));
        let n = cache
            .state()
            .node(cache.state().node_by_name("n1").unwrap());
        assert_eq!(n.anti_affinity_tasks, 1, "counted once");
        cache.delete_pod("loner");
        assert!(!used(&cache), "gone with its pod");
        let n = cache
            .state()
            .node(cache.state().node_by_name("n1").unwrap());
        assert_eq!(n.anti_affinity_tasks, 0);
    }

    #[test]
    fn label_levels_kept_stay_bounded_whatever_keys_gangs_name() {
        let mut cache = crate::cache::Cache::new();
        let labels = (0..100).map(|i| (format!("k{i}"), format!("v{}", i % 3)));
        cache.apply_node(crate::model::NodeSpec {
            labels: labels.collect(),
            ..crate::testkit::node("n1", &[("cpu", "4")])
        });
        let s = cache.snapshot();
        for i in 0..100 {
            let level = s.label_level(&format!("k{i}"));
            assert_eq!(&*level.domains[0].name, format!("v{}", i % 3));
        }
        let kept = s.label_levels.0.lock().unwrap().len();
        assert!(kept <= super::LABEL_LEVELS_KEPT, "{kept} levels kept");
    }

    #[test]
    fn the_kept_tally_follows_gangs_nodes_and_sessions_and_never_drifts() {
        use crate::model::PodGroupPhase;
        let mut cache = cache_with_default_queue();
        let names = add_nodes(&mut cache, "n", 3, &[("cpu", "4"), ("memory", "8Gi")]);
        let sums = |c: &crate::cache::Cache| {
            c.state().check_tally();
            let t = c.state().tally();
            let q = t
                .queues()
                .find(|(n, _)| &***n == "default")
                .map(|(_, s)| s.clone());
            (q.unwrap_or_default(), t.schedulable_used().milli_cpu)
        };
        assert_eq!(cache.state().total_allocatable().milli_cpu, 12_000);
        // An admitted gang of 2 waits: its minimum counts as in queue and waiting.
        let a = Gang::new("a", 2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("w", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let (q, used) = sums(&cache);
        assert_eq!(
            (q.gangs(), q.request.milli_cpu, q.inqueue.milli_cpu),
            (1, 2000, 2000)
        );
        assert_eq!(q.phases[PodGroupPhase::Inqueue.index()], 1);
        assert_eq!(
            (q.waiting.milli_cpu, q.allocated.milli_cpu, used),
            (2000, 0, 0)
        );
        assert_eq!(cache.state().tally().pending().iter().count(), 1);
        assert_eq!(cache.state().tally().unadmitted().iter().count(), 0);
        // A session binds it: its own state's tally follows the session's changes.
        let result = run_cycle(&cache, None);
        assert_eq!(result.binds.len(), 2);
        apply_result(&mut cache, &result);
        let (q, used) = sums(&cache);
        assert_eq!(
            (q.allocated.milli_cpu, used, q.waiting.milli_cpu),
            (2000, 2000, 0)
        );
        assert_eq!(cache.state().tally().pending().iter().count(), 0);
        // Its members run: it is Running, no longer counted as in queue.
        for t in cache
            .state()
            .job(cache.state().job_by_uid(&a).unwrap())
            .tasks()
            .to_vec()
        {
            cache.set_pod_status(
                &t.uid,
                TaskStatus::Running,
                t.node.as_deref().map(Into::into),
            );
        }
        cache.set_job_phase(&a, PodGroupPhase::Running);
        let (q, _) = sums(&cache);
        assert_eq!(q.inqueue.milli_cpu, 0);
        assert_eq!(q.phases, [0, 0, 1, 0, 0], "counted in its new phase only");
        // A node cordoned leaves the schedulable sums; deleting the gang empties the queue.
        cache.apply_node(crate::model::NodeSpec {
            unschedulable: true,
            ..node(&names[0], &[("cpu", "4"), ("memory", "8Gi")])
        });
        assert_eq!(cache.state().total_allocatable().milli_cpu, 8_000);
        cache.delete_job(&a);
        let (q, _) = sums(&cache);
        assert_eq!(
            q,
            crate::snapshot::QueueSums::default(),
            "no gang names the queue"
        );
        cache.delete_node(&names[1]);
        assert_eq!(cache.state().total_allocatable().milli_cpu, 4_000);
        sums(&cache);
    }
}
