//! Votes: their kinds, the function types plugins register, how a tier combines them
//! (Volcano's semantics, docs/src/architecture.md#4-engine-semantics), registering them
//! with a session and asking them.

use std::cmp::Ordering;

use std::collections::HashMap;

use super::fit::{resource_fit, Unfit};
use super::gang_search::GangDomains;
use super::outcome::GangReason;
use super::pod_index::PodView;
use super::session::Session;
use crate::conf::VoteKind;
use crate::model::{JobId, JobInfo, NodeId, NodeInfo, QueueInfo, TaskInfo, TaskRef};
use crate::snapshot::ClusterState;

/// A plugin's answer where it may also abstain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    Permit,
    Abstain,
    Reject,
}

/// Why a job is not valid (e.g. fewer pods exist than minMember).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub reason: GangReason,
    pub message: String,
}

/// What plugins are told when a task is placed on or taken off a node in the session.
pub struct Event<'a> {
    pub job: &'a JobInfo,
    pub task: &'a TaskInfo,
    pub node: Option<&'a NodeInfo>,
    pub change: Change,
}

/// Which change an event reports. Allocate handlers hear `Placed` and `Restored`,
/// deallocate handlers `Unplaced` and `Evicted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Allocated or pipelined in this session.
    Placed,
    /// A placement of this session undone.
    Unplaced,
    /// Evicted: the task is releasing its node.
    Evicted,
    /// An eviction undone: the task holds its node again, as when the session opened.
    Restored,
}

pub type JobOrderFn = Box<dyn Fn(&JobInfo, &JobInfo) -> Ordering>;
pub type QueueOrderFn = Box<dyn Fn(&QueueInfo, &QueueInfo) -> Ordering>;
pub type TaskOrderFn = Box<dyn Fn(&TaskInfo, &TaskInfo) -> Ordering>;
/// A predicate that depends only on the node's spec (labels, taints, readiness) and what
/// `Placement::static_key` covers of the task's placement (node selector, required node
/// affinity, tolerations, volume rules); cached per `TaskInfo::placement_key` for the whole
/// session.
pub type StaticPredicateFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> Result<(), Unfit>>;
/// A predicate on the node's current usage. It must be monotone: taking resources can only
/// turn it false, releasing them can only turn it true (the session relies on this to drop
/// nodes from a template's candidate list until something is released).
pub type PredicateFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> Result<(), Unfit>>;
/// A node score. Like predicates, it must depend only on the task's template (request and
/// placement rules) and the node: the session reuses scores across identical tasks of a gang
/// and re-scores only nodes whose usage changed.
pub type NodeOrderFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> f64>;
/// A predicate relative to other pods (inter-pod affinity, topology spread), read from the
/// session's pod index. Not monotone in general: a node it fails may pass once another pod
/// is placed, so node searches never drop a node for it (unless the reason says the node
/// stays unfit until a release, `PodMismatch::until_release`).
pub type PodPredicateFn = Box<dyn Fn(&PodView, &TaskInfo, NodeId, &NodeInfo) -> Result<(), Unfit>>;
/// A score relative to other pods (preferred inter-pod affinity, soft topology spread).
pub type PodNodeOrderFn = Box<dyn Fn(&PodView, &TaskInfo, NodeId, &NodeInfo) -> f64>;
pub type JobValidFn = Box<dyn Fn(&JobInfo) -> Option<Invalid>>;
pub type JobCheckFn = Box<dyn Fn(&JobInfo) -> bool>;
pub type JobVoteFn = Box<dyn Fn(&JobInfo) -> Vote>;
/// Given the preemptor and candidate victims, the subset this plugin allows to be evicted,
/// or `None` to abstain.
pub type VictimsFn = Box<dyn Fn(&ClusterState, TaskRef, &[TaskRef]) -> Option<Vec<TaskRef>>>;
/// Given the preemptor and a set of victims to evict together, whether this plugin allows
/// the whole set (`None` to abstain). A plugin that registers one is asked this instead of
/// its per-task `VictimsFn` when an action proposes a set (e.g. a victim gang whole).
pub type VictimSetFn = Box<dyn Fn(&ClusterState, TaskRef, &[TaskRef]) -> Option<bool>>;
pub type QueueCheckFn = Box<dyn Fn(&QueueInfo) -> bool>;
pub type AllocatableFn = Box<dyn Fn(&QueueInfo, &TaskInfo) -> bool>;
pub type EventFn = Box<dyn Fn(&Event)>;
/// Where a gang should go: node sets (topology domains, GPU models) to place it inside,
/// best first, or `None` to abstain (see `GangDomains`). Given the nodes that pass the
/// static predicates of the gang's pending tasks (one entry per distinct placement), so
/// that room on nodes the gang cannot use is not counted.
pub type GangDomainsFn =
    Box<dyn Fn(&ClusterState, JobId, &[super::StaticNodes]) -> Option<GangDomains>>;
