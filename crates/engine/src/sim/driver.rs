//! The simulated cluster: a discrete-event loop with a virtual clock that feeds the cache
//! like watches would, runs a scheduling cycle on the schedule period's grid whenever
//! something changed, and "binds" in memory. Pods start when bound and finish after their
//! runtime. Deterministic for a scenario and seed: no wall clock, no hash-order iteration.
//!
//! Two invariants are checked on every cycle, from the simulator's own pod table (not from
//! the engine's bookkeeping): no gang is ever bound partially, and no node ever holds more
//! than its allocatable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use priority_queue::PriorityQueue;

use super::measure::{Domain, ReportLevel};
use super::report::{Report, Sample};
use super::scenario::{JobDef, Scenario, ScenarioError, GROUP_INDEX_LABEL};
use super::tally::{PodShare, SimTally};
use crate::cache::{Cache, PodUpdate};
use crate::framework::{ConditionKind, PredictOptions, PredictedStart, Scheduler, SessionResult};
use crate::model::pod_rules::HOSTNAME_LABEL;
use crate::model::{
    GangOrigin, GangPolicy, JobSpec, NodeSpec, PodGroupPhase, QueueInfo, Resource, TaskInfo,
    TaskStatus, Timestamp, TopologyRequest,
};

/// SplitMix64: a tiny, well-known generator; enough for runtime jitter.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Debug)]
enum Event {
    Submit(usize),
    Finish(usize),
    EvictDone(usize),
    AddNodes(String, u32),
    RemoveNodes(String, u32),
    /// A gang's waiting time or backoff ends: the scheduler must look again.
    Wake,
}

/// A pod as the simulated cluster knows it.
#[derive(Clone, Debug)]
pub struct SimPod {
    pub uid: Arc<str>,
    pub job: usize,
    pub role: Arc<str>,
    pub request: Resource,
    pub runtime: Option<i64>,
    pub status: TaskStatus,
    pub node: Option<Arc<str>>,
    task: TaskInfo,
    finish_event: Option<u64>,
    /// What it adds to the running sums (`SimTally`).
    share: PodShare,
    /// Running at t=0 (the scenario's `running`): its node, and how long it has run.
    pinned: Option<(Arc<str>, i64)>,
}

/// A pod the scheduler does not schedule (the scenario's `otherPods`): its node's usage
/// while the node lives.
#[derive(Clone, Debug)]
pub(super) struct OtherPod {
    pub uid: Arc<str>,
    /// None once its node is gone.
    pub node: Option<Arc<str>>,
    pub request: Resource,
}

impl SimPod {
    /// The pod's ResourceClaims, with the allocations its bind carried.
    pub fn claims(&self) -> &[crate::model::devices::TaskClaim] {
        &self.task.claims
    }
}

/// A gang as the simulated cluster knows it.
#[derive(Clone, Debug)]
pub struct SimJob {
    pub uid: String,
    pub name: String,
    pub queue: String,
    pub min_member: u32,
    pub min_task_member: BTreeMap<String, u32>,
    pub submitted: Option<Timestamp>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub pods: Vec<usize>,
    pub phase: PodGroupPhase,
    /// The last Unschedulable condition message, cleared when the gang is scheduled.
    pub message: Option<String>,
    /// The last reservation backfill announced for the gang ("reserved: nodes … from …"),
    /// kept after it starts.
    pub reservation: Option<String>,
    /// The nodes its pods were bound to, each once, in the order first bound.
    pub nodes: Vec<Arc<str>>,
    /// Per report level (`Simulation::levels`), the domains of those nodes.
    pub(super) domains: Vec<std::collections::BTreeSet<Domain>>,
    /// The GPU models (node label `nvidia.com/gpu.product`) its GPU-requesting pods ran on.
    pub gpu_models: std::collections::BTreeSet<Arc<str>>,
    /// Its start as first predicted after submission, and as first predicted while it was
    /// the first waiting gang of its queue (with when), with `predictStart`.
    pub predicted: Option<PredictedStart>,
    pub predicted_at_head: Option<(Timestamp, PredictedStart)>,
    spec: JobSpec,
    /// How long before its submission it was created (`createdBefore`).
    created_before: i64,
}

