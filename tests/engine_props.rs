//! Property tests of the engine on random clusters and workloads.
//!
//! Random nodes (sizes, GPUs, zones, taints, cordoned or not-ready nodes, pods of other
//! schedulers) and random gangs (roles with minTaskMember, minMember ≤ tasks, priorities,
//! queues with weights and capabilities, BestEffort pods, node selectors, tolerations) run
//! through several cycles; between cycles binds are applied as Running, some pods finish and
//! some are evicted and recreated. After every cycle, checked against a model kept by the
//! test itself (never against the engine's own accounting):
//!
//! (a) no partial gang: for every gang with binds, its pods already Bound/Running/Succeeded
//!     plus the new binds reach minMember, and minTaskMember for every role;
//! (b) no node over-committed: the requests of the pods on a node fit its allocatable in
//!     every dimension;
//! (c) every committed gang was JobReady: a fresh session over the cluster with the binds
//!     applied finds it ready, and the session reported it Scheduled;
//! plus: binds only go to pending pods, on ready schedulable nodes that pass the pod's
//! selector and taints, and a queue's capability is never exceeded.
//!
//! (d) Statement discard (and drop without commit) restores the session exactly: same
//!     fingerprint, and the cycle run afterwards decides exactly what a fresh session does.
//! (e) Evictions (worlds where preempt and reclaim have work): a preemptor's victims are in
//!     its queue and of strictly lower priority, a reclaimer's in other queues, no victim
//!     gang is left below minMember, no PodDisruptionBudget loses more pods than it allows
//!     (a pod under several never goes), and reclaim takes only from queues above their deserved
//!     share and never leaves one below it. Shares are the queue plugin's definition
//!     (water-filling, or explicit deserved); what a queue holds is what it held as the
//!     cycle began less what was evicted since, summed by the test from the session just
//!     before and just after `reclaim` (pods placed in the same cycle, not running yet, do
//!     not make a queue's running pods fair game).

use std::collections::BTreeMap;
use std::sync::Arc;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use rust_batch::cache::{Cache, PodUpdate};
use rust_batch::framework::{ConditionKind, Scheduler, Session, SessionResult, Statement};
use rust_batch::model::{
    NodeSpec, Placement, PodGroupPhase, QueueInfo, QueueState, Resource, Taint, TaintEffect,
    TaskRef, TaskStatus, Toleration,
};
use rust_batch::testkit::{self, Gang};

// ----- generated inputs ------------------------------------------------------------------

#[derive(Clone, Debug)]
struct NodeCfg {
    cpu: i64,
    mem_gi: i64,
    gpu: i64,
    pods: i64,
    zone: u8,
    tainted: bool,
    unschedulable: bool,
    ready: bool,
    /// Percent of the node's cpu and memory taken by a pod of another scheduler.
    foreign_pct: i64,
}

#[derive(Clone, Debug)]
struct RoleCfg {
    count: usize,
    cpu_m: i64,
    mem_mi: i64,
    gpu: i64,
    /// minTaskMember is `min_pick % (count + 1)`; 0 leaves the role without one.
    min_pick: u32,
}

#[derive(Clone, Debug)]
struct GangCfg {
    roles: Vec<RoleCfg>,
    min_pick: u32,
    priority: i32,
    queue: usize,
    zone: Option<u8>,
    tolerate: bool,
    inqueue: bool,
    min_resources: bool,
}

#[derive(Clone, Debug)]
struct QueueCfg {
    weight: u32,
    capability_cpu: Option<i64>,
    closed: bool,
    /// A child of q0 (hierarchical queues; q0 then takes no jobs of its own).
    child_of_first: bool,
    deserved_cpu: Option<i64>,
}

#[derive(Clone, Debug)]
struct World {
    nodes: Vec<NodeCfg>,
    gangs: Vec<GangCfg>,
    queues: Vec<QueueCfg>,
    conf: usize,
    cycles: usize,
    seed: u64,
    /// Fill the cluster first with a configuration that ignores queue shares (when no queue
    /// has a capability), so later cycles find queues above their share to reclaim from.
    warm_up: bool,
}

fn node_cfg() -> impl Strategy<Value = NodeCfg> {
    (
        (
            2i64..=32,
            2i64..=128,
            prop_oneof![1 => Just(0i64), 1 => 1i64..=8],
            3i64..=30,
        ),
        (
            0u8..3,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.05),
            prop::bool::weighted(0.95),
            prop_oneof![2 => Just(0i64), 1 => 0i64..=100],
        ),
    )
        .prop_map(
            |((cpu, mem_gi, gpu, pods), (zone, tainted, unschedulable, ready, foreign_pct))| {
                NodeCfg {
                    cpu,
                    mem_gi,
                    gpu,
                    pods,
                    zone,
                    tainted,
                    unschedulable,
                    ready,
                    foreign_pct,
                }
            },
        )
}

