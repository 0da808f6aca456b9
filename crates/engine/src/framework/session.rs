//! A session: one scheduling cycle over an immutable snapshot. Plugins register votes when
//! it opens; actions read the cluster through it and change it only through `Statement`s;
//! when it closes it reports binds, evictions and gang status changes for a driver to apply.
//!
//! This file holds the session itself: opening and closing, reading the cluster, and the
//! primitive moves a `Statement` makes. The rest of `impl Session` lives by concern:
//! `votes.rs` (registering and asking the plugins), `node_search.rs` (which nodes a task
//! can go to), `verdicts.rs` (what the session says about each gang) and `reservation.rs`
//! (EASY backfill's reservation).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::node_search::{KeptStaticFits, NodeSearch};
use super::outcome::{Bind, Eviction, SessionResult};
use super::plugin::ConfiguredPlugin;
use super::scheduler::{CycleObserver, NoObserver, SessionHook};
use super::verdicts::GangVerdicts;
use super::votes::{Change, Event, Votes};
use crate::conf::SchedulerConf;
use crate::model::devices::TaskClaim;
use crate::model::{
    JobId, JobInfo, NodeId, NodeInfo, NodeTask, PodGroupPhase, QueueInfo, QueueState, QueueTree,
    Resource, TaskInfo, TaskRef, TaskStatus, Timestamp,
};
use crate::snapshot::{ClusterState, JobSet};

pub struct Session {
    pub now: Timestamp,
    pub(super) state: ClusterState,
    pub(super) conf: Arc<SchedulerConf>,
    pub(super) votes: Votes,
    /// The configured plugins, built once by the scheduler.
    pub(super) plugins: Arc<[ConfiguredPlugin]>,
    /// The plugin whose `on_session_open` is running (its votes go to its tier).
    pub(super) registering: Option<usize>,
    binds: Vec<Bind>,
    evictions: Vec<Eviction>,
    /// What the session has found out about each gang (see `verdicts.rs`).
    pub(super) verdicts: GangVerdicts,
    /// What node searches remember (see `node_search.rs`).
    pub(super) search: NodeSearch,
    /// Allocatable of schedulable nodes, as the session opened.
    total_allocatable: Resource,
    /// EASY backfill's reservation for the head-of-line gang (see `reservation.rs`).
    pub(super) reservations: super::reservation::ReservationState,
    /// The queue hierarchy, resolved once (queues do not change during a session).
    queue_tree: QueueTree,
    /// Pods each PodDisruptionBudget has lost to this session's evictions so far.
    pub(super) budget_spent: HashMap<Arc<str>, u32>,
    /// What the whole-gang placement search did (see `gang_search.rs`).
    pub(super) search_stats: super::outcome::SearchStats,
    /// Where pods are by their labels, for pod votes (see `pod_index.rs`).
    pub(super) pods: super::pod_index::PodIndex,
    pod_rules_in_use: std::cell::OnceCell<crate::snapshot::PodRulesInUse>,
    /// Each placed task's claims as they were before each placement, to undo it exactly.
    claims_before: HashMap<TaskRef, Vec<Arc<[TaskClaim]>>>,
    /// Whether (and for how many gangs) the session predicts start times as it closes
    /// (see `prediction.rs`).
    pub(super) predict: Option<super::prediction::PredictOptions>,
    /// The earliest time something this session waited on changes by the clock alone (a
    /// victim outgrows its minimum runtime, a preemptor's delay ends): a driver that runs
    /// cycles only on changes looks again then.
    wake_at: Option<Timestamp>,
    /// Every queue's usage as the session opened, when a plugin weighs shares by it (see
    /// `usage.rs`).
    usage: Option<Arc<super::usage::UsageLedger>>,
}

impl Session {
    /// Opens a session: each configured plugin registers its votes, `observer` told when
    /// each plugin's `on_session_open` starts and ends.
    pub(super) fn open(
        snapshot: ClusterState,
        conf: Arc<SchedulerConf>,
        plugins: Arc<[ConfiguredPlugin]>,
        kept_static_fits: Arc<KeptStaticFits>,
        now: Timestamp,
        usage: Option<Arc<super::usage::UsageLedger>>,
        observer: &mut dyn CycleObserver,
    ) -> Session {
        #[cfg(debug_assertions)]
        snapshot.check_tally();
        let total_allocatable = snapshot.total_allocatable();
        let queue_tree = QueueTree::new(snapshot.queues());
        let verdicts = GangVerdicts::new(&snapshot);
        let mut ssn = Session {
            now,
            total_allocatable,
            queue_tree,
            state: snapshot,
            conf,
            votes: Votes::default(),
            plugins: plugins.clone(),
            registering: None,
            binds: Vec::new(),
            evictions: Vec::new(),
            verdicts,
            search: NodeSearch::with_kept(kept_static_fits),
            reservations: Default::default(),
            budget_spent: HashMap::new(),
            search_stats: Default::default(),
            pods: Default::default(),
            pod_rules_in_use: Default::default(),
            claims_before: HashMap::new(),
            predict: None,
            wake_at: None,
            usage,
        };
        for (at, configured) in plugins.iter().enumerate() {
            ssn.registering = Some(at);
            observer.plugin(configured.name, SessionHook::Open, true);
            configured.plugin.on_session_open(&mut ssn);
            observer.plugin(configured.name, SessionHook::Open, false);
        }
        ssn.registering = None;
        ssn
    }

