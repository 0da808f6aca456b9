//! A session: one scheduling cycle over an immutable snapshot. Plugins register votes when
//! it opens; actions read the cluster through it and change it only through `Statement`s;
//! when it closes it reports binds, evictions and gang status changes for a driver to apply.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::fit::{gang_message, resource_fit, NodeRejections, TaskUnfit, Unfit};
use super::plugin::Plugin;
use super::votes::*;
use crate::conf::{ConfError, PluginOption, SchedulerConf};
use crate::model::resource::format_amount;
use crate::model::{
    GangMode, GangRuntime, JobId, JobInfo, NodeId, NodeInfo, NodeTask, PodGroupPhase, QueueInfo,
    QueueState, QueueTree, Resource, TaskInfo, TaskRef, TaskStatus, Timestamp,
};

/// Slots of shared objects: cloning the vector is a pointer copy per slot; changing one
/// object clones only that object (`Arc::make_mut`).
pub type Slots<T> = Arc<Vec<Option<Arc<T>>>>;

/// The cluster as a session sees it. A snapshot from the cache is one of these; cloning it
/// is O(1) (six `Arc` clones).
#[derive(Clone, Default)]
pub struct ClusterState {
    pub(crate) nodes: Slots<NodeInfo>,
    pub(crate) node_ids: Arc<HashMap<Arc<str>, NodeId>>,
    pub(crate) jobs: Slots<JobInfo>,
    pub(crate) job_ids: Arc<HashMap<Arc<str>, JobId>>,
    pub(crate) queues: Arc<BTreeMap<Arc<str>, Arc<QueueInfo>>>,
    /// PodDisruptionBudgets (`namespace/name`) and how many more pods each lets go.
    pub(crate) budgets: Arc<BTreeMap<Arc<str>, u32>>,
}

impl ClusterState {
    pub fn node(&self, id: NodeId) -> &NodeInfo {
        self.nodes[id.0 as usize]
            .as_deref()
            .expect("NodeId of a live slot")
    }

    pub fn node_slots(&self) -> usize {
        self.nodes.len()
    }

    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &NodeInfo)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_deref().map(|n| (NodeId(i as u32), n)))
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.node_ids.get(name).copied()
    }

    pub fn job(&self, id: JobId) -> &JobInfo {
        self.jobs[id.0 as usize]
            .as_deref()
            .expect("JobId of a live slot")
    }

    pub fn jobs(&self) -> impl Iterator<Item = (JobId, &JobInfo)> {
        self.jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.as_deref().map(|j| (JobId(i as u32), j)))
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

    /// How many more pods a PodDisruptionBudget lets go, as the cluster last said (None:
    /// no such budget).
    pub fn disruptions_allowed(&self, budget: &str) -> Option<u32> {
        self.budgets.get(budget).copied()
    }

    pub(crate) fn node_mut(&mut self, id: NodeId) -> &mut NodeInfo {
        let slot = &mut Arc::make_mut(&mut self.nodes)[id.0 as usize];
        Arc::make_mut(slot.as_mut().expect("NodeId of a live slot"))
    }

    pub(crate) fn job_mut(&mut self, id: JobId) -> &mut JobInfo {
        let slot = &mut Arc::make_mut(&mut self.jobs)[id.0 as usize];
        Arc::make_mut(slot.as_mut().expect("JobId of a live slot"))
    }

    /// Total allocatable of schedulable nodes.
    pub fn total_allocatable(&self) -> Resource {
        let mut r = Resource::new();
        for (_, n) in self.nodes() {
            if n.schedulable() {
                r.add(&n.allocatable);
            }
        }
        r
    }
}

/// A pod to bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub job: Arc<str>,
    pub task: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Arc<str>,
}

/// A pod to evict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub job: Arc<str>,
    pub task: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Option<Arc<str>>,
    /// The gang (uid) the eviction makes room for, if any.
    pub preemptor: Option<Arc<str>>,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionKind {
    Scheduled,
    Unschedulable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCondition {
    pub kind: ConditionKind,
    /// NotEnoughResources, NotEnoughTasks, or a plugin's reason.
    pub reason: String,
    pub message: String,
}

/// What a session decided about one gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUpdate {
    pub job: Arc<str>,
    /// Set when the phase changed.
    pub phase: Option<PodGroupPhase>,
    pub condition: Option<JobCondition>,
    /// Why each pending task of an unschedulable gang did not fit (task uid, reason).
    pub task_reasons: Vec<(Arc<str>, String)>,
    /// What the engine must remember about the gang next session, when it changed.
    pub runtime: Option<GangRuntime>,
    /// The gang's tentative placements to keep until the next session (NonStrict gangs),
    /// replacing any it held; `Some(empty)` releases them.
    pub holds: Option<Vec<Hold>>,
}

/// A tentative placement a NonStrict gang keeps across sessions: the pod holds the node's
/// resources (as Allocated or Pipelined) without being bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub task: Arc<str>,
    pub node: Arc<str>,
    pub status: TaskStatus,
}

/// Everything a driver applies after a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionResult {
    pub binds: Vec<Bind>,
    pub evictions: Vec<Eviction>,
    pub job_updates: Vec<JobUpdate>,
}

/// Why a gang was not committed in this session.
#[derive(Clone, Debug, Default)]
struct GangUnfit {
    tasks: BTreeMap<u32, TaskUnfit>,
    invalid: Option<Invalid>,
    note: Option<String>,
}

/// Nodes that pass a placement's static predicates.
struct StaticFit {
    pass: Vec<bool>,
    nodes: Vec<NodeId>,
    rejections: NodeRejections,
}

/// The nodes that pass every static predicate for one placement (see
/// `Session::static_nodes`).
#[derive(Clone)]
pub struct StaticNodes(Arc<StaticFit>);

impl StaticNodes {
    /// In id order.
    pub fn nodes(&self) -> &[NodeId] {
        &self.0.nodes
    }

    pub fn passes(&self, node: NodeId) -> bool {
        self.0.pass[node.0 as usize]
    }
}

/// Nodes that may still fit one task template. Nodes that fail a (monotone) dynamic
/// predicate are dropped until something is released on them, so a full cluster is not
/// rescanned for every pending task.
struct Candidates {
    nodes: Vec<NodeId>,
    present: Vec<bool>,
    synced: usize,
}

