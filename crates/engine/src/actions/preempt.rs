//! preempt: within a queue, a starving gang (not even pipelined) may evict placed tasks of
//! other gangs that the plugins agree are victims (priority: strictly lower priority;
//! gang: never below the victim gang's minMember — its surplus one by one, or the gang
//! whole; conformance: never system-critical). The preemptor's tasks are pipelined onto the
//! space being released, and the statement is committed only if the whole gang becomes
//! pipelined — otherwise nothing is evicted.
//!
//! For each pending task of the preemptor, most constrained first (fewest nodes it may run
//! on, then the largest share of the scarcest resource, so a small task does not take the
//! only room a large one could have): a node where it fits once what is already releasing
//! is gone; else, over the nodes examined, the victim set that makes room and loses the
//! least work done (`WorkLost`: runtime so far × request, GPUs first, then cpu, then
//! memory). The sets weighed on each node: victims allowed one by one (a gang's surplus),
//! lowest priority and youngest first; whole victim gangs (all their placed tasks, on
//! every node), the fewest and lowest-priority first; and, when a node offers at most
//! `EXACT_UNITS` victims and victim gangs, every combination of them. At equal work lost
//! the earlier kind of set, then the earlier node, wins. Space a whole gang frees on other
//! nodes serves the later tasks. Every set of victims is put to the plugins' set vote
//! before it is evicted.
//!
//! A gang with a hard topology rule (gpu-affinity's `GangDomains::allowed`) makes room
//! inside one allowed domain only: each domain is tried, the one whose victims lose the
//! least work wins, and nothing outside it is evicted (a victim gang that also runs
//! elsewhere is no victim).

use std::collections::HashMap;
use std::sync::Arc;

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{Action, NodeSet, RunningIndex, Session, Statement, VictimKind};
use crate::model::{JobId, NodeId, NodeInfo, PodGroupPhase, Resource, TaskRef, TaskStatus};

pub struct Preempt;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Preempt))
}

/// How one action asks the plugins and explains its evictions. Preempt considers placed
/// tasks of the preemptor's own queue, reclaim those of other queues.
pub struct Rules {
    pub kind: VictimKind,
    /// The reason given to a victim evicted for the preemptor gang.
    pub reason: fn(&Session, JobId, TaskRef) -> String,
    /// What the preemptor gang's message says when no victims make room for it.
    pub no_room: fn(&Session, JobId) -> String,
}

/// Nodes examined for victims per pending task (beyond those where the task already
/// fits): bounds the work for a gang that cannot be helped on a large cluster.
const NODE_CAP: usize = 32;

fn is_placed(s: TaskStatus) -> bool {
    matches!(s, TaskStatus::Bound | TaskStatus::Running)
}

/// What the node will have free once its releasing tasks are gone, its pipelined ones have
/// arrived and `extra` is released too.
fn future_free(node: &NodeInfo, extra: &Resource) -> Resource {
    let mut free = node.future_free();
    free.add(extra);
    free
}

/// Whether `task` fits `node` once the node's releasing pods are gone: its requests, and
/// its claims in devices no claim holds but those of pods being released (a victim's
/// devices come free only once its pod is gone and its claim deallocated, so the
/// preemptor is pipelined behind them, never bound onto them).
fn fits_after_releases(stmt: &Statement, task: TaskRef, node: NodeId) -> bool {
    stmt.predicate(task, node).is_ok()
}

/// For a task with ResourceClaims, which free resources do not tell the room it needs:
/// `chosen`, then as few of `more` (in order) as it takes for the task to fit `node` once
/// the releases are through, found by evicting them in the statement and rolling back.
/// None when even all of them do not make room.
fn device_victims(
    stmt: &mut Statement,
    task: TaskRef,
    node: NodeId,
    chosen: &[TaskRef],
    more: &[TaskRef],
) -> Option<Vec<TaskRef>> {
    let mark = stmt.mark();
    let mut set = Vec::with_capacity(chosen.len() + more.len());
    for &v in chosen {
        stmt.evict(v, "");
        set.push(v);
    }
    let mut rest = more.iter().filter(|v| !chosen.contains(v));
    let found = loop {
        if fits_after_releases(stmt, task, node) {
            break true;
        }
        match rest.next() {
            Some(&v) => {
                stmt.evict(v, "");
                set.push(v);
            }
            None => break false,
        }
    };
    stmt.rollback_to(mark);
    found.then_some(set)
}

