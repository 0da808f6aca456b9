//! reclaim: a queue below its deserved share takes resources back from other queues that
//! are reclaimable and above theirs (the plugins' reclaimable vote: proportion allows only
//! what keeps the victim's queue at or above its deserved share; gang and conformance as
//! in preempt). The reclaiming gang's statement commits only if it becomes pipelined.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session};
use crate::model::{JobId, TaskRef};

use super::preempt::{evict_or_nothing, starving_gangs, Rules, Scope};

pub struct Reclaim;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Reclaim))
}

fn reclaimable(ssn: &Session, task: TaskRef, candidates: &[TaskRef]) -> Vec<TaskRef> {
    ssn.reclaimable(task, candidates)
}

fn reclaimable_together(ssn: &Session, task: TaskRef, set: &[TaskRef]) -> bool {
    ssn.reclaimable_together(task, set)
}

/// "reclaimed for ns/job of queue q-b (queue q-a is above its deserved share)".
pub fn reclaim_reason(ssn: &Session, reclaimer: JobId, victim: TaskRef) -> String {
    let (r, v) = (ssn.job(reclaimer), ssn.job(victim.job));
    format!(
        "reclaimed for {}/{} of queue {} (queue {} is above its deserved share)",
        r.namespace, r.name, r.queue, v.queue
    )
}

pub const RECLAIM: Rules = Rules {
    scope: Scope::OtherQueues,
    victims: reclaimable,
    together: reclaimable_together,
    reason: reclaim_reason,
};

impl Action for Reclaim {
    fn name(&self) -> &'static str {
        "reclaim"
    }

    fn execute(&self, ssn: &mut Session) {
        for (queue, jobs) in starving_gangs(ssn) {
            // A queue at or over its share has nothing to reclaim.
            if ssn.queue(&queue).is_none_or(|q| ssn.overused(q)) {
                continue;
            }
            for job in jobs {
                evict_or_nothing(ssn, job, &RECLAIM);
            }
        }
    }
}