fn role_cfg() -> impl Strategy<Value = RoleCfg> {
    let request = prop_oneof![
        1 => Just((0i64, 0i64, 0i64)),
        4 => (1i64..=16, 0i64..=8, Just(0i64)).prop_map(|(c, m, g)| (c * 250, m * 512, g)),
        2 => (0i64..=8, 0i64..=8, 1i64..=2).prop_map(|(c, m, g)| (c * 250, m * 512, g)),
    ];
    (1usize..=4, request, any::<u32>()).prop_map(|(count, (cpu_m, mem_mi, gpu), min_pick)| {
        RoleCfg {
            count,
            cpu_m,
            mem_mi,
            gpu,
            min_pick,
        }
    })
}

fn gang_cfg() -> impl Strategy<Value = GangCfg> {
    (
        prop::collection::vec(role_cfg(), 1..=3),
        any::<u32>(),
        0i32..3,
        0usize..4,
        prop_oneof![5 => Just(None), 1 => (0u8..3).prop_map(Some)],
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(roles, min_pick, priority, queue, zone, tolerate, inqueue, min_resources)| GangCfg {
                roles,
                min_pick,
                priority,
                queue,
                zone,
                tolerate,
                inqueue,
                min_resources,
            },
        )
}

fn queue_cfg() -> impl Strategy<Value = QueueCfg> {
    (
        1u32..=4,
        prop_oneof![2 => Just(None), 1 => (1i64..=32).prop_map(Some)],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.3),
        prop_oneof![1 => Just(None), 2 => (1i64..=16).prop_map(Some)],
    )
        .prop_map(
            |(weight, capability_cpu, closed, child_of_first, deserved_cpu)| QueueCfg {
                weight,
                capability_cpu,
                closed,
                child_of_first,
                deserved_cpu,
            },
        )
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(node_cfg(), 1..=10),
        prop::collection::vec(gang_cfg(), 1..=10),
        prop::collection::vec(queue_cfg(), 3),
        0usize..CONFS.len(),
        1usize..=4,
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(nodes, gangs, queues, conf, cycles, seed, warm_up)| World {
                nodes,
                gangs,
                queues,
                conf,
                cycles,
                seed,
                warm_up,
            },
        )
}

/// The configuration in `CONFS` without any queue plugin.
const GREEDY: usize = 3;
/// The configurations in `CONFS` with preempt or reclaim.
const EVICTING: &[usize] = &[4, 5];

/// Configurations the properties must hold under. Every one has gang and predicates.
const CONFS: &[Option<&str>] = &[
    None,
    Some(
        "actions: \"allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
",
    ),
    Some(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
    arguments: {overcommit-factor: 1.0}
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
    arguments: {leastrequested.weight: 0, mostrequested.weight: 2}
  - name: binpack
    arguments: {binpack.weight: 10, binpack.resources: nvidia.com/gpu}
",
    ),
    Some(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
",
    ),
    Some(
        "actions: \"enqueue, allocate, preempt, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
",
    ),
    Some(
        "actions: \"enqueue, allocate, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: capacity
  - name: nodeorder
",
    ),
];

// ----- the test's own model of the cluster -----------------------------------------------

#[derive(Clone, Debug)]
struct PodModel {
    job: Option<String>,
    role: String,
    request: Resource,
    status: TaskStatus,
    node: Option<String>,
    zone: Option<u8>,
    tolerate: bool,
    /// The PodDisruptionBudgets covering the pod.
    budgets: Vec<String>,
}

#[derive(Clone, Debug)]
struct JobModel {
    min_member: u32,
    min_role: BTreeMap<String, u32>,
    queue: String,
    priority: i32,
}

struct Model {
    nodes: BTreeMap<String, NodeCfg>,
    pods: BTreeMap<String, PodModel>,
    jobs: BTreeMap<String, JobModel>,
    capability: BTreeMap<String, i64>,
    /// Queue -> its parent queue.
    parent: BTreeMap<String, String>,
    /// PodDisruptionBudget -> how many pods it lets go in a cycle.
    budgets: BTreeMap<String, u32>,
}

const ZONE: &str = "topology.kubernetes.io/zone";

fn node_allocatable(n: &NodeCfg) -> Resource {
    let mut r = testkit::res(&[
        ("cpu", &n.cpu.to_string()),
        ("memory", &format!("{}Gi", n.mem_gi)),
        ("pods", &n.pods.to_string()),
    ]);
    r.set_scalar("nvidia.com/gpu", n.gpu * 1000);
    r
}

fn request(cpu_m: i64, mem_mi: i64, gpu: i64) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    if cpu_m > 0 {
        v.push(("cpu", format!("{cpu_m}m")));
    }
    if mem_mi > 0 {
        v.push(("memory", format!("{mem_mi}Mi")));
    }
    if gpu > 0 {
        v.push(("nvidia.com/gpu", gpu.to_string()));
    }
    v
}