/// A plan's victims `set` with those its task's claims need besides (`device_victims`,
/// taken from `more`); `set` as it is for a task without claims. None when the devices
/// cannot be freed on `node`.
fn with_device_victims(
    stmt: &mut Statement,
    task: TaskRef,
    node: NodeId,
    set: Vec<TaskRef>,
    more: &[TaskRef],
) -> Option<Vec<TaskRef>> {
    if stmt.task(task).claims.is_empty() {
        return Some(set);
    }
    device_victims(stmt, task, node, &set, more)
}

/// The placed (bound or running) tasks of a victim gang, on every node.
fn placed_tasks(ssn: &Session, job: JobId) -> Vec<TaskRef> {
    let tasks = ssn.job(job).tasks();
    collect_within(
        tasks.len(),
        tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| is_placed(t.status) && t.node.is_some())
            .map(|(i, _)| TaskRef {
                job,
                index: i as u32,
            }),
    )
}

/// `items` in a vector allocated once for up to `cap` of them. Collecting a filter grows
/// the vector from four (three allocations for a node's ten pods): these lists are built
/// per node and per victim gang for every task preempt and reclaim try to place.
fn collect_within<T>(cap: usize, items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::with_capacity(cap);
    v.extend(items);
    v
}

/// Lowest priority first, then youngest: the least valuable work goes.
fn victim_order(ssn: &Session, a: TaskRef, b: TaskRef) -> std::cmp::Ordering {
    let (x, y) = (ssn.task(a), ssn.task(b));
    x.priority
        .cmp(&y.priority)
        .then(y.created.cmp(&x.created))
        .then(x.uid.cmp(&y.uid))
}

/// One node's way to make room for a task with whole victim gangs.
struct WholePlan {
    node: NodeId,
    gangs: Vec<JobId>,
    /// (number of gangs, highest victim priority, tasks evicted): smaller is better.
    cost: (usize, i32, usize),
}

/// The work a set of victims has done and loses when evicted: per task, how long it has
/// run (from its start; none if it has not started) times what it requests, summed —
/// GPU-milliseconds (every extended resource named `…/gpu`, in milli-units), then
/// cpu (millicores) × ms, then memory bytes × ms. Compared in that order: the fewest
/// GPU-hours lost first, the other resources break ties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkLost {
    pub gpu: i128,
    pub cpu: i128,
    pub memory: i128,
}

impl WorkLost {
    /// What evicting `tasks` loses at the session's time.
    pub fn of(ssn: &Session, tasks: &[TaskRef]) -> WorkLost {
        let mut w = WorkLost::default();
        for &t in tasks {
            w = w.plus(WorkLost::of_task(ssn, t));
        }
        w
    }

    fn of_task(ssn: &Session, t: TaskRef) -> WorkLost {
        let task = ssn.task(t);
        let ran = i128::from(
            ssn.now
                .saturating_sub(task.started.unwrap_or(ssn.now))
                .max(0),
        );
        let r = &task.resreq;
        WorkLost {
            gpu: ran * i128::from(gpus(r)),
            cpu: ran * i128::from(r.milli_cpu),
            memory: ran * i128::from(r.memory),
        }
    }

    fn plus(self, o: WorkLost) -> WorkLost {
        WorkLost {
            gpu: self.gpu + o.gpu,
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
        }
    }

    /// GPU-hours, for messages and reports.
    pub fn gpu_hours(&self) -> f64 {
        self.gpu as f64 / 1000.0 / 3_600_000.0
    }
}

/// The GPUs a request asks (milli-units): every extended resource named `…/gpu`.
pub fn gpus(r: &Resource) -> i64 {
    r.scalars
        .iter()
        .filter(|(n, _)| n.ends_with("/gpu"))
        .map(|(_, v)| *v)
        .sum()
}

/// A node offering at most this many victim units (single victims and whole victim
/// gangs) has every combination of them weighed (2^12 sets at most); past it, only the
/// ordered plans.
pub const EXACT_UNITS: usize = 12;

/// How many of a node's combinations, cheapest first, are put to the plugins' set vote.
const SET_VOTES: usize = 32;

/// One way to make room for a task on one node.
struct Plan {
    node: NodeId,
    set: Vec<TaskRef>,
    /// (work lost, kind of set: 0 one by one, 2 whole gangs, 3 a combination — at equal
    /// work lost the ordered plans keep Volcano's preferences —, the plan's own cost, the
    /// node's place in the scan): smaller is better.
    key: (WorkLost, u8, (usize, i32, usize), usize),
}

