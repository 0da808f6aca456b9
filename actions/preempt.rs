//! preempt: within a queue, a starving gang (not even pipelined) may evict placed tasks of
//! other gangs that the plugins agree are victims (priority: strictly lower priority;
//! gang: never below the victim gang's minMember — its surplus, or the whole gang at once;
//! conformance: never system-critical). Surplus tasks go first; whole gangs only where
//! surplus cannot make room. The
//! preemptor's tasks are pipelined onto the space being released, and the statement is
//! committed only if the whole gang becomes pipelined — otherwise nothing is evicted.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session, Statement};
use crate::model::{JobId, PodGroupPhase, TaskRef, TaskStatus};

pub struct Preempt;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Preempt))
}

/// Which placed tasks a preemptor may consider: `same_queue` for preempt, other queues for
/// reclaim.
pub enum Scope {
    SameQueue,
    OtherQueues,
}

/// Tries to make room for every pending task of `job` by evicting victims, within `stmt`.
/// Victims come from `candidates_for` filtered by `vote` (the plugins' preemptable or
/// reclaimable vote), lowest priority first, as few as needed on each node.
pub fn evict_for_gang(
    stmt: &mut Statement,
    job: JobId,
    scope: &Scope,
    reason: &str,
    vote: fn(&Session, TaskRef, &[TaskRef]) -> Vec<TaskRef>,
) {
    let queue = stmt.job(job).queue.clone();
    // A task like one that found no room (same template) finds none either.
    let mut no_room: Vec<u64> = Vec::new();
    for task in stmt.tasks_in(job, TaskStatus::Pending) {
        if stmt.job_pipelined(job) {
            break;
        }
        let template = stmt.task(task).template;
        if no_room.contains(&template) {
            continue;
        }
        let request = stmt.task(task).resreq.clone();
        for node in stmt.statically_feasible_nodes(task) {
            if stmt.node(node).fits_future_idle(&request) {
                stmt.pipeline(task, node);
                break;
            }
            let candidates: Vec<TaskRef> = stmt
                .running_tasks_on(node)
                .into_iter()
                .filter(|c| c.job != job)
                .filter(|c| {
                    let same = stmt.job(c.job).queue == queue;
                    matches!(scope, Scope::SameQueue) == same
                })
                .collect();
            if candidates.is_empty() {
                continue;
            }
            let mut victims = vote(stmt, task, &candidates);
            // Lowest priority first, then youngest: the least valuable work goes.
            victims.sort_by(|a, b| {
                let (x, y) = (stmt.task(*a), stmt.task(*b));
                x.priority
                    .cmp(&y.priority)
                    .then(y.created.cmp(&x.created))
                    .then(x.uid.cmp(&y.uid))
            });
            // Only evict if the victims together make room.
            let mut freed = stmt.node(node).clone();
            let mut needed = 0;
            for v in &victims {
                if freed.fits_future_idle(&request) {
                    break;
                }
                freed.releasing.add(&stmt.task(*v).resreq);
                needed += 1;
            }
            if !freed.fits_future_idle(&request) {
                continue;
            }
            for v in victims.into_iter().take(needed) {
                // A victim's gang may have lost its surplus to an earlier eviction in this
                // statement: ask the plugins again, one victim at a time.
                if vote(stmt, task, &[v]).is_empty() {
                    break;
                }
                stmt.evict_for(v, Some(job), reason);
            }
            if stmt.node(node).fits_future_idle(&request) {
                stmt.pipeline(task, node);
                break;
            }
        }
        if stmt.task(task).status == TaskStatus::Pending {
            evict_whole_gangs(stmt, task, scope, reason, vote);
        }
        if stmt.task(task).status == TaskStatus::Pending {
            no_room.push(template);
        }
    }
}