/// Progress of a run, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub now: Timestamp,
    pub max_time: Timestamp,
    pub jobs_done: usize,
    pub jobs_total: usize,
}

pub struct Simulation {
    pub(super) scenario: Scenario,
    pub(super) scheduler: Scheduler,
    pub(super) cache: Cache,
    pub(super) now: Timestamp,
    pub(super) events: PriorityQueue<u64, Reverse<(Timestamp, u64)>>,
    event_data: HashMap<u64, Event>,
    pub(super) next_event: u64,
    pub(super) pods: Vec<SimPod>,
    pub(super) pod_index: HashMap<Arc<str>, usize>,
    pub(super) jobs: Vec<SimJob>,
    pub(super) job_index: HashMap<String, usize>,
    /// Live nodes: name -> (group, allocatable), in creation order per group.
    pub(super) nodes: BTreeMap<Arc<str>, (usize, Resource)>,
    pub(super) group_nodes: Vec<Vec<Arc<str>>>,
    pub(super) group_created: Vec<u32>,
    rng: Rng,
    pub(super) dirty: bool,
    pub(super) partial_gangs: u64,
    pub(super) overcommitted_nodes: u64,
    pub(super) cycles: u64,
    pub(super) binds: u64,
    pub(super) evictions: u64,
    pub(super) samples: Vec<Sample>,
    pub(super) violations: Vec<String>,
    /// DRA: which claim holds each device (`driver/pool/device`), and each claim's devices
    /// and running pods, to report a device allocated twice as a violation.
    device_holders: HashMap<String, Arc<str>>,
    claim_users: HashMap<Arc<str>, (Vec<String>, u32)>,
    /// The levels the report measures gang spread at: the scenario's `topologyLevels`,
    /// then its HyperNode tiers.
    pub(super) levels: Vec<ReportLevel>,
    /// What the engine could not use of the scenario's topology (malformed requests,
    /// HyperNode problems), each once, in the order found.
    pub(super) topology_problems: Vec<String>,
    /// See `Report::setup_problems`.
    pub(super) setup_problems: Vec<String>,
    /// Running sums over the pod table (what nodes and queues hold, pods waiting).
    pub(super) tally: SimTally,
    /// Jobs whose every pod succeeded.
    jobs_done: usize,
    /// The scenario's `otherPods`.
    pub(super) other_pods: Vec<OtherPod>,
}

impl Simulation {
    pub fn new(scenario: Scenario, file: &str) -> Result<Self, ScenarioError> {
        let mut scheduler = scenario.scheduler(file)?;
        if scenario.predict_start {
            scheduler.predict_starts(Some(PredictOptions::default()));
        }
        let mut sim = Simulation {
            rng: Rng(scenario.seed),
            scheduler,
            cache: Cache::new(),
            now: 0,
            events: PriorityQueue::new(),
            event_data: HashMap::new(),
            next_event: 0,
            pods: Vec::new(),
            pod_index: HashMap::new(),
            jobs: Vec::new(),
            job_index: HashMap::new(),
            nodes: BTreeMap::new(),
            group_nodes: vec![Vec::new(); scenario.node_groups.len()],
            group_created: vec![0; scenario.node_groups.len()],
            dirty: true,
            partial_gangs: 0,
            overcommitted_nodes: 0,
            cycles: 0,
            binds: 0,
            evictions: 0,
            samples: Vec::new(),
            violations: Vec::new(),
            device_holders: HashMap::new(),
            claim_users: HashMap::new(),
            levels: ReportLevel::of(&scenario),
            topology_problems: Vec::new(),
            setup_problems: Vec::new(),
            tally: SimTally::default(),
            jobs_done: 0,
            other_pods: Vec::new(),
            scenario,
        };
        sim.setup();
        Ok(sim)
    }