/// The nodes found and scored for the previous task placed through `best_feasible_node`,
/// kept while the same gang places more tasks of the same template. Such tasks are
/// interchangeable (same request and placement), so instead of scanning and scoring a fresh
/// sample for every pod of a role, only the nodes whose usage changed since (usually just
/// the one the previous pod went to) are checked and scored again. Relies on predicates
/// and node-order functions depending only on the task's template and the node.
struct Window {
    job: JobId,
    template: u64,
    /// In scan order, so ties go to the node found first, as in a fresh scan.
    nodes: Vec<(NodeId, f64)>,
    /// How much of `Session::touched` the scores account for.
    synced: usize,
}

/// Beyond this many node changes, a window is scanned afresh rather than patched.
const WINDOW_MAX_CHANGES: usize = 32;

/// Our bound and running tasks when a session first asks (see `Session::running_index`).
pub struct RunningIndex {
    /// Per node slot, its tasks.
    pub by_node: Vec<Vec<TaskRef>>,
    /// Per queue, the nodes its tasks run on, in id order.
    pub nodes_by_queue: HashMap<Arc<str>, Vec<NodeId>>,
}

pub struct Session {
    pub now: Timestamp,
    state: ClusterState,
    conf: Arc<SchedulerConf>,
    pub(crate) votes: Votes,
    plugins: Vec<Box<dyn Plugin>>,
    binds: Vec<Bind>,
    evictions: Vec<Eviction>,
    unschedulable: BTreeMap<JobId, GangUnfit>,
    scheduled: BTreeSet<JobId>,
    original_phase: HashMap<JobId, PodGroupPhase>,
    static_fit: HashMap<u64, Arc<StaticFit>>,
    candidates: HashMap<u64, Candidates>,
    /// Nodes on which resources were released during the session, in order.
    released: Vec<NodeId>,
    /// Bumped on every release; memoized "nothing fits" answers are valid for one epoch.
    epoch: u64,
    unfit_memo: HashMap<u64, (u64, TaskUnfit)>,
    scan_offset: usize,
    /// Every node whose usage changed during the session, in order.
    touched: Vec<NodeId>,
    window: Option<Window>,
    /// Allocatable of schedulable nodes, as the session opened.
    total_allocatable: Resource,
    /// Gangs whose waiting time ran out this session, with their new runtime.
    expired: HashMap<JobId, GangRuntime>,
    /// The placements each gang held when the session opened.
    held_at_open: HashMap<JobId, Vec<Hold>>,
    /// EASY backfill's reservation for the head-of-line gang (see `reservation.rs`).
    pub(super) reservations: super::reservation::ReservationState,
    /// The queue hierarchy, resolved once (queues do not change during a session).
    queue_tree: QueueTree,
    /// Bound and running tasks per node (see `running_index`).
    running_index: Option<Arc<RunningIndex>>,
    /// Pods each PodDisruptionBudget has lost to this session's evictions so far.
    budget_spent: HashMap<Arc<str>, u32>,
    /// What is free in the whole cluster once releases and pipelined tasks are through,
    /// with the length of `touched` it was summed at: every gang allocate gives up on asks
    /// for it, and summing every node each time made allocate quadratic in a full cluster.
    cluster_free: RefCell<Option<(usize, Resource)>>,
}

impl Session {
    /// Opens a session: builds the configured plugins and lets each register its votes.
    pub fn open(
        snapshot: ClusterState,
        conf: Arc<SchedulerConf>,
        now: Timestamp,
    ) -> Result<Session, ConfError> {
        let mut plugins = Vec::new();
        for tier in &conf.tiers {
            for option in &tier.plugins {
                let build =
                    crate::plugins::builder(&option.name).ok_or_else(|| ConfError::Invalid {
                        file: conf.source.clone(),
                        key: option.name.clone(),
                        message: "unknown plugin".into(),
                    })?;
                plugins.push(build(&option.arguments).map_err(|e| ConfError::Invalid {
                    file: conf.source.clone(),
                    key: e.key,
                    message: e.message,
                })?);
            }
        }
        let total_allocatable = snapshot.total_allocatable();
        let queue_tree = QueueTree::new(snapshot.queues());
        let mut ssn = Session {
            now,
            total_allocatable,
            queue_tree,
            state: snapshot,
            conf,
            votes: Votes::default(),
            plugins: Vec::new(),
            binds: Vec::new(),
            evictions: Vec::new(),
            unschedulable: BTreeMap::new(),
            scheduled: BTreeSet::new(),
            original_phase: HashMap::new(),
            static_fit: HashMap::new(),
            candidates: HashMap::new(),
            released: Vec::new(),
            epoch: 0,
            unfit_memo: HashMap::new(),
            scan_offset: 0,
            touched: Vec::new(),
            window: None,
            expired: HashMap::new(),
            held_at_open: HashMap::new(),
            reservations: Default::default(),
            running_index: None,
            budget_spent: HashMap::new(),
            cluster_free: RefCell::new(None),
        };
        ssn.held_at_open = ssn
            .state
            .jobs()
            .map(|(id, j)| (id, held_placements(j)))
            .filter(|(_, holds)| !holds.is_empty())
            .collect();
        for plugin in &mut plugins {
            plugin.on_session_open(&mut ssn);
        }
        ssn.plugins = plugins;
        Ok(ssn)
    }

    /// Closes the session and reports what changed.
    pub fn close(mut self) -> SessionResult {
        let mut plugins = std::mem::take(&mut self.plugins);
        for plugin in &mut plugins {
            plugin.on_session_close(&mut self);
        }
        let mut job_updates = Vec::new();
        let ids: Vec<JobId> = self.state.jobs().map(|(id, _)| id).collect();
        for id in ids {
            let job = self.state.job(id);
            let original = self.original_phase.get(&id).copied().unwrap_or(job.phase);
            let phase = next_phase(job, job.phase);
            let condition = if self.scheduled.contains(&id) {
                Some(JobCondition {
                    kind: ConditionKind::Scheduled,
                    reason: "Scheduled".into(),
                    message: format!(
                        "{}/{} tasks in gang scheduled",
                        job.ready_count(),
                        job.tasks().len()
                    ),
                })
            } else {
                self.unschedulable
                    .get(&id)
                    .map(|u| self.unschedulable_condition(id, u))
            };
            let task_reasons = self
                .unschedulable
                .get(&id)
                .map(|u| self.task_reasons(id, u))
                .unwrap_or_default();
            let phase_change = (phase != original).then_some(phase);
            let runtime = self.next_runtime(id);
            let runtime = (runtime != job.runtime).then_some(runtime);
            let holds = self.holds(id);
            if phase_change.is_some() || condition.is_some() || runtime.is_some() || holds.is_some()
            {
                job_updates.push(JobUpdate {
                    job: job.uid.clone(),
                    phase: phase_change,
                    condition,
                    task_reasons,
                    runtime,
                    holds,
                });
            }
        }
        SessionResult {
            binds: self.binds,
            evictions: self.evictions,
            job_updates,
        }
    }