fn build(w: &World) -> (Cache, Model) {
    let mut cache = testkit::cache_with_default_queue();
    let mut model = Model {
        nodes: BTreeMap::new(),
        pods: BTreeMap::new(),
        jobs: BTreeMap::new(),
        capability: BTreeMap::new(),
        parent: BTreeMap::new(),
        budgets: BTreeMap::new(),
    };
    for (i, q) in w.queues.iter().enumerate() {
        let name = format!("q{i}");
        let mut info = QueueInfo::new(&name, q.weight);
        if let Some(cpu) = q.capability_cpu {
            info.capability = Some(testkit::res(&[("cpu", &cpu.to_string())]));
            model.capability.insert(name.clone(), cpu * 1000);
        }
        if q.closed {
            info.state = QueueState::Closed;
        }
        if let Some(cpu) = q.deserved_cpu {
            info.deserved = Some(testkit::res(&[("cpu", &cpu.to_string())]));
        }
        if i > 0 && q.child_of_first {
            info.parent = Some("q0".into());
            model.parent.insert(name.clone(), "q0".into());
        }
        cache.apply_queue(info);
    }
    for (i, n) in w.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let mut spec = NodeSpec {
            name: name.clone(),
            allocatable: node_allocatable(n),
            ready: n.ready,
            unschedulable: n.unschedulable,
            ..Default::default()
        };
        spec.labels.insert(ZONE.into(), format!("z{}", n.zone));
        if n.tainted {
            spec.taints.push(Taint {
                key: "dedicated".into(),
                value: "batch".into(),
                effect: TaintEffect::NoSchedule,
            });
        }
        cache.apply_node(spec);
        if n.foreign_pct > 0 {
            let uid = format!("foreign-{i}");
            let cpu_m = n.cpu * 1000 * n.foreign_pct / 100;
            let mem_mi = n.mem_gi * 1024 * n.foreign_pct / 100;
            let req = request(cpu_m, mem_mi, 0);
            let pairs: Vec<(&str, &str)> = req.iter().map(|(k, v)| (*k, v.as_str())).collect();
            testkit::foreign_pod(&mut cache, &uid, &name, &pairs);
            model.pods.insert(
                uid,
                PodModel {
                    job: None,
                    role: String::new(),
                    request: Resource {
                        pods: 1,
                        ..testkit::res(&pairs)
                    },
                    status: TaskStatus::Running,
                    node: Some(name.clone()),
                    zone: None,
                    tolerate: true,
                    budgets: Vec::new(),
                },
            );
        }
        model.nodes.insert(name, n.clone());
    }
    for (g, cfg) in w.gangs.iter().enumerate() {
        let total: usize = cfg.roles.iter().map(|r| r.count).sum();
        let min_member = 1 + cfg.min_pick % total as u32;
        let queue = if cfg.queue == 3 {
            "default".to_string()
        } else {
            format!("q{}", cfg.queue)
        };
        let mut placement = Placement::default();
        if let Some(z) = cfg.zone {
            placement.node_selector.insert(ZONE.into(), format!("z{z}"));
        }
        if cfg.tolerate {
            placement.tolerations.push(Toleration {
                key: "dedicated".into(),
                value: "batch".into(),
                ..Default::default()
            });
        }
        let mut gang = Gang::new(&format!("g{g}"), min_member)
            .queue(&queue)
            .priority(cfg.priority)
            .created(g as i64);
        if cfg.inqueue {
            gang = gang.phase(PodGroupPhase::Inqueue);
        }
        let mut min_request = Resource::new();
        let mut min_role = BTreeMap::new();
        for (r, role) in cfg.roles.iter().enumerate() {
            let name = format!("r{r}");
            let req = request(role.cpu_m, role.mem_mi, role.gpu);
            let pairs: Vec<(&str, &str)> = req.iter().map(|(k, v)| (*k, v.as_str())).collect();
            gang = gang.placed_tasks(&name, role.count, &pairs, placement.clone());
            let role_min = role.min_pick % (role.count as u32 + 1);
            if role_min > 0 {
                gang = gang.min_role(&name, role_min);
                min_role.insert(name, role_min);
            }
            min_request.add(&testkit::res(&pairs));
        }
        if cfg.min_resources {
            gang.spec.min_resources = Some(min_request);
        }
        // Two gangs in three carry runtime estimates (0-4 ms, against cycles 1 ms apart), so
        // backfill's reservations and EASY placements are exercised too.
        let spin = w.seed.wrapping_add(g as u64 * 7);
        if !spin.is_multiple_of(3) {
            gang = gang.estimate((spin % 5) as i64);
        }
        // One gang in four is under a PodDisruptionBudget letting 0-2 pods go; one in
        // sixteen also under a second, roomy one (the eviction API refuses such pods).
        let spin = w.seed.rotate_left(g as u32 * 5 + 11);
        let mut budgets = Vec::new();
        if spin.is_multiple_of(4) {
            budgets.push((format!("default/pdb-g{g}"), ((spin >> 8) % 3) as u32));
        }
        if spin % 16 == 4 {
            budgets.push(("default/pdb-roomy".to_string(), 100));
        }
        for (name, allowed) in &budgets {
            gang = gang.budget(name);
            cache.apply_budget(name, *allowed);
            model.budgets.insert(name.clone(), *allowed);
        }
        for t in &gang.tasks {
            model.pods.insert(
                t.uid.to_string(),
                PodModel {
                    job: Some(gang.uid().to_string()),
                    role: t.role.to_string(),
                    request: t.resreq.clone(),
                    status: TaskStatus::Pending,
                    node: None,
                    zone: cfg.zone,
                    tolerate: cfg.tolerate,
                    budgets: budgets.iter().map(|(n, _)| n.clone()).collect(),
                },
            );
        }
        model.jobs.insert(
            gang.uid().to_string(),
            JobModel {
                min_member,
                min_role,
                queue,
                priority: cfg.priority,
            },
        );
        gang.apply(&mut cache);
    }
    (cache, model)
}

