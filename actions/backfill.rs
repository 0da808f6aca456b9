//! backfill: places BestEffort pods (no requests) of admitted gangs on any node that passes
//! the predicates, as Volcano does. They take no resources, so they delay no one; a gang
//! is still committed only when it is ready.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session, Statement};
use crate::model::{PodGroupPhase, TaskStatus};

use super::allocate::best_node;

pub struct Backfill;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Backfill))
}

impl Action for Backfill {
    fn name(&self) -> &'static str {
        "backfill"
    }

    fn execute(&self, ssn: &mut Session) {
        for id in ssn.job_ids() {
            let job = ssn.job(id);
            if job.phase == PodGroupPhase::Pending
                || job.pending_count() == 0
                || ssn.job_valid(id).is_some()
            {
                continue;
            }
            let tasks: Vec<_> = ssn
                .tasks_in(id, TaskStatus::Pending)
                .into_iter()
                .filter(|t| ssn.task(*t).is_best_effort())
                .collect();
            if tasks.is_empty() {
                continue;
            }
            let mut stmt = Statement::new(ssn);
            for &task in &tasks {
                match stmt.feasible_nodes(task, 16) {
                    Ok(nodes) => {
                        let node = best_node(&stmt, task, &nodes);
                        stmt.allocate(task, node);
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
    }
}