struct Attempt<'r> {
    job: JobId,
    queue: Arc<str>,
    rules: &'r Rules,
    index: Arc<RunningIndex>,
    /// Per victim gang, whether the plugins let it go whole (asked once per attempt; the
    /// final set is asked again before anything is evicted).
    whole: HashMap<JobId, bool>,
    /// A hard gang's domain: the preemptor's tasks go, and victims are taken, only inside.
    within: Option<NodeSet>,
}

impl Attempt<'_> {
    /// Comparing the queue names directly is cheaper than remembering the answer per gang
    /// (a hash lookup per candidate).
    fn in_scope(&self, ssn: &Session, c: TaskRef) -> bool {
        if c.job == self.job || !is_placed(ssn.task(c).status) {
            return false;
        }
        let same = ssn.job(c.job).queue == self.queue;
        (self.rules.kind == VictimKind::Preempt) == same && ssn.protected_until(c).is_none()
    }

    /// Whether a whole victim gang runs only inside the hard gang's domain (always, without
    /// one): evicting it must free nothing outside.
    fn whole_inside(&self, ssn: &Session, gang: JobId) -> bool {
        let Some(set) = &self.within else {
            return true;
        };
        placed_tasks(ssn, gang).iter().all(|t| {
            ssn.task(*t)
                .node
                .as_deref()
                .and_then(|n| ssn.state().node_by_name(n))
                .is_some_and(|n| set.contains(n))
        })
    }

    fn candidates_on(&self, ssn: &Session, node: NodeId) -> Vec<TaskRef> {
        let on_node = &self.index.by_node[node.0 as usize];
        collect_within(
            on_node.len(),
            on_node.iter().copied().filter(|c| self.in_scope(ssn, *c)),
        )
    }

    fn whole_allowed(&mut self, ssn: &Session, task: TaskRef, victim: JobId) -> bool {
        let kind = self.rules.kind;
        *self
            .whole
            .entry(victim)
            .or_insert_with(|| ssn.victims_together(kind, task, &placed_tasks(ssn, victim)))
    }

    fn evict(&self, stmt: &mut Statement, victims: &[TaskRef]) {
        for &v in victims {
            let reason = (self.rules.reason)(stmt, self.job, v);
            stmt.evict_for(v, Some(self.job), reason);
        }
    }

    /// Places one pending task, evicting if it must. False if it found no way.
    fn place(&mut self, stmt: &mut Statement, task: TaskRef) -> bool {
        let free_node = match &self.within {
            None => stmt.feasible_nodes_quiet(task, 1).first().copied(),
            Some(set) => {
                let t = stmt.task(task).clone();
                stmt.feasible_nodes_quiet(task, usize::MAX)
                    .into_iter()
                    .find(|n| set.allows(&t, *n))
            }
        };
        if let Some(node) = free_node {
            stmt.pipeline(task, node);
            return true;
        }
        let request = stmt.task(task).resreq.clone();
        // Preempt looks only where its own queue runs; reclaim anywhere.
        let kind = self.rules.kind;
        let fit = stmt.static_nodes(task);
        let mut nodes: Vec<NodeId> = match kind {
            VictimKind::Preempt => self
                .index
                .nodes_by_queue
                .get(&self.queue)
                .map(|ns| ns.iter().copied().filter(|n| fit.passes(*n)).collect())
                .unwrap_or_default(),
            VictimKind::Reclaim => fit.nodes().to_vec(),
        };
        if let Some(set) = &self.within {
            let t = stmt.task(task).clone();
            nodes.retain(|n| set.allows(&t, *n));
        }
        if nodes.is_empty() {
            return false;
        }
        let start = (self.job.0 as usize).wrapping_mul(7919) % nodes.len();
        let mut examined = Vec::new();
        let mut examined_nodes = 0;
        let mut best: Option<Plan> = None;
        let mut consider = |plan: Plan| {
            if best.as_ref().is_none_or(|b| plan.key < b.key) {
                best = Some(plan);
            }
        };
        for k in 0..nodes.len() {
            if examined_nodes >= NODE_CAP {
                break;
            }
            let node = nodes[(start + k) % nodes.len()];
            let candidates = self.candidates_on(stmt, node);
            if candidates.is_empty() {
                continue;
            }
            examined_nodes += 1;
            let members = stmt.victim_members(kind, task, &candidates);
            if members.is_empty() {
                continue;
            }
            // Even every possible victim gone would not make room: nothing to do here.
            let mut all = Resource::new();
            for c in &members {
                all.add(&stmt.task(*c).resreq);
            }
            if !request.fits(&future_free(stmt.node(node), &all)) {
                continue;
            }
            // Victims one by one (a gang's surplus), lowest priority first, as few as needed.
            let mut victims = stmt.victims(kind, task, &members);
            // `disruptionMode: All` (Kubernetes' PodGroup): such a gang goes whole or not at
            // all (the whole-gang plans below).
            victims.retain(|v| !stmt.job(v.job).policy.disrupt_whole);
            victims.sort_by(|a, b| victim_order(stmt, *a, *b));
            let mut freed = Resource::new();
            let mut needed = 0;
            for v in &victims {
                if request.fits(&future_free(stmt.node(node), &freed)) {
                    break;
                }
                freed.add(&stmt.task(*v).resreq);
                needed += 1;
            }
            let every_single = victims.clone();
            if request.fits(&future_free(stmt.node(node), &freed)) {
                let all = victims.clone();
                victims.truncate(needed);
                // Devices free only with the victims' claims: more victims may be needed.
                if let Some(set) = with_device_victims(stmt, task, node, victims.clone(), &all) {
                    if stmt.victims_together(kind, task, &set) {
                        let lost = WorkLost::of(stmt, &set);
                        consider(Plan {
                            node,
                            set,
                            key: (lost, 0, (0, 0, 0), k),
                        });
                    }
                }
            }
            // A gang can go whole only if all its tasks here may go.
            let whole = collect_within(
                candidates.len(),
                candidates.iter().copied().filter(|c| {
                    candidates
                        .iter()
                        .filter(|o| o.job == c.job)
                        .all(|o| members.contains(o))
                }),
            );
            if let Some(mut plan) =
                self.cheapest_combination(stmt, task, node, &whole, &every_single, &request)
            {
                if let Some(set) =
                    with_device_victims(stmt, task, node, plan.set.clone(), &every_single)
                {
                    if set.len() != plan.set.len() {
                        plan.key.0 = WorkLost::of(stmt, &set);
                        plan.set = set;
                    }
                    consider(Plan {
                        key: (plan.key.0, plan.key.1, plan.key.2, k),
                        ..plan
                    });
                }
            }
            examined.push((node, whole, victims, k));
        }
        // Whole gangs: each examined node's plan.
        for (node, candidates, singles, k) in &examined {
            let Some(plan) = self.whole_plan(stmt, task, *node, candidates, singles, &request)
            else {
                continue;
            };
            let mut set: Vec<TaskRef> = Vec::new();
            let mut freed = Resource::new();
            for &g in &plan.gangs {
                for t in placed_tasks(stmt, g) {
                    if stmt.task(t).node.as_deref() == Some(&*stmt.node(plan.node).name) {
                        freed.add(&stmt.task(t).resreq);
                    }
                    set.push(t);
                }
            }
            for &v in singles {
                if request.fits(&future_free(stmt.node(plan.node), &freed)) {
                    break;
                }
                if plan.gangs.contains(&v.job) {
                    continue;
                }
                freed.add(&stmt.task(v).resreq);
                set.push(v);
            }
            if !request.fits(&future_free(stmt.node(plan.node), &freed)) {
                continue;
            }
            let Some(set) = with_device_victims(stmt, task, plan.node, set, singles) else {
                continue;
            };
            if stmt.victims_together(kind, task, &set) {
                let lost = WorkLost::of(stmt, &set);
                consider(Plan {
                    node: plan.node,
                    set,
                    key: (lost, 2, plan.cost, *k),
                });
            }
        }
        let Some(plan) = best else {
            return false;
        };
        self.evict(stmt, &plan.set);
        stmt.pipeline(task, plan.node);
        true
    }
}