    /// Closes the session and reports what changed.
    pub fn close(self) -> SessionResult {
        self.close_observed(&mut NoObserver)
    }

    /// Like `close`, telling `observer` when each plugin's `on_session_close` starts and
    /// ends.
    pub fn close_observed(mut self, observer: &mut dyn CycleObserver) -> SessionResult {
        let predictions = match self.predict.clone() {
            Some(opts) => self.predict_starts(&opts),
            None => Vec::new(),
        };
        for configured in self.plugins.clone().iter() {
            observer.plugin(configured.name, SessionHook::Close, true);
            configured.plugin.on_session_close(&mut self);
            observer.plugin(configured.name, SessionHook::Close, false);
        }
        // Only gangs the session decided about or whose members moved them on can have
        // changed (`JobInfo::unsettled`); in slot order, as every gang was once.
        let mut ids = self.verdicts.decided();
        ids.union_with(self.state.tally().unsettled());
        let job_updates: Vec<super::outcome::JobUpdate> =
            ids.iter().filter_map(|id| self.job_update(id)).collect();
        #[cfg(debug_assertions)]
        {
            let every: Vec<super::outcome::JobUpdate> = self
                .state
                .jobs()
                .filter_map(|(id, _)| self.job_update(id))
                .collect();
            assert_eq!(job_updates, every, "a gang that changed was not reported");
        }
        SessionResult {
            binds: self.binds,
            evictions: self.evictions,
            job_updates,
            placement_search: self.search_stats,
            predictions,
            wake_at: self.wake_at,
        }
    }

    /// Every queue's usage, brought up to the session's time, when a plugin of the
    /// configuration weighs shares by it (`Plugin::usage_half_life`).
    pub fn queue_usage(&self) -> Option<&super::usage::UsageLedger> {
        self.usage.as_deref()
    }

    /// Asks for a cycle at `at` (see `SessionResult::wake_at`).
    pub fn wake_at(&mut self, at: Timestamp) {
        if at > self.now {
            self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        }
    }

    /// Until when a placed task is protected from preempt and reclaim by its minimum
    /// runtime (`min_runtime_of`), if it is now. A task with no start time is taken as just
    /// started.
    pub fn protected_until(&self, task: TaskRef) -> Option<Timestamp> {
        let job = self.job(task.job);
        let min = self.min_runtime_of(task.job)?;
        let until = job
            .task(task.index)
            .started
            .unwrap_or(self.now)
            .saturating_add(min);
        (until > self.now).then_some(until)
    }

    /// A gang's minimum runtime: its PriorityClass's (`GangPolicy::min_runtime`) when set,
    /// else its queue's (`QueueInfo::min_runtime`).
    pub fn min_runtime_of(&self, job: JobId) -> Option<i64> {
        let j = self.job(job);
        j.policy
            .min_runtime
            .or_else(|| self.queue(&j.queue)?.min_runtime)
    }

