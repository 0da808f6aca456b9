//! Small builders shared by unit tests, property tests, benchmarks and the simulator: nodes
//! of a shape, gangs of tasks, queues, and one scheduling cycle with a configuration given
//! as YAML (or the built-in default). Everything goes through the real `Cache` and engine.
//!
//! Quantities are Kubernetes strings (`("cpu", "500m")`, `("memory", "2Gi")`); a bad one is
//! a bug in the caller, so these helpers panic instead of returning errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::{Cache, PodUpdate};
use crate::conf::{ConfError, SchedulerConf};
use crate::framework::{GangReason, Scheduler, Session, SessionResult, Snapshot};
use crate::model::{
    JobSpec, NodeSpec, Placement, PodGroupPhase, QueueInfo, Resource, TaskInfo, TaskRef,
    TaskStatus, Timestamp,
};

/// The namespace every builder uses.
pub const NAMESPACE: &str = "default";

/// A resource vector from quantity pairs.
pub fn res(pairs: &[(&str, &str)]) -> Resource {
    Resource::from_quantities(pairs.iter().copied()).expect("valid test quantities")
}

/// A ready, schedulable node; `pods` defaults to 110 when not given.
/// A label map from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn node(name: &str, allocatable: &[(&str, &str)]) -> NodeSpec {
    let mut allocatable = res(allocatable);
    if allocatable.pods == 0 {
        allocatable.pods = 110;
    }
    NodeSpec {
        name: name.into(),
        allocatable,
        ready: true,
        ..Default::default()
    }
}

/// Adds `count` nodes named `{prefix}-{i:05}` of one shape; returns their names.
pub fn add_nodes(
    cache: &mut Cache,
    prefix: &str,
    count: usize,
    allocatable: &[(&str, &str)],
) -> Vec<String> {
    let shape = node("", allocatable);
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i:05}");
            cache.apply_node(NodeSpec {
                name: name.clone(),
                ..shape.clone()
            });
            name
        })
        .collect()
}

/// An open queue with a weight.
pub fn queue(name: &str, weight: u32) -> QueueInfo {
    QueueInfo::new(name, weight)
}

/// A cache with the `default` queue (weight 1), as every cluster has.
pub fn cache_with_default_queue() -> Cache {
    let mut cache = Cache::new();
    cache.apply_queue(queue("default", 1));
    cache
}

/// A gang (PodGroup) and its pods, applied to a cache in one call.
#[derive(Clone, Debug)]
pub struct Gang {
    pub spec: JobSpec,
    pub tasks: Vec<TaskInfo>,
}

impl Gang {
    /// `default/{name}` in queue `default`, phase Pending (enqueue admits it), no tasks.
    pub fn new(name: &str, min_member: u32) -> Self {
        Gang {
            spec: JobSpec {
                uid: format!("{NAMESPACE}/{name}"),
                namespace: NAMESPACE.into(),
                name: name.into(),
                queue: "default".into(),
                min_member,
                ..Default::default()
            },
            tasks: Vec::new(),
        }
    }

    pub fn uid(&self) -> &str {
        &self.spec.uid
    }

    pub fn queue(mut self, queue: &str) -> Self {
        self.spec.queue = queue.into();
        self
    }

    /// Sets the gang's priority and that of every task (added before or after).
    pub fn priority(mut self, priority: i32) -> Self {
        self.spec.priority = priority;
        for t in &mut self.tasks {
            t.priority = priority;
        }
        self
    }

    /// Sets the gang's creation time and that of every task added so far.
    pub fn created(mut self, at: Timestamp) -> Self {
        self.spec.created = at;
        for t in &mut self.tasks {
            t.created = at;
        }
        self
    }

    pub fn phase(mut self, phase: PodGroupPhase) -> Self {
        self.spec.phase = phase;
        self
    }

    pub fn min_resources(mut self, pairs: &[(&str, &str)]) -> Self {
        self.spec.min_resources = Some(res(pairs));
        self
    }

    pub fn mode(mut self, mode: crate::model::GangMode) -> Self {
        self.spec.policy.mode = mode;
        self
    }

    pub fn match_policy(mut self, policy: crate::model::MatchPolicy) -> Self {
        self.spec.policy.match_policy = policy;
        self
    }

    /// `disruptionMode: All`: members are evicted only with the whole gang.
    pub fn disrupt_whole(mut self) -> Self {
        self.spec.policy.disrupt_whole = true;
        self
    }

    /// The gang's own `preemptionPolicy: Never`.
    pub fn never_preempts(mut self) -> Self {
        self.spec.policy.never_preempts = true;
        self
    }

