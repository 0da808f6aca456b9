use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::Serialize;

use super::{Placement, Resource, Timestamp, TopologyRequest};

/// Where a task is in its life, as in Volcano (see docs/src/architecture.md#4-engine-semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TaskStatus {
    Pending,
    /// Chosen this session against idle resources.
    Allocated,
    /// Chosen this session against resources that are being released.
    Pipelined,
    /// Bind sent, not yet confirmed.
    Binding,
    Bound,
    Running,
    /// Being evicted or terminating; still occupies its node.
    Releasing,
    Succeeded,
    Failed,
    Unknown,
}

impl TaskStatus {
    pub const COUNT: usize = 10;
    pub const ALL: [TaskStatus; Self::COUNT] = [
        Self::Pending,
        Self::Allocated,
        Self::Pipelined,
        Self::Binding,
        Self::Bound,
        Self::Running,
        Self::Releasing,
        Self::Succeeded,
        Self::Failed,
        Self::Unknown,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// Counted in a node's `used` resources.
    pub fn occupies_node(self) -> bool {
        matches!(
            self,
            Self::Allocated | Self::Binding | Self::Bound | Self::Running | Self::Releasing
        )
    }

    /// Counts toward a gang being ready (Volcano's ReadyTaskNum).
    pub fn is_ready(self) -> bool {
        matches!(
            self,
            Self::Allocated | Self::Binding | Self::Bound | Self::Running | Self::Succeeded
        )
    }

    /// Placed on a node by the scheduler (this session or before).
    pub fn is_allocated(self) -> bool {
        matches!(
            self,
            Self::Allocated | Self::Binding | Self::Bound | Self::Running
        )
    }

    /// Counts toward a gang being valid (enough members exist to ever be ready).
    pub fn is_valid(self) -> bool {
        !matches!(self, Self::Failed | Self::Unknown | Self::Releasing)
    }
}

/// A pod the scheduler is responsible for.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskInfo {
    pub uid: Arc<str>,
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    /// The role within the gang (`volcano.sh/task-spec`), empty when there is none.
    pub role: Arc<str>,
    /// The pod's effective request, with `pods: 1`.
    pub resreq: Resource,
    pub priority: i32,
    pub status: TaskStatus,
    pub node: Option<Arc<str>>,
    pub placement: Arc<Placement>,
    /// Tasks with equal templates are interchangeable for predicates (same request and
    /// placement rules); predicate results are cached per template.
    pub template: u64,
    /// Hash of what static predicates read of the placement (`Placement::static_key`):
    /// their answers are cached by it, so pods that differ only in their inter-pod rules
    /// (one selector per job) share one list of nodes.
    pub placement_key: u64,
    pub created: Timestamp,
    /// A system-critical pod (kube-system or system-*-critical priority class): never a victim.
    pub critical: bool,
    /// Estimated runtime in milliseconds, if the user gave one (pod annotation
    /// `rust-batch.io/runtime-estimate` or `activeDeadlineSeconds`). Backfill uses it to
    /// know when a running task frees its node.
    pub estimate: Option<i64>,
    /// When the pod started running (or was bound, if the driver knows no better).
    pub started: Option<Timestamp>,
    /// The PodDisruptionBudgets (`namespace/name`) whose selector matches the pod: the
    /// eviction API refuses to evict it beyond what they allow.
    pub budgets: Vec<Arc<str>>,
    /// What the pod asks of the network topology (Kueue's TAS annotations); a gang without
    /// a request of its own takes its first member's.
    pub topology: Option<Arc<TopologyRequest>>,
    /// The pod's labels: other pods' affinity, anti-affinity and spread rules select by them.
    pub labels: Arc<super::pod_rules::Labels>,
    /// `preemptionPolicy: Never`: the pod waits for room, it never evicts others for it
    /// (neither preempt nor reclaim acts for its gang).
    pub never_preempts: bool,
    /// Its ResourceClaims (DRA), allocated on the node it is placed on.
    pub claims: Arc<[super::devices::TaskClaim]>,
    /// What its claims count against its queue, per DeviceClass (`devices::device_charge`):
    /// kept apart from `resreq`, which is what nodes account, as the devices are a node's
    /// through its inventory, not its allocatable.
    pub device_charge: Resource,
}

