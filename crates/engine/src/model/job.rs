use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Resource, SubGroupPolicy, TaskInfo, TaskStatus, Timestamp, TopologyRequest};

/// PodGroup phase (scheduling.volcano.sh/v1beta1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PodGroupPhase {
    /// Not yet admitted by `enqueue`.
    #[default]
    Pending,
    /// Admitted: its pods may be allocated.
    Inqueue,
    /// At least minMember tasks are scheduled.
    Running,
    Unknown,
    /// Every task finished.
    Completed,
}

impl PodGroupPhase {
    /// Its position in the order Volcano's Queue status counts phases (pending, inqueue,
    /// running, unknown, completed).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What happens to a gang's tentative placements when not every member fits
/// (Koordinator's `gang.scheduling.koordinator.sh/mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GangMode {
    /// Released at the end of every session in which the gang is not ready.
    #[default]
    Strict,
    /// Kept across sessions (holding their nodes) until the gang is ready or its waiting
    /// time runs out.
    NonStrict,
}

/// Which members count toward a gang's minimum (Koordinator's match-policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchPolicy {
    /// Members placed and not yet bound only.
    OnlyWaiting,
    /// Placed, bound and running members (Volcano's and kube-batch's rule).
    #[default]
    WaitingAndRunning,
    /// As WaitingAndRunning until the gang is satisfied once; then every further member
    /// (a replacement pod) schedules on its own.
    OnceSatisfied,
}

/// How a gang is gated, beyond its minimum.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GangPolicy {
    pub mode: GangMode,
    pub match_policy: MatchPolicy,
    /// The gang is not valid until this many members exist (Koordinator's total-number).
    pub total_number: Option<u32>,
    /// Every gang (uid) of this gang's GangGroup, itself included, sorted; empty when it is
    /// in no group. No gang of a group binds until all of them are ready.
    pub group: Vec<String>,
    /// How long a gang may wait, once all its members exist, before its holds are released
    /// and it backs off (Koordinator's waiting-time, scheduler-plugins'
    /// scheduleTimeoutSeconds). Milliseconds.
    pub wait_timeout: Option<i64>,
    /// The gang's own `preemptionPolicy: Never` (Kubernetes' PodGroup): it waits for room,
    /// it never evicts others for it, whatever its pods say.
    pub never_preempts: bool,
    /// `disruptionMode: All` (Kubernetes' PodGroup): a member is evicted only with the
    /// whole gang.
    pub disrupt_whole: bool,
    /// How long (ms) its pods run before preempt or reclaim may take them, from its
    /// PriorityClass (annotation `rust-batch.io/min-runtime` on the class): when set, it
    /// wins over its queue's (`QueueInfo::min_runtime`), being the more specific.
    pub min_runtime: Option<i64>,
    /// How long (ms) it waits for room before it may evict others, from its PriorityClass
    /// (`rust-batch.io/preemption-delay`): when set, it wins over its queue's.
    pub preemption_delay: Option<i64>,
}

/// Where a gang comes from, for drivers that report it (not for scheduling decisions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GangOrigin {
    /// Declared: a group object, or group keys on its pods.
    #[default]
    Declared,
    /// Made up for a pod that names no gang: a gang of one (Volcano's shadow PodGroup).
    SinglePod,
}

/// A tentative placement a NonStrict gang keeps across sessions: the pod holds the node's
/// resources (as Allocated or Pipelined) without being bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub task: Arc<str>,
    pub node: Arc<str>,
    pub status: TaskStatus,
}

/// What the engine remembers about a gang from one session to the next. Sessions report
/// changes in `JobUpdate::runtime`; drivers store them in the cache.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GangRuntime {
    /// When the gang started waiting for room (all members present, not yet ready).
    pub waiting_since: Option<Timestamp>,
    /// The gang is not tried before this time (after its waiting time ran out).
    pub backoff_until: Timestamp,
    /// How many times its waiting time ran out in a row.
    pub expiries: u32,
    /// The gang was ready once (for MatchPolicy::OnceSatisfied).
    pub once_satisfied: bool,
    /// A refused bind left the gang with members bound but fewer than its minimum: its
    /// missing members are placed before any other gang's (set by the live driver).
    pub recovering: bool,
}

