//! backfill, in two parts.
//!
//! 1. BestEffort pods (no requests) of admitted gangs go on any node that passes the
//!    predicates, as Volcano does. They take no resources, so they delay no one.
//! 2. EASY backfill. When allocate could not place a gang and the running pods carry
//!    runtime estimates (pod annotation `rust-batch.io/runtime-estimate`, or
//!    `activeDeadlineSeconds`), the first such gang gets a reservation: the nodes and the
//!    time at which its pods fit once running pods end by their estimates (see
//!    `framework/reservation.rs`). Allocate leaves every later gang to this action, which
//!    places a whole gang only if it fits now and does not delay the reservation: it ends
//!    by the reservation's time, or it leaves the reserved gang room at that time. A gang
//!    without an estimate is taken to run forever, so it is placed only off the reserved
//!    nodes (or where the reservation still fits). Without any estimate no reservation is
//!    made and allocate behaves as without this action.
//!
//! A gang is committed only when it is ready; nothing partial is ever bound.

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, Flag};
use crate::framework::fit::TaskUnfit;
use crate::framework::{
    Action, NodeRule, NodeSet, Reservation, SearchBudget, SearchOutcome, Session, Statement,
};
use crate::model::{JobId, NodeId, PodGroupPhase, TaskStatus};

use super::allocate::best_node;

pub struct Backfill;

/// backfill's argument: `reservation: false` turns EASY backfill's reservation off.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct BackfillArguments {
    pub reservation: Option<Flag>,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    // Read by the session (`reservations_enabled`); checked here so a typo is an error.
    args.parse::<BackfillArguments>()?;
    Ok(Box::new(Backfill))
}

/// Called by allocate when it discards a gang it could not place: the first such gang in
/// a session gets the reservation, if the estimates allow one, and says so in its status.
pub fn reserve(ssn: &mut Session, id: JobId, shortage: Option<String>) {
    let Some(r) = ssn.reserve(id).cloned() else {
        return;
    };
    note_reservation(ssn, &r, shortage);
}

fn note_reservation(ssn: &mut Session, r: &Reservation, shortage: Option<String>) {
    let text = ssn.describe_reservation(r);
    let note = match shortage {
        Some(s) => format!("{s}; {text}"),
        None => text,
    };
    ssn.record_job_note(r.job, note);
}

impl Action for Backfill {
    fn name(&self) -> &'static str {
        "backfill"
    }

    fn execute(&self, ssn: &mut Session) {
        let deferred = ssn.take_deferred();
        // Only gangs with pending members have anything to backfill.
        let pending = ssn.state().tally().pending().clone();
        for id in pending.iter() {
            if !deferred.contains(&id) {
                best_effort(ssn, id);
            }
        }
        let Some(reservation) = ssn.reservation().cloned() else {
            return;
        };
        let want = (ssn.state().node_slots() * 5 / 100).max(100);
        let mut budget = SearchBudget::new(SEARCH_TRIES, SEARCH_CYCLE_TRIES);
        for id in deferred {
            easy(ssn, id, &reservation, want, &mut budget);
        }
        // Backfilled gangs may have moved the reserved gang to other nodes (same time).
        if let Some(now) = ssn.reservation().cloned() {
            if now != reservation {
                let shortage = ssn.describe_shortage(now.job);
                note_reservation(ssn, &now, shortage);
            }
        }
    }
}

/// Part 1: the BestEffort pods of an admitted gang.
fn best_effort(ssn: &mut Session, id: JobId) {
    let job = ssn.job(id);
    // A gang that allocate held (pipelined, not ready) still has Allocated tasks that
    // no commit will bind; JobReady would count them, so committing BestEffort pods
    // here could bind a fraction of the gang. It gets its turn next cycle.
    if job.phase == PodGroupPhase::Pending
        || job.pending_count() == 0
        || job.count(TaskStatus::Allocated) > 0
        || ssn.job_valid(id).is_some()
    {
        return;
    }
    let tasks: Vec<_> = ssn
        .tasks_in(id, TaskStatus::Pending)
        .into_iter()
        .filter(|t| ssn.task(*t).is_best_effort())
        .collect();
    if tasks.is_empty() {
        return;
    }
    let mut stmt = Statement::new(ssn);
    for &task in &tasks {
        match stmt.feasible_nodes(task, 16) {
            Ok(nodes) => {
                // Feasible means room now or once releasing pods are gone (pod
                // slots included); only room now may be bound.
                let idle: Vec<_> = nodes
                    .iter()
                    .copied()
                    .filter(|n| stmt.fits_now(task, *n))
                    .collect();
                if idle.is_empty() {
                    let node = best_node(&stmt, task, &nodes);
                    stmt.pipeline(task, node);
                } else {
                    let node = best_node(&stmt, task, &idle);
                    stmt.allocate(task, node);
                }
            }
            Err(unfit) => stmt.record_task_unfit(task, unfit),
        }
    }
    if stmt.job_ready(id) {
        stmt.commit();
    } else {
        stmt.discard();
    }
}