/// Tries to make room for the pending tasks of `job` by evicting victims, within `stmt`.
/// Stops as soon as the gang is pipelined, or cannot be any more.
pub fn evict_for_gang(stmt: &mut Statement, job: JobId, rules: &Rules) {
    evict_for_gang_within(stmt, job, rules, None);
}

/// `evict_for_gang`, the preemptor's tasks and the victims inside `within` only (a hard
/// gang's domain), or anywhere. A gang some of whose subgroups must each stay inside a
/// domain makes room subgroup by subgroup (`domains::evict_by_subgroups`).
pub fn evict_for_gang_within(
    stmt: &mut Statement,
    job: JobId,
    rules: &Rules,
    within: Option<NodeSet>,
) {
    if domains::has_subgroup_domains(stmt, job) {
        domains::evict_by_subgroups(stmt, job, rules, within.as_ref());
        return;
    }
    let pending = stmt.tasks_in(job, TaskStatus::Pending);
    Attempt::new(stmt, job, rules, within).place_until(stmt, pending, |stmt| {
        if stmt.job_pipelined(job) {
            return None;
        }
        let info = stmt.job(job);
        let have = info.ready_count() + info.count(TaskStatus::Pipelined);
        Some(info.min_member.saturating_sub(have) as usize)
    });
}