/// A small deterministic generator for the churn between cycles.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn holds_node(s: TaskStatus) -> bool {
    matches!(
        s,
        TaskStatus::Bound | TaskStatus::Running | TaskStatus::Releasing
    )
}

// ----- the properties --------------------------------------------------------------------

/// Checks one cycle's result against the model, then applies it to model and cache.
fn check_cycle(
    w: &World,
    cache: &mut Cache,
    model: &mut Model,
    result: &SessionResult,
) -> Result<(), TestCaseError> {
    let conf = CONFS[w.conf];
    let mut new_binds: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for b in &result.binds {
        let pod = model
            .pods
            .get(&*b.task)
            .ok_or_else(|| TestCaseError::fail(format!("bind of unknown pod {}", b.task)))?;
        prop_assert_eq!(
            pod.status,
            TaskStatus::Pending,
            "bind of a pod not pending: {:?}",
            b
        );
        prop_assert_eq!(pod.job.as_deref(), Some(&*b.job));
        let node = model
            .nodes
            .get(&*b.node)
            .ok_or_else(|| TestCaseError::fail(format!("bind to unknown node {}", b.node)))?;
        prop_assert!(
            node.ready && !node.unschedulable,
            "bind to a node that takes no pods: {:?}",
            b
        );
        if let Some(z) = pod.zone {
            prop_assert_eq!(z, node.zone, "selector violated: {:?}", b);
        }
        prop_assert!(!node.tainted || pod.tolerate, "untolerated taint: {:?}", b);
        new_binds
            .entry(b.job.to_string())
            .or_default()
            .push((b.task.to_string(), pod.role.clone()));
    }

    // (a) no partial gang.
    for (job, binds) in &new_binds {
        let jm = &model.jobs[job];
        let mut by_role: BTreeMap<String, u32> = BTreeMap::new();
        let mut total = 0;
        for p in model.pods.values() {
            if p.job.as_deref() == Some(job.as_str())
                && matches!(
                    p.status,
                    TaskStatus::Bound | TaskStatus::Running | TaskStatus::Succeeded
                )
            {
                total += 1;
                *by_role.entry(p.role.clone()).or_default() += 1;
            }
        }
        for (_, role) in binds {
            total += 1;
            *by_role.entry(role.clone()).or_default() += 1;
        }
        prop_assert!(
            total >= jm.min_member,
            "partial gang {}: {} placed, minMember {}; binds {:?}",
            job,
            total,
            jm.min_member,
            binds
        );
        for (role, min) in &jm.min_role {
            let have = by_role.get(role).copied().unwrap_or(0);
            prop_assert!(
                have >= *min,
                "partial role {} of {}: {} placed, minTaskMember {}",
                role,
                job,
                have,
                min
            );
        }
    }

    // Apply binds to the model and the cache.
    for b in &result.binds {
        let pod = model.pods.get_mut(&*b.task).unwrap();
        pod.status = TaskStatus::Running;
        pod.node = Some(b.node.to_string());
    }
    testkit::apply_result(cache, result);

    // (b) no node over-committed, summed from the model.
    for (name, n) in &model.nodes {
        let mut sum = Resource::new();
        for p in model.pods.values() {
            if holds_node(p.status) && p.node.as_deref() == Some(name.as_str()) {
                sum.add(&p.request);
            }
        }
        let allocatable = node_allocatable(n);
        prop_assert!(
            sum.fits(&allocatable),
            "node {} over-committed: pods request {} ({} pods), allocatable {} ({} pods)",
            name,
            sum,
            sum.pods,
            allocatable,
            allocatable.pods
        );
    }

    // No queue beyond its capability, its children's pods included (every configuration
    // with proportion or capacity).
    if conf.is_none_or(|c| c.contains("proportion") || c.contains("capacity")) {
        for (queue, cap) in &model.capability {
            let within = |q: &String| q == queue || model.parent.get(q) == Some(queue);
            let used: i64 = model
                .pods
                .values()
                .filter(|p| {
                    matches!(p.status, TaskStatus::Bound | TaskStatus::Running)
                        && p.job.as_ref().is_some_and(|j| within(&model.jobs[j].queue))
                })
                .map(|p| p.request.milli_cpu)
                .sum();
            prop_assert!(
                used <= *cap,
                "queue {} uses {}m cpu, capability {}m",
                queue,
                used,
                cap
            );
        }
    }

    // (c) every committed gang was ready: the plugins say so on the cluster with the binds,
    // and the session reported it Scheduled.
    let ssn = testkit::open_session(cache, conf);
    for job in new_binds.keys() {
        let id = ssn.state().job_by_uid(job).unwrap();
        prop_assert!(ssn.job_ready(id), "gang {} committed but not ready", job);
        let scheduled = result.job_updates.iter().any(|u| {
            &*u.job == job.as_str()
                && u.condition
                    .as_ref()
                    .is_some_and(|c| c.kind == ConditionKind::Scheduled)
        });
        prop_assert!(
            scheduled,
            "gang {} bound without a Scheduled condition",
            job
        );
    }
    Ok(())
}