impl GangRuntime {
    /// The gang started: it no longer waits, its expiries are forgotten, and it was ready
    /// once.
    pub fn mark_started(&mut self) {
        self.waiting_since = None;
        self.expiries = 0;
        self.once_satisfied = true;
    }
}

/// Members of a gang that a driver keeps out of the engine, and why: they exist but are no
/// candidates (the API server would refuse their bind, or they ask for what the engine
/// does not model). The gang's message counts them; the engine never places them, so a
/// gang that needs them for its minimum waits whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldBack {
    /// Pods held by scheduling gates, per gate (a pod with two gates counts under each).
    pub gated: BTreeMap<String, u32>,
    /// Pods held by scheduling gates, each counted once.
    pub gated_pods: u32,
    /// Pods refused, per reason ("spec.resourceClaims (DRA) are not supported by
    /// rust-batch"). A pod both gated and refused counts here only.
    pub refused: BTreeMap<String, u32>,
}

impl HeldBack {
    /// How many pods are held back.
    pub fn pods(&self) -> u32 {
        self.gated_pods + self.refused.values().sum::<u32>()
    }

    pub fn is_empty(&self) -> bool {
        self.pods() == 0
    }

    /// "2 pods gated by example.com/quota; 1 pod refused: spec.resourceClaims (DRA) are
    /// not supported by rust-batch".
    pub fn describe(&self) -> String {
        let pods = |n: u32| {
            if n == 1 {
                "1 pod".to_string()
            } else {
                format!("{n} pods")
            }
        };
        let gated = self
            .gated
            .iter()
            .map(|(gate, n)| format!("{} gated by {gate}", pods(*n)));
        let refused = self
            .refused
            .iter()
            .map(|(why, n)| format!("{} refused: {why}", pods(*n)));
        gated.chain(refused).collect::<Vec<_>>().join("; ")
    }

    /// The gates and refusals without their counts ("gated by a.io/x, b.io/y; refused:
    /// …"): what waiting siblings are told, which stays put as single gates are lifted.
    pub fn reasons(&self) -> String {
        let mut parts = Vec::new();
        if !self.gated.is_empty() {
            let gates: Vec<&str> = self.gated.keys().map(String::as_str).collect();
            parts.push(format!("gated by {}", gates.join(", ")));
        }
        if !self.refused.is_empty() {
            let why: Vec<&str> = self.refused.keys().map(String::as_str).collect();
            parts.push(format!("refused: {}", why.join("; ")));
        }
        parts.join("; ")
    }
}

/// What a driver knows about a gang (a PodGroup in any dialect).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct JobSpec {
    /// Unique key, `namespace/name`.
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub min_member: u32,
    pub min_task_member: BTreeMap<String, u32>,
    pub min_resources: Option<Resource>,
    pub priority: i32,
    pub created: Timestamp,
    pub phase: PodGroupPhase,
    pub policy: GangPolicy,
    pub origin: GangOrigin,
    /// What the gang asks of the network topology (Volcano's `spec.networkTopology`, or
    /// Kueue's TAS annotations on its pods).
    pub topology: Option<TopologyRequest>,
    /// Volcano's `subGroupPolicy`: subgroups that bind only whole (model/subgroup.rs).
    pub subgroups: Vec<SubGroupPolicy>,
}

