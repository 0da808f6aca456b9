//! reclaim: a queue below its deserved share takes resources back from other queues that
//! are reclaimable and above theirs (the plugins' reclaimable vote: proportion allows only
//! what keeps the victim's queue at or above its deserved share; gang and conformance as
//! in preempt). The reclaiming gang's statement commits only if it becomes pipelined.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session};
use crate::model::TaskRef;

use super::preempt::{evict_or_nothing, starving_gangs, Scope};

pub struct Reclaim;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Reclaim))
}

fn reclaimable(ssn: &Session, task: TaskRef, candidates: &[TaskRef]) -> Vec<TaskRef> {
    ssn.reclaimable(task, candidates)
}

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
            let reason = format!("reclaimed by queue {queue} (below its deserved share)");
            for job in jobs {
                evict_or_nothing(ssn, job, &Scope::OtherQueues, &reason, reclaimable);
            }
        }
    }
}