    pub fn total_number(mut self, n: u32) -> Self {
        self.spec.policy.total_number = Some(n);
        self
    }

    /// Puts the gang in a GangGroup with the named gangs (of the default namespace).
    pub fn group(mut self, names: &[&str]) -> Self {
        let mut g: Vec<String> = names.iter().map(|n| format!("{NAMESPACE}/{n}")).collect();
        g.push(self.spec.uid.clone());
        g.sort();
        g.dedup();
        self.spec.policy.group = g;
        self
    }

    pub fn waiting_time(mut self, ms: Timestamp) -> Self {
        self.spec.policy.wait_timeout = Some(ms);
        self
    }

    pub fn min_role(mut self, role: &str, n: u32) -> Self {
        self.spec.min_task_member.insert(role.into(), n);
        self
    }

    /// Adds `n` pending tasks of `role` ("" for none) requesting `request`.
    pub fn tasks(self, role: &str, n: usize, request: &[(&str, &str)]) -> Self {
        self.placed_tasks(role, n, request, Placement::default())
    }

    /// Like `tasks`, with placement rules (selector, affinity, tolerations).
    pub fn placed_tasks(
        mut self,
        role: &str,
        n: usize,
        request: &[(&str, &str)],
        placement: Placement,
    ) -> Self {
        let request = res(request);
        let placement = Arc::new(placement);
        let first = self.tasks.iter().filter(|t| &*t.role == role).count();
        for i in first..first + n {
            let name = if role.is_empty() {
                format!("{}-{i}", self.spec.name)
            } else {
                format!("{}-{role}-{i}", self.spec.name)
            };
            self.tasks.push(TaskInfo::new(
                format!("{NAMESPACE}/{name}"),
                NAMESPACE,
                name,
                role,
                request.clone(),
                self.spec.priority,
                placement.clone(),
                self.spec.created,
            ));
        }
        self
    }

    /// Gives every task added so far these labels.
    pub fn labelled(mut self, pairs: &[(&str, &str)]) -> Self {
        let l = Arc::new(labels(pairs));
        for t in &mut self.tasks {
            t.labels = l.clone();
        }
        self
    }

    /// Gives the last `n` tasks added these labels (one subgroup's members, a role's pods).
    pub fn last_labelled(mut self, n: usize, pairs: &[(&str, &str)]) -> Self {
        let l = Arc::new(labels(pairs));
        let len = self.tasks.len();
        for t in &mut self.tasks[len.saturating_sub(n)..] {
            t.labels = l.clone();
        }
        self
    }

    /// Adds a subgroup policy (Volcano's `subGroupPolicy`) taking pods labelled
    /// `role=<role>`, split by the `replica` label.
    pub fn subgroups(mut self, role: &str, size: u32, min_groups: u32) -> Self {
        self.spec.subgroups.push(crate::model::SubGroupPolicy {
            name: role.into(),
            size,
            min_groups,
            selector: Some(crate::model::pod_rules::LabelSelector {
                match_labels: labels(&[("role", role)]),
                match_expressions: Vec::new(),
            }),
            match_label_keys: vec!["replica".into()],
            topology: None,
        });
        self
    }

    /// Gives the last subgroup policy added a `networkTopology` of its own (each of its
    /// subgroups inside one domain).
    pub fn subgroup_topology(mut self, mode: &str, highest_tier_allowed: Option<i64>) -> Self {
        let i = self
            .spec
            .subgroups
            .len()
            .checked_sub(1)
            .expect("a subgroup policy");
        self.spec.subgroups[i].topology = Some(crate::model::TopologyRequest::from_volcano_field(
            Some(mode),
            highest_tier_allowed,
            &self.spec.uid,
            &format!("spec.subGroupPolicy[{i}].networkTopology"),
        ));
        self
    }

    /// Marks the last task added as `status` on `node`.
    pub fn last_on(mut self, node: &str, status: TaskStatus) -> Self {
        let t = self.tasks.last_mut().expect("a task to place");
        t.status = status;
        t.node = Some(Arc::from(node));
        self
    }

    /// Marks the first `nodes.len()` pending tasks Running on those nodes, in order.
    pub fn running_on(mut self, nodes: &[&str]) -> Self {
        let mut pending = self
            .tasks
            .iter_mut()
            .filter(|t| t.status == TaskStatus::Pending);
        for n in nodes {
            let t = pending.next().expect("enough pending tasks");
            t.status = TaskStatus::Running;
            t.node = Some(Arc::from(*n));
        }
        self
    }