impl TaskInfo {
    /// Builds a pending task, computing its template key.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        uid: impl Into<Arc<str>>,
        namespace: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
        role: impl Into<Arc<str>>,
        mut resreq: Resource,
        priority: i32,
        placement: Arc<Placement>,
        created: Timestamp,
    ) -> Self {
        resreq.pods = 1;
        let placement_key = placement.static_key();
        let template = hash_of(&(&resreq, &*placement));
        TaskInfo {
            uid: uid.into(),
            name: name.into(),
            namespace: namespace.into(),
            role: role.into(),
            resreq,
            priority,
            status: TaskStatus::Pending,
            node: None,
            placement,
            template,
            placement_key,
            created,
            critical: false,
            estimate: None,
            started: None,
            budgets: Vec::new(),
            topology: None,
            labels: Arc::default(),
            never_preempts: false,
            claims: Arc::from([]),
            device_charge: Resource::new(),
        }
    }

    /// Sets the pod's ResourceClaims; tasks whose claims ask alike share a template.
    pub fn set_claims(&mut self, claims: Vec<super::devices::TaskClaim>) {
        self.template = if claims.is_empty() {
            hash_of(&(&self.resreq, &*self.placement))
        } else {
            let parts: Vec<_> = claims.iter().map(|c| c.template_part()).collect();
            hash_of(&(&self.resreq, &*self.placement, &parts))
        };
        self.device_charge = super::devices::device_charge(&claims);
        self.claims = claims.into();
    }

    /// Replaces the claims' allocations (a driver recording what the API holds), keeping
    /// the template the task was placed by; what they count against the queue follows.
    pub fn replace_claims(&mut self, claims: Arc<[super::devices::TaskClaim]>) {
        self.device_charge = super::devices::device_charge(&claims);
        self.claims = claims;
    }

    /// What the task counts against its queue: its requests and its claims' devices per
    /// DeviceClass (`deviceclass/<class>`).
    pub fn quota_request(&self) -> std::borrow::Cow<'_, Resource> {
        if self.device_charge.scalars.is_empty() {
            std::borrow::Cow::Borrowed(&self.resreq)
        } else {
            std::borrow::Cow::Owned(self.resreq.plus(&self.device_charge))
        }
    }

    /// Replaces the placement rules, with the keys predicates are cached by.
    pub fn set_placement(&mut self, placement: Placement) {
        self.placement_key = placement.static_key();
        self.placement = Arc::new(placement);
        let claims = self.claims.to_vec();
        if claims.is_empty() {
            self.template = hash_of(&(&self.resreq, &*self.placement));
        } else {
            self.set_claims(claims);
        }
    }

    pub fn is_best_effort(&self) -> bool {
        self.resreq.is_best_effort()
    }

    /// When the task is expected to free its node, if it has an estimate: its start (or
    /// `now` if it has not started yet) plus the estimate, but never before `now` (a task
    /// past its estimate is expected to end any moment).
    pub fn estimated_end(&self, now: Timestamp) -> Option<Timestamp> {
        self.estimated_end_or(now, None)
    }

    /// Like `estimated_end`, with `fallback` (its queue's default estimate) standing in for
    /// a missing or unusable estimate of its own.
    pub fn estimated_end_or(&self, now: Timestamp, fallback: Option<i64>) -> Option<Timestamp> {
        let estimate = self.checked_estimate().ok().flatten().or(fallback)?;
        let start = self.started.unwrap_or(now);
        Some(start.saturating_add(estimate).max(now))
    }

    /// The task's own estimate, if it gave a usable one: zero and more than a year
    /// (`MAX_ESTIMATE_MS`) are typing mistakes, not estimates, and are refused by name.
    pub fn checked_estimate(&self) -> Result<Option<i64>, EstimateProblem> {
        match self.estimate {
            Some(ms) if ms <= 0 => Err(EstimateProblem::NotPositive(ms)),
            Some(ms) if ms > MAX_ESTIMATE_MS => Err(EstimateProblem::OverAYear(ms)),
            other => Ok(other),
        }
    }
}

/// The longest runtime estimate taken at its word: a year.
pub const MAX_ESTIMATE_MS: i64 = 365 * 24 * 3_600_000;

/// Why a runtime estimate is not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EstimateProblem {
    /// Zero or negative: nothing runs for no time.
    NotPositive(i64),
    /// More than `MAX_ESTIMATE_MS`.
    OverAYear(i64),
}

impl std::fmt::Display for EstimateProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |ms: i64| {
            humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
        };
        match *self {
            Self::NotPositive(ms) => write!(f, "runtime estimate {} is not positive", text(ms)),
            Self::OverAYear(ms) => write!(f, "runtime estimate {} is over a year", text(ms)),
        }
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    // DefaultHasher::new() uses fixed keys, so the key is the same in every run.
    let mut h = std::hash::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}