/// Some pods finish, some are evicted (Releasing), evicted ones go away and their controller
/// creates them again as new pending pods.
fn churn(cache: &mut Cache, model: &mut Model, rng: &mut Rng, round: usize) {
    let uids: Vec<String> = model.pods.keys().cloned().collect();
    for uid in uids {
        let pod = model.pods[&uid].clone();
        let Some(job) = pod.job.clone() else {
            continue;
        };
        match pod.status {
            TaskStatus::Running if rng.chance(30) => {
                cache.set_pod_status(
                    &uid,
                    TaskStatus::Succeeded,
                    pod.node.as_deref().map(Arc::from),
                );
                model.pods.get_mut(&uid).unwrap().status = TaskStatus::Succeeded;
            }
            TaskStatus::Running if rng.chance(20) => {
                cache.set_pod_status(
                    &uid,
                    TaskStatus::Releasing,
                    pod.node.as_deref().map(Arc::from),
                );
                model.pods.get_mut(&uid).unwrap().status = TaskStatus::Releasing;
            }
            TaskStatus::Releasing => {
                let mut update = cache.pod(&uid).unwrap().clone();
                cache.delete_pod(&uid);
                model.pods.remove(&uid);
                let new_uid = format!("{uid}-r{round}");
                update.task.uid = Arc::from(new_uid.as_str());
                update.task.name = update.task.uid.clone();
                update.task.status = TaskStatus::Pending;
                update.task.node = None;
                cache.apply_pod(PodUpdate {
                    task: update.task,
                    job: Some(job),
                });
                model.pods.insert(
                    new_uid,
                    PodModel {
                        status: TaskStatus::Pending,
                        node: None,
                        ..pod
                    },
                );
            }
            _ => {}
        }
    }
}

/// Evictions only hit allowed victims: a preemptor's victims are in its own queue and of
/// strictly lower priority; a reclaimer's are in other queues; no victim gang is left with
/// fewer than minMember pods placed (or finished) unless none are left; no disruption
/// budget loses more pods than it allows, and no pod under several budgets goes. Then the
/// victims terminate and are recreated (Pending), in the cache and in the model.
fn check_evictions(
    cache: &mut Cache,
    model: &mut Model,
    result: &SessionResult,
) -> Result<(), TestCaseError> {
    let mut victims_by_job: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_budget: BTreeMap<&str, u32> = BTreeMap::new();
    for e in &result.evictions {
        let pod = model
            .pods
            .get(&*e.task)
            .ok_or_else(|| TestCaseError::fail(format!("eviction of unknown pod {}", e.task)))?;
        prop_assert!(
            matches!(pod.status, TaskStatus::Running | TaskStatus::Bound),
            "evicted a pod that was not placed: {:?}",
            e
        );
        let preemptor = e
            .preemptor
            .as_deref()
            .ok_or_else(|| TestCaseError::fail(format!("eviction without a preemptor: {e:?}")))?;
        let (victim, by) = (&model.jobs[&*e.job], &model.jobs[preemptor]);
        if e.reason.starts_with("preempted") {
            prop_assert_eq!(&victim.queue, &by.queue, "preempt crossed queues: {:?}", e);
            prop_assert!(
                victim.priority < by.priority,
                "victim priority {} not below preemptor {}: {:?}",
                victim.priority,
                by.priority,
                e
            );
            // Job uids are "namespace/name".
            let reason = format!(
                "preempted by {preemptor} (priority {} > {})",
                by.priority, victim.priority
            );
            prop_assert_eq!(&e.reason, &reason);
        } else {
            prop_assert_ne!(&victim.queue, &by.queue, "reclaim within a queue: {:?}", e);
            let reason = format!(
                "reclaimed for {preemptor} of queue {} (queue {} is above its deserved share)",
                by.queue, victim.queue
            );
            prop_assert_eq!(&e.reason, &reason);
        }
        *victims_by_job.entry(e.job.to_string()).or_insert(0) += 1;
        prop_assert!(
            pod.budgets.len() <= 1,
            "evicted {} under several disruption budgets {:?}",
            e.task,
            pod.budgets
        );
        for b in &pod.budgets {
            *by_budget.entry(b).or_insert(0) += 1;
        }
    }
    for (budget, evicted) in by_budget {
        prop_assert!(
            evicted <= model.budgets[budget],
            "{} pods evicted under budget {} allowing {}",
            evicted,
            budget,
            model.budgets[budget]
        );
    }
    for (job, evicted) in victims_by_job {
        let placed = model
            .pods
            .values()
            .filter(|p| {
                p.job.as_deref() == Some(job.as_str())
                    && matches!(p.status, TaskStatus::Running | TaskStatus::Bound)
            })
            .count();
        // Pods of the gang bound by this same cycle count too (and so do finished ones, as
        // for JobReady).
        let new_binds = result.binds.iter().filter(|b| *b.job == *job).count();
        let done = model
            .pods
            .values()
            .filter(|p| p.job.as_deref() == Some(job.as_str()) && p.status == TaskStatus::Succeeded)
            .count();
        // Evicted whole means no live member left (finished ones stay finished); otherwise
        // the live and finished members still reach minMember, as JobReady counts them.
        let live = placed + new_binds - evicted;
        let left = if live == 0 { 0 } else { live + done };
        let min = model.jobs[&job].min_member as usize;
        let pods: Vec<_> = model
            .pods
            .iter()
            .filter(|(_, p)| p.job.as_deref() == Some(job.as_str()))
            .map(|(n, p)| (n.clone(), p.status))
            .collect();
        let evictions: Vec<_> = result.evictions.iter().filter(|e| *e.job == *job).collect();
        prop_assert!(
            left == 0 || left >= min,
            "victim gang {} left with {} of minMember {} (pods {:?}, evictions {:?})",
            job,
            left,
            min,
            pods,
            evictions
        );
    }
    for e in &result.evictions {
        let pod = model.pods.get_mut(&*e.task).unwrap();
        pod.status = TaskStatus::Pending;
        pod.node = None;
        cache.set_pod_status(&e.task, TaskStatus::Pending, None);
    }
    Ok(())
}