impl<'r> Attempt<'r> {
    fn new(stmt: &mut Statement, job: JobId, rules: &'r Rules, within: Option<NodeSet>) -> Self {
        Attempt {
            job,
            queue: stmt.job(job).queue.clone(),
            rules,
            index: stmt.running_index(),
            whole: HashMap::new(),
            within,
        }
    }

    /// Places `tasks` (most constrained first), evicting where it must, while `still_needed`
    /// says how many more placements are needed (None: enough). Stops early once the tasks
    /// left cannot bring that many.
    fn place_until(
        &mut self,
        stmt: &mut Statement,
        mut tasks: Vec<TaskRef>,
        still_needed: impl Fn(&Statement) -> Option<usize>,
    ) {
        stmt.most_constrained_first(&mut tasks);
        let mut failed: Vec<u64> = Vec::new();
        for (i, &task) in tasks.iter().enumerate() {
            if still_needed(stmt).is_none() {
                break;
            }
            // Tasks of one template are interchangeable: once one finds no way, nor will
            // the others (this attempt only ever takes room away from them).
            let template = stmt.task(task).template;
            if failed.contains(&template) {
                continue;
            }
            if self.place(stmt, task) {
                continue;
            }
            failed.push(template);
            let Some(need) = still_needed(stmt) else {
                break;
            };
            let left = tasks[i + 1..]
                .iter()
                .filter(|t| !failed.contains(&stmt.task(**t).template))
                .count();
            if left < need {
                break;
            }
        }
    }
}

/// "preempted by ns/job (priority 100 > 10)".
pub fn preempt_reason(ssn: &Session, preemptor: JobId, victim: TaskRef) -> String {
    let (p, v) = (ssn.job(preemptor), ssn.job(victim.job));
    let relation = if p.priority > v.priority { ">" } else { "vs" };
    format!(
        "preempted by {}/{} (priority {} {relation} {})",
        p.namespace, p.name, p.priority, v.priority
    )
}

/// Why preemption did not help, and what it may take, so nobody has to guess.
fn preempt_no_room(ssn: &Session, job: JobId) -> String {
    format!(
        "preemption cannot make room: no pods of queue {} below priority {} that may go \
         (victim gangs keep their minMember; disruption budgets and system-critical pods are respected)",
        ssn.job(job).queue,
        ssn.job(job).priority
    )
}

pub const PREEMPT: Rules = Rules {
    kind: VictimKind::Preempt,
    reason: preempt_reason,
    no_room: preempt_no_room,
};

/// Admitted, valid gangs with pending tasks that are not even pipelined, by queue, each
/// list in job order; the queues in queue order. A gang with a pending pod of
/// `preemptionPolicy: Never` is not among them: as in Kubernetes, it waits for room.
pub fn starving_gangs(ssn: &mut Session) -> Vec<(std::sync::Arc<str>, Vec<JobId>)> {
    let enqueue_configured = ssn.conf().actions.iter().any(|a| a == "enqueue");
    let pending = ssn.state().tally().pending().clone();
    let groups = ssn.jobs_by_queue(&pending, |s, id| {
        let job = s.job(id);
        let never = job.policy.never_preempts
            || job
                .tasks()
                .iter()
                .any(|t| t.never_preempts && t.status == TaskStatus::Pending);
        job.pending_count() > 0
            && !never
            && !(enqueue_configured && job.phase == PodGroupPhase::Pending)
            && s.job_valid(id).is_none()
            && s.job_starving(id)
    });
    let mut queues: Vec<_> = groups.into_iter().collect();
    queues.sort_by(|(a, _), (b, _)| match (ssn.queue(a), ssn.queue(b)) {
        (Some(x), Some(y)) => ssn.queue_order(x, y),
        _ => a.cmp(b),
    });
    queues
}