/// When no node can be freed with victims' surplus tasks alone: evicts whole victim gangs
/// (every placed task of each, on whatever node it runs; the gang rule allows a gang to go
/// whole, never to be left below its minimum) on the first node where that makes room,
/// lowest priority first, then the smallest gangs.
fn evict_whole_gangs(
    stmt: &mut Statement,
    task: TaskRef,
    scope: &Scope,
    reason: &str,
    vote: fn(&Session, TaskRef, &[TaskRef]) -> Vec<TaskRef>,
) {
    let job = task.job;
    let queue = stmt.job(job).queue.clone();
    let request = stmt.task(task).resreq.clone();
    let members = |stmt: &Statement, g: JobId| -> Vec<TaskRef> {
        let mut m = stmt.tasks_in(g, TaskStatus::Running);
        m.extend(stmt.tasks_in(g, TaskStatus::Bound));
        m
    };
    // Whether the plugins let each gang go whole (asked once per gang here; asked again
    // before evicting, as evictions in this statement may change the answer).
    let mut whole_allowed: std::collections::HashMap<JobId, bool> = Default::default();
    for node in stmt.statically_feasible_nodes(task) {
        let mut gangs: Vec<JobId> = stmt
            .running_tasks_on(node)
            .into_iter()
            .map(|c| c.job)
            .filter(|g| *g != job)
            .filter(|g| matches!(scope, Scope::SameQueue) == (stmt.job(*g).queue == queue))
            .collect();
        gangs.sort();
        gangs.dedup();
        gangs.sort_by(|a, b| {
            let (x, y) = (stmt.job(*a), stmt.job(*b));
            x.priority
                .cmp(&y.priority)
                .then(x.tasks().len().cmp(&y.tasks().len()))
                .then(x.uid.cmp(&y.uid))
        });
        // Which gangs, in that order, would make room on this node; none if they cannot.
        let name = stmt.node(node).name.clone();
        let mut freed = stmt.node(node).clone();
        let mut chosen: Vec<Vec<TaskRef>> = Vec::new();
        for g in gangs {
            if freed.fits_future_idle(&request) {
                break;
            }
            let whole = members(stmt, g);
            let allowed = *whole_allowed
                .entry(g)
                .or_insert_with(|| vote(stmt, task, &whole).len() == whole.len());
            if !allowed {
                continue;
            }
            for m in &whole {
                if stmt.task(*m).node.as_deref() == Some(&*name) {
                    freed.releasing.add(&stmt.task(*m).resreq);
                }
            }
            chosen.push(whole);
        }
        if !freed.fits_future_idle(&request) {
            continue;
        }
        for whole in chosen {
            // Earlier evictions in this statement may have changed a plugin's answer.
            if vote(stmt, task, &whole).len() != whole.len() {
                continue;
            }
            for m in whole {
                stmt.evict_for(m, Some(job), reason);
            }
        }
        if stmt.node(node).fits_future_idle(&request) {
            stmt.pipeline(task, node);
            return;
        }
    }
}

fn preemptable(ssn: &Session, task: TaskRef, candidates: &[TaskRef]) -> Vec<TaskRef> {
    ssn.preemptable(task, candidates)
}

