//! allocate: for each queue (QueueOrder, skipping overused ones), each admitted gang (JobOrder)
//! and each pending task (TaskOrder): find nodes that pass every predicate, score them,
//! place the task on the best one (allocate against idle resources, pipeline against
//! releasing ones). The gang's statement is committed only if the gang is ready, kept in the
//! session if it is pipelined, and discarded otherwise — nothing partial is ever bound.
//!
//! When task-by-task placement fails, a bounded search for a placement of the whole gang
//! runs before the gang is given up (`framework/gang_search.rs`), so a gang that fits is not
//! stranded by the order its pods happened to be placed in. When a plugin names node sets
//! for the gang (the HyperNodeOrder vote: topology domains, one GPU model), the gang is
//! placed inside the first set that holds it; a hard rule allows nothing else.

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, Weight};
use crate::framework::fit::TaskUnfit;
use crate::framework::{Action, SearchBudget, SearchOutcome, Session, Statement};
use std::collections::BTreeMap;

use crate::model::subgroup::{count_subgroups, subgroup_of};
use crate::model::{GangMode, JobId, NodeId, PodGroupPhase, SubGroupKey, TaskRef, TaskStatus};

mod subgroups;

pub struct Allocate {
    /// Stop looking for feasible nodes after this many (at least), to bound the work per
    /// task on large clusters (kube-scheduler's percentageOfNodesToScore idea).
    pub min_nodes_to_find: usize,
    /// ...or this percentage of the cluster, whichever is larger.
    pub percentage_of_nodes_to_find: u32,
    /// Tries the whole-gang placement search may spend on one gang...
    pub search_tries: u64,
    /// ...and on all gangs of one cycle.
    pub search_cycle_tries: u64,
}

/// Defaults for the placement search budget: enough to solve any gang of a few roles on
/// clusters of thousands of nodes, and for thousands of gangs a cycle placed inside
/// topology domains (a dozen tries each), small enough that a cycle of hopeless gangs stays
/// within a second.
const SEARCH_TRIES: u32 = 2_000;
const SEARCH_CYCLE_TRIES: u32 = 200_000;

/// allocate's arguments (`configurations: - name: allocate`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AllocateArguments {
    #[serde(rename = "minNodesToFind")]
    pub min_nodes_to_find: Option<Weight>,
    #[serde(rename = "percentageOfNodesToFind")]
    pub percentage_of_nodes_to_find: Option<Weight>,
    #[serde(rename = "placementSearchTries")]
    pub placement_search_tries: Option<Weight>,
    #[serde(rename = "placementSearchCycleTries")]
    pub placement_search_cycle_tries: Option<Weight>,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    let a: AllocateArguments = args.parse()?;
    let or = |w: Option<Weight>, default: u32| w.map_or(default, |w| w.0);
    let min_nodes_to_find = or(a.min_nodes_to_find, 100) as usize;
    let percentage_of_nodes_to_find = or(a.percentage_of_nodes_to_find, 5);
    if percentage_of_nodes_to_find > 100 {
        return Err(ArgError {
            key: format!("{}.percentageOfNodesToFind", args.path),
            message: format!("must be 0..=100, got {percentage_of_nodes_to_find}"),
        });
    }
    Ok(Box::new(Allocate {
        min_nodes_to_find: min_nodes_to_find.max(1),
        percentage_of_nodes_to_find,
        search_tries: u64::from(or(a.placement_search_tries, SEARCH_TRIES)),
        search_cycle_tries: u64::from(or(a.placement_search_cycle_tries, SEARCH_CYCLE_TRIES)),
    }))
}

impl Allocate {
    fn nodes_to_find(&self, nodes: usize) -> usize {
        (nodes * self.percentage_of_nodes_to_find as usize / 100).max(self.min_nodes_to_find)
    }
}

/// Whether a gang may be allocated: admitted (or no enqueue step configured), valid, with
/// pending tasks. A gang whose members are all held back by the driver (gated, refused)
/// has no pending task but is still told why it waits.
fn wants_allocation(ssn: &mut Session, id: JobId, enqueue_configured: bool) -> bool {
    let job = ssn.job(id);
    let pending = job.pending_count() > 0;
    if !pending && job.held_back.is_empty() {
        return false;
    }
    if enqueue_configured && job.phase == PodGroupPhase::Pending {
        return false;
    }
    if let Some(invalid) = ssn.job_valid(id) {
        ssn.record_job_invalid(id, invalid);
        return false;
    }
    pending
}