    /// The gang's runtime for the next session: its waiting clock starts when it first
    /// fails with all members present and stops when it is scheduled.
    fn next_runtime(&self, id: JobId) -> GangRuntime {
        if let Some(rt) = self.expired.get(&id) {
            return rt.clone();
        }
        let job = self.state.job(id);
        let mut rt = job.runtime.clone();
        let started = job.count(TaskStatus::Binding)
            + job.count(TaskStatus::Bound)
            + job.count(TaskStatus::Running)
            + job.count(TaskStatus::Succeeded);
        if self.scheduled.contains(&id) || (job.min_member > 0 && started >= job.min_member) {
            rt.waiting_since = None;
            rt.expiries = 0;
            rt.once_satisfied = true;
        } else if let Some(u) = self.unschedulable.get(&id) {
            if u.invalid.is_none() && rt.waiting_since.is_none() {
                rt.waiting_since = Some(self.now);
            }
        }
        rt
    }

    /// The placements a NonStrict gang keeps for the next session, if they changed.
    fn holds(&self, id: JobId) -> Option<Vec<Hold>> {
        let job = self.state.job(id);
        let keep = job.policy.mode == GangMode::NonStrict
            && !self.scheduled.contains(&id)
            && !self.expired.contains_key(&id);
        let holds = if keep {
            held_placements(job)
        } else {
            Vec::new()
        };
        let before = self.held_at_open.get(&id).map_or(&[][..], Vec::as_slice);
        (holds != before).then_some(holds)
    }

    /// Ends a gang's wait: its held placements are released, it is not tried again before
    /// an exponential backoff (5 s doubling, at most 5 min) has passed, and it says so.
    pub fn expire_gang(&mut self, id: JobId) {
        let mut held = self.tasks_in(id, TaskStatus::Allocated);
        held.extend(self.tasks_in(id, TaskStatus::Pipelined));
        for &task in &held {
            self.unallocate_task(task, (TaskStatus::Pending, None));
        }
        let mut rt = self.state.job(id).runtime.clone();
        rt.expiries += 1;
        rt.waiting_since = None;
        rt.backoff_until = self.now + backoff(rt.expiries);
        let invalid = waiting_time_expired(self.state.job(id), rt.expiries, Some(held.len()));
        self.record_job_invalid(id, invalid);
        self.expired.insert(id, rt);
    }

    /// Whether a gang's waiting time has run out (checked before it is tried).
    pub fn gang_expired(&self, id: JobId) -> bool {
        let job = self.state.job(id);
        match (job.policy.wait_timeout, job.runtime.waiting_since) {
            (Some(limit), Some(since)) => self.now - since >= limit,
            _ => false,
        }
    }

    /// Whether a gang is backing off after its waiting time ran out; says so if it is.
    pub fn gang_backing_off(&mut self, id: JobId) -> bool {
        let job = self.state.job(id);
        if self.now >= job.runtime.backoff_until || job.runtime.expiries == 0 {
            return false;
        }
        let invalid = waiting_time_expired(job, job.runtime.expiries, None);
        self.record_job_invalid(id, invalid);
        true
    }

    fn unschedulable_condition(&self, id: JobId, u: &GangUnfit) -> JobCondition {
        let job = self.state.job(id);
        if let Some(invalid) = &u.invalid {
            return JobCondition {
                kind: ConditionKind::Unschedulable,
                reason: invalid.reason.clone(),
                message: invalid.message.clone(),
            };
        }
        if u.tasks.is_empty() {
            return JobCondition {
                kind: ConditionKind::Unschedulable,
                reason: "NotEnoughResources".into(),
                message: u.note.clone().unwrap_or_else(|| "gang not ready".into()),
            };
        }
        let mut message = gang_message(job.tasks().len(), u.tasks.values(), None);
        if let Some(note) = &u.note {
            message.push_str("; ");
            message.push_str(note);
        }
        JobCondition {
            kind: ConditionKind::Unschedulable,
            reason: "NotEnoughResources".into(),
            message,
        }
    }

    /// "gang is short of 4 nvidia.com/gpu": per insufficient resource, what the unplaced
    /// tasks need beyond what is free in the whole cluster.
    fn shortage(&self, job: &JobInfo, u: &GangUnfit) -> Option<String> {
        let mut need = Resource::new();
        for index in u.tasks.keys() {
            need.add(&job.task(*index).resreq);
        }
        let free = self.cluster_free();
        let mut parts = Vec::new();
        for (name, amount) in need.dimensions() {
            if name == crate::model::resource::PODS {
                continue;
            }
            let short = amount - free.get(name).max(0);
            if short > 0
                && u.tasks
                    .values()
                    .any(|t| t.reason.contains(&*format!("Insufficient {name}")))
            {
                parts.push(format!("{} {name}", format_amount(name, short)));
            }
        }
        (!parts.is_empty()).then(|| format!("gang is short of {}", parts.join(", ")))
    }