/// Our pods that hold their nodes, by uid.
fn placed(ssn: &Session) -> std::collections::HashSet<String> {
    ssn.state()
        .jobs()
        .flat_map(|(_, job)| job.tasks())
        .filter(|t| t.status.is_allocated())
        .map(|t| t.uid.to_string())
        .collect()
}

/// What each queue holds of what it held when the session opened (`at_open`): pods placed
/// or pipelined in the same cycle do not make a queue's running pods fair game.
fn held_by_queue(
    ssn: &Session,
    at_open: &std::collections::HashSet<String>,
) -> BTreeMap<String, Resource> {
    let mut held: BTreeMap<String, Resource> = BTreeMap::new();
    for (_, job) in ssn.state().jobs() {
        for t in job.tasks() {
            if t.status.is_allocated() && at_open.contains(&*t.uid) {
                held.entry(job.queue.to_string())
                    .or_default()
                    .add(&t.resreq.without_pods());
            }
        }
    }
    held
}

fn releasing(ssn: &Session) -> BTreeMap<String, String> {
    ssn.state()
        .jobs()
        .flat_map(|(_, job)| {
            job.tasks()
                .iter()
                .filter(|t| t.status == TaskStatus::Releasing)
                .map(move |t| (t.uid.to_string(), job.queue.to_string()))
        })
        .collect()
}

/// Each queue's deserved share by the configured queue plugin, and the dimensions that
/// share speaks for (capacity's names only those set; proportion's covers everything).
fn deserved_by_queue(ssn: &Session, conf: Option<&str>) -> BTreeMap<String, (Resource, bool)> {
    let (state, tree) = (ssn.state(), ssn.queue_tree());
    if conf.is_some_and(|c| c.contains("capacity")) {
        rust_batch::plugins::capacity::session_attrs(state, tree)
            .into_iter()
            .map(|(q, a)| (q.to_string(), (a.deserved, true)))
            .collect()
    } else {
        rust_batch::plugins::proportion::queue_shares(state, tree)
            .into_iter()
            .map(|(q, s)| (q.to_string(), (s.deserved, false)))
            .collect()
    }
}