/// The highest-scoring node among `nodes` (first one wins ties).
pub fn best_node(ssn: &Session, task: TaskRef, nodes: &[NodeId]) -> NodeId {
    let mut best = nodes[0];
    let mut best_score = f64::NEG_INFINITY;
    for &n in nodes {
        let score = ssn.node_score(task, n);
        if score > best_score {
            best = n;
            best_score = score;
        }
    }
    best
}

/// Tries to place `tasks` of one gang within `stmt`, stopping once the gang is ready: an
/// elastic gang's pods beyond its minimum wait for its next turn (Volcano's allocate ends a
/// job's turn once it is ready), so queues take turns by share. Once the gang can no longer
/// reach its minimum, the remaining tasks are only checked, to say why they do not fit.
pub fn place_gang(stmt: &mut Statement, tasks: &[TaskRef], want_nodes: usize) {
    let Some(first) = tasks.first() else {
        return;
    };
    let job = first.job;
    let queue = stmt.job(job).queue.clone();
    let min = stmt.job(job).min_member as usize;
    let already = stmt.job(job).ready_count() as usize;
    let mut placed = 0usize;
    let mut failed = 0usize;
    for (i, &task) in tasks.iter().enumerate() {
        let placeable = already + placed + (tasks.len() - i) >= min;
        if let Some(q) = stmt.queue(&queue) {
            if !stmt.allocatable(q, task) {
                let unfit = TaskUnfit::over_capability(q, &stmt.task(task).quota_request());
                stmt.record_task_unfit(task, unfit);
                failed += 1;
                continue;
            }
        }
        match stmt.best_feasible_node(task, want_nodes) {
            Err(unfit) => {
                stmt.record_task_unfit(task, unfit);
                failed += 1;
            }
            Ok(node) if placeable || failed == 0 => {
                if stmt.fits_now(task, node) {
                    stmt.allocate(task, node);
                } else {
                    stmt.pipeline(task, node);
                }
                placed += 1;
                // Asked only once the minimum can be met: once per gang that binds whole.
                if already + placed >= min && stmt.job_ready(job) {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
}

/// Places a gang's pending `tasks` whole if it can: inside the node sets a plugin names
/// for it (first that holds it), else task by task and, if that fails, by a search for a
/// placement of the whole gang. Returns what to add to the gang's message when it could
/// not be placed (the hard rule it waits for, or that the search gave up).
pub fn place_whole_gang(
    stmt: &mut Statement,
    id: JobId,
    tasks: &[TaskRef],
    want_nodes: usize,
    budget: &mut SearchBudget,
) -> Option<String> {
    let placed = |s: &Statement| s.job_ready(id) || s.job_pipelined(id);
    if stmt.job(id).subgroups.iter().any(|p| p.topology.is_some()) {
        return subgroups::place_in_domains(stmt, id, tasks, want_nodes, budget);
    }
    let mut gave_up = 0u64;
    if let Some(domains) = stmt.gang_domains(id, tasks) {
        for set in &domains.options {
            match stmt.search_gang(id, tasks, Some(set), budget) {
                SearchOutcome::Placed { .. } => return None,
                SearchOutcome::GaveUp { tries } => gave_up = gave_up.max(tries),
                SearchOutcome::NoPlacement { .. } => {}
            }
        }
        if domains.hard {
            // Placed task by task anyway: for what each task lacks (the gang's message), and
            // in case that placement keeps the rule (JobReady asks the plugin) where the
            // search ran out of budget. One that breaks it is taken back: the gang is then
            // told only the rule.
            let start = stmt.mark();
            place_gang(stmt, tasks, want_nodes);
            if stmt.job_ready(id) {
                return None;
            }
            if stmt.job_pipelined(id) {
                stmt.rollback_to(start);
            }
            let mut note = format!("{}: no allowed domain holds the whole gang", domains.rule);
            if let Some(s) = &domains.shortfall {
                note = format!("{note} ({s})");
            }
            if gave_up > 0 {
                note = format!("{note}; placement search gave up after {gave_up} tries");
            }
            return Some(note);
        }
    }
    let start = stmt.mark();
    place_gang(stmt, tasks, want_nodes);
    if placed(stmt) {
        return None;
    }
    let greedy: Vec<(TaskRef, NodeId, TaskStatus)> = stmt
        .placed()
        .filter_map(|t| {
            let task = stmt.task(t);
            let node = stmt.state().node_by_name(task.node.as_deref()?)?;
            Some((t, node, task.status))
        })
        .collect();
    stmt.rollback_to(start);
    let outcome = stmt.search_gang(id, tasks, None, budget);
    let note = match outcome {
        SearchOutcome::Placed { .. } => return None,
        SearchOutcome::GaveUp { tries } => Some(format!(
            "placement search gave up after {} tries",
            tries.max(gave_up)
        )),
        SearchOutcome::NoPlacement { tries: 0 } => None,
        SearchOutcome::NoPlacement { tries } => Some(format!(
            "no combination of nodes holds the whole gang (searched {tries} placements)"
        )),
    };
    if !stmt.job(id).subgroups.is_empty() {
        // Neither pass placed it whole: the subgroups that fit, each whole, may be enough.
        place_by_subgroups(stmt, id, tasks, want_nodes);
        if placed(stmt) {
            return None;
        }
        return note;
    }
    // What the greedy pass held is what a NonStrict gang keeps across sessions, and what
    // its message is computed against (its per-task reasons are recorded already).
    for (task, node, status) in greedy {
        if status == TaskStatus::Pipelined {
            stmt.pipeline(task, node);
        } else {
            stmt.allocate(task, node);
        }
    }
    note
}

/// Places a subgroup gang's pending `tasks` one subgroup at a time (its pods in no subgroup
/// first), taking back each subgroup that could not be placed whole, as Volcano allocates
/// each subgroup in a statement of its own: an elastic gang (minSubGroups below its
/// subgroups) starts with the whole subgroups that fit.
fn place_by_subgroups(stmt: &mut Statement, id: JobId, tasks: &[TaskRef], want_nodes: usize) {
    let policies = stmt.job(id).subgroups.clone();
    let mut groups: BTreeMap<Option<SubGroupKey>, Vec<TaskRef>> = BTreeMap::new();
    for &t in tasks {
        let key = subgroup_of(&policies, &stmt.task(t).labels);
        groups.entry(key).or_default().push(t);
    }
    // What each subgroup holds already, counted once (not once per subgroup).
    let held = |s: TaskStatus| s.is_ready() || s == TaskStatus::Pipelined;
    let before = count_subgroups(&policies, stmt.job(id).tasks(), held, |_| false);
    for (key, members) in groups {
        let mark = stmt.mark();
        place_gang(stmt, &members, want_nodes);
        let Some(key) = key else { continue };
        let placed_now = members
            .iter()
            .filter(|&&t| held(stmt.task(t).status))
            .count();
        let occupied = before.get(&key).map_or(0, |c| c.placed) + placed_now as u32;
        if occupied < policies[key.policy].size {
            stmt.rollback_to(mark);
        }
    }
}

impl Action for Allocate {
    fn name(&self) -> &'static str {
        "allocate"
    }

    fn execute(&self, ssn: &mut Session) {
        let enqueue_configured = ssn.conf().actions.iter().any(|a| a == "enqueue");
        let want_nodes = self.nodes_to_find(ssn.state().node_slots());
        let mut budget = SearchBudget::new(self.search_tries, self.search_cycle_tries);
        let tally = ssn.state().tally();
        let candidates = tally.pending().union(tally.held_back());
        let mut groups = ssn.jobs_by_queue(&candidates, |s, id| {
            // job_valid records a reason, which needs &mut; check the cheap parts first.
            // Gangs whose members are all held back by the driver are told why they wait.
            let job = s.job(id);
            (job.pending_count() > 0 || !job.held_back.is_empty())
                && !(enqueue_configured && job.phase == PodGroupPhase::Pending)
        });
        for jobs in groups.values_mut() {
            jobs.reverse();
        }
        // A gang whose driver holds back members it needs (gated, refused) says so, whatever
        // its queue would say: the queue is not what stops it.
        let held: Vec<JobId> = groups
            .values()
            .flatten()
            .copied()
            .filter(|&id| !ssn.job(id).held_back.is_empty())
            .collect();
        for id in held {
            if let Some(invalid) = ssn.job_valid(id) {
                ssn.record_job_invalid(id, invalid);
            }
        }
        // Gangs already handled (with their GangGroup, or expired).
        let mut done = std::collections::HashSet::new();
        // A waiting time runs out whatever else this cycle brings (an overused queue
        // included), and what the gang held is free for everyone before anyone is placed.
        let expired: Vec<JobId> = groups
            .values()
            .flatten()
            .copied()
            .filter(|&id| ssn.gang_expired(id))
            .collect();
        for id in expired {
            ssn.expire_gang(id);
            done.insert(id);
        }
        while let Some(queue) =
            ssn.next_queue(groups.iter().filter(|(_, j)| !j.is_empty()).map(|(q, _)| q))
        {
            let blocked = ssn.queue(&queue).and_then(|q| ssn.queue_blocked(q));
            let overused = ssn.queue(&queue).is_some_and(|q| ssn.overused(q));
            let Some(jobs) = groups.get_mut(&queue) else {
                break;
            };
            if let Some(why) = blocked {
                // Admitted gangs of a closing queue wait (as in Volcano, whose allocatable
                // vote refuses any queue that is not Open); their running pods go on.
                for id in jobs.drain(..) {
                    ssn.record_job_note(id, format!("{why}: no new pods are placed"));
                }
                continue;
            }
            if overused {
                for id in jobs.drain(..) {
                    ssn.record_job_note(
                        id,
                        format!("queue {queue:?} is using its whole deserved share"),
                    );
                }
                continue;
            }
            let Some(id) = jobs.pop() else {
                continue;
            };
            if done.contains(&id) || !wants_allocation(ssn, id, enqueue_configured) {
                continue;
            }
            if ssn.gang_backing_off(id) {
                continue;
            }
            // A reservation for an earlier gang is in force: backfill places the rest only
            // where they do not delay it (EASY backfill, actions/backfill.rs).
            if ssn.defer_to_backfill(id) {
                continue;
            }
            if ssn.job(id).policy.group.len() > 1 {
                let members = gang_group(ssn, id, enqueue_configured);
                done.extend(members.iter().flatten().copied());
                if let Some(members) = members {
                    allocate_group(ssn, &members, want_nodes);
                }
                continue;
            }
            let tasks = ssn.tasks_in(id, TaskStatus::Pending);
            let mut stmt = Statement::new(ssn);
            let why_not = place_whole_gang(&mut stmt, id, &tasks, want_nodes, &mut budget);
            if stmt.job_ready(id) {
                let placed = !stmt.is_empty();
                stmt.commit();
                // Elastic: the gang's further pods take another turn, after the queue with
                // the lowest share has had its own, and only while its queue is not overused.
                if placed && ssn.job(id).pending_count() > 0 {
                    if let Some(jobs) = groups.get_mut(&queue) {
                        // `jobs` is in reverse job order (pop takes the first).
                        let at = jobs.partition_point(|&j| ssn.job_order(j, id).is_gt());
                        jobs.insert(at, id);
                    }
                }
            } else if stmt.job_pipelined(id) {
                stmt.keep();
            } else {
                let shortage = stmt.describe_shortage(id);
                let note = match (&shortage, why_not) {
                    (Some(s), Some(w)) => Some(format!("{s}; {w}")),
                    (s, w) => s.clone().or(w),
                };
                if let Some(note) = note {
                    stmt.record_job_note(id, note);
                }
                if stmt.job(id).policy.mode == GangMode::NonStrict {
                    // Kept across sessions (the session reports them as holds) until the
                    // gang is ready or its waiting time runs out.
                    stmt.keep();
                } else {
                    stmt.discard();
                    super::backfill::reserve(ssn, id, shortage);
                }
            }
        }
    }
}

/// The gangs of `id`'s GangGroup, if every one exists and may be allocated now; otherwise
/// records why on `id` and returns None.
fn gang_group(ssn: &mut Session, id: JobId, enqueue_configured: bool) -> Option<Vec<JobId>> {
    let uids = ssn.job(id).policy.group.clone();
    let mut members = Vec::with_capacity(uids.len());
    for uid in &uids {
        let Some(member) = ssn.state().job_by_uid(uid) else {
            ssn.record_job_note(id, format!("gang group member {uid} does not exist (yet)"));
            return None;
        };
        let job = ssn.job(member);
        let admitted = !(enqueue_configured && job.phase == PodGroupPhase::Pending);
        if !admitted {
            ssn.record_job_note(id, format!("gang group member {uid} is not admitted yet"));
            return None;
        }
        if let Some(invalid) = ssn.job_valid(member) {
            let note = format!(
                "gang group member {uid} is not complete: {}",
                invalid.message
            );
            ssn.record_job_invalid(member, invalid);
            ssn.record_job_note(id, note);
            return None;
        }
        members.push(member);
    }
    Some(members)
}

/// Places every gang of a GangGroup in one statement, committed only if all of them are
/// ready: no gang of the group binds before the others can.
fn allocate_group(ssn: &mut Session, members: &[JobId], want_nodes: usize) {
    let mut stmt = Statement::new(ssn);
    for &member in members {
        let tasks = stmt.tasks_in(member, TaskStatus::Pending);
        place_gang(&mut stmt, &tasks, want_nodes);
    }
    let waiting: Vec<JobId> = members
        .iter()
        .copied()
        .filter(|m| !stmt.job_ready(*m))
        .collect();
    if waiting.is_empty() {
        stmt.commit();
        return;
    }
    let names: Vec<String> = waiting
        .iter()
        .map(|m| stmt.job(*m).uid.to_string())
        .collect();
    for &member in members {
        let mut note = format!(
            "gang group not ready: {} cannot be placed",
            names.join(", ")
        );
        if let Some(shortage) = stmt.describe_shortage(member) {
            note = format!("{shortage}; {note}");
        }
        stmt.record_job_note(member, note);
    }
    stmt.discard();
}

#[cfg(test)]
mod tests {
    use crate::model::{PodGroupPhase, QueueInfo, Resource, TaskStatus};
    use crate::testkit::*;

    const GPU_NODE: &[(&str, &str)] = &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "2")];

    /// Two elastic jobs (minMember 1, eight 1-cpu pods each) in queues of weights 1 and 3 on
    /// 8 cpu: past its minimum each job takes one pod a turn, and the queue with the lower
    /// share goes next, so one cycle splits the cluster by weight (2 and 6) instead of
    /// whichever queue came first taking all it could.
    #[test]
    fn elastic_jobs_take_pods_by_turns_so_queues_share_by_weight() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(QueueInfo::new("light", 1));
        cache.apply_queue(QueueInfo::new("heavy", 3));
        add_nodes(&mut cache, "n", 8, &[("cpu", "1")]);
        let light = Gang::new("light", 1)
            .queue("light")
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 8, &[("cpu", "1")])
            .apply(&mut cache);
        let heavy = Gang::new("heavy", 1)
            .queue("heavy")
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 8, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        let binds = binds_by_job(&result);
        let n = |job: &str| binds.get(job).map_or(0, Vec::len);
        assert_eq!((n(&light), n(&heavy)), (2, 6), "{binds:?}");
    }

    fn tf_smoke(cache: &mut crate::cache::Cache) -> String {
        Gang::new("tf-smoke-gpu", 5)
            .tasks("ps", 1, &[("cpu", "1")])
            .tasks("worker", 4, &[("nvidia.com/gpu", "2")])
            .apply(cache)
    }

    #[test]
    fn a_gang_that_cannot_fully_fit_binds_nothing_and_says_why() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "gpu", 2, GPU_NODE);
        let job = tf_smoke(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(
            result.binds.is_empty(),
            "not even the PS: {:?}",
            result.binds
        );
        let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
        let cond = update.condition.as_ref().unwrap();
        assert_eq!(cond.kind, crate::framework::ConditionKind::Unschedulable);
        assert_eq!(
            cond.reason,
            crate::framework::GangReason::NotEnoughResources
        );
        assert_eq!(
            cond.message,
            "2/5 tasks in gang unschedulable: 2 tasks: Insufficient nvidia.com/gpu (need 2, best node \
             has 0 free); gang is short of 4 nvidia.com/gpu"
        );
        assert_eq!(
            update.phase,
            Some(PodGroupPhase::Inqueue),
            "admitted, not running"
        );
        // Every pending pod gets a reason; the two that found no node name the resource.
        assert_eq!(update.task_reasons.len(), 5);
        let short: Vec<_> = update
            .task_reasons
            .iter()
            .filter(|(_, why)| why.contains("Insufficient nvidia.com/gpu"))
            .collect();
        assert_eq!(short.len(), 2, "{:?}", update.task_reasons);

        // The session left the cluster as it found it: the next cycle sees the same.
        let again = run_cycle(&cache, None);
        assert!(again.binds.is_empty());
    }

    #[test]
    fn a_gang_that_fits_binds_whole_with_every_worker_on_two_free_gpus() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "gpu", 2, GPU_NODE);
        let job = tf_smoke(&mut cache);
        let first = run_cycle(&cache, None);
        assert!(first.binds.is_empty());
        apply_result(&mut cache, &first);
        add_nodes(&mut cache, "more", 2, GPU_NODE);
        let result = run_cycle(&cache, None);
        let binds = binds_by_job(&result);
        assert_eq!(binds[&job].len(), 5, "{:?}", result.binds);
        let mut gpus_per_node = std::collections::BTreeMap::<String, i32>::new();
        for b in result.binds.iter().filter(|b| b.task.contains("worker")) {
            *gpus_per_node.entry(b.node.to_string()).or_default() += 2;
        }
        assert_eq!(
            gpus_per_node.len(),
            4,
            "one worker per node: {gpus_per_node:?}"
        );
        assert!(gpus_per_node.values().all(|g| *g == 2));
        let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
        assert_eq!(update.phase, Some(PodGroupPhase::Running));
        assert_eq!(
            update.condition.as_ref().unwrap().kind,
            crate::framework::ConditionKind::Scheduled
        );
    }

    #[test]
    fn two_gangs_one_fits_the_second_binds_whole_when_the_first_finishes() {
        // S2 (kube-batch walkthrough).
        let mut cache = cache_with_default_queue();
        add_nodes(
            &mut cache,
            "n",
            4,
            &[("cpu", "4"), ("memory", "16Gi"), ("nvidia.com/gpu", "1")],
        );
        let job1 = Gang::new("job1", 4)
            .created(1)
            .tasks("ps", 1, &[("cpu", "1")])
            .tasks("worker", 3, &[("nvidia.com/gpu", "1")])
            .apply(&mut cache);
        let job2 = Gang::new("job2", 3)
            .created(2)
            .tasks("ps", 1, &[("cpu", "1")])
            .tasks("worker", 2, &[("nvidia.com/gpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        let binds = binds_by_job(&result);
        assert_eq!(binds.get(&job1).map(Vec::len), Some(4));
        assert_eq!(binds.get(&job2), None, "no PS, no worker of job2");
        assert_eq!(
            condition_message(&result, &job2).as_deref(),
            Some(
                "1/3 tasks in gang unschedulable: 1 task: Insufficient nvidia.com/gpu (need 1, best \
                 node has 0 free); gang is short of 1 nvidia.com/gpu"
            )
        );
        apply_result(&mut cache, &result);
        for b in &result.binds {
            cache.set_pod_status(&b.task, TaskStatus::Succeeded, Some(b.node.clone()));
        }
        let result = run_cycle(&cache, None);
        assert_eq!(binds_by_job(&result).get(&job2).map(Vec::len), Some(3));
    }

    #[test]
    fn queues_go_in_queue_order_and_jobs_in_job_order() {
        // Room for two 1-cpu gangs. Queue "b" already uses its share, "a" uses nothing: a's
        // gang goes first. Within "a", the higher-priority gang goes first.
        let mut cache = cache_with_default_queue();
        cache.apply_queue(QueueInfo::new("a", 1));
        cache.apply_queue(QueueInfo::new("b", 1));
        add_nodes(&mut cache, "n", 1, &[("cpu", "3"), ("memory", "8Gi")]);
        Gang::new("b-running", 1)
            .queue("b")
            .tasks("", 1, &[("cpu", "1")])
            .running_on(&["n-00000"])
            .phase(PodGroupPhase::Running)
            .apply(&mut cache);
        let b_new = Gang::new("b-new", 1)
            .queue("b")
            .created(1)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let a_low = Gang::new("a-low", 1)
            .queue("a")
            .created(1)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let a_high = Gang::new("a-high", 1)
            .queue("a")
            .created(2)
            .priority(10)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        let order: Vec<&str> = result.binds.iter().map(|b| &*b.job).collect();
        assert_eq!(
            order,
            [a_high.as_str(), a_low.as_str()],
            "b-new waits: {b_new}"
        );
    }

    #[test]
    fn pipelining_onto_releasing_resources_binds_nothing() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "4"), ("memory", "8Gi")]);
        // Both nodes are taken by pods being evicted: their resources come free soon.
        Gang::new("old", 2)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "4")])
            .last_on("n-00000", TaskStatus::Releasing)
            .tasks("", 1, &[("cpu", "4")])
            .last_on("n-00001", TaskStatus::Releasing)
            .apply(&mut cache);
        let job = Gang::new("new", 2)
            .tasks("", 2, &[("cpu", "3")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
        assert_ne!(
            update.condition.as_ref().map(|c| c.kind),
            Some(crate::framework::ConditionKind::Unschedulable),
            "a pipelined gang is waiting for resources, not unschedulable: {update:?}"
        );
        // Once the evicted pods are gone the gang binds whole.
        cache.delete_pod("default/old-0");
        cache.delete_pod("default/old-1");
        apply_result(&mut cache, &result);
        let result = run_cycle(&cache, None);
        assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));
    }

    #[test]
    fn a_pipelined_gang_holds_its_place_within_the_session() {
        // "first" is pipelined onto the releasing node; "second" (same size, later) must not
        // be placed against the same releasing resources.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("memory", "8Gi")]);
        Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "4")])
            .last_on("n-00000", TaskStatus::Releasing)
            .apply(&mut cache);
        let first = Gang::new("first", 1)
            .created(1)
            .tasks("", 1, &[("cpu", "4")]);
        let second = Gang::new("second", 1)
            .created(2)
            .tasks("", 1, &[("cpu", "4")]);
        first.apply(&mut cache);
        let second = second.apply(&mut cache);
        // Without proportion, which would (rightly) call the queue's share used up first.
        let conf = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates"]);
        let mut ssn = open_session(&cache, Some(conf));
        for name in ["enqueue", "allocate"] {
            let args = ssn.conf().action_arguments(name);
            crate::REGISTRY.action(name).unwrap()(&args)
                .unwrap()
                .execute(&mut ssn);
        }
        let state = ssn.state();
        let t1 = task_ref(state, "default/first-0").unwrap();
        let t2 = task_ref(state, "default/second-0").unwrap();
        assert_eq!(state.task(t1).status, TaskStatus::Pipelined);
        assert_eq!(state.task(t2).status, TaskStatus::Pending);
        let result = ssn.close();
        assert!(result.binds.is_empty());
        assert_eq!(
            condition_message(&result, &second).as_deref(),
            Some(
                "1/1 tasks in gang unschedulable: 1 task: Insufficient cpu (need 4, best node has 0 \
                 free); gang is short of 4 cpu"
            )
        );
    }

    #[test]
    fn a_job_in_a_missing_queue_is_reported_not_scheduled() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        let job = Gang::new("lost", 1)
            .queue("nowhere")
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(result.binds.is_empty());
        assert_eq!(
            condition_message(&result, &job).as_deref(),
            Some("queue \"nowhere\" does not exist")
        );
    }

    #[test]
    fn gangs_already_running_grow_task_by_task() {
        // minMember 2 reached by running pods: each extra pod may bind on its own.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
        let job = Gang::new("elastic", 2)
            .phase(PodGroupPhase::Running)
            .tasks("", 4, &[("cpu", "1")])
            .running_on(&["n-00000", "n-00000"])
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));
        assert!(result.binds.iter().all(|b| &*b.node == "n-00001"));
    }

    #[test]
    fn identical_pods_of_a_gang_see_where_the_previous_ones_went() {
        // Three nodes, one gang of three identical pods, spreading scores: the pods share
        // one scored sample of nodes, and each placement must lower that node's score for the
        // next pod (or drop it once full), not leave a stale best.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 3, &[("cpu", "2"), ("memory", "4Gi")]);
        let job = Gang::new("spread", 3)
            .tasks("", 3, &[("cpu", "1"), ("memory", "1Gi")])
            .apply(&mut cache);
        let conf = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "nodeorder"]);
        let result = run_cycle(&cache, Some(conf));
        let mut nodes = binds_by_job(&result)[&job].clone();
        nodes.sort();
        assert_eq!(nodes, ["n-00000", "n-00001", "n-00002"]);
        // Packing: two pods fill a node, the third must go elsewhere.
        let packing = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "binpack"]);
        let result = run_cycle(&cache, Some(packing));
        let mut per_node = std::collections::BTreeMap::<String, usize>::new();
        for n in &binds_by_job(&result)[&job] {
            *per_node.entry(n.clone()).or_default() += 1;
        }
        let mut counts: Vec<usize> = per_node.into_values().collect();
        counts.sort();
        assert_eq!(counts, [1, 2]);
    }

    /// The TFJob: 1 PS (2 cpu) and 1 worker (4 cpu, 2 GPUs) on one 4-cpu node and
    /// one 5-cpu/2-GPU node. Least-requested scoring puts the PS on the GPU node first, and
    /// task-by-task placement then strands the worker.
    fn stranded_tfjob(cache: &mut crate::cache::Cache) -> String {
        cache.apply_node(node("cpu-node", &[("cpu", "4"), ("memory", "16Gi")]));
        cache.apply_node(node(
            "gpu-node",
            &[("cpu", "5"), ("memory", "16Gi"), ("nvidia.com/gpu", "2")],
        ));
        Gang::new("tfjob", 2)
            .tasks("ps", 1, &[("cpu", "2")])
            .tasks("worker", 1, &[("cpu", "4"), ("nvidia.com/gpu", "2")])
            .apply(cache)
    }

    #[test]
    fn a_gang_that_fits_is_placed_whatever_order_greedy_placement_would_take() {
        let mut cache = cache_with_default_queue();
        let job = stranded_tfjob(&mut cache);
        let result = run_cycle(&cache, None);
        let mut placed: Vec<(String, String)> = result
            .binds
            .iter()
            .map(|b| (b.task.to_string(), b.node.to_string()))
            .collect();
        placed.sort();
        assert_eq!(
            placed,
            [
                ("default/tfjob-ps-0".to_string(), "cpu-node".to_string()),
                ("default/tfjob-worker-0".to_string(), "gpu-node".to_string())
            ],
            "the PS on the cpu node, the worker on the GPU node: {job}"
        );
    }

    const TIGHT_BUDGET: &str = "actions: \"enqueue, allocate\"