/// A gang and its tasks, with per-status counts kept up to date so the gang votes
/// (valid, ready, pipelined, starving) are O(1) for jobs without per-role minimums.
#[derive(Clone, Debug, PartialEq)]
pub struct JobInfo {
    pub uid: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub queue: Arc<str>,
    pub min_member: u32,
    pub min_task_member: BTreeMap<Arc<str>, u32>,
    pub min_resources: Option<Resource>,
    pub priority: i32,
    pub created: Timestamp,
    pub phase: PodGroupPhase,
    pub policy: GangPolicy,
    pub origin: GangOrigin,
    pub topology: Option<Arc<TopologyRequest>>,
    /// Subgroup rules (empty for almost every gang; shared by the session's copies).
    pub subgroups: Arc<[SubGroupPolicy]>,
    pub runtime: GangRuntime,
    /// Members the driver keeps out of the engine (set by the driver, not by the spec).
    pub held_back: HeldBack,
    tasks: Vec<TaskInfo>,
    counts: [u32; TaskStatus::COUNT],
    /// Requests of tasks placed by the scheduler (Allocated, Binding, Bound, Running).
    pub allocated: Resource,
    /// Requests of every task that still needs or holds resources.
    pub total_request: Resource,
    /// Requests of the first `min_member` tasks, kept as tasks come and go (see
    /// `min_request`), with the `min_member` they were summed for.
    min_sum: Resource,
    min_sum_for: u32,
}

impl JobInfo {
    pub fn new(spec: JobSpec) -> Self {
        let mut job = JobInfo {
            uid: Arc::from(""),
            namespace: Arc::from(""),
            name: Arc::from(""),
            queue: Arc::from(""),
            min_member: 0,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: 0,
            created: 0,
            phase: PodGroupPhase::Pending,
            policy: GangPolicy::default(),
            origin: GangOrigin::default(),
            topology: None,
            subgroups: Arc::new([]),
            runtime: GangRuntime::default(),
            held_back: HeldBack::default(),
            tasks: Vec::new(),
            counts: [0; TaskStatus::COUNT],
            allocated: Resource::new(),
            total_request: Resource::new(),
            min_sum: Resource::new(),
            min_sum_for: 0,
        };
        job.update_spec(spec);
        job
    }

    /// Whether `spec` says what this gang already holds (an update the engine need not
    /// see: the echo of a status write, a label change).
    pub fn same_spec(&self, spec: &JobSpec) -> bool {
        *self.uid == *spec.uid
            && *self.namespace == *spec.namespace
            && *self.name == *spec.name
            && *self.queue == *spec.queue
            && self.min_member == spec.min_member
            && self.min_task_member.len() == spec.min_task_member.len()
            && self
                .min_task_member
                .iter()
                .zip(&spec.min_task_member)
                .all(|((a, x), (b, y))| **a == **b && x == y)
            && self.min_resources == spec.min_resources
            && self.priority == spec.priority
            && self.created == spec.created
            && self.phase == spec.phase
            && self.policy == spec.policy
            && self.origin == spec.origin
            && self.topology.as_deref() == spec.topology.as_ref()
            && *self.subgroups == *spec.subgroups
    }

    /// Replaces the gang parameters, keeping tasks.
    pub fn update_spec(&mut self, spec: JobSpec) {
        self.uid = Arc::from(spec.uid.as_str());
        self.namespace = Arc::from(spec.namespace.as_str());
        self.name = Arc::from(spec.name.as_str());
        self.queue = Arc::from(spec.queue.as_str());
        self.min_member = spec.min_member;
        self.min_task_member = spec
            .min_task_member
            .into_iter()
            .map(|(k, v)| (Arc::from(k.as_str()), v))
            .collect();
        self.min_resources = spec.min_resources;
        self.priority = spec.priority;
        self.created = spec.created;
        self.phase = spec.phase;
        self.policy = spec.policy;
        self.origin = spec.origin;
        self.topology = spec.topology.map(Arc::new);
        if *self.subgroups != *spec.subgroups {
            self.subgroups = spec.subgroups.into();
        }
        if self.min_sum_for != self.min_member {
            self.min_sum = self.summed_min_request();
            self.min_sum_for = self.min_member;
        }
    }