    /// A gang's preemption delay: its PriorityClass's (`GangPolicy::preemption_delay`) when
    /// set, else its queue's (`QueueInfo::preemption_delay`).
    pub fn preemption_delay_of(&self, job: JobId) -> Option<i64> {
        let j = self.job(job);
        j.policy
            .preemption_delay
            .or_else(|| self.queue(&j.queue)?.preemption_delay)
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

    /// Which pod-relative rules the session's pods carry (worked out once).
    pub fn pod_rules_in_use(&self) -> crate::snapshot::PodRulesInUse {
        *self
            .pod_rules_in_use
            .get_or_init(|| self.state.pod_rules_in_use())
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
        if let Some(p) = self.queue_tree.problem(name).or(queue.refused.as_deref()) {
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

    /// Jobs `among` those given that `include` takes, grouped by queue, each group in job
    /// order. Jobs whose queue does not exist are left out and noted as unschedulable.
    /// `among` is one of the state's kept sets (`Tally`) that holds every job `include`
    /// could take, so that a pass costs the candidates, not every gang of the cluster.
    pub fn jobs_by_queue(
        &mut self,
        among: &JobSet,
        mut include: impl FnMut(&Session, JobId) -> bool,
    ) -> BTreeMap<Arc<str>, Vec<JobId>> {
        #[cfg(debug_assertions)]
        for (id, _) in self.state.jobs() {
            assert!(
                among.contains(id) || !include(self, id),
                "a gang outside the candidates given was wanted"
            );
        }
        let mut groups: BTreeMap<Arc<str>, Vec<JobId>> = BTreeMap::new();
        for id in among.iter() {
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

    /// Admits a Pending gang (enqueue).
    pub fn enqueue_job(&mut self, id: JobId) {
        let original = self.job(id).phase;
        self.verdicts.original_phase.entry(id).or_insert(original);
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
        self.move_task_with(task, status, node, None)
    }

    /// `move_task`, replacing the task's claims (their allocations) once it is off its
    /// previous node and before it is on the new one.
    fn move_task_with(
        &mut self,
        task: TaskRef,
        status: TaskStatus,
        node: Option<NodeId>,
        claims: Option<Arc<[TaskClaim]>>,
    ) -> (TaskStatus, Option<NodeId>) {
        let t = self.state.task(task);
        let (uid, prev_status) = (t.uid.clone(), t.status);
        let prev_node = t.node.as_deref().and_then(|n| self.state.node_by_name(n));
        let slots = self.state.node_slots();
        for n in prev_node
            .into_iter()
            .chain(node.filter(|n| Some(*n) != prev_node))
        {
            self.search.touch(n, slots);
        }
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
                self.search.released.push(p);
                self.search.epoch += 1;
            }
        }
        if let Some(claims) = claims {
            let before = self.state.task(task).claims.clone();
            self.track_shared_claims(&before, false);
            self.track_shared_claims(&claims, true);
            self.state
                .job_mut(task.job)
                .set_task_claims(task.index, claims);
        }
        let node_name = node.map(|n| self.state.node(n).name.clone());
        self.state
            .job_mut(task.job)
            .set_task_status(task.index, status, node_name);
        let on_node = node.map(|n| {
            let j = self.state.job(task.job);
            (n, NodeTask::of(j.task(task.index), Some(j.uid.clone())))
        });
        self.pods
            .moved(&uid, on_node.as_ref().map(|(n, t)| (*n, t)));
        if let Some((n, t)) = on_node {
            self.state.node_mut(n).add_task(uid, t);
        }
        (prev_status, prev_node)
    }

    pub(in crate::framework) fn allocate_task(
        &mut self,
        task: TaskRef,
        node: NodeId,
        status: TaskStatus,
    ) -> (TaskStatus, Option<NodeId>) {
        let t = self.state.task(task);
        let mut claims = None;
        if !t.claims.is_empty() {
            // One entry per placement, changed or not, so that each undo pops its own.
            self.claims_before
                .entry(task)
                .or_default()
                .push(t.claims.clone());
            // Actions place a task only on a node it fits (devices included); should one
            // not, the task goes there without new devices rather than with a device twice.
            let future = status == TaskStatus::Pipelined;
            let rules = self.votes.device_rules(&self.state, t);
            match super::device_fit::claims_on(
                &self.state,
                &t.claims,
                self.state.node(node),
                future,
                &rules,
            ) {
                Ok(placed) => claims = placed,
                Err(e) => debug_assert!(false, "placed where its claims do not fit: {e}"),
            }
        }
        let prev = self.move_task_with(task, status, Some(node), claims);
        self.fire(task, Change::Placed);
        prev
    }

    /// Whether the task fits the node now (see `device_fit::fits_now`): placed there, it
    /// is allocated and bound; otherwise, fitting only once releases are through, it is
    /// pipelined.
    pub fn fits_now(&self, task: TaskRef, node: NodeId) -> bool {
        let t = self.state.task(task);
        let rules = self.votes.device_rules(&self.state, t);
        super::device_fit::fits_now(&self.state, t, self.state.node(node), &rules)
    }

    /// Undoes an allocate or pipeline: back to the previous status and node (and the
    /// claims' previous allocations).
    pub(in crate::framework) fn unallocate_task(
        &mut self,
        task: TaskRef,
        prev: (TaskStatus, Option<NodeId>),
    ) {
        self.fire(task, Change::Unplaced);
        let claims = self.claims_before.get_mut(&task).and_then(|s| s.pop());
        self.move_task_with(task, prev.0, prev.1, claims);
    }

    /// Counts the pods of shared claims placed in this session (see
    /// `ClusterState::claims_placed`), where the API has no allocation yet.
    fn track_shared_claims(&mut self, claims: &[TaskClaim], add: bool) {
        for c in claims.iter().filter(|c| c.shared) {
            let Some(a) = &c.allocation else { continue };
            let placed = Arc::make_mut(&mut self.state.claims_placed);
            if add {
                placed.entry(c.name.clone()).or_insert((a.clone(), 0)).1 += 1;
            } else if let Some(entry) = placed.get_mut(&c.name) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    placed.remove(&c.name);
                }
            }
        }
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
            claims: t.claims.clone(),
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
