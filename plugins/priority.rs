//! priority: higher PriorityClass value first, for jobs and for tasks; only tasks of strictly
//! lower priority may be preempted.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Plugin, Session};

pub struct Priority;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    Ok(Box::new(Priority))
}

impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        ssn.add_job_order_fn(self.name(), Box::new(|l, r| r.priority.cmp(&l.priority)));
        ssn.add_task_order_fn(self.name(), Box::new(|l, r| r.priority.cmp(&l.priority)));
        let strictly_lower = |s: &crate::framework::ClusterState,
                              preemptor: crate::model::TaskRef,
                              candidates: &[crate::model::TaskRef]| {
            let p = s
                .job(preemptor.job)
                .priority
                .max(s.task(preemptor).priority);
            Some(
                candidates
                    .iter()
                    .copied()
                    .filter(|c| s.task(*c).priority < p && s.job(c.job).priority < p)
                    .collect(),
            )
        };
        ssn.add_preemptable_fn(self.name(), Box::new(strictly_lower));
    }
}