/// One cycle, checking what `reclaim` (if configured) took: from each queue it evicted
/// from, that queue was above its deserved share in some dimension before, and in every
/// dimension where it was above, it still holds at least its share after. Returns the
/// cycle's result and how many queues were reclaimed from.
fn cycle_checking_reclaim(
    w: &World,
    scheduler: &Scheduler,
    cache: &Cache,
    now: i64,
) -> Result<(SessionResult, usize), TestCaseError> {
    let conf = CONFS[w.conf];
    let mut at_open: Option<std::collections::HashSet<String>> = None;
    // What each queue held and which pods were already going, as reclaim starts.
    let mut before: Option<(BTreeMap<String, Resource>, BTreeMap<String, String>)> = None;
    let mut failures: Vec<String> = Vec::new();
    let (mut victims_seen, mut queues_checked) = (0, 0);
    let result =
        scheduler.run_cycle_observed(cache.snapshot(), now, &mut |action, starting, ssn| {
            let at_open = at_open.get_or_insert_with(|| placed(ssn));
            if action != "reclaim" {
                return;
            }
            if starting {
                before = Some((held_by_queue(ssn, at_open), releasing(ssn)));
                return;
            }
            let (held_before, releasing_before) = before.take().unwrap();
            let held_after = held_by_queue(ssn, at_open);
            let deserved = deserved_by_queue(ssn, conf);
            let mut victim_queues: BTreeMap<String, usize> = BTreeMap::new();
            for (uid, queue) in releasing(ssn) {
                if !releasing_before.contains_key(&uid) {
                    *victim_queues.entry(queue).or_default() += 1;
                }
            }
            victims_seen = victim_queues.values().sum::<usize>();
            queues_checked = victim_queues.len();
            let zero = Resource::new();
            for (queue, victims) in victim_queues {
                let had = held_before.get(&queue).unwrap_or(&zero);
                let has = held_after.get(&queue).unwrap_or(&zero);
                match deserved.get(&queue) {
                    Some((share, named_only)) => failures.extend(share_violations(
                        &queue,
                        victims,
                        had,
                        has,
                        share,
                        *named_only,
                    )),
                    None => failures.push(format!(
                        "reclaimed {victims} pods from queue {queue} with no share"
                    )),
                }
            }
        });
    prop_assert!(failures.is_empty(), "{}", failures.join("; "));
    let reclaimed = result
        .evictions
        .iter()
        .filter(|e| e.reason.starts_with("reclaimed"))
        .count();
    prop_assert_eq!(
        reclaimed,
        victims_seen,
        "the pods reclaim put in Releasing are the cycle's reclaim evictions"
    );
    Ok((result, queues_checked))
}

/// What is wrong with reclaim taking `victims` pods from `queue`, which held `had` before
/// and holds `has` after, of a deserved `share` (speaking for the dimensions it names only,
/// if `named_only`): it must have been above its share somewhere, and stay at or above it
/// wherever it was above.
fn share_violations(
    queue: &str,
    victims: usize,
    had: &Resource,
    has: &Resource,
    share: &Resource,
    named_only: bool,
) -> Vec<String> {
    let dims: Vec<Arc<str>> = if named_only {
        share.dimensions().map(|(n, _)| Arc::from(n)).collect()
    } else {
        had.names(share)
    };
    let above: Vec<&Arc<str>> = dims.iter().filter(|d| had.get(d) > share.get(d)).collect();
    if above.is_empty() {
        return vec![format!(
            "reclaimed {victims} pods from queue {queue}, which held {had} of a deserved {share}: not above its share"
        )];
    }
    above
        .into_iter()
        .filter(|d| has.get(d) < share.get(d))
        .map(|d| format!(
            "reclaim took queue {queue} below its deserved {d}: held {had}, holds {has}, deserves {share} ({victims} pods taken)"
        ))
        .collect()
}

/// How often a world exercised the eviction properties.
#[derive(Default)]
struct Exercised {
    preempted: usize,
    reclaimed_queues: usize,
}