/// Where one subgroup of a gang should go (its policy's own `networkTopology`): node sets
/// to place the subgroup inside, best first, or `None` to abstain. Given, as for
/// `GangDomainsFn`, the nodes that pass the static predicates of its pending members.
pub type SubGroupDomainsFn = Box<
    dyn Fn(
        &ClusterState,
        JobId,
        &crate::model::SubGroupKey,
        &[super::StaticNodes],
    ) -> Option<GangDomains>,
>;
pub type JobEnqueuedFn = Box<dyn Fn(&JobInfo)>;
/// Rules on the devices of the task's whole gang (`GangDeviceRule`), given the state the
/// task is placed in (where its gang's devices are so far); empty to abstain.
pub type DeviceRulesFn =
    Box<dyn Fn(&ClusterState, &TaskInfo) -> Vec<crate::model::devices::GangDeviceRule>>;

/// Functions of one kind, grouped by tier in configuration order.
pub struct Tiered<F> {
    pub tiers: Vec<Vec<(&'static str, F)>>,
}

impl<F> Default for Tiered<F> {
    fn default() -> Self {
        Tiered { tiers: Vec::new() }
    }
}

impl<F> Tiered<F> {
    pub fn push(&mut self, tier: usize, plugin: &'static str, f: F) {
        if self.tiers.len() <= tier {
            self.tiers.resize_with(tier + 1, Vec::new);
        }
        self.tiers[tier].push((plugin, f));
    }

    pub fn all(&self) -> impl Iterator<Item = &F> {
        self.tiers.iter().flatten().map(|(_, f)| f)
    }

    pub fn is_empty(&self) -> bool {
        self.tiers.iter().all(Vec::is_empty)
    }