    /// What the gang asks of the network topology: its own request (the PodGroup's), else
    /// its first member's that has one (Kueue's pod annotations).
    pub fn topology_request(&self) -> Option<&TopologyRequest> {
        self.topology
            .as_deref()
            .or_else(|| self.tasks.iter().find_map(|t| t.topology.as_deref()))
    }

    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }

    pub fn task(&self, index: u32) -> &TaskInfo {
        &self.tasks[index as usize]
    }

    pub fn count(&self, status: TaskStatus) -> u32 {
        self.counts[status.index()]
    }

    fn counts_where(&self, pred: impl Fn(TaskStatus) -> bool) -> u32 {
        TaskStatus::ALL
            .iter()
            .filter(|s| pred(**s))
            .map(|s| self.counts[s.index()])
            .sum()
    }

    /// Allocated + Binding + Bound + Running + Succeeded.
    pub fn ready_count(&self) -> u32 {
        self.counts_where(TaskStatus::is_ready)
    }

    pub fn valid_count(&self) -> u32 {
        self.counts_where(TaskStatus::is_valid)
    }

    pub fn pending_count(&self) -> u32 {
        self.count(TaskStatus::Pending)
    }

    pub fn by_role(&self, pred: impl Fn(TaskStatus) -> bool) -> BTreeMap<&str, u32> {
        let mut m = BTreeMap::new();
        for t in &self.tasks {
            if pred(t.status) {
                *m.entry(&*t.role).or_insert(0) += 1;
            }
        }
        m
    }

    fn account(&mut self, task_index: usize, add: bool) {
        // Borrowed field by field: the task's request is read in place, not copied (this
        // runs twice for every status change a session makes).
        let JobInfo {
            tasks,
            counts,
            allocated,
            total_request,
            ..
        } = self;
        let t = &tasks[task_index];
        let (status, req, devices) = (t.status, &t.resreq, &t.device_charge);
        let c = &mut counts[status.index()];
        if add {
            *c += 1
        } else {
            *c -= 1
        }
        // What the gang holds and asks counts its claims' devices per DeviceClass too
        // (queues limit them); what nodes account is `resreq` alone.
        let apply = |r: &mut Resource| {
            if add {
                r.add(req);
                if !devices.scalars.is_empty() {
                    r.add(devices);
                }
            } else {
                r.sub(req);
                if !devices.scalars.is_empty() {
                    r.sub(devices);
                }
            }
        };
        if status.is_allocated() {
            apply(allocated);
        }
        if !matches!(status, TaskStatus::Succeeded | TaskStatus::Failed) {
            apply(total_request);
        }
    }

    /// Keeps `min_sum` as task `i` enters (`add`) or leaves the first `min_member` tasks.
    fn account_min(&mut self, i: usize, add: bool) {
        if i >= self.min_sum_for as usize {
            return;
        }
        let req = &self.tasks[i].resreq;
        if add {
            self.min_sum.add(req);
        } else {
            self.min_sum.sub(req);
        }
    }

    /// Adds a task, or replaces the task with the same uid. Returns its index.
    pub fn upsert_task(&mut self, task: TaskInfo) -> u32 {
        if let Some(i) = self.tasks.iter().position(|t| t.uid == task.uid) {
            self.account(i, false);
            self.account_min(i, false);
            self.tasks[i] = task;
            self.account(i, true);
            self.account_min(i, true);
            i as u32
        } else {
            self.tasks.push(task);
            let i = self.tasks.len() - 1;
            self.account(i, true);
            self.account_min(i, true);
            i as u32
        }
    }

    /// Removes a task by uid. The last task takes its index.
    pub fn remove_task(&mut self, uid: &str) -> Option<TaskInfo> {
        let i = self.tasks.iter().position(|t| &*t.uid == uid)?;
        self.account(i, false);
        self.account_min(i, false);
        let (last, m) = (self.tasks.len() - 1, self.min_sum_for as usize);
        // The last task moves to `i`: it counts from now on if that brings it among the
        // first `min_member` (and was not there already).
        if i < m && last >= m {
            self.min_sum.add(&self.tasks[last].resreq);
        }
        Some(self.tasks.swap_remove(i))
    }

    /// Changes a task's status and node, keeping counts exact. Returns the previous status.
    pub fn set_task_status(
        &mut self,
        index: u32,
        status: TaskStatus,
        node: Option<Arc<str>>,
    ) -> (TaskStatus, Option<Arc<str>>) {
        let i = index as usize;
        self.account(i, false);
        let t = &mut self.tasks[i];
        let prev = (t.status, t.node.take());
        t.status = status;
        t.node = node;
        self.account(i, true);
        prev
    }

    /// Replaces a task's claims (their allocations change as a session places it); its
    /// template stays, as the caches of the session that places it are keyed by it.
    pub fn set_task_claims(&mut self, index: u32, claims: Arc<[super::devices::TaskClaim]>) {
        self.tasks[index as usize].claims = claims;
    }

    pub fn task_index(&self, uid: &str) -> Option<u32> {
        self.tasks
            .iter()
            .position(|t| &*t.uid == uid)
            .map(|i| i as u32)
    }

    /// Resources the gang needs to start: minResources if given, else the sum of the
    /// requests of its first `min_member` pending-or-placed tasks.
    pub fn min_request(&self) -> Resource {
        if let Some(r) = &self.min_resources {
            return r.clone();
        }
        // Kept as tasks come and go: opening a session asks every gang, and summing here
        // read every gang's tasks each time.
        if self.min_sum_for == self.min_member {
            return self.min_sum.clone();
        }
        self.summed_min_request()
    }

    /// The requests of the first `min_member` tasks, summed afresh.
    fn summed_min_request(&self) -> Resource {
        let mut r = Resource::new();
        for t in self.tasks.iter().take(self.min_member as usize) {
            r.add(&t.resreq);
        }
        r
    }

    /// The devices per DeviceClass the claims of its first `min_member` tasks count against
    /// its queue (`TaskInfo::device_charge`): what admitting it asks of the queue's device
    /// quota, beside `min_request` (minResources has no DRA entries; Volcano's capacity
    /// plugin counts the claims apart the same way).
    pub fn min_device_charge(&self) -> Resource {
        let mut r = Resource::new();
        for t in self.tasks.iter().take(self.min_member as usize) {
            if !t.device_charge.scalars.is_empty() {
                r.add(&t.device_charge);
            }
        }
        r
    }

    /// Every task finished (and there was at least one).
    pub fn all_finished(&self) -> bool {
        !self.tasks.is_empty()
            && self.counts_where(|s| matches!(s, TaskStatus::Succeeded | TaskStatus::Failed))
                as usize
                == self.tasks.len()
    }

    /// The PodGroup phase its members put the gang in, from the phase it has (what a session
    /// reports when it decides nothing else about it).
    pub fn phase_from_members(&self) -> PodGroupPhase {
        if self.all_finished() {
            return PodGroupPhase::Completed;
        }
        let scheduled = self.ready_count();
        if self.min_member > 0 && scheduled >= self.min_member
            || self.min_member == 0 && scheduled > 0
        {
            return PodGroupPhase::Running;
        }
        match self.phase {
            PodGroupPhase::Running
                if self.count(TaskStatus::Running) + self.count(TaskStatus::Succeeded) > 0 =>
            {
                PodGroupPhase::Unknown
            }
            PodGroupPhase::Running | PodGroupPhase::Completed => PodGroupPhase::Inqueue,
            other => other,
        }
    }

    /// At least `min_member` members were bound or started: the gang no longer waits.
    pub fn started_enough(&self) -> bool {
        let started = self.count(TaskStatus::Binding)
            + self.count(TaskStatus::Bound)
            + self.count(TaskStatus::Running)
            + self.count(TaskStatus::Succeeded);
        self.min_member > 0 && started >= self.min_member
    }

    /// Members placed in a session but not bound (Allocated or Pipelined).
    pub fn holds_placements(&self) -> bool {
        self.count(TaskStatus::Allocated) + self.count(TaskStatus::Pipelined) > 0
    }

    /// Whether a session that decides nothing about this gang still has something to say
    /// about it: its members moved it to another phase, it started (its runtime stops
    /// waiting), or it is NonStrict and holds placements. A session closes on these and on
    /// the gangs it decided about, not on every gang.
    pub fn unsettled(&self) -> bool {
        let started = || {
            let mut rt = self.runtime.clone();
            rt.mark_started();
            rt != self.runtime
        };
        self.phase_from_members() != self.phase
            || self.started_enough() && started()
            || self.policy.mode == GangMode::NonStrict && self.holds_placements()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Placement;

    fn task(uid: &str, cpu: &str) -> TaskInfo {
        TaskInfo::new(
            uid,
            "ns",
            uid,
            "",
            Resource::from_quantities([("cpu", cpu)]).unwrap(),
            0,
            Arc::new(Placement::default()),
            0,
        )
    }

    #[test]
    fn counts_and_totals_follow_status_changes() {
        let mut job = JobInfo::new(JobSpec {
            uid: "ns/j".into(),
            min_member: 2,
            ..Default::default()
        });
        job.upsert_task(task("a", "1"));
        job.upsert_task(task("b", "2"));
        assert_eq!(job.pending_count(), 2);
        assert_eq!(job.total_request.milli_cpu, 3000);
        job.set_task_status(0, TaskStatus::Allocated, Some(Arc::from("n1")));
        assert_eq!(job.ready_count(), 1);
        assert_eq!(job.allocated.milli_cpu, 1000);
        job.set_task_status(1, TaskStatus::Succeeded, None);
        assert_eq!(job.ready_count(), 2);
        assert_eq!(job.total_request.milli_cpu, 1000);
        let removed = job.remove_task("a").unwrap();
        assert_eq!(&*removed.uid, "a");
        assert_eq!(job.allocated.milli_cpu, 0);
        assert_eq!(job.task_index("b"), Some(0));
    }

    #[test]
    fn the_kept_min_request_is_the_first_min_members_summed() {
        // Tasks come, are replaced (with another request) and go in every position, and
        // minMember changes: the kept sum is always the one summed afresh.
        let mut job = JobInfo::new(JobSpec {
            uid: "ns/j".into(),
            min_member: 3,
            ..Default::default()
        });
        let gpu = |uid: &str, n: &str| {
            let mut t = task(uid, "1");
            t.resreq = Resource::from_quantities([("cpu", "1"), ("nvidia.com/gpu", n)]).unwrap();
            t
        };
        let check = |job: &JobInfo| assert_eq!(job.min_request(), job.summed_min_request());
        for (i, uid) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            job.upsert_task(task(uid, &(i + 1).to_string()));
            check(&job);
        }
        job.upsert_task(gpu("b", "2"));
        check(&job);
        job.upsert_task(gpu("e", "1"));
        check(&job);
        for uid in ["a", "e", "c"] {
            job.remove_task(uid);
            check(&job);
        }
        for (uid, cpu) in [("f", "7"), ("g", "8")] {
            job.upsert_task(task(uid, cpu));
            check(&job);
        }
        job.update_spec(JobSpec {
            uid: "ns/j".into(),
            min_member: 1,
            ..Default::default()
        });
        check(&job);
        job.remove_task("b");
        check(&job);
        job.min_member = 4;
        check(&job);
        assert_eq!(job.min_request().milli_cpu, (4 + 7 + 8) * 1000);
    }
}