/// Runs a world's cycles, checking every property after each.
fn run_world(w: &World) -> Result<Exercised, TestCaseError> {
    let (mut cache, mut model) = build(w);
    let scheduler = testkit::scheduler(CONFS[w.conf]);
    let mut rng = Rng(w.seed | 1);
    if w.warm_up && model.capability.is_empty() {
        let greedy = World {
            conf: GREEDY,
            ..w.clone()
        };
        let result = testkit::scheduler(CONFS[GREEDY]).run_cycle(cache.snapshot(), 0);
        check_cycle(&greedy, &mut cache, &mut model, &result)?;
    }
    let mut exercised = Exercised::default();
    for round in 0..w.cycles {
        let (result, reclaimed_queues) =
            cycle_checking_reclaim(w, &scheduler, &cache, round as i64)?;
        exercised.reclaimed_queues += reclaimed_queues;
        exercised.preempted += result
            .evictions
            .iter()
            .filter(|e| e.reason.starts_with("preempted"))
            .count();
        check_evictions(&mut cache, &mut model, &result)?;
        check_cycle(w, &mut cache, &mut model, &result)?;
        churn(&mut cache, &mut model, &mut rng, round);
    }
    Ok(exercised)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn cycles_never_bind_partial_gangs_or_overcommit_nodes(w in world()) {
        run_world(&w)?;
    }


    #[test]
    fn statement_discard_restores_the_session_exactly(
        w in world(),
        ops in prop::collection::vec((0u8..3, any::<usize>(), any::<usize>()), 1..=16),
        drop_instead in any::<bool>(),
    ) {
        let (mut cache, mut model) = build(&w);
        // Get some pods running (and some releasing) so evictions have targets.
        let scheduler = testkit::scheduler(CONFS[w.conf]);
        let first = scheduler.run_cycle(cache.snapshot(), 0);
        testkit::apply_result(&mut cache, &first);
        for b in &first.binds {
            model.pods.get_mut(&*b.task).unwrap().status = TaskStatus::Running;
        }
        churn(&mut cache, &mut model, &mut Rng(w.seed | 1), 0);

        let conf = Arc::new(testkit::conf(CONFS[w.conf]));
        let mut ssn = scheduler.open_session(cache.snapshot(), 1);
        let before = ssn.fingerprint();
        {
            let mut stmt = Statement::new(&mut ssn);
            for (kind, a, b) in &ops {
                let state = stmt.state();
                let tasks: Vec<TaskRef> = state
                    .jobs()
                    .flat_map(|(id, j)| {
                        (0..j.tasks().len() as u32).map(move |index| TaskRef { job: id, index })
                    })
                    .collect();
                let pending: Vec<TaskRef> = tasks
                    .iter()
                    .copied()
                    .filter(|t| state.task(*t).status == TaskStatus::Pending)
                    .collect();
                let placed: Vec<TaskRef> = tasks
                    .iter()
                    .copied()
                    .filter(|t| {
                        let t = state.task(*t);
                        t.node.is_some()
                            && matches!(
                                t.status,
                                TaskStatus::Allocated
                                    | TaskStatus::Binding
                                    | TaskStatus::Bound
                                    | TaskStatus::Running
                            )
                    })
                    .collect();
                let nodes = stmt.node_ids();
                match kind {
                    0 | 1 if !pending.is_empty() => {
                        let task = pending[a % pending.len()];
                        let node = nodes[b % nodes.len()];
                        if *kind == 0 {
                            stmt.allocate(task, node);
                        } else {
                            stmt.pipeline(task, node);
                        }
                    }
                    2 if !placed.is_empty() => {
                        stmt.evict(placed[a % placed.len()], "test");
                    }
                    _ => {}
                }
            }
            if !drop_instead {
                stmt.discard();
            }
        }
        let after = ssn.fingerprint();
        if after != before {
            let node = before.0.iter().zip(&after.0).find(|(x, y)| x != y);
            let job = before.1.iter().zip(&after.1).find(|(x, y)| x != y);
            prop_assert!(false, "session changed by a discarded statement: node {:?}, job {:?}", node, job);
        }

        // The plugins' own state was restored too: the cycle now decides exactly what a
        // fresh session decides.
        let actions: Vec<_> = conf
            .actions
            .iter()
            .map(|a| rust_batch::REGISTRY.action(a).unwrap()(&conf.action_arguments(a)).unwrap())
            .collect();
        for a in &actions {
            a.execute(&mut ssn);
        }
        let after_discard = ssn.close();
        let fresh = scheduler.run_cycle(cache.snapshot(), 1);
        prop_assert_eq!(after_discard, fresh);
    }
}

/// Worlds where preempt and reclaim have work: the cluster filled ignoring shares and
/// priorities, then a configuration with preempt or reclaim.
fn evicting_world() -> impl Strategy<Value = World> {
    world().prop_map(|mut w| {
        w.conf = EVICTING[(w.seed % EVICTING.len() as u64) as usize];
        w.warm_up = true;
        for q in &mut w.queues {
            q.capability_cpu = None;
        }
        w
    })
}

/// Runs the eviction properties over `cases` worlds of `worlds`; they must not hold only
/// because nothing was evicted: preempt and reclaim both have to have happened.
fn check_evicting_worlds(worlds: impl Strategy<Value = World>, cases: u32) {
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        source_file: Some(file!()),
        ..config()
    });
    let total = RefCell::new(Exercised::default());
    runner
        .run(&worlds, |w| {
            let e = run_world(&w)?;
            let mut total = total.borrow_mut();
            total.preempted += e.preempted;
            total.reclaimed_queues += e.reclaimed_queues;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let total = total.into_inner();
    assert!(
        total.preempted > 0 && total.reclaimed_queues > 0,
        "the worlds exercised too little: {} pods preempted, {} queues reclaimed from",
        total.preempted,
        total.reclaimed_queues
    );
    eprintln!(
        "evictions checked: {} pods preempted, {} queues reclaimed from",
        total.preempted, total.reclaimed_queues
    );
}

/// (e) over 256 worlds (evictions are rarer than binds).
#[test]
fn evictions_respect_priorities_shares_and_gangs() {
    check_evicting_worlds(evicting_world(), 256);
}

/// Few small nodes and many gangs, every node usable, every queue open: most gangs wait
/// after the warm-up, so preempt and reclaim have far more to choose from.
fn crowded_world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(node_cfg(), 1..=3),
        prop::collection::vec(gang_cfg(), 6..=16),
        prop::collection::vec(queue_cfg(), 3),
        2usize..=4,
        any::<u64>(),
    )
        .prop_map(|(mut nodes, gangs, mut queues, cycles, seed)| {
            for n in &mut nodes {
                n.cpu = n.cpu.min(8);
                n.ready = true;
                n.unschedulable = false;
            }
            for q in &mut queues {
                q.capability_cpu = None;
                q.closed = false;
            }
            World {
                nodes,
                gangs,
                queues,
                conf: EVICTING[(seed % EVICTING.len() as u64) as usize],
                cycles,
                seed,
                warm_up: true,
            }
        })
}

/// (e) in crowded worlds.
#[test]
fn evictions_respect_priorities_shares_and_gangs_in_crowded_clusters() {
    check_evicting_worlds(crowded_world(), 256);
}
