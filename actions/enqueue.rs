//! enqueue: admits Pending gangs (PodGroup Pending → Inqueue) in queue and job order when
//! the plugins agree they can be admitted (JobEnqueueable). Operators such as the
//! training-operator create their pods only after this happens. Closed queues admit none.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session};
use crate::model::PodGroupPhase;

pub struct Enqueue;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Enqueue))
}

impl Action for Enqueue {
    fn name(&self) -> &'static str {
        "enqueue"
    }

    fn execute(&self, ssn: &mut Session) {
        let mut groups = ssn.jobs_by_queue(|s, id| s.job(id).phase == PodGroupPhase::Pending);
        for (queue, jobs) in groups.iter_mut() {
            if !ssn.queue(queue).is_some_and(|q| q.is_open()) {
                for id in jobs.drain(..) {
                    ssn.record_job_note(id, format!("queue {queue:?} is not open"));
                }
            }
            jobs.reverse(); // pop() takes from the front of job order
        }
        while let Some(queue) =
            ssn.next_queue(groups.iter().filter(|(_, j)| !j.is_empty()).map(|(q, _)| q))
        {
            let Some(id) = groups.get_mut(&queue).and_then(Vec::pop) else {
                break;
            };
            if ssn.job_enqueueable(id) {
                ssn.enqueue_job(id);
            } else {
                ssn.record_job_note(
                    id,
                    format!("not admitted: queue {queue:?} or the cluster cannot hold its minResources yet"),
                );
            }
        }
    }
}