    /// First non-equal answer wins (order functions).
    pub fn compare(&self, cmp: impl Fn(&F) -> Ordering) -> Ordering {
        self.all()
            .map(cmp)
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// Every function must agree (JobReady, Allocatable).
    pub fn all_true(&self, check: impl Fn(&F) -> bool) -> bool {
        self.all().all(check)
    }

    /// Any function says yes (Overused).
    pub fn any_true(&self, check: impl Fn(&F) -> bool) -> bool {
        self.all().any(check)
    }

    /// Permit/abstain/reject voting (JobPipelined, JobEnqueueable): any reject is false; a
    /// permit ends the vote at the end of its tier; all abstaining is true.
    pub fn permit(&self, vote: impl Fn(&F) -> Vote) -> bool {
        for tier in &self.tiers {
            let mut permitted = false;
            for (_, f) in tier {
                match vote(f) {
                    Vote::Reject => return false,
                    Vote::Permit => permitted = true,
                    Vote::Abstain => {}
                }
            }
            if permitted {
                return true;
            }
        }
        true
    }

    /// JobStarving: in the first tier with any function, all of them must agree.
    pub fn first_tier_all(&self, check: impl Fn(&F) -> bool) -> bool {
        for tier in &self.tiers {
            if tier.is_empty() {
                continue;
            }
            return tier.iter().all(|(_, f)| check(f));
        }
        false
    }

    /// Victim selection: the answers of every plugin that votes (in any tier) intersect;
    /// a plugin that answers with no victims vetoes them all. Stricter than Volcano, where
    /// a later tier's answer overrides an earlier tier's veto — the way gang-unaware
    /// evictions slip through there.
    pub fn victims(&self, answer: impl Fn(&F) -> Option<Vec<TaskRef>>) -> Vec<TaskRef> {
        let mut chosen: Option<Vec<TaskRef>> = None;
        for f in self.all() {
            let Some(candidates) = answer(f) else {
                continue;
            };
            chosen = Some(match chosen {
                None => candidates,
                // Plugins mostly allow everything they are offered: skip the quadratic
                // intersection then (preempt and reclaim ask for every node they look at).
                Some(prev) if prev == candidates => prev,
                Some(prev) => prev
                    .into_iter()
                    .filter(|t| candidates.contains(t))
                    .collect(),
            });
            if chosen.as_ref().is_some_and(Vec::is_empty) {
                break;
            }
        }
        chosen.unwrap_or_default()
    }
}

/// The candidates every plugin without a set vote allows, each judged on its own (all of
/// them if no such plugin votes): a member of a victim set must be among these.
pub fn victim_members(
    per_task: &Tiered<VictimsFn>,
    per_set: &Tiered<VictimSetFn>,
    state: &ClusterState,
    preemptor: TaskRef,
    candidates: &[TaskRef],
) -> Vec<TaskRef> {
    let has_set_vote = |name: &str| per_set.tiers.iter().flatten().any(|(p, _)| *p == name);
    let mut chosen = candidates.to_vec();
    for (plugin, f) in per_task.tiers.iter().flatten() {
        if chosen.is_empty() {
            break;
        }
        if has_set_vote(plugin) {
            continue;
        }
        if let Some(allowed) = f(state, preemptor, &chosen) {
            // Mostly everything offered is allowed: skip the quadratic intersection then.
            if allowed != chosen {
                chosen.retain(|t| allowed.contains(t));
            }
        }
    }
    chosen
}

/// Whether every voting plugin allows evicting `set` together: a plugin with a set vote
/// answers for the set; any other must keep every member in its per-task answer.
pub fn victim_set_allowed(
    per_task: &Tiered<VictimsFn>,
    per_set: &Tiered<VictimSetFn>,
    state: &ClusterState,
    preemptor: TaskRef,
    set: &[TaskRef],
) -> bool {
    per_set
        .all()
        .all(|f| f(state, preemptor, set) != Some(false))
        && victim_members(per_task, per_set, state, preemptor, set).len() == set.len()
}

/// Which eviction victims are asked for: preempt (within the preemptor's queue) or
/// reclaim (from other queues). Each has its own per-task and per-set votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimKind {
    Preempt,
    Reclaim,
}

/// One kind of vote a plugin can register: the function it takes, the configuration switch
/// that turns it off, and where a session keeps it. The types are in `vote`.
pub trait VoteSlot {
    type Fn;
    const KIND: VoteKind;
    fn slot(votes: &mut Votes) -> &mut Tiered<Self::Fn>;
}

/// The votes a plugin can register with `Session::add`, one type each.
pub mod vote {
    use super::*;

