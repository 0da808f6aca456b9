//! preempt: within a queue, a starving gang (not even pipelined) may evict placed tasks of
//! other gangs that the plugins agree are victims (priority: strictly lower priority;
//! gang: never below the victim gang's minMember; conformance: never system-critical). The
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
    for task in stmt.tasks_in(job, TaskStatus::Pending) {
        if stmt.job_pipelined(job) {
            break;
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
/// pipelined.
pub fn evict_or_nothing(
    ssn: &mut Session,
    job: JobId,
    scope: &Scope,
    reason: &str,
    vote: fn(&Session, TaskRef, &[TaskRef]) -> Vec<TaskRef>,
) {
    if !ssn.job_starving(job) {
        return;
    }
    let mut stmt = Statement::new(ssn);
    evict_for_gang(&mut stmt, job, scope, reason, vote);
    if stmt.job_pipelined(job) {
        stmt.commit();
    } else {
        stmt.discard();
    }
}

impl Action for Preempt {
    fn name(&self) -> &'static str {
        "preempt"
    }

    fn execute(&self, ssn: &mut Session) {
        for (_, jobs) in starving_gangs(ssn) {
            for job in jobs {
                let reason = format!(
                    "preempted by gang {} (higher priority, same queue)",
                    ssn.job(job).name
                );
                evict_or_nothing(ssn, job, &Scope::SameQueue, &reason, preemptable);
            }
        }
    }
}