/// The placement search's budget here: per gang and per cycle (backfill searches only for
/// gangs task-by-task placement could not fit beside a reservation).
const SEARCH_TRIES: u64 = 2_000;
const SEARCH_CYCLE_TRIES: u64 = 50_000;

/// When task-by-task placement left the gang short: undoes it and searches for a placement
/// of the whole gang on idle room off the reserved nodes (where it cannot delay the
/// reserved gang). True if it placed the gang.
fn search_off_reserved(
    stmt: &mut Statement,
    id: JobId,
    tasks: &[crate::model::TaskRef],
    r: &Reservation,
    budget: &mut SearchBudget,
) -> bool {
    let slots = stmt.state().node_slots();
    let off: Vec<NodeId> = stmt
        .state()
        .nodes()
        .map(|(n, _)| n)
        .filter(|n| r.nodes.binary_search(n).is_err())
        .collect();
    let set = NodeSet {
        name: "off the reserved nodes".into(),
        rules: vec![NodeRule::new(None, std::sync::Arc::new(off), slots)],
    };
    stmt.rollback_to(0);
    // Backfill binds what it commits: pipelined is not enough (the search settles for it).
    matches!(
        stmt.search_gang_on_idle(id, tasks, Some(&set), budget),
        SearchOutcome::Placed { .. }
    ) && stmt.job_ready(id)
}

/// Part 2: a gang allocate left behind a reservation, placed whole on idle resources only
/// if that does not delay the reservation.
fn easy(ssn: &mut Session, id: JobId, r: &Reservation, want: usize, budget: &mut SearchBudget) {
    let reserved = ssn.job(r.job).uid.clone();
    let job = ssn.job(id);
    // Holds from earlier sessions (NonStrict gangs) stay as they are; see `best_effort`.
    if job.pending_count() == 0 || job.count(TaskStatus::Allocated) > 0 {
        return;
    }
    if job.policy.group.len() > 1 {
        ssn.record_job_note(
            id,
            format!("gang group waits: gang {reserved} holds a reservation"),
        );
        return;
    }
    let queue = job.queue.clone();
    if ssn.queue(&queue).is_some_and(|q| ssn.overused(q)) {
        ssn.record_job_note(
            id,
            format!("queue {queue:?} is using its whole deserved share"),
        );
        return;
    }
    let tasks = ssn.tasks_in(id, TaskStatus::Pending);
    let mut stmt = Statement::new(ssn);
    for &task in &tasks {
        if let Some(q) = stmt.queue(&queue) {
            if !stmt.allocatable(q, task) {
                let unfit = TaskUnfit::over_capability(q, &stmt.task(task).quota_request());
                stmt.record_task_unfit(task, unfit);
                continue;
            }
        }
        let nodes = match stmt.feasible_nodes(task, want) {
            Ok(nodes) => nodes,
            Err(unfit) => {
                stmt.record_task_unfit(task, unfit);
                continue;
            }
        };
        let t = stmt.task(task);
        let idle: Vec<NodeId> = nodes
            .into_iter()
            .filter(|n| stmt.fits_now(task, *n))
            .collect();
        if idle.is_empty() {
            let why = "room only once releasing pods are gone (backfill uses idle resources only)";
            stmt.record_task_unfit(task, TaskUnfit::other(why));
            continue;
        }
        // A task that may outlast the reservation's time goes off the reserved nodes when
        // it can: it then cannot delay the reserved gang.
        let outlasts = stmt.task_end(stmt.job(id), t).is_none_or(|end| end > r.at);
        let off: Vec<NodeId> = idle
            .iter()
            .copied()
            .filter(|n| r.nodes.binary_search(n).is_err())
            .collect();
        let choice = if outlasts && !off.is_empty() {
            &off
        } else {
            &idle
        };
        let node = best_node(&stmt, task, choice);
        stmt.allocate(task, node);
    }
    if !stmt.job_ready(id) {
        // Said as task-by-task placement left it, while its placements still count.
        let shortage = stmt.describe_shortage(id);
        if !search_off_reserved(&mut stmt, id, &tasks, r, budget) {
            if let Some(shortage) = shortage {
                stmt.record_job_note(id, shortage);
            }
            stmt.discard();
            return;
        }
    }
    if stmt.keeps_reservation(id) {
        stmt.commit();
        return;
    }
    // Placed task by task it would delay the reserved gang; placed whole off the reserved
    // nodes it may not.
    if search_off_reserved(&mut stmt, id, &tasks, r, budget) && stmt.keeps_reservation(id) {
        stmt.commit();
        return;
    }
    stmt.discard();
    let at = ssn.describe_reservation(ssn.reservation().unwrap_or(r));
    ssn.record_job_note(id, format!("waits: it would delay gang {reserved} ({at})"));
}

