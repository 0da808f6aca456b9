//! Vote kinds, the function types plugins register, and how a tier combines them (Volcano's
//! semantics, ARCHITECTURE §4).

use std::cmp::Ordering;

use super::fit::Unfit;
use super::session::ClusterState;
use crate::model::{JobInfo, NodeInfo, QueueInfo, TaskInfo, TaskRef};

/// Everything a plugin can vote on. Each maps to Volcano's `enable…` switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VoteKind {
    JobOrder,
    QueueOrder,
    TaskOrder,
    Predicate,
    NodeOrder,
    JobValid,
    JobReady,
    JobPipelined,
    JobStarving,
    JobEnqueueable,
    Preemptable,
    Reclaimable,
    Overused,
    Allocatable,
}

/// Volcano switches we accept but that name votes this scheduler does not have; they load
/// (so existing files work) and change nothing.
const INERT_SWITCHES: &[&str] = &[
    "enableNamespaceOrder",
    "enableHierarchy",
    "enablePreemptive",
    "EnabledClusterOrder",
    "enableBestNode",
    "enableTargetJob",
    "enableReservedNodes",
    "enabledVictim",
    "enableHyperNodeOrder",
    "enableSubJobReady",
    "enableSubJobOrder",
];

impl VoteKind {
    pub const ALL: [VoteKind; 14] = [
        Self::JobOrder,
        Self::QueueOrder,
        Self::TaskOrder,
        Self::Predicate,
        Self::NodeOrder,
        Self::JobValid,
        Self::JobReady,
        Self::JobPipelined,
        Self::JobStarving,
        Self::JobEnqueueable,
        Self::Preemptable,
        Self::Reclaimable,
        Self::Overused,
        Self::Allocatable,
    ];

    /// The key in the config file.
    pub fn switch_name(self) -> &'static str {
        match self {
            Self::JobOrder => "enableJobOrder",
            Self::QueueOrder => "enableQueueOrder",
            Self::TaskOrder => "enableTaskOrder",
            Self::Predicate => "enablePredicate",
            Self::NodeOrder => "enableNodeOrder",
            Self::JobValid => "enableJobValid",
            Self::JobReady => "enableJobReady",
            Self::JobPipelined => "enableJobPipelined",
            Self::JobStarving => "enableJobStarving",
            Self::JobEnqueueable => "enableJobEnqueued",
            Self::Preemptable => "enablePreemptable",
            Self::Reclaimable => "enableReclaimable",
            Self::Overused => "enabledOverused",
            Self::Allocatable => "enabledAllocatable",
        }
    }

    /// `Some(Some(kind))` for a switch that controls a vote, `Some(None)` for a Volcano switch
    /// that has no effect here, `None` for an unknown key.
    pub fn from_switch(key: &str) -> Option<Option<VoteKind>> {
        if INERT_SWITCHES.contains(&key) {
            return Some(None);
        }
        // Volcano spells some switches "enabled…" and others "enable…"; accept both.
        let normalized = key.replacen("enabled", "enable", 1);
        Self::ALL
            .iter()
            .find(|k| k.switch_name().replacen("enabled", "enable", 1) == normalized)
            .map(|k| Some(*k))
    }

    pub fn switch_names() -> Vec<&'static str> {
        Self::ALL
            .iter()
            .map(|k| k.switch_name())
            .chain(INERT_SWITCHES.iter().copied())
            .collect()
    }
}

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
    pub reason: String,
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
/// A predicate that depends only on the task's placement rules and the node's spec
/// (labels, taints, readiness); cached per placement for the whole session.
pub type StaticPredicateFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> Result<(), Unfit>>;
/// A predicate on the node's current usage. It must be monotone: taking resources can only
/// turn it false, releasing them can only turn it true (the session relies on this to drop
/// nodes from a template's candidate list until something is released).
pub type PredicateFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> Result<(), Unfit>>;
/// A node score. Like predicates, it must depend only on the task's template (request and
/// placement rules) and the node: the session reuses scores across identical tasks of a gang
/// and re-scores only nodes whose usage changed.
pub type NodeOrderFn = Box<dyn Fn(&TaskInfo, &NodeInfo) -> f64>;
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
pub type JobEnqueuedFn = Box<dyn Fn(&JobInfo)>;

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

/// All votes registered for a session.
#[derive(Default)]
pub struct Votes {
    pub job_order: Tiered<JobOrderFn>,
    pub queue_order: Tiered<QueueOrderFn>,
    pub task_order: Tiered<TaskOrderFn>,
    pub static_predicate: Tiered<StaticPredicateFn>,
    pub predicate: Tiered<PredicateFn>,
    pub node_order: Tiered<NodeOrderFn>,
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
    pub on_allocate: Vec<EventFn>,
    pub on_deallocate: Vec<EventFn>,
}

impl Votes {
    /// The per-task and per-set victim votes of one kind of eviction.
    pub fn victim_votes(&self, kind: VictimKind) -> (&Tiered<VictimsFn>, &Tiered<VictimSetFn>) {
        match kind {
            VictimKind::Preempt => (&self.preemptable, &self.preemptable_set),
            VictimKind::Reclaim => (&self.reclaimable, &self.reclaimable_set),
        }
    }
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

    #[test]
    fn switches_round_trip() {
        for k in VoteKind::ALL {
            assert_eq!(VoteKind::from_switch(k.switch_name()), Some(Some(k)));
        }
        assert_eq!(
            VoteKind::from_switch("enableOverused"),
            Some(Some(VoteKind::Overused))
        );
        assert_eq!(VoteKind::from_switch("enableBestNode"), Some(None));
        assert_eq!(VoteKind::from_switch("enableMagic"), None);
    }
}