    /// What the schedulable nodes will have free once releases and pipelined tasks are
    /// through, summed again only when a node's usage changed since (every change goes
    /// through `move_task`, which records the node in `touched`).
    pub(super) fn cluster_free(&self) -> std::cell::Ref<'_, Resource> {
        let version = self.touched.len();
        let stale = self
            .cluster_free
            .borrow()
            .as_ref()
            .is_none_or(|(at, _)| *at != version);
        if stale {
            let mut free = Resource::new();
            for (_, n) in self.state.nodes() {
                if n.schedulable() {
                    free.add(&n.future_free());
                }
            }
            *self.cluster_free.borrow_mut() = Some((version, free));
        }
        std::cell::Ref::map(self.cluster_free.borrow(), |c| {
            &c.as_ref().expect("summed above").1
        })
    }

    fn task_reasons(&self, id: JobId, u: &GangUnfit) -> Vec<(Arc<str>, String)> {
        let job = self.state.job(id);
        job.tasks()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.status == TaskStatus::Pending)
            .map(|(i, t)| {
                let why = match (&u.invalid, u.tasks.get(&(i as u32))) {
                    (Some(inv), _) => inv.message.clone(),
                    (None, Some(unfit)) => unfit.detail.clone(),
                    (None, None) => "waiting for the rest of its gang to fit".to_string(),
                };
                (t.uid.clone(), why)
            })
            .collect()
    }

    // ----- reading the cluster -------------------------------------------------------

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    pub fn conf(&self) -> &SchedulerConf {
        &self.conf
    }

    /// Allocatable of schedulable nodes when the session opened (computed once: several
    /// plugins need it).
    pub fn total_allocatable(&self) -> &Resource {
        &self.total_allocatable
    }

    /// The queue hierarchy (parents, children, broken chains).
    pub fn queue_tree(&self) -> &QueueTree {
        &self.queue_tree
    }

    /// Why a queue takes no new work, whatever plugins are configured: it is not Open
    /// (Closed and Closing queues admit no job and get no new pods, as with Volcano's
    /// allocatable vote; running pods go on), or its parent chain is broken.
    pub fn queue_blocked(&self, queue: &QueueInfo) -> Option<String> {
        let name = &queue.name;
        match queue.state {
            QueueState::Open => {}
            QueueState::Closed => return Some(format!("queue {name:?} is closed")),
            QueueState::Closing => return Some(format!("queue {name:?} is closing")),
            QueueState::Unknown => return Some(format!("queue {name:?} is in an unknown state")),
        }
        if let Some(p) = self.queue_tree.problem(name) {
            return Some(format!("queue {name:?} takes no work: {p}"));
        }
        (!self.queue_tree.is_leaf(name))
            .then(|| format!("queue {name:?} has child queues; submit jobs to a leaf queue"))
    }

    pub fn node(&self, id: NodeId) -> &NodeInfo {
        self.state.node(id)
    }

    pub fn job(&self, id: JobId) -> &JobInfo {
        self.state.job(id)
    }

    pub fn task(&self, r: TaskRef) -> &TaskInfo {
        self.state.task(r)
    }

    pub fn job_ids(&self) -> Vec<JobId> {
        self.state.jobs().map(|(id, _)| id).collect()
    }

    pub fn node_ids(&self) -> Vec<NodeId> {
        self.state.nodes().map(|(id, _)| id).collect()
    }

    pub fn queue(&self, name: &str) -> Option<&QueueInfo> {
        self.state.queue(name)
    }

    /// A job's tasks in `status`, in task order.
    pub fn tasks_in(&self, job: JobId, status: TaskStatus) -> Vec<TaskRef> {
        let mut tasks: Vec<TaskRef> = self
            .job(job)
            .tasks()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.status == status)
            .map(|(i, _)| TaskRef {
                job,
                index: i as u32,
            })
            .collect();
        tasks.sort_by(|a, b| self.task_order(*a, *b));
        tasks
    }

    /// Jobs grouped by queue, each group in job order. Jobs whose queue does not exist are
    /// left out and noted as unschedulable.
    pub fn jobs_by_queue(
        &mut self,
        mut include: impl FnMut(&Session, JobId) -> bool,
    ) -> BTreeMap<Arc<str>, Vec<JobId>> {
        let mut groups: BTreeMap<Arc<str>, Vec<JobId>> = BTreeMap::new();
        for id in self.job_ids() {
            if !include(self, id) {
                continue;
            }
            let queue = self.job(id).queue.clone();
            if self.queue(&queue).is_none() {
                self.record_job_note(id, format!("queue {queue:?} does not exist"));
                continue;
            }
            groups.entry(queue).or_default().push(id);
        }
        for jobs in groups.values_mut() {
            jobs.sort_by(|a, b| self.job_order(*a, *b));
        }
        groups
    }

    /// The queue that goes next among `candidates` (QueueOrder), if any.
    pub fn next_queue<'q>(
        &self,
        candidates: impl Iterator<Item = &'q Arc<str>>,
    ) -> Option<Arc<str>> {
        candidates
            .filter_map(|name| self.queue(name))
            .min_by(|a, b| self.queue_order(a, b))
            .map(|q| q.name.clone())
    }

    /// What the gang's unplaced tasks need beyond what is free in the whole cluster, per
    /// resource they were short of: "gang is short of 4 nvidia.com/gpu". Call it before
    /// discarding the gang's statement, while its tentative placements still count.
    pub fn describe_shortage(&self, job: JobId) -> Option<String> {
        let u = self.unschedulable.get(&job)?;
        self.shortage(self.job(job), u)
    }

    // ----- registering votes (plugins call these from on_session_open) ---------------

    fn tier_of(&self, plugin: &str, kind: VoteKind) -> Option<usize> {
        self.conf.tiers.iter().enumerate().find_map(|(i, t)| {
            t.plugins
                .iter()
                .find(|p| p.name == plugin)
                .and_then(|p: &PluginOption| p.enabled(kind).then_some(i))
        })
    }

    pub fn add_job_order_fn(&mut self, plugin: &'static str, f: JobOrderFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobOrder) {
            self.votes.job_order.push(t, plugin, f);
        }
    }
    pub fn add_queue_order_fn(&mut self, plugin: &'static str, f: QueueOrderFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::QueueOrder) {
            self.votes.queue_order.push(t, plugin, f);
        }
    }
    pub fn add_task_order_fn(&mut self, plugin: &'static str, f: TaskOrderFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::TaskOrder) {
            self.votes.task_order.push(t, plugin, f);
        }
    }
    pub fn add_static_predicate_fn(&mut self, plugin: &'static str, f: StaticPredicateFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Predicate) {
            self.votes.static_predicate.push(t, plugin, f);
        }
    }
    pub fn add_predicate_fn(&mut self, plugin: &'static str, f: PredicateFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Predicate) {
            self.votes.predicate.push(t, plugin, f);
        }
    }
    pub fn add_node_order_fn(&mut self, plugin: &'static str, f: NodeOrderFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::NodeOrder) {
            self.votes.node_order.push(t, plugin, f);
        }
    }
    pub fn add_job_valid_fn(&mut self, plugin: &'static str, f: JobValidFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobValid) {
            self.votes.job_valid.push(t, plugin, f);
        }
    }
    pub fn add_job_ready_fn(&mut self, plugin: &'static str, f: JobCheckFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobReady) {
            self.votes.job_ready.push(t, plugin, f);
        }
    }
    pub fn add_job_pipelined_fn(&mut self, plugin: &'static str, f: JobVoteFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobPipelined) {
            self.votes.job_pipelined.push(t, plugin, f);
        }
    }
    pub fn add_job_starving_fn(&mut self, plugin: &'static str, f: JobCheckFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobStarving) {
            self.votes.job_starving.push(t, plugin, f);
        }
    }
    pub fn add_job_enqueueable_fn(&mut self, plugin: &'static str, f: JobVoteFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::JobEnqueueable) {
            self.votes.job_enqueueable.push(t, plugin, f);
        }
    }
    pub fn add_job_enqueued_fn(&mut self, f: JobEnqueuedFn) {
        self.votes.job_enqueued.push(f);
    }
    pub fn add_preemptable_fn(&mut self, plugin: &'static str, f: VictimsFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Preemptable) {
            self.votes.preemptable.push(t, plugin, f);
        }
    }
    pub fn add_reclaimable_fn(&mut self, plugin: &'static str, f: VictimsFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Reclaimable) {
            self.votes.reclaimable.push(t, plugin, f);
        }
    }
    pub fn add_preemptable_set_fn(&mut self, plugin: &'static str, f: VictimSetFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Preemptable) {
            self.votes.preemptable_set.push(t, plugin, f);
        }
    }
    pub fn add_reclaimable_set_fn(&mut self, plugin: &'static str, f: VictimSetFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Reclaimable) {
            self.votes.reclaimable_set.push(t, plugin, f);
        }
    }
    pub fn add_overused_fn(&mut self, plugin: &'static str, f: QueueCheckFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Overused) {
            self.votes.overused.push(t, plugin, f);
        }
    }
    pub fn add_allocatable_fn(&mut self, plugin: &'static str, f: AllocatableFn) {
        if let Some(t) = self.tier_of(plugin, VoteKind::Allocatable) {
            self.votes.allocatable.push(t, plugin, f);
        }
    }
    /// Event handlers run for every plugin that registers them (no switch, as in Volcano).
    pub fn add_event_handler(
        &mut self,
        on_allocate: Option<EventFn>,
        on_deallocate: Option<EventFn>,
    ) {
        self.votes.on_allocate.extend(on_allocate);
        self.votes.on_deallocate.extend(on_deallocate);
    }

    // ----- asking the plugins --------------------------------------------------------

    /// Job order: a gang a refused bind left short first (its bound members hold room
    /// while it waits), then plugins, then creation time, then uid.
    pub fn job_order(&self, a: JobId, b: JobId) -> Ordering {
        let (l, r) = (self.job(a), self.job(b));
        r.runtime
            .recovering
            .cmp(&l.runtime.recovering)
            .then_with(|| self.votes.job_order.compare(|f| f(l, r)))
            .then_with(|| l.created.cmp(&r.created))
            .then_with(|| l.uid.cmp(&r.uid))
    }

    pub fn queue_order(&self, a: &QueueInfo, b: &QueueInfo) -> Ordering {
        self.votes
            .queue_order
            .compare(|f| f(a, b))
            .then_with(|| a.created.cmp(&b.created))
            .then_with(|| a.name.cmp(&b.name))
    }

    pub fn task_order(&self, a: TaskRef, b: TaskRef) -> Ordering {
        let (l, r) = (self.task(a), self.task(b));
        self.votes
            .task_order
            .compare(|f| f(l, r))
            .then_with(|| l.created.cmp(&r.created))
            .then_with(|| l.uid.cmp(&r.uid))
    }

    pub fn job_valid(&self, id: JobId) -> Option<Invalid> {
        let job = self.job(id);
        self.votes.job_valid.all().find_map(|f| f(job))
    }

    pub fn job_ready(&self, id: JobId) -> bool {
        let job = self.job(id);
        self.votes.job_ready.all_true(|f| f(job))
    }

    pub fn job_pipelined(&self, id: JobId) -> bool {
        let job = self.job(id);
        self.votes.job_pipelined.permit(|f| f(job))
    }

    pub fn job_starving(&self, id: JobId) -> bool {
        let job = self.job(id);
        self.votes.job_starving.first_tier_all(|f| f(job))
    }

    pub fn job_enqueueable(&self, id: JobId) -> bool {
        let job = self.job(id);
        self.votes.job_enqueueable.permit(|f| f(job))
    }

    pub fn overused(&self, queue: &QueueInfo) -> bool {
        self.votes.overused.any_true(|f| f(queue))
    }

    /// Whether a task of `queue` may be placed: the queue takes work (`queue_blocked`) and
    /// every allocatable vote agrees.
    pub fn allocatable(&self, queue: &QueueInfo, task: TaskRef) -> bool {
        if self.queue_blocked(queue).is_some() {
            return false;
        }
        let t = self.task(task);
        self.votes.allocatable.all_true(|f| f(queue, t))
    }

    /// The candidates the plugins let go one by one for `preemptor`.
    pub fn victims(
        &self,
        kind: VictimKind,
        preemptor: TaskRef,
        candidates: &[TaskRef],
    ) -> Vec<TaskRef> {
        let (per_task, _) = self.votes.victim_votes(kind);
        let mut victims = per_task.victims(|f| f(&self.state, preemptor, candidates));
        victims.retain(self.within_budgets());
        victims
    }

    /// Drops, in order, the victims the eviction API would refuse: a pod covered by a
    /// PodDisruptionBudget goes only while the budget has disruptions left (this session's
    /// earlier evictions spend them too), and one covered by several budgets never (the API
    /// refuses those). Whatever plugins are configured: a victim the API server keeps would
    /// leave its gang, or the preemptor's plan, half done.
    /// Asked of victims in order; each one it lets go spends its budget for the next.
    fn within_budgets(&self) -> impl FnMut(&TaskRef) -> bool + '_ {
        let mut taken: HashMap<&str, u32> = HashMap::new();
        move |&v| match self.state.task(v).budgets.as_slice() {
            [] => true,
            [b] => {
                let allowed = self.state.disruptions_allowed(b).unwrap_or(0);
                let spent = self.budget_spent.get(b).copied().unwrap_or(0);
                let taken = taken.entry(b).or_insert(0);
                let within = spent + *taken < allowed;
                *taken += u32::from(within);
                within
            }
            _ => false,
        }
    }

    /// The candidates each plugin without a set vote would let go for `preemptor`: only
    /// these can be members of a victim set.
    pub fn victim_members(
        &self,
        kind: VictimKind,
        preemptor: TaskRef,
        candidates: &[TaskRef],
    ) -> Vec<TaskRef> {
        let (per_task, per_set) = self.votes.victim_votes(kind);
        let mut members = victim_members(per_task, per_set, &self.state, preemptor, candidates);
        members.retain(self.within_budgets());
        members
    }

    /// Whether the plugins allow evicting `set` together for `preemptor`.
    pub fn victims_together(&self, kind: VictimKind, preemptor: TaskRef, set: &[TaskRef]) -> bool {
        let (per_task, per_set) = self.votes.victim_votes(kind);
        set.iter().all(self.within_budgets())
            && victim_set_allowed(per_task, per_set, &self.state, preemptor, set)
    }

    /// Sum of every node-order plugin's score.
    pub fn node_score(&self, task: TaskRef, node: NodeId) -> f64 {
        node_score(&self.votes, self.task(task), self.node(node))
    }

    /// All predicates, static and dynamic, for one task on one node.
    pub fn predicate(&self, task: TaskRef, node: NodeId) -> Result<(), Unfit> {
        let (t, n) = (self.task(task), self.node(node));
        for f in self.votes.static_predicate.all() {
            f(t, n)?;
        }
        self.dynamic_fit(t, n)
    }

    // ----- finding nodes -------------------------------------------------------------

    fn dynamic_fit(&self, t: &TaskInfo, n: &NodeInfo) -> Result<(), Unfit> {
        dynamic_fit(&self.votes, t, n)
    }

    /// Nodes on which the task could run if they had room: every static predicate passes
    /// (selector, affinity, taints, node state). Preempt, reclaim and reservations look
    /// there for every task they try to place, so the session's list is shared, not copied.
    pub fn static_nodes(&mut self, task: TaskRef) -> StaticNodes {
        StaticNodes(self.static_fit(task))
    }

    /// Tasks of ours running on `node` (bound before this session, not releasing): the
    /// only possible victims — never a task this very session just placed.
    pub fn running_tasks_on(&mut self, node: NodeId) -> Vec<TaskRef> {
        let index = self.running_index();
        index.by_node[node.0 as usize]
            .iter()
            .copied()
            .filter(|t| {
                matches!(
                    self.state.task(*t).status,
                    TaskStatus::Bound | TaskStatus::Running
                )
            })
            .collect()
    }

    /// Per node slot, the tasks of ours that were bound or running when first asked
    /// (built once per session; no task becomes bound or running later in a session, so
    /// callers only need to re-check the status of what they read).
    pub fn running_index(&mut self) -> Arc<RunningIndex> {
        if let Some(index) = &self.running_index {
            return index.clone();
        }
        let mut index = vec![Vec::new(); self.state.node_slots()];
        let mut by_queue: HashMap<Arc<str>, Vec<NodeId>> = HashMap::new();
        for (job, info) in self.state.jobs() {
            for (i, t) in info.tasks().iter().enumerate() {
                if !matches!(t.status, TaskStatus::Bound | TaskStatus::Running) {
                    continue;
                }
                if let Some(node) = t.node.as_deref().and_then(|n| self.state.node_by_name(n)) {
                    index[node.0 as usize].push(TaskRef {
                        job,
                        index: i as u32,
                    });
                    by_queue.entry(info.queue.clone()).or_default().push(node);
                }
            }
        }
        for nodes in by_queue.values_mut() {
            nodes.sort_unstable();
            nodes.dedup();
        }
        let index = Arc::new(RunningIndex {
            by_node: index,
            nodes_by_queue: by_queue,
        });
        self.running_index = Some(index.clone());
        index
    }

    fn static_fit(&mut self, task: TaskRef) -> Arc<StaticFit> {
        let t = self.state.task(task);
        if let Some(fit) = self.static_fit.get(&t.placement_key) {
            return fit.clone();
        }
        let mut fit = StaticFit {
            pass: vec![false; self.state.node_slots()],
            nodes: Vec::new(),
            rejections: NodeRejections::default(),
        };
        for (id, node) in self.state.nodes() {
            match self
                .votes
                .static_predicate
                .all()
                .try_for_each(|f| f(t, node))
            {
                Ok(()) => {
                    fit.pass[id.0 as usize] = true;
                    fit.nodes.push(id);
                }
                Err(unfit) => fit.rejections.add(&unfit),
            }
        }
        let fit = Arc::new(fit);
        self.static_fit.insert(t.placement_key, fit.clone());
        fit
    }

    /// Up to `want` nodes on which `task` fits now (every predicate passes), scanning from a
    /// rotating offset so that load spreads; or why none does.
    pub fn feasible_nodes(&mut self, task: TaskRef, want: usize) -> Result<Vec<NodeId>, TaskUnfit> {
        let template = self.state.task(task).template;
        if let Some((epoch, unfit)) = self.unfit_memo.get(&template) {
            if *epoch == self.epoch {
                return Err(unfit.clone());
            }
        }
        let found = self.scan_candidates(task, want);
        if !found.is_empty() {
            return Ok(found);
        }
        let fit = self.static_fit(task);
        let t = self.state.task(task);
        // Nothing fits: say why, from every node (once per template until a release).
        // The headline reason comes from the nodes the task could run on but for their
        // current load (what the user can act on); selector or taint misses on other pools
        // only when no node passes those.
        let mut near = NodeRejections::default();
        for &id in &fit.nodes {
            let node = self.state.node(id);
            if let Err(unfit) = dynamic_fit(&self.votes, t, node) {
                near.add(&unfit);
            }
        }
        let mut all = fit.rejections.clone();
        all.merge(&near);
        let reason = if near.nodes > 0 {
            near.dominant()
        } else {
            all.dominant()
        };
        let unfit = TaskUnfit {
            reason,
            detail: all.summary(),
        };
        self.unfit_memo
            .insert(template, (self.epoch, unfit.clone()));
        Err(unfit)
    }

    /// Up to `want` nodes on which `task` fits now, without saying why none does (cheaper
    /// than `feasible_nodes` when nothing fits: preempt asks for every starving task).
    pub fn feasible_nodes_quiet(&mut self, task: TaskRef, want: usize) -> Vec<NodeId> {
        let template = self.state.task(task).template;
        if let Some((epoch, _)) = self.unfit_memo.get(&template) {
            if *epoch == self.epoch {
                return Vec::new();
            }
        }
        self.scan_candidates(task, want)
    }

    /// Scans a template's candidate nodes from the rotating offset for up to `want` on
    /// which the task fits, dropping those it does not fit (until something is released).
    fn scan_candidates(&mut self, task: TaskRef, want: usize) -> Vec<NodeId> {
        let template = self.state.task(task).template;
        let fit = self.static_fit(task);
        let slots = self.state.node_slots();
        let cands = self
            .candidates
            .entry(template)
            .or_insert_with(|| Candidates {
                nodes: fit.nodes.clone(),
                present: fit.pass.clone(),
                synced: self.released.len(),
            });
        for &n in &self.released[cands.synced..] {
            let i = n.0 as usize;
            if fit.pass[i] && !cands.present[i] {
                cands.present[i] = true;
                cands.nodes.push(n);
            }
        }
        cands.synced = self.released.len();
        debug_assert_eq!(cands.present.len(), slots);

        let t = self.state.task(task);
        let len = cands.nodes.len();
        let mut found = Vec::with_capacity(want.min(len));
        let mut dropped = Vec::new();
        let start = if len == 0 { 0 } else { self.scan_offset % len };
        let mut visited = 0;
        while visited < len && found.len() < want {
            let pos = (start + visited) % len;
            let id = cands.nodes[pos];
            let node = self.state.node(id);
            if dynamic_fit(&self.votes, t, node).is_ok() {
                found.push(id);
            } else {
                dropped.push(pos);
            }
            visited += 1;
        }
        self.scan_offset = self.scan_offset.wrapping_add(visited);
        dropped.sort_unstable_by(|a, b| b.cmp(a));
        for pos in dropped {
            let id = cands.nodes.swap_remove(pos);
            cands.present[id.0 as usize] = false;
        }
        found
    }

    /// The best node for `task` among up to `want` feasible nodes (the highest score; the
    /// first found wins ties), or why none fits. Consecutive tasks of one gang with the same
    /// template share one sample of nodes (see `Window`); other tasks scan afresh with
    /// `feasible_nodes`.
    pub fn best_feasible_node(&mut self, task: TaskRef, want: usize) -> Result<NodeId, TaskUnfit> {
        let template = self.state.task(task).template;
        if let Some(mut w) = self.window.take() {
            let changed = &self.touched[w.synced..];
            if w.job == task.job && w.template == template && changed.len() <= WINDOW_MAX_CHANGES {
                let t = self.state.task(task);
                if !changed.is_empty() {
                    let (state, votes) = (&self.state, &self.votes);
                    w.nodes.retain_mut(|(id, score)| {
                        if !changed.contains(id) {
                            return true;
                        }
                        let node = state.node(*id);
                        if dynamic_fit(votes, t, node).is_err() {
                            return false;
                        }
                        *score = node_score(votes, t, node);
                        true
                    });
                }
                w.synced = self.touched.len();
                if let Some(best) = highest(&w.nodes) {
                    self.window = Some(w);
                    return Ok(best);
                }
            }
        }
        let nodes = self.feasible_nodes(task, want)?;
        let t = self.state.task(task);
        let scored: Vec<(NodeId, f64)> = nodes
            .iter()
            .map(|&n| (n, node_score(&self.votes, t, self.state.node(n))))
            .collect();
        let best = highest(&scored).expect("feasible_nodes returns at least one node");
        self.window = Some(Window {
            job: task.job,
            template,
            nodes: scored,
            synced: self.touched.len(),
        });
        Ok(best)
    }

    // ----- recording outcomes --------------------------------------------------------

    /// Records why a task of a gang found no node this session.
    pub fn record_task_unfit(&mut self, task: TaskRef, unfit: TaskUnfit) {
        self.unschedulable
            .entry(task.job)
            .or_default()
            .tasks
            .insert(task.index, unfit);
    }

    /// Records that a gang is not valid (e.g. too few pods exist).
    pub fn record_job_invalid(&mut self, job: JobId, invalid: Invalid) {
        self.unschedulable.entry(job).or_default().invalid = Some(invalid);
    }

    /// Adds a note after any the gang's message already has (an action explaining why it
    /// could not help either).
    pub fn append_job_note(&mut self, job: JobId, note: impl Into<String>) {
        let note = note.into();
        let slot = &mut self.unschedulable.entry(job).or_default().note;
        *slot = Some(match slot.take() {
            Some(before) => format!("{before}; {note}"),
            None => note,
        });
    }

    /// Adds a note to an unschedulable gang's message (e.g. "queue overused").
    pub fn record_job_note(&mut self, job: JobId, note: impl Into<String>) {
        self.unschedulable.entry(job).or_default().note = Some(note.into());
    }

    /// The gang was committed: forget earlier failures in this session.
    pub(in crate::framework) fn record_scheduled(&mut self, job: JobId) {
        self.unschedulable.remove(&job);
        self.scheduled.insert(job);
    }

    /// Admits a Pending gang (enqueue).
    pub fn enqueue_job(&mut self, id: JobId) {
        let original = self.job(id).phase;
        self.original_phase.entry(id).or_insert(original);
        self.state.job_mut(id).phase = PodGroupPhase::Inqueue;
        let job = self.state.job(id);
        for f in &self.votes.job_enqueued {
            f(job);
        }
    }

    // ----- primitive changes (Statement is the only caller) ------------------------

    fn fire(&self, task: TaskRef, change: Change) {
        let job = self.state.job(task.job);
        let t = job.task(task.index);
        let node = t
            .node
            .as_deref()
            .and_then(|n| self.state.node_by_name(n))
            .map(|id| self.state.node(id));
        let event = Event {
            job,
            task: t,
            node,
            change,
        };
        let handlers = match change {
            Change::Placed | Change::Restored => &self.votes.on_allocate,
            Change::Unplaced | Change::Evicted => &self.votes.on_deallocate,
        };
        for h in handlers {
            h(&event);
        }
    }

    /// Moves a task to `status` on `node` (None: off any node), updating job and node
    /// bookkeeping. Returns the previous status and node.
    pub(in crate::framework) fn move_task(
        &mut self,
        task: TaskRef,
        status: TaskStatus,
        node: Option<NodeId>,
    ) -> (TaskStatus, Option<NodeId>) {
        let t = self.state.task(task);
        let (uid, prev_status) = (t.uid.clone(), t.status);
        let prev_node = t.node.as_deref().and_then(|n| self.state.node_by_name(n));
        self.touched.extend(prev_node);
        self.touched.extend(node.filter(|n| Some(*n) != prev_node));
        if let Some(p) = prev_node {
            self.state.node_mut(p).remove_task(&uid);
            // Resources come free unless the task stays on the node, holding the same way.
            let holds = |s: TaskStatus| {
                (
                    s.occupies_node() && s != TaskStatus::Releasing,
                    s == TaskStatus::Pipelined,
                )
            };
            let same_hold = node == Some(p) && holds(prev_status) == holds(status);
            let held = prev_status.occupies_node() || prev_status == TaskStatus::Pipelined;
            if held && !same_hold {
                self.released.push(p);
                self.epoch += 1;
            }
        }
        let node_name = node.map(|n| self.state.node(n).name.clone());
        let job = self.state.job_mut(task.job);
        job.set_task_status(task.index, status, node_name);
        let (job_uid, resreq, priority) = {
            let j = self.state.job(task.job);
            let t = j.task(task.index);
            (j.uid.clone(), t.resreq.clone(), t.priority)
        };
        if let Some(n) = node {
            self.state.node_mut(n).add_task(
                uid,
                NodeTask {
                    resreq,
                    status,
                    job: Some(job_uid),
                    priority,
                },
            );
        }
        (prev_status, prev_node)
    }

    pub(in crate::framework) fn allocate_task(
        &mut self,
        task: TaskRef,
        node: NodeId,
        status: TaskStatus,
    ) -> (TaskStatus, Option<NodeId>) {
        let prev = self.move_task(task, status, Some(node));
        self.fire(task, Change::Placed);
        prev
    }

    /// Undoes an allocate or pipeline: back to the previous status and node.
    pub(in crate::framework) fn unallocate_task(
        &mut self,
        task: TaskRef,
        prev: (TaskStatus, Option<NodeId>),
    ) {
        self.fire(task, Change::Unplaced);
        self.move_task(task, prev.0, prev.1);
    }

    pub(in crate::framework) fn evict_task(&mut self, task: TaskRef) -> TaskStatus {
        let t = self.state.task(task);
        let prev = t.status;
        let node = t.node.as_deref().and_then(|n| self.state.node_by_name(n));
        for b in &t.budgets {
            *self.budget_spent.entry(b.clone()).or_insert(0) += 1;
        }
        self.move_task(task, TaskStatus::Releasing, node);
        self.fire(task, Change::Evicted);
        prev
    }

    pub(in crate::framework) fn unevict_task(&mut self, task: TaskRef, prev: TaskStatus) {
        let t = self.state.task(task);
        for b in &t.budgets {
            if let Some(spent) = self.budget_spent.get_mut(b) {
                *spent -= 1;
            }
        }
        let node = t.node.as_deref().and_then(|n| self.state.node_by_name(n));
        self.move_task(task, prev, node);
        self.fire(task, Change::Restored);
    }

    pub(in crate::framework) fn dispatch_bind(&mut self, task: TaskRef) {
        let node = self
            .state
            .task(task)
            .node
            .as_deref()
            .and_then(|n| self.state.node_by_name(n));
        self.move_task(task, TaskStatus::Binding, node);
        let job = self.state.job(task.job);
        let t = job.task(task.index);
        self.binds.push(Bind {
            job: job.uid.clone(),
            task: t.uid.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            node: t.node.clone().expect("an allocated task has a node"),
        });
    }

    /// Binds the placements a gang held from earlier sessions (it is ready now).
    pub(in crate::framework) fn bind_held(&mut self, job: JobId) {
        let held: Vec<TaskRef> = (0..self.state.job(job).tasks().len() as u32)
            .map(|index| TaskRef { job, index })
            .filter(|t| self.state.task(*t).status == TaskStatus::Allocated)
            .collect();
        for task in held {
            self.dispatch_bind(task);
        }
    }

    pub(in crate::framework) fn dispatch_evict(
        &mut self,
        task: TaskRef,
        preemptor: Option<JobId>,
        reason: &str,
    ) {
        let preemptor = preemptor.map(|p| self.state.job(p).uid.clone());
        let job = self.state.job(task.job);
        let t = job.task(task.index);
        self.evictions.push(Eviction {
            job: job.uid.clone(),
            task: t.uid.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            node: t.node.clone(),
            preemptor,
            reason: reason.to_string(),
        });
    }

    /// A comparable copy of the mutable cluster state, for tests of exact undo.
    #[doc(hidden)]
    pub fn fingerprint(&self) -> (Vec<NodeInfo>, Vec<JobInfo>) {
        (
            self.state.nodes().map(|(_, n)| n.clone()).collect(),
            self.state.jobs().map(|(_, j)| j.clone()).collect(),
        )
    }
}