/// Makes room for one starving gang by evictions, committing only if the gang becomes
/// pipelined.
pub fn evict_or_nothing(ssn: &mut Session, job: JobId, rules: &Rules) {
    if !ssn.job_starving(job) {
        return;
    }
    if let Some(note) = delayed(ssn, job) {
        ssn.append_job_note(job, note);
        return;
    }
    let hard = domains::hard_domains(ssn, job);
    let mut stmt = Statement::new(ssn);
    let pipelined = match &hard {
        Some((domains, _)) => domains::evict_within_one_domain(&mut stmt, job, rules, domains),
        None => {
            evict_for_gang(&mut stmt, job, rules);
            stmt.job_pipelined(job)
        }
    };
    if pipelined {
        stmt.commit();
    } else {
        stmt.discard();
        let mut note = (rules.no_room)(ssn, job);
        if let Some((_, rule)) = &hard {
            note = format!("{note}; inside any one domain of its {rule}");
        }
        if domains::has_hard_subgroups(ssn, job) {
            note = format!(
                "{note}; with each subgroup of a hard subGroupPolicy inside one domain of its own"
            );
        }
        ssn.append_job_note(job, note);
        // Protected victims may make room once they are old enough: look again then.
        // Asked only of a gang that found no room (a pass over every gang each time).
        if let Some((until, count, by_class)) = protected_victims(ssn, job, rules) {
            ssn.wake_at(until);
            let whose = if by_class {
                "their minimum runtime (their queue's or PriorityClass's)"
            } else {
                "their queue's minimum runtime"
            };
            ssn.append_job_note(
                job,
                format!("{count} pod(s) that could make room are within {whose}"),
            );
        }
    }
}

/// While a gang is within its preemption delay (its PriorityClass's, else its queue's):
/// what it says, and a wake-up for when the delay ends.
fn delayed(ssn: &mut Session, job: JobId) -> Option<String> {
    let delay = ssn.preemption_delay_of(job)?;
    let j = ssn.job(job);
    let until = j.created.saturating_add(delay);
    if ssn.now >= until {
        return None;
    }
    let whose = if j.policy.preemption_delay.is_some() {
        "its PriorityClass's preemption delay".to_string()
    } else {
        format!("queue {}'s preemption delay", j.queue)
    };
    ssn.wake_at(until);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(until.max(0) as u64);
    Some(format!(
        "evicts nothing before {} ({whose})",
        humantime::format_rfc3339_seconds(at)
    ))
}

/// The placed tasks the action could take for `job` but for their minimum runtime: when
/// the first of them outgrows it, how many there are, and whether a PriorityClass set the
/// minimum of any.
fn protected_victims(
    ssn: &Session,
    job: JobId,
    rules: &Rules,
) -> Option<(crate::model::Timestamp, usize, bool)> {
    let by_queue = ssn.state().queues().any(|q| q.min_runtime.is_some());
    let queue = &ssn.job(job).queue;
    let mut first: Option<crate::model::Timestamp> = None;
    let mut count = 0;
    let mut by_class = false;
    for (id, j) in ssn.state().jobs() {
        // The cheap tests first: on a cluster with no minimum runtime configured, no queue
        // name is compared.
        if id == job || (j.policy.min_runtime.is_none() && !by_queue) {
            continue;
        }
        let same = j.queue == *queue;
        if (rules.kind == VictimKind::Preempt) != same {
            continue;
        }
        if j.policy.min_runtime.is_none() && ssn.min_runtime_of(id).is_none() {
            continue;
        }
        for index in 0..j.tasks().len() as u32 {
            let t = TaskRef { job: id, index };
            if !is_placed(ssn.task(t).status) {
                continue;
            }
            if let Some(until) = ssn.protected_until(t) {
                count += 1;
                by_class |= j.policy.min_runtime.is_some();
                first = Some(first.map_or(until, |f| f.min(until)));
            }
        }
    }
    first.map(|f| (f, count, by_class))
}

impl Action for Preempt {
    fn name(&self) -> &'static str {
        "preempt"
    }

    fn execute(&self, ssn: &mut Session) {
        for (_, jobs) in starving_gangs(ssn) {
            for job in jobs {
                evict_or_nothing(ssn, job, &PREEMPT);
            }
        }
    }
}

mod domains;
mod plans;

#[cfg(test)]
mod tests;
