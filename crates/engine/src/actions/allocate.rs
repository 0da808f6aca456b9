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
mod tests;