/// Admitted, valid gangs with pending tasks that are not even pipelined, by queue, each
/// list in job order; the queues in queue order.
pub fn starving_gangs(ssn: &mut Session) -> Vec<(std::sync::Arc<str>, Vec<JobId>)> {
    let enqueue_configured = ssn.conf().actions.iter().any(|a| a == "enqueue");
    let groups = ssn.jobs_by_queue(|s, id| {
        let job = s.job(id);
        job.pending_count() > 0
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
/// pipelined. A gang shaped like one that already failed in this session (same queue,
/// priority, minimum and pending tasks) is not tried again: victims only get scarcer as a
/// session goes on.
pub fn evict_or_nothing(
    ssn: &mut Session,
    job: JobId,
    scope: &Scope,
    reason: &str,
    vote: fn(&Session, TaskRef, &[TaskRef]) -> Vec<TaskRef>,
    failed: &mut FailedShapes,
) {
    if !ssn.job_starving(job) {
        return;
    }
    let shape = FailedShapes::shape(ssn, job);
    if failed.0.contains(&shape) {
        return;
    }
    let mut stmt = Statement::new(ssn);
    evict_for_gang(&mut stmt, job, scope, reason, vote);
    if stmt.job_pipelined(job) {
        stmt.commit();
    } else {
        stmt.discard();
        failed.0.insert(shape);
    }
}

/// Shapes of gangs that could not be given room in this session.
#[derive(Default)]
pub struct FailedShapes(std::collections::HashSet<(std::sync::Arc<str>, i32, u32, Vec<u64>)>);

impl FailedShapes {
    fn shape(ssn: &Session, job: JobId) -> (std::sync::Arc<str>, i32, u32, Vec<u64>) {
        let j = ssn.job(job);
        let mut templates: Vec<u64> = j
            .tasks()
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .map(|t| t.template)
            .collect();
        templates.sort_unstable();
        (j.queue.clone(), j.priority, j.min_member, templates)
    }
}

impl Action for Preempt {
    fn name(&self) -> &'static str {
        "preempt"
    }

    fn execute(&self, ssn: &mut Session) {
        let mut failed = FailedShapes::default();
        for (_, jobs) in starving_gangs(ssn) {
            for job in jobs {
                let reason = format!(
                    "preempted by gang {} (higher priority, same queue)",
                    ssn.job(job).name
                );
                let scope = &Scope::SameQueue;
                evict_or_nothing(ssn, job, scope, &reason, preemptable, &mut failed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::cache::Cache;
    use crate::framework::SessionResult;
    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    const CONF: &str = "actions: \"enqueue, allocate, preempt\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
";

    /// `nodes` nodes of 4 cpu.
    fn cluster(nodes: usize) -> Cache {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", nodes, &[("cpu", "4"), ("memory", "16Gi")]);
        cache
    }

    /// A running gang of `pods` one-cpu pods, `per_node` on each node from `first`.
    fn running(
        cache: &mut Cache,
        name: &str,
        min: u32,
        pods: usize,
        priority: i32,
        nodes: &[&str],
    ) {
        Gang::new(name, min)
            .priority(priority)
            .phase(PodGroupPhase::Running)
            .tasks("", pods, &[("cpu", "1")])
            .running_on(nodes)
            .apply(cache);
    }

    fn evicted_by_job(r: &SessionResult) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in &r.evictions {
            *m.entry(e.job.to_string()).or_default() += 1;
        }
        m
    }

    const N0: &str = "n-00000";
    const N1: &str = "n-00001";

    #[test]
    fn a_victim_gang_without_surplus_is_evicted_whole_when_that_is_the_only_way() {
        let mut cache = cluster(1);
        running(&mut cache, "low", 4, 4, 1, &[N0, N0, N0, N0]);
        let high = Gang::new("high", 4)
            .priority(100)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert_eq!(
            evicted_by_job(&r).get("default/low"),
            Some(&4),
            "the whole gang goes"
        );
        assert!(r
            .evictions
            .iter()
            .all(|e| e.preemptor.as_deref() == Some(high.as_str())));
    }

    #[test]
    fn surplus_goes_first_and_is_enough_when_it_makes_room() {
        let mut cache = cluster(1);
        // min 2 of 4: two spare tasks; the preemptor needs two cpus.
        running(&mut cache, "low", 2, 4, 1, &[N0, N0, N0, N0]);
        Gang::new("high", 2)
            .priority(100)
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert_eq!(
            evicted_by_job(&r).get("default/low"),
            Some(&2),
            "{:?}",
            r.evictions
        );
    }

    #[test]
    fn whole_gangs_spread_over_nodes_go_together_and_the_least_valuable_first() {
        let mut cache = cluster(2);
        // Two low gangs of min 4, each spread over both nodes; the lower-priority one goes.
        running(&mut cache, "lowest", 4, 4, 1, &[N0, N0, N1, N1]);
        running(&mut cache, "low", 4, 4, 5, &[N0, N0, N1, N1]);
        Gang::new("high", 4)
            .priority(100)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        let evicted = evicted_by_job(&r);
        assert_eq!(evicted.get("default/lowest"), Some(&4), "{evicted:?}");
        assert_eq!(evicted.get("default/low"), None, "{evicted:?}");
    }

    #[test]
    fn nothing_is_evicted_when_even_whole_gangs_cannot_make_room() {
        let mut cache = cluster(1);
        running(&mut cache, "low", 2, 2, 1, &[N0, N0]);
        running(&mut cache, "peer", 2, 2, 100, &[N0, N0]);
        Gang::new("high", 4)
            .priority(100)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert!(r.evictions.is_empty(), "{:?}", r.evictions);
    }

    #[test]
    fn a_gang_of_equal_priority_is_never_a_victim() {
        let mut cache = cluster(1);
        running(&mut cache, "peer", 4, 4, 100, &[N0, N0, N0, N0]);
        Gang::new("high", 4)
            .priority(100)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert!(r.evictions.is_empty(), "{:?}", r.evictions);
    }
}