#[cfg(test)]
mod tests {
    use crate::framework::Statement;
    use crate::model::{PodGroupPhase, TaskStatus};
    use crate::testkit::*;

    const BACKFILL_ONLY: &str =
        "actions: backfill\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n";

    const EASY: &str = crate::conf_yaml!("enqueue, allocate, backfill"; ["priority", "gang"], ["predicates", "nodeorder"]);
    const NO_BACKFILL: &str =
        crate::conf_yaml!("enqueue, allocate"; ["priority", "gang"], ["predicates", "nodeorder"]);
    const GPU8: &[(&str, &str)] = &[("cpu", "32"), ("memory", "64Gi"), ("nvidia.com/gpu", "8")];
    const MIN: i64 = 60_000;

    /// Two 8-GPU nodes: n-00000 full until 20m (by its estimate), n-00001 idle. A gang of
    /// 2 × 8 GPU (created first) cannot fit now; by the estimates it fits at 20m on both.
    fn reserved_cluster(estimates: bool) -> (crate::cache::Cache, String) {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, GPU8);
        let mut old = Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("nvidia.com/gpu", "8")])
            .running_on(&["n-00000"])
            .started(0);
        if estimates {
            old = old.estimate(20 * MIN);
        }
        old.apply(&mut cache);
        let big = Gang::new("big", 2)
            .created(1)
            .tasks("", 2, &[("nvidia.com/gpu", "8")])
            .apply(&mut cache);
        (cache, big)
    }

    #[test]
    fn a_small_gang_that_ends_before_the_shadow_time_is_backfilled() {
        let (mut cache, big) = reserved_cluster(true);
        let short = Gang::new("short", 1)
            .created(2)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .estimate(10 * MIN)
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        let binds = binds_by_job(&result);
        assert_eq!(
            binds.get(&short).map(Vec::as_slice),
            Some(&["n-00001".to_string()][..])
        );
        assert_eq!(binds.get(&big), None);
        let msg = condition_message(&result, &big).unwrap();
        assert!(
            msg.contains("reserved: nodes n-00000,n-00001 from 1970-01-01T00:20:00Z"),
            "{msg}"
        );
    }

    #[test]
    fn a_gang_that_would_delay_the_reservation_is_not_backfilled() {
        // Ends after the shadow time on a node the reservation needs: it waits, though it
        // fits now and greedy allocation (no backfill) would place it.
        let (mut cache, big) = reserved_cluster(true);
        let long = Gang::new("long", 1)
            .created(2)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .estimate(60 * MIN)
            .apply(&mut cache);
        let unknown = Gang::new("unknown", 1)
            .created(3)
            .tasks("", 1, &[("nvidia.com/gpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        for job in [&long, &unknown] {
            let msg = condition_message(&result, job).unwrap();
            assert!(
                msg.contains("waits: it would delay gang default/big (reserved: nodes"),
                "{job}: {msg}"
            );
        }
        assert!(condition_message(&result, &big)
            .unwrap()
            .contains("reserved: nodes"));
        let greedy = run_cycle(&cache, Some(NO_BACKFILL));
        assert_eq!(binds_by_job(&greedy).get(&long).map(Vec::len), Some(1));
    }

    #[test]
    fn a_gang_placed_whole_off_the_reserved_nodes_is_backfilled_where_task_by_task_is_not() {
        // Off the reservation: a 4-cpu node and a 5-cpu node with 2 GPUs. Task by task the
        // PS takes the GPU node and the worker goes to a reserved node (delaying the big
        // gang); placed whole, the PS takes the cpu node and the worker the GPU node.
        let (mut cache, big) = reserved_cluster(true);
        cache.apply_node(node("x-cpu", &[("cpu", "4"), ("memory", "16Gi")]));
        cache.apply_node(node(
            "x-gpu",
            &[("cpu", "5"), ("memory", "16Gi"), ("nvidia.com/gpu", "2")],
        ));
        let tf = Gang::new("tfjob", 2)
            .created(2)
            .tasks("ps", 1, &[("cpu", "2")])
            .tasks("worker", 1, &[("cpu", "4"), ("nvidia.com/gpu", "2")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        let mut placed: Vec<(String, String)> = result
            .binds
            .iter()
            .filter(|b| *b.job == *tf)
            .map(|b| (b.task.to_string(), b.node.to_string()))
            .collect();
        placed.sort();
        assert_eq!(
            placed,
            [
                ("default/tfjob-ps-0".to_string(), "x-cpu".to_string()),
                ("default/tfjob-worker-0".to_string(), "x-gpu".to_string())
            ]
        );
        assert_eq!(binds_by_job(&result).get(&big), None);
    }

    #[test]
    fn a_gang_off_the_reserved_nodes_is_backfilled_even_without_an_estimate() {
        // A third node, half used by a pod that never ends: the reservation does not need
        // it, so a gang with no estimate may run there for as long as it likes.
        let (mut cache, _big) = reserved_cluster(true);
        add_nodes(&mut cache, "x", 1, GPU8);
        foreign_pod(&mut cache, "other", "x-00000", &[("nvidia.com/gpu", "4")]);
        let fits_off = Gang::new("fits-off", 1)
            .created(2)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .apply(&mut cache);
        let needs_reserved = Gang::new("needs-reserved", 1)
            .created(3)
            .tasks("", 1, &[("nvidia.com/gpu", "8")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        let binds = binds_by_job(&result);
        assert_eq!(
            binds.get(&fits_off).map(Vec::as_slice),
            Some(&["x-00000".to_string()][..])
        );
        assert_eq!(binds.get(&needs_reserved), None, "{binds:?}");
    }

    #[test]
    fn without_estimates_backfill_is_best_effort_only_and_allocate_is_greedy_as_before() {
        let (mut cache, big) = reserved_cluster(false);
        let small = Gang::new("small", 1)
            .created(2)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .apply(&mut cache);
        let be = Gang::new("be", 1)
            .created(3)
            .tasks("", 1, &[])
            .apply(&mut cache);
        let with = run_cycle(&cache, Some(EASY));
        let binds = binds_by_job(&with);
        assert_eq!(
            binds.get(&small).map(Vec::len),
            Some(1),
            "no reservation holds it"
        );
        assert_eq!(binds.get(&be).map(Vec::len), Some(1));
        assert!(!condition_message(&with, &big).unwrap().contains("reserved"));
        // Exactly what allocate alone does, plus the BestEffort pod.
        let without = run_cycle(&cache, Some(NO_BACKFILL));
        let mut expected = binds_by_job(&without);
        expected.remove(&be);
        let mut got = binds;
        got.remove(&be);
        assert_eq!(got, expected);
        // Turning the reservation off gives the same with estimates.
        let (mut cache, _) = reserved_cluster(true);
        Gang::new("small", 1)
            .created(2)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .estimate(60 * MIN)
            .apply(&mut cache);
        let off = format!(
            "{EASY}configurations:\n- name: backfill\n  arguments: {{reservation: false}}\n"
        );
        let result = run_cycle(&cache, Some(&off));
        assert_eq!(binds_by_job(&result).get(&small).map(Vec::len), Some(1));
    }

    #[test]
    fn a_backfilled_gang_is_never_partial() {
        // "pair" needs 2 × 4 GPU for an hour: one pod fits off the reserved nodes, the
        // other only on a reserved one, where it would delay the reservation. Neither binds.
        // "twins" (2 × 4 GPU, short) fit only one pod now: neither binds either.
        let (mut cache, _big) = reserved_cluster(true);
        add_nodes(&mut cache, "x", 1, GPU8);
        foreign_pod(&mut cache, "other", "x-00000", &[("nvidia.com/gpu", "4")]);
        let pair = Gang::new("pair", 2)
            .created(2)
            .tasks("", 2, &[("nvidia.com/gpu", "4")])
            .estimate(60 * MIN)
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        assert_eq!(binds_by_job(&result).get(&pair), None, "{:?}", result.binds);
        let msg = condition_message(&result, &pair).unwrap();
        assert!(msg.contains("would delay gang default/big"), "{msg}");

        let (mut cache, _big) = reserved_cluster(true);
        let twins = Gang::new("twins", 2)
            .created(2)
            .tasks("", 2, &[("nvidia.com/gpu", "6")])
            .estimate(MIN)
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let msg = condition_message(&result, &twins).unwrap();
        assert!(msg.contains("Insufficient nvidia.com/gpu"), "{msg}");
    }

    #[test]
    fn the_shadow_time_is_the_earliest_estimated_end_at_which_the_gang_fits() {
        // Three full nodes freeing at 10m, 30m and 20m (by estimate), one node's pods with no
        // estimate at all: a gang of 2 × 8 GPU fits at 20m on the first and third.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 4, GPU8);
        for (i, end) in [(0, Some(10)), (1, Some(30)), (2, Some(20)), (3, None)] {
            let node = format!("n-0000{i}");
            // Two pods per node, started 5m apart, ending together (a zero estimate would be
            // refused as a mistake, see `TaskInfo::checked_estimate`).
            let mut g = Gang::new(&format!("run-{i}"), 1)
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("nvidia.com/gpu", "4")])
                .running_on(&[&node])
                .started(0);
            if let Some(end) = end {
                g = g.estimate(end * MIN);
            }
            g.apply(&mut cache);
            let mut h = Gang::new(&format!("early-{i}"), 1)
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("nvidia.com/gpu", "4")])
                .running_on(&[&node])
                .started(5 * MIN);
            if let Some(end) = end {
                h = h.estimate(end * MIN - 5 * MIN);
            }
            h.apply(&mut cache);
        }
        let big = Gang::new("big", 2)
            .created(1)
            .tasks("", 2, &[("nvidia.com/gpu", "8")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        let msg = condition_message(&result, &big).unwrap();
        assert!(
            msg.ends_with("; reserved: nodes n-00000,n-00002 from 1970-01-01T00:20:00Z"),
            "{msg}"
        );
    }

    #[test]
    fn a_long_gang_on_a_reserved_node_is_backfilled_only_if_the_reserved_gang_still_fits() {
        // The reserved gang needs 6 of each node's 8 GPUs at 20m. A 2-GPU gang that runs
        // forever leaves it room on n-00001; a 3-GPU one would not.
        let setup = |gpus: &str| {
            let mut cache = cache_with_default_queue();
            add_nodes(&mut cache, "n", 2, GPU8);
            Gang::new("old", 2)
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("nvidia.com/gpu", "8")])
                .running_on(&["n-00000"])
                .tasks("", 1, &[("nvidia.com/gpu", "4")])
                .running_on(&["n-00001"])
                .started(0)
                .estimate(20 * MIN)
                .apply(&mut cache);
            let big = Gang::new("big", 2)
                .created(1)
                .tasks("", 2, &[("nvidia.com/gpu", "6")])
                .apply(&mut cache);
            let forever = Gang::new("forever", 1)
                .created(2)
                .tasks("", 1, &[("nvidia.com/gpu", gpus)])
                .apply(&mut cache);
            let result = run_cycle(&cache, Some(EASY));
            (result, big, forever)
        };
        let (result, big, forever) = setup("2");
        assert_eq!(
            binds_by_job(&result).get(&forever).map(Vec::as_slice),
            Some(&["n-00001".to_string()][..])
        );
        let msg = condition_message(&result, &big).unwrap();
        assert!(
            msg.contains("reserved: nodes n-00000,n-00001 from 1970-01-01T00:20:00Z"),
            "{msg}"
        );
        let (result, _, forever) = setup("3");
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let msg = condition_message(&result, &forever).unwrap();
        assert!(msg.contains("would delay gang default/big"), "{msg}");
    }

    #[test]
    fn the_reservation_goes_to_the_first_gang_in_job_order() {
        // Two big gangs wait; the older one holds the reservation, the younger is left to
        // backfill (and cannot fit either).
        let (mut cache, big) = reserved_cluster(true);
        let later = Gang::new("later", 2)
            .created(5)
            .tasks("", 2, &[("nvidia.com/gpu", "8")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(EASY));
        assert!(condition_message(&result, &big)
            .unwrap()
            .contains("reserved: nodes"));
        let msg = condition_message(&result, &later).unwrap();
        assert!(
            msg.contains("Insufficient nvidia.com/gpu") && !msg.contains("; reserved:"),
            "{msg}"
        );
    }

    #[test]
    fn best_effort_pods_are_placed_on_any_fitting_node() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "1"), ("pods", "1")]);
        let job = Gang::new("be", 2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 2, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        let binds = binds_by_job(&result);
        let mut nodes = binds[&job].clone();
        nodes.sort();
        assert_eq!(nodes, ["n-00000", "n-00001"], "one pod slot per node");
    }

    #[test]
    fn pending_gangs_and_gangs_with_requests_are_left_to_others() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        Gang::new("not-admitted", 1)
            .tasks("", 1, &[])
            .apply(&mut cache);
        Gang::new("requests", 1)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
    }

    #[test]
    fn the_gang_rule_holds_for_best_effort_pods() {
        // minMember 3: two BestEffort pods fit, the third member does not; nothing binds.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let job = Gang::new("mixed", 3)
            .tasks("", 2, &[])
            .tasks("big", 1, &[("cpu", "2")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let msg = condition_message(&result, &job).unwrap();
        assert!(msg.contains("Insufficient cpu"), "{msg}");
        // Too few pods: not valid, nothing binds either.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let job = Gang::new("few", 3)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 2, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{job}: {:?}", result.binds);
    }

    #[test]
    fn backfill_never_completes_a_gang_held_by_allocate_with_partial_binds() {
        // allocate holds a gang that is pipelined but not ready (`Statement::keep`): two of
        // its pods Allocated, one Pipelined, none bound. Backfill then places its BestEffort
        // pod: the gang counts 3 ready pods (minMember 3), but a commit would bind only the
        // BestEffort one — one pod of a gang of three.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        add_nodes(&mut cache, "r", 1, &[("cpu", "2")]);
        Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "2")])
            .last_on("r-00000", TaskStatus::Releasing)
            .apply(&mut cache);
        let job = Gang::new("held", 3)
            .phase(PodGroupPhase::Inqueue)
            .tasks("a", 3, &[("cpu", "2")])
            .tasks("z", 1, &[])
            .apply(&mut cache);
        let conf = "actions: backfill\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n";
        let mut ssn = open_session(&cache, Some(conf));
        let s = ssn.state();
        let t = |uid: &str| task_ref(s, uid).unwrap();
        let (a0, a1, a2) = (
            t("default/held-a-0"),
            t("default/held-a-1"),
            t("default/held-a-2"),
        );
        let (n, r) = (
            s.node_by_name("n-00000").unwrap(),
            s.node_by_name("r-00000").unwrap(),
        );
        let id = s.job_by_uid(&job).unwrap();
        {
            let mut stmt = Statement::new(&mut ssn);
            stmt.allocate(a0, n);
            stmt.allocate(a1, n);
            stmt.pipeline(a2, r);
            assert!(!stmt.job_ready(id) && stmt.job_pipelined(id));
            stmt.keep();
        }
        let args = ssn.conf().action_arguments("backfill");
        super::build(&args).unwrap().execute(&mut ssn);
        let result = ssn.close();
        assert!(
            result.binds.is_empty(),
            "partial gang bound: {:?}",
            result.binds
        );
    }

    #[test]
    fn best_effort_pods_never_take_pod_slots_still_held_by_terminating_pods() {
        // The node's only pod slot belongs to a pod being evicted: it is free in the future,
        // not now. Binding there would put 2 pods on a node that allows 1.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("pods", "1")]);
        Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "1")])
            .last_on("n-00000", TaskStatus::Releasing)
            .apply(&mut cache);
        let job = Gang::new("be", 1)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{job}: {:?}", result.binds);
    }
}
