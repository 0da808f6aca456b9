//! The scheduler's cache: every node, pod, gang and queue a driver has seen, kept as the
//! engine model and fed by `apply`/`delete`/`reset` calls (one watch per kind in the live
//! driver, scenario events in the simulator).
//!
//! How a snapshot stays cheap: nodes and jobs live in slot vectors of `Arc`s
//! (`Arc<Vec<Option<Arc<T>>>>`). A snapshot clones the outer `Arc`s only, so taking one is
//! O(1) whatever the cluster size. An update calls `Arc::make_mut` on the slot vector and
//! on the one object it changes: while no session holds the previous snapshot that is an
//! in-place write; while one does, the vector of pointers is copied once (not the objects)
//! and only the changed node or job is cloned. Sessions change their copy the same way, so
//! a cycle that touches k nodes clones k nodes, not the cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use crate::model::devices::TaskClaim;
use crate::model::{
    GangRuntime, HeldBack, Hold, HyperNodeSpec, JobId, JobInfo, JobSpec, NodeId, NodeInfo,
    NodeSpec, NodeTask, PodGroupPhase, QueueInfo, TaskInfo, TaskStatus, Topology,
};
use crate::snapshot::{ClusterState, Snapshot};

/// A pod as a driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodUpdate {
    /// The pod as a task: its uid, request, status and node.
    pub task: TaskInfo,
    /// The gang (job uid, `namespace/name`) this pod belongs to, if it is ours.
    pub job: Option<String>,
}

#[derive(Clone, Debug)]
struct PodRecord {
    /// The pod as the driver last reported it.
    reported: PodUpdate,
    /// The pod as the engine sees it: `reported` with the hold or assumption laid over it
    /// (see `Cache::effective`, the one place a pod's status is decided).
    update: PodUpdate,
}

/// What a driver has asked the API server to do to a pod and not yet seen happen. Until the
/// watch shows it (or the call fails), the pod is taken to be on its way: the room a bind in
/// flight takes is not handed out again, and a victim keeps its room until it is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assumption {
    /// A bind to this node was sent.
    Bind(Arc<str>),
    /// An eviction was sent.
    Evict,
}

/// The assumptions laid over pods, by pod uid, with how many are binds kept as they come and
/// go (the live driver asks after every watch event whether its binds are seen yet).
#[derive(Default)]
struct Assumptions {
    by_pod: HashMap<Arc<str>, Assumption>,
    binds: usize,
}

impl Assumptions {
    fn get(&self, uid: &str) -> Option<&Assumption> {
        self.by_pod.get(uid)
    }

    fn insert(&mut self, uid: Arc<str>, assumption: Assumption) {
        self.binds += usize::from(matches!(assumption, Assumption::Bind(_)));
        let replaced = self.by_pod.insert(uid, assumption);
        self.count_out(replaced.as_ref());
    }

    fn remove(&mut self, uid: &str) -> Option<Assumption> {
        let removed = self.by_pod.remove(uid);
        self.count_out(removed.as_ref());
        removed
    }

    fn count_out(&mut self, gone: Option<&Assumption>) {
        if let Some(Assumption::Bind(_)) = gone {
            self.binds -= 1;
        }
    }
}