    /// Gives every task added so far a runtime estimate (ms), as the pod annotation
    /// `rust-batch.io/runtime-estimate` would.
    pub fn estimate(mut self, ms: Timestamp) -> Self {
        for t in &mut self.tasks {
            t.estimate = Some(ms);
        }
        self
    }

    /// Puts every task added so far under a PodDisruptionBudget (`namespace/name`).
    pub fn budget(mut self, name: &str) -> Self {
        for t in &mut self.tasks {
            t.budgets.push(Arc::from(name));
        }
        self
    }

    /// Sets the start time of every task added so far that is placed on a node.
    pub fn started(mut self, at: Timestamp) -> Self {
        for t in self.tasks.iter_mut().filter(|t| t.node.is_some()) {
            t.started = Some(at);
        }
        self
    }

    /// Its PriorityClass's minimum runtime (ms), if any (`GangPolicy::min_runtime`).
    pub fn min_runtime_opt(mut self, ms: Option<Timestamp>) -> Self {
        self.spec.policy.min_runtime = ms;
        self
    }

    /// Volcano's PodGroup `spec.networkTopology`.
    pub fn network_topology(mut self, mode: &str, highest_tier_allowed: Option<i64>) -> Self {
        self.spec.topology = Some(crate::model::TopologyRequest::from_volcano(
            Some(mode),
            highest_tier_allowed,
            &self.spec.uid,
        ));
        self
    }

    /// Gives every task added so far a pod annotation's topology request (Kueue TAS).
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        let annotations = BTreeMap::from([(key.to_string(), value.to_string())]);
        for t in &mut self.tasks {
            t.topology =
                crate::model::TopologyRequest::from_kueue(&annotations, &t.uid).map(Arc::new);
        }
        self
    }

    /// Applies the gang and its pods; returns the gang uid.
    pub fn apply(self, cache: &mut Cache) -> String {
        let uid = self.spec.uid.clone();
        cache.apply_job(self.spec);
        for task in self.tasks {
            cache.apply_pod(PodUpdate {
                task,
                job: Some(uid.clone()),
            });
        }
        uid
    }
}

/// A pod that is not ours (another scheduler placed it) running on `node`.
pub fn foreign_pod(cache: &mut Cache, uid: &str, node: &str, request: &[(&str, &str)]) {
    let mut task = TaskInfo::new(
        uid,
        NAMESPACE,
        uid,
        "",
        res(request),
        0,
        Arc::new(Placement::default()),
        0,
    );
    task.status = TaskStatus::Running;
    task.node = Some(Arc::from(node));
    cache.apply_pod(PodUpdate { task, job: None });
}

/// A node labelled as a kubelet labels it (`kubernetes.io/hostname`), plus `extra`.
pub fn host(name: &str, allocatable: &[(&str, &str)], extra: &[(&str, &str)]) -> NodeSpec {
    let mut spec = node(name, allocatable);
    spec.labels = labels(extra);
    spec.labels
        .insert(crate::model::pod_rules::HOSTNAME_LABEL.into(), name.into());
    spec
}

/// A running pod of another scheduler on `node`, with labels and placement rules.
pub fn foreign_pod_with(
    cache: &mut Cache,
    uid: &str,
    node: &str,
    pod_labels: &[(&str, &str)],
    placement: Placement,
) {
    let mut task = TaskInfo::new(
        uid,
        NAMESPACE,
        uid,
        "",
        res(&[("cpu", "100m")]),
        0,
        Arc::new(placement),
        0,
    );
    task.labels = Arc::new(labels(pod_labels));
    task.status = TaskStatus::Running;
    task.node = Some(Arc::from(node));
    cache.apply_pod(PodUpdate { task, job: None });
}

/// A scheduler configuration as YAML, with these actions and one tier per bracketed list of
/// plugins (no switches, no arguments):
/// `conf_yaml!("enqueue, allocate"; ["gang", "predicates"])`. A `&'static str`, so it can
/// name a `const`.
#[macro_export]
macro_rules! conf_yaml {
    ($actions:literal; $([$($plugin:literal),* $(,)?]),+ $(,)?) => {
        concat!(
            "actions: \"", $actions, "\"\ntiers:\n",
            $("- plugins:\n", $("  - name: ", $plugin, "\n",)*)+
        )
    };
}

/// Evictions per gang uid.
pub fn evicted(result: &SessionResult) -> BTreeMap<String, usize> {
    let mut by_job = BTreeMap::new();
    for e in &result.evictions {
        *by_job.entry(e.job.to_string()).or_insert(0) += 1;
    }
    by_job
}

