//! reclaim: a queue below its deserved share takes resources back from other queues that
//! are reclaimable and above theirs (the plugins' reclaimable vote: proportion allows only
//! what keeps the victim's queue at or above its deserved share; gang and conformance as
//! in preempt). The reclaiming gang's statement commits only if it becomes pipelined.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session, Statement};
use crate::model::{PodGroupPhase, TaskRef};

use super::preempt::{evict_for_gang, Scope};

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
        let enqueue_configured = ssn.conf().actions.iter().any(|a| a == "enqueue");
        let groups = ssn.jobs_by_queue(|s, id| {
            let job = s.job(id);
            job.pending_count() > 0
                && !(enqueue_configured && job.phase == PodGroupPhase::Pending)
                && s.job_valid(id).is_none()
                && s.job_starving(id)
        });
        for (queue, jobs) in groups {
            // A queue at or over its share has nothing to reclaim.
            if ssn.queue(&queue).is_none_or(|q| ssn.overused(q)) {
                continue;
            }
            for job in jobs {
                if !ssn.job_starving(job) {
                    continue;
                }
                let mut stmt = Statement::new(ssn);
                let reason = format!("reclaimed by queue {queue} (below its deserved share)");
                evict_for_gang(&mut stmt, job, &Scope::OtherQueues, &reason, reclaimable);
                if stmt.job_pipelined(job) {
                    stmt.commit();
                } else {
                    stmt.discard();
                }
            }
        }
    }
}
