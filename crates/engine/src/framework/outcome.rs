//! What a session hands back: binds, evictions and what it decided about each gang, for a
//! driver to apply.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::cache::Cache;
use crate::model::{GangRuntime, Hold, PodGroupPhase, Timestamp};

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
    pub reason: GangReason,
    pub message: String,
}

impl JobCondition {
    /// The Scheduled condition of a gang whose minimum is placed.
    pub fn scheduled(job: &crate::model::JobInfo) -> Self {
        JobCondition {
            kind: ConditionKind::Scheduled,
            reason: GangReason::Scheduled,
            message: format!(
                "{}/{} tasks in gang scheduled",
                job.ready_count(),
                job.tasks().len()
            ),
        }
    }
}

/// The reason of a gang's condition, as the PodGroup condition, events and the debug API
/// spell it (`as_str`, `Display` and `Serialize` all give Volcano's strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GangReason {
    /// Committed this session (the reason of the Scheduled condition).
    Scheduled,
    /// Its pods do not all fit: resources, predicates, its queue.
    NotEnoughResources,
    /// Fewer pods exist than its minMember (or a role's minTaskMember, or its total-number)
    /// asks: the gang is still forming.
    NotEnoughTasks,
    /// Its waiting time ran out; it backs off before it is tried again.
    WaitingTimeExpired,
    /// Enough pods exist, but members it needs are held by scheduling gates.
    SchedulingGated,
    /// Enough pods exist, but members it needs ask for what rust-batch does not model
    /// (e.g. DRA resource claims): they are refused, so the gang waits.
    Unsupported,
}

impl GangReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "Scheduled",
            Self::NotEnoughResources => "NotEnoughResources",
            Self::NotEnoughTasks => "NotEnoughTasks",
            Self::WaitingTimeExpired => "WaitingTimeExpired",
            Self::SchedulingGated => "SchedulingGated",
            Self::Unsupported => "Unsupported",
        }
    }
}

impl fmt::Display for GangReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for GangReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What keeps an unschedulable gang's pending pods off the nodes, for the pods'
/// PodScheduled condition: only `Capacity` is something more nodes would fix, so only it
/// gets the reason cluster autoscalers (Cluster Autoscaler, Karpenter) act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blocker {
    /// The nodes cannot hold the gang: resources, selectors, taints.
    Capacity,
    /// Its queue may not take it now: capability, deserved share used up, closed, missing.
    Queue,
    /// Not admitted yet (enqueue): its PodGroup is still Pending.
    Admission,
    /// Fewer pods exist than its minimum: the gang is still forming.
    Forming,
    /// Members it needs are held by scheduling gates (whoever set them lifts them).
    Gated,
    /// Members it needs are refused (they ask for what rust-batch does not model).
    Refused,
}

impl Blocker {
    /// The PodScheduled=False reason: `Unschedulable` (Kubernetes' own, what autoscalers
    /// look for) only for capacity.
    pub fn pod_reason(self) -> &'static str {
        match self {
            Self::Capacity => "Unschedulable",
            Self::Queue => "QueueLimit",
            Self::Admission => "NotAdmitted",
            Self::Forming => "GangIncomplete",
            // The API server's own reason for a gated pod: no autoscaler acts on it.
            Self::Gated => "SchedulingGated",
            Self::Refused => "Unsupported",
        }
    }
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
    /// What keeps an unschedulable gang's pending tasks waiting (None if it is not
    /// unschedulable, or after a waiting-time expiry, which says nothing new).
    pub blocked_by: Option<Blocker>,
    /// What the engine must remember about the gang next session, when it changed.
    pub runtime: Option<GangRuntime>,
    /// The gang's tentative placements to keep until the next session (NonStrict gangs),
    /// replacing any it held; `Some(empty)` releases them.
    pub holds: Option<Vec<Hold>>,
    /// The reservation EASY backfill made for the gang this session, if any (its condition
    /// message says the same in words).
    pub reservation: Option<ReservedNodes>,
}

/// Where and when a gang's reservation holds, by node name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedNodes {
    pub nodes: Vec<Arc<str>>,
    /// When its pods fit there, by the running pods' runtime estimates.
    pub from: Timestamp,
}

impl fmt::Display for ReservedNodes {
    /// "reserved: nodes gpu-1,gpu-2 from 2026-01-01T10:25:00Z". No "in 25m": the message
    /// would change every cycle, and drivers send an event whenever it changes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.from.max(0) as u64);
        write!(
            f,
            "reserved: nodes {} from {}",
            self.nodes.join(","),
            humantime::format_rfc3339_seconds(at)
        )
    }
}

/// Everything a driver applies after a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionResult {
    pub binds: Vec<Bind>,
    pub evictions: Vec<Eviction>,
    pub job_updates: Vec<JobUpdate>,
    /// What the whole-gang placement search did this session.
    pub placement_search: SearchStats,
}

/// How often the whole-gang placement search ran in a session, and to what end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Searches run (a gang inside one node set, or over the whole cluster).
    pub searches: u32,
    /// Searches that placed their gang.
    pub placed: u32,
    /// Searches whose budget ran out.
    pub gave_up: u32,
    pub tries: u64,
}

// The cache knows nothing of sessions (it depends on the snapshot type only); applying a
// session's gang updates to it is the framework's business, so the method lives here.
impl Cache {
    /// What a session decided that the engine must remember: gang runtimes and holds.
    /// (Binds, evictions and phases are the driver's to apply: they depend on the API.)
    pub fn apply_gang_updates(&mut self, updates: &[JobUpdate]) {
        for u in updates {
            if let Some(rt) = &u.runtime {
                self.set_gang_runtime(&u.job, rt);
            }
            if let Some(holds) = &u.holds {
                self.set_holds(&u.job, holds);
            }
        }
    }
}