    fn schedule(&mut self, at: Timestamp, event: Event) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        self.events.push(id, Reverse((at, id)));
        self.event_data.insert(id, event);
        id
    }

    fn cancel(&mut self, id: Option<u64>) {
        if let Some(id) = id {
            self.events.remove(&id);
            self.event_data.remove(&id);
        }
    }

    fn add_nodes(&mut self, group: usize, count: u32) {
        let g = self.scenario.node_groups[group].clone();
        for _ in 0..count {
            // A name the group's `names` gave another node is skipped.
            let name: Arc<str> = loop {
                self.group_created[group] += 1;
                let name = g.node_name(self.group_created[group]);
                if !self.nodes.contains_key(name.as_str()) {
                    break Arc::from(name);
                }
            };
            let mut allocatable = g.allocatable.0.clone();
            if allocatable.pods == 0 {
                allocatable.pods = 110;
            }
            // As a kubelet labels its node.
            let mut labels = g.labels.clone();
            labels
                .entry(HOSTNAME_LABEL.into())
                .or_insert_with(|| name.to_string());
            self.cache.apply_node(NodeSpec {
                name: name.to_string(),
                allocatable: allocatable.clone(),
                labels: labels.clone(),
                taints: g.taints.clone(),
                unschedulable: g.unschedulable,
                ready: true,
            });
            let pools = &self.scenario.device_pools;
            if let Some(devices) = super::devices::node_inventory(&name, &g.devices, pools, &labels)
            {
                self.cache.apply_node_devices(&name, Some(devices));
            }
            self.tally.add_node(&name, &allocatable);
            self.nodes.insert(name.clone(), (group, allocatable));
            self.group_nodes[group].push(name);
        }
        self.dirty = true;
    }

    fn remove_nodes(&mut self, group: usize, count: u32) {
        for _ in 0..count {
            let Some(name) = self.group_nodes[group].pop() else {
                break;
            };
            self.nodes.remove(&name);
            self.cache.delete_node(&name);
            // Other pods go with their node (a controller would recreate them elsewhere,
            // under another scheduler: not simulated).
            for other in &mut self.other_pods {
                if other.node.as_deref() == Some(&*name) {
                    other.node = None;
                    self.cache.delete_pod(&other.uid);
                    self.tally.remove_other(&name, &other.request);
                }
            }
            // Pods on a lost node are recreated by their controller: pending again.
            let lost: Vec<usize> = (0..self.pods.len())
                .filter(|&p| {
                    self.pods[p].node.as_deref() == Some(&*name)
                        && self.pods[p].status != TaskStatus::Succeeded
                })
                .collect();
            for p in lost {
                let pending_finish = self.pods[p].finish_event.take();
                self.cancel(pending_finish);
                self.set_pod(p, TaskStatus::Pending, None);
            }
            self.tally.remove_node(&name);
        }
        self.dirty = true;
    }

    /// Records the devices a bound pod's claims hold; a device another claim holds is a
    /// violation.
    pub(super) fn hold_devices(&mut self, p: usize, claims: &[crate::model::devices::TaskClaim]) {
        for c in claims {
            let Some(a) = &c.allocation else {
                self.violations.push(format!(
                    "t={}: {} bound without claim {} allocated",
                    self.now, self.pods[p].uid, c.name
                ));
                continue;
            };
            let keys: Vec<String> = a.devices.iter().map(|d| d.key()).collect();
            if let Some((held, users)) = self.claim_users.get_mut(&c.name) {
                if *held != keys {
                    self.violations.push(format!(
                        "t={}: claim {} allocated twice ({held:?}, {keys:?})",
                        self.now, c.name
                    ));
                }
                *users += 1;
                continue;
            }
            for k in &keys {
                if let Some(other) = self.device_holders.insert(k.clone(), c.name.clone()) {
                    self.violations.push(format!(
                        "t={}: device {k} allocated to claims {other} and {}",
                        self.now, c.name
                    ));
                }
            }
            self.claim_users.insert(c.name.clone(), (keys, 1));
            if c.shared {
                self.share_claim(p, &c.name, Some(a.clone()));
            }
        }
    }

    /// Lets go of a pod's claims (it ended or went back to pending): a claim's devices are
    /// free once no pod uses it, and a pending pod's claims are allocated afresh (but a
    /// shared claim other pods still use, which stays where it is).
    fn release_devices(&mut self, p: usize) {
        let claims = self.pods[p].task.claims.clone();
        let mut in_use = Vec::new();
        for c in claims.iter().filter(|c| c.allocation.is_some()) {
            if let Some((keys, users)) = self.claim_users.get_mut(&c.name) {
                *users -= 1;
                if *users == 0 {
                    for k in keys.iter() {
                        self.device_holders.remove(k);
                    }
                    self.claim_users.remove(&c.name);
                    if c.shared {
                        self.share_claim(p, &c.name, None);
                    }
                } else {
                    in_use.push(c.name.clone());
                }
            }
        }
        let cleared: Vec<_> = claims
            .iter()
            .map(|c| crate::model::devices::TaskClaim {
                allocation: c.allocation.clone().filter(|_| in_use.contains(&c.name)),
                ..c.clone()
            })
            .collect();
        self.pods[p].task.replace_claims(cleared.into());
    }

    pub(super) fn set_pod(&mut self, p: usize, status: TaskStatus, node: Option<Arc<str>>) {
        let ends = matches!(
            status,
            TaskStatus::Pending | TaskStatus::Succeeded | TaskStatus::Failed
        );
        if ends
            && self.pods[p]
                .task
                .claims
                .iter()
                .any(|c| c.allocation.is_some())
        {
            self.release_devices(p);
        }
        let queue = &self.jobs[self.pods[p].job].queue;
        let (old, request) = (&self.pods[p].share, &self.pods[p].request);
        self.tally.apply(old, queue, request, -1);
        let share = PodShare {
            node: node.clone().filter(|_| status.occupies_node()),
            pending: status == TaskStatus::Pending
                && self.jobs[self.pods[p].job].submitted.is_some(),
        };
        self.tally.apply(&share, queue, request, 1);
        let pod = &mut self.pods[p];
        pod.share = share;
        pod.status = status;
        pod.node = node.clone();
        pod.task.status = status;
        pod.task.node = node;
        // Pods start when bound (the simulator has no image pulls); a pod sent back to
        // pending starts afresh.
        match status {
            TaskStatus::Running if pod.task.started.is_none() => pod.task.started = Some(self.now),
            TaskStatus::Pending => pod.task.started = None,
            _ => {}
        }
        let update = PodUpdate {
            task: pod.task.clone(),
            job: Some(self.jobs[pod.job].uid.clone()),
        };
        self.cache.apply_pod(update);
        self.dirty = true;
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Submit(j) => {
                // The report counts waits from the submission; the engine orders gangs by
                // their creation, which a snapshot's were before t=0.
                let created = self.now - self.jobs[j].created_before;
                self.jobs[j].submitted = Some(self.now);
                self.jobs[j].spec.created = created;
                let pinned = self.jobs[j]
                    .pods
                    .iter()
                    .filter(|&&p| self.pods[p].pinned.is_some())
                    .count() as u32;
                if pinned > 0 && pinned >= self.jobs[j].min_member {
                    // A gang running at t=0 (a snapshot's) is Running, as its PodGroup was.
                    self.jobs[j].spec.phase = PodGroupPhase::Running;
                    self.jobs[j].phase = PodGroupPhase::Running;
                }
                self.cache.apply_job(self.jobs[j].spec.clone());
                // A malformed request is the engine's to handle (the gang says why it
                // waits); the report lists it too, as the live driver's events would.
                let job_request = self.jobs[j].spec.topology.clone();
                let pod_requests = self.jobs[j]
                    .pods
                    .iter()
                    .filter_map(|&p| self.pods[p].task.topology.as_deref().cloned())
                    .collect::<Vec<_>>();
                for problem in job_request
                    .into_iter()
                    .chain(pod_requests)
                    .filter_map(|r| r.problem)
                {
                    self.note_topology_problem(problem);
                }
                for p in self.jobs[j].pods.clone() {
                    self.pods[p].task.created = created;
                    self.set_pod(p, TaskStatus::Pending, None);
                }
                self.start_pinned(j);
            }
            Event::Finish(p) => {
                self.pods[p].finish_event = None;
                let node = self.pods[p].node.clone();
                self.set_pod(p, TaskStatus::Succeeded, node);
                let job = self.pods[p].job;
                if self.jobs[job].finished.is_none()
                    && self.jobs[job]
                        .pods
                        .iter()
                        .all(|&q| self.pods[q].status == TaskStatus::Succeeded)
                {
                    self.jobs[job].finished = Some(self.now);
                    self.jobs_done += 1;
                }
            }
            Event::EvictDone(p) => self.set_pod(p, TaskStatus::Pending, None),
            Event::Wake => self.dirty = true,
            Event::AddNodes(group, count) => {
                if let Some(g) = self.group(&group) {
                    self.add_nodes(g, count);
                }
            }
            Event::RemoveNodes(group, count) => {
                if let Some(g) = self.group(&group) {
                    self.remove_nodes(g, count);
                }
            }
        }
    }

    fn group(&self, name: &str) -> Option<usize> {
        self.scenario
            .node_groups
            .iter()
            .position(|g| g.name == name)
    }

    /// Processes every event up to `now`, then runs a cycle if anything changed.
    fn step(&mut self) {
        while let Some((_, Reverse((at, _)))) = self.events.peek() {
            if *at > self.now {
                break;
            }
            let (id, Reverse((at, _))) = self.events.pop().expect("peeked");
            let now = self.now;
            self.now = at;
            if let Some(e) = self.event_data.remove(&id) {
                self.handle(e);
            }
            self.now = now;
        }
        if self.dirty {
            self.dirty = false;
            self.cycle();
        }
        self.sample();
    }

    fn cycle(&mut self) {
        self.cycles += 1;
        let snapshot = self.cache.snapshot();
        // HyperNode problems can come and go with the nodes their selectors match.
        let problems = snapshot.hypernodes().problems.clone();
        for p in problems {
            self.note_topology_problem(p);
        }
        let result = self.scheduler.run_cycle(snapshot, self.now);
        self.apply(result);
    }

    pub(super) fn note_topology_problem(&mut self, problem: String) {
        if !self.topology_problems.contains(&problem) {
            self.topology_problems.push(problem);
        }
    }

    fn apply(&mut self, result: SessionResult) {
        self.check_gangs(&result);
        let changed = !result.binds.is_empty() || !result.evictions.is_empty();
        for bind in &result.binds {
            let Some(&p) = self.pod_index.get(&bind.task) else {
                continue;
            };
            if self.pods[p].status != TaskStatus::Pending || !self.nodes.contains_key(&bind.node) {
                self.violations.push(format!(
                    "t={}: bind of {} to {} that is not pending or whose node is gone",
                    self.now, bind.task, bind.node
                ));
                continue;
            }
            self.binds += 1;
            if !bind.claims.is_empty() {
                self.hold_devices(p, &bind.claims);
                self.pods[p].task.replace_claims(bind.claims.clone());
            }
            self.set_pod(p, TaskStatus::Running, Some(bind.node.clone()));
            self.record_placement(p, &bind.node);
            if let Some(runtime) = self.pods[p].runtime {
                let id = self.schedule(self.now + runtime, Event::Finish(p));
                self.pods[p].finish_event = Some(id);
            }
        }
        for ev in &result.evictions {
            let Some(&p) = self.pod_index.get(&ev.task) else {
                continue;
            };
            self.evictions += 1;
            let pending_finish = self.pods[p].finish_event.take();
            self.cancel(pending_finish);
            let node = self.pods[p].node.clone();
            self.set_pod(p, TaskStatus::Releasing, node);
            self.schedule(
                self.now + self.scenario.eviction_grace.0,
                Event::EvictDone(p),
            );
        }
        self.check_nodes();
        // Only a bind starts a job.
        let mut bound: Vec<usize> = result
            .binds
            .iter()
            .filter_map(|b| self.pod_index.get(&b.task).map(|&p| self.pods[p].job))
            .collect();
        bound.sort_unstable();
        bound.dedup();
        for j in bound {
            let job = &self.jobs[j];
            if job.started.is_none() && self.started_count(j) >= job.min_member.max(1) {
                self.jobs[j].started = Some(self.now);
            }
        }
        self.cache.apply_gang_updates(&result.job_updates);
        self.note_predictions(&result.predictions);
        if let Some(at) = result.wake_at {
            self.schedule(at, Event::Wake);
        }
        let mut wakes = Vec::new();
        for update in &result.job_updates {
            let Some(rt) = &update.runtime else { continue };
            let timeout = self
                .job_index
                .get(&*update.job)
                .and_then(|&j| self.jobs[j].spec.policy.wait_timeout);
            if let (Some(since), Some(t)) = (rt.waiting_since, timeout) {
                wakes.push(since + t);
            }
            if rt.backoff_until > self.now {
                wakes.push(rt.backoff_until);
            }
        }
        for at in wakes {
            self.schedule(at, Event::Wake);
        }
        let mut phases = Vec::new();
        for update in &result.job_updates {
            let Some(&j) = self.job_index.get(&*update.job) else {
                continue;
            };
            if let Some(phase) = update.phase {
                phases.push((j, phase));
            }
            match &update.condition {
                Some(c) if c.kind == ConditionKind::Unschedulable => {
                    if let Some(r) = &update.reservation {
                        self.jobs[j].reservation = Some(r.to_string());
                    }
                    self.jobs[j].message = Some(c.message.clone())
                }
                Some(_) => self.jobs[j].message = None,
                None => {}
            }
        }
        for (j, phase) in phases {
            self.jobs[j].phase = phase;
            let uid = self.jobs[j].uid.clone();
            self.cache.set_job_phase(&uid, phase);
            self.jobs[j].spec.phase = phase;
        }
        // Only binds and evictions change what the next cycle can do; phase changes
        // happen within the cycle that decided them.
        self.dirty = changed;
    }

    /// Keeps each gang's first prediction, and its first as the head of its queue (the
    /// predictions come in job order, so the first of each queue is its head).
    fn note_predictions(&mut self, predictions: &[(Arc<str>, PredictedStart)]) {
        let mut heads = std::collections::BTreeSet::new();
        for (uid, p) in predictions {
            let Some(&j) = self.job_index.get(&**uid) else {
                continue;
            };
            let job = &mut self.jobs[j];
            job.predicted.get_or_insert_with(|| p.clone());
            if heads.insert(job.queue.clone()) && job.predicted_at_head.is_none() {
                job.predicted_at_head = Some((self.now, p.clone()));
            }
        }
    }

    fn work_left(&self) -> bool {
        self.jobs_done < self.jobs.len()
    }

    /// Runs until `until` (virtual ms) or until nothing can happen any more.
    pub fn run_until(&mut self, until: Timestamp, progress: &mut dyn FnMut(Progress)) {
        let period = self.scenario.schedule_period.0;
        while self.now <= until {
            self.step();
            progress(Progress {
                now: self.now,
                max_time: self.scenario.max_time.0,
                jobs_done: self.jobs_done,
                jobs_total: self.jobs.len(),
            });
            let next = if self.dirty {
                self.now + period
            } else {
                match self.events.peek() {
                    // Events land between cycles; the scheduler sees them at the next tick.
                    Some((_, Reverse((at, _)))) => {
                        ((*at + period - 1) / period * period).max(self.now + period)
                    }
                    None => break,
                }
            };
            if !self.work_left() && self.events.is_empty() {
                break;
            }
            if next > until {
                break;
            }
            self.now = next;
        }
    }

    /// Runs the whole scenario (to its maxTime at most).
    pub fn run(&mut self, progress: &mut dyn FnMut(Progress)) -> Report {
        let max = self.scenario.max_time.0;
        self.run_until(max, progress);
        self.report()
    }

    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub fn jobs(&self) -> &[SimJob] {
        &self.jobs
    }

    pub fn pods(&self) -> &[SimPod] {
        &self.pods
    }

    pub fn job(&self, name: &str) -> Option<&SimJob> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// How many of a job's pods the scheduler holds a node for without binding them
    /// (a NonStrict gang waiting for the rest); the cluster still sees them Pending.
    pub fn held_pods(&self, name: &str) -> usize {
        self.job(name)
            .map_or(0, |j| self.cache.held_pods(&j.spec.uid).len())
    }

    pub fn job_pods(&self, name: &str) -> Vec<&SimPod> {
        self.job(name)
            .map(|j| j.pods.iter().map(|&p| &self.pods[p]).collect())
            .unwrap_or_default()
    }

    pub fn node_allocatable(&self, node: &str) -> Option<&Resource> {
        self.nodes.get(node).map(|(_, a)| a)
    }
}

mod setup;

#[cfg(test)]
mod tests;