configurations:
- name: allocate
  arguments:
    placementSearchTries: 1
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
";

    #[test]
    fn a_search_out_of_budget_says_so_and_places_nothing() {
        let mut cache = cache_with_default_queue();
        let job = stranded_tfjob(&mut cache);
        let result = run_cycle(&cache, Some(TIGHT_BUDGET));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let msg = condition_message(&result, &job).unwrap();
        assert!(
            msg.ends_with("placement search gave up after 2 tries"),
            "{msg}"
        );
    }

    #[test]
    fn a_gang_that_fits_in_total_but_on_no_nodes_says_the_search_found_none() {
        // 9 cpu free in all, 8 asked, but no node has the 4 cpu one pod needs... except one,
        // so the first pod places and the second cannot.
        let mut cache = cache_with_default_queue();
        cache.apply_node(node("big", &[("cpu", "5")]));
        cache.apply_node(node("small-a", &[("cpu", "2")]));
        cache.apply_node(node("small-b", &[("cpu", "2")]));
        let job = Gang::new("pair", 2)
            .tasks("", 2, &[("cpu", "4")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(result.binds.is_empty());
        let msg = condition_message(&result, &job).unwrap();
        assert!(
            msg.starts_with("1/2 tasks in gang unschedulable: 1 task: Insufficient cpu (need 4, best node has 2 free)"),
            "{msg}"
        );
        assert!(
            msg.ends_with("no combination of nodes holds the whole gang (searched 3 placements)"),
            "{msg}"
        );
    }

    #[test]
    fn a_gang_short_of_resources_in_total_names_the_cluster_shortfall_without_searching() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "4")]);
        let job = Gang::new("big", 3)
            .tasks("", 3, &[("cpu", "3")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert_eq!(
            condition_message(&result, &job).as_deref(),
            Some(
                "1/3 tasks in gang unschedulable: 1 task: Insufficient cpu (need 3, best node has 1 \
                 free); gang is short of 1 cpu"
            )
        );
    }

    #[test]
    fn arguments_are_validated() {
        use crate::conf::Arguments;
        let args = |k: &str, v: u64| Arguments::new("configurations[0].arguments").with(k, v);
        assert!(super::build(&args("percentageOfNodesToFind", 101)).is_err());
        assert!(super::build(&args("percentageOfNodesToFind", 100)).is_ok());
        assert!(
            super::build(&args("minNodesToFind", 0)).is_ok(),
            "clamped to 1"
        );
        let a = super::Allocate {
            min_nodes_to_find: 100,
            percentage_of_nodes_to_find: 5,
            search_tries: 1,
            search_cycle_tries: 1,
        };
        assert_eq!(a.nodes_to_find(10), 100);
        assert_eq!(a.nodes_to_find(5000), 250);
        let _ = Resource::new();
    }
}