fn node_score(votes: &Votes, t: &TaskInfo, n: &NodeInfo) -> f64 {
    votes.node_order.all().map(|f| f(t, n)).sum()
}

/// The node with the highest score; the first one wins ties.
fn highest(nodes: &[(NodeId, f64)]) -> Option<NodeId> {
    let mut best: Option<(NodeId, f64)> = None;
    for &(n, score) in nodes {
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((n, score));
        }
    }
    best.map(|(n, _)| n)
}

/// Resource fit (always, whatever the configuration) and the plugins' dynamic predicates.
fn dynamic_fit(votes: &Votes, t: &TaskInfo, n: &NodeInfo) -> Result<(), Unfit> {
    resource_fit(t, n)?;
    votes.predicate.all().try_for_each(|f| f(t, n))
}

/// The PodGroup phase a gang should have after this session.
/// Tasks a gang holds from an earlier session (placed, not bound).
/// A gang's Allocated and Pipelined tasks, as holds in task order.
fn held_placements(job: &JobInfo) -> Vec<Hold> {
    job.tasks()
        .iter()
        .filter(|t| matches!(t.status, TaskStatus::Allocated | TaskStatus::Pipelined))
        .filter_map(|t| {
            Some(Hold {
                task: t.uid.clone(),
                node: t.node.clone()?,
                status: t.status,
            })
        })
        .collect()
}