/// A configuration from YAML, or the built-in default for `None`.
pub fn conf(yaml: Option<&str>) -> SchedulerConf {
    match yaml {
        None => SchedulerConf::default_conf(),
        Some(text) => SchedulerConf::parse(text, "<test>").unwrap_or_else(|e| panic!("{e}")),
    }
}

/// A configuration checked as the scheduler checks it: parsed, then every action and plugin
/// built from the registry (unknown names and bad arguments are errors, arguments a plugin
/// does not use are warnings).
pub fn checked_conf(yaml: &str, file: &str) -> Result<SchedulerConf, ConfError> {
    let scheduler = Scheduler::new(SchedulerConf::parse(yaml, file)?, &crate::REGISTRY)?;
    Ok(scheduler.conf().clone())
}

pub fn scheduler(yaml: Option<&str>) -> Scheduler {
    Scheduler::new(conf(yaml), &crate::REGISTRY).unwrap_or_else(|e| panic!("{e}"))
}

/// One cycle (every configured action) on a snapshot of `cache`, at time 0.
pub fn run_cycle(cache: &Cache, yaml: Option<&str>) -> SessionResult {
    scheduler(yaml).run_cycle(cache.snapshot(), 0)
}

/// One cycle at time `now`, its result applied to `cache` (see `apply_result`).
pub fn cycle_at(cache: &mut Cache, yaml: Option<&str>, now: Timestamp) -> SessionResult {
    let result = scheduler(yaml).run_cycle(cache.snapshot(), now);
    apply_result(cache, &result);
    result
}

/// The condition reason a session reported for a gang, if any.
pub fn condition_reason(result: &SessionResult, job: &str) -> Option<GangReason> {
    result
        .job_updates
        .iter()
        .find(|u| &*u.job == job)
        .and_then(|u| u.condition.as_ref())
        .map(|c| c.reason)
}

/// Opens a session on a snapshot of `cache` without running any action.
pub fn open_session(cache: &Cache, yaml: Option<&str>) -> Session {
    scheduler(yaml).open_session(cache.snapshot(), 0)
}

/// Applies a session's result as a driver would once the API server confirms it: bound pods
/// run on their nodes, evicted pods are gone, gang phases are recorded.
pub fn apply_result(cache: &mut Cache, result: &SessionResult) {
    for b in &result.binds {
        if !b.claims.is_empty() {
            cache.set_pod_claims(&b.task, b.claims.clone());
        }
        cache.set_pod_status(&b.task, TaskStatus::Running, Some(b.node.clone()));
    }
    for e in &result.evictions {
        cache.delete_pod(&e.task);
    }
    for u in &result.job_updates {
        if let Some(phase) = u.phase {
            cache.set_job_phase(&u.job, phase);
        }
    }
    cache.apply_gang_updates(&result.job_updates);
}

/// Binds per gang uid: node names in bind order.
pub fn binds_by_job(result: &SessionResult) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in &result.binds {
        m.entry(b.job.to_string())
            .or_default()
            .push(b.node.to_string());
    }
    m
}

/// The condition message a session reported for a gang, if any.
pub fn condition_message(result: &SessionResult, job: &str) -> Option<String> {
    result
        .job_updates
        .iter()
        .find(|u| &*u.job == job)
        .and_then(|u| u.condition.as_ref())
        .map(|c| c.message.clone())
}

/// Finds a task by pod uid in a snapshot.
pub fn task_ref(state: &Snapshot, uid: &str) -> Option<TaskRef> {
    state
        .jobs()
        .find_map(|(id, job)| job.task_index(uid).map(|index| TaskRef { job: id, index }))
}

/// A node of shape `allocatable` with one running foreign pod using `used` (nothing if empty).
pub fn node_using(
    name: &str,
    allocatable: &[(&str, &str)],
    used: &[(&str, &str)],
) -> crate::model::NodeInfo {
    let mut n = crate::model::NodeInfo::new(node(name, allocatable));
    if !used.is_empty() {
        n.add_task(
            std::sync::Arc::from("x"),
            crate::model::NodeTask {
                resreq: res(used),
                status: crate::model::TaskStatus::Running,
                ..crate::model::NodeTask::of(&lone_task(&[]), None)
            },
        );
    }
    n
}

/// A lone pending task requesting `request`, for scoring and predicate checks.
pub fn lone_task(request: &[(&str, &str)]) -> crate::model::TaskInfo {
    crate::model::TaskInfo::new(
        "t",
        "default",
        "t",
        "",
        res(request),
        0,
        Default::default(),
        0,
    )
}