/// Node spec versions are drawn from one counter for every cache, so that an answer kept
/// for one cache's nodes is never taken for another's (see `node_specs_version`).
fn next_node_specs_version() -> u64 {
    static VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[derive(Default)]
pub struct Cache {
    state: ClusterState,
    free_nodes: Vec<u32>,
    free_jobs: Vec<u32>,
    pods: HashMap<Arc<str>, PodRecord>,
    /// Pods of ours whose gang is not known (yet), by gang uid.
    orphans: WaitLists,
    /// Pods bound to nodes the cache does not know (yet), by node name.
    waiting_for_node: WaitLists,
    /// Placements NonStrict gangs hold across sessions (pod uid -> node, status), laid over
    /// the pods as drivers report them (still Pending and unbound), and by gang.
    holds: HashMap<Arc<str>, (Arc<str>, TaskStatus)>,
    holds_by_job: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Binds and evictions in flight, laid over the pods as drivers report them.
    assumed: Assumptions,
    /// Volcano HyperNodes by name, and the topology they describe, resolved against the
    /// nodes when a snapshot first needs it after either changed (matching regexes against
    /// every node name on each node event would be quadratic while a cluster comes up).
    hypernodes: BTreeMap<String, HyperNodeSpec>,
    hypernode_topology: OnceLock<Arc<Topology>>,
    /// Members drivers keep out of the engine, by gang uid: laid over the gang when it
    /// exists (its pods may come before it does).
    held_back: HashMap<Arc<str>, HeldBack>,
    /// Device inventories by node name (DRA ResourceSlices), also for nodes not known yet.
    node_devices: HashMap<Arc<str>, Arc<crate::model::devices::NodeDevices>>,
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    /// O(1): see the module comment.
    pub fn snapshot(&self) -> Snapshot {
        let mut state = self.state.clone();
        if !self.hypernodes.is_empty() {
            state.hypernodes = self
                .hypernode_topology
                .get_or_init(|| {
                    let specs: Vec<HyperNodeSpec> = self.hypernodes.values().cloned().collect();
                    let s = &self.state;
                    Arc::new(Topology::from_hypernodes(&specs, s.nodes(), s.node_slots()))
                })
                .clone();
        }
        state
    }

    /// Forgets everything (a watch restarted from scratch).
    pub fn reset(&mut self) {
        *self = Cache::default();
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    // ----- nodes ---------------------------------------------------------------------

    /// Adds or updates a node; returns whether the engine's view changed (an update that
    /// changes nothing the engine reads leaves the node, its version and the search caches
    /// keyed by it alone).
    pub fn apply_node(&mut self, spec: NodeSpec) -> bool {
        if let Some(id) = self.state.node_by_name(&spec.name) {
            let node = self.state.node(id);
            if node.has_spec(&spec) {
                return false;
            }
            if *node.labels != spec.labels {
                self.topology_changed();
            }
            self.state.node_specs = next_node_specs_version();
            self.state.node_mut(id).update_spec(spec);
            return true;
        }
        self.topology_changed();
        self.state.node_specs = next_node_specs_version();
        let mut node = NodeInfo::new(spec);
        if let Some(d) = self.node_devices.get(&node.name) {
            node.set_devices(Some(d.clone()));
        }
        let name = node.name.clone();
        let id = self.state.insert_node(&mut self.free_nodes, node).0;
        Arc::make_mut(&mut self.state.node_ids).insert(name.clone(), NodeId(id));
        for uid in self.waiting_for_node.remove(&name).unwrap_or_default() {
            if let Some(record) = self.pods.get(&uid) {
                let task = self.node_task(&record.update, &self.gang_slot(&record.update));
                self.state.node_mut(NodeId(id)).add_task(uid, task);
            }
        }
        true
    }

    /// The devices a node's ResourceSlices publish and the claims allocated on them (None:
    /// none). Kept for a node not known yet.
    pub fn apply_node_devices(
        &mut self,
        name: &str,
        devices: Option<Arc<crate::model::devices::NodeDevices>>,
    ) {
        match &devices {
            Some(d) => self.node_devices.insert(Arc::from(name), d.clone()),
            None => self.node_devices.remove(name),
        };
        if let Some(id) = self.state.node_by_name(name) {
            self.state.node_mut(id).set_devices(devices);
        }
    }

    /// The cluster's DeviceClasses: name → CEL selectors. Selectors compile again only
    /// when a class changes.
    pub fn set_device_classes(&mut self, classes: BTreeMap<String, Vec<String>>) {
        if self.state.device_classes.classes() != &classes {
            self.state.device_classes = Arc::new(
                crate::model::devices::selectors::DeviceCatalog::new(classes),
            );
        }
    }

    pub fn delete_node(&mut self, name: &str) {
        let Some(id) = self.state.node_by_name(name) else {
            return;
        };
        let node = self.state.node(id);
        let key = node.name.clone();
        let uids: BTreeSet<Arc<str>> = node.tasks.keys().cloned().collect();
        if !uids.is_empty() {
            self.waiting_for_node.insert(key.clone(), uids);
        }
        self.state.remove_node(id);
        self.state.node_specs = next_node_specs_version();
        self.free_nodes.push(id.0);
        Arc::make_mut(&mut self.state.node_ids).remove(&key);
        self.topology_changed();
    }

    // ----- network topology ------------------------------------------------------------

    /// A Volcano HyperNode, added or changed.
    pub fn apply_hypernode(&mut self, spec: HyperNodeSpec) {
        if self.hypernodes.get(&spec.name) != Some(&spec) {
            self.hypernodes.insert(spec.name.clone(), spec);
            self.topology_changed();
        }
    }

    pub fn delete_hypernode(&mut self, name: &str) {
        if self.hypernodes.remove(name).is_some() {
            self.topology_changed();
        }
    }

    pub fn hypernode_names(&self) -> impl Iterator<Item = &String> {
        self.hypernodes.keys()
    }

    /// The HyperNodes as given (a snapshot of the cluster writes them out).
    pub fn hypernode_specs(&self) -> impl Iterator<Item = &HyperNodeSpec> {
        self.hypernodes.values()
    }

    /// Nodes came or went, a node's labels or a HyperNode changed: the topologies built
    /// from them are built again when next needed.
    fn topology_changed(&mut self) {
        self.hypernode_topology = OnceLock::new();
        self.state.label_levels = Default::default();
    }

    // ----- gangs ---------------------------------------------------------------------

    /// Adds or updates a gang; returns whether the engine's view changed.
    pub fn apply_job(&mut self, spec: JobSpec) -> bool {
        if let Some(id) = self.state.job_by_uid(&spec.uid) {
            if self.state.job(id).same_spec(&spec) {
                return false;
            }
            self.state.job_mut(id).update_spec(spec);
            return true;
        }
        let mut job = JobInfo::new(spec);
        if let Some(held) = self.held_back.get(&*job.uid) {
            job.held_back = held.clone();
        }
        let uid = job.uid.clone();
        let id = self.state.insert_job(&mut self.free_jobs, job);
        Arc::make_mut(&mut self.state.job_ids).insert(uid.clone(), id);
        for pod in self.orphans.remove(&uid).unwrap_or_default() {
            if let Some(record) = self.pods.get(&pod) {
                self.state
                    .job_mut(id)
                    .upsert_task(record.update.task.clone());
            }
        }
        true
    }

    /// Deletes a gang; its pods stay known (and keep occupying their nodes) as orphans.
    pub fn delete_job(&mut self, uid: &str) {
        let Some(id) = self.state.job_by_uid(uid) else {
            return;
        };
        let job = self.state.job(id);
        let key = job.uid.clone();
        let pods: BTreeSet<Arc<str>> = job.tasks().iter().map(|t| t.uid.clone()).collect();
        if !pods.is_empty() {
            self.orphans.insert(key.clone(), pods);
        }
        self.state.remove_job(id);
        self.free_jobs.push(id.0);
        Arc::make_mut(&mut self.state.job_ids).remove(&key);
    }

    /// Marks a gang a refused bind left short (its missing members go first), or not.
    pub fn set_gang_recovering(&mut self, uid: &str, recovering: bool) {
        if let Some(id) = self.state.job_by_uid(uid) {
            if self.state.job(id).runtime.recovering != recovering {
                self.state.job_mut(id).runtime.recovering = recovering;
            }
        }
    }

    /// Replaces the members a driver keeps out of a gang (see `HeldBack`).
    pub fn set_held_back(&mut self, job: &str, held: HeldBack) {
        if let Some(id) = self.state.job_by_uid(job) {
            if self.state.job(id).held_back != held {
                self.state.job_mut(id).held_back = held.clone();
            }
        }
        if held.is_empty() {
            self.held_back.remove(job);
        } else {
            self.held_back.insert(Arc::from(job), held);
        }
    }

    /// Records the phase a status writer set on a gang.
    pub fn set_job_phase(&mut self, uid: &str, phase: PodGroupPhase) {
        if let Some(id) = self.state.job_by_uid(uid) {
            if self.state.job(id).phase != phase {
                self.state.job_mut(id).phase = phase;
            }
        }
    }

    // ----- pods ----------------------------------------------------------------------

    /// Remembers a gang's runtime for the next session (see `GangRuntime`).
    pub fn set_gang_runtime(&mut self, job: &str, runtime: &GangRuntime) {
        if let Some(id) = self.state.job_by_uid(job) {
            self.state.job_mut(id).runtime = runtime.clone();
        }
    }

    /// The pods a gang holds placements for (NonStrict gangs between sessions).
    pub fn held_pods(&self, job: &str) -> &[Arc<str>] {
        self.holds_by_job.get(job).map_or(&[], Vec::as_slice)
    }

    /// Replaces the placements a gang holds.
    pub fn set_holds(&mut self, job: &Arc<str>, holds: &[Hold]) {
        for uid in self.holds_by_job.remove(job).unwrap_or_default() {
            if self.holds.remove(&uid).is_some() {
                self.reapply(&uid);
            }
        }
        let mut kept = Vec::new();
        for h in holds {
            let pending = self
                .pods
                .get(&h.task)
                .is_some_and(|r| r.update.task.status == TaskStatus::Pending);
            if pending {
                self.holds
                    .insert(h.task.clone(), (h.node.clone(), h.status));
                self.reapply(&h.task);
                kept.push(h.task.clone());
            }
        }
        if !kept.is_empty() {
            self.holds_by_job.insert(job.clone(), kept);
        }
    }

    /// Decides a known pod's status again from its report (a hold or assumption changed).
    fn reapply(&mut self, uid: &str) {
        if let Some(record) = self.pods.get(uid) {
            let reported = record.reported.clone();
            self.apply_pod(reported);
        }
    }

    /// Adds or replaces a pod as the driver reports it: node accounting for every pod, gang
    /// membership for ours. Returns whether the engine's view changed: a report equal to
    /// the last (a status condition, an annotation: nothing the engine reads) leaves
    /// everything as it was.
    pub fn apply_pod(&mut self, reported: PodUpdate) -> bool {
        let update = self.effective(&reported);
        let same = self
            .pods
            .get(&reported.task.uid)
            .is_some_and(|r| r.reported == reported && r.update == update);
        if !same {
            self.install(reported, update);
        }
        !same
    }

    /// The pod as the engine sees it: a NonStrict gang's hold over a pod still reported
    /// pending, a bind in flight over a pod not yet seen bound, an eviction in flight over a
    /// pod still seen running. A hold or assumption the report shows to be over is dropped.
    fn effective(&mut self, reported: &PodUpdate) -> PodUpdate {
        let mut update = reported.clone();
        let uid = &reported.task.uid;
        if let Some((node, status)) = self.holds.get(uid) {
            match update.task.status {
                // The driver still sees the pod pending: the hold stands.
                TaskStatus::Pending if update.task.node.is_none() => {
                    update.task.status = *status;
                    update.task.node = Some(node.clone());
                }
                TaskStatus::Allocated | TaskStatus::Pipelined => {}
                // Bound, binding, finished or gone: the hold is over.
                _ => {
                    self.holds.remove(uid);
                }
            }
        }
        let over = match self.assumed.get(uid) {
            None => false,
            Some(Assumption::Bind(node)) => {
                let in_flight =
                    reported.task.status == TaskStatus::Pending && reported.task.node.is_none();
                if in_flight {
                    update.task.status = TaskStatus::Binding;
                    update.task.node = Some(node.clone());
                }
                !in_flight
            }
            Some(Assumption::Evict) => {
                let running = matches!(
                    reported.task.status,
                    TaskStatus::Running | TaskStatus::Bound
                );
                if running {
                    update.task.status = TaskStatus::Releasing;
                }
                !running
            }
        };
        if over {
            self.assumed.remove(uid);
        }
        update
    }

    fn install(&mut self, reported: PodUpdate, update: PodUpdate) {
        let uid = update.task.uid.clone();
        let from = match self.pods.get(&uid) {
            Some(old) => self.slots_for(&old.update),
            None => Slots::default(),
        };
        self.relocate(&uid, from, Some(&update));
        self.pods.insert(uid, PodRecord { reported, update });
    }

    /// Where a pod reported so belongs, and where a known pod's entries are: where its
    /// last update put them (nodes and gangs coming and going move them along: the
    /// adoptions in `apply_node` and `apply_job`, the lists in `delete_node` and
    /// `delete_job`).
    fn slots_for(&self, update: &PodUpdate) -> Slots {
        let node = match &update.task.node {
            Some(name) if holds_node(update.task.status) => match self.state.node_by_name(name) {
                Some(id) => NodeSlot::On(id),
                None => NodeSlot::Waiting(name.clone()),
            },
            _ => NodeSlot::None,
        };
        Slots {
            node,
            gang: self.gang_slot(update),
        }
    }

    fn gang_slot(&self, update: &PodUpdate) -> GangSlot {
        match &update.job {
            None => GangSlot::None,
            Some(job) => match self.state.job_by_uid(job) {
                Some(id) => GangSlot::In(id),
                None => GangSlot::Orphan(Arc::from(job.as_str())),
            },
        }
    }

    /// Moves a pod's entries from where they are to where `to` (none: forgotten) belongs,
    /// touching only what changes: a pod that stays on its node and in its gang (nearly
    /// every pod event: a bind sent or confirmed, a pod starting or finishing) is replaced
    /// there, one node and one gang copied at most, and keeps its place in its gang.
    fn relocate(&mut self, uid: &Arc<str>, from: Slots, to: Option<&PodUpdate>) {
        let dest = to.map_or_else(Slots::default, |u| self.slots_for(u));
        if let NodeSlot::On(id) = from.node {
            debug_assert!(
                self.state.node(id).tasks.contains_key(uid),
                "{uid} on its node"
            );
        }
        if from.node != dest.node {
            match &from.node {
                NodeSlot::On(id) => {
                    self.state.node_mut(*id).remove_task(uid);
                }
                NodeSlot::Waiting(name) => unlist(&mut self.waiting_for_node, name, uid),
                NodeSlot::None => {}
            }
        }
        if from.gang != dest.gang {
            match &from.gang {
                GangSlot::In(id) => {
                    self.state.job_mut(*id).remove_task(uid);
                }
                GangSlot::Orphan(job) => unlist(&mut self.orphans, job, uid),
                GangSlot::None => {}
            }
        }
        let Some(update) = to else {
            return;
        };
        match dest.node {
            // Replaces the pod's entry if it was on this node already.
            NodeSlot::On(id) => {
                let task = self.node_task(update, &dest.gang);
                self.state.node_mut(id).add_task(uid.clone(), task);
            }
            NodeSlot::Waiting(name) => list(&mut self.waiting_for_node, name, uid),
            NodeSlot::None => {}
        }
        match dest.gang {
            // Keeps the pod's place in its gang if it was there already.
            GangSlot::In(id) => {
                self.state.job_mut(id).upsert_task(update.task.clone());
            }
            GangSlot::Orphan(job) => list(&mut self.orphans, job, uid),
            GangSlot::None => {}
        }
    }

    /// A pod as its node holds it, sharing its gang's uid.
    fn node_task(&self, update: &PodUpdate, gang: &GangSlot) -> NodeTask {
        let job = match gang {
            GangSlot::In(id) => Some(self.state.job(*id).uid.clone()),
            GangSlot::Orphan(uid) => Some(uid.clone()),
            GangSlot::None => None,
        };
        NodeTask::of(&update.task, job)
    }

    /// Lays an assumption over a known pod (a bind or eviction was sent).
    pub fn assume(&mut self, uid: &str, assumption: Assumption) {
        let Some(record) = self.pods.get(uid) else {
            return;
        };
        let reported = record.reported.clone();
        self.assumed.insert(reported.task.uid.clone(), assumption);
        self.apply_pod(reported);
    }

    /// Drops an assumption (the call failed): the pod is again what the driver reported.
    pub fn drop_assumption(&mut self, uid: &str) {
        if self.assumed.remove(uid).is_some() {
            self.reapply(uid);
        }
    }

    /// How many pods are assumed bound (a bind sent or about to be) and not yet reported so.
    pub fn binds_assumed(&self) -> usize {
        self.assumed.binds
    }

    /// The assumption laid over a pod, if any.
    pub fn assumption(&self, uid: &str) -> Option<&Assumption> {
        self.assumed.get(uid)
    }

    /// Every pod the cache knows, by uid.
    pub fn pod_uids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.pods.keys()
    }

    pub fn delete_pod(&mut self, uid: &str) {
        self.holds.remove(uid);
        self.assumed.remove(uid);
        self.forget_pod(uid);
    }

    fn forget_pod(&mut self, uid: &str) {
        let Some((uid, record)) = self.pods.remove_entry(uid) else {
            return;
        };
        let from = self.slots_for(&record.update);
        self.relocate(&uid, from, None);
    }

    /// Changes a known pod's reported status and node (a driver that is the truth, like the
    /// simulator, binding or finishing it; a hold being released).
    pub fn set_pod_status(
        &mut self,
        uid: &str,
        status: TaskStatus,
        node: Option<Arc<str>>,
    ) -> bool {
        let Some(record) = self.pods.get(uid) else {
            return false;
        };
        let mut update = record.reported.clone();
        update.task.status = status;
        update.task.node = node;
        self.apply_pod(update);
        true
    }

    /// Changes a known pod's ResourceClaims (a driver that is the truth, like the
    /// simulator, recording the allocations a bind carried).
    pub fn set_pod_claims(&mut self, uid: &str, claims: Arc<[TaskClaim]>) -> bool {
        let Some(record) = self.pods.get(uid) else {
            return false;
        };
        let mut update = record.reported.clone();
        update.task.replace_claims(claims);
        self.apply_pod(update);
        true
    }

    /// Whether a pending pod of this gang can wait for the next periodic cycle: the gang
    /// (known) has fewer members than its minimum, so no placement of it can bind before
    /// more arrive, and a cycle now would decide nothing new for it.
    pub fn gang_short_of_members(&self, job_uid: &str) -> bool {
        self.state.job_by_uid(job_uid).is_some_and(|id| {
            let job = self.state.job(id);
            (job.tasks().len() as u64) < u64::from(job.min_member)
        })
    }

    pub fn pod(&self, uid: &str) -> Option<&PodUpdate> {
        self.pods.get(uid).map(|r| &r.update)
    }

    /// Pods of ours whose gang does not exist, by gang uid.
    pub fn orphans(&self) -> &HashMap<Arc<str>, BTreeSet<Arc<str>>> {
        &self.orphans
    }

    // ----- queues --------------------------------------------------------------------

    pub fn apply_queue(&mut self, queue: QueueInfo) {
        Arc::make_mut(&mut self.state.queues).insert(queue.name.clone(), Arc::new(queue));
    }

    pub fn delete_queue(&mut self, name: &str) {
        Arc::make_mut(&mut self.state.queues).remove(name);
    }

    // ----- namespaces -----------------------------------------------------------------

    /// Records a namespace's labels (pod affinity terms select namespaces by them).
    pub fn apply_namespace(&mut self, name: &str, labels: crate::model::pod_rules::Labels) {
        if self.state.namespaces.get(name) != Some(&labels) {
            Arc::make_mut(&mut self.state.namespaces).insert(Arc::from(name), labels);
        }
    }

    pub fn namespace_names(&self) -> Vec<String> {
        self.state
            .namespaces
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    pub fn delete_namespace(&mut self, name: &str) {
        if self.state.namespaces.contains_key(name) {
            Arc::make_mut(&mut self.state.namespaces).remove(name);
        }
    }

    // ----- disruption budgets ----------------------------------------------------------

    /// A PodDisruptionBudget (`namespace/name`) and how many more pods it lets go.
    pub fn apply_budget(&mut self, name: &str, disruptions_allowed: u32) {
        if self.state.budgets.get(name) != Some(&disruptions_allowed) {
            Arc::make_mut(&mut self.state.budgets).insert(Arc::from(name), disruptions_allowed);
        }
    }

    pub fn delete_budget(&mut self, name: &str) {
        if self.state.budgets.contains_key(name) {
            Arc::make_mut(&mut self.state.budgets).remove(name);
        }
    }

    /// Sets which budgets cover a known pod (its labels or a budget's selector changed).
    pub fn set_pod_budgets(&mut self, uid: &str, budgets: Vec<Arc<str>>) {
        let Some(record) = self.pods.get(uid) else {
            return;
        };
        if record.reported.task.budgets != budgets {
            let mut update = record.reported.clone();
            update.task.budgets = budgets;
            self.apply_pod(update);
        }
    }
}

/// Whether a pod in this status holds resources on its node.
fn holds_node(status: TaskStatus) -> bool {
    status.occupies_node() || status == TaskStatus::Pipelined
}

/// Pods kept aside by the node or gang they wait for (`waiting_for_node`, `orphans`).
type WaitLists = HashMap<Arc<str>, BTreeSet<Arc<str>>>;

fn list(lists: &mut WaitLists, key: Arc<str>, uid: &Arc<str>) {
    lists.entry(key).or_default().insert(uid.clone());
}

fn unlist(lists: &mut WaitLists, key: &str, uid: &str) {
    if let Some(l) = lists.get_mut(key) {
        l.remove(uid);
    }
}

/// Where a pod's node entry is: among its node's tasks, waiting for a node the cache does
/// not know (yet), or nowhere (not on a node, or not holding room there).
#[derive(Default, PartialEq)]
enum NodeSlot {
    #[default]
    None,
    On(NodeId),
    Waiting(Arc<str>),
}

/// Where a pod's gang entry is: among its gang's tasks, among the orphans of a gang the
/// cache does not know (yet), or nowhere (not ours).
#[derive(Default, PartialEq)]
enum GangSlot {
    #[default]
    None,
    In(JobId),
    Orphan(Arc<str>),
}

#[derive(Default)]
struct Slots {
    node: NodeSlot,
    gang: GangSlot,
}

#[cfg(test)]
mod tests;