/// Backoff after the n-th waiting-time expiry in a row: 5 s doubling, at most 5 min.
fn backoff(expiries: u32) -> i64 {
    5_000i64
        .saturating_mul(1i64 << expiries.saturating_sub(1).min(6))
        .min(300_000)
}

/// "1m30s", "45s", "250ms".
fn format_duration(ms: i64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string()
}

/// The condition of a gang whose waiting time ran out `expiries` times in a row; `released`
/// is how many held placements this expiry gave back (None while it backs off).
fn waiting_time_expired(job: &JobInfo, expiries: u32, released: Option<usize>) -> Invalid {
    let released = released
        .map(|n| format!("{n} held placement(s) released; "))
        .unwrap_or_default();
    Invalid {
        reason: "WaitingTimeExpired".into(),
        message: format!(
            "gang waited {} without every member fitting ({expiries} time(s) in a row); \
             {released}retrying after a backoff of {}",
            format_duration(job.policy.wait_timeout.unwrap_or(0)),
            format_duration(backoff(expiries)),
        ),
    }
}

fn next_phase(job: &JobInfo, current: PodGroupPhase) -> PodGroupPhase {
    if job.all_finished() {
        return PodGroupPhase::Completed;
    }
    let scheduled = job.ready_count();
    if job.min_member > 0 && scheduled >= job.min_member || job.min_member == 0 && scheduled > 0 {
        return PodGroupPhase::Running;
    }
    match current {
        PodGroupPhase::Running
            if job.count(TaskStatus::Running) + job.count(TaskStatus::Succeeded) > 0 =>
        {
            PodGroupPhase::Unknown
        }
        PodGroupPhase::Running | PodGroupPhase::Completed => PodGroupPhase::Inqueue,
        other => other,
    }
}