    macro_rules! vote_slots {
        ($($(#[$doc:meta])* $name:ident($f:ty) = $kind:ident in $field:ident;)*) => {$(
            $(#[$doc])*
            pub struct $name;
            impl VoteSlot for $name {
                type Fn = $f;
                const KIND: VoteKind = VoteKind::$kind;
                fn slot(votes: &mut Votes) -> &mut Tiered<$f> {
                    &mut votes.$field
                }
            }
        )*};
    }

    vote_slots! {
        JobOrder(JobOrderFn) = JobOrder in job_order;
        QueueOrder(QueueOrderFn) = QueueOrder in queue_order;
        TaskOrder(TaskOrderFn) = TaskOrder in task_order;
        /// Switched by `enablePredicate`, like `Predicate`.
        StaticPredicate(StaticPredicateFn) = Predicate in static_predicate;
        Predicate(PredicateFn) = Predicate in predicate;
        NodeOrder(NodeOrderFn) = NodeOrder in node_order;
        /// Switched by `enablePredicate`, like `Predicate`.
        PodPredicate(PodPredicateFn) = Predicate in pod_predicate;
        /// Switched by `enableNodeOrder`, like `NodeOrder`.
        PodNodeOrder(PodNodeOrderFn) = NodeOrder in pod_node_order;
        JobValid(JobValidFn) = JobValid in job_valid;
        JobReady(JobCheckFn) = JobReady in job_ready;
        JobPipelined(JobVoteFn) = JobPipelined in job_pipelined;
        JobStarving(JobCheckFn) = JobStarving in job_starving;
        JobEnqueueable(JobVoteFn) = JobEnqueueable in job_enqueueable;
        Preemptable(VictimsFn) = Preemptable in preemptable;
        Reclaimable(VictimsFn) = Reclaimable in reclaimable;
        /// Switched by `enablePreemptable`, like `Preemptable`.
        PreemptableSet(VictimSetFn) = Preemptable in preemptable_set;
        /// Switched by `enableReclaimable`, like `Reclaimable`.
        ReclaimableSet(VictimSetFn) = Reclaimable in reclaimable_set;
        Overused(QueueCheckFn) = Overused in overused;
        Allocatable(AllocatableFn) = Allocatable in allocatable;
        /// Switched by `enableHyperNodeOrder` (Volcano's switch for its network-topology
        /// votes).
        GangDomains(GangDomainsFn) = HyperNodeOrder in gang_domains;
        /// Switched by `enableHyperNodeOrder`, like `GangDomains`.
        SubGroupDomains(SubGroupDomainsFn) = HyperNodeOrder in subgroup_domains;
        /// Switched by `enablePredicate`, like `Predicate`.
        DeviceRules(DeviceRulesFn) = Predicate in device_rules;
    }
}

/// All votes registered for a session.
#[derive(Default)]
pub struct Votes {
    pub job_order: Tiered<JobOrderFn>,
    pub queue_order: Tiered<QueueOrderFn>,
    pub task_order: Tiered<TaskOrderFn>,
    pub static_predicate: Tiered<StaticPredicateFn>,
    pub predicate: Tiered<PredicateFn>,
    pub node_order: Tiered<NodeOrderFn>,
    pub pod_predicate: Tiered<PodPredicateFn>,
    pub pod_node_order: Tiered<PodNodeOrderFn>,
    pub job_valid: Tiered<JobValidFn>,
    pub job_ready: Tiered<JobCheckFn>,
    pub job_pipelined: Tiered<JobVoteFn>,
    pub job_starving: Tiered<JobCheckFn>,
    pub job_enqueueable: Tiered<JobVoteFn>,
    pub job_enqueued: Vec<JobEnqueuedFn>,
    pub preemptable: Tiered<VictimsFn>,
    pub reclaimable: Tiered<VictimsFn>,
    pub preemptable_set: Tiered<VictimSetFn>,
    pub reclaimable_set: Tiered<VictimSetFn>,
    pub overused: Tiered<QueueCheckFn>,
    pub allocatable: Tiered<AllocatableFn>,
    pub gang_domains: Tiered<GangDomainsFn>,
    pub subgroup_domains: Tiered<SubGroupDomainsFn>,
    pub device_rules: Tiered<DeviceRulesFn>,
    pub on_allocate: Vec<EventFn>,
    pub on_deallocate: Vec<EventFn>,
}

impl Votes {
    /// Every plugin's rules on the devices of the task's gang.
    pub fn device_rules(
        &self,
        state: &ClusterState,
        t: &TaskInfo,
    ) -> Vec<crate::model::devices::GangDeviceRule> {
        if self.device_rules.is_empty() || t.claims.is_empty() {
            return Vec::new();
        }
        self.device_rules.all().flat_map(|f| f(state, t)).collect()
    }

    /// The per-task and per-set victim votes of one kind of eviction.
    pub fn victim_votes(&self, kind: VictimKind) -> (&Tiered<VictimsFn>, &Tiered<VictimSetFn>) {
        match kind {
            VictimKind::Preempt => (&self.preemptable, &self.preemptable_set),
            VictimKind::Reclaim => (&self.reclaimable, &self.reclaimable_set),
        }
    }
}

impl Session {
    // ----- registering votes (plugins call these from on_session_open) ---------------

    /// Registers a plugin's vote of one kind, e.g. `ssn.add(vote::JobReady, Box::new(…))`,
    /// in the plugin's tier unless its configuration switches that vote off.
    pub fn add<V: VoteSlot>(&mut self, _vote: V, f: V::Fn) {
        let Some(at) = self.registering else {
            panic!("votes are registered from Plugin::on_session_open");
        };
        let plugin = &self.plugins[at];
        if plugin.disabled.contains(&V::KIND) {
            return;
        }
        let (tier, name) = (plugin.tier, plugin.name);
        V::slot(&mut self.votes).push(tier, name, f);
    }

    pub fn add_job_enqueued_fn(&mut self, f: JobEnqueuedFn) {
        self.votes.job_enqueued.push(f);
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

    /// Where the gang should go, given the tasks to place: the first plugin's answer that
    /// does not abstain.
    pub fn gang_domains(&mut self, job: JobId, tasks: &[TaskRef]) -> Option<GangDomains> {
        if self.votes.gang_domains.is_empty() {
            return None;
        }
        let usable = self.usable_nodes(tasks);
        self.votes
            .gang_domains
            .all()
            .find_map(|f| f(&self.state, job, &usable))
    }

    /// Where the subgroup `key` of the gang should go, given its tasks to place: the first
    /// plugin's answer that does not abstain.
    pub fn subgroup_domains(
        &mut self,
        job: JobId,
        key: &crate::model::SubGroupKey,
        tasks: &[TaskRef],
    ) -> Option<GangDomains> {
        if self.votes.subgroup_domains.is_empty() {
            return None;
        }
        let usable = self.usable_nodes(tasks);
        self.votes
            .subgroup_domains
            .all()
            .find_map(|f| f(&self.state, job, key, &usable))
    }

    /// The nodes that pass the static predicates of `tasks`, one entry per distinct
    /// placement.
    fn usable_nodes(&mut self, tasks: &[TaskRef]) -> Vec<super::StaticNodes> {
        let mut usable: Vec<(u64, super::StaticNodes)> = Vec::new();
        for &task in tasks {
            let key = self.task(task).placement_key;
            if !usable.iter().any(|(k, _)| *k == key) {
                let nodes = self.static_nodes(task);
                usable.push((key, nodes));
            }
        }
        usable.into_iter().map(|(_, n)| n).collect()
    }

    /// Sum of every node-order plugin's score.
    pub fn node_score(&self, task: TaskRef, node: NodeId) -> f64 {
        node_score(
            &self.votes,
            &self.pod_view(),
            self.task(task),
            node,
            self.node(node),
        )
    }

    /// All predicates, static and dynamic, for one task on one node.
    pub fn predicate(&self, task: TaskRef, node: NodeId) -> Result<(), Unfit> {
        let (t, n) = (self.task(task), self.node(node));
        for f in self.votes.static_predicate.all() {
            f(t, n)?;
        }
        dynamic_fit(&self.votes, &self.pod_view(), t, node, n)
    }

    /// What pod votes read: the session's pod index over its state.
    pub fn pod_view(&self) -> PodView<'_> {
        PodView {
            index: &self.pods,
            state: &self.state,
        }
    }

    /// Whether answers found for one task hold for every task of its template: true
    /// unless pods' rules make them depend on the task's labels or on where pods are
    /// elsewhere in a domain. `monotone_only`: asks only that "nothing fits" stays true
    /// until a release (placements can only take nodes away).
    pub(super) fn template_answers(&self, t: &TaskInfo, monotone_only: bool) -> bool {
        // A shared claim placed by a sibling changes every other node's answer for the
        // claim's pods without touching those nodes.
        // Rules on a gang's devices: a sibling placed fixes the value the others need.
        if t.claims.iter().any(|c| c.shared)
            || !t.claims.is_empty()
                && (!self.votes.device_rules.is_empty() || self.state.tally().has_shared_devices())
        {
            return false;
        }
        if self.votes.pod_predicate.is_empty() && self.votes.pod_node_order.is_empty() {
            return true;
        }
        let own = t.placement.rules().is_none_or(|r| {
            if monotone_only {
                r.monotone()
            } else {
                r.node_local()
            }
        });
        own && !self
            .pod_view()
            .anti_affinity_selects(&t.namespace, &t.labels)
    }
}

/// Sum of every node-order plugin's score.
pub(super) fn node_score(
    votes: &Votes,
    pods: &PodView,
    t: &TaskInfo,
    id: NodeId,
    n: &NodeInfo,
) -> f64 {
    votes.node_order.all().map(|f| f(t, n)).sum::<f64>()
        + votes
            .pod_node_order
            .all()
            .map(|f| f(pods, t, id, n))
            .sum::<f64>()
}

/// Resource fit (always, whatever the configuration) and the plugins' dynamic predicates.
pub(super) fn dynamic_fit(
    votes: &Votes,
    pods: &PodView,
    t: &TaskInfo,
    id: NodeId,
    n: &NodeInfo,
) -> Result<(), Unfit> {
    resource_fit(t, n)?;
    super::device_fit::device_fit(pods.state, t, n, &votes.device_rules(pods.state, t))?;
    votes.predicate.all().try_for_each(|f| f(t, n))?;
    votes
        .pod_predicate
        .all()
        .try_for_each(|f| f(pods, t, id, n))
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobId;

    fn t(i: u32) -> TaskRef {
        TaskRef {
            job: JobId(0),
            index: i,
        }
    }

    #[test]
    fn permit_voting_follows_tiers() {
        let mut v: Tiered<Vote> = Tiered::default();
        assert!(v.permit(|x| *x), "all abstain is true");
        v.push(0, "a", Vote::Abstain);
        v.push(1, "b", Vote::Permit);
        v.push(2, "c", Vote::Reject);
        assert!(
            v.permit(|x| *x),
            "a permit in tier 2 ends before tier 3's reject"
        );
        v.push(1, "d", Vote::Reject);
        assert!(!v.permit(|x| *x), "a reject in the same tier wins");
    }

    #[test]
    fn victims_intersect_across_every_voting_plugin_and_a_veto_is_final() {
        let mut v: Tiered<Option<Vec<TaskRef>>> = Tiered::default();
        v.push(0, "a", Some(vec![t(1), t(2), t(3)]));
        v.push(0, "b", Some(vec![t(2), t(3), t(4)]));
        v.push(0, "c", None);
        v.push(1, "d", Some(vec![t(3), t(9)]));
        assert_eq!(
            v.victims(|x| x.clone()),
            vec![t(3)],
            "abstentions aside, all must agree"
        );
        let mut veto: Tiered<Option<Vec<TaskRef>>> = Tiered::default();
        veto.push(0, "a", Some(vec![t(1)]));
        veto.push(0, "gang", Some(vec![]));
        veto.push(1, "c", Some(vec![t(1), t(7)]));
        assert!(
            veto.victims(|x| x.clone()).is_empty(),
            "a later tier cannot override a veto"
        );
        let none: Tiered<Option<Vec<TaskRef>>> = Tiered::default();
        assert!(
            none.victims(|x| x.clone()).is_empty(),
            "no vote, no victims"
        );
    }
}
